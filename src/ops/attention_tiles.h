/* ops/attention_tiles.h - the tile kernels of nb_sdpa for one element type,
 * included by ops/attention.c once with SDPA_T float (SDPA_IS_FLOAT 1) and
 * once with double (0).
 * The types and helpers they use (sdpa_job, SDPA_BQ, SDPA_BK, causal_limit,
 * tile_visible, keep_row) are defined there.
 *
 * Notation for head (b, h): Q (Tq, hd), K (Tk, hd), V (Tk, hdv), rows
 * H * hd (or H * hdv) apart in the projections' (B, T, H, hd) layout; a
 * query tile is rows [i0, i0 + bq), a key tile rows [j0, j0 + bk).
 * Every product goes through nb_gemm_<T>, with transposed operands read
 * through strides. */

#define SDPA_CAT2(a, b) a##_##b
#define SDPA_CAT(a, b) SDPA_CAT2(a, b)
#define SDPA_FN(name) SDPA_CAT(name, SDPA_T)
#define SDPA_GEMM SDPA_CAT(nb_gemm, SDPA_T)
#define SDPA_EXP(x) _Generic((SDPA_T)0, float: expf, default: exp)(x)
#define SDPA_LOG(x) _Generic((SDPA_T)0, float: logf, default: log)(x)

/* The max over c < lim of x[c] * scale + colbias[c] (-inf when lim is 0,
 * NaN if one is NaN), without storing the scaled scores. */
static inline SDPA_T SDPA_FN(row_max)(const SDPA_T *x, int64_t lim, SDPA_T scale,
                                      const SDPA_T *colbias) {
    SDPA_T mx = -INFINITY;
    bool nan_ = false;
    for (int64_t c = 0; c < lim; c++) {
        SDPA_T t = x[c] * scale + colbias[c];
        mx = t > mx ? t : mx;
        nan_ |= isnan(t);
    }
    return nan_ ? (SDPA_T)NAN : mx;
}

/* x[c] = exp(x[c] * scale + colbias[c] - m) for c < lim (a padded key,
 * colbias -inf, giving 0), 0 for lim <= c < n: a row of scores straight
 * from the products, only its visible part exponentiated; returns the sum.
 * float: one SIMD kernel call (its fixed order of partial sums); double:
 * libm's exp. */
static inline SDPA_T SDPA_FN(exp_scores)(SDPA_T *x, int64_t lim, int64_t n, SDPA_T scale,
                                         const SDPA_T *colbias, SDPA_T m) {
    if (lim < n) memset(x + lim, 0, (size_t)(n - lim) * sizeof(SDPA_T));
#if SDPA_IS_FLOAT
    return lim > 0 ? nb_vec()->exp_affine_sum(x, x, scale, colbias, m, (size_t)lim) : 0;
#else
    double sum = 0;
    for (int64_t c = 0; c < lim; c++) {
        double t = x[c] * scale + colbias[c];
        x[c] = t == -INFINITY ? 0 : exp(t - m);
        sum += x[c];
    }
    return sum;
#endif
}

/* Row helpers over n elements, in fixed-length chunks that gcc vectorizes
 * at -O2 (each output element is computed the same way wherever it sits):
 * y += x; y = x * s; y *= s; and x . y in 8 partial sums added in a fixed
 * order. */
static inline void SDPA_FN(add_row)(SDPA_T *restrict y, const SDPA_T *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) y[i + l] += x[i + l];
    for (; i < n; i++) y[i] += x[i];
}

/* y = x (a fresh gradient) or y += x */
static inline void SDPA_FN(put_row)(SDPA_T *restrict y, const SDPA_T *restrict x, int64_t n,
                                    bool store) {
    if (store) memcpy(y, x, (size_t)n * sizeof(SDPA_T));
    else SDPA_FN(add_row)(y, x, n);
}

static inline void SDPA_FN(scale_row)(SDPA_T *restrict y, const SDPA_T *restrict x, SDPA_T s,
                                      int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) y[i + l] = x[i + l] * s;
    for (; i < n; i++) y[i] = x[i] * s;
}

static inline void SDPA_FN(scale_in_place)(SDPA_T *y, SDPA_T s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) y[i + l] *= s;
    for (; i < n; i++) y[i] *= s;
}

