# nanoGPT's settings for its character-level Shakespeare model
# (config/train_shakespeare_char.py in nanoGPT), as key = value lines that
# `nabla-gpt train` reads the way nanoGPT's configurator does: flags given
# after this file override it. The values are nanoGPT's; the comments are
# nabla's.

out_dir = 'out-shakespeare-char'
eval_interval = 250 # an evaluation, and a checkpoint, every 250 steps
eval_iters = 200
log_interval = 10

# the text is small and the model overfits: keep only the best validation loss
always_save_checkpoint = False

wandb_log = False
wandb_project = 'shakespeare-char'
wandb_run_name = 'mini-gpt'

dataset = 'shakespeare_char' # data/shakespeare_char, made by `nabla-gpt prepare`
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256 # characters of context

# 6 layers, 6 heads, 384 wide: about 10.7M parameters
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2

learning_rate = 1e-3
max_iters = 5000
lr_decay_iters = 5000 # the cosine decay ends with the run
min_lr = 1e-4 # a tenth of learning_rate
beta2 = 0.99

warmup_iters = 100

# for a CPU, nanoGPT's README adds on the command line
# --device=cpu --compile=False (and a smaller model: see docs/gpt.md)
