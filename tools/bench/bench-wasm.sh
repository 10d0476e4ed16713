#!/bin/sh
# tools/bench/bench-wasm.sh BUILD_DIR - the reverse-digits model's training
# step natively on one thread (nabla-bench "demo step", NB_NUM_THREADS=1)
# and in the WebAssembly build under node (tools/wasm/bench_wasm.js, the
# same model, batch and optimizer), then wasm's speed as a share of
# native's (the playground's target: at least 1/4). Each side is timed
# ROUNDS times, alternating, and keeps its best: on a shared machine the
# least disturbed round. Run by make bench.
set -e
B=${1:-build}
ROUNDS=${ROUNDS:-3}
native=
wasm=
i=0
while [ $i -lt "$ROUNDS" ]; do
    n=$(NB_NUM_THREADS=1 "$B/bin/nabla-bench" "demo step" | awk '/^demo step/ { print $(NF - 1) }')
    w=$(node tools/wasm/bench_wasm.js "$B/wasm/nabla.js")
    [ -n "$n" ] && [ -n "$w" ] || { echo "bench-wasm: no time measured" >&2; exit 1; }
    native=$(awk -v a="$native" -v b="$n" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
    wasm=$(awk -v a="$wasm" -v b="$w" 'BEGIN { print (a == "" || b + 0 < a + 0) ? b : a }')
    i=$((i + 1))
done
printf '%-16s %-4s %-34s %12s us/step\n' "demo step" "f32" "native, 1 thread" "$native"
printf '%-16s %-4s %-34s %12s us/step\n' "demo step" "f32" "wasm (node $(node --version)), 1 thread" "$wasm"
awk -v n="$native" -v w="$wasm" -v r="$ROUNDS" 'BEGIN {
    printf "wasm runs at %.2f of native single-thread speed (target >= 0.25; best of %d rounds each)\n", n / w, r }'