static inline SDPA_T SDPA_FN(dot_row)(const SDPA_T *restrict x, const SDPA_T *restrict y,
                                      int64_t n) {
    SDPA_T part[8] = {0}, sum = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) part[l] += x[i + l] * y[i + l];
    for (int l = 0; l < 8; l++) sum += part[l];
    for (; i < n; i++) sum += x[i] * y[i];
    return sum;
}

/* dst (cols, rows) = src (rows, cols)^T, src's rows ld apart: K^T and V^T
 * of a head, so that the tile products read them row by row. */
static void SDPA_FN(transpose)(SDPA_T *restrict dst, const SDPA_T *restrict src, int64_t ld,
                               int64_t rows, int64_t cols) {
    int64_t j0 = 0;
    for (; j0 + 8 <= rows; j0 += 8) /* 8 source rows at once: whole lines written */
        for (int64_t d = 0; d < cols; d++)
            for (int jj = 0; jj < 8; jj++) dst[d * rows + j0 + jj] = src[(j0 + jj) * ld + d];
    for (int64_t j = j0; j < rows; j++)
        for (int64_t d = 0; d < cols; d++) dst[d * rows + j] = src[j * ld + d];
}

/* colbias for keys [j0, j0 + bk) of batch b: -inf for padding, else 0. */
static inline void SDPA_FN(pad_bias)(const sdpa_job *J, int64_t b, int64_t j0, int64_t bk,
                                     SDPA_T *colbias) {
    for (int64_t c = 0; c < bk; c++)
        colbias[c] = J->pad && J->pad[b * J->Tk + j0 + c] ? (SDPA_T)-INFINITY : (SDPA_T)0;
}

/* ---- forward: one query tile, all its visible key tiles -----------------------
 * Online softmax over the key tiles, per query row r with running max m and
 * running sum l of exp(x - m), x = scale * q . k (-inf where hidden):
 *   m' = max(m, max_j x_j),  alpha = exp(m - m'),  P_j = exp(x_j - m'),
 *   l' = alpha l + sum_j P_j,  acc' = alpha acc + (P o Z / (1-p)) V_tile,
 * Z the dropout keep mask (all ones without dropout). At the end
 *   out = acc / l,  lse = m + log(l)   (saved for backward),
 * and a row with nothing visible (l = 0) gets out = 0, lse = -inf.
 * acc is this tile's (bq, hdv) block of the (B, H, Tq, hdv) scratch; K^T
 * comes from the (B, H, hd, Tk) scratch kt. */
