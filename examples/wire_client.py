#!/usr/bin/env python3
"""A tilefeed trainer in Python, written from docs/wire-protocol.md alone.

It connects to a tilefeed-serve (tcp://, ipc:// or shm://NAME), states its session terms,
receives every batch of the agreed epochs and checks everything the page says a receiver
checks: each frame header (magic, versions, ranges, sizes, header checksum), each payload
checksum, the agreed shape, every label against --classes, the credits, and that each
epoch delivers every sample id of this instance's slice once (--samples). It prints
"wire_client: OK ..." and exits 0, or names what failed and exits 1.

    tilefeed-serve --data DIR --bind tcp://127.0.0.1:5555 --batch-size 8 --image-size 32 \\
        --epochs 2 --drop-last
    python3 examples/wire_client.py --connect tcp://127.0.0.1:5555 --batch-size 8 \\
        --image-size 32 --epochs 2 --drop-last --samples 64

Needs pyzmq and xxhash (Debian: python3-zmq python3-xxhash).
"""

import argparse
import mmap
import os
import struct
import sys
import time

import xxhash
import zmq

CONTROL = struct.Struct("<IHHQQQQ")  # magic, version, type, a, b, c, d
CONTROL_MAGIC, VERSION = 0x31434654, 3
HELLO, WELCOME, READY, CREDIT, BATCH, EPOCH_END, HEARTBEAT, BYE, ERROR = range(1, 10)
TERMS = struct.Struct("<IHBBQQIIQIIQQQQ")
TERMS_MAGIC = 0x32534654
DEFAULT_AUGMENT = "RandomResizedCrop(), RandomHorizontalFlip()"  # the text after the schedule
HEADER = struct.Struct("<IHHQQIIIIBBHIQQQ")
FRAME_MAGIC, FRAME_VERSION = 0x31424654, 2


class WireError(Exception):
    pass


def control(kind, a=0, b=0, c=0, d=0):
    return CONTROL.pack(CONTROL_MAGIC, VERSION, kind, a, b, c, d)


def parse_control(part):
    if len(part) != CONTROL.size:
        raise WireError(f"control part of {len(part)} bytes")
    magic, version, kind, a, b, c, d = CONTROL.unpack(part)
    if magic != CONTROL_MAGIC or version != VERSION or not 1 <= kind <= ERROR:
        raise WireError(f"bad control part (magic {magic:#x}, version {version}, type {kind})")
    return kind, a, b, c, d


def encode_terms(t):
    flags = (1 if t["drop_last"] else 0) | (2 if t["pinned"] else 0) | \
        (4 if t.get("decode_scaling") == "fast" else 0)
    schedule = str(t["image_size"]).encode()  # the image-size schedule's text: "224" here
    return TERMS.pack(TERMS_MAGIC, flags, t["mode"], t["remainder"], t["dataset_size"],
                      t["dataset_digest"], t["slice_index"], t["slice_count"], t["seed"],
                      len(schedule), t["batch_size"], t["epochs"], t["first_epoch"],
                      t["first_position"], 0) + schedule + t.get("augment",
                                                                 DEFAULT_AUGMENT).encode()


def decode_terms(part):
    if len(part) < TERMS.size:
        raise WireError(f"session terms of {len(part)} bytes, fewer than {TERMS.size}")
    (magic, flags, mode, remainder, size, digest, index, count, seed, length, batch, epochs,
     first_epoch, first_position, reserved) = TERMS.unpack(part[:TERMS.size])
    image = bytes(part[TERMS.size:TERMS.size + length]).decode()
    augment = bytes(part[TERMS.size + length:]).decode()
    image = int(image) if image.isdigit() else image  # a schedule stays its text
    if magic != TERMS_MAGIC or reserved != 0 or flags & ~7 or length > len(part) - TERMS.size:
        raise WireError("malformed session terms")
    return dict(drop_last=bool(flags & 1), pinned=bool(flags & 2),
                decode_scaling="fast" if flags & 4 else "exact", mode=mode,
                remainder=remainder, dataset_size=size, dataset_digest=digest,
                slice_index=index, slice_count=count, seed=seed, image_size=image,
                batch_size=batch, epochs=epochs, first_epoch=first_epoch,
                first_position=first_position, augment=augment)


