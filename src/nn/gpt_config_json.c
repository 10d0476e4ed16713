/* nn/gpt_config_json.c - a model's config file: Hugging Face's config.json
 * (LlamaForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, GPT-2) and the
 * course's cfg dict saved as cfg.json (Llama 3, Qwen3, GPTModel), read into
 * and written from nb_gpt_config. The keys and the rules are in
 * nabla/gpt.h; one table (FIELDS) names each size in both layouts, so the
 * reader and the writer walk the same list. */
#include "gpt_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/io.h"

static const char *const READ = "gpt_config_read", *const WRITE = "gpt_config_write";

/* ---- the keys ------------------------------------------------------------------ */

/* Which layout and family a key is required in. */
enum {
    R_HF = 1,     /* every config.json of the new families */
    R_COURSE = 2, /* every course cfg.json of the new families */
    R_DENSE = 4,  /* when there are no experts (both layouts) */
    R_MOE = 8,    /* when there are experts (both layouts) */
};
enum { K_I64, K_INT, K_F64, K_BOOL };

/* One size of the model under its two names: Hugging Face's, the course's
 * (NULL: the course's dict has no such key and nabla adds none). */
typedef struct field {
    const char *hf, *course;
    int kind;
    size_t off;
    unsigned req;
} field;

#define OFF(f) offsetof(nb_gpt_config, f)
static const field FIELDS[] = {
    {"vocab_size", "vocab_size", K_I64, OFF(vocab_size), R_HF | R_COURSE},
    {"max_position_embeddings", "context_length", K_I64, OFF(block_size), R_HF | R_COURSE},
    {"hidden_size", "emb_dim", K_I64, OFF(n_embd), R_HF | R_COURSE},
    {"num_attention_heads", "n_heads", K_INT, OFF(n_head), R_HF | R_COURSE},
    {"num_hidden_layers", "n_layers", K_INT, OFF(n_layer), R_HF | R_COURSE},
    {"num_key_value_heads", "n_kv_groups", K_INT, OFF(n_kv_head), R_COURSE},
    {"head_dim", "head_dim", K_I64, OFF(head_dim), 0},
    {"intermediate_size", "hidden_dim", K_I64, OFF(hidden_dim), R_DENSE},
    {"rms_norm_eps", "norm_eps", K_F64, OFF(norm_eps), 0},
    {"rope_theta", "rope_base", K_F64, OFF(rope_theta), R_COURSE},
    {"tie_word_embeddings", "tie_head", K_BOOL, OFF(tie_head), 0},
    {"num_experts", "num_experts", K_INT, OFF(n_expert), R_MOE},
    {"num_experts_per_tok", "num_experts_per_tok", K_INT, OFF(n_expert_per_tok), R_MOE},
    {"moe_intermediate_size", "moe_intermediate_size", K_I64, OFF(moe_hidden_dim), R_MOE},
};
#undef OFF
enum { N_FIELDS = sizeof FIELDS / sizeof FIELDS[0] };
enum { F_HEADS = 3, F_KV = 5, F_HEAD_DIM = 6, F_EXPERTS = 11, F_PER_TOK = 12 };

/* ---- reading --------------------------------------------------------------------- */

/* One read: the first error stops the rest (st). */
typedef struct jr {
    nb_ctx *ctx;
    const char *path;
    const cJSON *root;
    nb_status st;
} jr;

/* The key's value as a short string for messages. */
static void show(const cJSON *j, char *buf, size_t n) {
    char *s = cJSON_PrintUnformatted(j);
    snprintf(buf, n, "%.40s%s", s ? s : "?", s && strlen(s) > 40 ? "..." : "");
    free(s);
}

/* The key's item (NULL when absent or null; an error when also required). */
static const cJSON *jr_get(jr *r, const cJSON *obj, const char *key, bool required) {
    if (r->st) return NULL;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (j && cJSON_IsNull(j)) j = NULL;
    if (!j && required)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_FORMAT, "%s: %s: \"%s\" is missing", READ, r->path,
                            key);
    return j;
}

