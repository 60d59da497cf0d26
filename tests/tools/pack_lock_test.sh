#!/bin/sh
# Two tilefeed-pack runs into one directory at once: the second (with --force, which removed
# the first's shards) once reported rc 0 for shards holding the other's records. The second
# is refused with one line naming the first's pid and host; the first finishes its pack.
#
# Deterministic, no sleeps: the first pack's stderr is a pipe that the test has filled, so
# its first progress line (--progress, written after its first record, so after it took the
# directory) blocks it until the test drains the pipe.
#
#   pack_lock_test.sh PACK MAKE_DEMO
set -u
pack=$1
make_demo=$2
. "${0%/*}/../support/shell_test.sh"
begin_test pack_lock_test
timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 8 --val-per-class 0 \
  --threads 1 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"

mkfifo "$work/progress" || fail "mkfifo"
exec 3<>"$work/progress"  # a reader that reads nothing until the second pack has run
# Fills the pipe: dd stops at the first write that would block.
dd if=/dev/zero of="$work/progress" bs=4096 count=1024 oflag=nonblock 2>/dev/null
timeout 120 "$pack" "$work/data/train" "$work/out" --force --workers 1 --progress \
  >"$work/first.log" 2>"$work/progress" 3<&- </dev/null &
first=$!
deadline=$(($(date +%s) + 60))
until [ -e "$work/out/shard-00000.tfs.tmp" ]; do
  running "$first" || fail "the first pack exited before writing a shard"
  [ "$(date +%s)" -lt "$deadline" ] || fail "the first pack wrote no shard within 60 s"
  sleep 0.05
done
first_pid=$(cat "/proc/$first/task/$first/children")
first_pid=${first_pid%% *}

timeout 120 "$pack" "$work/data/train" "$work/out" --force --workers 1 >"$work/second.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "the second pack into the first's directory exited 0"
line="tilefeed-pack: $work/out: another pack is writing this directory (pid $first_pid on $(hostname), .tilefeed-pack.lock)"
grep -qxF "$line" "$work/second.log" || fail "no line naming the first pack: $line"
echo "pack_lock_test: the second pack, rc $rc: $(grep -F "another pack" "$work/second.log")"

cat "$work/progress" >/dev/null &
exec 3<&-
wait "$first" || fail "the first pack exited $? after the second was refused"
grep -q "^packed 16 records" "$work/first.log" || fail "the first pack did not pack its 16 records"
timeout 120 "$pack" "$work/data/train" "$work/out" --force --workers 1 >"$work/third.log" 2>&1 ||
  fail "a pack after the first ended was refused"
echo "pack_lock_test: OK"
