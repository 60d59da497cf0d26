#!/usr/bin/env bash
# compare.sh: tilefeed's loader beside the PyTorch DataLoader and the bare full-decode
# reference, on the same corpus and the same cores, round-robin, in one run.
# See --help. Each ratio is between figures measured in the same run.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${SCRIPT_DIR}/.." && pwd)"
readonly SCRIPT_DIR REPO
SHARED="${REPO}/../shared/baselines"
readonly PYTHON=/usr/bin/python3
readonly TORCH_GOAL=2.5   # tilefeed / PyTorch DataLoader
readonly DECODE_GOAL=1.1  # tilefeed / bare full decode on the same cores
readonly AGREE_PCT=15     # ours vs the shared baselines: beyond this they disagree
readonly IDX_DECODE_GOAL=1.5  # loader on indexed shards / bare full decode on the same cores
readonly IDX_TORCH_GOAL=3.5   # loader on indexed shards / PyTorch DataLoader

usage() {
  cat <<EOF
usage: bench/compare.sh DIR [options]

Runs, on corpus DIR (a corpus root holding train/, or an ImageFolder split folder), on the
same W cores, round-robin --reps times:
  tilefeed      BUILD/bench/loader_bench --data DIR --workers W --batch-size B --mode train --image-size 224 --json
  torch         bench/torch_baseline.py DIR --workers W --batch B
                (torchvision ImageFolder + RandomResizedCrop(224) + flip + PILToTensor, uint8)
  full-decode   BUILD/bench/codec_bench --data DIR --only full --threads W --files N
                (one libjpeg-turbo tjDecompress2 to RGB per file, from memory, no resize)
and prints a markdown table (median, min, max images/s) and the ratios
tilefeed/torch (goal >= ${TORCH_GOAL}) and tilefeed/full-decode (goal >= ${DECODE_GOAL}): the
median of the per-round ratios (judged; the tools of a round run next to each other), their
range, and the ratio of the medians.
The files are read once (untimed) first so the page cache is warm.

options:
  --workers W              loader workers / DataLoader workers / decode threads (default 2)
  --reps R                 round-robin repetitions (default 3)
  --batch B                batch size (default 256)
  --build DIR              tilefeed build folder (default: build at the repo root)
  --out FILE.jsonl         append one JSON line per run and one summary line
  --indexed-shards DIR     also run, in the same round-robin, the loader on shards packed
                           with tilefeed-pack --codec jpeg-index (random-access JPEG):
                             tilefeed-indexed  loader_bench --data DIR (same options)
                             crop-ordinary     codec_bench --only rrc --threads W
                             crop-indexed      codec_bench --only indexed --threads W
                           (ordinary and interval-skipping RandomResizedCrop decode of the
                           same files; codec_bench transcodes them first, untimed), and
                           print tilefeed-indexed / full-decode (goal >= ${IDX_DECODE_GOAL}) and
                           tilefeed-indexed / torch (goal >= ${IDX_TORCH_GOAL}). If DIR holds no
                           pack yet, the corpus is packed into it first (untimed) and kept.
  --with-indexed           the same, packing into a temporary folder removed at exit
  --interval-width PX      restart-interval width for the pack and codec_bench (default 32)
  --crop-files N           codec_bench crop modes: use the first N files (default: all)
  --with-shared-baselines  also run ../shared/baselines/torch_loader.py --mode train and
                           decode_limit --mode full (built with make -C ../shared/baselines)
                           and check that our figures agree with them within ${AGREE_PCT}%.
                           Only where ../shared/baselines exists next to the repo.
  -h, --help               this help

When W is less than the cores this shell may use, every tool is pinned (taskset) to the
first W of them; otherwise all run on all of them.
Build tilefeed first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
EOF
}

die() {
  echo "compare.sh: error: $*" >&2
  exit 2
}

# need_count OPTION VALUE: VALUE must be an integer >= 1.
need_count() {
  [[ "$2" =~ ^[0-9]+$ ]] && (($2 >= 1)) && return 0
  die "$1 must be an integer >= 1 (got '$2')"
}

