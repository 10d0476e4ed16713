#!/bin/sh
# bench-muon.sh BUILD - `make bench-muon`: a training step with Muon (on the
# blocks' matrices, AdamW on the rest) against one with AdamW, on 2 threads:
# at the cpu-baby size (nanoGPT's CPU recipe: 4 layers, 128 wide, batch
# 12 x 64) in nanoGPT's layout and in Qwen3's, and at GPT-2 124M, at llm.c's
# CPU batch (`--config=gpt2-124m`: 4 x 64) and at GPT-2's context (4 x 1024,
# as llm.c's GPU run; about 5 minutes, 7 GB). `nabla-gpt bench` prints the
# median round's ms_per_step; each line ends with Muon's step over AdamW's
# (issue 35: <= 1.5). Muon's work is per matrix, not per token: at 256
# tokens a step of 124M it is several AdamW steps, at 4096 a fraction of one.
set -e
B=${1:-build}
G="$B/bin/nabla-gpt"
# step OPTIMIZER FASTEST flags...: FASTEST or one bench's ms_per_step, whichever is less
step() {
    opt=$1 was=$2; shift 2
    t=$("$G" bench "$@" --optimizer="$opt" --sample=False --threads=2 | grep -o 'ms_per_step=[0-9.]*' | cut -d= -f2)
    echo "$t ${was:-$t}" | awk '{print ($1 < $2 ? $1 : $2)}'
}
ratio() { # label, alternations, then the flags of the size
    label=$1 n=$2; shift 2
    a= m=
    for i in $(seq "$n"); do # the two in turn, each one's fastest kept: the host may be shared
        a=$(step adamw "$a" "$@")
        m=$(step muon "$m" "$@")
    done
    echo "$label: adamw $a ms, muon $m ms a step (the fastest of $n each): muon/adamw $(echo "$m $a" | awk '{printf "%.2f", $1 / $2}')"
}
echo "bench-muon: $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
ratio cpu-baby 5 --arch=nanogpt --n_layer=4 --n_head=4 --n_embd=128 --block_size=64 --batch_size=12 --max_iters=20
ratio "cpu-baby, qwen3" 5 --arch=qwen3 --n_layer=4 --n_head=4 --n_embd=128 --block_size=64 --batch_size=12 --max_iters=20
ratio gpt2-124m 2 --config=gpt2-124m --max_iters=5 --rounds=3
ratio "gpt2-124m at 4 x 1024" 1 --config=gpt2-124m --seq_len=1024 --max_iters=1 --rounds=2
