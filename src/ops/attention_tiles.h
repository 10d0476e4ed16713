/* ops/attention_tiles.h - the tile kernels of nb_sdpa for one element type,
 * included by ops/attention.c once with SDPA_T float (SDPA_IS_FLOAT 1) and
 * once with double (0).
 * The types and helpers they use (sdpa_job, SDPA_BQ, SDPA_BK, causal_limit,
 * window_start, tile_visible, group_limits, row_starts, keep_row) are
 * defined there.
 *
 * Notation for query head (b, h) and its key/value head g = h / R: Q (Tq,
 * hd), rows H * hd apart, K (Tk, hd), V (Tk, hdv), rows Hkv * hd (Hkv *
 * hdv) apart in the projections' (B, T, heads, hd) layout; a query tile is
 * rows [i0, i0 + bq), a key tile rows [j0, j0 + bk).
 * Every product goes through nb_gemm_<T> (nb_gemm_<T>_ldc where a group of
 * rows fills part of a tile's rows), with transposed operands read through
 * strides. */

#define SDPA_CAT2(a, b) a##_##b
#define SDPA_CAT(a, b) SDPA_CAT2(a, b)
#define SDPA_FN(name) SDPA_CAT(name, SDPA_T)
#define SDPA_GEMM SDPA_CAT(nb_gemm, SDPA_T)
#define SDPA_GEMM_LDC(c, ld_c, ...) SDPA_CAT(SDPA_CAT(nb_gemm, SDPA_T), ldc)(c, ld_c, __VA_ARGS__)
#define SDPA_EXP(x) _Generic((SDPA_T)0, float: expf, default: exp)(x)
#define SDPA_LOG(x) _Generic((SDPA_T)0, float: logf, default: log)(x)

/* mx[r] = the max over lo[r] <= c < lim[r] of x[r ld + c] * scale +
 * colbias[c] for rows r < rows (-inf when none, NaN if one is NaN), without
 * storing the scaled scores; lo NULL is all 0. float: one SIMD kernel call
 * for the tile, one per row where the window sets lo. */
static inline void SDPA_FN(max_rows)(SDPA_T *mx, const SDPA_T *x, int64_t ld, const int64_t *lo,
                                     const int64_t *lim, int64_t rows, SDPA_T scale,
                                     const SDPA_T *colbias) {
#if SDPA_IS_FLOAT
    if (!lo) {
        nb_vec()->max_affine_rows(mx, x, (size_t)ld, lim, (size_t)rows, scale, colbias);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t n = lim[r] > lo[r] ? lim[r] - lo[r] : 0;
        nb_vec()->max_affine_rows(mx + r, x + r * ld + lo[r], (size_t)ld, &n, 1, scale,
                                  colbias + lo[r]);
    }
#else
    for (int64_t r = 0; r < rows; r++) {
        SDPA_T m = -INFINITY;
        bool nan_ = false;
        for (int64_t c = lo ? lo[r] : 0; c < lim[r]; c++) {
            SDPA_T t = x[r * ld + c] * scale + colbias[c];
            m = t > m ? t : m;
            nan_ |= isnan(t);
        }
        mx[r] = nan_ ? (SDPA_T)NAN : m;
    }
#endif
}

/* For rows r < rows of x (ld apart): x[c] = exp(x[c] * scale + colbias[c]
 * - m[r]) for lo[r] <= c < lim[r] (a padded key, colbias -inf, giving 0),
 * 0 for c < lo[r] and lim[r] <= c < n: scores straight from the products,
 * only their visible part exponentiated; sum[r] = the row's sum when sum
 * is not NULL. lo NULL is all 0. float: one SIMD kernel call (its fixed
 * order of partial sums), one per row where the window sets lo; double:
 * libm's exp. */
