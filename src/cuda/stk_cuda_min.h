/*
 * stk_cuda_min.h: our own minimal declarations of the CUDA driver API and of NVRTC, exactly
 * what stoker calls and nothing more. The build never sees cuda.h: both libraries are loaded at
 * run time (src/cuda/stk_cuda.c), and this table of function pointers is filled from them.
 *
 * Values are those of cuda.h / nvrtc.h (CUDA 11 to 13; the driver ABI is stable). Where the
 * driver exports a `_v2` entry point (cuMemAlloc_v2, cuMemcpyHtoDAsync_v2, ...), that is the
 * symbol we resolve: the unsuffixed names are the CUDA 3.x ABI with 32-bit sizes. Only
 * src/cuda/ and the tests include this file (STYLE.md: only src/cuda/ knows about CUDA).
 */
#ifndef STK_CUDA_MIN_H
#define STK_CUDA_MIN_H

#include <stddef.h>

typedef int CUresult; /* enum cudaError_enum */
typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* 64-bit builds only */
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600
};

#define CU_MEMHOSTALLOC_PORTABLE 0x01u    /* page-locked for every context, not only the current */
#define CU_MEMHOSTREGISTER_PORTABLE 0x01u /* registered memory page-locked for every context */
#define CU_STREAM_NON_BLOCKING 0x1u       /* no implicit synchronisation with the legacy stream */
#define CU_EVENT_BLOCKING_SYNC 0x1u       /* cuEventSynchronize sleeps instead of spinning */
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

/* The driver functions stoker uses, each with the symbol it is resolved from: X(name, symbol,
 * parameters), every one returning CUresult. One list drives the table and its loader. */
#define STK__CUDA_FUNCS(X)                                                                         \
    X(cuInit, "cuInit", (unsigned flags))                                                          \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *version))                                    \
    X(cuGetErrorName, "cuGetErrorName", (CUresult err, const char **name))                         \
    X(cuGetErrorString, "cuGetErrorString", (CUresult err, const char **text))                     \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *count))                                          \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice * dev, int ordinal))                                   \
    X(cuDeviceGetName, "cuDeviceGetName", (char *name, int len, CUdevice dev))                     \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *value, int attrib, CUdevice dev))        \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext * ctx, CUdevice dev))       \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice dev))                   \
    X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", (CUcontext ctx))                                    \
    X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", (CUcontext * ctx))                                    \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext ctx))                                         \
    X(cuMemHostAlloc, "cuMemHostAlloc", (void **p, size_t size, unsigned flags))                   \
    X(cuMemFreeHost, "cuMemFreeHost", (void *p))                                                   \
    X(cuMemHostRegister, "cuMemHostRegister_v2", (void *p, size_t size, unsigned flags))           \
    X(cuMemHostUnregister, "cuMemHostUnregister", (void *p))                                       \
    X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr * p, size_t size))                                 \
    X(cuMemFree, "cuMemFree_v2", (CUdeviceptr p))                                                  \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2",                                                   \
      (CUdeviceptr dst, const void *src, size_t size, CUstream stream))                            \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *dst, CUdeviceptr src, size_t size))                  \
    X(cuMemsetD8, "cuMemsetD8_v2", (CUdeviceptr dst, unsigned char value, size_t n))               \
    X(cuStreamCreate, "cuStreamCreate", (CUstream * stream, unsigned flags))                       \
    X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream stream))                                    \
    X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream stream))                               \
    X(cuStreamWaitEvent, "cuStreamWaitEvent", (CUstream stream, CUevent event, unsigned flags))    \
    X(cuEventCreate, "cuEventCreate", (CUevent * event, unsigned flags))                           \
    X(cuEventRecord, "cuEventRecord", (CUevent event, CUstream stream))                            \
    X(cuEventQuery, "cuEventQuery", (CUevent event))                                               \
    X(cuEventSynchronize, "cuEventSynchronize", (CUevent event))                                   \
    X(cuEventElapsedTime, "cuEventElapsedTime", (float *ms, CUevent start, CUevent end))           \
    X(cuEventDestroy, "cuEventDestroy_v2", (CUevent event))                                        \
    X(cuModuleLoadData, "cuModuleLoadData", (CUmodule * mod, const void *image))                   \
    X(cuModuleUnload, "cuModuleUnload", (CUmodule mod))                                            \
    X(cuModuleGetFunction, "cuModuleGetFunction",                                                  \
      (CUfunction * fn, CUmodule mod, const char *name))                                           \
    X(cuLaunchKernel, "cuLaunchKernel",                                                            \
      (CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,             \
       unsigned bz, unsigned shared, CUstream stream, void **params, void **extra))

/* The resolved driver table (all entries non-NULL once loaded). */
typedef struct stk__cuda_api {
#define STK__CUDA_FIELD(name, sym, params) CUresult(*name) params;
    STK__CUDA_FUNCS(STK__CUDA_FIELD)
#undef STK__CUDA_FIELD
} stk__cuda_api;

/* ---- NVRTC ---- */

typedef int nvrtcResult; /* NVRTC_SUCCESS = 0 */
typedef struct _nvrtcProgram *nvrtcProgram;

/* X(return type, name, symbol, parameters). */
#define STK__NVRTC_FUNCS(X)                                                                        \
    X(nvrtcResult, nvrtcVersion, "nvrtcVersion", (int *major, int *minor))                         \
    X(const char *, nvrtcGetErrorString, "nvrtcGetErrorString", (nvrtcResult r))                   \
    X(nvrtcResult, nvrtcCreateProgram, "nvrtcCreateProgram",                                       \
      (nvrtcProgram * prog, const char *src, const char *name, int n_headers,                      \
       const char *const *headers, const char *const *include_names))                              \
    X(nvrtcResult, nvrtcCompileProgram, "nvrtcCompileProgram",                                     \
      (nvrtcProgram prog, int n_options, const char *const *options))                              \
    X(nvrtcResult, nvrtcGetPTXSize, "nvrtcGetPTXSize", (nvrtcProgram prog, size_t * size))         \
    X(nvrtcResult, nvrtcGetPTX, "nvrtcGetPTX", (nvrtcProgram prog, char *ptx))                     \
    X(nvrtcResult, nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize",                               \
      (nvrtcProgram prog, size_t * size))                                                          \
    X(nvrtcResult, nvrtcGetProgramLog, "nvrtcGetProgramLog", (nvrtcProgram prog, char *log))       \
    X(nvrtcResult, nvrtcDestroyProgram, "nvrtcDestroyProgram", (nvrtcProgram * prog))

typedef struct stk__nvrtc_api {
#define STK__NVRTC_FIELD(ret, name, sym, params) ret(*name) params;
    STK__NVRTC_FUNCS(STK__NVRTC_FIELD)
#undef STK__NVRTC_FIELD
} stk__nvrtc_api;

#endif /* STK_CUDA_MIN_H */
