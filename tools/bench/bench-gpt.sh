#!/bin/sh
# make bench-gpt: nabla-gpt bench against PyTorch's reference GPT
# (tools/bench/bench_torch_gpt.py) on three configs, each with its target
# ratio (nabla ms/step over PyTorch's):
#   tiny      n_layer/n_head/n_embd 2/2/32,  block_size 16 x batch_size 8
#   cpu-baby  4/4/128 (nanoGPT's CPU config), block_size 64 x batch_size 12
#   gpt2-124m 12/12/768, vocab 50257, biases, block_size 1024, batch 4 x 64
#             tokens (llm.c's CPU step; nabla-gpt bench --config=gpt2-124m),
#             nanogpt layout only, one round of 5 steps (a step is half a
#             second or more: rounds of them are not noise-bound), with two
#             more targets: peak RSS <= 0.8 x PyTorch's, and the 2-thread step
#             >= 65% of the 2-thread sgemm peak nabla-gpt bench measures
# nabla's figure is its best of 1 and 2 threads, PyTorch's its best of 1
# thread, 2 threads and 2 threads with OMP_WAIT_POLICY=PASSIVE. Prints one
# line per config and layout, with ms/step vs PyTorch and the target.
# Both sides time the same number of steps after 3 warm-up steps: 400 at
# tiny (a step is well under a millisecond, so fewer would be one scheduler
# hiccup away from noise), 40 at cpu-baby; a STEPS argument overrides both.
# This machine's vCPUs slow down in spells of a few seconds, which can land
# on either side's run, so each config runs ROUNDS times (3), nabla and
# PyTorch alternating, and each side keeps its best (fastest) round.
# Then the Llama 3 / Qwen3 rows (GQA; Qwen3-MoE against a dense MLP) and
# grouped-query against multi-head attention, described where they run.
#   sh tools/bench/bench-gpt.sh BUILD_DIR [STEPS] [ROUNDS]
set -e
build=$1 # (the config loops below reuse the positional parameters)
bin=$build/bin/nabla-gpt
steps_arg=${2:-}
rounds=${3:-3}
here=$(dirname "$0")
# The value of key=... in a line of key=value pairs.
val() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
# The smaller of two numbers ("" counts as none).
least() { if [ -z "$1" ]; then echo "$2"; else awk -v a="$1" -v b="$2" 'BEGIN { print (b < a ? b : a) }'; fi; }
echo "GPT training step (forward, cross-entropy, backward, clip, AdamW), float32, best of $rounds rounds"
# name n_layer n_head n_embd block_size batch_size target steps vocab seq_len bias archs rounds
for cfg in "tiny 2 2 32 16 8 0.15 400 65 16 0 gptmodel,nanogpt $rounds" \
           "cpu-baby 4 4 128 64 12 0.5 40 65 64 0 gptmodel,nanogpt $rounds" \
           "gpt2-124m 12 12 768 1024 4 0.6 5 50257 64 1 nanogpt 1"; do
    set -- $cfg
    steps=${steps_arg:-$8}
    name=$1 target=$7 bias=${11}
    flags="--n_layer=$2 --n_head=$3 --n_embd=$4 --block_size=$5 --batch_size=$6 --max_iters=$steps"
    flags="$flags --vocab_size=$9 --seq_len=${10} --bias=$([ "$bias" = 1 ] && echo True || echo False)"
    for arch in $(echo "${12}" | tr , ' '); do
        a="" b="" t="" rss=0 trss="" mode="" pct=""
        for round in $(seq "${13}"); do
            n1=$("$bin" bench --arch=$arch $flags --threads=1 --sample=False)
            n2=$("$bin" bench --arch=$arch $flags --threads=2 --sample=False)
            tl=$(/usr/bin/python3 "$here/bench_torch_gpt.py" --arch=$arch --n_layer=$2 --n_head=$3 \
                --n_embd=$4 --block_size=$5 --batch_size=$6 --steps=$steps --vocab_size=$9 \
                --seq_len=${10} --bias=$bias | tail -1)
            a=$(least "$a" "$(val "$n1" ms_per_step)") b=$(least "$b" "$(val "$n2" ms_per_step)")
            tv=$(val "$tl" torch_best_ms_per_step)
            if [ -z "$t" ] || [ "$(least "$t" "$tv")" != "$t" ]; then t=$tv mode=$(val "$tl" mode); fi
            trss=$(least "$trss" "$(val "$tl" peak_rss_mb)")
            rss=$(awk -v r="$rss" -v p="$(val "$n1" peak_rss_mb)" -v q="$(val "$n2" peak_rss_mb)" \
                'BEGIN { m = r; if (p > m) m = p; if (q > m) m = q; print m }')
            pct=$(val "$n2" pct_of_peak) peak=$(val "$n2" sgemm_peak_gflops) gf=$(val "$n2" gflops)
        done
        awk -v name="$name" -v arch="$arch" -v target="$target" -v a="$a" -v b="$b" -v t="$t" \
            -v mode="$mode" -v rss="$rss" 'BEGIN {
                best = a < b ? a : b; thr = a < b ? 1 : 2
                printf "%-9s %-8s nabla %8.3f ms/step (%d thr)  torch %8.3f ms/step (%s)  ratio %.3f (target <= %s)  peak_rss_mb %.1f\n",
                       name, arch, best, thr, t, mode, best / t, target, rss
            }'
        if [ "$name" = gpt2-124m ]; then awk -v rss="$rss" -v trss="$trss" -v pct="$pct" -v peak="$peak" \
            -v gf="$gf" -v a="$a" -v b="$b" 'BEGIN {
                printf "%-9s %-8s 1 thread %.0f ms, 2 threads %.0f ms; peak RSS %.0f MB vs torch %.0f MB: %.2f (target <= 0.8); 2 threads %.0f GFLOP/s = %.1f%% of the %.0f GFLOP/s sgemm peak (target >= 65%%)\n",
                       "", "", a, b, rss, trss, rss / trss, gf, pct, peak
            }'; fi
    done
