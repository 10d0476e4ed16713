/* check_fuzz_regressions.c - replays the fuzz corpora through the normal
 * library: every file of tests/fuzz/seeds/<target>/ and
 * tests/fuzz/regressions/<target>/ (each input that ever crashed a fuzz
 * target is committed there). Files named "ok-*" must load; every other one
 * must be refused with a status and a message naming the loader, and a
 * refused checkpoint must leave the model exactly as it was.
 *
 * A new fuzz target tests/fuzz/fuzz_<name>.c adds one row to `replays`
 * below; test_every_dir_replayed fails for a corpus folder without a row. */
#include "check_nabla.h"

#include "gpt_config.h"
#include "gpt_pickle.h"

#include <dirent.h>

#include "../tests/fuzz/fuzz_input.h"
#if __has_include("nabla/data.h")
#include "../tests/fuzz/fuzz_text.h"
#define HAVE_TEXT 1
#endif

#define FUZZ_DIR NB_SOURCE_DIR "/tests/fuzz"

/* Loads one file; NB_OK or the status, with the message in msg. */
typedef nb_status (*replay_fn)(const char *path, char *msg, size_t n);

static nb_status replay_safetensors(const char *path, char *msg, size_t n) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    nb_status st = nb_load_safetensors(ctx, path, &out);
    snprintf(msg, n, "%s", st ? nb_ctx_error(ctx) : "");
    for (int i = 0; !st && i < out.n; i++) {
        ck_assert_ptr_nonnull(out.t[i]);
        ck_assert_str_eq(out.t[i]->name, out.names[i]);
    }
    nb_ctx_free(ctx);
    return st;
}

static nb_status replay_checkpoint(const char *path, char *msg, size_t n) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_fuzz_model m;
    ck_assert_int_eq(nb_fuzz_model_init(&m), 0);
    uint64_t before = nb_fuzz_model_hash(&m);
    nb_status st = nb_load_checkpoint(ctx, path, &m.params, m.opt, &m.extra);
    snprintf(msg, n, "%s", st ? nb_ctx_error(ctx) : "");
    if (st)
        ck_assert_msg(nb_fuzz_model_hash(&m) == before, "%s: a refused load changed the model",
                      path);
    nb_fuzz_model_free(&m);
    nb_ctx_free(ctx);
    return st;
}

#ifdef HAVE_TEXT
/* The text target's properties (fuzz_text.h) hold for the file. */
static nb_status replay_text(const char *path, char *msg, size_t n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    nb_ctx *ctx = nb_ctx_new(0);
    bool ok = nb_fuzz_text(ctx, buf, len);
    snprintf(msg, n, "%s", ok ? "" : "a text property failed");
    nb_ctx_free(ctx);
    return ok ? NB_OK : NB_ERR_VALUE;
}
#else
#define replay_text NULL /* nabla/data.h is not there: nothing to replay */
#endif

/* nabla-gpt's meta.pkl reader (tools/support/gpt_pickle.c). */
static nb_status replay_meta_pkl(const char *path, char *msg, size_t n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static uint8_t buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    gpt_meta_pkl m;
    char err[300];
    if (gpt_meta_pkl_read(buf, len, &m, err, sizeof err)) {
        snprintf(msg, n, "meta.pkl: %s", err);
        return NB_ERR_FORMAT;
    }
    ck_assert_int_ge(m.vocab_size, 1);
    gpt_meta_pkl_free(&m);
    msg[0] = '\0';
    return NB_OK;
}

static int config_any(void *user, const char *key, const char *value, gpt_config_kind kind,
                      int line, char *err, size_t n) {
    (void)user, (void)key, (void)value, (void)kind, (void)line, (void)err, (void)n;
    return 0;
}

/* nabla-gpt's config-file parser (tools/support/gpt_config.c). */
static nb_status replay_config(const char *path, char *msg, size_t n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    static char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    char err[300];
    int line = gpt_config_parse(buf, len, config_any, NULL, err, sizeof err);
    if (line) snprintf(msg, n, "config: line %d: %s", line, err);
    else msg[0] = '\0';
    return line ? NB_ERR_FORMAT : NB_OK;
}

