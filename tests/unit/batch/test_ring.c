/*
 * test_ring.c: the batch ring on its own (src/batch/stk_ring.c): a slot's tickets are taken once
 * each and never by a stale batch, the lowest failed sample's error wins, a reset frees every slot
 * but the held ones, the stk_batch accessors show the slot's batch, the last reference (the
 * owner's or a held batch's) destroys the owner exactly once, with reuse_hot a slot being
 * opened takes the memory of the most recently freed FREE slot and of no other, a worker waits
 * for used memory rather than open a batch in fresh memory only when the rule says so, and a ring's
 * large used memory is kept for the next ring of the same slot size (stk_pinned.c), never pinned,
 * small or never-written memory, and no longer than the next ring that allocates large memory.
 */
#include "batch/stk_ring.h"
#include "t.h"

static int destroyed; /* calls of on_destroy with the owner given at setup */

static void on_destroy(stk__ring *r, void *arg)
{
    destroyed += arg == (void *)r;
    stk__ring_free(r);
}

/* A ring of n slots of one int64 "label" column (plus "index"), batches of up to 4. */
static int make_ring_n(stk__ring *r, stk__devcopy *dc, uint32_t n)
{
    static const stk_field label = {
        .struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64};
    static const uint64_t max_size = 8;
    char err[256], why[256] = "";
    memset(r, 0, sizeof(*r));
    memset(dc, 0, sizeof(*dc)); /* host only */
    stk__ring_init(r);
    r->destroy = on_destroy;
    r->destroy_arg = r;
    T_OK(stk__layout_init(&r->lay, &label, &max_size, 1, 4, -1, NULL, err, sizeof(err)));
    r->view = r->lay;
    T_OK(stk__ring_alloc(r, n, r->lay.slot_size, false, 0, false, dc, why, sizeof(why), err,
                         sizeof(err)));
    T_CHECK(!r->pinned && r->pinned_bytes == 0 && why[0] == '\0');
    return 0;
}

static int make_ring(stk__ring *r, stk__devcopy *dc)
{
    return make_ring_n(r, dc, 2);
}

static int test_tickets(void)
{
    stk__ring r;
    stk__devcopy dc;
    if (make_ring(&r, &dc))
        return 1;
    stk__slot *s = stk__ring_slot(&r, 5); /* batch 5 lives in slot 1 */
    T_CHECK(s == &r.slots[1]);
    T_EQ(s->state, STK__SLOT_FREE);
    pthread_mutex_lock(&r.mu);
    stk__slot_open_locked(s, 5, 3);
    T_EQ(s->state, STK__SLOT_FILLING);
    T_CHECK(!stk__slot_tickets_out(s));
    pthread_mutex_unlock(&r.mu);
    uint32_t t, taken = 0;
    T_CHECK(!stk__slot_take_ticket(s, 3, 3, &t)); /* a stale batch's worker gets nothing */
    for (uint32_t want = 0; want < 3; want++) {
        T_CHECK(stk__slot_take_ticket(s, 5, 3, &t));
        T_EQ(t, want);
        taken++;
    }
    T_CHECK(!stk__slot_take_ticket(s, 5, 3, &t)); /* every ticket once */
    T_EQ(taken, 3);
    pthread_mutex_lock(&r.mu);
    T_CHECK(stk__slot_tickets_out(s));
    /* The lowest failed sample wins, whatever the order the errors come in. */
    stk__slot_error_locked(s, 2, STK_EIO, "sample 2");
    stk__slot_error_locked(s, 1, STK_EFORMAT, "sample 1");
    stk__slot_error_locked(s, 2, STK_ENOMEM, "sample 2 again");
    T_EQ(s->err_sample, 1);
    T_EQ(s->err_code, STK_EFORMAT);
    T_CHECK(strcmp(s->errmsg, "sample 1") == 0);
    /* A reset frees it: no ticket of it is taken any more. */
    stk__ring_drop_locked(&r);
    T_EQ(s->state, STK__SLOT_FREE);
    pthread_mutex_unlock(&r.mu);
    T_CHECK(!stk__slot_take_ticket(s, 5, 3, &t));
    pthread_mutex_lock(&r.mu);
    stk__slot_open_locked(s, 7, 2); /* reopened for a newer batch: a clean slate */
    T_EQ(s->err_sample, UINT32_MAX);
    T_EQ(s->err_code, STK_OK);
    T_EQ(atomic_load(&s->done), 0);
    pthread_mutex_unlock(&r.mu);
    /* Tickets several at a time (a source that reads records together): each once, the last
     * group cut at the batch's end, none for another batch. */
    uint32_t n;
    T_CHECK(!stk__slot_take_tickets(s, 5, 2, 4, &t, &n));
    T_CHECK(stk__slot_take_tickets(s, 7, 2, 1, &t, &n));
    T_EQ(t, 0);
    T_EQ(n, 1);
    T_CHECK(stk__slot_take_tickets(s, 7, 2, 4, &t, &n));
    T_EQ(t, 1);
    T_EQ(n, 1);
    T_CHECK(!stk__slot_take_tickets(s, 7, 2, 4, &t, &n));
    pthread_mutex_lock(&r.mu);
    stk__slot_open_locked(s, 9, 8);
    pthread_mutex_unlock(&r.mu);
    uint32_t expect_t[] = {0, 3, 6}, expect_n[] = {3, 3, 2};
    for (int k = 0; k < 3; k++) {
        T_CHECK(stk__slot_take_tickets(s, 9, 8, 3, &t, &n));
        T_EQ(t, expect_t[k]);
        T_EQ(n, expect_n[k]);
    }
    T_CHECK(!stk__slot_take_tickets(s, 9, 8, 3, &t, &n));
    T_CHECK(!stk__slot_take_ticket(s, 9, 8, &t));
    pthread_mutex_lock(&r.mu);
    bool last = stk__ring_unref_locked(&r);
    pthread_mutex_unlock(&r.mu);
    T_CHECK(last);
    destroyed = 0;
    r.destroy(&r, r.destroy_arg);
    T_EQ(destroyed, 1);
    return 0;
}

