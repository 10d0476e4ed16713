/* nn/gpt_hf.c - GPT-2 checkpoints as Hugging Face ships them
 * (model.safetensors + config.json, GPT2LMHeadModel or GPT2Model names)
 * into nabla's nanoGPT layout: renaming, the Conv1D weights transposed from
 * (in, out) to nn.Linear's (out, in), GPT-2's tanh GELU. The names and the
 * rules are in nabla/gpt.h; nanoGPT's from_pretrained is the reference for
 * which weights transpose. */
#include "gpt_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nabla/io.h"

static const char *const FN = "gpt_from_hf";

int nb_gpt_hf_n_head(int64_t n_embd) {
    switch (n_embd) {
    case 768: return 12;   /* gpt2 */
    case 1024: return 16;  /* gpt2-medium */
    case 1280: return 20;  /* gpt2-large */
    case 1600: return 25;  /* gpt2-xl */
    default: return 0;
    }
}

/* ---- config.json ------------------------------------------------------------- */

/* A positive integer field (absent: *out unchanged). */
static nb_status json_pos_int(nb_ctx *ctx, const char *path, const cJSON *root,
                              const char *key, int64_t max, int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) return NB_OK;
    double v = cJSON_IsNumber(j) ? j->valuedouble : -1;
    if (!(v >= 1 && v <= (double)max) || v != floor(v))
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "gpt_hf_config_read: %s: \"%s\" is not a "
                           "positive integer up to %lld", path, key, (long long)max);
    *out = (int64_t)v;
    return NB_OK;
}

nb_status nb_gpt_hf_config_read(nb_ctx *ctx, const char *path, nb_gpt_hf_config *out) {
    const char *fn = "gpt_hf_config_read";
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!path || !out)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", fn, path ? "out" : "path");
    cJSON *root = nb_gpt_json_read(ctx, fn, path);
    if (!root) return nb_ctx_status(ctx);
    nb_gpt_hf_config c = {.gelu = NB_GELU_TANH, .layer_norm_epsilon = 1e-5};
    int64_t n_layer = 0, n_head = 0, n_ctx = 0;
    nb_status st = NB_OK;
    if (!st) st = json_pos_int(ctx, path, root, "n_layer", 100000, &n_layer);
    if (!st) st = json_pos_int(ctx, path, root, "n_head", 1 << 20, &n_head);
    if (!st) st = json_pos_int(ctx, path, root, "n_embd", INT64_C(1) << 40, &c.n_embd);
    if (!st) st = json_pos_int(ctx, path, root, "n_ctx", INT64_C(1) << 40, &n_ctx);
    if (!st) st = json_pos_int(ctx, path, root, "n_positions", INT64_C(1) << 40, &c.n_positions);
    if (!st) st = json_pos_int(ctx, path, root, "vocab_size", INT64_C(1) << 40, &c.vocab_size);
    c.n_layer = (int)n_layer, c.n_head = (int)n_head;
    if (!c.n_positions) c.n_positions = n_ctx;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "activation_function");
    if (!st && act && !cJSON_IsNull(act)) {
        const char *a = cJSON_GetStringValue(act);
        if (!a)
            st = nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: \"activation_function\" is not a "
                             "string", fn, path);
        else if (!strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh") ||
                 !strcmp(a, "gelu_fast"))
            c.gelu = NB_GELU_TANH;
        else if (!strcmp(a, "gelu"))
            c.gelu = NB_GELU_NONE;
        else
            st = nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s: activation_function \"%.40s\" is "
                             "not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)",
                             fn, path, a);
    }
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(root, "layer_norm_epsilon");
    if (!st && eps && !cJSON_IsNull(eps)) {
        if (!cJSON_IsNumber(eps) || !(eps->valuedouble > 0))
            st = nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: \"layer_norm_epsilon\" is not a "
                             "positive number", fn, path);
        else
            c.layer_norm_epsilon = eps->valuedouble;
    }
    cJSON_Delete(root);
    if (!st) *out = c;
    return st;
}

/* ---- the state_dict ---------------------------------------------------------- */

/* Where the names start: "transformer." or "", from wte.weight. */
static const char *prefix_of(const nb_tensor_list *sd) {
    if (nb_list_get(sd, "transformer.wte.weight")) return "transformer.";
    if (nb_list_get(sd, "wte.weight")) return "";
    return NULL;
}

