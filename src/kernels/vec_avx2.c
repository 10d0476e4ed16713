/* kernels/vec_avx2.c - the float32 elementwise kernels with AVX2 + FMA: 16
 * elements a step in two vectors (the two halves of the 16 partial sums),
 * tails in scalar code with the portable formulas, except exp's (masked
 * loads). Same bits as vec_portable.c (contracts in kernels.h). */
#include "kernels/kernels_internal.h"

#if NB_X86_KERNELS
#include <immintrin.h>

#define ATTR __attribute__((target("avx2,fma")))

/* nb_vec_sum16's tree over a0 (parts 0..7) and a1 (8..15), in registers. */
ATTR static float sum16(__m256 a0, __m256 a1) {
    __m256 s8 = _mm256_add_ps(a0, a1);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

ATTR static __m256 exp8(__m256 x) {
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(88.8f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), xc);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

ATTR static float max(const float *x, size_t n) {
    __m256 m = _mm256_set1_ps(x[0]), nan_ = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_loadu_ps(x + j);
        nan_ = _mm256_or_ps(nan_, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m = _mm256_max_ps(m, v);
    }
    float part[8], r = x[0];
    _mm256_storeu_ps(part, m);
    bool any_nan = _mm256_movemask_ps(nan_) != 0;
    for (int l = 0; l < 8; l++) r = part[l] > r ? part[l] : r;
    for (; j < n; j++) {
        r = x[j] > r ? x[j] : r;
        any_nan |= isnan(x[j]);
    }
    return any_nan ? NAN : r;
}

/* Lanes [0, k) on, for maskload/maskstore and blends (0 <= k <= 8). */
ATTR static __m256i lanes_below(size_t k) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* exp(x * scale + bias - m) of the k <= 8 elements at x (bias + the same
 * offset), stored to y; the sum's lanes past k get nothing. */
ATTR static __m256 exp_part(float *y, const float *x, __m256 sv, const float *bias, __m256 mv,
                            size_t k, __m256 acc) {
    __m256i on = lanes_below(k);
    __m256 t = _mm256_maskload_ps(x, on);
    if (bias) t = _mm256_add_ps(_mm256_mul_ps(t, sv), _mm256_maskload_ps(bias, on));
    __m256 e = exp8(_mm256_sub_ps(t, mv));
    _mm256_maskstore_ps(y, on, e);
    return _mm256_blendv_ps(acc, _mm256_add_ps(acc, e), _mm256_castsi256_ps(on));
}

/* y = exp(x * scale + bias - m), or exp(x - m) when bias is NULL (x as it
 * is, no product), 16 at a time in two accumulators; the tail (the short
 * causal rows of attention are mostly tail) through masked loads into the
 * same 16 partial sums: element j adds to part j % 16, as in the portable
 * loop. Returns the sum. */
ATTR static inline float exp_sum(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), mv = _mm256_set1_ps(m);
    __m256 sv = _mm256_set1_ps(scale);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 t0 = _mm256_loadu_ps(x + j), t1 = _mm256_loadu_ps(x + j + 8);
        if (bias) {
            t0 = _mm256_add_ps(_mm256_mul_ps(t0, sv), _mm256_loadu_ps(bias + j));
            t1 = _mm256_add_ps(_mm256_mul_ps(t1, sv), _mm256_loadu_ps(bias + j + 8));
        }
        __m256 e0 = exp8(_mm256_sub_ps(t0, mv)), e1 = exp8(_mm256_sub_ps(t1, mv));
        _mm256_storeu_ps(y + j, e0);
        _mm256_storeu_ps(y + j + 8, e1);
        a0 = _mm256_add_ps(a0, e0);
        a1 = _mm256_add_ps(a1, e1);
    }
    size_t left = n - j;
    if (left) {
        size_t k0 = left < 8 ? left : 8;
        a0 = exp_part(y + j, x + j, sv, bias ? bias + j : NULL, mv, k0, a0);
        if (left > 8)
            a1 = exp_part(y + j + 8, x + j + 8, sv, bias ? bias + j + 8 : NULL, mv, left - 8, a1);
    }
    return sum16(a0, a1);
}

