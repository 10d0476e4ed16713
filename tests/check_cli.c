/* check_cli.c - every program in $NB_BUILD_DIR/bin and $NB_BUILD_DIR/examples
 * behaves like a GNU tool: `--help` prints usage on stdout, exits 0 and
 * creates nothing; an unknown flag exits 2 with a message on stderr and
 * creates nothing. The programs are found at run time, so a program added
 * later is covered without editing this file. Each runs in an empty
 * temporary directory, which must stay empty. */
#include "check_nabla.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Executable regular files of <build>/<sub>, as full paths; returns how many. */
static int list_programs(const char *sub, char paths[][800], int max) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", nb_test_build_dir(), sub);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s (run `make` first)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        struct stat st;
        snprintf(paths[n], 800, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && stat(paths[n], &st) == 0 && S_ISREG(st.st_mode) &&
            access(paths[n], X_OK) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static bool dir_is_empty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return false;
    struct dirent *e;
    bool empty = true;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = false;
    closedir(d);
    return empty;
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* Runs `prog arg` in the empty directory `tmp` (stdout, stderr to files
 * outside it); returns the exit status (-1 if it did not exit). */
static int run_in(const char *tmp, const char *prog, const char *arg, const char *out,
                  const char *err) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd '%s' && timeout 60 '%s' '%s' </dev/null >'%s' 2>'%s'", tmp, prog,
             arg, out, err);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void check_program(const char *prog) {
    char tmp[] = "/tmp/nb_cli_XXXXXX", logs[] = "/tmp/nb_cli_log_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    ck_assert_ptr_nonnull(mkdtemp(logs));
    char out[600], err[600];
    snprintf(out, sizeof out, "%s/out", logs);
    snprintf(err, sizeof err, "%s/err", logs);

    int help = run_in(tmp, prog, "--help", out, err);
    long help_out = file_size(out);
    bool help_clean = dir_is_empty(tmp);
    int bad = run_in(tmp, prog, "--no-such-flag", out, err);
    long bad_err = file_size(err);
    bool bad_clean = dir_is_empty(tmp);
    char rm[1300];
    snprintf(rm, sizeof rm, "rm -rf '%s' '%s'", tmp, logs);
    ck_assert_int_eq(system(rm), 0);

    ck_assert_msg(help == 0, "%s --help exited %d, expected 0", prog, help);
    ck_assert_msg(help_out > 0, "%s --help printed nothing on stdout", prog);
    ck_assert_msg(help_clean, "%s --help created a file in the current directory", prog);
    ck_assert_msg(bad == 2, "%s --no-such-flag exited %d, expected 2", prog, bad);
    ck_assert_msg(bad_err > 0, "%s --no-such-flag printed no message on stderr", prog);
    ck_assert_msg(bad_clean, "%s --no-such-flag created a file", prog);
}

START_TEST(test_every_program_handles_help_and_unknown_flags) {
    static char paths[256][800];
    const char *subs[] = {"bin", "examples"};
    int total = 0;
    for (int s = 0; s < 2; s++) {
        int n = list_programs(subs[s], paths, 256);
        ck_assert_msg(n > 0, "no programs in %s/%s", nb_test_build_dir(), subs[s]);
        for (int i = 0; i < n; i++) check_program(paths[i]);
        total += n;
    }
    /* the four tools and the seven examples there were when this was written */
    ck_assert_int_ge(total, 11);
}
END_TEST

Suite *suite_cli(void) {
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("programs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_program_handles_help_and_unknown_flags);
    suite_add_tcase(s, tc);
    return s;
}
