/*
 * test_cuda.c: the GPU path where there is no GPU (docs/gpu.md).
 *
 *  - Fallback: no driver, no device, a missing device: the loader works on pageable memory and
 *    its stats say why.
 *  - Pinned accounting and its cap (opts, env, a driver that refuses), through the fake driver
 *    (tests/data/fake_cuda.c, loaded with STOKER_LIBCUDA).
 *  - Device copies under load: every batch's device bytes equal its host batch, every sample
 *    once per epoch; poison tests where the fake's slow asynchronous copies and consumer
 *    "kernels" catch a host slot refilled before its copy finished or a device buffer overwritten
 *    before the consumer's release event (negative controls show the detectors fire), including
 *    a consumer reading on a second stream declared with stk_batch_device_use (and, without it,
 *    the overwrite the fake catches); the bound on streams per batch.
 *  - Finishing: the kernel's per-element code (the same text NVRTC compiles) run over whole
 *    samples equals the CPU pipeline's normalised float32 / float16 / bfloat16 output bit for
 *    bit; the loader's device and CPU finishing equal it too; NVRTC compiles the kernel to PTX
 *    (skipped without libnvrtc).
 *
 * The driver is loaded once per process, so each scenario with its own environment runs in a
 * forked child (the parent never starts a thread or loads CUDA).
 */
#include "batch/stk_pinned.h"
#include "cuda/stk_cuda.h"
#include "t.h"
#include "xform/stk_xform.h"

#include "data/cuda_fixtures.h"

#include <dlfcn.h>
#include <math.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char fake_path[512];

/* The datasets (tests/data/cuda_fixtures.h) and the fake driver's path (beside this binary). */
static int setup(void)
{
    if (fx_setup("test_cuda", 500))
        return 1;
    char exe[400] = "";
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    T_CHECK(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0';
    snprintf(fake_path, sizeof(fake_path), "%s/libfakecuda.so", exe);
    T_CHECKF(access(fake_path, R_OK) == 0, "%s missing (make builds it with the unit tests)",
             fake_path);
    return 0;
}

static int teardown(void)
{
    return fx_teardown();
}

/* The fake's device memory is host memory. */
static const void *fake_fetch(const stk_tensor *t, void *scratch)
{
    (void)scratch;
    return t->data;
}

/* Run fn in a forked child with `env` ("NAME=value", NULL-terminated) set first. */
static int in_child(int (*fn)(void), const char *const *env)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        for (size_t i = 0; env && env[i]; i++)
            putenv(strdup(env[i]));
        int rc = fn();
        fflush(stdout);
        fflush(stderr);
        exit(rc);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return 1;
    if (!WIFEXITED(st)) {
        fprintf(stderr, "  child died (signal %d)\n", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        return 1;
    }
    return WEXITSTATUS(st);
}

/* Environment for the fake driver. */
static char env_fake[600];
static const char *const *fake_env(const char *extra1, const char *extra2)
{
    static const char *env[4];
    snprintf(env_fake, sizeof(env_fake), "STOKER_LIBCUDA=%s", fake_path);
    env[0] = env_fake;
    env[1] = extra1;
    env[2] = extra1 ? extra2 : NULL;
    env[3] = NULL;
    return env;
}

/* The fake's test hooks. */
typedef int (*violations_fn)(char *, size_t);
typedef CUresult (*check_fn)(CUstream, CUdeviceptr, size_t, unsigned);
typedef void (*counts_fn)(uint64_t *, uint64_t *, uint64_t *, uint64_t *);
typedef CUresult (*expect_fn)(CUstream, CUdeviceptr, const void *, size_t, unsigned);
typedef uint64_t (*records_fn)(CUstream);
static violations_fn fk_violations;
static void (*fk_gate)(int);
static int (*fk_gate_waiting)(void);
static check_fn fk_check;
static counts_fn fk_counts;
static expect_fn fk_expect;
static records_fn fk_records;

/* In a child using the fake: open the device (loads the driver) and find the hooks. */
static int fake_open(stk__cudev *d)
{
    char err[STK_ERRMSG_SIZE];
    T_CHECKF(stk__cudev_open(0, d, err, sizeof(err)) == STK_OK, "%s", err);
    void *h = dlopen(fake_path, RTLD_NOW | RTLD_NOLOAD);
    T_CHECK(h);
    *(void **)&fk_violations = dlsym(h, "fakecuda_violations");
    *(void **)&fk_check = dlsym(h, "fakecuda_check_async");
    *(void **)&fk_counts = dlsym(h, "fakecuda_counts");
    *(void **)&fk_expect = dlsym(h, "fakecuda_expect_async");
    *(void **)&fk_records = dlsym(h, "fakecuda_records");
    *(void **)&fk_gate = dlsym(h, "fakecuda_gate");
    *(void **)&fk_gate_waiting = dlsym(h, "fakecuda_gate_waiting");
    T_CHECK(fk_violations && fk_check && fk_counts && fk_expect && fk_records && fk_gate &&
            fk_gate_waiting);
    return 0;
}

/* A consumer of the fake device: the device open, its context current, a stream of its own. */
static int consumer_open(stk__cudev *d, CUstream *s)
{
    char err[STK_ERRMSG_SIZE];
    if (fake_open(d))
        return 1;
    T_OK(stk__cudev_push(d, err, sizeof(err)));
    T_EQ(d->cu->cuStreamCreate(s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    return 0;
}

static void consumer_close(stk__cudev *d, CUstream s)
{
    d->cu->cuStreamDestroy(s);
    stk__cudev_pop(d);
    stk__cudev_close(d);
}

/* A loader of the raw dataset copying to device 0. */
static stk_loader *device_loader(int64_t batch, int threads, int prefetch)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, batch, threads);
    o.device = 0;
    o.n_slots = prefetch;
    stk_loader *L = NULL;
    if (stk_loader_create(&o, &L) < 0)
        fprintf(stderr, "  loader: %s\n", stk_last_errmsg());
    return L;
}

/* No violation seen by the fake. */
static int no_violations(void)
{
    char msg[512];
    int n = fk_violations(msg, sizeof(msg));
    T_CHECKF(n == 0, "%d violation(s), last: %s", n, msg);
    return 0;
}

/* ---- the fake's detectors fire (negative controls for the poison tests) ---- */

static int child_fake_detects(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    const stk__cuda_api *cu = d.cu;
    char err[STK_ERRMSG_SIZE];
    T_OK(stk__cudev_push(&d, err, sizeof(err)));
    void *host;
    CUdeviceptr dev;
    CUstream a, b;
    T_EQ(cu->cuMemHostAlloc(&host, 4096, 0), CUDA_SUCCESS);
    T_EQ(cu->cuMemAlloc(&dev, 4096), CUDA_SUCCESS);
    T_EQ(cu->cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    T_EQ(cu->cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    /* A pinned source rewritten during its copy: the copy held in flight at the fake's gate
     * (not a sleep that a loaded machine could outlast). */
    memset(host, 1, 4096);
    fk_gate(1);
    T_EQ(cu->cuMemcpyHtoDAsync(dev, host, 4096, a), CUDA_SUCCESS);
    while (fk_gate_waiting() < 1)
        usleep(100);
    memset(host, 2, 4096);
    fk_gate(0);
    T_EQ(cu->cuStreamSynchronize(a), CUDA_SUCCESS);
    T_EQ(fk_violations(NULL, 0), 1);
    /* A device buffer overwritten while a consumer kernel on another stream reads it: the read
     * held at the gate while the copy writes the buffer. */
    memset(host, 3, 4096);
    fk_gate(1);
    T_EQ(fk_check(b, dev, 4096, 1000), CUDA_SUCCESS);
    while (fk_gate_waiting() < 1)
        usleep(100);
    T_EQ(cu->cuMemcpyHtoDAsync(dev, host, 4096, a), CUDA_SUCCESS);
    while (fk_gate_waiting() < 2) /* the copy wrote the buffer and waits too */
        usleep(100);
    fk_gate(0);
    T_EQ(cu->cuStreamSynchronize(a), CUDA_SUCCESS);
    T_EQ(cu->cuStreamSynchronize(b), CUDA_SUCCESS);
    T_EQ(fk_violations(NULL, 0), 2);
    /* Ordered by an event, the same pair is fine. */
    CUevent e;
    T_EQ(cu->cuEventCreate(&e, 0), CUDA_SUCCESS);
    memset(host, 4, 4096);
    T_EQ(fk_check(b, dev, 4096, 20000), CUDA_SUCCESS);
    T_EQ(cu->cuEventRecord(e, b), CUDA_SUCCESS);
    T_EQ(cu->cuStreamWaitEvent(a, e, 0), CUDA_SUCCESS);
    T_EQ(cu->cuMemcpyHtoDAsync(dev, host, 4096, a), CUDA_SUCCESS);
    T_EQ(cu->cuStreamSynchronize(a), CUDA_SUCCESS);
    T_EQ(fk_violations(NULL, 0), 2);
    /* No context: refused, as by the driver. */
    stk__cudev_pop(&d);
    T_EQ(cu->cuMemAlloc(&dev, 16), CUDA_ERROR_INVALID_CONTEXT);
    T_OK(stk__cudev_push(&d, err, sizeof(err)));
    cu->cuEventDestroy(e);
    cu->cuStreamDestroy(a);
    cu->cuStreamDestroy(b);
    cu->cuMemFree(dev);
    cu->cuMemFreeHost(host);
    stk__cudev_pop(&d);
    stk__cudev_close(&d);
    return 0;
}

static int test_fake_detects(void)
{
#ifdef __SANITIZE_THREAD__
    fprintf(stderr, "  skipped under TSan: the negative controls race on purpose\n");
    return T_SKIP;
#endif
    return in_child(child_fake_detects, fake_env("FAKE_CUDA_DELAY_US=2000", NULL));
}

/* ---- fallback ---- */

/* One epoch of the raw dataset on a loader asked for device 0 and pinned memory that it cannot
 * have: correct data, pageable memory, no device, and the reason. */
static int host_only_epoch(const char *want_reason)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 3);
    o.device = 0;
    o.flags = STK_LOADER_PINNED | STK_LOADER_SHUFFLE;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECK(!st.pinned && st.pinned_bytes == 0 && st.device == -1);
    T_CHECKF(strstr(st.device_reason, want_reason), "reason \"%s\" lacks \"%s\"", st.device_reason,
             want_reason);
    stk_loader_info info = {.struct_size = sizeof(info)};
    stk_loader_info_get(L, &info);
    T_CHECK(!info.pinned);
    static int64_t seen[600];
    size_t n_seen = 0;
    stk_batch *b;
    stk_status rc;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        if (fx_check_raw_batch(b, seen, &n_seen))
            return 1;
        stk_tensor t;
        stk_tensor_init(&t);
        T_EQ(stk_batch_device(b), -1);
        T_EQ(stk_batch_device_tensor(b, 0, &t), STK_ENOTSUP);
        T_EQ(stk_batch_device_wait(b, NULL), STK_ENOTSUP);
        T_EQ(stk_batch_device_sync(b), STK_ENOTSUP);
        T_OK(stk_batch_release_after(b, NULL));
    }
    T_EQ(rc, STK_END);
    if (fx_exactly_once(seen, n_seen, 500))
        return 1;
    stk_loader_stats_get(L, &st);
    T_EQ(st.copies, 0);
    T_EQ(st.h2d_bytes, 0);
    stk_loader_destroy(L);
    return 0;
}