def parse_header(part):
    """Every check of the page's frame-header section; returns the fields."""
    if len(part) != HEADER.size:
        raise WireError(f"frame header of {len(part)} bytes, not {HEADER.size}")
    (magic, version, header_size, epoch, index, n, h, w, c, dtype, layout, reserved,
     substituted, payload_bytes, payload_checksum, checksum) = HEADER.unpack(part)
    if magic != FRAME_MAGIC or version != FRAME_VERSION or header_size != HEADER.size:
        raise WireError("bad frame magic, version or header size")
    if xxhash.xxh3_64_intdigest(part[:64]) != checksum:
        raise WireError("frame header checksum mismatch")
    if dtype != 1 or layout > 1 or reserved != 0:
        raise WireError("bad dtype, layout or reserved field")
    if not (1 <= n <= 65536 and 1 <= h <= 32768 and 1 <= w <= 32768 and 1 <= c <= 4):
        raise WireError(f"shape {n}x{h}x{w}x{c} out of range")
    if substituted > n or payload_bytes != n * h * w * c + 12 * n or payload_bytes > 1 << 34:
        raise WireError("frame sizes do not agree")
    return dict(epoch=epoch, index=index, n=n, h=h, w=w, c=c, substituted=substituted,
                payload_checksum=payload_checksum)


class Client:
    def __init__(self, args):
        self.args = args
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 1000)
        limit = max(1 << 20, args.batch_size * args.image_size ** 2 * 3)
        self.socket.setsockopt(zmq.MAXMSGSIZE, limit)
        self.socket.connect(zmq_endpoint(args.connect))
        self.last_sent = time.monotonic()
        self.shm = None
        self.layout = None

    def send(self, *parts):
        self.socket.send_multipart(list(parts))
        self.last_sent = time.monotonic()

    def receive(self):
        """The next message that is not a heartbeat; sends our own heartbeats meanwhile."""
        deadline = time.monotonic() + self.args.timeout
        while True:
            if time.monotonic() - self.last_sent >= 1.0:
                self.send(control(HEARTBEAT))
            if self.socket.poll(200):
                parts = self.socket.recv_multipart()
                kind = parse_control(parts[0])
                if kind[0] == ERROR:
                    raise WireError("reader: " + parts[1].decode(errors="replace"))
                if kind[0] != HEARTBEAT:
                    return kind, parts
                deadline = time.monotonic() + self.args.timeout
            elif time.monotonic() > deadline:
                raise WireError(f"reader silent for {self.args.timeout} s")

    def handshake(self, terms):
        self.send(control(HELLO, self.args.credits, 1), encode_terms(terms))
        (kind, a, b, c, d), parts = self.receive()
        if kind != WELCOME or len(parts) < 2:
            raise WireError(f"expected a welcome, got type {kind}")
        echoed = decode_terms(parts[1])
        for key, value in terms.items():
            if key != "pinned" and key != "dataset_size" and key != "dataset_digest" and \
                    echoed[key] != value:
                raise WireError(f"the reader's terms differ: {key} {echoed[key]} != {value}")
        self.batches_per_epoch = a
        if b:
            self.map_shared(b, c, d, parts[2].decode())
            self.send(control(READY, b))
        else:
            self.send(control(READY, self.args.credits))
        self.credits = self.args.credits if not b else None

    def map_shared(self, slots, image_bytes, samples, name):
        align = lambda x: (x + 63) // 64 * 64
        labels = align(image_bytes)
        indices = labels + align(4 * samples)
        stride = indices + align(8 * samples)
        fd = os.open("/dev/shm" + name, os.O_RDONLY)
        try:
            self.shm = mmap.mmap(fd, slots * stride, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        os.unlink("/dev/shm" + name)
        self.layout = (slots, stride, labels, indices)

    def payload(self, slot, header, parts):
        n, image_bytes = header["n"], header["n"] * header["h"] * header["w"] * header["c"]
        if self.layout is None:
            if len(parts) != 5 or [len(p) for p in parts[2:]] != [image_bytes, 4 * n, 8 * n]:
                raise WireError("payload parts do not match the header")
            return parts[2], parts[3], parts[4]
        slots, stride, labels, indices = self.layout
        if slot >= slots:
            raise WireError(f"shared slot {slot} of {slots}")
        base = slot * stride
        return (self.shm[base:base + image_bytes], self.shm[base + labels:base + labels + 4 * n],
                self.shm[base + indices:base + indices + 8 * n])


def zmq_endpoint(endpoint):
    if not endpoint.startswith("shm://"):
        return endpoint
    directory = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
    directory = f"{directory}/tilefeed-{os.geteuid()}"
    st = os.lstat(directory)  # this user's, writable by no one else: no one else serves there
    if st.st_uid != os.geteuid() or (st.st_mode & 0o170022) != 0o040000:  # a directory, 0o022 unset
        raise WireError(f"{directory} is owned by uid {st.st_uid} with mode {st.st_mode:o}")
    return f"ipc://{directory}/{endpoint[6:]}.sock"


def endpoint_arg(text):
    """--connect: tcp://HOST:PORT (port 1-65535), ipc://PATH or shm://NAME."""
    if text.startswith("tcp://"):
        host, _, port = text[6:].rpartition(":")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"want tcp://HOST:PORT with PORT in 1-65535, "
                                             f"got '{text}'")
    elif text.startswith("ipc://") or text.startswith("shm://"):
        if len(text) == 6 or (text.startswith("shm://") and "/" in text[6:]):
            raise argparse.ArgumentTypeError(f"want ipc://PATH or shm://NAME, got '{text}'")
    else:
        raise argparse.ArgumentTypeError(f"want tcp://, ipc:// or shm://, got '{text}'")
    return text