static void mistyped(jr *r, const cJSON *j, const char *key, const char *want) {
    char v[48];
    show(j, v, sizeof v);
    r->st = nb_ctx_fail(r->ctx, NB_ERR_FORMAT, "%s: %s: \"%s\" is %s; expected %s", READ,
                        r->path, key, v, want);
}

/* An integer in [lo, 2^40] (absent: *out unchanged). */
static void jr_int(jr *r, const cJSON *obj, const char *key, bool required, int64_t lo,
                   int64_t *out) {
    const cJSON *j = jr_get(r, obj, key, required);
    if (!j) return;
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= (double)lo && v <= 0x1p40) || v != floor(v)) {
        char want[64];
        snprintf(want, sizeof want, "an integer from %lld", (long long)lo);
        mistyped(r, j, key, want);
        return;
    }
    *out = (int64_t)v;
}

/* A finite number > 0 (absent: *out unchanged). */
static void jr_num(jr *r, const cJSON *obj, const char *key, bool required, double *out) {
    const cJSON *j = jr_get(r, obj, key, required);
    if (!j) return;
    if (!cJSON_IsNumber(j) || !(j->valuedouble > 0) || !isfinite(j->valuedouble))
        mistyped(r, j, key, "a positive number");
    else
        *out = j->valuedouble;
}

static void jr_bool(jr *r, const cJSON *obj, const char *key, bool required, bool *out) {
    const cJSON *j = jr_get(r, obj, key, required);
    if (!j) return;
    if (!cJSON_IsBool(j))
        mistyped(r, j, key, "true or false");
    else
        *out = cJSON_IsTrue(j);
}

static const char *jr_str(jr *r, const cJSON *obj, const char *key, bool required) {
    const cJSON *j = jr_get(r, obj, key, required);
    if (!j) return NULL;
    if (!cJSON_IsString(j)) mistyped(r, j, key, "a string");
    return r->st ? NULL : j->valuestring;
}

/* Every FIELDS entry of the layout into c; req: the R_ bits that make a key
 * required; skip: the R_ bits of keys not read at all. */
static void read_fields(jr *r, nb_gpt_config *c, bool hf, unsigned req, unsigned skip) {
    for (int i = 0; i < N_FIELDS && !r->st; i++) {
        const field *f = &FIELDS[i];
        if (f->req & skip) continue;
        const char *key = hf ? f->hf : f->course;
        bool need = (f->req & req) != 0;
        void *p = (char *)c + f->off;
        int64_t v = f->kind == K_INT ? *(int *)p : f->kind == K_I64 ? *(int64_t *)p : 0;
        if (f->kind == K_INT || f->kind == K_I64) jr_int(r, r->root, key, need, 1, &v);
        if (f->kind == K_INT) *(int *)p = v > 1 << 30 ? 1 << 30 : (int)v;
        if (f->kind == K_I64) *(int64_t *)p = v;
        if (f->kind == K_F64) jr_num(r, r->root, key, need, p);
        if (f->kind == K_BOOL) jr_bool(r, r->root, key, need, p);
    }
}

/* Llama 3's frequency scaling: HF's rope_scaling or the course's rope_freq. */
static void read_scaling(jr *r, nb_gpt_config *c, bool hf) {
    const char *key = hf ? "rope_scaling" : "rope_freq";
    const cJSON *s = jr_get(r, r->root, key, false);
    if (!s) return;
    if (!cJSON_IsObject(s)) return mistyped(r, s, key, "an object");
    if (hf) {
        const char *t = jr_str(r, s, "rope_type", false);
        if (!t && !r->st) t = jr_str(r, s, "type", true); /* the older transformers' key */
        if (r->st) return;
        if (!strcmp(t, "default")) return;
        if (strcmp(t, "llama3")) {
            r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: rope_scaling's rope_type "
                                "\"%.40s\" is not supported (llama3, default)", READ, r->path, t);
            return;
        }
    }
    nb_rope_scaling *q = &c->rope_scaling;
    jr_num(r, s, "factor", true, &q->factor);
    jr_num(r, s, "low_freq_factor", true, &q->low_freq_factor);
    jr_num(r, s, "high_freq_factor", true, &q->high_freq_factor);
    jr_int(r, s, hf ? "original_max_position_embeddings" : "original_context_length", true, 1,
           &q->original_max_position_embeddings);
    c->rope_scaled = !r->st;
}

