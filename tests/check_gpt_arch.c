/* check_gpt_arch.c - the Llama 3 and Qwen3 families of nabla/gpt.h (Qwen3-MoE
 * included), in the course's and Hugging Face's names:
 *   - state_dict names and shapes, in order, both layouts;
 *   - the float64 forward against a plain-C forward written here from the
 *     published definitions (RMSNorm, RoPE with Llama 3 scaling, GQA with a
 *     window, QK-norm, the gated MLP, top-k experts, tied and untied heads);
 *   - finite-difference gradients of the loss (nb_gradcheck);
 *   - the KV cache against the full forward, cached and uncached generation;
 *   - configs that cannot be built, refused by name. */
#include "check_nabla.h"

/* ---- the tiny models ------------------------------------------------------------ */

enum { N_SPEC = 6 };

/* 0 Llama 3 course: GQA 4/2, Llama 3 scaling, untied.
 * 1 Llama 3 HF: multi-query (1 kv head), tied.
 * 2 Qwen3 course: qk_norm, head_dim 6 != 12/4, window 3, tied.
 * 3 Qwen3 HF: the same, untied, no window.
 * 4 Qwen3-MoE course: top-2 of 4 experts, 2 heads sharing 1 kv head.
 * 5 Qwen3-MoE HF: the same. */
static nb_gpt_config spec(int i, nb_dtype dt) {
    nb_gpt_config c = nb_gpt_config_default(i < 2 ? NB_GPT_LLAMA3 : NB_GPT_QWEN3);
    c.vocab_size = 13, c.block_size = 8, c.n_layer = 2, c.dtype = dt, c.dropout = 0.0;
    c.hf_names = i % 2 == 1;
    if (i < 2) {
        c.n_embd = 16, c.n_head = 4, c.n_kv_head = i == 0 ? 2 : 1, c.head_dim = 0;
        c.hidden_dim = 24, c.rope_theta = 500000.0, c.rope_scaled = true;
        c.rope_scaling = (nb_rope_scaling){4.0, 1.0, 8.0, 16};
        c.tie_head = i == 1;
    } else {
        c.n_embd = 12, c.n_head = 4, c.n_kv_head = 2, c.head_dim = 6, c.hidden_dim = 20;
        c.rope_theta = 1e6, c.qk_norm = true, c.tie_head = i == 2, c.window = i == 2 ? 3 : 0;
        if (i >= 4) {
            c.n_head = 2, c.n_kv_head = 1, c.n_expert = 4, c.n_expert_per_tok = 2;
            c.moe_hidden_dim = 5, c.hidden_dim = 0, c.tie_head = false;
        }
    }
    return c;
}

/* A model of spec i whose norms are not all 1 (so the test sees them). */
static void make(nb_ctx *p, nb_gpt *m, int i, nb_dtype dt, uint64_t seed) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, seed, 3);
    nb_gpt_config c = spec(i, dt);
    ck_assert_msg(nb_gpt_init(p, m, &c, &rng) == NB_OK, "%s", nb_ctx_error(p));
    for (int k = 0; k < m->params.n; k++) {
        nb_tensor *t = nb_list_tensor(&m->params, k);
        if (t->ndim == 1)
            for (size_t e = 0; e < t->numel; e++)
                nb_set(t, e, 1.0 + 0.3 * (nb_pcg32_double(&rng) - 0.5));
    }
}

/* ---- names and shapes ------------------------------------------------------------ */

typedef struct row {
    const char *name, *shape;
} row;

static void names_are(const nb_gpt *m, const row *want, int n_want, int n_total) {
    char s[64];
    for (int k = 0; k < n_want; k++) {
        const nb_tensor *t = nb_list_get(&m->state_dict, want[k].name);
        ck_assert_msg(t != NULL, "%s missing", want[k].name);
        ck_assert_str_eq(nb_shape_str(t, s, sizeof s), want[k].shape);
    }
    ck_assert_int_eq(m->state_dict.n, n_total);
}

/* the state_dict in order: the first n names */
static void order_is(const nb_gpt *m, const char *const *names, int n) {
    for (int k = 0; k < n; k++) ck_assert_str_eq(nb_list_name(&m->state_dict, k), names[k]);
}

