/* check_gpt_hf.c - GPT-2 checkpoints in Hugging Face's layout (nabla/gpt.h,
 * src/nn/gpt_hf.c) against nanoGPT's model.py with the tanh GELU
 * (tests/fixtures/hf, tools/ref/gen_hf_fixtures.py):
 *   - logits of both checkpoints (GPT2LMHeadModel names with lm_head and a
 *     config.json; GPT2Model names, no lm_head, no config.json), float64
 *     within 1e-10 and float32 within 1e-5;
 *   - 20 AdamW fine-tuning steps (nanoGPT's decay groups), float64 losses
 *     within 1e-9;
 *   - KV-cache sampling on a loaded model; the GELU choice; config.json;
 *     the standard head table; bad inputs naming the tensor;
 *   - nb_gpt_save_hf writing a loaded model back: it loads again to the
 *     same tensors and logits. */
#include "check_nabla.h"

#include <unistd.h>

#define HF_DIR NB_SOURCE_DIR "/tests/fixtures/hf/"

/* The two checkpoints: directory, n_head to pass to nb_gpt_load_hf (0: the
 * config.json beside it), vocab. */
static const struct {
    const char *name;
    int n_head;
    int64_t vocab;
} CK[2] = {{"lmhead", 0, 100}, {"base", 6, 90}};

static void load_ref(nb_ctx *files, nb_tensor_list *ref) {
    ck_assert_int_eq(nb_load_safetensors(files, HF_DIR "ref.safetensors", ref), NB_OK);
}

static const nb_tensor *ref_get(const nb_tensor_list *ref, const char *ck, const char *what) {
    char key[64];
    snprintf(key, sizeof key, "%s.%s", ck, what);
    const nb_tensor *t = nb_list_get(ref, key);
    ck_assert_msg(t != NULL, "ref.safetensors lacks %s", key);
    return t;
}

static void load(nb_ctx *p, nb_gpt *m, int k, nb_dtype dt) {
    char path[512];
    snprintf(path, sizeof path, HF_DIR "%s/model.safetensors", CK[k].name);
    nb_status st = nb_gpt_load_hf(p, m, path, CK[k].n_head, 0.0, dt, NULL);
    ck_assert_msg(st == NB_OK, "%s: %s", CK[k].name, nb_ctx_error(p));
}

/* Worst |nabla - torch| / max(1, |torch|) over the logits. */
static double logits_err(nb_gpt *m, const nb_tensor_list *ref, const char *ck) {
    nb_ctx *s = nb_ctx_new(0);
    const nb_tensor *ids = ref_get(ref, ck, "ids"), *want = ref_get(ref, ck, "logits");
    nb_tensor *got = nb_gpt_infer(s, m, ids);
    ck_assert_msg(got != NULL, "%s", nb_ctx_error(s));
    ck_assert_uint_eq(got->numel, want->numel);
    double worst = 0;
    for (size_t i = 0; i < got->numel; i++) {
        double w = nb_get(want, i);
        worst = fmax(worst, fabs(nb_get(got, i) - w) / fmax(1.0, fabs(w)));
    }
    nb_ctx_free(s);
    return worst;
}

START_TEST(test_hf_logits) {
    nb_ctx *files = nb_ctx_new(0);
    nb_tensor_list ref = {0};
    load_ref(files, &ref);
    for (int d = 0; d < 2; d++) {
        nb_dtype dt = d ? NB_F32 : NB_F64;
        double tol = d ? 1e-5 : 1e-10;
        nb_ctx *p = nb_ctx_new(0);
        nb_gpt m;
        load(p, &m, _i, dt);
        ck_assert_int_eq(m.cfg.arch, NB_GPT_NANOGPT);
        ck_assert_int_eq(m.cfg.gelu, NB_GELU_TANH);
        ck_assert_int_eq(m.cfg.vocab_size, CK[_i].vocab);
        ck_assert_int_eq(m.cfg.n_head, _i ? 6 : 4);
        ck_assert_int_eq(m.cfg.n_layer, _i ? 3 : 2);
        ck_assert_int_eq(m.cfg.n_embd, _i ? 48 : 32);
        ck_assert_int_eq(m.cfg.block_size, 16);
        ck_assert(m.cfg.bias);
        double err = logits_err(&m, &ref, CK[_i].name);
        printf("gpt_hf %s %s: logits max rel err %.3g (tol %g)\n", CK[_i].name,
               d ? "f32" : "f64", err, tol);
        ck_assert_msg(err <= tol, "%s %s: logits err %.3g > %g", CK[_i].name,
                      d ? "f32" : "f64", err, tol);
        /* nanoGPT's exact GELU gives other numbers: the choice is honoured */
        if (!d) {
            m.cfg.gelu = NB_GELU_NONE;
            double e2 = logits_err(&m, &ref, CK[_i].name);
            ck_assert_msg(e2 > 1e-6, "exact GELU err %.3g", e2);
        }
        nb_gpt_free(&m);
        nb_ctx_free(p);
    }
    nb_list_free(&ref);
    nb_ctx_free(files);
}
END_TEST