bool nb_gpt_state_dict_is_hf(const nb_tensor_list *sd) {
    if (!sd) return false;
    if (nb_list_get(sd, "wte.weight")) return true;
    const nb_tensor *wte = nb_list_get(sd, "transformer.wte.weight"),
                    *w = nb_list_get(sd, "transformer.h.0.attn.c_attn.weight");
    return wte && w && wte->ndim == 2 && w->ndim == 2 && w->shape[0] == wte->shape[1] &&
           w->shape[1] == 3 * wte->shape[1];
}

static const nb_tensor *get(const nb_tensor_list *sd, char *buf, size_t n, const char *pre,
                            const char *fmt, int i) {
    char tail[96];
    snprintf(tail, sizeof tail, fmt, i);
    snprintf(buf, n, "%s%s", pre, tail);
    return nb_list_get(sd, buf);
}

/* The tensor `name` is there, F32 or F64, of shape (d0) or (d0, d1). */
static nb_status check_tensor(nb_ctx *ctx, const nb_tensor *t, const char *name, int64_t d0,
                              int64_t d1, const char *note) {
    if (!t) return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s is missing from the state_dict", FN,
                               name);
    if (t->dtype != NB_F32 && t->dtype != NB_F64)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s is %s; expected f32 or f64", FN, name,
                           nb_dtype_name(t->dtype));
    int nd = d1 ? 2 : 1;
    if (t->ndim != nd || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char s[64], want[64];
        if (d1)
            snprintf(want, sizeof want, "(%lld, %lld)", (long long)d0, (long long)d1);
        else
            snprintf(want, sizeof want, "(%lld)", (long long)d0);
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s is %s; expected %s%s", FN, name,
                           nb_shape_str(t, s, sizeof s), want, note);
    }
    return NB_OK;
}

nb_status nb_gpt_config_from_hf(nb_ctx *ctx, const nb_tensor_list *sd, int n_head,
                                nb_gpt_config *out) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!sd || !out)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", FN, sd ? "out" : "sd");
    if (n_head < 0)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_head %d is negative (0: from the width)",
                           FN, n_head);
    const char *pre = prefix_of(sd);
    if (!pre)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: neither wte.weight (GPT2Model) nor "
                           "transformer.wte.weight (GPT2LMHeadModel) is in the state_dict", FN);
    char name[160];
    const nb_tensor *wte = get(sd, name, sizeof name, pre, "wte.weight", 0);
    if (wte->ndim != 2) {
        char s[64];
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s is %s; expected (vocab_size, n_embd)",
                           FN, name, nb_shape_str(wte, s, sizeof s));
    }
    int64_t V = wte->shape[0], C = wte->shape[1];
    nb_status st = check_tensor(ctx, wte, name, V, C, "");
    if (st) return st;
    const nb_tensor *wpe = get(sd, name, sizeof name, pre, "wpe.weight", 0);
    if (!wpe || wpe->ndim != 2)
        return check_tensor(ctx, wpe, name, 1024, C, " (n_positions, n_embd)");
    if ((st = check_tensor(ctx, wpe, name, wpe->shape[0], C, " (n_positions, n_embd)")))
        return st;
    int L = 0;
    while (L < 100000 && get(sd, name, sizeof name, pre, "h.%d.ln_1.weight", L)) L++;
    if (L == 0) {
        get(sd, name, sizeof name, pre, "h.%d.ln_1.weight", 0);
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: no transformer block: %s is missing", FN,
                           name);
    }
    int H = n_head ? n_head : nb_gpt_hf_n_head(C);
    if (!H)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_embd %lld is not a standard GPT-2 width "
                           "(768, 1024, 1280, 1600): give n_head or a config.json", FN,
                           (long long)C);
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.vocab_size = V, c.n_embd = C, c.block_size = wpe->shape[0], c.n_layer = L, c.n_head = H;
    c.dropout = 0.0, c.bias = true, c.dtype = wte->dtype, c.gelu = NB_GELU_TANH;
    *out = c;
    return NB_OK;
}

/* The tensors of block i: HF name, shape (d0 C[, d1 C]), whether it is a
 * Conv1D weight ((in, out), transposed on load), and the model's field. */
