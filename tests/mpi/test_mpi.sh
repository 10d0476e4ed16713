#!/bin/sh
# make test-mpi: nabla-gpt-mpi under mpirun, against the single process.
#   sh tests/mpi/test_mpi.sh BUILD_DIR
# Checks
#   - the MPI layer itself (mpi_unit, 2 and 3 ranks);
#   - 1 process vs 2 ranks in float64 on the PyTorch parity fixtures
#     (tests/fixtures/gpt: both layouts, accumulation, clipping, schedule):
#     losses within 1e-12 relative, all weights within 1e-12 normwise
#     relative, each tensor within 1e-9 (README: the key bias's exact
#     gradient is zero, so its value is rounding noise that Adam scales up);
#     the --optimizer=muon runs too (weights within 1e-10 normwise);
#   - the message path (NB_MPI_SHM=0, and a shared window that could not be
#     allocated) equal to the shared window's, bit for bit;
#   - lent cores (a waiting rank's core running a guest thread of the other
#     rank) equal to no lending (NB_MPI_LEND=0), bit for bit;
#   - a bad combination (4 rows over 3 ranks) refused before training;
#   - the drift check: a rank whose parameters are nudged stops every rank;
#   - error propagation: a rank that fails stops every rank with its
#     message, nothing hangs, no model or checkpoint is written;
#   - resume under MPI (text mode, dropout: every rank's generators are in
#     rank 0's checkpoint): 6 + 6 iterations equal 12 bit for bit; another
#     rank count is refused.
# Every mpirun runs under `timeout`, so a hang fails the test instead of CI.
# Prints "N passed, N failed"; exits 1 when any check failed.
B=$1
G=$B/bin/nabla-gpt
M=$B/bin/nabla-gpt-mpi
CMP=$B/mpi/st_compare
F=tests/fixtures/gpt
# MPIRUN picks the launcher (MPIRUN=mpirun.mpich with a build made by
# MPICC=mpicc.mpich); Open MPI's wants its flags to run as root.
MPIRUN=${MPIRUN:-mpirun}
RUN="timeout 120 $MPIRUN"
if "$MPIRUN" --version 2>&1 | grep -q "Open MPI" && [ "$(id -u)" = 0 ]; then
    RUN="$RUN --allow-run-as-root --oversubscribe"
fi
# Open MPI on one host: shared memory between ranks, no network probing.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS: $1"; }
bad() { fail=$((fail + 1)); echo "FAIL: $1"; }

for np in 2 3; do
    if $RUN -np $np "$B/mpi/mpi_unit" > "$tmp/unit" 2>&1; then ok "mpi_unit, $np ranks"
    else cat "$tmp/unit"; bad "mpi_unit, $np ranks"; fi
done

# ---- 1 process vs 2 ranks, float64 -----------------------------------------
for run in gptmodel_cosine_clip:gptmodel gptmodel_qkv_course:gptmodel_qkv \
           nanogpt_nobias_course:nanogpt_nobias nanogpt_bias_accum:nanogpt_bias \
           gptmodel_muon:gptmodel nanogpt_muon:nanogpt_bias; do
    name=${run%%:*} init=$F/init_${run##*:}.safetensors
    args=$("$CMP" args "$F/${name}_f64.safetensors")
    common="$args --init=$init --batches=$F/batches.safetensors"
    # Muon's Newton-Schulz iteration magnifies the averaged gradient's last
    # bits (its first steps multiply small directions by up to a = 3.4),
    # so its weights get 1e-10 normwise
    wtol=1e-12; case $name in *muon*) wtol=1e-10;; esac
    if $G train $common --out_dir="$tmp/s_$name" > "$tmp/s.out" 2>&1 &&
       $RUN -np 2 "$M" train $common --out_dir="$tmp/m_$name" > "$tmp/m.out" 2>&1 &&
       "$CMP" log "$tmp/m_$name/log.jsonl" "$tmp/s_$name/log.jsonl" 1e-12 &&
       "$CMP" model "$tmp/m_$name/model.safetensors" "$tmp/s_$name/model.safetensors" $wtol 1e-9
    then ok "$name: 2 ranks = 1 process (float64)"
    else tail -n 5 "$tmp/s.out" "$tmp/m.out"; bad "$name: 2 ranks = 1 process (float64)"; fi
