/*
 * fake_cuda.c: a fake CUDA driver (build/tests/libfakecuda.so) so the GPU path is tested where
 * there is no GPU. The tests point STOKER_LIBCUDA at it. It exports every symbol of
 * src/cuda/stk_cuda_min.h's table under the driver's real names (cuMemAlloc_v2, ...), with
 * "device" memory in host memory, and it is deliberately strict and slow where bugs hide:
 *
 *  - Each stream is a thread executing a queue of operations in order. Host-to-device copies
 *    take FAKE_CUDA_DELAY_US (default 300 us) and compare their source before and after: a
 *    pinned source rewritten while its copy is in flight is a violation (the loader refilled a
 *    host slot before its copy finished). A pageable source is staged at enqueue, as the real
 *    driver does.
 *  - Events complete when their stream reaches them; cuStreamWaitEvent blocks the stream until
 *    then. fakecuda_check_async() queues a test-side "consumer kernel" that reads a device buffer
 *    for a while, on any stream: a buffer overwritten meanwhile (a copy not ordered after the
 *    consumer's release event on that stream) is a violation; fakecuda_expect_async() also
 *    compares the buffer with the bytes it should hold (a read not ordered after the copy, or
 *    after an overwrite, is a violation). fakecuda_records() counts the events recorded on a
 *    stream.
 *  - Copies and kernels are bounds-checked against live device allocations; memory and stream
 *    calls without a current context fail with CUDA_ERROR_INVALID_CONTEXT, as the driver's do.
 *  - The kernel "stk_finish" runs the shared per-pixel function (src/cuda/stk_finish_body.h) on
 *    the stream thread with the argument block as launched.
 *
 * Knobs: FAKE_CUDA_DEVICES (default 1; 0 makes cuInit fail with CUDA_ERROR_NO_DEVICE),
 * FAKE_CUDA_DELAY_US, FAKE_CUDA_HOST_LIMIT (bytes of cuMemHostAlloc before it fails with
 * CUDA_ERROR_OUT_OF_MEMORY), FAKE_CUDA_NO_MODULE=1 (cuModuleLoadData refuses the PTX, as an old
 * driver does), FAKE_CUDA_FAIL_COPY=N (the Nth cuMemcpyHtoDAsync fails). All state is guarded by
 * one mutex and one condition variable; data moves outside it, ordered by it (the fake must itself
 * be TSan-clean).
 */
#include "cuda/stk_cuda_min.h"
#include "cuda/stk_finish.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define API __attribute__((visibility("default")))

/* Every driver entry point, under its real symbol name. */
#define FAKE_DECL(name, sym, params) API CUresult fake_##name params __asm__(sym);
STK__CUDA_FUNCS(FAKE_DECL)
#undef FAKE_DECL

/* Test hooks, found with dlsym: the number of violations seen (and the last one's text); queue a
 * "consumer kernel" on `stream` that reads [p, p + size) for delay_us and reports a violation if
 * the buffer changes meanwhile; live allocations and operations run. */
API int fakecuda_violations(char *buf, size_t size);
API CUresult fakecuda_check_async(CUstream stream, CUdeviceptr p, size_t size, unsigned delay_us);
/* As fakecuda_check_async, and the buffer must hold `want` (copied now) when the read starts and
 * ends. */
API CUresult fakecuda_expect_async(CUstream stream, CUdeviceptr p, const void *want, size_t size,
                                   unsigned delay_us);
/* cuEventRecord calls queued on `stream` so far (NULL: the default stream). */
API uint64_t fakecuda_records(CUstream stream);
API void fakecuda_counts(uint64_t *pinned_bytes, uint64_t *device_bytes, uint64_t *copies,
                         uint64_t *kernels);
/* The gate, for tests that must act while an operation is in flight without guessing how long
 * it takes (a loaded machine stretches any sleep): while closed, a pinned copy (its destination
 * written, its source not yet compared) and a consumer check (its first read done, its second
 * not) wait there. fakecuda_gate_waiting() says how many wait: a test closes the gate, queues,
 * waits for that count, acts, then opens it. */
API void fakecuda_gate(int closed);
API int fakecuda_gate_waiting(void);

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

