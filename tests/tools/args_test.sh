#!/bin/sh
# Strict arguments (a negative count once wrapped to a huge one and trained on): every tool,
# given a bad value for an option, exits 2 during argument parsing -- before it opens any
# dataset -- with exactly one line on stderr that names the option, the rule and the value. One
# table row per bad value.
#
#   args_test.sh NAME=PATH...   (train=..., tilefeed-serve=..., loader_bench=..., ...)
#
# Rows of a tool that is not given (benchmarks off) are skipped and counted.
set -u
set -f  # the rows' words are split on blanks, never globbed

. "${0%/*}/../support/shell_test.sh"
begin_test args_test
mkdir "$work/data"  # an empty folder: a tool that got past its arguments fails opening it
for given in "$@"; do
  name=${given%%=*}
  printf '%s\n' "${given#*=}" >"$work/bin.$name"
done

D=$work/data
rows() {
  cat <<EOF
train|--epochs must be at least 1, got -1|--data $D --epochs -1
train|--epochs must be at least 1, got 0|--data $D --epochs 0
train|--max-steps must be at least 0, got -3|--data $D --max-steps -3
train|--batch-size must be at least 1, got 0|--data $D --batch-size 0
train|--batch-size must be at least 1, got -1|--data $D --batch-size -1
train|--workers must be auto or between 0 and 1024, got -2|--data $D --workers -2
train|--workers must be auto or between 0 and 1024, got 'many'|--data $D --workers many
train|--cpu-share must be above 0 and at most 1, got 1.5|--data $D --workers auto --cpu-share 1.5
train|--memory-budget must be a size such as 20GiB, 512M or 1000000 (bytes), got 'lots'|--data $D --memory-budget lots
train|--prefetch-depth must be auto or between 1 and 1048576, got 0|--data $D --prefetch-depth 0
train|--seed must be at least 0, got -1|--data $D --seed -1
train|--image-size: '0': size must be between 1 and 16384, got 0|--data $D --image-size 0
train|--image-size: '160,8:224,4:192': epochs must rise (4 after 8)|--data $D --image-size 160,8:224,4:192
train|--core hidden must be between 1 and 65536, got 0|--data $D --core reference:hidden=0
train|--classes must be at least 0, got -1|--data $D --classes -1
train|--core us-per-sample must be at least 0, got -5|--data $D --core synthetic:us-per-sample=-5
train|--sgd lr must be at least 0, got -0.1|--data $D --sgd lr=-0.1
train|--sgd momentum must be between 0 and 1, got 2|--data $D --sgd momentum=2
train|--sgd weight-decay must be at least 0, got -1|--data $D --sgd weight-decay=-1
train|--seconds must be at least 0, got -1|--data $D --seconds -1
train|--check-every must be at least 0, got -1|--data $D --check-every -1
train|--checkpoint-every must be at least 0, got -1|--data $D --checkpoint-every -1
train|--bad-sample-lines must be at least 0, got -1|--data $D --bad-sample-lines -1
train|--reader credits must be at least 1, got 0|--readers tcp://127.0.0.1:5555 --reader credits=0
train|--reader timeout must be between 0.001 and 1000000, got 0|--data $D --reader timeout=0
train|--reader reconnect must be between 0.001 and 1000000, got -1|--data $D --reader reconnect=-1
train|--reader data-timeout must be between 0 and 1000000, got -1|--data $D --reader data-timeout=-1
train|--collective-timeout must be between 0 and 1000000, got -1|--data $D --collective-timeout -1
train|--tiles io must be between 1 and 64, got 0|--data $D --tiles io=0
train|--tiles staging-depth must be between 1 and 64, got 65|--data $D --tiles staging-depth=65
train|--tiles compute-threads must be between 1 and 1024, got 0|--data $D --tiles compute-threads=0
train|--gradient-accumulation must be between 1 and 4096, got 0|--data $D --gradient-accumulation 0
train|--remote remote-retries must be between 0 and 20, got -1|--data $D --remote remote-retries=-1
train|--remote remote-in-flight must be between 1 and 64, got 0|--data $D --remote remote-in-flight=0
train|--remote has no key 'cache' (its keys: cache-dir, cache-limit, s3-endpoint, s3-addressing, remote-retries, remote-in-flight)|--data $D --remote cache=x
train|--remote: 1 required KEY=VALUE,... missing|--data $D --remote=
train|--remote must be KEY=VALUE[,KEY=VALUE...] with KEY one of cache-dir, cache-limit, s3-endpoint, s3-addressing, remote-retries, remote-in-flight, got ','|--data $D --remote ,
train|--remote must be KEY=VALUE[,KEY=VALUE...] with KEY one of cache-dir, cache-limit, s3-endpoint, s3-addressing, remote-retries, remote-in-flight, got 'remote-retries=1,'|--data $D --remote remote-retries=1,
train|--remote names remote-retries twice|--data $D --remote remote-retries=1,remote-retries=2
train|--remote s3-addressing must be one of auto,virtual,path, got 'both'|--data $D --remote s3-addressing=both
train|--remote remote-retries must be an integer, got '1.5'|--data $D --remote remote-retries=1.5
train|--core has no key 'hidden' (its keys: us-per-sample)|--data $D --core synthetic:hidden=8
train|--core must be reference[:hidden=N] or synthetic[:us-per-sample=US], got 'resnet'|--data $D --core resnet
train|--sgd has no key 'learning-rate' (its keys: lr, momentum, weight-decay)|--data $D --sgd learning-rate=0.1
train|--reader has no key 'credit' (its keys: credits, timeout, data-timeout, reconnect, check-pixels, curve-server-key, curve-key)|--data $D --reader credit=4
train|--resume: later not in {if-present}|--data $D --resume later
tilefeed-serve|--remote remote-retries must be between 0 and 20, got 21|--data $D --remote remote-retries=21
tilefeed-serve|--remote has no key 'retries' (its keys: cache-dir, cache-limit, s3-endpoint, s3-addressing, remote-retries, remote-in-flight)|--data $D --remote retries=3
tilefeed-pack|--remote cache-limit must be at least 4MiB, got 1M|$D $work/out --remote cache-limit=1M
tilefeed-inspect|--remote remote-in-flight must be between 1 and 64, got 65|$D --remote remote-in-flight=65
train|--metrics interval must be above 0, got 0|--data $D --metrics interval=0
train|--metrics has no key 'path' (its keys: file, interval, port, bind)|--data $D --metrics path=m.jsonl
train|--metrics port=127.0.0.1:70000: PORT must be between 1 and 65535 (or * for a free one)|--data $D --metrics port=127.0.0.1:70000
train|--metrics port=:9400: HOST '' is not a host name or address|--data $D --metrics port=:9400
train|--metrics port=*:9400: HOST '*' is not loopback|--data $D --metrics port=*:9400
train|--metrics port=[::]:9400: HOST '::' is not loopback|--data $D --metrics port=[::]:9400
train|--metrics bind=0.0.0.0 needs port=PORT|--data $D --metrics file=m.jsonl,bind=0.0.0.0
train|--metrics port=127.0.0.1:9400 names a HOST and bind=0.0.0.0 another|--data $D --metrics port=127.0.0.1:9400,bind=0.0.0.0
train|--readers must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://127.0.0.1:99999': PORT must be between 1 and 65535|--readers tcp://127.0.0.1:5555,tcp://127.0.0.1:99999
train|--readers must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://127.0.0.1:0': PORT must be between 1 and 65535|--readers tcp://127.0.0.1:0
train|--epochs must be an integer, got '2.5'|--data $D --epochs 2.5
train|augment: RandomErasing p must be between 0 and 1, got 1.5 at column 19 of 'RandomErasing(1.5)'|--data $D --augment RandomErasing(1.5)
train|augment must start with RandomResizedCrop (train mode draws the crop before the decode), got 'RandomErasing()'|--data $D --augment RandomErasing()
tilefeed-serve|augment: unknown op 'Rotate' (the ops: RandomResizedCrop, RandomHorizontalFlip, ColorJitter, RandAugment, TrivialAugmentWide, RandomErasing, RandomGrayscale) at column 1 of 'Rotate(3)'|--data $D --augment Rotate(3)
loader_bench|augment: RandAugment magnitude must be below num_magnitude_bins (31), got 31 at column 18 of 'RandAugment(2,31)'|--data $D --augment RandAugment(2,31)
tilefeed-serve|--batch-size must be at least 1, got -4|--data $D --batch-size -4
tilefeed-serve|--batch-size must be at most 18446744073709551615, got 99999999999999999999|--data $D --batch-size 99999999999999999999
tilefeed-serve|--bind must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://127.0.0.1:1;0.0.0.0:5603': ';' is ZeroMQ's SOURCE;DEST syntax|--data $D --bind tcp://127.0.0.1:1;0.0.0.0:5603
tilefeed-serve|--bind must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'bogus': not tcp://HOST:PORT|--data $D --bind bogus
tilefeed-serve|--remote cache-limit must be a size such as 20GiB|--data $D --remote cache-limit=abc
tilefeed-serve|--data: Path does not exist|--data $work/missing
tilefeed-pack|SRC: Path does not exist|$work/missing $work/out
tilefeed-inspect|PATH: Path does not exist|$work/missing
train|--readers must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'foo://bar': scheme foo:// is not|--readers foo://bar --data $D
train|--readers must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://127.0.0.1:1;127.0.0.1:2': ';'|--readers tcp://127.0.0.1:1;127.0.0.1:2
train|--remote cache-limit must be a size such as 20GiB|--data $D --remote cache-limit=abc
train|--batch-size must be at most 18446744073709551615, got 99999999999999999999|--data $D --batch-size 99999999999999999999
train|--data: Path does not exist|--data $work/missing
tilefeed-serve|--bind must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://127.0.0.1:99999': PORT must be between 1 and 65535 (or * for a free one)|--data $D --bind tcp://127.0.0.1:99999
tilefeed-serve|--epochs must be at least 1, got 0|--data $D --epochs 0
tilefeed-serve|--epochs must be at least 1, got -1|--data $D --epochs -1
tilefeed-serve|--image-size: '16385': size must be between 1 and 16384, got 16385|--data $D --image-size 16385
tilefeed-serve|--image-size: 'ramp:192,160,0,8': the ramp's start size is above its end size|--data $D --image-size ramp:192,160,0,8
tilefeed-serve|--workers must be auto or between 0 and 1024, got -1|--data $D --workers -1
tilefeed-serve|--cpu-share must be above 0 and at most 1, got 0|--data $D --cpu-share 0
tilefeed-serve|--prefetch-depth must be auto or between 1 and 1048576, got 0|--data $D --prefetch-depth 0
tilefeed-serve|--memory-budget must be a size such as 20GiB, 512M or 1000000 (bytes), got '1x'|--data $D --memory-budget 1x
tilefeed-serve|--seed must be at least 0, got -1|--data $D --seed -1
tilefeed-serve|--resume must be a loader state line: not a tilefeed loader state (v1)|--data $D --resume bogus
tilefeed-serve|--heartbeat must be between 0.001 and 3600, got 0|--data $D --heartbeat 0
tilefeed-serve|--timeout must be between 0.001 and 1000000, got -5|--data $D --timeout -5
tilefeed-serve|--slice must be INDEX/COUNT with 0 <= INDEX < COUNT, got '2/2'|--data $D --slice 2/2
tilefeed-serve|--slice must be INDEX/COUNT with 0 <= INDEX < COUNT, got 'x'|--data $D --slice x
tilefeed-serve|--split: bogus not in|--data $D --split bogus
tilefeed-serve|--bad-sample-lines must be at least 0, got -1|--data $D --bad-sample-lines -1
tilefeed-serve|--metrics port=99999: PORT must be between 1 and 65535 (or * for a free one)|--data $D --metrics port=99999
tilefeed-serve|--metrics interval must be above 0, got -1|--data $D --metrics interval=-1
tilefeed-serve|--metrics has no key 'intervals' (its keys: file, interval, port, bind)|--data $D --metrics intervals=5
tilefeed-serve|--metrics port=10.1.2.3:9400: HOST '10.1.2.3' is not loopback|--data $D --metrics port=10.1.2.3:9400
tilefeed-serve|--metrics bind=0.0.0.0 needs port=PORT|--data $D --metrics bind=0.0.0.0
tilefeed-serve|--curve has no key 'secret' (its keys: keygen, secret-key, allow)|--data $D --curve secret=r.key
tilefeed-serve|--curve allow= needs secret-key=FILE|--data $D --curve allow=t.pub
tilefeed-serve|--bind tcp://*:9400: HOST '*' is not loopback|--data $D --bind tcp://*:9400
tilefeed-serve|--metrics port=*:9400: HOST '*' is not loopback|--data $D --metrics port=*:9400
tilefeed-serve|--bind must be tcp://HOST:PORT, ipc://PATH or shm://NAME: endpoint 'tcp://:9400': HOST '' is not a host name or address|--data $D --bind tcp://:9400
tilefeed-serve|--metrics port=:9400: HOST '' is not a host name or address|--data $D --metrics port=:9400
tilefeed-pack|--workers must be between 0 and 1024, got -3|$D $work/out --workers -3
tilefeed-pack|--workers must be an integer, got 'auto'|$D $work/out --workers auto
tilefeed-pack|--shard-size must be above 0, got '0'|$D $work/out --shard-size 0
tilefeed-pack|--interval-width must be between 8 and 65535, got 4|$D $work/out --interval-width 4
tilefeed-pack|--metrics interval must be above 0, got -1|$D $work/out --metrics interval=-1
tilefeed-pack|--metrics has no key 'port' (its keys: file, interval)|$D $work/out --metrics port=9400
tilefeed-pack|--codec: coefficients not in|$D $work/out --codec coefficients
tilefeed-pack|--raw-size resizes images to raw pixels; it needs --codec raw (the codec is auto)|$D $work/out --raw-size 64x64
tilefeed-pack|--raw-size resizes images to raw pixels; it needs --codec raw (the codec is jpeg)|$D $work/out --codec jpeg --raw-size 64x64
tilefeed-make-demo|--train-per-class must be between 1 and 1000000, got 0|$work/demo --train-per-class 0
tilefeed-make-demo|--val-per-class must be between 0 and 1000000, got -1|$work/demo --val-per-class -1
tilefeed-make-demo|--classes must be between 1 and|$work/demo --classes 0
tilefeed-make-demo|--threads must be between 1 and 1024, got 0|$work/demo --threads 0
tilefeed-make-demo|--seed must be at least 0, got -1|$work/demo --seed -1
tilefeed-inspect|--split: bogus not in|$D --split bogus
poprun|--instances must be at least 1, got 0|--instances 0 ./train
poprun|--instances must be at least 1, got -2|-n -2 ./train
poprun|--replicas-per-instance must be at least 1, got 0|--instances 2 --replicas-per-instance 0 ./train
poprun|--cores-per-instance must be at least 0, got -1|--instances 2 --cores-per-instance -1 ./train
poprun|unknown option --bogus|--instances 2 --bogus ./train
loader_bench|--epochs must be at least 1, got -1|--data $D --epochs -1
loader_bench|--epochs must be at least 1, got 0|--data $D --epochs 0
loader_bench|--batch-size must be at least 1, got -1|--data $D --batch-size -1
loader_bench|--image-size: '0': size must be between 1 and 16384, got 0|--data $D --image-size 0
loader_bench|--workers must be auto or between 0 and 1024, got -1|--data $D --workers -1
loader_bench|--cpu-share must be above 0 and at most 1, got -1|--data $D --cpu-share -1
loader_bench|--prefetch-depth must be auto or between 1 and 1048576, got 0|--data $D --prefetch-depth 0
loader_bench|--memory-budget must be a size such as 20GiB, 512M or 1000000 (bytes), got '-5'|--data $D --memory-budget -5
loader_bench|--seconds must be above 0, got -1|--data $D --seconds -1
loader_bench|--warmup must be at least 0, got -1|--data $D --warmup -1
loader_bench|--seed must be at least 0, got -1|--data $D --seed -1
loader_bench|--coalesce-gap must be at least 0, got -1|--data $D --coalesce-gap -1
loader_bench|--local-block must be at least 0, got -1|--data $D --local-block -1
loader_bench|--local-window must be at least 1, got 0|--data $D --local-window 0
loader_bench|--interval must be at least 0, got -1|--data $D --interval -1
loader_bench|--rounds must be at least 1, got 0|--data $D --rounds 0
loader_bench|--round-batches must be at least 1, got -1|--data $D --round-batches -1
loader_bench|--remote cache-limit must be at least 4MiB, got 1M|--data $D --remote cache-limit=1M
loader_bench|--split: bogus not in|--data $D --split bogus
loader_bench|--metrics interval must be above 0, got 0|--data $D --metrics interval=0
stall_bench|--workers must be between 1 and 1024, got 0|--data $D --workers 0
stall_bench|--batch-size must be at least 1, got -1|--data $D --batch -1
stall_bench|--demands must be above 0, got -1|--data $D --demands 0.5,-1
stall_bench|--tolerance must be between 0 and 1, got 2|--data $D --tolerance 2
stall_bench|--metrics interval must be above 0, got 0|--data $D --metrics file=m.jsonl,interval=0
codec_bench|--files must be at least 1, got -1|--data $D --files -1
codec_bench|--size must be between 16 and 4096, got 0|--data $D --size 0
codec_bench|--reps must be at least 1, got 0|--data $D --reps 0
codec_bench|--threads must be between 1 and 1024, got 0|--data $D --threads 0
codec_bench|--warmup must be at least 0, got -1|--data $D --warmup -1
codec_bench|--interval-width must be between 0 and 65535, got -1|--data $D --interval-width -1
codec_bench|--group-pixels must be between 1 and 65535, got 0|--data $D --group-pixels 0
transport_bench|--batch must be at least 1, got -1|--batch -1
transport_bench|--workers must be between 0 and 1024, got -1|--workers -1
transport_bench|--warmup must be at least 0, got -1|--warmup -1
index_bench|--files must be at least 1, got 0|--make-tree $work/tree --files 0
index_bench|--threads must be between 1 and 1024, got -1|$D --threads -1
allreduce_bench|--steps must be between 2 and 100000, got 1|--steps 1
collective_bench|--floats must be at least 1, got -1|--floats -1
EOF
}

