/* check_teach.c - the teaching views: the Graphviz dump of the tape, and the
 * teach_backprop walkthrough (its gradients checked against PyTorch 1.13:
 * W.grad = [[0.1786, -0.1534], [0.0540, -0.0919], [-0.0951, 0.1714]],
 * L = 0.5708862293275434). */
#include "check_nabla.h"
#include "tape/tape_internal.h"

#include <sys/wait.h>
#include <unistd.h>

static nb_status dot_view(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_dot(ctx, root, f);
}

/* What a view function writes, as a string (free it). */
static char *view_of(nb_status (*view)(nb_ctx *, const nb_tensor *, FILE *), nb_ctx *ctx,
                     const nb_tensor *root) {
    static char *buf; /* static: gcc takes a local's address for a dangling pointer */
    static size_t len;
    buf = NULL, len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(view(ctx, root, f), NB_OK);
    fclose(f);
    return buf;
}

static char *dot_of(nb_ctx *ctx, const nb_tensor *root) { return view_of(dot_view, ctx, root); }

START_TEST(test_tape_dot_draws_ops_tensors_and_grads) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){1, -2}));
    x->name = "x";
    NB_HERE(ctx);
    nb_tensor *y = nb_mul(ctx, x, x);
    nb_tensor *s = nb_sum(ctx, y);
    ck_assert_int_eq(nb_backward(ctx, s, NULL), NB_OK);
    char *dot = dot_of(ctx, s);
    ck_assert_ptr_nonnull(strstr(dot, "digraph tape {"));
    ck_assert_ptr_nonnull(strstr(dot, "#0 mul\\ncheck_teach.c:"));
    ck_assert_ptr_nonnull(strstr(dot, "#1 sum"));
    ck_assert_ptr_nonnull(strstr(dot, "x | (2) f64 | data [1.0000, -2.0000] | grad [2.0000, -4.0000]"));
    ck_assert_ptr_nonnull(strstr(dot, "() f64 | data [5.0000] | grad [1.0000]"));
    /* x feeds mul twice: two edges from one box */
    const char *edge = "t0 -> op0;";
    char *first = strstr(dot, edge);
    ck_assert_ptr_nonnull(first);
    ck_assert_ptr_nonnull(strstr(first + 1, edge));
    free(dot);
    /* root limits the picture to the ops it depends on */
    dot = dot_of(ctx, y);
    ck_assert_ptr_null(strstr(dot, "#1 sum"));
    free(dot);
    ck_assert_int_eq(nb_tape_dot(NULL, NULL, stdout), NB_ERR_NULL);
    ck_assert_int_eq(nb_tape_dot(ctx, NULL, NULL), NB_ERR_NULL);
    nb_ctx_free(ctx);
}
END_TEST

/* Defect: parameters were drawn as bare "weight"/"bias". They carry their
 * state_dict path, nested prefixes included (a GPT's
 * transformer.h.0.mlp.c_fc.weight). */
START_TEST(test_tape_dot_names_parameters_by_module_path) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 2);
    nb_nn_mha mha;
    ck_assert_int_eq(nb_nn_mha_init(params, &mha, 3, 2, 4, 0.0, 2, true, NB_F64, &rng), NB_OK);
    nb_tensor *x = nb_normal(step, NB_F64, NB_SHAPE(1, 4, 3), 0, 1, &rng);
    nb_tensor *y = nb_sum(step, nb_nn_mha_forward(step, &mha, x));
    ck_assert_ptr_nonnull(y);
    char *dot = dot_of(step, y);
    ck_assert_ptr_nonnull(strstr(dot, "{W_query.weight | (2, 3) f64"));
    ck_assert_ptr_nonnull(strstr(dot, "{out_proj.bias | (2) f64"));
    ck_assert_ptr_null(strstr(dot, "{weight |"));
    ck_assert_ptr_null(strstr(dot, "{bias |"));
    free(dot);
    char *trace = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&trace, &len);
    nb_tape_print(step, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(trace, "linear        (1, 4, 3), W_query.weight (2, 3)*, W_query.bias (2)* -> (1, 4, 2)"));
    ck_assert_ptr_nonnull(strstr(trace, "out_proj.weight (2, 2)*, out_proj.bias (2)*"));
    free(trace);

    nb_nn_linear fc;
    nb_tensor_list mlp = {0}, block = {0}, model = {0};
    ck_assert_int_eq(nb_nn_linear_init(params, &fc, 2, 3, true, NB_F32, &rng), NB_OK);
    ck_assert_int_eq(nb_params_add_prefixed(params, &mlp, "c_fc", &fc.params), NB_OK);
    ck_assert_int_eq(nb_params_add_prefixed(params, &block, "mlp", &mlp), NB_OK);
    ck_assert_int_eq(nb_params_add_prefixed(params, &model, "transformer.h.0", &block), NB_OK);
    ck_assert_str_eq(fc.weight->name, "transformer.h.0.mlp.c_fc.weight");
    ck_assert_str_eq(model.names[1], "transformer.h.0.mlp.c_fc.bias");
    ck_assert_str_eq(fc.bias->name, model.names[1]);

    /* nanoGPT's layout, drawn: the full path on every parameter */
    nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_NANOGPT);
    cfg.vocab_size = 5, cfg.block_size = 4, cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 4;
    cfg.dtype = NB_F64;
    nb_gpt gpt;
    ck_assert_int_eq(nb_gpt_init(params, &gpt, &cfg, &rng), NB_OK);
    nb_ctx_reset(step);
    nb_tensor *ids = nb_from_doubles(step, NB_I64, NB_SHAPE(1, 3), (double[]){1, 4, 2});
    nb_tensor *tg = nb_from_doubles(step, NB_I64, NB_SHAPE(1, 3), (double[]){4, 2, 0});
    nb_tensor *loss = nb_gpt_loss(step, &gpt, ids, tg, NULL);
    ck_assert_int_eq(nb_backward(step, loss, NULL), NB_OK);
    dot = dot_of(step, loss);
    ck_assert_ptr_nonnull(strstr(dot, "{transformer.h.0.mlp.c_fc.weight | (16, 4) f64"));
    ck_assert_ptr_nonnull(strstr(dot, "{transformer.h.0.attn.c_attn.weight | (12, 4) f64"));
    free(dot);
    nb_gpt_free(&gpt);
    nb_ctx_free(step), nb_ctx_free(params);
}
END_TEST