START_TEST(test_llama3_names) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, 0, NB_F32, 1);
    const char *order[] = {"tok_emb.weight", "trf_blocks.0.att.W_key.weight",
                           "trf_blocks.0.att.W_value.weight", "trf_blocks.0.att.W_query.weight",
                           "trf_blocks.0.att.out_proj.weight", "trf_blocks.0.ff.fc1.weight",
                           "trf_blocks.0.ff.fc2.weight", "trf_blocks.0.ff.fc3.weight",
                           "trf_blocks.0.norm1.weight", "trf_blocks.0.norm2.weight"};
    order_is(&m, order, 10);
    row want[] = {{"tok_emb.weight", "(13, 16)"}, {"trf_blocks.1.att.W_key.weight", "(8, 16)"},
                  {"trf_blocks.1.att.W_query.weight", "(16, 16)"},
                  {"trf_blocks.1.att.out_proj.weight", "(16, 16)"},
                  {"trf_blocks.1.ff.fc3.weight", "(16, 24)"}, {"final_norm.weight", "(16)"},
                  {"out_head.weight", "(13, 16)"}};
    names_are(&m, want, 7, 1 + 2 * 9 + 2);
    ck_assert_ptr_ne(m.head, m.wte);
    ck_assert_int_eq(m.params.n, 21);
    char s[64];
    ck_assert_str_eq(nb_shape_str(m.rope_cos, s, sizeof s), "(8, 4)");
    ck_assert(!m.rope_cos->requires_grad);
    nb_gpt_free(&m);
    /* HF names, multi-query, tied: lm_head is the embedding, listed once in params */
    make(p, &m, 1, NB_F32, 1);
    const char *hf[] = {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.0.self_attn.k_proj.weight",
                        "model.layers.0.self_attn.v_proj.weight",
                        "model.layers.0.self_attn.o_proj.weight",
                        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight",
                        "model.layers.0.mlp.down_proj.weight",
                        "model.layers.0.input_layernorm.weight",
                        "model.layers.0.post_attention_layernorm.weight"};
    order_is(&m, hf, 10);
    row hw[] = {{"model.layers.1.self_attn.k_proj.weight", "(4, 16)"},
                {"model.norm.weight", "(16)"}, {"lm_head.weight", "(13, 16)"}};
    names_are(&m, hw, 3, 1 + 2 * 9 + 2);
    ck_assert_ptr_eq(m.head, m.wte);
    ck_assert_ptr_eq(nb_list_get(&m.state_dict, "lm_head.weight"), m.wte);
    ck_assert_int_eq(m.params.n, 20);
    ck_assert_int_eq(nb_gpt_num_params(&m, false), 13 * 16 + 2 * (16 * 16 * 2 + 4 * 16 * 2 +
                                                                  3 * 24 * 16 + 2 * 16) + 16);
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_qwen3_names) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, 2, NB_F32, 1);
    const char *order[] = {"tok_emb.weight", "trf_blocks.0.att.W_query.weight",
                           "trf_blocks.0.att.W_key.weight", "trf_blocks.0.att.W_value.weight",
                           "trf_blocks.0.att.out_proj.weight", "trf_blocks.0.att.q_norm.scale",
                           "trf_blocks.0.att.k_norm.scale", "trf_blocks.0.ff.fc1.weight",
                           "trf_blocks.0.ff.fc2.weight", "trf_blocks.0.ff.fc3.weight",
                           "trf_blocks.0.norm1.scale", "trf_blocks.0.norm2.scale"};
    order_is(&m, order, 12);
    row want[] = {{"trf_blocks.0.att.W_query.weight", "(24, 12)"},
                  {"trf_blocks.0.att.W_key.weight", "(12, 12)"},
                  {"trf_blocks.0.att.out_proj.weight", "(12, 24)"},
                  {"trf_blocks.0.att.q_norm.scale", "(6)"},
                  {"trf_blocks.1.ff.fc1.weight", "(20, 12)"}, {"final_norm.scale", "(12)"},
                  {"out_head.weight", "(13, 12)"}};
    names_are(&m, want, 7, 1 + 2 * 11 + 2);
    ck_assert_ptr_eq(m.head, m.wte); /* tied */
    nb_gpt_free(&m);
    make(p, &m, 3, NB_F32, 1);
    row hw[] = {{"model.layers.0.self_attn.q_norm.weight", "(6)"},
                {"model.layers.0.self_attn.k_norm.weight", "(6)"},
                {"model.layers.1.self_attn.o_proj.weight", "(12, 24)"},
                {"lm_head.weight", "(13, 12)"}};
    names_are(&m, hw, 4, 1 + 2 * 11 + 2);
    ck_assert_ptr_ne(m.head, m.wte);
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_qwen3_moe_names) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, 4, NB_F32, 1);
    /* the course's ModuleLists: every fc1, then every fc2, then every fc3 */
    const char *order[] = {"trf_blocks.0.att.k_norm.scale", "trf_blocks.0.ff.gate.weight",
                           "trf_blocks.0.ff.fc1.0.weight", "trf_blocks.0.ff.fc1.1.weight",
                           "trf_blocks.0.ff.fc1.2.weight", "trf_blocks.0.ff.fc1.3.weight",
                           "trf_blocks.0.ff.fc2.0.weight"};
    for (int k = 0; k < 7; k++) ck_assert_str_eq(nb_list_name(&m.state_dict, 6 + k), order[k]);
    row want[] = {{"trf_blocks.0.ff.gate.weight", "(4, 12)"},
                  {"trf_blocks.0.ff.fc1.3.weight", "(5, 12)"},
                  {"trf_blocks.1.ff.fc3.2.weight", "(12, 5)"},
                  {"trf_blocks.0.att.W_key.weight", "(6, 12)"}};
    names_are(&m, want, 4, 1 + 2 * (4 + 2 + 1 + 12 + 2) + 2);
    ck_assert_ptr_null(nb_list_get(&m.state_dict, "trf_blocks.0.ff.fc1.weight"));
    nb_gpt_free(&m);
    /* Hugging Face's experts: each expert's three together */
    make(p, &m, 5, NB_F32, 1);
    const char *hf[] = {"model.layers.0.mlp.gate.weight",
                        "model.layers.0.mlp.experts.0.gate_proj.weight",
                        "model.layers.0.mlp.experts.0.up_proj.weight",
                        "model.layers.0.mlp.experts.0.down_proj.weight",
                        "model.layers.0.mlp.experts.1.gate_proj.weight"};
    for (int k = 0; k < 5; k++) ck_assert_str_eq(nb_list_name(&m.state_dict, 7 + k), hf[k]);
    row hw[] = {{"model.layers.1.mlp.experts.3.down_proj.weight", "(12, 5)"}};
    names_are(&m, hw, 1, 1 + 2 * (4 + 2 + 1 + 12 + 2) + 2);
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

