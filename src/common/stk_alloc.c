/*
 * stk_alloc.c: every allocation of the library. With -DSTK_DEBUG, STK_FAULT_ALLOC=N in the
 * environment makes the Nth stk__malloc/stk__calloc/stk__realloc (counted from 1, over the whole
 * process) fail, so tests can walk N over a whole loader run (curl torture, sqlite OOM tests).
 * Ring slots (pageable or pinned) come from src/batch/stk_pinned.c.
 */
#include "stk_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef STK_DEBUG
static atomic_long alloc_count;
static long fault_at = -1; /* read once; -1 = not yet read, 0 = off */
int stk__fault_alloc_hit(void)
{
    if (fault_at < 0) {
        const char *e = getenv("STK_FAULT_ALLOC");
        fault_at = e ? atol(e) : 0;
    }
    return fault_at > 0 && atomic_fetch_add(&alloc_count, 1) + 1 == fault_at;
}
/* Tests: make the nth allocation from now fail (0 = off), resetting the count. */
void stk__fault_alloc_set(long n);
void stk__fault_alloc_set(long n)
{
    atomic_store(&alloc_count, 0);
    fault_at = n;
}
/* STK_FAULT_WRITE=N: once N bytes have been written by the library (shards, manifests), every
 * further write fails as a full disk would (ENOSPC). */
static atomic_long write_count;
static long write_limit = -1;
int stk__fault_write_hit(size_t size)
{
    if (write_limit < 0) {
        const char *e = getenv("STK_FAULT_WRITE");
        write_limit = e ? atol(e) : 0;
    }
    if (write_limit <= 0 || atomic_fetch_add(&write_count, (long)size) + (long)size <= write_limit)
        return 0;
    errno = ENOSPC;
    return 1;
}
/* Tests: fail writes once n more bytes have been written (0 = off), resetting the count. */
void stk__fault_write_set(long n);
void stk__fault_write_set(long n)
{
    atomic_store(&write_count, 0);
    write_limit = n;
}
#else
int stk__fault_alloc_hit(void)
{
    return 0;
}
int stk__fault_write_hit(size_t size)
{
    (void)size;
    return 0;
}
#endif

void *stk__malloc(size_t size)
{
    if (stk__fault_alloc_hit())
        return NULL;
    return malloc(size ? size : 1);
}

void *stk__calloc(size_t n, size_t size)
{
    size_t total;
    if (!stk__mul_ok(n, size, &total) || stk__fault_alloc_hit())
        return NULL;
    return calloc(1, total ? total : 1);
}

void *stk__realloc(void *p, size_t size)
{
    if (stk__fault_alloc_hit())
        return NULL;
    return realloc(p, size ? size : 1);
}

void stk__free(void *p)
{
    free(p);
}

char *stk__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = stk__malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}
