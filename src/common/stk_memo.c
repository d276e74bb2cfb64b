/*
 * stk_memo.c: a per-record memo: one small blob of bytes derived from each record (a video's
 * frame index), set once by whichever worker thread derives it first and read by every later one
 * without a lock, for the life of its owner (a loader: across its epochs).
 *
 * A slot is an atomic pointer to an immutable blob {size, bytes}; set installs with one
 * compare-and-swap (a thread that loses the race frees its copy: both derived the same bytes from
 * the same record), get is one acquire load. The bytes held are counted against a cap: past it,
 * set declines and the caller derives the record's blob again next time (correct, slower).
 */
#include "stk_internal.h"

#include <stdatomic.h>
#include <string.h>

typedef struct memo_blob {
    struct memo_blob *retired; /* the next on the retired list */
    size_t size;
    uint8_t bytes[];
} memo_blob;

struct stk__memo {
    uint64_t n;
    uint64_t cap;
    _Atomic uint64_t held;
    _Atomic uint64_t hits, sets;
    _Atomic(memo_blob *) retired; /* forgotten blobs, freed with the memo */
    _Atomic(memo_blob *) slot[];
};

stk__memo *stk__memo_create(uint64_t n, uint64_t cap_bytes)
{
    if (n > (SIZE_MAX - sizeof(stk__memo)) / sizeof(_Atomic(memo_blob *)))
        return NULL;
    stk__memo *m = stk__calloc(1, sizeof(*m) + (size_t)n * sizeof(_Atomic(memo_blob *)));
    if (!m)
        return NULL;
    m->n = n;
    m->cap = cap_bytes;
    atomic_init(&m->retired, NULL);
    for (uint64_t i = 0; i < n; i++)
        atomic_init(&m->slot[i], NULL);
    return m;
}

void stk__memo_destroy(stk__memo *m)
{
    if (!m)
        return;
    for (uint64_t i = 0; i < m->n; i++)
        stk__free(atomic_load_explicit(&m->slot[i], memory_order_relaxed));
    for (memo_blob *b = atomic_load_explicit(&m->retired, memory_order_relaxed), *next; b;
         b = next) {
        next = b->retired;
        stk__free(b);
    }
    stk__free(m);
}

const uint8_t *stk__memo_get(stk__memo *m, uint64_t i, size_t *size)
{
    if (!m || i >= m->n)
        return NULL;
    memo_blob *b = atomic_load_explicit(&m->slot[i], memory_order_acquire);
    if (!b)
        return NULL;
    atomic_fetch_add_explicit(&m->hits, 1, memory_order_relaxed);
    *size = b->size;
    return b->bytes;
}

bool stk__memo_set(stk__memo *m, uint64_t i, const void *bytes, size_t size)
{
    if (!m || i >= m->n || size > SIZE_MAX - sizeof(memo_blob))
        return false;
    uint64_t cost = sizeof(memo_blob) + size;
    uint64_t held = atomic_load_explicit(&m->held, memory_order_relaxed);
    do {
        if (cost > m->cap || held > m->cap - cost)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&m->held, &held, held + cost,
                                                    memory_order_relaxed, memory_order_relaxed));
    memo_blob *b = stk__malloc(sizeof(memo_blob) + size);
    if (!b) {
        atomic_fetch_sub_explicit(&m->held, cost, memory_order_relaxed);
        return false;
    }
    b->retired = NULL;
    b->size = size;
    memcpy(b->bytes, bytes, size);
    memo_blob *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&m->slot[i], &none, b, memory_order_release,
                                                 memory_order_relaxed)) {
        stk__free(b); /* another thread set it first, from the same record */
        atomic_fetch_sub_explicit(&m->held, cost, memory_order_relaxed);
        return false;
    }
    atomic_fetch_add_explicit(&m->sets, 1, memory_order_relaxed);
    return true;
}

void stk__memo_forget(stk__memo *m, uint64_t i)
{
    if (!m || i >= m->n)
        return;
    /* Another thread may still be reading the blob: it goes on the retired list (still counted
     * in `held`), freed with the memo. A memo entry proved wrong is rare (a file rewritten under
     * a loader at the same size). */
    memo_blob *b = atomic_exchange_explicit(&m->slot[i], NULL, memory_order_acq_rel);
    if (!b)
        return;
    b->retired = atomic_load_explicit(&m->retired, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&m->retired, &b->retired, b, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

void stk__memo_counts(const stk__memo *m, uint64_t *hits, uint64_t *sets, uint64_t *held)
{
    *hits = m ? atomic_load_explicit(&m->hits, memory_order_relaxed) : 0;
    *sets = m ? atomic_load_explicit(&m->sets, memory_order_relaxed) : 0;
    *held = m ? atomic_load_explicit(&m->held, memory_order_relaxed) : 0;
}