/* nb_gpt_from_hf on a state_dict loaded by hand, and the model's own
 * (nanoGPT) state_dict: the Conv1D weights come out transposed. */
START_TEST(test_hf_from_state_dict) {
    nb_ctx *files = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_tensor_list sd = {0}, ref = {0};
    load_ref(files, &ref);
    ck_assert_int_eq(nb_load_safetensors(files, HF_DIR "base/model.safetensors", &sd), NB_OK);
    nb_gpt_config c;
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 6, &c), NB_OK);
    ck_assert_int_eq(c.n_layer, 3);
    ck_assert_int_eq(c.dtype, NB_F32);
    nb_gpt m;
    ck_assert(nb_gpt_state_dict_is_hf(&sd));
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &sd, 6, 0.0, NB_F64, NULL), NB_OK);
    ck_assert(!nb_gpt_state_dict_is_hf(&m.state_dict)); /* nanoGPT's names and layout */
    ck_assert_int_eq(m.cfg.gelu, NB_GELU_TANH);
    const nb_tensor *hf = nb_list_get(&sd, "h.2.mlp.c_fc.weight"); /* (48, 192) */
    const nb_tensor *nn = nb_list_get(&m.state_dict, "transformer.h.2.mlp.c_fc.weight");
    ck_assert_int_eq(hf->shape[0], 48);
    ck_assert_int_eq(nn->shape[0], 192);
    for (int64_t i = 0; i < 48; i += 7)
        for (int64_t o = 0; o < 192; o += 5)
            ck_assert(nb_get(nn, (size_t)(o * 48 + i)) == nb_get(hf, (size_t)(i * 192 + o)));
    ck_assert(nb_list_get(&m.state_dict, "lm_head.weight") == m.wte);
    double err = logits_err(&m, &ref, "base");
    ck_assert_msg(err <= 1e-10, "err %.3g", err);
    nb_gpt_free(&m);
    nb_list_free(&sd);
    nb_list_free(&ref);
    nb_ctx_free(p);
    nb_ctx_free(files);
}
END_TEST

/* 20 steps of torch.optim.AdamW(lr 3e-3, betas (0.9, 0.95), eps 1e-8,
 * weight_decay 0.1) with nanoGPT's groups, in float64. */
