#!/bin/sh
# make bench-mpi: data-parallel scaling of nabla-gpt-mpi on this machine.
# The cpu-baby GPT (nanoGPT's CPU config: n_layer 4, n_head 4, n_embd 128,
# block_size 64) at one fixed global batch of 12 sequences per iteration,
# as gradient_accumulation_steps=2 micro-batches of 6:
#   1 rank,  1 thread:  both micro-batches on one process
#   2 ranks, 1 thread each: one micro-batch per rank (nanoGPT divides
#                       gradient_accumulation_steps among the ranks)
# against the best single process at 2 threads (the same 2 x 6, and one
# batch of 12). Tokens/s is the global batch's tokens over the median
# iteration time in log.jsonl of ITERS (200) iterations after 5 of warm-up.
# This machine's two vCPUs slow down in spells of a few seconds. A run of
# 200 iterations (some 9 s) spans several spells, so its median reflects the
# machine over them; at 80 (3.5 s, about a spell) a run's figure swung by
# 20% on whether it fell in one. The four runs go in ROUNDS (3) alternating
# rounds, each round's figures are printed, and each configuration keeps
# its best. The 2-thread process's layout is the one with the higher median
# over the rounds: the best of both layouts' runs would compare the best of
# 2 x ROUNDS noisy runs with the best of ROUNDS for the ranks.
# MICRO (6) sets the micro-batch: the global batch is 2 x MICRO sequences.
#   sh tools/bench-mpi.sh BUILD_DIR [ITERS] [ROUNDS] [MICRO]
set -e
B=$1
iters=${2:-200}
rounds=${3:-3}
mb=${4:-6}
RUN="mpirun"
[ "$(id -u)" = 0 ] && RUN="$RUN --allow-run-as-root --oversubscribe"
# Open MPI on one host: shared memory between the ranks. Its vader transport
# moves a large message with one copy through CMA (process_vm_readv) where
# the kernel allows it, which it does by default; in a container that
# forbids ptrace it does not, and the ranks then fall back to copying
# through the shared buffers (2 copies). A 2-rank probe picks the mode.
export OMPI_MCA_btl=self,vader
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sh "$(dirname "$0")/fortunes-corpus.sh" "$tmp/text.txt"
copy=cma
if ! OMPI_MCA_btl_vader_single_copy_mechanism=cma $RUN -np 2 "$B/bin/nabla-gpt-mpi" train \
    --data="$tmp/text.txt" --n_layer=1 --n_head=1 --n_embd=8 --block_size=8 --batch_size=2 \
    --max_iters=2 --eval_interval=100000 --eval_iters=1 --out_dir="$tmp/probe" >/dev/null 2>&1; then
    copy=none
fi
export OMPI_MCA_btl_vader_single_copy_mechanism=$copy
model="--data=$tmp/text.txt --n_layer=4 --n_head=4 --n_embd=128 --block_size=64 --dropout=0.0 \
  --max_iters=$iters --eval_interval=100000 --eval_iters=1 --decay_lr=False"

# Median "ms" of iterations 5.. in a log.jsonl -> tokens/s for `tokens`.
toks() {
    awk -v tokens="$2" -F'"ms": ' '/"ms": / && ++n > 5 { split($2, a, "}"); v[++m] = a[1] + 0 }
        END { for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
              med = m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
              printf "%.0f", tokens / (med / 1000) }' "$1/log.jsonl"
}
tokens=$((2 * mb * 64))
r1=0 r2=0 a=0 b=0 la="" lb=""
max() { [ "$1" -gt "$2" ] && echo "$1" || echo "$2"; }
for round in $(seq "$rounds"); do
    "$B/bin/nabla-gpt" train $model --batch_size=$mb --gradient_accumulation_steps=2 --threads=1 \
        --out_dir="$tmp/r1" --force > /dev/null
    $RUN -np 2 "$B/bin/nabla-gpt-mpi" train $model --batch_size=$mb --gradient_accumulation_steps=2 \
        --threads=1 --out_dir="$tmp/r2" --force > /dev/null
    "$B/bin/nabla-gpt" train $model --batch_size=$mb --gradient_accumulation_steps=2 --threads=2 \
        --out_dir="$tmp/t2a" --force > /dev/null
    "$B/bin/nabla-gpt" train $model --batch_size=$((2 * mb)) --gradient_accumulation_steps=1 --threads=2 \
        --out_dir="$tmp/t2b" --force > /dev/null
    x1=$(toks "$tmp/r1" $tokens) x2=$(toks "$tmp/r2" $tokens)
    xa=$(toks "$tmp/t2a" $tokens) xb=$(toks "$tmp/t2b" $tokens)
    echo "round $round: tok_per_s 1 rank $x1, 2 ranks $x2, 2 threads $xa (2 x $mb) $xb (1 x $((2 * mb)))"
    r1=$(max "$r1" "$x1") r2=$(max "$r2" "$x2") a=$(max "$a" "$xa") b=$(max "$b" "$xb")
    la="$la $xa" lb="$lb $xb"
done
median() { echo "$@" | tr ' ' '\n' | sort -n | awk '{v[NR] = $1} END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ma=$(median $la) mb_=$(median $lb)
if awk -v a="$ma" -v b="$mb_" 'BEGIN { exit !(a > b) }'; then t2=$a lay="2 x $mb"; else t2=$b lay="1 x $((2 * mb))"; fi
echo "cpu-baby GPT (4/4/128, block 64), global batch $((2 * mb)) x 64 = $tokens tokens per iteration, $iters iterations, best of $rounds rounds"
echo "Open MPI shared memory, single-copy mechanism: $copy; gradients averaged in a shared window; waiting ranks lend their cores"
echo "ranks=1 threads=1 tok_per_s=$r1"
echo "ranks=2 threads=1 tok_per_s=$r2"
echo "ranks=1 threads=2 tok_per_s=$t2 (as $lay, the layout with the higher median: $ma for 2 x $mb, $mb_ for 1 x $((2 * mb)))"
awk -v r1="$r1" -v r2="$r2" -v t2="$t2" -v all="$((a > b ? a : b))" -v n="$((2 * rounds))" 'BEGIN {
    printf "speedup 2 ranks / 1 rank = %.2fx (target >= 1.7x), parallel efficiency %.0f%%\n", r2 / r1, 50 * r2 / r1
    printf "2 ranks / best single process at 2 threads = %.2fx (target >= 1.0x)\n", r2 / t2
    printf "(2 ranks / the fastest of all %d 2-thread runs, either layout = %.2fx)\n", n, r2 / all }'
