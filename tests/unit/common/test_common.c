/*
 * test_common.c: status texts, the per-thread last-error buffer, dtype facts, version, the
 * allocation wrappers (overflow checks, aligned ring slots) and fault injection in debug builds.
 */
#include "batch/stk_pinned.h"
#include "stk_internal.h"
#include "t.h"

#include <stdatomic.h>

#include <pthread.h>

static int test_strerror(void)
{
    static const int codes[] = {STK_OK,     STK_END,       STK_EINVAL, STK_ENOMEM,
                                STK_EIO,    STK_EFORMAT,   STK_ELIMIT, STK_ENOTSUP,
                                STK_ESTATE, STK_ECANCELED, STK_EAGAIN};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        const char *s = stk_strerror(codes[i]);
        T_CHECK(s && *s && strcmp(s, "unknown status code") != 0);
        for (size_t j = 0; j < i; j++)
            T_CHECK(strcmp(s, stk_strerror(codes[j])) != 0); /* distinct texts */
    }
    T_CHECK(strcmp(stk_strerror(-99), "unknown status code") == 0);
    T_CHECK(strcmp(stk_strerror(42), "unknown status code") == 0);
    /* The codes are pinned forever (curl rule). */
    T_EQ(STK_EINVAL, -1);
    T_EQ(STK_ENOMEM, -2);
    T_EQ(STK_EIO, -3);
    T_EQ(STK_EFORMAT, -4);
    T_EQ(STK_ELIMIT, -5);
    T_EQ(STK_ENOTSUP, -6);
    T_EQ(STK_ESTATE, -7);
    T_EQ(STK_ECANCELED, -8);
    T_EQ(STK_EAGAIN, -9);
    T_EQ(STK_END, 1);
    return 0;
}

static void *other_thread(void *arg)
{
    (void)arg;
    stk__set_last_error(STK_EIO, "from the other thread");
    return (void *)stk_last_errmsg();
}

static int test_last_errmsg_per_thread(void)
{
    stk__clear_last_error();
    T_CHECK(strcmp(stk_last_errmsg(), "") == 0);
    T_EQ(stk__set_last_error(STK_EINVAL, "bad %s %d", "thing", 7), STK_EINVAL);
    T_CHECK(strcmp(stk_last_errmsg(), "bad thing 7") == 0);
    pthread_t t;
    void *theirs;
    T_CHECK(pthread_create(&t, NULL, other_thread, NULL) == 0);
    T_CHECK(pthread_join(t, &theirs) == 0);
    T_CHECK(theirs != (void *)stk_last_errmsg());           /* separate buffers */
    T_CHECK(strcmp(stk_last_errmsg(), "bad thing 7") == 0); /* ours untouched */
    /* copying the buffer onto itself keeps it; long messages are truncated, not overflowed */
    T_EQ(stk__last_error_copy(STK_EIO, stk_last_errmsg()), STK_EIO);
    T_CHECK(strcmp(stk_last_errmsg(), "bad thing 7") == 0);
    char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    stk__last_error_copy(STK_EIO, big);
    T_EQ(strlen(stk_last_errmsg()), STK__LAST_ERRMSG_SIZE - 1);
    char buf[8];
    T_EQ(stk__set_error(buf, sizeof(buf), STK_ELIMIT, "%s", "truncated message"), STK_ELIMIT);
    T_CHECK(strcmp(buf, "truncat") == 0);
    return 0;
}

/* A message formatted with its own buffer among the arguments (extending itself) comes out
 * whole: formatting goes through a scratch buffer (issue 30: it came out empty). */
static int test_error_formatted_with_itself(void)
{
    char err[STK_ERRMSG_SIZE];
    snprintf(err, sizeof(err), "x.tar: read failed");
    stk_status rc =
        stk__set_error(err, sizeof(err), STK_EIO, "%s", err); /* self-format: on purpose */
    T_EQ(rc, STK_EIO);
    T_CHECKF(strcmp(err, "x.tar: read failed") == 0, "%s", err);
    stk__set_error(err, sizeof(err), STK_EIO, "record 3: %s (%d)", err,
                   7); /* self-format: on purpose */
    T_CHECKF(strcmp(err, "record 3: x.tar: read failed (7)") == 0, "%s", err);
    stk__set_last_error(STK_EIO, "first");
    stk__set_last_error(STK_EIO, "%s, then %s", stk_last_errmsg(),
                        "second"); /* self-format: on purpose */
    T_CHECKF(strcmp(stk_last_errmsg(), "first, then second") == 0, "%s", stk_last_errmsg());
    char small[6];
    snprintf(small, sizeof(small), "abcde");
    stk__set_error(small, sizeof(small), STK_EIO, "%s%s", small,
                   small);                /* self-format: on purpose */
    T_CHECK(strcmp(small, "abcde") == 0); /* cut to the buffer, from the whole text */
    return 0;
}

