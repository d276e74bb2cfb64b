/*
 * test_ring.c: the batch ring on its own (src/batch/stk_ring.c): a slot's tickets are taken once
 * each and never by a stale batch, the lowest failed sample's error wins, a reset frees every slot
 * but the held ones, the stk_batch accessors show the slot's batch, and the last reference (the
 * owner's or a held batch's) destroys the owner exactly once.
 */
#include "batch/stk_ring.h"
#include "t.h"

static int destroyed; /* calls of on_destroy with the owner given at setup */

static void on_destroy(stk__ring *r, void *arg)
{
    destroyed += arg == (void *)r;
    stk__ring_free(r);
}

/* A ring of two slots of one int64 "label" column (plus "index"), batches of up to 4. */
static int make_ring(stk__ring *r, stk__devcopy *dc)
{
    static const stk_field label = {.name = "label", .kind = STK_FIELD_INT64};
    static const uint64_t max_size = 8;
    char err[256], why[256] = "";
    memset(r, 0, sizeof(*r));
    memset(dc, 0, sizeof(*dc)); /* host only */
    stk__ring_init(r);
    r->destroy = on_destroy;
    r->destroy_arg = r;
    T_OK(stk__layout_init(&r->lay, &label, &max_size, 1, 4, -1, NULL, err, sizeof(err)));
    r->view = r->lay;
    T_OK(stk__ring_alloc(r, 2, r->lay.slot_size, false, 0, dc, why, sizeof(why), err, sizeof(err)));
    T_CHECK(!r->pinned && r->pinned_bytes == 0 && why[0] == '\0');
    return 0;
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
    T_EQ(stk_batch_size(b), 3);
    T_EQ(stk_batch_epoch(b), 2);
    T_EQ(stk_batch_number(b), 9);
    T_EQ(stk_batch_n_tensors(b), 2);
    T_EQ(stk_batch_device(b), -1);
    stk_tensor t;
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

T_MAIN(T_CASE(test_tickets), T_CASE(test_hold_and_release))
