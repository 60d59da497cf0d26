#!/usr/bin/env bash
# tilefeed's two entry points, for a fresh Debian 12 machine (root) or a developer's one.
#
#   ./run.sh demo    install what is missing (apt), build (Release), make the demo
#                    dataset, pack it into random-access shards (--codec jpeg-index) and run
#                    the main job on them: two training instances under poprun
#                    (OpenMPI), fed by tilefeed's loader, and report its metrics
#   ./run.sh test    install what is missing, build, and run the whole test suite: the
#                    lint checks below, ctest (Release, -Werror under CI), the suite again in
#                    one clang tree under AddressSanitizer+UBSan with a 10-second smoke run of
#                    every fuzz target from the same tree, and the tests labelled tsan under
#                    ThreadSanitizer; after each ctest run it fails, naming them, if processes
#                    started from that build tree still run (tests/support/leftover_processes.sh)
#   ./run.sh test --quick
#                    the unit tier only (ctest label unit: fast, in-process), Release, no lint
#   ./run.sh lint    clang-format --dry-run --Werror on every C++ file, and clang-tidy
#                    (.clang-tidy, warnings are errors) on every .cc file; a file whose
#                    preprocessed text, compile command, .clang-tidy and clang-tidy version
#                    all match an earlier clean run is not checked again
#   ./run.sh stress N [ARGS]
#                    tests/stress.sh N ARGS: the suite N times beside a CPU hog, and every
#                    test that failed even once (tests/stress.sh says which ARGS)
#
# Environment: JOBS (default: nproc), BUILD_ROOT (default: ./build), CI (set by CI:
# warnings become errors), TILEFEED_SKIP_APT=1 (never call apt-get), TILEFEED_LINT_CACHE
# (default: ~/.cache/tilefeed-lint; the clean-file records of ./run.sh lint). For tests of the
# demo itself (tests/tools/readme_test.py): TILEFEED_DEMO_BUILD=DIR runs it on an existing
# Release build (no apt, no build), TILEFEED_DEMO_SIZE="--classes 2 ..." sizes its dataset.
set -euo pipefail
cd "$(dirname "$0")"
JOBS=${JOBS:-$(nproc)}
BUILD_ROOT=${BUILD_ROOT:-build}
# Ninja hands the compiler absolute paths, and ccache hashes them (and, for -g builds, the
# working directory): without these two, a clone in another folder (CI's) never hits the
# cache that an earlier clone filled. Debug info then names the folder that filled it.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1

# Debian packages the build, tests, tools and Python binding need.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache
  libjpeg62-turbo-dev libturbojpeg0-dev libspng-dev liblz4-dev libxxhash-dev libtbb-dev
  libzmq3-dev cppzmq-dev libopenmpi-dev openmpi-bin procps iproute2
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev clang clang-format clang-tidy libclang-rt-14-dev libcurl4-openssl-dev nginx-light
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-torch
  python3-torchvision python3-pil
  python3-matplotlib chromium curl
  python3-zmq python3-xxhash libjpeg-turbo-progs
  python3-setuptools python3-pip python3-wheel
  libssl-dev python3-botocore prometheus python3-jsonschema valgrind zlib1g-dev
  python3-psutil
)

