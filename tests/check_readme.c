/* check_readme.c - the documentation's examples run as written.
 *
 * The files: README.md, then every .md page in docs/, in name order (the folder is
 * listed when the suite is built, so a new page is checked without being
 * named here). The convention, for each file (also in docs/contributing.md,
 * "Docs code runs"):
 * - every ```c block is a complete program: it is compiled against the built
 *   library (-Wall -Wextra -Werror) and run, and must exit 0;
 * - a ```text block right after a ```c block (only blank lines between) is
 *   that program's whole expected stdout, compared exactly;
 * - the file's ```python blocks run in order as one script (like a notebook;
 *   one script per file), in a scratch directory where `build` is the build
 *   directory, when /usr/bin/python3 has torch (CI has not: then they are
 *   skipped, with a note on stderr); a "# prints: TEXT" line in a block means
 *   TEXT must be a line of the script's output;
 * - a block whose previous non-blank line is `<!-- not-run: REASON -->` is
 *   skipped; ```sh and unlabelled blocks are never run;
 * - any other fence label, and a fence that does not start its line, is an
 *   error, so that no block is skipped by a typo.
 * A failing block is named by its file and line, e.g. "docs/gpt.md:86". */
#include "check_nabla.h"

#include <dirent.h>
#include <unistd.h>

typedef struct block {
    char lang[16];
    int line;      /* where the fence opens, 1-based */
    bool not_run;
    char *code;    /* the lines inside the fence */
    char *expect;  /* the ```text block after it, or NULL */
} block;

#define MAX_DOCS 64
#define MAX_BLOCKS 128

/* The files, relative to NB_SOURCE_DIR: README.md first, then docs/ *.md sorted. */
static char *docs[MAX_DOCS];
static int n_docs;

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_docs(void) {
    if (n_docs) return;
    docs[n_docs++] = strdup("README.md");
    DIR *d = opendir(NB_SOURCE_DIR "/docs");
    if (!d) return; /* test_docs_are_found reports it */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 3, ".md") != 0) continue;
        if (n_docs == MAX_DOCS) break; /* test_docs_are_found reports it */
        char *name = malloc(len + 6);
        sprintf(name, "docs/%s", e->d_name);
        docs[n_docs++] = name;
    }
    closedir(d);
    qsort(docs + 1, (size_t)n_docs - 1, sizeof docs[0], cmp_names);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

static bool known_lang(const char *lang) {
    static const char *const known[] = {"c", "text", "python", "sh", "diff", ""};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(lang, known[i])) return true;
    return false;
}

/* Splits the file `doc` (relative to the source tree) into its fenced blocks
 * (```text blocks become the expected output of the code block just before
 * them); returns how many. */
static int parse_doc(const char *doc, block *out, int max) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", NB_SOURCE_DIR, doc);
    char *text = nb_test_read(path, NULL);
    int n = 0, lineno = 0, attach = -1, text_for = -1;
    bool prev_not_run = false;
    block *cur = NULL;
    char *buf = NULL;
    size_t buf_len = 0;
    FILE *body = NULL;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        lineno++;
        if (cur) {
            if (strcmp(line, "```") != 0) {
                fprintf(body, "%s\n", line);
                continue;
            }
            fclose(body);
            bool is_text = !strcmp(cur->lang, "text");
            if (is_text && text_for >= 0) {
                out[text_for].expect = buf;
            } else if (!is_text) {
                cur->code = buf;
                n++;
            } else {
                free(buf);
            }
            attach = !is_text && (!strcmp(cur->lang, "c") || !strcmp(cur->lang, "python"))
                         ? n - 1
                         : -1;
            cur = NULL;
            continue;
        }
        size_t indent = strspn(line, " \t");
        ck_assert_msg(indent == 0 || strncmp(line + indent, "```", 3) != 0,
                      "%s:%d: an indented ``` fence: the docs test reads only fences at the "
                      "start of a line",
                      doc, lineno);
        if (!strncmp(line, "```", 3)) {
            ck_assert_msg(n < max, "%s:%d: more than %d code blocks", doc, lineno, max);
            cur = &out[n];
            memset(cur, 0, sizeof *cur);
            snprintf(cur->lang, sizeof cur->lang, "%s", line + 3);
            ck_assert_msg(known_lang(cur->lang),
                          "%s:%d: ```%s: a fence is labelled c, text, python, sh, diff or nothing",
                          doc, lineno, line + 3);
            cur->line = lineno;
            cur->not_run = prev_not_run;
            text_for = !strcmp(cur->lang, "text") ? attach : -1;
            prev_not_run = false;
            buf = NULL;
            body = open_memstream(&buf, &buf_len);
            continue;
        }
        if (line[indent] != '\0') {
            prev_not_run = !strncmp(line, "<!-- not-run:", 13);
            attach = -1;
        }
    }
    ck_assert_msg(cur == NULL, "%s:%d: the file ends inside a ``` block", doc, cur ? cur->line : 0);
    free(text);
    return n;
}