/* ---- allocations ---- */

typedef struct alloc {
    uint8_t *p;
    size_t size;
    bool device;
    bool registered; /* cuMemHostRegister'ed caller memory (not freed here) */
    struct alloc *next;
} alloc;

static alloc *allocs;
static uint64_t pinned_live, device_live, n_copies, n_kernels;
static int violations;
static char violation_msg[512];
static bool gate_closed;
static int gate_waiting;

/* An operation in flight stops here while the gate is closed (see fakecuda_gate). */
static void gate_pass(void)
{
    pthread_mutex_lock(&mu);
    if (gate_closed) {
        gate_waiting++;
        pthread_cond_broadcast(&cv);
        while (gate_closed)
            pthread_cond_wait(&cv, &mu);
        gate_waiting--;
    }
    pthread_mutex_unlock(&mu);
}

static void violation(const char *what, const char *why, unsigned long long bytes)
{
    pthread_mutex_lock(&mu);
    violations++;
    snprintf(violation_msg, sizeof(violation_msg), "%s: %s (%llu bytes)", what, why, bytes);
    pthread_mutex_unlock(&mu);
}

/* The allocation containing [p, p + size) of the given kind (mu held), or NULL. */
static alloc *find_alloc(const void *p, size_t size, bool device)
{
    for (alloc *a = allocs; a; a = a->next)
        if (a->device == device && (const uint8_t *)p >= a->p &&
            (const uint8_t *)p + size <= a->p + a->size)
            return a;
    return NULL;
}

static long env_long(const char *name, long dflt)
{
    const char *e = getenv(name);
    return e && *e ? atol(e) : dflt;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- contexts: one primary context per device, a per-thread stack ---- */

struct CUctx_st {
    int device;
    int refs;
};
static struct CUctx_st ctxs[8];
static _Thread_local CUcontext ctx_stack[16];
static _Thread_local int ctx_depth;

static bool has_ctx(void)
{
    return ctx_depth > 0 && ctx_stack[ctx_depth - 1] != NULL;
}

/* ---- events and streams ---- */

struct CUevent_st {
    unsigned flags;
    uint64_t recorded, completed; /* generations: record n is complete when completed >= n */
    uint64_t t_ns;                /* when the last completed record ran */
};

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_KERNEL, OP_CHECK };

typedef struct op {
    int kind;
    uint8_t *dst;
    const uint8_t *src;
    uint8_t *staged; /* a pageable source, copied at enqueue; OP_CHECK: the expected bytes */
    size_t size;
    CUevent ev;
    uint64_t gen;
    unsigned delay_us;
    stk__fin_args args;
    struct op *next;
} op;

struct CUstream_st {
    pthread_t thread;
    op *head, *tail;
    bool busy, stop;
    uint64_t records; /* cuEventRecord calls queued here */
};

static struct CUstream_st *legacy; /* the NULL stream, created on first use */

static void *stream_main(void *arg);

