/*
 * stk_devcopy.h: a loader's device side, between its ring and the device ring (stk_devring.c):
 * which bytes of a completed batch are copied, where finishing runs (on the device after the
 * copy, or on the CPU by the workers: stk_finish_cpu.c), and what the consumer's streams did
 * with a batch it holds (for src/batch/stk_batch.c's stk_batch_device_wait/use/release_after). It
 * knows nothing of the ring or the batch object above it: they and the loader call it at the
 * right moments.
 */
#ifndef STK_DEVCOPY_H
#define STK_DEVCOPY_H

#include "cuda/stk_cuda.h"

#include <stdatomic.h>
#include <sys/types.h>

/* Finishing and device copies of one loader. */
typedef struct stk__devcopy {
    pid_t pid;         /* the process that created the loader: a forked child copies nothing */
    stk__devring *dev; /* device buffers, stream, events; NULL = host only */
    int32_t device;
    stk_finish_where finish;
    int fin_t;              /* tensor finished (index in the ring's layout), or -1 */
    stk__fin_args fin;      /* kernel arguments but the per-batch n and addresses */
    float flip;             /* probability of mirroring a sample */
    size_t fin_in_offset;   /* the finished tensor's uint8 input in the slot */
    size_t flags_offset;    /* uint8 flip flag per sample in the slot, or SIZE_MAX */
    size_t fin_host_offset; /* CPU finishing output in the host slot, or SIZE_MAX */
    size_t fin_dev_offset;  /* device finishing output in the device buffer, or SIZE_MAX */
    size_t fin_row;         /* bytes of one finished sample */
    float lut32[3][256];    /* CPU finishing: the kernel's value of each uint8, per channel */
    uint16_t lut16[3][256];
    _Atomic uint64_t st_copies, st_h2d, st_copied, st_copy_ns, st_dfinish_ns;
} stk__devcopy;

/* What the consumer's streams did with a held batch (reset when it is handed out). */
typedef struct stk__devslot {
    bool waited; /* stk_batch_device_wait made wait_stream wait for this batch */
    void *wait_stream;
    void *use[STK__USE_MAX]; /* more streams reading the batch (stk_batch_device_use) */
    uint32_t n_use;
    uint64_t copy_bytes; /* bytes of the slot's last device copy */
} stk__devslot;

/* The device side of a stk_batch (src/batch/stk_ring.h): what the stk_batch_device_* functions
 * hand down to the functions below. Set once when the ring is created. */
typedef struct stk__devbatch {
    stk__devcopy *dc;
    uint32_t slot;
    const uint8_t *mem; /* the slot's host memory */
    stk__devslot ds;
} stk__devbatch;

/* ---- finishing (stk_finish_cpu.c) ---- */

/* Set dc's finishing from the transform's `f` for samples of uint8 [h, w, 3], batches of up to
 * `batch_size`: the kernel arguments, the finished row size and the CPU tables. Placement
 * (dc->finish) is the caller's. STK_ELIMIT when a batch has 2^32 pixels or more (the kernel
 * indexes them with 32 bits). */
stk_status stk__finish_init(stk__devcopy *dc, const stk__finish *f, uint32_t h, uint32_t w,
                            uint32_t batch_size, char *err, size_t err_size);
/* Per-sample shape of the finished output: [3, h, w] or [h, w, 3]. */
void stk__finish_shape(const stk__devcopy *dc, int64_t shape[3]);
/* Whether sample `index` of `epoch` is mirrored: its own random stream beside the transform's. */
bool stk__finish_flip_draw(const stk__devcopy *dc, uint64_t seed, uint64_t epoch, uint64_t index);
/* Finish one sample on the CPU: uint8 [h, w, 3] `in` -> `out` (fin_row bytes), with the kernel's
 * own values. */
void stk__finish_cpu(const stk__devcopy *dc, const uint8_t *in, uint8_t *out, bool flip);

/* ---- copies (stk_devcopy.c) ---- */

/* Queue the copy of a completed batch of `count` samples (the byte ranges of its host tensors;
 * the flip flags are added here) and its finishing on the loader's stream. Slot-exclusive. Errors
 * name the batch (epoch, number). */
stk_status stk__devcopy_issue(stk__devcopy *dc, stk__devbatch *b, uint32_t count, stk__range *r,
                              size_t n, uint64_t epoch, uint64_t number, char *err,
                              size_t err_size);
/* Wait for slot `b`'s last copy so its host memory may be refilled; count its device times
 * (returned in *ct for the trace). */
stk_status stk__devcopy_drain(stk__devcopy *dc, stk__devbatch *b, stk__copytimes *ct, char *err,
                              size_t err_size);
/* A held batch is released: record the release on its streams (the ones it waited on and used)
 * so the next copy into its device buffer waits for them, and forget them. */
void stk__devcopy_release(stk__devbatch *b);

/* ---- a held batch's device side (what src/batch/stk_batch.c's stk_batch_device_* call; the
 * batch is on a device: d->dc->dev set) ---- */

/* Turn `out`, host tensor i of the batch, into its device view (stk_batch_device_tensor). */
stk_status stk__devcopy_view(const stk__devbatch *d, size_t i, stk_tensor *out);
/* Make `stream` wait for the batch's copy and finishing; remembered for the release. */
stk_status stk__devcopy_wait(stk__devbatch *d, void *stream);
/* Block until the batch's copy and finishing are done. */
stk_status stk__devcopy_sync(stk__devbatch *d);
/* The batch is also read on `stream` (STK_ELIMIT past STK__USE_MAX streams, in last_errmsg). */
stk_status stk__devcopy_use(stk__devbatch *d, void *stream);
/* Record the release on `stream` (and the streams used) for the next copy into the buffer;
 * nothing in a forked child. The caller releases the batch itself after. */
stk_status stk__devcopy_release_after(stk__devbatch *d, void *stream);

#endif /* STK_DEVCOPY_H */
