/* kernels/vec_wasm.c - the WebAssembly SIMD128 float32 kernels that the
 * wasm build's set (nb_vec_wasm, vec_portable.c) takes in place of the
 * portable ones: exp over a row, four lanes at a time, and the attention
 * dropout's draws four states at a time. They compute every
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

/* NB_FMAF(x, y, c) on two lanes held as doubles, c a float constant:
 * (float)((double)x * (double)y + (double)c), held as a double again. */
static inline v128_t fmaf2(v128_t x, v128_t y, float c) {
    v128_t d = wasm_f64x2_add(wasm_f64x2_mul(x, y), wasm_f64x2_splat((double)c));
    return wasm_f64x2_promote_low_f32x4(wasm_f32x4_demote_f64x2_zero(d));
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
    v128_t r = wasm_f64x2_add(wasm_f64x2_mul(n, wasm_f64x2_splat((double)-LN2_HI)), xc);
    r = wasm_f64x2_promote_low_f32x4(wasm_f32x4_demote_f64x2_zero(r));
    r = wasm_f64x2_add(wasm_f64x2_mul(n, wasm_f64x2_splat((double)-LN2_LO)), r);
    return wasm_f64x2_promote_low_f32x4(wasm_f32x4_demote_f64x2_zero(r));
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

/* The portable exp_affine_sum: y = exp(x * scale + bias - m), or exp(x -
 * m) when bias is NULL; the sum in 16 partial sums (element j in part j
 * mod 16), four of them a vector. */
float nb_vec_exp_affine_sum_wasm(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    v128_t part4[4] = {wasm_f32x4_const_splat(0.0f), wasm_f32x4_const_splat(0.0f),
                       wasm_f32x4_const_splat(0.0f), wasm_f32x4_const_splat(0.0f)};
    v128_t sc = wasm_f32x4_splat(scale), mv = wasm_f32x4_splat(m);
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
        v128_t t = wasm_v128_load(x + j);
        if (bias) t = wasm_f32x4_add(wasm_f32x4_mul(t, sc), wasm_v128_load(bias + j));
        v128_t e = expf4(wasm_f32x4_sub(t, mv));
        wasm_v128_store(y + j, e);
        part4[(j >> 2) & 3] = wasm_f32x4_add(part4[(j >> 2) & 3], e);
    }
    float part[16];
    for (int k = 0; k < 4; k++) wasm_v128_store(part + 4 * k, part4[k]);
    for (; j < n; j++) {
        float t = x[j];
        if (bias) {
            t = t * scale;
            t = t + bias[j];
        }
        y[j] = nb_expf_poly(t - m);
        part[j % 16] = part[j % 16] + y[j];
    }
    return nb_vec_sum16(part);
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