/* The page is self-contained, carries every op's rule, and what each step
 * sends is the local rule's share: for y = x * x + x, mul sends 2x·dout
 * (once, x being both inputs) and add sends dout; x's own gradient is left
 * as backward made it. */
START_TEST(test_tape_html_is_self_contained_and_steps) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){3, -0.5}));
    x->name = "x";
    nb_tensor *s = nb_sum(ctx, nb_add(ctx, nb_mul(ctx, x, x), x));
    ck_assert_int_eq(nb_backward(ctx, s, NULL), NB_OK);
    /* the default page carries the build's elkjs (make installs it), one
     * file still; NB_LAYOUT_JS names another, or (empty) none */
    char elk[4096];
    const char *elk_dir = getenv("ELK_DIR"); /* make's; else the build's own */
    if (elk_dir && *elk_dir)
        snprintf(elk, sizeof elk, "%s/node_modules/elkjs/lib/elk.bundled.js", elk_dir);
    else
        snprintf(elk, sizeof elk, "%s/elk/node_modules/elkjs/lib/elk.bundled.js",
                 nb_test_build_dir());
    FILE *ef = fopen(elk, "r");
    ck_assert_msg(ef != NULL, "%s: make installs elkjs", elk);
    fclose(ef);
    char *page = view_of(nb_tape_html, ctx, s);
    ck_assert_ptr_nonnull(strstr(page, "www.eclipse.org"));
    ck_assert_ptr_null(strstr(page, "<script src"));
    free(page);
    setenv("NB_LAYOUT_JS", "/nonexistent/elk.js", 1);
    FILE *nf = tmpfile();
    ck_assert_int_eq(nb_tape_html(ctx, s, nf), NB_ERR_IO);
    fclose(nf);
    ck_assert_str_eq(nb_ctx_error(ctx), "tape_html: cannot read the layout script "
                                        "/nonexistent/elk.js (named by NB_LAYOUT_JS)");
    nb_ctx_clear_error(ctx);
    setenv("NB_LAYOUT_JS", "", 1);
    page = view_of(nb_tape_html, ctx, s);
    unsetenv("NB_LAYOUT_JS");
    ck_assert_ptr_null(strstr(page, "www.eclipse.org"));
    ck_assert_ptr_nonnull(strstr(page, "<!DOCTYPE html>"));
    ck_assert_ptr_null(strstr(page, "<script src"));
    ck_assert_ptr_null(strstr(page, "<link"));
    ck_assert_ptr_null(strstr(page, "https:"));
    ck_assert_ptr_null(strstr(page, "@import"));
    ck_assert_ptr_nonnull(strstr(page, "\"formula\":\"dx = dout · y,  dy = dout · x\""));
    /* #0 mul(x, x) with dout = 1: 2x, once; the second input is the same */
    ck_assert_ptr_nonnull(strstr(page, "\"sends\":[[6,-1],null],\"same_as\":[-1,0]"));
    /* #1 add: dout to both inputs */
    ck_assert_ptr_nonnull(strstr(page, "\"sends\":[[1,1],[1,1]]"));
    ck_assert_ptr_nonnull(strstr(page, "\"name\":\"x\""));
    ck_assert_double_eq(nb_grad_get(x, 0), 7.0);
    ck_assert_double_eq(nb_grad_get(x, 1), 0.0);
    free(page);
    /* nothing reached by backward: no steps, still a page */
    nb_tensor *y = nb_exp(ctx, x);
    page = view_of(nb_tape_html, ctx, y);
    ck_assert_ptr_null(strstr(page, "\"index\":3,\"op\":\"exp\",\"formula\":\"dx = dout · out  (out = exp(x))\",\"site\":null,\"label\":\"exp\",\"scope\":null,\"call_site\":null,\"inputs\":[0],\"out\":4,\"sends\""));
    ck_assert_ptr_nonnull(strstr(page, "\"index\":3,\"op\":\"exp\""));
    free(page);
    /* a big tensor is summarized: its first 64 values and min, max, mean */
    nb_tensor *big = nb_requires_grad(nb_zeros(ctx, NB_F64, NB_SHAPE(10, 10)));
    for (size_t i = 0; i < 100; i++) nb_set(big, i, (double)i);
    nb_tensor *m = nb_mean(ctx, big);
    ck_assert_int_eq(nb_backward(ctx, m, NULL), NB_OK);
    page = view_of(nb_tape_json, ctx, m);
    ck_assert_ptr_nonnull(strstr(page, ",62,63],\"grad\":[0.01,"));
    ck_assert_ptr_nonnull(strstr(page, "\"truncated\":true,\"data_stats\":[0,99,49.5],\"grad_stats\":[0.01,0.01,0.01"));
    ck_assert_ptr_null(strstr(page, "\"sends\"")); /* the JSON alone has no steps */
    free(page);
    ck_assert_int_eq(nb_tape_json(NULL, s, stdout), NB_ERR_NULL);
    ck_assert_int_eq(nb_tape_html(NULL, s, stdout), NB_ERR_NULL);
    ck_assert_int_eq(nb_tape_html(ctx, s, NULL), NB_ERR_NULL);
    FILE *ro = fopen("/dev/null", "r"); /* writes fail: ferror */
    ck_assert_int_eq(nb_tape_html(ctx, s, ro), NB_ERR_IO);
    fclose(ro);
    nb_ctx_free(ctx);
}
END_TEST

