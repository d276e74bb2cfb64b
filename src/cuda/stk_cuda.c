/*
 * stk_cuda.c: CUDA at run time. The driver (libcuda.so.1, or the library named by env
 * STOKER_LIBCUDA: the tests point it at a fake) and NVRTC are opened with dlopen on first use,
 * under pthread_once, and every symbol of stk_cuda_min.h's tables is resolved, all or nothing
 * (llvm's dynamic_cuda, libuv's dl.c). Failure is a reason string, never a crash: the loader
 * then runs on pageable memory and says why in its stats. Nothing is ever dlclose'd (pinned
 * buffers and modules may outlive any one loader).
 *
 * Also here: page-locked host allocation (the one call stk_alloc.c makes), device/primary
 * context handles, the finishing kernel's NVRTC source and its compilation to PTX, and the
 * kernel's C twin (stk__finish_ref).
 *
 * Fork: the once-state and the table are plain memory, so a forked child inherits them; CUDA
 * itself is unusable in such a child, and the loader never calls it there (fork_child).
 */
#include "cuda/stk_cuda.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* STK_FAIL for functions that receive their error buffer as (err, err_size). */
#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        rc = stk__set_error(err, err_size, (code), __VA_ARGS__);                                   \
        goto fail;                                                                                 \
    } while (0)

/* ---- the driver ---- */

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static stk__cuda_api cuda_api;
static const stk__cuda_api *cuda_ok; /* &cuda_api once loaded; written once under cuda_once */
static char cuda_why[STK_ERRMSG_SIZE];

stk_status stk__cuda_error(char *err, size_t err_size, stk_status code, const char *call,
                           CUresult r)
{
    const char *name = NULL, *text = NULL;
    if (cuda_ok) {
        cuda_api.cuGetErrorName(r, &name);
        cuda_api.cuGetErrorString(r, &text);
    }
    if (name)
        return stk__set_error(err, err_size, code, "%s: %s (%s)", call, name,
                              text ? text : "no description");
    return stk__set_error(err, err_size, code, "%s: CUDA error %d", call, (int)r);
}

static void cuda_load_once(void)
{
    const char *path = getenv("STOKER_LIBCUDA");
    if (!path || !*path)
        path = "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(cuda_why, sizeof(cuda_why), "%s", e ? e : path);
        return;
    }
#define STK__CUDA_RESOLVE(name, sym, params)                                                       \
    *(void **)&cuda_api.name = dlsym(h, sym);                                                      \
    if (!cuda_api.name) {                                                                          \
        snprintf(cuda_why, sizeof(cuda_why), "%s: symbol %s not found (driver too old?)", path,    \
                 sym);                                                                             \
        return;                                                                                    \
    }
    STK__CUDA_FUNCS(STK__CUDA_RESOLVE)
#undef STK__CUDA_RESOLVE
    CUresult r = cuda_api.cuInit(0);
    if (r != CUDA_SUCCESS) {
        const char *name = NULL, *text = NULL;
        cuda_api.cuGetErrorName(r, &name);
        cuda_api.cuGetErrorString(r, &text);
        snprintf(cuda_why, sizeof(cuda_why), "cuInit: %s (%s)", name ? name : "CUDA error",
                 text ? text : "no description");
        return;
    }
    cuda_ok = &cuda_api;
}

const stk__cuda_api *stk__cuda_load(char *why, size_t why_size)
{
    pthread_once(&cuda_once, cuda_load_once);
    if (!cuda_ok && why)
        snprintf(why, why_size, "%s", cuda_why);
    return cuda_ok;
}

/* Load the driver and look device `ordinal` up (name, compute capability); no context. */
static stk_status cudev_find(int ordinal, stk__cudev *d, char *err, size_t err_size)
{
    memset(d, 0, sizeof(*d));
    char why[STK_ERRMSG_SIZE];
    const stk__cuda_api *cu = stk__cuda_load(why, sizeof(why));
    if (!cu)
        return stk__set_error(err, err_size, STK_ENOTSUP, "%s", why);
    int count = 0;
    CUresult r = cu->cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return stk__cuda_error(err, err_size, STK_ENOTSUP, "cuDeviceGetCount", r);
    if (ordinal < 0 || ordinal >= count)
        return stk__set_error(err, err_size, STK_ENOTSUP,
                              "CUDA device %d does not exist (%d device%s)", ordinal, count,
                              count == 1 ? "" : "s");
    if ((r = cu->cuDeviceGet(&d->dev, ordinal)) != CUDA_SUCCESS)
        return stk__cuda_error(err, err_size, STK_ENOTSUP, "cuDeviceGet", r);
    if (cu->cuDeviceGetName(d->name, (int)sizeof(d->name), d->dev) != CUDA_SUCCESS)
        snprintf(d->name, sizeof(d->name), "device %d", ordinal);
    cu->cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->dev);
    cu->cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->dev);
    d->cu = cu;
    d->ordinal = ordinal;
    return STK_OK;
}