# The spellings retired before the first release (no aliases: the project has none) are unknown
# arguments, refused like any other: one line, exit code 2.
old_spellings() {
  cat <<EOF
tilefeed-serve|unknown argument --shard (--help lists the options)|--data $D --shard 0/2
tilefeed-serve|unknown argument --heartbeat-ms (--help lists the options)|--data $D --heartbeat-ms 500
tilefeed-serve|unknown argument --timeout-ms (--help lists the options)|--data $D --timeout-ms 5000
tilefeed-serve|unknown argument --first-epoch (--help lists the options)|--data $D --first-epoch 0
tilefeed-serve|unknown argument --first-epoch-position (--help lists the options)|--data $D --first-epoch-position 0
train|unknown argument --reader-timeout-ms (--help lists the options)|--data $D --reader-timeout-ms 5000
train|unknown argument --reconnect-window-ms (--help lists the options)|--data $D --reconnect-window-ms 5
train|unknown argument --cache-dir (--help lists the options)|--data $D --cache-dir x
train|unknown argument --cache-limit (--help lists the options)|--data $D --cache-limit 20GiB
train|unknown argument --s3-endpoint (--help lists the options)|--data $D --s3-endpoint http://minio:9000
train|unknown argument --s3-addressing (--help lists the options)|--data $D --s3-addressing path
train|unknown argument --remote-retries (--help lists the options)|--data $D --remote-retries 3
train|unknown argument --remote-in-flight (--help lists the options)|--data $D --remote-in-flight 4
train|unknown argument --reader-credits (--help lists the options)|--data $D --reader-credits 4
train|unknown argument --curve-server-key (--help lists the options)|--data $D --curve-server-key r.pub
train|unknown argument --curve-key (--help lists the options)|--data $D --curve-key t.key
train|unknown argument --reconnect (--help lists the options)|--data $D --reconnect
train|unknown argument --reconnect-window (--help lists the options)|--data $D --reconnect-window 30
train|unknown argument --reader-timeout (--help lists the options)|--data $D --reader-timeout 5
train|unknown argument --data-timeout (--help lists the options)|--data $D --data-timeout 60
train|unknown argument --lr (--help lists the options)|--data $D --lr 0.1
train|unknown argument --momentum (--help lists the options)|--data $D --momentum 0.9
train|unknown argument --weight-decay (--help lists the options)|--data $D --weight-decay 0
train|unknown argument --hidden (--help lists the options)|--data $D --hidden 64
train|unknown argument --us-per-sample (--help lists the options)|--data $D --us-per-sample 10
train|unknown argument --resume-if-present (--help lists the options)|--data $D --resume-if-present
train|unknown argument --trace-samples (--help lists the options)|--data $D --trace-samples t
train|unknown argument --io-tiles (--help lists the options)|--data $D --io-tiles 2
train|unknown argument --staging-depth (--help lists the options)|--data $D --staging-depth 3
train|unknown argument --compute-threads (--help lists the options)|--data $D --compute-threads 2
tilefeed-serve|unknown argument --cache-dir (--help lists the options)|--data $D --cache-dir x
tilefeed-serve|unknown argument --cache-limit (--help lists the options)|--data $D --cache-limit 20GiB
tilefeed-serve|unknown argument --s3-endpoint (--help lists the options)|--data $D --s3-endpoint http://minio:9000
tilefeed-serve|unknown argument --s3-addressing (--help lists the options)|--data $D --s3-addressing path
tilefeed-serve|unknown argument --remote-retries (--help lists the options)|--data $D --remote-retries 3
tilefeed-serve|unknown argument --remote-in-flight (--help lists the options)|--data $D --remote-in-flight 4
tilefeed-serve|unknown argument --instance-index (--help lists the options)|--data $D --instance-index 0
tilefeed-serve|unknown argument --instance-count (--help lists the options)|--data $D --instance-count 2
tilefeed-serve|unknown argument --prefetch (--help lists the options)|--data $D --prefetch 4
tilefeed-serve|unknown argument --shm (--help lists the options)|--data $D --shm
tilefeed-serve|unknown argument --job-id (--help lists the options)|--data $D --job-id 7
tilefeed-serve|unknown argument --metrics-port (--help lists the options)|--data $D --metrics-port 9400
tilefeed-serve|unknown argument --metrics-bind (--help lists the options)|--data $D --metrics-bind 0.0.0.0
tilefeed-serve|unknown argument --curve-secret-key (--help lists the options)|--data $D --curve-secret-key r.key
tilefeed-serve|unknown argument --curve-allow (--help lists the options)|--data $D --curve-allow t.pub
tilefeed-serve|unknown argument --curve-keygen (--help lists the options)|--data $D --curve-keygen k
train|unknown argument --metrics-interval (--help lists the options)|--data $D --metrics-interval 5
tilefeed-pack|unknown argument --cache-dir (--help lists the options)|$D $work/out --cache-dir x
tilefeed-inspect|unknown argument --remote-retries (--help lists the options)|$D --remote-retries 3
loader_bench|unknown argument --cache-dir (--help lists the options)|--data $D --cache-dir x
loader_bench|unknown argument --batch (--help lists the options)|--data $D --batch 4
loader_bench|unknown argument --size (--help lists the options)|--data $D --size 16
loader_bench|unknown argument --depth (--help lists the options)|--data $D --depth 2
loader_bench|unknown argument --cache-limit-mib (--help lists the options)|--data $D --cache-limit-mib 8
loader_bench|--mode: val not in {train,eval}|--data $D --mode val
EOF
}