static void free_blocks(block *b, int n) {
    for (int k = 0; k < n; k++) free(b[k].code), free(b[k].expect);
}

/* out cut to fit Check's message limit (only evaluated when an assertion
 * fails: ck_assert_msg formats its message then). */
static const char *clipped(char *out) {
    if (out && strlen(out) > 1500) strcpy(out + 1490, "\n[...]");
    return out;
}

/* "docs/gpt.md" -> "docs-gpt": a name for the file's scratch files. */
static void doc_stem(const char *doc, char *stem, size_t n) {
    snprintf(stem, n, "%s", doc);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = '\0';
    for (char *p = stem; *p; p++)
        if (*p == '/') *p = '-';
}

static void run_c_block(const char *doc, const block *b, const char *dir) {
    char src[700], exe[700], cmd[2600];
    snprintf(src, sizeof src, "%s/line%d.c", dir, b->line);
    snprintf(exe, sizeof exe, "%s/line%d", dir, b->line);
    write_file(src, b->code);
    const char *cc = getenv("NB_CC") && *getenv("NB_CC") ? getenv("NB_CC") : "cc";
    snprintf(cmd, sizeof cmd,
             "%s -std=c11 -Wall -Wextra -Werror -I'%s/include' '%s' -o '%s' '%s/libnabla.a' "
             "-lcjson -lpcre2-8 -lm -pthread 2>&1",
             cc, NB_SOURCE_DIR, src, exe, nb_test_build_dir());
    char *out = NULL;
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0, "%s:%d: the ```c block does not compile:\n%s", doc, b->line,
                  clipped(out));
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 60 '%s'", dir, exe);
    st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0, "%s:%d: the ```c block exited %d; it printed:\n%s", doc, b->line, st,
                  clipped(out));
    if (b->expect)
        ck_assert_msg(!strcmp(out, b->expect),
                      "%s:%d: the ```c block printed\n%s\nbut the page quotes\n%s", doc,
                      b->line, clipped(out), b->expect);
    free(out);
}

/* An empty <build>/<name>: the blocks' sources, programs and files go there
 * (left for inspection when a block fails, replaced by the next run). */
