#!/bin/sh
# The protocol's doc must be enough to implement it: examples/wire_client.py, a Python trainer
# written from docs/wire-protocol.md alone, streams two epochs from tilefeed-serve over tcp and
# over shm, checking every header and checksum; a disagreeing client and a DEALER that sends
# "hello" are refused with the reason.
#
#   wire_client_test.sh PYTHON READER MAKE_DEMO CLIENT
set -u
python=$1
reader=$2
make_demo=$3
client=$4

"$python" -c "import zmq, xxhash" 2>/dev/null || {
  echo "wire_client_test: SKIP: $python lacks zmq or xxhash (apt-get install python3-zmq python3-xxhash)"
  exit 77
}
. "${0%/*}/../support/shell_test.sh"
begin_test wire_client_test
serve() {  # serve LOG ARGS...
  log=$1
  shift
  timeout 120 "$reader" --data "$work/data/train" --batch-size 8 --image-size 32 --epochs 2 \
    --drop-last --workers 1 --prefetch-depth 2 "$@" >"$work/$log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/$log" "$reader_pid" 20
}

timeout 60 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 2 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"

serve tcp.log --bind 'tcp://127.0.0.1:*'

# A DEALER that sends "hello" gets a refusal that says why, and the reader logs a line.
timeout 30 "$python" - "$endpoint" >"$work/raw.log" 2>&1 <<'PY' || fail "no refusal for 'hello'"
import sys, zmq
s = zmq.Context().socket(zmq.DEALER)
s.setsockopt(zmq.LINGER, 0)
s.connect(sys.argv[1])
s.send(b"hello")
assert s.poll(10000), "no reply"
parts = s.recv_multipart()
print(parts[1].decode())
assert b"refused: a malformed first message" in parts[1], parts
PY
grep -q "refused a peer at .*first part is 5 bytes" "$work/tcp.log" || fail "the reader logged nothing"

timeout 60 "$python" "$client" --connect "$endpoint" --batch-size 8 --image-size 32 --epochs 2 \
  --drop-last --seed 1 >"$work/seed.log" 2>&1 && fail "a client with another seed was served"
grep -q "seed: trainer 1, reader 0" "$work/seed.log" || fail "the refusal does not name the seed"

timeout 60 "$python" "$client" --connect "$endpoint" --batch-size 8 --image-size 32 --epochs 2 \
  --drop-last --classes 4 --samples 64 >"$work/client_tcp.log" 2>&1 || fail "the tcp client failed"
grep -q "wire_client: 2 epochs, 16 batches .*OK" "$work/client_tcp.log" || fail "tcp: no OK"
wait "$reader_pid" || fail "the tcp reader exited with $?"

name="wire-$$"
serve shm.log --bind "shm://$name"
timeout 60 "$python" "$client" --connect "shm://$name" --batch-size 8 --image-size 32 \
  --epochs 2 --drop-last --classes 4 --samples 64 >"$work/client_shm.log" 2>&1 ||
  fail "the shm client failed"
grep -q "wire_client: 2 epochs, 16 batches .*OK" "$work/client_shm.log" || fail "shm: no OK"
wait "$reader_pid" || fail "the shm reader exited with $?"
cat "$work/client_tcp.log" "$work/client_shm.log"
echo "wire_client_test: OK"
