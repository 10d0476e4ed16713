/* check_gpt.c - the GPT model (nabla/gpt.h) and the training pieces it uses
 * (nabla/optim.h: AdamW groups, nanoGPT's lr schedule, the training step):
 *   - parity: 20 AdamW steps replayed against PyTorch runs of tools/ref/gpt_ref.py
 *     (tests/fixtures/gpt, tools/ref/gen_gpt_fixtures.py), both layouts, f64 and f32;
 *   - second order: the gradients of the squared gradients against PyTorch's;
 *   - names, shapes and init of both layouts; the tied head;
 *   - the KV cache against the full forward, cached vs uncached generation;
 *   - accumulation = one big batch; the schedule's formula; weight-decay groups;
 *   - errors. */
#include "check_nabla.h"

#define GPT_DIR NB_SOURCE_DIR "/tests/fixtures/gpt/"

/* ---- small helpers -------------------------------------------------------------- */

static nb_gpt_config tiny_config(nb_gpt_arch arch, nb_dtype dt) {
    nb_gpt_config c = nb_gpt_config_default(arch);
    c.vocab_size = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 2, c.n_embd = 8;
    c.dropout = 0.0, c.dtype = dt;
    return c;
}

static nb_tensor *ids_from(nb_ctx *ctx, int64_t b, int64_t t, const int64_t *v) {
    return nb_from_data(ctx, NB_I64, NB_SHAPE(b, t), v);
}

/* The value of "--key=" in an args string, or NULL. */
static const char *arg(const char *args, const char *key, char *buf, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "--%s=", key);
    const char *p = strstr(args, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t k = strcspn(p, " ");
    snprintf(buf, n, "%.*s", (int)(k < n ? k : n - 1), p);
    return buf;
}

static double argd(const char *args, const char *key) {
    char b[64];
    ck_assert_msg(arg(args, key, b, sizeof b), "args lack --%s", key);
    return strtod(b, NULL);
}

static bool argb(const char *args, const char *key) {
    char b[64];
    ck_assert_msg(arg(args, key, b, sizeof b), "args lack --%s", key);
    return !strcmp(b, "True");
}

/* ---- parity with PyTorch --------------------------------------------------------- */

typedef struct replay {
    nb_gpt *m;
    const nb_tensor *x, *y; /* (N, B, T) */
    int64_t it, rows;       /* this iteration, rows per micro-batch */
} replay;

/* Rows [micro*rows, (micro+1)*rows) of batch `it`. */
static nb_tensor *micro_loss(nb_ctx *ctx, int micro, void *user) {
    replay *r = user;
    int64_t B = r->x->shape[1], T = r->x->shape[2];
    const int64_t *x = (const int64_t *)r->x->data + (r->it * B + micro * r->rows) * T;
    const int64_t *y = (const int64_t *)r->y->data + (r->it * B + micro * r->rows) * T;
    return nb_gpt_loss(ctx, r->m, ids_from(ctx, r->rows, T, x), ids_from(ctx, r->rows, T, y),
                       NULL);
}

/* The key biases (W_key.bias; c_attn.bias[C, 2C)) do not change the loss: a
 * key bias adds q . b to a whole row of scores, which softmax ignores. Their
 * gradient is zero in exact arithmetic and rounding noise in practice, and
 * Adam divides that noise by its own root mean square: in float32 (noise
 * 1e-8, comparable to eps) each step moves them by about lr in a direction
 * set by rounding, in nabla and PyTorch alike. They are compared in float64
 * only (noise 1e-17 << eps: they stay put but for weight decay). */
static bool key_bias(const nb_gpt *m, const char *name, size_t j) {
    if (strstr(name, "W_key.bias")) return true;
    int64_t C = m->cfg.n_embd;
    return strstr(name, "c_attn.bias") && (int64_t)j >= C && (int64_t)j < 2 * C;
}

