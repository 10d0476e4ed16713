/* kernels/kernels_internal.h - the compute kernels the ops call: the gemm
 * engine (gemm.c) and its packed float32 micro-kernels (sgemm_*.c), the
 * vector kernels (vec_*.c: one small file per instruction set, each with a
 * portable twin the tests compare it with), and the one place that asks
 * the CPU what it can do (cpu.c). Only the *_avx2.c, *_avx512.c and
 * *_wasm.c files hold intrinsics. */
#ifndef NB_KERNELS_INTERNAL_H
#define NB_KERNELS_INTERNAL_H

#include "core/core_internal.h"

/* ---- the CPU (cpu.c) --------------------------------------------------------
 * What this CPU can run, asked once. NB_X86_KERNELS off: all false. */
typedef struct nb_cpu_features {
    bool avx2_fma; /* AVX2 and FMA */
    bool avx512f;
    bool avx512dq; /* 64-bit lane multiplies (the AVX-512 PCG32) */
} nb_cpu_features;
NB_HIDDEN const nb_cpu_features *nb_cpu(void);


/* ---- float32 gemm micro-kernels (sgemm_*.c) -------------------------------
 * c (MR, NR) = or += a (MR, kc) @ b (kc, NR), where a's element (r, p) is
 * a[r * ars + p * acs] (in place, or packed with ars 1, acs MR) and b's
 * rows are ldb apart (b[p * ldb + l]: packed, zero-padded to NR, with ldb
 * NR, or read in place); c's rows are ldc apart. Each c element is one FMA chain
 * over p = 0..kc-1 from zero, then stored in or added to c: every kernel
 * (and the unpacked gemm in kernels/gemm.c) gives the same bits. */
typedef void (*nb_sgemm_ukr)(int64_t kc, const float *a, int64_t ars, int64_t acs,
                             const float *b, int64_t ldb, float *c, int64_t ldc, bool add);

/* The same tile for 0 < h < MR rows (c's and a's first h rows only). */
typedef void (*nb_sgemm_ukr_rows)(int h, int64_t kc, const float *a, int64_t ars, int64_t acs,
                                  const float *b, int64_t ldb, float *c, int64_t ldc, bool add);

typedef struct nb_sgemm_kernel {
    int mr, nr;
    nb_sgemm_ukr ukr;
    nb_sgemm_ukr_rows ukr_rows; /* NULL: a partial sliver is packed with zero rows */
} nb_sgemm_kernel;

#if NB_X86_KERNELS
#define NB_SGEMM_AVX512_MR 8
#define NB_SGEMM_AVX512_NR 32
NB_HIDDEN void nb_sgemm_ukr_avx512(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                   const float *b, int64_t ldb, float *c, int64_t ldc,
                                   bool add);
#define NB_SGEMM_AVX2_MR 6
#define NB_SGEMM_AVX2_NR 16
NB_HIDDEN void nb_sgemm_ukr_avx2(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                 const float *b, int64_t ldb, float *c, int64_t ldc,
                                 bool add);
NB_HIDDEN void nb_sgemm_ukr_avx2_rows(int h, int64_t kc, const float *a, int64_t ars,
                                      int64_t acs, const float *b, int64_t ldb, float *c,
                                      int64_t ldc, bool add);
#endif
#if NB_WASM_KERNELS
#define NB_SGEMM_WASM_MR 4
#define NB_SGEMM_WASM_NR 8
NB_HIDDEN void nb_sgemm_ukr_wasm(int64_t kc, const float *a, int64_t ars, int64_t acs,
                                 const float *b, int64_t ldb, float *c, int64_t ldc,
                                 bool add);
NB_HIDDEN void nb_sgemm_ukr_wasm_rows(int h, int64_t kc, const float *a, int64_t ars,
                                      int64_t acs, const float *b, int64_t ldb, float *c,
                                      int64_t ldc, bool add);
#endif

/* The kernel for this CPU (AVX-512, else AVX2 + FMA; in a wasm build with
 * SIMD128, the wasm one), or NULL when it has none (callers then use the
 * portable gemm). Decided once. */
NB_HIDDEN const nb_sgemm_kernel *nb_sgemm_kernel_best(void);

