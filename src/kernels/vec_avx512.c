/* kernels/vec_avx512.c - the float32 elementwise kernels with AVX-512: 16
 * lanes, lane k holding the partial sum of elements j = k (mod 16), tails
 * through masked loads and stores. Same formulas, same bits as
 * vec_portable.c (contracts in kernels.h). */
#include "kernels/kernels_internal.h"

#if NB_X86_KERNELS
#include <immintrin.h>

#define ATTR __attribute__((target("avx512f")))

ATTR static __m512 exp16(__m512 x) {
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.8f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    /* p * 2^n rounded once: the portable set's two exact power-of-two
     * factors (n/2 and n - n/2, so that a subnormal result is rounded only
     * at the second product) give the same bits as one vscalefps */
    __m512 y = _mm512_scalef_ps(p, n);
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* nb_vec_sum16's tree in registers: lanes i and i + w added, w = 8, 4, 2, 1. */
ATTR static float sum16(__m512 v) {
    __m256 lo = _mm512_castps512_ps256(v);
    __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    __m256 s8 = _mm256_add_ps(lo, hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

ATTR static __mmask16 tail_mask(size_t left) {
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* Sixteen floats at p: all of them when full (a plain load or store), else
 * the lanes of k (masked, zeros loaded past them). The kernels run their
 * whole blocks with full set and only a last, partial block masked: on Zen
 * 4 and 5 a masked store costs several times a plain one, and the masked
 * loop made Adam half as fast as its AVX2 twin and exp three times slower
 * than a copy of the same bytes. Inlined, so the test on full folds away. */
#define INLINE ATTR static inline __attribute__((always_inline))
INLINE __m512 ld16(const float *p, __mmask16 k, bool full) {
    return full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}
INLINE void st16(float *p, __mmask16 k, bool full, __m512 v) {
    if (full) _mm512_storeu_ps(p, v);
    else _mm512_mask_storeu_ps(p, k, v);
}

ATTR static float max(const float *x, size_t n) {
    __m512 m = _mm512_set1_ps(x[0]);
    __mmask16 nan_ = 0;
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 k = tail_mask(n - j);
        __m512 v = _mm512_mask_loadu_ps(m, k, x + j); /* lanes past the end repeat m */
        nan_ |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        m = _mm512_max_ps(m, v);
    }
    return nan_ ? NAN : _mm512_reduce_max_ps(m);
}

INLINE __m512 exp_sum16(float *y, const float *x, __m512 sv, const float *bias, __m512 mv,
                        size_t j, __mmask16 k, bool full, __m512 acc) {
    __m512 t = ld16(x + j, k, full);
    if (bias) t = _mm512_add_ps(_mm512_mul_ps(t, sv), ld16(bias + j, k, full));
    __m512 e = exp16(_mm512_sub_ps(t, mv));
    st16(y + j, k, full, e);
    return _mm512_mask_add_ps(acc, k, acc, e);
}

/* y = exp(x * scale + bias - m), or exp(x - m) when bias is NULL (x as it
 * is, no product); returns the sum. */
ATTR static inline float exp_sum(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(m), sv = _mm512_set1_ps(scale);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) acc = exp_sum16(y, x, sv, bias, mv, j, 0xffff, true, acc);
    if (j < n) acc = exp_sum16(y, x, sv, bias, mv, j, tail_mask(n - j), false, acc);
    return sum16(acc);
}

ATTR static float exp_sub_sum(float *y, const float *x, float m, size_t n) {
    return exp_sum(y, x, 1.0f, NULL, m, n);
}

ATTR static float exp_affine_sum(float *y, const float *x, float scale, const float *bias,
                                 float m, size_t n) {
    return exp_sum(y, x, scale, bias, m, n);
}

INLINE void scale16(float *y, __m512 sv, size_t j, __mmask16 k, bool full) {
    st16(y + j, k, full, _mm512_mul_ps(ld16(y + j, k, full), sv));
}

ATTR static void scale(float *y, float s, size_t n) {
    __m512 sv = _mm512_set1_ps(s);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) scale16(y, sv, j, 0xffff, true);
    if (j < n) scale16(y, sv, j, tail_mask(n - j), false);
}

INLINE void add16(float *y, const float *x, size_t j, __mmask16 k, bool full) {
    st16(y + j, k, full, _mm512_add_ps(ld16(y + j, k, full), ld16(x + j, k, full)));
}

ATTR static void add(float *y, const float *x, size_t n) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) add16(y, x, j, 0xffff, true);
    if (j < n) add16(y, x, j, tail_mask(n - j), false);
}