static void run_parity(const char *run, nb_dtype dt, double loss_tol, double w_tol) {
    nb_ctx *files = nb_ctx_new(0), *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    char path[512], ibuf[128], *args;
    nb_tensor_list want = {0}, init = {0}, batches = {0};
    const char *keys[8], *vals[8];
    int n_meta = 0;
    snprintf(path, sizeof path, GPT_DIR "%s_%s.safetensors", run, dt == NB_F64 ? "f64" : "f32");
    ck_assert_int_eq(nb_load_safetensors_meta(files, path, &want, 8, &n_meta, keys, vals), NB_OK);
    args = NULL;
    const char *init_name = NULL;
    for (int i = 0; i < n_meta; i++) {
        if (!strcmp(keys[i], "args")) args = (char *)vals[i];
        if (!strcmp(keys[i], "init")) init_name = vals[i];
    }
    ck_assert_ptr_nonnull(args);
    ck_assert_ptr_nonnull(init_name);
    snprintf(path, sizeof path, GPT_DIR "%s", init_name);
    ck_assert_int_eq(nb_load_safetensors(files, path, &init), NB_OK);
    ck_assert_int_eq(nb_load_safetensors(files, GPT_DIR "batches.safetensors", &batches), NB_OK);

    nb_gpt m;
    ck_assert_int_eq(nb_gpt_from_state_dict(pctx, &m, &init, (int)argd(args, "n_head"), 0.0, dt,
                                            NULL), NB_OK);
    ck_assert_str_eq(arg(args, "arch", ibuf, sizeof ibuf),
                     m.cfg.arch == NB_GPT_GPTMODEL ? "gptmodel" : "nanogpt");
    nb_adam_opts o = nb_adamw_defaults(argd(args, "learning_rate"));
    o.beta1 = argd(args, "beta1");
    o.beta2 = argd(args, "beta2");
    o.weight_decay = argd(args, "weight_decay");
    nb_optim *opt = nb_adamw_new_groups(pctx, &m.params, o, argb(args, "weight_decay_1d"));
    ck_assert_ptr_nonnull(opt);
    nb_lr_schedule sch = {argd(args, "learning_rate"), argb(args, "decay_lr"),
                          (int64_t)argd(args, "warmup_iters"),
                          (int64_t)argd(args, "lr_decay_iters"), argd(args, "min_lr")};
    int k = (int)argd(args, "gradient_accumulation_steps");
    const nb_tensor *x = nb_list_get(&batches, "x"), *y = nb_list_get(&batches, "y");
    const nb_tensor *loss = nb_list_get(&want, "loss"), *lr = nb_list_get(&want, "lr");
    replay r = {&m, x, y, 0, x->shape[1] / k};
    nb_train_step s = {opt, &m.params, k, argd(args, "grad_clip"), 0, micro_loss, &r, NULL, NULL};
    double worst_loss = 0;
    for (int64_t it = 0; it < (int64_t)loss->numel; it++) {
        r.it = it;
        s.lr = nb_lr_at(&sch, it);
        ck_assert_msg(s.lr == nb_get(lr, (size_t)it), "%s: lr(%lld) = %.17g, torch %.17g", run,
                      (long long)it, s.lr, nb_get(lr, (size_t)it));
        nb_step_result res;
        nb_status st = nb_train_step_run(step, &s, &res);
        ck_assert_msg(st == NB_OK, "%s: %s", run, nb_ctx_error(step));
        double w = nb_get(loss, (size_t)it);
        worst_loss = fmax(worst_loss, fabs(res.loss - w) / fabs(w));
        ck_assert_msg(fabs(res.loss - w) <= loss_tol * fabs(w), "%s iter %lld: loss %.17g, "
                      "torch %.17g", run, (long long)it, res.loss, w);
    }
    /* final weights: every state_dict entry (lm_head.weight too) */
    double worst = 0;
    for (int i = 0; i < m.state_dict.n; i++) {
        const nb_tensor *a = nb_list_tensor(&m.state_dict, i),
                        *b = nb_list_get(&want, nb_list_name(&m.state_dict, i));
        ck_assert_msg(b && b->numel == a->numel, "%s: %s missing", run, m.state_dict.names[i]);
        for (size_t j = 0; j < a->numel; j++) {
            if (dt == NB_F32 && key_bias(&m, m.state_dict.names[i], j)) continue;
            double e = fabs(nb_get(a, j) - nb_get(b, j));
            if (e > worst) worst = e;
            ck_assert_msg(e <= w_tol, "%s: %s[%zu] = %.17g, torch %.17g", run,
                          m.state_dict.names[i], j, nb_get(a, j), nb_get(b, j));
        }
    }
    ck_assert(worst > 0 || dt == NB_F64); /* f32 never matches bit for bit here */
    if (getenv("NB_GPT_PARITY_VERBOSE"))
        fprintf(stderr, "%s %s: max loss rel err %.2g, max weight abs err %.2g\n", run,
                dt == NB_F64 ? "f64" : "f32", worst_loss, worst);
    nb_optim_free(opt);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    nb_ctx_free(files);
}

static const char *const RUNS[] = {"gptmodel_qkv_course", "gptmodel_cosine_clip",
                                   "nanogpt_bias_accum", "nanogpt_nobias_course"};

START_TEST(test_parity_f64) { run_parity(RUNS[_i], NB_F64, 1e-9, 1e-8); }
END_TEST

START_TEST(test_parity_f32) { run_parity(RUNS[_i], NB_F32, 1e-5, 5e-4); }
END_TEST

/* ---- second order against PyTorch -------------------------------------------------
 * grad2_<model>.safetensors (tools/ref/gen_gpt_fixtures.py): on batch 0, in
 * float64, loss = the model's loss, grad = d loss / d params with
 * create_graph, grad2 = d (sum of every grad squared) / d params. nabla does
 * the same with nb_grad(create_graph) and nb_backward of the sum. */

static const char *const GRAD2_MODELS[] = {"gptmodel_qkv", "gptmodel", "nanogpt_bias",
                                           "nanogpt_nobias"};

/* max |a - b| / max |b|; a's values from its data, or from its gradient.
 * The denominator is at least 1e-6: W_key.bias's gradients are zero in exact
 * arithmetic (see key_bias) and rounding noise (1e-17) in both programs,
 * so they are compared absolutely. Every other gradient here is over 1e-4. */
static double rel_err(const nb_tensor *a, bool a_grad, const nb_tensor *b) {
    ck_assert_uint_eq(a->numel, b->numel);
    double num = 0, den = 0;
    for (size_t j = 0; j < a->numel; j++) {
        double v = a_grad ? nb_grad_get(a, j) : nb_get(a, j);
        num = fmax(num, fabs(v - nb_get(b, j)));
        den = fmax(den, fabs(nb_get(b, j)));
    }
    return num / fmax(den, 1e-6);
}