static int child_no_driver(void)
{
    char why[256];
    T_EQ(stk_cuda_probe(0, why, sizeof(why)), STK_ENOTSUP);
    T_CHECKF(strstr(stk_last_errmsg(), "cannot open shared object file") && why[0] == '\0',
             "probe said \"%s\"", stk_last_errmsg());
    return host_only_epoch("cannot open shared object file");
}

static int child_no_device(void)
{
    char why[256];
    T_EQ(stk_cuda_probe(0, why, sizeof(why)), STK_ENOTSUP);
    T_CHECKF(strstr(stk_last_errmsg(), "cuInit: CUDA_ERROR_NO_DEVICE") && why[0] == '\0',
             "probe said \"%s\"", stk_last_errmsg());
    return host_only_epoch("cuInit: CUDA_ERROR_NO_DEVICE");
}

static int child_missing_device(void)
{
    char why[256];
    T_OK(stk_cuda_probe(0, why, sizeof(why)));
    T_CHECKF(strstr(why, "Fake CUDA Device 0") && strstr(why, "compute capability 9.0"),
             "probe said \"%s\"", why);
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    o.device = 5;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.device == -1 && strstr(st.device_reason, "CUDA device 5 does not exist"), "%s",
             st.device_reason);
    stk_loader_destroy(L);
    return 0;
}

static int test_no_driver(void)
{
    static const char *const env[] = {"STOKER_LIBCUDA=/nonexistent/libcuda.so.1", NULL};
    return in_child(child_no_driver, env);
}

static int test_no_device(void)
{
    return in_child(child_no_device, fake_env("FAKE_CUDA_DEVICES=0", NULL));
}

static int test_missing_device(void)
{
    return in_child(child_missing_device, fake_env(NULL, NULL));
}

/* ---- pinned memory: accounting and the cap ---- */

