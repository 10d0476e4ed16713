# Speedrun target A (docs/speedrun.md): val loss <= 1.88 on nanoGPT's
# shakespeare_char in <= 10 s of wall clock on 2 threads, from the command's
# start to the end of its final evaluation:
#   nabla-gpt train config/speedrun_shakespeare_char_188.py --threads=2
# The model has the size of nanoGPT's CPU one (4 layers, 4 heads, 128 wide,
# context 64) in Qwen3's layout (RMSNorm, RoPE, QK-norm, a gated SiLU MLP),
# trained with Muon on the blocks' matrices and AdamW on the rest: val
# 1.861-1.866 over seeds 1337, 1, 2 in 280 steps, where nanoGPT's layout with
# Muon needs 600 for 1.855 and the AdamW recipe 2000 for 1.90.
# A step costs about 1.07 of the nanoGPT layout's (4.27 against 3.97 GFLOP).
# Measured 36-38 s on 2 idle Zen 3 cores, where the AdamW recipe takes 131 s
# (docs/speedrun.md).

out_dir = 'out-speedrun-188'
dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`

# the measure: one evaluation, after the last step, of 200 batches a split
# (nanoGPT's estimate_loss), and the loss over the whole val split
eval_interval = 0
eval_iters = 200
eval_full = True
log_interval = 50
always_save_checkpoint = False

arch = 'qwen3' # qk_norm is on, hidden_dim 3 n_embd, n_kv_head = n_head
rope_theta = 10000.0 # RoPE's base for a 64-token context (Qwen3's 1e6 is for long ones)
n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
batch_size = 12
dropout = 0.0

optimizer = 'muon'
muon_lr = 0.03 # Muon's peak rate (the schedule scales it with learning_rate's)
muon_momentum = 0.95
learning_rate = 4e-3 # AdamW's, for the embeddings, the head, gains and biases
beta2 = 0.99
weight_decay = 0.0
max_iters = 280
lr_decay_iters = 280
warmup_iters = 30
min_lr = 3e-4
