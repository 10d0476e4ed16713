/* check_add_op.c - adding an op takes what docs/contributing.md says it
 * takes. A scratch copy of the tree gets the page's four diffs (the row of
 * softplus in the op list, its prototype, its code in src/ops/unary.c and a
 * value test; tools/test/add-op-copy.sh applies them) and nothing else, then:
 *   - the copy builds, and nabla-gradcheck checks softplus to first and
 *     second order from its row alone;
 *   - nabla-parity replays the committed PyTorch fixture of softplus
 *     (tests/fixtures/add_op, made from the same row by
 *     tools/ref/gen_add_op_fixture.sh) beside every other fixture;
 *   - the value test passes in a runner of the unary suite built there;
 *   - without its forward-mode rule the build stops, naming
 *     nb_forward_softplus; without its graph backward (second-order rule)
 *     it stops naming nb_graph_backward_softplus; with an empty PyTorch
 *     expression it
 *     stops naming the op, and so does the fixture generator's reader.
 * The compiler is NB_CC (default cc). */
#include "check_nabla.h"

#include <unistd.h>

static const char *cc(void) {
    const char *c = getenv("NB_CC");
    return c && *c ? c : "cc";
}

/* Runs cmd (a shell command) in dir; its output (stdout and stderr) goes to
 * g_out, its exit status is returned. make's own variables from an
 * enclosing `make test` are dropped, so the copy's build is a build of its
 * own, and so are Check's. */
static char *g_out;

static int run(const char *dir, const char *cmd) {
    char line[8192];
    snprintf(line, sizeof line,
             "cd '%s' && unset MAKEFLAGS MFLAGS MAKELEVEL CK_RUN_SUITE CK_RUN_CASE && "
             "{ %s ; } 2>&1",
             dir, cmd);
    free(g_out);
    return nb_test_run(line, &g_out);
}