ATTR static float exp_sub_sum(float *y, const float *x, float m, size_t n) {
    return exp_sum(y, x, 1.0f, NULL, m, n);
}

ATTR static float exp_affine_sum(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    return exp_sum(y, x, scale, bias, m, n);
}

ATTR static void scale(float *y, float s, size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), sv));
    for (; j < n; j++) y[j] = y[j] * s;
}

ATTR static void add(float *y, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(x + j)));
    for (; j < n; j++) y[j] = y[j] + x[j];
}

ATTR static void softmax_bwd(float *dx, const float *y, const float *dy, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= n; j += 16) {
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_loadu_ps(dy + j), _mm256_loadu_ps(y + j)));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(_mm256_loadu_ps(dy + j + 8),
                                             _mm256_loadu_ps(y + j + 8)));
    }
    float dot;
    if (j == n) {
        dot = sum16(a0, a1);
    } else {
        float part[16];
        _mm256_storeu_ps(part, a0);
        _mm256_storeu_ps(part + 8, a1);
        for (; j < n; j++) {
            float t = dy[j] * y[j];
            part[j % 16] = part[j % 16] + t;
        }
        dot = nb_vec_sum16(part);
    }
    __m256 dv = _mm256_set1_ps(dot);
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 t = _mm256_mul_ps(_mm256_loadu_ps(y + j), _mm256_sub_ps(_mm256_loadu_ps(dy + j), dv));
        _mm256_storeu_ps(dx + j, _mm256_add_ps(_mm256_loadu_ps(dx + j), t));
    }
    for (; j < n; j++) {
        float t = dy[j] - dot;
        t = y[j] * t;
        dx[j] = dx[j] + t;
    }
}

ATTR static void dropout(float *y, unsigned char *mask, const float *x, const uint32_t *bits,
                         uint32_t threshold, float s, size_t n) {
    /* bits >> 8 < 2^24 and 1 <= threshold <= 2^24: a signed compare will do */
    __m256i th = _mm256_set1_epi32((int)threshold - 1);
    __m256 sv = _mm256_set1_ps(s);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i b = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(bits + j)), 8);
        __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(b, th));
        int mm = _mm256_movemask_ps(keep);
        for (int l = 0; l < 8; l++) mask[j + (size_t)l] = (unsigned char)((mm >> l) & 1);
        _mm256_storeu_ps(y + j, _mm256_and_ps(keep, _mm256_mul_ps(_mm256_loadu_ps(x + j), sv)));
    }
    for (; j < n; j++) {
        unsigned char keep = (bits[j] >> 8) >= threshold;
        mask[j] = keep;
        y[j] = keep ? x[j] * s : 0.0f;
    }
}

ATTR static void dropout_bwd(float *dx, const unsigned char *mask, const float *dy, float s,
                             size_t n) {
    __m256 sv = _mm256_set1_ps(s);
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256i mb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(mask + j)));
        __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(mb, _mm256_setzero_si256()));
        __m256 d = _mm256_loadu_ps(dx + j);
        __m256 t = _mm256_add_ps(d, _mm256_mul_ps(_mm256_loadu_ps(dy + j), sv));
        _mm256_storeu_ps(dx + j, _mm256_blendv_ps(d, t, keep));
    }
    for (; j < n; j++) {
        float t = dy[j] * s;
        if (mask[j]) dx[j] = dx[j] + t;
    }
}

