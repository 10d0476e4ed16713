/* teach/tape_html.c - the tape explorer: one self-contained HTML page (inline
 * CSS and script, nothing fetched) for stepping through a backward pass.
 *
 * The page embeds the tape's JSON model (teach/tape_json.c, with what each node
 * sends to its inputs) and elkjs (the build's copy, or the one opts name),
 * which lays the graph out with a box per module; without elkjs the page
 * places the nodes and module boxes in ranks itself (straight edges). Element ids and classes (nb-step, nb-received, nb-sent,
 * nb-acc, ...) are what `make test-browser` clicks and reads. */
#include "tape_json.h"

#include "tape_page.inc"

#include <stdlib.h>

static void write_lines(FILE *f, const char *const *lines, size_t n) {
    for (size_t i = 0; i < n; i++) fputs(lines[i], f);
}

/* The file at path, copied to f. */
static nb_status copy_file(FILE *f, const char *path) {
    const char *why = NULL;
    FILE *in = nb_fopen_regular(path, &why); /* never waits on a FIFO */
    if (!in) return NB_ERR_IO;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) fwrite(buf, 1, n, f);
    bool bad = ferror(in);
    fclose(in);
    return bad ? NB_ERR_IO : NB_OK;
}

/* The build's elkjs, when opts name none: NB_LAYOUT_JS from the
 * environment (empty: none), else the first readable of the copy the
 * build installed from npm and the one `make install` put under the
 * prefix (NB_ELK_PATHS, from the Makefile; a file read, not a link
 * dependency). NULL: the page's own placement. */
static const char *default_layout_js(void) {
    const char *env = getenv("NB_LAYOUT_JS");
    if (env) return *env ? env : NULL;
#ifdef NB_ELK_PATHS
    static const char *const paths[] = {NB_ELK_PATHS};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        FILE *in = fopen(paths[i], "rb");
        if (in) {
            fclose(in);
            return paths[i];
        }
    }
#endif
    return NULL;
}

/* The playground (docs/playground.html) the page's "open this in the
 * playground" link opens: the first readable of the source tree's copy and
 * the one `make install` put under the prefix (NB_PLAYGROUND_PATHS, from the
 * Makefile). NULL: the link names playground.html beside the page. */
static const char *playground_path(void) {
#ifdef NB_PLAYGROUND_PATHS
    static const char *const paths[] = {NB_PLAYGROUND_PATHS};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        FILE *in = fopen(paths[i], "rb");
        if (in) {
            fclose(in);
            return paths[i];
        }
    }
#endif
    return NULL;
}

static nb_status write_page(nb_ctx *ctx, const nb_tensor *root, const nb_tape_html_opts *o,
                            FILE *f) {
    if (!ctx || !f) return NB_ERR_NULL;
    write_lines(f, page_head, sizeof page_head / sizeof page_head[0]);
    nb_status s = nb_tape_json_write(ctx, root, f, true, o);
    if (s) return s;
    fputs("</script>\n", f);
    const char *layout = o && o->layout_js ? o->layout_js : default_layout_js();
    if (layout) {
        fputs("<script>\n", f);
        s = copy_file(f, layout);
        if (s) return nb_ctx_fail(ctx, s, "tape_html: cannot read the layout script %s%s", layout,
                                  o && o->layout_js ? "" : " (named by NB_LAYOUT_JS)");
        fputs("\n</script>\n", f);
    }
    const char *playground = playground_path();
    if (playground) {
        char url[4096];
        snprintf(url, sizeof url, "file://%s", playground);
        fputs("<script>var NB_PLAYGROUND = ", f);
        nb_json_str(f, url);
        fputs(";</script>\n", f);
    }
    fputs("<script>\n", f);
    write_lines(f, page_script, sizeof page_script / sizeof page_script[0]);
    fputs("</script>\n</body></html>\n", f);
    return ferror(f) ? NB_ERR_IO : NB_OK;
}

nb_status nb_tape_html(nb_ctx *ctx, const nb_tensor *root, FILE *f) {
    return nb_tape_write_fail(ctx, "tape_html", write_page(ctx, root, NULL, f));
}

nb_status nb_tape_html_ex(nb_ctx *ctx, const nb_tensor *root, const nb_tape_html_opts *opts,
                          FILE *f) {
    return nb_tape_write_fail(ctx, "tape_html", write_page(ctx, root, opts, f));
}