done
# The Llama 3 and Qwen3 families (tools/ref/arch_ref.py on PyTorch's side), both
# with grouped-query attention (2 key/value heads for 4 query heads):
#   llama-tiny  2/4/32, 2 kv heads, hidden 96, block_size 16 x batch_size 8
#   qwen3-baby  cpu-baby's 4/4/128, 2 kv heads, head_dim 32, hidden 384,
#               QK-norm, block_size 64 x batch_size 12
# The same rounds and best-of rules as above.
echo "Llama 3 and Qwen3 (GQA), the same step, float32, best of $rounds rounds"
arch_row() { # name arch target steps torch_flags nabla_flags
    a="" b="" t="" mode="" rss=0 trss=""
    for round in $(seq "$rounds"); do
        n1=$("$bin" bench --arch=$2 $6 --max_iters=$4 --threads=1 --sample=False)
        n2=$("$bin" bench --arch=$2 $6 --max_iters=$4 --threads=2 --sample=False)
        tl=$(/usr/bin/python3 "$here/bench_torch_gpt.py" --arch=$2 $5 --steps=$4 | tail -1)
        a=$(least "$a" "$(val "$n1" ms_per_step)") b=$(least "$b" "$(val "$n2" ms_per_step)")
        tv=$(val "$tl" torch_best_ms_per_step)
        if [ -z "$t" ] || [ "$(least "$t" "$tv")" != "$t" ]; then t=$tv mode=$(val "$tl" mode); fi
        trss=$(least "$trss" "$(val "$tl" peak_rss_mb)")
        rss=$(awk -v r="$rss" -v p="$(val "$n1" peak_rss_mb)" -v q="$(val "$n2" peak_rss_mb)" \
            'BEGIN { m = r; if (p > m) m = p; if (q > m) m = q; print m }')
    done
    awk -v name="$1" -v arch="$2" -v target="$3" -v a="$a" -v b="$b" -v t="$t" -v mode="$mode" \
        -v rss="$rss" -v trss="$trss" 'BEGIN {
            best = a < b ? a : b; thr = a < b ? 1 : 2
            printf "%-11s %-7s nabla %8.3f ms/step (%d thr)  torch %8.3f ms/step (%s)  ratio %.3f",
                   name, arch, best, thr, t, mode, best / t
            if (target != "-") printf " (target <= %s)", target
            printf "  peak_rss_mb %.1f (torch %.1f)\n", rss, trss
        }'
    arch_nabla=$(awk -v a="$a" -v b="$b" 'BEGIN { print (a < b ? a : b) }') arch_torch=$t
}
tiny_t="--n_layer=2 --n_head=4 --n_kv_head=2 --n_embd=32 --hidden_dim=96 --block_size=16 --batch_size=8 --vocab_size=65"
baby_t="--n_layer=4 --n_head=4 --n_kv_head=2 --n_embd=128 --head_dim=32 --hidden_dim=384 --block_size=64 --batch_size=12 --vocab_size=65"
arch_row llama-tiny llama3 0.15 "${steps_arg:-400}" "$tiny_t" "$tiny_t"
arch_row qwen3-baby qwen3 0.5 "${steps_arg:-40}" "$baby_t --qk_norm=1" "$baby_t --qk_norm=True"
# Qwen3-MoE at qwen3-baby's size: each block's MLP top-2 of 8 experts of
# hidden 192, against the same model with one dense MLP of 2 x 192 (the FLOPs
# each token runs): target <= 1.3. PyTorch's reference runs the course's
# per-expert loop (each expert on its own tokens), printed alongside.
moe_t="--n_layer=4 --n_head=4 --n_kv_head=2 --n_embd=128 --head_dim=32 --block_size=64 --batch_size=12 --vocab_size=65"
arch_row qwen3-moe qwen3 - "${steps_arg:-40}" "$moe_t --qk_norm=1 --n_expert=8 --n_expert_per_tok=2 --moe_hidden_dim=192" \
    "$moe_t --qk_norm=True --n_expert=8 --n_expert_per_tok=2 --moe_hidden_dim=192"
