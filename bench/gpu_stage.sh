#!/usr/bin/env bash
# gpu_stage.sh DEST JPEG_FOLDER [BUILD]
# Stages into DEST what bench/gpu_bench.sh needs on a GPU machine that has PyTorch, nvcc, g++
# and pybind11 but none of Debian's libraries and no network: this checkout's sources, the
# static tilefeed libraries of BUILD (default build/rel, configured with CUDA), the shared
# libraries they and tilefeed-pack load (copied from this Debian 12 machine), GoogleTest's
# static libraries and headers, pybind11's headers (a fallback), CUDA's static runtime,
# tilefeed-pack (all in DEST/tools.tgz), and the JPEG ImageFolder (e.g. `../shared/corpus/make_corpus.sh DIR 320
# --val 0`). Keep DEST under ~60 MiB: the device tool carries 64 MiB in all.
set -euo pipefail
DEST=${1:?usage: gpu_stage.sh DEST JPEG_FOLDER [BUILD]}
JPEGS=${2:?usage: gpu_stage.sh DEST JPEG_FOLDER [BUILD]}
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${3:-$SRC/build/rel}
cmake --build "$BUILD" -j2 --target tilefeed_loader tilefeed_codecs tilefeed_launch \
  tilefeed_cuda_feed tilefeed_cuda tilefeed-pack
rm -rf "$DEST"
mkdir -p "$DEST"/{src,lib,deps,bin,include}
(cd "$SRC" && git ls-files --cached --others --exclude-standard -z | tar --null -T - -cf -) |
  tar -C "$DEST/src" -xf -
cp "$BUILD"/{loader,codecs,launch,cuda}/*.a "$DEST/lib/"
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$DEST/lib/"
cp /usr/local/cuda/lib64/libcudart_static.a "$DEST/lib/"
cp -r /usr/include/gtest /usr/include/pybind11 "$DEST/include/"
cp "$BUILD/tools/tilefeed-pack" "$DEST/bin/"
# Every shared library tilefeed-pack loads (a superset of the Python module's), except the
# C and C++ runtimes, which the GPU machine has in newer versions.
ldd "$BUILD/tools/tilefeed-pack" | awk '/=> \//{print $3}' |
  grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt|libresolv)\.so' |
  while read -r lib; do cp -L "$lib" "$DEST/deps/"; done
# Everything but the JPEGs travels as one gzip'd tar (about half the bytes).
tar -C "$DEST" -czf "$DEST/tools.tgz" src lib deps bin include
rm -rf "$DEST"/{src,lib,deps,bin,include}
cp -r "$JPEGS" "$DEST/jpegs"
cp "$SRC/bench/gpu_bench.sh" "$DEST/"
du -sh "$DEST"