START_TEST(test_second_order_vs_torch) {
    const char *model = GRAD2_MODELS[_i];
    nb_ctx *files = nb_ctx_new(0), *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    char path[512];
    nb_tensor_list want = {0}, init = {0}, batches = {0};
    snprintf(path, sizeof path, GPT_DIR "grad2_%s.safetensors", model);
    ck_assert_int_eq(nb_load_safetensors(files, path, &want), NB_OK);
    snprintf(path, sizeof path, GPT_DIR "init_%s.safetensors", model);
    ck_assert_int_eq(nb_load_safetensors(files, path, &init), NB_OK);
    ck_assert_int_eq(nb_load_safetensors(files, GPT_DIR "batches.safetensors", &batches), NB_OK);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_from_state_dict(pctx, &m, &init, 2, 0.0, NB_F64, NULL), NB_OK);
    replay r = {&m, nb_list_get(&batches, "x"), nb_list_get(&batches, "y"), 0,
                nb_list_get(&batches, "x")->shape[1]};
    nb_tensor *loss = micro_loss(step, 0, &r);
    ck_assert_ptr_nonnull(loss);
    double wl = nb_get(nb_list_get(&want, "loss"), 0);
    ck_assert_double_le(fabs(nb_item(loss) - wl), 1e-12 * fabs(wl));
    int n = m.params.n;
    nb_tensor **g = calloc((size_t)n, sizeof *g);
    nb_grad_opts o = {.create_graph = true};
    ck_assert_msg(nb_grad(step, 1, &loss, NULL, n, m.params.t, &o, g) == NB_OK, "%s: %s", model,
                  nb_ctx_error(step));
    nb_tensor *total = NULL;
    for (int i = 0; i < n; i++) {
        nb_tensor *sq = nb_sum(step, nb_mul(step, g[i], g[i]));
        total = total ? nb_add(step, total, sq) : sq;
    }
    ck_assert_int_eq(nb_backward(step, total, NULL), NB_OK);
    double worst1 = 0, worst2 = 0;
    for (int i = 0; i < n; i++) {
        char key[160];
        const char *name = nb_list_name(&m.params, i);
        snprintf(key, sizeof key, "grad.%s", name);
        const nb_tensor *w1 = nb_list_get(&want, key);
        snprintf(key, sizeof key, "grad2.%s", name);
        const nb_tensor *w2 = nb_list_get(&want, key);
        ck_assert_msg(w1 && w2, "%s: no %s in the fixture", model, key);
        nb_tensor *p = nb_list_tensor(&m.params, i);
        ck_assert_ptr_nonnull(p->grad);
        double e1 = rel_err(g[i], false, w1), e2 = rel_err(p, true, w2);
        ck_assert_msg(e1 <= 1e-10 && e2 <= 1e-10, "%s: %s: first order %.3g, second %.3g", model,
                      name, e1, e2);
        worst1 = fmax(worst1, e1), worst2 = fmax(worst2, e2);
    }
    if (getenv("NB_GPT_PARITY_VERBOSE"))
        fprintf(stderr, "%s grad2: worst rel err %.2g (first), %.2g (second)\n", model, worst1,
                worst2);
    free(g);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    nb_ctx_free(files);
}
END_TEST

/* ---- layout, names, init --------------------------------------------------------- */

START_TEST(test_gptmodel_names) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = tiny_config(NB_GPT_GPTMODEL, NB_F32);
    c.qkv_bias = true;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    /* 2 + 2 * (8 att + 4 ff + 4 norms) + 2 + 1 */
    ck_assert_int_eq(m.params.n, 37);
    ck_assert_int_eq(m.state_dict.n, 37);
    ck_assert_str_eq(m.params.names[0], "tok_emb.weight");
    ck_assert_str_eq(m.params.names[1], "pos_emb.weight");
    ck_assert_str_eq(m.params.names[2], "trf_blocks.0.att.W_query.weight");
    ck_assert_str_eq(m.params.names[3], "trf_blocks.0.att.W_query.bias");
    ck_assert_str_eq(m.params.names[8], "trf_blocks.0.att.out_proj.weight");
    ck_assert_str_eq(m.params.names[10], "trf_blocks.0.ff.layers.0.weight");
    ck_assert_str_eq(m.params.names[13], "trf_blocks.0.ff.layers.2.bias");
    ck_assert_str_eq(m.params.names[14], "trf_blocks.0.norm1.scale");
    ck_assert_str_eq(m.params.names[17], "trf_blocks.0.norm2.shift");
    ck_assert_str_eq(m.params.names[34], "final_norm.scale");
    ck_assert_str_eq(m.params.names[36], "out_head.weight");
    ck_assert_ptr_ne(m.head, m.wte);
    char s[64];
    ck_assert_str_eq(nb_shape_str(m.blocks[1].fc_w, s, sizeof s), "(32, 8)");
    /* PyTorch's default init: Embedding N(0,1) (spread > 0.5), Linear within
     * 1/sqrt(in), LayerNorm 1 and 0 */
    double sd = 0;
    for (size_t i = 0; i < m.wte->numel; i++) sd += nb_get(m.wte, i) * nb_get(m.wte, i);
    ck_assert_double_gt(sqrt(sd / (double)m.wte->numel), 0.6);
    for (size_t i = 0; i < m.blocks[0].proj_w->numel; i++)
        ck_assert_double_le(fabs(nb_get(m.blocks[0].proj_w, i)), 1.0 / sqrt(32.0));
    ck_assert_double_eq(nb_get(m.blocks[0].ln1_w, 3), 1.0);
    ck_assert_double_eq(nb_get(m.lnf_b, 3), 0.0);
    /* 124M-style counts, small: head counted as tied */
    ck_assert_int_eq(nb_gpt_num_params(&m, false) - nb_gpt_num_params(&m, true), 11 * 8);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_nanogpt_names_tied_init) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = tiny_config(NB_GPT_NANOGPT, NB_F64);
    c.n_embd = 64, c.vocab_size = 300, c.n_layer = 2;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    /* params: wte, wpe, 2 x 12, ln_f.weight, ln_f.bias; state_dict + lm_head */
    ck_assert_int_eq(m.params.n, 28);
    ck_assert_int_eq(m.state_dict.n, 29);
    ck_assert_str_eq(m.params.names[2], "transformer.h.0.ln_1.weight");
    ck_assert_str_eq(m.params.names[4], "transformer.h.0.attn.c_attn.weight");
    ck_assert_str_eq(m.params.names[7], "transformer.h.0.attn.c_proj.bias");
    ck_assert_str_eq(m.params.names[13], "transformer.h.0.mlp.c_proj.bias");
    ck_assert_str_eq(m.state_dict.names[28], "lm_head.weight");
    ck_assert_ptr_eq(m.state_dict.t[28], m.wte);
    ck_assert_ptr_eq(m.head, m.wte);
    /* N(0, 0.02) and c_proj N(0, 0.02/sqrt(4)): sample std within 10% */
    double s1 = 0, s2 = 0;
    const nb_tensor *w = m.blocks[0].c_attn_w, *cp = m.blocks[1].proj_w;
    for (size_t i = 0; i < w->numel; i++) s1 += nb_get(w, i) * nb_get(w, i);
    for (size_t i = 0; i < cp->numel; i++) s2 += nb_get(cp, i) * nb_get(cp, i);
    ck_assert_double_eq_tol(sqrt(s1 / (double)w->numel), 0.02, 0.002);
    ck_assert_double_eq_tol(sqrt(s2 / (double)cp->numel), 0.01, 0.001);
    ck_assert_double_eq(nb_get(m.blocks[0].c_attn_b, 5), 0.0);
    ck_assert_int_eq(nb_gpt_num_params(&m, false), nb_gpt_num_params(&m, true));
    /* bias=False drops every bias */
    c.bias = false;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    ck_assert_int_eq(m.params.n, 2 + 2 * 6 + 1);
    for (int i = 0; i < m.state_dict.n; i++) ck_assert(!strstr(m.state_dict.names[i], "bias"));
    nb_ctx_free(p);
}
END_TEST