moe_torch=$arch_torch
arch_row qwen3-dense qwen3 - "${steps_arg:-40}" "$moe_t --qk_norm=1 --hidden_dim=384" "$moe_t --qk_norm=True --hidden_dim=384"
# The ratio compares two nabla models, so it is timed apart from the rows
# above (minutes apart, and this shared machine's slow spells last minutes):
# the two models alternate within each round, at 1 and 2 threads, over
# ROUNDS + 2 rounds, and each keeps its best (fastest) time.
moe_m="" moe_d=""
for round in $(seq $((rounds + 2))); do
    for t in 1 2; do
        for f in "--n_expert=8 --n_expert_per_tok=2 --moe_hidden_dim=192" "--hidden_dim=384"; do
            ms=$(val "$("$bin" bench --arch=qwen3 $moe_t --qk_norm=1 $f --max_iters=${steps_arg:-40} \
                --threads=$t --sample=False)" ms_per_step)
            case $f in --n_expert*) moe_m=$(least "$moe_m" "$ms") ;; *) moe_d=$(least "$moe_d" "$ms") ;; esac
        done
    done
done
awk -v m="$moe_m" -v d="$moe_d" -v tm="$moe_torch" -v td="$arch_torch" -v r="$((rounds + 2))" 'BEGIN {
        printf "qwen3-moe top-2 of 8 / dense MLP of 2 x 192: nabla %.3f (%.1f / %.1f ms, best of %d alternating rounds at 1 and 2 threads; target <= 1.3), torch per-expert loop %.3f\n", m / d, m, d, r, tm / td
    }'
# Grouped-query attention against multi-head at nabla-bench-attention's
# medium size (B 16, T 128, C 256, 8 heads; k, v of 2 heads): GFLOP/s of the
# same products, and arena_mb, what the backward allocated.
echo "Fused attention forward + backward, GQA (8 query heads, 2 kv heads) vs MHA, medium size:"
for t in 1 2; do
    "$build/bin/nabla-bench-attention" --config medium --part gqa --threads $t --rounds 5
done
echo "Sampling (block_size - 1 tokens from one, threads=1), tokens/s with and without the KV cache"
echo "(pct_of_bandwidth: against the copy bandwidth's limit for reading every weight once a token;"
echo "the small models' weights stay in cache, so only gpt2-124m's figure is a test: target >= 60):"
for cfg in "tiny 2 2 32 16 8" "cpu-baby 4 4 128 64 12"; do
    set -- $cfg
    for arch in gptmodel nanogpt; do
        "$bin" bench --arch=$arch --n_layer=$2 --n_head=$3 --n_embd=$4 --block_size=$5 \
            --batch_size=$6 --max_iters=1 | sed -n "2s/^/$1 $arch: /p"
    done
done
for t in 1 2; do # gpt2-124m: 63 tokens from one (seq_len 64), after one training step
    "$bin" bench --config=gpt2-124m --threads=$t --max_iters=1 --rounds=1 |
        sed -n "2s/^/gpt2-124m nanogpt ($t thr): /p"
done
