/* kernels/sgemm_avx512.c - the AVX-512 float32 gemm micro-kernel: a tile of
 * 8 rows x 32 columns (two zmm vectors a row, 16 accumulators) of
 * c (+)= a @ b (contract in kernels.h). */
#include "kernels/kernels_internal.h"

#if NB_X86_KERNELS
#include <immintrin.h>

enum { MR = NB_SGEMM_AVX512_MR, NR = NB_SGEMM_AVX512_NR };

/* The row loops are written out (ROWS8) so that gcc and clang keep the 16
 * accumulators in registers at -O2. */
#define ROWS8(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

__attribute__((target("avx512f"))) void nb_sgemm_ukr_avx512(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                                             const float *b, int64_t ldb, float *c,
                                                             int64_t ldc, bool add) {
#define DECL(r) __m512 c##r##0 = _mm512_setzero_ps(), c##r##1 = _mm512_setzero_ps();
    ROWS8(DECL)
    /* c's rows asked for before the products, as the AVX2 kernel does */
#define PREFETCH(r)                                                        \
    {                                                                      \
        _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);          \
        _mm_prefetch((const char *)(c + (r) * ldc + 16), _MM_HINT_T0);     \
        _mm_prefetch((const char *)(c + (r) * ldc + 31), _MM_HINT_T0);     \
    }
    ROWS8(PREFETCH)
    for (int64_t p = 0; p < kc; p++) {
        __m512 b0 = _mm512_loadu_ps(b + p * ldb), b1 = _mm512_loadu_ps(b + p * ldb + 16);
        const float *ap = a + p * acs;
#define FMA(r)                                       \
    {                                                \
        __m512 av = _mm512_set1_ps(ap[(r) * ars]);           \
        c##r##0 = _mm512_fmadd_ps(av, b0, c##r##0);  \
        c##r##1 = _mm512_fmadd_ps(av, b1, c##r##1);  \
    }
        ROWS8(FMA)
    }
#define STORE(r)                                                              \
    {                                                                         \
        float *cr = c + (r) * ldc;                                            \
        if (add) {                                                            \
            c##r##0 = _mm512_add_ps(_mm512_loadu_ps(cr), c##r##0);            \
            c##r##1 = _mm512_add_ps(_mm512_loadu_ps(cr + 16), c##r##1);       \
        }                                                                     \
        _mm512_storeu_ps(cr, c##r##0);                                        \
        _mm512_storeu_ps(cr + 16, c##r##1);                                   \
    }
    ROWS8(STORE)
}
#endif
