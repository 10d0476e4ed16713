/* check_readme.c - README.md's examples run as written.
 *
 * The convention (also in the README's "Contributing" notes):
 * - every ```c block is a complete program: it is compiled against the built
 *   library (-Wall -Wextra -Werror) and run, and must exit 0;
 * - a ```text block right after a ```c block (only blank lines between) is
 *   that program's whole expected stdout, compared exactly;
 * - the ```python blocks run in order as one script (like a notebook), in a
 *   scratch directory where `build` is the build directory, when
 *   /usr/bin/python3 has torch (CI has not: then they are skipped, with a
 *   note on stderr); a "# prints: TEXT" line in a block means TEXT must be a
 *   line of the script's output;
 * - a block whose previous non-blank line is `<!-- not-run: REASON -->` is
 *   skipped; ```sh and unlabelled blocks are never run. */
#include "check_nabla.h"

#include <unistd.h>

#define README NB_SOURCE_DIR "/README.md"

typedef struct block {
    char lang[16];
    int line;      /* where the fence opens, 1-based */
    bool not_run;
    char *code;    /* the lines inside the fence */
    char *expect;  /* the ```text block after it, or NULL */
} block;

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s", path);
    char *buf = NULL;
    size_t cap = 0;
    FILE *m = open_memstream(&buf, &cap);
    int ch;
    while ((ch = fgetc(f)) != EOF) fputc(ch, m);
    fclose(f);
    fclose(m);
    if (len) *len = cap;
    return buf;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Splits README.md into its fenced blocks (```text blocks become the
 * expected output of the code block just before them); returns how many. */
static int parse_readme(block *out, int max) {
    char *text = read_file(README, NULL);
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
        if (!strncmp(line, "```", 3)) {
            ck_assert_int_lt(n, max);
            cur = &out[n];
            memset(cur, 0, sizeof *cur);
            snprintf(cur->lang, sizeof cur->lang, "%s", line + 3);
            cur->line = lineno;
            cur->not_run = prev_not_run;
            text_for = !strcmp(cur->lang, "text") ? attach : -1;
            prev_not_run = false;
            buf = NULL;
            body = open_memstream(&buf, &buf_len);
            continue;
        }
        if (line[strspn(line, " \t")] != '\0') {
            prev_not_run = !strncmp(line, "<!-- not-run:", 13);
            attach = -1;
        }
    }
    ck_assert_msg(cur == NULL, "README.md ends inside a ``` block");
    free(text);
    return n;
}

/* out cut to fit Check's message limit (only evaluated when an assertion
 * fails: ck_assert_msg formats its message then). */
static const char *clipped(char *out) {
    if (out && strlen(out) > 1500) strcpy(out + 1490, "\n[...]");
    return out;
}

static void run_c_block(const block *b, const char *dir, int k) {
    char src[700], exe[700], cmd[2600];
    snprintf(src, sizeof src, "%s/block%d.c", dir, k);
    snprintf(exe, sizeof exe, "%s/block%d", dir, k);
    write_file(src, b->code);
    const char *cc = getenv("NB_CC") && *getenv("NB_CC") ? getenv("NB_CC") : "cc";
    snprintf(cmd, sizeof cmd,
             "%s -std=c11 -Wall -Wextra -Werror -I'%s/include' '%s' -o '%s' '%s/libnabla.a' "
             "-lcjson -lm -pthread 2>&1",
             cc, NB_SOURCE_DIR, src, exe, nb_test_build_dir());
    char *out = NULL;
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0, "README.md:%d: the ```c block does not compile:\n%s", b->line,
                  clipped(out));
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 60 '%s'", dir, exe);
    st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0, "README.md:%d: the ```c block exited %d; it printed:\n%s", b->line, st,
                  clipped(out));
    if (b->expect)
        ck_assert_msg(!strcmp(out, b->expect),
                      "README.md:%d: the ```c block printed\n%s\nbut the README quotes\n%s",
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

static block blocks[128];

START_TEST(test_readme_c_blocks_compile_run_and_print_what_it_quotes) {
    int n = parse_readme(blocks, 128), ran = 0, quoted = 0;
    char dir[600];
    scratch_dir(dir, sizeof dir, "readme-c");
    for (int k = 0; k < n; k++) {
        if (strcmp(blocks[k].lang, "c") != 0 || blocks[k].not_run) continue;
        run_c_block(&blocks[k], dir, k);
        ran++;
        quoted += blocks[k].expect != NULL;
    }
    char rm[700];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(rm), 0);
    ck_assert_int_ge(ran, 2); /* the 20-line example and the module gradcheck */
    ck_assert_int_ge(quoted, 2);
    for (int k = 0; k < n; k++) free(blocks[k].code), free(blocks[k].expect);
}
END_TEST

START_TEST(test_readme_python_blocks_run_in_order) {
    int n = parse_readme(blocks, 128), count = 0;
    char *script = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&script, &len);
    for (int k = 0; k < n; k++) {
        if (strcmp(blocks[k].lang, "python") != 0 || blocks[k].not_run) continue;
        fprintf(m, "# README.md:%d\n%s\n", blocks[k].line, blocks[k].code);
        count++;
    }
    fclose(m);
    ck_assert_int_ge(count, 3);
    if (system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
        fprintf(stderr, "check_readme: /usr/bin/python3 has no torch: the README's %d Python "
                        "blocks are not run\n", count);
    } else {
        char dir[600], path[700], cmd[1600];
        scratch_dir(dir, sizeof dir, "readme-python");
        snprintf(path, sizeof path, "%s/readme.py", dir);
        write_file(path, script);
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && ln -s '%s' build && OMP_NUM_THREADS=1 timeout 300 /usr/bin/python3 "
                 "readme.py 2>&1",
                 dir, nb_test_build_dir());
        char *out = NULL;
        int st = nb_test_run(cmd, &out);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
        ck_assert_msg(st == 0, "the README's Python blocks failed (exit %d):\n%s", st, clipped(out));
        /* every "# prints: TEXT" is a line of the output */
        for (char *p = strstr(script, "# prints: "); p; p = strstr(p + 1, "# prints: ")) {
            char want[512];
            size_t wl = strcspn(p + 10, "\n");
            snprintf(want, sizeof want, "\n%.*s\n", (int)wl, p + 10);
            char *hay = NULL;
            size_t hl = 0;
            FILE *h = open_memstream(&hay, &hl);
            fprintf(h, "\n%s", out);
            fclose(h);
            ck_assert_msg(strstr(hay, want) != NULL, "the README says it prints\n%s\nbut got\n%s",
                          want + 1, out);
            free(hay);
        }
        free(out);
    }
    free(script);
    for (int k = 0; k < n; k++) free(blocks[k].code), free(blocks[k].expect);
}
END_TEST

Suite *suite_readme(void) {
    Suite *s = suite_create("readme");
    TCase *tc = tcase_create("blocks");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_readme_c_blocks_compile_run_and_print_what_it_quotes);
    tcase_add_test(tc, test_readme_python_blocks_run_in_order);
    suite_add_tcase(s, tc);
    return s;
}
