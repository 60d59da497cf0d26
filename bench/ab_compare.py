#!/usr/bin/python3
"""ab_compare: two builds of tilefeed on the same datasets, in alternating rounds.

    bench/ab_compare.py --old OLD_BUILD --new NEW_BUILD --rounds 7 \
        --data folder=/tmp/corpus/train --data coef=/tmp/packs/coef [--python coef=/tmp/packs/coef]

Each round runs, for every --data, OLD's and NEW's bench/loader_bench (--epochs, 2 workers,
RandomResizedCrop 224, batch 256: the loader's defaults) back to back, the order swapped
every round so neither build always runs second; every --python runs tilefeed.Loader from
each build's python/ folder the same way (--epochs epochs, the consumer reads one byte per
page).
--old-args and --new-args add loader_bench flags to one side, so one build can be timed
against itself with other settings, e.g. --old-args="--image-size 224" --new-args="--image-size
128 --decode-scaling fast" (the rate at 128 px against 224).
A dataset's figure is the median of its per-round ratios NEW/OLD, which cancels the load
drift of a shared machine (the 2-core VM's speed moves 2x within minutes). The last lines
are machine-readable: "ratio NAME=R (rounds: r1 r2 ...)".
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

PYTHON_LOOP = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np, tilefeed
loader = tilefeed.Loader(sys.argv[2], batch_size=256, workers=2, epochs=int(sys.argv[3]))
images, start = 0, None
for i, batch in enumerate(loader):
    if i == 2:
        start, images = time.perf_counter(), 0
    images += len(batch.labels)
    int(np.asarray(batch.images).reshape(-1)[::4096].sum()) + int(batch.labels.sum())
print(images / (time.perf_counter() - start))
"""


def loader_bench(build, data, workers, epochs, extra):
    out = subprocess.run([os.path.join(build, "bench", "loader_bench"), "--data", data,
                          "--workers", str(workers), "--epochs", str(epochs), "--json"] + extra,
                         check=True,
                         capture_output=True, text=True, timeout=1800).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["images_per_s"]


def python_loader(build, data, epochs):
    out = subprocess.run(["/usr/bin/python3", "-c", PYTHON_LOOP,
                          os.path.join(build, "python"), data, str(epochs)],
                         check=True, capture_output=True, text=True, timeout=1800).stdout
    return float(out.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old", required=True, help="the reference build tree")
    ap.add_argument("--new", required=True, help="the build tree measured against it")
    ap.add_argument("--data", action="append", default=[], metavar="NAME=DIR",
                    help="a dataset for loader_bench (repeatable)")
    ap.add_argument("--python", action="append", default=[], metavar="NAME=DIR",
                    help="a dataset for tilefeed.Loader in Python (repeatable)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1, help="epochs per run (longer: less noise)")
    ap.add_argument("--old-args", default="", help="more loader_bench flags for OLD's runs")
    ap.add_argument("--new-args", default="", help="more loader_bench flags for NEW's runs")
    args = ap.parse_args()
    extra = {"old": args.old_args.split(), "new": args.new_args.split()}
    runs = [(f"loader_bench {n}",
             lambda b, side, d=d: loader_bench(b, d, args.workers, args.epochs, extra[side]))
            for n, d in (s.split("=", 1) for s in args.data)]
    runs += [(f"python {n}", lambda b, side, d=d: python_loader(b, d, args.epochs))
             for n, d in (s.split("=", 1) for s in args.python)]
    if not runs:
        ap.error("give at least one --data or --python")
    ratios = {name: [] for name, _ in runs}
    for r in range(args.rounds):
        for name, run in runs:
            order = [("old", args.old), ("new", args.new)]
            if r % 2:
                order.reverse()
            figures = {which: run(build, which) for which, build in order}
            ratios[name].append(figures["new"] / figures["old"])
            print(f"round {r + 1} {name}: old {figures['old']:.0f} new {figures['new']:.0f} "
                  f"images/s, new/old {ratios[name][-1]:.3f}", flush=True)
    for name, values in ratios.items():
        print(f"ratio {name.replace(' ', ':')}={statistics.median(values):.3f} "
              f"(rounds: {' '.join(f'{v:.3f}' for v in values)})")


if __name__ == "__main__":
    sys.exit(main())
