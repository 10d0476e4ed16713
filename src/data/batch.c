/* batch.c - nanoGPT's 90/10 split and random (x, y) batches of token ids. */
#include "nabla/data.h"
#include "nabla/random.h"
#include "core/core_internal.h"

static bool ids_1d(nb_ctx *ctx, const char *op, const nb_tensor *t) {
    if (!nb_ctx_ok(ctx)) return false;
    if (!t) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL token tensor", op);
        return false;
    }
    if (t->dtype != NB_I64 || t->ndim != 1) {
        char sh[64];
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: tokens are %s %s, expected a 1-D i64 tensor", op,
                    nb_dtype_name(t->dtype), nb_shape_str(t, sh, sizeof sh));
        return false;
    }
    return true;
}

/* The 1-D view data[begin : begin + n] (n >= 1). */
static nb_tensor *slice(nb_ctx *ctx, nb_tensor *data, int64_t begin, int64_t n) {
    nb_tensor *t = nb_view_of(ctx, data, 1, &n);
    if (t) t->data = (int64_t *)data->data + begin;
    return t;
}

nb_token_split nb_token_split_90_10(nb_ctx *ctx, nb_tensor *ids) {
    nb_token_split s = {0};
    if (!ids_1d(ctx, "token_split_90_10", ids)) return s;
    int64_t n = ids->shape[0], n_train = (int64_t)((double)n * 0.9);
    if (n_train > 0) s.train = slice(ctx, ids, 0, n_train);
    if (n - n_train > 0) s.val = slice(ctx, ids, n_train, n - n_train);
    return s;
}

nb_status nb_get_batch(nb_ctx *ctx, const nb_tensor *data, int64_t B, int64_t T,
                       nb_pcg32 *rng, nb_tensor **x, nb_tensor **y) {
    static const char op[] = "get_batch";
    if (x) *x = NULL;
    if (y) *y = NULL;
    if (!ids_1d(ctx, op, data)) return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!rng || !x || !y) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL rng, x or y", op);
    int64_t n = data->shape[0];
    if (B < 1 || T < 1)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: batch_size %lld and block_size %lld must be >= 1",
                           op, (long long)B, (long long)T);
    /* n > T, written so that T = INT64_MAX cannot overflow (T + 1 would) */
    if (n <= T || n - T > (int64_t)UINT32_MAX)
        return nb_ctx_fail(ctx, NB_ERR_VALUE,
                           "%s: %lld tokens, expected at least block_size + 1 = %.0f "
                           "(and at most 2^32 + block_size)",
                           op, (long long)n, (double)T + 1);
    nb_tensor *bx = nb_empty(ctx, NB_I64, 2, (const int64_t[]){B, T});
    nb_tensor *by = nb_empty(ctx, NB_I64, 2, (const int64_t[]){B, T});
    if (!bx || !by) return nb_ctx_status(ctx);
    const int64_t *d = data->data;
    int64_t *px = bx->data, *py = by->data;
    for (int64_t b = 0; b < B; b++) {
        int64_t i = nb_pcg32_bounded(rng, (uint32_t)(n - T));
        for (int64_t t = 0; t < T; t++) {
            px[b * T + t] = d[i + t];
            py[b * T + t] = d[i + t + 1];
        }
    }
    *x = bx, *y = by;
    return NB_OK;
}
