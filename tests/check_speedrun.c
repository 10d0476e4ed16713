/* check_speedrun.c - what the speedrun records (docs/speedrun.md) rest on:
 * `nabla-gpt train --eval_full=True` (the loss over the whole val split in
 * non-overlapping windows, checked against windows evaluated one by one
 * through the library), `--eval_interval=0` (only the final evaluation),
 * `--eval_only` on a resume with another --eval_iters, and a 20-step run
 * of each speedrun config (config/speedrun_*.py) on nanoGPT's prepared
 * character data (the fixtures). */
#include "gpt_run.h"

#include <cjson/cJSON.h>
#include <math.h>

#define FIX NB_SOURCE_DIR "/tests/fixtures/"

/* data/shakespeare_char in the run's directory: the prepared fixture text
 * (val.bin: 261 ids, vocab 353). */
static void copy_char_dataset(const gpt_run *r) {
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/data' && cp -r " FIX "prepare/ref '%s/data/shakespeare_char'", r->dir,
             r->dir);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    free(out);
}

/* The last line of dir/log.jsonl, parsed. Caller deletes. */
static cJSON *last_log_line(const gpt_run *r, const char *dir) {
    char p[256], text[65536];
    snprintf(p, sizeof p, "%s/%s/log.jsonl", r->dir, dir);
    nb_test_read_text(p, text, sizeof text);
    size_t n = strlen(text);
    ck_assert_uint_gt(n, 1);
    text[n - 1] = '\0'; /* the final newline */
    char *last = strrchr(text, '\n');
    cJSON *j = cJSON_Parse(last ? last + 1 : text);
    ck_assert_msg(j != NULL, "%s: the last line is not JSON", p);
    return j;
}

static double json_num(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(j, key);
    ck_assert_msg(cJSON_IsNumber(v), "no number '%s' in the log line", key);
    return v->valuedouble;
}

/* The val split's loss window by window, one window a forward, from the
 * run's model.safetensors: the windows [wT, wT + T) predicting the next
 * ids, W = (n - 1) / T of them, averaged over every prediction. */
static double val_loss_by_window(const gpt_run *r, const char *dir, int n_head, int64_t T,
                                 int64_t *windows) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s/model.safetensors", r->dir, dir);
    nb_ctx *pctx = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_tensor_list sd = {0};
    ck_assert_int_eq(nb_load_safetensors(pctx, p, &sd), NB_OK);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_from_state_dict(pctx, &m, &sd, n_head, 0, NB_F32, NULL), NB_OK);
    nb_gpt_train(&m, false);
    snprintf(p, sizeof p, FIX "prepare/ref/val.bin");
    FILE *f = fopen(p, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char u16[1024];
    size_t bytes = fread(u16, 1, sizeof u16, f);
    fclose(f);
    int64_t n = (int64_t)bytes / 2, W = (n - 1) / T;
    double sum = 0;
    for (int64_t w = 0; w < W; w++) {
        nb_ctx_reset(ctx);
        nb_tensor *x = nb_empty(ctx, NB_I64, NB_SHAPE(1, T)), *y = nb_empty(ctx, NB_I64, NB_SHAPE(1, T));
        for (int64_t t = 0; t < T; t++) {
            int64_t i = w * T + t;
            ((int64_t *)x->data)[t] = u16[2 * i] | u16[2 * i + 1] << 8;
            ((int64_t *)y->data)[t] = u16[2 * i + 2] | u16[2 * i + 3] << 8;
        }
        sum += nb_item(nb_cross_entropy(ctx, nb_gpt_infer(ctx, &m, x), y));
        ck_assert_ptr_null(nb_ctx_error(ctx));
    }
    nb_list_free(&sd);
    nb_gpt_free(&m);
    nb_ctx_free(ctx), nb_ctx_free(pctx);
    *windows = W;
    return sum / (double)W;
}

#define SMALL "--dataset=shakespeare_char --n_layer=1 --n_head=2 --n_embd=16 --block_size=16 " \
              "--eval_iters=3 --warmup_iters=2 --max_iters=6 --lr_decay_iters=6 --log_interval=1"

