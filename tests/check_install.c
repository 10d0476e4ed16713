/* check_install.c - the README's way to build a program against `make
 * install PREFIX=...` (a prefix the dynamic loader does not search). */
#include "check_nabla.h"

/* The README's command for a program built against `make install
 * PREFIX=...` (rpath from pkg-config's libdir): it builds and runs. */
START_TEST(test_installed_prefix_program_runs) {
    char dir[] = "/tmp/nb-install-XXXXXX", cmd[8192], path[64], *out = NULL;
    /* the compiler the library was built with (NB_CC: an instrumented build's) */
    const char *cc = getenv("NB_CC") && *getenv("NB_CC") ? getenv("NB_CC") : "cc";
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
             "%s example.c $(pkg-config --cflags --libs nabla) "
             "-Wl,-rpath,$(pkg-config --variable=libdir nabla) -o example && ./example",
             NB_SOURCE_DIR, nb_test_build_dir(), dir, dir, dir, dir, cc);
    int st = nb_test_run(cmd, &out);
    ck_assert_msg(st == 0 && !strcmp(out, "2.5\n"), "exit %d, output '%s' (see %s/make.log)", st,
                  out, dir);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

Suite *suite_install(void) {
    Suite *s = suite_create("install");
    TCase *tc = tcase_create("prefix");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_installed_prefix_program_runs);
    suite_add_tcase(s, tc);
    return s;
}
