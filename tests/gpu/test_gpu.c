/*
 * test_gpu.c: the GPU path on a real device (`make test-gpu`; docs/gpu.md). Every case exits 77
 * (skip) when CUDA or a device is missing, so the target is safe everywhere.
 *
 *  - copies under load: every batch's device bytes equal its host batch over several shuffled
 *    epochs, every sample once per epoch, the consumer on its own stream and on the legacy
 *    default stream;
 *  - poison: a consumer kernel that spins, then copies each batch's device buffers aside, on the
 *    consumer's stream, with the batch released at once: a host slot refilled before its copy
 *    finished, or a device buffer overwritten before the consumer's release event, shows up as
 *    bytes that differ from the batch the consumer was given; then again with the kernel on a
 *    second stream, ordered after the first and declared with stk_batch_device_use;
 *  - finishing: the kernel's output equals the CPU pipeline's normalised output bit for bit.
 * `tests/gpu/run.sh` runs it again under compute-sanitizer (memcheck) when installed; STK_GPU_QUICK
 * shortens the loops there.
 */
#include "cuda/stk_cuda.h"
/* The cases share the CUDA context setup makes, which a forked child cannot use: run in-process
 * (t.h still puts each case under the time limit). */
#define T_NOFORK 1
#include "t.h"

#include "data/cuda_fixtures.h"

static stk__cudev dev;
static bool have_dev;
static CUstream cs;   /* the consumer's stream */
static CUstream cs2;  /* a second stream reading the batches (stk_batch_device_use) */
static CUevent order; /* orders cs2 after cs */
static CUmodule mod;
static CUfunction slow_copy; /* NULL without NVRTC: the poison cases skip */
static int quick;

/* Spin for `spin` clocks, then copy n bytes: a consumer kernel that reads its input late. */
static const char slow_src[] =
    "extern \"C\" __global__ void slow_copy(const unsigned char *src, unsigned char *dst,\n"
    "                                       unsigned long long n, long long spin)\n"
    "{\n"
    "    long long t0 = clock64();\n"
    "    while (clock64() - t0 < spin) { }\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
    "         i < n; i += (unsigned long long)gridDim.x * blockDim.x)\n"
    "        dst[i] = src[i];\n"
    "}\n";

/* Device bytes, copied back (the main thread keeps the context current). */
static const void *gpu_fetch(const stk_tensor *t, void *scratch)
{
    CUresult r = dev.cu->cuMemcpyDtoH(scratch, (CUdeviceptr)(uintptr_t)t->data, t->size);
    return r == CUDA_SUCCESS ? scratch : NULL;
}