/* The new families' defaults before the file's keys. */
static nb_gpt_config family(nb_gpt_arch arch, bool hf) {
    nb_gpt_config c = nb_gpt_config_default(arch);
    c.dropout = 0.0, c.bias = false, c.qkv_bias = false, c.dtype = NB_F32;
    c.qk_norm = arch == NB_GPT_QWEN3, c.tie_head = false, c.hf_names = hf;
    c.n_kv_head = 0, c.head_dim = 0, c.window = 0, c.rope_scaled = false;
    c.n_expert = 0, c.n_expert_per_tok = 0, c.moe_hidden_dim = 0, c.hidden_dim = 0;
    /* HF's LlamaConfig and Qwen3Config defaults; the course's per family */
    c.norm_eps = hf || arch == NB_GPT_QWEN3 ? 1e-6 : 1e-5;
    c.rope_theta = 10000.0;
    return c;
}

/* The keys HF's classes have that nabla cannot build unless they are off. */
static void read_hf_extras(jr *r, nb_gpt_config *c, bool moe) {
    const char *act = jr_str(r, r->root, "hidden_act", false);
    if (act && strcmp(act, "silu"))
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: hidden_act \"%.40s\" is not "
                            "supported (silu)", READ, r->path, act);
    const char *off[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2 && !r->st; i++) {
        bool on = false;
        jr_bool(r, r->root, off[i], false, &on);
        if (on)
            r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s true is not supported (the "
                                "model has no biases)", READ, r->path, off[i]);
    }
    bool sw = false;
    jr_bool(r, r->root, "use_sliding_window", false, &sw);
    if (sw) {
        int64_t w = 0, from = 0;
        jr_int(r, r->root, "sliding_window", true, INT64_MIN / 2, &w);
        jr_int(r, r->root, "max_window_layers", false, 0, &from);
        if (!r->st && from > 0)
            r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: max_window_layers %lld: nabla "
                                "windows every layer (0)", READ, r->path, (long long)from);
        c->window = w;
        if (!r->st && w <= 0)
            r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: sliding_window %lld must be "
                                "positive", READ, r->path, (long long)w);
    }
    const char *dt = jr_str(r, r->root, "torch_dtype", false);
    if (dt && !strcmp(dt, "float64")) c->dtype = NB_F64;
    if (!moe || r->st) return;
    bool norm = false;
    const cJSON *j = jr_get(r, r->root, "norm_topk_prob", false);
    if (j) jr_bool(r, r->root, "norm_topk_prob", true, &norm);
    if (!r->st && !norm)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: norm_topk_prob %s: nabla's router "
                            "renormalises the top k (true)", READ, r->path,
                            j ? "false" : "is missing (Hugging Face's default false)");
    int64_t step = 1;
    jr_int(r, r->root, "decoder_sparse_step", false, 1, &step);
    const cJSON *only = jr_get(r, r->root, "mlp_only_layers", false);
    if (!r->st && (step != 1 || (only && cJSON_GetArraySize(only) > 0)))
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s: every block must be a mixture "
                            "of experts", READ, r->path,
                            step != 1 ? "decoder_sparse_step is not 1" : "mlp_only_layers");
}

/* GPT-2's config.json: nb_gpt_hf_config_read's fields, all required. */
static nb_status read_gpt2(nb_ctx *ctx, const char *path, nb_gpt_config *out) {
    nb_gpt_hf_config h;
    nb_status st = nb_gpt_hf_config_read(ctx, path, &h);
    if (st) return st;
    const char *miss = !h.n_layer ? "n_layer" : !h.n_head ? "n_head" : !h.n_embd ? "n_embd"
                       : !h.n_positions ? "n_positions" : !h.vocab_size ? "vocab_size" : NULL;
    if (miss)
        return nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: \"%s\" is missing", READ, path, miss);
    if (h.layer_norm_epsilon != 1e-5)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s: layer_norm_epsilon %g is not supported "
                           "(nabla's LayerNorm uses 1e-05)", READ, path, h.layer_norm_epsilon);
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.n_layer = h.n_layer, c.n_head = h.n_head, c.n_embd = h.n_embd;
    c.block_size = h.n_positions, c.vocab_size = h.vocab_size, c.gelu = h.gelu;
    c.bias = true, c.dropout = 0.0, c.hf_names = true;
    *out = c;
    return NB_OK;
}

