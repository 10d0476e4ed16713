/* check_gpt_arch_parity.c - the Llama 3, Qwen3 and Qwen3-MoE families against
 * PyTorch's reference models (tools/ref/arch_ref.py), from the model
 * directories and runs tools/ref/gen_arch_fixtures.py writes into
 * tests/fixtures/arch/ (six tiny models: each family in the course's layout
 * with cfg.json and in Hugging Face's with config.json; head_dim != C/H,
 * 1 and 2 key/value heads, Llama 3 RoPE scaling, tied heads, top-2 of 4
 * experts, a sliding window). Every model is read by nb_gpt_load, as a user would:
 *   - the config read from the file beside the weights;
 *   - the logits of one batch, float64 within 1e-10 and float32 within 1e-5;
 *   - 20 AdamW steps (nanoGPT's loop: schedule, clipping, accumulation):
 *     every loss and final weight;
 *   - the gradient and the gradient of the squared gradient (float64);
 * and through the nabla-gpt program (`train --init_from=DIR/model.safetensors
 * --batches=FILE`): 20 steps of --optimizer=muon on both Llama 3 models, and
 * the 5-step fine-tunes of the Hugging Face-layout Llama 3 and Qwen3; and
 * nabla-gpt bench's FLOP count for these families (make bench-gpt's rows). */
#include "gpt_run.h"

#define ARCH_DIR NB_SOURCE_DIR "/tests/fixtures/arch/"

/* What each model directory must load as (its config file's values). */
typedef struct arch_case {
    const char *name;
    nb_gpt_arch arch;
    bool hf_names, tie_head, qk_norm, rope_scaled;
    int n_head, n_kv_head, n_expert, n_expert_per_tok;
    int64_t n_embd, head_dim;
    double norm_eps, rope_theta;
    int64_t window;
} arch_case;

