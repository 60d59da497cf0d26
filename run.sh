#!/usr/bin/env bash
# tilefeed's two entry points, for a fresh Debian 12 machine (root) or a developer's one.
#
#   ./run.sh demo    install what is missing (apt), build (Release), make the demo
#                    dataset, pack it into random-access shards (--jpeg-index) and run
#                    the main job on them: two training instances under poprun
#                    (OpenMPI), fed by tilefeed's loader, and report its metrics
#   ./run.sh test    install what is missing, build, and run the whole test suite: the
#                    lint checks below, ctest (Release, -Werror under CI), the suite again under
#                    AddressSanitizer+UBSan, the concurrency tests under ThreadSanitizer,
#                    and a 10-second smoke run of every fuzz target
#   ./run.sh lint    clang-format --dry-run --Werror on every C++ file, and clang-tidy
#                    (.clang-tidy, warnings are errors) on the library folders
#
# Environment: JOBS (default: nproc), BUILD_ROOT (default: ./build), CI (set by CI:
# warnings become errors), TILEFEED_SKIP_APT=1 (never call apt-get). For tests of the
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
  libjpeg62-turbo-dev libturbojpeg0-dev libspng-dev liblz4-dev libzstd-dev libxxhash-dev libtbb-dev
  libzmq3-dev cppzmq-dev libopenmpi-dev openmpi-bin procps iproute2
  libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev clang clang-format clang-tidy libclang-rt-14-dev libcurl4-openssl-dev nginx-light
  python3 python3-dev pybind11-dev python3-numpy python3-pytest python3-torch
  python3-torchvision python3-pil
  prometheus-cpp-dev python3-matplotlib chromium curl
  python3-zmq python3-xxhash libjpeg-turbo-progs
  python3-setuptools python3-pip python3-wheel
  libssl-dev python3-botocore prometheus python3-jsonschema valgrind zlib1g-dev
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

# Runs ctest and keeps its summary for the closing line.
PASSED=0
FAILED=0
run_ctest() {
  local log
  log=$(mktemp)
  local rc=0
  ctest "$@" 2>&1 | tee "$log" || rc=$?
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
    log "packing it with tilefeed-pack --jpeg-index into $shards (train/ and val/)"
    for split in train val; do
      "$build/tools/tilefeed-pack" "$data" "$shards/$split" --split "$split" --jpeg-index --force
    done
  fi
  log "main job: poprun --instances 2 ./train on the packed demo dataset (reference model, 3 epochs)"
  rm -f "$BUILD_ROOT"/demo-metrics.*.jsonl
  "$build/tools/poprun" --instances 2 -- "$build/tools/train" --data "$shards" \
    --core reference --epochs 3 --json "$BUILD_ROOT/demo-train.jsonl" \
    --metrics "$BUILD_ROOT/demo-metrics.{instance}.jsonl" --metrics-interval 0.25
  log "the run's metrics: $BUILD_ROOT/demo-report.html (open it in a browser), and as text:"
  tools/tilefeed-report "$BUILD_ROOT"/demo-metrics.*.jsonl \
    -o "$BUILD_ROOT/demo-report.html" --text
}

test_suite() {
  install_packages
  local start=$SECONDS
  # The sanitizer trees keep line tables only (-g1): a report still names every frame's
  # file and line, and each compile is about 17 % faster than with full debug info.
  local sanitizer_debug_info="-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
  lint
  log "build + ctest (Release)"
  configure "$BUILD_ROOT/ci" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD_ROOT/ci" -j "$JOBS"
  run_ctest --test-dir "$BUILD_ROOT/ci" -j "$JOBS" --timeout 600 --output-on-failure

  log "build + ctest under AddressSanitizer + UndefinedBehaviorSanitizer"
  configure "$BUILD_ROOT/asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$sanitizer_debug_info" \
    -DTILEFEED_SANITIZE=address,undefined -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_PYTHON=OFF
  cmake --build "$BUILD_ROOT/asan" -j "$JOBS"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0" \
    run_ctest --test-dir "$BUILD_ROOT/asan" -j "$JOBS" --timeout 900 --output-on-failure \
    -E 'install_consumer|python'

  log "ring, pipeline, stream and IO-tile tests under ThreadSanitizer"
  configure "$BUILD_ROOT/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$sanitizer_debug_info" \
    -DTILEFEED_SANITIZE=thread \
    -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_TOOLS=OFF -DTILEFEED_BUILD_PYTHON=OFF
  cmake --build "$BUILD_ROOT/tsan" -j "$JOBS" \
    --target tilefeed_loader_test tilefeed_transport_test tilefeed_trainer_test
  TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    run_ctest --test-dir "$BUILD_ROOT/tsan" -j "$JOBS" --timeout 900 --output-on-failure \
    -R '^(SpscRing|Loader|LoaderResume|ZmqBatchStream|SharedMemoryRing|BatchSender|IoTiles|Tiles/IoTilesTest|Zmq/RoundTrip|Slices/StreamPosition)[./]'
  log "fuzz smoke run: every libFuzzer target for 10 s (clang, ASan+UBSan)"
  tests/fuzz/run_fuzzers.sh 10 "$BUILD_ROOT/fuzz"
  log "all test stages passed in $((SECONDS - start)) s"
  echo "tests: $PASSED passed, $FAILED failed"
}

lint() {
  install_packages
  local start=$SECONDS
  log "clang-format --dry-run --Werror on every C++ file"
  git ls-files '*.cc' '*.h' | xargs clang-format --dry-run --Werror
  log "clang-tidy (.clang-tidy, warnings as errors) on the library folders, $JOBS at a time"
  local build=$BUILD_ROOT/lint
  configure "$build" -DCMAKE_BUILD_TYPE=Release -DTILEFEED_BUILD_TESTS=OFF \
    -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_PYTHON=OFF  # writes compile_commands.json
  git ls-files 'tilefeed/**.cc' |
    xargs -P "$JOBS" -n 1 clang-tidy -p "$build" --quiet --warnings-as-errors='*'
  log "lint passed in $((SECONDS - start)) s"
}

case "${1:-}" in
  demo) demo ;;
  test) test_suite ;;
  lint) lint ;;
  *)
    echo "usage: $0 demo | test | lint" >&2
    exit 2
    ;;
esac
