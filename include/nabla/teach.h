/* nabla/teach.h - views of the tape for teaching backprop.
 *
 * Record a forward pass, run nb_backward, then write the page:
 *
 *   nb_tensor *L = nb_mse_loss(ctx, nb_tanh(ctx, nb_matmul(ctx, x, W)), y);
 *   nb_backward(ctx, L, NULL);
 *   FILE *f = fopen("tape.html", "w");
 *   nb_tape_html(ctx, L, f);          // check the status, then fclose(f)
 *
 * Opening tape.html in a browser shows the graph; clicking a tensor shows
 * its values, gradient and creation site; "Step" walks the backward pass one
 * node at a time. nb_tape_print and nb_tape_dot (nabla/core.h) are the text
 * and Graphviz views of the same tape. */
#ifndef NABLA_TEACH_H
#define NABLA_TEACH_H

#include "core.h"
#include "gradcheck.h"
#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op's local backward rule as a one-line formula, in terms of dout (the
 * gradient arriving at its output), out and its inputs: "dx = dout · y,  dy
 * = dout · x" for mul. Static; "?" for values out of range. */
const char *nb_op_formula(nb_op op);
/* The op's forward-mode rule as a one-line formula, in terms of its inputs'
 * tangents tx, ty, ... and its output's tout: "tout = tx · y + x · ty" for
 * mul. Static; "?" for values out of range. */
const char *nb_op_tangent_formula(nb_op op);

/* Writes one self-contained HTML page (inline CSS and script, nothing
 * fetched) that explores the tape up to `root` (every node when root is
 * NULL): the forward graph laid out in the page, ops grouped into boxes by
 * module path (nb_ctx_push_scope; folded by default past 40 ops, unfolded
 * by a click or by the backward step), each tensor's shape, values and
 * gradient as text (the first 64) and as a heatmap (up to 2048 elements;
 * attention weights as query x key maps), each op's label with its
 * constant, its module, site and call site, and a step-by-step backward
 * pass: for each node, newest first, the gradient it receives, what it
 * sends to each input and its rule (nb_op_formula). The graph is laid out
 * by the build's elkjs when there is one (layout_js under nb_tape_html_ex).
 *
 * Run nb_backward(ctx, root, ...) first for the backward steps; without it
 * the page shows the forward graph only. To find what each node sends, the
 * writer runs every local rule once more into scratch buffers: the tensors'
 * own gradients are left as they were, and the context's arena may grow.
 * Write it before anything changes the tensors' values (an optimizer step):
 * the rules read the values as they are now.
 *
 * Returns NB_OK; NB_ERR_NULL for a NULL ctx or f; NB_ERR_MEMORY; NB_ERR_IO
 * when a write to f failed (ferror). The message ("tape_html: a write
 * failed") is recorded on ctx, as for nb_tape_print (nabla/core.h), which
 * also says how the views treat a context that already holds an error. The
 * caller opens and closes f (check fclose too). */
nb_status nb_tape_html(nb_ctx *ctx, const nb_tensor *root, FILE *f);

/* What nb_tape_html_ex adds to the page.
 *
 * layout_js: the path of elkjs's elk.bundled.js (npm package elkjs), inlined
 * into the page: the graph is then laid out by ELK's layered algorithm, each
 * module (nb_ctx_push_scope) a box around its ops, edges routed around the
 * boxes, and folding a module lays the graph out again. NULL: the copy the
 * build installed (`make` fetches elkjs from npm into build/elk, `make
 * install` puts it in PREFIX/share/nabla), or the file the NB_LAYOUT_JS
 * environment variable names; NB_LAYOUT_JS set but empty, or no copy found:
 * the page's own placement (module boxes around their items, in ranks, with
 * straight edges). The page stays
 * one file that needs no network.
 *
 * forward: "check this op". forward(c, in, user) must record the same tape
 * as the one the page shows (the same ops in the same order) on the fresh
 * context c from the n_in tensors in (the program's inputs, used as they
 * are, not copied) and any parameters it reads; the page is float64 only
 * (ops whose output or input is not F64 are not checked). For each node
 * backward reached, and each float64 input that requires grad, up to
 * max_entries entries (all of a small input, evenly sampled ones of a large
 * one; 0 means 8, at most 64) get the node's analytic gradient (what its rule sends,
 * given the gradient at its output) beside a central difference,
 * <dout, (op(x + eps e) - op(x - eps e)) / 2 eps>, with forward run twice
 * per entry (the entry moved when the node that made it is recorded, or in
 * place for a leaf, then put back), and nb_gradcheck's tolerances (eps
 * 1e-6, atol 1e-5, rtol 1e-3: |a - n| <= atol + rtol |n|). Each node's
 * check (max error, pass or fail, the entries) is in the page: two forward
 * runs per entry, for teaching-sized tapes. NULL: no checks. */