done

# ---- Llama 3 / Qwen3: only the model build differs ----------------------------
# A Qwen3-MoE (multi-query attention, top 2 of 4 experts) from scratch on the
# same batches: 2 ranks = 1 process, float64.
name=qwen3_moe
common="--arch=qwen3 --n_kv_head=1 --n_expert=4 --n_layer=2 --n_head=2 --n_embd=16 \
    --block_size=6 --batch_size=4 --vocab_size=13 --dtype=float64 --learning_rate=1e-2 \
    --max_iters=8 --batches=$F/batches.safetensors"
if $G train $common --out_dir="$tmp/s_$name" > "$tmp/s.out" 2>&1 &&
   $RUN -np 2 "$M" train $common --out_dir="$tmp/m_$name" > "$tmp/m.out" 2>&1 &&
   "$CMP" log "$tmp/m_$name/log.jsonl" "$tmp/s_$name/log.jsonl" 1e-12 &&
   "$CMP" model "$tmp/m_$name/model.safetensors" "$tmp/s_$name/model.safetensors" 1e-12 1e-9
then ok "$name: 2 ranks = 1 process (float64)"
else tail -n 5 "$tmp/s.out" "$tmp/m.out"; bad "$name: 2 ranks = 1 process (float64)"; fi

# The same through messages: NB_MPI_SHM=0, and a window that could not be
# allocated (NB_MPI_TEST_NOSHM: every rank's allocation "fails"), which must
# say so and fall back. Both paths give the same bits as the window's.
name=nanogpt_bias_accum
args=$("$CMP" args "$F/${name}_f64.safetensors")
common="$args --init=$F/init_nanogpt_bias.safetensors --batches=$F/batches.safetensors"
if NB_MPI_SHM=0 $RUN -np 2 "$M" train $common --out_dir="$tmp/p_$name" > "$tmp/p.out" 2>&1 &&
   NB_MPI_TEST_NOSHM=1 $RUN -np 2 "$M" train $common --out_dir="$tmp/q_$name" > "$tmp/q.out" 2>&1 &&
   grep -q "averaging through messages" "$tmp/q.out" && ! grep -q "averaging through" "$tmp/p.out" &&
   "$CMP" log "$tmp/p_$name/log.jsonl" "$tmp/m_$name/log.jsonl" 0 &&
   "$CMP" model "$tmp/p_$name/model.safetensors" "$tmp/m_$name/model.safetensors" 0 0 &&
   "$CMP" log "$tmp/q_$name/log.jsonl" "$tmp/m_$name/log.jsonl" 0 &&
   "$CMP" model "$tmp/q_$name/model.safetensors" "$tmp/m_$name/model.safetensors" 0 0
then ok "$name: 2 ranks through messages = 2 ranks in the shared window, bit for bit"
else tail -n 5 "$tmp/p.out" "$tmp/q.out"; bad "$name: messages = shared window"; fi

# Lent cores (dp_share_grads): a rank that arrives first at once
# (NB_MPI_LEND_SPIN_NS=0) wakes the other's guest thread; the same bits as
# with lending off (NB_MPI_LEND=0), which lends nothing.
if NB_MPI_STATS=1 NB_MPI_LEND_SPIN_NS=0 $RUN -np 2 "$M" train $common --out_dir="$tmp/l_$name" > "$tmp/l.out" 2>&1 &&
   NB_MPI_STATS=1 NB_MPI_LEND=0 $RUN -np 2 "$M" train $common --out_dir="$tmp/n_$name" > "$tmp/n.out" 2>&1 &&
   grep "lent its core [1-9]" "$tmp/l.out" > /dev/null &&
   [ "$(grep -c "lent its core 0 times, its guest worked 0 times" "$tmp/n.out")" = 2 ] &&
   "$CMP" log "$tmp/l_$name/log.jsonl" "$tmp/n_$name/log.jsonl" 0 &&
   "$CMP" model "$tmp/l_$name/model.safetensors" "$tmp/n_$name/model.safetensors" 0 0 &&
   "$CMP" model "$tmp/l_$name/model.safetensors" "$tmp/m_$name/model.safetensors" 0 0
