#!/bin/sh
# Two hosts for real (loopback hides addressing and launcher faults): two network namespaces h0
# and h1 joined by a veth pair (private 10.x addresses that exist only inside them, as
# tests/transport/two_hosts_test.sh makes them), and `poprun --hosts h0,h1 --instances 4 ...
# train` run from h0 through OpenMPI's own launcher: an rsh agent (plm_rsh_agent) that enters
# the host's namespace starts an orted on each, and OpenMPI's TCP transport (btl self,tcp;
# btl_tcp_if_include and oob_tcp_if_include the veth subnet) carries the all-reduce between the
# hosts.
#   1. --data: 2 instances per host; the parameters are identical on all 4 (train checks),
#      equal to the same job on one host, and the samples of each epoch are disjoint and
#      cover the dataset (TILEFEED_TRACE_SAMPLES). The veth counters show the traffic crossed.
#   2. --readers: four tilefeed-serve readers, each on the host opposite its instance, so
#      every instance's batches cross the link too (CURVE on); same checks, and the same
#      parameters as the local-read run.
#
#   two_hosts_train_test.sh TRAIN POPRUN READER MAKE_DEMO
#
# Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2's `ip`; without them it prints
# why and exits 77 (ctest: skipped). Every process runs under timeout; the namespaces (and
# the veth pair inside them) are deleted on every way out.
set -u
train=$1
poprun=$2
reader=$3
make_demo=$4
skip=77

if ! command -v ip >/dev/null 2>&1; then
  echo "two_hosts_train_test: SKIP: no 'ip' command (apt-get install iproute2)"
  exit $skip
fi

tag="$$"
subnet_base="10.$((tag % 200 + 20)).$((tag / 200 % 250))"
ip0="$subnet_base.1"
ip1="$subnet_base.2"
subnet="$subnet_base.0/30"

. "${0%/*}/../support/shell_test.sh"
begin_test two_hosts_train_test
trap 'end_test; ip netns del "tilefeed-h0-$tag" 2>/dev/null; ip netns del "tilefeed-h1-$tag" 2>/dev/null' EXIT

if ! ip netns add "tilefeed-h0-$tag" 2>"$work/netns.err"; then
  echo "two_hosts_train_test: SKIP: cannot make network namespaces here: $(cat "$work/netns.err")"
  exit $skip
fi
ip netns add "tilefeed-h1-$tag" || fail "ip netns add"
# The pair is made inside h0 with its peer put straight into h1: nothing appears outside.
ip -n "tilefeed-h0-$tag" link add veth-h0 type veth peer name veth-h1 netns "tilefeed-h1-$tag" ||
  fail "cannot make a veth pair"
ip -n "tilefeed-h0-$tag" addr add "$ip0/30" dev veth-h0 || fail "address $ip0"
ip -n "tilefeed-h1-$tag" addr add "$ip1/30" dev veth-h1 || fail "address $ip1"
for h in h0 h1; do
  ip -n "tilefeed-$h-$tag" link set lo up || fail "lo up in $h"
  ip -n "tilefeed-$h-$tag" link set "veth-$h" up || fail "veth up in $h"
done

# OpenMPI's rsh agent: called as AGENT HOST COMMAND..., it runs COMMAND (a shell line) in
# HOST's namespace. mpirun itself runs in h0; it starts an orted on each host this way.
# The namespaces share one /tmp and one hostname, which real hosts never do: each orted gets
# its own session directory, or the two race on mkdir of the same one and truncate each
# other's hwloc topology file (<session dir>/hwloc.sm) while mapping it.
cat >"$work/agent.sh" <<AGENT
#!/bin/sh
host=\$1
shift
echo "\$host" >>"$work/agent-hosts"
mkdir -p "$work/tmp-\$host"
exec ip netns exec "tilefeed-\$host-$tag" env OMPI_MCA_orte_tmpdir_base="$work/tmp-\$host" \\
  /bin/sh -c "\$*"
AGENT
chmod +x "$work/agent.sh"
export OMPI_MCA_plm_rsh_agent="$work/agent.sh"
export OMPI_MCA_oob_tcp_if_include="$subnet"
export OMPI_MCA_btl_tcp_if_include="$subnet"
export OMPI_MCA_btl="self,tcp"
export OMPI_MCA_btl_vader_backing_directory="$work"

# 4 classes x 16: 64 samples, 16 per instance, 4 batches of 4 each, 4 steps an epoch.
timeout 300 "$make_demo" "$work/data" --classes 4 --train-per-class 16 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo"
common="--image-size 32 --batch-size 4 --epochs 2 --workers 1 --core reference:hidden=16 --seed 3 --check-every 1 --collective-timeout 300"

