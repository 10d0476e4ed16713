"""tools/bench/torch_modes.py - the modes every PyTorch benchmark here takes its best of.

PyTorch is compared at its best on the machine of the day:
- threads: 1 thread, 2 threads, and 2 threads with OMP_WAIT_POLICY=PASSIVE. Each mode runs
  in its own process, because OMP_NUM_THREADS and OPENBLAS_NUM_THREADS must be set before
  torch is imported (torch.set_num_threads does not reach Debian's OpenBLAS);
- BLAS kernels: Debian's PyTorch calls the system OpenBLAS, which picks its kernels from the
  CPU's family and model. A model newer than the OpenBLAS release falls back to its oldest
  x86-64 kernels (OpenBLAS 0.3.21 takes an Intel family 6 model 207, 2026-12-02, for a
  "Prescott": 306 ms for PyTorch's cpu-baby step on one thread against 141 ms with
  OPENBLAS_CORETYPE=SkylakeX), and a machine's environment may pin a core type or a cache
  size. So each thread mode also runs with the best core type for the CPU's instruction
  set (SkylakeX where AVX-512 exists, Haswell where AVX2 does) and OPENBLAS_L2_SIZE unset.
"""
import os

THREADS = {"1": (1, None), "2": (2, None), "2-passive": (2, "PASSIVE")}


def best_coretype():
    """OpenBLAS's fastest kernels for this CPU's instruction set, or None."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return None
    if "avx512f" in flags:
        return "SkylakeX"
    if "avx2" in flags and "fma" in flags:
        return "Haswell"
    return None


def _modes():
    """name -> (threads, OMP_WAIT_POLICY or None, OPENBLAS_CORETYPE or None)"""
    modes = {name: (t, p, None) for name, (t, p) in THREADS.items()}
    core = best_coretype()
    if core:
        for name, (t, p) in THREADS.items():
            modes["%s-%s" % (name, core.lower())] = (t, p, core)
    return modes


MODES = _modes()


def threads(mode):
    return MODES[mode][0]


def env(mode):
    """The environment a child process of this mode runs in."""
    t, policy, core = MODES[mode]
    e = dict(os.environ, OMP_NUM_THREADS=str(t), OPENBLAS_NUM_THREADS=str(t))
    e.pop("OMP_WAIT_POLICY", None)
    if policy:
        e["OMP_WAIT_POLICY"] = policy
    if core:
        e["OPENBLAS_CORETYPE"] = core
        e.pop("OPENBLAS_L2_SIZE", None)
    return e