/* A held batch shows its slot and keeps the ring alive past its owner. */
static int test_hold_and_release(void)
{
    stk__ring r;
    stk__devcopy dc;
    if (make_ring(&r, &dc))
        return 1;
    stk__slot *s = stk__ring_slot(&r, 0);
    pthread_mutex_lock(&r.mu);
    stk__slot_open_locked(s, 0, 3);
    s->epoch = 2;
    s->number = 9;
    s->state = STK__SLOT_READY;
    for (int64_t i = 0; i < 3; i++) {
        ((int64_t *)(s->mem + r.lay.t[0].offset))[i] = 10 + i;
        ((int64_t *)(s->mem + r.lay.t[1].offset))[i] = 100 + i;
    }
    stk__slot_hold_locked(&r, s);
    T_EQ(s->state, STK__SLOT_HELD);
    T_EQ(r.held, 1);
    T_EQ(r.refs, 2);
    stk__ring_drop_locked(&r); /* a reset leaves a held slot alone */
    T_EQ(s->state, STK__SLOT_HELD);
    pthread_mutex_unlock(&r.mu);
    stk_batch *b = &s->handle;
    T_EQ(stk_batch_n_samples(b), 3);
    T_EQ(stk_batch_epoch(b), 2);
    T_EQ(stk_batch_number(b), 9);
    T_EQ(stk_batch_n_tensors(b), 2);
    T_EQ(stk_batch_device(b), -1);
    stk_tensor t;
    stk_tensor_init(&t);
    T_OK(stk_batch_tensor(b, 0, &t));
    T_CHECK(strcmp(t.name, "label") == 0 && t.shape[0] == 3 && t.dtype == STK_DTYPE_INT64);
    T_EQ(((const int64_t *)t.data)[2], 12);
    T_EQ(stk_batch_tensor(b, 2, &t), STK_EINVAL);
    T_EQ(stk_batch_device_tensor(b, 0, &t), STK_ENOTSUP);
    T_EQ(stk_batch_indices(b)[1], 101);
    /* The owner goes first; the batch's release is the last reference. */
    destroyed = 0;
    pthread_mutex_lock(&r.mu);
    T_CHECK(!stk__ring_unref_locked(&r));
    pthread_mutex_unlock(&r.mu);
    T_EQ(destroyed, 0);
    stk_batch_release(b);
    T_EQ(destroyed, 1);
    return 0;
}

/* Open batch seq in its slot as the loader does (mu held): take the hot memory, then open. */
static stk__slot *open_hot(stk__ring *r, uint64_t seq)
{
    stk__slot *s = stk__ring_slot(r, seq);
    stk__ring_take_hot_locked(r, s);
    stk__slot_open_locked(s, seq, 1);
    return s;
}

/* Fill, hand out and release slot s's batch (mu held on entry and return). */
static void consume(stk__ring *r, stk__slot *s)
{
    s->state = STK__SLOT_READY;
    stk__slot_hold_locked(r, s);
    pthread_mutex_unlock(&r->mu);
    stk_batch_release(&s->handle);
    pthread_mutex_lock(&r->mu);
}

/* With reuse_hot, a slot being opened swaps its memory with the FREE slot freed last; slots
 * FILLING, READY or HELD keep theirs; without it nothing moves. The batch stays in its slot. */
