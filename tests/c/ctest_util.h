/* ctest_util.h - a tiny check macro for the C-level tests: report and count, never abort. */
#ifndef CTEST_UTIL_H
#define CTEST_UTIL_H
#include <stdio.h>

static int ct_failures = 0;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
            ct_failures++;                                                                \
        }                                                                                 \
    } while (0)

#define CT_RESULT() (ct_failures == 0 ? (printf("OK\n"), 0) : (printf("%d failures\n", ct_failures), 1))
#endif