typedef struct nb_tape_html_opts {
    const char *layout_js;
    nb_gradcheck_fn forward;
    void *user;
    int n_in;
    nb_tensor *const *in;
    int max_entries;
} nb_tape_html_opts;

/* nb_tape_html with opts (NULL: as nb_tape_html). Also NB_ERR_IO when
 * layout_js (or the file NB_LAYOUT_JS names) cannot be read; a forward that fails while checking leaves
 * the checks out of the page (and its error on the private context). */
nb_status nb_tape_html_ex(nb_ctx *ctx, const nb_tensor *root, const nb_tape_html_opts *opts,
                          FILE *f);

/* The same model as JSON (what the page embeds, without the per-step
 * contributions): {"tensors": [{"id", "name", "shape", "dtype", "site",
 * "numel", "data", "grad"}...], "nodes": [{"index", "op", "label"
 * (with the op's constant: "scale ×0.125", "pow ^2"), "scope" (module path
 * or null), "site", "call_site", "inputs", "out"}...], "root"}. Values past 64 elements are cut ("truncated": true)
 * and non-finite ones are written as the strings "NaN", "Infinity",
 * "-Infinity". For tests and other tools. Same returns as nb_tape_html. */
nb_status nb_tape_json(nb_ctx *ctx, const nb_tensor *root, FILE *f);

/* Training diagnostics, for any training loop: the statistics of Karpathy's
 * "Building makemore" part 3, over steps.
 *
 *   nb_diag *d = nb_diag_new(ctx, 10, 0);          // every 10 steps, 40 bins
 *   for (step...) {
 *       ... forward, nb_backward, optimizer step (the tape still there) ...
 *       nb_diag_step(ctx, d, step, loss, &params);
 *   }
 *   nb_diag_write_html(ctx, d, f);                 // and/or nb_diag_write_jsonl
 *   nb_diag_free(d);
 *
 * nb_diag_step records every step's loss; on steps that are multiples of
 * `every` also, read off ctx's tape, each tanh, GELU, sigmoid, ReLU and
 * SiLU output ("kind" "activation"), RMSNorm output ("norm") and gated
 * product silu(a) * b ("gated"), each named by its module path, op and
 * tape index: mean, std, for an activation the share saturated (|tanh| >
 * 0.97, sigmoid within 0.03 of 0 or 1, GELU's and SiLU's input below -3,
 * ReLU's output 0; in %; null for the others) and a histogram; and for each
 * parameter its values' std, its gradient's norm and histogram. The next
 * call (whatever its step) adds the update-to-data ratio of that record:
 * log10(std(w_now - w_then) / std(w_now)) per parameter, the update the
 * optimizer made in between (lr times the update; about -3 is healthy;
 * null when a std is 0). Call it after the optimizer step, before ctx is
 * reset. The JSONL has one object a step ({"step", "loss"}, the recorded
 * ones with "activations", "params" and "update_ratio"); the page (one
 * self-contained file, no network, readable at 1280x800) plots the loss,
 * the update ratios over time, the activation and gradient histograms of
 * the last record, the saturation and the gradient norms over time.
 *
 * nb_diag_eval records an evaluation at `step` (the train and val losses
 * of a held-out estimate, as nanoGPT's estimate_loss): a line {"eval",
 * "train_loss", "val_loss"} after the steps' lines, and a val loss line in
 * the page's loss plot.
 *
 * nb_diag_new: NULL with NB_ERR_VALUE on ctx unless every >= 1 and bins in
 * [0, 1000] (0: 40), NB_ERR_MEMORY; NULL for a NULL ctx or one holding an
 * error. The others return NB_OK, NB_ERR_NULL (a NULL ctx records nothing;
 * NULL d or f, or a NULL entry in params, is recorded), NB_ERR_VALUE (a
 * corrupt params list, nothing written), NB_ERR_MEMORY or NB_ERR_IO. nb_diag_free(NULL)
 * does nothing. */
typedef struct nb_diag nb_diag;
nb_diag *nb_diag_new(nb_ctx *ctx, int every, int bins);
nb_status nb_diag_step(nb_ctx *ctx, nb_diag *d, long step, double loss,
                       const nb_tensor_list *params);
nb_status nb_diag_eval(nb_ctx *ctx, nb_diag *d, long step, double train_loss,
                       double val_loss);
nb_status nb_diag_write_jsonl(nb_ctx *ctx, nb_diag *d, FILE *f);
nb_status nb_diag_write_html(nb_ctx *ctx, nb_diag *d, FILE *f);
void nb_diag_free(nb_diag *d);

#ifdef __cplusplus
}
#endif
#endif
