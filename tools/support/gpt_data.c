/* gpt_data.c - nanoGPT's prepared data: --dataset and prepare (gpt_data.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt_data.h"
#include "gpt_flags.h"

int gpt_mkdirs(const char *prog, const char *flag, const char *path) {
    char p[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof p) return gpt_fail(prog, "%s: an empty or too long path", flag);
    memcpy(p, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (mkdir(p, 0777) && errno != EEXIST)
            return gpt_fail(prog, "%s=%s: cannot create %s: %s", flag, path, p, strerror(errno));
        if (stat(p, &st) == 0 && !S_ISDIR(st.st_mode))
            return gpt_fail(prog, "%s=%s: %s is %s, not a directory", flag, path, p,
                            gpt_file_kind(st.st_mode));
        p[i] = c;
    }
    return 0;
}

static int map_tokens(const char *prog, const char *dir, const char *name, gpt_tokens *t) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY);
    struct stat st = {0};
    if (fd < 0) return gpt_fail(prog, "--dataset: %s: %s", path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return gpt_fail(prog, "--dataset: %s is %s, not a regular file", path, gpt_file_kind(st.st_mode));
    }
    if (st.st_size % 2 || st.st_size < 4) {
        close(fd);
        return gpt_fail(prog, "--dataset: %s has %lld bytes: not uint16 token ids (an even "
                        "count, at least 2 tokens)", path, (long long)st.st_size);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return gpt_fail(prog, "--dataset: %s: mmap: %s", path, strerror(errno));
    t->u16 = m, t->n = st.st_size / 2, t->map_len = (size_t)st.st_size;
    return 0;
}

static int read_meta(const char *prog, gpt_dataset *ds) {
    char path[4200], err[300];
    snprintf(path, sizeof path, "%s/meta.pkl", ds->dir);
    if (access(path, F_OK)) return 0; /* nanoGPT: no meta.pkl means GPT-2's 50304 */
    size_t len;
    char *buf = gpt_read_file(prog, path, &len);
    if (!buf) return GPT_EXIT_USAGE;
    int st = gpt_meta_pkl_read((const unsigned char *)buf, len, &ds->meta, err, sizeof err);
    free(buf);
    if (st) return gpt_fail(prog, "--dataset: %s: %s", path, err);
    ds->has_meta = true;
    return 0;
}

int gpt_dataset_open(const char *prog, const char *name, gpt_dataset *ds) {
    memset(ds, 0, sizeof *ds);
    struct stat st;
    snprintf(ds->dir, sizeof ds->dir, "data/%s", name);
    if (stat(ds->dir, &st) || !S_ISDIR(st.st_mode)) {
        snprintf(ds->dir, sizeof ds->dir, "%s", name);
        if (stat(ds->dir, &st) || !S_ISDIR(st.st_mode))
            return gpt_fail(prog, "--dataset=%s: neither data/%s nor %s is a directory (one "
                            "holding nanoGPT's train.bin, val.bin and meta.pkl; make one with "
                            "nabla-gpt prepare)", name, name, name);
    }
    int r = map_tokens(prog, ds->dir, "train.bin", &ds->train);
    if (!r) r = map_tokens(prog, ds->dir, "val.bin", &ds->val);
    if (!r) r = read_meta(prog, ds);
    if (r) gpt_dataset_close(ds);
    return r;
}

void gpt_dataset_close(gpt_dataset *ds) {
    if (ds->train.u16) munmap((void *)ds->train.u16, ds->train.map_len);
    if (ds->val.u16) munmap((void *)ds->val.u16, ds->val.map_len);
    gpt_meta_pkl_free(&ds->meta);
    ds->train.u16 = ds->val.u16 = NULL;
}

int gpt_tokens_batch(nb_ctx *ctx, const gpt_tokens *t, int64_t vocab, int64_t B, int64_t T,
                     nb_pcg32 *rng, nb_tensor **x, nb_tensor **y, char *err, size_t n) {
    *x = *y = NULL;
    if (t->n < T + 1 || t->n - T > (int64_t)UINT32_MAX)
        return snprintf(err, n, "%lld tokens, expected at least block_size + 1 = %lld (and at "
                        "most 2^32 + block_size)", (long long)t->n, (long long)T + 1), -1;
    nb_tensor *bx = nb_empty(ctx, NB_I64, NB_SHAPE(B, T)), *by = nb_empty(ctx, NB_I64, NB_SHAPE(B, T));
    if (!bx || !by) return snprintf(err, n, "%s", nb_ctx_error(ctx)), -1;
    int64_t *px = bx->data, *py = by->data;
    for (int64_t b = 0; b < B; b++) {
        int64_t i = nb_pcg32_bounded(rng, (uint32_t)(t->n - T));
        for (int64_t k = 0; k <= T; k++) {
            const unsigned char *p = t->u16 + 2 * (i + k);
            int64_t id = p[0] | p[1] << 8;
            if (id >= vocab)
                return snprintf(err, n, "token %lld at index %lld is outside the vocabulary "
                                "0..%lld", (long long)id, (long long)(i + k), (long long)vocab - 1), -1;
            if (k < T) px[b * T + k] = id;
            if (k > 0) py[b * T + k - 1] = id;
        }
    }
    *x = bx, *y = by;
    return 0;
}