static int child_pinned_accounting(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    o.flags = STK_LOADER_PINNED;
    o.n_slots = 3;
    stk_loader *L1, *L2;
    T_OK(stk_loader_create(&o, &L1));
    stk_loader_info info = {.struct_size = sizeof(info)};
    stk_loader_info_get(L1, &info);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L1, &st);
    uint64_t ring = 3 * (uint64_t)STK_ALIGN_UP(info.slot_size, 64);
    T_CHECKF(st.pinned && info.pinned && st.device_reason[0] == '\0', "%s", st.device_reason);
    T_EQ(st.device, -1); /* pinned only: no copies */
    T_EQ(st.pinned_bytes, ring);
    T_EQ(st.pinned_total, ring);
    uint64_t fk_pinned, fk_dev, fk_copies, fk_kernels;
    fk_counts(&fk_pinned, &fk_dev, &fk_copies, &fk_kernels);
    T_EQ(fk_pinned, ring); /* what the driver holds is what we count */
    T_OK(stk_loader_create(&o, &L2));
    T_EQ(stk__pinned_total(), 2 * ring);
    /* A held batch keeps its loader's ring (and its pinned bytes) past destroy. */
    stk_batch *b;
    T_OK(stk_loader_next(L1, &b));
    stk_loader_destroy(L1);
    T_EQ(stk__pinned_total(), 2 * ring);
    stk_batch_release(b);
    T_EQ(stk__pinned_total(), ring);
    /* Over the cap (opts): pageable, and why. */
    o.pinned_limit = 2 * ring - 1;
    T_OK(stk_loader_create(&o, &L1));
    stk_loader_stats_get(L1, &st);
    T_CHECKF(!st.pinned && st.pinned_bytes == 0 && strstr(st.device_reason, "pageable ring") &&
                 strstr(st.device_reason, "cap"),
             "%s", st.device_reason);
    T_EQ(st.pinned_total, ring);
    stk_loader_destroy(L1);
    stk_loader_destroy(L2);
    T_EQ(stk__pinned_total(), 0);
    fk_counts(&fk_pinned, &fk_dev, &fk_copies, &fk_kernels);
    T_EQ(fk_pinned, 0);
    stk__cudev_close(&d);
    return 0;
}

/* The driver refuses the second slot: the ring is mixed, counted exactly, and says why. */
static int child_pinned_refused(void)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    o.flags = STK_LOADER_PINNED;
    o.n_slots = 3;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECKF(!st.pinned && st.pinned_bytes > 0 &&
                 strstr(st.device_reason, "cuMemHostAlloc: CUDA_ERROR_OUT_OF_MEMORY"),
             "pinned %d bytes %llu: %s", st.pinned, (unsigned long long)st.pinned_bytes,
             st.device_reason);
    T_EQ(st.pinned_total, st.pinned_bytes);
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    stk_batch_release(b);
    stk_loader_destroy(L);
    T_EQ(stk__pinned_total(), 0);
    return 0;
}

/* STOKER_PINNED_LIMIT sets the default cap. */
static int child_pinned_env(void)
{
    T_EQ(stk__pinned_limit_default(), 1024);
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    o.flags = STK_LOADER_PINNED;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECKF(!st.pinned && strstr(st.device_reason, "1024-byte cap"), "%s", st.device_reason);
    stk_loader_destroy(L);
    return 0;
}

static int test_pinned_accounting(void)
{
    return in_child(child_pinned_accounting, fake_env(NULL, NULL));
}

/* A shared ring (one memfd for every slot) is page-locked by cuMemHostRegister, counted as one
 * range, and unregistered with the ring. */
static int child_pinned_shared(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    o.flags = STK_LOADER_PINNED | STK_LOADER_SHARED_RING;
    o.n_slots = 3;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_ring_memory m;
    stk_ring_memory_init(&m);
    T_OK(stk_loader_ring_memory(L, &m));
    stk_loader_stats st;
    stk_loader_stats_init(&st);
    stk_loader_stats_get(L, &st);
    T_CHECKF(m.fd >= 0 && m.pinned && st.pinned, "%s", st.device_reason);
    T_EQ(st.pinned_bytes, m.size);
    uint64_t fk_pinned, fk_dev, fk_copies, fk_kernels;
    fk_counts(&fk_pinned, &fk_dev, &fk_copies, &fk_kernels);
    T_EQ(fk_pinned, m.size);
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    stk_tensor t;
    stk_tensor_init(&t);
    T_OK(stk_batch_tensor(b, 0, &t));
    T_CHECK((const uint8_t *)t.data >= (const uint8_t *)m.base &&
            (const uint8_t *)t.data + t.size <= (const uint8_t *)m.base + m.size);
    stk_loader_destroy(L);
    stk_batch_release(b);
    T_EQ(stk__pinned_total(), 0);
    fk_counts(&fk_pinned, &fk_dev, &fk_copies, &fk_kernels);
    T_EQ(fk_pinned, 0);
    stk__cudev_close(&d);
    return 0;
}

static int test_pinned_shared(void)
{
    return in_child(child_pinned_shared, fake_env(NULL, NULL));
}

static int test_pinned_refused(void)
{
    char lim[64];
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 16, 2);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L)); /* a host-only loader: the slot size, no CUDA touched */
    stk_loader_info info = {.struct_size = sizeof(info)};
    stk_loader_info_get(L, &info);
    stk_loader_destroy(L);
    snprintf(lim, sizeof(lim), "FAKE_CUDA_HOST_LIMIT=%zu",
             (size_t)STK_ALIGN_UP(info.slot_size, 64));
    return in_child(child_pinned_refused, fake_env(lim, NULL));
}

static int test_pinned_env(void)
{
    return in_child(child_pinned_env, fake_env("STOKER_PINNED_LIMIT=1K", NULL));
}

/* ---- device copies under load, and the poison tests ---- */

/* How the consumer hands a batch back, cycling through the ways the API allows. */
enum { REL_AFTER, REL_AUTO, REL_PLAIN, REL_N };

