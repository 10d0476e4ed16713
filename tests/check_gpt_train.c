/* check_gpt_train.c - `nabla-gpt train` as a trainer that loses nothing
 * (issue 24): SIGINT at 10 points then resume equals the uninterrupted run (as after a kill -9),
 * a real kill -INT, SIGTERM, a second signal during the save; --force moves
 * the old run aside; resume takes the checkpoint's flags and refuses
 * contradictions and a --max_iters at or below its iteration; a NaN run
 * stops with valid JSON; /dev/zero and a directory refused; nanoGPT's
 * config files, flags, --dataset and prepare (byte-identical to fixtures
 * made by tools/ref/prepare_char_ref.py, the logic of nanoGPT's
 * data/shakespeare_char/prepare.py); `sample --start=FILE:`.
 * The program is $NB_BUILD_DIR/bin/nabla-gpt (or build/bin/nabla-gpt). */
#include "gpt_run.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FIX NB_SOURCE_DIR "/tests/fixtures/"
/* the config users run, nanoGPT's settings (config/ at the top, as in nanoGPT) */
#define CONFIG NB_SOURCE_DIR "/config/train_shakespeare_char.py"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return b;
}

static void same_bytes(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    ck_assert_msg(x && y, "%s or %s missing", a, b);
    ck_assert_msg(na == nb && memcmp(x, y, na) == 0, "%s and %s differ", a, b);
    free(x), free(y);
}

/* Every line of a log.jsonl parsed as JSON (all must be), without "ms" and
 * "run", printed back one a line; *n_lines counted. Caller frees. */
static char *log_canon(const char *path, const char *run_id, int *n_lines) {
    char *text = slurp(path, NULL), *save = NULL;
    ck_assert_msg(text != NULL, "%s missing", path);
    size_t cap = strlen(text) + 1, used = 0;
    char *out = calloc(cap, 1);
    *n_lines = 0;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(l);
        ck_assert_msg(j != NULL, "%s: not JSON: %s", path, l);
        cJSON *run = cJSON_GetObjectItem(j, "run");
        ck_assert_msg(cJSON_IsString(run), "%s: no run id: %s", path, l);
        if (run_id) ck_assert_str_eq(run->valuestring, run_id);
        cJSON_DeleteItemFromObject(j, "ms");
        cJSON_DeleteItemFromObject(j, "run");
        char *s = cJSON_PrintUnformatted(j);
        size_t k = strlen(s);
        ck_assert_uint_lt(used + k + 1, cap);
        memcpy(out + used, s, k), used += k, out[used++] = '\n';
        free(s), cJSON_Delete(j);
        (*n_lines)++;
    }
    free(text);
    return out;
}

static void same_log(const char *a, const char *b) {
    int na, nb;
    char *x = log_canon(a, NULL, &na), *y = log_canon(b, NULL, &nb);
    ck_assert_msg(!strcmp(x, y), "%s and %s differ:\n%s\n---\n%s", a, b, x, y);
    free(x), free(y);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(s, f);
    fclose(f);
}

/* The run in `got` ended as the one in `want`: the same model bytes, the
 * same log. */
static void same_run(const gpt_run *r, const char *want, const char *got) {
    char a[160], b[160];
    snprintf(a, sizeof a, "%s/%s/model.safetensors", r->dir, want);
    snprintf(b, sizeof b, "%s/%s/model.safetensors", r->dir, got);
    same_bytes(a, b);
    snprintf(a, sizeof a, "%s/%s/log.jsonl", r->dir, want);
    snprintf(b, sizeof b, "%s/%s/log.jsonl", r->dir, got);
    same_log(a, b);
}

/* How many files of dir (in r's directory) have ".tmp" in their names. */
static int count_tmp(const gpt_run *r, const char *dir) {
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "ls -a '%s/%s' | grep -c '\\.tmp' || true", r->dir, dir);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    int n = atoi(out);
    free(out);
    return n;
}

/* Starts `train FLAGS --out_dir=DIR` in the background, sends it `sig`
 * (INT, KILL, ...) once its log reaches iteration `iter`, and returns its
 * exit status. */
static int kill_at(const gpt_run *r, const char *flags, const char *dir, int iter, const char *sig) {
    char cmd[8192], prog[4096], *out = NULL;
    snprintf(prog, sizeof prog, "%s/bin/nabla-gpt", nb_test_build_dir());
    snprintf(cmd, sizeof cmd,
             "cd '%s' && { '%s' train %s --out_dir=%s >%s.out 2>%s.err & p=$!; "
             "n=0; until grep -q '\"iter\": %d,' %s/log.jsonl 2>/dev/null || [ $n -gt 3000 ]; do "
             "sleep 0.01; n=$((n+1)); done; kill -%s $p; wait $p; echo $?; } 2>/dev/null", r->dir,
             prog, flags, dir, dir, dir, iter, dir, sig);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    int st = atoi(out);
    free(out);
    return st;
}

#define TINY "--n_layer=1 --n_head=2 --n_embd=16 --block_size=16 --batch_size=4 " \
             "--eval_interval=4 --eval_iters=2 --dropout=0.1 --warmup_iters=2 " \
             "--lr_decay_iters=12 --max_iters=12 --data=text.txt"

/* ---- 1. nothing is lost ------------------------------------------------------------- */
/* SIGINT during iteration N (the test seam raises it inside the step) at 10
 * points: exit 130, then --init_from=resume equals the uninterrupted run. */
