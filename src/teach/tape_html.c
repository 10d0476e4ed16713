/* teach/tape_html.c - the tape explorer: one self-contained HTML page (inline
 * CSS and script, nothing fetched) for stepping through a backward pass.
 *
 * The page embeds the tape's JSON model (teach/tape_json.c, with what each node
 * sends to its inputs) and lays the graph out itself, top to bottom: ranks by
 * depth, ops between their inputs and output, each rank ordered by where its
 * parents are. Element ids and classes (nb-step, nb-received, nb-sent,
 * nb-acc, ...) are what `make test-browser` clicks and reads. */
#include "tape_json.h"

#include "tape_page.inc"

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

static nb_status write_page(nb_ctx *ctx, const nb_tensor *root, const nb_tape_html_opts *o,
                            FILE *f) {
    if (!ctx || !f) return NB_ERR_NULL;
    write_lines(f, page_head, sizeof page_head / sizeof page_head[0]);
    nb_status s = nb_tape_json_write(ctx, root, f, true, o);
    if (s) return s;
    fputs("</script>\n", f);
    if (o && o->layout_js) {
        fputs("<script>\n", f);
        s = copy_file(f, o->layout_js);
        if (s) return s;
        fputs("\n</script>\n", f);
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
