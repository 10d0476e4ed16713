/* kernels/cpu.c - the one place that asks the CPU what it can run. The gemm
 * (gemm.c, sgemm_packed.c) and the vector kernels (vec_portable.c) choose
 * their instruction set from this answer. */
#include "kernels/kernels_internal.h"

#include <pthread.h>

static nb_cpu_features cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void cpu_probe(void) {
#if NB_X86_KERNELS
    __builtin_cpu_init();
    cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    cpu.avx512f = __builtin_cpu_supports("avx512f") && cpu.avx2_fma;
    cpu.avx512dq = cpu.avx512f && __builtin_cpu_supports("avx512dq");
#endif
}

const nb_cpu_features *nb_cpu(void) {
    pthread_once(&cpu_once, cpu_probe);
    return &cpu;
}