/* c (rows, cols), rows ldc apart, (+)= a @ b as nb_gemm_float does (same
 * strides, same bits), blocked and packed for kernel k: panels of b (kc,
 * nc), and the last sliver of a when it has fewer than MR rows, are copied
 * into per-thread buffers kept for the thread's life. kc is NB_GEMM_KC, the
 * same inner block as the unpacked gemm. */
#define NB_GEMM_KC 256
NB_HIDDEN bool nb_sgemm_packed(const nb_sgemm_kernel *k, float *c, int64_t ldc, const float *a,
                               int64_t ars, int64_t acs, const float *b, int64_t brs,
                               int64_t bcs, int64_t rows, int64_t inner, int64_t cols,
                               bool add);

/* Whether nb_sgemm_packed reads b (row stride brs, column stride bcs) in
 * place rather than packing it. */
NB_HIDDEN bool nb_sgemm_b_in_place(int64_t brs, int64_t bcs);

/* b packed whole, once, for a gemm split over c's rows among threads (each
 * thread running nb_sgemm_prepacked on its rows): the same blocks, the same
 * bits as nb_sgemm_packed, without each thread packing b again.
 * nb_sgemm_whole_size gives the floats it takes; nb_sgemm_whole_buffer the
 * calling thread's buffer `which` (below NB_SGEMM_WHOLE: products packed at
 * once) of at least n floats (kept, grown as needed; NULL when out of
 * memory). */
#define NB_SGEMM_WHOLE NB_MAX_TASKS
NB_HIDDEN size_t nb_sgemm_whole_size(const nb_sgemm_kernel *k, int64_t inner, int64_t cols);
NB_HIDDEN float *nb_sgemm_whole_buffer(int which, size_t n);
/* Packs slivers [s0, s1) of b's nb_sgemm_whole_slivers (NR columns each, the
 * last maybe narrower), so threads can pack a b between them. */
NB_HIDDEN int64_t nb_sgemm_whole_slivers(const nb_sgemm_kernel *k, int64_t cols);
NB_HIDDEN void nb_sgemm_pack_whole(const nb_sgemm_kernel *k, float *dst, const float *b,
                                   int64_t brs, int64_t bcs, int64_t inner, int64_t cols,
                                   int64_t s0, int64_t s1);
NB_HIDDEN bool nb_sgemm_prepacked(const nb_sgemm_kernel *k, float *c, const float *a,
                                  int64_t ars, int64_t acs, const float *bp, int64_t rows,
                                  int64_t inner, int64_t cols, bool add);

/* ---- float32 elementwise kernels (vec_*.c) --------------------------------
 * Each has an AVX-512, an AVX2 + FMA and a portable build, all computing
 * every element by the same formula (the portable one with fmaf), chosen
 * once per process. Sums over a row are kept in 16 partial sums combined in
 * a fixed order, so a row's result does not depend on where a thread's
 * range begins. */

/* exp(x) for float, within 2 ulp of libm's expf over the normal range:
 * n = round(x log2 e), r = x - n ln 2 (in two parts), a degree-7
 * polynomial for exp(r), times 2^n (in two factors, so 2^-150 .. 2^128
 * scale without overflow). exp(-inf) = 0, exp(+inf) = inf, NaN stays. */
NB_HIDDEN float nb_expf_poly(float x);

/* The sum of 16 partial sums (part[k] holding elements k mod 16) in the
 * fixed tree every build uses: halves added pairwise, 8, 4, 2, 1. */
NB_HIDDEN float nb_vec_sum16(const float *part);
/* The same tree, inline, for short rows summed many times (layer_norm). */
static inline float nb_sum16_inline(const float *part) {
    float s[8];
    for (int i = 0; i < 8; i++) s[i] = part[i] + part[i + 8];
    for (int i = 0; i < 4; i++) s[i] = s[i] + s[i + 4];
    for (int i = 0; i < 2; i++) s[i] = s[i] + s[i + 2];
    return s[0] + s[1];
}

/* Adam's update of n elements (the common case: no amsgrad, no maximize,
 * no L2 term; AdamW's decay as p *= shrink, 1 for Adam), the same
 * operations in the same order as the scalar loop in optim/optim.c:
 *   p = p * shrink; m = m b1 + (1-b1) g; v = v b2 + (1-b2) g g;
 *   p = p + neg_step * m / (sqrt(v) / bc2s + eps).
 * gscale != 1 first clips: g = g * gscale, stored back (the training step's
 * clip_grad_norm_ fused into the update: one pass over g instead of two). */