START_TEST(test_sigint_at_10_points_resumes_bit_identical) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " TINY " --out_dir=full");
    ck_assert_msg(r.status == 0, "%s", r.err);
    const int at[10] = {0, 1, 2, 3, 4, 5, 7, 8, 10, 11};
    for (int i = 0; i < 10; i++) {
        char env[64], args[512];
        snprintf(env, sizeof env, "NB_GPT_TEST_SIGNAL=%d", at[i]);
        snprintf(args, sizeof args, "train " TINY " --out_dir=cut%d", i);
        gpt_exec_env(&r, env, args);
        ck_assert_msg(r.status == 130, "SIGINT at %d: exit %d: %s", at[i], r.status, r.err);
        char want[200];
        snprintf(want, sizeof want, "SIGINT: stopped after iteration %d; saved cut%d/ckpt.safetensors; "
                 "resume with: nabla-gpt train --out_dir=cut%d --init_from=resume", at[i], i, i);
        if (at[i] == 11) /* the last step: the run completes (final evaluation, save) */
            snprintf(want, sizeof want, "SIGINT during the last iteration: the run finished and is saved");
        ck_assert_msg(strstr(r.err, want), "%s", r.err);
        /* a bare resume: every setting comes from the checkpoint */
        snprintf(args, sizeof args, "train --out_dir=cut%d %s", i, i % 2 ? "--resume" : "--init_from=resume");
        gpt_exec(&r, args);
        ck_assert_msg(r.status == (at[i] == 11 ? 2 : 0), "resume after %d: exit %d: %s", at[i],
                      r.status, r.err);
        char cut[16];
        snprintf(cut, sizeof cut, "cut%d", i);
        same_run(&r, "full", cut);
    }
    gpt_run_done(&r);
}
END_TEST

/* --optimizer=muon (Muon on the blocks' matrices, AdamW on the rest): SIGINT
 * at 3 points then a bare resume equals the uninterrupted run, bit for bit
 * (Muon's momentum buffers and AdamW's moments are in the checkpoint); the
 * checkpoint fixes the optimizer; a diverging run stops on the NaN; bad
 * Muon flags are refused by name. */
START_TEST(test_muon_resume_bit_identical_and_nan) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " TINY " --optimizer=muon --muon_lr=0.03 --out_dir=full");
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* not the AdamW run: the optimizer changed the trajectory */
    gpt_exec(&r, "train " TINY " --out_dir=adamw");
    ck_assert_msg(r.status == 0, "%s", r.err);
    char a[160], b[160];
    snprintf(a, sizeof a, "%s/full/model.safetensors", r.dir);
    snprintf(b, sizeof b, "%s/adamw/model.safetensors", r.dir);
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    ck_assert(x && y && (na != nb || memcmp(x, y, na)));
    free(x), free(y);
    snprintf(a, sizeof a, "%s/full/ckpt.safetensors", r.dir);
    x = slurp(a, &na); /* the JSON header after its 8-byte length */
    ck_assert(x && na > 8);
    ck_assert_ptr_nonnull(strstr(x + 8, "\"optimizer\":\"muon\""));
    ck_assert_ptr_nonnull(strstr(x + 8, "momentum_buffer"));
    ck_assert_ptr_nonnull(strstr(x + 8, "exp_avg_sq"));
    free(x);
    const int at[3] = {1, 5, 9};
    for (int i = 0; i < 3; i++) {
        char env[64], args[512];
        snprintf(env, sizeof env, "NB_GPT_TEST_SIGNAL=%d", at[i]);
        snprintf(args, sizeof args, "train " TINY " --optimizer=muon --muon_lr=0.03 --out_dir=cut%d", i);
        gpt_exec_env(&r, env, args);
        ck_assert_msg(r.status == 130, "SIGINT at %d: exit %d: %s", at[i], r.status, r.err);
        snprintf(args, sizeof args, "train --out_dir=cut%d --resume", i);
        gpt_exec(&r, args);
        ck_assert_msg(r.status == 0, "resume after %d: exit %d: %s", at[i], r.status, r.err);
        char cut[16];
        snprintf(cut, sizeof cut, "cut%d", i);
        same_run(&r, "full", cut);
    }
    /* the checkpoint fixes the optimizer */
    gpt_refused(&r, "train --out_dir=full --resume --max_iters=16 --optimizer=adamw", "optimizer");
    /* divergence stops with the NaN message */
    gpt_exec(&r, "train " TINY " --optimizer=muon --learning_rate=1e30 --min_lr=0 --out_dir=n "
                 "--eval_interval=1");
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "training stopped"));
    /* bad flags, by name */
    gpt_refused(&r, "train " TINY " --optimizer=sgd --out_dir=e",
                "--optimizer: 'sgd' is not adamw or muon");
    gpt_refused(&r, "train " TINY " --optimizer=muon --muon_momentum=1 --out_dir=e",
                "--muon_momentum: 1 is outside [0, 1)");
    gpt_refused(&r, "train " TINY " --optimizer=muon --muon_lr=0 --out_dir=e", "--muon_lr");
    gpt_run_done(&r);
}
END_TEST

/* --muon_ns_steps (and the config key muon_ns_steps) reaches Muon: the
 * checkpoint records it, 2 iterations train differently from 5, the
 * checkpoint fixes it, and a count outside 1..1000 is refused by name. */