# ---------------------------------------------------------------- arguments
DIR=""
WORKERS=2
REPS=3
BATCH=256
BUILD="${REPO}/build"
OUT=""
WITH_SHARED=0
INDEXED_DIR=""
WITH_INDEXED=0
INTERVAL_WIDTH=32
CROP_FILES=0
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --workers | --reps | --batch | --build | --out | --indexed-shards | --interval-width | --crop-files)
      (($# >= 2)) || die "$1 needs a value (see --help)"
      case "$1" in
        --indexed-shards) INDEXED_DIR="$2" ;;
        --interval-width) INTERVAL_WIDTH="$2" ;;
        --crop-files) CROP_FILES="$2" ;;
        --workers) WORKERS="$2" ;;
        --reps) REPS="$2" ;;
        --batch) BATCH="$2" ;;
        --build) BUILD="$2" ;;
        --out) OUT="$2" ;;
      esac
      shift 2 ;;
    --with-shared-baselines) WITH_SHARED=1; shift ;;
    --with-indexed) WITH_INDEXED=1; shift ;;
    -*) die "unknown option $1 (see --help)" ;;
    *)
      [[ -z "$DIR" ]] || die "one corpus DIR only (got '$DIR' and '$1')"
      DIR="$1"; shift ;;
  esac
done
[[ -n "$DIR" ]] || { usage >&2; die "no corpus DIR given"; }
need_count --workers "$WORKERS"
need_count --reps "$REPS"
need_count --batch "$BATCH"
need_count --interval-width "$INTERVAL_WIDTH"
[[ "$CROP_FILES" == 0 ]] || need_count --crop-files "$CROP_FILES"
[[ -z "$INDEXED_DIR" || "$WITH_INDEXED" == 0 ]] || die "--indexed-shards and --with-indexed exclude each other"
INDEXED=0
[[ -n "$INDEXED_DIR" || "$WITH_INDEXED" == 1 ]] && INDEXED=1

[[ -e "$DIR" ]] || die "corpus path not found: $DIR"
[[ -d "$DIR" ]] || die "corpus path is not a folder: $DIR"
DIR="$(cd "$DIR" && pwd)"
SPLIT="$DIR"
[[ -d "$DIR/train" ]] && SPLIT="$DIR/train"
NFILES="$(find -L "$SPLIT" -type f \( -iname '*.jpeg' -o -iname '*.jpg' \) | wc -l)"
((NFILES > 0)) || die "no .JPEG/.jpg files under $SPLIT"
((NFILES >= BATCH)) || die "$SPLIT holds $NFILES images, fewer than one batch of $BATCH"

[[ -d "$BUILD" ]] || die "build folder not found: $BUILD
  build tilefeed first: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
  (or pass --build DIR)"
BUILD="$(cd "$BUILD" && pwd)"
LOADER_BENCH="$BUILD/bench/loader_bench"
CODEC_BENCH="$BUILD/bench/codec_bench"
for exe in "$LOADER_BENCH" "$CODEC_BENCH"; do
  [[ -x "$exe" ]] || die "$exe not found (or not executable)
  build it: cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
  (or cmake --build $BUILD -j2 --target loader_bench codec_bench)"
done
PACK="$BUILD/tools/tilefeed-pack"
if ((INDEXED)); then
  [[ -x "$PACK" ]] || die "$PACK not found: cmake --build $BUILD -j2 --target tilefeed-pack"
  "$CODEC_BENCH" --help | grep -q -- 'indexed' ||
    die "$CODEC_BENCH predates --only indexed: rebuild it (cmake --build $BUILD -j2 --target codec_bench)"
fi
"$CODEC_BENCH" --help | grep -q -- '--only' ||
  die "$CODEC_BENCH predates --only/--threads: rebuild it (cmake --build $BUILD -j2 --target codec_bench)"
[[ -x "$PYTHON" ]] || die "$PYTHON not found: install Debian's python3"
"$PYTHON" -c 'import torch, torchvision, PIL' 2>/dev/null ||
  die "$PYTHON cannot import torch/torchvision/PIL: apt-get install python3-torch python3-torchvision python3-pil"

if ((WITH_SHARED)); then
  [[ -d "$SHARED" ]] || die "--with-shared-baselines: $SHARED does not exist (only the project's
  own checkout has ../shared/baselines next to the repo; run without the flag)"
  SHARED="$(cd "$SHARED" && pwd)"
  make -s -C "$SHARED" >/dev/null || die "could not build decode_limit: make -C $SHARED failed"
  DECODE_LIMIT="$SHARED/build/decode_limit"
  [[ -x "$DECODE_LIMIT" ]] || die "make -C $SHARED did not produce $DECODE_LIMIT"
  [[ -f "$SHARED/torch_loader.py" ]] || die "$SHARED/torch_loader.py not found"
fi

if [[ -n "$OUT" ]]; then
  mkdir -p "$(dirname "$OUT")"
  : >>"$OUT" || die "cannot write $OUT"
fi