/* The inits: the course's PyTorch defaults, Hugging Face's N(0, 0.02). */
START_TEST(test_inits) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt m;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 1);
    nb_gpt_config c = spec(0, NB_F64);
    c.vocab_size = 200, c.hidden_dim = 64;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    double bound = 1.0 / sqrt(16.0), mx = 0, ss = 0;
    for (size_t e = 0; e < m.blocks[0].fc_w->numel; e++)
        mx = fmax(mx, fabs(nb_get(m.blocks[0].fc_w, e)));
    ck_assert(mx <= bound && mx > 0.9 * bound); /* U(-1/4, 1/4) */
    for (size_t e = 0; e < m.blocks[0].proj_w->numel; e++)
        ck_assert(fabs(nb_get(m.blocks[0].proj_w, e)) <= 1.0 / 8.0); /* fan-in 64 */
    for (size_t e = 0; e < m.wte->numel; e++) ss += nb_get(m.wte, e) * nb_get(m.wte, e);
    ck_assert_double_eq_tol(sqrt(ss / (double)m.wte->numel), 1.0, 0.1); /* N(0, 1) */
    ck_assert_double_eq(nb_get(m.blocks[1].ln2_w, 3), 1.0);
    nb_gpt_free(&m);
    c.hf_names = true;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    ss = 0;
    for (size_t e = 0; e < m.wte->numel; e++) ss += nb_get(m.wte, e) * nb_get(m.wte, e);
    ck_assert_double_eq_tol(sqrt(ss / (double)m.wte->numel), 0.02, 0.003);
    nb_gpt_free(&m);
    /* no rng: zeros (then load), the RoPE tables all the same */
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, NULL), NB_OK);
    ck_assert_double_eq(nb_get(m.blocks[0].wq, 5), 0.0);
    ck_assert_double_eq(nb_get(m.rope_cos, 0), 1.0);
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

/* ---- the forward, written out in plain C ---------------------------------------- */

static double at(const nb_tensor *t, int64_t i) { return nb_get(t, (size_t)i); }

/* y (out) = W (out, in) x (in) */
static void mv(const nb_tensor *w, const double *x, double *y) {
    int64_t out = w->shape[0], in = w->shape[1];
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++) s += at(w, o * in + i) * x[i];
        y[o] = s;
    }
}

static void rmsnorm(double *x, int64_t n, const nb_tensor *w, double eps) {
    double ms = 0;
    for (int64_t i = 0; i < n; i++) ms += x[i] * x[i];
    double r = 1.0 / sqrt(ms / (double)n + eps);
    for (int64_t i = 0; i < n; i++) x[i] = x[i] * r * at(w, i);
}

/* HF's rotate_half RoPE of x (hd) at position p, with Llama 3's scaling. */
static void rope(double *x, int64_t hd, int64_t p, const nb_gpt_config *c) {
    for (int64_t i = 0; i < hd / 2; i++) {
        double f = pow(c->rope_theta, -2.0 * (double)i / (double)hd);
        if (c->rope_scaled) {
            const nb_rope_scaling *s = &c->rope_scaling;
            double wl = 2 * 3.14159265358979323846 / f, L = (double)s->original_max_position_embeddings;
            if (wl > L / s->low_freq_factor) f = f / s->factor;
            else if (wl >= L / s->high_freq_factor) {
                double sm = (L / wl - s->low_freq_factor) /
                            (s->high_freq_factor - s->low_freq_factor);
                f = (1 - sm) * f / s->factor + sm * f;
            }
        }
        double cs = cos((double)p * f), sn = sin((double)p * f), a = x[i], b = x[i + hd / 2];
        x[i] = a * cs - b * sn;
        x[i + hd / 2] = b * cs + a * sn;
    }
}

/* silu(W1 h) * (W2 h), then W3: h (C) -> out (C) */
static void gated(const nb_tensor *w1, const nb_tensor *w2, const nb_tensor *w3, const double *h,
                  double *out, double *t1, double *t2) {
    mv(w1, h, t1);
    mv(w2, h, t2);
    for (int64_t j = 0; j < w1->shape[0]; j++) t1[j] = t1[j] / (1 + exp(-t1[j])) * t2[j];
    mv(w3, t1, out);
}