START_TEST(test_muon_ns_steps_flag) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    char p[160];
    snprintf(p, sizeof p, "%s/ns.py", r.dir);
    write_text(p, "optimizer = 'muon'\nmuon_ns_steps = 2 # Newton-Schulz iterations\n");
    gpt_exec(&r, "train ns.py " TINY " --out_dir=two");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_exec(&r, "train ns.py " TINY " --muon_ns_steps=5 --out_dir=five");
    ck_assert_msg(r.status == 0, "%s", r.err);
    char a[160], b[160];
    size_t na, nb;
    snprintf(a, sizeof a, "%s/two/ckpt.safetensors", r.dir);
    snprintf(b, sizeof b, "%s/five/ckpt.safetensors", r.dir);
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    ck_assert(x && na > 8 && y && nb > 8);
    ck_assert_msg(strstr(x + 8, "\"optimizer.ns_steps\":\"2\""), "%.400s", x + 8);
    ck_assert_msg(strstr(y + 8, "\"optimizer.ns_steps\":\"5\""), "%.400s", y + 8);
    free(x), free(y);
    snprintf(a, sizeof a, "%s/two/model.safetensors", r.dir);
    snprintf(b, sizeof b, "%s/five/model.safetensors", r.dir);
    x = slurp(a, &na), y = slurp(b, &nb);
    ck_assert(x && y && (na != nb || memcmp(x, y, na)));
    free(x), free(y);
    gpt_refused(&r, "train --out_dir=two --resume --max_iters=16 --muon_ns_steps=3",
                "muon_ns_steps");
    gpt_refused(&r, "train " TINY " --optimizer=muon --muon_ns_steps=0 --out_dir=e",
                "--muon_ns_steps");
    gpt_refused(&r, "train " TINY " --optimizer=muon --muon_ns_steps=1001 --out_dir=e",
                "--muon_ns_steps: 1001, expected 1 to 1000");
    gpt_run_done(&r);
}
END_TEST

/* A real kill -INT from outside, at whatever iteration it lands; SIGTERM
 * exits 143; a second signal during the save ends the process at once and
 * the earlier checkpoint still resumes. */
START_TEST(test_kill_sigterm_and_second_signal) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    const char *slow = "--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --batch_size=8 "
                       "--eval_interval=500 --eval_iters=2 --dropout=0.1 --max_iters=3000 "
                       "--lr_decay_iters=3000 --data=text.txt --log_interval=1000";
    ck_assert_int_eq(kill_at(&r, slow, "k", 20, "INT"), 130);
    char args[1024];
    gpt_exec(&r, "train --out_dir=k --init_from=resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(args, sizeof args, "train %s --out_dir=full", slow);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    same_run(&r, "full", "k");
    /* kill -9 (a crash): the checkpoint of the last evaluation resumes, bit-identically */
    const char *crash = "--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --batch_size=8 "
                        "--eval_interval=10 --eval_iters=2 --dropout=0.1 --max_iters=600 "
                        "--lr_decay_iters=600 --data=text.txt --log_interval=1000";
    ck_assert_int_eq(kill_at(&r, crash, "c9", 25, "KILL"), 137);
    gpt_exec(&r, "train --out_dir=c9 --resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(args, sizeof args, "train %s --out_dir=c9full", crash);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    same_run(&r, "c9full", "c9");
    /* SIGTERM: 143 */
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=6:TERM", "train " TINY " --out_dir=term");
    ck_assert_msg(r.status == 143, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "SIGTERM: stopped after iteration 6"));
    /* a second SIGINT while saving: exit at once, saying so, without the save's
     * temporary file; the checkpoint of step 4 stays */
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=6:TWICE", "train " TINY " --out_dir=twice");
    ck_assert_msg(r.status == 130, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_null(strstr(r.err, "stopped after"));
    ck_assert_msg(strstr(r.err, "nabla-gpt: a second signal: stopped at once, without saving; "
                         "twice/ckpt.safetensors (iteration 4) is kept: resume with: nabla-gpt "
                         "train --out_dir=twice --init_from=resume"), "%s", r.err);
    ck_assert_int_eq(count_tmp(&r, "twice"), 0);
    gpt_exec(&r, "train --out_dir=twice --resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "12 iterations from 4"));
    gpt_exec(&r, "train " TINY " --out_dir=full2");
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* the log lines of iterations 4..6, after the checkpoint, were dropped on resume */
    same_run(&r, "full2", "twice");
    gpt_run_done(&r);
}
END_TEST

/* Checkpoints at evaluations (always, or only when val improved); --force
 * moves an earlier run aside and a resume never joins two runs. */
START_TEST(test_checkpoints_and_force) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=9:TWICE", "train " TINY " --out_dir=o");
    ck_assert_int_eq(r.status, 130);
    ck_assert_ptr_nonnull(strstr(r.out, "saving checkpoint to o")); /* steps 4 and 8 */
    char p[256];
    nb_ctx *c = nb_ctx_new(0);
    const char *k[64], *v[64];
    int n = 0;
    nb_tensor_list l = {0};
    snprintf(p, sizeof p, "%s/o/ckpt.safetensors", r.dir);
    ck_assert_msg(nb_load_safetensors_meta(c, p, &l, 64, &n, k, v) == NB_OK, "%s", nb_ctx_error(c));
    const char *iter = NULL, *id = NULL;
    for (int i = 0; i < n && i < 64; i++) {
        if (!strcmp(k[i], "iter")) iter = v[i];
        if (!strcmp(k[i], "run_id")) id = v[i];
    }
    ck_assert_str_eq(iter, "8");
    ck_assert_ptr_nonnull(id);
    char old_id[40];
    snprintf(old_id, sizeof old_id, "%s", id);
    nb_list_free(&l);
    nb_ctx_free(c);
    /* without --force: refused; with it: the old files move to o/old-1/ */
    gpt_exec(&r, "train " TINY " --out_dir=o");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "exists from an earlier run"));
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=2", "train " TINY " --out_dir=o --force --seed=7");
    ck_assert_msg(r.status == 130, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "the earlier run's files are now in o/old-1/"));
    const char *moved[] = {"log.jsonl", "model.safetensors", "ckpt.safetensors", "loss.svg"};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/o/old-1/%s", r.dir, moved[i]);
        ck_assert_msg(access(p, F_OK) == 0, "%s missing", p);
    }
    int lines;
    snprintf(p, sizeof p, "%s/o/old-1/log.jsonl", r.dir);
    free(log_canon(p, old_id, &lines));
    gpt_exec(&r, "train --out_dir=o --resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "12 iterations from 3"));
    /* the resumed log is the new run's alone, and equals a straight run of it */
    gpt_exec(&r, "train " TINY " --out_dir=straight --seed=7");
    ck_assert_msg(r.status == 0, "%s", r.err);
    char a[160], b[160];
    snprintf(a, sizeof a, "%s/straight/log.jsonl", r.dir);
    snprintf(b, sizeof b, "%s/o/log.jsonl", r.dir);
    same_log(a, b);
    char *canon = log_canon(b, NULL, &lines);
    ck_assert_int_eq(lines, 12 + 4); /* 12 steps, evaluations at 0, 4, 8, 12 */
    free(canon);
    /* --always_save_checkpoint=False: a checkpoint only when val improved */
    gpt_exec(&r, "train " TINY " --out_dir=best --always_save_checkpoint=False --learning_rate=1e-9 --min_lr=0");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_run_done(&r);
}
END_TEST