INLINE void softmax_bwd16(float *dx, const float *y, const float *dy, __m512 dot, size_t j,
                          __mmask16 k, bool full) {
    __m512 t = _mm512_mul_ps(ld16(y + j, k, full), _mm512_sub_ps(ld16(dy + j, k, full), dot));
    st16(dx + j, k, full, _mm512_add_ps(ld16(dx + j, k, full), t));
}

ATTR static void softmax_bwd(float *dx, const float *y, const float *dy, size_t n) {
    __m512 acc = _mm512_setzero_ps();
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 k = tail_mask(n - j);
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dy + j), _mm512_maskz_loadu_ps(k, y + j));
        acc = _mm512_mask_add_ps(acc, k, acc, t);
    }
    __m512 dot = _mm512_set1_ps(sum16(acc));
    size_t j = 0;
    for (; j + 16 <= n; j += 16) softmax_bwd16(dx, y, dy, dot, j, 0xffff, true);
    if (j < n) softmax_bwd16(dx, y, dy, dot, j, tail_mask(n - j), false);
}

/* A block of 16: y, and the mask's bytes. */
INLINE void dropout16(float *y, unsigned char *mask, const float *x, const uint32_t *bits,
                      __m512i th, __m512 sv, size_t j, __mmask16 k, bool full) {
    __m512i raw = full ? _mm512_loadu_si512(bits + j) : _mm512_maskz_loadu_epi32(k, bits + j);
    __mmask16 keep = _mm512_mask_cmpge_epu32_mask(k, _mm512_srli_epi32(raw, 8), th);
    __m128i bytes = _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(keep, 1));
    st16(y + j, k, full, _mm512_maskz_mul_ps(keep, ld16(x + j, k, full), sv));
    if (full) {
        _mm_storeu_si128((__m128i *)(mask + j), bytes);
    } else {
        unsigned char tmp[16];
        _mm_storeu_si128((__m128i *)tmp, bytes);
        memcpy(mask + j, tmp, (size_t)__builtin_popcount(k)); /* k's lanes */
    }
}

ATTR static void dropout(float *y, unsigned char *mask, const float *x, const uint32_t *bits,
                         uint32_t threshold, float s, size_t n) {
    __m512i th = _mm512_set1_epi32((int)threshold);
    __m512 sv = _mm512_set1_ps(s);
    size_t j = 0;
    for (; j + 16 <= n; j += 16) dropout16(y, mask, x, bits, th, sv, j, 0xffff, true);
    if (j < n) dropout16(y, mask, x, bits, th, sv, j, tail_mask(n - j), false);
}

ATTR static void dropout_bwd(float *dx, const unsigned char *mask, const float *dy, float s,
                             size_t n) {
    __m512 sv = _mm512_set1_ps(s);
    for (size_t j = 0; j < n; j += 16) {
        __mmask16 k = tail_mask(n - j);
        unsigned char tmp[16] = {0};
        memcpy(tmp, mask + j, n - j < 16 ? n - j : 16);
        __m512i mb = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)tmp));
        __mmask16 keep = _mm512_mask_cmpneq_epi32_mask(k, mb, _mm512_setzero_si512());
        __m512 t = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, dy + j), sv);
        __m512 d = _mm512_maskz_loadu_ps(k, dx + j);
        st16(dx + j, k, n - j >= 16, _mm512_mask_add_ps(d, keep, d, t));
    }
}

/* One block of 16 at i: whole when full (plain loads and stores), else the
 * lanes of k. */
INLINE void adam16(float *p, float *g, float *m, float *v, size_t i, __mmask16 k, bool full,
                   const nb_adam_coef *c) {
    const __m512 shrink = _mm512_set1_ps(c->shrink), b1 = _mm512_set1_ps(c->b1),
                 ob1 = _mm512_set1_ps(c->one_b1), b2 = _mm512_set1_ps(c->b2),
                 ob2 = _mm512_set1_ps(c->one_b2), bc2s = _mm512_set1_ps(c->bc2s),
                 eps = _mm512_set1_ps(c->eps), ns = _mm512_set1_ps(c->neg_step);
    __m512 pi = _mm512_mul_ps(ld16(p + i, k, full), shrink);
    __m512 d = ld16(g + i, k, full);
    if (c->gscale != 1.0f) {
        d = _mm512_mul_ps(d, _mm512_set1_ps(c->gscale));
        st16(g + i, k, full, d);
    }
    __m512 mi = _mm512_add_ps(_mm512_mul_ps(ld16(m + i, k, full), b1), _mm512_mul_ps(ob1, d));
    __m512 vi = _mm512_add_ps(_mm512_mul_ps(ld16(v + i, k, full), b2),
                              _mm512_mul_ps(_mm512_mul_ps(ob2, d), d));
    __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bc2s), eps);
    __m512 u = _mm512_div_ps(_mm512_mul_ps(ns, mi), denom);
    st16(m + i, k, full, mi);
    st16(v + i, k, full, vi);
    st16(p + i, k, full, _mm512_add_ps(pi, u));
}

