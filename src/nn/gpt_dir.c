/* nn/gpt_dir.c - every family from and to a model directory:
 * model.safetensors with config.json (Hugging Face) or cfg.json (the
 * course) beside it. Loading reads the config, checks every tensor of the
 * file's header against the names and shapes the config's model has (built
 * once, weightless, in a scratch context) and only then builds the model and
 * streams the tensors into it, one at a time. GPT-2's Hugging Face
 * directories go through gpt_hf.c, which also transposes Conv1D. */
#include "gpt_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nabla/io.h"

static const char *const LOAD = "gpt_load", *const SAVE = "gpt_save";

/* Index of the entry `name` in sd, or -1. */
static int sd_find(const nb_tensor_list *sd, const char *name) {
    for (int i = 0; i < sd->n; i++)
        if (!strcmp(sd->names[i], name)) return i;
    return -1;
}

/* The first entry holding the same tensor as entry i (a tied head's two
 * names are one tensor). */
static int sd_first(const nb_tensor_list *sd, int i) {
    for (int k = 0; k < i; k++)
        if (sd->t[k] == sd->t[i]) return k;
    return i;
}

/* Buffers some checkpoints carry that are no parameter (older Llama files
 * store RoPE's inverse frequencies): skipped. */
static bool ignored(const char *name) {
    const char *tail = "rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(tail);
    return n >= k && !strcmp(name + n - k, tail);
}

/* The file's tensors (header stand-ins) against the state_dict the config
 * gives: every name known, every shape equal, every parameter there (one
 * of a tied pair is enough). */
static nb_status check_names(nb_ctx *pctx, const char *path, const char *cpath,
                             const nb_tensor_list *want, const nb_tensor_list *file) {
    char s[64], w[64];
    for (int i = 0; i < file->n; i++) {
        const nb_tensor *t = file->t[i];
        if (ignored(file->names[i])) continue;
        int k = sd_find(want, file->names[i]);
        if (k < 0)
            return nb_ctx_fail(pctx, NB_ERR_FORMAT, "%s: %s: %s is not a tensor of the model "
                               "%s describes", LOAD, path, file->names[i], cpath);
        if (t->dtype != NB_F32 && t->dtype != NB_F64)
            return nb_ctx_fail(pctx, NB_ERR_FORMAT, "%s: %s: %s is %s; expected a float", LOAD,
                               path, file->names[i], nb_dtype_name(t->dtype));
        const nb_tensor *e = want->t[k];
        bool same = t->ndim == e->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == e->shape[d];
        if (!same)
            return nb_ctx_fail(pctx, NB_ERR_FORMAT, "%s: %s: %s is %s; %s gives %s", LOAD, path,
                               file->names[i], nb_shape_str(t, s, sizeof s), cpath,
                               nb_shape_str(e, w, sizeof w));
    }
    for (int k = 0; k < want->n; k++) {
        bool there = false;
        for (int j = 0; j < want->n && !there; j++)
            there = want->t[j] == want->t[k] && nb_list_get(file, want->names[j]);
        if (!there)
            return nb_ctx_fail(pctx, NB_ERR_FORMAT, "%s: %s: %s is missing (%s describes it)",
                               LOAD, path, want->names[k], cpath);
    }
    return NB_OK;
}

/* nb_gpt_load's state while the file streams in. */
typedef struct dir_stream {
    nb_ctx *pctx;
    nb_gpt *m;
    nb_gpt_config c;
    nb_pcg32 *rng;
    const char *path, *cpath;
    unsigned char *seen; /* per state_dict entry: its values came from the file */
} dir_stream;

static nb_status stream_header(void *user, const nb_tensor_list *file) {
    dir_stream *S = user;
    nb_ctx *scratch = nb_ctx_new(0);
    if (!scratch) return nb_ctx_fail(S->pctx, NB_ERR_MEMORY, "%s: out of memory", LOAD);
    nb_gpt_config sc = S->c;
    sc.no_grad = true, sc.dropout = 0.0;
    nb_gpt probe;
    nb_status st = nb_gpt_init(scratch, &probe, &sc, NULL);
    if (st)
        st = nb_ctx_fail(S->pctx, st, "%s: %s: %s", LOAD, S->cpath, nb_ctx_error(scratch));
    else
        st = check_names(S->pctx, S->path, S->cpath, &probe.state_dict, file);
    nb_gpt_free(&probe);
    nb_ctx_free(scratch);
    if (st) return st;
    if ((st = nb_gpt_init_impl(S->pctx, S->m, &S->c, NULL, S->rng))) return st;
    S->seen = calloc((size_t)S->m->state_dict.n + 1, 1);
    if (!S->seen) return nb_ctx_fail(S->pctx, NB_ERR_MEMORY, "%s: out of memory", LOAD);
    return NB_OK;
}

/* One tensor into its parameter (converted to the model's dtype); the
 * second name of a tied pair must hold the same values. */