# ---------------------------------------------------------------- cores
# The first W cores this shell may use; all of them when W is not less than that.
expand_cpus() {  # "0-2,5" -> one core number per line
  local part parts
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ "$part" == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
mapfile -t ALLOWED < <(expand_cpus "$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)")
PIN=()
CORES_NOTE="all ${#ALLOWED[@]} cores (${ALLOWED[*]})"
if ((WORKERS < ${#ALLOWED[@]})) && command -v taskset >/dev/null; then
  CPUS="$(IFS=,; echo "${ALLOWED[*]:0:WORKERS}")"
  PIN=(taskset -c "$CPUS")
  CORES_NOTE="pinned to cores $CPUS"
elif ((WORKERS > ${#ALLOWED[@]})); then
  CORES_NOTE="$CORES_NOTE; note: --workers $WORKERS is more than the cores"
fi

# ---------------------------------------------------------------- indexed shards
INDEXED_TMP=""
if ((WITH_INDEXED)); then
  INDEXED_TMP="$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-indexed.XXXXXX")"
  trap 'rm -rf "$INDEXED_TMP"' EXIT
  INDEXED_DIR="$INDEXED_TMP/shards"
fi
if ((INDEXED)); then
  if [[ -f "$INDEXED_DIR/tilefeed-manifest.txt" ]]; then
    echo "  indexed shards: $INDEXED_DIR (existing pack, used as it is)"
  else
    echo "  packing $SPLIT into $INDEXED_DIR with tilefeed-pack --codec jpeg-index --interval-width $INTERVAL_WIDTH (untimed)..."
    pack_log="$(mktemp "${TMPDIR:-/tmp}/tilefeed-pack.XXXXXX")"
    "$PACK" --codec jpeg-index --interval-width "$INTERVAL_WIDTH" "$SPLIT" "$INDEXED_DIR" >"$pack_log" 2>&1 </dev/null || {
      tail -n 20 "$pack_log" >&2
      rm -f "$pack_log"
      die "tilefeed-pack --codec jpeg-index failed"
    }
    grep -E '^(packed|jpeg index|[0-9]+ stored|  [0-9]+ stored)' "$pack_log" | sed 's/^/    /'
    rm -f "$pack_log"
  fi
  INDEXED_DIR="$(cd "$INDEXED_DIR" && pwd)"
  IDX_BYTES="$(du -sb "$INDEXED_DIR" | cut -f1)"
  SRC_BYTES="$(du -sbL "$SPLIT" | cut -f1)"
  awk -v i="$IDX_BYTES" -v s="$SRC_BYTES" 'BEGIN {
    printf "  indexed shards: %.1f MB for %.1f MB of source files (%+.2f%%)\n", i / 1e6, s / 1e6, 100 * (i - s) / s }'
fi
CROP_N="$NFILES"
((CROP_FILES > 0 && CROP_FILES < NFILES)) && CROP_N="$CROP_FILES"

# ---------------------------------------------------------------- the tools
NAMES=(tilefeed torch full-decode)
LABELS=(
  "tilefeed loader_bench (train, 224, uint8)"
  "PyTorch DataLoader (bench/torch_baseline.py)"
  "full decode, libjpeg-turbo (codec_bench --only full)"
)
COMMANDS=(
  "$(printf '%q ' "$LOADER_BENCH" --data "$DIR" --workers "$WORKERS" --batch-size "$BATCH" --mode train --image-size 224 --json)"
  "$(printf '%q ' "$PYTHON" "$SCRIPT_DIR/torch_baseline.py" "$DIR" --workers "$WORKERS" --batch "$BATCH" --json)"
  "$(printf '%q ' "$CODEC_BENCH" --data "$DIR" --only full --threads "$WORKERS" --files "$NFILES" --json)"
)
if ((INDEXED)); then
  NAMES+=(tilefeed-indexed crop-ordinary crop-indexed)
  LABELS+=(
    "tilefeed loader_bench on --codec jpeg-index shards (train, 224, uint8)"
    "ordinary crop decode (codec_bench --only rrc, ${CROP_N} files)"
    "interval-skipping crop decode (codec_bench --only indexed, ${CROP_N} files)"
  )
  COMMANDS+=(
    "$(printf '%q ' "$LOADER_BENCH" --data "$INDEXED_DIR" --workers "$WORKERS" --batch-size "$BATCH" --mode train --image-size 224 --json)"
    "$(printf '%q ' "$CODEC_BENCH" --data "$DIR" --only rrc --threads "$WORKERS" --files "$CROP_N" --json)"
    "$(printf '%q ' "$CODEC_BENCH" --data "$DIR" --only indexed --threads "$WORKERS" --files "$CROP_N" --interval-width "$INTERVAL_WIDTH" --json)"
  )
fi
if ((WITH_SHARED)); then
  NAMES+=(shared-torch shared-decode)
  LABELS+=(
    "shared: torch_loader.py --mode train"
    "shared: decode_limit --mode full"
  )
  COMMANDS+=(
    "$(printf '%q ' "$PYTHON" "$SHARED/torch_loader.py" "$DIR" --mode train --workers "$WORKERS" --batch "$BATCH")"
    "$(printf '%q ' "$DECODE_LIMIT" --mode full --threads "$WORKERS" "$DIR")"
  )
fi
readonly NTOOLS=${#NAMES[@]}

json_str() {
  local s="${1//\\/\\\\}"
  s="${s//\"/\\\"}"
  printf '"%s"' "$s"
}

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/tilefeed-compare.XXXXXX")"
trap 'rm -rf "$LOGS" ${INDEXED_TMP:+"$INDEXED_TMP"}' EXIT
RUN_ID="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
load_avg() { cut -d' ' -f1-3 /proc/loadavg; }

echo "compare.sh: corpus $SPLIT ($NFILES files), workers $WORKERS, batch $BATCH, reps $REPS, $CORES_NOTE"
LOAD_START="$(load_avg)"
echo "  build $BUILD; load average at start: $LOAD_START"
# busy LOAD: true when the 1-minute load average exceeds the cores this shell may use.
busy() { awk -v l="${1%% *}" -v n="$(nproc --all)" 'BEGIN { exit !(l > 0.5 * n) }'; }
if busy "$LOAD_START"; then
  echo "  warning: the machine is busy (load ${LOAD_START%% *} on $(nproc --all) cores): other work shares the cores, figures will be low and noisy"
fi

# ---------------------------------------------------------------- page cache
echo "  warming the page cache (reading every file once, untimed)..."
find -L "$SPLIT" -type f -print0 | xargs -0 cat >/dev/null
((INDEXED)) && cat "$INDEXED_DIR"/* >/dev/null

# ---------------------------------------------------------------- round-robin runs
# RATES[t*REPS + r] is tool t's images/s in round r.
declare -a RATES
for ((r = 0; r < REPS; r++)); do
  for ((t = 0; t < NTOOLS; t++)); do
    log="$LOGS/${NAMES[t]}.$r.log"
    printf '  round %d/%d: %-13s ' "$((r + 1))" "$REPS" "${NAMES[t]}"
    if ! eval "${PIN[*]:+$(printf '%q ' "${PIN[@]}")}${COMMANDS[t]}" >"$log" 2>&1 </dev/null; then
      echo "FAILED"
      echo "compare.sh: error: ${NAMES[t]} failed: ${COMMANDS[t]}" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    ips="$(grep -o '^images_per_s=[0-9.]*' "$log" | tail -n 1 | cut -d= -f2 || true)"
    if [[ -z "$ips" ]]; then
      echo "FAILED"
      echo "compare.sh: error: ${NAMES[t]} printed no images_per_s= line: ${COMMANDS[t]}" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    RATES[t * REPS + r]="$ips"
    echo "$ips images/s"
    if [[ -n "$OUT" ]]; then
      detail="$(grep -E '^\{.*\}$' "$log" | tail -n 1 || true)"
      printf '{"bench":"compare","run":%s,"tool":%s,"rep":%d,"workers":%d,"batch":%d,"images_per_s":%s,"command":%s%s}\n' \
        "$(json_str "$RUN_ID")" "$(json_str "${NAMES[t]}")" "$r" "$WORKERS" "$BATCH" "$ips" \
        "$(json_str "${PIN[*]:+${PIN[*]} }${COMMANDS[t]% }")" "${detail:+,\"detail\":$detail}" >>"$OUT"
    fi
  done
done

# ---------------------------------------------------------------- summary
# stats t -> "median min max" of tool t's rates.
stats() {
  local t=$1
  printf '%s\n' "${RATES[@]:t * REPS:REPS}" | sort -g |
    awk '{v[NR] = $1} END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.1f %.1f %.1f\n", m, v[1], v[NR]
    }'
}
calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
declare -a MED
echo
echo "| configuration | median images/s | min | max |"
echo "|---|---:|---:|---:|"
for ((t = 0; t < NTOOLS; t++)); do
  read -r med lo hi <<<"$(stats "$t")"
  MED[t]="$med"
  printf '| %s | %s | %s | %s |\n' "${LABELS[t]}" "$med" "$lo" "$hi"
done
echo
echo "corpus $SPLIT, $NFILES files, $WORKERS workers/threads, batch $BATCH, median of $REPS round-robin runs, $CORES_NOTE"

# ratio a b goal -> one line: the median of the per-round ratios (the tools of one round
# ran next to each other, so their ratio is the paired figure, and the one judged), their
# range, the ratio of the medians (whose two medians may come from different rounds), and
# the goal.
ratio_line() {
  local a=$1 b=$2 goal=$3 label=$4 r rm lo hi verdict
  rm="$(calc "${MED[a]} / ${MED[b]}")"
  read -r r lo hi <<<"$(for ((k = 0; k < REPS; k++)); do
    calc "${RATES[a * REPS + k]} / ${RATES[b * REPS + k]}"; echo; done |
    sort -g | awk '{v[NR] = $1} END {
      m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
      printf "%.2f %s %s\n", m, v[1], v[NR]
    }')"
  verdict="$(awk -v r="$r" -v g="$goal" 'BEGIN { print (r >= g) ? "meets" : "BELOW" }')"
  echo "- $label: **${r}x** (per round ${lo}-${hi}x; ratio of the medians ${rm}x; goal >= ${goal}: $verdict)"
  RATIO_JSON+=",\"$5\":$r,\"$5_of_medians\":$rm"
}
RATIO_JSON=""
echo
echo "Ratios (median of the per-round ratios):"
ratio_line 0 1 "$TORCH_GOAL" "tilefeed / PyTorch DataLoader" tilefeed_over_torch
ratio_line 0 2 "$DECODE_GOAL" "tilefeed / full decode on the same cores" tilefeed_over_full_decode
if ((INDEXED)); then
  ratio_line 3 2 "$IDX_DECODE_GOAL" "tilefeed on indexed shards / full decode on the same cores" indexed_over_full_decode
  ratio_line 3 1 "$IDX_TORCH_GOAL" "tilefeed on indexed shards / PyTorch DataLoader" indexed_over_torch
  ratio_line 3 0 1 "tilefeed on indexed shards / tilefeed on the folder (no goal; >= 1 expected)" indexed_over_folder
  ratio_line 5 4 1 "interval-skipping / ordinary crop decode (no goal; >= 1 expected)" crop_indexed_over_ordinary
fi

AGREE_JSON=""
if ((WITH_SHARED)); then
  echo
  echo "Our baselines vs the shared ones (must agree within ${AGREE_PCT}%):"
  agree_line() {
    local ours=$1 theirs=$2 label=$3 pct verdict
    pct="$(calc "100 * (${MED[ours]} - ${MED[theirs]}) / ${MED[theirs]}")"
    verdict="$(awk -v p="$pct" -v l="$AGREE_PCT" 'BEGIN { a = p < 0 ? -p : p; print (a <= l) ? "agree" : "DIFFER" }')"
    if [[ "$verdict" == agree ]]; then
      echo "- $label: ${MED[ours]} vs ${MED[theirs]} images/s (${pct}%): agree within ${AGREE_PCT}%"
    else
      echo "- $label: ${MED[ours]} vs ${MED[theirs]} images/s (${pct}%): DIFFER by more than ${AGREE_PCT}% -- check the method before quoting the ratios"
    fi
    AGREE_JSON+=",\"$4\":$pct"
  }
  s0=$((INDEXED ? 6 : 3))  # the shared tools come after the indexed ones
  agree_line 1 "$s0" "torch_baseline.py vs shared torch_loader.py" torch_vs_shared_pct
  agree_line 2 "$((s0 + 1))" "codec_bench --only full vs shared decode_limit --mode full" full_decode_vs_shared_pct
fi
echo
LOAD_END="$(load_avg)"
echo "load average at start: $LOAD_START, at end: $LOAD_END (the end includes this run's own load)"
if busy "$LOAD_START"; then
  echo "warning: the machine was busy when this run started: other work shared the cores, so the absolute figures are low and noisy; the ratios (round-robin) are steadier but noisy too"
fi

if [[ -n "$OUT" ]]; then
  medians=""
  for ((t = 0; t < NTOOLS; t++)); do medians+="${medians:+,}$(json_str "${NAMES[t]}"):${MED[t]}"; done
  printf '{"bench":"compare","run":%s,"summary":true,"data":%s,"files":%d,"workers":%d,"batch":%d,"reps":%d,"cores":%s,"median_images_per_s":{%s}%s%s}\n' \
    "$(json_str "$RUN_ID")" "$(json_str "$SPLIT")" "$NFILES" "$WORKERS" "$BATCH" "$REPS" \
    "$(json_str "$CORES_NOTE")" "$medians" "$RATIO_JSON" "$AGREE_JSON" >>"$OUT"
  echo "JSON lines appended to $OUT"
fi
