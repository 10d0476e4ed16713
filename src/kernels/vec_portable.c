/* kernels/vec_portable.c - the portable float32 elementwise kernels, the
 * twins the tests check the SIMD builds against (contracts in kernels.h),
 * plus nb_expf_poly and the choice of kernel set. Products and sums are
 * separate statements so that no compiler fuses them: the SIMD builds use
 * separate multiplies and adds too, and only exp's polynomial uses FMA, in
 * every build (NB_FMAF: in WebAssembly, which has none, a double add). */
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <stdlib.h>

#define EXP_LO -104.0f /* exp below is 0 in float */
#define EXP_HI 88.8f   /* exp above overflows */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f     /* 9 bits: n * LN2_HI is exact */
#define LN2_LO -2.12194440e-4f  /* ln 2 - LN2_HI */

float nb_expf_poly(float x) {
    if (isnan(x)) return x;
    float xc = x < EXP_LO ? EXP_LO : x > EXP_HI ? EXP_HI : x;
    float t = xc * LOG2E;
    float n = nearbyintf(t);
    float r = NB_FMAF(n, -LN2_HI, xc);
    r = NB_FMAF(n, -LN2_LO, r);
    float p = 1.0f / 5040;
    p = NB_FMAF(p, r, 1.0f / 720);
    p = NB_FMAF(p, r, 1.0f / 120);
    p = NB_FMAF(p, r, 1.0f / 24);
    p = NB_FMAF(p, r, 1.0f / 6);
    p = NB_FMAF(p, r, 0.5f);
    p = NB_FMAF(p, r, 1.0f);
    p = NB_FMAF(p, r, 1.0f);
    int ni = (int)n, n1 = ni >> 1, n2 = ni - n1;
    uint32_t u1 = (uint32_t)(n1 + 127) << 23, u2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &u1, sizeof s1);
    memcpy(&s2, &u2, sizeof s2);
    return p * s1 * s2;
}

float nb_vec_sum16(const float *part) { return nb_sum16_inline(part); }

/* PCG32's jump tables (kernels_internal.h), for the SIMD generators; the
 * tests' draws against nb_pcg32_next check every entry. */
const uint64_t nb_pcg_jump_a[17] = {
    0x0000000000000001ULL, 0x5851f42d4c957f2dULL, 0x685f98a2018fade9ULL, 0x0b046976f22528f5ULL,
    0xfb4d3ae39272be11ULL, 0x696d29da565ad7fdULL, 0xf08d02b0115f7a79ULL, 0x798e21c49ff78e45ULL,
    0xb59dda5f38413d21ULL, 0x5b5fee90a1001dcdULL, 0xc07a0e3e901ef009ULL, 0x1cca61580fc1a895ULL,
    0x2baa1c4032658d31ULL, 0xbc2bd0ebf66a209dULL, 0x384115c58e369e99ULL, 0x549e870bd354c7e5ULL,
    0x8d5e2ddc895abe41ULL};
const uint64_t nb_pcg_jump_k[17] = {
    0x0000000000000000ULL, 0x0000000000000001ULL, 0x5851f42d4c957f2eULL, 0xc0b18ccf4e252d17ULL,
    0xcbb5f646404a560cULL, 0xc7033129d2bd141dULL, 0x30705b042917ec1aULL, 0x20fd5db43a776693ULL,
    0x9a8b7f78da6ef4d8ULL, 0x502959d812b031f9ULL, 0xab894868b3b04fc6ULL, 0x6c0356a743cf3fcfULL,
    0x88cdb7ff5390e864ULL, 0xb477d43f85f67595ULL, 0x70a3a52b7c609632ULL, 0xa8e4baf10a9734cbULL,
    0xfd8341fcddebfcb0ULL};

static void pcg32_keep(nb_pcg32 *rng, uint8_t *keep, size_t n, uint32_t threshold) {
    for (size_t c = 0; c < n; c++) keep[c] = (nb_pcg32_next(rng) >> 8) >= threshold;
}

static float max(const float *x, size_t n) {
    float m = x[0];
    bool nan_ = false;
    for (size_t j = 0; j < n; j++) {
        m = x[j] > m ? x[j] : m;
        nan_ |= isnan(x[j]);
    }
    return nan_ ? NAN : m;
}

/* y = exp(x * scale + bias - m), or exp(x - m) when bias is NULL (x as it
 * is, no product); returns the sum in 16 partial sums. */