/* The tied head's gradient is the sum of both uses: equal to the gradient of
 * an untied copy's wte plus its head. */
START_TEST(test_tied_gradient_is_sum) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 1);
    nb_gpt_config c = tiny_config(NB_GPT_NANOGPT, NB_F64);
    nb_gpt m, u;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_init(p, &u, &c, &rng), NB_OK);
    ck_assert_int_eq(nb_params_copy_from(&u.params, &m.params), NB_OK);
    /* untie u: a separate head tensor with the same values */
    u.head = nb_requires_grad(nb_copy(p, u.wte, NB_F64));
    const int64_t x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1};
    const int64_t y[12] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2};
    nb_tensor *l1 = nb_gpt_loss(s, &m, ids_from(s, 2, 6, x), ids_from(s, 2, 6, y), NULL);
    nb_tensor *l2 = nb_gpt_loss(s, &u, ids_from(s, 2, 6, x), ids_from(s, 2, 6, y), NULL);
    ck_assert_int_eq(nb_backward(s, l1, NULL), NB_OK);
    ck_assert_int_eq(nb_backward(s, l2, NULL), NB_OK);
    ck_assert_double_eq_tol(nb_item(l1), nb_item(l2), 1e-15);
    double gmax = 0;
    for (size_t i = 0; i < m.wte->numel; i++) {
        double sum = nb_grad_get(u.wte, i) + nb_grad_get(u.head, i);
        ck_assert_double_eq_tol(nb_grad_get(m.wte, i), sum, 1e-14);
        gmax = fmax(gmax, fabs(nb_grad_get(u.head, i)));
    }
    ck_assert_double_gt(gmax, 1e-3); /* the head's part is not negligible */
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- KV cache ------------------------------------------------------------------------ */

