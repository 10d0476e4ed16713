/* nabla-bench-bpe - GPT-2 tokenizer encode speed (nb_bpe_encode with
 * allow_special false, tiktoken's encode_ordinary) on a text file.
 *
 *   nabla-bench-bpe --vocab FILE --merges FILE [--rounds R] TEXT
 *
 * Loads the tokenizer (timed once), encodes the whole file once to warm up,
 * then R more times, and prints one line with the median round:
 *
 *   bpe-encode impl=nabla mb=M tokens=N digest=D ms=X mb_per_s=Y load_ms=Z
 *
 * mb is the file's size in 10^6 bytes; digest is a 32-bit hash of the ids
 * (h = (h ^ id) * 16777619 from 2166136261), the same as
 * tools/bench/bench_bpe.mjs prints for tiktoken's ids, so `make bench-bpe`
 * sees that both gave the same ids. Writes no file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "now.h"

#define MAX_ROUNDS 99

static void usage(FILE *f) {
    fprintf(f, "usage: nabla-bench-bpe --vocab FILE --merges FILE [--rounds R] TEXT\n"
               "  Times GPT-2's tokenizer (nb_bpe_encode, no special tokens) on the file TEXT:\n"
               "  one warm-up round, then R rounds; prints the median as MB/s with the token\n"
               "  count and a digest of the ids. Writes no file.\n"
               "  --vocab FILE   encoder.json or vocab.json\n"
               "  --merges FILE  vocab.bpe or merges.txt\n"
               "  --rounds R     timed rounds, 1..99 (5)\n"
               "  --help         this text\n");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            char *p = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
            if (!p) break;
            buf = p;
        }
        n += got = fread(buf + n, 1, cap - n, f);
    } while (got > 0);
    fclose(f);
    *len = n;
    return buf;
}

/* Parses the flags; returns -1 to go on, else the exit status. */
static int parse(int argc, char **argv, const char **vocab, const char **merges, int *rounds,
                 const char **text) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if ((!strcmp(a, "--vocab") || !strcmp(a, "--merges") || !strcmp(a, "--rounds")) &&
                   i + 1 < argc) {
            const char *v = argv[++i];
            if (a[2] == 'v') *vocab = v;
            else if (a[2] == 'm') *merges = v;
            else if ((*rounds = atoi(v)) < 1 || *rounds > MAX_ROUNDS) {
                fprintf(stderr, "nabla-bench-bpe: --rounds must be 1..%d\n", MAX_ROUNDS);
                return 2;
            }
        } else if (a[0] == '-' || *text) {
            fprintf(stderr, "nabla-bench-bpe: unknown or extra argument '%s'\n", a);
            usage(stderr);
            return 2;
        } else {
            *text = a;
        }
    }
    if (!*vocab || !*merges || !*text) {
        usage(stderr);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv) {
    const char *vocab = NULL, *merges = NULL, *path = NULL;
    int rounds = 5;
    int st = parse(argc, argv, &vocab, &merges, &rounds, &path);
    if (st >= 0) return st;
    size_t len = 0;
    char *text = read_file(path, &len);
    if (!text || !len) {
        fprintf(stderr, "nabla-bench-bpe: cannot read %s, or it is empty\n", path);
        return 1;
    }
    nb_ctx *ctx = nb_ctx_new(0);
    double t0 = now_s();
    nb_bpe *bpe = nb_bpe_load(ctx, vocab, merges);
    double load_ms = 1e3 * (now_s() - t0);
    double ms[MAX_ROUNDS + 1];
    nb_tensor *ids = NULL;
    for (int r = 0; bpe && r <= rounds; r++) {
        nb_ctx_reset(ctx);
        t0 = now_s();
        ids = nb_bpe_encode(ctx, bpe, text, len, false);
        ms[r] = 1e3 * (now_s() - t0);
        if (!ids) break;
    }
    if (!ids) {
        fprintf(stderr, "nabla-bench-bpe: %s\n", nb_ctx_error(ctx));
        return 1;
    }
    uint32_t digest = 2166136261u;
    for (size_t i = 0; i < ids->numel; i++)
        digest = (digest ^ (uint32_t)((const int64_t *)ids->data)[i]) * 16777619u;
    qsort(ms + 1, (size_t)rounds, sizeof ms[0], cmp_double); /* ms[0]: the warm-up */
    double med = ms[1 + rounds / 2];
    printf("bpe-encode impl=nabla mb=%.3f tokens=%zu digest=%08x ms=%.1f mb_per_s=%.2f "
           "load_ms=%.1f\n",
           len / 1e6, ids->numel, (unsigned)digest, med, len / 1e3 / med, load_ms);
    nb_bpe_free(bpe);
    nb_ctx_free(ctx);
    free(text);
    return 0;
}