stk_status stk__cudev_open(int ordinal, stk__cudev *d, char *err, size_t err_size)
{
    stk_status rc = cudev_find(ordinal, d, err, err_size);
    if (rc < 0)
        return rc;
    CUresult r = d->cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
    if (r != CUDA_SUCCESS) {
        d->ctx = NULL;
        return stk__cuda_error(err, err_size, STK_ENOTSUP, "cuDevicePrimaryCtxRetain", r);
    }
    return STK_OK;
}

void stk__cudev_close(stk__cudev *d)
{
    if (d->ctx)
        d->cu->cuDevicePrimaryCtxRelease(d->dev);
    d->ctx = NULL;
}

stk_status stk__cudev_push(const stk__cudev *d, char *err, size_t err_size)
{
    CUresult r = d->cu->cuCtxPushCurrent(d->ctx);
    if (r != CUDA_SUCCESS)
        return stk__cuda_error(err, err_size, STK_EIO, "cuCtxPushCurrent", r);
    return STK_OK;
}

void stk__cudev_pop(const stk__cudev *d)
{
    CUcontext prev;
    d->cu->cuCtxPopCurrent(&prev);
}

/* ---- page-locked host memory (stk_alloc.c's backend; a context is current) ---- */

stk_status stk__cuda_host_alloc(size_t size, void **p, char *why, size_t why_size)
{
    *p = NULL;
    const stk__cuda_api *cu = stk__cuda_load(why, why_size);
    if (!cu)
        return STK_ENOTSUP;
    CUresult r = cu->cuMemHostAlloc(p, size ? size : 1, CU_MEMHOSTALLOC_PORTABLE);
    if (r != CUDA_SUCCESS) {
        *p = NULL;
        return stk__cuda_error(why, why_size,
                               r == CUDA_ERROR_OUT_OF_MEMORY ? STK_ENOMEM : STK_ENOTSUP,
                               "cuMemHostAlloc", r);
    }
    return STK_OK;
}

void stk__cuda_host_free(void *p)
{
    if (p && cuda_ok)
        cuda_api.cuMemFreeHost(p);
}

stk_status stk__cuda_host_register(void *p, size_t size, char *why, size_t why_size)
{
    const stk__cuda_api *cu = stk__cuda_load(why, why_size);
    if (!cu)
        return STK_ENOTSUP;
    CUresult r = cu->cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE);
    if (r != CUDA_SUCCESS)
        return stk__cuda_error(why, why_size,
                               r == CUDA_ERROR_OUT_OF_MEMORY ? STK_ENOMEM : STK_ENOTSUP,
                               "cuMemHostRegister", r);
    return STK_OK;
}

void stk__cuda_host_unregister(void *p)
{
    if (p && cuda_ok)
        cuda_api.cuMemHostUnregister(p);
}

/* ---- public probe ---- */

stk_status stk_cuda_probe(int32_t device, char *buf, size_t buf_size)
{
    stk__cudev d;
    char err[STK_ERRMSG_SIZE];
    stk_status rc = cudev_find(device, &d, err, sizeof(err)); /* no context: cheap */
    if (rc < 0) {
        if (buf && buf_size)
            buf[0] = '\0';
        return stk__set_last_error(rc, "%s", err);
    }
    int version = 0;
    d.cu->cuDriverGetVersion(&version);
    if (buf && buf_size)
        snprintf(buf, buf_size, "CUDA driver %d.%d, device %d: %s (compute capability %d.%d)",
                 version / 1000, version % 1000 / 10, device, d.name, d.cc_major, d.cc_minor);
    return STK_OK;
}

/* ---- the finishing kernel ---- */

void stk__finish_ref(const stk__fin_args *a)
{
    uint32_t total = a->n * a->h * a->w;
    for (uint32_t p = 0; p < total; p++)
        stk__fin_pixel(a, p);
}

/* The device side of stk_finish_body.h's names, then its text (stringified: each block turns
 * into one string literal). */
static const char fin_source[] =
    "/* stoker finishing kernel (src/cuda/stk_finish_body.h), compiled by NVRTC */\n"
    "typedef unsigned char uint8_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "typedef unsigned long long uintptr_t;\n"
    "#define STK__FIN_HD static __device__ __forceinline__\n"
    "static __device__ __forceinline__ uint32_t stk__fin_bits(float f) "
    "{ return __float_as_uint(f); }\n"
