/* make_seeds.c - writes the fuzz targets' seed corpora (`make fuzz-seeds`):
 * valid files saved by nabla ("ok-*") and broken ones derived from them
 * ("bad-*"). The files are committed under tests/fuzz/seeds/<target>/;
 * tests/check_fuzz_regressions.c loads every one and checks ok-* load and
 * bad-* are refused.
 *
 *   make_seeds DIR      writes DIR/safetensors/ and DIR/checkpoint/ */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "fuzz_input.h"

static const char *g_dir;

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    *n = fread(p, 1, (size_t)len, f);
    fclose(f);
    return p;
}

static void put(const char *sub, const char *name, const void *p, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s", g_dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s\n", path);
        exit(1);
    }
}

/* A file with header `json` and `data_len` bytes of data (value k at byte k). */
static void put_raw(const char *sub, const char *name, const char *json, size_t data_len) {
    size_t h = strlen(json), n = 8 + h + data_len;
    unsigned char *p = malloc(n);
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)((uint64_t)h >> (8 * k));
    memcpy(p + 8, json, h);
    for (size_t k = 0; k < data_len; k++)
        p[8 + h + k] = (unsigned char)(k % 2);
    put(sub, name, p, n);
    free(p);
}

/* Variants of a valid file: truncated, header size too big / huge, a byte of
 * the JSON flipped into garbage, one byte of data missing. */
static void put_broken(const char *sub, const unsigned char *p, size_t n) {
    unsigned char *q = malloc(n);
    put(sub, "bad-truncated-header", p, n / 4);
    put(sub, "bad-truncated-data", p, n - 1);
    put(sub, "bad-short", p, 5);
    memcpy(q, p, n);
    q[0] = (unsigned char)(q[0] + 1);
    put(sub, "bad-header-size", q, n);
    memcpy(q, p, n);
    q[7] = 0x7f;
    put(sub, "bad-header-huge", q, n);
    memcpy(q, p, n);
    q[8] = '[';
    put(sub, "bad-not-object", q, n);
    memcpy(q, p, n);
    q[9] = 0xff;
    put(sub, "bad-utf8", q, n);
    free(q);
}

