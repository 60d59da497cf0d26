#!/usr/bin/python3
"""python_bench: tilefeed.Loader from Python against the C++ loader_bench, in one run.

Both run the same loader on the same corpus with the same options and the same consumer:
one epoch (--epochs 1), the first --warmup batches untimed, and a consumer that reads one
byte per page of each batch and sums the labels (loader_bench's Touch). Python reads the
batch through the numpy view (or, with --consumer torch, the DLPack tensor). The two are
run back to back, --rounds times; the figure is the median of the rounds' Python/C++
ratios, which cancels most of the load drift of a shared machine. If bench/torch_baseline.py is next to this script, the
PyTorch DataLoader is measured too (--torch-baseline off skips it).

    bench/python_bench.py /tmp/corpus --workers 2 --build build-rel

--build is a build tree with both bench/loader_bench and the Python module (python/),
ideally Release: cmake --build BUILD --target loader_bench _tilefeed.
The last line is machine-readable: ratio=... python_images_per_s=... cxx_images_per_s=...
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(message):
    print(f"python_bench: error: {message}", file=sys.stderr)
    sys.exit(2)


def parse_args():
    doc = __doc__.split("\n")
    ap = argparse.ArgumentParser(prog="python_bench.py", description=doc[0].split(": ", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(doc[2:]))
    ap.add_argument("data", help="dataset, as train --data takes it: a root with train/ (and "
                    "val/), an ImageFolder, or shards of any codec")
    ap.add_argument("--build", default=os.environ.get("TILEFEED_BUILD", "build"),
                    help="build tree holding bench/loader_bench and python/ (default %(default)s)")
    ap.add_argument("--workers", type=int, default=0, help="decode threads (0 = all cores)")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--depth", type=int, default=4, help="prefetch depth (batch slots)")
    ap.add_argument("--mode", choices=("train", "val"), default="train")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=2, help="untimed batches at the start")
    ap.add_argument("--rounds", type=int, default=3, help="alternating C++/Python runs")
    ap.add_argument("--consumer", choices=("numpy", "torch"), default="numpy",
                    help="how Python reads each batch (default %(default)s)")
    ap.add_argument("--torch-data", default=None,
                    help="the folder the PyTorch baseline reads (default: data); e.g. the "
                    "ImageFolder that --codec jpeg-index shards in data were packed from")
    ap.add_argument("--torch-baseline", choices=("auto", "off"), default="auto",
                    help="also run bench/torch_baseline.py if it exists (default %(default)s)")
    a = ap.parse_args()
    if a.rounds < 1 or a.warmup < 1:
        fail("--rounds and --warmup must be >= 1")
    return a


def run_cxx(a, loader_bench):
    args = [loader_bench, "--data", a.data, "--workers", str(a.workers), "--batch-size",
            str(a.batch), "--image-size", str(a.size), "--prefetch-depth", str(a.depth),
            "--mode", a.mode, "--seed",
            str(a.seed), "--epochs", "1", "--warmup", str(a.warmup)]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"loader_bench failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    match = re.search(r"^images_per_s=([0-9.]+)", out.stdout, re.M)
    if not match:
        fail(f"no images_per_s= line from loader_bench:\n{out.stdout}")
    return float(match.group(1))


def run_python(a, tilefeed):
    loader = tilefeed.Loader(a.data, split="train" if a.mode == "train" else "val",
                             batch_size=a.batch, image_size=a.size,
                             workers=a.workers, prefetch_depth=a.depth,
                             mode="train" if a.mode == "train" else "eval", seed=a.seed,
                             epochs=1)
    batches = timed_images = checksum = 0
    t0 = time.perf_counter()
    with loader:
        for batch in loader:
            if a.consumer == "torch":
                flat = batch.torch().view(-1)
                checksum += int(flat[::4096].sum()) + int(batch.labels_int32.sum())
            else:
                flat = batch.images.reshape(-1)
                checksum += int(flat[::4096].sum()) + int(batch.labels_int32.sum())
            batches += 1
            if batches == a.warmup:
                t0 = time.perf_counter()
            elif batches > a.warmup:
                timed_images += batch.size
        elapsed = time.perf_counter() - t0
        bad = loader.metrics()["bad_samples"]
    if batches <= a.warmup:
        fail(f"only {batches} batches; lower --warmup or use a larger corpus")
    return timed_images / elapsed, bad


def run_torch_baseline(a, script, workers):
    args = [sys.executable, script, a.torch_data or a.data, "--workers", str(workers), "--batch",
            str(a.batch), "--size", str(a.size), "--seed", str(a.seed)]
    out = subprocess.run(args, capture_output=True, text=True)
    match = re.search(r"^images_per_s=([0-9.]+)", out.stdout, re.M)
    if out.returncode != 0 or not match:
        print(f"  torch_baseline.py failed ({out.returncode}); skipped:\n{out.stderr[-2000:]}")
        return None
    return float(match.group(1))


def main():
    a = parse_args()
    build = os.path.abspath(a.build)
    loader_bench = os.path.join(build, "bench", "loader_bench")
    if not os.access(loader_bench, os.X_OK):
        fail(f"{loader_bench} not found: build it (cmake --build {a.build} --target loader_bench)")
    if os.path.isdir(os.path.join(build, "python", "tilefeed")):
        sys.path.insert(0, os.path.join(build, "python"))
    try:
        import tilefeed
    except ImportError as e:
        fail(f"cannot import tilefeed ({e}): build {a.build} --target _tilefeed")
    if not os.path.isdir(a.data):
        fail(f"corpus not found: {a.data}")

    workers = a.workers or len(os.sched_getaffinity(0))
    print(f"python_bench: {a.data}, {a.mode}, {workers} workers, "
          f"batch {a.batch}, {a.size}x{a.size}, depth {a.depth}, one epoch per run, "
          f"{a.warmup} warm-up batches, consumer {a.consumer}")
    print(f"  module {tilefeed.__file__}")
    print(f"  {'round':>5}  {'C++ loader_bench':>17}  {'Python tilefeed':>15}  {'ratio':>6}")
    cxx, py = [], []
    for r in range(1, a.rounds + 1):
        if r % 2:  # alternate which goes first, so neither always gets the warmer cache
            cxx.append(run_cxx(a, loader_bench))
            ips, bad = run_python(a, tilefeed)
        else:
            ips, bad = run_python(a, tilefeed)
            cxx.append(run_cxx(a, loader_bench))
        py.append(ips)
        print(f"  {r:>5}  {cxx[-1]:>17.1f}  {py[-1]:>15.1f}  {py[-1] / cxx[-1]:>6.3f}",
              flush=True)
    # Each round's two runs are back to back, so the ratio within a round cancels most of
    # the drift of a shared machine; the figure is the median of those paired ratios.
    cxx_median, py_median = statistics.median(cxx), statistics.median(py)
    ratio = statistics.median(p / c for p, c in zip(py, cxx))
    print(f"  {'median':>5}  {cxx_median:>17.1f}  {py_median:>15.1f}  {ratio:>6.3f}"
          f"   (median of the rounds' ratios; goal >= 0.97)")
    print(f"  bad samples skipped per epoch: {bad}")

    torch_ips = None
    script = os.path.join(HERE, "torch_baseline.py")
    if a.torch_baseline == "auto" and os.path.exists(script) and a.mode == "train":
        torch_ips = run_torch_baseline(a, script, workers)
        if torch_ips:
            print(f"  torch DataLoader (bench/torch_baseline.py): {torch_ips:.1f} images/s; "
                  f"tilefeed from Python is {py_median / torch_ips:.2f}x that")
    line = (f"ratio={ratio:.4f} python_images_per_s={py_median:.1f} "
            f"cxx_images_per_s={cxx_median:.1f} workers={workers}")
    if torch_ips:
        line += f" torch_images_per_s={torch_ips:.1f}"
    print(line)


if __name__ == "__main__":
    main()