static nb_status stream_tensor(void *user, const nb_tensor *t) {
    dir_stream *S = user;
    const nb_tensor_list *sd = &S->m->state_dict;
    int i = ignored(t->name) ? -1 : sd_find(sd, t->name);
    if (i < 0) return NB_OK;
    int p = sd_first(sd, i);
    nb_tensor *dst = sd->t[p];
    bool f32 = dst->dtype == NB_F32;
    if (!S->seen[p]) {
        S->seen[p] = 1;
        if (t->dtype == dst->dtype) {
            memcpy(dst->data, t->data, dst->numel * nb_dtype_size(dst->dtype));
        } else if (f32) {
            const double *s = t->data;
            float *d = dst->data;
            for (size_t k = 0; k < dst->numel; k++) d[k] = (float)s[k];
        } else {
            const float *s = t->data;
            double *d = dst->data;
            for (size_t k = 0; k < dst->numel; k++) d[k] = s[k];
        }
        return NB_OK;
    }
    for (size_t k = 0; k < t->numel; k++) {
        double v = nb_get(t, k);
        if ((f32 ? (double)(float)v : v) != nb_get(dst, k))
            return nb_ctx_fail(S->pctx, NB_ERR_FORMAT, "%s: %s: %s differs from %s at %zu; the "
                               "config ties the head to the embedding", LOAD, S->path, t->name,
                               sd->names[p], k);
    }
    return NB_OK;
}

/* config.json beside path, else cfg.json (malloc'd); NULL with an error. */
static char *find_config(nb_ctx *pctx, const char *path) {
    const char *names[] = {"config.json", "cfg.json"};
    for (int i = 0; i < 2; i++) {
        char *c = nb_gpt_beside(path, names[i]);
        if (!c) {
            nb_ctx_fail(pctx, NB_ERR_MEMORY, "%s: out of memory", LOAD);
            return NULL;
        }
        if (access(c, F_OK) == 0) return c;
        free(c);
    }
    nb_ctx_fail(pctx, NB_ERR_IO, "%s: %s: neither config.json nor cfg.json is beside it", LOAD,
                path);
    return NULL;
}

nb_status nb_gpt_load(nb_ctx *pctx, nb_gpt *m, const char *path, double dropout, nb_dtype dt,
                      nb_pcg32 *dropout_rng) {
    if (!pctx) return NB_ERR_NULL;
    if (!nb_ctx_ok(pctx)) return nb_ctx_status(pctx);
    if (!m || !path)
        return nb_ctx_fail(pctx, NB_ERR_NULL, "%s: %s is NULL", LOAD, m ? "path" : "model");
    char *cpath = find_config(pctx, path);
    if (!cpath) return nb_ctx_status(pctx);
    dir_stream S = {pctx, m, {0}, dropout_rng, path, cpath, NULL};
    nb_status st = nb_gpt_config_read(pctx, cpath, &S.c);
    if (!st && S.c.arch == NB_GPT_NANOGPT) { /* GPT-2's own files: Conv1D, two prefixes */
        st = nb_gpt_load_hf(pctx, m, path, S.c.n_head, dropout, dt, dropout_rng);
    } else if (!st) {
        S.c.dropout = dropout, S.c.dtype = dt;
        m->wte = NULL; /* built by stream_header */
        st = nb_load_safetensors_each(pctx, path, stream_header, stream_tensor, &S);
        if (st && m->wte) nb_gpt_free(m);
    }
    free(S.seen);
    free(cpath);
    return st;
}

nb_status nb_gpt_save(nb_ctx *ctx, const nb_gpt *m, const char *path) {
    if (!ctx) return NB_ERR_NULL;
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!m || !path)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", SAVE, m ? "path" : "model");
    if (!m->wte || !m->blocks)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the model is not built", SAVE);
    const nb_gpt_config *c = &m->cfg;
    if (c->arch == NB_GPT_NANOGPT) return nb_gpt_save_hf(ctx, m, path); /* GPT-2's files */
    bool hf = c->hf_names && c->arch != NB_GPT_GPTMODEL;
    char *cpath = nb_gpt_beside(path, hf ? "config.json" : "cfg.json");
    char *other = nb_gpt_beside(path, "config.json");
    if (!cpath || !other) {
        free(cpath), free(other);
        return nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", SAVE);
    }
    nb_status st = NB_OK;
    if (!hf && access(other, F_OK) == 0) /* nb_gpt_load would read it first */
        st = nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s is there and would be read before %s: save "
                         "the course's layout elsewhere", SAVE, other, cpath);
    char *text = st ? NULL : nb_gpt_config_json(ctx, SAVE, c);
    char *tmp = text ? nb_gpt_text_stage(ctx, SAVE, cpath, text) : NULL;
    free(text);
    nb_tensor_list sd = {0}; /* each tensor once: a tied head goes under the embedding's name */
    for (int i = 0; tmp && i < m->state_dict.n; i++)
        if (sd_first(&m->state_dict, i) == i)
            nb_list_add(&sd, m->state_dict.names[i], m->state_dict.t[i]);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"}; /* as transformers writes it */
    if (tmp) st = nb_save_safetensors(ctx, path, &sd, 1, mk, mv);
    nb_list_free(&sd);
    if (tmp && st) {
        remove(tmp);
        free(tmp);
    } else if (tmp) {
        st = nb_gpt_text_commit(ctx, SAVE, tmp, cpath);
    }
    free(cpath);
    free(other);
    return st ? st : nb_ctx_status(ctx);
}