/* ---- 2. resume and init ------------------------------------------------------------- */
START_TEST(test_resume_errors) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " TINY " --out_dir=o");
    ck_assert_msg(r.status == 0, "%s", r.err);
    char p[160];
    snprintf(p, sizeof p, "%s/o/ckpt.safetensors", r.dir);
    char *ck = slurp(p, NULL);
    snprintf(p, sizeof p, "%s/o/log.jsonl", r.dir);
    char *lg = slurp(p, NULL);
    struct {
        const char *args, *msg;
    } cases[] = {
        {"train --out_dir=o --resume --max_iters=12",
         "--max_iters=12: the checkpoint o/ckpt.safetensors is at iteration 12 already"},
        {"train --out_dir=o --init_from=resume",
         "--max_iters=12: the checkpoint o/ckpt.safetensors is at iteration 12 already"},
        {"train --out_dir=o --resume --max_iters=5", "nothing to train"},
        {"train --out_dir=o --resume --n_layer=3 --max_iters=20",
         "--n_layer=3 contradicts the checkpoint o/ckpt.safetensors, which has n_layer=1"},
        {"train --out_dir=o --resume --learning_rate=0.01 --max_iters=20",
         "--learning_rate=0.01 contradicts the checkpoint o/ckpt.safetensors, which has "
         "learning_rate=0.001"},
        {"train --out_dir=o --resume --data=other.txt --max_iters=20",
         "--data=other.txt contradicts the checkpoint o/ckpt.safetensors, which has data=text.txt"},
        {"train --out_dir=nowhere --resume", "nowhere/ckpt.safetensors"},
        {"train --out_dir=o --resume --init_from=scratch", "--resume contradicts --init_from=scratch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gpt_exec(&r, cases[i].args);
        ck_assert_msg(r.status == 2, "%s: exit %d", cases[i].args, r.status);
        ck_assert_msg(strstr(r.err, cases[i].msg), "%s: '%s' lacks '%s'", cases[i].args, r.err,
                      cases[i].msg);
    }
    /* nothing was written by any of them */
    snprintf(p, sizeof p, "%s/o/ckpt.safetensors", r.dir);
    char *ck2 = slurp(p, NULL);
    snprintf(p, sizeof p, "%s/o/log.jsonl", r.dir);
    char *lg2 = slurp(p, NULL);
    ck_assert(!strcmp(lg, lg2));
    ck_assert(!memcmp(ck, ck2, 64));
    free(ck), free(ck2), free(lg), free(lg2);
    /* raising max_iters and lr_decay_iters trains on, with the same flags given again */
    gpt_exec(&r, "train " TINY " --out_dir=o --resume --max_iters=14 --lr_decay_iters=14");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "14 iterations from 12"));
    /* --init_from=PATH: a state_dict (here the run's model) */
    gpt_exec(&r, "train --data=text.txt --init_from=o/model.safetensors --n_head=2 --block_size=16 "
              "--batch_size=4 --eval_iters=2 --max_iters=2 --out_dir=i");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_run_done(&r);
}
END_TEST

/* ---- 3. bad runs stop clearly ---------------------------------------------------------- */
START_TEST(test_nan_stops_with_valid_json) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " TINY " --learning_rate=1e30 --min_lr=0 --out_dir=n --eval_interval=1");
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "nabla-gpt: iter ") || strstr(r.err, "nabla-gpt: step "), "%s", r.err);
    ck_assert_msg(strstr(r.err, "not finite") || strstr(r.err, "the loss is"), "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "training stopped"));
    int lines;
    char p[160];
    snprintf(p, sizeof p, "%s/n/log.jsonl", r.dir);
    char *canon = log_canon(p, NULL, &lines); /* every line is JSON */
    ck_assert_ptr_nonnull(strstr(canon, "null"));
    free(canon);
    /* the last good checkpoint, if one was written, still resumes (and stops again) */
    snprintf(p, sizeof p, "%s/n/ckpt.safetensors", r.dir);
    if (access(p, F_OK) == 0) {
        ck_assert_ptr_nonnull(strstr(r.err, "the last good checkpoint, n/ckpt.safetensors"));
        gpt_exec(&r, "train --out_dir=n --resume");
        ck_assert_int_eq(r.status, 1);
    }
    /* anomaly mode names the op and the source line */
    gpt_exec(&r, "train " TINY " --learning_rate=1e30 --min_lr=0 --out_dir=a --anomaly=True");
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "anomaly") && strstr(r.err, "created at src/nn/"), "%s", r.err);
    gpt_run_done(&r);
}
END_TEST

