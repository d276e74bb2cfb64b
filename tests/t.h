/*
 * t.h: the unit-test harness. A test file defines `static int test_x(void)` cases (return 0 on
 * success) and lists them in a `T_MAIN(...)` call; the binary runs each, prints a closing line
 * "N passed, N failed" and exits 0 (all passed), 1 (a failure) or 77 (every case skipped).
 *
 *   static int test_sum(void) { T_CHECK(1 + 1 == 2); return 0; }
 *   T_MAIN(T_CASE(test_sum))
 */
#ifndef STK_T_H
#define STK_T_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_SKIP 77

/* Fail the current case with the expression's text and location. */
#define T_CHECK(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Like T_CHECK with a printf-style explanation. */
#define T_CHECKF(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Compare integers, printing both values on failure. */
#define T_EQ(a, b)                                                                                 \
    do {                                                                                           \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                                    \
        if (t_a_ != t_b_) {                                                                        \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a,   \
                    #b, t_a_, t_b_);                                                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* A status call that must return STK_OK; prints the message text otherwise. */
#define T_OK(expr)                                                                                 \
    do {                                                                                           \
        int t_rc_ = (expr);                                                                        \
        if (t_rc_ != 0) {                                                                          \
            fprintf(stderr, "  %s:%d: %s returned %d (%s) %s\n", __FILE__, __LINE__, #expr, t_rc_, \
                    stk_strerror(t_rc_), stk_last_errmsg());                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

typedef struct t_case {
    const char *name;
    int (*fn)(void);
} t_case;

#define T_CASE(fn) {#fn, fn}

static inline int t_run(const t_case *cases, size_t n, int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1]))
            continue;
        int rc = cases[i].fn();
        const char *what = rc == 0 ? "ok" : rc == T_SKIP ? "skip" : "FAIL";
        printf("%-4s %s\n", what, cases[i].name);
        fflush(stdout);
        if (rc == 0)
            passed++;
        else if (rc == T_SKIP)
            skipped++;
        else
            failed++;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed)
        return 1;
    return passed == 0 && skipped > 0 ? T_SKIP : 0;
}

#define T_MAIN(...)                                                                                \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const t_case t_cases_[] = {__VA_ARGS__};                                            \
        return t_run(t_cases_, sizeof(t_cases_) / sizeof(t_cases_[0]), argc, argv);               \
    }

#endif /* STK_T_H */