static int child_device_copies(void)
{
    stk__cudev d;
    CUstream s;
    if (consumer_open(&d, &s))
        return 1;
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 7, 4);
    o.device = 0;
    o.n_slots = 3;
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 5;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.device == 0 && st.pinned && st.device_reason[0] == '\0', "%s", st.device_reason);
    uint64_t batches = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        static int64_t seen[600];
        size_t n_seen = 0;
        stk_batch *b;
        stk_status rc;
        while ((rc = stk_loader_next(L, &b)) == STK_OK) {
            T_EQ(stk_batch_device(b), 0);
            if (fx_check_raw_batch(b, seen, &n_seen))
                return 1;
            T_OK(stk_batch_device_wait(b, s));
            stk_tensor t;
            stk_tensor_init(&t);
            T_OK(stk_batch_device_tensor(b, 0, &t));
            T_EQ(fk_check(s, (CUdeviceptr)(uintptr_t)t.data, t.size, 100), CUDA_SUCCESS);
            T_OK(stk_batch_device_sync(b));
            if (fx_device_equals_host(b, fake_fetch))
                return 1;
            switch (batches++ % REL_N) {
            case REL_AFTER:
                T_OK(stk_batch_release_after(b, s));
                break;
            case REL_AUTO:
                stk_batch_release(b);
                break; /* records on s: it waited */
            default:
                T_EQ(d.cu->cuStreamSynchronize(s), CUDA_SUCCESS);
                stk_batch_release(b);
                break;
            }
        }
        T_EQ(rc, STK_END);
        if (fx_exactly_once(seen, n_seen, 500))
            return 1;
    }
    T_EQ(d.cu->cuStreamSynchronize(s), CUDA_SUCCESS);
    stk_loader_stats_get(L, &st);
    T_CHECK(st.copies >= batches && st.h2d_bytes > 0);
    T_CHECK(st.copied_bytes > 0 && st.copied_bytes <= st.h2d_bytes && st.copy_ns > 0);
    stk_loader_destroy(L);
    if (no_violations())
        return 1;
    consumer_close(&d, s);
    return 0;
}

static int test_device_copies(void)
{
    return in_child(child_device_copies, fake_env("FAKE_CUDA_DELAY_US=200", NULL));
}

/* The consumer releases each batch at once, without waiting for its copy: the workers want the
 * slot back while the (slow) copy still reads it; the fake reports any refill before its
 * completion. */
static int child_poison_host(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    stk_loader *L = device_loader(5, 4, 2);
    T_CHECK(L);
    stk_batch *b;
    stk_loader_stats st = {.struct_size = sizeof(st)};
    int n = 0;
    /* 60 batches, and on until the workers have waited (for a slot or its copy) at least once:
     * that the refill was tried while copies ran is what this test needs, and how soon it
     * happens depends on the machine's load (the bound on batches is a hang guard) */
    while ((n < 60 || st.worker_wait_ns == 0) && n < 100000 && stk_loader_next(L, &b) == STK_OK) {
        stk_batch_release(b);
        n++;
        stk_loader_stats_get(L, &st);
    }
    T_CHECKF(n >= 60 && st.worker_wait_ns > 0, "%d batches, workers waited %llu ns", n,
             (unsigned long long)st.worker_wait_ns);
    stk_loader_destroy(L);
    if (no_violations())
        return 1;
    stk__cudev_close(&d);
    return 0;
}

/* The consumer's "kernel" reads each batch's buffers for a long time on its own stream and the
 * batch is released at once (release_after): later copies into the same buffer must queue
 * behind the release event; the fake reports any overwrite under the reader. */
static int child_poison_device(void)
{
    stk__cudev d;
    CUstream s;
    if (consumer_open(&d, &s))
        return 1;
    stk_loader *L = device_loader(5, 4, 2);
    T_CHECK(L);
    stk_batch *b;
    for (int n = 0; n < 40; n++) {
        T_OK(stk_loader_next(L, &b));
        T_OK(stk_batch_device_wait(b, s));
        for (size_t i = 0; i < stk_batch_n_tensors(b); i++) {
            stk_tensor t;
            stk_tensor_init(&t);
            T_OK(stk_batch_device_tensor(b, i, &t));
            T_EQ(fk_check(s, (CUdeviceptr)(uintptr_t)t.data, t.size, 1500), CUDA_SUCCESS);
        }
        T_OK(stk_batch_release_after(b, s));
    }
    T_EQ(d.cu->cuStreamSynchronize(s), CUDA_SUCCESS);
    stk_loader_destroy(L);
    if (no_violations())
        return 1;
    consumer_close(&d, s);
    return 0;
}

/* The consumer waits on stream s1 and reads each batch on a second stream s2 (ordered after s1,
 * as torch's s2.wait_stream(s1)): each of its "kernels" checks that the buffer holds the batch's
 * bytes while it reads. With stk_batch_device_use(b, s2) the release is recorded on s2 too and no
 * overwrite happens; without it (declare = false) the small ring overwrites buffers under s2's
 * reads and the fake must see it. Returns the fake's violation count through *violations. */