START_TEST(test_hf_finetune) {
    nb_ctx *files = nb_ctx_new(0), *p = nb_ctx_new(0), *s = nb_ctx_new(0);
    nb_tensor_list ref = {0};
    load_ref(files, &ref);
    nb_gpt m;
    load(p, &m, _i, NB_F64);
    nb_adam_opts o = nb_adamw_defaults(3e-3);
    o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8, o.weight_decay = 0.1;
    nb_optim *opt = nb_adamw_new_groups(p, &m.params, o, false);
    ck_assert_msg(opt != NULL, "%s", nb_ctx_error(p));
    const nb_tensor *x = ref_get(&ref, CK[_i].name, "x"), *y = ref_get(&ref, CK[_i].name, "y");
    const nb_tensor *want = ref_get(&ref, CK[_i].name, "loss");
    int64_t B = x->shape[1], T = x->shape[2];
    double worst = 0;
    for (int64_t it = 0; it < (int64_t)want->numel; it++) {
        nb_ctx_reset(s);
        const int64_t *xp = (const int64_t *)x->data + it * B * T;
        const int64_t *yp = (const int64_t *)y->data + it * B * T;
        nb_tensor *loss = nb_gpt_loss(s, &m, nb_from_data(s, NB_I64, NB_SHAPE(B, T), xp),
                                      nb_from_data(s, NB_I64, NB_SHAPE(B, T), yp), NULL);
        ck_assert_int_eq(nb_backward(s, loss, NULL), NB_OK);
        ck_assert_int_eq(nb_optim_step(opt), NB_OK);
        nb_optim_zero_grad(opt);
        double l = nb_item(loss), w = nb_get(want, (size_t)it);
        worst = fmax(worst, fabs(l - w));
        ck_assert_msg(fabs(l - w) <= 1e-9, "%s step %lld: loss %.17g, torch %.17g",
                      CK[_i].name, (long long)it, l, w);
    }
    printf("gpt_hf %s fine-tune: 20 losses max abs err %.3g (%.6f -> %.6f)\n", CK[_i].name,
           worst, nb_get(want, 0), nb_get(want, want->numel - 1));
    nb_optim_free(opt);
    nb_gpt_free(&m);
    nb_list_free(&ref);
    nb_ctx_free(s);
    nb_ctx_free(p);
    nb_ctx_free(files);
}
END_TEST

/* KV-cache sampling on the loaded model: the tokens of the cached and the
 * uncached generate are the same, past block_size too. */
START_TEST(test_hf_generate) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt m;
    load(p, &m, _i, NB_F32);
    const int64_t prompt[3] = {5, 17, 3};
    int64_t a[40], b[40], na = 0, nb = 0;
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = 30, o.temperature = 0.8, o.top_k = 20, o.seed = 7;
    ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, a, &na), NB_OK);
    o.use_cache = false;
    ck_assert_int_eq(nb_gpt_generate(p, &m, prompt, 3, &o, b, &nb), NB_OK);
    ck_assert_int_eq(na, 33);
    ck_assert_int_eq(nb, 33);
    for (int i = 0; i < 33; i++) {
        ck_assert_int_eq(a[i], b[i]);
        ck_assert(a[i] >= 0 && a[i] < CK[_i].vocab);
    }
    nb_gpt_free(&m);
    nb_ctx_free(p);
}
END_TEST

START_TEST(test_hf_config_json) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt_hf_config c;
    ck_assert_int_eq(nb_gpt_hf_config_read(p, HF_DIR "lmhead/config.json", &c), NB_OK);
    ck_assert_int_eq(c.n_layer, 2);
    ck_assert_int_eq(c.n_head, 4);
    ck_assert_int_eq(c.n_embd, 32);
    ck_assert_int_eq(c.n_positions, 16);
    ck_assert_int_eq(c.vocab_size, 100);
    ck_assert_int_eq(c.gelu, NB_GELU_TANH);
    ck_assert(c.layer_norm_epsilon == 1e-5);
    /* the standard table */
    const int64_t w[5] = {768, 1024, 1280, 1600, 48};
    const int h[5] = {12, 16, 20, 25, 0};
    for (int k = 0; k < 5; k++) ck_assert_int_eq(nb_gpt_hf_n_head(w[k]), h[k]);
    /* a 768-wide state_dict takes 12 heads from the table */
    nb_tensor_list sd = {0};
    nb_list_add(&sd, "wte.weight", nb_zeros(p, NB_F32, NB_SHAPE(3, 768)));
    nb_list_add(&sd, "wpe.weight", nb_zeros(p, NB_F32, NB_SHAPE(1024, 768)));
    nb_list_add(&sd, "h.0.ln_1.weight", nb_zeros(p, NB_F32, NB_SHAPE(768)));
    nb_gpt_config g;
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 0, &g), NB_OK);
    ck_assert_int_eq(g.n_head, 12);
    ck_assert_int_eq(g.block_size, 1024);
    ck_assert_int_eq(g.n_layer, 1);
    ck_assert_int_eq(nb_gpt_config_from_hf(p, &sd, 8, &g), NB_OK);
    ck_assert_int_eq(g.n_head, 8);
    nb_ctx_free(p);
}
END_TEST

