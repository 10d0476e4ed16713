/* check_main.c - one runner for every suite in tests/ (the list is generated
 * into build/tests/suites.h by the Makefile). `check_nabla --list` prints the
 * suites' names, one a line, for tools/test/run-suites.sh, which runs them as
 * separate processes (CK_RUN_SUITE=NAME), several at a time. */
#include "check_nabla.h"

#define NB_SUITE(name) Suite *name(void);
#include "suites.h"
#undef NB_SUITE

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        /* a suite's name is its function's name without "suite_" (each
         * file's suite_create); a name that differs runs no test under
         * CK_RUN_SUITE, which run-suites.sh reports as a failure */
#define NB_SUITE(name) puts(&#name[sizeof "suite_" - 1]);
#include "suites.h"
#undef NB_SUITE
        return EXIT_SUCCESS;
    }
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--list] (CK_RUN_SUITE=NAME runs one suite)\n", argv[0]);
        return 2;
    }
    /* Check kills a test after 4 s by default; on a busy CI machine the
     * gradient checks and the train-tool runs can take longer. Suites that
     * need more set their own (tcase_set_timeout); the environment wins. */
    setenv("CK_DEFAULT_TIMEOUT", "60", 0);
    SRunner *sr = srunner_create(NULL);
#define NB_SUITE(name) srunner_add_suite(sr, name());
#include "suites.h"
#undef NB_SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