ATTR static void adam(float *p, float *g, float *m, float *v, size_t n, const nb_adam_coef *c) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) adam16(p, g, m, v, i, 0xffff, true, c);
    if (i < n) adam16(p, g, m, v, i, tail_mask(n - i), false, c);
}

/* PCG32 16 draws at a time: lane l of (v0, v1) holds the state l steps on,
 * A_l s + K_l inc from the jump tables (nb_pcg_jump_a and _k: independent
 * multiplies, not a chain of 16 per call), and every lane jumps 16 steps
 * per round; the output permutation in 64-bit lanes, then narrowed to 32. */
#define PCG_ATTR __attribute__((target("avx512f,avx512dq")))

typedef struct pcg16 {
    __m512i v0, v1, a16, c16; /* states of draws i .. i+7, i+8 .. i+15; the jump */
} pcg16;

PCG_ATTR static pcg16 pcg16_start(const nb_pcg32 *rng) {
    __m512i st = _mm512_set1_epi64((long long)rng->state);
    __m512i inc = _mm512_set1_epi64((long long)rng->inc);
    const uint64_t *ja = nb_pcg_jump_a, *jk = nb_pcg_jump_k;
    pcg16 g;
    g.v0 = _mm512_add_epi64(_mm512_mullo_epi64(_mm512_loadu_si512(ja), st),
                            _mm512_mullo_epi64(_mm512_loadu_si512(jk), inc));
    g.v1 = _mm512_add_epi64(_mm512_mullo_epi64(_mm512_loadu_si512(ja + 8), st),
                            _mm512_mullo_epi64(_mm512_loadu_si512(jk + 8), inc));
    g.a16 = _mm512_set1_epi64((long long)ja[16]);
    g.c16 = _mm512_set1_epi64((long long)(jk[16] * rng->inc));
    return g;
}

PCG_ATTR static __m256i pcg_out8(__m512i old) {
    __m512i x = _mm512_srli_epi64(_mm512_xor_si512(_mm512_srli_epi64(old, 18), old), 27);
    __m256i xs = _mm512_cvtepi64_epi32(x);
    __m256i rot = _mm512_cvtepi64_epi32(_mm512_srli_epi64(old, 59));
    __m256i back = _mm256_and_si256(_mm256_sub_epi32(_mm256_set1_epi32(32), rot),
                                    _mm256_set1_epi32(31));
    return _mm256_or_si256(_mm256_srlv_epi32(xs, rot), _mm256_sllv_epi32(xs, back));
}

/* The next 16 draws in order; the states moved 16 on. */
PCG_ATTR static __m512i pcg16_next(pcg16 *g) {
    __m512i o = _mm512_inserti64x4(_mm512_castsi256_si512(pcg_out8(g->v0)), pcg_out8(g->v1), 1);
    g->v0 = _mm512_add_epi64(_mm512_mullo_epi64(g->v0, g->a16), g->c16);
    g->v1 = _mm512_add_epi64(_mm512_mullo_epi64(g->v1, g->a16), g->c16);
    return o;
}

/* rng moved on by the draws taken: lane 0's state. */
PCG_ATTR static void pcg16_end(const pcg16 *g, nb_pcg32 *rng) {
    uint64_t s0[8];
    _mm512_storeu_si512(s0, g->v0);
    rng->state = s0[0];
}

PCG_ATTR static void pcg32_fill(nb_pcg32 *rng, uint32_t *out, size_t n) {
    size_t i = 0;
    if (n >= 16) {
        pcg16 g = pcg16_start(rng);
        for (; i + 16 <= n; i += 16) _mm512_storeu_si512(out + i, pcg16_next(&g));
        pcg16_end(&g, rng);
    }
    nb_pcg32_fill(rng, out + i, n - i);
}

/* The dropout mask of one row, 16 draws at a time; a 16-bit compare mask
 * widened to 16 bytes. */
