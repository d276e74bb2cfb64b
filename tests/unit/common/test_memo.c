/*
 * test_memo.c: the per-record memo (src/common/stk_memo.c): a blob set once per record and read
 * back byte for byte; a second set of the same record declines and keeps the first; the cap on
 * bytes held declines what would pass it; forget empties a slot (and a new set fills it);
 * records out of range and a NULL memo are refused; threads racing to set the same records leave
 * exactly one blob each, equal to what one of them set. Single flight: K threads wanting one
 * record's blob at once (the deriver holds its claim until the K - 1 others are seen waiting: an
 * event, not a delay) derive it once and all read that blob; a deriver that fails (releases
 * without setting) hands the claim to one waiter, which derives it, once.
 */
#include "t.h"
#include "stk_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

static int test_set_get_once(void)
{
    stk__memo *m = stk__memo_create(4, 1 << 20);
    T_CHECK(m);
    size_t size = 123;
    T_CHECK(stk__memo_get(m, 0, &size) == NULL);
    T_CHECK(stk__memo_set(m, 2, "abcdef", 6));
    const uint8_t *b = stk__memo_get(m, 2, &size);
    T_CHECK(b && size == 6 && memcmp(b, "abcdef", 6) == 0);
    T_CHECK(!stk__memo_set(m, 2, "xyz", 3)); /* the first stays */
    b = stk__memo_get(m, 2, &size);
    T_CHECK(b && size == 6 && memcmp(b, "abcdef", 6) == 0);
    T_CHECK(!stk__memo_set(m, 4, "a", 1)); /* out of range */
    T_CHECK(stk__memo_get(m, 4, &size) == NULL);
    T_CHECK(stk__memo_get(NULL, 0, &size) == NULL);
    T_CHECK(!stk__memo_set(NULL, 0, "a", 1));
    stk__memo_forget(m, 2);
    T_CHECK(stk__memo_get(m, 2, &size) == NULL);
    T_CHECK(stk__memo_set(m, 2, "uvw", 3));
    b = stk__memo_get(m, 2, &size);
    T_CHECK(b && size == 3 && memcmp(b, "uvw", 3) == 0);
    uint64_t hits, sets, held;
    stk__memo_counts(m, &hits, &sets, &held);
    T_EQ(hits, 3);
    T_EQ(sets, 2);
    T_CHECK(held >= 9);
    stk__memo_destroy(m);
    return 0;
}

static int test_cap(void)
{
    uint8_t blob[100];
    memset(blob, 7, sizeof(blob));
    stk__memo *m = stk__memo_create(100, 1000);
    T_CHECK(m);
    size_t kept = 0;
    for (uint64_t i = 0; i < 100; i++)
        kept += stk__memo_set(m, i, blob, sizeof(blob));
    T_CHECK(kept >= 1 && kept < 10); /* 100 bytes plus a header each, at most 1000 in all */
    uint64_t hits, sets, held;
    stk__memo_counts(m, &hits, &sets, &held);
    T_EQ(sets, kept);
    T_CHECK(held <= 1000);
    size_t size;
    T_CHECK(stk__memo_get(m, 0, &size) != NULL);
    T_CHECK(stk__memo_get(m, 99, &size) == NULL);
    T_CHECK(!stk__memo_set(m, 99, blob, 2000)); /* larger than the cap alone */
    stk__memo_destroy(m);
    return 0;
}

typedef struct racer {
    stk__memo *m;
    uint8_t id;
    int won;
} racer;

static void *race(void *arg)
{
    racer *r = arg;
    uint8_t blob[16];
    for (uint64_t i = 0; i < 1000; i++) {
        memset(blob, r->id, sizeof(blob));
        blob[0] = (uint8_t)i;
        r->won += stk__memo_set(r->m, i, blob, sizeof(blob));
    }
    return NULL;
}