/* The family of a config.json: model_type, else architectures[0]. */
static const struct hf_type {
    const char *type, *cls;
    nb_gpt_arch arch;
    bool moe;
} HF_TYPES[] = {
    {"llama", "LlamaForCausalLM", NB_GPT_LLAMA3, false},
    {"qwen3", "Qwen3ForCausalLM", NB_GPT_QWEN3, false},
    {"qwen3_moe", "Qwen3MoeForCausalLM", NB_GPT_QWEN3, true},
    {"gpt2", "GPT2LMHeadModel", NB_GPT_NANOGPT, false},
};
enum { N_HF_TYPES = sizeof HF_TYPES / sizeof HF_TYPES[0] };

static const struct hf_type *hf_type(jr *r) {
    const char *t = jr_str(r, r->root, "model_type", false);
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(r->root, "architectures");
    const char *cls = cJSON_IsArray(arch) ? cJSON_GetStringValue(cJSON_GetArrayItem(arch, 0))
                                          : NULL;
    if (r->st) return NULL;
    if (!t && !cls) {
        jr_str(r, r->root, "model_type", true);
        return NULL;
    }
    for (int i = 0; i < N_HF_TYPES; i++)
        if (t ? !strcmp(t, HF_TYPES[i].type) : !strcmp(cls, HF_TYPES[i].cls))
            return &HF_TYPES[i];
    r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s \"%.40s\" is not supported (llama, "
                        "qwen3, qwen3_moe, gpt2)", READ, r->path,
                        t ? "model_type" : "architectures", t ? t : cls);
    return NULL;
}

/* The checks every layout shares, naming the layout's keys. */
static void check_sizes(jr *r, nb_gpt_config *c, bool hf) {
    if (r->st) return;
#define KEY(i) (hf ? FIELDS[i].hf : FIELDS[i].course)
    if (!c->n_kv_head) c->n_kv_head = c->n_head;
    if (!c->head_dim && c->n_embd % c->n_head == 0) c->head_dim = c->n_embd / c->n_head;
    if (!c->head_dim)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: no %s, and %s %lld is not a "
                            "multiple of %s %d", READ, r->path, KEY(F_HEAD_DIM), KEY(2),
                            (long long)c->n_embd, KEY(F_HEADS), c->n_head);
    else if (c->n_head % c->n_kv_head)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s %d is not a multiple of %s %d",
                            READ, r->path, KEY(F_HEADS), c->n_head, KEY(F_KV), c->n_kv_head);
    else if (c->head_dim % 2)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s %lld is odd; RoPE rotates pairs",
                            READ, r->path, KEY(F_HEAD_DIM), (long long)c->head_dim);
    else if (c->n_expert && c->n_expert_per_tok > c->n_expert)
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s %d is more than %s %d", READ,
                            r->path, KEY(F_PER_TOK), c->n_expert_per_tok, KEY(F_EXPERTS),
                            c->n_expert);
    else if (c->rope_scaled && !(c->rope_scaling.factor >= 1 &&
                                 c->rope_scaling.high_freq_factor >
                                     c->rope_scaling.low_freq_factor))
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: %s: factor %g must be >= 1 and "
                            "high_freq_factor %g above low_freq_factor %g", READ, r->path,
                            hf ? "rope_scaling" : "rope_freq", c->rope_scaling.factor,
                            c->rope_scaling.high_freq_factor, c->rope_scaling.low_freq_factor);
#undef KEY
}

