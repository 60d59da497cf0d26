#!/bin/sh
# A job must never train silently on the wrong data or end early with exit 0; end to end with
# the real tools: a reader and a trainer that disagree on what decides the samples are refused
# with both values; a reader stopped (SIGTERM) or killed (SIGKILL) mid-stream fails the trainer
# naming it; with --reader reconnect= a restarted reader continues and the parameters equal an
# uninterrupted run's; a resumed trainer refuses a reader pinned at another position or of
# another dataset size, and a checkpoint in the retired remote format; a second reader on one
# shm:// name is refused and the socket file goes with the first; a non-loopback bind needs
# CURVE.
#
#   readers_faults_test.sh TRAIN READER MAKE_DEMO
#
# Bounded in time: every process runs under timeout, every wait ends when what it waits for
# happens or its process exits, and every reader is reaped. No bound here decides a result
# under load: a peer may be silent for $silence s (both sides, far above what a loaded
# machine under ASan causes; the default 5 s is not) and each process's own timeout is
# above that, so a refusal test sees the refusal or the process's exit, never a timeout.
set -u
train=$1
reader=$2
make_demo=$3

. "${0%/*}/../support/shell_test.sh"
begin_test readers_faults_test

silence=60

# serve NAME ARGS...: starts a reader on a free loopback port (or the --bind in ARGS),
# logging to NAME.log; sets $endpoint, $pid (timeout's, to wait for) and $rpid (the
# reader's own, to signal: timeout forwards TERM but cannot forward KILL).
serve() {
  name=$1
  shift
  timeout 900 "$reader" --workers 1 --prefetch-depth 2 --batch-size 4 --image-size 32 \
    --timeout "$silence" "$@" >"$work/$name.log" 2>&1 &
  pid=$!
  reader_endpoint "$work/$name.log" "$pid"
  rpid=$(cat "/proc/$pid/task/$pid/children")
  rpid=${rpid%% *}
  [ -n "$rpid" ] || fail "no reader process under $pid"
}

# 4 classes x 16 images: 64 samples, 16 batches of 4 per epoch. Another folder, 3 classes.
timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 2 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
timeout 300 "$make_demo" "$work/other" --classes 3 --train-per-class 16 --val-per-class 2 \
  --threads 2 >"$work/make_demo_other.log" 2>&1 || fail "tilefeed-make-demo failed"
data="$work/data/train"
common="--data $work/data --core synthetic --workers 1 --reader timeout=$silence"
sizes="--batch-size 4 --image-size 32"

# --- Closed by default: a non-loopback bind needs CURVE or --insecure.
timeout 120 "$reader" --data "$data" --bind 'tcp://*:0' >"$work/open.log" 2>&1
[ $? -eq 2 ] || fail "a non-loopback bind without CURVE was served"
grep -q "HOST '\*' is not loopback.*serve it with CURVE" "$work/open.log" || fail "no line for the open bind"

# --- Each difference refuses the session with both values; the reader keeps serving.
serve agree --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 2 --drop-last
good=$endpoint
refused() {  # refused WHAT EXPECTED-LINE TRAIN-ARGS...
  what=$1
  line=$2
  shift 2
  # shellcheck disable=SC2086
  timeout 300 "$train" $common "$@" >"$work/refused.log" 2>&1
  rc=$?
  [ $rc -ne 0 ] || fail "$what: train exited 0"
  grep -q "$line" "$work/refused.log" || fail "$what: no '$line' in $(cat "$work/refused.log")"
  echo "readers_faults_test: $what refused: $(grep -o "$line.*" "$work/refused.log" | head -1)"
}
refused seed "seed: trainer 1, reader 0" $sizes --readers "$good" --epochs 2 --seed 1
refused "image size" "image size: trainer 48, reader 32" --readers "$good" --epochs 2 --batch-size 4 --image-size 48
refused "batch size" "batch size: trainer 8, reader 4" --readers "$good" --epochs 2 --batch-size 8 --image-size 32
refused epochs "epochs: trainer 3, reader 2" $sizes --readers "$good" --epochs 3
refused "decode scaling" "decode scaling: trainer fast, reader exact" $sizes --readers "$good" \
  --epochs 2 --decode-scaling fast
# shellcheck disable=SC2086
timeout 300 "$train" --data "$work/other" --core synthetic --batch-size 4 --image-size 32 \
  --workers 1 --readers "$good" --epochs 2 --reader timeout=$silence \
  >"$work/refused.log" 2>&1 &&
  fail "dataset: train exited 0"
grep -q "dataset: trainer 48 samples" "$work/refused.log" || fail "dataset: $(cat "$work/refused.log")"
serve eval --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 2 --drop-last --mode eval
refused mode "mode: trainer train, reader eval" $sizes --readers "$endpoint" --epochs 2
serve keep --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 2 --no-drop-last
refused "drop-last" "drop-last: trainer on, reader off" $sizes --readers "$endpoint" \
  --epochs 2
