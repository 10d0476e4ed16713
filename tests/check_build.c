/* check_build.c - the Makefile's promises: plain `make` and `make install`
 * never install packages (only test, demo, memcheck and deps do), and a
 * missing libcjson-dev stops the build with a message naming the package
 * and how to install it. Read from `make -n -B` (every command make would
 * run for a fresh build, none run) in a scratch build directory. */
#include "check_nabla.h"

/* Output (stdout + stderr) of `make ARGS` in the source tree, run outside
 * any enclosing make's job server; *status is its exit status. */
static char *make_output(const char *args, int *status) {
    char cmd[1024], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory %s 2>&1",
             NB_SOURCE_DIR, args);
    *status = nb_test_run(cmd, &out);
    return out;
}

START_TEST(test_plain_make_and_install_install_nothing) {
    int st;
    const char *scratch = "B=/tmp/nb_check_build_never_made PREFIX=/tmp/nb_check_build_prefix";
    char args[512];
    snprintf(args, sizeof args, "-n -B %s all install", scratch);
    char *out = make_output(args, &st);
    ck_assert_msg(st == 0, "make -n all install failed: %.2000s", out);
    ck_assert_msg(strstr(out, "libnabla.a") != NULL, "make -n printed no build: %.2000s", out);
    ck_assert_msg(strstr(out, "install-deps") == NULL && strstr(out, "apt-get install -y") == NULL,
                  "plain make / make install would install packages:\n%.2000s", out);
    ck_assert_ptr_nonnull(strstr(out, "cjson/cJSON.h")); /* it checks instead */
    free(out);
    /* the test target does install them, before compiling anything */
    snprintf(args, sizeof args, "-n -B %s test", scratch);
    out = make_output(args, &st);
    char *deps = strstr(out, "install-deps.sh"), *cc = strstr(out, "-c src/");
    ck_assert_msg(deps != NULL, "make test does not install its packages:\n%.2000s", out);
    ck_assert_msg(cc != NULL && deps < cc, "make test compiles before installing packages");
    free(out);
}
END_TEST

START_TEST(test_missing_cjson_names_the_package) {
    int st;
    /* CC=false: a compiler that finds no header, as on a machine without it */
    char *out = make_output("-s build-deps-check CC=false", &st);
    ck_assert_int_ne(st, 0);
    ck_assert_msg(strstr(out, "libcjson-dev") && strstr(out, "sudo apt-get install libcjson-dev") &&
                      strstr(out, "make deps"),
                  "message: %.2000s", out);
    free(out);
}
END_TEST

Suite *suite_build(void) {
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("makefile");
    tcase_add_test(tc, test_plain_make_and_install_install_nothing);
    tcase_add_test(tc, test_missing_cjson_names_the_package);
    suite_add_tcase(s, tc);
    return s;
}
