/* kernels/sgemm_avx2.c - the AVX2 + FMA float32 gemm micro-kernel: a tile
 * of 6 rows x 16 columns (two ymm vectors a row, 12 accumulators) of
 * c (+)= a @ b (contract in kernels.h). */
#include "kernels/kernels_internal.h"

#if NB_X86_KERNELS
#include <immintrin.h>

enum { MR = NB_SGEMM_AVX2_MR, NR = NB_SGEMM_AVX2_NR };

/* The row loops are written out (ROWS6) so that gcc and clang keep the 12
 * accumulators in registers at -O2. */
#define ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

__attribute__((target("avx2,fma"))) void nb_sgemm_ukr_avx2(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                                           const float *b, int64_t ldb, float *c,
                                                           int64_t ldc, bool add) {
#define DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
    ROWS6(DECL)
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);
        const float *ap = a + p * acs;
#define FMA(r)                                       \
    {                                                \
        __m256 av = _mm256_broadcast_ss(ap + (r) * ars);   \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);  \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);  \
    }
        ROWS6(FMA)
    }
#define STORE(r)                                                              \
    {                                                                         \
        float *cr = c + (r) * ldc;                                            \
        if (add) {                                                            \
            c##r##0 = _mm256_add_ps(_mm256_loadu_ps(cr), c##r##0);            \
            c##r##1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), c##r##1);        \
        }                                                                     \
        _mm256_storeu_ps(cr, c##r##0);                                        \
        _mm256_storeu_ps(cr + 8, c##r##1);                                    \
    }
    ROWS6(STORE)
}
#endif
