/* check_main.c - one runner for every suite in tests/ (the list is generated
 * into build/tests/suites.h by the Makefile). */
#include "check_nabla.h"

#define NB_SUITE(name) Suite *name(void);
#include "suites.h"
#undef NB_SUITE

int main(void) {
    SRunner *sr = srunner_create(NULL);
#define NB_SUITE(name) srunner_add_suite(sr, name());
#include "suites.h"
#undef NB_SUITE
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