serve half --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 2 --drop-last --slice 1/2
refused slice "slice (instance/instances): trainer 0/1 (the whole dataset), reader 1/2" \
  $sizes --readers "$endpoint" --epochs 2
# After all that, the agreeing trainer is served to the end.
# shellcheck disable=SC2086
timeout 300 "$train" $common $sizes --readers "$good" --epochs 2 >"$work/agree_train.log" 2>&1 ||
  fail "the agreeing trainer failed"
grep -q "done: 32 steps" "$work/agree_train.log" || fail "the agreeing trainer did not finish"

# --- A 3-class reader feeding a 2-class trainer (no --data to compare): the first label 2
# is refused on receipt, naming the sample, instead of reaching the core.
serve three --data "$work/other/train" --bind 'tcp://127.0.0.1:*' --epochs 1 --drop-last
timeout 300 "$train" --core reference:hidden=8 --classes 2 $sizes --workers 1 \
  --readers "$endpoint" --epochs 1 --reader timeout=$silence >"$work/labels.log" 2>&1 &&
  fail "a label 2 reached a 2-class core"
grep -q "reader at $endpoint sent sample [0-9]* (batch [0-9]* of epoch 0) with label 2; this trainer has 2 classes" \
  "$work/labels.log" || fail "no line naming the bad label"
echo "readers_faults_test: $(grep -o "sent sample.*" "$work/labels.log")"

# --- A reader stopped or killed mid-stream is an error naming it.
for signal in TERM KILL; do
  serve "sig$signal" --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 20 --drop-last
  # shellcheck disable=SC2086
  timeout 300 "$train" $common $sizes --readers "$endpoint" --epochs 20 \
    >"$work/train_$signal.log" 2>&1 &
  train_pid=$!
  waitfor "$work/train_$signal.log" "epoch 0:" "$train_pid"
  kill -"$signal" "$rpid"
  wait "$train_pid"
  rc=$?
  [ $rc -ne 0 ] || fail "SIG$signal of the reader: train exited 0"
  case $signal in
    TERM) why="reader at $endpoint: stopped before the end of the stream" ;;
    KILL) why="reader at $endpoint dropped the connection" ;;
  esac
  grep -q "$why" "$work/train_$signal.log" || fail "SIG$signal: no '$why'"
  echo "readers_faults_test: SIG$signal of the reader: train rc $rc, '$why'"
done

# --- --reader reconnect=: a reader killed and restarted on its port; the same parameters as an
# uninterrupted run. The reference core's parameters depend on every sample.
ref="--data $work/data --core reference:hidden=2048 --batch-size 4 --image-size 32 --workers 1 \
  --epochs 4"
ref_reader="credits=1,timeout=$silence"
serve whole --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 4 --drop-last
# shellcheck disable=SC2086
timeout 300 "$train" $ref --reader "$ref_reader" --readers "$endpoint" --checkpoint-every 20 \
  --checkpoint-dir "$work/ckpt" >"$work/whole_train.log" 2>&1 || fail "the uninterrupted run failed"
want=$(sed -n 's/.*parameter checksum \([0-9]*\).*/\1/p' "$work/whole_train.log")
[ -n "$want" ] || fail "no parameter checksum in the uninterrupted run"

serve first --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 4 --drop-last
port_endpoint=$endpoint
# shellcheck disable=SC2086
timeout 300 "$train" $ref --readers "$port_endpoint" --reader "$ref_reader,reconnect=120" \
  >"$work/reconnect.log" 2>&1 &
train_pid=$!
waitfor "$work/reconnect.log" "epoch 0:" "$train_pid"
kill -KILL "$rpid"
serve second --data "$data" --bind "$port_endpoint" --epochs 4 --drop-last
wait "$train_pid" || fail "train --reader reconnect= failed"
grep -q "reconnecting at epoch" "$work/reconnect.log" || fail "train did not reconnect"
got=$(sed -n 's/.*parameter checksum \([0-9]*\).*/\1/p' "$work/reconnect.log")
[ "$got" = "$want" ] || fail "parameters after the reconnect $got, uninterrupted $want"
echo "readers_faults_test: --reader reconnect= continued; parameter checksum $got as uninterrupted"

# --- A trainer killed mid-run and resumed from its checkpoint continues with the same
# reader (which keeps serving, and takes the silent old trainer for dead) and ends with the
# parameters of the uninterrupted run.
serve keeps --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 4 --drop-last
# shellcheck disable=SC2086
timeout 300 "$train" $ref --reader "$ref_reader" --readers "$endpoint" --checkpoint-every 20 \
  --checkpoint-dir "$work/ckpt2" >"$work/killed.log" 2>&1 &
