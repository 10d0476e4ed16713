#!/bin/sh
# make demo: trains a character-level GPT on the fortunes corpus
# (tools/fortunes-corpus.sh), checks that the final validation loss is at
# most 2.0 nats per character, then prints three samples.
#   sh tools/gpt-demo.sh BUILD_DIR
set -e
b=$1
out=$b/demo-gpt
sh "$(dirname "$0")/fortunes-corpus.sh" "$b/fortunes.txt"
echo "corpus: $(wc -c < "$b/fortunes.txt") bytes of Debian's fortunes (BSD licence)"
start=$(date +%s)
rm -rf "$out" # a fresh run each time (--force would keep the old ones in $out/old-N/)
"$b/bin/nabla-gpt" train --data="$b/fortunes.txt" --out_dir="$out" --threads=2 \
    --n_layer=2 --n_head=4 --n_embd=128 --block_size=64 --batch_size=16 \
    --learning_rate=6e-3 --min_lr=6e-4 --warmup_iters=30 --max_iters=3000 \
    --eval_interval=500 --eval_iters=10 --dropout=0.0 | tee "$out.log" |
    awk '/^step / || NR == 1 || $2 % 100 == 0 { print; fflush() }'
val=$(sed -n 's/^step [0-9]*: train loss [0-9.]*, val loss \([0-9.]*\)$/\1/p' "$out.log" | tail -1)
echo "trained in $(($(date +%s) - start)) s; final val loss $val nats/char; loss curve: $out/loss.svg"
if awk -v v="$val" 'BEGIN { exit !(v != "" && v <= 2.0) }'; then :; else
    echo "DEMO FAILED: final val loss $val is above the 2.0 nats/char target" >&2
    exit 1
fi
echo "three samples (temperature 0.8, top_k 200):"
"$b/bin/nabla-gpt" sample --out_dir="$out" --start="\n" --num_samples=3 --max_new_tokens=300