static const struct hf_block_entry {
    const char *fmt;
    int d0, d1;
    bool conv1d;
    size_t field;
} BLOCK[] = {
    {"h.%d.ln_1.weight", 1, 0, false, offsetof(nb_gpt_block, ln1_w)},
    {"h.%d.ln_1.bias", 1, 0, false, offsetof(nb_gpt_block, ln1_b)},
    {"h.%d.attn.c_attn.weight", 1, 3, true, offsetof(nb_gpt_block, c_attn_w)},
    {"h.%d.attn.c_attn.bias", 3, 0, false, offsetof(nb_gpt_block, c_attn_b)},
    {"h.%d.attn.c_proj.weight", 1, 1, true, offsetof(nb_gpt_block, c_proj_w)},
    {"h.%d.attn.c_proj.bias", 1, 0, false, offsetof(nb_gpt_block, c_proj_b)},
    {"h.%d.ln_2.weight", 1, 0, false, offsetof(nb_gpt_block, ln2_w)},
    {"h.%d.ln_2.bias", 1, 0, false, offsetof(nb_gpt_block, ln2_b)},
    {"h.%d.mlp.c_fc.weight", 1, 4, true, offsetof(nb_gpt_block, fc_w)},
    {"h.%d.mlp.c_fc.bias", 4, 0, false, offsetof(nb_gpt_block, fc_b)},
    {"h.%d.mlp.c_proj.weight", 4, 1, true, offsetof(nb_gpt_block, proj_w)},
    {"h.%d.mlp.c_proj.bias", 1, 0, false, offsetof(nb_gpt_block, proj_b)},
};
enum { N_BLOCK = sizeof BLOCK / sizeof BLOCK[0] };

/* Visits every tensor of the layout: checks it in sd (m NULL), or copies it
 * into m's parameter (m built, everything checked). */
static nb_status visit(nb_ctx *ctx, const nb_gpt_config *c, const nb_tensor_list *sd,
                       nb_gpt *m);
/* dst (out, in) = src (in, out)^T, or a plain copy, converting the dtype;
 * the transpose in 32x32 tiles. */
#define COPY_T(TD, TS)                                                                \
    do {                                                                              \
        TD *d = dst->data;                                                            \
        const TS *s = src->data;                                                      \
        if (!conv1d) {                                                                \
            for (size_t i = 0; i < dst->numel; i++) d[i] = (TD)s[i];                  \
            break;                                                                    \
        }                                                                             \
        const int64_t out = dst->shape[0], in = dst->shape[1];                        \
        for (int64_t i0 = 0; i0 < in; i0 += 32)                                       \
            for (int64_t o0 = 0; o0 < out; o0 += 32) {                                \
                int64_t i1 = i0 + 32 < in ? i0 + 32 : in, o1 = o0 + 32 < out ? o0 + 32 : out; \
                for (int64_t i = i0; i < i1; i++)                                     \
                    for (int64_t o = o0; o < o1; o++) d[o * in + i] = (TD)s[i * out + o]; \
            }                                                                         \
    } while (0)

static void copy_in(nb_tensor *dst, const nb_tensor *src, bool conv1d) {
    if (!conv1d && dst->dtype == src->dtype) {
        memcpy(dst->data, src->data, dst->numel * nb_dtype_size(dst->dtype));
        return;
    }
    if (dst->dtype == NB_F32 && src->dtype == NB_F32) COPY_T(float, float);
    else if (dst->dtype == NB_F32) COPY_T(float, double);
    else if (src->dtype == NB_F32) COPY_T(double, float);
    else COPY_T(double, double);
}
#undef COPY_T

