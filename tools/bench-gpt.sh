#!/bin/sh
# make bench-gpt: nabla-gpt bench against PyTorch's reference GPT
# (tools/bench_torch_gpt.py) on the configs of issue 9, both layouts:
#   tiny      n_layer/n_head/n_embd 2/2/32,  block_size 16 x batch_size 8
#   cpu-baby  4/4/128 (nanoGPT's CPU config), block_size 64 x batch_size 12
# nabla's figure is its best of 1 and 2 threads, PyTorch's its best of 1
# thread, 2 threads and 2 threads with OMP_WAIT_POLICY=PASSIVE. Prints one
# line per config and layout, with ms/step vs PyTorch and the target.
# Both sides time the same number of steps after 3 warm-up steps: 400 at
# tiny (a step is well under a millisecond, so fewer would be one scheduler
# hiccup away from noise), 40 at cpu-baby; a STEPS argument overrides both.
#   sh tools/bench-gpt.sh BUILD_DIR [STEPS]
set -e
bin=$1/bin/nabla-gpt
steps_arg=${2:-}
here=$(dirname "$0")
echo "GPT training step (forward, cross-entropy, backward, clip, AdamW), float32, vocab 65"
for cfg in "tiny 2 2 32 16 8 0.15 400" "cpu-baby 4 4 128 64 12 0.5 40"; do
    set -- $cfg
    steps=${steps_arg:-$8}
    name=$1 flags="--n_layer=$2 --n_head=$3 --n_embd=$4 --block_size=$5 --batch_size=$6 --max_iters=$steps"
    target=$7
    for arch in gptmodel nanogpt; do
        n1=$("$bin" bench --arch=$arch $flags --threads=1 --sample=False)
        n2=$("$bin" bench --arch=$arch $flags --threads=2 --sample=False)
        t=$(/usr/bin/python3 "$here/bench_torch_gpt.py" --arch=$arch --n_layer=$2 --n_head=$3 \
            --n_embd=$4 --block_size=$5 --batch_size=$6 --steps=$steps | tail -1)
        printf '%s\n%s\n%s\n' "$n1" "$n2" "$t" | awk -v name="$name" -v arch="$arch" -v target="$target" '
            function val(line, key,   i, n, kv) {
                n = split(line, kv, /[ =]/)
                for (i = 1; i < n; i++) if (kv[i] == key) return kv[i + 1]
                return ""
            }
            NR == 1 { a = val($0, "ms_per_step"); rss1 = val($0, "peak_rss_mb") }
            NR == 2 { b = val($0, "ms_per_step"); rss2 = val($0, "peak_rss_mb") }
            NR == 3 { t = val($0, "torch_best_ms_per_step"); mode = val($0, "mode") }
            END {
                best = a < b ? a : b; thr = a < b ? 1 : 2; rss = rss1 > rss2 ? rss1 : rss2
                printf "%-9s %-8s nabla %8.3f ms/step (%d thr)  torch %8.3f ms/step (%s)  ratio %.3f (target <= %s)  peak_rss_mb %.1f\n",
                       name, arch, best, thr, t, mode, best / t, target, rss
            }'
    done
done
echo "Sampling (block_size - 1 tokens from one, threads=1), tokens/s with and without the KV cache:"
for cfg in "tiny 2 2 32 16 8" "cpu-baby 4 4 128 64 12"; do
    set -- $cfg
    for arch in gptmodel nanogpt; do
        "$bin" bench --arch=$arch --n_layer=$2 --n_head=$3 --n_embd=$4 --block_size=$5 \
            --batch_size=$6 --max_iters=1 | sed -n "2s/^/$1 $arch: /p"
    done
done