# Pass 1 runs the rows, a few at a time (most of a row's time is loading the tool's
# libraries); pass 2 checks each row's exit code and stderr.
run_row() {  # INDEX TOOL ARGS
  # shellcheck disable=SC2086 # the row's words are the arguments
  timeout 20 "$(cat "$work/bin.$2")" $3 >"$work/$1.out" 2>"$work/$1.err" </dev/null
  echo $? >"$work/$1.rc"
}
i=0
while IFS='|' read -r tool expect args; do
  i=$((i + 1))
  [ -f "$work/bin.$tool" ] || continue
  run_row "$i" "$tool" "$args" &
  [ $((i % 6)) -ne 0 ] || wait
done <<EOF
$(rows)
$(old_spellings)
EOF
wait

failed=0
passed=0
skipped=0
i=0
while IFS='|' read -r tool expect args; do
  i=$((i + 1))
  if [ ! -f "$work/bin.$tool" ]; then
    skipped=$((skipped + 1))
    continue
  fi
  rc=$(cat "$work/$i.rc")
  lines=$(wc -l <"$work/$i.err")
  problem=""
  if [ "$rc" -ne 2 ]; then
    problem="exit code $rc, expected 2"
  elif [ "$lines" -ne 1 ]; then
    problem="$lines lines on stderr, expected 1"
  elif ! grep -qF -- "$tool: $expect" "$work/$i.err"; then
    problem="stderr lacks '$tool: $expect'"
  fi
  if [ -n "$problem" ]; then
    failed=$((failed + 1))
    echo "args_test: row FAILED: $tool $args: $problem"
    sed 's/^/    stderr: /' "$work/$i.err" | head -n 5
  else
    passed=$((passed + 1))
  fi
done <<EOF
$(rows)
$(old_spellings)
EOF

if [ "$failed" -ne 0 ]; then
  echo "args_test: FAIL: $failed of $((failed + passed)) rows ($skipped skipped)"
  exit 1
fi
echo "args_test: OK ($passed rows, $skipped skipped: tools not built)"
