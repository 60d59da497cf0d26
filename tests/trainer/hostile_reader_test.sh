#!/bin/sh
# Train believes nothing a reader says about the shape of an epoch. A
# hostile reader (tests/trainer/hostile_reader.py, the documented wire protocol) welcomes
# the trainer on its own terms and then misshapes epoch 0 of 2 (epoch 1 and the bye as agreed); each way must end train with
# rc != 0 and a line naming the reader and the fault. A reader that heartbeats but sends no
# batch must end the job within --reader data-timeout= (3 s here; the bound checked is 60 s, far
# above what load can add).
#
#   hostile_reader_test.sh PYTHON TRAIN HOSTILE_READER_PY
set -u
python=$1
train=$2
hostile=$3
"$python" -c "import zmq, xxhash" 2>/dev/null || { echo "hostile_reader_test: SKIP: no pyzmq/xxhash"; exit 77; }
. "${0%/*}/../support/shell_test.sh"
begin_test hostile_reader_test

# check MODE REGEX: runs the hostile reader in MODE and train against it.
check() {
  mode=$1
  want=$2
  rm -f "$work/endpoint"
  timeout 90 "$python" "$hostile" "$mode" --samples 128 --endpoint-file "$work/endpoint" \
    >"$work/$mode.reader.log" 2>&1 &
  reader=$!
  i=0
  while [ ! -s "$work/endpoint" ]; do
    i=$((i + 1))
    [ $i -gt 400 ] && fail "$mode: the hostile reader did not start"
    sleep 0.05
  done
  endpoint=$(cat "$work/endpoint")
  timeout 60 "$train" --readers "$endpoint" --core reference:hidden=8 --classes 2 \
    --batch-size 4 --image-size 16 --epochs 2 --reader data-timeout=3 >"$work/$mode.log" 2>&1
  rc=$?
  stop "$reader"
  [ $rc -ne 0 ] || fail "$mode: train exited 0: $(cat "$work/$mode.log")"
  [ $rc -ne 124 ] || fail "$mode: train did not end within 60 s"
  grep -q "reader at $endpoint.*$want" "$work/$mode.log" ||
    fail "$mode: no line 'reader at $endpoint ... $want' in: $(cat "$work/$mode.log")"
  echo "hostile_reader_test: $mode: rc $rc: $(grep -o "reader at $endpoint.*$want.*" "$work/$mode.log" | head -1)"
}

check short "ended epoch 0 after 5 of its 32 batches"
check long "sent batch 32 of epoch 0; the epoch has 32 batches"
check reversed "sent batch 31 of epoch 0 where batch 0 was due"
check repeated "sent batch 0 of epoch 0 where batch 1 was due"
check huge-index "with sample 9223372036854775808 at position 0 where the agreed order has sample"
check repeated-sample "at position 4 where the agreed order has sample"
check few-announced "announces 5 batches per epoch; the agreed terms give 32"
check huge-frame "dropped the connection (.*oversized frame: a message over this trainer's limit of 1048576 bytes"
check huge-welcome "dropped the connection before welcoming us (.*oversized frame"
check silent "sent no batch for .* s although it held credits (data timeout 3.0 s)"
echo "hostile_reader_test: OK"
