#!/bin/sh
# A lying reader: tests/trainer/frame_proxy.py sits between a real tilefeed-serve and train
# --data, rewrites every batch frame and recomputes its checksums as docs/wire-protocol.md
# says, so that every frame check passes. Labels shifted by one class, epoch 0 replayed in
# epoch 1, and two samples' images swapped must each end train with rc != 0 and one line
# naming the sample, its epoch and position and what differs; the frames relayed unchanged
# (checksums recomputed) train to the end with every sample's pixels compared
# (--reader check-pixels=1).
#
#   lying_reader_test.sh PYTHON TRAIN SERVE MAKE_DEMO FRAME_PROXY_PY [MODE...]
# MODEs: the cases to run (default all). $LYING_READER_TRAIN_ARGS replaces "--reader
# check-pixels=1" (to run a case against a build without that key: it trains on the lies).
set -u
python=$1
train=$2
serve=$3
make_demo=$4
proxy=$5
shift 5
modes=${*:-none labels replay swap}
. "${0%/*}/../support/shell_test.sh"
"$python" -c "import zmq, xxhash" 2>/dev/null || { echo "lying_reader_test: SKIP: no pyzmq/xxhash"; exit 77; }
begin_test lying_reader_test
export OMPI_MCA_btl_vader_backing_directory="$work"
timeout 60 "$make_demo" "$work/demo" --classes 2 --train-per-class 16 --val-per-class 1 \
  --threads 1 >"$work/make.log" 2>&1 || fail "tilefeed-make-demo failed"
shape="--batch-size 4 --image-size 16 --epochs 2 --workers 1"

# check MODE WANT: train through the proxy in MODE; WANT: a line it must print ("" = rc 0).
check() {
  mode=$1
  want=$2
  # shellcheck disable=SC2086
  timeout 300 "$serve" --data "$work/demo/train" --bind 'tcp://127.0.0.1:*' $shape --drop-last \
    >"$work/$mode.reader.log" 2>&1 &
  reader_pid=$!
  reader_endpoint "$work/$mode.reader.log" "$reader_pid" 60
  rm -f "$work/proxy"
  timeout 300 "$python" "$proxy" "$mode" --reader "$endpoint" --endpoint-file "$work/proxy" --classes 2 \
    >"$work/$mode.proxy.log" 2>&1 &
  proxy_pid=$!
  i=0
  while [ ! -s "$work/proxy" ]; do
    i=$((i + 1))
    [ $i -gt 1200 ] && fail "$mode: the proxy did not start"
    kill -0 "$proxy_pid" 2>/dev/null || fail "$mode: the proxy exited"
    sleep 0.05
  done
  # shellcheck disable=SC2086
  timeout 120 "$train" --data "$work/demo" --readers "$(cat "$work/proxy")" \
    ${LYING_READER_TRAIN_ARGS---reader check-pixels=1} --core synthetic:us-per-sample=1 $shape \
    >"$work/$mode.log" 2>&1
  rc=$?
  stop "$proxy_pid" "$reader_pid"
  if [ -z "$want" ]; then
    [ $rc -eq 0 ] || fail "$mode: train exited $rc"
    echo "lying_reader_test: $mode: rc 0"
    return
  fi
  [ $rc -ne 0 ] || fail "$mode: train exited 0: it trained on the lies"
  [ $rc -ne 124 ] || fail "$mode: train did not end within 120 s"
  grep -q "$want" "$work/$mode.log" || fail "$mode: no line '$want'"
  echo "lying_reader_test: $mode: rc $rc: $(grep -o "$want.*" "$work/$mode.log" | head -1)"
}

for mode in $modes; do
  case $mode in
    none) check none "" ;;
    labels) check labels "reader check: sample [0-9]* at position 0 of epoch 0 (batch 0, row 0): label [01]; this trainer's dataset has label [01]" ;;
    replay) check replay "sent batch 0 of epoch 1 with sample [0-9]* at position [0-9]* where the agreed order has sample [0-9]*" ;;
    swap) check swap "reader check: sample [0-9]* at position 0 of epoch 0 (batch 0, row 0): [0-9]* of its 768 pixel bytes differ from this trainer's own decode" ;;
    *) fail "unknown mode $mode" ;;
  esac
done
echo "lying_reader_test: OK"
