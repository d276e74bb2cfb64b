/*
 * stk_batch.c: the batch a consumer holds (struct stk_batch, stk_ring.h): every public stk_batch_*
 * function. The host side is a slot of the ring; the device side (stk_batch_device_*,
 * stk_batch_release_after) calls down into src/cuda/stk_devcopy.c with the batch's
 * stk__devbatch. Releasing goes down into cuda (the release recorded on the consumer's streams)
 * and then back to the ring, never from cuda up.
 */
#include "batch/stk_ring.h"

#include <string.h>

uint32_t stk_batch_n_samples(const stk_batch *b)
{
    return b->r->slots[b->slot].count;
}

uint64_t stk_batch_epoch(const stk_batch *b)
{
    return b->r->slots[b->slot].epoch;
}

uint64_t stk_batch_number(const stk_batch *b)
{
    return b->r->slots[b->slot].number;
}

size_t stk_batch_n_tensors(const stk_batch *b)
{
    return b->r->lay.n_tensors;
}

stk_status stk_batch_tensor(const stk_batch *b, size_t i, stk_tensor *out)
{
    const stk__ring *r = b->r;
    if (i >= r->view.n_tensors)
        return STK_EINVAL;
    const stk__slot *s = &r->slots[b->slot];
    stk_tensor full;
    stk__layout_tensor(&r->view, i, s->mem, s->count, &full);
    return stk__out_store(out, &full, sizeof(full)) ? STK_OK : STK_EINVAL; /* the caller's size */
}

const int64_t *stk_batch_indices(const stk_batch *b)
{
    const stk__ring *r = b->r;
    const stk__slot *s = &r->slots[b->slot];
    return (const int64_t *)(s->mem + r->lay.t[r->lay.n_tensors - 1].offset);
}

void stk_batch_release(stk_batch *b)
{
    if (!b)
        return;
    stk__ring *r = b->r;
    if (stk__ring_forked(r))
        return;
    stk__slot *s = &r->slots[b->slot];
    stk__devcopy_release(&b->dv); /* the next copy into the buffer: after the consumer's work */
    pthread_mutex_lock(&r->mu);
    stk__slot_release_locked(r, s);
    r->held--;
    pthread_cond_broadcast(&r->cv_work);
    bool last = stk__ring_unref_locked(r);
    pthread_mutex_unlock(&r->mu);
    if (last)
        r->destroy(r, r->destroy_arg);
}

/* ---- the device side ---- */

int32_t stk_batch_device(const stk_batch *b)
{
    const stk__devcopy *dc = b->dv.dc;
    return dc->dev ? dc->device : -1;
}

stk_status stk_batch_device_tensor(const stk_batch *b, size_t i, stk_tensor *dst)
{
    if (!b->dv.dc->dev)
        return STK_ENOTSUP;
    stk_tensor full;
    stk_tensor_init(&full);
    stk_status rc = stk_batch_tensor(b, i, &full); /* the host view: same offsets on the device */
    if (rc < 0)
        return rc;
    stk__devcopy_view(&b->dv, i, &full);
    return stk__out_store(dst, &full, sizeof(full)) ? STK_OK : STK_EINVAL; /* the caller's size */
}

stk_status stk_batch_device_wait(stk_batch *b, void *stream)
{
    if (!b->dv.dc->dev)
        return STK_ENOTSUP;
    return stk__devcopy_wait(&b->dv, stream);
}

stk_status stk_batch_device_sync(stk_batch *b)
{
    if (!b->dv.dc->dev)
        return STK_ENOTSUP;
    return stk__devcopy_sync(&b->dv);
}

stk_status stk_batch_device_use(stk_batch *b, void *stream)
{
    if (!b->dv.dc->dev)
        return stk__set_last_error(STK_ENOTSUP, "the batch is not on a device");
    return stk__devcopy_use(&b->dv, stream);
}

stk_status stk_batch_release_after(stk_batch *b, void *stream)
{
    if (!b)
        return STK_OK;
    stk_status rc = stk__devcopy_release_after(&b->dv, stream);
    stk_batch_release(b);
    return rc;
}