START_TEST(test_softplus_from_one_row) {
    char dir[64] = "/tmp/nb_add_op_XXXXXX", tree[128], cmd[1024];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(tree, sizeof tree, "%s/tree", dir);

    /* the copy, with the page's change */
    snprintf(cmd, sizeof cmd, "sh tools/test/add-op-copy.sh . %s", tree);
    ck_assert_msg(run(NB_SOURCE_DIR, cmd) == 0, "add-op-copy.sh failed: %s", g_out);
    snprintf(cmd, sizeof cmd, "%s/add-op.diff", tree);
    char *diff = nb_test_read(cmd, NULL);
    ck_assert_ptr_nonnull(strstr(diff, "+NB_OP(SOFTPLUS, softplus, 1,"));
    ck_assert_ptr_nonnull(strstr(diff, "+void nb_graph_backward_softplus("));
    ck_assert_ptr_nonnull(strstr(diff, "+nb_tensor *nb_forward_softplus("));
    free(diff);

    /* it builds; gradcheck and gradgradcheck pass on the row's case */
    snprintf(cmd, sizeof cmd,
             "make -j2 CC='%s' CFLAGS=-O0 build/bin/nabla-gradcheck build/bin/nabla-parity", cc());
    ck_assert_msg(run(tree, cmd) == 0, "the copy does not build: %s", g_out);
    ck_assert_msg(run(tree, "build/bin/nabla-gradcheck softplus") == 0, "%s", g_out);
    const char *out = g_out;
    ck_assert_msg(strstr(out, "softplus") && strstr(out, "1 passed, 0 failed"), "%s", out);
    ck_assert_msg(strstr(out, " PASS\n") && strstr(out, "op list"), "%s", out);

    /* parity: softplus's fixture beside all the others, every op covered */
    snprintf(cmd, sizeof cmd,
             "cp '%s/tests/fixtures/add_op/'softplus.*.safetensors tests/fixtures/parity/ && "
             "build/bin/nabla-parity --by-op tests/fixtures/parity",
             NB_SOURCE_DIR);
    ck_assert_msg(run(tree, cmd) == 0, "parity fails: %s", g_out);
    out = g_out;
    ck_assert_msg(strstr(out, "| softplus | 1 |"), "no softplus row: %s", out);
    ck_assert_msg(!strstr(out, "FAIL"), "%s", out);

    /* the value test builds into a runner of its suite, and passes */
    snprintf(cmd, sizeof cmd,
             "mkdir -p build/t && echo 'NB_SUITE(suite_unary)' > build/t/suites.h && "
             "%s -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror -Iinclude -Isrc "
             "-Itests -Ibuild/t $(pkg-config --cflags check) -DNB_SOURCE_DIR=\\\"$(pwd)\\\" "
             "tests/check_main.c tests/check_unary.c -o build/t/check_unary build/libnabla.a "
             "$(pkg-config --libs check) $(pkg-config --libs libpcre2-8) -lm -pthread && "
             "CK_LOG_FILE_NAME=- build/t/check_unary",
             cc());
    ck_assert_msg(run(tree, cmd) == 0, "the value test: %s", g_out);
    ck_assert_msg(strstr(g_out, "test_softplus_values:0: Passed"), "%s", g_out);

    /* without its forward-mode rule the link stops, naming it */
    ck_assert_int_eq(run(tree,
                         "cp src/ops/unary.c build/unary.c.keep && "
                         "sed -i 's/^nb_tensor \\*nb_forward_softplus/static nb_tensor *gone_fwd/' "
                         "src/ops/unary.c"),
                     0);
    snprintf(cmd, sizeof cmd, "make -j2 CC='%s' CFLAGS=-O0 build/bin/nabla-gradcheck", cc());
    ck_assert_int_ne(run(tree, cmd), 0);
    ck_assert_msg(strstr(g_out, "nb_forward_softplus"), "%s", g_out);
    ck_assert_int_eq(run(tree, "cp build/unary.c.keep src/ops/unary.c"), 0);

    /* without its second-order rule the link stops, naming it */
    ck_assert_int_eq(run(tree,
                         "sed -i 's/^void nb_graph_backward_softplus/static void gone_softplus/' "
                         "src/ops/unary.c"),
                     0);
    snprintf(cmd, sizeof cmd, "make -j2 CC='%s' CFLAGS=-O0 build/bin/nabla-gradcheck", cc());
    ck_assert_int_ne(run(tree, cmd), 0);
    ck_assert_msg(strstr(g_out, "nb_graph_backward_softplus"), "%s", g_out);

    /* with an empty PyTorch expression the tools stop, naming the op */
    ck_assert_int_eq(
        run(tree, "sed -i 's/\"F.softplus(x\\[0\\])\"/\"\"/' include/nabla/ops.def"), 0);
    snprintf(cmd, sizeof cmd, "%s/include/nabla/ops.def", tree);
    char *def = nb_test_read(cmd, NULL);
    ck_assert_msg(!strstr(def, "F.softplus"), "the expression is still there");
    free(def);
    snprintf(cmd, sizeof cmd,
             "%s -std=c11 -D_POSIX_C_SOURCE=200809L -Iinclude -Itools/support -Itools/test "
             "-fsyntax-only tools/test/parity.c",
             cc());
    ck_assert_int_ne(run(tree, cmd), 0);
    ck_assert_msg(strstr(g_out, "op softplus: its row in ops.def has no PyTorch expression"),
                  "%s", g_out);
    ck_assert_int_ne(run(tree,
                         "python3 -c 'import sys; sys.path.insert(0, \"tools/ref\"); "
                         "import op_list; op_list.read_rows(\"include/nabla/ops.def\")'"),
                     0);
    ck_assert_msg(strstr(g_out, "op softplus has no PyTorch expression"), "%s", g_out);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    free(g_out);
    g_out = NULL;
}
END_TEST

Suite *suite_add_op(void) {
    Suite *s = suite_create("add_op");
    TCase *tc = tcase_create("softplus");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_softplus_from_one_row);
    suite_add_tcase(s, tc);
    return s;
}
