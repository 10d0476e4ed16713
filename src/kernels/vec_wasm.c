/* kernels/vec_wasm.c - the WebAssembly SIMD128 float32 kernels that the
 * wasm build's set (nb_vec_wasm, vec_portable.c) takes in place of the
 * portable ones: exp over a row, four lanes at a time, the transpose by
 * 4 x 4 blocks, and the attention dropout's draws four states at a time.
 * They compute every
 * element by the portable formula with the same operations in the same
 * order, so they give the portable kernels' bits: nb_expf_poly's
 * multiply-adds (NB_FMAF, which in wasm is the exact double product plus
 * the addend, rounded to double and then to float) are done the same way
 * on f64x2 halves of the f32x4. */
#include "kernels/kernels_internal.h"

#if NB_WASM_KERNELS
#include <wasm_simd128.h>

#define EXP_LO -104.0f
#define EXP_HI 88.8f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f

/* Two float lanes held as doubles (exact): promoted from / demoted to the
 * low half of an f32x4. */
#define LO2(v) wasm_f64x2_promote_low_f32x4(v)
#define HI2(v) wasm_f64x2_promote_low_f32x4(wasm_i32x4_shuffle((v), (v), 2, 3, 2, 3))

/* Two doubles rounded to float and held as doubles again. Left to itself,
 * clang merges the demote and the promote into a demote and a promote per
 * lane (extract, convert, replace), which V8 runs as scalar conversions:
 * the empty asm, which emits nothing, keeps the two vector instructions
 * (cvtpd2ps, cvtps2pd), and exp over a row runs about twice as fast. */
static inline v128_t round2(v128_t d) {
    v128_t f = wasm_f32x4_demote_f64x2_zero(d);
    __asm__("" : "+r"(f));
    return wasm_f64x2_promote_low_f32x4(f);
}

/* NB_FMAF(x, y, c) on two lanes held as doubles, c a float constant:
 * (float)((double)x * (double)y + (double)c), held as a double again. */
static inline v128_t fmaf2(v128_t x, v128_t y, float c) {
    return round2(wasm_f64x2_add(wasm_f64x2_mul(x, y), wasm_f64x2_splat((double)c)));
}

/* nb_expf_poly's polynomial on two lanes held as doubles (r: the reduced
 * argument): every step rounded to float as NB_FMAF rounds it. */
static inline v128_t poly2(v128_t r) {
    v128_t p = wasm_f64x2_splat((double)(1.0f / 5040));
    p = fmaf2(p, r, 1.0f / 720);
    p = fmaf2(p, r, 1.0f / 120);
    p = fmaf2(p, r, 1.0f / 24);
    p = fmaf2(p, r, 1.0f / 6);
    p = fmaf2(p, r, 0.5f);
    p = fmaf2(p, r, 1.0f);
    return fmaf2(p, r, 1.0f);
}

/* r = NB_FMAF(n, -LN2_LO, NB_FMAF(n, -LN2_HI, xc)) on two lanes held as
 * doubles. */
static inline v128_t reduce2(v128_t n, v128_t xc) {
    v128_t r = round2(wasm_f64x2_add(wasm_f64x2_mul(n, wasm_f64x2_splat((double)-LN2_HI)), xc));
    return round2(wasm_f64x2_add(wasm_f64x2_mul(n, wasm_f64x2_splat((double)-LN2_LO)), r));
}

/* nb_expf_poly on four lanes (vec_portable.c has the method); the
 * multiply-adds on the two halves as doubles, each result rounded to
 * float before the next uses it, as NB_FMAF does. */
static inline v128_t expf4(v128_t x) {
    v128_t xc = wasm_f32x4_pmax(wasm_f32x4_const_splat(EXP_LO), x);
    xc = wasm_f32x4_pmin(wasm_f32x4_const_splat(EXP_HI), xc);
    v128_t n = wasm_f32x4_nearest(wasm_f32x4_mul(xc, wasm_f32x4_const_splat(LOG2E)));
    v128_t plo = poly2(reduce2(LO2(n), LO2(xc))), phi = poly2(reduce2(HI2(n), HI2(xc)));
    v128_t p = wasm_i32x4_shuffle(wasm_f32x4_demote_f64x2_zero(plo),
                                  wasm_f32x4_demote_f64x2_zero(phi), 0, 1, 4, 5);
    v128_t ni = wasm_i32x4_trunc_sat_f32x4(n), n1 = wasm_i32x4_shr(ni, 1);
    v128_t n2 = wasm_i32x4_sub(ni, n1), bias = wasm_i32x4_const_splat(127);
    v128_t s1 = wasm_i32x4_shl(wasm_i32x4_add(n1, bias), 23);
    v128_t s2 = wasm_i32x4_shl(wasm_i32x4_add(n2, bias), 23);
    v128_t y = wasm_f32x4_mul(wasm_f32x4_mul(p, s1), s2);
    return wasm_v128_bitselect(x, y, wasm_f32x4_ne(x, x)); /* NaN stays */
}