static void cache_vs_full(nb_gpt_arch arch) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_gpt_config c = tiny_config(arch, NB_F64);
    c.qkv_bias = true, c.dropout = 0.2; /* eval mode must switch dropout off */
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    const int64_t seq[2 * 8] = {1, 5, 2, 9, 0, 3, 3, 10, 4, 4, 7, 1, 6, 2, 8, 0};
    nb_tensor *full = nb_gpt_infer(s, &m, ids_from(s, 2, 8, seq)); /* (2, 8, 11) */
    ck_assert_ptr_nonnull(full);
    ck_assert_int_eq(nb_tape_len(s), 0); /* no tape */
    nb_gpt_cache *kv = nb_gpt_cache_new(s, &m, 2);
    ck_assert_ptr_nonnull(kv);
    /* a prompt of 3, then 1, 2, 1, 1 tokens */
    const int64_t steps[] = {3, 1, 2, 1, 1};
    int64_t at = 0;
    for (int k = 0; k < 5; k++) {
        int64_t n = steps[k], part[16];
        for (int b = 0; b < 2; b++)
            for (int64_t j = 0; j < n; j++) part[b * n + j] = seq[b * 8 + at + j];
        nb_tensor *y = nb_gpt_forward_cached(s, &m, kv, ids_from(s, 2, n, part));
        ck_assert_msg(y != NULL, "%s", nb_ctx_error(s));
        for (int b = 0; b < 2; b++)
            for (int64_t j = 0; j < n; j++)
                for (int v = 0; v < 11; v++) {
                    double a = nb_get(y, (size_t)((b * n + j) * 11 + v));
                    double w = nb_get(full, (size_t)((b * 8 + at + j) * 11 + v));
                    ck_assert_msg(fabs(a - w) <= 1e-12 * fmax(1, fabs(w)),
                                  "pos %lld v %d: cached %.17g full %.17g", (long long)(at + j),
                                  v, a, w);
                }
        at += n;
    }
    ck_assert_int_eq(nb_gpt_cache_len(kv), 8);
    /* full: no room left */
    nb_tensor *y = nb_gpt_forward_cached(s, &m, kv, ids_from(s, 2, 1, seq));
    ck_assert_ptr_null(y);
    ck_assert_int_eq(nb_ctx_status(s), NB_ERR_VALUE); /* the header's status for len + n > T */
    ck_assert_error_has(s, "1 new positions do not fit: the cache holds 8 of block_size 8");
    nb_ctx_reset(s);
    /* a cache for another batch size */
    nb_gpt_cache_reset(kv);
    ck_assert_ptr_null(nb_gpt_forward_cached(s, &m, kv, ids_from(s, 1, 2, seq)));
    ck_assert_error_has(s, "ids batch 1, cache batch 2");
    nb_gpt_cache_free(kv);
    ck_assert_ptr_null(nb_gpt_cache_new(s, &m, 0));
    ck_assert(m.training); /* restored */
    nb_ctx_free(s);
    nb_ctx_free(p);
}

START_TEST(test_cache_matches_full_gptmodel) { cache_vs_full(NB_GPT_GPTMODEL); }
END_TEST
START_TEST(test_cache_matches_full_nanogpt) { cache_vs_full(NB_GPT_NANOGPT); }
END_TEST

/* Cached and uncached generation give the same tokens, past block_size too
 * (the window slides), with temperature and top-k. */
START_TEST(test_generate_cache_same_tokens) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 9, 1);
    for (int arch = 0; arch < 2; arch++) {
        nb_gpt_config c = tiny_config((nb_gpt_arch)arch, NB_F64);
        nb_gpt m;
        ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
        const int64_t prompt[3] = {4, 1, 7};
        int64_t a[40], b[40], na, nb;
        nb_gpt_sample_opts o = nb_gpt_sample_defaults();
        o.max_new_tokens = 20, o.temperature = 0.9, o.top_k = 5, o.seed = 42;
        ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, a, &na), NB_OK);
        o.use_cache = false;
        ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, b, &nb), NB_OK);
        ck_assert_int_eq(na, 23);
        ck_assert_int_eq(nb, 23);
        int distinct = 0;
        for (int i = 0; i < 23; i++) {
            ck_assert_int_eq(a[i], b[i]);
            ck_assert(a[i] >= 0 && a[i] < 11);
            distinct += i > 3 && a[i] != a[i - 1];
        }
        ck_assert_int_eq(a[0], 4);
        ck_assert_int_gt(distinct, 3); /* sampling, not a constant */
        /* top_k 1 = greedy = temperature 0 */
        o.top_k = 1;
        ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, a, &na), NB_OK);
        o.top_k = 0, o.temperature = 0, o.use_cache = true;
        ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, b, &nb), NB_OK);
        for (int i = 0; i < 23; i++) ck_assert_int_eq(a[i], b[i]);
    }
    nb_ctx_free(p);
}
END_TEST

/* Sampling's few-row linear layers split their outputs over threads: the
 * logits are the same bits with 1 and 2 threads (a head of 2100 x 256 is
 * big enough to be split). */
START_TEST(test_cached_logits_threads_identical) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 1);
    nb_gpt_config c = tiny_config(NB_GPT_NANOGPT, NB_F32);
    c.vocab_size = 2100, c.n_embd = 256, c.n_layer = 1, c.n_head = 4;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    const int64_t ids[3] = {5, 2000, 17};
    float out[2][3 * 2100];
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(nb_set_num_threads(k + 1), k + 1);
        nb_gpt_cache *kv = nb_gpt_cache_new(s, &m, 1);
        nb_tensor *y = nb_gpt_forward_cached(s, &m, kv, ids_from(s, 1, 3, ids));
        ck_assert_ptr_nonnull(y);
        memcpy(out[k], y->data, sizeof out[k]);
        nb_gpt_cache_free(kv);
    }
    nb_set_num_threads(1);
    ck_assert(memcmp(out[0], out[1], sizeof out[0]) == 0);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* ---- training pieces ------------------------------------------------------------ */

typedef struct accum {
    nb_gpt *m;
    const int64_t *x, *y;
    int64_t rows, T;
} accum;

static nb_tensor *accum_loss(nb_ctx *ctx, int micro, void *user) {
    accum *a = user;
    size_t off = (size_t)(micro * a->rows * a->T);
    return nb_gpt_loss(ctx, a->m, ids_from(ctx, a->rows, a->T, a->x + off),
                       ids_from(ctx, a->rows, a->T, a->y + off), NULL);
}

static nb_status count_sync(const nb_tensor_list *params, void *user) {
    (void)params;
    (*(int *)user)++;
    return NB_OK;
}

