/* teach/op_formula.c - every op's local backward rule and forward-mode rule
 * as one-line formulas, from the op list (include/nabla/ops.def), for the
 * teaching views (the tape explorer shows the backward beside each step). */
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

/* and its forward-mode rule, the list's tangent column */
static const char *const tangents[NB_OP_COUNT] = {
#define NB_OP(id, name, n_in, formula, tangent, ...) [NB_OP_##id] = tangent,
#include "nabla/ops.def"
#undef NB_OP
    [NB_OP_CUSTOM] = "the user's forward-mode rule (nb_node_set_forward_rule)",
};

const char *nb_op_tangent_formula(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT) ? tangents[op] : "?";
}
