# Speedrun target B (docs/speedrun.md): the lowest val loss on nanoGPT's
# shakespeare_char in 5 minutes of wall clock on 2 threads, from the
# command's start to the end of its final evaluation (target <= 1.55):
#   nabla-gpt train config/speedrun_shakespeare_char_5min.py --threads=2
# A model between nanoGPT's CPU one and its full one (6 layers, 6 heads, 192
# wide, context 128, about 2.7M parameters), trained with Muon on the
# blocks' matrices and AdamW on the rest, for about 3.4 passes over the text:
# val 1.525 (seed 1337).

out_dir = 'out-speedrun-5min'
dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`

# the measure: one evaluation, after the last step, of 200 batches a split
# (nanoGPT's estimate_loss), and the loss over the whole val split
eval_interval = 0
eval_iters = 200
eval_full = True
log_interval = 100
always_save_checkpoint = False

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
max_iters = 1300 # about 0.1 s a step on 2 idle Zen 4 cores (see docs/speedrun.md)
lr_decay_iters = 1300
warmup_iters = 50
min_lr = 0.0 # the cosine ends at zero: the last steps settle the weights
