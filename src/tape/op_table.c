/* tape/op_table.c - every op's name and input count, from the op list
 * (include/nabla/ops.def). */
#include "tape/tape_internal.h"

typedef struct op_info {
    const char *name;
    int n_in; /* tensor inputs; -1 for a variable count */
} op_info;

static const op_info op_table[NB_OP_COUNT] = {
#define NB_OP(id, name, n_in, formula, ...) [NB_OP_##id] = {#name, n_in},
#include "nabla/ops.def"
#undef NB_OP
    [NB_OP_CUSTOM] = {"custom", -1},
};

const char *nb_op_name(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT) ? op_table[op].name : "?";
}

int nb_op_arity(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT) ? op_table[op].n_in : 0;
}
