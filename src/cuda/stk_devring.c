/*
 * stk_devring.c: a loader's device side: one device buffer per ring slot, the loader's own
 * stream, and per slot these events:
 *
 *   t0, copied  timing events around the slot's host-to-device copy;
 *   done        the copy (and the finishing kernel) completed: the consumer's stream waits on
 *               it (stk_batch_device_wait), and the host slot is refilled only after it
 *               (stk__devring_drain);
 *   released[]  recorded by the consumer when it releases the batch, one on each stream that
 *               reads it (the stream it waited on or released on, and those it declared with
 *               stk_batch_device_use): the next copy into this slot's device buffer is queued
 *               behind all of them (cuStreamWaitEvent), so device memory is never overwritten
 *               while the consumer's work on any of those streams still reads it, and no host
 *               thread waits for that. They are created with the ring, STK__RELEASE_MAX per
 *               slot, so releasing never allocates.
 *
 * Slot exclusivity comes from the loader's slot states (FILLING -> issue, HELD -> wait, sync,
 * release, FREE -> drain), whose transitions happen under the loader's mutex; that mutex also
 * orders the plain per-slot flags below between threads. `mu` here only keeps each slot's
 * sequence of stream operations contiguous, so its timing events measure that slot's copy.
 *
 * Times: the reference event `ref` is recorded and waited for at create, when the loader's clock
 * is read, so event times convert to that clock (for the trace; durations come from
 * cuEventElapsedTime between the slot's own events, which is precise).
 */
#include "cuda/stk_cuda.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct dslot {
    CUdeviceptr buf;
    CUevent t0, copied, done;
    CUevent released[STK__RELEASE_MAX];
    uint32_t n_released; /* released[0, n) were recorded by the consumer; the next copy waits */
    bool pending;        /* a copy was issued and nobody has seen it complete yet */
    bool finished;       /* the last copy ran the finishing kernel */
} dslot;

struct stk__devring {
    stk__cudev dev; /* a copy of the loader's handle (the loader retains the context) */
    const stk__cuda_api *cu;
    CUstream stream;
    CUmodule mod;
    CUfunction fn; /* the finishing kernel, or NULL */
    CUevent ref;
    uint64_t ref_ns;
    pthread_mutex_t mu;
    uint32_t n;
    size_t size;
    dslot *s;
};

#define CU_TRY(call, args)                                                                         \
    do {                                                                                           \
        CUresult r_ = cu->call args;                                                               \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            rc = stk__cuda_error(err, err_size, STK_EIO, #call, r_);                               \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* Compile the finishing kernel for the device and load it; on failure say why. */
static stk_status load_kernel(stk__devring *r, char *err, size_t err_size)
{
    const stk__cuda_api *cu = r->cu;
    stk_status rc = STK_OK;
    char arch[32], first[STK_ERRMSG_SIZE] = "";
    char *ptx = NULL;
    snprintf(arch, sizeof(arch), "compute_%d%d", r->dev.cc_major, r->dev.cc_minor);
    rc = stk__finish_ptx(arch, &ptx, first, sizeof(first));
    if (rc < 0 && rc != STK_ENOMEM) /* an NVRTC older than the device: PTX for a common arch */
        rc = stk__finish_ptx("compute_75", &ptx, err, err_size);
    if (rc < 0) {
        if (first[0])
            stk__set_error(err, err_size, rc, "%s", first);
        return rc;
    }
    CUresult cr = cu->cuModuleLoadData(&r->mod, ptx);
    stk__free(ptx);
    if (cr != CUDA_SUCCESS) {
        r->mod = NULL;
        char why[STK_ERRMSG_SIZE];
        stk__cuda_error(why, sizeof(why), STK_ENOTSUP, "cuModuleLoadData", cr);
        int version = 0;
        cu->cuDriverGetVersion(&version);
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "%s: the driver (CUDA %d.%d) cannot load PTX from this NVRTC; set "
                              "STOKER_NVRTC to a libnvrtc no newer than the driver",
                              why, version / 1000, version % 1000 / 10);
    }
    CU_TRY(cuModuleGetFunction, (&r->fn, r->mod, "stk_finish"));
    return STK_OK;
fail:
    r->fn = NULL;
    return rc;
}

stk_status stk__devring_create(const stk__cudev *d, uint32_t n_slots, size_t size,
                               size_t finish_size, stk__devring **out, char *finish_why,
                               size_t finish_why_size, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const stk__cuda_api *cu = d->cu;
    *out = NULL;
    stk__devring *r = stk__calloc(1, sizeof(*r));
    if (!r)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the device ring");
    r->dev = *d;
    r->cu = cu;
    r->n = n_slots;
    r->size = size;
    pthread_mutex_init(&r->mu, NULL);
    r->s = stk__calloc(n_slots, sizeof(dslot));
    if (!r->s) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory for the device ring");
        goto fail;
    }
    CU_TRY(cuStreamCreate, (&r->stream, CU_STREAM_NON_BLOCKING));
    /* The finishing output region is there in both cases: the kernel writes it, or the CPU
     * fallback's output is copied into it. */
    if (__builtin_add_overflow(size, finish_size, &size)) {
        rc = stk__set_error(err, err_size, STK_ELIMIT, "device buffer size overflows");
        goto fail;
    }
    r->size = size;
    if (finish_size && load_kernel(r, finish_why, finish_why_size) < 0)
        r->fn = NULL;
    for (uint32_t i = 0; i < n_slots; i++) {
        dslot *s = &r->s[i];
        CUresult cr = cu->cuMemAlloc(&s->buf, size ? size : 1);
        if (cr != CUDA_SUCCESS) {
            s->buf = 0;
            char why[STK_ERRMSG_SIZE];
            stk__cuda_error(why, sizeof(why), STK_ENOMEM, "cuMemAlloc", cr);
            rc =
                stk__set_error(err, err_size, cr == CUDA_ERROR_OUT_OF_MEMORY ? STK_ENOMEM : STK_EIO,
                               "device buffer %u of %u (%zu bytes) on device %d: %s", i + 1,
                               n_slots, size, d->ordinal, why);
            goto fail;
        }
        CU_TRY(cuEventCreate, (&s->t0, 0));
        CU_TRY(cuEventCreate, (&s->copied, 0));
        CU_TRY(cuEventCreate, (&s->done, CU_EVENT_BLOCKING_SYNC));
        for (int k = 0; k < STK__RELEASE_MAX; k++)
            CU_TRY(cuEventCreate, (&s->released[k], CU_EVENT_DISABLE_TIMING));
    }
    CU_TRY(cuEventCreate, (&r->ref, CU_EVENT_BLOCKING_SYNC));
    CU_TRY(cuEventRecord, (r->ref, r->stream));
    CU_TRY(cuEventSynchronize, (r->ref));
    r->ref_ns = stk__now_ns();
    *out = r;
    return STK_OK;
fail:
    stk__devring_destroy(r);
    return rc;
}

