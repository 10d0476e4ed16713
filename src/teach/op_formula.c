/* teach/op_formula.c - every op's local backward rule as a one-line
 * formula, from the op list (include/nabla/ops.def), for the teaching views
 * (the tape explorer shows it beside each step). */
#include "tape/tape_internal.h"

static const char *const formulas[NB_OP_COUNT] = {
#define NB_OP(id, name, n_in, formula, ...) [NB_OP_##id] = formula,
#include "nabla/ops.def"
#undef NB_OP
    [NB_OP_CUSTOM] = "the user's backward function (nb_record)",
};

const char *nb_op_formula(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT) ? formulas[op] : "?";
}
