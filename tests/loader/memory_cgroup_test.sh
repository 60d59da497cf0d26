#!/bin/sh
# Batch slots past a memory cgroup's limit were an OOM kill without a line (rc 137): the
# check read only /sys/fs/cgroup/memory.max. Here train runs in a real memory cgroup, nested:
# a group of 1 GiB made for the test (v2 memory.max, or v1 memory.limit_in_bytes) and, inside
# it, one without a limit of its own that holds train. 800 slots of 16 x 224 x 224 x 3
# (1.93 GB) are refused with the arithmetic naming the 1 GiB limit; 4 slots train.
# Skipped, with the reason, where no memory cgroup can be made (not root, no writable
# hierarchy with the memory controller).
#
#   memory_cgroup_test.sh TRAIN MAKE_DEMO
set -u
train=$1
make_demo=$2
. "${0%/*}/../support/shell_test.sh"
begin_test memory_cgroup_test
skip() {
  echo "memory_cgroup_test: SKIP: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "not root: cannot make a cgroup"

# Where the group goes: under this process's own v1 memory group (v1 has no rule against
# processes beside child groups), or, with v2 (at /sys/fs/cgroup, or /sys/fs/cgroup/unified
# beside v1), under the root, whose children may have the memory controller.
v1=$(awk -F: '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == "memory") print $3 }' /proc/self/cgroup)
parent=
if [ -n "$v1" ] && [ -w "/sys/fs/cgroup/memory$v1" ]; then
  parent=/sys/fs/cgroup/memory$v1 limit_file=memory.limit_in_bytes
else
  for root in /sys/fs/cgroup /sys/fs/cgroup/unified; do
    grep -qw memory "$root/cgroup.controllers" 2>/dev/null || continue
    grep -qw memory "$root/cgroup.subtree_control" ||
      echo +memory >"$root/cgroup.subtree_control" 2>/dev/null || continue
    parent=$root limit_file=memory.max
    break
  done
fi
[ -n "$parent" ] || skip "no writable cgroup hierarchy with the memory controller"
group="$parent/tilefeed-test-$$"
mkdir "$group" 2>/dev/null || skip "cannot make $group"
# A cgroup is removed once empty: train's singleton MPI runtime (orted) may outlive it a little.
remove_group() {
  _rg_deadline=$(($(date +%s) + 30))
  while [ -n "$(cat "$group/inner/cgroup.procs" 2>/dev/null)" ] &&
    [ "$(date +%s)" -lt "$_rg_deadline" ]; do
    sleep 0.05
  done
  rmdir "$group/inner" "$group" 2>/dev/null
}
trap 'end_test; remove_group' EXIT
echo 1073741824 >"$group/$limit_file" || fail "cannot set $group/$limit_file"
[ "$limit_file" = memory.max ] && { echo +memory >"$group/cgroup.subtree_control" || fail "+memory"; }
mkdir "$group/inner" || fail "cannot make $group/inner"

timeout 60 "$make_demo" "$work/data" --classes 2 --train-per-class 8 --val-per-class 0 \
  --threads 1 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
# in_group LOG DEPTH: train in $group/inner, 4 steps of 16 images of 224 x 224, DEPTH slots.
in_group() {
  timeout 300 sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$group/inner" \
    "$train" --data "$work/data/train" --core synthetic:us-per-sample=1 --batch-size 16 \
    --image-size 224 --workers 1 --epochs 4 --prefetch-depth "$2" >"$work/$1" 2>&1
}
in_group refused.log 800
rc=$?
[ $rc -ne 137 ] || fail "800 slots of 2.4 MB in 1 GiB: killed (rc 137), not refused"
[ $rc -ne 0 ] || fail "800 slots of 2.4 MB in 1 GiB: rc 0"
line="prefetch_depth 800 slots x batch 16 x 224 x 224 x 3 (+ 12 bytes of label and index each) = 1926912000 bytes, more than 3/4 of the 1073741824 bytes this process may use ($group/$limit_file) = 805306368 bytes"
grep -qF "$line" "$work/refused.log" || fail "no line with the arithmetic: $line"
echo "memory_cgroup_test: refused, rc $rc: $(grep -F "prefetch_depth 800" "$work/refused.log")"
in_group fits.log 4 || fail "4 slots in 1 GiB: rc $?"
echo "memory_cgroup_test: OK"
