/* check_build.c - the Makefile's promises: plain `make` and `make install`
 * never install packages (only test, demo, memcheck and deps do), and a
 * missing libcjson-dev stops the build with a message naming the package
 * and how to install it. Read from `make -n -B` (every command make would
 * run for a fresh build, none run) in a scratch build directory. And
 * layout_check.py, which make test runs, rejects an include across layers. */
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

/* layout_check.py on a scratch tree: a copy of io/checkpoint.c's include of
 * optim's private header passes where it is (io is above optim) and fails,
 * by file, line and the order, from a file in optim; a folder that is not
 * in the order fails too; a public header passes from anywhere. */
/* layout_check.py's exit status on the tree at dir; its output (stdout and
 * stderr) into out. */
static int layout_check(const char *dir, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "python3 '%s/tools/test/layout_check.py' '%s' > '%s/out.txt' 2>&1",
             NB_SOURCE_DIR, dir, dir);
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "%s/out.txt", dir);
    FILE *f = fopen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    out[fread(out, 1, cap - 1, f)] = 0;
    fclose(f);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_layout_check_rejects_an_include_from_below) {
    char dir[] = "/tmp/nb_layout_XXXXXX", cmd[1024], out[4096];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    const char *files[][2] = {
        {"src/io/checkpoint.c", "#include \"optim/optim_internal.h\"\n#include \"nabla/io.h\"\n"},
        {"src/optim/optim.c", "#include \"core/core_internal.h\"\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s/%s')\" && printf '%%s' '%s' > '%s/%s'",
                 dir, files[i][0], files[i][1], dir, files[i][0]);
        ck_assert_int_eq(system(cmd), 0);
    }
    int st = layout_check(dir, out, sizeof out);
    ck_assert_msg(st == 0, "a permitted include failed: %s", out);
    ck_assert_ptr_nonnull(strstr(out, "0 includes across layers"));

    snprintf(cmd, sizeof cmd, "printf '#include \"io/io_internal.h\"\\n' >> '%s/src/optim/optim.c'", dir);
    ck_assert_int_eq(system(cmd), 0);
    st = layout_check(dir, out, sizeof out);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(out, "src/optim/optim.c:2: includes \"io/io_internal.h\": optim may include "
                              "only its own headers and those of the layers below it") != NULL &&
                      strstr(out, "1 includes across layers") != NULL,
                  "output: %s", out);

    snprintf(cmd, sizeof cmd, "mkdir -p '%s/src/extra' && printf '#include \"core/core_internal.h\"\\n' > '%s/src/extra/x.c'",
             dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    st = layout_check(dir, out, sizeof out);
    ck_assert_int_eq(st, 1);
    ck_assert_msg(strstr(out, "src/extra/x.c:1: includes \"core/core_internal.h\" but src/extra is not in "
                              "the layer order") != NULL &&
                      strstr(out, "2 includes across layers") != NULL,
                  "output: %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *suite_build(void) {
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("makefile");
    tcase_add_test(tc, test_plain_make_and_install_install_nothing);
    tcase_add_test(tc, test_missing_cjson_names_the_package);
    tcase_add_test(tc, test_layout_check_rejects_an_include_from_below);
    suite_add_tcase(s, tc);
    return s;
}