START_TEST(test_flags_validated) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    const struct {
        const char *args, *msg;
    } cases[] = {
        {"train --data=/dev/zero --out_dir=o", "/dev/zero: is a character device, not a regular file"},
        {"train --data=/tmp --out_dir=o", "/tmp: is a directory, not a regular file"},
        {"train --data=text.txt --vocab_size=5", "--vocab_size=5 with --data or --dataset"},
        {"train --data=text.txt --device=cuda", "--device: 'cuda' is not available"},
        {"train --data=text.txt --wandb_log=True", "--wandb_log=True: nabla has no Weights & Biases"},
        {"train --data=text.txt --dataset=x", "--data, --dataset and --batches exclude each other"},
        {"train --data=text.txt --dtype=bfloat16", "--dtype: 'bfloat16' is not float32 or float64"},
        {"train --data=text.txt --dropout=1", "--dropout: 1 is not in [0, 1): at 1 every activation"},
        {"train --init=a --init_from=b", "give one of them"},
        {"train --log_interval=0", "--log_interval: '0' is not an integer >= 1"},
        {"sample --out_dir=x --device=mps", "--device: 'mps' is not available"},
        {"prepare --data=/dev/zero --out_dir=p", "is a character device"},
        {"prepare --data=text.txt", "prepare needs --data=input.txt and --out_dir=DIR"},
    };
    char big[160];
    snprintf(big, sizeof big, "%s/big.txt", r.dir);
    FILE *bf = fopen(big, "w");
    ck_assert_ptr_nonnull(bf);
    fclose(bf);
    ck_assert_int_eq(truncate(big, (off_t)300 << 20), 0); /* sparse: no disk used */
    gpt_exec(&r, "train --data=big.txt --out_dir=o");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--data=big.txt: 300 MiB of text: over --data's 256 MiB"));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        time_t t0 = time(NULL);
        gpt_exec(&r, cases[i].args);
        ck_assert_msg(r.status == 2, "%s: exit %d", cases[i].args, r.status);
        ck_assert_msg(strstr(r.err, cases[i].msg), "%s: '%s' lacks '%s'", cases[i].args, r.err,
                      cases[i].msg);
        ck_assert_int_le(time(NULL) - t0, 5); /* refused, not read */
    }
    /* notes: --threads above the cores, --compile=True; --out_dir with parents;
     * --log_interval; --eval_only writes nothing */
    gpt_exec(&r, "train " TINY " --threads=1000 --compile=True --out_dir=a/b/c --log_interval=5");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "note: --threads=1000 is more than the"));
    ck_assert_ptr_nonnull(strstr(r.err, "note: --compile=True: nabla has nothing to compile"));
    ck_assert_ptr_nonnull(strstr(r.out, "\niter 5: loss "));
    ck_assert_ptr_null(strstr(r.out, "\niter 4: loss "));
    ck_assert_ptr_nonnull(strstr(r.out, "step 12: train loss "));
    gpt_exec(&r, "train " TINY " --eval_only=True --out_dir=e");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "step 0: train loss "));
    char p[128];
    snprintf(p, sizeof p, "%s/e", r.dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    gpt_run_done(&r);
}
END_TEST

/* ---- 4. data as nanoGPT has it -------------------------------------------------------- */
START_TEST(test_prepare_matches_nanogpt) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_exec(&r, "prepare --data=" FIX "prepare/input.txt --out_dir=data/chars");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "length of dataset in characters: 2610"));
    ck_assert_ptr_nonnull(strstr(r.out, "vocab size: 353"));
    const char *files[] = {"train.bin", "val.bin", "meta.pkl"};
    for (int i = 0; i < 3; i++) {
        char a[200], b[200];
        snprintf(a, sizeof a, FIX "prepare/ref/%s", files[i]);
        snprintf(b, sizeof b, "%s/data/chars/%s", r.dir, files[i]);
        same_bytes(a, b);
    }
    if (access("/usr/bin/python3", X_OK) == 0) { /* Python's own pickle reads it */
        char cmd[512], *out = NULL;
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 -c \"import pickle; m = pickle.load(open("
                 "'%s/data/chars/meta.pkl', 'rb')); print(m['vocab_size'], len(m['itos']), "
                 "m['stoi'][m['itos'][352]])\"", r.dir);
        ck_assert_int_eq(nb_test_run(cmd, &out), 0);
        ck_assert_str_eq(out, "353 353 352\n");
        free(out);
    }
    gpt_run_done(&r);
}
END_TEST

/* data/shakespeare_char in the run's directory: nanoGPT's prepared
 * character data (the fixtures), for --dataset and the config file. */
static void copy_char_dataset(const gpt_run *r) {
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/data' && cp -r " FIX "prepare/ref '%s/data/shakespeare_char'", r->dir,
             r->dir);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    free(out);
}

