# Speedrun target A (docs/speedrun.md): val loss <= 1.88 on nanoGPT's
# shakespeare_char in <= 10 s of wall clock on 2 threads, from the command's
# start to the end of its final evaluation:
#   nabla-gpt train config/speedrun_shakespeare_char_188.py --threads=2
# The model is nanoGPT's CPU one (4 layers, 4 heads, 128 wide, context 64);
# the change is the optimizer: Muon on the blocks' matrices, AdamW on the rest,
# which reaches 1.855 in 600 steps where the AdamW recipe needs 2000 for 1.90.
# Estimated at 10-12 s on 2 idle Zen 4 cores: at or just over the 10 s of the
# target (docs/speedrun.md says where the time goes).

out_dir = 'out-speedrun-188'
dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`

# the measure: one evaluation, after the last step, of 200 batches a split
# (nanoGPT's estimate_loss), and the loss over the whole val split
eval_interval = 0
eval_iters = 200
eval_full = True
log_interval = 50
always_save_checkpoint = False

n_layer = 4
n_head = 4
n_embd = 128
block_size = 64
batch_size = 12
dropout = 0.0

optimizer = 'muon'
muon_lr = 0.02 # Muon's peak rate (the schedule scales it with learning_rate's)
muon_momentum = 0.95
learning_rate = 3e-3 # AdamW's, for the embeddings, the head, gains and biases
beta2 = 0.99
weight_decay = 0.0
max_iters = 600
lr_decay_iters = 600
warmup_iters = 30
min_lr = 3e-4
