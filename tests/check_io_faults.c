/* check_io_faults.c - failing disks and killed processes during saves.
 *
 *   - every system call of a save (each fwrite, fflush, fsync, fclose, the
 *     rename, the directory fsync) is made to fail in turn, through the
 *     writer's hook (nb_io_fault, src/io/io_internal.h): the save reports
 *     NB_ERR_IO naming the op, leaves no temporary file, and the file
 *     already at the path still loads as it was. Only a failure of the
 *     final directory fsync, after the rename, is not an error (it is best
 *     effort: some file systems refuse it): then the new file loads.
 *   - a child saving in a loop is killed with SIGKILL at random moments:
 *     the file at the path always loads, as the old or the new checkpoint.
 *   - a checkpoint cut at every length is refused, and so is every
 *     single-bit flip in its header unless the flipped file is still a
 *     valid one, which must then load exactly the values that were saved.
 * Files live in a mkdtemp directory (in /dev/shm when there is one) that the
 * fixture removes. */
#include "check_nabla.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tests/fuzz/fuzz_input.h"
#include "io/io_internal.h"

static char g_dir[64];

/* In /dev/shm when there is one: these tests make hundreds of saves, and
 * fsync on a busy disk would make them slow without testing more. */
static void setup(void) {
    struct stat sb;
    strcpy(g_dir, stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm/nb-iof-XXXXXX"
                                                                    : "/tmp/nb-iof-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

/* Removes every file in g_dir, then g_dir. */
static void teardown(void) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
                unlink(p);
            }
        closedir(d);
    }
    rmdir(g_dir);
}

static int files_in_dir(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static const char *file_path(void) {
    static char p[128];
    snprintf(p, sizeof p, "%s/ck.safetensors", g_dir);
    return p;
}

/* Two training states of the fuzz model: A (one Adam step) and B (two). */
typedef struct states {
    nb_fuzz_model a, b;
    uint64_t ha, hb;
} states;

static void states_init(states *s) {
    ck_assert_int_eq(nb_fuzz_model_init(&s->a), 0);
    ck_assert_int_eq(nb_fuzz_model_init(&s->b), 0);
    ck_assert_int_eq(nb_optim_step(s->b.opt), NB_OK);
    nb_pcg32_next(&s->b.rng);
    s->ha = nb_fuzz_model_hash(&s->a);
    s->hb = nb_fuzz_model_hash(&s->b);
    ck_assert(s->ha != s->hb);
}

static void states_free(states *s) {
    nb_fuzz_model_free(&s->a);
    nb_fuzz_model_free(&s->b);
}

static nb_status save_state(nb_ctx *ctx, nb_fuzz_model *m) {
    return nb_save_checkpoint(ctx, file_path(), &m->params, m->opt, &m->extra, 0, NULL, NULL);
}

/* Loads the file into a fresh model; its hash, or 0 when the load fails. */
static uint64_t load_hash(void) {
    nb_fuzz_model m;
    ck_assert_int_eq(nb_fuzz_model_init(&m), 0);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_status st = nb_load_checkpoint(ctx, file_path(), &m.params, m.opt, &m.extra);
    uint64_t h = st ? 0 : nb_fuzz_model_hash(&m);
    nb_ctx_free(ctx);
    nb_fuzz_model_free(&m);
    return h;
}

/* kind 0: a checkpoint of m; 1: m's parameters as plain safetensors. */
static nb_status save_kind(nb_ctx *ctx, int kind, nb_fuzz_model *m) {
    return kind == 0 ? save_state(ctx, m)
                     : nb_save_safetensors(ctx, file_path(), &m->params, 0, NULL, NULL);
}

/* Makes call n of a save of B (of `kind`) over A fail, for every n. */
static void fail_each_call(int kind) {
    states s;
    states_init(&s);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_io_fault_at = 0;
    nb_io_fault_calls = 0;
    ck_assert_int_eq(save_kind(ctx, kind, &s.b), NB_OK);
    long calls = nb_io_fault_calls;
    ck_assert_int_ge(calls, 6); /* header size, header, tensors, flush, fsync, close, ... */
    int refused = 0;
    for (long n = 1; n <= calls; n++) {
        nb_ctx_reset(ctx);
        nb_io_fault_at = 0;
        ck_assert_int_eq(save_state(ctx, &s.a), NB_OK);
        uint64_t old = load_hash();
        ck_assert(old == s.ha);
        nb_io_fault_at = n;
        nb_io_fault_calls = 0;
        nb_status st = save_kind(ctx, kind, &s.b);
        nb_io_fault_at = 0;
        ck_assert_int_eq(files_in_dir(), 1); /* no temporary file left */
        if (st != NB_OK) {
            refused++;
            ck_assert_int_eq(st, NB_ERR_IO);
            ck_assert_error_has(ctx, "save_");
            ck_assert_msg(load_hash() == s.ha, "fault at call %ld of %ld lost the old file", n,
                          calls);
        } else {
            ck_assert_msg(n == calls, "fault at call %ld of %ld was not reported", n, calls);
            if (kind == 0)
                ck_assert(load_hash() == s.hb);
        }
    }
    ck_assert_int_eq(refused, calls - 1);
    nb_ctx_free(ctx);
    states_free(&s);
}

START_TEST(test_fault_every_call_checkpoint) { fail_each_call(0); }
END_TEST

START_TEST(test_fault_every_call_safetensors) { fail_each_call(1); }
END_TEST

/* A child saves A and B in turn, forever; it is killed at a random moment.
 * The file must load as A or as B. */
START_TEST(test_sigkill_during_saves) {
    states s;
    states_init(&s);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(save_state(ctx, &s.a), NB_OK);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2024, 7);
    int seen_b = 0;
    long slow = getenv("NB_MEMCHECK") ? 50 : 1; /* valgrind runs the saves ~50x slower */
    for (int round = 0; round < 40; round++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            for (long i = 0;; i++) {
                nb_ctx_reset(ctx);
                save_state(ctx, i % 2 ? &s.a : &s.b);
            }
        }
        long us = slow * (200 + (long)nb_pcg32_bounded(&rng, 20000));
        struct timespec wait = {us / 1000000, 1000 * (us % 1000000)};
        nanosleep(&wait, NULL);
        kill(pid, SIGKILL);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFSIGNALED(status));
        uint64_t h = load_hash();
        ck_assert_msg(h == s.ha || h == s.hb, "round %d: the file loads as neither state", round);
        seen_b += h == s.hb;
        /* The killed save's temporary file, if any, is left: remove it. */
        char tmp[160];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", file_path(), (long)pid);
        unlink(tmp);
        ck_assert_int_eq(files_in_dir(), 1);
    }
    ck_assert_int_gt(seen_b, 0);
    nb_ctx_free(ctx);
    states_free(&s);
}
END_TEST

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    unsigned char *p = malloc(1 << 16);
    *n = fread(p, 1, 1 << 16, f);
    fclose(f);
    return p;
}