/* logits (B, T, V) of ids (B, T) */
static void ref_forward(const nb_gpt *m, const int64_t *ids, int64_t B, int64_t T, double *logits) {
    const nb_gpt_config *c = &m->cfg;
    const int64_t C = c->n_embd, H = c->n_head, G = c->n_kv_head ? c->n_kv_head : H;
    const int64_t hd = c->head_dim ? c->head_dim : C / H, V = c->vocab_size;
    double *x = calloc((size_t)(B * T * C), sizeof *x), *h = calloc((size_t)C, sizeof *h);
    double *q = calloc((size_t)(B * T * H * hd), sizeof *q);
    double *k = calloc((size_t)(B * T * G * hd), sizeof *k);
    double *v = calloc((size_t)(B * T * G * hd), sizeof *v);
    double *y = calloc((size_t)(H * hd), sizeof *y), *o = calloc((size_t)C, sizeof *o);
    double *t1 = calloc(64, sizeof *t1), *t2 = calloc(64, sizeof *t2), *w = calloc(64, sizeof *w);
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t j = 0; j < C; j++) x[r * C + j] = at(m->wte, ids[r] * C + j);
    for (int l = 0; l < c->n_layer; l++) {
        const nb_gpt_block *bk = &m->blocks[l];
        for (int64_t r = 0; r < B * T; r++) {
            memcpy(h, x + r * C, (size_t)C * sizeof *h);
            rmsnorm(h, C, bk->ln1_w, c->norm_eps);
            mv(bk->wq, h, q + r * H * hd);
            mv(bk->wk, h, k + r * G * hd);
            mv(bk->wv, h, v + r * G * hd);
            for (int64_t a = 0; a < H; a++) {
                if (c->qk_norm) rmsnorm(q + (r * H + a) * hd, hd, bk->q_norm, c->norm_eps);
                rope(q + (r * H + a) * hd, hd, r % T, c);
            }
            for (int64_t g = 0; g < G; g++) {
                if (c->qk_norm) rmsnorm(k + (r * G + g) * hd, hd, bk->k_norm, c->norm_eps);
                rope(k + (r * G + g) * hd, hd, r % T, c);
            }
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t i = 0; i < T; i++) {
                for (int64_t a = 0; a < H; a++) {
                    int64_t g = a / (H / G), j0 = c->window && i + 1 > c->window ? i + 1 - c->window : 0;
                    double mx = -INFINITY, sum = 0;
                    for (int64_t j = j0; j <= i; j++) {
                        double s = 0;
                        for (int64_t d = 0; d < hd; d++)
                            s += q[((b * T + i) * H + a) * hd + d] * k[((b * T + j) * G + g) * hd + d];
                        w[j] = s / sqrt((double)hd);
                        mx = fmax(mx, w[j]);
                    }
                    for (int64_t j = j0; j <= i; j++) sum += (w[j] = exp(w[j] - mx));
                    for (int64_t d = 0; d < hd; d++) {
                        double s = 0;
                        for (int64_t j = j0; j <= i; j++) s += w[j] / sum * v[((b * T + j) * G + g) * hd + d];
                        y[a * hd + d] = s;
                    }
                }
                mv(bk->wo, y, o);
                for (int64_t j = 0; j < C; j++) x[(b * T + i) * C + j] += o[j];
            }
        for (int64_t r = 0; r < B * T; r++) {
            memcpy(h, x + r * C, (size_t)C * sizeof *h);
            rmsnorm(h, C, bk->ln2_w, c->norm_eps);
            if (!c->n_expert) {
                gated(bk->fc_w, bk->up_w, bk->proj_w, h, o, t1, t2);
                for (int64_t j = 0; j < C; j++) x[r * C + j] += o[j];
                continue;
            }
            double lg[16], p[16];
            int pick[16];
            mv(bk->router, h, lg);
            for (int s = 0; s < c->n_expert_per_tok; s++) { /* largest first, lower index on ties */
                int best = -1;
                for (int e = 0; e < c->n_expert; e++) {
                    bool used = false;
                    for (int u = 0; u < s; u++) used = used || pick[u] == e;
                    if (!used && (best < 0 || lg[e] > lg[best])) best = e;
                }
                pick[s] = best;
            }
            double mx = lg[pick[0]], sum = 0;
            for (int s = 0; s < c->n_expert_per_tok; s++) sum += (p[s] = exp(lg[pick[s]] - mx));
            for (int s = 0; s < c->n_expert_per_tok; s++) {
                int e = pick[s];
                gated(bk->ex_gate[e], bk->ex_up[e], bk->ex_down[e], h, o, t1, t2);
                for (int64_t j = 0; j < C; j++) x[r * C + j] += p[s] / sum * o[j];
            }
        }
    }
    for (int64_t r = 0; r < B * T; r++) {
        memcpy(h, x + r * C, (size_t)C * sizeof *h);
        rmsnorm(h, C, m->lnf_w, c->norm_eps);
        mv(m->head, h, logits + r * V);
    }
    free(x), free(h), free(q), free(k), free(v), free(y), free(o), free(t1), free(t2), free(w);
}

static const int64_t SEQ[2 * 8] = {1, 5, 2, 9, 0, 3, 3, 12, 4, 4, 7, 1, 6, 2, 8, 11};