def slice_arg(text):
    """--slice: INDEX/COUNT with 0 <= INDEX < COUNT."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit() and int(index) < int(count)):
        raise argparse.ArgumentTypeError(f"want INDEX/COUNT with 0 <= INDEX < COUNT, "
                                         f"got '{text}'")
    return text


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got '{text}'")
    return int(text)


def run(args):
    index, count = (int(x) for x in args.slice.split("/"))
    terms = dict(drop_last=args.drop_last, pinned=False, mode=1 if args.mode == "eval" else 0,
                 remainder=0, dataset_size=0, dataset_digest=0, slice_index=index,
                 slice_count=count, seed=args.seed, image_size=args.image_size,
                 batch_size=args.batch_size, epochs=args.epochs, first_epoch=0,
                 first_position=0)
    client = Client(args)
    client.handshake(terms)
    epoch, batches, seen, last_epoch_batches = 0, 0, [], 0
    substituted = 0  # bad samples the reader's loader replaced
    while True:
        (kind, a, _, _, _), parts = client.receive()
        if kind == BATCH:
            if client.credits is not None:
                if client.credits == 0:
                    raise WireError("a batch without a credit")
                client.credits -= 1
            header = parse_header(parts[1])
            if header["epoch"] != epoch:
                raise WireError(f"a batch of epoch {header['epoch']} during epoch {epoch}")
            if header["n"] > args.batch_size or header["h"] != args.image_size or \
                    header["w"] != args.image_size or header["c"] != 3:
                raise WireError("a batch of another shape than agreed")
            images, labels, indices = client.payload(a, header, parts)
            labels, indices = bytes(labels), bytes(indices)  # copies: the slot may change
            digest = xxhash.xxh3_64()
            for chunk in (images, labels, indices):
                digest.update(chunk)
            if digest.intdigest() != header["payload_checksum"]:
                raise WireError(f"payload checksum mismatch in batch {header['index']}")
            for label in struct.unpack(f"<{header['n']}i", labels):
                if args.classes and not 0 <= label < args.classes:
                    raise WireError(f"label {label} outside [0, {args.classes})")
            seen += struct.unpack(f"<{header['n']}Q", indices)
            substituted += header["substituted"]
            batches += 1
            last_epoch_batches += 1
            # Consumed: give the credit (or the shared slot) back.
            client.send(control(CREDIT, 1 if client.layout is None else a))
            if client.credits is not None:
                client.credits += 1
        elif kind in (EPOCH_END, BYE):
            if kind == EPOCH_END and a != epoch:
                raise WireError(f"end of epoch {a} during epoch {epoch}")
            if last_epoch_batches != client.batches_per_epoch:
                raise WireError(f"epoch {epoch}: {last_epoch_batches} batches, "
                                f"{client.batches_per_epoch} announced")
            if args.samples and sorted(seen) != list(range(args.samples)):
                raise WireError(f"epoch {epoch} delivered {len(seen)} ids, not each once")
            epoch, seen, last_epoch_batches = epoch + 1, [], 0
            if kind == BYE:
                if a != args.epochs or epoch != args.epochs:
                    raise WireError(f"the stream ended at epoch {a}; agreed {args.epochs}")
                client.send(control(BYE))
                client.socket.close()
                client.context.term()
                return batches, substituted
        else:
            raise WireError(f"unexpected message type {kind}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connect", required=True, type=endpoint_arg)
    parser.add_argument("--batch-size", type=positive, required=True)
    parser.add_argument("--image-size", type=positive, required=True)
    parser.add_argument("--epochs", type=positive, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slice", default="0/1", type=slice_arg, help="INDEX/COUNT")
    parser.add_argument("--mode", choices=["train", "eval"], default="train")
    parser.add_argument("--drop-last", action="store_true")
    parser.add_argument("--credits", type=positive, default=4)
    parser.add_argument("--classes", type=int, default=0, help="check labels (0: do not)")
    parser.add_argument("--samples", type=int, default=0,
                        help="dataset size: check each epoch delivers every id once (a whole-"
                             "dataset slice whose size the batches divide; 0: do not)")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    try:
        batches, substituted = run(args)
    except (WireError, zmq.ZMQError, OSError) as e:
        print(f"wire_client: FAILED: {e}")
        return 1
    print(f"wire_client: {args.epochs} epochs, {batches} batches from {args.connect}, "
          f"{substituted} bad samples replaced by the reader, every header and checksum "
          f"checked: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
