/* check_op_list.c - the op list (include/nabla/ops.def) and the public
 * header, compiled the way a contributor or a user would meet them:
 *   - a copy of the headers whose list lacks layer_norm's row: the op's own
 *     file no longer compiles, and the compiler's message names the op;
 *   - a copy whose list gains a hand-written row (NB_OP_HAND) with no code
 *     behind it: the gradcheck and parity tools and the bad-input matrix no
 *     longer compile, naming the case each lacks (tests/check_add_op.c
 *     adds a whole NB_OP row the way docs/contributing.md says);
 *   - include/nabla.h compiles as C11 (pedantic) and as C++17.
 * The compilers are NB_CC (default cc) and NB_CXX (default c++). */
#include "check_nabla.h"

#include <unistd.h>

static const char *cc(void) {
    const char *c = getenv("NB_CC");
    return c && *c ? c : "cc";
}

static const char *cxx(void) {
    const char *c = getenv("NB_CXX");
    return c && *c ? c : "c++";
}

/* A scratch copy of include/ in dir, with ops.def passed through `edit`
 * (a sed expression). */
static void copy_headers(char *dir, size_t n, const char *edit) {
    snprintf(dir, n, "/tmp/nb_op_list_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cp -r '%s/include' '%s/' && sed -i '%s' '%s/include/nabla/ops.def'",
             NB_SOURCE_DIR, dir, edit, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void remove_dir(const char *dir) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Compiles `args` (after the compiler and the include paths) and returns
 * its exit status; the compiler's messages go to log. */
static int compile(const char *compiler, const char *inc, const char *args, const char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && %s -std=c11 -D_POSIX_C_SOURCE=200809L -I'%s' -Isrc -Itools/support "
             "-Itools/test %s > '%s' 2>&1",
             NB_SOURCE_DIR, compiler, inc, args, log);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static bool log_has(const char *log, const char *part) {
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    static char buf[65536];
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    buf[k] = '\0';
    fclose(f);
    return strstr(buf, part) != NULL;
}

START_TEST(test_missing_row_fails_naming_the_op) {
    char dir[64], inc[128], log[128];
    copy_headers(dir, sizeof dir, "/^NB_OP_HAND(LAYER_NORM,/,+3d");
    snprintf(inc, sizeof inc, "%s/include", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    /* the copy really lacks the row, and the rest of the list still compiles */
    ck_assert_int_eq(compile(cc(), inc, "-fsyntax-only src/ops/linear.c", log), 0);
    ck_assert_int_ne(compile(cc(), inc, "-fsyntax-only src/ops/layer_norm.c", log), 0);
    ck_assert_msg(log_has(log, "NB_OP_LAYER_NORM"), "the error does not name the op");
    remove_dir(dir);
}
END_TEST

START_TEST(test_new_row_without_cases_fails_naming_them) {
    char dir[64], inc[128], log[128];
    copy_headers(dir, sizeof dir, "/^#ifdef NB_OP_HAND_DEFAULT_/i NB_OP_HAND(CUBE, cube, 1, \"dx = 3 x² dout\", \"tout = 3 x² tx\")");
    snprintf(inc, sizeof inc, "%s/include", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    ck_assert_int_ne(compile(cc(), inc, "-fsyntax-only tools/nabla-gradcheck.c", log), 0);
    ck_assert_msg(log_has(log, "f_cube"), "nabla-gradcheck's error does not name f_cube");
    ck_assert_int_ne(compile(cc(), inc, "-fsyntax-only tools/test/parity.c", log), 0);
    ck_assert_msg(log_has(log, "op_cube"), "parity's error does not name op_cube");
    ck_assert_int_ne(compile(cc(), inc,
                             "-Itests $(pkg-config --cflags check) -fsyntax-only "
                             "tests/check_matrix_ops.c",
                             log),
                     0);
    ck_assert_msg(log_has(log, "w_cube"), "the matrix's error does not name w_cube");
    /* the library's own tables take the row: name, arity and formula */
    ck_assert_int_eq(compile(cc(), inc, "-fsyntax-only src/tape/op_table.c", log), 0);
    ck_assert_int_eq(compile(cc(), inc, "-fsyntax-only src/teach/op_formula.c", log), 0);
    remove_dir(dir);
}
END_TEST

START_TEST(test_list_and_tables_agree) {
    ck_assert_str_eq(nb_op_name(NB_OP_ADD), "add");
    ck_assert_str_eq(nb_op_name(NB_OP_SDPA), "sdpa");
    ck_assert_str_eq(nb_op_name(NB_OP_CUSTOM), "custom");
    ck_assert_str_eq(nb_op_name(NB_OP_COUNT), "?");
    ck_assert_int_eq(nb_op_arity(NB_OP_CONCAT), -1);
    ck_assert_int_eq(nb_op_arity(NB_OP_LINEAR), 3);
    ck_assert_ptr_nonnull(strstr(nb_op_formula(NB_OP_MATMUL), "dout @ Bᵀ"));
    ck_assert_ptr_nonnull(strstr(nb_op_tangent_formula(NB_OP_MATMUL), "tA @ B + A @ tB"));
    for (int op = 0; op < NB_OP_COUNT; op++) {
        ck_assert_str_ne(nb_op_name((nb_op)op), "?");
        ck_assert_str_ne(nb_op_formula((nb_op)op), "?");
        ck_assert_str_ne(nb_op_tangent_formula((nb_op)op), "?");
    }
}
END_TEST

START_TEST(test_public_header_compiles_as_c11_and_cpp17) {
    char dir[64] = "/tmp/nb_hdr_XXXXXX", src[128], log[128], cmd[2048];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(src, sizeof src, "%s/user.c", dir);
    snprintf(log, sizeof log, "%s/cc.log", dir);
    FILE *f = fopen(src, "w");
    ck_assert_ptr_nonnull(f);
    fputs("#include <nabla.h>\n"
          "int main(void) {\n"
          "    nb_ctx *ctx = nb_ctx_new(0);\n"
          "    nb_tensor *x = nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3));\n"
          "    int ok = x != NULL && nb_op_arity(NB_OP_ADD) == 2;\n"
          "    nb_ctx_free(ctx);\n"
          "    return ok ? 0 : 1;\n"
          "}\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s -std=c11 -pedantic -Wall -Wextra -Werror -I'%s/include' -fsyntax-only '%s' "
             "> '%s' 2>&1",
             cc(), NB_SOURCE_DIR, src, log);
    ck_assert_msg(system(cmd) == 0, "nabla.h does not compile as C11: see %s", log);
    snprintf(cmd, sizeof cmd,
             "%s -std=c++17 -Wall -Wextra -Werror -I'%s/include' -fsyntax-only -x c++ '%s' "
             "> '%s' 2>&1",
             cxx(), NB_SOURCE_DIR, src, log);
    ck_assert_msg(system(cmd) == 0, "nabla.h does not compile as C++17: see %s", log);
    remove_dir(dir);
}
END_TEST

Suite *suite_op_list(void) {
    Suite *s = suite_create("op_list");
    TCase *tc = tcase_create("op_list");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_missing_row_fails_naming_the_op);
    tcase_add_test(tc, test_new_row_without_cases_fails_naming_them);
    tcase_add_test(tc, test_list_and_tables_agree);
    tcase_add_test(tc, test_public_header_compiles_as_c11_and_cpp17);
    suite_add_tcase(s, tc);
    return s;
}