/* ---- prepare ------------------------------------------------------------------ */
size_t gpt_universal_newlines(char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else {
            s[o++] = s[i];
        }
    }
    return o;
}

static int write_bytes(const char *prog, const char *dir, const char *name, const void *p, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f)) ok = false;
    return ok ? 0 : gpt_fail(prog, "prepare: cannot write %s: %s", path, strerror(errno));
}

static int write_ids(const char *prog, const char *dir, const char *name, const uint32_t *cp,
                     int64_t n, const uint16_t *id_of, const uint32_t *chars, int V) {
    unsigned char *b = malloc((size_t)n * 2 + 1);
    if (!b) return gpt_fail(prog, "prepare: out of memory");
    for (int64_t i = 0; i < n; i++) {
        uint32_t c = cp[i];
        int id = c < 0x10000 ? id_of[c] : 0xffff;
        if (id == 0xffff) { /* above the BMP (or id 65535): binary search */
            int lo = 0, hi = V - 1;
            while (lo < hi) {
                int mid = (lo + hi) / 2;
                if (chars[mid] < c) lo = mid + 1; else hi = mid;
            }
            id = lo;
        }
        b[2 * i] = (unsigned char)(id & 255), b[2 * i + 1] = (unsigned char)(id >> 8);
    }
    int st = write_bytes(prog, dir, name, b, (size_t)n * 2);
    free(b);
    return st;
}

/* Long: one pass each over the text (read, decode, vocabulary, write). */
int gpt_prepare(const char *prog, const char *input, const char *out_dir) {
    size_t len;
    char *text = gpt_read_file(prog, input, &len);
    if (!text) return GPT_EXIT_USAGE;
    len = gpt_universal_newlines(text, len);
    nb_ctx *ctx = nb_ctx_new(0);
    uint32_t *cp = NULL, *chars = NULL;
    uint16_t *id_of = NULL;
    unsigned char *seen = NULL, *pkl = NULL;
    int st = 0;
    if (nb_utf8_check(ctx, "prepare", text, len))
        st = gpt_fail(prog, "--data=%s: %s", input, nb_ctx_error(ctx));
    int64_t n = 0;
    cp = st ? NULL : malloc((len + 1) * sizeof *cp);
    seen = st ? NULL : calloc(0x110000 / 8, 1);
    if (!st && (!cp || !seen)) st = gpt_fail(prog, "prepare: out of memory");
    for (size_t i = 0; !st && i < len; n++) { /* valid UTF-8 (checked above) */
        const unsigned char *s = (const unsigned char *)text + i;
        int k = s[0] < 0x80 ? 1 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : 4;
        uint32_t c = k == 1 ? s[0] : s[0] & (0x7f >> k);
        for (int j = 1; j < k; j++) c = c << 6 | (s[j] & 0x3f);
        cp[n] = c, seen[c / 8] |= (unsigned char)(1u << c % 8), i += (size_t)k;
    }
    if (!st && n == 0) st = gpt_fail(prog, "--data=%s: the text is empty", input);
    int V = 0;
    if (!st) {
        chars = malloc(0x110000 * sizeof *chars);
        id_of = malloc(0x10000 * sizeof *id_of);
        if (!chars || !id_of) st = gpt_fail(prog, "prepare: out of memory");
        for (uint32_t c = 0; !st && c < 0x110000; c++)
            if (seen[c / 8] >> c % 8 & 1) chars[V++] = c;
        for (uint32_t c = 0; !st && c < 0x10000; c++) id_of[c] = 0xffff;
        for (int i = 0; !st && i < V && i < 0xffff && chars[i] < 0x10000; i++) id_of[chars[i]] = (uint16_t)i;
        if (!st && V > 65536)
            st = gpt_fail(prog, "--data=%s: %d distinct characters: over the 65536 ids uint16 "
                          "holds", input, V);
    }
    int64_t n_train = (int64_t)((double)n * 0.9);
    if (!st) st = gpt_mkdirs(prog, "--out_dir", out_dir);
    if (!st) {
        printf("length of dataset in characters: %lld\nvocab size: %d\n", (long long)n, V);
        st = write_ids(prog, out_dir, "train.bin", cp, n_train, id_of, chars, V);
    }
    if (!st) st = write_ids(prog, out_dir, "val.bin", cp + n_train, n - n_train, id_of, chars, V);
    size_t pkl_len = 0;
    if (!st && !(pkl = gpt_meta_pkl_write(chars, V, &pkl_len))) st = gpt_fail(prog, "prepare: out of memory");
    if (!st) st = write_bytes(prog, out_dir, "meta.pkl", pkl, pkl_len);
    if (!st)
        printf("train.bin has %lld tokens\nval.bin has %lld tokens\nwrote %s/{train.bin,val.bin,meta.pkl}\n",
               (long long)n_train, (long long)(n - n_train), out_dir);
    free(text), free(cp), free(chars), free(id_of), free(seen), free(pkl);
    nb_ctx_free(ctx);
    return st;
}