static void SDPA_FN(sdpa_forward_tile)(const sdpa_job *J, int64_t b, int64_t h, int64_t qt) {
    typedef SDPA_T T;
    const int64_t H = J->H, Tq = J->Tq, Tk = J->Tk, hd = J->hd, hdv = J->hdv;
    const int64_t ldq = H * hd, ldv = H * hdv;
    const int64_t i0 = qt * SDPA_BQ, bq = Tq - i0 < SDPA_BQ ? Tq - i0 : SDPA_BQ;
    const T *q = (const T *)J->q + (b * Tq + i0) * ldq + h * hd;
    const T *kt = (const T *)J->kt + (b * H + h) * hd * Tk; /* K^T (hd, Tk) */
    const T *v = (const T *)J->v + b * Tk * ldv + h * hdv;
    T *acc = (T *)J->acc + ((b * H + h) * Tq + i0) * hdv;
    const T scale = (T)J->scale, keep_scale = (T)J->keep_scale;
    T s[SDPA_BQ * SDPA_BK], m[SDPA_BQ], l[SDPA_BQ], mx[SDPA_BQ], sum[SDPA_BQ], colbias[SDPA_BK];
    int64_t lim[SDPA_BQ];
    uint8_t keep[SDPA_BK];
    memset(acc, 0, (size_t)(bq * hdv) * sizeof(T));
    for (int64_t r = 0; r < bq; r++) m[r] = -INFINITY, l[r] = 0;
    for (int64_t j0 = 0; j0 < Tk; j0 += SDPA_BK) {
        const int64_t bk = Tk - j0 < SDPA_BK ? Tk - j0 : SDPA_BK;
        if (!tile_visible(J, b, i0, bq, j0, bk)) continue;
        /* s (bq, bk) = Q_tile @ K_tile^T */
        SDPA_GEMM(s, q, ldq, 1, kt + j0, Tk, 1, bq, hd, bk, false);
        SDPA_FN(pad_bias)(J, b, j0, bk, colbias);
        /* the rows in passes (masks and maxima, then the exponentials, then
         * the running statistics) so that short rows' exp chains overlap */
        for (int64_t r = 0; r < bq; r++) {
            lim[r] = causal_limit(J, i0 + r, j0, bk);
            mx[r] = SDPA_FN(row_max)(s + r * bk, lim[r], scale, colbias);
        }
        for (int64_t r = 0; r < bq; r++) {
            T m_new = mx[r] > m[r] || isnan(mx[r]) ? mx[r] : m[r];
            mx[r] = m_new;
            /* nothing visible yet in this row: P = 0 */
            sum[r] = SDPA_FN(exp_scores)(s + r * bk, m_new == -INFINITY ? 0 : lim[r], bk, scale,
                                         colbias, m_new);
        }
        for (int64_t r = 0; r < bq; r++) {
            T *x = s + r * bk, m_new = mx[r];
            if (m_new == -INFINITY) continue;
            T alpha = SDPA_EXP(m[r] - m_new);
            l[r] = l[r] * alpha + sum[r];
            m[r] = m_new;
            if (alpha != 1) SDPA_FN(scale_in_place)(acc + r * hdv, alpha, hdv);
            if (J->dropout) {
                keep_row(J, b, h, i0 + r, j0, bk, keep);
                for (int64_t c = 0; c < bk; c++) x[c] *= (T)keep[c] * keep_scale;
            }
        }
        /* acc (bq, hdv) += P_tile @ V_tile */
        SDPA_GEMM(acc, s, bk, 1, v + j0 * ldv, ldv, 1, bq, bk, hdv, true);
    }
    T *o = (T *)J->o + (b * Tq + i0) * ldv + h * hdv;
    T *lse = (T *)J->lse + (b * H + h) * Tq + i0;
    for (int64_t r = 0; r < bq; r++) {
        SDPA_FN(scale_row)(o + r * ldv, acc + r * hdv, l[r] > 0 ? (T)1 / l[r] : (T)0, hdv);
        lse[r] = l[r] > 0 ? m[r] + SDPA_LOG(l[r]) : (T)-INFINITY;
    }
}

/* ---- backward: every tile of head (b, h) -----------------------------------
 * FlashAttention-2's rule, recomputing each visible tile from the saved
 * row log-sum-exp instead of storing the weights:
 *   P = exp(x - lse)  (0 where hidden),  Pd = P o Z / (1-p)
 *   dV += Pd^T dO,  dP = (dO V^T) o Z / (1-p),  D = rowsum(dO o O)
 *   dS = P o (dP - D),  dQ += scale dS K,  dK += scale dS^T Q
 * (D equals rowsum(P o dP), the softmax's correction term). Reuses the
 * forward's output O and lse. dQ, dK, dV collect in this head's contiguous
 * scratch (Tq, hd), (Tk, hd), (Tk, hdv), then are added into the gradients
 * (K^T and V^T are copied next to them first);
 * one thread owns the whole head, so the order of every sum is fixed. */
