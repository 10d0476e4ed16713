#!/bin/sh
# tools/bench/bench-wasm.sh BUILD_DIR - the reverse-digits model's training
# step natively on one thread (nabla-bench "demo step", NB_NUM_THREADS=1)
# and in the WebAssembly build under node (tools/wasm/bench_wasm.js, the
# same model, batch and optimizer), then wasm's speed as a share of
# native's (the playground's target: at least 1/4). Run by make bench.
set -e
B=${1:-build}
native=$(NB_NUM_THREADS=1 "$B/bin/nabla-bench" "demo step" | awk '/^demo step/ { print $(NF - 1) }')
wasm=$(node tools/wasm/bench_wasm.js "$B/wasm/nabla.js")
[ -n "$native" ] && [ -n "$wasm" ] || { echo "bench-wasm: no time measured" >&2; exit 1; }
printf '%-16s %-4s %-34s %12s us/step\n' "demo step" "f32" "native, 1 thread" "$native"
printf '%-16s %-4s %-34s %12s us/step\n' "demo step" "f32" "wasm (node $(node --version)), 1 thread" "$wasm"
awk -v n="$native" -v w="$wasm" 'BEGIN { printf "wasm runs at %.2f of native single-thread speed (target >= 0.25)\n", n / w }'
