/* check_main.c - one runner for every suite in tests/ (the list is generated
 * into build/tests/suites.h by the Makefile). */
#include "check_nabla.h"

#define NB_SUITE(name) Suite *name(void);
#include "suites.h"
#undef NB_SUITE

int main(void) {
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
