/*
 * stk_ring.c: the batch ring's slots, tickets, errors and reference count (stk_ring.h). The
 * batch a consumer holds (the stk_batch_* functions) is stk_batch.c.
 */
#include "batch/stk_ring.h"
#include "batch/stk_pinned.h"

#include <string.h>
#include <time.h>

void stk__ring_init(stk__ring *r)
{
    pthread_mutex_init(&r->mu, NULL);
    /* timed waits (stk_loader_next_timeout, a worker's wait for used memory) use CLOCK_MONOTONIC */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv_work, &ca);
    pthread_cond_init(&r->cv_ready, &ca);
    pthread_condattr_destroy(&ca);
    r->pid = stk__pid();
    r->refs = 1;
    r->arena.fd = -1;
}

stk_status stk__ring_alloc(stk__ring *r, uint32_t n_slots, size_t size, bool want_pinned,
                           uint64_t limit, bool shared, stk__devcopy *dc, char *why,
                           size_t why_size, char *err, size_t err_size)
{
    r->arena.fd = -1;
    r->slots = stk__calloc(n_slots, sizeof(stk__slot));
    if (!r->slots)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory allocating %u ring slots",
                              n_slots);
    r->n_slots = n_slots;
    r->slot_alloc = size;
    r->pinned = want_pinned;
    size_t stride = (size_t)STK_ALIGN_UP(size ? size : 1, 64), all;
    if (shared) {
        if (!stk__mul_ok(stride, n_slots, &all))
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "ring of %u slots of %zu bytes too "
                                  "large",
                                  n_slots, size);
        stk_status rc =
            stk__arena_alloc(&r->arena, all, want_pinned, limit, why, why_size, err, err_size);
        if (rc < 0)
            return rc;
        r->pinned = r->arena.pinned;
        r->pinned_bytes = r->arena.pinned ? r->arena.size : 0;
    }
    bool fresh = false; /* a slot of memory never written was allocated */
    for (uint32_t i = 0; i < n_slots; i++) {
        stk__slot *s = &r->slots[i];
        bool pinned = r->arena.pinned, warm = false;
        char note[STK_ERRMSG_SIZE] = "";
        if (shared)
            s->mem = r->arena.base + (size_t)i * stride;
        else
            s->mem =
                stk__slot_alloc_kept(size, want_pinned, limit, &pinned, &warm, note, sizeof(note));
        s->used = warm; /* kept memory held a batch of an earlier ring: no first touch */
        r->n_kept += warm;
        fresh = fresh || (s->mem && !warm);
        if (!s->mem)
            return stk__set_error(err, err_size, STK_ENOMEM,
                                  "out of memory allocating a ring slot of %zu bytes", size);
        if (!shared) {
            if (want_pinned && !pinned && r->pinned)
                snprintf(why, why_size, "%s", note);
            r->pinned = r->pinned && pinned;
            r->pinned_bytes += pinned ? (uint64_t)STK_ALIGN_UP(size, 64) : 0;
        }
        s->state = STK__SLOT_FREE;
        s->seq = UINT64_MAX;
        s->handle = (stk_batch){
            .dv = {.dc = dc, .slot = i, .mem = s->mem}, .r = r, .slot = i, .pinned = pinned};
    }
    /* Blocks kept that this ring did not take would stay unused: free them now that it allocated
     * large memory of its own (a ring of small slots leaves them for the next one). */
    if (fresh && size >= ((size_t)2 << 20))
        stk__slot_kept_trim();
    return STK_OK;
}

void stk__ring_free(stk__ring *r)
{
    if (r->slots) {
        if (r->arena.fd < 0)
            for (uint32_t i = 0; i < r->n_slots; i++)
                stk__slot_keep(r->slots[i].mem, r->slot_alloc, r->slots[i].handle.pinned,
                               r->slots[i].used);
        stk__free(r->slots);
        r->slots = NULL;
    }
    stk__arena_free(&r->arena);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv_work);
    pthread_cond_destroy(&r->cv_ready);
}

bool stk__ring_forked(const stk__ring *r)
{
    return stk__pid() != r->pid;
}

bool stk__ring_unref_locked(stk__ring *r)
{
    return --r->refs == 0;
}

/* The ticket word's high half: the batch's seq (low 32 bits), so a stale slot pointer never
 * takes a newer batch's ticket. */