START_TEST(test_forward_by_hand) {
    int i = _i;
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, i, NB_F64, 11 + (uint64_t)i);
    nb_tensor *y = nb_gpt_infer(s, &m, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    ck_assert_msg(y != NULL, "%s", nb_ctx_error(s));
    double want[2 * 8 * 13];
    ref_forward(&m, SEQ, 2, 8, want);
    double worst = 0, big = 0;
    for (int e = 0; e < 2 * 8 * 13; e++) {
        worst = fmax(worst, fabs(at(y, e) - want[e]));
        big = fmax(big, fabs(want[e]));
    }
    ck_assert_msg(worst <= 1e-12 * fmax(1, big), "spec %d: max |nabla - by hand| %g", i, worst);
    ck_assert(big > 0.1); /* not a degenerate model */
    /* the training forward (grad on) gives the same logits */
    nb_tensor *z = nb_gpt_forward(s, &m, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    for (int e = 0; e < 2 * 8 * 13; e++) /* MoE experts: few rows take the dot-product path */
        ck_assert_double_eq_tol(at(z, e), at(y, e), 1e-13 * fmax(1, big));
    /* float32: the same to float32 rounding */
    nb_ctx *p32 = nb_ctx_new(0);
    nb_gpt m32;
    make(p32, &m32, i, NB_F32, 11 + (uint64_t)i);
    for (int k = 0; k < m.params.n; k++) /* the f64 model's values */
        for (size_t e = 0; e < nb_list_tensor(&m.params, k)->numel; e++)
            nb_set(nb_list_tensor(&m32.params, k), e, nb_get(nb_list_tensor(&m.params, k), e));
    nb_tensor *y32 = nb_gpt_infer(s, &m32, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    for (int e = 0; e < 2 * 8 * 13; e++)
        ck_assert_double_eq_tol(at(y32, e), want[e], 1e-4 * fmax(1, big));
    nb_gpt_free(&m32);
    nb_ctx_free(p32);
    nb_gpt_free(&m);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- gradients ----------------------------------------------------------------------- */

typedef struct gc {
    nb_gpt *m;
    nb_tensor **slot[16]; /* the model's fields the inputs replace */
    nb_tensor *orig[16];
    int n;
    bool tied;
} gc;

static nb_tensor *f_loss(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    gc *g = user;
    for (int k = 0; k < g->n; k++) *g->slot[k] = in[k];
    if (g->tied) g->m->head = g->m->wte;
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(2, 5), SEQ);
    nb_tensor *tg = nb_from_data(ctx, NB_I64, NB_SHAPE(2, 5), SEQ + 3);
    nb_tensor *L = nb_gpt_loss(ctx, g->m, ids, tg, NULL);
    for (int k = 0; k < g->n; k++) *g->slot[k] = g->orig[k];
    if (g->tied) g->m->head = g->m->wte;
    return L;
}

START_TEST(test_gradcheck_loss) {
    int i = _i;
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, i, NB_F64, 21 + (uint64_t)i);
    nb_gpt_block *b0 = &m.blocks[0], *b1 = &m.blocks[1];
    gc g = {.m = &m, .tied = m.head == m.wte};
    nb_tensor **s[16] = {&m.wte, &b0->wq, &b0->wk, &b1->wv, &b0->wo, &b0->ln1_w, &m.lnf_w};
    int n = 7;
    if (m.cfg.qk_norm) s[n++] = &b1->k_norm, s[n++] = &b0->q_norm;
    if (m.cfg.n_expert) s[n++] = &b0->router, s[n++] = &b1->ex_gate[2], s[n++] = &b0->ex_down[1];
    else s[n++] = &b1->fc_w, s[n++] = &b0->up_w;
    if (!g.tied) s[n++] = &m.head;
    nb_tensor *in[16];
    for (int k = 0; k < n; k++) g.slot[k] = s[k], g.orig[k] = *s[k], in[k] = *s[k];
    g.n = n;
    nb_gradcheck_result r;
    ck_assert_int_eq(nb_gradcheck(ctx, f_loss, &g, n, in, NULL, &r), NB_OK);
    ck_assert_msg(r.passed && r.max_abs_err < 1e-7, "spec %d: %s (max err %g)", i, r.message,
                  r.max_abs_err);
    nb_gpt_free(&m);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

/* ---- the KV cache --------------------------------------------------------------------- */

START_TEST(test_cache_matches_full) {
    int i = _i;
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, i, NB_F64, 31 + (uint64_t)i);
    nb_tensor *full = nb_gpt_infer(s, &m, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    ck_assert_ptr_nonnull(full);
    nb_gpt_cache *kv = nb_gpt_cache_new(s, &m, 2);
    ck_assert_ptr_nonnull(kv);
    const int64_t steps[] = {3, 1, 2, 1, 1};
    int64_t pos = 0;
    for (int k = 0; k < 5; k++) {
        int64_t n = steps[k], part[16];
        for (int b = 0; b < 2; b++)
            for (int64_t j = 0; j < n; j++) part[b * n + j] = SEQ[b * 8 + pos + j];
        nb_tensor *y = nb_gpt_forward_cached(s, &m, kv, nb_from_data(s, NB_I64, NB_SHAPE(2, n), part));
        ck_assert_msg(y != NULL, "%s", nb_ctx_error(s));
        for (int b = 0; b < 2; b++)
            for (int64_t j = 0; j < n; j++)
                for (int v = 0; v < 13; v++) {
                    double a = at(y, (b * n + j) * 13 + v), w = at(full, (b * 8 + pos + j) * 13 + v);
                    ck_assert_msg(fabs(a - w) <= 1e-12 * fmax(1, fabs(w)),
                                  "spec %d pos %lld: cached %.17g full %.17g", i,
                                  (long long)(pos + j), a, w);
                }
        pos += n;
    }
    ck_assert_int_eq(nb_gpt_cache_len(kv), 8);
    nb_gpt_cache_free(kv);
    /* generation past block_size, cached and not: the same tokens */
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = 12, o.top_k = 5, o.temperature = 0.8;
    int64_t prompt[3] = {1, 2, 3}, a[16], b[16], na = 0, nb = 0;
    o.use_cache = true;
    ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, a, &na), NB_OK);
    o.use_cache = false;
    ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, b, &nb), NB_OK);
    ck_assert_int_eq(na, 15);
    ck_assert_int_eq(nb, 15);
    for (int k = 0; k < 15; k++) ck_assert_int_eq(a[k], b[k]);
    nb_gpt_free(&m);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- summary and module names ------------------------------------------------------------ */