static int second_stream_run(bool declare, int *violations)
{
    stk__cudev d;
    CUstream s1, s2;
    if (consumer_open(&d, &s1))
        return 1;
    const stk__cuda_api *cu = d.cu;
    T_EQ(cu->cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    CUevent ready;
    T_EQ(cu->cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    stk_loader *L = device_loader(5, 4, 2);
    T_CHECK(L);
    const int n_batches = 40;
    stk_batch *b;
    for (int n = 0; n < n_batches; n++) {
        T_OK(stk_loader_next(L, &b));
        T_OK(stk_batch_device_wait(b, s1));
        T_EQ(cu->cuEventRecord(ready, s1), CUDA_SUCCESS);
        T_EQ(cu->cuStreamWaitEvent(s2, ready, 0), CUDA_SUCCESS);
        for (size_t i = 0; i < stk_batch_n_tensors(b); i++) {
            stk_tensor h, t;
            stk_tensor_init(&h);
            stk_tensor_init(&t);
            T_OK(stk_batch_tensor(b, i, &h));
            T_OK(stk_batch_device_tensor(b, i, &t));
            T_EQ(fk_expect(s2, (CUdeviceptr)(uintptr_t)t.data, h.data, t.size, 1500), CUDA_SUCCESS);
        }
        if (declare) {
            T_OK(stk_batch_device_use(b, s2));
            T_OK(stk_batch_device_use(b, s2)); /* recorded once */
        }
        if (n % 2) /* both ways of releasing: on the wait stream, and on a named one */
            stk_batch_release(b);
        else
            T_OK(stk_batch_release_after(b, s1));
    }
    T_EQ(cu->cuStreamSynchronize(s2), CUDA_SUCCESS);
    T_EQ(cu->cuStreamSynchronize(s1), CUDA_SUCCESS);
    /* One release event per batch on each stream that read it (none on s2 undeclared). */
    T_EQ(fk_records(s2), declare ? (uint64_t)n_batches : 0);
    stk_loader_destroy(L);
    *violations = fk_violations(NULL, 0);
    if (declare && no_violations())
        return 1;
    cu->cuEventDestroy(ready);
    cu->cuStreamDestroy(s2);
    consumer_close(&d, s1);
    return 0;
}

static int child_second_stream(void)
{
    int v;
    return second_stream_run(true, &v);
}

/* Negative control: the same consumer without stk_batch_device_use is caught. */
static int child_second_stream_undeclared(void)
{
    int v = 0;
    if (second_stream_run(false, &v))
        return 1;
    T_CHECKF(v > 0, "no overwrite seen under the second stream's reads (%d violations)", v);
    return 0;
}

/* stk_batch_device_use: at most 4 streams per batch counting the wait stream, duplicates (and
 * the wait stream itself) counted once, each recorded once at release and forgotten after it;
 * STK_ENOTSUP on a host batch. */
static int child_use_limits(void)
{
    stk__cudev d;
    CUstream s[6];
    if (consumer_open(&d, &s[0]))
        return 1;
    const stk__cuda_api *cu = d.cu;
    for (int i = 1; i < 6; i++)
        T_EQ(cu->cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    uint64_t rec[6];
#define RECORDS_ADDED(...)                                                                         \
    do {                                                                                           \
        const uint64_t want_[6] = {__VA_ARGS__};                                                   \
        for (int i_ = 0; i_ < 6; i_++) {                                                           \
            uint64_t now_ = fk_records(s[i_]);                                                     \
            T_CHECKF(now_ - rec[i_] == want_[i_], "stream %d: %llu new records, want %llu", i_,    \
                     (unsigned long long)(now_ - rec[i_]), (unsigned long long)want_[i_]);         \
            rec[i_] = now_;                                                                        \
        }                                                                                          \
    } while (0)
    for (int i = 0; i < 6; i++)
        rec[i] = fk_records(s[i]);
    stk_loader *L = device_loader(5, 2, 2);
    T_CHECK(L);
    stk_batch *b;
    /* Waited on s0; s0 again, s1..s3 fit (4 streams), s4 does not; duplicates are free. */
    T_OK(stk_loader_next(L, &b));
    T_OK(stk_batch_device_wait(b, s[0]));
    T_OK(stk_batch_device_use(b, s[0]));
    for (int i = 1; i <= 3; i++)
        T_OK(stk_batch_device_use(b, s[i]));
    T_EQ(stk_batch_device_use(b, s[4]), STK_ELIMIT);
    T_CHECKF(strstr(stk_last_errmsg(), "at most 4 streams"), "%s", stk_last_errmsg());
    T_OK(stk_batch_device_use(b, s[2]));
    T_OK(stk_batch_device_use(b, s[0]));
    RECORDS_ADDED(0, 0, 0, 0, 0, 0); /* nothing until the release */
    stk_batch_release(b);
    RECORDS_ADDED(1, 1, 1, 1, 0, 0);
    /* Not waited: 4 streams of its own; released after a fifth, every one is recorded. */
    T_OK(stk_loader_next(L, &b));
    for (int i = 0; i < 4; i++)
        T_OK(stk_batch_device_use(b, s[i]));
    T_EQ(stk_batch_device_use(b, s[4]), STK_ELIMIT);
    T_OK(stk_batch_release_after(b, s[5]));
    RECORDS_ADDED(1, 1, 1, 1, 0, 1);
    /* The wait stream declared, then released on another: both recorded. */
    T_OK(stk_loader_next(L, &b));
    T_OK(stk_batch_device_wait(b, s[0]));
    T_OK(stk_batch_device_use(b, s[0]));
    T_OK(stk_batch_release_after(b, s[1]));
    RECORDS_ADDED(1, 1, 0, 0, 0, 0);
    /* The next batches in the same slots start with no extra stream. */
    for (int n = 0; n < 2; n++) {
        T_OK(stk_loader_next(L, &b));
        T_OK(stk_batch_device_wait(b, s[0]));
        stk_batch_release(b);
    }
    RECORDS_ADDED(2, 0, 0, 0, 0, 0);
#undef RECORDS_ADDED
    stk_loader_destroy(L);
    if (no_violations())
        return 1;
    for (int i = 1; i < 6; i++)
        cu->cuStreamDestroy(s[i]);
    consumer_close(&d, s[0]);
    /* A host batch: not supported. */
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 5, 1);
    T_OK(stk_loader_create(&o, &L));
    T_OK(stk_loader_next(L, &b));
    T_EQ(stk_batch_device(b), -1);
    T_EQ(stk_batch_device_use(b, NULL), STK_ENOTSUP);
    stk_batch_release(b);
    stk_loader_destroy(L);
    return 0;
}

static int test_second_stream(void)
{
    return in_child(child_second_stream, fake_env("FAKE_CUDA_DELAY_US=100", NULL));
}

static int test_second_stream_undeclared(void)
{
#ifdef __SANITIZE_THREAD__
    fprintf(stderr, "  skipped under TSan: the negative control races on purpose\n");
    return T_SKIP;
#endif
    return in_child(child_second_stream_undeclared, fake_env("FAKE_CUDA_DELAY_US=100", NULL));
}

static int test_use_limits(void)
{
    return in_child(child_use_limits, fake_env("FAKE_CUDA_DELAY_US=100", NULL));
}

static int test_poison_host_slot(void)
{
    return in_child(child_poison_host, fake_env("FAKE_CUDA_DELAY_US=2000", NULL));
}

static int test_poison_device_buffer(void)
{
    return in_child(child_poison_device, fake_env("FAKE_CUDA_DELAY_US=100", NULL));
}

/* A copy the driver refuses fails its batch, with the reason; the loader goes on. */
static int child_copy_error(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    stk_loader *L = device_loader(50, 1, 4); /* one thread: batch k is copy k + 1 */
    T_CHECK(L);
    static int64_t seen[600];
    size_t n_seen = 0;
    stk_batch *b;
    stk_status rc;
    int k = 0, failed = 0;
    while ((rc = stk_loader_next(L, &b)) != STK_END) {
        if (k++ == 2) {
            T_EQ(rc, STK_EIO);
            T_CHECKF(strstr(stk_loader_errmsg(L), "device 0 copy of epoch 0 batch 2: "
                                                  "cuMemcpyHtoDAsync: CUDA_ERROR_INVALID_VALUE"),
                     "%s", stk_loader_errmsg(L));
            failed++;
            continue;
        }
        T_OK(rc);
        if (fx_check_raw_batch(b, seen, &n_seen))
            return 1;
        T_OK(stk_batch_device_sync(b));
        if (fx_device_equals_host(b, fake_fetch))
            return 1;
        stk_batch_release(b);
    }
    T_EQ(failed, 1);
    T_EQ(n_seen, 450);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_EQ(st.errors, 1);
    stk_loader_destroy(L);
    stk__cudev_close(&d);
    return no_violations();
}

static int test_copy_error(void)
{
    return in_child(child_copy_error, fake_env("FAKE_CUDA_FAIL_COPY=3", NULL));
}

/* A trace of a device loader has the device track and the copy stages. */
static int child_trace(void)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 10, 2);
    o.device = 0;
    o.trace_events = 4096;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_batch *b;
    for (int n = 0; n < 20; n++) {
        T_OK(stk_loader_next(L, &b));
        stk_batch_release(b);
    }
    char path[600];
    snprintf(path, sizeof(path), "%s/trace.json", fx_dir);
    T_OK(stk_loader_trace_write(L, path));
    stk_loader_destroy(L);
    size_t size;
    char *text = (char *)fx_read_file(path, &size);
    T_CHECK(text);
    text[size < (1 << 20) ? size : (1 << 20) - 1] = '\0';
    T_CHECK(strstr(text, "\"device 0 (loader stream)\""));
    T_CHECK(strstr(text, "\"name\": \"copy\""));
    T_CHECK(strstr(text, "\"name\": \"copy issue\""));
    T_CHECK(strstr(text, "\"name\": \"wait for copy\""));
    free(text);
    return 0;
}

