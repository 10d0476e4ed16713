/* teach/tape_json.h - the JSON model of a tape, shared by nb_tape_json and the
 * page nb_tape_html writes (io/ only). */
#ifndef NB_TAPE_JSON_H
#define NB_TAPE_JSON_H

#include "nabla/teach.h"
#include "tape/tape_internal.h"

/* Writes the model of nb_tape_json; with `steps`, each node that backward
 * reached also gets "sends": what its local rule adds to each input's
 * gradient (null for inputs that need none), found by running the rule again
 * into scratch buffers. Returns NB_OK, NB_ERR_NULL, NB_ERR_MEMORY or
 * NB_ERR_IO. */
NB_HIDDEN nb_status nb_tape_json_write(nb_ctx *ctx, const nb_tensor *root, FILE *f, bool steps,
                                       const nb_tape_html_opts *check);

/* Writes ,"check":{...} for node (op_check.c): its analytic gradients
 * beside central differences, as nb_tape_html_ex describes. */
NB_HIDDEN nb_status nb_tape_write_check(FILE *f, nb_ctx *ctx, const nb_node *node,
                                        const nb_tape_html_opts *opts);

/* A string as JSON, quoted and escaped. */
NB_HIDDEN void nb_json_str(FILE *f, const char *s);

/* A number as JSON (non-finite ones as strings). */
NB_HIDDEN void nb_json_num(FILE *f, double v, nb_dtype dt);

/* Element i of buf, which holds t->numel elements of t's dtype (t->data or
 * t->grad), as a double. */
NB_HIDDEN double nb_buf_get(const nb_tensor *t, const void *buf, size_t i);

#endif