/* k micro-batches of B/k rows give one batch of B rows' gradients (1e-12) */
START_TEST(test_accumulation_equals_big_batch) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 1);
    nb_gpt_config c = tiny_config(NB_GPT_NANOGPT, NB_F64);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    int64_t x[8 * 5], y[8 * 5];
    for (int i = 0; i < 40; i++) {
        x[i] = nb_pcg32_bounded(&rng, 11);
        y[i] = nb_pcg32_bounded(&rng, 11);
    }
    /* lr 0: the step leaves the weights alone and the grads readable */
    nb_optim *opt = nb_adamw_new(p, &m.params, nb_adamw_defaults(0.0));
    double grads1[4][2000];
    int syncs = 0;
    const int ks[2] = {1, 4};
    double losses[2];
    for (int r = 0; r < 2; r++) {
        accum a = {&m, x, y, 8 / ks[r], 5};
        nb_train_step st = {opt, &m.params, ks[r], 0, 0.0, accum_loss, &a, count_sync, &syncs};
        nb_step_result res;
        ck_assert_int_eq(nb_train_step_run(s, &st, &res), NB_OK);
        losses[r] = res.loss;
        for (int q = 0; q < 4; q++) {
            const nb_tensor *t = m.params.t[q * 7];
            ck_assert_uint_le(t->numel, 2000);
            for (size_t i = 0; i < t->numel; i++) {
                double g = nb_grad_get(t, i);
                if (r == 0) grads1[q][i] = g;
                else ck_assert_msg(fabs(g - grads1[q][i]) <= 1e-12 * fmax(1, fabs(g)),
                                   "param %d [%zu]: %.17g vs %.17g", q * 7, i, g, grads1[q][i]);
            }
        }
    }
    ck_assert_int_eq(syncs, 2);
    ck_assert_double_eq_tol(losses[0], losses[1], 1e-12);
    ck_assert_double_gt(losses[0], 1.0);
    nb_optim_free(opt);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

/* The training step reuses intermediate gradient buffers on the way back:
 * the parameters' gradients are the same bits as a plain nb_backward's, the
 * step's arena holds less. */
START_TEST(test_train_step_recycles_grads) {
    for (int arch = 0; arch < 2; arch++) {
        nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
        nb_pcg32 rng;
        nb_pcg32_seed(&rng, 6, 1);
        nb_gpt_config c = tiny_config(arch ? NB_GPT_NANOGPT : NB_GPT_GPTMODEL, NB_F32);
        nb_gpt m;
        ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
        int64_t x[4 * 8], y[4 * 8];
        for (int i = 0; i < 32; i++) x[i] = nb_pcg32_bounded(&rng, 11), y[i] = (x[i] * 3) % 11;
        accum a = {&m, x, y, 4, 8};
        nb_params_zero_grad(&m.params);
        nb_tensor *loss = accum_loss(s, 0, &a);
        ck_assert_int_eq(nb_backward(s, loss, NULL), NB_OK);
        size_t plain_mem = nb_ctx_mem_used(s);
        int n = m.params.n;
        float *g1 = calloc(60000, sizeof *g1);
        size_t k = 0;
        for (int q = 0; q < n; q++) {
            const nb_tensor *t = m.params.t[q];
            memcpy(g1 + k, t->grad, t->numel * sizeof(float));
            k += t->numel;
        }
        ck_assert_uint_le(k, 60000);
        nb_optim *opt = nb_adamw_new(p, &m.params, nb_adamw_defaults(0.0));
        nb_train_step st = {opt, &m.params, 1, 0, 0.0, accum_loss, &a, NULL, NULL};
        ck_assert_int_eq(nb_train_step_run(s, &st, NULL), NB_OK);
        ck_assert_uint_lt(nb_ctx_mem_used(s), plain_mem);
        k = 0;
        for (int q = 0; q < n; q++) {
            const nb_tensor *t = m.params.t[q];
            ck_assert_msg(memcmp(g1 + k, t->grad, t->numel * sizeof(float)) == 0, "%s",
                          nb_list_name(&m.params, q));
            k += t->numel;
        }
        free(g1);
        nb_optim_free(opt);
        nb_gpt_free(&m);
        nb_ctx_free(s);
        nb_ctx_free(p);
    }
}
END_TEST

static nb_status failing_sync(const nb_tensor_list *params, void *user) {
    (void)params, (void)user;
    return NB_ERR_IO;
}

static nb_tensor *null_loss(nb_ctx *ctx, int micro, void *user) {
    (void)ctx, (void)micro, (void)user;
    return NULL;
}