static int test_race(void)
{
    stk__memo *m = stk__memo_create(1000, 1 << 20);
    T_CHECK(m);
    racer r[4];
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        r[k] = (racer){m, (uint8_t)(k + 1), 0};
        T_EQ(pthread_create(&th[k], NULL, race, &r[k]), 0);
    }
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    T_EQ(r[0].won + r[1].won + r[2].won + r[3].won, 1000);
    for (uint64_t i = 0; i < 1000; i++) {
        size_t size;
        const uint8_t *b = stk__memo_get(m, i, &size);
        T_CHECK(b && size == 16 && b[0] == (uint8_t)i && b[1] >= 1 && b[1] <= 4);
        for (int j = 2; j < 16; j++)
            T_EQ(b[j], b[1]); /* one thread's blob whole */
    }
    uint64_t hits, sets, held;
    stk__memo_counts(m, &hits, &sets, &held);
    T_EQ(sets, 1000);
    stk__memo_destroy(m);
    return 0;
}

#define K 6

typedef struct flyer {
    stk__memo *m;
    int fail_first;       /* the first deriver releases without setting */
    _Atomic int *derived; /* derivations, all threads */
    const uint8_t *got;   /* the blob this thread read */
    int n;                /* its derivation's number, -1: none */
} flyer;

static void *fly(void *arg)
{
    flyer *f = arg;
    size_t size;
    f->n = -1;
    if (stk__memo_claim(f->m, 7)) {
        int n = f->n = atomic_fetch_add(f->derived, 1);
        /* hold the claim until the others are all in flight, waiting on it */
        stk__memo_await_waiting(f->m, n == 0 ? K - 1 : 0);
        uint8_t blob[8] = {1, 2, 3, 4, 5, 6, 7, (uint8_t)n};
        if (f->fail_first && n == 0) {  /* releases having set nothing, and reads nothing: */
            stk__memo_release(f->m, 7); /* another deriver may set the record at any moment */
            return NULL;
        }
        stk__memo_set(f->m, 7, blob, sizeof(blob));
        stk__memo_release(f->m, 7);
    }
    f->got = stk__memo_get(f->m, 7, &size);
    return NULL;
}

static int run_flight(int fail_first, int expect_derived)
{
    stk__memo *m = stk__memo_create(16, 1 << 20);
    T_CHECK(m);
    _Atomic int derived = 0;
    flyer f[K];
    pthread_t th[K];
    for (int k = 0; k < K; k++) {
        f[k] = (flyer){m, fail_first, &derived, NULL, -1};
        T_EQ(pthread_create(&th[k], NULL, fly, &f[k]), 0);
    }
    for (int k = 0; k < K; k++)
        pthread_join(th[k], NULL);
    T_EQ(atomic_load(&derived), expect_derived);
    size_t size;
    const uint8_t *blob = stk__memo_get(m, 7, &size);
    T_CHECK(blob && size == 8 && blob[7] == expect_derived - 1);
    for (int k = 0; k < K; k++) /* each read it, but the failed deriver (which read nothing) */
        T_CHECK(f[k].got == ((fail_first && f[k].n == 0) ? NULL : blob));
    uint64_t claims, waits, waiting;
    stk__memo_flights(m, &claims, &waits, &waiting);
    T_EQ(claims, (uint64_t)expect_derived);
    T_CHECK(waits >= K - 1);
    T_EQ(waiting, 0);
    T_CHECK(!stk__memo_claim(m, 7)); /* set: nothing to derive */
    T_CHECK(stk__memo_claim(m, 8));  /* another record: its own claim */
    stk__memo_release(m, 8);
    T_CHECK(!stk__memo_claim(NULL, 0) && !stk__memo_claim(m, 16));
    stk__memo_destroy(m);
    return 0;
}

static int test_single_flight(void)
{
    return run_flight(0, 1);
}

static int test_single_flight_failed_deriver(void)
{
    return run_flight(1, 2);
}

T_MAIN(T_CASE(test_set_get_once), T_CASE(test_cap), T_CASE(test_race), T_CASE(test_single_flight),
       T_CASE(test_single_flight_failed_deriver))
