/* nabla.h - a small, fast reverse-mode autograd library in C.
 *
 * A tutorial in five steps: fit y = a*x^2 + b, then check the gradient.
 *
 *   #include <nabla.h>
 *
 *   nb_ctx *params = nb_ctx_new(0);               // lives as long as the model
 *   nb_ctx *step   = nb_ctx_new(0);               // reset every step
 *
 *   // 1. Leaves: parameters that require grad live in `params`.
 *   nb_tensor *a = nb_requires_grad(nb_scalar(params, NB_F32, 0.5));
 *   nb_tensor *b = nb_requires_grad(nb_scalar(params, NB_F32, 0.0));
 *
 *   for (int it = 0; it < 100; it++) {
 *       nb_ctx_reset(step);
 *       // 2. Forward: each op records itself on `step`'s tape.
 *       nb_tensor *x  = nb_from_doubles(step, NB_F32, NB_SHAPE(3), (double[]){1, 2, 3});
 *       nb_tensor *y  = nb_from_doubles(step, NB_F32, NB_SHAPE(3), (double[]){3, 9, 19});
 *       nb_tensor *f  = nb_add(step, nb_mul(step, a, nb_mul(step, x, x)), b);
 *       nb_tensor *loss = nb_mse_loss(step, f, y);
 *       // 3. One check for every op above: errors are sticky.
 *       if (nb_ctx_error(step)) { fprintf(stderr, "%s\n", nb_ctx_error(step)); break; }
 *       // 4. Backward fills a->grad and b->grad; then a plain SGD step.
 *       nb_zero_grad(a); nb_zero_grad(b);
 *       nb_backward(step, loss, NULL);
 *       ((float *)a->data)[0] -= 0.01f * ((float *)a->grad)[0];
 *       ((float *)b->data)[0] -= 0.01f * ((float *)b->grad)[0];
 *   }
 *
 *   // 5. A float64 gradient check of any function built from nabla ops
 *   //    (see nabla/gradcheck.h): central differences, PyTorch's tolerances.
 *
 *   nb_ctx_free(step); nb_ctx_free(params);
 *
 * The parts:
 *   nabla/core.h       contexts, tensors, the tape, errors, custom ops
 *   nabla/ops.h        the differentiable ops (add ... layer_norm)
 *   nabla/random.h     PCG32, the only source of randomness
 *   nabla/gradcheck.h  finite-difference gradient checks
 *   nabla/nn.h         modules: Linear, Dropout, Embedding, LayerNorm, attention
 *   nabla/optim.h      SGD, Adam, AdamW, gradient clipping, lr schedule, train step
 *   nabla/gpt.h        a small GPT (GPTModel / nanoGPT layouts), KV cache, sampling
 *   nabla/data.h       character tokenizer, 90/10 split, random batches
 *   nabla/io.h         safetensors checkpoints
 *   nabla/teach.h      the tape explorer page, op formulas
 *
 * Errors: no function aborts or exits on bad input, and there is one error
 * channel, the sticky error of a context (nabla/core.h). Every function that
 * takes a context takes it first, records the first error there and returns
 * NULL (or an nb_status, for convenience); later calls on that context do
 * nothing (the tape views excepted: they show how an error came about);
 * nb_ctx_error() gives the message. Functions without a context argument
 * record on the context of what they work on: a tensor's owner (nb_list_add,
 * nb_requires_grad), a module's parameter context (nb_params_copy_from,
 * nb_gpt_load_state_dict), the context an optimizer was made with
 * (nb_optim_step, nb_optim_set_lr, nb_optim_load_state). */
#ifndef NABLA_H
#define NABLA_H

#include "nabla/core.h"
#include "nabla/data.h"
#include "nabla/gpt.h"
#include "nabla/gradcheck.h"
#include "nabla/io.h"
#include "nabla/nn.h"
#include "nabla/ops.h"
#include "nabla/optim.h"
#include "nabla/random.h"
#include "nabla/teach.h"

#endif
