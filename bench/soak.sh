#!/usr/bin/env bash
# Soak: runs the loader, then 2-instance training, on DATA and samples the RSS and open file
# descriptors of every process each second; says per process whether both stayed flat after
# warm-up (RSS within 5 %, fds within the files a decode worker may hold open), with the
# throughput over time.
#   bench/soak.sh MINUTES [DATA] [BUILD_DIR]
# MINUTES may be fractional (0.5). DATA defaults to the demo dataset (made if missing);
# BUILD_DIR to build/release. The two halves run one after the other, MINUTES/2 each: run side
# by side on a 2-core machine they would halve each other's throughput and blur a drift of one
# into the other.
#   1. the loader alone: loader_bench --seconds MINUTES*30 (throughput every 10 s);
#   2. training: poprun --instances 2 -- train --data DATA --core CORE --seconds MINUTES*30
#      (each instance bound to its share of the cores, its loader's workers on them); both
#      instances are sampled, found among mpirun's descendants; the throughput is the
#      per-epoch report (all instances) plus the partial last epoch's rate so far.
# Environment: SOAK_CORE: train's --core (default synthetic:us-per-sample=200: a light
# synthetic core, so that an epoch of a 10,000-image folder takes well under a minute and the
# per-epoch rates make a time series; or reference); SOAK_TRAIN_ARGS: more train options.
# A DATA with train/ and val/ trains on train/ and validates on val/ after every epoch.
# SOAK_KEEP=1 keeps the per-second samples ("t rss_kib fds" per process) and the logs.
# Exit status: 0 when every process ran to the end and stayed flat; 1 when one died or failed,
# or RSS or fds grew; 2 for a usage error; 130 when interrupted (children are stopped).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:?usage: bench/soak.sh MINUTES [DATA] [BUILD_DIR]}
BUILD=${3:-build/release}
DATA=${2:-$BUILD/../demo-data}
CORE=${SOAK_CORE:-synthetic:us-per-sample=200}
bench=$BUILD/bench/loader_bench
train=$BUILD/tools/train
poprun=$BUILD/tools/poprun
for exe in "$bench" "$train" "$poprun"; do
  [ -x "$exe" ] || { echo "soak: $exe missing: cmake --preset release && cmake --build --preset release" >&2; exit 2; }
done
half=$(awk -v m="$MINUTES" 'BEGIN { if (m !~ /^[0-9]*\.?[0-9]+$/) print -1; else print int(m * 30 + 0.5) }')
if [ "$half" -lt 20 ]; then
  echo "soak: MINUTES must be a number of at least 0.67 (each half runs MINUTES/2, at least 20 s)" >&2
  exit 2
fi
if [ ! -d "$DATA" ]; then "$BUILD/tools/tilefeed-make-demo" "$DATA" >/dev/null; fi
cores=$(nproc)
out=$(mktemp -d -t tilefeed-soak.XXXXXX)

# Everything started here is stopped on any exit: the loader_bench or mpirun (which passes
# SIGTERM on to its processes), then any training process left behind.
running=()
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  local p
  for p in "${running[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  if [ -s "$out/train.pids" ]; then
    while read -r p _; do kill -TERM "$p" 2>/dev/null || true; done <"$out/train.pids"
  fi
  wait 2>/dev/null || true
  if [ -n "${SOAK_KEEP:-}" ]; then echo "soak: samples and logs kept in $out" >&2; else rm -rf "$out"; fi
}
trap cleanup EXIT
trap 'echo; echo "soak: interrupted" >&2; exit 130' INT TERM

# Appends "t rss_kib fds" for process $1 to $2 (t: seconds since $3); nothing once it is gone.
sample() {
  local rss fds
  rss=$(awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || true)
  fds=$(ls "/proc/$1/fd" 2>/dev/null | wc -l)
  if [ -n "$rss" ]; then echo "$((SECONDS - $3)) $rss $fds" >>"$2"; fi
}

# The processes named $2 below process $1.
descendants() {
  ps -e -o pid=,ppid=,comm= | awk -v root="$1" -v name="$2" '
    { parent[$1] = $2; comm[$1] = $3 }
    END {
      for (p in parent) {
        q = p
        while (q != root && q in parent && q > 1) q = parent[q]
        if (q == root && p != root && comm[p] == name) print p
      }
    }'
}

# Says whether the samples in $1 stayed flat after warm-up: the first fifth of the $2-second
# half (at least 10 s) from the process's first sample, while slots fill and caches warm. A decode worker has at most one
# image file open at a time, so the fd count may move by up to the worker count ($3)
# without a leak. Prints two lines indented by $4; returns 1 unless both stayed flat.
flat() {
  # The last two samples are dropped: a process that has reached its time limit is tearing
  # down (its RSS and fds fall), which is not what the soak watches.
  local last
  last=$(awk 'END { print $1 }' "$1")
  awk -v total="$2" -v workers="$3" -v indent="$4" -v last="$last" '
    NR == 1 { t0 = $1 }
    { t = $1 - t0; if (t < (total / 5 > 10 ? total / 5 : 10) || $1 > last - 2) next
      if (n++ == 0) { rmin = rmax = $2; fmin = fmax = $3 }
      if ($2 < rmin) rmin = $2; if ($2 > rmax) rmax = $2
      if ($3 < fmin) fmin = $3; if ($3 > fmax) fmax = $3 }
    END {
      if (n == 0) { printf "%sno samples after warm-up\n", indent; exit 1 }
      rflat = (rmax - rmin) <= 0.05 * rmax; fflat = (fmax - fmin) <= workers
      printf "%sRSS after warm-up: %.1f .. %.1f MiB (%s)\n", indent, rmin / 1024, rmax / 1024, (rflat ? "flat" : "NOT flat")
      printf "%sopen fds after warm-up: %d .. %d (%s; up to %d files in flight)\n", indent, fmin, fmax, (fflat ? "flat" : "NOT flat"), workers
      exit (rflat && fflat) ? 0 : 1 }' "$1"
}

