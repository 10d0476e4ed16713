/* check_examples.c - runs the seed walkthroughs (examples/seed_*.c, built to
 * <build>/examples/) and checks that they exit with status 0 and print the
 * seed notebooks' numbers verbatim, in PyTorch's print format. Numbers that
 * the notebooks cannot show (modules loaded with torch.manual_seed(123)
 * weights, gradients) come from PyTorch via tools/ref/gen_attention_refs.py.
 *
 * The build dir is $NB_BUILD_DIR if set, else NB_SOURCE_DIR "/build" (the
 * Makefile's default B). `make test` builds the examples first. */
#include <sys/wait.h>
#include <unistd.h>

#include "check_nabla.h"

#include "attention_refs.h"

#ifndef NB_SOURCE_DIR
#define NB_SOURCE_DIR "."
#endif

/* Row separators in PyTorch's print: a 2-D tensor's next row, a 3-D tensor's
 * next row, and its next matrix. */
#define R2 ",\n        "
#define R3 ",\n         "
#define M3 ",\n\n        "

typedef struct example_run {
    const char *name;
    char *out; /* stdout and stderr */
    int status;
} example_run;

static example_run run_example(const char *name) {
    const char *dir = getenv("NB_BUILD_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/examples/%s", dir && *dir ? dir : NB_SOURCE_DIR "/build",
             name);
    ck_assert_msg(access(path, X_OK) == 0,
                  "example binary %s is missing: build it with `make all` first (or set "
                  "NB_BUILD_DIR to the build dir that has it)",
                  path);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "'%s' 2>&1", path);
    FILE *p = popen(cmd, "r");
    ck_assert_msg(p != NULL, "popen(%s) failed", cmd);
    size_t len = 0, cap = 1 << 14;
    char *out = malloc(cap);
    ck_assert_ptr_nonnull(out);
    size_t got;
    while ((got = fread(out + len, 1, cap - len - 1, p)) > 0) {
        len += got;
        if (cap - len - 1 == 0) {
            out = realloc(out, cap *= 2);
            ck_assert_ptr_nonnull(out);
        }
    }
    out[len] = '\0';
    int st = pclose(p);
    example_run r = {name, out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
    ck_assert_msg(r.status == 0, "%s exited with status %d; its output:\n%s", name, r.status, out);
    return r;
}

/* Finds `block` in the output at or after `from` (NULL: the start); returns
 * the position just after it, so consecutive calls check the order too. */
static const char *expect(const example_run *r, const char *from, const char *block) {
    const char *at = strstr(from ? from : r->out, block);
    ck_assert_msg(at != NULL, "%s does not print (at this point):\n%s\n---- its output:\n%s",
                  r->name, block, r->out);
    return at + strlen(block);
}

/* Parses the numbers of the tensor printed first after `from` ("tensor(...)"
 * up to its closing ")") into v[0..n-1]; asserts there are exactly n. */
static const char *parse_tensor(const example_run *r, const char *from, double *v, int n) {
    const char *s = strstr(from, "tensor(");
    ck_assert_msg(s != NULL, "%s: no tensor after '%.40s'", r->name, from);
    s += strlen("tensor(");
    int k = 0;
    while (*s && *s != ')') {
        if (strchr("-0123456789i", *s)) {
            char *end;
            double x = strtod(s, &end);
            ck_assert_msg(end != s, "%s: unparsable number at '%.20s'", r->name, s);
            ck_assert_msg(k < n, "%s: more than %d numbers in a tensor", r->name, n);
            v[k++] = x;
            s = end;
        } else {
            s++;
        }
    }
    ck_assert_msg(k == n, "%s: %d numbers in a tensor, expected %d", r->name, k, n);
    return s;
}

/* ---- seed_self_attention: seed 004's first part (and 001's, 002's) ---------- */

START_TEST(test_seed_self_attention) {
    example_run r = run_example("seed_self_attention");
    const char *c = NULL;
    c = expect(&r, c, "tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])");
    c = expect(&r, c, "tensor([0.1455, 0.2278, 0.2249, 0.1285, 0.1077, 0.1656])");
    c = expect(&r, c, "tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581])");
    /* the weights sum to 1 (PyTorch prints tensor(1.); 1.0000 is the same at 4 dp) */
    ck_assert(strstr(c, "sum: tensor(1.)\n") || strstr(c, "sum: tensor(1.0000)\n"));
    c = expect(&r, c, "tensor([0.4419, 0.6515, 0.5683])");
    c = expect(&r, c,
               "tensor([[0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310]" R2
               "[0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]" R2
               "[0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605]" R2
               "[0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565]" R2
               "[0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935]" R2
               "[0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450]])");
    c = expect(&r, c,
               "tensor([[0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452]" R2
               "[0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]" R2
               "[0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565]" R2
               "[0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720]" R2
               "[0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295]" R2
               "[0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896]])");
    c = expect(&r, c, "row sums: tensor([1.0000, 1.0000, 1.0000, 1.0000, 1.0000, 1.0000])");
    expect(&r, c,
           "tensor([[0.4421, 0.5931, 0.5790]" R2 "[0.4419, 0.6515, 0.5683]" R2
           "[0.4431, 0.6496, 0.5671]" R2 "[0.4304, 0.6298, 0.5510]" R2
           "[0.4671, 0.5910, 0.5266]" R2 "[0.4177, 0.6503, 0.5645]])");
    free(r.out);
}
END_TEST

/* ---- seed_trainable_attention: seed 000 (and 004's second part) ------------- */

#define SEED_CONTEXT                                                                       \
    "tensor([[0.2996, 0.8053]" R2 "[0.3061, 0.8210]" R2 "[0.3058, 0.8203]" R2             \
    "[0.2948, 0.7939]" R2 "[0.2927, 0.7891]" R2 "[0.2990, 0.8040]])"

START_TEST(test_seed_trainable_attention) {
    example_run r = run_example("seed_trainable_attention");
    const char *c = NULL;
    /* the three matrices as the seeds print them */
    c = expect(&r, c, "tensor([[0.2961, 0.5166]" R2 "[0.2517, 0.6886]" R2 "[0.0740, 0.8665]])");
    c = expect(&r, c, "tensor([[0.1366, 0.1025]" R2 "[0.1841, 0.7264]" R2 "[0.3153, 0.6871]])");
    c = expect(&r, c, "tensor([[0.0756, 0.1966]" R2 "[0.3164, 0.4017]" R2 "[0.1186, 0.8274]])");
    /* query_2, key_2, value_2 */
    c = expect(&r, c, "tensor([0.4306, 1.4551])\ntensor([0.4433, 1.1419])\n"
                      "tensor([0.3951, 1.0037])\n");
    c = expect(&r, c, "keys.shape: (6, 2)   # torch.Size([6, 2])\n"
                      "values.shape: (6, 2)   # torch.Size([6, 2])\n"
                      "queries.shape: (6, 2)   # torch.Size([6, 2])\n");
    /* queries, keys, values (seed 004 prints them) */
    c = expect(&r, c,
               "tensor([[0.2309, 1.0966]" R2 "[0.4306, 1.4551]" R2 "[0.4300, 1.4343]" R2
               "[0.2355, 0.7990]" R2 "[0.2983, 0.6565]" R2 "[0.2568, 1.0533]])");
    c = expect(&r, c,
               "tensor([[0.3669, 0.7646]" R2 "[0.4433, 1.1419]" R2 "[0.4361, 1.1156]" R2
               "[0.2408, 0.6706]" R2 "[0.1827, 0.3292]" R2 "[0.3275, 0.9642]])");
    c = expect(&r, c,
               "tensor([[0.1855, 0.8812]" R2 "[0.3951, 1.0037]" R2 "[0.3879, 0.9831]" R2
               "[0.2393, 0.5493]" R2 "[0.1492, 0.3346]" R2 "[0.3221, 0.7863]])");
    c = expect(&r, c, "tensor(1.8524)");
    c = expect(&r, c, "tensor([1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440])");
    c = expect(&r, c, "attn_scores.shape: (6, 6)   # torch.Size([6, 6])");
    c = expect(&r, c,
               "tensor([[0.9231, 1.3545, 1.3241, 0.7910, 0.4032, 1.1330]" R2
               "[1.2705, 1.8524, 1.8111, 1.0795, 0.5577, 1.5440]" R2
               "[1.2544, 1.8284, 1.7877, 1.0654, 0.5508, 1.5238]" R2
               "[0.6973, 1.0167, 0.9941, 0.5925, 0.3061, 0.8475]" R2
               "[0.6114, 0.8819, 0.8626, 0.5121, 0.2707, 0.7307]" R2
               "[0.8995, 1.3165, 1.2871, 0.7682, 0.3937, 1.0996]])");
    c = expect(&r, c, "d_k = 2\n");
    c = expect(&r, c, "tensor([0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820])");
    c = expect(&r, c,
               "tensor([[0.1551, 0.2104, 0.2059, 0.1413, 0.1074, 0.1799]" R2
               "[0.1500, 0.2264, 0.2199, 0.1311, 0.0906, 0.1820]" R2
               "[0.1503, 0.2256, 0.2192, 0.1315, 0.0914, 0.1819]" R2
               "[0.1591, 0.1994, 0.1962, 0.1477, 0.1206, 0.1769]" R2
               "[0.1610, 0.1949, 0.1923, 0.1501, 0.1265, 0.1752]" R2
               "[0.1557, 0.2092, 0.2048, 0.1419, 0.1089, 0.1794]])");
    c = expect(&r, c, "tensor([0.3061, 0.8210])");
    c = expect(&r, c, SEED_CONTEXT);
    /* seed 004's example query x^3: its query, scores, weights, context */
    c = expect(&r, c, "tensor([0.4300, 1.4343])");
    c = expect(&r, c, "tensor([1.2544, 1.8284, 1.7877, 1.0654, 0.5508, 1.5238])\n"
                      "tensor([0.1503, 0.2256, 0.2192, 0.1315, 0.0914, 0.1819])\n"
                      "tensor([0.3058, 0.8203])\n");
    /* the module gives the same context vectors */
    c = expect(&r, c, "SelfAttention_v1(d_in=3, d_out=2) with these weights:\n" SEED_CONTEXT);
    /* seed 000's sa_v2 weights, nn.Linear's (out, in), and their transposes */
    c = expect(&r, c, "sa_v2.W_query.weight, (out, in) = (2, 3):\n"
                      "tensor([[-0.1362,  0.1853,  0.4083]" R2 "[ 0.1076,  0.1579,  0.5573]])");
    c = expect(&r, c, "tensor([[-0.1362,  0.1076]" R2 "[ 0.1853,  0.1579]" R2
                      "[ 0.4083,  0.5573]])");
    c = expect(&r, c, "sa_v2.W_key.weight, (out, in) = (2, 3):\n"
                      "tensor([[-0.2604,  0.1829, -0.2569]" R2 "[ 0.4126,  0.4611, -0.5323]])");
    c = expect(&r, c, "tensor([[-0.2604,  0.4126]" R2 "[ 0.1829,  0.4611]" R2
                      "[-0.2569, -0.5323]])");
    c = expect(&r, c, "sa_v2.W_value.weight, (out, in) = (2, 3):\n"
                      "tensor([[ 0.4929,  0.2757,  0.2516]" R2 "[ 0.2377,  0.4800, -0.0762]])");
    c = expect(&r, c, "tensor([[ 0.4929,  0.2377]" R2 "[ 0.2757,  0.4800]" R2
                      "[ 0.2516, -0.0762]])");
    c = expect(&r, c, "SelfAttention_v2(d_in=3, d_out=2) with these weights:\n"
                      "tensor([[0.5085, 0.3508]" R2 "[0.5084, 0.3508]" R2 "[0.5084, 0.3506]" R2
                      "[0.5074, 0.3471]" R2 "[0.5076, 0.3446]" R2 "[0.5077, 0.3493]])");
    /* seed 004's freshly seeded sa_v2 */
    expect(&r, c, "tensor([[-0.5337, -0.1051]" R2 "[-0.5323, -0.1080]" R2 "[-0.5323, -0.1079]" R2
                  "[-0.5297, -0.1076]" R2 "[-0.5311, -0.1066]" R2 "[-0.5299, -0.1081]])");
    free(r.out);
}
END_TEST

/* ---- seed_causal_attention: seed 004's causal part -------------------------- */

static const double causal_weights[36] = {
    1.0000, 0, 0, 0, 0, 0,
    0.3986, 0.6014, 0, 0, 0, 0,
    0.2526, 0.3791, 0.3683, 0, 0, 0,
    0.2265, 0.2839, 0.2794, 0.2103, 0, 0,
    0.1952, 0.2363, 0.2331, 0.1820, 0.1534, 0,
    0.1557, 0.2092, 0.2048, 0.1419, 0.1089, 0.1794,
};

/* PyTorch's CausalAttention(3, 2, 6, 0.5) for manual_seed(123) in eval mode
 * (ref_ca_eval_out), as it prints it. */
#define CAUSAL_EVAL_SEQ                                                                    \
    "[[-0.4519,  0.2216]" R3 "[-0.5874,  0.0058]" R3 "[-0.6300, -0.0632]" R3              \
    "[-0.5675, -0.0843]" R3 "[-0.5526, -0.0981]" R3 "[-0.5299, -0.1081]]"

START_TEST(test_seed_causal_attention) {
    example_run r = run_example("seed_causal_attention");
    const char *c = NULL;
    c = expect(&r, c,
               "tensor([[False,  True,  True,  True,  True,  True]" R2
               "[False, False,  True,  True,  True,  True]" R2
               "[False, False, False,  True,  True,  True]" R2
               "[False, False, False, False,  True,  True]" R2
               "[False, False, False, False, False,  True]" R2
               "[False, False, False, False, False, False]])");
    c = expect(&r, c,
               "tensor([[0.9231,   -inf,   -inf,   -inf,   -inf,   -inf]" R2
               "[1.2705, 1.8524,   -inf,   -inf,   -inf,   -inf]" R2
               "[1.2544, 1.8284, 1.7877,   -inf,   -inf,   -inf]" R2
               "[0.6973, 1.0167, 0.9941, 0.5925,   -inf,   -inf]" R2
               "[0.6114, 0.8819, 0.8626, 0.5121, 0.2707,   -inf]" R2
               "[0.8995, 1.3165, 1.2871, 0.7682, 0.3937, 1.0996]])");
    c = expect(&r, c, "nb_causal_fill(attn_scores, -inf) is the same: yes");
    c = expect(&r, c,
               "tensor([[1.0000, 0.0000, 0.0000, 0.0000, 0.0000, 0.0000]" R2
               "[0.3986, 0.6014, 0.0000, 0.0000, 0.0000, 0.0000]" R2
               "[0.2526, 0.3791, 0.3683, 0.0000, 0.0000, 0.0000]" R2
               "[0.2265, 0.2839, 0.2794, 0.2103, 0.0000, 0.0000]" R2
               "[0.1952, 0.2363, 0.2331, 0.1820, 0.1534, 0.0000]" R2
               "[0.1557, 0.2092, 0.2048, 0.1419, 0.1089, 0.1794]])");

    /* dropout(0.5) of ones: every element 2. or 0. (PCG32's mask, not
     * PyTorch's), printed in PyTorch's whole-number style */
    c = expect(&r, c, "dropout(0.5) of ones(6, 6), PCG32 seeded with 123:\ntensor([[");
    double v[36];
    c = parse_tensor(&r, c - strlen("tensor([["), v, 36);
    int kept = 0;
    for (int i = 0; i < 36; i++) {
        ck_assert_msg(v[i] == 0.0 || v[i] == 2.0, "dropout of ones printed %g", v[i]);
        kept += v[i] == 2.0;
    }
    ck_assert_int_gt(kept, 6);
    ck_assert_int_lt(kept, 30);
    c = expect(&r, c, "(PyTorch's manual_seed(123) drops other positions: a different generator)");
    /* dropout of the causal weights: each is dropped (0) or doubled */
    c = expect(&r, c, "dropout(0.5) of attn_weights:\n");
    c = parse_tensor(&r, c, v, 36);
    for (int i = 0; i < 36; i++)
        ck_assert_msg(v[i] == 0.0 || fabs(v[i] - 2 * causal_weights[i]) <= 2.5e-4,
                      "dropped-out weight %d is %g, neither 0 nor 2 * %g", i, v[i],
                      causal_weights[i]);

    c = expect(&r, c, "batch.shape: (2, 6, 3)   # torch.Size([2, 6, 3])");
    /* train mode: the module's dropout is the mask replayed by hand, and the
     * output is not the dropout-free one */
    c = expect(&r, c, "train mode:\n");
    const char *eval_at = strstr(c, "eval mode");
    ck_assert_ptr_nonnull(eval_at);
    const char *eval_block = strstr(c, "tensor([" CAUSAL_EVAL_SEQ M3 CAUSAL_EVAL_SEQ "])");
    ck_assert_msg(eval_block == NULL || eval_block > eval_at,
                  "train-mode output equals the eval-mode one: dropout did nothing");
    parse_tensor(&r, c, v, 24);
    c = expect(&r, c, "context_vecs.shape: (2, 6, 2)   # torch.Size([2, 6, 2])");
    c = expect(&r, c, "with the mask replayed: the same context vectors");
    /* eval mode: dropout off, PyTorch's numbers */
    expect(&r, c, "eval mode (no dropout):\ntensor(" "[" CAUSAL_EVAL_SEQ M3 CAUSAL_EVAL_SEQ "])");
    free(r.out);
}
END_TEST

/* ---- seed_multihead: seed 004's multi-head part ------------------------------ */

/* PyTorch's MultiHeadAttentionWrapper(3, 2, 6, 0.0, 2) for manual_seed(123)
 * (ref_wrap_out), one sequence, as it prints it. */
#define WRAP_SEQ                                                                           \
    "[[-0.4519,  0.2216,  0.4772,  0.1063]" R3 "[-0.5874,  0.0058,  0.5891,  0.3257]" R3  \
    "[-0.6300, -0.0632,  0.6202,  0.3860]" R3 "[-0.5675, -0.0843,  0.5478,  0.3589]" R3   \
    "[-0.5526, -0.0981,  0.5321,  0.3428]" R3 "[-0.5299, -0.1081,  0.5077,  0.3493]]"
/* What seed 004 prints for MultiHeadAttention, each sequence. */
#define MHA_SEQ                                                                            \
    "[[0.3190, 0.4858]" R3 "[0.2943, 0.3897]" R3 "[0.2856, 0.3593]" R3 "[0.2693, 0.3873]" R3 \
    "[0.2639, 0.3928]" R3 "[0.2575, 0.4028]]"

START_TEST(test_seed_multihead) {
    example_run r = run_example("seed_multihead");
    const char *c = NULL;
    c = expect(&r, c, "batch.shape: (2, 6, 3)   # torch.Size([2, 6, 3])");
    c = expect(&r, c, "  heads.0.W_query.weight   (2, 3)\n");
    c = expect(&r, c, "  heads.1.W_value.weight   (2, 3)\n");
    c = expect(&r, c, "tensor([" WRAP_SEQ M3 WRAP_SEQ "])");
    c = expect(&r, c, "context_vecs.shape: (2, 6, 4)   # torch.Size([2, 6, 4])");
    c = expect(&r, c, "  out_proj.weight          (2, 2)\n  out_proj.bias            (2)\n");
    c = expect(&r, c, "attn_weights.shape: (2, 2, 6, 6)   # torch.Size([2, 2, 6, 6])");
    c = expect(&r, c, "tensor([" MHA_SEQ M3 MHA_SEQ "])");
    expect(&r, c, "context_vecs.shape: (2, 6, 2)   # torch.Size([2, 6, 2])");
    free(r.out);
}
END_TEST

/* ---- seed_gpt: the course's next chapter, GPTModel 124M ---------------------- */

/* The course's printout for GPT_CONFIG_124M (the counts follow from the
 * shapes alone, whatever the weights), and tokens from the untrained model. */
START_TEST(test_seed_gpt) {
    example_run r = run_example("seed_gpt");
    const char *c = NULL;
    c = expect(&r, c, "tok_emb                              (50257, 768)               38,597,376\n");
    c = expect(&r, c, "trf_blocks.0.ff.layers.0             (3072, 768) (3072)          2,362,368\n");
    c = expect(&r, c, "out_head                             (50257, 768)               38,597,376\n");
    c = expect(&r, c, "Total number of parameters: 163,009,536\n");
    c = expect(&r, c, "Number of trainable parameters considering weight tying: 124,412,160\n");
    c = expect(&r, c, "Total size of the model: 621.83 MB\n");
    c = expect(&r, c, "Output: [15496, 11, 314, 716, ");
    expect(&r, c, "Output length: 10\n");
    free(r.out);
}
END_TEST

/* ---- seed_sky_is_blue: seed 003, plus its gradients ------------------------ */

START_TEST(test_seed_sky_is_blue) {
    example_run r = run_example("seed_sky_is_blue");
    const char *c = NULL;
    c = expect(&r, c, "tensor([[0.2261, 0.7422]" R2 "[0.1702, 0.2896]" R2 "[0.2098, 0.3536]])");
    c = expect(&r, c, "tensor([[ 0.4986, -0.5362]" R2 "[ 0.0550,  0.0647]" R2
                      "[ 0.0639,  0.0855]])");
    c = expect(&r, c, "tensor([[0.3048, 0.0934]" R2 "[0.0763, 0.1909]" R2 "[0.0921, 0.2368]])");
    c = expect(&r, c, "tensor([[-0.2853,  0.0604,  0.0779]" R2 "[-0.0704,  0.0281,  0.0356]" R2
                      "[-0.0850,  0.0344,  0.0436]])");
    c = expect(&r, c, "tensor([[-0.2017,  0.0427,  0.0551]" R2 "[-0.0498,  0.0199,  0.0252]" R2
                      "[-0.0601,  0.0243,  0.0309]])");
    c = expect(&r, c, "tensor([[0.2801, 0.3577, 0.3622]" R2 "[0.3175, 0.3404, 0.3422]" R2
                      "[0.3141, 0.3418, 0.3441]])");
    c = expect(&r, c, "tensor([[0.1460, 0.1802]" R2 "[0.1543, 0.1757]" R2 "[0.1535, 0.1761]])");
    c = expect(&r, c, "tape: 9 nodes\n");

    /* The gradients, PyTorch-style at 4 dp, then a table of autograd (f32)
     * and central differences (f64) at 8 dp, checked against PyTorch's
     * float32 and float64 gradients. */
    static const char *const names[3] = {"WQ", "WK", "WV"};
    static const char *const printed[3] = {
        "tensor([[-0.0069,  0.0093]" R2 "[-0.0097,  0.0131]])",
        "tensor([[-0.0096, -0.0216]" R2 "[-0.0006, -0.0014]])",
        "tensor([[-0.9951, -0.9951]" R2 "[-1.4621, -1.4621]])",
    };
    const double *const want32[3] = {ref_sky_grad_wq_f32, ref_sky_grad_wk_f32, ref_sky_grad_wv_f32};
    const double *const want64[3] = {ref_sky_grad_wq_f64, ref_sky_grad_wk_f64, ref_sky_grad_wv_f64};
    for (int w = 0; w < 3; w++) {
        char head[64];
        snprintf(head, sizeof head, "d sum(O) / d %s:\n", names[w]);
        c = expect(&r, c, head);
        c = expect(&r, c, printed[w]);
        for (int k = 0; k < 4; k++) {
            char entry[32];
            snprintf(entry, sizeof entry, "  %s[%d,%d]  ", names[w], k / 2, k % 2);
            c = expect(&r, c, entry);
            char *end;
            double autograd = strtod(c, &end), numeric = strtod(end, &end);
            ck_assert_msg(end != c, "%s: no numbers after '%s'", r.name, entry);
            ck_assert_msg(strncmp(end, "  ok\n", 5) == 0, "%s: %s is not ok", r.name, entry);
            /* float32 autograd agrees with PyTorch's float32 and float64
             * gradients to float32 precision */
            ck_assert_double_eq_tol(autograd, want32[w][k], 1e-6);
            ck_assert_double_eq_tol(autograd, want64[w][k], 1e-6);
            /* the float64 central difference with PyTorch's float64 gradient,
             * to the 8 printed decimals */
            ck_assert_double_eq_tol(numeric, want64[w][k], 2e-8);
        }
    }
    c = expect(&r, c, "gradcheck: passed");
    expect(&r, c, "all gradients check out");
    free(r.out);
}
END_TEST

/* gradcheck(layer, params + inputs) on an f32 layer with a custom op: the
 * right backward passes, the planted wrong one is named, the layer stays f32. */
START_TEST(test_gradcheck_module) {
    example_run r = run_example("gradcheck_module");
    const char *c = expect(&r, NULL, "right backward: passed\n");
    c = expect(&r, c, "wrong backward: blamed 'softsign', created at line 46, its input 0\n");
    expect(&r, c, "the module is still f32: weight f32, bias f32\n");
    free(r.out);
}
END_TEST

Suite *suite_examples(void) {
    Suite *s = suite_create("examples");
    TCase *tc = tcase_create("seed walkthroughs");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_seed_self_attention);
    tcase_add_test(tc, test_seed_trainable_attention);
    tcase_add_test(tc, test_seed_causal_attention);
    tcase_add_test(tc, test_seed_multihead);
    tcase_add_test(tc, test_seed_sky_is_blue);
    tcase_add_test(tc, test_seed_gpt);
    tcase_add_test(tc, test_gradcheck_module);
    suite_add_tcase(s, tc);
    return s;
}