static const arch_case CASES[] = {
    {"llama3_course", NB_GPT_LLAMA3, false, false, false, true, 2, 1, 0, 0, 16, 8, 1e-5, 1e4, 0},
    {"llama3_hf", NB_GPT_LLAMA3, true, true, false, true, 4, 2, 0, 0, 16, 4, 1e-5, 5e5, 0},
    {"qwen3_course", NB_GPT_QWEN3, false, false, true, false, 4, 2, 0, 0, 12, 6, 1e-6, 1e6, 0},
    {"qwen3_hf", NB_GPT_QWEN3, true, true, true, false, 2, 1, 0, 0, 16, 12, 1e-6, 1e6, 0},
    {"qwen3moe_course", NB_GPT_QWEN3, false, false, true, false, 4, 2, 4, 2, 12, 4, 1e-6, 1e6, 0},
    {"qwen3moe_hf", NB_GPT_QWEN3, true, false, true, false, 2, 1, 4, 2, 16, 8, 1e-6, 1e6, 4},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* ---- helpers ----------------------------------------------------------------------- */

/* The value of "--key=" in an args string (copied into buf), or NULL. */
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

/* Loads ARCH_DIR<model>/<file> with its "args" metadata (copied into args). */
static void load_run(nb_ctx *c, const char *model, const char *file, nb_tensor_list *out,
                     char *args, size_t n) {
    char path[512];
    const char *keys[8], *vals[8];
    int n_meta = 0;
    snprintf(path, sizeof path, ARCH_DIR "%s/%s", model, file);
    ck_assert_msg(nb_load_safetensors_meta(c, path, out, 8, &n_meta, keys, vals) == NB_OK, "%s",
                  nb_ctx_error(c));
    args[0] = '\0';
    for (int i = 0; i < n_meta && i < 8; i++)
        if (!strcmp(keys[i], "args")) snprintf(args, n, "%s", vals[i]);
}

/* nb_gpt_load of the case's directory, in dtype dt, its config checked. */
static void load_model(nb_ctx *pctx, nb_gpt *m, const arch_case *k, nb_dtype dt) {
    char path[512];
    snprintf(path, sizeof path, ARCH_DIR "%s/model.safetensors", k->name);
    ck_assert_msg(nb_gpt_load(pctx, m, path, 0.0, dt, NULL) == NB_OK, "%s: %s", k->name,
                  nb_ctx_error(pctx));
    const nb_gpt_config *c = &m->cfg;
    ck_assert_msg(c->arch == k->arch && c->hf_names == k->hf_names && c->tie_head == k->tie_head &&
                      c->qk_norm == k->qk_norm && c->rope_scaled == k->rope_scaled,
                  "%s: family, names, tie, qk_norm or rope scaling read wrong", k->name);
    ck_assert_int_eq(c->n_layer, 2);
    ck_assert_int_eq(c->vocab_size, 19);
    ck_assert_int_eq(c->block_size, 8);
    ck_assert_int_eq(c->n_head, k->n_head);
    ck_assert_int_eq(c->n_kv_head ? c->n_kv_head : c->n_head, k->n_kv_head); /* 0: n_head */
    ck_assert_int_eq(c->n_embd, k->n_embd);
    ck_assert_int_eq(c->head_dim ? c->head_dim : c->n_embd / c->n_head, k->head_dim);
    ck_assert_int_eq(c->n_expert, k->n_expert);
    ck_assert_int_eq(c->n_expert_per_tok, k->n_expert_per_tok);
    ck_assert_double_eq(c->norm_eps, k->norm_eps);
    ck_assert_double_eq(c->rope_theta, k->rope_theta);
    ck_assert_int_eq(c->window, k->window);
    ck_assert_int_eq(c->dtype, dt);
}

static nb_tensor *ids_row(nb_ctx *ctx, const nb_tensor *x, int64_t it, int64_t row0,
                          int64_t rows) {
    int64_t B = x->shape[1], T = x->shape[2];
    const int64_t *p = (const int64_t *)x->data + (it * B + row0) * T;
    return nb_from_data(ctx, NB_I64, NB_SHAPE(rows, T), p);
}

/* Every parameter of m against the tensor of the same name in want (a tied
 * head is one parameter, stored once); returns the largest |difference|
 * and checks it is <= tol. want holds nothing else but `extra` entries. */
static double compare_params(const char *what, const nb_tensor_list *got,
                             const nb_tensor_list *want, int extra, double tol) {
    double worst = 0;
    for (int i = 0; i < got->n; i++) {
        const char *name = nb_list_name(got, i);
        const nb_tensor *a = nb_list_tensor(got, i), *b = nb_list_get(want, name);
        ck_assert_msg(b && b->numel == a->numel, "%s: %s missing or misshapen", what, name);
        for (size_t j = 0; j < a->numel; j++) {
            double e = fabs(nb_get(a, j) - nb_get(b, j));
            worst = fmax(worst, e);
            ck_assert_msg(e <= tol, "%s: %s[%zu] = %.17g, PyTorch %.17g", what, name, j,
                          nb_get(a, j), nb_get(b, j));
        }
    }
    ck_assert_msg(got->n + extra == want->n, "%s: %d parameters, PyTorch's run has %d", what,
                  got->n, want->n - extra);
    return worst;
}

static bool verbose(void) { return getenv("NB_GPT_PARITY_VERBOSE") != NULL; }

/* ---- logits -------------------------------------------------------------------------- */

START_TEST(test_logits) {
    const arch_case *k = &CASES[_i / 2];
    nb_dtype dt = _i % 2 ? NB_F32 : NB_F64;
    nb_ctx *files = nb_ctx_new(0), *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor_list want = {0}, batches = {0};
    char args[1024];
    load_run(files, k->name, dt == NB_F64 ? "adamw_f64.safetensors" : "adamw_f32.safetensors",
             &want, args, sizeof args);
    ck_assert_int_eq(nb_load_safetensors(files, ARCH_DIR "batches.safetensors", &batches), NB_OK);
    nb_gpt m;
    load_model(pctx, &m, k, dt);
    const nb_tensor *x = nb_list_get(&batches, "x"), *ref = nb_list_get(&want, "logits");
    ck_assert_ptr_nonnull(ref);
    nb_tensor *logits = nb_gpt_infer(step, &m, ids_row(step, x, 0, 0, x->shape[1]));
    ck_assert_msg(logits, "%s: %s", k->name, nb_ctx_error(step));
    ck_assert_uint_eq(logits->numel, ref->numel);
    ck_assert_int_eq(logits->ndim, 3);
    ck_assert_int_eq(logits->shape[2], 19);
    double tol = dt == NB_F64 ? 1e-10 : 1e-5, worst = 0;
    for (size_t j = 0; j < ref->numel; j++) {
        double e = fabs(nb_get(logits, j) - nb_get(ref, j));
        worst = fmax(worst, e);
        ck_assert_msg(e <= tol * fmax(1.0, fabs(nb_get(ref, j))), "%s %s: logits[%zu] = %.17g, "
                      "PyTorch %.17g", k->name, dt == NB_F64 ? "f64" : "f32", j,
                      nb_get(logits, j), nb_get(ref, j));
    }
    if (verbose())
        fprintf(stderr, "%s %s logits: max abs err %.2g\n", k->name, dt == NB_F64 ? "f64" : "f32",
                worst);
    nb_gpt_free(&m);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    nb_ctx_free(files);
}
END_TEST

/* ---- 20 AdamW steps ----------------------------------------------------------------- */

typedef struct replay {
    nb_gpt *m;
    const nb_tensor *x, *y; /* (N, B, T) */
    int64_t it, rows;
} replay;

static nb_tensor *micro_loss(nb_ctx *ctx, int micro, void *user) {
    replay *r = user;
    return nb_gpt_loss(ctx, r->m, ids_row(ctx, r->x, r->it, micro * r->rows, r->rows),
                       ids_row(ctx, r->y, r->it, micro * r->rows, r->rows), NULL);
}

START_TEST(test_adamw_steps) {
    const arch_case *k = &CASES[_i / 2];
    nb_dtype dt = _i % 2 ? NB_F32 : NB_F64;
    const char *dname = dt == NB_F64 ? "f64" : "f32";
    nb_ctx *files = nb_ctx_new(0), *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor_list want = {0}, batches = {0};
    char args[1024];
    load_run(files, k->name, dt == NB_F64 ? "adamw_f64.safetensors" : "adamw_f32.safetensors",
             &want, args, sizeof args);
    ck_assert_int_eq(nb_load_safetensors(files, ARCH_DIR "batches.safetensors", &batches), NB_OK);
    nb_gpt m;
    load_model(pctx, &m, k, dt);
    nb_adam_opts o = nb_adamw_defaults(argd(args, "learning_rate"));
    o.beta1 = argd(args, "beta1"), o.beta2 = argd(args, "beta2");
    o.weight_decay = argd(args, "weight_decay");
    nb_optim *opt = nb_adamw_new_groups(pctx, &m.params, o, argb(args, "weight_decay_1d"));
    ck_assert_ptr_nonnull(opt);
    nb_lr_schedule sch = {argd(args, "learning_rate"), argb(args, "decay_lr"),
                          (int64_t)argd(args, "warmup_iters"),
                          (int64_t)argd(args, "lr_decay_iters"), argd(args, "min_lr")};
    int acc = (int)argd(args, "gradient_accumulation_steps");
    const nb_tensor *x = nb_list_get(&batches, "x"), *y = nb_list_get(&batches, "y");
    const nb_tensor *loss = nb_list_get(&want, "loss"), *lr = nb_list_get(&want, "lr");
    ck_assert_uint_eq(loss->numel, 20);
    replay r = {&m, x, y, 0, x->shape[1] / acc};
    nb_train_step s = {opt, &m.params, acc, argd(args, "grad_clip"), 0, micro_loss, &r, NULL, NULL};
    double loss_tol = dt == NB_F64 ? 1e-10 : 1e-5, w_tol = dt == NB_F64 ? 1e-10 : 1e-5;
    double worst_loss = 0;
    for (int64_t it = 0; it < (int64_t)loss->numel; it++) {
        r.it = it;
        s.lr = nb_lr_at(&sch, it);
        ck_assert_double_eq_tol(s.lr, nb_get(lr, (size_t)it), 1e-15);
        nb_step_result res;
        ck_assert_msg(nb_train_step_run(step, &s, &res) == NB_OK, "%s: %s", k->name,
                      nb_ctx_error(step));
        double w = nb_get(loss, (size_t)it), e = fabs(res.loss - w) / fabs(w);
        worst_loss = fmax(worst_loss, e);
        ck_assert_msg(e <= loss_tol, "%s %s iter %lld: loss %.17g, PyTorch %.17g", k->name, dname,
                      (long long)it, res.loss, w);
    }
    double worst = compare_params(k->name, &m.params, &want, 3, w_tol);
    if (verbose())
        fprintf(stderr, "%s adamw %s: max loss rel err %.2g, max weight abs err %.2g\n", k->name,
                dname, worst_loss, worst);
    nb_optim_free(opt);
    nb_gpt_free(&m);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    nb_ctx_free(files);
}
END_TEST

/* ---- second order --------------------------------------------------------------------
 * grad2.safetensors: on batch 0, float64, grad = d loss / d params with
 * create_graph, grad2 = d (sum of every grad squared) / d params. */

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

START_TEST(test_second_order) {
    const arch_case *k = &CASES[_i];
    nb_ctx *files = nb_ctx_new(0), *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor_list want = {0}, batches = {0};
    char args[1024];
    load_run(files, k->name, "grad2.safetensors", &want, args, sizeof args);
    ck_assert_int_eq(nb_load_safetensors(files, ARCH_DIR "batches.safetensors", &batches), NB_OK);
    nb_gpt m;
    load_model(pctx, &m, k, NB_F64);
    const nb_tensor *x = nb_list_get(&batches, "x"), *y = nb_list_get(&batches, "y");
    nb_tensor *loss = nb_gpt_loss(step, &m, ids_row(step, x, 0, 0, x->shape[1]),
                                  ids_row(step, y, 0, 0, y->shape[1]), NULL);
    ck_assert_msg(loss, "%s: %s", k->name, nb_ctx_error(step));
    double wl = nb_get(nb_list_get(&want, "loss"), 0);
    ck_assert_msg(fabs(nb_item(loss) - wl) <= 1e-12 * fabs(wl), "%s: loss %.17g, PyTorch %.17g",
                  k->name, nb_item(loss), wl);
    int n = m.params.n;
    ck_assert_int_eq(2 * n + 1, want.n);
    nb_tensor **g = calloc((size_t)n, sizeof *g);
    nb_grad_opts go = {.create_graph = true};
    ck_assert_msg(nb_grad(step, 1, &loss, NULL, n, m.params.t, &go, g) == NB_OK, "%s: %s",
                  k->name, nb_ctx_error(step));
    nb_tensor *total = NULL;
    for (int i = 0; i < n; i++) {
        nb_tensor *sq = nb_sum(step, nb_mul(step, g[i], g[i]));
        total = total ? nb_add(step, total, sq) : sq;
    }
    ck_assert_msg(nb_backward(step, total, NULL) == NB_OK, "%s: %s", k->name, nb_ctx_error(step));
    double worst1 = 0, worst2 = 0;
    for (int i = 0; i < n; i++) {
        char key[192];
        const char *name = nb_list_name(&m.params, i);
        snprintf(key, sizeof key, "grad.%s", name);
        const nb_tensor *w1 = nb_list_get(&want, key);
        snprintf(key, sizeof key, "grad2.%s", name);
        const nb_tensor *w2 = nb_list_get(&want, key);
        ck_assert_msg(w1 && w2, "%s: no %s in the fixture", k->name, key);
        nb_tensor *p = nb_list_tensor(&m.params, i);
        ck_assert_ptr_nonnull(p->grad);
        double e1 = rel_err(g[i], false, w1), e2 = rel_err(p, true, w2);
        ck_assert_msg(e1 <= 1e-10 && e2 <= 1e-10, "%s: %s: first order %.3g, second %.3g", k->name,
                      name, e1, e2);
        worst1 = fmax(worst1, e1), worst2 = fmax(worst2, e2);
    }
    if (verbose())
        fprintf(stderr, "%s grad2: worst rel err %.2g (first), %.2g (second)\n", k->name, worst1,
                worst2);
    free(g);
    nb_gpt_free(&m);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    nb_ctx_free(files);
}
END_TEST

/* ---- through nabla-gpt: Muon and the fine-tunes --------------------------------------- */

/* The per-iteration losses of a log.jsonl, in order; returns the count. */
static int read_losses(const char *dir, double *loss, int max) {
    char path[256], buf[65536];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    nb_test_read_text(path, buf, sizeof buf);
    int n = 0;
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        int it;
        double a;
        if (sscanf(l, "{\"iter\": %d, \"loss\": %lf", &it, &a) == 2 && n < max) {
            ck_assert_int_eq(it, n);
            loss[n++] = a;
        }
    }
    return n;
}

