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
    const char *deps = strstr(out, "install-deps.sh"), *cc = strstr(out, "-c src/");
    bool has_deps = deps != NULL, ordered = deps && cc && deps < cc;
    ck_assert_msg(has_deps, "make test does not install its packages:\n%.2000s", out);
    ck_assert_msg(ordered, "make test compiles before installing packages");
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

/* The README's command for a program built against `make install
 * PREFIX=...` (rpath from pkg-config's libdir): it builds and runs. */
START_TEST(test_installed_prefix_program_runs) {
    char dir[] = "/tmp/nb-install-XXXXXX", cmd[8192], path[64], *out = NULL;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/example.c", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#include <nabla.h>\n#include <stdio.h>\n"
          "int main(void) {\n    nb_ctx *c = nb_ctx_new(0);\n"
          "    printf(\"%g\\n\", nb_item(nb_scalar(c, NB_F64, 2.5)));\n"
          "    nb_ctx_free(c);\n    return 0;\n}\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "make -s -C '%s' B='%s' install PREFIX='%s/prefix' >'%s/make.log' 2>&1 && cd '%s' && "
             "export PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig' && "
             "cc example.c $(pkg-config --cflags --libs nabla) "
             "-Wl,-rpath,$(pkg-config --variable=libdir nabla) -o example && ./example",
             NB_SOURCE_DIR, nb_test_build_dir(), dir, dir, dir, dir);
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0 && !strcmp(out, "2.5\n"), "exit %d, output '%s' (see %s/make.log)", st,
                  out, dir);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *suite_build(void) {
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("makefile");
    tcase_add_test(tc, test_plain_make_and_install_install_nothing);
    tcase_add_test(tc, test_installed_prefix_program_runs);
    tcase_add_test(tc, test_missing_cjson_names_the_package);
    suite_add_tcase(s, tc);
    return s;
}