START_TEST(test_dataset_and_config) {
    gpt_run r;
    gpt_run_init(&r);
    /* --dataset=NAME from data/NAME, in nanoGPT's format (the fixtures) */
    copy_char_dataset(&r);
    const char *small = "--n_layer=1 --n_head=2 --n_embd=16 --block_size=16 --batch_size=4 "
                        "--eval_iters=2 --eval_interval=3 --max_iters=6 --lr_decay_iters=6 "
                        "--warmup_iters=2 --log_interval=1";
    char args[1024];
    snprintf(args, sizeof args, "train --dataset=shakespeare_char %s --out_dir=d", small);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "vocab 353"));
    /* and a directory path as NAME; then sampling from it */
    snprintf(args, sizeof args, "train --dataset=%%D/data/shakespeare_char %s --out_dir=d2", small);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    char p[160];
    snprintf(p, sizeof p, "%s/prompt.txt", r.dir);
    write_text(p, "First");
    gpt_exec(&r, "sample --out_dir=d --start=FILE:prompt.txt --num_samples=1 --max_new_tokens=5 --seed=3");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(!strncmp(r.out, "First", 5));
    /* the config file (nanoGPT's train_shakespeare_char.py), flags after it override it */
    snprintf(args, sizeof args, "train " CONFIG " --device=cpu --compile=False "
             "%s --out_dir=c", small);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "nabla-gpt: nanogpt, "));
    ck_assert_ptr_nonnull(strstr(r.out, "step 3: train loss "));
    ck_assert_ptr_nonnull(strstr(r.out, "iter 5: loss "));
    /* its dropout 0.2 and always_save_checkpoint=False went into the checkpoint */
    gpt_exec(&r, "train --out_dir=c --resume --dropout=0.1 --max_iters=9");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "--dropout=0.10000000000000001 contradicts"));
    ck_assert_ptr_nonnull(strstr(r.err, "has dropout=0.20000000000000001"));
    /* bad config files name the line */
    const struct {
        const char *text, *msg;
    } bad[] = {
        {"n_layer = 2\nimport os\n", "c.py:2: no '=' after the key"},
        {"# ok\nn_layer = 2 * 3\n", "c.py:2: more after the value"},
        {"n_layer = '2'\n", "c.py:1: n_layer = '2': n_layer takes a number"},
        {"dataset = shakespeare\n", "c.py:1: a value that is not a number, a quoted string"},
        {"no_such_key = 1\n", "c.py:1: unknown flag '--no_such_key' for train"},
        {"n_layer = 0\n", "c.py:1: --n_layer: '0' is not an integer >= 1"},
        {"out_dir = 'abc\n", "c.py:1: a string without its closing quote"},
        {"bias = 1\n", "c.py:1: bias = 1: bias takes True or False"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(p, sizeof p, "%s/c.py", r.dir);
        write_text(p, bad[i].text);
        gpt_exec(&r, "train c.py --device=cpu");
        ck_assert_msg(r.status == 2, "%s: exit %d", bad[i].text, r.status);
        ck_assert_msg(strstr(r.err, bad[i].msg), "%s: '%s' lacks '%s'", bad[i].text, r.err, bad[i].msg);
    }
    gpt_exec(&r, CONFIG);
    ck_assert_int_eq(r.status, 2);
    gpt_exec(&r, "train c.py other.py");
    ck_assert_int_eq(r.status, 2);
    gpt_run_done(&r);
}
END_TEST

/* meta.pkl: only the opcodes prepare.py's pickle uses; others are refused */
START_TEST(test_meta_pkl_refuses_code) {
    gpt_run r;
    gpt_run_init(&r);
    char cmd[512], *out = NULL, p[200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ds' && cp " FIX "prepare/ref/*.bin '%s/ds/'", r.dir, r.dir);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    free(out);
    /* pickle.dumps(os.system) -- protocol 2: GLOBAL 'posix system' */
    static const char evil[] = "\x80\x02" "cposix\nsystem\nq\x00." ;
    snprintf(p, sizeof p, "%s/ds/meta.pkl", r.dir);
    FILE *f = fopen(p, "wb");
    fwrite(evil, 1, sizeof evil - 1, f);
    fclose(f);
    gpt_exec(&r, "train --dataset=%D/ds --out_dir=o");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "opcode 0x63 at byte 2 is not one that meta.pkl uses: refused"),
                  "%s", r.err);
    /* without meta.pkl: GPT-2's ids, nanoGPT's vocab_size 50304 */
    unlink(p);
    gpt_exec(&r, "train --dataset=%D/ds --out_dir=o --n_layer=1 --n_head=2 --n_embd=8 --block_size=8 "
              "--batch_size=2 --eval_iters=1 --max_iters=2 --warmup_iters=1 --lr_decay_iters=2");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "has no meta.pkl: GPT-2 token ids, vocab_size 50304"));
    ck_assert_ptr_nonnull(strstr(r.out, "vocab 50304"));
    /* sample.py's --init_from: a model path */
    gpt_exec(&r, "sample --init_from=%D/o/model.safetensors --num_samples=1 --max_new_tokens=3");
    ck_assert_msg(r.status == 0, "%s", r.err); /* GPT-2 ids: decoded by GPT-2's BPE */
    ck_assert_ptr_nonnull(strstr(r.out, "\n---------------\n"));
    gpt_run_done(&r);
}
END_TEST

/* ---- 5. issue 33: what a new user tripped on ------------------------------------------ */
/* The "lr" of every iteration line of dir/log.jsonl; returns the count. */
static int read_lrs(const gpt_run *r, const char *dir, double *lr, int max) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s/log.jsonl", r->dir, dir);
    char *text = slurp(p, NULL), *save = NULL;
    ck_assert_msg(text != NULL, "%s missing", p);
    int n = 0;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(l), *v = cJSON_GetObjectItem(j, "lr");
        if (cJSON_IsNumber(v) && n < max) lr[n++] = v->valuedouble;
        cJSON_Delete(j);
    }
    free(text);
    return n;
}

/* nanoGPT's get_lr, as train.py has it (in double). */
static double get_lr(int it, int warmup, int decay, double lr, double min_lr) {
    if (it < warmup) return lr * (it + 1) / (warmup + 1);
    if (it > decay) return min_lr;
    double ratio = (double)(it - warmup) / (decay - warmup);
    return min_lr + 0.5 * (1.0 + cos(3.14159265358979323846 * ratio)) * (lr - min_lr);
}