/* A directory with a model.safetensors of `sd` and, unless json is NULL, a
 * config.json. */
static void write_dir(char *dir, const nb_tensor_list *sd, const char *json) {
    strcpy(dir, "/tmp/nb-hf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    nb_ctx *c = nb_ctx_new(0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(nb_save_safetensors(c, path, sd, 0, NULL, NULL), NB_OK);
    if (json) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(json, f);
        fclose(f);
    }
    nb_ctx_free(c);
}

static void remove_dir(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

/* sd without `drop`, with `swap` (when non-NULL) under `swap_name`. */
static void edited(const nb_tensor_list *sd, nb_tensor_list *out, const char *drop,
                   const char *swap_name, nb_tensor *swap) {
    *out = (nb_tensor_list){0};
    for (int i = 0; i < sd->n; i++) {
        const char *n = nb_list_name(sd, i);
        if (drop && !strcmp(n, drop)) continue;
        nb_tensor *t = swap_name && !strcmp(n, swap_name) ? swap : nb_list_tensor(sd, i);
        ck_assert_int_eq(nb_list_add(out, n, t), NB_OK);
    }
}

START_TEST(test_hf_errors) {
    nb_ctx *files = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_tensor_list sd = {0}, e = {0};
    ck_assert_int_eq(nb_load_safetensors(files, HF_DIR "lmhead/model.safetensors", &sd), NB_OK);
    nb_gpt m;
    ck_assert(nb_gpt_state_dict_is_hf(&sd)); /* with the transformer. prefix */
    /* a missing tensor */
    edited(&sd, &e, "transformer.h.1.mlp.c_proj.bias", NULL, NULL);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "gpt_from_hf: transformer.h.1.mlp.c_proj.bias is missing");
    nb_ctx_clear_error(p);
    /* a Conv1D weight in nn.Linear's (out, in) layout (a nanoGPT file) */
    nb_tensor *w = nb_list_get(&sd, "transformer.h.0.attn.c_attn.weight");
    nb_tensor *wt = nb_contiguous(files, nb_transpose(files, w, 0, 1));
    edited(&sd, &e, NULL, "transformer.h.0.attn.c_attn.weight", wt);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "transformer.h.0.attn.c_attn.weight is (96, 32); expected (32, 96), "
                           "Conv1D (in, out)");
    nb_ctx_clear_error(p);
    /* a wrong dtype */
    nb_tensor *ib = nb_zeros(files, NB_I64, NB_SHAPE(32));
    edited(&sd, &e, NULL, "transformer.ln_f.bias", ib);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "transformer.ln_f.bias is i64");
    nb_ctx_clear_error(p);
    /* lm_head.weight not tied */
    nb_tensor *lm = nb_copy(files, nb_list_get(&sd, "lm_head.weight"), NB_F32);
    nb_set(lm, 5, 42.0);
    edited(&sd, &e, NULL, "lm_head.weight", lm);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "lm_head.weight differs from transformer.wte.weight at 5");
    nb_ctx_clear_error(p);
    /* no wte at all */
    edited(&sd, &e, "transformer.wte.weight", NULL, NULL);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "neither wte.weight (GPT2Model) nor transformer.wte.weight");
    nb_ctx_clear_error(p);
    /* an unknown width without config.json */
    edited(&sd, &e, NULL, NULL, NULL);
    ck_assert_int_eq(nb_gpt_from_hf(p, &m, &e, 0, 0.0, NB_F32, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_embd 32 is not a standard GPT-2 width (768, 1024, 1280, 1600): "
                           "give n_head or a config.json");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, HF_DIR "base/model.safetensors", 0, 0.0, NB_F32,
                                    NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "n_embd 48 is not a standard GPT-2 width");
    nb_ctx_clear_error(p);
    /* a config.json that disagrees with the tensors; one with 2 heads wins */
    char dir[64], path[128];
    write_dir(dir, &e, "{\"n_layer\": 3, \"n_head\": 4}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, path, 0, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "config.json says n_layer 3, the tensors 2");
    nb_ctx_clear_error(p);
    remove_dir(dir);
    write_dir(dir, &e, "{\"n_head\": 2, \"activation_function\": \"gelu\"}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(nb_gpt_load_hf(p, &m, path, 0, 0.0, NB_F32, NULL) == NB_OK, "%s",
                  nb_ctx_error(p));
    ck_assert_int_eq(m.cfg.n_head, 2);
    ck_assert_int_eq(m.cfg.gelu, NB_GELU_NONE);
    nb_gpt_free(&m);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, path, 8, 0.0, NB_F32, NULL), NB_OK); /* given wins */
    ck_assert_int_eq(m.cfg.n_head, 8);
    nb_gpt_free(&m);
    remove_dir(dir);
    write_dir(dir, &e, "{\"activation_function\": \"relu\"}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, path, 4, 0.0, NB_F32, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "activation_function \"relu\" is not supported");
    nb_ctx_clear_error(p);
    remove_dir(dir);
    write_dir(dir, &e, "{\"layer_norm_epsilon\": 1e-6}");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, path, 4, 0.0, NB_F32, NULL), NB_ERR_VALUE);
    ck_assert_error_has(p, "layer_norm_epsilon 1e-06 is not supported");
    nb_ctx_clear_error(p);
    remove_dir(dir);
    write_dir(dir, &e, "[1, 2]");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, path, 4, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "config.json: not a JSON object");
    nb_ctx_clear_error(p);
    remove_dir(dir);
    /* the file's own errors come through */
    ck_assert_int_eq(nb_gpt_load_hf(p, &m, "/nonexistent/model.safetensors", 4, 0.0, NB_F32,
                                    NULL), NB_ERR_IO);
    ck_assert_error_has(p, "/nonexistent/model.safetensors");
    nb_list_free(&e);
    nb_list_free(&sd);
    nb_ctx_free(p);
    nb_ctx_free(files);
}
END_TEST