/* Module scopes: the path of the enclosing pushes, the module's own line as
 * the site and the user's line beside it; the GPT names its scopes as its
 * state_dict does. */
static nb_tensor *scoped_f(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    NB_HERE(ctx);
    nb_ctx_push_scope(ctx, "h.0", "model.c", 10);
    nb_ctx_push_scope(ctx, "attn", "attn.c", 20);
    nb_tensor *y = nb_scale(ctx, in[0], 0.125);
    nb_ctx_pop_scope(ctx);
    nb_ctx_push_scope(ctx, NULL, "mlp.c", 30);
    y = nb_pow(ctx, y, 2.0);
    nb_ctx_pop_scope(ctx);
    nb_ctx_pop_scope(ctx);
    return nb_sum(ctx, y);
}

/* The GPT's ops carry their own library line and, as called from, the
 * user's line that called nb_gpt_loss (not a line of the library); without
 * NB_HERE there is no call site, and the page says so. */
START_TEST(test_library_ops_keep_the_users_call_site) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 5, 1);
    nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_NANOGPT);
    cfg.vocab_size = 7, cfg.block_size = 4, cfg.n_layer = 1, cfg.n_head = 2, cfg.n_embd = 4;
    cfg.dropout = 0.0, cfg.dtype = NB_F64;
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &cfg, &rng), NB_OK);
    nb_tensor *ids = nb_from_data(c, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, 2, 3});
    nb_tensor *tg = nb_from_data(c, NB_I64, NB_SHAPE(1, 3), (int64_t[]){2, 3, 4});
    char want[64];
    snprintf(want, sizeof want, "\"call_site\":\"%s:%d\"", __FILE__, __LINE__ + 1);
    NB_HERE(c); nb_tensor *L = nb_gpt_loss(c, &m, ids, tg, NULL);
    ck_assert_int_eq(nb_backward(c, L, NULL), NB_OK);
    char *page = view_of(nb_tape_json, c, L);
    /* every op: its own site in src/nn/, called from this file */
    int ops = 0, called = 0, any = 0;
    for (char *q = strstr(page, "\"formula\""); q; q = strstr(q + 1, "\"formula\"")) ops++;
    for (char *q = strstr(page, want); q; q = strstr(q + 1, want)) called++;
    for (char *q = strstr(page, "\"call_site\":\""); q; q = strstr(q + 1, "\"call_site\":\"")) any++;
    ck_assert_int_gt(ops, 10);
    ck_assert_int_eq(called, any);     /* no call site is a library line */
    ck_assert_int_ge(called, ops - 1); /* loss's view is recorded at this line itself */
    ck_assert_ptr_nonnull(strstr(page, "\"site\":\"src/nn/gpt_forward.c:"));
    ck_assert_ptr_null(strstr(page, "\"call_site\":\"src/"));
    /* the user's site is back after the call */
    nb_tensor *s = nb_sum(c, L);
    ck_assert_ptr_null(s->node->call_file);
    ck_assert_ptr_eq(s->node->file, __FILE__);
    free(page);
    /* no NB_HERE at all: no site, no call site */
    nb_ctx *c2 = nb_ctx_new(0);
    ids = nb_from_data(c2, NB_I64, NB_SHAPE(1, 3), (int64_t[]){1, 2, 3});
    nb_tensor *y = nb_gpt_forward(c2, &m, ids);
    ck_assert_ptr_nonnull(y);
    ck_assert_ptr_null(y->node->call_file);
    ck_assert_ptr_nonnull(strstr(y->node->file, "src/nn/gpt_forward.c"));
    nb_ctx_free(c2);
    nb_gpt_free(&m);
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_scopes_name_modules_and_sites) {
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){3, -0.5}));
    nb_tensor *in[1] = {x};
    nb_tensor *s = scoped_f(ctx, in, NULL);
    ck_assert_int_eq(nb_backward(ctx, s, NULL), NB_OK);
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    char *page = view_of(nb_tape_json, ctx, s);
    ck_assert_ptr_nonnull(strstr(page, "\"site\":\"attn.c:20\",\"label\":\"scale ×0.125\",\"scope\":\"h.0.attn\",\"call_site\":\"tests/check_teach.c:"));
    ck_assert_ptr_nonnull(strstr(page, "\"site\":\"mlp.c:30\",\"label\":\"pow ^2\",\"scope\":\"h.0\""));
    ck_assert_ptr_nonnull(strstr(page, "\"label\":\"sum\",\"scope\":null,\"call_site\":null"));
    free(page);
    /* too deep: an error, and the pops still match */
    for (int i = 0; i <= NB_SCOPE_MAX; i++) nb_ctx_push_scope(ctx, "m", "f.c", i);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    for (int i = 0; i <= NB_SCOPE_MAX; i++) nb_ctx_pop_scope(ctx);
    ck_assert_str_eq(nb_ctx_scope(ctx), "");
    nb_ctx_free(ctx);

    /* the GPT's ops in its state_dict's names */
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    for (int arch = 0; arch < 2; arch++) {
        nb_gpt g;
        nb_gpt_config cfg = {.arch = arch ? NB_GPT_NANOGPT : NB_GPT_GPTMODEL, .vocab_size = 5,
                             .block_size = 3, .n_layer = 2, .n_head = 1, .n_embd = 4,
                             .dtype = NB_F64};
        ck_assert_int_eq(nb_gpt_init(p, &g, &cfg, &rng), NB_OK);
        nb_tensor *ids = nb_zeros(c, NB_I64, NB_SHAPE(1, 3));
        nb_tensor *L = nb_gpt_loss(c, &g, ids, ids, NULL);
        ck_assert_int_eq(nb_backward(c, L, NULL), NB_OK);
        page = view_of(nb_tape_json, c, L);
        const char *want = arch ? "\"scope\":\"transformer.h.1.mlp.c_fc\""
                                : "\"scope\":\"trf_blocks.1.ff.layers.0\"";
        ck_assert_msg(strstr(page, want), "no %s", want);
        ck_assert_ptr_null(strstr(page, arch ? "trf_blocks" : "transformer"));
        free(page);
        nb_ctx_reset(c);
    }
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