START_TEST(test_summary_and_scopes) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, 5, NB_F64, 3);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nb_gpt_summary(&m, f);
    fclose(f);
    ck_assert_msg(strstr(buf, "Qwen3 (Hugging Face names)") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "model.layers.0.mlp.experts.0.gate_proj") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "n_kv_head 1, head_dim 6") != NULL, "%s", buf);
    free(buf);
    /* every block op is recorded under its module path */
    nb_tensor *L = nb_gpt_loss(s, &m, nb_from_data(s, NB_I64, NB_SHAPE(1, 4), SEQ),
                               nb_from_data(s, NB_I64, NB_SHAPE(1, 4), SEQ + 1), NULL);
    ck_assert_ptr_nonnull(L);
    buf = NULL;
    f = open_memstream(&buf, &len);
    ck_assert_int_eq(nb_tape_json(s, L, f), NB_OK);
    fclose(f);
    const char *want[] = {"\"scope\":\"model.layers.0.self_attn.q_norm\"",
                          "\"scope\":\"model.layers.1.self_attn.o_proj\"",
                          "\"scope\":\"model.layers.0.mlp.gate\"",
                          "\"scope\":\"model.layers.1.mlp.experts.",
                          "\"scope\":\"model.layers.0.post_attention_layernorm\"",
                          "\"scope\":\"model.norm\""};
    for (int k = 0; k < 6; k++) ck_assert_msg(strstr(buf, want[k]) != NULL, "%s missing", want[k]);
    /* all experts' products as grouped ops, the down one in experts.down_proj */
    ck_assert_msg(strstr(buf, "\"scope\":\"model.layers.1.mlp.experts.down_proj\"") &&
                  strstr(buf, "\"op\":\"grouped_linear\""), "no grouped expert products");
    free(buf);
    /* with expert_modules, each expert that ran in a module of its own:
     * experts.E.down_proj, and the same loss to rounding */
    m.expert_modules = true;
    nb_ctx *s2 = nb_ctx_new(0);
    nb_tensor *L2 = nb_gpt_loss(s2, &m, nb_from_data(s2, NB_I64, NB_SHAPE(1, 4), SEQ),
                                nb_from_data(s2, NB_I64, NB_SHAPE(1, 4), SEQ + 1), NULL);
    ck_assert_ptr_nonnull(L2);
    ck_assert_double_eq_tol(nb_item(L2), nb_item(L), 1e-12);
    buf = NULL;
    f = open_memstream(&buf, &len);
    ck_assert_int_eq(nb_tape_json(s2, L2, f), NB_OK);
    fclose(f);
    int ran = 0;
    for (int e = 0; e < m.cfg.n_expert; e++) {
        char sc[96];
        snprintf(sc, sizeof sc, "\"scope\":\"model.layers.1.mlp.experts.%d.down_proj\"", e);
        ran += strstr(buf, sc) != NULL;
    }
    ck_assert_int_ge(ran, m.cfg.n_expert_per_tok);
    ck_assert_ptr_null(strstr(buf, "grouped_linear"));
    free(buf);
    nb_ctx_free(s2);
    m.expert_modules = false;
    /* the tape explorer's page, backward steps included */
    ck_assert_int_eq(nb_backward(s, L, NULL), NB_OK);
    buf = NULL;
    f = open_memstream(&buf, &len);
    ck_assert_int_eq(nb_tape_html(s, L, f), NB_OK);
    fclose(f);
    ck_assert_msg(strstr(buf, "model.layers.1.self_attn") != NULL, "no module box");
    free(buf);
    nb_gpt_free(&m);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- state_dict, no_grad, dropout --------------------------------------------------------- */

/* A model's state_dict copied into a model of the same config gives the same
 * logits; a tied head may be absent, and must equal the embedding when present. */