status=0
echo "soak: $MINUTES min on $DATA: the loader for ${half} s, then 2-instance training (core $CORE) for ${half} s"

# --- 1. The loader alone.
start=$SECONDS
"$bench" --data "$DATA" --seconds "$half" --interval 10 --batch-size 64 --warmup 2 \
  >"$out/bench.log" 2>"$out/bench.err" &
bench_pid=$!
running=("$bench_pid")
while kill -0 "$bench_pid" 2>/dev/null; do
  sample "$bench_pid" "$out/loader.samples" "$start"
  sleep 1
done
bench_rc=0
wait "$bench_pid" || bench_rc=$?
running=()
echo "loader: loader_bench for ${half} s"
if [ "$bench_rc" -ne 0 ]; then
  cat "$out/bench.err" >&2
  echo "  FAILED: loader_bench exited with status $bench_rc" >&2
  status=1
else
  grep '^interval' "$out/bench.log" | awk '{split($2,t,"="); split($3,r,"="); printf "  t=%5.0fs  %8.1f images/s\n", t[2], r[2]}'
  flat "$out/loader.samples" "$half" "$cores" "  " || status=1
fi

# --- 2. Two training instances under poprun.
start=$SECONDS
# shellcheck disable=SC2086  # SOAK_TRAIN_ARGS is a list of options
"$poprun" --instances 2 -- "$train" --data "$DATA" --core "$CORE" --seconds "$half" \
  --epochs 1000000 --json "$out/train.json" ${SOAK_TRAIN_ARGS:-} \
  >"$out/train.log" 2>"$out/train.err" &
mpirun_pid=$!
running=("$mpirun_pid")
: >"$out/train.pids"
died=""
while kill -0 "$mpirun_pid" 2>/dev/null; do
  for p in $(descendants "$mpirun_pid" train); do
    if ! grep -q "^$p " "$out/train.pids"; then
      # The instance index, as mpirun told it (the process may already be gone: "?").
      rank=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p' || true)
      echo "$p ${rank:-?}" >>"$out/train.pids"
    fi
  done
  while read -r p _; do
    if [ -d "/proc/$p" ]; then
      sample "$p" "$out/train.$p.samples" "$start"
    elif [ -z "$died" ] && kill -0 "$mpirun_pid" 2>/dev/null; then
      died="$p after $((SECONDS - start)) s"
    fi
  done <"$out/train.pids"
  sleep 1
done
train_rc=0
wait "$mpirun_pid" || train_rc=$?
running=()
echo "training: poprun --instances 2 -- train --core $CORE --seconds $half"
instances=$(wc -l <"$out/train.pids")
if [ "$train_rc" -ne 0 ] || ! grep -q '^\[train\] done:' "$out/train.log"; then
  cat "$out/train.log" "$out/train.err" >&2
  echo "  FAILED: mpirun exited with status $train_rc${died:+ (training process $died ended first)}" >&2
  status=1
elif [ "$instances" -ne 2 ]; then
  echo "  FAILED: found $instances training processes under mpirun, expected 2" >&2
  status=1
fi
if [ -s "$out/train.json" ]; then
  # One line per full epoch: when it ended (since training began) and its rate, all instances.
  awk '{ match($0, /"epoch":[0-9]+/); e = substr($0, RSTART + 8, RLENGTH - 8)
         match($0, /"seconds":[0-9.eE+-]+/); s = substr($0, RSTART + 10, RLENGTH - 10)
         match($0, /"images_per_second":[0-9.eE+-]+/); r = substr($0, RSTART + 20, RLENGTH - 20)
         match($0, /"stall_percent":[0-9.eE+-]+/); st = substr($0, RSTART + 16, RLENGTH - 16)
         t += s; printf "  epoch %3d  t=%5.0fs  %8.1f images/s  stall %5.1f %%\n", e, t, r, st }' \
    "$out/train.json"
fi
sed -n 's/^\[train\] time limit: /  /p' "$out/train.log"
# Each instance's decode workers (its share of the cores) may each hold a file open; with
# DATA/train and DATA/val, the validation loader made after every epoch brings as many
# workers again, so the fd count legitimately swings by both.
fd_slack=$(((cores + 1) / 2))
if [ -d "$DATA/train" ] && [ -d "$DATA/val" ]; then fd_slack=$((2 * fd_slack)); fi
sort -k2 "$out/train.pids" | while read -r p rank; do
  echo "  instance $rank (pid $p):"
  if [ -s "$out/train.$p.samples" ]; then
    flat "$out/train.$p.samples" "$half" "$fd_slack" "    " || echo fail >>"$out/failed"
  else
    echo "    no samples"
    echo fail >>"$out/failed"
  fi
done
if [ -e "$out/failed" ]; then status=1; fi

if [ "$status" -eq 0 ]; then
  echo "soak: every process ran to the end; RSS and fds stayed flat"
else
  echo "soak: FAILED (a process died or failed, or RSS or fds grew; see above)"
fi
exit "$status"