/* "check this op": the page's checks pass for nabla's ops and fail for a
 * planted wrong backward. */
static void wrong_exp_backward(nb_ctx *ctx, nb_node *node) {
    nb_tensor *x = nb_node_input(node, 0), *y = nb_node_output(node);
    double *dx = nb_grad_buffer(ctx, x);
    for (size_t i = 0; dx && i < x->numel; i++) dx[i] += ((double *)y->grad)[i]; /* forgets exp */
}

static nb_tensor *wrong_f(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    nb_tensor *x = nb_mul(ctx, in[0], in[0]);
    nb_tensor *y = nb_empty(ctx, NB_F64, x->ndim, x->shape);
    for (size_t i = 0; i < x->numel; i++) ((double *)y->data)[i] = exp(((double *)x->data)[i]);
    nb_record(ctx, "exp_wrong", y, 1, &x, wrong_exp_backward, NULL);
    return nb_sum(ctx, y);
}

static nb_tape_html_opts *page_opts;
static nb_status html_ex(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_html_ex(ctx, root, page_opts, f);
}

START_TEST(test_tape_html_checks_each_op) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){0.3, -0.5, 1}));
    nb_tensor *in[1] = {x};
    nb_tensor *s = wrong_f(ctx, in, NULL);
    ck_assert_int_eq(nb_backward(ctx, s, NULL), NB_OK);
    nb_tape_html_opts o = {.forward = wrong_f, .n_in = 1, .in = in, .max_entries = 2};
    page_opts = &o;
    char *page = view_of(html_ex, ctx, s);
    ck_assert_ptr_nonnull(strstr(page, "\"label\":\"mul\""));
    const char *mul = strstr(page, "\"label\":\"mul\""), *ex = strstr(page, "\"label\":\"exp_wrong\"");
    const char *sum = strstr(page, "\"label\":\"sum\"");
    ck_assert_ptr_nonnull(strstr(mul, "\"check\":{\"passed\":true"));
    ck_assert_ptr_nonnull(strstr(ex, "\"check\":{\"passed\":false"));
    ck_assert_ptr_nonnull(strstr(sum, "\"check\":{\"passed\":true"));
    ck_assert(strstr(mul, "\"check\"") < ex && strstr(ex, "\"check\"") < sum);
    /* sampled: 2 of 3 entries */
    ck_assert_ptr_nonnull(strstr(page, "\"sampled\":true,\"entries\":[0,1]"));
    ck_assert_double_eq(nb_grad_get(x, 0), 0.6); /* the gradients are left as they were */
    ck_assert_double_eq(x->data ? ((double *)x->data)[0] : 0, 0.3);
    free(page);
    /* a layout script that is not there */
    o.layout_js = "/nonexistent/elk.js";
    FILE *f = tmpfile();
    ck_assert_int_eq(nb_tape_html_ex(ctx, s, &o, f), NB_ERR_IO);
    fclose(f);
    nb_ctx_free(ctx);
}
END_TEST