PCG_ATTR static void pcg32_keep(nb_pcg32 *rng, uint8_t *keep, size_t n, uint32_t threshold) {
    size_t i = 0;
    if (n >= 16) {
        pcg16 g = pcg16_start(rng);
        __m512i thr = _mm512_set1_epi32((int)threshold);
        for (; i + 16 <= n; i += 16) {
            __m512i o = pcg16_next(&g);
            __mmask16 k = _mm512_cmp_epu32_mask(_mm512_srli_epi32(o, 8), thr, _MM_CMPINT_NLT);
            _mm_storeu_si128((__m128i *)(keep + i),
                             _mm512_cvtepi32_epi8(_mm512_maskz_set1_epi32(k, 1)));
        }
        pcg16_end(&g, rng);
    }
    nb_vec_portable.pcg32_keep(rng, keep + i, n - i, threshold);
}

/* nb_gelu1 on 16 lanes: y and dy/dx. */
ATTR static void gelu16(__m512 x, int tanh_approx, __m512 *y, __m512 *d) {
    __m512 x2 = _mm512_mul_ps(x, x), s, one = _mm512_set1_ps(1.0f);
    if (tanh_approx) {
        __m512 w = _mm512_add_ps(_mm512_mul_ps(x2, _mm512_set1_ps(NB_GELU_C2K)),
                                 _mm512_set1_ps(NB_GELU_C2));
        __m512 u = _mm512_mul_ps(x, w);
        __m512 nu = _mm512_sub_ps(_mm512_setzero_ps(), u);
        __m512 e = exp16(_mm512_min_ps(_mm512_set1_ps(87.0f), nu));
        s = _mm512_div_ps(one, _mm512_add_ps(one, e));
        __m512 q = _mm512_add_ps(_mm512_mul_ps(x2, _mm512_set1_ps(NB_GELU_C2K3)),
                                 _mm512_set1_ps(NB_GELU_C2));
        __m512 g = _mm512_mul_ps(s, _mm512_mul_ps(e, s));
        g = _mm512_mul_ps(_mm512_mul_ps(g, q), x);
        *d = _mm512_add_ps(s, g);
    } else {
        __m512 z = _mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(NB_GELU_RSQRT2));
        __m512 t = _mm512_div_ps(one, _mm512_add_ps(_mm512_mul_ps(z, _mm512_set1_ps(0.5f)), one));
        __m512 p = _mm512_set1_ps(NB_GELU_P8);
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P7));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P6));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P5));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P4));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P3));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P2));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P1));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(NB_GELU_P0));
        __m512 ez = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
        __m512 e = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(t, p), ez), _mm512_set1_ps(0.5f));
        __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
        s = _mm512_mask_mov_ps(_mm512_sub_ps(one, e), neg, e);
        __m512 g = _mm512_mul_ps(x, _mm512_mul_ps(ez, _mm512_set1_ps(NB_GELU_RSQRT2PI)));
        *d = _mm512_add_ps(s, g);
    }
    *y = _mm512_mul_ps(x, s);
}

/* y and (when d is set) gelu'(x) of a block of 16 */
INLINE void gelu_y16(float *y, float *d, const float *x, int tanh_approx, size_t j, __mmask16 k,
                     bool full) {
    __m512 yv, dv;
    gelu16(ld16(x + j, k, full), tanh_approx, &yv, &dv);
    st16(y + j, k, full, yv);
    if (d) st16(d + j, k, full, dv);
}

ATTR static void gelu(float *y, const float *x, size_t n, int tanh_approx) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) gelu_y16(y, NULL, x, tanh_approx, j, 0xffff, true);
    if (j < n) gelu_y16(y, NULL, x, tanh_approx, j, tail_mask(n - j), false);
}

ATTR static void gelu_d(float *y, float *d, const float *x, size_t n, int tanh_approx) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) gelu_y16(y, d, x, tanh_approx, j, 0xffff, true);
    if (j < n) gelu_y16(y, d, x, tanh_approx, j, tail_mask(n - j), false);
}

INLINE void gelu_bwd16(float *dx, const float *x, const float *dy, int tanh_approx, int store,
                       size_t j, __mmask16 k, bool full) {
    __m512 yv, dv;
    gelu16(ld16(x + j, k, full), tanh_approx, &yv, &dv);
    __m512 g = _mm512_mul_ps(ld16(dy + j, k, full), dv);
    if (!store) g = _mm512_add_ps(ld16(dx + j, k, full), g);
    st16(dx + j, k, full, g);
}