static void write_all(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(p, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(test_truncated_every_length) {
    states s;
    states_init(&s);
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(save_state(ctx, &s.b), NB_OK);
    size_t n;
    unsigned char *bytes = read_all(file_path(), &n);
    for (size_t len = 0; len < n; len++) {
        write_all(file_path(), bytes, len);
        nb_ctx_reset(ctx);
        nb_tensor_list out = {0};
        nb_status st = nb_load_safetensors(ctx, file_path(), &out);
        ck_assert_msg(st == NB_ERR_FORMAT, "length %zu of %zu: status %d", len, n, st);
        ck_assert_int_eq(out.n, 0);
        nb_ctx_reset(ctx);
        st = nb_load_checkpoint(ctx, file_path(), &s.a.params, s.a.opt, &s.a.extra);
        ck_assert_msg(st == NB_ERR_FORMAT, "length %zu: checkpoint status %d", len, st);
        ck_assert_error_has(ctx, "load_checkpoint");
        ck_assert(nb_fuzz_model_hash(&s.a) == s.ha);
    }
    free(bytes);
    nb_ctx_free(ctx);
    states_free(&s);
}
END_TEST

/* Each loaded tensor equals the saved one of that name (a flipped name may
 * appear only as a new name, holding the original's bytes somewhere). */
static void check_same_values(const nb_tensor_list *saved, const nb_tensor_list *got, size_t at) {
    ck_assert_int_eq(got->n, saved->n);
    for (int i = 0; i < got->n; i++) {
        const nb_tensor *want = nb_list_get(saved, got->names[i]);
        if (!want)
            want = saved->t[i]; /* a renamed entry: same position in data order */
        ck_assert_msg(want->numel == got->t[i]->numel && want->dtype == got->t[i]->dtype,
                      "flip at bit %zu: '%s' changed type or size", at, got->names[i]);
        ck_assert_msg(
            !memcmp(want->data, got->t[i]->data, want->numel * nb_dtype_size(want->dtype)),
            "flip at bit %zu: '%s' loaded other values", at, got->names[i]);
    }
}

START_TEST(test_header_bit_flips) {
    states s;
    states_init(&s);
    nb_ctx *ctx = nb_ctx_new(0), *keep = nb_ctx_new(0);
    ck_assert_int_eq(save_state(ctx, &s.b), NB_OK);
    nb_tensor_list saved = {0};
    ck_assert_int_eq(nb_load_safetensors(keep, file_path(), &saved), NB_OK);
    size_t n;
    unsigned char *bytes = read_all(file_path(), &n);
    size_t header = 8;
    for (int k = 0; k < 8; k++)
        header += (size_t)bytes[k] << (8 * k);
    ck_assert_uint_lt(header, n);
    int loaded = 0;
    for (size_t bit = 0; bit < 8 * header; bit++) {
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        write_all(file_path(), bytes, n);
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        nb_ctx_reset(ctx);
        nb_tensor_list out = {0};
        if (nb_load_safetensors(ctx, file_path(), &out) == NB_OK) {
            check_same_values(&saved, &out, bit);
            loaded++;
        } else {
            ck_assert_error_has(ctx, "load_safetensors");
        }
        nb_ctx_reset(ctx);
        uint64_t before = nb_fuzz_model_hash(&s.a);
        nb_status st = nb_load_checkpoint(ctx, file_path(), &s.a.params, s.a.opt, &s.a.extra);
        if (st == NB_OK) {
            ck_assert_msg(nb_fuzz_model_hash(&s.a) == s.hb, "flip at bit %zu loaded other state",
                          bit);
            nb_fuzz_model_free(&s.a); /* back to A for the next flip */
            ck_assert_int_eq(nb_fuzz_model_init(&s.a), 0);
        } else {
            ck_assert(nb_fuzz_model_hash(&s.a) == before);
        }
    }
    /* Flips in metadata values and padding leave valid files: some load. */
    ck_assert_int_gt(loaded, 0);
    free(bytes);
    nb_ctx_free(keep);
    nb_ctx_free(ctx);
    states_free(&s);
}
END_TEST

Suite *suite_io_faults(void) {
    Suite *s = suite_create("io_faults");
    TCase *tc = tcase_create("faults");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_fault_every_call_checkpoint);
    tcase_add_test(tc, test_fault_every_call_safetensors);
    tcase_add_test(tc, test_sigkill_during_saves);
    tcase_add_test(tc, test_truncated_every_length);
    tcase_add_test(tc, test_header_bit_flips);
    suite_add_tcase(s, tc);
    return s;
}
