#!/bin/sh
# train's metrics end with an `end` record however the run ends. A SIGTERM (a scheduler's
# preemption) once left none (rc 143): now the record says "exit": "stopped" and the rc is
# still 143. A failing run's end.error once was a generic sentence: now it is the error's
# own message, the one train prints on stderr.
#
#   end_record_test.sh TRAIN MAKE_DEMO PYTHON
set -u
train=$1
make_demo=$2
python=$3
. "${0%/*}/../support/shell_test.sh"
begin_test end_record_test
timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 8 --val-per-class 0 \
  --threads 1 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
common="--core synthetic:us-per-sample=1 --batch-size 4 --image-size 16 --workers 1"

# end FILE: the last record of metrics file FILE as "RECORD EXIT ERROR".
end() {
  "$python" -c 'import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(r["record"], r.get("exit"), r.get("error"))' "$1"
}

# SIGTERM mid-run.
# shellcheck disable=SC2086
timeout 300 "$train" --data "$work/data/train" $common --epochs 1000000 \
  --metrics "file=$work/term.jsonl" >"$work/term.log" 2>&1 &
job=$!
waitfor "$work/term.log" "epoch 0:" "$job"
kill -TERM "$job"  # timeout passes it on to train
wait "$job"
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM: train exited $rc, not 143"
got=$(end "$work/term.jsonl")
[ "$got" = "end stopped None" ] || fail "SIGTERM: the last record is '$got', not an end record, exit stopped"
echo "end_record_test: SIGTERM: rc $rc, last record: $got"

# An error: a file that is not an image under --bad-sample-policy fail.
printf 'not a JPEG' >"$work/data/train/$(ls "$work/data/train" | head -n 1)/bad.jpg"
# shellcheck disable=SC2086
timeout 300 "$train" --data "$work/data/train" $common --epochs 2 --bad-sample-policy fail \
  --metrics "file=$work/error.jsonl" >"$work/error.log" 2>&1 && fail "a bad sample under fail: rc 0"
message=$(sed -n 's/^train: instance 0: //p' "$work/error.log" | tail -n 1)
[ -n "$message" ] || fail "no error line on stderr"
got=$(end "$work/error.jsonl")
[ "$got" = "end error $message" ] || fail "the last record is '$got', not the end record naming '$message'"
echo "end_record_test: error: $got"
echo "end_record_test: OK"
