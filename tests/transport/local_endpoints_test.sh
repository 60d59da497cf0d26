#!/bin/sh
# Who can reach a reader or trainer on this host (issue 39, items 1 and 14), with the real tools.
#
# 1. IPv6 loopback, as the docs count it: `--bind tcp://[::1]:P` was "No such device"
#    (ZeroMQ without ZMQ_IPV6) and `--bind tcp://ip6-localhost:P` "not loopback" (only a
#    name's IPv4 addresses were looked at). Now both serve on [::1] and a trainer trains from
#    either spelling. ip6-localhost is Debian's default /etc/hosts line, bind-mounted, since
#    not every host has it; skipped, saying why, on a host without ::1.
# 2. Another local user must neither feed a trainer nor be fed by a reader. With
#    XDG_RUNTIME_DIR unset, shm://NAME's control socket was /tmp/tilefeed-<uid>-NAME.sock: a
#    second user bound it first and `train --readers shm://NAME` trained a whole epoch on that
#    user's data, rc 0. Now the socket lies in /tmp/tilefeed-<uid>/ (made 0700, refused when
#    another user owns it or others can write it), and both ends of an ipc:// or shm://
#    socket check the peer's uid (SO_PEERCRED). The other user is nobody (setpriv
#    --reuid=65534); this part is skipped, saying why, where the test cannot switch to it.
#
# Runs in a private mount namespace with its own /tmp (a tmpfs, mode 1777 like a shared /tmp)
# and /etc/hosts, so what it plants touches no other test; skipped (77) without root or
# unshare -m. A trainer asking shm:// of a reader without shared memory: endpoint_test.cc.
#
#   local_endpoints_test.sh SERVE TRAIN MAKE_DEMO
set -u
serve=$1
train=$2
make_demo=$3
if [ "${LOCAL_ENDPOINTS_INSIDE:-}" != 1 ]; then
  if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
    echo "local_endpoints_test: SKIP: needs root and unshare -m"
    exit 77
  fi
  LOCAL_ENDPOINTS_INSIDE=1 exec unshare -m /bin/sh "$0" "$@"
