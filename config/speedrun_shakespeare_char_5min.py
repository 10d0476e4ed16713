# Speedrun target B (docs/speedrun.md): the lowest val loss on nanoGPT's
# shakespeare_char in 5 minutes of wall clock on 2 threads, from the
# command's start to the end of its final evaluation (target <= 1.55):
#   nabla-gpt train config/speedrun_shakespeare_char_5min.py --threads=2
# Six blocks 192 wide in Qwen3's layout (RMSNorm, RoPE, QK-norm, a gated
# SiLU MLP; 2.9M parameters), context 128, trained with Muon on the
# blocks' matrices and AdamW on the rest for 262 seconds on the clock: the
# cosine decays over that time, whatever the machine's speed, and the final
# evaluation (about 22 s on 2 cores of an Intel Xeon of 2026-12-02) fits in
# what is left. There: 766 steps, val 1.52.

out_dir = 'out-speedrun-5min'
dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`

# the measure: one evaluation, after the last step, of 200 val batches
# (nanoGPT's estimate_loss without its train split), and the loss over the
# whole val split
eval_interval = 0
eval_iters = 200
eval_full = True
eval_train = False
log_interval = 100
always_save_checkpoint = False

arch = 'qwen3' # qk_norm is on, hidden_dim 3 n_embd, n_kv_head = n_head
rope_theta = 10000.0 # RoPE's base for a 128-token context
n_layer = 6
n_head = 6
n_embd = 192
block_size = 128
batch_size = 16
dropout = 0.0

optimizer = 'muon'
muon_lr = 0.02 # Muon's peak rate (the schedule scales it with learning_rate's)
muon_momentum = 0.95
learning_rate = 3e-3 # AdamW's, for the embeddings, the head, gains and biases
beta2 = 0.99
weight_decay = 0.0
max_time = 262.0 # seconds of steps; the cosine ends here
max_iters = 100000 # only a cap: the clock ends the run
warmup_iters = 50
min_lr = 0.0 # the cosine ends at zero: the last steps settle the weights
