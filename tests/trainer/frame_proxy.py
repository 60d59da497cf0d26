#!/usr/bin/env python3
"""A lying reader: a proxy between train and a real tilefeed-serve that rewrites the batch
frames and recomputes their checksums as docs/wire-protocol.md describes (payload: XXH3-64
of images, labels, indices; header: XXH3-64 of its first 64 bytes), so every frame check
passes. Everything else it relays as is.

    frame_proxy.py MODE --reader ENDPOINT --endpoint-file FILE [--classes N]

Modes: none (the frames as they came, checksums recomputed), labels (every label shifted by
one class), replay (every epoch after 0 carries epoch
0's batches, renumbered), swap (the images of each batch's first two samples swapped). It
prints its own endpoint to --endpoint-file and relays until 120 s pass.
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
BATCH = 5
HEADER = struct.Struct("<IHHQQIIIIBBHIQQQ")


def rewrite(mode, parts, classes, epoch0):
    """The batch message `parts` (control, header, images, labels, indices) as MODE lies."""
    fields = list(HEADER.unpack(parts[1]))
    epoch, index, n, side = fields[3], fields[4], fields[5], fields[6]
    images, labels, ids = parts[2], parts[3], parts[4]
    if mode == "labels":
        values = struct.unpack(f"<{n}i", labels)
        labels = struct.pack(f"<{n}i", *[(v + 1) % classes for v in values])
    elif mode == "replay":
        if epoch == 0:
            epoch0[index] = (images, labels, ids)
        elif index in epoch0:
            images, labels, ids = epoch0[index]
    elif mode == "swap" and n >= 2:
        row = side * side * 3
        images = images[row:2 * row] + images[:row] + images[2 * row:]
    if fields[14] != 0:  # the trainer asked for payload checksums
        fields[14] = xxhash.xxh3_64_intdigest(images + labels + ids)
    head = HEADER.pack(*fields)
    head = head[:64] + struct.pack("<Q", xxhash.xxh3_64_intdigest(head[:64]))
    return [parts[0], head, images, labels, ids]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["none", "labels", "replay", "swap"])
    parser.add_argument("--reader", required=True)
    parser.add_argument("--endpoint-file", required=True)
    parser.add_argument("--classes", type=int, default=2)
    args = parser.parse_args()
    context = zmq.Context()
    front = context.socket(zmq.ROUTER)  # train connects here
    front.linger = 0
    front.bind("tcp://127.0.0.1:*")
    back = context.socket(zmq.DEALER)  # to the real reader
    back.linger = 0
    back.connect(args.reader)
    with open(args.endpoint_file + ".tmp", "w") as out:
        out.write(front.getsockopt_string(zmq.LAST_ENDPOINT) + "\n")
    os.rename(args.endpoint_file + ".tmp", args.endpoint_file)
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(back, zmq.POLLIN)
    peer, epoch0, lies = None, {}, 0
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for socket, _ in poller.poll(200):
            parts = socket.recv_multipart()
            if socket is front:
                peer = parts[0]
                back.send_multipart(parts[1:])
                continue
            if len(parts) == 5 and CONTROL.unpack(parts[0])[2] == BATCH:
                parts = rewrite(args.mode, parts, args.classes, epoch0)
                lies += 1
            if peer is not None:
                front.send_multipart([peer] + parts)
    print(f"frame_proxy: {args.mode}: {lies} batches rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