/* nanoGPT's config with a short run: its warmup_iters = 100 above
 * --lr_decay_iters=4 runs, as train.py runs it (warm up, then min_lr), and
 * so does a min_lr above learning_rate; each with a note, nothing refused. */
START_TEST(test_schedule_as_nanogpt) {
    gpt_run r;
    gpt_run_init(&r);
    copy_char_dataset(&r);
    const char *small = "--device=cpu --compile=False --n_layer=1 --n_head=2 --n_embd=16 "
                        "--block_size=16 --batch_size=4 --eval_iters=2 --eval_interval=4";
    char args[1024];
    snprintf(args, sizeof args, "train " CONFIG " %s --max_iters=8 --lr_decay_iters=4 --out_dir=a", small);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "note: --lr_decay_iters=4 is below --warmup_iters=100"), "%s", r.err);
    double lr[16];
    ck_assert_int_eq(read_lrs(&r, "a", lr, 16), 8);
    for (int it = 0; it < 8; it++) /* all warmup: 1e-3 * (it + 1) / 101 */
        ck_assert_double_eq_tol(lr[it], get_lr(it, 100, 4, 1e-3, 1e-4), 1e-18);
    /* warmup 2, cosine to 4, then min_lr (here above learning_rate) */
    snprintf(args, sizeof args, "train " CONFIG " %s --max_iters=8 --warmup_iters=2 "
             "--lr_decay_iters=4 --min_lr=0.002 --out_dir=b", small);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "note: --min_lr=0.002 is above --learning_rate=0.001"), "%s", r.err);
    ck_assert_int_eq(read_lrs(&r, "b", lr, 16), 8);
    for (int it = 0; it < 8; it++)
        ck_assert_double_eq_tol(lr[it], get_lr(it, 2, 4, 1e-3, 2e-3), 1e-18);
    ck_assert_double_eq(lr[7], 2e-3);
    gpt_run_done(&r);
}
END_TEST

/* Every output path is checked before the first step: a --diagnostics page
 * in a missing directory, an existing page without --force, --out_dir a
 * regular file; each exits 2 and writes nothing. A page that cannot be
 * written at the end (its directory removed during the run) costs nothing
 * else: the final checkpoint is saved. */
START_TEST(test_outputs_checked_first) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    char p[256];
    snprintf(p, sizeof p, "%s/page.html", r.dir);
    write_text(p, "an earlier page");
    snprintf(p, sizeof p, "%s/afile", r.dir);
    write_text(p, "x");
    const struct {
        const char *args, *msg;
    } cases[] = {
        {"--out_dir=o --diagnostics=nodir/run.html",
         "--diagnostics=nodir/run.html: the directory nodir: No such file or directory"},
        {"--out_dir=o --diagnostics=page.html",
         "--diagnostics=page.html: page.html exists (an earlier run's): pass --force"},
        {"--out_dir=o --diagnostics=afile/run.html", "afile is a regular file, not a directory"},
        {"--out_dir=o --diagnostics=sub/", "--diagnostics=sub/ names a directory"},
        {"--out_dir=afile", "--out_dir=afile: afile is a regular file, not a directory"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[512];
        snprintf(args, sizeof args, "train " TINY " %s", cases[i].args);
        gpt_exec(&r, args);
        ck_assert_msg(r.status == 2, "%s: exit %d", cases[i].args, r.status);
        ck_assert_msg(strstr(r.err, cases[i].msg), "%s: '%s' lacks '%s'", cases[i].args, r.err,
                      cases[i].msg);
        ck_assert_ptr_null(strstr(r.out, "iter 0:")); /* before the first step */
        snprintf(p, sizeof p, "%s/o", r.dir);
        ck_assert_int_ne(access(p, F_OK), 0);
    }
    snprintf(p, sizeof p, "%s/page.html", r.dir);
    char *page = slurp(p, NULL);
    ck_assert_str_eq(page, "an earlier page");
    free(page);
    /* a page in out_dir, which the run makes; --force replaces an earlier page */
    gpt_exec(&r, "train " TINY " --out_dir=o --diagnostics=o/run.html");
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(p, sizeof p, "%s/o/run.html.jsonl", r.dir);
    ck_assert_int_eq(access(p, F_OK), 0);
    gpt_exec(&r, "train " TINY " --out_dir=o2 --diagnostics=page.html --force");
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(p, sizeof p, "%s/page.html", r.dir);
    page = slurp(p, NULL);
    ck_assert_ptr_nonnull(strstr(page, "<html"));
    free(page);
    ck_assert_int_eq(count_tmp(&r, "."), 0);
    /* the page's directory gone during the run: exit 2, the final checkpoint saved */
    const char *slow = "--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --batch_size=8 "
                       "--eval_interval=5000 --eval_iters=2 --max_iters=2000 "
                       "--data=text.txt --log_interval=1000 --diagnostics=d/run.html";
    char cmd[2048], prog[1024], *out = NULL;
    snprintf(prog, sizeof prog, "%s/bin/nabla-gpt", nb_test_build_dir());
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir d && { '%s' train %s --out_dir=g >g.out 2>g.err & p=$!; "
             "n=0; until grep -q '\"iter\": 20,' g/log.jsonl 2>/dev/null || [ $n -gt 3000 ]; do "
             "sleep 0.01; n=$((n+1)); done; rmdir d; wait $p; echo $?; } 2>/dev/null", r.dir, prog,
             slow);
    ck_assert_int_eq(nb_test_run(cmd, &out), 0);
    ck_assert_int_eq(atoi(out), 2);
    free(out);
    snprintf(p, sizeof p, "%s/g.err", r.dir);
    char *err = slurp(p, NULL);
    ck_assert_msg(strstr(err, "--diagnostics: cannot write d/run.html or d/run.html.jsonl") &&
                  strstr(err, "(the model and the checkpoint were saved)"), "%s", err);
    free(err);
    nb_ctx *c = nb_ctx_new(0);
    const char *k[64], *v[64];
    int n = 0;
    nb_tensor_list l = {0};
    snprintf(p, sizeof p, "%s/g/ckpt.safetensors", r.dir);
    ck_assert_msg(nb_load_safetensors_meta(c, p, &l, 64, &n, k, v) == NB_OK, "%s", nb_ctx_error(c));
    const char *iter = NULL;
    for (int i = 0; i < n && i < 64; i++)
        if (!strcmp(k[i], "iter")) iter = v[i];
    ck_assert_str_eq(iter, "2000");
    nb_list_free(&l);
    nb_ctx_free(c);
    gpt_run_done(&r);
}
END_TEST