/* a failing sync hook or loss stops the step before the update */
START_TEST(test_train_step_errors) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 1);
    nb_gpt_config c = tiny_config(NB_GPT_GPTMODEL, NB_F64);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    int64_t x[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, y[10] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 0};
    accum a = {&m, x, y, 2, 5};
    nb_optim *opt = nb_adamw_new(p, &m.params, nb_adamw_defaults(0.1));
    double before = nb_get(m.wte, 0);
    nb_train_step st = {opt, &m.params, 1, 1.0, 0.1, accum_loss, &a, failing_sync, NULL};
    ck_assert_int_eq(nb_train_step_run(s, &st, NULL), NB_ERR_IO);
    ck_assert_error_has(s, "train_step: grad_sync failed");
    ck_assert_double_eq(nb_get(m.wte, 0), before);
    ck_assert_int_eq(nb_optim_step_count(opt), 0);
    nb_ctx_clear_error(s);
    st.grad_sync = NULL, st.loss_fn = null_loss;
    ck_assert_int_eq(nb_train_step_run(s, &st, NULL), NB_ERR_STATE);
    ck_assert_error_has(s, "loss_fn returned NULL for micro-batch 0");
    nb_ctx_clear_error(s);
    st.loss_fn = accum_loss, st.accum_steps = 0;
    ck_assert_int_eq(nb_train_step_run(s, &st, NULL), NB_ERR_VALUE);
    nb_ctx_clear_error(s);
    st.accum_steps = 1;
    nb_step_result r;
    ck_assert_int_eq(nb_train_step_run(s, &st, &r), NB_OK);
    ck_assert_double_ne(nb_get(m.wte, 0), before);
    ck_assert_double_gt(r.grad_norm, 0);
    ck_assert_double_eq_tol(r.loss, log(11.0), 1.5); /* an untrained model's loss */
    ck_assert_int_eq(nb_optim_step_count(opt), 1);
    nb_optim_free(opt);
    /* no_grad: no gradient buffers, nothing recorded */
    c.no_grad = true;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    for (int i = 0; i < m.params.n; i++) {
        ck_assert_ptr_null(nb_list_tensor(&m.params, i)->grad);
        ck_assert(!nb_list_tensor(&m.params, i)->requires_grad);
    }
    nb_ctx_reset(s);
    ck_assert_ptr_nonnull(nb_gpt_forward(s, &m, ids_from(s, 2, 5, x)));
    ck_assert_int_eq(nb_tape_len(s), 0);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_lr_schedule_formula) {
    nb_lr_schedule s = {6e-4, true, 10, 100, 6e-5};
    ck_assert_double_eq(nb_lr_at(&s, 0), 6e-4 * 1 / 11);
    ck_assert_double_eq(nb_lr_at(&s, 9), 6e-4 * 10 / 11);
    ck_assert_double_eq(nb_lr_at(&s, 10), 6e-4);             /* cos(0) = 1 */
    ck_assert_double_eq_tol(nb_lr_at(&s, 55), 3.3e-4, 1e-16); /* half way: the mean */
    ck_assert_double_eq(nb_lr_at(&s, 100), 6e-5);            /* cos(pi) = -1 */
    ck_assert_double_eq(nb_lr_at(&s, 101), 6e-5);
    ck_assert_double_eq(nb_lr_at(&s, 5000), 6e-5);
    /* on the clock: the warmup counts iterations, the cosine takes the fraction given */
    ck_assert_double_eq(nb_lr_at_fraction(&s, 9, 0.7), 6e-4 * 10 / 11);
    for (int it = 10; it <= 100; it += 9) /* the same bits as counted */
        ck_assert_double_eq(nb_lr_at_fraction(&s, 5000, (it - 10) / 90.0), nb_lr_at(&s, it));
    ck_assert_double_eq(nb_lr_at_fraction(&s, 10, 1), 6e-5);
    ck_assert_double_eq(nb_lr_at_fraction(&s, 10, 1.5), 6e-5);
    ck_assert_double_eq(nb_lr_at_fraction(&s, 10, -0.5), 6e-4);
    s.decay_lr = false;
    ck_assert_double_eq(nb_lr_at(&s, 0), 6e-4);
    ck_assert_double_eq(nb_lr_at(&s, 5000), 6e-4);
    ck_assert(isnan(nb_lr_at(NULL, 0)));
}
END_TEST

/* nanoGPT's groups: 2-D parameters decay, 1-D ones do not */
START_TEST(test_adamw_groups) {
    nb_ctx *p = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_full(p, NB_F64, NB_SHAPE(2, 2), 1.0));
    nb_tensor *b = nb_requires_grad(nb_full(p, NB_F64, NB_SHAPE(2), 1.0));
    nb_tensor_list l = {0};
    nb_list_add(&l, "w", w);
    nb_list_add(&l, "b", b);
    nb_adam_opts o = nb_adamw_defaults(0.1);
    o.weight_decay = 0.5;
    for (int decay_1d = 0; decay_1d < 2; decay_1d++) {
        for (size_t i = 0; i < 4; i++) nb_set(w, i, 1.0);
        for (size_t i = 0; i < 2; i++) nb_set(b, i, 1.0);
        nb_optim *opt = nb_adamw_new_groups(p, &l, o, decay_1d);
        ck_assert_ptr_nonnull(opt);
        /* zero gradients: Adam's update is 0, only the decay moves p */
        ck_assert_int_eq(nb_optim_step(opt), NB_OK);
        ck_assert_double_eq(nb_get(w, 0), 1.0 * (1.0 - 0.1 * 0.5));
        ck_assert_double_eq(nb_get(b, 0), decay_1d ? 0.95 : 1.0);
        nb_optim_free(opt);
    }
    nb_ctx_free(p);
}
END_TEST

/* ---- loading, summary, errors -------------------------------------------------- */

