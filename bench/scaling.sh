#!/usr/bin/env bash
# Scaling: images/s of 1 instance and of 2 instances under poprun, in one run (the goal, that
# instances scale with cores: 2 instances on 2 cores deliver >= 1.8x the images/s of 1 instance).
#   bench/scaling.sh DATA [BUILD_DIR]
# Each run is
#   poprun --instances N --cores-per-instance 1 -- train --data DATA
#          --core synthetic:us-per-sample=US --workers 1 --max-steps STEPS --json FILE
# so every instance has one core of its own, one decode worker on it and a training core whose
# cost is tiny (US microseconds per sample; its 3 parameters make the all-reduce trivial): the
# figure is the data pipeline's, through the trainer's IO tiles. Each instance takes its shard
# of the epoch (MPI rank and size); instances step in lockstep, so an instance's rate is its
# images over its steady-state time, and the job's rate -- the instances' rates summed -- is
# what train reports: all instances' images over the slowest instance's time (the pipeline's
# fill before the first step excluded). N = 1, 2 alternate ROUNDS times; the best of each is
# compared, which keeps the least disturbed run of each on a shared machine.
# Environment: STEPS (default 120 steps of 32 images per instance), US (default 10),
# ROUNDS (default 2), SCALING_ARGS (more train options, e.g. "--image-size 160").
# DATA is an ImageFolder (or a folder with train/, which is then used; a val/ beside it is
# not evaluated). The first files are read once first so that the page cache is warm.
# Exit status: 0 when the ratio meets the goal, 1 when it does not or a run failed, 2 usage.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bench/scaling.sh DATA [BUILD_DIR]}
BUILD=${2:-build/release}
STEPS=${STEPS:-120}
US=${US:-10}
ROUNDS=${ROUNDS:-2}
readonly GOAL=1.8
train=$BUILD/tools/train
poprun=$BUILD/tools/poprun
for exe in "$train" "$poprun"; do
  [ -x "$exe" ] || { echo "scaling: $exe missing: cmake --preset release && cmake --build --preset release" >&2; exit 2; }
done
[ -d "$DATA" ] || { echo "scaling: no folder $DATA" >&2; exit 2; }
if [ -d "$DATA/train" ]; then DATA=$DATA/train; fi
out=$(mktemp -d -t tilefeed-scaling.XXXXXX)
child=""
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; wait "$child" 2>/dev/null || true; fi
  rm -rf "$out"
}
trap cleanup EXIT
trap 'echo; echo "scaling: interrupted" >&2; exit 130' INT TERM

# Warm the page cache with what the runs read: each instance reads at most STEPS * 32 files
# of its shard; the whole folder when it is small enough.
find "$DATA" -type f -print0 | head -z -n $((2 * STEPS * 32 + 64 * 32)) | xargs -0 cat >/dev/null || true

# Runs N instances; writes "images seconds images_per_s" from train's reports to $out/result.
run() {
  local n=$1 json=$out/run.json rc=0
  rm -f "$json"
  # shellcheck disable=SC2086  # SCALING_ARGS is a list of options
  "$poprun" --instances "$n" --cores-per-instance 1 -- "$train" --data "$DATA" \
    --core "synthetic:us-per-sample=$US" --workers 1 --max-steps "$STEPS" --epochs 1000 --batch-size 32 \
    --json "$json" ${SCALING_ARGS:-} >"$out/run.log" 2>&1 &
  child=$!
  wait "$child" || rc=$?
  child=""
  if [ "$rc" -ne 0 ] || [ ! -s "$json" ]; then
    cat "$out/run.log" >&2
    echo "scaling: $n instance(s) failed (status $rc)" >&2
    exit 1
  fi
  awk '{ match($0, /"images":[0-9]+/); i += substr($0, RSTART + 9, RLENGTH - 9)
         match($0, /"seconds":[0-9.eE+-]+/); s += substr($0, RSTART + 10, RLENGTH - 10) }
       END { printf "%d %.3f %.1f\n", i, s, (s > 0 ? i / s : 0) }' "$json" >"$out/result"
}

echo "scaling: $DATA, $STEPS steps of 32 images per instance, synthetic core at $US us/sample, 1 core + 1 worker per instance"
echo "  load before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
best1=0
best2=0
for round in $(seq 1 "$ROUNDS"); do
  for n in 1 2; do
    run "$n"
    read -r images seconds rate <"$out/result"
    printf "  round %d  %d instance(s)  %6d images in %6.2f s  %8.1f images/s\n" "$round" "$n" "$images" "$seconds" "$rate"
    if [ "$n" -eq 1 ]; then
      best1=$(awk -v a="$best1" -v b="$rate" 'BEGIN { print (b > a ? b : a) }')
    else
      best2=$(awk -v a="$best2" -v b="$rate" 'BEGIN { print (b > a ? b : a) }')
    fi
  done
done
echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v one="$best1" -v two="$best2" -v goal="$GOAL" 'BEGIN {
  ratio = one > 0 ? two / one : 0
  printf "scaling: best 1 instance %.1f images/s, best 2 instances %.1f images/s: %.2fx (goal >= %.1fx: %s)\n",
         one, two, ratio, goal, (ratio >= goal ? "met" : "NOT met")
  exit ratio >= goal ? 0 : 1 }'