ATTR static void adam(float *p, float *g, float *m, float *v, size_t n, const nb_adam_coef *c) {
    __m256 shrink = _mm256_set1_ps(c->shrink), b1 = _mm256_set1_ps(c->b1),
           ob1 = _mm256_set1_ps(c->one_b1), b2 = _mm256_set1_ps(c->b2),
           ob2 = _mm256_set1_ps(c->one_b2), bc2s = _mm256_set1_ps(c->bc2s),
           eps = _mm256_set1_ps(c->eps), ns = _mm256_set1_ps(c->neg_step),
           gs = _mm256_set1_ps(c->gscale);
    const bool clip = c->gscale != 1.0f;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 pi = _mm256_mul_ps(_mm256_loadu_ps(p + i), shrink);
        __m256 d = _mm256_loadu_ps(g + i);
        if (clip) {
            d = _mm256_mul_ps(d, gs);
            _mm256_storeu_ps(g + i, d);
        }
        __m256 mi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(m + i), b1), _mm256_mul_ps(ob1, d));
        __m256 vi = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(v + i), b2),
                                  _mm256_mul_ps(_mm256_mul_ps(ob2, d), d));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bc2s), eps);
        __m256 u = _mm256_div_ps(_mm256_mul_ps(ns, mi), denom);
        _mm256_storeu_ps(m + i, mi);
        _mm256_storeu_ps(v + i, vi);
        _mm256_storeu_ps(p + i, _mm256_add_ps(pi, u));
    }
    if (i < n) nb_vec_portable.adam(p + i, g + i, m + i, v + i, n - i, c);
}

/* nb_gelu1 on 8 lanes: y and dy/dx. */
ATTR static void gelu8(__m256 x, int tanh_approx, __m256 *y, __m256 *d) {
    __m256 x2 = _mm256_mul_ps(x, x), s, one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    if (tanh_approx) {
        __m256 w = _mm256_add_ps(_mm256_mul_ps(x2, _mm256_set1_ps(NB_GELU_C2K)),
                                 _mm256_set1_ps(NB_GELU_C2));
        __m256 u = _mm256_mul_ps(x, w);
        __m256 e = exp8(_mm256_min_ps(_mm256_set1_ps(87.0f), _mm256_sub_ps(zero, u)));
        s = _mm256_div_ps(one, _mm256_add_ps(one, e));
        __m256 q = _mm256_add_ps(_mm256_mul_ps(x2, _mm256_set1_ps(NB_GELU_C2K3)),
                                 _mm256_set1_ps(NB_GELU_C2));
        __m256 g = _mm256_mul_ps(s, _mm256_mul_ps(e, s));
        g = _mm256_mul_ps(_mm256_mul_ps(g, q), x);
        *d = _mm256_add_ps(s, g);
    } else {
        __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
        __m256 z = _mm256_mul_ps(ax, _mm256_set1_ps(NB_GELU_RSQRT2));
        __m256 t = _mm256_div_ps(one, _mm256_add_ps(_mm256_mul_ps(z, _mm256_set1_ps(0.5f)), one));
        __m256 p = _mm256_set1_ps(NB_GELU_P8);
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P7));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P6));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P5));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P4));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P3));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P2));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P1));
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(NB_GELU_P0));
        __m256 ez = exp8(_mm256_sub_ps(zero, _mm256_mul_ps(z, z)));
        __m256 e = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(t, p), ez), _mm256_set1_ps(0.5f));
        s = _mm256_blendv_ps(_mm256_sub_ps(one, e), e, _mm256_cmp_ps(x, zero, _CMP_LT_OQ));
        __m256 g = _mm256_mul_ps(x, _mm256_mul_ps(ez, _mm256_set1_ps(NB_GELU_RSQRT2PI)));
        *d = _mm256_add_ps(s, g);
    }
    *y = _mm256_mul_ps(x, s);
}

ATTR static void gelu(float *y, const float *x, size_t n, int tanh_approx) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 yv, dv;
        gelu8(_mm256_loadu_ps(x + j), tanh_approx, &yv, &dv);
        _mm256_storeu_ps(y + j, yv);
    }
    for (float d; j < n; j++) nb_gelu1(x[j], tanh_approx, y + j, &d);
}

ATTR static void gelu_d(float *y, float *d, const float *x, size_t n, int tanh_approx) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 yv, dv;
        gelu8(_mm256_loadu_ps(x + j), tanh_approx, &yv, &dv);
        _mm256_storeu_ps(y + j, yv);
        _mm256_storeu_ps(d + j, dv);
    }
    for (; j < n; j++) nb_gelu1(x[j], tanh_approx, y + j, d + j);
}

