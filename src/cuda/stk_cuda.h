/*
 * stk_cuda.h: CUDA inside libstoker (src/cuda only; the loader sees the types it needs, never
 * cuda.h). The driver and NVRTC are loaded at run time by stk_cuda.c; stk_devring.c holds a
 * loader's device buffers, stream and events.
 */
#ifndef STK_CUDA_H
#define STK_CUDA_H

#include "cuda/stk_cuda_min.h"
#include "cuda/stk_finish.h"
#include "stk_internal.h"

/* ---- the driver (stk_cuda.c) ---- */

/* The driver table: libcuda.so.1 (or env STOKER_LIBCUDA) opened, every symbol resolved and
 * cuInit(0) done, once per process (pthread_once), all or nothing. NULL when unavailable, with
 * the reason in why ("libcuda.so.1: cannot open shared object file: ...", "cuInit:
 * CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"). Never unloaded.
 * Threads: thread-safe. */
const stk__cuda_api *stk__cuda_load(char *why, size_t why_size);

/* cuMemHostAlloc (portable) with the current context; STK_ENOTSUP without a driver, STK_ENOMEM
 * when the driver refuses; the reason in why. Ring slots get it through src/batch/stk_pinned.c. */
stk_status stk__cuda_host_alloc(size_t size, void **p, char *why, size_t why_size);
void stk__cuda_host_free(void *p);
/* cuMemHostRegister (portable) of memory the caller mapped (a shared ring's memfd), with the
 * current context; STK_ENOTSUP / STK_ENOMEM with the reason in why. Undo with
 * stk__cuda_host_unregister before unmapping. */
stk_status stk__cuda_host_register(void *p, size_t size, char *why, size_t why_size);
void stk__cuda_host_unregister(void *p);

/* Write "call: CUDA_ERROR_NAME (description)" into err and return `code`. */
stk_status stk__cuda_error(char *err, size_t err_size, stk_status code, const char *call,
                           CUresult r);

/* A device and its primary context (the one the CUDA runtime, and so PyTorch, uses): device
 * pointers and streams are shared with the consumer. */
typedef struct stk__cudev {
    const stk__cuda_api *cu;
    int ordinal;
    CUdevice dev;
    CUcontext ctx; /* retained primary context; NULL when not open */
    int cc_major, cc_minor;
    char name[96];
} stk__cudev;

/* Load the driver, find device `ordinal` and retain its primary context.
 * @return STK_OK, or STK_ENOTSUP with the reason in err (no driver, no such device). */
stk_status stk__cudev_open(int ordinal, stk__cudev *d, char *err, size_t err_size);
/* Release the primary context. Accepts a never-opened (zeroed) d. */
void stk__cudev_close(stk__cudev *d);
/* Make d's context current on this thread for a while / restore the previous one. */
stk_status stk__cudev_push(const stk__cudev *d, char *err, size_t err_size);
void stk__cudev_pop(const stk__cudev *d);

/* Compile CUDA source `src` (describe it as `what` in errors) to PTX for `arch` with NVRTC:
 * exact IEEE float32 (-fmad=false, -prec-div=true, -ftz=false). As stk__finish_ptx, which is
 * this applied to the finishing kernel. Threads: thread-safe. */
stk_status stk__nvrtc_ptx(const char *src, const char *what, const char *arch, char **ptx,
                          char *err, size_t err_size);

/* ---- a loader's device ring (stk_devring.c) ---- */

/* A byte range of a slot to copy to the device (same offset on both sides). */
typedef struct stk__range {
    size_t offset, size;
} stk__range;

/* Device times of one completed copy, in ns on the loader's clock (stk__now_ns) where known. */
typedef struct stk__copytimes {
    uint64_t t0, copied, done; /* copy start, copy end (= finishing start), finishing end */
    bool valid;
} stk__copytimes;

typedef struct stk__devring stk__devring;

/* Device buffers of size + finish_size bytes for each of n_slots ring slots, the loader's stream
 * and events, and, when `finish_size` > 0, the finishing kernel (compiled with NVRTC for the
 * device). When the kernel cannot be loaded the ring is created anyway, finish_why says why and
 * stk__devring_can_finish is false. The caller has d's context current. */
stk_status stk__devring_create(const stk__cudev *d, uint32_t n_slots, size_t size,
                               size_t finish_size, stk__devring **out, char *finish_why,
                               size_t finish_why_size, char *err, size_t err_size);
/* Wait for everything in flight, free it all. The caller has the context current. Accepts NULL. */
void stk__devring_destroy(stk__devring *r);
bool stk__devring_can_finish(const stk__devring *r);
/* Device address of slot `slot`'s buffer. */
CUdeviceptr stk__devring_base(const stk__devring *r, uint32_t slot);
/* On a loader thread: make the device context current for the thread's life. */
stk_status stk__devring_thread_init(const stk__devring *r, char *err, size_t err_size);

/* Enqueue on the loader's stream: wait for the consumer's release events of the slot's previous
 * batch (those it recorded), copy the ranges from host slot memory `host` to the slot's device
 * buffer, then the finishing kernel when `fin` is not NULL (its in/out/flags are device addresses),
 * and record the slot's completion event. Nothing waits on the host. Slot-exclusive: called by the
 * worker that completed the batch. */
stk_status stk__devring_issue(stk__devring *r, uint32_t slot, const uint8_t *host,
                              const stk__range *ranges, size_t n_ranges, const stk__fin_args *fin,
                              char *err, size_t err_size);
/* Whether the slot has a copy whose completion nobody has observed yet. */
bool stk__devring_pending(const stk__devring *r, uint32_t slot);
/* Block until the slot's last copy (and finishing) completed, so its host memory may be
 * rewritten; report its device times. Slot-exclusive (one drainer). */
stk_status stk__devring_drain(stk__devring *r, uint32_t slot, stk__copytimes *times, char *err,
                              size_t err_size);
/* Streams a batch may be declared read on (stk_batch_device_use), counting the one it waited on,
 * and the release events of a slot: one per such stream, plus the stream stk_batch_release_after
 * names when it is none of them. */
#define STK__USE_MAX 4
#define STK__RELEASE_MAX (STK__USE_MAX + 1)

/* Consumer side (the slot is held): make `stream` wait for the slot's copy; block the host until
 * it is done; record the consumer's release on each of `streams` (n <= STK__RELEASE_MAX, no
 * duplicates): the next copy into this buffer waits for all of them. A stream that refuses the
 * record is skipped (STK_EIO, the others are still recorded). The calls push the device context
 * themselves. */
stk_status stk__devring_wait(stk__devring *r, uint32_t slot, void *stream);
stk_status stk__devring_sync(stk__devring *r, uint32_t slot);
stk_status stk__devring_release_on(stk__devring *r, uint32_t slot, void *const *streams, size_t n);

#endif /* STK_CUDA_H */