ATTR static void gelu_bwd(float *dx, const float *x, const float *dy, size_t n, int tanh_approx,
                          int store) {
    size_t j = 0;
    for (; j + 16 <= n; j += 16) gelu_bwd16(dx, x, dy, tanh_approx, store, j, 0xffff, true);
    if (j < n) gelu_bwd16(dx, x, dy, tanh_approx, store, j, tail_mask(n - j), false);
}

/* One 16 x 16 block: rows of src (lds apart) to columns of dst (ldd apart)
 * in three rounds of shuffles. After the 32-bit and 64-bit unpacks, u[g][c]
 * holds, in its 128-bit lane L, column 4L + c of rows 4g .. 4g + 3; the
 * 128-bit lane shuffles then gather lane L of u[0..3][c] into dst row
 * 4L + c. */
ATTR static void transpose16(float *dst, size_t ldd, const float *src, size_t lds) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)i * lds);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int g = 0; g < 4; g++) {
        __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
        __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; c++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
        _mm512_storeu_ps(dst + (size_t)c * ldd, _mm512_shuffle_f32x4(v0, v2, 0x88));
        _mm512_storeu_ps(dst + (size_t)(4 + c) * ldd, _mm512_shuffle_f32x4(v0, v2, 0xDD));
        _mm512_storeu_ps(dst + (size_t)(8 + c) * ldd, _mm512_shuffle_f32x4(v1, v3, 0x88));
        _mm512_storeu_ps(dst + (size_t)(12 + c) * ldd, _mm512_shuffle_f32x4(v1, v3, 0xDD));
    }
}

/* whole 16 x 16 blocks with shuffles, the edges element by element */
static void transpose(float *dst, const float *src, size_t ld, size_t rows, size_t cols) {
    nb_vec_transpose_tiled(transpose16, 16, dst, src, ld, rows, cols);
}

/* Lane maxima (a NaN noted in a mask, as max does), then the largest lane. */
ATTR static void max_affine_rows(float *mx, const float *x, size_t ld, const int64_t *lim,
                                 size_t rows, float scale, const float *bias) {
    __m512 sv = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        size_t n = (size_t)lim[r];
        __m512 m = ninf;
        __mmask16 nan_ = 0;
        for (size_t j = 0; j < n; j += 16) {
            __mmask16 k = tail_mask(n - j);
            __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + j), sv),
                                     _mm512_maskz_loadu_ps(k, bias + j));
            nan_ |= _mm512_mask_cmp_ps_mask(k, t, t, _CMP_UNORD_Q);
            m = _mm512_mask_max_ps(m, k, m, t);
        }
        mx[r] = nan_ ? NAN : _mm512_reduce_max_ps(m);
    }
}

/* exp_affine_sum's lanes and tree per row; the zeros after lim stored in
 * the same pass */
ATTR static void exp_affine_rows(float *x, size_t ld, const int64_t *lim, size_t rows, size_t n,
                                 float scale, const float *bias, const float *m, float *sum) {
    __m512 sv = _mm512_set1_ps(scale);
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * ld;
        size_t vis = (size_t)lim[r];
        __m512 acc = _mm512_setzero_ps(), mv = _mm512_set1_ps(m[r]);
        for (size_t j = 0; j < vis; j += 16) {
            __mmask16 k = tail_mask(vis - j), kn = tail_mask(n - j);
            __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, xr + j), sv),
                                     _mm512_maskz_loadu_ps(k, bias + j));
            __m512 e = exp16(_mm512_sub_ps(t, mv));
            st16(xr + j, kn, n - j >= 16, _mm512_maskz_mov_ps(k, e));
            acc = _mm512_mask_add_ps(acc, k, acc, e);
        }
        size_t z = (vis + 15) / 16 * 16; /* the first column no exp pass stored */
        for (size_t j = z; j < n; j += 16)
            st16(xr + j, tail_mask(n - j), n - j >= 16, _mm512_setzero_ps());
        if (sum) sum[r] = sum16(acc);
    }
}

const nb_vec_kernels nb_vec_avx512 = {"avx512", max,        exp_sub_sum, scale,
                                      add,      softmax_bwd, dropout,    dropout_bwd,
                                      adam,     pcg32_fill,  pcg32_keep, gelu,       gelu_bwd,
                                      gelu_d,   exp_affine_sum, transpose, max_affine_rows,
                                      exp_affine_rows};
#endif