/* `nabla-gpt train --init_from=<model>/model.safetensors --batches=...` with
 * the run's args, its losses and saved weights against PyTorch's. */
static void tool_run(const char *model, const char *run, bool f64) {
    char file[64], args[1024], cmd[4096];
    snprintf(file, sizeof file, "%s_%s.safetensors", run, f64 ? "f64" : "f32");
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor_list want = {0}, got = {0};
    load_run(c, model, file, &want, args, sizeof args);
    ck_assert(args[0]);
    bool finetune = !strcmp(run, "finetune");
    gpt_run r;
    gpt_run_init(&r);
    snprintf(cmd, sizeof cmd, "train --init_from=" ARCH_DIR "%s/model.safetensors --batches="
             ARCH_DIR "%s --out_dir=%%D/out %s", model,
             finetune ? "finetune_batches.safetensors" : "batches.safetensors", args);
    gpt_exec(&r, cmd);
    ck_assert_msg(r.status == 0, "%s %s: exit %d: %s", model, file, r.status, r.err);
    char out[128], path[192];
    snprintf(out, sizeof out, "%s/out", r.dir);
    double loss[64];
    const nb_tensor *wl = nb_list_get(&want, "loss");
    int n = read_losses(out, loss, 64);
    ck_assert_int_eq(n, (int)wl->numel);
    double tol = f64 ? 1e-10 : 1e-5, worst_loss = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        double w = nb_get(wl, (size_t)i), e = fabs(loss[i] - w) / fabs(w);
        worst_loss = fmax(worst_loss, e);
        ck_assert_msg(e <= tol, "%s %s iter %d: loss %.17g, PyTorch %.17g", model, file, i,
                      loss[i], w);
    }
    /* the saved model: every weight of PyTorch's run, nothing else */
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    ck_assert_msg(nb_load_safetensors(c, path, &got) == NB_OK, "%s", nb_ctx_error(c));
    int compared = 0;
    for (int i = 0; i < want.n; i++) {
        const char *name = nb_list_name(&want, i);
        if (!strcmp(name, "loss") || !strcmp(name, "lr")) continue;
        const nb_tensor *g = nb_list_get(&got, name), *w = nb_list_tensor(&want, i);
        ck_assert_msg(g && g->numel == w->numel, "%s %s: %s missing or misshapen", model, file,
                      name);
        for (size_t j = 0; j < w->numel; j++) {
            double e = fabs(nb_get(g, j) - nb_get(w, j));
            worst = fmax(worst, e);
            ck_assert_msg(e <= tol, "%s %s: %s[%zu] = %.17g, PyTorch %.17g", model, file, name, j,
                          nb_get(g, j), nb_get(w, j));
        }
        compared++;
    }
    /* nabla-gpt's model.safetensors is the state_dict: a tied head is
     * there twice (lm_head.weight beside model.embed_tokens.weight, as
     * nanoGPT saves its own), where PyTorch's run lists it once */
    for (int i = 0; i < got.n; i++) {
        const char *name = nb_list_name(&got, i);
        if (nb_list_get(&want, name)) continue;
        const nb_tensor *g = nb_list_tensor(&got, i),
                        *emb = nb_list_get(&got, "model.embed_tokens.weight");
        ck_assert_msg(!strcmp(name, "lm_head.weight") && emb && emb->numel == g->numel &&
                          !nb_list_get(&want, "lm_head.weight"),
                      "%s %s: %s is not in PyTorch's run", model, file, name);
        for (size_t j = 0; j < g->numel; j++) ck_assert(nb_get(g, j) == nb_get(emb, j));
        compared++;
    }
    ck_assert_int_eq(compared, got.n);
    if (verbose())
        fprintf(stderr, "%s %s: max loss rel err %.2g, max weight abs err %.2g\n", model, file,
                worst_loss, worst);
    gpt_run_done(&r);
    nb_ctx_free(c);
}

