#!/usr/bin/env python3
"""intake_bench.py: the main job's intake -- `train` with a synthetic core of (near) zero
cost, so the loader is the limit -- on one corpus as a folder, a plain pack and a
--codec jpeg-index pack, next to loader_bench on the same data, in alternating rounds.

Each round runs the six (train, loader_bench) x (folder, plain, indexed) runs once, in an
order that rotates from round to round, so a machine whose speed drifts does not favour one
of them. A run is 2 epochs of the corpus's train split; its figure is the steady-state
images/s: train's second epoch (the loader runs ahead across the epoch boundary, so it
starts with full slots) and loader_bench's rate after its warm-up batches.

Judged, each as the median of the per-round ratios (both sides of a ratio run in the same
round):
  train / loader_bench on the same data   goal >= 0.95 (the IO tiles and step loop cost nothing)
  train on indexed shards / on the folder goal >= 1.4

The packs are made once (untimed) under --packs and reused. The corpus is read once
(untimed) first so every run sees a warm page cache.

    bench/intake_bench.py /tmp/corpus --build build/release --rounds 5
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

GOAL_TRAIN_VS_BENCH = 0.95
GOAL_INDEXED_VS_FOLDER = 1.4
KINDS = ("folder", "plain", "indexed")


def fail(message):
    print(f"intake_bench: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus", help="corpus root with train/ (make_corpus.sh), or an ImageFolder")
    ap.add_argument("--build", default="build/release", help="build tree (default %(default)s)")
    ap.add_argument("--packs", default=None,
                    help="where the packs are made and reused (default: CORPUS.packs)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--json", default=None, help="append one JSON line per run and a summary")
    a = ap.parse_args()
    if a.rounds < 1 or a.workers < 1 or a.batch < 1 or a.size < 1:
        fail("--rounds, --workers, --batch and --size must be >= 1")
    return a


def run(args):
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{' '.join(args)} exited {out.returncode}:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return out.stdout + out.stderr


def make_packs(a, tools):
    packs = a.packs or a.corpus.rstrip("/") + ".packs"
    for kind, extra in (("plain", []), ("indexed", ["--codec", "jpeg-index"])):
        out = os.path.join(packs, kind)
        if not os.path.exists(os.path.join(out, "tilefeed-manifest.txt")):
            print(f"  packing {a.corpus} (train split) into {out} {' '.join(extra)} (untimed)...",
                  flush=True)
            run([os.path.join(tools, "tilefeed-pack"), a.corpus, out, "--split", "train",
                 "--force", *extra])
    # The folder's train split itself: a root with val/ would also run train's validation,
    # whose time the train loader spends prefetching the next epoch (the packs have no val/).
    folder = os.path.join(a.corpus, "train")
    return {"folder": folder if os.path.isdir(folder) else a.corpus,
            "plain": os.path.join(packs, "plain"),
            "indexed": os.path.join(packs, "indexed")}


def warm(paths):
    for path in paths:
        for root, _, files in os.walk(path):
            for name in files:
                with open(os.path.join(root, name), "rb") as f:
                    while f.read(1 << 20):
                        pass


def train_rate(a, tools, data):
    text = run([os.path.join(tools, "train"), "--data", data, "--core",
                "synthetic:us-per-sample=0", "--epochs", "2", "--batch-size", str(a.batch),
                "--image-size", str(a.size), "--workers", str(a.workers)])
    rates = re.findall(r"epoch 1: .*?, ([0-9.]+) images/s", text)
    if not rates:
        fail(f"no 'epoch 1: ... images/s' line from train:\n{text[-2000:]}")
    return float(rates[-1])


def bench_rate(a, build, data):
    text = run([os.path.join(build, "bench", "loader_bench"), "--data", data, "--epochs", "2",
                "--batch-size", str(a.batch), "--image-size", str(a.size), "--workers", str(a.workers)])
    match = re.search(r"^images_per_s=([0-9.]+)", text, re.M)
    if not match:
        fail(f"no images_per_s= line from loader_bench:\n{text[-2000:]}")
    return float(match.group(1))


def main():
    a = parse_args()
    tools = os.path.join(a.build, "tools")
    for path in (os.path.join(tools, "train"), os.path.join(tools, "tilefeed-pack"),
                 os.path.join(a.build, "bench", "loader_bench")):
        if not os.access(path, os.X_OK):
            fail(f"{path} not found: cmake --build {a.build} --target train tilefeed-pack loader_bench")
    data = make_packs(a, tools)
    warm(data.values())
    runs = [(tool, kind) for kind in KINDS for tool in ("train", "loader_bench")]
    print(f"intake_bench: {a.corpus}, {a.workers} workers, batch {a.batch}, {a.size}x{a.size}, "
          f"{a.rounds} rounds of {len(runs)} runs (2 epochs each), order rotating")
    rates = {run_: [] for run_ in runs}
    log = open(a.json, "a") if a.json else None
    for r in range(a.rounds):
        order = runs[r % len(runs):] + runs[:r % len(runs)]
        if r % 2:
            order.reverse()
        for tool, kind in order:
            rate = (train_rate(a, tools, data[kind]) if tool == "train"
                    else bench_rate(a, a.build, data[kind]))
            rates[(tool, kind)].append(rate)
            if log:
                log.write(json.dumps({"round": r, "tool": tool, "data": kind,
                                      "images_per_s": rate}) + "\n")
        print(f"  round {r + 1}: " + ", ".join(
            f"{tool} {kind} {rates[(tool, kind)][-1]:.0f}" for tool, kind in runs), flush=True)

    def ratios(num, den):
        return [x / y for x, y in zip(rates[num], rates[den])]

    print("\n| data | train images/s | loader_bench images/s | train / loader_bench (median of rounds) |")
    print("|---|---|---|---|")
    summary = {}
    verdicts = []
    for kind in KINDS:
        rs = ratios(("train", kind), ("loader_bench", kind))
        ratio = statistics.median(rs)
        summary[kind] = ratio
        verdicts.append(ratio >= GOAL_TRAIN_VS_BENCH)
        print(f"| {kind} | {statistics.median(rates[('train', kind)]):.1f} | "
              f"{statistics.median(rates[('loader_bench', kind)]):.1f} | {ratio:.3f} "
              f"({min(rs):.3f}..{max(rs):.3f}) |")
    speedup = statistics.median(ratios(("train", "indexed"), ("train", "folder")))
    plain = statistics.median(ratios(("train", "plain"), ("train", "folder")))
    verdicts.append(speedup >= GOAL_INDEXED_VS_FOLDER)
    print(f"\ntrain on the plain pack / on the folder: {plain:.3f}")
    print(f"train on --codec jpeg-index shards / on the folder: {speedup:.3f} "
          f"(goal >= {GOAL_INDEXED_VS_FOLDER})")
    print(f"train / loader_bench goal >= {GOAL_TRAIN_VS_BENCH}: " +
          ", ".join(f"{k} {summary[k]:.3f}" for k in KINDS))
    met = sum(verdicts)
    print(f"intake_bench: {met} of {len(verdicts)} goals met")
    if log:
        log.write(json.dumps({"summary": summary, "indexed_vs_folder": speedup,
                              "plain_vs_folder": plain, "goals_met": met}) + "\n")
        log.close()


if __name__ == "__main__":
    main()
