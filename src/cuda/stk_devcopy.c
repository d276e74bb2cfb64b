/*
 * stk_devcopy.c: device copies of a loader's batches (stk_devcopy.h): a completed batch's byte
 * ranges are merged and queued on the loader's stream with the finishing kernel behind them; a
 * slot is refilled only once its copy completed (drain); a held batch's consumer streams are
 * remembered so that its release is recorded on each of them and the next copy into the buffer
 * waits for their work on the device.
 *
 * Everything here works on a batch's stk__devbatch and knows neither the ring nor the stk_batch
 * object above it (src/batch/stk_batch.c calls down into these for stk_batch_device_*).
 */
#include "cuda/stk_devcopy.h"

#include <inttypes.h>
#include <string.h>

/* Whether we run in a child forked after the loader was created: it has none of the loader's
 * device state and must not touch it. */
static bool forked(const stk__devcopy *dc)
{
    return stk__pid() != dc->pid;
}

/* Sort ranges by offset and merge those less than 4 KiB apart (one DMA beats two). */
static size_t ranges_merge(stk__range *r, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && r[j - 1].offset > r[j].offset; j--) {
            stk__range tmp = r[j];
            r[j] = r[j - 1];
            r[j - 1] = tmp;
        }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].offset <= r[m - 1].offset + r[m - 1].size + 4096) {
            size_t end = STK_MAX(r[m - 1].offset + r[m - 1].size, r[i].offset + r[i].size);
            r[m - 1].size = end - r[m - 1].offset;
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

stk_status stk__devcopy_issue(stk__devcopy *dc, stk__devbatch *b, uint32_t count, stk__range *r,
                              size_t n, uint64_t epoch, uint64_t number, char *err, size_t err_size)
{
    if (dc->finish == STK_FINISH_DEVICE && dc->flags_offset != SIZE_MAX)
        r[n++] = (stk__range){dc->flags_offset, count};
    n = ranges_merge(r, n);
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += r[i].size;
    stk__fin_args a, *fin = NULL;
    if (dc->finish == STK_FINISH_DEVICE) {
        CUdeviceptr base = stk__devring_base(dc->dev, b->slot);
        a = dc->fin;
        a.n = count;
        a.in = base + dc->fin_in_offset;
        a.out = base + dc->fin_dev_offset;
        a.flags = dc->flags_offset != SIZE_MAX ? base + dc->flags_offset : 0;
        fin = &a;
    }
    char why[STK_ERRMSG_SIZE];
    stk_status rc = stk__devring_issue(dc->dev, b->slot, b->mem, r, n, fin, why, sizeof(why));
    if (rc < 0)
        return stk__set_error(err, err_size, rc,
                              "device %d copy of epoch %" PRIu64 " batch %" PRIu64 ": %s",
                              (int)dc->device, epoch, number, why);
    b->ds.copy_bytes = bytes;
    atomic_fetch_add_explicit(&dc->st_copies, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&dc->st_h2d, bytes, memory_order_relaxed);
    return STK_OK;
}

stk_status stk__devcopy_drain(stk__devcopy *dc, stk__devbatch *b, stk__copytimes *ct, char *err,
                              size_t err_size)
{
    uint64_t bytes = b->ds.copy_bytes;
    stk_status rc = stk__devring_drain(dc->dev, b->slot, ct, err, err_size);
    if (rc == STK_OK && ct->valid) {
        atomic_fetch_add_explicit(&dc->st_copy_ns, ct->copied - ct->t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&dc->st_dfinish_ns, ct->done - ct->copied, memory_order_relaxed);
        atomic_fetch_add_explicit(&dc->st_copied, bytes, memory_order_relaxed);
    }
    return rc;
}

/* Record the release of held batch b on `first` (when `has_first`) and on every stream of
 * stk_batch_device_use, each once: the next copy into its device buffer waits for them all. */
static stk_status release_on(stk__devbatch *b, bool has_first, void *first)
{
    void *v[STK__RELEASE_MAX];
    size_t n = 0;
    if (has_first)
        v[n++] = first;
    for (uint32_t i = 0; i < b->ds.n_use; i++)
        if (!has_first || b->ds.use[i] != first)
            v[n++] = b->ds.use[i];
    stk_status rc = stk__devring_release_on(b->dc->dev, b->slot, v, n);
    b->ds.waited = false;
    b->ds.n_use = 0;
    return rc;
}

void stk__devcopy_release(stk__devbatch *b)
{
    if (b->dc->dev && (b->ds.waited || b->ds.n_use))
        release_on(b, b->ds.waited, b->ds.wait_stream);
    b->ds.waited = false;
    b->ds.n_use = 0;
}

/* ---- what stk_batch_device_* do (src/batch/stk_batch.c) ---- */

stk_status stk__devcopy_view(const stk__devbatch *d, size_t i, stk_tensor *out)
{
    const stk__devcopy *dc = d->dc;
    CUdeviceptr base = stk__devring_base(dc->dev, d->slot);
    if (dc->finish == STK_FINISH_DEVICE && (int)i == dc->fin_t) {
        /* The kernel's output, in the device buffer past the slot's bytes. */
        int64_t shape[3];
        stk__finish_shape(dc, shape);
        out->dtype = (stk_dtype)dc->fin.dtype;
        out->ndim = 4;
        memcpy(&out->shape[1], shape, sizeof(shape));
        out->data = (void *)(uintptr_t)(base + dc->fin_dev_offset);
        out->size = dc->fin_row * (size_t)out->shape[0];
    } else {
        /* lengths of a bytes field stay on the host */
        out->data = (void *)(uintptr_t)(base + (size_t)((const uint8_t *)out->data - d->mem));
    }
    return STK_OK;
}

stk_status stk__devcopy_wait(stk__devbatch *d, void *stream)
{
    stk_status rc = stk__devring_wait(d->dc->dev, d->slot, stream);
    if (rc == STK_OK) {
        d->ds.waited = true;
        d->ds.wait_stream = stream;
    }
    return rc;
}

stk_status stk__devcopy_sync(stk__devbatch *d)
{
    return stk__devring_sync(d->dc->dev, d->slot);
}

stk_status stk__devcopy_use(stk__devbatch *d, void *stream)
{
    stk__devslot *s = &d->ds;
    if (forked(d->dc)) /* the child cannot use the device; its releases do nothing */
        return STK_OK;
    for (uint32_t i = 0; i < s->n_use; i++)
        if (s->use[i] == stream)
            return STK_OK; /* recorded once */
    /* The streams reading the batch: these, and the one it waited on (counted once). */
    uint32_t n = s->n_use;
    bool is_wait = s->waited && s->wait_stream == stream;
    for (uint32_t i = 0; s->waited && i < s->n_use; i++)
        if (s->use[i] == s->wait_stream) {
            n--;
            break;
        }
    n += s->waited;
    if (is_wait) {
        /* Listed too, so that stk_batch_release_after(b, other) still records on it (when the
         * list is full, the device_wait after the uses put it over the bound: the plain release
         * still records on it). */
        if (s->n_use < STK__USE_MAX)
            s->use[s->n_use++] = stream;
        return STK_OK;
    }
    if (n >= STK__USE_MAX)
        return stk__set_last_error(STK_ELIMIT,
                                   "a batch can be read on at most %d streams, counting the one "
                                   "stk_batch_device_wait made wait, and this one already is on "
                                   "%u: make one of them wait for this stream's work instead "
                                   "(cuStreamWaitEvent)",
                                   STK__USE_MAX, n);
    s->use[s->n_use++] = stream;
    return STK_OK;
}

stk_status stk__devcopy_release_after(stk__devbatch *d, void *stream)
{
    if (!d->dc->dev || forked(d->dc))
        return STK_OK;
    return release_on(d, true, stream);
}