static nb_status visit(nb_ctx *ctx, const nb_gpt_config *c, const nb_tensor_list *sd,
                       nb_gpt *m) {
    const char *pre = prefix_of(sd), *conv = ", Conv1D (in, out)";
    const int64_t C = c->n_embd;
    char name[160];
    nb_status st;
    const nb_tensor *t;
#define ONE(DST, FMT, I, D0, D1, CONV, NOTE)                                     \
    do {                                                                         \
        t = get(sd, name, sizeof name, pre, FMT, I);                             \
        if (m)                                                                   \
            copy_in(DST, t, CONV);                                               \
        else if ((st = check_tensor(ctx, t, name, D0, D1, NOTE)))                \
            return st;                                                           \
    } while (0)
    ONE(m ? m->wte : NULL, "wte.weight", 0, c->vocab_size, C, false, "");
    ONE(m ? m->wpe : NULL, "wpe.weight", 0, c->block_size, C, false, "");
    for (int i = 0; i < c->n_layer; i++)
        for (int k = 0; k < N_BLOCK; k++) {
            const struct hf_block_entry *e = &BLOCK[k];
            nb_tensor *dst = m ? *(nb_tensor **)((char *)&m->blocks[i] + e->field) : NULL;
            ONE(dst, e->fmt, i, e->d0 * C, e->d1 * C, e->conv1d, e->conv1d ? conv : "");
        }
    ONE(m ? m->lnf_w : NULL, "ln_f.weight", 0, C, 0, false, "");
    ONE(m ? m->lnf_b : NULL, "ln_f.bias", 0, C, 0, false, "");
#undef ONE
    return NB_OK;
}

/* cfg decided: build, check every tensor, copy. */
static nb_status from_hf_cfg(nb_ctx *pctx, nb_gpt *m, const nb_tensor_list *sd,
                             const nb_gpt_config *c, nb_pcg32 *dropout_rng) {
    const char *pre = prefix_of(sd);
    /* lm_head.weight, when there, is wte (GPT-2 ties them) */
    const nb_tensor *wte = nb_list_get(sd, pre[0] ? "transformer.wte.weight" : "wte.weight");
    const nb_tensor *lm = nb_list_get(sd, "lm_head.weight");
    if (lm) {
        nb_status st = check_tensor(pctx, lm, "lm_head.weight", wte->shape[0], wte->shape[1],
                                    " (tied to wte)");
        if (st) return st;
        bool same = lm->dtype == wte->dtype &&
                    !memcmp(lm->data, wte->data, lm->numel * nb_dtype_size(lm->dtype));
        for (size_t k = 0; !same && k < lm->numel; k++)
            if (nb_get(lm, k) != nb_get(wte, k))
                return nb_ctx_fail(pctx, NB_ERR_FORMAT, "%s: lm_head.weight differs from "
                                   "%swte.weight at %zu; GPT-2 ties them", FN, pre, k);
    }
    nb_status st = visit(pctx, c, sd, NULL); /* every tensor, before building */
    if (!st) st = nb_gpt_init_impl(pctx, m, c, NULL, dropout_rng);
    if (!st) visit(pctx, c, sd, m);
    return st;
}

nb_status nb_gpt_from_hf(nb_ctx *pctx, nb_gpt *m, const nb_tensor_list *sd, int n_head,
                         double dropout, nb_dtype dt, nb_pcg32 *dropout_rng) {
    if (!pctx) return NB_ERR_NULL;
    if (!nb_ctx_ok(pctx)) return nb_ctx_status(pctx);
    if (!m) return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: model is NULL", FN);
    nb_gpt_config c;
    nb_status st = nb_gpt_config_from_hf(pctx, sd, n_head, &c);
    if (st) return st;
    c.dropout = dropout;
    c.dtype = dt;
    return from_hf_cfg(pctx, m, sd, &c, dropout_rng);
}

/* config.json's numbers against the tensors'. */
static nb_status agree(nb_ctx *ctx, const char *cpath, const char *what, int64_t json,
                       int64_t tensors) {
    if (json && json != tensors)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s says %s %lld, the tensors %lld", FN,
                           cpath, what, (long long)json, (long long)tensors);
    return NB_OK;
}

/* nb_gpt_load_hf's state while the file streams in. */
typedef struct hf_stream {
    nb_ctx *pctx;
    nb_gpt *m;
    const char *cpath;   /* config.json, or NULL when there is none */
    nb_gpt_hf_config hc; /* its contents */
    int n_head;          /* given, or 0 */
    double dropout;
    nb_dtype dt;
    nb_pcg32 *rng;
    const char *pre;     /* "transformer." or "" */
    bool wte_seen;       /* wte or lm_head already copied into m->wte */
} hf_stream;

/* The header: config, config.json's agreement, every tensor checked, then
 * the model built (weights zero). */