killed=$!
waitfor "$work/killed.log" "checkpoint: step 20" "$killed"
child=$(cat "/proc/$killed/task/$killed/children")
kill -KILL ${child%% *} 2>/dev/null
wait "$killed"
# shellcheck disable=SC2086
timeout 300 "$train" $ref --readers "$endpoint" --checkpoint-dir "$work/ckpt2" --resume \
  --reader "$ref_reader,reconnect=120" >"$work/resumed_ok.log" 2>&1 ||
  fail "the resumed trainer failed"
got=$(sed -n 's/.*parameter checksum \([0-9]*\).*/\1/p' "$work/resumed_ok.log")
[ "$got" = "$want" ] || fail "parameters after kill and resume $got, uninterrupted $want"
grep -q "resume: each reader serves from this trainer's position" "$work/resumed_ok.log" ||
  fail "no resume line for the readers"
grep -q -- "--resume tilefeed-loader-state" "$work/resumed_ok.log" &&
  fail "the resume line tells to pin the readers"
echo "readers_faults_test: killed trainer resumed against the same reader; parameter checksum $got"

# --- A resumed trainer refuses a reader pinned at another position.
serve pinned --data "$data" --bind 'tcp://127.0.0.1:*' --epochs 4 --drop-last \
  --resume "tilefeed-loader-state v1 seed=0 epoch=0 position=0 size=64"
# shellcheck disable=SC2086
timeout 300 "$train" $ref --reader "$ref_reader" --readers "$endpoint" --resume --checkpoint-dir "$work/ckpt" \
  >"$work/resumed.log" 2>&1 && fail "a resumed trainer took a reader at another position"
grep -q "data position: trainer epoch [0-9]* position [0-9]*, reader epoch 0 position 0" \
  "$work/resumed.log" || fail "no data position line"

# --- A checkpoint with the retired remote data position line (no seed or dataset size, so a
# resume from it could not be checked against the reader) is refused in one line naming the
# file. The trailer is FNV-1a 64 of the two lines.
mkdir "$work/old.ck"
printf '%s\n%s\n\nfnv1a64=%s\n' \
  'tilefeed-checkpoint v1 step=20 epoch=1 core=reference parameters=0 velocity=0 global_batch=4' \
  'tilefeed-remote-state v1 epoch=1 position=64' 12216936293313675323 >"$work/old.ck/checkpoint.tfck"
# shellcheck disable=SC2086
timeout 300 "$train" $ref --reader "$ref_reader" --readers "$endpoint" --resume --checkpoint-dir "$work/old.ck" \
  >/dev/null 2>"$work/old_checkpoint.log" && fail "a retired remote-state checkpoint was resumed"
[ "$(wc -l <"$work/old_checkpoint.log")" -eq 1 ] || fail "the refusal is not one line"
grep -qF "checkpoint $work/old.ck/checkpoint.tfck: its data position is in the retired format 'tilefeed-remote-state v1 epoch=1 position=64'" \
  "$work/old_checkpoint.log" || fail "the refusal does not name the file and the format"

# --- A trainer without --data resumed against a reader of another dataset: the checkpoint's
# data position names its dataset size, and the reader's differs.
serve other --data "$work/other/train" --bind 'tcp://127.0.0.1:*' --epochs 4 --drop-last
timeout 300 "$train" --core reference:hidden=2048 --classes 4 --batch-size 4 --image-size 32 \
  --workers 1 --epochs 4 --readers "$endpoint" --resume --checkpoint-dir "$work/ckpt" \
  --reader timeout=$silence \
  >"$work/other_resumed.log" 2>&1 && fail "a checkpoint of 64 samples resumed on a reader of 48"
grep -q "resume: the checkpoint's data position is in a dataset of 64 samples; the reader at $endpoint serves 48" \
  "$work/other_resumed.log" || fail "no line for the checkpoint's dataset size"

# --- One shm:// name, one reader; the socket file goes with it.
shm_name="faults-$$"
serve shm1 --data "$data" --bind "shm://$shm_name" --epochs 1 --drop-last
shm1=$pid
sock="${XDG_RUNTIME_DIR:-/tmp}/tilefeed-$(id -u)/$shm_name.sock"
[ -S "$sock" ] || fail "no socket file $sock"
timeout 120 "$reader" --data "$data" --bind "shm://$shm_name" --workers 1 >"$work/shm2.log" 2>&1 &&
  fail "a second reader served shm://$shm_name"
grep -q "another reader serves it" "$work/shm2.log" || fail "no line for the second shm reader"
kill -TERM "$shm1"
wait "$shm1"
[ -e "$sock" ] && fail "$sock left behind"
echo "readers_faults_test: OK"
