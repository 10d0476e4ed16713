/* kernels/kernels.h - the SIMD kernels (one small file per instruction set)
 * and the portable code that drives them. Only these files hold intrinsics;
 * each kernel has a portable twin the tests compare it with. */
#ifndef NB_KERNELS_H
#define NB_KERNELS_H

#include "nb_internal.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(NB_NO_AVX2)
#define NB_X86_KERNELS 1
#else
#define NB_X86_KERNELS 0
#endif

/* ---- float32 gemm micro-kernels (sgemm_*.c) -------------------------------
 * c (MR, NR) = or += a (MR, kc) @ b (kc, NR), where a is packed column by
 * column (a[p * MR + r]) and b row by row (b[p * NR + l]), both zero-padded
 * to the full tile; c's rows are ldc apart. Each c element is one FMA chain
 * over p = 0..kc-1 from zero, then stored in or added to c: every kernel
 * (and the unpacked gemm in ops/matmul.c) gives the same bits. */
typedef void (*nb_sgemm_ukr)(int64_t kc, const float *a, const float *b, float *c, int64_t ldc,
                             bool add);

typedef struct nb_sgemm_kernel {
    int mr, nr;
    nb_sgemm_ukr ukr;
} nb_sgemm_kernel;

#if NB_X86_KERNELS
#define NB_SGEMM_AVX512_MR 8
#define NB_SGEMM_AVX512_NR 32
NB_HIDDEN void nb_sgemm_ukr_avx512(int64_t kc, const float *a, const float *b, float *c,
                                   int64_t ldc, bool add);
#define NB_SGEMM_AVX2_MR 6
#define NB_SGEMM_AVX2_NR 16
NB_HIDDEN void nb_sgemm_ukr_avx2(int64_t kc, const float *a, const float *b, float *c,
                                 int64_t ldc, bool add);
#endif

/* The kernel for this CPU (AVX-512, else AVX2 + FMA), or NULL when it has
 * neither (callers then use the portable gemm). Decided once. */
NB_HIDDEN const nb_sgemm_kernel *nb_sgemm_kernel_best(void);

/* c (rows, cols) (+)= a @ b as nb_gemm_float does (same strides, same
 * bits), blocked and packed for kernel k: panels of b (kc, nc) and slivers
 * of a (MR, kc) are copied into per-thread buffers kept for the thread's
 * life. kc is NB_GEMM_KC, the same inner block as the unpacked gemm. */
#define NB_GEMM_KC 256
NB_HIDDEN bool nb_sgemm_packed(const nb_sgemm_kernel *k, float *c, const float *a, int64_t ars,
                               int64_t acs, const float *b, int64_t brs, int64_t bcs,
                               int64_t rows, int64_t inner, int64_t cols, bool add);

#endif
