/* nn/gpt_files.c - the small file steps the GPT's loaders and savers share:
 * a JSON object read whole from a regular file, the path of a file beside
 * the weights, and a text file staged under a temporary name, then renamed
 * over the old one (so a failed save leaves the old file as it was). */
#include "gpt_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- file helpers ------------------------------------------------------------ */

/* The whole file, NUL-terminated, malloc'ed; NULL with an error on ctx. */
static char *read_text(nb_ctx *ctx, const char *fn, const char *path, size_t *len) {
    const char *why = NULL;
    FILE *f = nb_fopen_regular(path, &why);
    if (!f) {
        nb_ctx_fail(ctx, NB_ERR_IO, "%s: %s: %s", fn, path, why);
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            if (cap >= ((size_t)1 << 24)) { /* a config is a few hundred bytes */
                free(buf);
                fclose(f);
                nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: larger than 16 MB", fn, path);
                return NULL;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: %s: out of memory", fn, path);
        return NULL;
    }
    if (err) {
        free(buf);
        nb_ctx_fail(ctx, NB_ERR_IO, "%s: %s: read error", fn, path);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

cJSON *nb_gpt_json_read(nb_ctx *ctx, const char *fn, const char *path) {
    size_t len = 0;
    char *text = read_text(ctx, fn, path, &len);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    /* cJSON stops after the first value: only white space may follow it */
    size_t at = root && end ? (size_t)(end - text) : len;
    while (at < len && (text[at] == ' ' || text[at] == '\t' || text[at] == '\r' ||
                        text[at] == '\n'))
        at++;
    free(text);
    if (cJSON_IsObject(root) && at == len) return root;
    cJSON_Delete(root);
    if (root && at < len)
        nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: something follows the JSON object at byte %zu",
                    fn, path, at);
    else
        nb_ctx_fail(ctx, NB_ERR_FORMAT, "%s: %s: not a JSON object", fn, path);
    return NULL;
}

char *nb_gpt_beside(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0, n = strlen(name) + 1;
    char *out = malloc(dir + n);
    if (!out) return NULL;
    memcpy(out, path, dir);
    memcpy(out + dir, name, n);
    return out;
}

char *nb_gpt_text_stage(nb_ctx *ctx, const char *fn, const char *path, const char *text) {
    /* only a regular file is replaced: a rename over a FIFO or a device
     * would remove it (a directory is left to the rename, which refuses) */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode)) {
        nb_ctx_fail(ctx, NB_ERR_IO, "%s: cannot write %s: it exists and is not a regular file",
                    fn, path);
        return NULL;
    }
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
        return NULL;
    }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    bool ok = f && fputs(text, f) >= 0;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f)) ok = false;
    if (ok) return tmp;
    nb_ctx_fail(ctx, NB_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(errno));
    remove(tmp);
    free(tmp);
    return NULL;
}

nb_status nb_gpt_text_commit(nb_ctx *ctx, const char *fn, char *tmp, const char *path) {
    nb_status st = NB_OK;
    if (rename(tmp, path)) {
        st = nb_ctx_fail(ctx, NB_ERR_IO, "%s: cannot write %s: %s", fn, path, strerror(errno));
        remove(tmp);
    }
    free(tmp);
    return st;
}