ATTR static void gelu_bwd(float *dx, const float *x, const float *dy, size_t n, int tanh_approx,
                          int store) {
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 yv, dv;
        gelu8(_mm256_loadu_ps(x + j), tanh_approx, &yv, &dv);
        __m256 g = _mm256_mul_ps(_mm256_loadu_ps(dy + j), dv);
        if (!store) g = _mm256_add_ps(_mm256_loadu_ps(dx + j), g);
        _mm256_storeu_ps(dx + j, g);
    }
    for (; j < n; j++) {
        float y, d;
        nb_gelu1(x[j], tanh_approx, &y, &d);
        float g = dy[j] * d;
        dx[j] = store ? g : dx[j] + g;
    }
}

/* An 8 x 8 block: dst[c * ldd + i] = src[i * lds + c]. Pairs of rows
 * interleave, then pairs of pairs, then the 128-bit halves swap. */
ATTR static void transpose8(float *dst, size_t ldd, const float *src, size_t lds) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (size_t)i * lds);
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 2; g++) { /* rows 4g .. 4g + 3, columns by quarter */
        __m256 a = t[4 * g], b = t[4 * g + 1], c = t[4 * g + 2], d = t[4 * g + 3];
        u[4 * g] = _mm256_shuffle_ps(a, c, 0x44);
        u[4 * g + 1] = _mm256_shuffle_ps(a, c, 0xEE);
        u[4 * g + 2] = _mm256_shuffle_ps(b, d, 0x44);
        u[4 * g + 3] = _mm256_shuffle_ps(b, d, 0xEE);
    }
    for (int c = 0; c < 4; c++) {
        _mm256_storeu_ps(dst + (size_t)c * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        _mm256_storeu_ps(dst + (size_t)(4 + c) * ldd, _mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}

/* dst (cols x rows) = src (rows x cols, rows ld apart) transposed */
static void transpose(float *dst, const float *src, size_t ld, size_t rows, size_t cols) {
    nb_vec_transpose_tiled(transpose8, 8, dst, src, ld, rows, cols);
}

/* exp_affine_sum's lanes and tree per row, eight elements a step (element j
 * adds to part j % 16: the first eight of every sixteen to a0, the next to
 * a1); the lanes past lim are zeroed in the vector, so a step with room up
 * to n is one whole store and the zeros after lim come in the same pass.
 * Adding those zeros leaves a sum's bits as exp_sum's blend does (the parts
 * are never -0). One inline loop for the tile, not a call per row: short
 * causal rows are mostly this overhead. */
ATTR static void exp_affine_rows(float *x, size_t ld, const int64_t *lim, size_t rows, size_t n,
                                 float scale, const float *bias, const float *m, float *sum) {
    const __m256 sv = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * ld;
        size_t vis = (size_t)lim[r], j = 0;
        __m256 part[2] = {zero, zero}, mv = _mm256_set1_ps(m[r]);
        for (; j < vis; j += 8) {
            bool whole = vis - j >= 8;
            __m256i on = lanes_below(whole ? 8 : vis - j);
            __m256 t = whole ? _mm256_loadu_ps(xr + j) : _mm256_maskload_ps(xr + j, on);
            __m256 b = whole ? _mm256_loadu_ps(bias + j) : _mm256_maskload_ps(bias + j, on);
            __m256 e = exp8(_mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(t, sv), b), mv));
            if (!whole) e = _mm256_and_ps(e, _mm256_castsi256_ps(on));
            if (j + 8 <= n) _mm256_storeu_ps(xr + j, e);
            else _mm256_maskstore_ps(xr + j, lanes_below(n - j), e);
            part[j / 8 % 2] = _mm256_add_ps(part[j / 8 % 2], e);
        }
        for (; j < n; j += 8) {
            if (j + 8 <= n) _mm256_storeu_ps(xr + j, zero);
            else _mm256_maskstore_ps(xr + j, lanes_below(n - j), zero);
        }
        if (sum) sum[r] = sum16(part[0], part[1]);
    }
}

/* max_affine_rows: lane maxima of x * scale + bias over each row's visible
 * length (the tail through masked loads, its dead lanes at -inf), a NaN
 * noted apart as max does, then the largest lane. */