/* --eval_full: the final evaluation's whole-split loss is the windows'
 * mean (batch 5 over 16 windows: the last forward has one), printed and
 * logged; --eval_only on the resume gives it again, with more batches. */
START_TEST(test_eval_full) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    gpt_exec(&r, "train " SMALL " --batch_size=5 --eval_interval=3 --eval_full=True --out_dir=f");
    ck_assert_msg(r.status == 0, "%s", r.err);
    int64_t W = 0;
    double want = val_loss_by_window(&r, "f", 2, 16, &W);
    ck_assert_int_eq(W, 16); /* (261 - 1) / 16 */
    ck_assert(want > 1 && want < 10);
    cJSON *j = last_log_line(&r, "f");
    ck_assert_int_eq((int)json_num(j, "iter"), 6);
    ck_assert_double_eq_tol(json_num(j, "val_full_loss"), want, 1e-5);
    cJSON_Delete(j);
    char line[160];
    snprintf(line, sizeof line, "step 6: val loss over the whole split %.4f (16 windows of 16 "
             "tokens)\n", want);
    ck_assert_msg(strstr(r.out, line), "'%s' lacks '%s'", r.out, line);
    /* only the final evaluation has it */
    ck_assert_ptr_null(strstr(r.out, "step 3: val loss over"));
    /* nanoGPT's measure of a finished run: eval_only on the resume, other eval_iters */
    gpt_exec(&r, "train --init_from=resume --out_dir=f --eval_only=True --eval_iters=7 "
             "--eval_full=True");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, line), "'%s' lacks '%s'", r.out, line);
    /* a resume that trains keeps the run's eval_iters */
    gpt_exec(&r, "train --init_from=resume --out_dir=f --max_iters=8 --eval_iters=7");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--eval_iters=7 contradicts the checkpoint"));
    gpt_run_done(&r);
}
END_TEST

/* --eval_interval=0: one evaluation, after the last step, and its save;
 * --eval_train=False: that evaluation without the train split */
START_TEST(test_eval_interval_0) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    gpt_exec(&r, "train " SMALL " --batch_size=4 --eval_interval=0 --out_dir=z");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_null(strstr(r.out, "step 0:"));
    const char *s = strstr(r.out, "step 6: train loss ");
    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_null(strstr(s + 1, "step "));
    char p[160];
    snprintf(p, sizeof p, "%s/z/ckpt.safetensors", r.dir);
    ck_assert_int_eq(access(p, F_OK), 0);
    cJSON *j = last_log_line(&r, "z");
    ck_assert_int_eq((int)json_num(j, "iter"), 6);
    ck_assert(json_num(j, "val_loss") > 1);
    cJSON_Delete(j);
    /* --eval_train=False: the same val loss, no train split (null in the log) */
    double val = json_num(j = last_log_line(&r, "z"), "val_loss");
    cJSON_Delete(j);
    gpt_exec(&r, "train " SMALL " --batch_size=4 --eval_interval=0 --eval_train=False --out_dir=v");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_null(strstr(r.out, "train loss"));
    char line[80];
    snprintf(line, sizeof line, "step 6: val loss %.4f\n", val);
    ck_assert_msg(strstr(r.out, line), "'%s' lacks '%s'", r.out, line);
    j = last_log_line(&r, "v");
    ck_assert_double_eq(json_num(j, "val_loss"), val);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(j, "train_loss")));
    cJSON_Delete(j);
    gpt_exec(&r, "train " SMALL " --eval_interval=-1 --out_dir=y");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--eval_interval"));
    gpt_run_done(&r);
}
END_TEST

/* One tensor of dir/model.safetensors as doubles (n of them). */
static void model_tensor(const gpt_run *r, const char *dir, const char *name, double *out,
                         size_t n) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s/model.safetensors", r->dir, dir);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor_list sd = {0};
    ck_assert_int_eq(nb_load_safetensors(c, p, &sd), NB_OK);
    const nb_tensor *t = nb_list_get(&sd, name);
    ck_assert_msg(t && t->numel == n && t->dtype == NB_F32, "%s: no f32 %s of %zu", p, name, n);
    for (size_t i = 0; i < n; i++) out[i] = ((const float *)t->data)[i];
    nb_list_free(&sd);
    nb_ctx_free(c);
}

