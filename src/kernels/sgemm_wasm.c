/* kernels/sgemm_wasm.c - the WebAssembly SIMD128 float32 gemm micro-kernel:
 * a tile of 4 rows x 8 columns (two f32x4 vectors a row, 8 accumulators)
 * of c (+)= a @ b (contract in kernels_internal.h), and the same tile for
 * 1 to 3 rows. V8 keeps fewer v128 values in registers than the 16 the
 * machine has: with 6 rows (12 accumulators, b's two vectors and a's
 * broadcast) it spilled two accumulators to the stack, a store and a load
 * in every step's dependency chain, and 4 rows ran the reverse-digits
 * training step about 10% faster (node 20, Zen 3). 4 also divides the
 * fused attention's groups of 16 rows, so they need no partial tile.
 *
 * WebAssembly SIMD has no fused multiply-add (relaxed SIMD's may or may
 * not fuse, engine by engine), so each step is a multiply and an add,
 * rounded separately: the same operations, in the same order, as the
 * portable gemm (kernels/gemm.c, MM_MADD_PLAIN) that the wasm build ran
 * before, so the products keep their bits. */
#include "kernels/kernels_internal.h"

#if NB_WASM_KERNELS
#include <wasm_simd128.h>

enum { MR = NB_SGEMM_WASM_MR, NR = NB_SGEMM_WASM_NR };

/* The row loops are written out (ROWS<n>) so that the accumulators stay
 * in locals (registers), not in a stack array. */
#define ROWS1(X) X(0)
#define ROWS2(X) ROWS1(X) X(1)
#define ROWS3(X) ROWS2(X) X(2)
#define ROWS4(X) ROWS3(X) X(3)

#define DECL(r) v128_t c##r##0 = wasm_f32x4_const_splat(0.0f), c##r##1 = c##r##0;
#define MADD(r)                                                      \
    {                                                                \
        v128_t av = wasm_v128_load32_splat(ap + (r) * ars);          \
        c##r##0 = wasm_f32x4_add(c##r##0, wasm_f32x4_mul(av, b0));   \
        c##r##1 = wasm_f32x4_add(c##r##1, wasm_f32x4_mul(av, b1));   \
    }
#define STORE(r)                                                           \
    {                                                                      \
        float *cr = c + (r) * ldc;                                         \
        if (add) {                                                         \
            c##r##0 = wasm_f32x4_add(wasm_v128_load(cr), c##r##0);         \
            c##r##1 = wasm_f32x4_add(wasm_v128_load(cr + 4), c##r##1);     \
        }                                                                  \
        wasm_v128_store(cr, c##r##0);                                      \
        wasm_v128_store(cr + 4, c##r##1);                                  \
    }

/* c (rows of ROWS, NR) (+)= a @ b: one multiply-add chain per element over
 * p, from zero. */
#define UKR_DEFINE(name, ROWS)                                                             \
    void name(int64_t kc, const float *a, int64_t ars, int64_t acs, const float *b,        \
              int64_t ldb, float *c, int64_t ldc, bool add) {                              \
        ROWS(DECL)                                                                         \
        for (int64_t p = 0; p < kc; p++) {                                                 \
            v128_t b0 = wasm_v128_load(b + p * ldb), b1 = wasm_v128_load(b + p * ldb + 4); \
            const float *ap = a + p * acs;                                                 \
            ROWS(MADD)                                                                     \
        }                                                                                  \
        ROWS(STORE)                                                                        \
    }

UKR_DEFINE(nb_sgemm_ukr_wasm, ROWS4)
static UKR_DEFINE(ukr_wasm_1, ROWS1)
static UKR_DEFINE(ukr_wasm_2, ROWS2)
static UKR_DEFINE(ukr_wasm_3, ROWS3)

/* A partial sliver's h < MR rows read in place and written straight to c. */
void nb_sgemm_ukr_wasm_rows(int h, int64_t kc, const float *a, int64_t ars, int64_t acs,
                            const float *b, int64_t ldb, float *c, int64_t ldc, bool add) {
    static const nb_sgemm_ukr by_rows[MR] = {NULL, ukr_wasm_1, ukr_wasm_2, ukr_wasm_3};
    by_rows[h](kc, a, ars, acs, b, ldb, c, ldc, add);
}
#endif
