/*
 * stk_memo.c: a per-record memo: one small blob of bytes derived from each record (a video's
 * frame index), set once by whichever worker thread derives it first and read by every later one
 * without a lock, for the life of its owner (a loader: across its epochs).
 *
 * A slot is an atomic pointer to an immutable blob {size, bytes}; set installs with one
 * compare-and-swap (a thread that loses the race frees its copy: both derived the same bytes from
 * the same record), get is one acquire load. The bytes held are counted against a cap: past it,
 * set declines and the caller derives the record's blob again next time (correct, slower).
 *
 * Single flight: a thread about to derive a record's blob claims it first (stk__memo_claim); a
 * second thread that wants the same record meanwhile (another clip of the same video, in flight
 * at once) waits for the claim's release and then reads the blob the first set, so a record is
 * derived once, and its index file written by one thread. Claims are rare (a record's first
 * use), so they take one mutex; a waiter sleeps on a condition variable, woken by any release.
 */
#include "stk_internal.h"

#include <pthread.h>
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
    _Atomic(memo_blob *) retired;     /* forgotten blobs, freed with the memo */
    pthread_mutex_t lock;             /* claims */
    pthread_cond_t released, arrived; /* a claim released; a thread began waiting (tests) */
    uint64_t *claimed; /* one bit per record: a thread is deriving its blob (under lock) */
    uint64_t claims, waits, waiting; /* under lock */
    _Atomic(memo_blob *) slot[];
};

stk__memo *stk__memo_create(uint64_t n, uint64_t cap_bytes)
{
    if (n > (SIZE_MAX - sizeof(stk__memo)) / sizeof(_Atomic(memo_blob *)))
        return NULL;
    stk__memo *m = stk__calloc(1, sizeof(*m) + (size_t)n * sizeof(_Atomic(memo_blob *)));
    if (!m)
        return NULL;
    if (!(m->claimed = stk__calloc((size_t)(n / 64 + 1), sizeof(uint64_t)))) {
        stk__free(m);
        return NULL;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->released, NULL);
    pthread_cond_init(&m->arrived, NULL);
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
    pthread_mutex_destroy(&m->lock);
    pthread_cond_destroy(&m->released);
    pthread_cond_destroy(&m->arrived);
    stk__free(m->claimed);
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

bool stk__memo_claim(stk__memo *m, uint64_t i)
{
    if (!m || i >= m->n)
        return false;
    uint64_t bit = 1ULL << (i % 64);
    bool mine = false;
    pthread_mutex_lock(&m->lock);
    while (!atomic_load_explicit(&m->slot[i], memory_order_acquire)) {
        if (!(m->claimed[i / 64] & bit)) {
            m->claimed[i / 64] |= bit;
            m->claims++;
            mine = true;
            break;
        }
        m->waits++;
        m->waiting++;
        pthread_cond_broadcast(&m->arrived);
        pthread_cond_wait(&m->released, &m->lock);
        m->waiting--;
    }
    pthread_mutex_unlock(&m->lock);
    return mine;
}

void stk__memo_release(stk__memo *m, uint64_t i)
{
    if (!m || i >= m->n)
        return;
    pthread_mutex_lock(&m->lock);
    m->claimed[i / 64] &= ~(1ULL << (i % 64));
    pthread_cond_broadcast(&m->released);
    pthread_mutex_unlock(&m->lock);
}

void stk__memo_flights(stk__memo *m, uint64_t *claims, uint64_t *waits, uint64_t *waiting)
{
    pthread_mutex_lock(&m->lock);
    *claims = m->claims;
    *waits = m->waits;
    *waiting = m->waiting;
    pthread_mutex_unlock(&m->lock);
}

void stk__memo_await_waiting(stk__memo *m, uint64_t n)
{
    pthread_mutex_lock(&m->lock);
    while (m->waiting < n)
        pthread_cond_wait(&m->arrived, &m->lock);
    pthread_mutex_unlock(&m->lock);
}

void stk__memo_counts(const stk__memo *m, uint64_t *hits, uint64_t *sets, uint64_t *held)
{
    *hits = m ? atomic_load_explicit(&m->hits, memory_order_relaxed) : 0;
    *sets = m ? atomic_load_explicit(&m->sets, memory_order_relaxed) : 0;
    *held = m ? atomic_load_explicit(&m->held, memory_order_relaxed) : 0;
}