/* --embedding_lr, --head_lr, --scalar_lr: AdamW's first step moves each
 * element by lr * g / (|g| + eps), so one step from the same init at the
 * same batch moves the token embedding by embedding_lr (0 where a row had
 * no gradient), the head by head_lr and the gains by scalar_lr, and Muon's
 * matrices as without them. The reference run has them all at 1e-9. */
#define ONE_STEP "train --dataset=shakespeare_char --arch=qwen3 --n_layer=1 --n_head=2 " \
                 "--n_embd=16 --block_size=16 --batch_size=4 --max_iters=1 --warmup_iters=0 " \
                 "--weight_decay=0 --grad_clip=0 --eval_iters=1 --eval_interval=0 " \
                 "--optimizer=muon --learning_rate=1e-3 "
START_TEST(test_own_rates) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    gpt_exec(&r, ONE_STEP "--embedding_lr=1e-9 --head_lr=1e-9 --scalar_lr=1e-9 --out_dir=a");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_exec(&r, ONE_STEP "--embedding_lr=0.05 --head_lr=0.02 --scalar_lr=0.004 --out_dir=b");
    ck_assert_msg(r.status == 0, "%s", r.err);
    static const struct { const char *name; size_t n; double lr; } K[] = {
        {"tok_emb.weight", 353 * 16, 0.05}, {"out_head.weight", 353 * 16, 0.02},
        {"trf_blocks.0.norm1.scale", 16, 0.004}, {"trf_blocks.0.att.q_norm.scale", 8, 0.004},
        {"final_norm.scale", 16, 0.004}, {"trf_blocks.0.att.W_query.weight", 16 * 16, 0}};
    static double a[353 * 16], b[353 * 16];
    for (size_t k = 0; k < sizeof K / sizeof *K; k++) {
        model_tensor(&r, "a", K[k].name, a, K[k].n);
        model_tensor(&r, "b", K[k].name, b, K[k].n);
        size_t moved = 0, wrong = 0;
        for (size_t i = 0; i < K[k].n; i++) {
            double d = fabs(b[i] - a[i]);
            if (d == 0) continue;
            moved++;
            if (fabs(d - K[k].lr) > 1e-3 * K[k].lr + 1e-6) wrong++;
        }
        ck_assert_msg(wrong == 0, "%s: %zu of %zu elements moved by other than %g", K[k].name,
                      wrong, K[k].n, K[k].lr);
        if (K[k].lr > 0) ck_assert_msg(moved > 0, "%s did not move", K[k].name);
        else ck_assert_msg(moved == 0, "%s: %zu elements differ", K[k].name, moved);
    }
    /* a resume keeps them; bad values are refused, named */
    gpt_exec(&r, "train --init_from=resume --out_dir=b --max_iters=2 --head_lr=0.5");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--head_lr=0.5 contradicts the checkpoint"));
    gpt_refused(&r, ONE_STEP "--embedding_lr=-1 --out_dir=c", "--embedding_lr");
    gpt_refused(&r, ONE_STEP "--scalar_lr=0.01 --learning_rate=0 --optimizer=adamw --out_dir=c",
                "--scalar_lr with --learning_rate=0: expected a learning_rate > 0");
    gpt_run_done(&r);
}
END_TEST

/* The lrs of dir/log.jsonl's step lines (up to n), in order; their count. */
static int log_lrs(const gpt_run *r, const char *dir, double *lr, int n) {
    char p[256];
    static char text[65536];
    snprintf(p, sizeof p, "%s/%s/log.jsonl", r->dir, dir);
    nb_test_read_text(p, text, sizeof text);
    int k = 0;
    for (char *line = strtok(text, "\n"); line && k < n; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *v = j ? cJSON_GetObjectItem(j, "lr") : NULL;
        if (cJSON_IsNumber(v)) lr[k++] = v->valuedouble;
        cJSON_Delete(j);
    }
    return k;
}

/* --max_time on a clock of 1 s a step (the test seam): 10 s with 2 warmup
 * steps is 10 steps, the cosine over steps 2-9 at (k - 2) / 8 of the way;
 * cut by SIGINT at step 5 and resumed, the same rates and the same model
 * bits; max_iters still caps it; a resume with no time left is refused. */