static inline uint64_t ticket_tag(uint64_t seq)
{
    return (seq & 0xffffffffULL) << 32;
}

void stk__slot_release_locked(stk__ring *r, stk__slot *s)
{
    s->state = STK__SLOT_FREE;
    s->freed = ++r->free_clock;
}

void stk__ring_take_hot_locked(stk__ring *r, stk__slot *s)
{
    if (!r->reuse_hot)
        return;
    stk__slot *hot = s;
    for (uint32_t i = 0; i < r->n_slots; i++) {
        stk__slot *f = &r->slots[i];
        /* the memory freed last; else (nothing freed yet) memory that held a batch before */
        if (f->state == STK__SLOT_FREE && !f->draining &&
            (f->freed > hot->freed || (f->freed == hot->freed && f->used && !hot->used)))
            hot = f;
    }
    if (hot == s)
        return;
    uint8_t *mem = s->mem;
    s->mem = hot->mem;
    hot->mem = mem;
    s->handle.dv.mem = s->mem;
    hot->handle.dv.mem = hot->mem;
    uint64_t freed = s->freed; /* the stamp and the used flag go with the memory */
    s->freed = hot->freed;
    hot->freed = freed;
    bool used = s->used;
    s->used = hot->used;
    hot->used = used;
}

bool stk__ring_fresh_wait_locked(const stk__ring *r, const stk__slot *s, bool consumer_needs_it)
{
    if (!r->reuse_hot || s->used || r->fresh_budget_ns <= 0 || consumer_needs_it)
        return false;
    for (uint32_t i = 0; i < r->n_slots; i++)
        if (&r->slots[i] != s && r->slots[i].state != STK__SLOT_FREE)
            return true;
    return false;
}

void stk__slot_open_locked(stk__slot *s, uint64_t seq, uint32_t count)
{
    s->used = true;
    s->seq = seq;
    s->count = count;
    atomic_store(&s->ticket, ticket_tag(seq));
    atomic_store(&s->done, 0);
    atomic_store(&s->skipped, 0);
    s->err_sample = UINT32_MAX;
    s->err_code = STK_OK;
    s->errmsg[0] = '\0';
    s->state = STK__SLOT_FILLING;
}

bool stk__slot_take_tickets(stk__slot *s, uint64_t seq, uint32_t count, uint32_t want, uint32_t *t,
                            uint32_t *n)
{
    uint64_t want_tag = ticket_tag(seq);
    uint64_t cur = atomic_load(&s->ticket);
    for (;;) {
        if ((cur & 0xffffffff00000000ULL) != want_tag || (uint32_t)cur >= count)
            return false;
        uint32_t k = STK_MIN(want, count - (uint32_t)cur);
        if (atomic_compare_exchange_weak(&s->ticket, &cur, cur + k)) {
            *t = (uint32_t)cur;
            *n = k;
            return true;
        }
    }
}

bool stk__slot_take_ticket(stk__slot *s, uint64_t seq, uint32_t count, uint32_t *t)
{
    uint32_t n;
    return stk__slot_take_tickets(s, seq, count, 1, t, &n);
}

bool stk__slot_tickets_out(stk__slot *s)
{
    return (uint32_t)atomic_load(&s->ticket) >= s->count;
}

void stk__slot_error_locked(stk__slot *s, uint32_t sample, stk_status rc, const char *msg)
{
    if (sample < s->err_sample) {
        s->err_sample = sample;
        s->err_code = rc;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", msg);
    }
}

void stk__slot_hold_locked(stk__ring *r, stk__slot *s)
{
    s->state = STK__SLOT_HELD;
    s->handle.dv.ds.waited = false;
    s->handle.dv.ds.n_use = 0;
    r->held++;
    r->refs++;
}

void stk__ring_drop_locked(stk__ring *r)
{
    for (uint32_t i = 0; i < r->n_slots; i++) {
        stk__slot *s = &r->slots[i];
        if (s->state != STK__SLOT_HELD) {
            if (s->state != STK__SLOT_FREE)     /* a FREE slot keeps its stamp: never-used memory */
                stk__slot_release_locked(r, s); /* must not look freed last */
            s->seq = UINT64_MAX;
            atomic_store(&s->ticket, UINT64_MAX); /* no seq tag matches: no ticket is taken */
        }
    }
}
