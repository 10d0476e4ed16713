/* check_nabla.h - helpers shared by the Check suites. Each tests/check_*.c
 * defines `Suite *suite_<module>(void)`; the Makefile collects them. */
#ifndef CHECK_NABLA_H
#define CHECK_NABLA_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "nabla.h"

/* Every element of t equals want[0..n-1] within tol. */
#define ck_assert_tensor_near(t, want, n, tol)                                         \
    do {                                                                               \
        const nb_tensor *t_ = (t);                                                     \
        ck_assert_ptr_nonnull(t_);                                                     \
        ck_assert_uint_eq(t_->numel, (size_t)(n));                                     \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                    \
            ck_assert_msg(fabs(nb_get(t_, i_) - (want)[i_]) <= (tol),                  \
                          "element %zu: got %.6f, want %.6f", i_, nb_get(t_, i_),      \
                          (double)(want)[i_]);                                         \
    } while (0)

/* Same for the gradient of t. */
#define ck_assert_grad_near(t, want, n, tol)                                           \
    do {                                                                               \
        const nb_tensor *t_ = (t);                                                     \
        ck_assert_ptr_nonnull(t_);                                                     \
        ck_assert_ptr_nonnull(t_->grad);                                               \
        for (size_t i_ = 0; i_ < (size_t)(n); i_++)                                    \
            ck_assert_msg(fabs(nb_grad_get(t_, i_) - (want)[i_]) <= (tol),             \
                          "grad element %zu: got %.6f, want %.6f", i_,                 \
                          nb_grad_get(t_, i_), (double)(want)[i_]);                    \
    } while (0)

/* The context's error message contains `part`. */
#define ck_assert_error_has(ctx, part)                                                 \
    do {                                                                               \
        const char *e_ = nb_ctx_error(ctx);                                            \
        ck_assert_msg(e_ != NULL, "expected an error containing '%s'", (part));        \
        ck_assert_msg(strstr(e_, (part)) != NULL, "error '%s' lacks '%s'", e_, (part)); \
    } while (0)

/* The first n-1 bytes of a file into buf, NUL-terminated ("" when it cannot
 * be read). */
static inline void nb_test_read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(buf, 1, n - 1, f) : 0;
    buf[k] = '\0';
    if (f) fclose(f);
}

/* Prints t into a string (caller frees). */
static inline char *nb_test_format(const nb_tensor *t) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nb_fprint(f, t);
    fclose(f);
    return buf;
}

/* The seeds' six 3-d embeddings of "Your journey starts with one step". */
static const double NB_SEED_INPUTS[18] = {
    0.43, 0.15, 0.89, 0.55, 0.87, 0.66, 0.57, 0.85, 0.64,
    0.22, 0.58, 0.33, 0.77, 0.25, 0.10, 0.05, 0.80, 0.55,
};

/* The build directory the programs were built in: $NB_BUILD_DIR (set by
 * `make test`), else NB_SOURCE_DIR "/build". */
static inline const char *nb_test_build_dir(void) {
    const char *dir = getenv("NB_BUILD_DIR");
    return dir && *dir ? dir : NB_SOURCE_DIR "/build";
}

/* The whole file at path, NUL-terminated (caller frees); *len its size when
 * len is not NULL. The test fails when it cannot be read. */
static inline char *nb_test_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    ck_assert_int_ge(n, 0);
    ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
    char *text = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return text;
}

/* Runs a shell command; its stdout goes into *out (caller frees), its exit
 * status is returned (-1 when it did not exit). */
static inline int nb_test_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen(%s) failed", cmd);
    size_t len = 0;
    FILE *m = open_memstream(out, &len);
    ck_assert_ptr_nonnull(m);
    int ch;
    while ((ch = fgetc(p)) != EOF) fputc(ch, m);
    fclose(m);
    int st = pclose(p);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif
