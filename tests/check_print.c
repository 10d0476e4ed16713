/* check_print.c - nb_fprint against PyTorch 1.13's repr, byte for byte, for
 * the table of tensors in tests/fixtures/print.txt (written by
 * tools/ref/gen_print_fixtures.py: tiny, huge, mixed sign, nan/inf, whole
 * numbers, 0-d, 4-d, summarized big tensors, f32/f64, i64, bool, and
 * non-default print options). */
#include "check_nabla.h"

#define FIXTURE NB_SOURCE_DIR "/tests/fixtures/print.txt"

typedef struct pcase {
    char name[64];
    nb_dtype dt;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    int precision, edgeitems, linewidth, sci;
    int64_t threshold;
    double *data;
    size_t n;
    char *repr;
} pcase;

static char *next_line(FILE *f, char **line, size_t *cap) {
    ssize_t len = getline(line, cap, f);
    if (len < 0) return NULL;
    if (len > 0 && (*line)[len - 1] == '\n') (*line)[len - 1] = '\0';
    return *line;
}

/* Reads one case; false at the end of the file. */
static bool read_case(FILE *f, pcase *c, char **line, size_t *cap) {
    char *s;
    do {
        if (!(s = next_line(f, line, cap))) return false;
    } while (s[0] == '#');
    memset(c, 0, sizeof *c);
    ck_assert_int_eq(sscanf(s, "case %63s", c->name), 1);
    char dt[8];
    ck_assert_int_eq(sscanf(next_line(f, line, cap), "dtype %7s", dt), 1);
    c->dt = !strcmp(dt, "f32") ? NB_F32 : !strcmp(dt, "f64") ? NB_F64 : !strcmp(dt, "i64") ? NB_I64 : NB_BOOL;
    s = next_line(f, line, cap) + strlen("shape");
    char *end;
    for (long d; (d = strtol(s, &end, 10)), end != s; s = end) c->shape[c->ndim++] = d;
    ck_assert_int_eq(sscanf(next_line(f, line, cap), "opts %d %ld %d %d %d", &c->precision,
                            (long *)&c->threshold, &c->edgeitems, &c->linewidth, &c->sci), 5);
    size_t numel = 1;
    for (int d = 0; d < c->ndim; d++) numel *= (size_t)c->shape[d];
    c->data = malloc(numel * sizeof *c->data);
    s = next_line(f, line, cap) + strlen("data");
    for (double v; c->n < numel && ((v = strtod(s, &end)), end != s); s = end) c->data[c->n++] = v;
    ck_assert_msg(c->n == numel, "%s: %zu values for %zu elements", c->name, c->n, numel);
    int n_lines;
    ck_assert_int_eq(sscanf(next_line(f, line, cap), "repr %d", &n_lines), 1);
    size_t len = 0;
    FILE *m = open_memstream(&c->repr, &len);
    for (int k = 0; k < n_lines; k++) fprintf(m, "%s%s", k ? "\n" : "", next_line(f, line, cap));
    fclose(m);
    return true;
}

START_TEST(test_print_matches_torch_repr) {
    FILE *f = fopen(FIXTURE, "r");
    ck_assert_msg(f != NULL, "cannot open %s", FIXTURE);
    char *line = NULL;
    size_t cap = 0;
    int cases = 0, failed = 0;
    pcase c;
    while (read_case(f, &c, &line, &cap)) {
        nb_ctx *ctx = nb_ctx_new(0);
        nb_tensor *t = nb_from_doubles(ctx, c.dt, c.ndim, c.shape, c.data);
        ck_assert_ptr_nonnull(t);
        nb_set_printoptions(c.precision, c.threshold, c.edgeitems, c.linewidth, c.sci);
        char *got = nb_test_format(t);
        nb_reset_printoptions();
        if (strcmp(got, c.repr) != 0) {
            failed++;
            fprintf(stderr, "print case %s:\n--- torch\n%s\n--- nabla\n%s\n", c.name, c.repr, got);
        }
        cases++;
        free(got), free(c.repr), free(c.data);
        nb_ctx_free(ctx);
    }
    free(line);
    fclose(f);
    ck_assert_int_ge(cases, 40);
    ck_assert_msg(failed == 0, "%d of %d cases differ from torch's repr (shown on stderr)", failed,
                  cases);
}
END_TEST

/* The options stick until changed; negative values keep the current ones,
 * sci_mode is always set; reset restores PyTorch's defaults. */
START_TEST(test_printoptions_keep_and_reset) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *t = nb_from_doubles(ctx, NB_F32, NB_SHAPE(2), (double[]){1e-10, 1.0});
    nb_set_printoptions(2, -1, -1, -1, 0);
    char *s = nb_test_format(t);
    ck_assert_str_eq(s, "tensor([    0.00,     1.00])"); /* torch pads to the sci width */
    free(s);
    nb_set_printoptions(-1, -1, -1, -1, NB_SCI_AUTO); /* precision 2 stays */
    s = nb_test_format(t);
    ck_assert_str_eq(s, "tensor([1.00e-10, 1.00e+00])");
    free(s);
    nb_reset_printoptions();
    s = nb_test_format(t);
    ck_assert_str_eq(s, "tensor([1.0000e-10, 1.0000e+00])");
    free(s);
    nb_ctx_free(ctx);
}
END_TEST

Suite *suite_print(void) {
    Suite *s = suite_create("print");
    TCase *tc = tcase_create("torch");
    tcase_add_test(tc, test_print_matches_torch_repr);
    tcase_add_test(tc, test_printoptions_keep_and_reset);
    suite_add_tcase(s, tc);
    return s;
}