static int test_hot_memory(void)
{
    stk__ring r;
    stk__devcopy dc;
    if (make_ring_n(&r, &dc, 3))
        return 1;
    uint8_t *m[3] = {r.slots[0].mem, r.slots[1].mem, r.slots[2].mem};
    r.reuse_hot = true;
    pthread_mutex_lock(&r.mu);
    stk__slot *s0 = open_hot(&r, 0), *s1 = open_hot(&r, 1); /* nothing freed yet */
    T_CHECK(s0 == &r.slots[0] && s0->mem == m[0] && s1 == &r.slots[1] && s1->mem == m[1]);
    consume(&r, s0);
    consume(&r, s1);                 /* m[1] freed last, then m[0] */
    stk__slot_open_locked(s1, 4, 1); /* ... but slot 1 is filling again: its memory is in use */
    stk__slot *s2 = open_hot(&r, 2);
    T_CHECK(s2 == &r.slots[2] && s2->mem == m[0] && s2->handle.dv.mem == m[0]);
    T_CHECK(s0->mem == m[2] && s0->handle.dv.mem == m[2] && s1->mem == m[1]);
    T_EQ(s2->seq, 2);
    T_EQ(s2->state, STK__SLOT_FILLING);
    consume(&r, s2); /* the slot opened next was itself freed last: it keeps its memory */
    T_CHECK(open_hot(&r, 5) == s2 && s2->mem == m[0]);
    r.reuse_hot = false; /* off: an opened slot keeps its memory */
    consume(&r, s1);
    T_CHECK(open_hot(&r, 6) == s0 && s0->mem == m[2]);
    bool last = stk__ring_unref_locked(&r);
    pthread_mutex_unlock(&r.mu);
    T_CHECK(last);
    r.destroy(&r, r.destroy_arg); /* every buffer freed once (asan checks) */
    return 0;
}

/* stk__ring_fresh_wait_locked: wait only for a slot opened in memory never used, with hot reuse
 * on, budget left, other memory in use, and the consumer not waiting for that very batch; the used
 * flag travels with the memory. */
static int test_fresh_wait(void)
{
    stk__ring r;
    stk__devcopy dc;
    if (make_ring_n(&r, &dc, 3))
        return 1;
    uint8_t *m0 = r.slots[0].mem, *m1 = r.slots[1].mem;
    r.reuse_hot = true;
    r.fresh_budget_ns = 1000;
    pthread_mutex_lock(&r.mu);
    stk__slot *s0 = &r.slots[0], *s1 = &r.slots[1];
    T_CHECK(!stk__ring_fresh_wait_locked(&r, s0, false)); /* nothing in use: nothing to wait for */
    T_CHECK(open_hot(&r, 0) == s0 && s0->used && !s1->used);
    stk__ring_take_hot_locked(&r, s1); /* nothing freed: s1 keeps its fresh memory */
    T_CHECK(s1->mem == m1 && !s1->used);
    T_CHECK(stk__ring_fresh_wait_locked(&r, s1, false)); /* batch 0 fills used memory */
    T_CHECK(!stk__ring_fresh_wait_locked(&r, s1, true)); /* the consumer waits for s1's batch */
    r.fresh_budget_ns = 0;
    T_CHECK(!stk__ring_fresh_wait_locked(&r, s1, false)); /* budget spent */
    r.fresh_budget_ns = 1000;
    r.reuse_hot = false;
    T_CHECK(!stk__ring_fresh_wait_locked(&r, s1, false)); /* pinned or device rings never wait */
    r.reuse_hot = true;
    s0->state = STK__SLOT_READY;
    T_CHECK(stk__ring_fresh_wait_locked(&r, s1, false)); /* READY and HELD count as in use */
    stk__slot_hold_locked(&r, s0);
    T_CHECK(stk__ring_fresh_wait_locked(&r, s1, false));
    pthread_mutex_unlock(&r.mu);
    stk_batch_release(&s0->handle);
    pthread_mutex_lock(&r.mu);
    /* Released: s1 takes m0, used, and has no reason to wait; the fresh m1 moved to slot 0. */
    stk__ring_take_hot_locked(&r, s1);
    T_CHECK(s1->mem == m0 && s1->used && s0->mem == m1 && !s0->used);
    T_CHECK(!stk__ring_fresh_wait_locked(&r, s1, false));
    /* A reset frees every slot not held; the used memory (s1's) stays the one freed last, so
     * the next batch opened, in slot 2, takes it rather than fresh memory. */
    stk__ring_drop_locked(&r);
    stk__slot *s2 = &r.slots[2];
    stk__ring_take_hot_locked(&r, s2);
    T_CHECK(s2->mem == m0 && s2->used && !stk__ring_fresh_wait_locked(&r, s2, false));
    bool last = stk__ring_unref_locked(&r);
    pthread_mutex_unlock(&r.mu);
    T_CHECK(last);
    r.destroy(&r, r.destroy_arg);
    return 0;
}