log() { printf '\n== %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${TILEFEED_SKIP_APT:-0}" = 1 ]; then
    echo "missing Debian packages: ${missing[*]} (TILEFEED_SKIP_APT=1, not installing)" >&2
    exit 1
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Runs ctest (the caller passes --test-dir TREE first) and keeps its summary for the closing
# line; then fails, naming them, if processes started from TREE outlived their tests.
PASSED=0
FAILED=0
run_ctest() {
  local log
  log=$(mktemp)
  local rc=0
  ctest "$@" 2>&1 | tee "$log" || rc=$?
  tests/support/leftover_processes.sh "$2" || rc=1
  local line
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1 || true)
  rm -f "$log"
  if [[ $line =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    FAILED=$((FAILED + BASH_REMATCH[1]))
    PASSED=$((PASSED + BASH_REMATCH[2] - BASH_REMATCH[1]))
  fi
  return $rc
}

# configure DIR [cmake args...]
configure() {
  local dir=$1
  shift
  local werror=OFF
  [ -n "${CI:-}" ] && werror=ON
  # ccache (in the package list) makes a second run, or a second tree, recompile only what
  # changed; a fresh clone with an empty cache pays about 5 % for it.
  cmake -S . -B "$dir" -G Ninja -DTILEFEED_WERROR="$werror" \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache "$@" >/dev/null
}

demo() {
  local build=${TILEFEED_DEMO_BUILD:-$BUILD_ROOT/release}
  if [ -z "${TILEFEED_DEMO_BUILD:-}" ]; then
    install_packages
    log "building (Release) in $build"
    configure "$build" -DCMAKE_BUILD_TYPE=Release -DTILEFEED_BUILD_TESTS=OFF
    cmake --build "$build" -j "$JOBS"
  fi
  local data=$BUILD_ROOT/demo-data
  if [ ! -d "$data/train" ]; then
    log "making the demo dataset in $data"
    # shellcheck disable=SC2086
    "$build/tools/tilefeed-make-demo" "$data" ${TILEFEED_DEMO_SIZE:-}
  fi
  local shards=$BUILD_ROOT/demo-shards
  if [ ! -f "$shards/val/tilefeed-manifest.txt" ]; then
    log "packing it with tilefeed-pack --codec jpeg-index into $shards (train/ and val/)"
    for split in train val; do
      "$build/tools/tilefeed-pack" "$data" "$shards/$split" --split "$split" \
        --codec jpeg-index --force
    done
  fi
  log "main job: poprun --instances 2 ./train on the packed demo dataset (reference model, 3 epochs)"
  rm -f "$BUILD_ROOT"/demo-metrics.*.jsonl
  "$build/tools/poprun" --instances 2 -- "$build/tools/train" --data "$shards" \
    --core reference --epochs 3 --json "$BUILD_ROOT/demo-train.jsonl" \
    --metrics "file=$BUILD_ROOT/demo-metrics.{instance}.jsonl,interval=0.25"
  log "the run's metrics: $BUILD_ROOT/demo-report.html (open it in a browser), and as text:"
  tools/tilefeed-report "$BUILD_ROOT"/demo-metrics.*.jsonl \
    -o "$BUILD_ROOT/demo-report.html" --text
}

# Fails when a ctest entry of tree $1 has no label (add_test entries are refused at
# configure time already; this catches GoogleTest entries, which exist only once built).
check_labels() {
  local all labelled
  all=$(ctest --test-dir "$1" -N | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
  labelled=$(ctest --test-dir "$1" -N -L . | sed -n 's/^ *Test *#[0-9]*: //p' | sort)
  local missing
  missing=$(comm -23 <(echo "$all") <(echo "$labelled"))
  if [ -n "$missing" ]; then
    echo "ctest entries without LABELS (tests/CMakeLists.txt, tilefeed_gtest):" >&2
    echo "$missing" >&2
    return 1
  fi
}

# release_tree: configures and builds the Release tree ($BUILD_ROOT/ci), -Werror under CI.
release_tree() {
  log "build (Release) in $BUILD_ROOT/ci"
  configure "$BUILD_ROOT/ci" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD_ROOT/ci" -j "$JOBS"
  check_labels "$BUILD_ROOT/ci"
}

# One clang tree under ASan+UBSan for the suite and the fuzz targets (libFuzzer needs clang,
# and a second sanitizer tree of the same libraries would double the build). Line tables
# only (-g1): a report still names every frame's file and line, and each compile is faster.
asan_tree() {
  log "build (clang, AddressSanitizer + UBSan, fuzz targets) in $BUILD_ROOT/asan"
  configure "$BUILD_ROOT/asan" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DTILEFEED_SANITIZE=address,undefined \
    -DTILEFEED_BUILD_FUZZERS=ON -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_PYTHON=OFF
  cmake --build "$BUILD_ROOT/asan" -j "$JOBS"
}

tsan_tree() {
  log "build (ThreadSanitizer: the test binaries with tests labelled tsan) in $BUILD_ROOT/tsan"
  configure "$BUILD_ROOT/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" -DTILEFEED_SANITIZE=thread \
    -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_TOOLS=OFF -DTILEFEED_BUILD_PYTHON=OFF
  cmake --build "$BUILD_ROOT/tsan" -j "$JOBS" --target tilefeed_tsan_tests
}

test_suite() {
  install_packages
  # The sanitizer runtimes' options for every ctest run of a sanitizer tree (tests/stress.sh
  # sources the same file). Only here: `./run.sh demo` (which readme_commands runs with
  # leak checks off for MPI's own allocations) must not inherit them.
  # shellcheck source=tests/sanitizer_env.sh
  . tests/sanitizer_env.sh
  local start=$SECONDS
  if [ "${1:-}" = --quick ]; then
    release_tree
    log "ctest: the unit tier (label unit), Release"
    run_ctest --test-dir "$BUILD_ROOT/ci" -j "$JOBS" -L '^unit$' --timeout 600 --output-on-failure
    log "quick tests passed in $((SECONDS - start)) s"
    echo "tests: $PASSED passed, $FAILED failed"
    return
  fi
  [ -z "${1:-}" ] || { echo "usage: $0 test [--quick]" >&2; exit 2; }
  lint_format
  local stage=$SECONDS
  release_tree
  # clang-tidy runs beside the Release tests, which mostly wait on the processes they
  # start (about 120 CPU-seconds in 8 minutes on this machine); its verdict comes after.
  log "clang-tidy in the background ($BUILD_ROOT/lint.log) while ctest runs"
  lint_tidy >"$BUILD_ROOT/lint.log" 2>&1 &
  local tidy=$!
  log "ctest (Release): every test"
  local rc=0
  run_ctest --test-dir "$BUILD_ROOT/ci" -j "$JOBS" --timeout 1500 --output-on-failure || rc=$?
  if ! wait "$tidy"; then
    cat "$BUILD_ROOT/lint.log" >&2
    log "clang-tidy failed (above)"
    exit 1
  fi
  [ $rc -eq 0 ] || exit $rc
  log "Release stage and clang-tidy: $((SECONDS - stage)) s"

  stage=$SECONDS
  asan_tree
  log "ctest under AddressSanitizer + UBSan: every test but the install test"
  run_ctest --test-dir "$BUILD_ROOT/asan" -j "$JOBS" --timeout 1500 --output-on-failure \
    -E '^install_consumer$'
  log "fuzz smoke run: every libFuzzer target for 10 s, from the same tree"
  tests/fuzz/run_fuzzers.sh 10 "$BUILD_ROOT/asan"
  log "ASan stage: $((SECONDS - stage)) s"

  stage=$SECONDS
  tsan_tree
  log "ctest under ThreadSanitizer: the tests labelled tsan"
  run_ctest --test-dir "$BUILD_ROOT/tsan" -j "$JOBS" --timeout 1500 --output-on-failure \
    -L '^tsan$'
  log "TSan stage: $((SECONDS - stage)) s"
  log "all test stages passed in $((SECONDS - start)) s"
  echo "tests: $PASSED passed, $FAILED failed"
}

# tidy_clean FILE: clang-tidy on FILE unless an earlier run found it clean with the same
# inputs: its preprocessed text (every header it includes, comments kept for NOLINT), its
# compile command, .clang-tidy and the clang-tidy version. Only clean results are kept.
tidy_clean() {
  local file=$1 build=$BUILD_ROOT/lint
  local cache=${TILEFEED_LINT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tilefeed-lint}
  local command key
  command=$(python3 -c 'import json, os, sys
for e in json.load(open(sys.argv[1])):
    if os.path.realpath(e["file"]) == os.path.realpath(sys.argv[2]): print(e["command"])' \
    "$build/compile_commands.json" "$file")
  local -a extra=()
  if [ -z "$command" ]; then
    # Not a target of this tree: the install test's consumer programs (a project of their own,
    # built against the installed headers) and the CUDA test (a CUDA tree only). They get the
    # public and private include paths and CUDA's headers where the toolkit is installed.
    local cuda_include=/usr/local/cuda/include
    if grep -q 'cuda' <<<"$file" && [ ! -f "$cuda_include/cuda_runtime.h" ]; then
      echo "lint: $file skipped: no CUDA toolkit headers in $cuda_include"
      return 0
    fi
    extra=(-std=c++20 -I"$PWD/include" -I"$PWD" -isystem "$cuda_include")
    command="clang++ ${extra[*]} -c $PWD/$file"
  fi
  # The preprocessed text: the compile command with -E -C instead of -o OUT and -c.
  key=$( {
    clang-tidy --version
    cat .clang-tidy
    echo "$command"
    (cd "$build" && eval "$(sed -E 's/ -o [^ ]+//; s/ -c / -E -C /' <<<"$command")")
  } | sha256sum | cut -d' ' -f1)
  [ -f "$cache/$key" ] && return 0
  if [ ${#extra[@]} -eq 0 ]; then
    clang-tidy -p "$build" --quiet --warnings-as-errors='*' "$file" || return 1
  else
    clang-tidy --quiet --warnings-as-errors='*' "$file" -- "${extra[@]}" || return 1
  fi
  mkdir -p "$cache" && touch "$cache/$key"
}

lint_format() {
  log "clang-format --dry-run --Werror on every C++ file"
  git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
}

lint_tidy() {
  log "clang-tidy (.clang-tidy, warnings as errors) on every C++ file, $JOBS at a time"
  local build=$BUILD_ROOT/lint
  # Configured, never built: clang's compile commands for every target, the fuzz harnesses
  # included (they exist only in a clang tree with TILEFEED_BUILD_FUZZERS).
  configure "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_C_COMPILER=clang -DTILEFEED_BUILD_FUZZERS=ON -DTILEFEED_BUILD_CUDA=OFF
  export -f tidy_clean
  export BUILD_ROOT
  # Every tracked .cc (CUDA's .cu files are nvcc's; clang-tidy does not read them).
  # shellcheck disable=SC2016  # $0 is bash -c's first argument, the file
  git ls-files '*.cc' | xargs -P "$JOBS" -n 1 bash -c 'tidy_clean "$0"'
}

lint() {
  install_packages
  local start=$SECONDS
  lint_format
  lint_tidy
  log "lint passed in $((SECONDS - start)) s"
}

case "${1:-}" in
  demo) demo ;;
  test) test_suite "${2:-}" ;;
  lint) lint ;;
  stress)
    shift
    exec tests/stress.sh "$@"
    ;;
  *)
    echo "usage: $0 demo | test [--quick] | lint | stress N [ARGS]" >&2
    exit 2
    ;;
esac
