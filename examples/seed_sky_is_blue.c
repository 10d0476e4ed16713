/* seed_sky_is_blue - seed 003's three-token example ("sky is blue") with
 * its given WQ, WK, WV: every intermediate tensor the notebook prints, then
 * what it does not show: the gradients of sum(O) with respect to the three
 * weight matrices, each beside a float64 central finite difference, and
 * nb_gradcheck's verdict. Exits with status 1 if any check fails.
 *
 *   build/examples/seed_sky_is_blue */
#include <math.h>
#include <stdio.h>

#include "nabla.h"

#include "example_args.h"

static const double embedded[3 * 2] = {-1.0720, -0.5001, -0.0120, -0.4311, -0.0050, -0.5321};
static const double wq[4] = {-0.0271, -0.3840, -0.3940, -0.6610};
static const double wk[4] = {-0.4109, 0.5777, -0.1162, -0.1661};
static const double wv[4] = {-0.2045, 0.1210, -0.1712, -0.4462};

/* O = softmax(Q K^T / sqrt(d_k)) V with Q = E WQ, K = E WK, V = E WV.
 * in = {E, WQ, WK, WV}; prints the steps when `show` is set. */
static nb_tensor *attention(nb_ctx *ctx, nb_tensor *const *in, bool show) {
    nb_tensor *Q = nb_matmul(ctx, in[0], in[1]);
    nb_tensor *K = nb_matmul(ctx, in[0], in[2]);
    nb_tensor *V = nb_matmul(ctx, in[0], in[3]);
    nb_tensor *logits = nb_matmul(ctx, Q, nb_transpose(ctx, K, 0, 1));
    double d_k = Q ? (double)Q->shape[1] : 1.0;
    nb_tensor *scaled = nb_scale(ctx, logits, 1.0 / sqrt(d_k));
    nb_tensor *weights = nb_softmax(ctx, scaled);
    nb_tensor *O = nb_matmul(ctx, weights, V);
    if (show && !nb_ctx_error(ctx)) {
        printf("Q = E @ WQ:\n"), nb_print(Q);
        printf("K = E @ WK:\n"), nb_print(K);
        printf("V = E @ WV:\n"), nb_print(V);
        printf("attention logits Q @ K.T:\n"), nb_print(logits);
        printf("scaled by 1/sqrt(d_k), d_k = %g:\n", d_k), nb_print(scaled);
        printf("attention weights (softmax of each row):\n"), nb_print(weights);
        /* a side computation: keep it off the tape of sum(O) */
        bool was = nb_set_grad_enabled(ctx, false);
        printf("row sums: "), nb_print(nb_sum_dim(ctx, weights, -1, false));
        nb_set_grad_enabled(ctx, was);
        printf("O = weights @ V:\n"), nb_print(O);
    }
    return O;
}

static nb_tensor *sum_of_attention(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return nb_sum(ctx, attention(ctx, in, false));
}

int main(int argc, char **argv) {
    int rc = example_args(argc, argv,
                          "usage: seed_sky_is_blue [--help]\n"
                          "Seed 003's \"sky is blue\" example, its gradients and gradcheck.\n"
                          "Prints to stdout; writes no files.\n");
    if (rc >= 0) return rc;
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) return 1;
    nb_tensor *in[4] = {
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(3, 2), embedded),
        nb_requires_grad(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 2), wq)),
        nb_requires_grad(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 2), wk)),
        nb_requires_grad(nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 2), wv)),
    };
    nb_tensor *O = attention(ctx, in, true);
    nb_tensor *loss = nb_sum(ctx, O);
    if (nb_backward(ctx, loss, NULL) != NB_OK) {
        fprintf(stderr, "error: %s\n", nb_ctx_error(ctx));
        nb_ctx_free(ctx);
        return 1;
    }
    printf("\nthe tape of sum(O):\n");
    nb_tape_print(ctx, stdout);

    /* Each gradient entry beside its central difference
     * (f(w + h) - f(w - h)) / 2h, h = 1e-6, computed in float64 from float64
     * copies of the inputs, and PyTorch's gradcheck test
     * |autograd - numeric| <= 1e-5 + 1e-3 |numeric|. */
    const char *names[4] = {"E", "WQ", "WK", "WV"};
    nb_ctx *work = nb_ctx_new(0);
    int bad = 0;
    for (int w = 1; w <= 3; w++) {
        printf("\nd sum(O) / d %s:\n", names[w]);
        nb_print_grad(in[w]);
        printf("  entry    autograd (f32)  central diff (f64)\n");
        for (size_t k = 0; k < 4; k++) {
            double f[2];
            for (int s = 0; s < 2; s++) {
                nb_ctx_reset(work);
                nb_tensor *x[4];
                for (int i = 0; i < 4; i++) x[i] = nb_copy(work, in[i], NB_F64);
                ((double *)x[w]->data)[k] += s ? -1e-6 : 1e-6;
                f[s] = nb_item(sum_of_attention(work, x, NULL));
            }
            double numeric = (f[0] - f[1]) / 2e-6, analytic = nb_grad_get(in[w], k);
            bool ok = fabs(numeric - analytic) <= 1e-5 + 1e-3 * fabs(numeric);
            bad += !ok;
            printf("  %s[%zu,%zu]  %14.8f  %18.8f  %s\n", names[w], k / 2, k % 2, analytic, numeric,
                   ok ? "ok" : "MISMATCH");
        }
    }
    nb_ctx_free(work);

    nb_gradcheck_result r;
    nb_status st = nb_gradcheck(ctx, sum_of_attention, NULL, 4, in, NULL, &r);
    printf("\nnb_gradcheck of WQ, WK, WV (float64, eps 1e-6, atol 1e-5, rtol 1e-3):\n%s\n",
           r.message);
    int status = (st != NB_OK || bad) ? 1 : 0;
    printf("%s\n", status ? "GRADIENT CHECK FAILED" : "all gradients check out");
    nb_ctx_free(ctx);
    return status;
}