/* The first rest < 4 floats of p in the low lanes, zeros above (lane by
 * lane: a loop here becomes a call to memcpy). */
static inline v128_t tail_load(const float *p, size_t rest) {
    v128_t v = wasm_v128_load32_lane(p, wasm_f32x4_const_splat(0.0f), 0);
    if (rest > 1) v = wasm_v128_load32_lane(p + 1, v, 1);
    if (rest > 2) v = wasm_v128_load32_lane(p + 2, v, 2);
    return v;
}

/* The portable exp_affine_sum: y = exp(x * scale + bias - m), or exp(x -
 * m) when bias is NULL; the sum in 16 partial sums (element j in part j
 * mod 16), four of them a vector. The last n mod 4 elements go through the
 * same vector code on a padded copy, their lanes past n masked to zero
 * before the partial sums (which hold exponentials, never -0, so adding
 * +0 keeps their bits): the causal rows' lengths run 1, 2, ..., so a
 * scalar tail took a quarter of the row's time. */
float nb_vec_exp_affine_sum_wasm(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    v128_t part4[4] = {wasm_f32x4_const_splat(0.0f), wasm_f32x4_const_splat(0.0f),
                       wasm_f32x4_const_splat(0.0f), wasm_f32x4_const_splat(0.0f)};
    v128_t sc = wasm_f32x4_splat(scale), mv = wasm_f32x4_splat(m);
    size_t j = 0;
    /* two vectors a step: each exp is a long chain of dependent steps, and
     * two independent ones keep more of the machine busy */
    for (; j + 8 <= n; j += 8) {
        v128_t t0 = wasm_v128_load(x + j), t1 = wasm_v128_load(x + j + 4);
        if (bias) {
            t0 = wasm_f32x4_add(wasm_f32x4_mul(t0, sc), wasm_v128_load(bias + j));
            t1 = wasm_f32x4_add(wasm_f32x4_mul(t1, sc), wasm_v128_load(bias + j + 4));
        }
        v128_t e0 = expf4(wasm_f32x4_sub(t0, mv)), e1 = expf4(wasm_f32x4_sub(t1, mv));
        wasm_v128_store(y + j, e0);
        wasm_v128_store(y + j + 4, e1);
        part4[(j >> 2) & 3] = wasm_f32x4_add(part4[(j >> 2) & 3], e0);
        part4[((j >> 2) + 1) & 3] = wasm_f32x4_add(part4[((j >> 2) + 1) & 3], e1);
    }
    for (; j + 4 <= n; j += 4) {
        v128_t t = wasm_v128_load(x + j);
        if (bias) t = wasm_f32x4_add(wasm_f32x4_mul(t, sc), wasm_v128_load(bias + j));
        v128_t e = expf4(wasm_f32x4_sub(t, mv));
        wasm_v128_store(y + j, e);
        part4[(j >> 2) & 3] = wasm_f32x4_add(part4[(j >> 2) & 3], e);
    }
    if (j < n) {
        const size_t rest = n - j;
        v128_t t = tail_load(x + j, rest);
        if (bias) t = wasm_f32x4_add(wasm_f32x4_mul(t, sc), tail_load(bias + j, rest));
        v128_t live = wasm_i32x4_lt(wasm_i32x4_make(0, 1, 2, 3), wasm_i32x4_splat((int32_t)rest));
        v128_t e = wasm_v128_and(expf4(wasm_f32x4_sub(t, mv)), live);
        wasm_v128_store32_lane(y + j, e, 0);
        if (rest > 1) wasm_v128_store32_lane(y + j + 1, e, 1);
        if (rest > 2) wasm_v128_store32_lane(y + j + 2, e, 2);
        part4[(j >> 2) & 3] = wasm_f32x4_add(part4[(j >> 2) & 3], e);
    }
    /* nb_vec_sum16's tree on the vectors: s[i] = part[i] + part[i + 8],
     * then s[i] + s[i + 4], s[i] + s[i + 2], s[0] + s[1] */
    v128_t s4 = wasm_f32x4_add(wasm_f32x4_add(part4[0], part4[2]),
                               wasm_f32x4_add(part4[1], part4[3]));
    v128_t s2 = wasm_f32x4_add(s4, wasm_i32x4_shuffle(s4, s4, 2, 3, 2, 3));
    return wasm_f32x4_extract_lane(s2, 0) + wasm_f32x4_extract_lane(s2, 1);
}