static int setup(void)
{
    quick = getenv("STK_GPU_QUICK") != NULL;
    char why[STK_ERRMSG_SIZE];
    if (stk_cuda_probe(0, why, sizeof(why)) != STK_OK) {
        printf("no CUDA device: %s\n", stk_last_errmsg());
        return T_SKIP; /* and every case after it: the binary exits 77 */
    }
    printf("%s\n", why);
    if (fx_setup("test_gpu", 3000))
        return 1;
    T_OK(stk__cudev_open(0, &dev, why, sizeof(why)));
    T_OK(stk__cudev_push(&dev, why, sizeof(why)));
    T_EQ(dev.cu->cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    T_EQ(dev.cu->cuStreamCreate(&cs2, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    T_EQ(dev.cu->cuEventCreate(&order, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    have_dev = true;
    char arch[32], *ptx = NULL;
    snprintf(arch, sizeof(arch), "compute_%d%d", dev.cc_major, dev.cc_minor);
    if (stk__nvrtc_ptx(slow_src, "the test kernel", arch, &ptx, why, sizeof(why)) != STK_OK) {
        printf("poison cases will skip: %s\n", why);
        return 0;
    }
    CUresult r = dev.cu->cuModuleLoadData(&mod, ptx);
    stk__free(ptx);
    if (r == CUDA_SUCCESS)
        r = dev.cu->cuModuleGetFunction(&slow_copy, mod, "slow_copy");
    if (r != CUDA_SUCCESS) {
        stk__cuda_error(why, sizeof(why), STK_EIO, "loading the test kernel", r);
        printf("poison cases will skip: %s\n", why);
        slow_copy = NULL;
    }
    return 0;
}

static int teardown(void)
{
    if (!have_dev)
        return T_SKIP;
    if (mod)
        dev.cu->cuModuleUnload(mod);
    dev.cu->cuEventDestroy(order);
    dev.cu->cuStreamDestroy(cs2);
    dev.cu->cuStreamDestroy(cs);
    stk__cudev_pop(&dev);
    stk__cudev_close(&dev);
    return fx_teardown();
}

static stk_loader *raw_loader(int64_t batch, int threads, int prefetch, uint32_t flags)
{
    const char *paths[] = {fx_raw};
    stk_loader_opts o = fx_opts(paths, batch, threads);
    o.device = 0;
    o.n_slots = prefetch;
    o.flags = flags;
    o.seed = 17;
    stk_loader *L = NULL;
    if (stk_loader_create(&o, &L) < 0)
        fprintf(stderr, "  loader: %s\n", stk_last_errmsg());
    return L;
}

/* Shuffled epochs with every batch checked on the device; the consumer waits on `stream`. */
static int copies_on(CUstream stream)
{
    if (!have_dev)
        return T_SKIP;
    stk_loader *L = raw_loader(32, 0, 4, STK_LOADER_SHUFFLE);
    T_CHECK(L);
    stk_loader_stats st = {.struct_size = sizeof(st)};
    stk_loader_stats_get(L, &st);
    T_CHECKF(st.device == 0 && st.pinned, "device %d pinned %d: %s", st.device, st.pinned,
             st.device_reason);
    static int64_t seen[4000];
    for (int epoch = 0; epoch < (quick ? 1 : 3); epoch++) {
        size_t n_seen = 0;
        stk_batch *b;
        stk_status rc;
        while ((rc = stk_loader_next(L, &b)) == STK_OK) {
            if (fx_check_raw_batch(b, seen, &n_seen))
                return 1;
            T_OK(stk_batch_device_wait(b, stream));
            T_EQ(dev.cu->cuStreamSynchronize(stream), CUDA_SUCCESS);
            if (fx_device_equals_host(b, gpu_fetch))
                return 1;
            T_OK(stk_batch_release_after(b, stream));
        }
        T_EQ(rc, STK_END);
        if (fx_exactly_once(seen, n_seen, 3000))
            return 1;
    }
    stk_loader_stats_get(L, &st);
    T_CHECK(st.copies > 0 && st.copied_bytes > 0 && st.copy_ns > 0);
    printf("  %llu copies, %.1f MB, H2D %.2f GB/s while copying\n", (unsigned long long)st.copies,
           st.h2d_bytes / 1e6, (double)st.copied_bytes / (double)st.copy_ns);
    stk_loader_destroy(L);
    return 0;
}

static int test_copies_consumer_stream(void)
{
    return copies_on(cs);
}

static int test_copies_legacy_stream(void)
{
    return copies_on(NULL);
}

/* The poison test (see the top of the file). With `second`, the consumer kernel runs on cs2,
 * after cs (an event), and the batch names cs2 with stk_batch_device_use before its release. */
static int poison(bool second)
{
    if (!have_dev)
        return T_SKIP;
    if (!slow_copy)
        return T_SKIP;
    enum { K = 8 };
    stk_loader *L = raw_loader(16, 0, 2, STK_LOADER_SHUFFLE);
    T_CHECK(L);
    stk_tensor t0;
    stk_tensor_init(&t0);
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    T_OK(stk_batch_tensor(b, 0, &t0));
    size_t cap = t0.size + 64;
    stk_batch_release(b);
    CUdeviceptr priv[K];
    uint8_t *want[K], *got = malloc(cap);
    size_t size[K];
    for (int k = 0; k < K; k++) {
        T_EQ(dev.cu->cuMemAlloc(&priv[k], cap), CUDA_SUCCESS);
        want[k] = malloc(cap);
    }
    long long spin = 400000; /* clocks: a few hundred microseconds */
    int rounds = quick ? 10 : 60;
    for (int round = 0; round < rounds; round++) {
        for (int k = 0; k < K; k++) {
            stk_status rc = stk_loader_next(L, &b);
            if (rc == STK_END)
                rc = stk_loader_next(L, &b);
            T_OK(rc);
            stk_tensor h, d;
            stk_tensor_init(&h);
            stk_tensor_init(&d);
            T_OK(stk_batch_tensor(b, 0, &h));
            T_OK(stk_batch_device_tensor(b, 0, &d));
            memcpy(want[k], h.data, h.size); /* the batch the consumer was given */
            size[k] = h.size;
            T_OK(stk_batch_device_wait(b, cs));
            CUstream on = cs;
            if (second) {
                T_EQ(dev.cu->cuEventRecord(order, cs), CUDA_SUCCESS);
                T_EQ(dev.cu->cuStreamWaitEvent(cs2, order, 0), CUDA_SUCCESS);
                T_OK(stk_batch_device_use(b, cs2));
                on = cs2;
            }
            CUdeviceptr src = (CUdeviceptr)(uintptr_t)d.data;
            unsigned long long n = d.size;
            void *params[] = {&src, &priv[k], &n, &spin};
            T_EQ(dev.cu->cuLaunchKernel(slow_copy, 64, 1, 1, 256, 1, 1, 0, on, params, NULL),
                 CUDA_SUCCESS);
            if (k % 2)
                T_OK(stk_batch_release_after(b, cs));
            else
                stk_batch_release(b); /* records on cs: the batch waited there */
        }
        T_EQ(dev.cu->cuStreamSynchronize(cs), CUDA_SUCCESS);
        T_EQ(dev.cu->cuStreamSynchronize(cs2), CUDA_SUCCESS);
        for (int k = 0; k < K; k++) {
            T_EQ(dev.cu->cuMemcpyDtoH(got, priv[k], size[k]), CUDA_SUCCESS);
            T_CHECKF(memcmp(got, want[k], size[k]) == 0,
                     "round %d batch %d: the consumer read other bytes than it was given", round,
                     k);
        }
    }
    for (int k = 0; k < K; k++) {
        dev.cu->cuMemFree(priv[k]);
        free(want[k]);
    }
    free(got);
    stk_loader_destroy(L);
    return 0;
}

static int test_poison(void)
{
    return poison(false);
}

static int test_poison_second_stream(void)
{
    return poison(true);
}

/* Device finishing equals the CPU pipeline for three output formats. */
static int test_finish(void)
{
    if (!have_dev || !fx_have_images)
        return T_SKIP;
    for (size_t k = 0; k < 3; k++) {
        stk_transform *ref = fx_transform(true, FX_FINISH_CASES[k].dtype, FX_FINISH_CASES[k].nhwc);
        stk_transform *fin =
            fx_finish_transform(FX_FINISH_CASES[k].dtype, FX_FINISH_CASES[k].nhwc, 0);
        stk_loader *R = fx_img_loader(ref, 2, -1);
        stk_loader *L = fx_img_loader(fin, 4, 0);
        T_CHECK(ref && fin && R && L);
        stk_loader_stats st = {.struct_size = sizeof(st)};
        stk_loader_stats_get(L, &st);
        if (st.finish != STK_FINISH_DEVICE && strstr(st.device_reason, "NVRTC not found")) {
            printf("  skipped: %s\n", st.device_reason);
            return T_SKIP;
        }
        T_CHECKF(st.finish == STK_FINISH_DEVICE, "finishing on the CPU: %s", st.device_reason);
        if (fx_finish_matches(L, R, gpu_fetch))
            return 1;
        stk_loader_destroy(L);
        stk_loader_destroy(R);
        stk_transform_destroy(ref);
        stk_transform_destroy(fin);
    }
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_copies_consumer_stream), T_CASE(test_copies_legacy_stream),
       T_CASE(test_poison), T_CASE(test_poison_second_stream), T_CASE(test_finish),
       T_CASE(teardown))
