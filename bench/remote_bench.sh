#!/usr/bin/env bash
# remote_bench.sh CORPUS [BUILD_DIR]: WebDataset tars and HTTP-served shards against local
# tilefeed shards of the same images, with loader_bench's alternating rounds (ratios of
# the same run), and the first (cold) epoch over HTTP.
#   1. tars of CORPUS/train (Python's tarfile, WebDataset layout), and shards packed from them
#      by tilefeed-pack, so both hold the same samples in the same order;
#   2. nginx (generated config, loopback, free port) serving both;
#   3. loader_bench --data TARS --against SHARDS                 (goal >= 0.95)
#   4. loader_bench --data http://.../shards, one epoch, empty cache: the cold epoch's
#      images/s, MB/s and requests per batch; the same for the tars over HTTP
#   5. loader_bench --data http://.../shards --against SHARDS with the now warm cache (>= 0.95)
#   6. (PARTS=reads) the read stage alone (--read-only: one thread, chunks of 16 records in
#      the epoch's random order, no decode): http://.../shards without a cache against the
#      local shards, in alternating rounds of READ_SECONDS each; prints each round's ratio
#      and the median. This is where requests in flight show: a chunk's runs are about 16
#      range requests.
# Env: ROUNDS (10), BATCH (64), WORKERS (0 = all cores), SIZE (224), READ_SECONDS (3),
# PARTS ("tar cold warm"; warm runs the cold shards epoch first, to fill the cache; add
# "reads" for 6).
set -euo pipefail
CORPUS=${1:?usage: remote_bench.sh CORPUS [BUILD_DIR]}
BUILD=${2:-build/release}
ROUNDS=${ROUNDS:-10}
BATCH=${BATCH:-64}
WORKERS=${WORKERS:-0}
SIZE=${SIZE:-224}
PARTS=${PARTS:-tar cold warm}
READ_SECONDS=${READ_SECONDS:-3}
has() { [[ " $PARTS " == *" $1 "* ]]; }
BENCH="$BUILD/bench/loader_bench"
PACK="$BUILD/tools/tilefeed-pack"
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
SRC="$CORPUS"
[ -d "$CORPUS/train" ] && SRC="$CORPUS/train"
WORK=$(mktemp -d /tmp/remote-bench.XXXXXX)
NGINX_PID=
cleanup() {
  [ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== tars of $SRC (Python tarfile, WebDataset layout)"
mkdir -p "$WORK/www/tars"
/usr/bin/python3 - "$SRC" "$WORK/www/tars" <<'PY'
import os, sys, tarfile
src, out = sys.argv[1], sys.argv[2]
classes = sorted(d for d in os.listdir(src) if os.path.isdir(os.path.join(src, d)))
files = [(c, i, f) for i, c in enumerate(classes) for f in sorted(os.listdir(os.path.join(src, c)))]
per_shard = max(1, (len(files) + 3) // 4)
for s in range(0, len(files), per_shard):
    with tarfile.open("%s/train-%06d.tar" % (out, s // per_shard), "w") as tar:
        for c, label, f in files[s:s + per_shard]:
            key = c + "/" + os.path.splitext(f)[0]
            cls = "%s/cls-%d" % (out, label)
            with open(cls, "w") as h:
                h.write(str(label))
            tar.add(cls, arcname=key + ".cls")
            os.remove(cls)
            tar.add(os.path.join(src, c, f), arcname=key + ".jpg")
PY
ls "$WORK/www/tars"/*.tar
"$PACK" "$WORK/www/tars" "$WORK/www/shards" --shard-size 32MiB | tail -2
TAR_PATTERN=$(cd "$WORK/www/tars" && ls -- *.tar | sed -n '1p;$p' | tr '\n' ' ' |
  awk '{a=$1; b=$2; sub(/^train-/, "", a); sub(/\.tar$/, "", a); sub(/^train-/, "", b); sub(/\.tar$/, "", b); print "train-{" a ".." b "}.tar"}')

PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$WORK/nginx/tmp"
cat > "$WORK/nginx/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1;
pid $WORK/nginx/nginx.pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 512; }
http {
  access_log off; sendfile on; keepalive_requests 100000;
  client_body_temp_path $WORK/nginx/tmp/body; proxy_temp_path $WORK/nginx/tmp/proxy;
  fastcgi_temp_path $WORK/nginx/tmp/fastcgi; uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
  scgi_temp_path $WORK/nginx/tmp/scgi;
  server { listen 127.0.0.1:$PORT; root $WORK/www; }
}
CONF
"$NGINX" -e "$WORK/nginx/error.log" -p "$WORK/nginx/" -c "$WORK/nginx/nginx.conf" &
NGINX_PID=$!
for _ in $(seq 200); do
  curl -sf -o /dev/null "http://127.0.0.1:$PORT/shards/tilefeed-manifest.txt" && break
  sleep 0.05
done
URL="http://127.0.0.1:$PORT"
COMMON=(--batch-size "$BATCH" --workers "$WORKERS" --image-size "$SIZE")

if has tar; then
  echo "== tars against tilefeed shards of the same images"
  "$BENCH" --data "$WORK/www/tars" --against "$WORK/www/shards" --rounds "$ROUNDS" "${COMMON[@]}"
fi
if has cold || has warm; then
  echo "== cold first epoch over HTTP (shards), empty cache"
  "$BENCH" --data "$URL/shards" --remote "cache-dir=$WORK/cache" --epochs 1 --warmup 0 "${COMMON[@]}"
fi
if has cold; then
  echo "== cold first epoch over HTTP (tars), no cache"
  "$BENCH" --data "$URL/tars/$TAR_PATTERN" --epochs 1 --warmup 0 "${COMMON[@]}"
fi
if has warm; then
  echo "== HTTP with the warm cache against local shards"
  "$BENCH" --data "$URL/shards" --remote "cache-dir=$WORK/cache" --against "$WORK/www/shards" \
    --rounds "$ROUNDS" "${COMMON[@]}"
fi
if has reads; then
  echo "== read stage alone: HTTP without a cache against local shards (--read-only)"
  rate() { "$BENCH" --data "$1" --read-only --seconds "$READ_SECONDS" | sed -n 's/^read_records_per_s=//p'; }
  ratios=()
  for r in $(seq "$ROUNDS"); do
    if (( r % 2 )); then h=$(rate "$URL/shards"); l=$(rate "$WORK/www/shards")
    else l=$(rate "$WORK/www/shards"); h=$(rate "$URL/shards"); fi
    ratio=$(/usr/bin/python3 -c "print(f'{$h / $l:.4f}')")
    ratios+=("$ratio")
    echo "  round $r/$ROUNDS: http $h vs local $l records/s  ratio $ratio"
  done
  /usr/bin/python3 -c "import statistics, sys; print('  read-only ratio http/local: %.4f (median of %d rounds)' % (statistics.median(map(float, sys.argv[1:])), len(sys.argv) - 1))" "${ratios[@]}"
fi