static int test_trace_device(void)
{
    return in_child(child_trace, fake_env("FAKE_CUDA_DELAY_US=500", NULL));
}

/* ---- finishing: the kernel's math against the CPU pipeline ---- */

/* Float conversions: the kernel's integer float16 and its bfloat16 equal the pipeline's for
 * every 4099th bit pattern and every pattern near the rounding boundaries. */
static int test_finish_conversions(void)
{
    static const uint32_t edges[] = {0x33000000u, 0x38800000u, 0x477fe000u, 0x477ff000u,
                                     0x7f800000u, 0x00000000u, 0x3f800000u};
    uint64_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint64_t k = 0; k < (pass ? 7 * 8192u : (1ull << 32) / 4099); k++) {
            uint32_t u =
                pass ? edges[k / 8192] - 4096 + (uint32_t)(k % 8192) : (uint32_t)(k * 4099);
            for (uint32_t sign = 0; sign <= 1; sign++) {
                uint32_t bits = u ^ (sign << 31);
                float f;
                memcpy(&f, &bits, sizeof(f));
                T_CHECKF(stk__fin_f16(f) == stk__f32_to_f16(f), "f16 of %08x: %04x vs %04x", bits,
                         stk__fin_f16(f), stk__f32_to_f16(f));
                T_CHECKF(stk__fin_bf16(f) == stk__f32_to_bf16(f), "bf16 of %08x", bits);
                n++;
            }
        }
    }
    T_CHECK(n > 2000000);
    return 0;
}

static int apply(const stk_transform *t, const uint8_t *img, size_t size, uint64_t index, void *out)
{
    stk__tworker *w;
    T_OK(stk__transform_worker_create(t, &w));
    stk_rng rng;
    stk_rng_init(&rng, 3, 0, index);
    char err[256];
    stk_status rc = stk__transform_apply(t, w, img, size, &rng, out, err, sizeof(err));
    stk__transform_worker_destroy(w);
    T_CHECKF(rc == STK_OK, "%s", err);
    return 0;
}

static int test_finish_equals_pipeline(void)
{
    if (!fx_have_images)
        return T_SKIP;
    size_t size;
    uint8_t *img = fx_read_file("tests/data/decode/h4v2.jpg", &size);
    T_CHECK(img);
    const uint32_t H = 40, W = 36, N = 3;
    stk_transform *u8 = fx_transform(false, STK_DTYPE_UINT8, true);
    T_CHECK(u8);
    uint8_t *in = malloc((size_t)N * H * W * 3);
    for (uint32_t n = 0; n < N; n++)
        if (apply(u8, img, size, n, in + (size_t)n * H * W * 3))
            return 1;
    static const stk_dtype dtypes[] = {STK_DTYPE_FLOAT32, STK_DTYPE_FLOAT16, STK_DTYPE_BFLOAT16};
    size_t sample = (size_t)H * W * 3;
    uint8_t *want = malloc(N * sample * 4), *got = malloc(N * sample * 4);
    uint8_t flags[3] = {1, 0, 1};
    for (int di = 0; di < 3; di++)
        for (int nhwc = 0; nhwc <= 1; nhwc++) {
            stk_transform *ref = fx_transform(true, dtypes[di], nhwc);
            T_CHECK(ref);
            size_t es = stk_dtype_size(dtypes[di]);
            for (uint32_t n = 0; n < N; n++)
                if (apply(ref, img, size, n, want + n * sample * es))
                    return 1;
            stk__fin_args a = {.in = (uintptr_t)in,
                               .out = (uintptr_t)got,
                               .n = N,
                               .h = H,
                               .w = W,
                               .dtype = (uint32_t)dtypes[di],
                               .nhwc = (uint32_t)nhwc};
            memcpy(a.mean, FX_MEAN, sizeof(FX_MEAN));
            memcpy(a.std, FX_STD, sizeof(FX_STD));
            memset(got, 0xee, N * sample * es);
            stk__finish_ref(&a);
            T_CHECKF(memcmp(got, want, N * sample * es) == 0, "%s %s differs from the pipeline",
                     stk_dtype_name(dtypes[di]), nhwc ? "NHWC" : "NCHW");
            /* Mirrored samples: column x of the output is column W-1-x of the pipeline's. */
            a.flags = (uintptr_t)flags;
            stk__finish_ref(&a);
            for (uint32_t n = 0; n < N; n++)
                for (uint32_t c = 0; c < 3; c++)
                    for (uint32_t y = 0; y < H; y++)
                        for (uint32_t x = 0; x < W; x++) {
                            uint32_t sx = flags[n] ? W - 1 - x : x;
                            size_t o = nhwc ? (((size_t)n * H + y) * W + x) * 3 + c
                                            : (((size_t)n * 3 + c) * H + y) * W + x;
                            size_t i = nhwc ? (((size_t)n * H + y) * W + sx) * 3 + c
                                            : (((size_t)n * 3 + c) * H + y) * W + sx;
                            T_CHECK(memcmp(got + o * es, want + i * es, es) == 0);
                        }
            stk_transform_destroy(ref);
        }
    stk_transform_destroy(u8);
    free(in);
    free(want);
    free(got);
    free(img);
    return 0;
}

/* NVRTC compiles the kernel to PTX without a GPU. */
static int nvrtc_checks(void)
{
    char *ptx = NULL, err[STK_ERRMSG_SIZE];
    stk_status rc = stk__finish_ptx("compute_75", &ptx, err, sizeof(err));
    if (rc == STK_ENOTSUP && strstr(err, "NVRTC not found")) {
        fprintf(stderr, "  skipped: %s\n", err);
        return T_SKIP;
    }
    T_CHECKF(rc == STK_OK, "%s", err);
    T_CHECK(strstr(ptx, ".entry stk_finish") && strstr(ptx, "div.rn.f32"));
    T_CHECK(!strstr(ptx, "fma.rn.f32")); /* no contraction: the CPU's exact arithmetic */
    stk__free(ptx);
    rc = stk__finish_ptx("compute_90", &ptx, err, sizeof(err));
    T_CHECKF(rc == STK_OK, "%s", err);
    stk__free(ptx);
    T_EQ(stk__finish_ptx("compute_1", &ptx, err, sizeof(err)), STK_ENOTSUP);
    T_CHECKF(strstr(err, "could not compile"), "%s", err);
    T_CHECK(ptx == NULL);
    return 0;
}