/* 20 steps of --optimizer=muon (Muon on the blocks' matrices, AdamW on
 * tok_emb, the head and the gains), course and Hugging Face names. */
static const char *const MUON_MODELS[] = {"llama3_course", "llama3_hf"};

START_TEST(test_muon_steps) { tool_run(MUON_MODELS[_i / 2], "muon", _i % 2 == 0); }
END_TEST

/* docs' fine-tune path: a Hugging Face directory straight into `train`. */
static const char *const FINETUNE_MODELS[] = {"llama3_hf", "qwen3_hf"};

START_TEST(test_finetune_steps) { tool_run(FINETUNE_MODELS[_i / 2], "finetune", _i % 2 == 0); }
END_TEST

/* nabla-gpt bench's FLOP count (make bench-gpt's GFLOP/s) for a Qwen3-MoE:
 * 1 layer, C 48, 4 heads of 16 (2 kv heads), top-2 of 8 experts of 24,
 * vocab 65, 4 x 64 tokens. Matmul weights a token runs through:
 * q and o 2 * 48 * 64, k and v 2 * 48 * 32, router 48 * 8, two experts
 * 2 * 3 * 48 * 24, head 65 * 48 = 19632 (no position table; the 6 idle
 * experts not counted), so 6 * 19632 * 256 + 12 * 4 * 64^2 * 64 for
 * attention (of width 4 * 16) = 42737664. */
START_TEST(test_bench_flops_moe) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_exec(&r, "bench --arch=qwen3 --n_layer=1 --n_head=4 --n_kv_head=2 --n_embd=48 --head_dim=16 "
                 "--vocab_size=65 --block_size=70 --batch_size=4 --seq_len=64 --qk_norm=True "
                 "--n_expert=8 --n_expert_per_tok=2 --moe_hidden_dim=24 --max_iters=1 --rounds=1 "
                 "--sample=False");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "gflop_per_step=0.0427377 "), "%s", r.out);
    gpt_run_done(&r);
}
END_TEST

Suite *suite_gpt_arch_parity(void) {
    Suite *s = suite_create("gpt_arch_parity");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_logits, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_adamw_steps, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_second_order, 0, N_CASES);
    tcase_add_loop_test(tc, test_muon_steps, 0, 4);
    tcase_add_loop_test(tc, test_finetune_steps, 0, 4);
    tcase_add_test(tc, test_bench_flops_moe);
    suite_add_tcase(s, tc);
    return s;
}