static float exp_affine_sum(float *y, const float *x, float scale, const float *bias, float m,
                            size_t n) {
    float part[16] = {0};
    for (size_t j = 0; j < n; j++) {
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

static float exp_sub_sum(float *y, const float *x, float m, size_t n) {
    return exp_affine_sum(y, x, 1.0f, NULL, m, n);
}

static void scale(float *y, float s, size_t n) {
    for (size_t j = 0; j < n; j++) y[j] = y[j] * s;
}

static void add(float *y, const float *x, size_t n) {
    for (size_t j = 0; j < n; j++) y[j] = y[j] + x[j];
}

static void softmax_bwd(float *dx, const float *y, const float *dy, size_t n) {
    float part[16] = {0};
    for (size_t j = 0; j < n; j++) {
        float t = dy[j] * y[j];
        part[j % 16] = part[j % 16] + t;
    }
    float dot = nb_vec_sum16(part);
    for (size_t j = 0; j < n; j++) {
        float t = dy[j] - dot;
        t = y[j] * t;
        dx[j] = dx[j] + t;
    }
}

static void dropout(float *y, unsigned char *mask, const float *x, const uint32_t *bits,
                    uint32_t threshold, float s, size_t n) {
    for (size_t j = 0; j < n; j++) {
        unsigned char keep = (bits[j] >> 8) >= threshold;
        mask[j] = keep;
        y[j] = keep ? x[j] * s : 0.0f;
    }
}

static void dropout_bwd(float *dx, const unsigned char *mask, const float *dy, float s,
                        size_t n) {
    for (size_t j = 0; j < n; j++) {
        float t = dy[j] * s;
        if (mask[j]) dx[j] = dx[j] + t;
    }
}

static void adam(float *p, float *g, float *m, float *v, size_t n, const nb_adam_coef *c) {
    for (size_t i = 0; i < n; i++) {
        float pi = p[i] * c->shrink, d = g[i];
        if (c->gscale != 1.0f) g[i] = d = d * c->gscale;
        float m1 = m[i] * c->b1, m2 = c->one_b1 * d;
        m[i] = m1 + m2;
        float v1 = v[i] * c->b2, v2 = c->one_b2 * d;
        v2 = v2 * d;
        v[i] = v1 + v2;
        float denom = sqrtf(v[i]) / c->bc2s;
        denom = denom + c->eps;
        float u = c->neg_step * m[i];
        u = u / denom;
        p[i] = pi + u;
    }
}

void nb_gelu1(float x, int tanh_approx, float *y, float *d) {
    float x2 = x * x, s;
    if (tanh_approx) {
        float w = x2 * NB_GELU_C2K;
        w = w + NB_GELU_C2;
        float u = x * w;
        float nu = -u;
        nu = nu > 87.0f ? 87.0f : nu; /* e and 1 + e stay finite */
        float e = nb_expf_poly(nu);
        float den = 1.0f + e;
        s = 1.0f / den;
        float q = x2 * NB_GELU_C2K3;
        q = q + NB_GELU_C2;
        float g = e * s; /* 1 - s without cancellation */
        g = s * g;
        g = g * q;
        g = g * x;
        *d = s + g;
    } else {
        float z = fabsf(x) * NB_GELU_RSQRT2;
        float den = z * 0.5f;
        den = den + 1.0f;
        float t = 1.0f / den;
        float p = NB_GELU_P8;
        p = NB_FMAF(p, t, NB_GELU_P7);
        p = NB_FMAF(p, t, NB_GELU_P6);
        p = NB_FMAF(p, t, NB_GELU_P5);
        p = NB_FMAF(p, t, NB_GELU_P4);
        p = NB_FMAF(p, t, NB_GELU_P3);
        p = NB_FMAF(p, t, NB_GELU_P2);
        p = NB_FMAF(p, t, NB_GELU_P1);
        p = NB_FMAF(p, t, NB_GELU_P0);
        float zz = z * z;
        float ez = nb_expf_poly(-zz);
        float e = t * p;
        e = e * ez;
        e = e * 0.5f;
        s = x < 0 ? e : 1.0f - e;
        float g = ez * NB_GELU_RSQRT2PI;
        g = x * g;
        *d = s + g;
    }
    *y = x * s;
}

static void gelu(float *y, const float *x, size_t n, int tanh_approx) {
    float d;
    for (size_t j = 0; j < n; j++) nb_gelu1(x[j], tanh_approx, y + j, &d);
}

static void gelu_d(float *y, float *d, const float *x, size_t n, int tanh_approx) {
    for (size_t j = 0; j < n; j++) nb_gelu1(x[j], tanh_approx, y + j, d + j);
}

static void gelu_bwd(float *dx, const float *x, const float *dy, size_t n, int tanh_approx,
                     int store) {
    for (size_t j = 0; j < n; j++) {
        float y, d;
        nb_gelu1(x[j], tanh_approx, &y, &d);
        float g = dy[j] * d;
        dx[j] = store ? g : dx[j] + g;
    }
}

void nb_vec_transpose_tiled(nb_transpose_block_fn block, size_t tile, float *dst,
                            const float *src, size_t ld, size_t rows, size_t cols) {
    size_t rt = rows - rows % tile, ct = cols - cols % tile;
    for (size_t j = 0; j < rt; j += tile)
        for (size_t d = 0; d < ct; d += tile) block(dst + d * rows + j, rows, src + j * ld + d, ld);
    for (size_t j = 0; j < rows; j++)
        for (size_t d = j < rt ? ct : 0; d < cols; d++) dst[d * rows + j] = src[j * ld + d];
}

void nb_transpose_dt(nb_dtype dt, void *dst, const void *src, size_t ld, size_t rows,
                     size_t cols) {
    enum { TILE = 16 };
    if (dt == NB_F32) {
        nb_vec()->transpose(dst, src, ld, rows, cols);
        return;
    }
    double *d = dst;
    const double *s = src;
    for (size_t r0 = 0; r0 < rows; r0 += TILE)
        for (size_t c0 = 0; c0 < cols; c0 += TILE)
            for (size_t r = r0; r < rows && r < r0 + TILE; r++)
                for (size_t c = c0; c < cols && c < c0 + TILE; c++) d[c * rows + r] = s[r * ld + c];
}

/* 8 source rows at a time, so each destination row gets whole runs of 8 */
static void transpose(float *dst, const float *src, size_t ld, size_t rows, size_t cols) {
    size_t j0 = 0;
    for (; j0 + 8 <= rows; j0 += 8)
        for (size_t d = 0; d < cols; d++)
            for (size_t jj = 0; jj < 8; jj++) dst[d * rows + j0 + jj] = src[(j0 + jj) * ld + d];
    for (size_t j = j0; j < rows; j++)
        for (size_t d = 0; d < cols; d++) dst[d * rows + j] = src[j * ld + d];
}

void nb_vec_max_affine_rows_portable(float *mx, const float *x, size_t ld, const int64_t *lim,
                                     size_t rows, float scale, const float *bias) {
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * ld;
        float m = -INFINITY;
        bool nan_ = false;
        for (int64_t c = 0; c < lim[r]; c++) {
            float t = xr[c] * scale;
            t = t + bias[c];
            m = t > m ? t : m;
            nan_ |= isnan(t);
        }
        mx[r] = nan_ ? NAN : m;
    }
}

void nb_vec_exp_affine_rows_with(nb_exp_affine_sum_fn row, float *x, size_t ld,
                                 const int64_t *lim, size_t rows, size_t n, float scale,
                                 const float *bias, const float *m, float *sum) {
    for (size_t r = 0; r < rows; r++) {
        float *xr = x + r * ld;
        size_t k = (size_t)lim[r];
        float s = row(xr, xr, scale, bias, m[r], k);
        if (sum) sum[r] = s;
        if (k < n) memset(xr + k, 0, (n - k) * sizeof(float));
    }
}

static void exp_affine_rows(float *x, size_t ld, const int64_t *lim, size_t rows, size_t n,
                            float scale, const float *bias, const float *m, float *sum) {
    nb_vec_exp_affine_rows_with(exp_affine_sum, x, ld, lim, rows, n, scale, bias, m, sum);
}

const nb_vec_kernels nb_vec_portable = {"portable", max, exp_sub_sum, scale, add, softmax_bwd,
                                        dropout, dropout_bwd, adam, nb_pcg32_fill, pcg32_keep,
                                        gelu, gelu_bwd, gelu_d, exp_affine_sum,
                                        transpose,
                                        nb_vec_max_affine_rows_portable, exp_affine_rows};

#if NB_WASM_KERNELS
/* The wasm build's set: the portable kernels, with exp over a row and the
 * transpose in SIMD128 and the dropout mask's draws four at a time
 * (vec_wasm.c), the same bits. */
static float exp_sub_sum_wasm(float *y, const float *x, float m, size_t n) {
    return nb_vec_exp_affine_sum_wasm(y, x, 1.0f, NULL, m, n);
}

static void exp_affine_rows_wasm(float *x, size_t ld, const int64_t *lim, size_t rows, size_t n,
                                 float scale, const float *bias, const float *m, float *sum) {
    nb_vec_exp_affine_rows_with(nb_vec_exp_affine_sum_wasm, x, ld, lim, rows, n, scale, bias,
                                m, sum);
}

const nb_vec_kernels nb_vec_wasm = {"wasm", max, exp_sub_sum_wasm, scale, add, softmax_bwd,
                                    dropout, dropout_bwd, adam, nb_pcg32_fill,
                                    nb_vec_pcg32_keep_wasm, gelu, gelu_bwd, gelu_d,
                                    nb_vec_exp_affine_sum_wasm,
                                    nb_vec_transpose_wasm,
                                    nb_vec_max_affine_rows_portable, exp_affine_rows_wasm};
#endif

/* Chosen once, by whichever thread asks first (pthread_once: workers may). */
static const nb_vec_kernels *vec_best;
static pthread_once_t vec_once = PTHREAD_ONCE_INIT;

static void vec_choose(void) {
    const nb_vec_kernels *k = &nb_vec_portable;
    const char *e = getenv("NB_VEC_PORTABLE");
#if NB_X86_KERNELS
    if (!(e && e[0] == '1')) {
        if (nb_cpu()->avx512dq)
            k = &nb_vec_avx512;
        else if (nb_cpu()->avx2_fma)
            k = &nb_vec_avx2;
    }
#elif NB_WASM_KERNELS
    if (!(e && e[0] == '1')) k = &nb_vec_wasm;
#else
    (void)e;
#endif
    vec_best = k;
}

const nb_vec_kernels *nb_vec(void) {
    pthread_once(&vec_once, vec_choose);
    return vec_best;
}
