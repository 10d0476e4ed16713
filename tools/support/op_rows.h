/* op_rows.h - the op list's NB_OP rows (include/nabla/ops.def) as cases:
 * for each row, the op as a function of its inputs and each input's domain
 * and shape. The gradcheck tool, the parity replay and the bad-input matrix
 * read their generated cases from here, so an op added as one row is
 * checked by all three without a line of its own in any of them.
 *
 * Not part of the library: included by tools/nabla-gradcheck.c,
 * tools/test/parity.c and tests/check_matrix_ops.c, each of which gets its
 * own static copy of the table. */
#ifndef NB_OP_ROWS_H
#define NB_OP_ROWS_H

#include "nabla.h"

/* An input's domain: what values its draws may take. */
typedef enum nb_row_domain {
    NB_ROW_REAL,     /* any value (gradcheck draws [-1, 1], the fixtures N(0, 1)) */
    NB_ROW_AWAY,     /* |x| >= 0.2 with a random sign: away from kinks at 0 */
    NB_ROW_POSITIVE, /* x >= 0.3: inside log's and sqrt's domain */
} nb_row_domain;

typedef struct nb_row_input {
    nb_row_domain domain;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
} nb_row_input;

#define NB_ROW_MAX_IN 4

typedef struct nb_row_case {
    const char *name;   /* the op's name, as nb_op_name gives it */
    nb_op op;
    nb_gradcheck_fn fn; /* fn(c, x, NULL): the row's call on inputs x */
    int n_in;
    nb_row_input in[NB_ROW_MAX_IN];
    const char *torch; /* the PyTorch expression gen_fixtures.py evaluates */
} nb_row_case;

/* NB_IN(DOMAIN, dims...): the number of dims counted from the list. */
#define NB_ROW_NARGS_(a, b, c, d, e, f, g, h, n, ...) n
#define NB_ROW_NARGS(...) NB_ROW_NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define NB_IN(domain, ...) {NB_ROW_##domain, NB_ROW_NARGS(__VA_ARGS__), {__VA_ARGS__}}
#define NB_ROW_UNPAREN(...) __VA_ARGS__

/* The row's call as a function of (c, x). A row whose PyTorch expression or
 * forward-mode formula (tangent) is empty stops the build here, naming the
 * op. */
#define NB_OP(id, name, n_in, formula, tangent, call, inputs, torch)                      \
    _Static_assert(sizeof(torch) > 1,                                                     \
                   "op " #name ": its row in ops.def has no PyTorch expression");         \
    _Static_assert(sizeof(tangent) > 1,                                                   \
                   "op " #name ": its row in ops.def has no forward-mode rule");          \
    static nb_tensor *nb_row_##name(nb_ctx *c, nb_tensor *const *x, void *user) {         \
        (void)user;                                                                       \
        return call;                                                                      \
    }
#define NB_OP_HAND(id, name, n_in, formula, tangent)
#include "nabla/ops.def"
#undef NB_OP
#undef NB_OP_HAND

static const nb_row_case nb_row_cases[] = {
#define NB_OP(id, name, n_in, formula, tangent, call, inputs, torch)                               \
    {#name, NB_OP_##id, nb_row_##name, n_in, {NB_ROW_UNPAREN inputs}, torch},
#define NB_OP_HAND(id, name, n_in, formula, tangent)
#include "nabla/ops.def"
#undef NB_OP
#undef NB_OP_HAND
};
#define NB_N_ROW_CASES ((int)(sizeof nb_row_cases / sizeof nb_row_cases[0]))

/* The row case of op, or NULL for an op written by hand. */
static inline const nb_row_case *nb_row_case_of(nb_op op) {
    for (int i = 0; i < NB_N_ROW_CASES; i++)
        if (nb_row_cases[i].op == op) return &nb_row_cases[i];
    return NULL;
}

/* "(2,3), (3)": the inputs' shapes, for a report line. */
static inline const char *nb_row_shapes(const nb_row_case *r, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->n_in && k < n; i++) {
        k += (size_t)snprintf(buf + k, n - k, "%s(", i ? ", " : "");
        for (int d = 0; d < r->in[i].ndim && k < n; d++)
            k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? "," : "",
                                  (long long)r->in[i].shape[d]);
        if (k < n) k += (size_t)snprintf(buf + k, n - k, ")");
    }
    return buf;
}

#endif