static void safetensors_seeds(nb_ctx *ctx) {
    const char *sub = "safetensors";
    char path[512];
    nb_tensor_list l = {0};
    nb_list_add(
        &l, "weight",
        nb_from_doubles(ctx, NB_F32, NB_SHAPE(2, 3), (const double[]){1, -2, 3.5, 0, 1e-3, 7}));
    nb_list_add(&l, "bias", nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (const double[]){1, 2, 3}));
    nb_list_add(&l, "ids",
                nb_from_doubles(ctx, NB_I64, NB_SHAPE(2, 2), (const double[]){0, 5, -1, 9}));
    nb_list_add(&l, "mask",
                nb_from_doubles(ctx, NB_BOOL, NB_SHAPE(1, 1, 2, 1), (const double[]){1, 0}));
    nb_list_add(&l, "scalar", nb_scalar(ctx, NB_F32, 2.5));
    const char *keys[] = {"format", "note"}, *vals[] = {"pt", "caf\xc3\xa9"};
    snprintf(path, sizeof path, "%s/%s/ok-all-dtypes", g_dir, sub);
    if (nb_save_safetensors(ctx, path, &l, 2, keys, vals)) {
        fprintf(stderr, "make_seeds: %s\n", nb_ctx_error(ctx));
        exit(1);
    }
    size_t n;
    unsigned char *p = slurp(path, &n);
    put_broken(sub, p, n);
    free(p);
    put_raw(sub, "ok-empty", "{}", 0);
    put_raw(sub, "ok-f16-bf16",
            "{\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]},"
            "\"g\":{\"dtype\":\"BF16\",\"shape\":[1,2],\"data_offsets\":[4,8]}}",
            8);
    put_raw(sub, "ok-metadata-only", "{\"__metadata__\":{\"a\":\"b\"}}", 0);
    put_raw(sub, "bad-dtype", "{\"x\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
            4);
    put_raw(sub, "bad-offsets-overlap",
            "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
            "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]}}",
            8);
    put_raw(sub, "bad-offsets-past-end",
            "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4);
    put_raw(sub, "ok-shape-zero",
            "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0);
    put_raw(sub, "bad-shape-overflow",
            "{\"x\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}",
            8);
    put_raw(sub, "bad-shape-9d",
            "{\"x\":{\"dtype\":\"BOOL\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
            1);
    put_raw(sub, "bad-bool-byte",
            "{\"x\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 0);
    put_raw(sub, "bad-duplicate",
            "{\"x\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]},"
            "\"x\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[1,2]}}",
            2);
    put_raw(sub, "bad-float-offset",
            "{\"x\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1.5]}}", 1);
    put_raw(sub, "bad-metadata-number", "{\"__metadata__\":{\"a\":1}}", 0);
    put_raw(sub, "bad-trailing-bytes", "{}", 3);
    put_raw(sub, "bad-empty-name",
            "{\"\":{\"dtype\":\"BOOL\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
}

static void checkpoint_seeds(nb_ctx *ctx) {
    const char *sub = "checkpoint";
    char path[512];
    nb_fuzz_model m;
    if (nb_fuzz_model_init(&m))
        exit(1);
    snprintf(path, sizeof path, "%s/%s/ok-adam", g_dir, sub);
    const char *keys[] = {"epoch"}, *vals[] = {"3"};
    if (nb_save_checkpoint(ctx, path, &m.params, m.opt, &m.extra, 1, keys, vals)) {
        fprintf(stderr, "make_seeds: %s\n", nb_ctx_error(ctx));
        exit(1);
    }
    size_t n;
    unsigned char *p = slurp(path, &n);
    put_broken(sub, p, n);
    free(p);
    /* Plain safetensors of the parameters: no "format". */
    snprintf(path, sizeof path, "%s/%s/bad-no-format", g_dir, sub);
    nb_save_safetensors(ctx, path, &m.params, 0, NULL, NULL);
    /* An SGD checkpoint where Adam is expected. */
    nb_optim *sgd = nb_sgd_new(ctx, &m.params, nb_sgd_defaults(0.1));
    snprintf(path, sizeof path, "%s/%s/bad-other-optimizer", g_dir, sub);
    nb_save_checkpoint(ctx, path, &m.params, sgd, &m.extra, 0, NULL, NULL);
    nb_optim_free(sgd);
    /* w saved with the wrong shape. */
    nb_tensor_list wrong = m.params;
    wrong.t[0] = nb_zeros(ctx, NB_F32, NB_SHAPE(3, 2));
    snprintf(path, sizeof path, "%s/%s/bad-shape", g_dir, sub);
    nb_save_checkpoint(ctx, path, &wrong, NULL, &m.extra, 0, NULL, NULL);
    /* No optimizer state, no extras. */
    snprintf(path, sizeof path, "%s/%s/bad-no-optimizer", g_dir, sub);
    nb_save_checkpoint(ctx, path, &m.params, NULL, &m.extra, 0, NULL, NULL);
    snprintf(path, sizeof path, "%s/%s/bad-no-extra", g_dir, sub);
    nb_save_checkpoint(ctx, path, &m.params, m.opt, NULL, 0, NULL, NULL);
    if (nb_ctx_status(ctx)) {
        fprintf(stderr, "make_seeds: %s\n", nb_ctx_error(ctx));
        exit(1);
    }
    nb_fuzz_model_free(&m);
}

int main(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help")) {
        printf("usage: make_seeds DIR\nWrites the fuzz seed corpora into DIR/safetensors and "
               "DIR/checkpoint.\n");
        return argc == 2 ? 0 : 2;
    }
    g_dir = argv[1];
    char sub[512];
    const char *subs[] = {"safetensors", "checkpoint"};
    for (int i = 0; i < 2; i++) {
        snprintf(sub, sizeof sub, "%s/%s", g_dir, subs[i]);
        if (mkdir(g_dir, 0755) && errno != EEXIST)
            return 1;
        if (mkdir(sub, 0755) && errno != EEXIST)
            return 1;
    }
    nb_ctx *ctx = nb_ctx_new(0);
    safetensors_seeds(ctx);
    checkpoint_seeds(ctx);
    nb_ctx_free(ctx);
    return 0;
}