void stk__devring_destroy(stk__devring *r)
{
    if (!r)
        return;
    const stk__cuda_api *cu = r->cu;
    if (r->stream)
        cu->cuStreamSynchronize(r->stream);
    for (uint32_t i = 0; r->s && i < r->n; i++) {
        dslot *s = &r->s[i];
        for (uint32_t k = 0; k < s->n_released; k++) /* the consumer's last work on the buffer */
            cu->cuEventSynchronize(s->released[k]);
        if (s->buf)
            cu->cuMemFree(s->buf);
        CUevent ev[3] = {s->t0, s->copied, s->done};
        for (int k = 0; k < 3; k++)
            if (ev[k])
                cu->cuEventDestroy(ev[k]);
        for (int k = 0; k < STK__RELEASE_MAX; k++)
            if (s->released[k])
                cu->cuEventDestroy(s->released[k]);
    }
    if (r->ref)
        cu->cuEventDestroy(r->ref);
    if (r->mod)
        cu->cuModuleUnload(r->mod);
    if (r->stream)
        cu->cuStreamDestroy(r->stream);
    pthread_mutex_destroy(&r->mu);
    stk__free(r->s);
    stk__free(r);
}

bool stk__devring_can_finish(const stk__devring *r)
{
    return r->fn != NULL;
}

CUdeviceptr stk__devring_base(const stk__devring *r, uint32_t slot)
{
    return r->s[slot].buf;
}

stk_status stk__devring_thread_init(const stk__devring *r, char *err, size_t err_size)
{
    CUresult cr = r->cu->cuCtxSetCurrent(r->dev.ctx);
    if (cr != CUDA_SUCCESS)
        return stk__cuda_error(err, err_size, STK_EIO, "cuCtxSetCurrent", cr);
    return STK_OK;
}

