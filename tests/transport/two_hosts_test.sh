#!/bin/sh
# Two hosts (loopback hides what a real network shows: addresses, CURVE over a wire): a
# tilefeed-serve and a trainer (stream_main) in two network namespaces that this test makes,
# joined by a veth pair with private 10.x addresses that exist only inside the namespaces,
# stream two epochs over tcp with CURVE on. The reader allow-lists one trainer key: a trainer
# with another key is refused (and told so).
#
#   two_hosts_test.sh READER MAKE_DEMO STREAM_MAIN
#
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2's `ip`; without them it prints
# why and exits 77, which ctest reports as skipped. Every process runs under timeout, and the
# namespaces (with the veth pair inside them) are deleted on every way out.
set -u
reader=$1
make_demo=$2
stream_main=$3
skip=77

if ! command -v ip >/dev/null 2>&1; then
  echo "two_hosts_test: SKIP: no 'ip' command (apt-get install iproute2)"
  exit $skip
fi

tag="$$"
ns_reader="tilefeed-r-$tag"
ns_trainer="tilefeed-t-$tag"
# A /30 chosen from the pid, so two runs at once do not share a subnet (not that they could
# see each other: each pair lives in its own namespaces).
subnet="10.$((tag % 200 + 20)).$((tag / 200 % 250)).0"
prefix=${subnet%.0}
reader_ip="$prefix.1"
trainer_ip="$prefix.2"

. "${0%/*}/../support/shell_test.sh"
begin_test two_hosts_test
trap 'end_test; ip netns del "$ns_reader" 2>/dev/null; ip netns del "$ns_trainer" 2>/dev/null' EXIT

if ! ip netns add "$ns_reader" 2>"$work/netns.err"; then
  echo "two_hosts_test: SKIP: cannot make network namespaces here: $(cat "$work/netns.err")"
  exit $skip
fi
ip netns add "$ns_trainer" || fail "ip netns add $ns_trainer"
# The veth pair is made inside the reader's namespace with its peer put straight into the
# trainer's, so no interface or address ever appears in the caller's namespace.
ip -n "$ns_reader" link add veth-r type veth peer name veth-t netns "$ns_trainer" ||
  fail "cannot make a veth pair"
ip -n "$ns_reader" link set lo up || fail "lo up"
ip -n "$ns_trainer" link set lo up || fail "lo up"
ip -n "$ns_reader" addr add "$reader_ip/30" dev veth-r || fail "address $reader_ip"
ip -n "$ns_trainer" addr add "$trainer_ip/30" dev veth-t || fail "address $trainer_ip"
ip -n "$ns_reader" link set veth-r up || fail "veth-r up"
ip -n "$ns_trainer" link set veth-t up || fail "veth-t up"

# 4 classes x 16 training images: 64 samples, 8 batches of 8 per epoch.
timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 4 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo: $(cat "$work/make_demo.log")"
for who in reader trainer intruder; do
  timeout 30 "$reader" --curve keygen="$work/$who" >"$work/keygen.log" 2>&1 ||
    fail "--curve keygen= $who: $(cat "$work/keygen.log")"
done
mkdir "$work/allowed" && cp "$work/trainer.pub" "$work/allowed/" || fail "cannot copy trainer.pub"

endpoint="tcp://$reader_ip:5555"
# A peer may be silent for 60 s (both sides): far above what load and ASan cause.
ip netns exec "$ns_reader" timeout 600 "$reader" --data "$work/data/train" --bind "$endpoint" \
  --curve "secret-key=$work/reader.key,allow=$work/allowed" --batch-size 8 --image-size 32 --epochs 2 --workers 1 \
  --prefetch-depth 2 --slice 0/1 --no-drop-last --timeout 60 \
  >"$work/reader.log" 2>&1 &
reader_pid=$!
# The intruder below is refused only by a reader that is there: wait until it serves.
reader_endpoint "$work/reader.log" "$reader_pid"

# A trainer whose key is not on the reader's allow-list is refused during the handshake: it
# fails with a message after its timeout (no hang), and the reader logs the refusal.
ip netns exec "$ns_trainer" timeout 120 "$stream_main" --connect "$endpoint" \
  --curve-server-key "$work/reader.pub" --curve-key "$work/intruder.key" --timeout-ms 10000 \
  --epochs 2 --samples 64 >"$work/intruder.log" 2>&1
rc=$?
cat "$work/intruder.log"
[ $rc -eq 1 ] || fail "the trainer with a key not on the allow-list exited with $rc, not 1"
grep -Eq "never welcomed us|during the CURVE handshake" "$work/intruder.log" ||
  fail "the refused trainer's message does not say why"
intruder_key=$(sed -n 's/^public=//p' "$work/intruder.pub")
# The reader logs the refusal from its own I/O thread: wait for the line (or its exit).
deadline=$(($(date +%s) + 300))
until grep -qF -e "$intruder_key is not on the allow-list" "$work/reader.log"; do
  running "$reader_pid" && [ "$(date +%s)" -lt "$deadline" ] ||
    fail "the reader did not log the refused key"
  sleep 0.05
done

# The allowed trainer holds the reader's public key and its own key pair. ZeroMQ reconnects
# until the reader has bound.
ip netns exec "$ns_trainer" timeout 300 "$stream_main" --connect "$endpoint" \
  --curve-server-key "$work/reader.pub" --curve-key "$work/trainer.key" --epochs 2 --samples 64 \
  --timeout-ms 60000 \
  >"$work/trainer.log" 2>&1
rc=$?
cat "$work/trainer.log"
[ $rc -eq 0 ] || fail "the trainer exited with $rc"
# The reader finishes once the trainer has said bye.
wait "$reader_pid"
reader_rc=$?
[ $reader_rc -eq 0 ] || fail "the reader exited with $reader_rc"
grep -q "done: 16 batches" "$work/reader.log" || fail "the reader did not send 16 batches"
# The addresses exist only inside the namespaces.
ip -o addr show | grep -q "inet $reader_ip/" && fail "$reader_ip is visible outside the namespaces"
echo "two_hosts_test: OK ($ns_reader $reader_ip -> $ns_trainer $trainer_ip, CURVE, allow-list refused the other key)"