#define CLOCKED "train --dataset=shakespeare_char --arch=qwen3 --n_layer=1 --n_head=2 " \
                "--n_embd=16 --block_size=16 --batch_size=4 --max_iters=100 --warmup_iters=2 " \
                "--learning_rate=1e-3 --min_lr=1e-4 --max_time=10 --eval_iters=1 --eval_interval=0 "
START_TEST(test_max_time) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1", CLOCKED "--out_dir=a");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "100 iterations or 10 s (0 s done) from 0"));
    ck_assert_ptr_nonnull(strstr(r.out, "step 10: train loss"));
    double lr[20];
    ck_assert_int_eq(log_lrs(&r, "a", lr, 20), 10);
    nb_lr_schedule s = {1e-3, true, 2, 0, 1e-4};
    for (int k = 0; k < 10; k++)
        ck_assert_double_eq(lr[k], nb_lr_at_fraction(&s, k, k < 2 ? 0 : (k - 2) / 8.0));
    ck_assert_double_eq_tol(lr[6], 5.5e-4, 1e-15); /* half way */
    /* cut at step 5, resumed: the same steps */
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1 NB_GPT_TEST_SIGNAL=5", CLOCKED "--out_dir=b");
    ck_assert_int_eq(r.status, 130);
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1", "train --init_from=resume --out_dir=b");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "100 iterations or 10 s (6 s done) from 6"));
    double lr2[20];
    ck_assert_int_eq(log_lrs(&r, "b", lr2, 20), 10);
    for (int k = 0; k < 10; k++) ck_assert_double_eq(lr2[k], lr[k]);
    static double wa[353 * 16], wb[353 * 16];
    model_tensor(&r, "a", "tok_emb.weight", wa, 353 * 16);
    model_tensor(&r, "b", "tok_emb.weight", wb, 353 * 16);
    ck_assert_int_eq(memcmp(wa, wb, sizeof wa), 0);
    /* nothing left: refused, nothing written; more time: it goes on */
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1", "train --init_from=resume --out_dir=b");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "has trained 10 s already"));
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1", "train --init_from=resume --out_dir=b "
                 "--max_time=12");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "step 12: train loss"));
    /* max_iters first */
    gpt_exec_env(&r, "NB_GPT_TEST_STEP_SECONDS=1", CLOCKED "--max_iters=6 --out_dir=c");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "step 6: train loss"));
    gpt_refused(&r, CLOCKED "--max_time=-1 --out_dir=d", "--max_time");
    gpt_run_done(&r);
}
END_TEST

/* Each speedrun config as `make speedrun` runs it, cut to 20 steps of 4
 * sequences (and 2 evaluation batches) on the fixture data, a few seconds:
 * it parses, builds its model, trains, evaluates over the whole val split
 * and saves. */
static const char *const CONFIGS[] = {"speedrun_shakespeare_char_188.py",
                                      "speedrun_shakespeare_char_5min.py"};

START_TEST(test_speedrun_configs) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    char args[1024];
    snprintf(args, sizeof args, "train " NB_SOURCE_DIR "/config/%s --threads=2 --max_iters=20 "
             "--batch_size=4 --eval_iters=2 --out_dir=s", CONFIGS[_i]);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s: %s", CONFIGS[_i], r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "step 20: val loss over the whole split "));
    cJSON *j = last_log_line(&r, "s");
    ck_assert_int_eq((int)json_num(j, "iter"), 20);
    double v = json_num(j, "val_full_loss");
    ck_assert_msg(v > 0 && v < log(353) + 1, "%s: val_full_loss %g", CONFIGS[_i], v);
    cJSON_Delete(j);
    char p[160];
    snprintf(p, sizeof p, "%s/s/model.safetensors", r.dir);
    ck_assert_int_eq(access(p, F_OK), 0);
    gpt_run_done(&r);
}
END_TEST

Suite *suite_speedrun(void) {
    Suite *s = suite_create("speedrun");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_eval_full);
    tcase_add_test(tc, test_eval_interval_0);
    tcase_add_test(tc, test_own_rates);
    tcase_add_test(tc, test_max_time);
    tcase_add_loop_test(tc, test_speedrun_configs, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}