# check_epochs NAME: each of epochs 0 and 1 of NAME's traces holds 0..63 once each.
check_epochs() {
  [ "$(ls "$work/$1".trace.* | wc -l)" -eq 4 ] || fail "$1: not 4 trace files"
  for e in 0 1; do
    cat "$work/$1".trace.* | awk -v e=$e '$1 == e {print $2}' | sort -n >"$work/$1.seen"
    [ "$(wc -l <"$work/$1.seen")" -eq 64 ] || fail "$1: epoch $e trained $(wc -l <"$work/$1.seen") samples, not 64"
    [ "$(uniq "$work/$1.seen" | wc -l)" -eq 64 ] || fail "$1: epoch $e repeats samples"
  done
}
checksum() { sed -n 's/.*parameter checksum \([0-9]*\) identical on all 4 replicas.*/\1/p' "$work/$1.log"; }
veth_bytes() {
  ip -n "tilefeed-h1-$tag" -s link show veth-h1 | awk '/RX:/ {getline; print $1}'
}

# The reference: the same job on one host (this namespace, shared memory).
(unset OMPI_MCA_plm_rsh_agent OMPI_MCA_oob_tcp_if_include OMPI_MCA_btl_tcp_if_include OMPI_MCA_btl
 timeout 600 "$poprun" --instances 4 -- env "TILEFEED_TRACE_SAMPLES=$work/one.trace" "$train" \
   --data "$work/data/train" $common >"$work/one.log" 2>&1) || fail "the one-host job failed"
one=$(checksum one)
[ -n "$one" ] || fail "the one-host job printed no checksum"
check_epochs one

# 1. Two hosts, local reads.
before=$(veth_bytes)
timeout 600 ip netns exec "tilefeed-h0-$tag" "$poprun" --hosts h0,h1 --instances 4 -- \
  env "TILEFEED_TRACE_SAMPLES=$work/two.trace" "$train" --data "$work/data/train" $common \
  >"$work/two.log" 2>&1 || fail "the two-host job failed"
after=$(veth_bytes)
grep -qx h1 "$work/agent-hosts" || fail "mpirun never started an orted on h1"
two=$(checksum two)
[ "$two" = "$one" ] || fail "two hosts gave parameter checksum '$two', one host '$one'"
check_epochs two
crossed=$((after - before))
[ "$crossed" -gt 100000 ] || fail "only $crossed bytes crossed the veth"
echo "two_hosts_train_test: --data: 4 instances on h0,h1, checksum $two = one host, $crossed bytes into h1"

# 2. Readers across the link: the reader of instance i runs on the other host.
timeout 30 "$reader" --curve keygen="$work/reader" >"$work/keygen.log" 2>&1 || fail "keygen"
# A reader on a non-loopback address needs CURVE with an allow-list: the trainers' key.
timeout 30 "$reader" --curve keygen="$work/trainer" >>"$work/keygen.log" 2>&1 || fail "keygen"
endpoints=
reader_pids=
for i in 0 1 2 3; do
  if [ $i -lt 2 ]; then host=h1 addr=$ip1; else host=h0 addr=$ip0; fi
  ip netns exec "tilefeed-$host-$tag" timeout 900 "$reader" --data "$work/data/train" \
    --bind "tcp://$addr:$((5555 + i))" --curve "secret-key=$work/reader.key,allow=$work/trainer.pub" --batch-size 4 \
    --timeout 60 \
    --image-size 32 --epochs 2 --seed 3 --workers 1 --prefetch-depth 2 --drop-last \
    --slice $i/4 >"$work/reader$i.log" 2>&1 &
  reader_pids="$reader_pids $!"
  endpoints="$endpoints${endpoints:+,}tcp://$addr:$((5555 + i))"
done
before=$(veth_bytes)
timeout 600 ip netns exec "tilefeed-h0-$tag" "$poprun" --hosts h0,h1 --instances 4 -- \
  env "TILEFEED_TRACE_SAMPLES=$work/remote.trace" "$train" --readers "$endpoints" --classes 4 $common \
  --reader "curve-server-key=$work/reader.pub,curve-key=$work/trainer.key,timeout=60" \
  >"$work/remote.log" 2>&1 ||
  fail "the two-host job with readers failed"
after=$(veth_bytes)
for p in $reader_pids; do wait "$p" || fail "a reader exited with $?"; done
check_epochs remote
remote=$(checksum remote)
[ -n "$remote" ] || fail "the job with readers printed no checksum"
crossed=$((after - before))
# 2 instances' batches (64 x 32 x 32 x 3 bytes an epoch each half) cross into h1.
[ "$crossed" -gt 300000 ] || fail "only $crossed bytes crossed the veth with readers"
[ "$remote" = "$one" ] || fail "readers across the link gave checksum $remote, local reads $one"
echo "two_hosts_train_test: --readers: every instance fed across the link, checksum $remote = local reads, $crossed bytes into h1"
# The addresses exist only inside the namespaces.
ip -o addr show | grep -q "inet $ip0/" && fail "$ip0 is visible outside the namespaces"
echo "two_hosts_train_test: OK"
