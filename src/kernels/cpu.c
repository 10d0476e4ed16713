/* kernels/cpu.c - the one place that asks the CPU what it can run. The gemm
 * (gemm.c, sgemm_packed.c) and the vector kernels (vec_portable.c) choose
 * their instruction set from this answer.
 *
 * NB_CPU=avx2 in the environment caps the answer at AVX2 + FMA (the
 * AVX-512 kernels off, to measure the AVX2 ones on a machine that has
 * both), NB_CPU=portable at none; the results' bits may differ between the
 * sets by FMA rounding, never their meaning. */
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static nb_cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_probe(void) {
#if NB_X86_KERNELS
    __builtin_cpu_init();
    cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    cpu.avx512f = __builtin_cpu_supports("avx512f") && cpu.avx2_fma;
    cpu.avx512dq = cpu.avx512f && __builtin_cpu_supports("avx512dq");
    const char *cap = getenv("NB_CPU");
    if (cap && (!strcmp(cap, "avx2") || !strcmp(cap, "portable")))
        cpu.avx512f = cpu.avx512dq = false;
    if (cap && !strcmp(cap, "portable")) cpu.avx2_fma = false;
#endif
}

const nb_cpu_features *nb_cpu(void) {
    pthread_once(&cpu_once, cpu_probe);
    return &cpu;
}