typedef struct nb_adam_coef {
    float shrink, b1, one_b1, b2, one_b2, bc2s, eps, neg_step, gscale;
} nb_adam_coef;

typedef struct nb_vec_kernels {
    const char *isa; /* "avx512", "avx2", "wasm" or "portable" */
    /* the largest of n >= 1 elements, NaN when any is NaN */
    float (*max)(const float *x, size_t n);
    /* y = exp(x - m) for n elements; returns their sum. */
    float (*exp_sub_sum)(float *y, const float *x, float m, size_t n);
    /* y *= s */
    void (*scale)(float *y, float s, size_t n);
    /* y += x */
    void (*add)(float *y, const float *x, size_t n);
    /* dx += y * (dy - dot) where dot = sum y dy (softmax's backward row) */
    void (*softmax_bwd)(float *dx, const float *y, const float *dy, size_t n);
    /* dropout: keep = (bits >> 8) >= threshold; mask = keep; y = keep ? x * s : 0 */
    void (*dropout)(float *y, unsigned char *mask, const float *x, const uint32_t *bits,
                    uint32_t threshold, float s, size_t n);
    /* dx += mask ? dy * s : 0 */
    void (*dropout_bwd)(float *dx, const unsigned char *mask, const float *dy, float s,
                        size_t n);
    void (*adam)(float *p, float *g, float *m, float *v, size_t n, const nb_adam_coef *c);
    /* nb_pcg32_fill: n draws, the bits of nb_pcg32_next, rng left after them */
    void (*pcg32_fill)(nb_pcg32 *rng, uint32_t *out, size_t n);
    /* keep[c] = (nb_pcg32_next(rng) >> 8) >= threshold for c < n (the fused
     * attention's dropout mask, one row), rng left after the n draws */
    void (*pcg32_keep)(nb_pcg32 *rng, uint8_t *keep, size_t n, uint32_t threshold);
    /* GELU, exact (tanh_approx 0) or tanh approximation (1), see nb_gelu1:
     * y = gelu(x), and its backward dx += dy * gelu'(x), or dx = dy *
     * gelu'(x) when store is set (a fresh gradient: no clearing pass) */
    void (*gelu)(float *y, const float *x, size_t n, int tanh_approx);
    void (*gelu_bwd)(float *dx, const float *x, const float *dy, size_t n, int tanh_approx,
                     int store);
    /* y = gelu(x) and d = gelu'(x) in one pass, the bits of gelu and of the
     * d that gelu_bwd multiplies dy by (a small GELU keeps d for backward) */
    void (*gelu_d)(float *y, float *d, const float *x, size_t n, int tanh_approx);
    /* y = exp((x * scale + bias) - m) for n elements (the product and the
     * sums rounded separately; bias -inf gives 0); returns their sum. The
     * fused attention's scores straight from the product, with no pass
     * that stores them first (whose narrow stores would stall the wide
     * loads that follow). */
    float (*exp_affine_sum)(float *y, const float *x, float scale, const float *bias, float m,
                            size_t n);
    /* dst (cols, rows) = src (rows, cols)^T, src's rows ld apart, dst's
     * rows `rows` apart: K^T and V^T of a head for the fused attention's
     * products (pure data movement, so every build gives the same floats) */
    void (*transpose)(float *dst, const float *src, size_t ld, size_t rows, size_t cols);
    /* A tile of the fused attention's scores, row r at x + r ld, r < rows:
     * max_affine_rows: mx[r] = the max over c < lim[r] of x * scale +
     *   bias[c] (-inf when lim[r] is 0, NaN when one is NaN);
     * exp_affine_rows: x = exp((x * scale + bias[c]) - m[r]) for c < lim[r]
     *   and 0 for lim[r] <= c < n, and (when sum is not NULL) sum[r] = the
     *   sum exp_affine_sum gives for the row's first lim[r] elements, bit
     *   for bit. One call per tile instead of one per row. */
    void (*max_affine_rows)(float *mx, const float *x, size_t ld, const int64_t *lim,
                            size_t rows, float scale, const float *bias);
    void (*exp_affine_rows)(float *x, size_t ld, const int64_t *lim, size_t rows, size_t n,
                            float scale, const float *bias, const float *m, float *sum);
} nb_vec_kernels;

