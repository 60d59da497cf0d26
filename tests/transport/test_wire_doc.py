"""The facts docs/wire-protocol.md states that a client could only learn by probing,
checked against tilefeed-serve with a client written here from the page (pyzmq, and the
encoders of examples/wire_client.py): where `--bind tcp://HOST:*` prints its port; that the
last epoch gets no epoch end (the bye stands for it); that a hello's `c` and `d` are not
checked and `b` is a boolean, while a part after the terms refuses it; that with shared
memory the ready's `a` is ignored and a credit for a slot not held ends the session with the
documented text; that eval mode shuffles exactly as train mode; and a resumed session's
batch count.

Needs TILEFEED_SERVE and TILEFEED_MAKE_DEMO (tests/CMakeLists.txt sets them).
"""

import os
import re
import subprocess
import sys
import time

import pytest
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import wire_client as wire  # noqa: E402

DEADLINE = 120  # seconds for one wait: a loaded 2-core machine
BATCH, IMAGE, EPOCHS, SAMPLES = 4, 32, 2, 16  # 4 batches per epoch


def tool(name):
    path = os.environ.get(name)
    if not path or not os.path.exists(path):
        pytest.skip(name + " not given")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    out = tmp_path_factory.mktemp("wire") / "demo"
    subprocess.run([tool("TILEFEED_MAKE_DEMO"), str(out), "--classes", "2", "--train-per-class",
                    str(SAMPLES // 2), "--val-per-class", "0", "--threads", "1"], check=True,
                   capture_output=True, timeout=DEADLINE)
    return out / "train"


class Reader:
    """tilefeed-serve on a free loopback port (or `bind`), its endpoint read from the line
    the doc names."""

    def __init__(self, data, tmp_path, *args, bind="tcp://127.0.0.1:*"):
        self.log = open(tmp_path / ("serve-%d.log" % time.monotonic_ns()), "w+")
        self.process = subprocess.Popen(
            [tool("TILEFEED_SERVE"), "--data", str(data), "--bind", bind, "--batch-size",
             str(BATCH), "--image-size", str(IMAGE), "--epochs", str(EPOCHS), "--workers", "1",
             "--prefetch-depth", "2", *args], stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.monotonic() + DEADLINE
        while True:
            self.log.seek(0)
            found = re.search(r"^tilefeed-serve: serving \d+ samples, epochs 0 to \d+ "
                              r"\(slice \d+/\d+\) on (\S+)$", self.log.read(), re.M)
            if found:
                self.endpoint = found.group(1)
                break
            assert self.process.poll() is None, "tilefeed-serve exited before serving"
            assert time.monotonic() < deadline, "tilefeed-serve named no endpoint"
            time.sleep(0.1)

    def close(self):
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=DEADLINE)


class Trainer:
    def __init__(self, endpoint):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(wire.zmq_endpoint(endpoint))

    def send(self, *parts):
        self.socket.send_multipart(list(parts))

    def receive(self):
        """(type, a, b, c, d, parts) of the next message that is not a heartbeat."""
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            self.send(wire.control(wire.HEARTBEAT))
            if self.socket.poll(200):
                parts = self.socket.recv_multipart()
                kind, a, b, c, d = wire.parse_control(parts[0])
                if kind != wire.HEARTBEAT:
                    return kind, a, b, c, d, parts
        raise AssertionError("the reader said nothing")

    def close(self):
        self.socket.close()
        self.context.term()


def terms(**changes):
    t = dict(drop_last=True, pinned=False, mode=0, remainder=0, dataset_size=0,
             dataset_digest=0, slice_index=0, slice_count=1, seed=0, image_size=IMAGE,
             batch_size=BATCH, epochs=EPOCHS, first_epoch=0, first_position=0)
    t.update(changes)
    return wire.encode_terms(t)


def stream(trainer, credits=8):
    """Sends ready, then credits for each batch; returns [(type, a, batch header)] up to the
    bye, which it acknowledges."""
    trainer.send(wire.control(wire.READY, credits))
    seen = []
    while True:
        kind, a, _, _, _, parts = trainer.receive()
        header = wire.parse_header(parts[1]) if kind == wire.BATCH else None
        seen.append((kind, a, header, parts))
        if kind == wire.BATCH:
            trainer.send(wire.control(wire.CREDIT, 1))
        elif kind == wire.BYE:
            trainer.send(wire.control(wire.BYE))
            return seen
        elif kind == wire.ERROR:
            raise AssertionError(parts[1].decode())


@pytest.fixture
def session(data, tmp_path):
    made = []

    def start(*args, bind="tcp://127.0.0.1:*"):
        reader = Reader(data, tmp_path, *args, bind=bind)
        trainer = Trainer(reader.endpoint)
        made.append((reader, trainer))
        return reader, trainer
    yield start
    for reader, trainer in made:
        trainer.close()
        reader.close()


def test_the_last_epoch_has_no_epoch_end_and_c_d_are_not_checked(session):
    reader, trainer = session()
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", reader.endpoint)
    # b = 5 asks for checksums like 1; c and d are ignored.
    trainer.send(wire.control(wire.HELLO, 8, 5, 7, 9), terms())
    kind, per_epoch, *_ = trainer.receive()
    assert kind == wire.WELCOME and per_epoch == SAMPLES // BATCH
    seen = stream(trainer)
    kinds = [(k, a) for k, a, _, _ in seen if k != wire.BATCH]
    assert kinds == [(wire.EPOCH_END, 0), (wire.BYE, EPOCHS)]
    assert all(h["payload_checksum"] != 0 for k, _, h, _ in seen if k == wire.BATCH)
    assert reader.process.wait(timeout=DEADLINE) == 0


def test_a_part_after_the_terms_refuses_the_hello(session):
    _, trainer = session()
    trainer.send(wire.control(wire.HELLO, 8), terms(), b"extra")
    kind, _, _, _, _, parts = trainer.receive()
    assert kind == wire.ERROR
    assert parts[1].decode().startswith(
        "refused: a hello without well-formed session terms (80 bytes and an image-size "
        "schedule, after the control part)")


def test_eval_mode_shuffles_as_train_mode(session):
    orders = {}
    for mode in ("train", "eval"):
        _, trainer = session("--mode", mode)
        trainer.send(wire.control(wire.HELLO, 8), terms(mode=1 if mode == "eval" else 0))
        assert trainer.receive()[0] == wire.WELCOME
        orders[mode] = [bytes(p[4]) for k, _, _, p in stream(trainer) if k == wire.BATCH]
    indices = b"".join(orders["eval"][:SAMPLES // BATCH])
    first_epoch = list(memoryview(indices).cast("Q"))
    assert sorted(first_epoch) == list(range(SAMPLES)) and first_epoch != sorted(first_epoch)
    assert orders["eval"] == orders["train"]


def test_a_resumed_session_gets_a_whole_epochs_count_and_the_rest_of_its_epoch(session):
    _, trainer = session()
    done = 2 * BATCH  # two batches of epoch 0 already delivered (one instance)
    trainer.send(wire.control(wire.HELLO, 8), terms(first_position=done))
    kind, per_epoch, _, _, _, parts = trainer.receive()
    assert kind == wire.WELCOME and per_epoch == SAMPLES // BATCH
    assert wire.decode_terms(parts[1])["first_position"] == done
    seen = stream(trainer)
    epochs = [h["epoch"] for k, _, h, _ in seen if k == wire.BATCH]
    assert epochs.count(0) == per_epoch - done // BATCH and epochs.count(1) == per_epoch
    assert [h["index"] for k, _, h, _ in seen if k == wire.BATCH][0] == 0


def test_shared_memory_ready_is_ignored_and_an_unheld_slot_ends_the_session(session):
    name = "wire-doc-%d" % os.getpid()
    _, trainer = session(bind="shm://" + name)
    trainer.send(wire.control(wire.HELLO, 1), terms())
    kind, _, slots, _, _, _ = trainer.receive()
    assert kind == wire.WELCOME and slots >= 2
    trainer.send(wire.control(wire.READY, 0))  # a = 0 would end an inline session
    kind, slot, *_ = trainer.receive()
    assert kind == wire.BATCH
    # hello a = 1: one slot at a time, so no batch comes until this one is returned.
    end = time.monotonic() + 1.5
    while trainer.socket.poll(max(1, int(1000 * (end - time.monotonic())))):
        assert wire.parse_control(trainer.socket.recv_multipart()[0])[0] == wire.HEARTBEAT
        if time.monotonic() >= end:
            break
    unheld = (slot + 1) % slots
    trainer.send(wire.control(wire.CREDIT, unheld))
    kind, *_, parts = trainer.receive()
    assert kind == wire.ERROR
    assert parts[1].decode().endswith(
        ": returned shared slot %d that it does not hold" % unheld), parts[1]