/* The child ends with _exit: under ASan, LeakSanitizer's exit-time check stops every thread of
 * the process with a tracer, and in a process that loaded NVRTC that tracer once crashed under
 * load ("Tracer caught signal 11", a CI run of the thirteenth round; 6 of 6 passed alone). The
 * checks above free what they take (stk__free(ptx)); NVRTC's own threads and memory are not
 * ours to check. */
static int child_nvrtc(void)
{
    int rc = nvrtc_checks();
    fflush(stdout);
    fflush(stderr);
    _exit(rc);
}

static int test_nvrtc_compile(void)
{
    return in_child(child_nvrtc, NULL);
}

/* ---- finishing in the loader ---- */

/* Device finishing (NVRTC present: the fake runs the launched kernel with the shared math) or
 * its CPU fallback (FAKE_CUDA_NO_MODULE or no NVRTC): either way equal to the CPU pipeline. */
static int finish_in_loader(stk_finish_where want)
{
    for (size_t k = 0; k < 3; k++) {
        stk_transform *ref = fx_transform(true, FX_FINISH_CASES[k].dtype, FX_FINISH_CASES[k].nhwc);
        stk_transform *fin =
            fx_finish_transform(FX_FINISH_CASES[k].dtype, FX_FINISH_CASES[k].nhwc, 0);
        stk_loader *R = fx_img_loader(ref, 2, -1);
        stk_loader *L = fx_img_loader(fin, 3, 0);
        T_CHECK(ref && fin && R && L);
        stk_loader_stats st = {.struct_size = sizeof(st)};
        stk_loader_stats_get(L, &st);
        T_EQ(st.device, 0);
        if (want == STK_FINISH_DEVICE && st.finish == STK_FINISH_CPU &&
            strstr(st.device_reason, "NVRTC not found")) {
            fprintf(stderr, "  no NVRTC: finishing fell back to the CPU (%s)\n", st.device_reason);
            want = STK_FINISH_CPU;
        }
        T_CHECKF(st.finish == (uint32_t)want, "finish %u: %s", st.finish, st.device_reason);
        if (want == STK_FINISH_CPU) /* then it says why */
            T_CHECK(strstr(st.device_reason, "finishing on the CPU"));
        if (fx_finish_matches(L, R, fake_fetch))
            return 1;
        stk_loader_stats_get(L, &st);
        T_CHECK(st.copies > 0 && st.finish_ns > 0);
        stk_loader_destroy(L);
        stk_loader_destroy(R);
        stk_transform_destroy(ref);
        stk_transform_destroy(fin);
    }
    return no_violations();
}

static int child_finish_device(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    int rc = finish_in_loader(STK_FINISH_DEVICE);
    stk__cudev_close(&d);
    return rc;
}