/* Training diagnostics: a tanh layer trained by SGD for 7 steps, every 2
 * recorded with its activations, gradients and update ratios. */
START_TEST(test_diag_records_and_writes) {
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 3, 1);
    nb_nn_linear fc;
    ck_assert_int_eq(nb_nn_linear_init(p, &fc, 4, 8, true, NB_F64, &rng), NB_OK);
    nb_diag *d = nb_diag_new(c, 2, 10);
    ck_assert_ptr_nonnull(d);
    for (long step = 0; step < 7; step++) {
        nb_ctx_reset(c);
        nb_tensor *x = nb_normal(c, NB_F64, NB_SHAPE(16, 4), 0, 3, &rng);
        nb_ctx_push_scope(c, "fc", __FILE__, __LINE__);
        nb_tensor *h = nb_tanh(c, nb_nn_linear_forward(c, &fc, x));
        nb_ctx_pop_scope(c);
        nb_tensor *L = nb_mean(c, nb_mul(c, h, h));
        ck_assert_int_eq(nb_backward(c, L, NULL), NB_OK);
        for (int i = 0; i < fc.params.n; i++) { /* SGD, lr 0.1 */
            nb_tensor *w = nb_list_tensor(&fc.params, i);
            for (size_t j = 0; j < w->numel; j++) ((double *)w->data)[j] -= 0.1 * ((double *)w->grad)[j];
            memset(w->grad, 0, w->numel * sizeof(double));
        }
        ck_assert_int_eq(nb_diag_step(c, d, step, nb_item(L), &fc.params), NB_OK);
        if (step % 3 == 0) /* an evaluation: its line comes after the steps' */
            ck_assert_int_eq(nb_diag_eval(c, d, step, 0.5 + (double)step, 0.25 * (double)step), NB_OK);
    }
    FILE *f = tmpfile();
    ck_assert_int_eq(nb_diag_write_jsonl(c, d, f), NB_OK);
    long n = ftell(f);
    char *text = malloc((size_t)n + 1);
    rewind(f);
    ck_assert_int_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = 0;
    fclose(f);
    int lines = 0;
    for (char *q = text; *q; q++) lines += *q == '\n';
    ck_assert_int_eq(lines, 7 + 3);
    ck_assert_ptr_nonnull(strstr(text, "{\"step\":1,\"loss\":"));
    char *ev = strstr(text, "{\"eval\":0,\"train_loss\":0.5,\"val_loss\":0}\n{\"eval\":3,\"train_loss\":3.5,"
                              "\"val_loss\":0.75}\n{\"eval\":6,");
    ck_assert_ptr_nonnull(ev);
    ck_assert_ptr_null(strstr(ev, "\"step\"")); /* after every step's line */
    ck_assert_ptr_nonnull(strstr(text, "\"activations\":[{\"name\":\"fc tanh #1\",\"op\":\"tanh\",\"saturated\":"));
    ck_assert_ptr_nonnull(strstr(text, "\"update_ratio\":{\"weight\":-"));
    ck_assert_ptr_nonnull(strstr(text, "\"grad_norm\":"));
    ck_assert_ptr_nonnull(strstr(text, "\"update_ratio\":null}")); /* the last record: no step after it */
    free(text);
    char *page = NULL;
    size_t len = 0;
    f = open_memstream(&page, &len);
    ck_assert_int_eq(nb_diag_write_html(c, d, f), NB_OK);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(page, "<title>nabla training diagnostics</title>"));
    /* the page's array: the last step's line, a comma, the evaluations */
    ck_assert_ptr_nonnull(strstr(page, "\"update_ratio\":null},\n{\"eval\":0,"));
    ck_assert_ptr_nonnull(strstr(page, "\"val_loss\":1.5}\n]"));
    ck_assert_ptr_null(strstr(page, "<script src"));
    ck_assert_ptr_null(strstr(page, "https:"));
    free(page);
    nb_diag_free(d);
    nb_ctx_free(c);
    nb_ctx_free(p);
}
END_TEST

