#!/bin/sh
# bench-muon.sh BUILD - `make bench-muon`: a training step with Muon (on the
# blocks' matrices, AdamW on the rest) against one with AdamW, at the
# cpu-baby size (nanoGPT's CPU recipe: 4 layers, 128 wide, batch 12 x 64)
# and at GPT-2 124M (`--config=gpt2-124m`: llm.c's CPU batch, 4 x 64), on 2
# threads; `nabla-gpt bench` prints the median round's ms_per_step, and the
# last line of each size is Muon's step over AdamW's (issue 35: <= 1.5).
set -e
B=${1:-build}
G="$B/bin/nabla-gpt"
ratio() { # label, then the flags of the size
    label=$1; shift
    a=$("$G" bench "$@" --optimizer=adamw --sample=False --threads=2 | grep -o 'ms_per_step=[0-9.]*' | cut -d= -f2)
    m=$("$G" bench "$@" --optimizer=muon --sample=False --threads=2 | grep -o 'ms_per_step=[0-9.]*' | cut -d= -f2)
    echo "$label: adamw $a ms, muon $m ms a step: muon/adamw $(echo "$m $a" | awk '{printf "%.2f", $1 / $2}')"
}
echo "bench-muon: $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
ratio cpu-baby --arch=nanogpt --n_layer=4 --n_head=4 --n_embd=128 --block_size=64 --batch_size=12 --max_iters=20
ratio gpt2-124m --config=gpt2-124m --max_iters=5 --rounds=3