static nb_status stream_header(void *user, const nb_tensor_list *sd) {
    hf_stream *S = user;
    nb_ctx *pctx = S->pctx;
    nb_gpt_config c;
    nb_status st = nb_gpt_config_from_hf(pctx, sd, S->n_head ? S->n_head : S->hc.n_head, &c);
    if (!st && S->cpath) {
        if (!st) st = agree(pctx, S->cpath, "n_layer", S->hc.n_layer, c.n_layer);
        if (!st) st = agree(pctx, S->cpath, "n_embd", S->hc.n_embd, c.n_embd);
        if (!st) st = agree(pctx, S->cpath, "n_positions", S->hc.n_positions, c.block_size);
        if (!st) st = agree(pctx, S->cpath, "vocab_size", S->hc.vocab_size, c.vocab_size);
        if (!st && S->hc.layer_norm_epsilon != 1e-5)
            st = nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: %s: layer_norm_epsilon %g is not "
                             "supported (nabla's LayerNorm uses 1e-05)", FN, S->cpath,
                             S->hc.layer_norm_epsilon);
    }
    if (st) return st;
    c.gelu = S->hc.gelu, c.dropout = S->dropout, c.dtype = S->dt;
    S->pre = prefix_of(sd);
    const nb_tensor *lm = nb_list_get(sd, "lm_head.weight");
    if (lm && (st = check_tensor(pctx, lm, "lm_head.weight", c.vocab_size, c.n_embd,
                                 " (tied to wte)")))
        return st;
    if ((st = visit(pctx, &c, sd, NULL))) return st;
    return nb_gpt_init_impl(pctx, S->m, &c, NULL, S->rng);
}

/* Where the HF tensor `name` goes in m (NULL: a buffer or another name). */
static nb_tensor *stream_dst(hf_stream *S, const char *name, bool *conv1d) {
    nb_gpt *m = S->m;
    size_t np = strlen(S->pre);
    *conv1d = false;
    if (strncmp(name, S->pre, np)) return NULL;
    name += np;
    if (!strcmp(name, "wte.weight")) return m->wte;
    if (!strcmp(name, "wpe.weight")) return m->wpe;
    if (!strcmp(name, "ln_f.weight")) return m->lnf_w;
    if (!strcmp(name, "ln_f.bias")) return m->lnf_b;
    int i = -1, n = 0;
    if (sscanf(name, "h.%d.%n", &i, &n) != 1 || n == 0 || i < 0 || i >= m->cfg.n_layer)
        return NULL;
    for (int k = 0; k < N_BLOCK; k++)
        if (!strcmp(name + n, BLOCK[k].fmt + strlen("h.%d."))) {
            *conv1d = BLOCK[k].conv1d;
            return *(nb_tensor **)((char *)&m->blocks[i] + BLOCK[k].field);
        }
    return NULL;
}

/* One tensor of the file into its parameter. wte and lm_head are one
 * tensor: the first copied, the second compared with it. */
static nb_status stream_tensor(void *user, const nb_tensor *t) {
    hf_stream *S = user;
    bool conv1d, lm = !strcmp(t->name, "lm_head.weight");
    nb_tensor *dst = lm ? S->m->wte : stream_dst(S, t->name, &conv1d);
    if (!dst) return NB_OK;
    if (dst != S->m->wte || !S->wte_seen) {
        copy_in(dst, t, lm ? false : conv1d);
        S->wte_seen |= dst == S->m->wte;
        return NB_OK;
    }
    bool f32 = dst->dtype == NB_F32;
    for (size_t k = 0; k < t->numel; k++) {
        double v = nb_get(t, k);
        if ((f32 ? (double)(float)v : v) != nb_get(dst, k))
            return nb_ctx_fail(S->pctx, NB_ERR_FORMAT, "%s: lm_head.weight differs from "
                               "%swte.weight at %zu; GPT-2 ties them", FN, S->pre, k);
    }
    return NB_OK;
}

