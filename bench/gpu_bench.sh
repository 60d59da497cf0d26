#!/usr/bin/env bash
# gpu_bench.sh STAGED OUT [PYTHON]
# On a GPU machine: builds tilefeed's Python module with its CUDA component from a folder
# made by bench/gpu_stage.sh, packs the staged JPEGs with --codec jpeg-index, runs the C++ GPU
# tests (tests/cuda) and bench/gpu_bench.py. Every step logs into OUT/log.txt and a failed
# step does not stop the later ones. The device tool's command, from the repo root:
#   bench/gpu_bench.sh .devrun "$OUT" /opt/torch/.venv/bin/python3
set -x
D=$(realpath "${1:?usage: gpu_bench.sh STAGED OUT [PYTHON]}")
OUT=$(realpath "${2:?usage: gpu_bench.sh STAGED OUT [PYTHON]}")
PY=${3:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
B=${TILEFEED_GPU_BUILD:-/tmp/tilefeed-gpu}
mkdir -p "$B/py/tilefeed" "$B/deps" "$B/staged"
JPEGS=$D/jpegs
tar -C "$B/staged" -xzf "$D/tools.tgz" && D=$B/staged
S=$D/src
nproc; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
g++ --version | head -1
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version | tail -2
CUDA_ROOT=$(dirname "$(dirname "$(realpath "$NVCC")")")
CUDA_INC=(-I"$CUDA_ROOT/include" -I"$CUDA_ROOT/targets/x86_64-linux/include")
"$PY" -c "import sys, torch, torchvision; print(sys.version); print(torch.__version__, torchvision.__version__, torch.cuda.get_device_name())"

# Shared libraries this machine lacks: from the staged copies, found through the module's
# RPATH (not LD_LIBRARY_PATH, so nothing else in the process sees Debian's copies).
for f in "$D"/deps/*; do
  so=$(basename "$f")
  ldconfig -p | grep -q "[[:space:]]$so " || cp "$f" "$B/deps/"
done
ls "$B/deps"
LINK_DEPS=()
for so in libjpeg.so.62 libturbojpeg.so.0 liblz4.so.1 libspng.so.0 libz.so.1 \
          libtbb.so.12 libxxhash.so.0 libcurl.so.4 libcrypto.so.3; do
  LINK_DEPS+=("$D/deps/$so")
done
RPATH="-Wl,--disable-new-dtags,-rpath,$B/deps"

# 1. Shards with --codec jpeg-index, packed here from the staged JPEGs (beside the compiles).
LD_LIBRARY_PATH=$B/deps "$D/bin/tilefeed-pack" --codec jpeg-index --force \
  "$JPEGS" "$B/shards" > "$B/pack.log" 2>&1 &
PACK=$!

# 2. The CUDA component, built here (the staged one, built on Debian, is the fallback).
"$NVCC" -std=c++20 -O3 -gencode arch=compute_90,code=sm_90 -Xcompiler -fPIC -I"$S/include" \
  -c "$S/cuda/device.cu" -o "$B/device.o" && CUDA_OBJ=$B/device.o ||
  CUDA_OBJ=$D/lib/libtilefeed_cuda.a
TILEFEED_LIBS=(-L"$D/lib" -ltilefeed_launch -ltilefeed_cuda_feed -ltilefeed_loader
               -ltilefeed_codecs "${LINK_DEPS[@]}" "$D/lib/libcudart_static.a" -ldl -lrt -lpthread)

# 3. The Python module for this machine's python, with its pybind11 (staged headers second),
#    and the C++ GPU tests (skipped, with the reason, where no GPU is usable); compiled in
#    parallel.
VERSION=$(sed -n 's/^project(tilefeed VERSION \([0-9.]*\).*/\1/p' "$S/CMakeLists.txt")
EXT=$("$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
PYINC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
PBINC=$("$PY" -c 'import pybind11; print(pybind11.get_include())')
[ -n "$PBINC" ] || PBINC=$D/include
compile() {  # compile SOURCE OBJECT PYBIND11_INCLUDE
  g++ -std=c++20 -O2 -fPIC -fvisibility=hidden -DTILEFEED_HAVE_CUDA=1 \
    -DTILEFEED_VERSION="\"$VERSION\"" -I"$S/include" -I"$S" -I"$PYINC" \
    -I"$3" -c "$1" -o "$2" || { [ "$3" != "$D/include" ] && compile "$1" "$2" "$D/include"; }
}
compile "$S/python/tilefeed_module.cc" "$B/module.o" "$PBINC" &
COMPILES=($!)
compile "$S/python/cuda_binding.cc" "$B/binding.o" "$PBINC" &
COMPILES+=($!)
g++ -std=c++20 -O2 -I"$S/include" -I"$S" -I"$D/include" "${CUDA_INC[@]}" \
  -c "$S/tests/cuda/device_test.cc" \
  -o "$B/device_test.o" &
COMPILES+=($!)
wait "${COMPILES[@]}"
g++ -shared "$B/module.o" "$B/binding.o" "$CUDA_OBJ" "${TILEFEED_LIBS[@]}" $RPATH \
  -o "$B/py/tilefeed/_tilefeed$EXT"
cp "$S"/python/tilefeed/*.py "$B/py/tilefeed/"
export PYTHONPATH=$B/py
g++ "$B/device_test.o" "$CUDA_OBJ" "$D/lib/libgtest_main.a" "$D/lib/libgtest.a" \
  "${TILEFEED_LIBS[@]}" $RPATH -o "$B/device_test" && "$B/device_test" 2>&1 | tail -25
wait $PACK
tail -4 "$B/pack.log"

# 4. The measurements.
PYTHONUNBUFFERED=1 "$PY" "$S/bench/gpu_bench.py" --shards "$B/shards" --jpegs "$JPEGS" \
  --out "$OUT" ${GPU_BENCH_ARGS:-}