/* The course's cfg.json: the family from its keys (nabla/gpt.h). */
static void read_course(jr *r, nb_gpt_config *out) {
    const cJSON *root = r->root;
#define HAS(k) (cJSON_GetObjectItemCaseSensitive(root, k) != NULL)
    nb_gpt_arch arch = HAS("qk_norm") || HAS("head_dim")       ? NB_GPT_QWEN3
                       : HAS("rope_freq") || HAS("n_kv_groups") ? NB_GPT_LLAMA3
                                                                : NB_GPT_GPTMODEL;
#undef HAS
    if (arch == NB_GPT_GPTMODEL) {
        nb_gpt_config c = nb_gpt_config_default(NB_GPT_GPTMODEL);
        for (int i = 0; i < 5; i++) { /* vocab, context, emb, heads, layers */
            const field *f = &FIELDS[i];
            int64_t v = 0;
            jr_int(r, root, f->course, true, 1, &v);
            if (f->kind == K_INT) *(int *)((char *)&c + f->off) = v > 1 << 30 ? 1 << 30 : (int)v;
            else *(int64_t *)((char *)&c + f->off) = v;
        }
        const cJSON *d = jr_get(r, root, "drop_rate", true);
        if (d && (!cJSON_IsNumber(d) || !(d->valuedouble >= 0 && d->valuedouble < 1)))
            mistyped(r, d, "drop_rate", "a number in [0, 1)");
        else if (d)
            c.dropout = d->valuedouble;
        jr_bool(r, root, "qkv_bias", true, &c.qkv_bias);
        c.hf_names = false;
        if (!r->st) *out = c;
        return;
    }
    nb_gpt_config c = family(arch, false);
    int64_t ne = 0;
    jr_int(r, root, "num_experts", false, 0, &ne);
    unsigned req = R_COURSE | (ne ? R_MOE : R_DENSE);
    read_fields(r, &c, false, req, 0);
    if (arch == NB_GPT_QWEN3) jr_bool(r, root, "qk_norm", true, &c.qk_norm);
    read_scaling(r, &c, false);
    int64_t w = 0;
    jr_int(r, root, "sliding_window", false, INT64_MIN / 2, &w);
    if (!r->st && cJSON_GetObjectItemCaseSensitive(root, "sliding_window") && w <= 0 &&
        !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "sliding_window")))
        r->st = nb_ctx_fail(r->ctx, NB_ERR_VALUE, "%s: %s: sliding_window %lld must be "
                            "positive", READ, r->path, (long long)w);
    c.window = w;
    const char *dt = jr_str(r, root, "dtype", false);
    if (dt && !strcmp(dt, "float64")) c.dtype = NB_F64;
    check_sizes(r, &c, false);
    if (!r->st) *out = c;
}

nb_status nb_gpt_config_read(nb_ctx *ctx, const char *path, nb_gpt_config *out) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!path || !out)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", READ, path ? "out" : "path");
    cJSON *root = nb_gpt_json_read(ctx, READ, path);
    if (!root) return nb_ctx_status(ctx);
    jr r = {ctx, path, root, NB_OK};
    bool hf = cJSON_GetObjectItemCaseSensitive(root, "model_type") ||
              cJSON_GetObjectItemCaseSensitive(root, "architectures");
    if (!hf && !cJSON_GetObjectItemCaseSensitive(root, "emb_dim")) {
        r.st = nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: \"model_type\" (config.json) or "
                           "\"emb_dim\" (the course's cfg) is missing", READ, path);
    } else if (!hf) {
        read_course(&r, out);
    } else {
        const struct hf_type *t = hf_type(&r);
        if (t && t->arch == NB_GPT_NANOGPT) {
            cJSON_Delete(root);
            return read_gpt2(ctx, path, out);
        }
        if (t) {
            nb_gpt_config c = family(t->arch, true);
            /* a dense class (LlamaForCausalLM, Qwen3ForCausalLM) has no experts:
             * Qwen3-MoE's keys in its config.json are not read, as transformers'
             * dense classes ignore them */
            read_fields(&r, &c, true, R_HF | (t->moe ? R_MOE : R_DENSE), t->moe ? 0 : R_MOE);
            read_scaling(&r, &c, true);
            read_hf_extras(&r, &c, t->moe);
            check_sizes(&r, &c, true);
            if (!r.st) *out = c;
        }
    }
    cJSON_Delete(root);
    return r.st;
}

/* ---- writing ----------------------------------------------------------------------- */

static nb_status cant(nb_ctx *ctx, const char *fn, const char *what, const char *layout) {
    return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: %s cannot be written in %s", fn, what, layout);
}