static inline void SDPA_FN(exp_rows)(SDPA_T *x, int64_t ld, const int64_t *lo, const int64_t *lim,
                                     int64_t rows, int64_t n, SDPA_T scale, const SDPA_T *colbias,
                                     const SDPA_T *m, SDPA_T *sum) {
#if SDPA_IS_FLOAT
    if (!lo) {
        nb_vec()->exp_affine_rows(x, (size_t)ld, lim, (size_t)rows, (size_t)n, scale, colbias, m,
                                  sum);
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *xr = x + r * ld;
        int64_t a = lo[r] < n ? lo[r] : n, nv = lim[r] > a ? lim[r] - a : 0;
        memset(xr, 0, (size_t)a * sizeof(float));
        if (a < n)
            nb_vec()->exp_affine_rows(xr + a, (size_t)ld, &nv, 1, (size_t)(n - a), scale,
                                      colbias + a, m + r, sum ? sum + r : NULL);
        else if (sum)
            sum[r] = 0;
    }
#else
    for (int64_t r = 0; r < rows; r++) {
        double *xr = x + r * ld, s = 0;
        int64_t a = lo ? (lo[r] < n ? lo[r] : n) : 0;
        memset(xr, 0, (size_t)a * sizeof(double));
        for (int64_t c = a; c < lim[r]; c++) {
            double t = xr[c] * scale + colbias[c];
            xr[c] = t == -INFINITY ? 0 : exp(t - m[r]);
            s += xr[c];
        }
        if (lim[r] < n) memset(xr + lim[r], 0, (size_t)(n - lim[r]) * sizeof(double));
        if (sum) sum[r] = s;
    }
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
 * comes from the (B, Hkv, hd, Tk) scratch kt. */
NB_HOT static void SDPA_FN(sdpa_forward_tile)(const sdpa_job *J, int64_t b, int64_t h, int64_t qt) {
    typedef SDPA_T T;
    const int64_t H = J->H, Hkv = J->Hkv, g = h / J->R, Tq = J->Tq, Tk = J->Tk, hd = J->hd,
                  hdv = J->hdv;
    const int64_t ldq = H * hd, ldv = Hkv * hdv, ldo = H * hdv;
    const int64_t i0 = qt * SDPA_BQ, bq = Tq - i0 < SDPA_BQ ? Tq - i0 : SDPA_BQ;
    const T *q = (const T *)J->q + (b * Tq + i0) * ldq + h * hd;
    const T *kt = (const T *)J->kt + (b * Hkv + g) * hd * Tk; /* K^T (hd, Tk) */
    const T *v = (const T *)J->v + b * Tk * ldv + g * hdv;
    T *acc = (T *)J->acc + ((b * H + h) * Tq + i0) * hdv;
    const T scale = (T)J->scale, keep_scale = (T)J->keep_scale;
    T s[SDPA_BQ * SDPA_BK], m[SDPA_BQ], l[SDPA_BQ], mx[SDPA_BQ], sum[SDPA_BQ], colbias[SDPA_BK];
    int64_t lo[SDPA_BQ], lim[SDPA_BQ], vis[SDPA_BQ], cs[SDPA_BQ / SDPA_RG], nc[SDPA_BQ / SDPA_RG];
    uint8_t keep[SDPA_BK];
    memset(acc, 0, (size_t)(bq * hdv) * sizeof(T));
    for (int64_t r = 0; r < bq; r++) m[r] = -INFINITY, l[r] = 0;
    for (int64_t j0 = 0; j0 < Tk; j0 += SDPA_BK) {
        const int64_t bk = Tk - j0 < SDPA_BK ? Tk - j0 : SDPA_BK;
        if (!tile_visible(J, b, i0, bq, j0, bk)) continue;
        /* s (bq, bk) = Q_tile @ K_tile^T, each group of rows only over
         * the keys [cs, nc) its rows see */
        group_limits(J, i0, bq, j0, bk, cs, nc);
        for (int64_t u = 0; u * SDPA_RG < bq; u++) {
            const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0);
            if (nc[u] > cs[u])
                SDPA_GEMM_LDC(s + g0 * bk + cs[u], bk, q + g0 * ldq, ldq, 1, kt + j0 + cs[u], Tk,
                              1, gn, hd, nc[u] - cs[u], false);
        }
        SDPA_FN(pad_bias)(J, b, j0, bk, colbias);
        /* the rows in passes (masks and maxima, then the exponentials, then
         * the running statistics), each pass one call for the tile (or per
         * row on the window's edge) */
        const int64_t *low = row_starts(J, i0, bq, j0, bk, lo) ? lo : NULL;
        for (int64_t r = 0; r < bq; r++) lim[r] = causal_limit(J, i0 + r, j0, bk);
        SDPA_FN(max_rows)(mx, s, bk, low, lim, bq, scale, colbias);
        for (int64_t r = 0; r < bq; r++) {
            mx[r] = mx[r] > m[r] || isnan(mx[r]) ? mx[r] : m[r];
            vis[r] = mx[r] == -INFINITY ? 0 : lim[r]; /* nothing visible yet: P = 0 */
        }
        for (int64_t u = 0; u * SDPA_RG < bq; u++) {
            const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0);
            SDPA_FN(exp_rows)(s + g0 * bk, bk, low ? low + g0 : NULL, vis + g0, gn, nc[u], scale,
                              colbias, mx + g0, sum + g0);
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
                for (int64_t c = 0; c < nc[r / SDPA_RG]; c++) x[c] *= (T)keep[c] * keep_scale;
            }
        }
        /* acc (bq, hdv) += P_tile @ V_tile, each group over the keys it sees */
        for (int64_t u = 0; u * SDPA_RG < bq; u++) {
            const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0);
            if (nc[u] > cs[u])
                SDPA_GEMM(acc + g0 * hdv, s + g0 * bk + cs[u], bk, 1, v + (j0 + cs[u]) * ldv, ldv,
                          1, gn, nc[u] - cs[u], hdv, true);
        }
    }
    T *o = (T *)J->o + (b * Tq + i0) * ldo + h * hdv;
    T *lse = (T *)J->lse + (b * H + h) * Tq + i0;
    for (int64_t r = 0; r < bq; r++) {
        SDPA_FN(scale_row)(o + r * ldo, acc + r * hdv, l[r] > 0 ? (T)1 / l[r] : (T)0, hdv);
        lse[r] = l[r] > 0 ? m[r] + SDPA_LOG(l[r]) : (T)-INFINITY;
    }
}