/* A ring of n bare slots of `size` bytes (no layout: only the memory is looked at). */
static int bare_ring(stk__ring *r, stk__devcopy *dc, uint32_t n, size_t size, bool want_pinned)
{
    char err[256], why[256] = "";
    memset(r, 0, sizeof(*r));
    memset(dc, 0, sizeof(*dc));
    stk__ring_init(r);
    T_OK(
        stk__ring_alloc(r, n, size, want_pinned, 0, false, dc, why, sizeof(why), err, sizeof(err)));
    T_CHECK(!r->pinned); /* no CUDA here: pinned slots fall back to pageable ones */
    return 0;
}

/* Memory kept across rings: the used slots of 2 MiB or more of a ring freed go to the next ring
 * with slots of that size, marked used (no first touch, no wait for them); a ring of another
 * large size frees them; small, never-written and pinned-wanting rings neither take nor keep. */
static int test_kept_memory(void)
{
    const size_t big = (size_t)3 << 20, other = (size_t)4 << 20, small = 64 << 10;
    stk__ring r;
    stk__devcopy dc;
    stk__slot_kept_trim();
    T_EQ(stk__slot_kept_bytes(), 0);
    if (bare_ring(&r, &dc, 3, big, false))
        return 1;
    for (uint32_t i = 0; i < 3; i++)
        T_CHECK(!r.slots[i].used);
    uint8_t *m0 = r.slots[0].mem, *m2 = r.slots[2].mem;
    memset(m0, 1, big);
    memset(m2, 2, big);
    r.slots[0].used = r.slots[2].used = true; /* slot 1's memory never held a batch */
    stk__ring_free(&r);
    T_EQ(stk__slot_kept_bytes(), 2 * big);
    /* A ring of small slots leaves them, and keeps none of its own. */
    if (bare_ring(&r, &dc, 2, small, false))
        return 1;
    r.slots[0].used = true;
    stk__ring_free(&r);
    T_EQ(stk__slot_kept_bytes(), 2 * big);
    /* A ring wanting pinned slots takes none (its memory is the CUDA path's). */
    if (bare_ring(&r, &dc, 2, big, true))
        return 1;
    T_CHECK(r.slots[0].mem != m0 && r.slots[0].mem != m2 && !r.slots[0].used);
    stk__ring_free(&r);              /* never used: freed, not kept */
    T_EQ(stk__slot_kept_bytes(), 0); /* it allocated large memory: the kept blocks are freed */
    /* Again, then a ring of the same size takes both, used, and allocates its third slot. */
    if (bare_ring(&r, &dc, 2, big, false))
        return 1;
    m0 = r.slots[0].mem;
    uint8_t *m1 = r.slots[1].mem;
    r.slots[0].used = r.slots[1].used = true;
    stk__ring_free(&r);
    T_EQ(stk__slot_kept_bytes(), 2 * big);
    if (bare_ring(&r, &dc, 3, big, false))
        return 1;
    T_CHECK((r.slots[0].mem == m0 && r.slots[1].mem == m1) ||
            (r.slots[0].mem == m1 && r.slots[1].mem == m0));
    T_CHECK(r.slots[0].used && r.slots[1].used && !r.slots[2].used);
    T_EQ(r.n_kept, 2);
    T_EQ(stk__slot_kept_bytes(), 0);
    /* With nothing freed yet, a slot opened in fresh memory takes a FREE slot's used memory. */
    r.reuse_hot = true;
    r.fresh_budget_ns = 1000;
    pthread_mutex_lock(&r.mu);
    r.slots[1].state = STK__SLOT_FILLING; /* in use */
    uint8_t *fresh = r.slots[2].mem, *warm = r.slots[0].mem;
    stk__ring_take_hot_locked(&r, &r.slots[2]);
    T_CHECK(r.slots[2].mem == warm && r.slots[2].used && r.slots[0].mem == fresh);
    T_CHECK(!r.slots[0].used && !stk__ring_fresh_wait_locked(&r, &r.slots[2], false));
    r.slots[1].state = STK__SLOT_FREE;
    pthread_mutex_unlock(&r.mu);
    stk__ring_free(&r); /* slots 1 and 2 hold used memory: kept; slot 0's fresh one is freed */
    T_EQ(stk__slot_kept_bytes(), 2 * big);
    /* A ring of another large size takes none and frees them. */
    if (bare_ring(&r, &dc, 1, other, false))
        return 1;
    T_CHECK(!r.slots[0].used);
    T_EQ(stk__slot_kept_bytes(), 0);
    stk__ring_free(&r);
    return 0;
}

T_MAIN(T_CASE(test_tickets), T_CASE(test_hold_and_release), T_CASE(test_hot_memory),
       T_CASE(test_fresh_wait), T_CASE(test_kept_memory))