/* exp_affine_rows row by row through a set's exp_affine_sum `row` (the
 * portable and AVX2 sets). */
typedef float (*nb_exp_affine_sum_fn)(float *y, const float *x, float scale, const float *bias,
                                      float m, size_t n);
/* A set's transpose from its tile kernel: block(dst, ldd, src, lds) moves
 * one tile x tile block (dst[c * ldd + i] = src[i * lds + c]); the edges
 * past the last whole block go one by one. */
typedef void (*nb_transpose_block_fn)(float *dst, size_t ldd, const float *src, size_t lds);
NB_HIDDEN void nb_vec_transpose_tiled(nb_transpose_block_fn block, size_t tile, float *dst,
                                      const float *src, size_t ld, size_t rows, size_t cols);
/* dst (cols, rows) = src (rows, cols)^T in float32 or float64, src's rows
 * ld apart, dst's `rows` apart: float32 through the set's transpose,
 * float64 in 16 x 16 tiles (so that neither side is walked a whole row
 * apart element after element). Pure data movement. */
NB_HIDDEN void nb_transpose_dt(nb_dtype dt, void *dst, const void *src, size_t ld, size_t rows,
                               size_t cols);
NB_HIDDEN void nb_vec_exp_affine_rows_with(nb_exp_affine_sum_fn row, float *x, size_t ld,
                                           const int64_t *lim, size_t rows, size_t n,
                                           float scale, const float *bias, const float *m,
                                           float *sum);

/* The portable max_affine_rows, which the AVX2 set uses too. */
NB_HIDDEN void nb_vec_max_affine_rows_portable(float *mx, const float *x, size_t ld,
                                               const int64_t *lim, size_t rows, float scale,
                                               const float *bias);

/* GELU of one float and its derivative, the formula every build uses:
 *   exact:  y = x Phi(x), Phi = 1 - E (x >= 0) or E (x < 0), E = erfc(z) / 2,
 *           z = |x| / sqrt 2, erfc(z) = t P(t) exp(-z^2), t = 1 / (1 + z / 2)
 *           (P: degree 8, fitted by least squares, relative error < 4e-7);
 *           dy/dx = Phi + x exp(-z^2) / sqrt(2 pi).
 *   tanh:   0.5 (1 + tanh u) = s = 1 / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3);
 *           y = x s, dy/dx = s + x s (1 - s) 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2),
 *           1 - s taken as e s, e = exp(min(-2u, 87)) (finite, so is 1 + e).
 * exp is nb_expf_poly; the polynomial uses FMA, everything else separate
 * multiplies and adds. */
NB_HIDDEN void nb_gelu1(float x, int tanh_approx, float *y, float *d);
#define NB_GELU_C2 1.5957691216057308f     /* 2 sqrt(2/pi) */
#define NB_GELU_C2K 0.07135481627260025f    /* 2 sqrt(2/pi) 0.044715 */
#define NB_GELU_C2K3 0.21406444881780076f   /* 3 * 2 sqrt(2/pi) 0.044715 */
#define NB_GELU_RSQRT2 0.70710678118654752f /* 1 / sqrt 2 */
#define NB_GELU_RSQRT2PI 0.39894228040143268f /* 1 / sqrt(2 pi) */
#define NB_GELU_P0 0.2820769349897722f
#define NB_GELU_P1 0.2825658083501362f
#define NB_GELU_P2 0.24152482053460947f
#define NB_GELU_P3 0.2097525534254401f
#define NB_GELU_P4 -0.04535694468733117f
#define NB_GELU_P5 0.3083092918549377f
#define NB_GELU_P6 -0.5163611055729136f
#define NB_GELU_P7 0.2999926375165078f
#define NB_GELU_P8 -0.0625041885071998f

/* PCG32's jumps for the SIMD generators (vec_portable.c): the state l draws
 * on is nb_pcg_jump_a[l] * state + nb_pcg_jump_k[l] * inc (mod 2^64), with
 * A_l = MULT^l and K_l = 1 + MULT + ... + MULT^(l-1), for l = 0..16. */