static int test_dtypes_and_version(void)
{
    T_EQ(stk_dtype_size(STK_DTYPE_UINT8), 1);
    T_EQ(stk_dtype_size(STK_DTYPE_INT16), 2);
    T_EQ(stk_dtype_size(STK_DTYPE_FLOAT16), 2);
    T_EQ(stk_dtype_size(STK_DTYPE_BFLOAT16), 2);
    T_EQ(stk_dtype_size(STK_DTYPE_INT32), 4);
    T_EQ(stk_dtype_size(STK_DTYPE_FLOAT32), 4);
    T_EQ(stk_dtype_size(STK_DTYPE_INT64), 8);
    T_EQ(stk_dtype_size(STK_DTYPE_FLOAT64), 8);
    T_EQ(stk_dtype_size((stk_dtype)99), 0);
    T_CHECK(strcmp(stk_dtype_name(STK_DTYPE_BFLOAT16), "bfloat16") == 0);
    T_CHECK(strcmp(stk_dtype_name((stk_dtype)99), "unknown") == 0);
    T_CHECK(strcmp(stk_field_kind_name(STK_FIELD_ARRAY), "array") == 0);
    T_CHECK(strcmp(stk_field_kind_name((stk_field_kind)9), "unknown") == 0);
    T_EQ(stk_version_number(), STK_VERSION_NUMBER);
    T_CHECK(strcmp(stk_version_string(), STK_VERSION_STRING) == 0);
    T_CHECK(stk_n_cpus() >= 1);
    uint64_t a = stk__now_ns(), b = stk__now_ns();
    T_CHECK(b >= a);
    return 0;
}

static int test_alloc(void)
{
    T_CHECK(stk__calloc(SIZE_MAX / 2, 4) == NULL); /* n*size overflow is refused */
    size_t out;
    T_CHECK(!stk__mul_ok(SIZE_MAX, 2, &out));
    T_CHECK(stk__mul_ok(1000, 1000, &out) && out == 1000000);
    char *s = stk__strdup("stoker");
    T_CHECK(s && strcmp(s, "stoker") == 0);
    stk__free(s);
    bool pinned = true;
    for (size_t size = 1; size < 5000; size += 777) {
        uint8_t *p = stk__slot_alloc(size, false, &pinned);
        T_CHECK(p);
        T_EQ((uintptr_t)p % 64, 0);
        T_CHECK(!pinned);
        memset(p, 1, size);
        stk__slot_free(p, size, pinned);
    }
    return 0;
}

static int test_fault_injection(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    stk__fault_alloc_set(2);
    void *a = stk__malloc(10), *b = stk__malloc(10), *c = stk__malloc(10);
    stk__fault_alloc_set(0);
    T_CHECK(a && !b && c);
    stk__free(a);
    stk__free(c);
    return 0;
#else
    return T_SKIP;
#endif
}

/* The running memory budget's decision (stk__budget_fits) and its account (stk__budget_charge):
 * what fits fits exactly, nothing overflows, a refused charge takes nothing. */
static int test_budget(void)
{
    T_CHECK(stk__budget_fits(100, 40, 50, 10));
    T_CHECK(!stk__budget_fits(100, 40, 50, 11));
    T_CHECK(stk__budget_fits(100, 100, 0, 0));
    T_CHECK(!stk__budget_fits(100, 101, 0, 0));          /* fixed part alone over it */
    T_CHECK(!stk__budget_fits(100, 40, 70, 0));          /* held over what remains */
    T_CHECK(!stk__budget_fits(100, 40, 50, UINT64_MAX)); /* no wrap-around */
    T_CHECK(!stk__budget_fits(UINT64_MAX, UINT64_MAX - 1, 1, 1));
    T_CHECK(stk__budget_fits(UINT64_MAX, UINT64_MAX - 2, 1, 1));
    /* 64 Mpx x 3 from a small file against 256 MiB with a 64 MiB ring and 2 x 1 MiB scratch */
    T_CHECK(!stk__budget_fits(256ull << 20, (64ull << 20) + (2ull << 20), 0, (64ull << 20) * 3));
    T_CHECK(stk__budget_fits(256ull << 20, (64ull << 20) + (2ull << 20), 0, 4000000ull * 3));
    stk__budget b = {.limit = 1000, .fixed = 600};
    T_CHECK(stk__budget_charge(&b, 300));
    T_CHECK(!stk__budget_charge(&b, 101));
    T_EQ(atomic_load(&b.held), 300);
    T_CHECK(stk__budget_charge(&b, 100));
    T_CHECK(!stk__budget_charge(&b, 1));
    T_EQ(atomic_load(&b.held), 400);
    return 0;
}

T_MAIN(T_CASE(test_strerror), T_CASE(test_last_errmsg_per_thread),
       T_CASE(test_error_formatted_with_itself), T_CASE(test_dtypes_and_version),
       T_CASE(test_alloc), T_CASE(test_fault_injection), T_CASE(test_budget))