ATTR static void max_affine_rows(float *mx, const float *x, size_t ld, const int64_t *lim,
                                 size_t rows, float scale, const float *bias) {
    const __m256 sv = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-INFINITY);
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        size_t n = (size_t)lim[r], j = 0;
        __m256 m0 = ninf, m1 = ninf, nan_ = _mm256_setzero_ps();
        for (; j + 16 <= n; j += 16) {
            __m256 t0 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + j), sv),
                                      _mm256_loadu_ps(bias + j));
            __m256 t1 = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xr + j + 8), sv),
                                      _mm256_loadu_ps(bias + j + 8));
            nan_ = _mm256_or_ps(nan_, _mm256_cmp_ps(t0, t1, _CMP_UNORD_Q));
            m0 = _mm256_max_ps(m0, t0), m1 = _mm256_max_ps(m1, t1);
        }
        for (; j < n; j += 8) {
            __m256i k = lanes_below(n - j < 8 ? n - j : 8);
            __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(xr + j, k), sv),
                                     _mm256_maskload_ps(bias + j, k));
            t = _mm256_blendv_ps(ninf, t, _mm256_castsi256_ps(k));
            nan_ = _mm256_or_ps(nan_, _mm256_cmp_ps(t, t, _CMP_UNORD_Q));
            m0 = _mm256_max_ps(m0, t);
        }
        float part[8], best = -INFINITY;
        _mm256_storeu_ps(part, _mm256_max_ps(m0, m1));
        for (int l = 0; l < 8; l++) best = part[l] > best ? part[l] : best;
        mx[r] = _mm256_movemask_ps(nan_) ? NAN : best;
    }
}

/* ---- PCG32 in four 64-bit lanes ------------------------------------------------
 * AVX2 has no 64-bit lane multiply: the low half of a * b is built from
 * three 32 x 32 -> 64 products (a_lo b_lo + (a_hi b_lo + a_lo b_hi) << 32).
 * Sixteen states s_i .. s_i+15 ride in four vectors, so four chains of
 * multiplies overlap; all jump sixteen draws at a time, s -> A_16 s + C_16,
 * and each lane's bits are nb_pcg32_next's. */
typedef struct pcg16 {
    __m256i v[4];       /* states of draws i + 4q .. i + 4q + 3 */
    __m256i a, a_hi, c; /* A_16 (and its high half), C_16 in every lane */
} pcg16;

ATTR static __m256i mullo64(__m256i x, __m256i a, __m256i a_hi) {
    __m256i lo = _mm256_mul_epu32(x, a);
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(x, 32), a),
                                     _mm256_mul_epu32(x, a_hi));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
}

/* The lanes' states from rng's, s_l = A_l s + K_l inc for l = 0..15, from
 * the jump tables: independent multiplies, not a chain of sixteen (which
 * cost more than the draws on the short rows of an attention tile). */
ATTR static pcg16 pcg16_start(const nb_pcg32 *rng) {
    const __m256i st = _mm256_set1_epi64x((long long)rng->state);
    const __m256i st_hi = _mm256_set1_epi64x((long long)(rng->state >> 32));
    const __m256i inc = _mm256_set1_epi64x((long long)rng->inc);
    const __m256i inc_hi = _mm256_set1_epi64x((long long)(rng->inc >> 32));
    pcg16 g;
    for (int q = 0; q < 4; q++) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(nb_pcg_jump_a + 4 * q));
        __m256i k = _mm256_loadu_si256((const __m256i *)(nb_pcg_jump_k + 4 * q));
        g.v[q] = _mm256_add_epi64(mullo64(a, st, st_hi), mullo64(k, inc, inc_hi));
    }
    uint64_t a16 = nb_pcg_jump_a[16];
    g.a = _mm256_set1_epi64x((long long)a16), g.a_hi = _mm256_set1_epi64x((long long)(a16 >> 32));
    g.c = _mm256_set1_epi64x((long long)(nb_pcg_jump_k[16] * rng->inc));
    return g;
}