NB_HIDDEN extern const uint64_t nb_pcg_jump_a[17], nb_pcg_jump_k[17];
NB_HIDDEN extern const nb_vec_kernels nb_vec_portable;
#if NB_X86_KERNELS
NB_HIDDEN extern const nb_vec_kernels nb_vec_avx512;
NB_HIDDEN extern const nb_vec_kernels nb_vec_avx2;
#endif
#if NB_WASM_KERNELS
/* The wasm build's set: portable, but for exp over a row and the
 * transpose in SIMD128 and the dropout mask's draws four at a time, with
 * the portable bits (vec_wasm.c). */
NB_HIDDEN extern const nb_vec_kernels nb_vec_wasm;
NB_HIDDEN float nb_vec_exp_affine_sum_wasm(float *y, const float *x, float scale,
                                           const float *bias, float m, size_t n);
NB_HIDDEN void nb_vec_transpose_wasm(float *dst, const float *src, size_t ld, size_t rows,
                                     size_t cols);
NB_HIDDEN void nb_vec_pcg32_keep_wasm(nb_pcg32 *rng, uint8_t *keep, size_t n,
                                      uint32_t threshold);
#endif
/* The best set for this CPU (decided once; NB_VEC_PORTABLE=1 in the
 * environment forces the portable one). The AVX-512 set needs AVX512F and
 * AVX512DQ (64-bit multiplies for PCG32). A wasm build with SIMD128 takes
 * nb_vec_wasm. */
NB_HIDDEN const nb_vec_kernels *nb_vec(void);

/* ---- the gemm engine (gemm.c) --------------------------------------------------- */
/* c (rows, cols) += a (rows, inner) @ b (inner, cols), or c = a @ b when
 * !add (c is then not read, so it may be uninitialised). c is contiguous
 * (rows `cols` apart); a's element (i, p) is a[i * ars + p * acs] and b's
 * (p, j) is b[p * brs + j * bcs], so transposed operands are just other
 * strides. Each element of c is computed the same way whatever rows or
 * columns a call covers, so callers may split c's rows or columns over
 * threads. */
NB_HIDDEN void nb_gemm_float(float *c, const float *a, int64_t ars, int64_t acs, const float *b,
                             int64_t brs, int64_t bcs, int64_t rows, int64_t inner, int64_t cols,
                             bool add);
/* The same product on every thread of the pool, split over c's rows, the
 * same bits for any thread count. With bias (cols floats, add false) each
 * row of c is bias plus the product. The calling thread packs b once
 * (kept in a buffer of its own) and the threads share it. */
NB_HIDDEN void nb_gemm_float_par(float *c, const float *bias, const float *a, int64_t ars,
                                 int64_t acs, const float *b, int64_t brs, int64_t bcs,
                                 int64_t rows, int64_t inner, int64_t cols, bool add);
/* n such products and n_extra more tasks (a bias gradient) as one job when
 * they number NB_MAX_TASKS or fewer (else in several): the threads wait
 * once, and with two threads each starts on a product of its own when
 * their work is equal (a linear's dx and dw). The products must not write
 * what another reads or writes. */
typedef struct nb_gemm_desc {
    float *c;
    const float *bias, *a;
    int64_t ars, acs;
    const float *b;
    int64_t brs, bcs, rows, inner, cols;
    bool add;
} nb_gemm_desc;
NB_HIDDEN void nb_gemm_float_par_n(const nb_gemm_desc *d, int n, const nb_task *extra,
                                   int n_extra);
NB_HIDDEN void nb_gemm_double(double *c, const double *a, int64_t ars, int64_t acs,
                              const double *b, int64_t brs, int64_t bcs, int64_t rows,
                              int64_t inner, int64_t cols, bool add);
/* The same with c's rows ldc apart (a block of a wider c). */
NB_HIDDEN void nb_gemm_float_ldc(float *c, int64_t ldc, const float *a, int64_t ars,
                                 int64_t acs, const float *b, int64_t brs, int64_t bcs,
                                 int64_t rows, int64_t inner, int64_t cols, bool add);
NB_HIDDEN void nb_gemm_double_ldc(double *c, int64_t ldc, const double *a, int64_t ars,
                                  int64_t acs, const double *b, int64_t brs, int64_t bcs,
                                  int64_t rows, int64_t inner, int64_t cols, bool add);

#endif