/* dst (cols, rows) = src (rows, cols)^T, src's rows ld apart (K^T and V^T
 * of an attention head): 4 x 4 blocks, four rows loaded and shuffled into
 * four columns; the edges one element at a time, as the portable loop. */
void nb_vec_transpose_wasm(float *dst, const float *src, size_t ld, size_t rows, size_t cols) {
    size_t j0 = 0;
    for (; j0 + 4 <= rows; j0 += 4) {
        const float *s = src + j0 * ld;
        size_t d = 0;
        for (; d + 4 <= cols; d += 4) {
            v128_t r0 = wasm_v128_load(s + d), r1 = wasm_v128_load(s + ld + d);
            v128_t r2 = wasm_v128_load(s + 2 * ld + d), r3 = wasm_v128_load(s + 3 * ld + d);
            v128_t t0 = wasm_i32x4_shuffle(r0, r1, 0, 4, 1, 5);
            v128_t t1 = wasm_i32x4_shuffle(r2, r3, 0, 4, 1, 5);
            v128_t t2 = wasm_i32x4_shuffle(r0, r1, 2, 6, 3, 7);
            v128_t t3 = wasm_i32x4_shuffle(r2, r3, 2, 6, 3, 7);
            float *o = dst + d * rows + j0;
            wasm_v128_store(o, wasm_i32x4_shuffle(t0, t1, 0, 1, 4, 5));
            wasm_v128_store(o + rows, wasm_i32x4_shuffle(t0, t1, 2, 3, 6, 7));
            wasm_v128_store(o + 2 * rows, wasm_i32x4_shuffle(t2, t3, 0, 1, 4, 5));
            wasm_v128_store(o + 3 * rows, wasm_i32x4_shuffle(t2, t3, 2, 3, 6, 7));
        }
        for (; d < cols; d++)
            for (size_t jj = 0; jj < 4; jj++) dst[d * rows + j0 + jj] = s[jj * ld + d];
    }
    for (size_t j = j0; j < rows; j++)
        for (size_t d = 0; d < cols; d++) dst[d * rows + j] = src[j * ld + d];
}

/* The portable pcg32_keep drew one nb_pcg32_next at a time, a chain of
 * dependent 64-bit multiplies through a call each; nb_pcg32_fill computes
 * the same draws four states at a time. 64 draws a chunk, so any row
 * length takes only a small stack buffer. */
void nb_vec_pcg32_keep_wasm(nb_pcg32 *rng, uint8_t *keep, size_t n, uint32_t threshold) {
    uint32_t bits[64];
    v128_t thr = wasm_i32x4_splat((int32_t)threshold), one = wasm_i32x4_const_splat(1);
    while (n) {
        size_t m = n < 64 ? n : 64, i = 0;
        nb_pcg32_fill(rng, bits, m);
        for (; i + 8 <= m; i += 8) { /* (bits >> 8) >= threshold, 8 lanes to 8 bytes */
            v128_t k0 = wasm_u32x4_ge(wasm_u32x4_shr(wasm_v128_load(bits + i), 8), thr);
            v128_t k1 = wasm_u32x4_ge(wasm_u32x4_shr(wasm_v128_load(bits + i + 4), 8), thr);
            v128_t k = wasm_u16x8_narrow_i32x4(wasm_v128_and(k0, one), wasm_v128_and(k1, one));
            wasm_v128_store64_lane(keep + i, wasm_u8x16_narrow_i16x8(k, k), 0);
        }
        for (; i < m; i++) keep[i] = (bits[i] >> 8) >= threshold;
        keep += m;
        n -= m;
    }
}
#endif
