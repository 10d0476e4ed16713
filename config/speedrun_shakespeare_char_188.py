# Speedrun target A (docs/speedrun.md): val loss <= 1.88 on nanoGPT's
# shakespeare_char in <= 10 s of wall clock on 2 threads, from the command's
# start to the end of its final evaluation:
#   nabla-gpt train config/speedrun_shakespeare_char_188.py --threads=2
# Three blocks 128 wide in Qwen3's layout (RMSNorm, RoPE, QK-norm, a gated
# SiLU MLP), batch 16, trained with Muon on the blocks' matrices and AdamW
# on the rest, with the embedding, the head and the gains each at their
# own rate: val 1.859-1.864 over seeds 1337, 1, 2 in 180 steps, where
# nanoGPT's layout with Muon needs 600 for 1.855 and the AdamW recipe 2000
# for 1.90 (docs/speedrun.md has what else was tried).

out_dir = 'out-speedrun-188'
dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`

# the measure: one evaluation, after the last step, of 200 val batches
# (nanoGPT's estimate_loss without its train split), and the loss over the
# whole val split
eval_interval = 0
eval_iters = 200
eval_full = True
eval_train = False
log_interval = 50
always_save_checkpoint = False

arch = 'qwen3' # qk_norm is on, hidden_dim 3 n_embd, n_kv_head = n_head
rope_theta = 10000.0 # RoPE's base for a 64-token context (Qwen3's 1e6 is for long ones)
n_layer = 3
n_head = 4
n_embd = 128
block_size = 64
batch_size = 16
dropout = 0.0

optimizer = 'muon'
muon_lr = 0.05 # Muon's peak rate (the schedule scales every rate with learning_rate's)
muon_momentum = 0.95
learning_rate = 4e-3 # AdamW's, for what has no rate of its own below
embedding_lr = 0.2 # the token embedding learns 50x faster
head_lr = 8e-3
scalar_lr = 0.012 # the RMSNorm gains
beta2 = 0.99
weight_decay = 0.0
max_iters = 180
lr_decay_iters = 180
warmup_iters = 10
min_lr = 3e-4
