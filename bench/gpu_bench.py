"""GPU IO tiles: tilefeed.Loader(device="cuda") on a real GPU.

    python3 bench/gpu_bench.py --shards SHARDS --jpegs IMAGEFOLDER --out DIR

Measures, in one process on one GPU, each part in its own try block (a failure is printed
and recorded, the other parts still run):
  exact      the device conversion against numpy's float32 reference of the contract
             (tilefeed/loader/output_format.h) on the same uint8 batches, which a CPU
             tilefeed.Loader with the same seed gives byte for byte: mismatching elements
             and the largest difference in units in the last place, per dtype and layout.
  bandwidth  the loader's host-to-device copy (CUDA events around each batch's copy)
             against a plain pinned-memory copy of the same size (torch's copy_, a
             cudaMemcpyAsync), alternating; GB/s medians and the ratio.
  train      ResNet-50 (torchvision, random init), batch 256, 224 px, bf16 autocast,
             channels_last, SGD: fed by tilefeed.Loader(device="cuda") from the shards and
             by DataLoader(pin_memory=True) with torchvision's RandomResizedCrop, flip,
             ToTensor, Normalize and num_workers = cores from the JPEG folder; alternating
             rounds of --seconds each. Per round: images/s, the GPU's stall (time between
             a step's end and the next step's start on the compute stream, over the
             whole), the host's wait in next(), and the copy's overlap with the previous
             step's compute (CUDA events). The verdict is the median of per-round ratios.
Writes DIR/results.json and prints a table last.
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np
import torch

import tilefeed
import tilefeed.cuda

RESULTS = {}


def section(name):
    def wrap(fn):
        def run(*args):
            t0 = time.perf_counter()
            try:
                RESULTS[name] = fn(*args)
            except Exception as error:  # recorded; the other sections still run
                traceback.print_exc()
                RESULTS[name] = {"error": f"{type(error).__name__}: {error}"}
            print(f"== {name} ({time.perf_counter() - t0:.1f} s): {RESULTS[name]}", flush=True)
        return run
    return wrap


# -- exact ----------------------------------------------------------------------------------

def bfloat16_bits(v):
    """float32 array -> bfloat16 bit patterns, round to nearest even (finite inputs)."""
    u = v.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def reference(images_nhwc, dtype, layout, mean, std):
    """The contract on the host: (x / 255 - mean) / std in float32, then rounded."""
    x = images_nhwc.astype(np.float32)
    if dtype != "uint8":
        x = (x / np.float32(255.0) - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    if layout == "nchw":
        x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    if dtype == "float32":
        return x.view(np.uint32)
    if dtype == "float16":
        return x.astype(np.float16).view(np.uint16)
    if dtype == "bfloat16":
        return bfloat16_bits(x)
    return x.astype(np.uint8)


def device_bits(tensor):
    t = tensor.cpu()
    if t.dtype == torch.float32:
        return t.view(torch.int32).numpy().view(np.uint32)
    if t.dtype in (torch.float16, torch.bfloat16):
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


@section("exact")
def exact(args):
    common = dict(batch_size=64, image_size=224, workers=args.workers, seed=7, epochs=1,
                  slice=(0, 1))
    cpu = tilefeed.Loader(args.shards, **common)
    host = [b.images.copy() for b, _ in zip(cpu, range(3))]
    cpu.stop()
    out = {}
    cases = [("float32", "nchw"), ("float16", "nchw"), ("bfloat16", "nchw"),
             ("bfloat16", "nhwc"), ("float32", "nhwc"), ("uint8", "nchw")]
    for dtype, layout in cases:
        norm = dict(mean=tilefeed.cuda.IMAGENET_MEAN, std=tilefeed.cuda.IMAGENET_STD)
        if dtype == "uint8":
            norm = {}
        gpu = tilefeed.Loader(args.shards, device="cuda", dtype=dtype, layout=layout,
                              **norm, **common)
        mismatches, max_ulp, elements = 0, 0, 0
        for batch, expected in zip(gpu, host):
            got = device_bits(batch.images).reshape(-1).astype(np.int64)
            want = reference(expected, dtype, layout, norm.get("mean", (0, 0, 0)),
                             norm.get("std", (1, 1, 1))).reshape(-1).astype(np.int64)
            # Same-sign finite values: the bit patterns' difference is the ulp distance.
            diff = np.abs(got - want)
            mismatches += int(np.count_nonzero(diff))
            max_ulp = max(max_ulp, int(diff.max()))
            elements += got.size
        gpu.stop()
        out[f"{dtype}/{layout}"] = {"elements": elements, "mismatches": mismatches,
                                    "max_ulp": max_ulp}
    return out


# -- bandwidth ------------------------------------------------------------------------------

def plain_copy_gbps(nbytes, reps=20):
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    src.random_(0, 255)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    rates = []
    with torch.cuda.stream(stream):
        for _ in range(reps + 2):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            dst.copy_(src, non_blocking=True)
            b.record(stream)
            b.synchronize()
            rates.append(nbytes / (a.elapsed_time(b) / 1e3) / 1e9)
    return statistics.median(rates[2:])


def loader_copy_gbps(loader, batches=20):
    rates = []
    it = iter(forever(loader))
    for _ in range(batches + 2):
        batch = next(it)
        a, b = batch.copy_events
        b.synchronize()
        nbytes = batch.images.numel()  # the uint8 batch copied: one byte per element
        rates.append(nbytes / (a.elapsed_time(b) / 1e3) / 1e9)
    return statistics.median(rates[2:])


@section("bandwidth")
def bandwidth(args, loader):
    nbytes = 256 * 224 * 224 * 3
    rounds = []
    for _ in range(3):
        plain = plain_copy_gbps(nbytes)
        ours = loader_copy_gbps(loader)
        rounds.append({"plain_gbps": round(plain, 2), "loader_gbps": round(ours, 2),
                       "ratio": round(ours / plain, 3)})
    return {"bytes": nbytes, "rounds": rounds,
            "median_ratio": statistics.median(r["ratio"] for r in rounds)}


# -- train ----------------------------------------------------------------------------------

def forever(loader):
    while True:
        yield from loader


def make_model():
    import torchvision
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return model, optimizer


def step(model, optimizer, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def run_loop(model, optimizer, get, seconds, warm=3):
    """Steps for `seconds` after `warm` steps; get() -> (x, y, copy_events or None)."""
    for _ in range(warm):
        x, y, _ = get()
        step(model, optimizer, x, y)
    torch.cuda.synchronize()
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    starts, ends, copies = [], [], []
    waited = 0.0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds or len(starts) < 5:
        w = time.perf_counter()
        x, y, copy = get()
        waited += time.perf_counter() - w
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        step(model, optimizer, x, y)
        e.record()
        starts.append(s)
        ends.append(e)
        copies.append(copy)
        if len(ends) >= 2:
            ends[-2].synchronize()  # at most one step queued: next() runs beside it
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    t = lambda ev: ref.elapsed_time(ev)  # ms since ref
    total = t(ends[-1]) - t(starts[0])
    gaps = sum(t(starts[i]) - t(ends[i - 1]) for i in range(1, len(starts)))
    overlaps = []
    copy_ms = []
    for i in range(1, len(starts)):
        if copies[i] is None:
            continue
        c0, c1 = t(copies[i][0]), t(copies[i][1])
        s, e = t(starts[i - 1]), t(ends[i - 1])
        copy_ms.append(c1 - c0)
        if c1 > c0:
            overlaps.append(max(0.0, min(c1, e) - max(c0, s)) / (c1 - c0))
    n = len(starts)
    return {"steps": n, "images_per_s": round(n * 256 / wall, 1),
            "gpu_stall_pct": round(100 * gaps / total, 2),
            "host_wait_pct": round(100 * waited / wall, 2),
            "copy_ms": round(statistics.median(copy_ms), 3) if copy_ms else None,
            "copy_overlap_pct": round(100 * statistics.mean(overlaps), 1) if overlaps else None}


def tilefeed_getter(loader):
    it = iter(forever(loader))

    def get():
        batch = next(it)
        x = batch.images.permute(0, 3, 1, 2)  # NHWC memory: a channels_last NCHW view
        return x, batch.labels, batch.copy_events
    return get


def dataloader_getter(args):
    import torchvision
    import torchvision.transforms as T
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize(tilefeed.cuda.IMAGENET_MEAN, tilefeed.cuda.IMAGENET_STD)])
    dataset = torchvision.datasets.ImageFolder(args.jpegs, transform=transform)
    sampler = torch.utils.data.RandomSampler(dataset, replacement=True, num_samples=10 ** 8)
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, sampler=sampler,
                                         num_workers=args.workers, pin_memory=True,
                                         persistent_workers=True, drop_last=True)
    it = iter(loader)
    next(it)  # the workers are up (and then fill their prefetch queues: see settle())

    def get():
        x, y = next(it)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        x = x.cuda(non_blocking=True)
        b.record()
        y = y.cuda(non_blocking=True)
        return x.contiguous(memory_format=torch.channels_last), y, (a, b)
    return get


def settle(limit=12.0):
    """Waits (at most `limit` s) until the CPUs are idle: loader workers still filling their
    prefetch queues after a round would otherwise slow the next round's other loader.
    Returns the seconds waited."""
    t0 = time.perf_counter()
    try:
        import psutil
    except ImportError:
        time.sleep(3)
        return round(time.perf_counter() - t0, 1)
    while time.perf_counter() - t0 < limit and psutil.cpu_percent(interval=0.5) > 15:
        pass
    return round(time.perf_counter() - t0, 1)


@section("train")
def train(args, loader, model, optimizer):
    synthetic_x = torch.randn(256, 3, 224, 224, device="cuda").contiguous(
        memory_format=torch.channels_last)
    synthetic_y = torch.randint(0, 1000, (256,), device="cuda")
    compute = run_loop(model, optimizer, lambda: (synthetic_x, synthetic_y, None),
                       min(args.seconds, 8))
    baseline = dataloader_getter(args)
    ours = tilefeed_getter(loader)
    rounds = []
    for r in range(args.rounds):
        waited = settle()
        a = run_loop(model, optimizer, ours, args.seconds)
        a["settled_before_s"] = waited
        a["settled_s"] = settle()
        b = run_loop(model, optimizer, baseline, args.seconds)
        rounds.append({"tilefeed": a, "dataloader": b,
                       "ratio": round(a["images_per_s"] / b["images_per_s"], 3)})
        print(f"round {r}: {rounds[-1]}", flush=True)
    return {"compute_only": compute, "rounds": rounds,
            "median_ratio": statistics.median(r["ratio"] for r in rounds)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True)
    parser.add_argument("--jpegs", required=True)
    parser.add_argument("--out", default=".")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--parts", default="exact,bandwidth,train")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    RESULTS["env"] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                      "cpus": os.cpu_count(), "workers": args.workers,
                      "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    print(RESULTS["env"], flush=True)
    parts = args.parts.split(",")
    if "exact" in parts:
        exact(args)
    loader = tilefeed.Loader(args.shards, batch_size=256, image_size=224,
                             workers=args.workers, device="cuda", dtype="bfloat16",
                             mean=tilefeed.cuda.IMAGENET_MEAN, std=tilefeed.cuda.IMAGENET_STD,
                             layout="nhwc", drop_last_batch=True, timing=True, slice=(0, 1))
    if "bandwidth" in parts:
        bandwidth(args, loader)
    if "train" in parts:
        model, optimizer = make_model()
        train(args, loader, model, optimizer)
    loader.stop()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(RESULTS, f, indent=1)
    print(json.dumps(RESULTS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
