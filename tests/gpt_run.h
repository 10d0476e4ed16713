/* gpt_run.h - runs the built nabla-gpt program for the suites that test it
 * (check_gpt_tool.c, check_gpt_train.c): a fresh temporary directory per
 * run, the command run inside it, stdout and stderr captured. */
#ifndef NB_TEST_GPT_RUN_H
#define NB_TEST_GPT_RUN_H

#include "check_nabla.h"

#include <sys/wait.h>
#include <unistd.h>

typedef struct gpt_run {
    char dir[64]; /* the run's temporary directory: its working directory and output */
    int status;   /* exit status, -1 when killed by a signal */
    char out[16384], err[4096];
} gpt_run;

static inline void gpt_run_init(gpt_run *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "/tmp/nb-gpt-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(r->dir));
}

static inline void gpt_run_done(gpt_run *r) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* in with every "%D" replaced by r->dir, into out. */
static inline void gpt_run_expand(const gpt_run *r, const char *in, char *out) {
    for (const char *a = in; *a; a++)
        if (a[0] == '%' && a[1] == 'D') out += sprintf(out, "%s", r->dir), a++;
        else *out++ = *a;
    *out = '\0';
}

/* Runs "[env] nabla-gpt <args>" in r->dir (args a shell word list; "%D" is r->dir). */
static inline void gpt_exec_env(gpt_run *r, const char *env, const char *args) {
    char prog[4096], cmd[16384], line[8192];
    snprintf(prog, sizeof prog, "%s/bin/nabla-gpt", nb_test_build_dir());
    ck_assert_msg(access(prog, X_OK) == 0, "%s is not there: build it with make", prog);
    gpt_run_expand(r, args, line);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s '%s' %s >'%s/stdout' 2>'%s/stderr'", r->dir, env, prog,
             line, r->dir, r->dir);
    int st = system(cmd);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char p[128];
    snprintf(p, sizeof p, "%s/stdout", r->dir);
    nb_test_read_text(p, r->out, sizeof r->out);
    snprintf(p, sizeof p, "%s/stderr", r->dir);
    nb_test_read_text(p, r->err, sizeof r->err);
}

static inline void gpt_exec(gpt_run *r, const char *args) { gpt_exec_env(r, "", args); }

/* Runs nabla-gpt <args> and expects the refusal: exit 2 with says in stderr. */
static inline void gpt_refused(gpt_run *r, const char *args, const char *says) {
    gpt_exec(r, args);
    ck_assert_msg(r->status == 2, "exit %d for %s: %s", r->status, args, r->err);
    ck_assert_msg(strstr(r->err, says), "%s: %s", args, r->err);
}

/* dir/text.txt: a few kilobytes of text with multibyte characters. */
static inline void gpt_write_corpus(const char *dir) {
    char path[128], text[8192] = "";
    size_t n = 0;
    for (int i = 0; n + 80 < sizeof text; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "line %d: the caf\xc3\xa9 sells %d "
                              "cr\xc3\xaapes \xe2\x82\xac%d\n", i, i * 7 % 13, i % 5);
    snprintf(path, sizeof path, "%s/text.txt", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, n, f), n);
    fclose(f);
}

/* The commands of the block after the marker line in docs/gpt.md, one a
 * line (continuations joined), into cmds; returns how many. */
static inline int gpt_doc_commands(const char *marker, char cmds[][1024], int max) {
    char *text = NULL, *out = NULL;
    ck_assert_int_eq(nb_test_run("cat " NB_SOURCE_DIR "/docs/gpt.md", &text), 0);
    char *at = strstr(text, marker);
    ck_assert_msg(at != NULL, "docs/gpt.md lacks '%s'", marker);
    at = strstr(at, "```sh\n");
    ck_assert_ptr_nonnull(at);
    at += 6;
    char *end = strstr(at, "```");
    ck_assert_ptr_nonnull(end);
    *end = '\0';
    int n = 0;
    size_t len = 0;
    for (char *l = strtok(at, "\n"); l && n < max; l = strtok(NULL, "\n")) {
        while (*l == ' ') l++;
        size_t k = strlen(l);
        bool more = k && l[k - 1] == '\\';
        len += (size_t)snprintf(cmds[n] + len, 1024 - len, "%.*s%s", (int)(k - more), l,
                                more ? " " : "");
        if (!more) n++, len = 0;
    }
    free(text), free(out);
    return n;
}

#endif
