/* tape/op_table.c - every op's name and arity, indexed by nb_op. Adding an op to
 * the enum without a row here fails to compile. */
#include "nb_internal.h"

typedef struct op_info {
    const char *name;
    int arity; /* tensor inputs; -1 for a variable count */
} op_info;

static const op_info op_table[] = {
    [NB_OP_ADD] = {"add", 2},
    [NB_OP_SUB] = {"sub", 2},
    [NB_OP_MUL] = {"mul", 2},
    [NB_OP_DIV] = {"div", 2},
    [NB_OP_NEG] = {"neg", 1},
    [NB_OP_SCALE] = {"scale", 1},
    [NB_OP_ADD_SCALAR] = {"add_scalar", 1},
    [NB_OP_EXP] = {"exp", 1},
    [NB_OP_LOG] = {"log", 1},
    [NB_OP_SQRT] = {"sqrt", 1},
    [NB_OP_POW] = {"pow", 1},
    [NB_OP_TANH] = {"tanh", 1},
    [NB_OP_SIGMOID] = {"sigmoid", 1},
    [NB_OP_RELU] = {"relu", 1},
    [NB_OP_GELU] = {"gelu", 1},
    [NB_OP_SUM] = {"sum", 1},
    [NB_OP_MEAN] = {"mean", 1},
    [NB_OP_SUM_DIM] = {"sum_dim", 1},
    [NB_OP_MEAN_DIM] = {"mean_dim", 1},
    [NB_OP_MAX_DIM] = {"max_dim", 1},
    [NB_OP_MATMUL] = {"matmul", 2},
    [NB_OP_TRANSPOSE] = {"transpose", 1},
    [NB_OP_PERMUTE] = {"permute", 1},
    [NB_OP_RESHAPE] = {"reshape", 1},
    [NB_OP_CONTIGUOUS] = {"contiguous", 1},
    [NB_OP_CONCAT] = {"concat", -1},
    [NB_OP_SPLIT] = {"split", 1},
    [NB_OP_MASKED_FILL] = {"masked_fill", 1},
    [NB_OP_CAUSAL_FILL] = {"causal_fill", 1},
    [NB_OP_SOFTMAX] = {"softmax", 1},
    [NB_OP_LOG_SOFTMAX] = {"log_softmax", 1},
    [NB_OP_CROSS_ENTROPY] = {"cross_entropy", 1},
    [NB_OP_MSE_LOSS] = {"mse_loss", 2},
    [NB_OP_LINEAR] = {"linear", 3},
    [NB_OP_DROPOUT] = {"dropout", 1},
    [NB_OP_EMBEDDING] = {"embedding", 1},
    [NB_OP_LAYER_NORM] = {"layer_norm", 3},
    [NB_OP_SDPA] = {"sdpa", 3},
    [NB_OP_CUSTOM] = {"custom", -1},
};
_Static_assert(sizeof(op_table) / sizeof(op_table[0]) == NB_OP_COUNT,
               "every nb_op needs a row in op_table");

const char *nb_op_name(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT && op_table[op].name) ? op_table[op].name : "?";
}

int nb_op_arity(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT) ? op_table[op].arity : 0;
}