stk_status stk__devring_issue(stk__devring *r, uint32_t slot, const uint8_t *host,
                              const stk__range *ranges, size_t n_ranges, const stk__fin_args *fin,
                              char *err, size_t err_size)
{
    const stk__cuda_api *cu = r->cu;
    stk_status rc = STK_OK;
    dslot *s = &r->s[slot];
    pthread_mutex_lock(&r->mu);
    /* The consumer's work on this buffer's previous batch, on every stream that read it, comes
     * first (on the device). */
    for (uint32_t k = 0; k < s->n_released; k++)
        CU_TRY(cuStreamWaitEvent, (r->stream, s->released[k], 0));
    s->n_released = 0;
    s->pending = true; /* from here on the slot may be read by queued work: drain before reuse */
    CU_TRY(cuEventRecord, (s->t0, r->stream));
    for (size_t i = 0; i < n_ranges; i++)
        CU_TRY(cuMemcpyHtoDAsync,
               (s->buf + ranges[i].offset, host + ranges[i].offset, ranges[i].size, r->stream));
    CU_TRY(cuEventRecord, (s->copied, r->stream));
    s->finished = false;
    if (fin) {
        stk__fin_args a = *fin;
        void *params[] = {&a};
        uint32_t total = a.n * a.h * a.w, block = 256;
        uint32_t grid = STK_MIN((total + block - 1) / block, 65535u);
        CU_TRY(cuLaunchKernel,
               (r->fn, grid ? grid : 1, 1, 1, block, 1, 1, 0, r->stream, params, NULL));
        s->finished = true;
    }
    CU_TRY(cuEventRecord, (s->done, r->stream));
fail:
    if (rc <
        0) /* mark what was queued, so a drain waits for it (best effort on a failing device) */
        cu->cuEventRecord(s->done, r->stream);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

bool stk__devring_pending(const stk__devring *r, uint32_t slot)
{
    return r->s[slot].pending;
}

/* Event e's time on the loader's clock (ref is complete, e is complete). */
static uint64_t event_ns(const stk__devring *r, CUevent e)
{
    float ms = 0;
    if (r->cu->cuEventElapsedTime(&ms, r->ref, e) != CUDA_SUCCESS || ms < 0)
        return 0;
    return r->ref_ns + (uint64_t)((double)ms * 1e6);
}

stk_status stk__devring_drain(stk__devring *r, uint32_t slot, stk__copytimes *times, char *err,
                              size_t err_size)
{
    const stk__cuda_api *cu = r->cu;
    stk_status rc = STK_OK;
    dslot *s = &r->s[slot];
    memset(times, 0, sizeof(*times));
    if (!s->pending)
        return STK_OK;
    CU_TRY(cuEventSynchronize, (s->done));
    s->pending = false;
    float copy_ms = 0, done_ms = 0;
    if (cu->cuEventElapsedTime(&copy_ms, s->t0, s->copied) == CUDA_SUCCESS &&
        cu->cuEventElapsedTime(&done_ms, s->copied, s->done) == CUDA_SUCCESS) {
        times->t0 = event_ns(r, s->t0);
        times->copied = times->t0 + (uint64_t)((double)copy_ms * 1e6);
        times->done = times->copied + (uint64_t)((double)done_ms * 1e6);
        times->valid = times->t0 != 0;
    }
    return STK_OK;
fail:
    return rc;
}

/* Run `call` with the device context pushed on the calling (consumer) thread. */
static stk_status with_ctx(stk__devring *r, CUresult (*call)(stk__devring *, dslot *, void *),
                           uint32_t slot, void *stream)
{
    if (r->cu->cuCtxPushCurrent(r->dev.ctx) != CUDA_SUCCESS)
        return STK_EIO;
    CUresult cr = call(r, &r->s[slot], stream);
    stk__cudev_pop(&r->dev);
    return cr == CUDA_SUCCESS ? STK_OK : STK_EIO;
}

static CUresult do_wait(stk__devring *r, dslot *s, void *stream)
{
    return r->cu->cuStreamWaitEvent((CUstream)stream, s->done, 0);
}

static CUresult do_sync(stk__devring *r, dslot *s, void *stream)
{
    (void)stream;
    return r->cu->cuEventSynchronize(s->done);
}

/* The streams of a release. */
typedef struct streams {
    void *const *v;
    size_t n;
} streams;

/* One release event on each stream; those recorded are the ones the next copy waits for. */
static CUresult do_release(stk__devring *r, dslot *s, void *arg)
{
    const streams *st = arg;
    CUresult first = CUDA_SUCCESS;
    s->n_released = 0;
    for (size_t i = 0; i < st->n && i < STK__RELEASE_MAX; i++) {
        CUresult cr = r->cu->cuEventRecord(s->released[s->n_released], (CUstream)st->v[i]);
        if (cr == CUDA_SUCCESS)
            s->n_released++;
        else if (first == CUDA_SUCCESS)
            first = cr;
    }
    return first;
}

stk_status stk__devring_wait(stk__devring *r, uint32_t slot, void *stream)
{
    return with_ctx(r, do_wait, slot, stream);
}

stk_status stk__devring_sync(stk__devring *r, uint32_t slot)
{
    return with_ctx(r, do_sync, slot, NULL);
}

stk_status stk__devring_release_on(stk__devring *r, uint32_t slot, void *const *v, size_t n)
{
    streams st = {v, n};
    return with_ctx(r, do_release, slot, &st);
}