START_TEST(test_load_state_dict) {
    int i = _i;
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_gpt a, b;
    make(p, &a, i, NB_F64, 41);
    nb_gpt_config c = a.cfg;
    ck_assert_int_eq(nb_gpt_init(p, &b, &c, NULL), NB_OK);
    ck_assert_int_eq(nb_gpt_load_state_dict(&b, &a.state_dict), NB_OK);
    nb_tensor *ya = nb_gpt_infer(s, &a, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    nb_tensor *yb = nb_gpt_infer(s, &b, nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ));
    ck_assert_int_eq(memcmp(ya->data, yb->data, ya->numel * sizeof(double)), 0);
    const char *head = c.hf_names ? "lm_head.weight" : "out_head.weight";
    nb_tensor_list sd = {0};
    for (int k = 0; k < a.state_dict.n; k++) /* without the head */
        if (strcmp(nb_list_name(&a.state_dict, k), head))
            ck_assert_int_eq(nb_list_add(&sd, nb_list_name(&a.state_dict, k),
                                            nb_list_tensor(&a.state_dict, k)), 0);
    if (c.tie_head) {
        ck_assert_int_eq(nb_gpt_load_state_dict(&b, &sd), NB_OK);
        nb_tensor *other = nb_copy(p, a.wte, NB_F64);
        nb_set(other, 3, 99.0);
        ck_assert_int_eq(nb_list_add(&sd, head, other), 0);
        ck_assert_int_eq(nb_gpt_load_state_dict(&b, &sd), NB_ERR_FORMAT);
        ck_assert_error_has(p, "differs from");
        ck_assert_error_has(p, "at 3; the");
    } else {
        ck_assert_int_ne(nb_gpt_load_state_dict(&b, &sd), NB_OK); /* an untied head is needed */
        ck_assert_error_has(p, head);
    }
    nb_ctx_reset(p);
    nb_list_free(&sd);
    nb_gpt_free(&a);
    nb_gpt_free(&b);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* no_grad: no gradient buffers and no tape; dropout: training draws masks
 * from the model's rng, eval mode is the deterministic forward. */
START_TEST(test_no_grad_and_dropout) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 4, 1);
    nb_gpt_config c = spec(4, NB_F32);
    c.no_grad = true;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    for (int k = 0; k < m.params.n; k++) ck_assert(!nb_list_tensor(&m.params, k)->requires_grad);
    nb_gpt_free(&m);
    c = spec(2, NB_F64);
    c.dropout = 0.5;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    nb_tensor *ids = nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ);
    nb_tensor *t1 = nb_gpt_forward(s, &m, ids), *t2 = nb_gpt_forward(s, &m, ids);
    nb_tensor *e1 = nb_gpt_infer(s, &m, ids), *e2 = nb_gpt_infer(s, &m, ids);
    ck_assert(t1 && t2 && e1 && e2);
    ck_assert_int_ne(memcmp(t1->data, t2->data, t1->numel * sizeof(double)), 0);
    ck_assert_int_eq(memcmp(e1->data, e2->data, e1->numel * sizeof(double)), 0);
    ck_assert_int_ne(memcmp(t1->data, e1->data, t1->numel * sizeof(double)), 0);
    /* dropout needs an rng */
    nb_gpt_free(&m);
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "dropout 0.5 needs an rng");
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* The composed attention (use_fused false) that the tape explorer draws per
 * query head: the fused one's logits and gradients to rounding. */