/* nb_gpt_config_read on a config.json / cfg.json: a refusal leaves *out as
 * it was, an accepted config has buildable sizes (nb_fuzz_config_ok). */
static nb_status replay_config_json(const char *path, char *msg, size_t n) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_gpt_config c, keep;
    memset(&c, 0xa5, sizeof c);
    keep = c;
    nb_status st = nb_gpt_config_read(ctx, path, &c);
    snprintf(msg, n, "%s", st ? nb_ctx_error(ctx) : "");
    if (st) ck_assert_msg(!memcmp(&c, &keep, sizeof c), "%s: a refused read changed *out", path);
    else ck_assert_msg(nb_fuzz_config_ok(&c), "%s: a config that cannot be built", path);
    nb_ctx_free(ctx);
    return st;
}

/* loader NULL: the target has no refusals to check, every file must pass
 * its properties (fn returns NB_OK). fn NULL: the target's library part is
 * not built here. */
static const struct {
    const char *target, *loader; /* folder name; the op named in errors */
    replay_fn fn;
} replays[] = {
    {"safetensors", "load_safetensors", replay_safetensors},
    {"checkpoint", "load_checkpoint", replay_checkpoint},
    {"text", NULL, replay_text},
    {"meta_pkl", "meta.pkl", replay_meta_pkl},
    {"config", "config", replay_config},
    {"config_json", "config_read", replay_config_json},
};
#define N_REPLAYS (int)(sizeof replays / sizeof replays[0])

/* Replays every file of FUZZ_DIR/<kind>/<target>; returns how many. */
static int replay_dir(const char *kind, int r) {
    char dir[1024], path[1280], msg[1024];
    snprintf(dir, sizeof dir, "%s/%s/%s", FUZZ_DIR, kind, replays[r].target);
    DIR *d = replays[r].fn ? opendir(dir) : NULL;
    if (!d)
        return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        nb_status st = replays[r].fn(path, msg, sizeof msg);
        if (!replays[r].loader) {
            ck_assert_msg(st == NB_OK, "%s: %s", path, msg);
        } else if (!strncmp(e->d_name, "ok-", 3)) {
            ck_assert_msg(st == NB_OK, "%s should load: %s", path, msg);
        } else {
            ck_assert_msg(st != NB_OK, "%s should be refused", path);
            ck_assert_msg(strstr(msg, replays[r].loader), "%s: message '%s' does not name %s", path,
                          msg, replays[r].loader);
        }
        count++;
    }
    closedir(d);
    return count;
}

START_TEST(test_seeds_replay) {
    int count = replay_dir("seeds", _i);
    if (replays[_i].fn)
        ck_assert_msg(count >= 10, "only %d seed files for %s", count, replays[_i].target);
}
END_TEST

START_TEST(test_regressions_replay) { replay_dir("regressions", _i); }
END_TEST

/* Every folder under seeds/ and regressions/ has a replay row. */
START_TEST(test_every_dir_replayed) {
    const char *kinds[] = {"seeds", "regressions"};
    for (int k = 0; k < 2; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", FUZZ_DIR, kinds[k]);
        DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            bool found = false;
            for (int r = 0; r < N_REPLAYS; r++)
                found |= !strcmp(replays[r].target, e->d_name);
            ck_assert_msg(found, "tests/fuzz/%s/%s has no row in check_fuzz_regressions.c",
                          kinds[k], e->d_name);
        }
        closedir(d);
    }
}
END_TEST

Suite *suite_fuzz_regressions(void) {
    Suite *s = suite_create("fuzz_regressions");
    TCase *tc = tcase_create("replay");
    tcase_add_loop_test(tc, test_seeds_replay, 0, N_REPLAYS);
    tcase_add_loop_test(tc, test_regressions_replay, 0, N_REPLAYS);
    tcase_add_test(tc, test_every_dir_replayed);
    suite_add_tcase(s, tc);
    return s;
}