/* GPT-2's GPT2Config (nanoGPT with biases) or the course's GPT_CONFIG. */
static nb_status gpt2_json(nb_ctx *ctx, const char *fn, const nb_gpt_config *c, cJSON *o) {
    if (c->arch == NB_GPT_GPTMODEL) {
        cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab_size);
        cJSON_AddNumberToObject(o, "context_length", (double)c->block_size);
        cJSON_AddNumberToObject(o, "emb_dim", (double)c->n_embd);
        cJSON_AddNumberToObject(o, "n_heads", c->n_head);
        cJSON_AddNumberToObject(o, "n_layers", c->n_layer);
        cJSON_AddNumberToObject(o, "drop_rate", c->dropout);
        cJSON_AddBoolToObject(o, "qkv_bias", c->qkv_bias);
        return NB_OK;
    }
    if (!c->bias) return cant(ctx, fn, "nanoGPT without biases", "GPT-2's config.json");
    cJSON *a = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(a, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddStringToObject(o, "activation_function",
                            c->gelu == NB_GELU_TANH ? "gelu_new" : "gelu");
    cJSON_AddNumberToObject(o, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(o, "n_ctx", (double)c->block_size);
    cJSON_AddNumberToObject(o, "n_positions", (double)c->block_size);
    cJSON_AddNumberToObject(o, "n_embd", (double)c->n_embd);
    cJSON_AddNumberToObject(o, "n_head", c->n_head);
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(o, "vocab_size", (double)c->vocab_size);
    return NB_OK;
}

/* Whether FIELDS[i] is written for c in the layout. */
static bool written(const nb_gpt_config *c, int i, bool hf) {
    const field *f = &FIELDS[i];
    if (f->req & R_MOE) return c->n_expert > 0;
    if (f->off == offsetof(nb_gpt_config, hidden_dim)) return c->hidden_dim > 0;
    if (hf) return true;
    if (i == F_HEAD_DIM) return c->arch == NB_GPT_QWEN3;
    if (f->off == offsetof(nb_gpt_config, tie_head)) return c->tie_head;
    if (f->off == offsetof(nb_gpt_config, norm_eps))
        return c->norm_eps != (c->arch == NB_GPT_QWEN3 ? 1e-6 : 1e-5);
    return true;
}

/* The new families in either layout. */
static nb_status family_json(nb_ctx *ctx, const char *fn, const nb_gpt_config *c, cJSON *o) {
    const bool hf = c->hf_names, llama = c->arch == NB_GPT_LLAMA3;
    const int n_kv = c->n_kv_head ? c->n_kv_head : c->n_head;
    const int64_t hd = c->head_dim ? c->head_dim : c->n_head ? c->n_embd / c->n_head : 0;
    const char *layout = hf ? (llama ? "LlamaForCausalLM's config.json"
                                     : "Qwen3ForCausalLM's config.json")
                            : (llama ? "the course's Llama 3 cfg" : "the course's Qwen3 cfg");
    if (llama && c->qk_norm) return cant(ctx, fn, "qk_norm", layout);
    if (hf && !llama && !c->qk_norm) return cant(ctx, fn, "Qwen3 without qk_norm", layout);
    if (hf && llama && (c->n_expert || c->window > 0))
        return cant(ctx, fn, c->n_expert ? "experts" : "a sliding window", layout);
    if (!hf && llama && hd * c->n_head != c->n_embd)
        return cant(ctx, fn, "a head_dim other than emb_dim / n_heads", layout);
    if (hf) {
        const char *cls = llama ? "LlamaForCausalLM"
                          : c->n_expert ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "architectures"), cJSON_CreateString(cls));
        cJSON_AddStringToObject(o, "model_type", llama ? "llama" : c->n_expert ? "qwen3_moe"
                                                                               : "qwen3");
    }
    for (int i = 0; i < N_FIELDS; i++) {
        if (!written(c, i, hf)) continue;
        const field *f = &FIELDS[i];
        const char *key = hf ? f->hf : f->course;
        const void *p = (const char *)c + f->off;
        double v = f->kind == K_INT   ? *(const int *)p
                   : f->kind == K_I64 ? (double)*(const int64_t *)p
                   : f->kind == K_F64 ? *(const double *)p
                                      : 0;
        if (i == F_KV) v = n_kv;
        if (i == F_HEAD_DIM) v = (double)hd;
        if (f->kind == K_BOOL) cJSON_AddBoolToObject(o, key, *(const bool *)p);
        else cJSON_AddNumberToObject(o, key, v);
        if (!hf && i == F_HEAD_DIM) cJSON_AddBoolToObject(o, "qk_norm", c->qk_norm);
    }
    const char *sk = hf ? "rope_scaling" : "rope_freq";
    if (c->rope_scaled) {
        cJSON *s = cJSON_AddObjectToObject(o, sk);
        const nb_rope_scaling *q = &c->rope_scaling;
        if (hf) cJSON_AddStringToObject(s, "rope_type", "llama3");
        cJSON_AddNumberToObject(s, "factor", q->factor);
        cJSON_AddNumberToObject(s, "low_freq_factor", q->low_freq_factor);
        cJSON_AddNumberToObject(s, "high_freq_factor", q->high_freq_factor);
        cJSON_AddNumberToObject(s, hf ? "original_max_position_embeddings"
                                      : "original_context_length",
                                (double)q->original_max_position_embeddings);
    } else if (hf || llama) {
        cJSON_AddNullToObject(o, sk); /* the course's Llama 3 (not 3.1/3.2) has rope_freq None */
    }
    if (hf) {
        cJSON_AddStringToObject(o, "hidden_act", "silu");
        cJSON_AddBoolToObject(o, "attention_bias", false);
        if (llama) cJSON_AddBoolToObject(o, "mlp_bias", false);
        if (!llama) {
            cJSON_AddBoolToObject(o, "use_sliding_window", c->window > 0);
            if (c->window > 0) cJSON_AddNumberToObject(o, "sliding_window", (double)c->window);
            cJSON_AddNumberToObject(o, "max_window_layers", 0);
        }
        if (c->n_expert) {
            cJSON_AddBoolToObject(o, "norm_topk_prob", true);
            cJSON_AddNumberToObject(o, "decoder_sparse_step", 1);
            cJSON_AddArrayToObject(o, "mlp_only_layers");
        }
    } else if (c->window > 0) {
        cJSON_AddNumberToObject(o, "sliding_window", (double)c->window);
    }
    cJSON_AddStringToObject(o, hf ? "torch_dtype" : "dtype",
                            c->dtype == NB_F64 ? "float64" : "float32");
    return NB_OK;
}

