/* kernels/sgemm_avx2.c - the AVX2 + FMA float32 gemm micro-kernel: a tile
 * of 6 rows x 16 columns (two ymm vectors a row, 12 accumulators) of
 * c (+)= a @ b (contract in kernels.h), and the same tile for 1 to 5 rows. */
#include "kernels/kernels_internal.h"

#if NB_X86_KERNELS
#include <immintrin.h>

enum { MR = NB_SGEMM_AVX2_MR, NR = NB_SGEMM_AVX2_NR };

/* The row loops are written out (ROWS<n>) so that gcc and clang keep the
 * accumulators in registers at -O2. */
#define ROWS1(X) X(0)
#define ROWS2(X) ROWS1(X) X(1)
#define ROWS3(X) ROWS2(X) X(2)
#define ROWS4(X) ROWS3(X) X(3)
#define ROWS5(X) ROWS4(X) X(4)
#define ROWS6(X) ROWS5(X) X(5)

#define DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
#define FMA(r)                                            \
    {                                                     \
        __m256 av = _mm256_broadcast_ss(ap + (r) * ars);  \
        c##r##0 = _mm256_fmadd_ps(av, b0, c##r##0);       \
        c##r##1 = _mm256_fmadd_ps(av, b1, c##r##1);       \
    }
/* c's rows asked for before the products: a tile of a large gradient (a
 * mixture of experts' weights) comes from memory while the FMAs run, not
 * after them */
#define PREFETCH(r)                                            \
    {                                                          \
        _mm_prefetch((const char *)(c + (r) * ldc), _MM_HINT_T0);      \
        _mm_prefetch((const char *)(c + (r) * ldc + 15), _MM_HINT_T0); \
    }
#define STORE(r)                                                       \
    {                                                                  \
        float *cr = c + (r) * ldc;                                     \
        if (add) {                                                     \
            c##r##0 = _mm256_add_ps(_mm256_loadu_ps(cr), c##r##0);     \
            c##r##1 = _mm256_add_ps(_mm256_loadu_ps(cr + 8), c##r##1); \
        }                                                              \
        _mm256_storeu_ps(cr, c##r##0);                                 \
        _mm256_storeu_ps(cr + 8, c##r##1);                             \
    }

/* c (rows of ROWS, NR) (+)= a @ b: one FMA chain per element over p, from
 * zero, as every kernel computes it. */
#define UKR_DEFINE(name, ROWS)                                                                  \
    __attribute__((target("avx2,fma"))) void name(int64_t kc, const float *a, int64_t ars,     \
                                                  int64_t acs, const float *b, int64_t ldb,    \
                                                  float *c, int64_t ldc, bool add) {           \
        ROWS(DECL)                                                                             \
        ROWS(PREFETCH)                                                                         \
        for (int64_t p = 0; p < kc; p++) {                                                     \
            __m256 b0 = _mm256_loadu_ps(b + p * ldb), b1 = _mm256_loadu_ps(b + p * ldb + 8);   \
            const float *ap = a + p * acs;                                                     \
            ROWS(FMA)                                                                          \
        }                                                                                      \
        ROWS(STORE)                                                                            \
    }

UKR_DEFINE(nb_sgemm_ukr_avx2, ROWS6)
static UKR_DEFINE(ukr_avx2_1, ROWS1)
static UKR_DEFINE(ukr_avx2_2, ROWS2)
static UKR_DEFINE(ukr_avx2_3, ROWS3)
static UKR_DEFINE(ukr_avx2_4, ROWS4)
static UKR_DEFINE(ukr_avx2_5, ROWS5)

/* A partial sliver's h < MR rows read in place and written straight to c,
 * rather than packed with zero rows and computed through a buffer: a
 * group of 16 rows (the fused attention's) ends in one of 4. */
void nb_sgemm_ukr_avx2_rows(int h, int64_t kc, const float *a, int64_t ars, int64_t acs,
                            const float *b, int64_t ldb, float *c, int64_t ldc, bool add) {
    static const nb_sgemm_ukr by_rows[MR] = {NULL,       ukr_avx2_1, ukr_avx2_2,
                                             ukr_avx2_3, ukr_avx2_4, ukr_avx2_5};
    by_rows[h](kc, a, ars, acs, b, ldb, c, ldc, add);
}
#endif