/* Ctrl-C before the first evaluation saves there (nanoGPT users expect
 * it), so --init_from=resume goes on. A second signal during that first
 * save says that nothing can be resumed and leaves no temporary file; then
 * neither a new run nor --init_from=resume suggests resuming. A stale
 * temporary file of a killed save is removed on the next start. */
START_TEST(test_interrupted_before_first_checkpoint) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=1", "train " TINY " --out_dir=a");
    ck_assert_msg(r.status == 130, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "stopped after iteration 1; saved a/ckpt.safetensors"));
    gpt_exec(&r, "train --out_dir=a --init_from=resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "12 iterations from 2"));
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=1:TWICE", "train " TINY " --out_dir=b");
    ck_assert_msg(r.status == 130, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "a second signal: stopped at once, without saving; no checkpoint "
                         "had been written, so there is nothing to resume: start again with "
                         "--force"), "%s", r.err);
    ck_assert_int_eq(count_tmp(&r, "b"), 0);
    gpt_exec(&r, "train " TINY " --out_dir=b");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "stopped before its first checkpoint (there is no "
                         "b/ckpt.safetensors to resume): pass --force"), "%s", r.err);
    ck_assert_ptr_null(strstr(r.err, "--init_from=resume"));
    gpt_exec(&r, "train --out_dir=b --init_from=resume");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "there is no checkpoint to resume: b/ckpt.safetensors does not "
                         "exist (the run there stopped before its first save)"), "%s", r.err);
    /* a save cut by kill -9 left its temporary file: the next start removes it */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char p[256];
    snprintf(p, sizeof p, "%s/b/ckpt.safetensors.tmp.%ld", r.dir, (long)dead);
    write_text(p, "half a checkpoint");
    gpt_exec(&r, "train " TINY " --out_dir=b --force --max_iters=2");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "note: removed b/ckpt.safetensors.tmp."));
    ck_assert_int_ne(access(p, F_OK), 0);
    gpt_run_done(&r);
}
END_TEST

/* --max_iters=0 evaluates and writes nothing (nanoGPT saves no checkpoint
 * at iteration 0). The threads default to $NB_NUM_THREADS, else
 * $OMP_NUM_THREADS, else the cores online, as the banner says. */
START_TEST(test_max_iters_0_and_threads) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " TINY " --max_iters=0 --out_dir=z");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "--max_iters=0: nothing to train"));
    ck_assert_ptr_nonnull(strstr(r.out, "step 0: train loss "));
    char p[256];
    snprintf(p, sizeof p, "%s/z", r.dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char want[64];
    snprintf(want, sizeof want, ", %ld thread%s\n", cores < 64 ? cores : 64, cores == 1 ? "" : "s");
    const struct {
        const char *env, *args, *want;
    } cases[] = {
        {"env -u NB_NUM_THREADS -u OMP_NUM_THREADS", "", want},
        {"env -u NB_NUM_THREADS OMP_NUM_THREADS=1", "", ", 1 thread\n"},
        {"env NB_NUM_THREADS=1 OMP_NUM_THREADS=2", "", ", 1 thread\n"},
        {"env NB_NUM_THREADS=2", "--threads=1", ", 1 thread\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char args[512];
        snprintf(args, sizeof args, "train " TINY " --max_iters=1 --out_dir=t%zu %s", i, cases[i].args);
        gpt_exec_env(&r, cases[i].env, args);
        ck_assert_msg(r.status == 0, "%s", r.err);
        ck_assert_msg(strstr(r.out, cases[i].want), "%s %s: '%s' lacks '%s'", cases[i].env,
                      cases[i].args, r.out, cases[i].want);
    }
    gpt_run_done(&r);
}
END_TEST

Suite *suite_gpt_train(void) {
    Suite *s = suite_create("gpt_train");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sigint_at_10_points_resumes_bit_identical);
    tcase_add_test(tc, test_kill_sigterm_and_second_signal);
    tcase_add_test(tc, test_muon_resume_bit_identical_and_nan);
    tcase_add_test(tc, test_muon_ns_steps_flag);
    tcase_add_test(tc, test_checkpoints_and_force);
    tcase_add_test(tc, test_resume_errors);
    tcase_add_test(tc, test_nan_stops_with_valid_json);
    tcase_add_test(tc, test_flags_validated);
    tcase_add_test(tc, test_prepare_matches_nanogpt);
    tcase_add_test(tc, test_dataset_and_config);
    tcase_add_test(tc, test_meta_pkl_refuses_code);
    tcase_add_test(tc, test_schedule_as_nanogpt);
    tcase_add_test(tc, test_outputs_checked_first);
    tcase_add_test(tc, test_interrupted_before_first_checkpoint);
    tcase_add_test(tc, test_max_iters_0_and_threads);
    suite_add_tcase(s, tc);
    return s;
}
