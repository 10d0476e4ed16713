/* matrix_util.h - assertions shared by the bad-input matrix
 * (tests/check_matrix*.c). */
#ifndef NB_MATRIX_UTIL_H
#define NB_MATRIX_UTIL_H

#include "check_nabla.h"

/* `failed` (the call's result says it failed) holds, the context has status
 * `want` and a message naming `op`; then the error is cleared. */
#define expect_fail(ctx, failed, want, op)                                                         \
    do {                                                                                           \
        bool f_ = (failed);                                                                        \
        const char *m_ = nb_ctx_error(ctx);                                                        \
        ck_assert_msg(f_, "%s: a bad call was accepted (line %d)", (op), __LINE__);                \
        ck_assert_msg(nb_ctx_status(ctx) == (want), "%s: status %s, want %s: %s", (op),            \
                      nb_status_str(nb_ctx_status(ctx)), nb_status_str(want),                      \
                      m_ ? m_ : "(no message)");                                                   \
        ck_assert_msg(m_ &&strstr(m_, (op)), "%s: message '%s' does not name it", (op),            \
                      m_ ? m_ : "(none)");                                                         \
        nb_ctx_clear_error(ctx);                                                                   \
    } while (0)

/* The same with any error status. */
#define expect_any(ctx, failed, op)                                                                \
    do {                                                                                           \
        bool f_ = (failed);                                                                        \
        const char *m_ = nb_ctx_error(ctx);                                                        \
        ck_assert_msg(f_, "%s: a bad call was accepted (line %d)", (op), __LINE__);                \
        ck_assert_msg(nb_ctx_status(ctx) != NB_OK, "%s: no error recorded (line %d)", (op),        \
                      __LINE__);                                                                   \
        ck_assert_msg(m_ &&strstr(m_, (op)), "%s: message '%s' does not name it", (op),            \
                      m_ ? m_ : "(none)");                                                         \
        nb_ctx_clear_error(ctx);                                                                   \
    } while (0)

#endif