static void SDPA_FN(sdpa_backward_head)(const sdpa_job *J, int64_t b, int64_t h) {
    typedef SDPA_T T;
    const int64_t H = J->H, Tq = J->Tq, Tk = J->Tk, hd = J->hd, hdv = J->hdv;
    const int64_t ldq = H * hd, ldv = H * hdv;
    const T *q = (const T *)J->q + b * Tq * ldq + h * hd;
    const T *k = (const T *)J->k + b * Tk * ldq + h * hd;
    const T *v = (const T *)J->v + b * Tk * ldv + h * hdv;
    const T *o = (const T *)J->o + b * Tq * ldv + h * hdv;
    const T *dout = (const T *)J->dout + b * Tq * ldv + h * hdv;
    const T *lse = (const T *)J->lse + (b * H + h) * Tq;
    T *dq = (T *)J->acc + (b * H + h) * (Tq * hd + 2 * Tk * hd + 2 * Tk * hdv);
    T *dk = dq + Tq * hd, *dv = dk + Tk * hd;
    T *kt = dv + Tk * hdv, *vt = kt + hd * Tk; /* K^T (hd, Tk), V^T (hdv, Tk) */
    const T scale = (T)J->scale, keep_scale = (T)J->keep_scale;
    T p[SDPA_BQ * SDPA_BK], dp[SDPA_BQ * SDPA_BK], dd[SDPA_BQ], colbias[SDPA_BK];
    int64_t lim[SDPA_BQ];
    uint8_t keep[SDPA_BK];
    memset(dq, 0, (size_t)(Tq * hd + Tk * hd + Tk * hdv) * sizeof(T));
    SDPA_FN(transpose)(kt, k, ldq, Tk, hd);
    SDPA_FN(transpose)(vt, v, ldv, Tk, hdv);
    for (int64_t i0 = 0; i0 < Tq; i0 += SDPA_BQ) {
        const int64_t bq = Tq - i0 < SDPA_BQ ? Tq - i0 : SDPA_BQ;
        const T *qt = q + i0 * ldq, *ot = o + i0 * ldv, *dot = dout + i0 * ldv;
        for (int64_t r = 0; r < bq; r++) dd[r] = SDPA_FN(dot_row)(dot + r * ldv, ot + r * ldv, hdv);
        for (int64_t j0 = 0; j0 < Tk; j0 += SDPA_BK) {
            const int64_t bk = Tk - j0 < SDPA_BK ? Tk - j0 : SDPA_BK;
            if (!tile_visible(J, b, i0, bq, j0, bk)) continue;
            SDPA_GEMM(p, qt, ldq, 1, kt + j0, Tk, 1, bq, hd, bk, false);    /* Q K^T */
            SDPA_GEMM(dp, dot, ldv, 1, vt + j0, Tk, 1, bq, hdv, bk, false); /* dO V^T */
            SDPA_FN(pad_bias)(J, b, j0, bk, colbias);
            for (int64_t r = 0; r < bq; r++) { /* P; a query that sees nothing: 0 */
                lim[r] = lse[i0 + r] == -INFINITY ? 0 : causal_limit(J, i0 + r, j0, bk);
                SDPA_FN(exp_scores)(p + r * bk, lim[r], bk, scale, colbias, lse[i0 + r]);
            }
            for (int64_t r = 0; r < bq; r++) {
                T *pr = p + r * bk, *dpr = dp + r * bk;
                if (J->dropout) {
                    keep_row(J, b, h, i0 + r, j0, bk, keep);
                    for (int64_t c = 0; c < bk; c++) {
                        T z = (T)keep[c] * keep_scale, pc = pr[c];
                        pr[c] = pc * z; /* Pd, for dV */
                        dpr[c] = pc * (dpr[c] * z - dd[r]) * scale;
                    }
                } else {
                    for (int64_t c = 0; c < bk; c++) dpr[c] = pr[c] * (dpr[c] - dd[r]) * scale;
                }
            }
            /* dV += Pd^T dO; dQ += dS K; dK += dS^T Q (dp holds scale * dS) */
            if (J->gv) SDPA_GEMM(dv + j0 * hdv, p, 1, bk, dot, ldv, 1, bk, bq, hdv, true);
            if (J->gq) SDPA_GEMM(dq + i0 * hd, dp, bk, 1, k + j0 * ldq, ldq, 1, bq, bk, hd, true);
            if (J->gk) SDPA_GEMM(dk + j0 * hd, dp, 1, bk, qt, ldq, 1, bk, bq, hd, true);
        }
    }
    /* into the gradients, (B, T, H, hd) like the inputs */
    T *gq = J->gq, *gk = J->gk, *gv = J->gv;
    for (int64_t i = 0; gq && i < Tq; i++)
        SDPA_FN(put_row)(gq + (b * Tq + i) * ldq + h * hd, dq + i * hd, hd, J->fresh[0]);
    for (int64_t j = 0; gk && j < Tk; j++)
        SDPA_FN(put_row)(gk + (b * Tk + j) * ldq + h * hd, dk + j * hd, hd, J->fresh[1]);
    for (int64_t j = 0; gv && j < Tk; j++)
        SDPA_FN(put_row)(gv + (b * Tk + j) * ldv + h * hdv, dv + j * hdv, hdv, J->fresh[2]);
}

#undef SDPA_CAT2
#undef SDPA_CAT
#undef SDPA_FN
#undef SDPA_GEMM
#undef SDPA_EXP
#undef SDPA_LOG
#undef SDPA_IS_FLOAT
