/*
 * stk_finish.h: GPU-side finishing of a batch (uint8 NHWC -> normalised float32 / float16 /
 * bfloat16, NCHW or NHWC, optional per-sample mirror), its C twin and the kernel compiler.
 *
 * The per-element math lives in stk_finish_body.h and is compiled from the same text for the
 * CPU (here) and for the device (stringified into NVRTC's source by stk_cuda.c), so the CPU
 * fallback, the reference the tests run and the kernel agree bit for bit.
 */
#ifndef STK_FINISH_H
#define STK_FINISH_H

#include "stk_internal.h"

#include <string.h>

/* The C side of the shared text: plain static inline functions. */
#define STK__FIN_HD static inline
static inline uint32_t stk__fin_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}
#define STK__FIN_MATH(...) __VA_ARGS__
#define STK__FIN_KERNEL(...)
#include "cuda/stk_finish_body.h"
#undef STK__FIN_MATH
#undef STK__FIN_KERNEL

_Static_assert(STK_DTYPE_FLOAT32 == 7 && STK_DTYPE_FLOAT16 == 5 && STK_DTYPE_BFLOAT16 == 6,
               "stk_finish_body.h names the output dtypes by their stk_dtype values");

/* Finish a whole batch on the CPU with the kernel's own per-pixel function (the reference). */
void stk__finish_ref(const stk__fin_args *a);

/* The complete NVRTC source of the kernel (prelude + stk_finish_body.h).
 * Lifetime: static storage. */
const char *stk__finish_source(void);

/* Compile the kernel to PTX for `arch` (e.g. "compute_90") with NVRTC, loaded at run time
 * (env STOKER_NVRTC, else libnvrtc.so, .so.13, .so.12, .so.11.2, then /usr/local/cuda's copy).
 * *ptx is heap memory (stk__free). On failure err says why: no NVRTC, or the compiler log.
 * Threads: thread-safe. */
stk_status stk__finish_ptx(const char *arch, char **ptx, char *err, size_t err_size);

#endif /* STK_FINISH_H */