START_TEST(test_composed_attention) {
    const int specs[3] = {1, 2, 4}; /* multi-query; window 3; GQA 2:1 with experts */
    int i = specs[_i];
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_gpt m;
    make(p, &m, i, NB_F64, 51);
    nb_tensor *ids = nb_from_data(s, NB_I64, NB_SHAPE(2, 8), SEQ);
    static const int64_t next[16] = {5, 2, 9, 0, 3, 3, 12, 4, 4, 7, 1, 6, 2, 8, 11, 10};
    nb_tensor *tg = nb_from_data(s, NB_I64, NB_SHAPE(2, 8), next);
    nb_tensor *lf = NULL, *lc = NULL;
    nb_tensor *L = nb_gpt_loss(s, &m, ids, tg, &lf);
    ck_assert_msg(nb_backward(s, L, NULL) == NB_OK, "%s", nb_ctx_error(s));
    double *gf = malloc(m.blocks[0].wk->numel * sizeof *gf);
    for (size_t e = 0; e < m.blocks[0].wk->numel; e++) gf[e] = nb_grad_get(m.blocks[0].wk, e);
    nb_params_zero_grad(&m.params);
    m.use_fused = false;
    nb_tensor *L2 = nb_gpt_loss(s, &m, ids, tg, &lc);
    ck_assert_int_eq(nb_backward(s, L2, NULL), NB_OK);
    for (size_t e = 0; e < lf->numel; e++)
        ck_assert_double_eq_tol(nb_get(lc, e), nb_get(lf, e), 1e-12);
    for (size_t e = 0; e < m.blocks[0].wk->numel; e++)
        ck_assert_double_eq_tol(nb_grad_get(m.blocks[0].wk, e), gf[e], 1e-12);
    free(gf);
    /* the weights are a (B, H, T, T) softmax on the tape */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(nb_tape_json(s, L2, f), NB_OK);
    fclose(f);
    char want[32];
    snprintf(want, sizeof want, "\"shape\":[2,%d,8,8]", m.cfg.n_head);
    ck_assert_msg(strstr(buf, want) != NULL, "no %s", want);
    free(buf);
    nb_gpt_free(&m);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- bad configs ------------------------------------------------------------------------ */

START_TEST(test_bad_configs) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    struct {
        int spec;
        const char *key;
        int64_t value;
        const char *msg;
    } bad[] = {
        {0, "n_kv_head", 3, "n_head 4 is not a multiple of n_kv_head 3"},
        {0, "n_kv_head", 5, "n_kv_head 5 is outside [1, n_head 4]"},
        {2, "head_dim", 5, "head_dim 5 is odd; RoPE turns pairs of dims"},
        {4, "n_expert_per_tok", 5, "n_expert_per_tok 5 is outside [1, n_expert 4]"},
        {4, "n_expert_per_tok", 0, "n_expert_per_tok 0 is outside [1, n_expert 4]"},
        {4, "moe_hidden_dim", 0, "moe_hidden_dim 0: each of the 4 experts needs a width"},
        {2, "window", -1, "window -1 is negative"},
        {0, "hidden_dim", 0, "hidden_dim 0: llama3's gated MLP needs a width"},
        {0, "qk_norm", 1, "qk_norm 1: Llama 3 has no q_norm/k_norm"},
        {0, "n_expert", 2, "n_expert 2: Llama 3 has no experts"},
        {2, "n_expert", -1, "n_expert -1 is outside [0, 4096]"},
        {3, "n_embd", 13, ""}, /* head_dim given: n_embd need not divide */
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        nb_gpt_config c = spec(bad[k].spec, NB_F32);
        const char *key = bad[k].key;
        int64_t v = bad[k].value;
        if (!strcmp(key, "n_kv_head")) c.n_kv_head = (int)v;
        if (!strcmp(key, "head_dim")) c.head_dim = v;
        if (!strcmp(key, "n_expert_per_tok")) c.n_expert_per_tok = (int)v;
        if (!strcmp(key, "moe_hidden_dim")) c.moe_hidden_dim = v;
        if (!strcmp(key, "window")) c.window = v;
        if (!strcmp(key, "hidden_dim")) c.hidden_dim = v;
        if (!strcmp(key, "qk_norm")) c.qk_norm = v != 0;
        if (!strcmp(key, "n_expert")) c.n_expert = (int)v, c.n_expert_per_tok = 1, c.moe_hidden_dim = 4;
        if (!strcmp(key, "n_embd")) c.n_embd = v;
        nb_gpt m;
        nb_status st = nb_gpt_init(p, &m, &c, &rng);
        if (!bad[k].msg[0]) {
            ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(p));
            nb_gpt_free(&m);
            continue;
        }
        ck_assert_int_eq(st, NB_ERR_VALUE);
        ck_assert_error_has(p, bad[k].msg);
        nb_ctx_reset(p);
    }
    /* rope values out of range, by name */
    nb_gpt_config c = spec(0, NB_F32);
    c.rope_theta = 0.5;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "rope_theta 0.5 must be finite and >= 1");
    nb_ctx_reset(p);
    c = spec(0, NB_F32);
    c.rope_scaling.high_freq_factor = 0.5;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "rope_scaling (factor 4, low_freq_factor 1, high_freq_factor 0.5");
    nb_ctx_reset(p);
    c = spec(2, NB_F32);
    c.norm_eps = 0;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "norm_eps 0 must be finite and > 0");
    nb_ctx_reset(p);
    /* a cache made for another model */
    nb_gpt a, b;
    make(p, &a, 0, NB_F64, 1);
    make(p, &b, 2, NB_F64, 1);
    nb_gpt_cache *kv = nb_gpt_cache_new(p, &a, 1);
    ck_assert_ptr_null(nb_gpt_forward_cached(p, &b, kv, nb_from_data(p, NB_I64, NB_SHAPE(1, 2), SEQ)));
    ck_assert_error_has(p, "the cache must be made for this model");
    nb_gpt_cache_free(kv);
    nb_gpt_free(&a);
    nb_gpt_free(&b);
    nb_ctx_free(p);
}
END_TEST

/* The defaults are the published configs. */
START_TEST(test_defaults) {
    nb_gpt_config l = nb_gpt_config_default(NB_GPT_LLAMA3), q = nb_gpt_config_default(NB_GPT_QWEN3);
    ck_assert_int_eq(l.n_embd, 2048);
    ck_assert_int_eq(l.n_kv_head, 8);
    ck_assert_int_eq(l.hidden_dim, 8192);
    ck_assert(l.rope_scaled && l.tie_head && !l.qk_norm);
    ck_assert_double_eq(l.rope_scaling.factor, 32.0);
    ck_assert_double_eq(l.norm_eps, 1e-5);
    ck_assert_int_eq(q.head_dim, 128);
    ck_assert_int_eq(q.n_head, 16);
    ck_assert_int_eq(q.n_layer, 28);
    ck_assert(q.qk_norm && q.tie_head && !q.rope_scaled);
    ck_assert_double_eq(q.norm_eps, 1e-6);
    ck_assert_double_eq(q.rope_theta, 1e6);
    ck_assert_int_eq(q.dtype, NB_F32);
}
END_TEST

Suite *suite_gpt_arch(void) {
    Suite *s = suite_create("gpt_arch");
    TCase *tc = tcase_create("model");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_llama3_names);
    tcase_add_test(tc, test_qwen3_names);
    tcase_add_test(tc, test_qwen3_moe_names);
    tcase_add_test(tc, test_inits);
    tcase_add_loop_test(tc, test_forward_by_hand, 0, N_SPEC);
    tcase_add_loop_test(tc, test_cache_matches_full, 0, N_SPEC);
    tcase_add_test(tc, test_summary_and_scopes);
    tcase_add_test(tc, test_bad_configs);
    tcase_add_loop_test(tc, test_load_state_dict, 0, N_SPEC);
    tcase_add_test(tc, test_no_grad_and_dropout);
    tcase_add_loop_test(tc, test_composed_attention, 0, 3);
    suite_add_tcase(s, tc);
    TCase *tg = tcase_create("gradcheck");
    tcase_add_loop_test(tg, test_gradcheck_loss, 0, N_SPEC);
    tcase_set_timeout(tg, 120);
    suite_add_tcase(s, tg);
    return s;
}