/* XSH-RR of four states, each output in the low half of its 64-bit lane. */
ATTR static __m256i pcg_out4(__m256i old) {
    __m256i x = _mm256_srli_epi64(_mm256_xor_si256(_mm256_srli_epi64(old, 18), old), 27);
    __m256i rot = _mm256_srli_epi64(old, 59);
    __m256i back = _mm256_and_si256(_mm256_sub_epi32(_mm256_set1_epi32(32), rot),
                                    _mm256_set1_epi32(31));
    return _mm256_or_si256(_mm256_srlv_epi32(x, rot), _mm256_sllv_epi32(x, back));
}

/* Draws 0..7 (lo) and 8..15 (hi) of the next sixteen, in order; the states
 * moved sixteen on. */
ATTR static void pcg16_next(pcg16 *g, __m256i *lo, __m256i *hi) {
    __m256i o[4];
    for (int q = 0; q < 4; q++) {
        o[q] = _mm256_shuffle_epi32(pcg_out4(g->v[q]), 0x88); /* d0 d1 . . | d2 d3 . . */
        g->v[q] = _mm256_add_epi64(mullo64(g->v[q], g->a, g->a_hi), g->c);
    }
    *lo = _mm256_permute4x64_epi64(_mm256_blend_epi32(o[0], o[1], 0xCC), 0xD8);
    *hi = _mm256_permute4x64_epi64(_mm256_blend_epi32(o[2], o[3], 0xCC), 0xD8);
}

/* rng moved on by the draws taken: lane 0's state. */
ATTR static void pcg16_end(const pcg16 *g, nb_pcg32 *rng) {
    rng->state = (uint64_t)_mm256_extract_epi64(g->v[0], 0);
}

ATTR static void pcg32_fill(nb_pcg32 *rng, uint32_t *out, size_t n) {
    size_t i = 0;
    if (n >= 16) {
        pcg16 g = pcg16_start(rng);
        for (; i + 16 <= n; i += 16) {
            __m256i lo, hi;
            pcg16_next(&g, &lo, &hi);
            _mm256_storeu_si256((__m256i *)(out + i), lo);
            _mm256_storeu_si256((__m256i *)(out + i + 8), hi);
        }
        pcg16_end(&g, rng);
    }
    nb_pcg32_fill(rng, out + i, n - i);
}

/* The dropout mask: keep = (draw >> 8) >= threshold, sixteen bytes a step. */
ATTR static void pcg32_keep(nb_pcg32 *rng, uint8_t *keep, size_t n, uint32_t threshold) {
    size_t i = 0;
    if (n >= 16) {
        pcg16 g = pcg16_start(rng);
        const __m256i thr = _mm256_set1_epi32((int)threshold), one = _mm256_set1_epi32(1);
        for (; i + 16 <= n; i += 16) {
            __m256i lo, hi;
            pcg16_next(&g, &lo, &hi);
            /* both sides are below 2^24: the signed compare is the unsigned one */
            __m256i d0 = _mm256_cmpgt_epi32(thr, _mm256_srli_epi32(lo, 8));
            __m256i d1 = _mm256_cmpgt_epi32(thr, _mm256_srli_epi32(hi, 8));
            __m256i k0 = _mm256_andnot_si256(d0, one), k1 = _mm256_andnot_si256(d1, one);
            __m128i w0 = _mm_packs_epi32(_mm256_castsi256_si128(k0),
                                         _mm256_extracti128_si256(k0, 1)); /* 0-7 */
            __m128i w1 = _mm_packs_epi32(_mm256_castsi256_si128(k1),
                                         _mm256_extracti128_si256(k1, 1)); /* 8-15 */
            _mm_storeu_si128((__m128i *)(keep + i), _mm_packs_epi16(w0, w1));
        }
        pcg16_end(&g, rng);
    }
    nb_vec_portable.pcg32_keep(rng, keep + i, n - i, threshold);
}

const nb_vec_kernels nb_vec_avx2 = {"avx2",      max,      exp_sub_sum, scale,
                                    add,         softmax_bwd, dropout, dropout_bwd,
                                    adam,        pcg32_fill, pcg32_keep, gelu,
                                    gelu_bwd,    gelu_d,      exp_affine_sum, transpose,
                                    max_affine_rows, exp_affine_rows};
#endif