/* nb_gpt_load_hf streams the file: lm_head.weight may come before wte
 * (the first is copied, the second compared), and a head that differs is
 * refused either way. */
START_TEST(test_hf_stream_order) {
    nb_ctx *files = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_tensor_list sd = {0}, ref = {0}, e = {0};
    load_ref(files, &ref);
    ck_assert_int_eq(nb_load_safetensors(files, HF_DIR "lmhead/model.safetensors", &sd), NB_OK);
    char dir[64], path[128];
    for (int k = 0; k < 3; k++) {
        nb_tensor *lm = nb_list_get(&sd, "lm_head.weight");
        if (k) {
            lm = nb_copy(files, lm, NB_F32);
            nb_set(lm, 7, 3.5);
        }
        /* k 0, 1: lm_head first; k 2: lm_head last */
        e = (nb_tensor_list){0};
        if (k < 2) nb_list_add(&e, "lm_head.weight", lm);
        for (int i = 0; i < sd.n; i++)
            if (strcmp(nb_list_name(&sd, i), "lm_head.weight"))
                nb_list_add(&e, nb_list_name(&sd, i), nb_list_tensor(&sd, i));
        if (k == 2) nb_list_add(&e, "lm_head.weight", lm);
        write_dir(dir, &e, NULL);
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        nb_gpt m;
        nb_status st = nb_gpt_load_hf(p, &m, path, 4, 0.0, NB_F64, NULL);
        if (k == 0) {
            ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(p));
            double err = logits_err(&m, &ref, "lmhead");
            ck_assert_msg(err <= 1e-10, "err %.3g", err);
            nb_gpt_free(&m);
        } else {
            ck_assert_int_eq(st, NB_ERR_FORMAT);
            ck_assert_error_has(p, "lm_head.weight differs from transformer.wte.weight at 7");
            nb_ctx_clear_error(p);
        }
        remove_dir(dir);
    }
    nb_list_free(&sd);
    nb_list_free(&ref);
    nb_ctx_free(p);
    nb_ctx_free(files);
}
END_TEST

/* nb_gpt_save_hf: the lmhead checkpoint (float64) written back and loaded
 * again, with n_head from the written config.json (width 32 is not in
 * GPT-2's table): every tensor the same bits, the same logits; the
 * course's layout and a model without biases are refused. */