/* Every op has a rule to show. */
START_TEST(test_every_op_has_a_formula) {
    for (int op = 0; op < NB_OP_COUNT; op++) ck_assert_str_ne(nb_op_formula((nb_op)op), "?");
    ck_assert_str_eq(nb_op_formula(NB_OP_COUNT), "?");
    ck_assert_str_eq(nb_op_formula(NB_OP_TANH), "dx = dout · (1 - out²)");
}
END_TEST

/* Runs `cmd` in the shell from directory `dir`; its exit status. */
static int run_in(const char *dir, const char *cmd) {
    const char *b = getenv("NB_BUILD_DIR");
    char line[4096];
    snprintf(line, sizeof line, "cd '%s' && %s/examples/%s >/dev/null 2>&1", dir,
             b ? b : NB_SOURCE_DIR "/build", cmd);
    int st = system(line);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static bool file_is(const char *path, const char *text) {
    char buf[64] = {0};
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(buf, text, n);
}

/* Defect: `teach_backprop README.md` replaced README.md with DOT. Outputs go
 * only to the named flags, an existing file needs --force, --help writes
 * nothing, unknown flags exit 2. */
START_TEST(test_teach_backprop_writes_only_what_it_is_told) {
    char dir[] = "/tmp/nb-teach-XXXXXX", path[64], page[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/README.md", dir);
    snprintf(page, sizeof page, "%s/page.html", dir);
    FILE *f = fopen(path, "w");
    fputs("keep me\n", f);
    fclose(f);
    ck_assert_int_eq(run_in(dir, "teach_backprop README.md"), 2);
    ck_assert_int_eq(run_in(dir, "teach_backprop --dot=README.md"), 1);
    ck_assert_int_eq(run_in(dir, "teach_backprop --bogus"), 2);
    ck_assert_int_eq(run_in(dir, "teach_backprop --model=nope"), 2);
    ck_assert_int_eq(run_in(dir, "teach_backprop --help"), 0);
    ck_assert_int_eq(run_in(dir, "teach_backprop"), 0);
    ck_assert(file_is(path, "keep me\n"));
    char old_default[64];
    snprintf(old_default, sizeof old_default, "%s/tape.dot", dir);
    ck_assert_int_ne(access(old_default, F_OK), 0); /* nothing written so far */
    ck_assert_int_ne(access(page, F_OK), 0);
    ck_assert_int_eq(run_in(dir, "teach_backprop --model=gpt --html=page.html"), 0);
    ck_assert_int_eq(access(page, F_OK), 0);
    ck_assert_int_eq(run_in(dir, "teach_backprop --html=page.html"), 1);
    ck_assert_int_eq(run_in(dir, "teach_backprop --html=page.html --force"), 0);
    ck_assert_int_eq(run_in(dir, "teach_backprop --dot=README.md --force"), 0);
    ck_assert(!file_is(path, "keep me\n"));
    remove(path), remove(page), rmdir(dir);
}
END_TEST

/* Runs an example with arguments; its stdout (static buffer) and status. */
static const char *example_output(const char *cmd, int *status) {
    const char *dir = getenv("NB_BUILD_DIR");
    char line[2048];
    snprintf(line, sizeof line, "%s/examples/%s 2>&1", dir ? dir : NB_SOURCE_DIR "/build", cmd);
    FILE *p = popen(line, "r");
    ck_assert_ptr_nonnull(p);
    static char out[65536];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    *status = pclose(p);
    return out;
}

/* teach_backprop --model=qwen3, the explorer's grouped-query page: the
 * attention composed op by op, k and v each gathered from 2 key/value heads
 * to 4 query heads (the index_select the page reads each head's group
 * from) in each of the 2 blocks, and q, k, v each their own linear (the
 * page's "check this op" moves one product's input at a time). */
START_TEST(test_teach_backprop_qwen3_page) {
    int st;
    const char *out = example_output("teach_backprop --model=qwen3", &st);
    ck_assert_int_eq(st, 0);
    int gathers = 0;
    for (const char *at = out; (at = strstr(at, "index_select  (2, 16)* -> (4, 16)")); at++) gathers++;
    ck_assert_int_eq(gathers, 4);
    ck_assert_ptr_nonnull(strstr(out, "linear        (1, 4, 8)*, trf_blocks.1.att.W_key.weight (8, 8)* -> (1, 4, 8)"));
    ck_assert_ptr_nonnull(strstr(out, "rms_norm      (1, 4, 2, 4)*, trf_blocks.0.att.k_norm.scale (4)*"));
    ck_assert_ptr_nonnull(strstr(out, "softmax       (1, 4, 4, 4)"));
}
END_TEST

/* micrograd's neuron: every value and gradient teach_scalar prints is
 * PyTorch's (tests/fixtures/teach_scalar.txt, tools/ref/gen_teach_fixtures.py),
 * and each chain-rule step is spelled out with its numbers. */
START_TEST(test_teach_scalar_matches_pytorch) {
    int st;
    const char *out = example_output("teach_scalar", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_ptr_nonnull(strstr(out, "  o        = tanh(n)        = tanh(0.8814) = 0.7071\n"));
    ck_assert_ptr_nonnull(strstr(out, "  n.grad        = o.grad · (1 - o²)   = 1 · (1 - 0.7071²) = 0.5000   (tanh)\n"));
    ck_assert_ptr_nonnull(strstr(out, "  x1.grad       = w1 · x1w1.grad      = -3 · 0.5000 = -1.5000"));
    ck_assert_ptr_nonnull(strstr(out, "  w2.grad       = x2 · x2w2.grad      = 0 · 0.5000 = 0.0000\n"));
    FILE *f = fopen(NB_SOURCE_DIR "/tests/fixtures/teach_scalar.txt", "r");
    ck_assert_ptr_nonnull(f);
    char line[256], name[32], want[64];
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        double value, grad;
        if (line[0] == '#' || sscanf(line, "%31s %lf %lf", name, &value, &grad) != 3) continue;
        snprintf(want, sizeof want, "\n  %-9s value ", name);
        const char *at = strstr(out, want);
        ck_assert_msg(at != NULL, "teach_scalar prints no line for %s", name);
        double v, g;
        ck_assert_int_eq(sscanf(at + strlen(want), "%lf  grad %lf", &v, &g), 2);
        ck_assert_double_eq_tol(v, value, 1e-14);
        ck_assert_double_eq_tol(g, grad, 1e-14);
        rows++;
    }
    fclose(f);
    ck_assert_int_eq(rows, 10);
}
END_TEST

/* The custom-op example: SiLU's values (torch.nn.functional.silu([-2, 0, 2])
 * = [-0.2384, 0, 1.7616], PyTorch's repr in both) in both dtypes, gradcheck passing the right rule
 * and naming the planted wrong one, and training that works. */
START_TEST(test_custom_op_silu_example) {
    int st;
    const char *out = example_output("custom_op_silu", &st);
    ck_assert_msg(st == 0, "custom_op_silu failed:\n%s", out);
    ck_assert_ptr_nonnull(strstr(out, "tensor([-0.2384,  0.0000,  1.7616])\n"
                                      "tensor([-0.2384,  0.0000,  1.7616], dtype=torch.float64)\n"));
    ck_assert_ptr_nonnull(strstr(out, "gradcheck silu: passed\n"));
    ck_assert_ptr_nonnull(strstr(out, "gradcheck silu_wrong (the planted bug): failed, blamed op #0 "
                                      "'silu_wrong' at examples/custom_op_silu.c:"));
    const char *at = strstr(out, "training: loss went from ");
    ck_assert_ptr_nonnull(at);
    double first, last;
    ck_assert_int_eq(sscanf(at, "training: loss went from %lf to %lf", &first, &last), 2);
    ck_assert_double_gt(first, 0.1);
    ck_assert_double_lt(last, first / 10);
    out = example_output("custom_op_silu --help", &st);
    ck_assert_int_eq(st, 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: custom_op_silu"));
    example_output("custom_op_silu --bogus", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
    example_output("teach_scalar --bogus", &st);
    ck_assert_int_eq(WEXITSTATUS(st), 2);
}
END_TEST

/* Defect: docs/tape.svg was 5004 px wide and older than the tape. `make
 * docs` draws it top to bottom within 900 px, from the current
 * teach_backprop: every op label (with its creation line) of today's DOT is
 * in the picture, and the README shows it. */
START_TEST(test_docs_tape_svg_is_current_and_fits) {
    char *svg = nb_test_read(NB_SOURCE_DIR "/docs/tape.svg", NULL);
    const char *w = strstr(svg, "<svg width=\"");
    ck_assert_ptr_nonnull(w);
    double width_pt = atof(w + strlen("<svg width=\""));
    ck_assert_double_gt(width_pt, 100);
    ck_assert_double_le(width_pt * 4 / 3, 900); /* pt to CSS px */
    const char *vb = strstr(svg, "viewBox=\"");
    double x0, y0, vw, vh;
    ck_assert_int_eq(sscanf(vb, "viewBox=\"%lf %lf %lf %lf", &x0, &y0, &vw, &vh), 4);
    ck_assert_double_le(vw * 4 / 3, 900);

    char dir[] = "/tmp/nb-docs-XXXXXX", dot_path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(dot_path, sizeof dot_path, "%s/tape.dot", dir);
    ck_assert_int_eq(run_in(dir, "teach_backprop --dot=tape.dot"), 0);
    char *dot = nb_test_read(dot_path, NULL);
    int ops = 0;
    for (const char *at = strstr(dot, "label=\"#"); at; at = strstr(at + 1, "label=\"#")) {
        char op[64], site[128], want[200];
        ck_assert_int_eq(sscanf(at, "label=\"%63[^\\]\\n%127[^\"]", op, site), 2);
        snprintf(want, sizeof want, ">%s</text>", op);
        ck_assert_msg(strstr(svg, want) != NULL, "docs/tape.svg lacks %s: run make docs", op);
        snprintf(want, sizeof want, ">%s</text>", site);
        ck_assert_msg(strstr(svg, want) != NULL, "docs/tape.svg lacks %s: run make docs", site);
        ops++;
    }
    ck_assert_int_eq(ops, 4);
    char *readme = nb_test_read(NB_SOURCE_DIR "/README.md", NULL);
    ck_assert_ptr_nonnull(strstr(readme, "](docs/tape.svg)"));
    remove(dot_path), rmdir(dir);
    free(svg), free(dot), free(readme);
}
END_TEST

START_TEST(test_teach_backprop_prints_every_step) {
    const char *dir = getenv("NB_BUILD_DIR");
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/examples/teach_backprop 2>&1",
             dir ? dir : NB_SOURCE_DIR "/build");
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    static char out[16384];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_ptr_nonnull(strstr(out, "#0   matmul        x (2, 3), W (3, 2)* -> a (2, 2)  at examples/teach_backprop.c:"));
    ck_assert_ptr_nonnull(strstr(out, "#3   mse_loss"));
    ck_assert_ptr_nonnull(strstr(out, "L = tensor(0.5709, dtype=torch.float64)"));
    ck_assert_ptr_nonnull(strstr(out, "grad sent to W:\ntensor([[ 0.1786, -0.1534],\n"
                                      "        [ 0.0540, -0.0919],\n"
                                      "        [-0.0951,  0.1714]], dtype=torch.float64)"));
    ck_assert_ptr_nonnull(strstr(out, "grad sent to h:\ntensor([[-0.1198,  0.1198],\n"
                                      "        [ 0.1479, -0.1479]], dtype=torch.float64)"));
}
END_TEST

Suite *suite_teach(void) {
    Suite *s = suite_create("teach");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_tape_dot_draws_ops_tensors_and_grads);
    tcase_add_test(tc, test_tape_dot_names_parameters_by_module_path);
    tcase_add_test(tc, test_tape_html_is_self_contained_and_steps);
    tcase_add_test(tc, test_every_op_has_a_formula);
    tcase_add_test(tc, test_scopes_name_modules_and_sites);
    tcase_add_test(tc, test_library_ops_keep_the_users_call_site);
    tcase_add_test(tc, test_tape_html_checks_each_op);
    tcase_add_test(tc, test_diag_records_and_writes);
    tcase_add_test(tc, test_teach_backprop_prints_every_step);
    tcase_add_test(tc, test_teach_backprop_writes_only_what_it_is_told);
    tcase_add_test(tc, test_teach_backprop_qwen3_page);
    tcase_add_test(tc, test_teach_scalar_matches_pytorch);
    tcase_add_test(tc, test_custom_op_silu_example);
    tcase_add_test(tc, test_docs_tape_svg_is_current_and_fits);
    suite_add_tcase(s, tc);
    return s;
}
