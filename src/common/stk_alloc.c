/*
 * stk_alloc.c: every allocation of the library. With -DSTK_DEBUG, STK_FAULT_ALLOC=N in the
 * environment makes the Nth stk__malloc/stk__calloc/stk__realloc (counted from 1, over the whole
 * process) fail, so tests can walk N over a whole loader run (curl torture, sqlite OOM tests).
 * Ring slots come from stk__slot_alloc: the one function the GPU path turns into pinned memory.
 */
#include "stk_internal.h"

#include <stdlib.h>
#include <string.h>

#ifdef STK_DEBUG
#include <stdatomic.h>
static atomic_long alloc_count;
static long fault_at = -1; /* read once; -1 = not yet read, 0 = off */
static int fault_injected(void)
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
#else
static int fault_injected(void)
{
    return 0;
}
#endif

void *stk__malloc(size_t size)
{
    if (fault_injected())
        return NULL;
    return malloc(size ? size : 1);
}

void *stk__calloc(size_t n, size_t size)
{
    size_t total;
    if (!stk__mul_ok(n, size, &total) || fault_injected())
        return NULL;
    return calloc(1, total ? total : 1);
}

void *stk__realloc(void *p, size_t size)
{
    if (fault_injected())
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

void *stk__slot_alloc(size_t size, bool want_pinned, bool *pinned)
{
    /* Page-locked memory arrives with the GPU path (src/cuda); until then slots are pageable. */
    (void)want_pinned;
    *pinned = false;
    if (fault_injected())
        return NULL;
    void *p = NULL;
    /* 64-byte alignment: whole cache lines, and what SIMD stores and DLPack consumers like. */
    if (posix_memalign(&p, 64, STK_ALIGN_UP(size ? size : 1, 64)) != 0)
        return NULL;
    return p;
}

void stk__slot_free(void *p, size_t size, bool pinned)
{
    (void)size;
    (void)pinned;
    free(p);
}