nb_status nb_gpt_load_hf(nb_ctx *pctx, nb_gpt *m, const char *path, int n_head, double dropout,
                         nb_dtype dt, nb_pcg32 *dropout_rng) {
    if (!pctx) return NB_ERR_NULL;
    if (!nb_ctx_ok(pctx)) return nb_ctx_status(pctx);
    if (!m || !path)
        return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: %s is NULL", FN, m ? "path" : "model");
    if (n_head < 0)
        return nb_ctx_fail(pctx, NB_ERR_VALUE, "%s: n_head %d is negative (0: from config.json "
                           "or the width)", FN, n_head);
    /* config.json beside the file */
    char *cpath = nb_gpt_beside(path, "config.json");
    if (!cpath) return nb_ctx_fail(pctx, NB_ERR_MEMORY, "%s: out of memory", FN);
    hf_stream S = {pctx, m, NULL, {.gelu = NB_GELU_TANH, .layer_norm_epsilon = 1e-5},
                   n_head, dropout, dt, dropout_rng, "", false};
    nb_status st = NB_OK;
    if (access(cpath, F_OK) == 0) { /* there: read it (a FIFO or directory is refused there) */
        S.cpath = cpath;
        st = nb_gpt_hf_config_read(pctx, cpath, &S.hc);
    }
    if (!st) {
        m->wte = NULL; /* built by stream_header */
        st = nb_load_safetensors_each(pctx, path, stream_header, stream_tensor, &S);
        if (st && m->wte) nb_gpt_free(m);
    }
    free(cpath);
    return st;
}

/* ---- writing one ------------------------------------------------------------- */

/* dst (in, out) = src (out, in)^T: nn.Linear's weight as Conv1D stores it. */
static void transpose_out(nb_tensor *dst, const nb_tensor *src) {
    const int64_t out = src->shape[0], in = src->shape[1];
    size_t es = nb_dtype_size(src->dtype);
    const char *s = src->data;
    char *d = dst->data;
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) memcpy(d + (i * out + o) * es, s + (o * in + i) * es, es);
}

/* config.json beside the weights, written to a temporary file and renamed. */
static nb_status write_config(nb_ctx *ctx, const char *fn, const char *cpath,
                              const nb_gpt_config *c) {
    char *text = nb_gpt_config_json(ctx, fn, c);
    char *tmp = text ? nb_gpt_text_stage(ctx, fn, cpath, text) : NULL;
    free(text);
    return tmp ? nb_gpt_text_commit(ctx, fn, tmp, cpath) : nb_ctx_status(ctx);
}

nb_status nb_gpt_save_hf(nb_ctx *ctx, const nb_gpt *m, const char *path) {
    const char *fn = "gpt_save_hf";
    if (!ctx) return NB_ERR_NULL;
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!m || !path)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", fn, m ? "path" : "model");
    const nb_gpt_config *c = &m->cfg;
    if (!m->wte || !m->blocks || c->arch != NB_GPT_NANOGPT || !c->bias)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s; GPT-2's layout is NB_GPT_NANOGPT with "
                           "biases", fn, !m->wte || !m->blocks ? "the model is not built"
                           : c->arch != NB_GPT_NANOGPT ? "the model is the course's GPTModel"
                           : "the model has no biases");
    nb_ctx *tmp = nb_ctx_new(0);
    if (!tmp) return nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
    nb_tensor_list sd = {0};
    nb_list_add(&sd, "wte.weight", m->wte);
    nb_list_add(&sd, "wpe.weight", m->wpe);
    for (int i = 0; i < c->n_layer && nb_ctx_ok(tmp); i++)
        for (int k = 0; k < N_BLOCK; k++) {
            const struct hf_block_entry *e = &BLOCK[k];
            nb_tensor *t = *(nb_tensor **)((char *)&m->blocks[i] + e->field), *w = t;
            char *name = nb_ctx_alloc(tmp, 96);
            if (!name) break;
            snprintf(name, 96, e->fmt, i);
            if (e->conv1d && (w = nb_empty(tmp, t->dtype, NB_SHAPE(t->shape[1], t->shape[0]))))
                transpose_out(w, t);
            if (w) nb_list_add(&sd, name, w);
        }
    nb_list_add(&sd, "ln_f.weight", m->lnf_w);
    nb_list_add(&sd, "ln_f.bias", m->lnf_b);
    nb_status st = nb_ctx_ok(tmp) ? NB_OK
                   : nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: %s", fn, nb_ctx_error(tmp));
    const char *mk[1] = {"format"}, *mv[1] = {"pt"}; /* as transformers writes it */
    if (!st) st = nb_save_safetensors(ctx, path, &sd, 1, mk, mv);
    nb_list_free(&sd);
    nb_ctx_free(tmp);
    if (st) return st;
    char *cpath = nb_gpt_beside(path, "config.json");
    if (!cpath) return nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
    st = write_config(ctx, fn, cpath, c);
    free(cpath);
    return st;
}
