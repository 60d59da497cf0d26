#!/usr/bin/env python3
"""A hostile tilefeed reader, written from docs/wire-protocol.md: it welcomes one trainer
on the trainer's own terms (a dataset of --samples samples, its epochs' sample order as
loader::EpochOrder draws it) and then misshapes epoch 0 as
--mode says; the later epochs, their ends and the bye are as agreed. The trainer must end with rc != 0 and one line naming the fault.

    hostile_reader.py MODE --samples 128 --endpoint-file FILE

Modes: short (5 of 32 batches, then the epoch end), long (96 batches), reversed (batch
numbers 31, 30, ...), repeated (batch 0 twice), huge-index (a sample index 2^63),
repeated-sample (one sample index in two batches), silent (heartbeats, never a batch),
few-announced (the welcome announces 5 batches of 32), huge-frame (a
300 MB images part), huge-welcome (a 300 MB welcome). It prints the bound endpoint to
--endpoint-file and serves until the trainer leaves, errs out, or 60 s pass.
Needs pyzmq and xxhash (Debian: python3-zmq python3-xxhash).
"""

import argparse
import os
import struct
import sys
import time

import xxhash
import zmq

CONTROL = struct.Struct("<IHHQQQQ")
CONTROL_MAGIC, VERSION = 0x31434654, 3
HELLO, WELCOME, READY, CREDIT, BATCH, EPOCH_END, HEARTBEAT, BYE, ERROR = range(1, 10)
TERMS = struct.Struct("<IHBBQQIIQIIQQQQ")
HEADER = struct.Struct("<IHHQQIIIIBBHIQQQ")
FRAME_MAGIC, FRAME_VERSION = 0x31424654, 2


def control(kind, a=0, b=0, c=0, d=0):
    return CONTROL.pack(CONTROL_MAGIC, VERSION, kind, a, b, c, d)


def frame(epoch, index, indices, side, checksum):
    n = len(indices)
    images = bytes(n * side * side * 3)
    labels = struct.pack(f"<{n}i", *([0] * n))
    ids = struct.pack(f"<{n}Q", *indices)
    payload_sum = xxhash.xxh3_64_intdigest(images + labels + ids) if checksum else 0
    head = HEADER.pack(FRAME_MAGIC, FRAME_VERSION, HEADER.size, epoch, index, n, side, side, 3,
                       1, 0, 0, 0, n * side * side * 3 + 12 * n, payload_sum, 0)
    head = head[:64] + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[:64]))
    return [head, images, labels, ids]


M64 = (1 << 64) - 1


def splitmix64(state):
    """(next state, output) of splitmix64, as loader/sampler.cc steps it."""
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = ((state ^ (state >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def epoch_order(n, seed, epoch):
    """loader::EpochOrder of one instance: the epoch's Fisher-Yates permutation of [0, n),
    drawn from xoshiro256** seeded by splitmix64 of the hashed (domain, seed, epoch, n)."""
    key = 0
    for word in (0x7065726D75746531, seed, epoch, n):
        _, key = splitmix64(key ^ word)
    s = []
    for _ in range(4):
        key, word = splitmix64(key)
        s.append(word)

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M64

    def below(bound):  # Lemire's multiply-shift with rejection
        while True:
            result = (rotl((s[1] * 5) & M64, 7) * 9) & M64
            t = (s[1] << 17) & M64
            s[2] ^= s[0]
            s[3] ^= s[1]
            s[1] ^= s[2]
            s[0] ^= s[3]
            s[2] ^= t
            s[3] = rotl(s[3], 45)
            product = result * bound
            if product & M64 >= ((1 << 64) - bound) % bound:
                return product >> 64

    order = list(range(n))
    for i in range(n, 1, -1):
        j = below(i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def plan(mode, batches, batch_size, order):
    """The (batch number, sample indices) the reader sends for an epoch of `order`."""
    normal = [(i, order[i * batch_size:(i + 1) * batch_size]) for i in range(batches)]
    if mode == "short":
        return normal[:5]
    if mode == "long":
        return normal + [(batches + i, normal[i % batches][1]) for i in range(2 * batches)]
    if mode == "reversed":
        return [(batches - 1 - i, ids) for i, ids in normal]
    if mode == "repeated":
        return [normal[0], normal[0]] + normal[1:]
    if mode == "huge-index":
        return [(0, [1 << 63] + normal[0][1][1:])] + normal[1:]
    if mode == "repeated-sample":
        return [normal[0], (1, normal[0][1][:1] + normal[1][1][1:])] + normal[2:]
    if mode in ("silent", "few-announced", "normal", "huge-frame", "huge-welcome"):
        return normal
    raise SystemExit(f"unknown mode {mode}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--samples", type=int, default=128)
    parser.add_argument("--endpoint-file", required=True)
    args = parser.parse_args()
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.linger = 0
    router.bind("tcp://127.0.0.1:*")
    with open(args.endpoint_file + ".tmp", "w") as out:
        out.write(router.getsockopt_string(zmq.LAST_ENDPOINT) + "\n")
    os.rename(args.endpoint_file + ".tmp", args.endpoint_file)

    peer, hello, terms = router.recv_multipart()
    _, _, _, _, checksums, _, _ = CONTROL.unpack(hello)
    t = list(TERMS.unpack(terms[:TERMS.size]))
    texts = terms[TERMS.size:]  # the image-size schedule's text (a fixed side here), the augment
    schedule = texts[:t[9]]
    t[4] = args.samples  # the dataset this reader serves (same names, so no refusal)
    side, batch_size = int(schedule), t[10]
    batches = args.samples // batch_size
    announced = 5 if args.mode == "few-announced" else batches
    if args.mode == "huge-welcome":
        router.send_multipart([peer, control(WELCOME, announced), bytes(300 * 1000 * 1000)])
    else:
        router.send_multipart([peer, control(WELCOME, announced), TERMS.pack(*t) + texts])
    epochs = t[11]
    # Epoch 0 misshapen, the others as agreed; an epoch end after each, then the bye.
    todo = []
    if args.mode != "silent":
        for epoch in range(epochs):
            shape = args.mode if epoch == 0 else "normal"
            order = epoch_order(args.samples, t[8], epoch)
            todo += [(epoch, index, ids)
                     for index, ids in plan(shape, batches, batch_size, order)]
            todo.append((epoch, None, None))
        todo.append((epochs, "bye", None))
    credits = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if router.poll(200):
            parts = router.recv_multipart()
            _, _, kind, a, _, _, _ = CONTROL.unpack(parts[1])
            if kind in (READY, CREDIT):
                credits += a
            elif kind in (BYE, ERROR):
                return 0
        else:
            router.send_multipart([peer, control(HEARTBEAT)])
        while todo and (credits > 0 or todo[0][1] is None or todo[0][1] == "bye"):
            epoch, index, ids = todo.pop(0)
            if index is None:
                router.send_multipart([peer, control(EPOCH_END, epoch)])
            elif index == "bye":
                router.send_multipart([peer, control(BYE, epoch)])
            elif args.mode == "huge-frame":
                # A 300 MB images part, far above what the agreed batch allows.
                parts = frame(epoch, index, ids, side, checksums)
                parts[1] = bytes(300 * 1000 * 1000)
                router.send_multipart([peer, control(BATCH)] + parts)
                credits -= 1
            else:
                router.send_multipart([peer, control(BATCH)] +
                                      frame(epoch, index, ids, side, checksums))
                credits -= 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