char *nb_gpt_config_json(nb_ctx *ctx, const char *fn, const nb_gpt_config *c) {
    if (c->arch != NB_GPT_GPTMODEL && c->arch != NB_GPT_NANOGPT && c->arch != NB_GPT_LLAMA3 &&
        c->arch != NB_GPT_QWEN3) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: unknown arch %d", fn, (int)c->arch);
        return NULL;
    }
    cJSON *o = cJSON_CreateObject();
    nb_status st = !o ? NB_ERR_MEMORY
                   : c->arch == NB_GPT_GPTMODEL || c->arch == NB_GPT_NANOGPT
                       ? gpt2_json(ctx, fn, c, o)
                       : family_json(ctx, fn, c, o);
    char *text = st ? NULL : cJSON_Print(o);
    cJSON_Delete(o);
    if (!text && !st) nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
    if (!text) return NULL;
    size_t n = strlen(text);
    char *out = malloc(n + 2); /* with a final newline */
    if (out) memcpy(out, text, n), out[n] = '\n', out[n + 1] = '\0';
    else nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
    cJSON_free(text);
    return out;
}

nb_status nb_gpt_config_write(nb_ctx *ctx, const nb_gpt_config *cfg, const char *path) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!cfg || !path)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", WRITE, cfg ? "path" : "cfg");
    char *text = nb_gpt_config_json(ctx, WRITE, cfg);
    if (!text) return nb_ctx_status(ctx);
    char *tmp = nb_gpt_text_stage(ctx, WRITE, path, text);
    free(text);
    return tmp ? nb_gpt_text_commit(ctx, WRITE, tmp, path) : nb_ctx_status(ctx);
}