then ok "$name: lent cores = no lending, bit for bit"
else tail -n 5 "$tmp/l.out" "$tmp/n.out"; bad "$name: lent cores = no lending"; fi

# ---- refused before training --------------------------------------------------
common="$("$CMP" args "$F/gptmodel_cosine_clip_f64.safetensors") --init=$F/init_gptmodel.safetensors --batches=$F/batches.safetensors"
$RUN -np 3 "$M" train $common --out_dir="$tmp/np3" > "$tmp/np3.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "batches of 4 rows do not split into 3 rank(s)" "$tmp/np3.out" &&
   [ ! -e "$tmp/np3/ckpt.safetensors" ]
then ok "4 rows over 3 ranks refused before training"
else cat "$tmp/np3.out"; bad "4 rows over 3 ranks refused before training (rc $rc)"; fi

# ---- drift ----------------------------------------------------------------------
NB_MPI_TEST_NUDGE=1:3 $RUN -np 2 "$M" train $common --eval_interval=2 --out_dir="$tmp/drift" \
    > "$tmp/drift.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ "$(grep -c 'iter 3: parameters drifted: ranks 1 differ from rank 0' "$tmp/drift.out")" = 2 ] &&
   [ ! -e "$tmp/drift/model.safetensors" ]
then ok "drift: a nudged rank stops both ranks, named"
else cat "$tmp/drift.out"; bad "drift check (rc $rc)"; fi

# ---- one rank fails -----------------------------------------------------------------
NB_MPI_TEST_FAIL=1:5 $RUN -np 2 "$M" train $common --out_dir="$tmp/fail" > "$tmp/fail.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "^nabla-gpt-mpi: rank 1: injected failure at iteration 5" "$tmp/fail.out" &&
   ! grep -q "^iter 5:" "$tmp/fail.out" && [ ! -e "$tmp/fail/ckpt.safetensors" ]
then ok "a failing rank stops every rank with its message"
else cat "$tmp/fail.out"; bad "error propagation (rc $rc)"; fi

# ---- resume (text mode, dropout, 2 ranks) ---------------------------------------------
cat README.md docs/*.md | awk 'NR <= 400' > "$tmp/text.txt"
t="--data=$tmp/text.txt --n_layer=1 --n_head=2 --n_embd=16 --block_size=16 --batch_size=4 \
   --dropout=0.1 --eval_interval=3 --eval_iters=2 --learning_rate=3e-3 --decay_lr=False"
if $RUN -np 2 "$M" train $t --max_iters=12 --out_dir="$tmp/straight" > "$tmp/r1.out" 2>&1 &&
   $RUN -np 2 "$M" train $t --max_iters=6 --out_dir="$tmp/resumed" > "$tmp/r2.out" 2>&1 &&
   $RUN -np 2 "$M" train $t --max_iters=12 --resume --out_dir="$tmp/resumed" > "$tmp/r3.out" 2>&1 &&
   "$CMP" model "$tmp/resumed/model.safetensors" "$tmp/straight/model.safetensors" 0 &&
   "$CMP" log "$tmp/resumed/log.jsonl" "$tmp/straight/log.jsonl" 0
then ok "resume under MPI: 6 + 6 iterations = 12, bit for bit"
else for f in "$tmp/r1.out" "$tmp/r2.out" "$tmp/r3.out"; do echo "== $f"; tail -n 5 "$f"; done
     bad "resume under MPI"; fi
$RUN -np 1 "$M" train $t --max_iters=14 --resume --out_dir="$tmp/resumed" > "$tmp/r4.out" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "saved by 2 process(es) and this run has 1" "$tmp/r4.out"
then ok "resume with another rank count refused"
else cat "$tmp/r4.out"; bad "resume with another rank count (rc $rc)"; fi

echo "test-mpi: $pass passed, $fail failed"
[ $fail -eq 0 ]