START_TEST(test_hf_save_round_trip) {
    nb_ctx *files = nb_ctx_new(0), *p = nb_ctx_new(0);
    nb_tensor_list ref = {0};
    load_ref(files, &ref);
    nb_gpt a, b;
    load(p, &a, 0, NB_F64);
    char dir[] = "/tmp/nb-hf-save-XXXXXX", path[128];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(nb_gpt_save_hf(p, &a, path) == NB_OK, "%s", nb_ctx_error(p));
    nb_tensor_list raw = {0}; /* Hugging Face's names and Conv1D's (in, out) */
    ck_assert_int_eq(nb_load_safetensors(files, path, &raw), NB_OK);
    nb_tensor *w = nb_list_get(&raw, "h.1.mlp.c_fc.weight");
    ck_assert_ptr_nonnull(w);
    ck_assert(w->shape[0] == 32 && w->shape[1] == 128);
    ck_assert_double_eq(nb_get(w, 5 * 128 + 7), nb_get(a.blocks[1].fc_w, 7 * 32 + 5));
    ck_assert_ptr_null(nb_list_get(&raw, "lm_head.weight"));
    ck_assert_msg(nb_gpt_load_hf(p, &b, path, 0, 0.0, NB_F64, NULL) == NB_OK, "%s",
                  nb_ctx_error(p));
    ck_assert(b.cfg.n_head == 4 && b.cfg.n_layer == 2 && b.cfg.vocab_size == 100 &&
              b.cfg.block_size == 16 && b.cfg.gelu == NB_GELU_TANH);
    ck_assert_int_eq(a.state_dict.n, b.state_dict.n);
    for (int i = 0; i < a.state_dict.n; i++) {
        const nb_tensor *x = nb_list_tensor(&a.state_dict, i), *y = nb_list_tensor(&b.state_dict, i);
        ck_assert_str_eq(nb_list_name(&a.state_dict, i), nb_list_name(&b.state_dict, i));
        ck_assert_uint_eq(x->numel, y->numel);
        ck_assert_msg(!memcmp(x->data, y->data, x->numel * 8), "%s differs",
                      nb_list_name(&a.state_dict, i));
    }
    ck_assert_double_le(logits_err(&b, &ref, "lmhead"), 1e-10);
    /* the course's layout, and a nanoGPT model without biases, are not GPT-2's */
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_GPTMODEL);
    c.vocab_size = 10, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.dropout = 0;
    nb_gpt g;
    ck_assert_msg(nb_gpt_init(p, &g, &c, NULL) == NB_OK, "%s", nb_ctx_error(p));
    ck_assert_int_eq(nb_gpt_save_hf(p, &g, path), NB_ERR_VALUE);
    ck_assert_error_has(p, "gpt_save_hf: the model is the course's GPTModel");
    nb_ctx_clear_error(p);
    nb_gpt_free(&g);
    c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.vocab_size = 10, c.block_size = 8, c.n_layer = 1, c.n_head = 2, c.n_embd = 8, c.dropout = 0;
    c.bias = false;
    ck_assert_msg(nb_gpt_init(p, &g, &c, NULL) == NB_OK, "%s", nb_ctx_error(p));
    ck_assert_int_eq(nb_gpt_save_hf(p, &g, path), NB_ERR_VALUE);
    ck_assert_error_has(p, "the model has no biases");
    nb_ctx_clear_error(p);
    nb_gpt_free(&g);
    remove_dir(dir);
    nb_gpt_free(&a), nb_gpt_free(&b);
    nb_list_free(&raw), nb_list_free(&ref);
    nb_ctx_free(p), nb_ctx_free(files);
}
END_TEST

Suite *suite_gpt_hf(void) {
    Suite *s = suite_create("gpt_hf");
    TCase *tc = tcase_create("parity");
    tcase_add_loop_test(tc, test_hf_logits, 0, 2);
    tcase_add_loop_test(tc, test_hf_finetune, 0, 2);
    tcase_add_test(tc, test_hf_from_state_dict);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("model");
    tcase_add_loop_test(tm, test_hf_generate, 0, 2);
    tcase_add_test(tm, test_hf_config_json);
    tcase_add_test(tm, test_hf_errors);
    tcase_add_test(tm, test_hf_stream_order);
    tcase_add_test(tm, test_hf_save_round_trip);
    suite_add_tcase(s, tm);
    return s;
}