START_TEST(test_config_from_state_dict) {
    nb_ctx *f = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_tensor_list sd = {0};
    ck_assert_int_eq(nb_load_safetensors(f, GPT_DIR "init_nanogpt_nobias.safetensors", &sd), NB_OK);
    nb_gpt_config c;
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, &sd, 2, &c), NB_OK);
    ck_assert_int_eq(c.arch, NB_GPT_NANOGPT);
    ck_assert_int_eq(c.vocab_size, 13);
    ck_assert_int_eq(c.block_size, 8);
    ck_assert_int_eq(c.n_layer, 2);
    ck_assert_int_eq(c.n_embd, 8);
    ck_assert(!c.bias);
    ck_assert_int_eq(c.dtype, NB_F64);
    nb_tensor_list sd2 = {0};
    ck_assert_int_eq(nb_load_safetensors(f, GPT_DIR "init_gptmodel_qkv.safetensors", &sd2), NB_OK);
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, &sd2, 2, &c), NB_OK);
    ck_assert_int_eq(c.arch, NB_GPT_GPTMODEL);
    ck_assert(c.qkv_bias);
    /* n_head that does not divide n_embd */
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_from_state_dict(p, &m, &sd2, 3, 0.0, NB_F32, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_embd 8 is not divisible by n_head 3");
    nb_ctx_clear_error(p);
    /* nanoGPT: lm_head.weight must be wte's values (tied) */
    nb_tensor_list sd3 = {0};
    ck_assert_int_eq(nb_load_safetensors(f, GPT_DIR "init_nanogpt_bias.safetensors", &sd3), NB_OK);
    ck_assert_int_eq(nb_gpt_from_state_dict(p, &m, &sd3, 2, 0.0, NB_F64, NULL), NB_OK);
    ck_assert_double_eq(nb_get(m.wte, 5), nb_get(nb_list_get(&sd3, "lm_head.weight"), 5));
    nb_set(nb_list_get(&sd3, "lm_head.weight"), 5, 0.5);
    ck_assert_int_eq(nb_gpt_load_state_dict(&m, &sd3), NB_ERR_FORMAT);
    ck_assert_error_has(p, "lm_head.weight differs from transformer.wte.weight at 5");
    nb_ctx_clear_error(p);
    /* a list that is no GPT */
    nb_tensor_list bad = {0};
    nb_list_add(&bad, "weight", sd.t[0]);
    ck_assert_int_eq(nb_gpt_config_from_state_dict(p, &bad, 2, &c), NB_ERR_FORMAT);
    ck_assert_error_has(p, "tok_emb.weight");
    nb_ctx_free(p);
    nb_ctx_free(f);
}
END_TEST

START_TEST(test_forward_errors) {
    nb_ctx *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = tiny_config(NB_GPT_GPTMODEL, NB_F32);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    int64_t ids[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    ck_assert_ptr_null(nb_gpt_forward(s, &m, ids_from(s, 1, 9, ids)));
    ck_assert_error_has(s, "ids is i64 (1, 9); expected i64 (B, T) with T <= 8");
    nb_ctx_reset(s);
    ids[2] = 11;
    ck_assert_ptr_null(nb_gpt_forward(s, &m, ids_from(s, 1, 3, ids)));
    ck_assert_error_has(s, "ids[2] = 11 is outside [0, vocab_size 11)");
    nb_ctx_reset(s);
    ck_assert_ptr_null(nb_gpt_forward(s, &m, NULL));
    ck_assert_error_has(s, "ids is NULL");
    nb_ctx_reset(s);
    ck_assert_ptr_null(nb_gpt_forward(s, NULL, NULL));
    ck_assert_error_has(s, "model is NULL");
    c.dropout = 0.1;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "dropout 0.1 needs an rng");
    nb_ctx_clear_error(p);
    c.dropout = 0, c.n_layer = 0;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_layer 0 must be positive");
    int64_t out[4];
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_generate(p, NULL, ids, 1, &o, out, NULL), NB_ERR_NULL);
    nb_ctx_free(s);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_summary_text) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    nb_gpt_config c = tiny_config(NB_GPT_GPTMODEL, NB_F32);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &c, &rng), NB_OK);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nb_gpt_summary(&m, f);
    fclose(f);
    /* 88 + 64 + 2 * (3*64 + 64+8 + 256+32 + 256+8 + 32) + 16 + 88 = 1952 */
    ck_assert_int_eq(nb_gpt_num_params(&m, false), 1952);
    ck_assert_msg(strstr(buf, "Total number of parameters: 1,952\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "considering weight tying: 1,864\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "Total size of the model: 0.01 MB\n"), "%s", buf);
    ck_assert_msg(strstr(buf, "trf_blocks.0.att.W_query"), "%s", buf);
    ck_assert_msg(!strstr(buf, "trf_blocks.1.att"), "%s", buf);
    free(buf);
    nb_ctx_free(p);
}
END_TEST

Suite *suite_gpt(void) {
    Suite *s = suite_create("gpt");
    TCase *tc = tcase_create("parity");
    tcase_add_loop_test(tc, test_parity_f64, 0, 4);
    tcase_add_loop_test(tc, test_parity_f32, 0, 4);
    tcase_add_loop_test(tc, test_second_order_vs_torch, 0, 4);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("model");
    tcase_add_test(tm, test_gptmodel_names);
    tcase_add_test(tm, test_nanogpt_names_tied_init);
    tcase_add_test(tm, test_tied_gradient_is_sum);
    tcase_add_test(tm, test_cache_matches_full_gptmodel);
    tcase_add_test(tm, test_cache_matches_full_nanogpt);
    tcase_add_test(tm, test_generate_cache_same_tokens);
    tcase_add_test(tm, test_cached_logits_threads_identical);
    tcase_add_test(tm, test_config_from_state_dict);
    tcase_add_test(tm, test_forward_errors);
    tcase_add_test(tm, test_summary_text);
    suite_add_tcase(s, tm);
    TCase *tt = tcase_create("training");
    tcase_add_test(tt, test_accumulation_equals_big_batch);
    tcase_add_test(tt, test_train_step_errors);
    tcase_add_test(tt, test_train_step_recycles_grads);
    tcase_add_test(tt, test_lr_schedule_formula);
    tcase_add_test(tt, test_adamw_groups);
    suite_add_tcase(s, tt);
    return s;
}