static void scratch_dir(char *dir, size_t n, const char *name) {
    snprintf(dir, n, "%s/%s", nb_test_build_dir(), name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void remove_dir(const char *dir) {
    char rm[700];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(rm), 0);
}

static block blocks[MAX_BLOCKS];

/* One iteration per file: its ```c blocks, in order. */
START_TEST(test_docs_c_blocks_compile_run_and_print_what_they_quote) {
    list_docs();
    ck_assert_int_lt(_i, n_docs);
    const char *doc = docs[_i];
    int n = parse_doc(doc, blocks, MAX_BLOCKS);
    char stem[300], name[400], dir[600];
    doc_stem(doc, stem, sizeof stem);
    snprintf(name, sizeof name, "docs-c/%s", stem);
    scratch_dir(dir, sizeof dir, name);
    for (int k = 0; k < n; k++)
        if (!strcmp(blocks[k].lang, "c") && !blocks[k].not_run) run_c_block(doc, &blocks[k], dir);
    remove_dir(dir);
    free_blocks(blocks, n);
}
END_TEST

/* The line of `doc` that line `script_line` of the file's script came from
 * (the script is the blocks' code in order, each after one comment line). */
static int doc_line_of(const block *b, int n, int script_line) {
    int at = 1, found = 0;
    for (int k = 0; k < n; k++) {
        if (strcmp(b[k].lang, "python") != 0 || b[k].not_run) continue;
        int lines = 0;
        for (const char *p = b[k].code; *p; p++) lines += *p == '\n';
        /* line `at` is the comment, at+1 .. at+lines the code, then a blank */
        if (script_line > at && script_line <= at + lines) found = b[k].line + (script_line - at);
        at += lines + 2;
    }
    return found;
}

/* One iteration per file: its ```python blocks as one script. */
START_TEST(test_docs_python_blocks_run_in_order) {
    list_docs();
    ck_assert_int_lt(_i, n_docs);
    const char *doc = docs[_i];
    int n = parse_doc(doc, blocks, MAX_BLOCKS), count = 0, first = 0;
    char *script = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&script, &len);
    for (int k = 0; k < n; k++) {
        if (strcmp(blocks[k].lang, "python") != 0 || blocks[k].not_run) continue;
        fprintf(m, "# %s:%d\n%s\n", doc, blocks[k].line, blocks[k].code);
        if (!count++) first = blocks[k].line;
    }
    fclose(m);
    if (count == 0) {
        /* nothing to run */
    } else if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "check_readme: /usr/bin/python3 has no torch: the %d Python blocks of %s "
                        "are not run\n", count, doc);
    } else {
        char stem[300], name[400], dir[600], path[1000], cmd[2000];
        doc_stem(doc, stem, sizeof stem);
        snprintf(name, sizeof name, "docs-python/%s", stem);
        scratch_dir(dir, sizeof dir, name);
        snprintf(path, sizeof path, "%s/%s.py", dir, stem);
        write_file(path, script);
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && ln -s '%s' build && OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3 "
                 "'%s.py' 2>&1",
                 dir, nb_test_build_dir(), stem);
        char *out = NULL;
        int st = nb_test_run(cmd, &out);
        if (st != 0) {
            /* the innermost frame in the script names the block's line */
            char needle[400];
            snprintf(needle, sizeof needle, "%s.py\", line ", stem);
            int line = 0;
            for (char *p = strstr(out, needle); p; p = strstr(p + 1, needle))
                line = atoi(p + strlen(needle));
            int at = line ? doc_line_of(blocks, n, line) : 0;
            ck_assert_msg(0, "%s:%d: the Python blocks (from line %d) failed (exit %d):\n%s", doc,
                          at ? at : first, first, st, clipped(out));
        }
        remove_dir(dir);
        /* every "# prints: TEXT" is a line of the output */
        for (int k = 0; k < n; k++) {
            if (strcmp(blocks[k].lang, "python") != 0 || blocks[k].not_run) continue;
            int line = blocks[k].line;
            for (char *p = blocks[k].code; *p; p = strchr(p, '\n') + 1) {
                line++;
                const char *q = p + strspn(p, " \t");
                if (strncmp(q, "# prints: ", 10) == 0) {
                    char want[512];
                    size_t wl = strcspn(q + 10, "\n");
                    snprintf(want, sizeof want, "\n%.*s\n", (int)wl, q + 10);
                    char *hay = NULL;
                    size_t hl = 0;
                    FILE *h = open_memstream(&hay, &hl);
                    fprintf(h, "\n%s", out);
                    fclose(h);
                    ck_assert_msg(strstr(hay, want) != NULL,
                                  "%s:%d: the page says it prints\n%s\nbut got\n%s", doc, line,
                                  want + 1, clipped(out));
                    free(hay);
                }
                if (!strchr(p, '\n')) break;
            }
        }
        free(out);
    }
    free(script);
    free_blocks(blocks, n);
}
END_TEST

/* The pages are found, and the examples the docs promise are there. */
START_TEST(test_docs_are_found) {
    list_docs();
    ck_assert_msg(n_docs < MAX_DOCS, "more than %d pages in docs/: raise MAX_DOCS", MAX_DOCS - 1);
    ck_assert_msg(n_docs >= 2, "no docs/*.md page found in %s/docs", NB_SOURCE_DIR);
    int c_run = 0, quoted = 0, python = 0, readme_c = 0;
    for (int i = 0; i < n_docs; i++) {
        int n = parse_doc(docs[i], blocks, MAX_BLOCKS);
        for (int k = 0; k < n; k++) {
            if (blocks[k].not_run) continue;
            if (!strcmp(blocks[k].lang, "c")) {
                c_run++;
                quoted += blocks[k].expect != NULL;
                readme_c += i == 0;
            }
            python += !strcmp(blocks[k].lang, "python");
        }
        free_blocks(blocks, n);
    }
    ck_assert_msg(readme_c >= 1, "README.md has no ```c block to run (the first program)");
    /* the first program, the GPT in C, the module gradcheck */
    ck_assert_int_ge(c_run, 3);
    ck_assert_int_ge(quoted, 2);
    ck_assert_int_ge(python, 3); /* the safetensors round trip */
}
END_TEST

Suite *suite_readme(void) {
    list_docs();
    Suite *s = suite_create("readme");
    TCase *tc = tcase_create("blocks");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_docs_are_found);
    tcase_add_loop_test(tc, test_docs_c_blocks_compile_run_and_print_what_they_quote, 0, n_docs);
    tcase_add_loop_test(tc, test_docs_python_blocks_run_in_order, 0, n_docs);
    suite_add_tcase(s, tc);
    return s;
}
