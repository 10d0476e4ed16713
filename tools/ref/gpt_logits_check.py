#!/usr/bin/python3
"""gpt_logits_check.py - nabla's GPT logits against the PyTorch reference for a
model file written by nabla (nabla-gpt's out_dir/model.safetensors, or any
state_dict in either layout). Run by hand; needs python3-torch:

    /usr/bin/python3 tools/ref/gpt_logits_check.py MODEL.safetensors --n_head=N
        [--prompt=3,1,4,1,5] [--lib=build/libnabla.so] [--dtype=float64|float32]
        [--tol=1e-9]

It loads the file into the reference model of its layout (tools/ref/gpt_ref.py:
GPTModel or NanoGPT, sizes read from the names and shapes), and into nabla
through the shared library with ctypes (nb_load_safetensors,
nb_gpt_from_state_dict, nb_gpt_infer), runs both in eval mode on the prompt
(token ids; default the first min(8, block_size) ids 0, 1, 2, ...), and prints
the largest absolute difference of the (1, T, V) logits. Exit status 0 when it
is within --tol (default 1e-9 for float64, 1e-4 for float32), 1 otherwise.
"""
import argparse
import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_ref import load_state_dict_any  # noqa: E402

NB_F32, NB_F64, NB_I64 = 0, 1, 2


def nabla_logits(lib_path, model_path, n_head, ids, dtype):
    lib = ctypes.CDLL(lib_path)
    vp = ctypes.c_void_p
    lib.nb_ctx_new.restype = vp
    lib.nb_ctx_new.argtypes = [ctypes.c_size_t]
    lib.nb_ctx_error.restype = ctypes.c_char_p
    lib.nb_ctx_error.argtypes = [vp]
    lib.nb_ctx_free.argtypes = [vp]
    lib.nb_load_safetensors.argtypes = [vp, ctypes.c_char_p, vp]
    lib.nb_gpt_from_state_dict.argtypes = [vp, vp, vp, ctypes.c_int, ctypes.c_double,
                                           ctypes.c_int, vp]
    lib.nb_from_data.restype = vp
    lib.nb_from_data.argtypes = [vp, ctypes.c_int, ctypes.c_int,
                                 ctypes.POINTER(ctypes.c_int64), vp]
    lib.nb_gpt_infer.restype = vp
    lib.nb_gpt_infer.argtypes = [vp, vp, vp]
    lib.nb_get.restype = ctypes.c_double
    lib.nb_get.argtypes = [vp, ctypes.c_size_t]
    lib.nb_gpt_free.argtypes = [vp]
    lib.nb_list_free.argtypes = [vp]

    ctx = lib.nb_ctx_new(0)
    # nb_tensor_list and nb_gpt are plain structs of a few KB: generous,
    # zeroed buffers stand in for them
    sd = ctypes.create_string_buffer(1 << 16)
    model = ctypes.create_string_buffer(1 << 16)

    def check(status, what):
        if status:
            err = lib.nb_ctx_error(ctx)
            raise SystemExit("nabla: %s: %s" % (what, err.decode() if err else status))

    check(lib.nb_load_safetensors(ctx, model_path.encode(), sd), "load")
    check(lib.nb_gpt_from_state_dict(ctx, model, sd, n_head, 0.0, dtype, None), "model")
    shape = (ctypes.c_int64 * 2)(1, len(ids))
    data = (ctypes.c_int64 * len(ids))(*ids)
    x = lib.nb_from_data(ctx, NB_I64, 2, shape, data)
    y = lib.nb_gpt_infer(ctx, model, x)
    if not y:
        check(1, "forward")
    return lib, ctx, model, sd, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--n_head", type=int, required=True)
    ap.add_argument("--prompt", default=None)
    ap.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "libnabla.so"))
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--tol", type=float, default=None)
    a = ap.parse_args()
    tdt = torch.float64 if a.dtype == "float64" else torch.float32
    ref, arch, cfg, _ = load_state_dict_any(a.model, a.n_head, tdt)
    ref.eval()
    if a.prompt:
        ids = [int(t) for t in a.prompt.split(",")]
    else:
        ids = [i % cfg["vocab_size"] for i in range(min(8, cfg["block_size"]))]
    with torch.no_grad():
        want, _ = ref(torch.tensor([ids]))
    lib, ctx, model, sd, y = nabla_logits(os.path.abspath(a.lib), a.model, a.n_head, ids,
                                          NB_F64 if a.dtype == "float64" else NB_F32)
    flat = want.reshape(-1).tolist()
    worst = max(abs(lib.nb_get(y, i) - w) for i, w in enumerate(flat))
    lib.nb_gpt_free(model)
    lib.nb_list_free(sd)
    lib.nb_ctx_free(ctx)
    tol = a.tol if a.tol is not None else (1e-9 if a.dtype == "float64" else 1e-4)
    print("%s (%s, %d layers, %d heads, C %d, V %d): prompt %s, %d logits, max |nabla - torch| "
          "= %.3g (tol %.1g)" % (a.model, arch, cfg["n_layer"], a.n_head, cfg["n_embd"],
                                 cfg["vocab_size"], ids, len(flat), worst, tol))
    return 0 if worst <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
