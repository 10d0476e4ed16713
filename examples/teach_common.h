/* teach_common.h - what the teaching examples (teach_*.c, custom_op_silu.c)
 * share: their command-line rules and writing the tape's views. A program
 * writes only the files named by its --dot=, --html= and --json= flags, and
 * refuses to replace an existing file without --force. Everything is static;
 * nothing here is part of the library. */
#ifndef NB_TEACH_COMMON_H
#define NB_TEACH_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nabla.h"

/* The output flags every teaching example takes. */
typedef struct teach_outputs {
    const char *dot, *html, *json;
    bool force;
    /* the page's extras: --layout-js=elk.bundled.js, and the program's
     * forward for "check this op" (set by the program) */
    nb_tape_html_opts page;
} teach_outputs;

/* True when arg is "--<name>=VALUE"; *value then points at VALUE. */
static inline bool flag_value(const char *arg, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncmp(arg, "--", 2) || strncmp(arg + 2, name, n) || arg[2 + n] != '=') return false;
    *value = arg + 3 + n;
    return true;
}

/* Takes arg if it is one of the output flags; false otherwise. */
static inline bool outputs_flag(teach_outputs *o, const char *arg) {
    if (!strcmp(arg, "--force")) return o->force = true;
    return flag_value(arg, "dot", &o->dot) || flag_value(arg, "html", &o->html) ||
           flag_value(arg, "json", &o->json) || flag_value(arg, "layout-js", &o->page.layout_js);
}

/* "--html=PAGE" etc. with an empty value is a usage error. */
static inline bool outputs_valid(const teach_outputs *o) {
    return !(o->dot && !*o->dot) && !(o->html && !*o->html) && !(o->json && !*o->json);
}

/* Parses the command line: --help, the output flags and, when `extra` is
 * not NULL, --<extra>=VALUE into *extra_value. Returns -1 to go on, or the
 * exit status: 0 after --help (usage on stdout), 2 after a usage error
 * (message on stderr). */
static inline int parse_args(int argc, char **argv, const char *prog, const char *usage,
                             teach_outputs *o, const char *extra, const char **extra_value) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if (outputs_flag(o, argv[i]) || (extra && flag_value(argv[i], extra, extra_value)))
            continue;
        fprintf(stderr, "%s: unknown argument '%s'\n%s", prog, argv[i], usage);
        return 2;
    }
    if (outputs_valid(o)) return -1;
    fprintf(stderr, "%s: an output flag needs a file name\n%s", prog, usage);
    return 2;
}

static inline nb_status write_dot(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_dot(ctx, root, f);
}

/* Writes one view to path; an existing file is refused unless force. A
 * failed write removes the file it created. */
static inline bool write_view(const char *prog, const char *path, bool force,
                              nb_status (*view)(nb_ctx *, const nb_tensor *, FILE *),
                              nb_ctx *ctx, const nb_tensor *root) {
    FILE *f = fopen(path, force ? "w" : "wx");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s%s\n", prog, path, strerror(errno),
                errno == EEXIST ? " (pass --force to replace it)" : "");
        return false;
    }
    nb_status s = view(ctx, root, f);
    if (fclose(f) != 0 && !s) s = NB_ERR_IO;
    if (s) {
        fprintf(stderr, "%s: writing %s failed: %s\n", prog, path, nb_status_str(s));
        remove(path);
        return false;
    }
    printf("wrote %s\n", path);
    return true;
}

static const nb_tape_html_opts *teach_page_opts;
static inline nb_status write_html(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_html_ex(ctx, root, teach_page_opts, f);
}

/* Writes every view the flags name; false after the first failure. */
static inline bool write_outputs(const char *prog, const teach_outputs *o, nb_ctx *ctx,
                                 const nb_tensor *root) {
    teach_page_opts = &o->page;
    return (!o->dot || write_view(prog, o->dot, o->force, write_dot, ctx, root)) &&
           (!o->html || write_view(prog, o->html, o->force, write_html, ctx, root)) &&
           (!o->json || write_view(prog, o->json, o->force, nb_tape_json, ctx, root));
}

#endif