static int child_finish_fallback(void)
{
    stk__cudev d;
    if (fake_open(&d))
        return 1;
    int rc = finish_in_loader(STK_FINISH_CPU);
    stk__cudev_close(&d);
    if (rc)
        return rc;
    /* The reason names the driver's refusal. */
    stk_transform *fin = fx_finish_transform(STK_DTYPE_FLOAT32, false, 0);
    stk_loader *L = fx_img_loader(fin, 2, 0);
    T_CHECK(L);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    if (!strstr(st.device_reason, "NVRTC not found"))
        T_CHECKF(strstr(st.device_reason, "cuModuleLoadData: CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
                 "%s", st.device_reason);
    stk_loader_destroy(L);
    stk_transform_destroy(fin);
    return 0;
}

static int test_finish_device(void)
{
    if (!fx_have_images)
        return T_SKIP;
    return in_child(child_finish_device, fake_env("FAKE_CUDA_DELAY_US=50", NULL));
}

static int test_finish_fallback(void)
{
    if (!fx_have_images)
        return T_SKIP;
    return in_child(child_finish_fallback, fake_env("FAKE_CUDA_NO_MODULE=1", NULL));
}

/* Finishing without any device: on the CPU, in the host tensors, equal to the pipeline; the
 * flip is drawn per sample whatever the thread count. */
static int child_finish_host(void)
{
    stk_transform *fin = fx_finish_transform(STK_DTYPE_FLOAT32, false, 0);
    stk_transform *ref = fx_transform(true, STK_DTYPE_FLOAT32, false);
    stk_loader *R = fx_img_loader(ref, 2, -1);
    stk_loader *L = fx_img_loader(fin, 3, -1);
    T_CHECK(fin && ref && R && L);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_EQ(st.finish, STK_FINISH_CPU);
    T_EQ(st.device, -1);
    T_CHECK(st.device_reason[0] == '\0'); /* nothing requested was refused */
    if (fx_finish_matches(L, R, NULL))
        return 1;
    stk_loader_destroy(L);
    stk_loader_destroy(R);
    /* flip = 1 mirrors every sample; flip = 0.5 is the same for 1 and 4 threads. */
    stk_transform *always = fx_finish_transform(STK_DTYPE_FLOAT32, false, 1.0f);
    stk_transform *half = fx_finish_transform(STK_DTYPE_FLOAT32, false, 0.5f);
    stk_loader *F = fx_img_loader(always, 2, -1);
    stk_loader *P = fx_img_loader(fin, 2, -1);
    stk_loader *A = fx_img_loader(half, 1, -1);
    stk_loader *B = fx_img_loader(half, 4, -1);
    T_CHECK(always && half && F && P && A && B);
    stk_batch *f, *p, *a, *b;
    int mirrored = 0, straight = 0;
    while (stk_loader_next(F, &f) == STK_OK) {
        T_OK(stk_loader_next(P, &p));
        T_OK(stk_loader_next(A, &a));
        T_OK(stk_loader_next(B, &b));
        stk_tensor tf, tp, ta, tb;
        stk_tensor_init(&tf);
        stk_tensor_init(&tp);
        stk_tensor_init(&ta);
        stk_tensor_init(&tb);
        T_OK(stk_batch_tensor(f, 0, &tf));
        T_OK(stk_batch_tensor(p, 0, &tp));
        T_OK(stk_batch_tensor(a, 0, &ta));
        T_OK(stk_batch_tensor(b, 0, &tb));
        T_CHECK(memcmp(ta.data, tb.data, ta.size) == 0);
        size_t W = (size_t)tf.shape[3], rows = tf.size / 4 / W;
        for (size_t r = 0; r < rows; r++)
            for (size_t x = 0; x < W; x++)
                T_CHECK(((float *)tf.data)[r * W + x] == ((float *)tp.data)[r * W + W - 1 - x]);
        size_t per = ta.size / stk_batch_n_samples(a);
        for (uint32_t n = 0; n < stk_batch_n_samples(a); n++) {
            bool same =
                memcmp((uint8_t *)ta.data + n * per, (uint8_t *)tp.data + n * per, per) == 0;
            bool flip =
                memcmp((uint8_t *)ta.data + n * per, (uint8_t *)tf.data + n * per, per) == 0;
            T_CHECK(same || flip);
            mirrored += flip;
            straight += same;
        }
        stk_batch_release(f);
        stk_batch_release(p);
        stk_batch_release(a);
        stk_batch_release(b);
    }
    T_CHECK(mirrored > 10 && straight > 10); /* 60 samples at p = 0.5 */
    stk_loader_destroy(F);
    stk_loader_destroy(P);
    stk_loader_destroy(A);
    stk_loader_destroy(B);
    stk_transform_destroy(fin);
    stk_transform_destroy(ref);
    stk_transform_destroy(always);
    stk_transform_destroy(half);
    return 0;
}

static int test_finish_host(void)
{
    if (!fx_have_images)
        return T_SKIP;
    return in_child(child_finish_host, NULL);
}

/* Bad finishing options fail at the transform's create with a message naming the problem; a
 * good one reports the finished output and gives the loader a slot with room for it. */
static int test_finish_invalid(void)
{
    struct {
        bool normalize;
        stk_dtype dtype;
        float flip;
        const char *msg;
    } bad[] = {
        {true, STK_DTYPE_UINT8, 0, "Normalize): needs a float output dtype"},
        {false, STK_DTYPE_UINT8, 0, "float32, float16 or bfloat16, not uint8"},
        {true, STK_DTYPE_INT32, 0, "output dtype int32 not supported"},
        {true, STK_DTYPE_FLOAT32, 1.5f, "flip probability 1.5 is not in [0, 1]"},
        {true, STK_DTYPE_FLOAT32, -0.5f, "flip probability"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        stk_transform *t =
            fx_transform_opts(bad[i].normalize, bad[i].dtype, false, true, bad[i].flip);
        T_CHECK(t == NULL);
        T_CHECKF(strstr(stk_last_errmsg(), bad[i].msg), "\"%s\" lacks \"%s\"", stk_last_errmsg(),
                 bad[i].msg);
    }
    /* Normalize must be the last op (here a flip follows it). */
    stk_op ops[3];
    stk_op_init(&ops[0], STK_OP_CENTER_CROP);
    ops[0].size[0] = ops[0].size[1] = 8;
    stk_op_init(&ops[1], STK_OP_NORMALIZE);
    stk_op_init(&ops[2], STK_OP_RANDOM_HORIZONTAL_FLIP);
    stk_transform_opts to;
    stk_transform_opts_init(&to);
    T_CHECK(!to.finish_on_device && to.finish_flip == 0);
    to.ops = ops;
    to.n_ops = 3;
    to.finish_on_device = true;
    stk_transform *t;
    T_EQ(stk_transform_create(&to, &t), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "Normalize (ops[1]) must be the last op"));
    to.n_ops = 2;
    ops[1].std[1] = 0; /* Normalize's parameters are checked as ever */
    T_EQ(stk_transform_create(&to, &t), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "std[1] must be finite and non-zero"));
    ops[1].std[1] = 1;
    T_OK(stk_transform_create(&to, &t));
    stk_dtype dt;
    uint32_t ndim;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(t, &dt, &ndim, shape); /* the finished output */
    T_CHECKF(dt == STK_DTYPE_FLOAT32 && ndim == 3 && shape[0] == 3 && shape[1] == 8 &&
                 shape[2] == 8,
             "%s %u [%lld, %lld, %lld]", stk_dtype_name(dt), ndim, (long long)shape[0],
             (long long)shape[1], (long long)shape[2]);
    stk_transform_destroy(t);
    if (!fx_have_images)
        return 0;
    stk_transform *f16 = fx_finish_transform(STK_DTYPE_FLOAT16, false, 0);
    T_CHECK(f16);
    const char *ipaths[] = {fx_img};
    stk_loader_opts o = fx_opts(ipaths, 4, 1);
    o.transform = f16;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info info = {.struct_size = sizeof(info)};
    stk_loader_info_get(L, &info);
    T_CHECK(info.slot_size >= 4 * 40 * 36 * 3 * 3); /* the uint8 rows plus the float16 output */
    stk_loader_destroy(L);
    stk_transform_destroy(f16);
    return 0;
}

/* A caller built against the header before the GPU fields passes a shorter struct_size: the new
 * fields take their defaults. Shorter still is refused. */
static int test_opts_abi(void)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, 4, 1);
    memset((char *)&o + offsetof(stk_loader_opts, device), 0x7f,
           sizeof(o) - offsetof(stk_loader_opts, device)); /* garbage the callee must not read */
    o.struct_size = offsetof(stk_loader_opts, device);
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECK(st.device == -1 && st.finish == STK_FINISH_NONE && !st.pinned);
    stk_loader_destroy(L);
    /* One rule for every options struct: any older, shorter struct is accepted (the fields it
     * lacks take their defaults); only one that does not even cover a field is refused. */
    o.struct_size = offsetof(stk_loader_opts, trace_events);
    T_OK(stk_loader_create(&o, &L));
    stk_loader_info info = {.struct_size = offsetof(stk_loader_info, batch_size)};
    T_OK(stk_loader_info_get(L, &info)); /* an older, shorter output struct: not overrun */
    T_EQ(info.struct_size, offsetof(stk_loader_info, batch_size));
    T_EQ(info.n_threads, 1);
    stk_loader_destroy(L);
    o.struct_size = sizeof(size_t);
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    o.struct_size = 0;
    T_EQ(stk_loader_create(&o, &L), STK_EINVAL);
    stk_loader_opts_init(&o);
    T_EQ(o.device, -1);
    T_CHECK(o.pinned_limit == 0 && o.transform == NULL);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_fake_detects), T_CASE(test_no_driver), T_CASE(test_no_device),
       T_CASE(test_missing_device), T_CASE(test_pinned_accounting), T_CASE(test_pinned_shared),
       T_CASE(test_pinned_refused), T_CASE(test_pinned_env), T_CASE(test_device_copies),
       T_CASE(test_poison_host_slot), T_CASE(test_poison_device_buffer), T_CASE(test_second_stream),
       T_CASE(test_second_stream_undeclared), T_CASE(test_use_limits), T_CASE(test_copy_error),
       T_CASE(test_trace_device), T_CASE(test_finish_conversions),
       T_CASE(test_finish_equals_pipeline), T_CASE(test_nvrtc_compile), T_CASE(test_finish_device),
       T_CASE(test_finish_fallback), T_CASE(test_finish_host), T_CASE(test_finish_invalid),
       T_CASE(test_opts_abi), T_CASE(teardown))