#define STK__FIN_MATH(...) #__VA_ARGS__ "\n"
#define STK__FIN_KERNEL(...) #__VA_ARGS__ "\n"
#include "cuda/stk_finish_body.h"
#undef STK__FIN_MATH
#undef STK__FIN_KERNEL
    ;

const char *stk__finish_source(void)
{
    return fin_source;
}

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static stk__nvrtc_api nvrtc_api;
static const stk__nvrtc_api *nvrtc_ok;
static char nvrtc_why[STK_ERRMSG_SIZE];

/* Open NVRTC: env STOKER_NVRTC (e.g. the copy bundled with PyTorch), else the sonames of CUDA
 * 11 to 13, else the default toolkit location. */
static void nvrtc_load_once(void)
{
    static const char *const names[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                                        "libnvrtc.so.11.2", "/usr/local/cuda/lib64/libnvrtc.so"};
    const char *env = getenv("STOKER_NVRTC");
    void *h = NULL;
    const char *path = NULL;
    if (env && *env) {
        path = env;
        h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    } else {
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++) {
            path = names[i];
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        }
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(nvrtc_why, sizeof(nvrtc_why),
                 "NVRTC not found (%s; set STOKER_NVRTC to a "
                 "libnvrtc.so)",
                 e ? e : path);
        return;
    }
#define STK__NVRTC_RESOLVE(ret, name, sym, params)                                                 \
    *(void **)&nvrtc_api.name = dlsym(h, sym);                                                     \
    if (!nvrtc_api.name) {                                                                         \
        snprintf(nvrtc_why, sizeof(nvrtc_why), "%s: symbol %s not found", path, sym);              \
        return;                                                                                    \
    }
    STK__NVRTC_FUNCS(STK__NVRTC_RESOLVE)
#undef STK__NVRTC_RESOLVE
    nvrtc_ok = &nvrtc_api;
}

stk_status stk__finish_ptx(const char *arch, char **ptx, char *err, size_t err_size)
{
    return stk__nvrtc_ptx(fin_source, "the finishing kernel", arch, ptx, err, err_size);
}

stk_status stk__nvrtc_ptx(const char *src, const char *what, const char *arch, char **ptx,
                          char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    nvrtcProgram prog = NULL;
    char *log = NULL;
    *ptx = NULL;
    pthread_once(&nvrtc_once, nvrtc_load_once);
    if (!nvrtc_ok)
        return stk__set_error(err, err_size, STK_ENOTSUP, "%s", nvrtc_why);
    const stk__nvrtc_api *nv = nvrtc_ok;
    char opt_arch[64];
    snprintf(opt_arch, sizeof(opt_arch), "--gpu-architecture=%s", arch);
    /* Exact IEEE float32: no contraction, IEEE division, subnormals kept (see the body). */
    const char *const opts[] = {opt_arch, "--fmad=false", "--prec-div=true", "--ftz=false",
                                "--std=c++11"};
    nvrtcResult r = nv->nvrtcCreateProgram(&prog, src, "stoker.cu", 0, NULL, NULL);
    if (r != 0)
        FAIL(STK_ENOTSUP, "nvrtcCreateProgram: %s", nv->nvrtcGetErrorString(r));
    r = nv->nvrtcCompileProgram(prog, (int)(sizeof(opts) / sizeof(opts[0])), opts);
    if (r != 0) {
        size_t n = 0;
        nv->nvrtcGetProgramLogSize(prog, &n);
        log = stk__malloc(n + 1);
        if (log) {
            log[0] = '\0';
            nv->nvrtcGetProgramLog(prog, log);
            log[n] = '\0';
        }
        FAIL(STK_ENOTSUP, "NVRTC could not compile %s for %s: %s%s%.300s", what, arch,
             nv->nvrtcGetErrorString(r), log && *log ? ": " : "", log ? log : "");
    }
    size_t n = 0;
    if ((r = nv->nvrtcGetPTXSize(prog, &n)) != 0)
        FAIL(STK_ENOTSUP, "nvrtcGetPTXSize: %s", nv->nvrtcGetErrorString(r));
    *ptx = stk__malloc(n + 1);
    if (!*ptx)
        FAIL(STK_ENOMEM, "out of memory for %zu bytes of PTX", n);
    if ((r = nv->nvrtcGetPTX(prog, *ptx)) != 0) {
        stk__free(*ptx);
        *ptx = NULL;
        FAIL(STK_ENOTSUP, "nvrtcGetPTX: %s", nv->nvrtcGetErrorString(r));
    }
    (*ptx)[n] = '\0';
fail:
    stk__free(log);
    if (prog)
        nv->nvrtcDestroyProgram(&prog);
    return rc;
}