/* ---- backward: every tile of key/value head (b, g) ----------------------------
 * FlashAttention-2's rule, recomputing each visible tile from the saved
 * row log-sum-exp instead of storing the weights:
 *   P = exp(x - lse)  (0 where hidden),  Pd = P o Z / (1-p)
 *   dV += Pd^T dO,  dP = (dO V^T) o Z / (1-p),  D = rowsum(dO o O)
 *   dS = P o (dP - D),  dQ += scale dS K,  dK += scale dS^T Q
 * (D equals rowsum(P o dP), the softmax's correction term). Reuses the
 * forward's output O and lse. The group's query heads h = g R .. g R + R - 1
 * run in order: dQ of one (Tq, hd) collects in the scratch and goes into its
 * gradient before the next, while dK (Tk, hd) and dV (Tk, hdv) of the
 * key/value head collect over all of them (K^T and V^T are copied next to
 * them once), then are added into the gradients. One thread owns the
 * group, so the order of every sum is fixed.
 * Long: the tile loop nest is one piece: each step of a tile reads the
 * tile buffers (p, dp, dd, lo, lim, cs, nc) the steps before it filled, on
 * the stack of this function, and the equations above map onto it in
 * order. */
NB_HOT static void SDPA_FN(sdpa_backward_group)(const sdpa_job *J, int64_t b, int64_t g) {
    typedef SDPA_T T;
    const int64_t H = J->H, Hkv = J->Hkv, Tq = J->Tq, Tk = J->Tk, hd = J->hd, hdv = J->hdv;
    const int64_t ldq = H * hd, ldo = H * hdv, ldk = Hkv * hd, ldv = Hkv * hdv;
    const T *k = (const T *)J->k + b * Tk * ldk + g * hd;
    const T *v = (const T *)J->v + b * Tk * ldv + g * hdv;
    T *dq = (T *)J->acc + (b * Hkv + g) * (Tq * hd + 2 * Tk * hd + 2 * Tk * hdv);
    T *dk = dq + Tq * hd, *dv = dk + Tk * hd;
    T *kt = dv + Tk * hdv, *vt = kt + hd * Tk; /* K^T (hd, Tk), V^T (hdv, Tk) */
    const T scale = (T)J->scale, keep_scale = (T)J->keep_scale;
    T p[SDPA_BQ * SDPA_BK], dp[SDPA_BQ * SDPA_BK], dd[SDPA_BQ], colbias[SDPA_BK];
    int64_t lo[SDPA_BQ], lim[SDPA_BQ], cs[SDPA_BQ / SDPA_RG], nc[SDPA_BQ / SDPA_RG];
    uint8_t keep[SDPA_BK];
    T *gq = J->gq, *gk = J->gk, *gv = J->gv;
    memset(dk, 0, (size_t)(Tk * hd + Tk * hdv) * sizeof(T));
    /* K^T and V^T of the head, so that the tile products read them row by row */
    nb_transpose_dt(J->dtype, kt, k, (size_t)ldk, (size_t)Tk, (size_t)hd);
    nb_transpose_dt(J->dtype, vt, v, (size_t)ldv, (size_t)Tk, (size_t)hdv);
    for (int64_t h = g * J->R; h < (g + 1) * J->R; h++) {
        const T *q = (const T *)J->q + b * Tq * ldq + h * hd;
        const T *o = (const T *)J->o + b * Tq * ldo + h * hdv;
        const T *dout = (const T *)J->dout + b * Tq * ldo + h * hdv;
        const T *lse = (const T *)J->lse + (b * H + h) * Tq;
        memset(dq, 0, (size_t)(Tq * hd) * sizeof(T));
        for (int64_t i0 = 0; i0 < Tq; i0 += SDPA_BQ) {
            const int64_t bq = Tq - i0 < SDPA_BQ ? Tq - i0 : SDPA_BQ;
            const T *qt = q + i0 * ldq, *ot = o + i0 * ldo, *dot = dout + i0 * ldo;
            for (int64_t r = 0; r < bq; r++)
                dd[r] = SDPA_FN(dot_row)(dot + r * ldo, ot + r * ldo, hdv);
            for (int64_t j0 = 0; j0 < Tk; j0 += SDPA_BK) {
                const int64_t bk = Tk - j0 < SDPA_BK ? Tk - j0 : SDPA_BK;
                if (!tile_visible(J, b, i0, bq, j0, bk)) continue;
                group_limits(J, i0, bq, j0, bk, cs, nc);
                for (int64_t u = 0; u * SDPA_RG < bq; u++) { /* Q K^T, dO V^T where seen */
                    const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0), c = cs[u];
                    if (nc[u] <= c) continue;
                    SDPA_GEMM_LDC(p + g0 * bk + c, bk, qt + g0 * ldq, ldq, 1, kt + j0 + c, Tk, 1,
                                  gn, hd, nc[u] - c, false);
                    SDPA_GEMM_LDC(dp + g0 * bk + c, bk, dot + g0 * ldo, ldo, 1, vt + j0 + c, Tk,
                                  1, gn, hdv, nc[u] - c, false);
                }
                SDPA_FN(pad_bias)(J, b, j0, bk, colbias);
                const int64_t *low = row_starts(J, i0, bq, j0, bk, lo) ? lo : NULL;
                for (int64_t r = 0; r < bq; r++) /* P; a query that sees nothing: 0 */
                    lim[r] = lse[i0 + r] == -INFINITY ? 0 : causal_limit(J, i0 + r, j0, bk);
                for (int64_t u = 0; u * SDPA_RG < bq; u++) {
                    const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0);
                    SDPA_FN(exp_rows)(p + g0 * bk, bk, low ? low + g0 : NULL, lim + g0, gn, nc[u],
                                      scale, colbias, lse + i0 + g0, NULL);
                }
                /* dS over the keys computed, 0 left of them (P is 0 there) */
                for (int64_t r = 0; r < bq; r++) {
                    T *pr = p + r * bk, *dpr = dp + r * bk;
                    const int64_t c0 = cs[r / SDPA_RG], n = nc[r / SDPA_RG];
                    if (c0 > 0) memset(dpr, 0, (size_t)(c0 < n ? c0 : n) * sizeof(T));
                    if (J->dropout) {
                        keep_row(J, b, h, i0 + r, j0, bk, keep);
                        for (int64_t c = c0; c < n; c++) {
                            T z = (T)keep[c] * keep_scale, pc = pr[c];
                            pr[c] = pc * z; /* Pd, for dV */
                            dpr[c] = pc * (dpr[c] * z - dd[r]) * scale;
                        }
                    } else {
                        for (int64_t c = c0; c < n; c++)
                            dpr[c] = pr[c] * (dpr[c] - dd[r]) * scale;
                    }
                }
                /* dV += Pd^T dO and dK += dS^T Q by groups of keys, each over
                 * the queries [qs, qe) that see one of them (causal: from
                 * the first that sees its first key; window: to the last
                 * that sees its last key); dQ += dS K by groups of queries,
                 * each over the keys it computed (dp holds scale * dS).
                 * Groups start SDPA_RG apart in both tiles, so a group of
                 * keys reads only scores its queries computed or zeroed:
                 * the group of queries from qs computed keys up to nc, the
                 * later ones further; only where the tile's last query
                 * comes before the group's last key (more keys than
                 * queries) does that cut the group of keys short. */
                for (int64_t c0 = 0; c0 < bk; c0 += SDPA_RG) {
                    int64_t cn = group_rows(bk, c0);
                    int64_t qs = J->causal ? j0 + c0 - i0 : 0;
                    int64_t qe = J->window > 0 ? j0 + c0 + cn - 1 + J->window - i0 : bq;
                    qs = qs < 0 ? 0 : qs;
                    qe = qe > bq ? bq : qe;
                    if (qs >= bq) break;
                    if (qe <= qs) continue;
                    if (nc[qs / SDPA_RG] - c0 < cn) cn = nc[qs / SDPA_RG] - c0;
                    if (gv)
                        SDPA_GEMM(dv + (j0 + c0) * hdv, p + qs * bk + c0, 1, bk, dot + qs * ldo,
                                  ldo, 1, cn, qe - qs, hdv, true);
                    if (gk)
                        SDPA_GEMM(dk + (j0 + c0) * hd, dp + qs * bk + c0, 1, bk, qt + qs * ldq,
                                  ldq, 1, cn, qe - qs, hd, true);
                }
                for (int64_t u = 0; gq && u * SDPA_RG < bq; u++) {
                    const int64_t g0 = u * SDPA_RG, gn = group_rows(bq, g0), c = cs[u];
                    if (nc[u] > c)
                        SDPA_GEMM(dq + (i0 + g0) * hd, dp + g0 * bk + c, bk, 1, k + (j0 + c) * ldk,
                                  ldk, 1, gn, nc[u] - c, hd, true);
                }
            }
        }
        /* into q's gradient, (B, Tq, H, hd) like q */
        for (int64_t i = 0; gq && i < Tq; i++)
            SDPA_FN(put_row)(gq + (b * Tq + i) * ldq + h * hd, dq + i * hd, hd, J->fresh[0]);
    }
    /* into k's and v's, (B, Tk, Hkv, hd) like them */
    for (int64_t j = 0; gk && j < Tk; j++)
        SDPA_FN(put_row)(gk + (b * Tk + j) * ldk + g * hd, dk + j * hd, hd, J->fresh[1]);
    for (int64_t j = 0; gv && j < Tk; j++)
        SDPA_FN(put_row)(gv + (b * Tk + j) * ldv + g * hdv, dv + j * hdv, hdv, J->fresh[2]);
}

#undef SDPA_CAT2
#undef SDPA_CAT
#undef SDPA_FN
#undef SDPA_GEMM
#undef SDPA_GEMM_LDC
#undef SDPA_EXP
#undef SDPA_LOG
#undef SDPA_IS_FLOAT