static CUstream stream_new(void)
{
    CUstream s = calloc(1, sizeof(*s));
    if (s && pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* The stream a handle means: NULL and the legacy/per-thread handles 0x1, 0x2 are the default
 * stream (mu held). */
static CUstream resolve(CUstream s)
{
    if ((uintptr_t)s <= 2) {
        if (!legacy)
            legacy = stream_new();
        return legacy;
    }
    return s;
}

/* Append an operation to a stream (mu held). */
static void enqueue(CUstream s, op *o)
{
    o->next = NULL;
    if (s->tail)
        s->tail->next = o;
    else
        s->head = o;
    s->tail = o;
    pthread_cond_broadcast(&cv);
}

static void sleep_us(unsigned us)
{
    struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
    nanosleep(&ts, NULL);
}

/* Run one operation, outside the lock. */
static void run_op(op *o)
{
    switch (o->kind) {
    case OP_COPY: {
        if (o->staged) { /* pageable: the bytes were taken at enqueue */
            sleep_us(o->delay_us);
            memcpy(o->dst, o->staged, o->size);
            break;
        }
        uint8_t *before = malloc(o->size ? o->size : 1);
        if (!before)
            abort();
        memcpy(before, o->src, o->size);
        sleep_us(o->delay_us / 2);
        memcpy(o->dst, o->src, o->size);
        sleep_us(o->delay_us - o->delay_us / 2);
        gate_pass();
        if (memcmp(before, o->src, o->size) != 0)
            violation("cuMemcpyHtoDAsync", "pinned source rewritten while its copy was in flight",
                      o->size);
        free(before);
        break;
    }
    case OP_KERNEL: {
        sleep_us(o->delay_us);
        uint32_t total = o->args.n * o->args.h * o->args.w;
        for (uint32_t p = 0; p < total; p++)
            stk__fin_pixel(&o->args, p);
        break;
    }
    case OP_CHECK: { /* a consumer kernel reading the buffer for a while */
        uint8_t *seen = malloc(o->size ? o->size : 1);
        if (!seen)
            abort();
        memcpy(seen, o->dst, o->size);
        if (o->staged && memcmp(seen, o->staged, o->size) != 0)
            violation("consumer stream",
                      "device buffer does not hold the batch when the consumer's work starts",
                      o->size);
        sleep_us(o->delay_us);
        gate_pass();
        if (memcmp(o->dst, seen, o->size) != 0)
            violation("consumer stream",
                      "device buffer overwritten while the consumer's work "
                      "read it",
                      o->size);
        free(seen);
        break;
    }
    default:
        break;
    }
}

static void *stream_main(void *arg)
{
    CUstream s = arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        op *o = s->head;
        if (!o) {
            if (s->stop)
                break;
            pthread_cond_wait(&cv, &mu);
            continue;
        }
        if (o->kind == OP_WAIT && o->ev->completed < o->gen) {
            pthread_cond_wait(&cv, &mu);
            continue;
        }
        s->head = o->next;
        if (!s->head)
            s->tail = NULL;
        s->busy = true;
        pthread_mutex_unlock(&mu);
        run_op(o);
        pthread_mutex_lock(&mu);
        if (o->kind == OP_RECORD) {
            if (o->ev->completed < o->gen)
                o->ev->completed = o->gen;
            o->ev->t_ns = now_ns();
        }
        n_copies += o->kind == OP_COPY;
        n_kernels += o->kind == OP_KERNEL;
        s->busy = false;
        free(o->staged);
        free(o);
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* ---- the driver API ---- */

static int n_devices = -1;

CUresult fake_cuInit(unsigned flags)
{
    (void)flags;
    pthread_mutex_lock(&mu);
    if (n_devices < 0)
        n_devices = (int)env_long("FAKE_CUDA_DEVICES", 1);
    int n = n_devices;
    pthread_mutex_unlock(&mu);
    return n > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult fake_cuDriverGetVersion(int *version)
{
    *version = 12040;
    return CUDA_SUCCESS;
}

static const char *err_name(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS:
        return "CUDA_SUCCESS";
    case CUDA_ERROR_INVALID_VALUE:
        return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NO_DEVICE:
        return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_INVALID_DEVICE:
        return "CUDA_ERROR_INVALID_DEVICE";
    case CUDA_ERROR_INVALID_IMAGE:
        return "CUDA_ERROR_INVALID_IMAGE";
    case CUDA_ERROR_INVALID_CONTEXT:
        return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
        return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case CUDA_ERROR_INVALID_HANDLE:
        return "CUDA_ERROR_INVALID_HANDLE";
    case CUDA_ERROR_NOT_FOUND:
        return "CUDA_ERROR_NOT_FOUND";
    case CUDA_ERROR_NOT_READY:
        return "CUDA_ERROR_NOT_READY";
    default:
        return NULL;
    }
}

CUresult fake_cuGetErrorName(CUresult err, const char **name)
{
    *name = err_name(err);
    return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuGetErrorString(CUresult err, const char **text)
{
    if (err == CUDA_ERROR_NO_DEVICE)
        *text = "no CUDA-capable device is detected";
    else
        *text = err_name(err) ? "fake driver error" : NULL;
    return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuDeviceGetCount(int *count)
{
    pthread_mutex_lock(&mu);
    *count = n_devices < 0 ? 0 : n_devices;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGet(CUdevice *dev, int ordinal)
{
    int count;
    fake_cuDeviceGetCount(&count);
    if (ordinal < 0 || ordinal >= count || ordinal >= 8)
        return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    snprintf(name, (size_t)len, "Fake CUDA Device %d", dev);
    return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetAttribute(int *value, int attrib, CUdevice dev)
{
    (void)dev;
    *value = attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;
    return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
    if (dev < 0 || dev >= 8)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    ctxs[dev].device = dev;
    ctxs[dev].refs++;
    pthread_mutex_unlock(&mu);
    *ctx = &ctxs[dev];
    return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (dev < 0 || dev >= 8)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    CUresult r = ctxs[dev].refs > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS)
        ctxs[dev].refs--;
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult fake_cuCtxPushCurrent(CUcontext ctx)
{
    if (ctx_depth >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    ctx_stack[ctx_depth++] = ctx;
    return CUDA_SUCCESS;
}

CUresult fake_cuCtxPopCurrent(CUcontext *ctx)
{
    if (ctx_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *ctx = ctx_stack[--ctx_depth];
    return CUDA_SUCCESS;
}

CUresult fake_cuCtxSetCurrent(CUcontext ctx)
{
    if (ctx_depth == 0)
        ctx_depth = 1;
    ctx_stack[ctx_depth - 1] = ctx;
    return CUDA_SUCCESS;
}

/* Allocate and register host (pinned) or device memory. */
static CUresult do_alloc(void **p, size_t size, bool device)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    long limit = env_long("FAKE_CUDA_HOST_LIMIT", -1);
    pthread_mutex_lock(&mu);
    if (!device && limit >= 0 && pinned_live + size > (uint64_t)limit) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    alloc *a = calloc(1, sizeof(*a));
    void *mem = NULL;
    if (!a || posix_memalign(&mem, 4096, size ? size : 1) != 0) {
        free(a);
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (device) /* fresh device memory holds garbage, not zeros */
        memset(mem, 0xa5, size);
    a->p = mem;
    a->size = size;
    a->device = device;
    a->next = allocs;
    allocs = a;
    *(device ? &device_live : &pinned_live) += size;
    pthread_mutex_unlock(&mu);
    *p = mem;
    return CUDA_SUCCESS;
}

static CUresult do_free(void *p, bool device)
{
    pthread_mutex_lock(&mu);
    for (alloc **pp = &allocs; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p && (*pp)->device == device && !(*pp)->registered) {
            alloc *a = *pp;
            *pp = a->next;
            *(device ? &device_live : &pinned_live) -= a->size;
            pthread_mutex_unlock(&mu);
            free(a->p);
            free(a);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuMemHostAlloc(void **p, size_t size, unsigned flags)
{
    (void)flags;
    return do_alloc(p, size, false);
}

CUresult fake_cuMemFreeHost(void *p)
{
    return do_free(p, false);
}

/* Registered host memory (a shared ring's mapping) counts as pinned, as cuMemHostAlloc's does. */
CUresult fake_cuMemHostRegister(void *p, size_t size, unsigned flags)
{
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    long limit = env_long("FAKE_CUDA_HOST_LIMIT", -1);
    pthread_mutex_lock(&mu);
    if (limit >= 0 && pinned_live + size > (uint64_t)limit) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    alloc *a = calloc(1, sizeof(*a));
    if (!a) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->p = p;
    a->size = size;
    a->registered = true;
    a->next = allocs;
    allocs = a;
    pinned_live += size;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuMemHostUnregister(void *p)
{
    pthread_mutex_lock(&mu);
    for (alloc **pp = &allocs; *pp; pp = &(*pp)->next)
        if ((*pp)->p == p && (*pp)->registered) {
            alloc *a = *pp;
            *pp = a->next;
            pinned_live -= a->size;
            pthread_mutex_unlock(&mu);
            free(a);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuMemAlloc(CUdeviceptr *p, size_t size)
{
    void *mem;
    CUresult r = do_alloc(&mem, size, true);
    *p = r == CUDA_SUCCESS ? (CUdeviceptr)(uintptr_t)mem : 0;
    return r;
}

CUresult fake_cuMemFree(CUdeviceptr p)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    return do_free((void *)(uintptr_t)p, true);
}

CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t size, CUstream stream)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    static long calls;
    pthread_mutex_lock(&mu);
    long call = ++calls;
    pthread_mutex_unlock(&mu);
    if (call == env_long("FAKE_CUDA_FAIL_COPY", 0)) /* a device error on the Nth copy */
        return CUDA_ERROR_INVALID_VALUE;
    op *o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->kind = OP_COPY;
    o->dst = (uint8_t *)(uintptr_t)dst;
    o->src = src;
    o->size = size;
    o->delay_us = (unsigned)env_long("FAKE_CUDA_DELAY_US", 300);
    pthread_mutex_lock(&mu);
    bool in_device = find_alloc(o->dst, size, true) != NULL;
    bool pinned = find_alloc(src, size, false) != NULL;
    pthread_mutex_unlock(&mu);
    if (!in_device) {
        free(o);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!pinned) { /* pageable: staged now, as the driver does */
        o->staged = malloc(size ? size : 1);
        if (!o->staged) {
            free(o);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(o->staged, src, size);
    }
    pthread_mutex_lock(&mu);
    enqueue(resolve(stream), o);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t size)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    bool ok = find_alloc((void *)(uintptr_t)src, size, true) != NULL;
    if (ok)
        memcpy(dst, (void *)(uintptr_t)src, size);
    pthread_mutex_unlock(&mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t n)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&mu);
    bool ok = find_alloc((void *)(uintptr_t)dst, n, true) != NULL;
    if (ok)
        memset((void *)(uintptr_t)dst, value, n);
    pthread_mutex_unlock(&mu);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuStreamCreate(CUstream *stream, unsigned flags)
{
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    *stream = stream_new();
    return *stream ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fake_cuStreamSynchronize(CUstream stream)
{
    pthread_mutex_lock(&mu);
    CUstream s = resolve(stream);
    while (s->head || s->busy)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuStreamDestroy(CUstream stream)
{
    if ((uintptr_t)stream <= 2)
        return CUDA_ERROR_INVALID_HANDLE;
    pthread_mutex_lock(&mu);
    stream->stop = true; /* the thread finishes its queue first */
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    pthread_join(stream->thread, NULL);
    free(stream);
    return CUDA_SUCCESS;
}

CUresult fake_cuStreamWaitEvent(CUstream stream, CUevent event, unsigned flags)
{
    (void)flags;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    op *o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->kind = OP_WAIT;
    o->ev = event;
    pthread_mutex_lock(&mu);
    o->gen = event->recorded; /* the record most recently queued, as the driver's */
    enqueue(resolve(stream), o);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuEventCreate(CUevent *event, unsigned flags)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    *event = calloc(1, sizeof(**event));
    if (!*event)
        return CUDA_ERROR_OUT_OF_MEMORY;
    (*event)->flags = flags;
    return CUDA_SUCCESS;
}

CUresult fake_cuEventRecord(CUevent event, CUstream stream)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    op *o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->kind = OP_RECORD;
    o->ev = event;
    pthread_mutex_lock(&mu);
    o->gen = ++event->recorded;
    CUstream s = resolve(stream);
    s->records++;
    enqueue(s, o);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuEventQuery(CUevent event)
{
    pthread_mutex_lock(&mu);
    CUresult r = event->completed >= event->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult fake_cuEventSynchronize(CUevent event)
{
    pthread_mutex_lock(&mu);
    uint64_t want = event->recorded;
    while (event->completed < want)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

CUresult fake_cuEventElapsedTime(float *ms, CUevent start, CUevent end)
{
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (!start->recorded || !end->recorded || start->completed < start->recorded ||
             end->completed < end->recorded)
        r = CUDA_ERROR_NOT_READY;
    else
        *ms = (float)((double)(int64_t)(end->t_ns - start->t_ns) / 1e6);
    pthread_mutex_unlock(&mu);
    return r;
}

CUresult fake_cuEventDestroy(CUevent event)
{
    /* The driver releases an event once its pending record has run. */
    fake_cuEventSynchronize(event);
    free(event);
    return CUDA_SUCCESS;
}

struct CUmod_st {
    int unused;
};
struct CUfunc_st {
    int unused;
};
static struct CUfunc_st finish_fn;

CUresult fake_cuModuleLoadData(CUmodule *mod, const void *image)
{
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (env_long("FAKE_CUDA_NO_MODULE", 0))
        return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
    if (!strstr(image, ".entry stk_finish")) /* NVRTC's PTX of our kernel, nothing else */
        return CUDA_ERROR_INVALID_IMAGE;
    *mod = calloc(1, sizeof(**mod));
    return *mod ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult fake_cuModuleUnload(CUmodule mod)
{
    free(mod);
    return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunction(CUfunction *fn, CUmodule mod, const char *name)
{
    (void)mod;
    if (strcmp(name, "stk_finish") != 0)
        return CUDA_ERROR_NOT_FOUND;
    *fn = &finish_fn;
    return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernel(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared, CUstream stream,
                             void **params, void **extra)
{
    (void)gy, (void)gz, (void)by, (void)bz, (void)shared, (void)extra;
    if (!has_ctx())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (fn != &finish_fn || !params || gx == 0 || bx == 0 || bx > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    op *o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    o->kind = OP_KERNEL;
    memcpy(&o->args, params[0], sizeof(o->args)); /* arguments are copied at launch */
    o->delay_us = (unsigned)env_long("FAKE_CUDA_DELAY_US", 300);
    const stk__fin_args *a = &o->args;
    uint64_t px = (uint64_t)a->n * a->h * a->w;
    size_t osz = a->dtype == 7 ? 4 : 2;
    pthread_mutex_lock(&mu);
    bool ok = find_alloc((void *)(uintptr_t)a->in, px * 3, true) &&
              find_alloc((void *)(uintptr_t)a->out, px * 3 * osz, true) &&
              (!a->flags || find_alloc((void *)(uintptr_t)a->flags, a->n, true));
    if (ok)
        enqueue(resolve(stream), o);
    pthread_mutex_unlock(&mu);
    if (!ok) {
        free(o);
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* ---- test hooks ---- */

void fakecuda_gate(int closed)
{
    pthread_mutex_lock(&mu);
    gate_closed = closed != 0;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

int fakecuda_gate_waiting(void)
{
    pthread_mutex_lock(&mu);
    int n = gate_waiting;
    pthread_mutex_unlock(&mu);
    return n;
}

int fakecuda_violations(char *buf, size_t size)
{
    pthread_mutex_lock(&mu);
    int n = violations;
    if (buf && size)
        snprintf(buf, size, "%s", violation_msg);
    pthread_mutex_unlock(&mu);
    return n;
}

CUresult fakecuda_check_async(CUstream stream, CUdeviceptr p, size_t size, unsigned delay_us)
{
    return fakecuda_expect_async(stream, p, NULL, size, delay_us);
}

CUresult fakecuda_expect_async(CUstream stream, CUdeviceptr p, const void *want, size_t size,
                               unsigned delay_us)
{
    op *o = calloc(1, sizeof(*o));
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (want) {
        o->staged = malloc(size ? size : 1);
        if (!o->staged) {
            free(o);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(o->staged, want, size);
    }
    o->kind = OP_CHECK;
    o->dst = (uint8_t *)(uintptr_t)p;
    o->size = size;
    o->delay_us = delay_us;
    pthread_mutex_lock(&mu);
    bool ok = find_alloc(o->dst, size, true) != NULL;
    if (ok)
        enqueue(resolve(stream), o);
    pthread_mutex_unlock(&mu);
    if (!ok) {
        free(o->staged);
        free(o);
    }
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

uint64_t fakecuda_records(CUstream stream)
{
    pthread_mutex_lock(&mu);
    uint64_t n = resolve(stream)->records;
    pthread_mutex_unlock(&mu);
    return n;
}

void fakecuda_counts(uint64_t *pinned_bytes, uint64_t *device_bytes, uint64_t *copies,
                     uint64_t *kernels)
{
    pthread_mutex_lock(&mu);
    *pinned_bytes = pinned_live;
    *device_bytes = device_live;
    *copies = n_copies;
    *kernels = n_kernels;
    pthread_mutex_unlock(&mu);
}