fi
mount -t tmpfs -o mode=1777 tmpfs /tmp || {
  echo "local_endpoints_test: SKIP: cannot mount a private /tmp"
  exit 77
}
unset XDG_RUNTIME_DIR TMPDIR
umask 022
me=$(id -u)
work=$(mktemp -d /tmp/local-endpoints.XXXXXX) || exit 1
other=$(mktemp -d /tmp/other-user.XXXXXX) || exit 1
# Processes started here, stopped and reaped on every way out (the tmpfs goes with the
# namespace).
pids=
cleanup() {
  for pid in $pids; do kill -TERM "$pid" 2>/dev/null; done
  for pid in $pids; do wait "$pid" 2>/dev/null; done
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() {
  echo "local_endpoints_test: FAIL: $*"
  for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done
  exit 1
}

# start NAME COMMAND...: runs COMMAND (a program, not a shell function, so that $pid is the
# process itself) with its output in NAME.log, and returns once it has said where it serves
# ($endpoint). Read from a pipe, not polled: a cat ($drain) then copies the rest until
# COMMAND exits.
start() {
  log=$work/$1
  shift
  mkfifo "$log.fifo"
  "$@" >"$log.fifo" 2>&1 &
  pid=$!
  exec 3<"$log.fifo"
  endpoint=
  while IFS= read -r line <&3; do
    echo "$line" >>"$log.log"
    case $line in *" on ipc://"* | *" on tcp://"*) endpoint=${line##* on } && break ;; esac
  done
  cat <&3 >>"$log.log" &
  drain=$!
  exec 3<&-
  pids="$pids $pid $drain"
  [ -n "$endpoint" ] || fail "${log##*/} exited before serving"
}

as_other="setpriv --reuid=65534 --regid=65534 --clear-groups"
sizes="--batch-size 4 --image-size 32"
trainer="--core synthetic --classes 3 $sizes --epochs 1 --reader timeout=60"
reader="$sizes --epochs 1 --drop-last --workers 1 --timeout 60"
timeout 300 "$make_demo" "$other/data" --classes 3 --train-per-class 8 --val-per-class 1 \
  --threads 2 >"$work/make_demo.log" 2>&1 || fail "tilefeed-make-demo failed"
chown -R 65534:65534 "$other"

# 1. IPv6 loopback, by address and by name.
if grep -q "^0\{31\}1 " /proc/net/if_inet6 2>/dev/null; then
  printf '127.0.0.1 localhost\n::1 ip6-localhost ip6-loopback\n' >"$work/hosts"
  mount --bind "$work/hosts" /etc/hosts || fail "cannot bind-mount /etc/hosts"
  n=0
  for host in "[::1]" ip6-localhost; do
    n=$((n + 1))
    start "ipv6_serve$n" "$serve" --data "$other/data/train" $reader --bind "tcp://$host:*"
    port=${endpoint##*:}
    [ "$endpoint" = "tcp://[::1]:$port" ] || fail "--bind tcp://$host:* serves on $endpoint"
    timeout 120 "$train" --readers "tcp://$host:$port" $trainer >"$work/ipv6_train$n.log" 2>&1 ||
      fail "train --readers tcp://$host:$port failed"
    echo "local_endpoints_test: --bind tcp://$host:* serves on $endpoint; train reads" \
      "tcp://$host:$port"
  done
else
  echo "local_endpoints_test: SKIP (IPv6): this host has no ::1"
fi

if ! $as_other "$serve" --help >/dev/null 2>&1; then
  echo "local_endpoints_test: SKIP (local users): cannot run $serve as uid 65534 (setpriv)"
  echo "local_endpoints_test: OK"
  exit 0
fi

# 2a. shm://NAME. The other user plants the directory this user's shm:// sockets now lie in,
# serves its data there and links the old socket name to it: whichever name a trainer looks
# for, it finds that user's reader.
job="job-$$"
$as_other mkdir "/tmp/tilefeed-$me" || fail "uid 65534 cannot mkdir in /tmp"
$as_other ln -s "/tmp/tilefeed-$me/$job.sock" "/tmp/tilefeed-$me-$job.sock"
start other_shm $as_other "$serve" --data "$other/data/train" $reader \
  --bind "ipc:///tmp/tilefeed-$me/$job.sock"
timeout 120 "$train" --readers "shm://$job" $trainer >"$work/train_shm.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "train --readers shm://$job trained on uid 65534's reader, rc 0"
refusal="shm:// directory /tmp/tilefeed-$me: refusing it (owner uid 65534, mode 0755)"
grep -q "$refusal" "$work/train_shm.log" || fail "the trainer does not name the directory"
echo "local_endpoints_test: trainer: $(grep -o "shm:// directory .*" "$work/train_shm.log")"
timeout 120 "$serve" --data "$other/data/train" --bind "shm://$job" >"$work/serve_shm.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "tilefeed-serve --bind shm://$job in uid 65534's directory: rc $rc"
grep -q "$refusal" "$work/serve_shm.log" || fail "the reader does not name the directory"

# 2b. ipc://PATH in a directory both users may write (mode 1777): the uid behind the socket
# decides. The other user binds the path first; this user's trainer refuses it.
mkdir -m 1777 /tmp/jobs
start other_ipc $as_other "$serve" --data "$other/data/train" $reader \
  --bind ipc:///tmp/jobs/reader.sock
timeout 120 "$train" --readers ipc:///tmp/jobs/reader.sock $trainer >"$work/train_ipc.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "train --readers ipc:///tmp/jobs/reader.sock trained on uid 65534's reader"
refusal="reader at ipc:///tmp/jobs/reader.sock is not this user's: peer uid 65534, this"
grep -q "$refusal process's uid $me" "$work/train_ipc.log" || fail "the trainer does not name both uids"
echo "local_endpoints_test: trainer: $(grep -o "reader at .* is not this user's: .*" "$work/train_ipc.log")"

# 2c. The reader's side: this user serves on a socket anyone may connect to (umask 0); the
# other user's trainer is refused, and the reader says so with both uids.
umask 0
start mine_ipc "$serve" --data "$other/data/train" $reader --bind ipc:///tmp/jobs/mine.sock
umask 022
HOME=$other timeout 120 $as_other "$train" --readers ipc:///tmp/jobs/mine.sock $trainer \
  >"$work/other_train.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "uid 65534's trainer was served by uid $me's reader"
kill -TERM "$pid"
wait "$pid"
wait "$drain"  # the reader's last lines are in its log
grep -q "refused a peer at [^ ]*:65534:65534:[0-9]*: peer uid 65534, this process's uid $me" \
  "$work/mine_ipc.log" || fail "the reader does not name the other user's uid"
echo "local_endpoints_test: reader: $(grep -o "refused a peer at .*" "$work/mine_ipc.log" | head -1)"
echo "local_endpoints_test: OK"
