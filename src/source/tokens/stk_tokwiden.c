/*
 * stk_tokwiden.c: stored token ids (1, 2, 4 or 8 bytes each) widened to a row's int64 or int32
 * ids. A window's T + 1 ids are read once and its input_ids and labels written in the same pass.
 *
 * gcc -O2 leaves the plain loops scalar (-fopt-info-vec: "would need a runtime alias check"), and
 * its lowering of generic vector conversions is no faster, so on x86-64 the uint16 and uint32 ids
 * (every token format's) go through intrinsics 8 ids a step: AVX2 where the CPU has it (chosen
 * once per process), else SSE2 (every x86-64 CPU has it). bench/bench_tokwiden.c measures them
 * (bench/RESULTS.md, issue 26): in a hot cache the plain loops widen about 1.4 G ids a CPU-second,
 * SSE2 about 3, AVX2 about 4.4 in one pass (4 in two), AVX-512 no more than AVX2. Ids as wide as
 * the output are copied. Little-endian hosts only (as the rest of the library).
 */
#include "source/tokens/stk_tokens.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define STK_TOKWIDEN_X86 1
#endif

/* dst[j] = s[j] for i <= j < n, element types ST -> DT: the plain loop (tails, rare widths). */
#define PLAIN(ST, DT)                                                                              \
    do {                                                                                           \
        const ST *s = (const ST *)(const void *)src;                                               \
        DT *d = dst;                                                                               \
        for (size_t j = i; j < n; j++)                                                             \
            d[j] = (DT)s[j];                                                                       \
    } while (0)

static void widen_plain(const uint8_t *src, uint32_t width, size_t i, size_t n, void *dst, bool i32)
{
    switch (width * 2 + i32) {
    case 2:
        PLAIN(uint8_t, int64_t);
        break;
    case 3:
        PLAIN(uint8_t, int32_t);
        break;
    case 4:
        PLAIN(uint16_t, int64_t);
        break;
    case 5:
        PLAIN(uint16_t, int32_t);
        break;
    case 8:
        PLAIN(uint32_t, int64_t);
        break;
    case 9:
        PLAIN(uint32_t, int32_t);
        break;
    case 16:
        PLAIN(uint64_t, int64_t);
        break;
    default:
        PLAIN(uint64_t, int32_t);
    }
}
#undef PLAIN

/* A kernel: x[i] = s[i] (and y[i] = s[i + 1] unless y is NULL) for whole steps of 8 ids; returns
 * how many ids it did (the caller finishes the rest). */
typedef size_t widen_kernel(const void *s, size_t n, void *x, void *y);

#ifdef STK_TOKWIDEN_X86
#define LD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define ST(p, v) _mm_storeu_si128((__m128i *)(void *)(p), v)
#define ST256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), v)

/* The loop of a kernel: STEP(source ids, destination) converts 8 ids. */
#define KERNEL(SRC_T, DST_T, STEP)                                                                 \
    const SRC_T *s = s_;                                                                           \
    DST_T *x = x_, *y = y_;                                                                        \
    size_t i = 0;                                                                                  \
    if (y)                                                                                         \
        for (; i + 8 <= n; i += 8) {                                                               \
            STEP(s + i, x + i);                                                                    \
            STEP(s + i + 1, y + i);                                                                \
        }                                                                                          \
    else                                                                                           \
        for (; i + 8 <= n; i += 8)                                                                 \
            STEP(s + i, x + i);                                                                    \
    return i

#define SSE2_U16_I64(p, d)                                                                         \
    do {                                                                                           \
        __m128i a_ = LD(p), lo_ = _mm_unpacklo_epi16(a_, z), hi_ = _mm_unpackhi_epi16(a_, z);      \
        ST((d), _mm_unpacklo_epi32(lo_, z));                                                       \
        ST((d) + 2, _mm_unpackhi_epi32(lo_, z));                                                   \
        ST((d) + 4, _mm_unpacklo_epi32(hi_, z));                                                   \
        ST((d) + 6, _mm_unpackhi_epi32(hi_, z));                                                   \
    } while (0)
#define SSE2_U16_I32(p, d)                                                                         \
    do {                                                                                           \
        __m128i a_ = LD(p);                                                                        \
        ST((d), _mm_unpacklo_epi16(a_, z));                                                        \
        ST((d) + 4, _mm_unpackhi_epi16(a_, z));                                                    \
    } while (0)
#define SSE2_U32_I64(p, d)                                                                         \
    do {                                                                                           \
        __m128i a_ = LD(p), b_ = LD((p) + 4);                                                      \
        ST((d), _mm_unpacklo_epi32(a_, z));                                                        \
        ST((d) + 2, _mm_unpackhi_epi32(a_, z));                                                    \
        ST((d) + 4, _mm_unpacklo_epi32(b_, z));                                                    \
        ST((d) + 6, _mm_unpackhi_epi32(b_, z));                                                    \
    } while (0)

static size_t sse2_u16_i64(const void *s_, size_t n, void *x_, void *y_)
{
    const __m128i z = _mm_setzero_si128();
    KERNEL(uint16_t, int64_t, SSE2_U16_I64);
}

static size_t sse2_u16_i32(const void *s_, size_t n, void *x_, void *y_)
{
    const __m128i z = _mm_setzero_si128();
    KERNEL(uint16_t, int32_t, SSE2_U16_I32);
}

static size_t sse2_u32_i64(const void *s_, size_t n, void *x_, void *y_)
{
    const __m128i z = _mm_setzero_si128();
    KERNEL(uint32_t, int64_t, SSE2_U32_I64);
}

#define AVX2_U16_I64(p, d)                                                                         \
    do {                                                                                           \
        __m128i a_ = LD(p);                                                                        \
        ST256((d), _mm256_cvtepu16_epi64(a_));                                                     \
        ST256((d) + 4, _mm256_cvtepu16_epi64(_mm_srli_si128(a_, 8)));                              \
    } while (0)
#define AVX2_U16_I32(p, d) ST256((d), _mm256_cvtepu16_epi32(LD(p)))
#define AVX2_U32_I64(p, d)                                                                         \
    do {                                                                                           \
        ST256((d), _mm256_cvtepu32_epi64(LD(p)));                                                  \
        ST256((d) + 4, _mm256_cvtepu32_epi64(LD((p) + 4)));                                        \
    } while (0)

__attribute__((target("avx2"))) static size_t avx2_u16_i64(const void *s_, size_t n, void *x_,
                                                           void *y_)
{
    KERNEL(uint16_t, int64_t, AVX2_U16_I64);
}

__attribute__((target("avx2"))) static size_t avx2_u16_i32(const void *s_, size_t n, void *x_,
                                                           void *y_)
{
    KERNEL(uint16_t, int32_t, AVX2_U16_I32);
}

__attribute__((target("avx2"))) static size_t avx2_u32_i64(const void *s_, size_t n, void *x_,
                                                           void *y_)
{
    KERNEL(uint32_t, int64_t, AVX2_U32_I64);
}
#endif

/* The kernels in use: uint16 -> int64, uint16 -> int32, uint32 -> int64 (NULL: the plain loop). */
static widen_kernel *kernels[3];
static pthread_once_t kernels_once = PTHREAD_ONCE_INIT;

static bool use(const char *isa)
{
    widen_kernel *k[3] = {NULL, NULL, NULL};
    if (strcmp(isa, "plain") != 0) {
#ifdef STK_TOKWIDEN_X86
        __builtin_cpu_init();
        if (!strcmp(isa, "avx2") && __builtin_cpu_supports("avx2")) {
            k[0] = avx2_u16_i64;
            k[1] = avx2_u16_i32;
            k[2] = avx2_u32_i64;
        } else if (!strcmp(isa, "sse2")) {
            k[0] = sse2_u16_i64;
            k[1] = sse2_u16_i32;
            k[2] = sse2_u32_i64;
        } else {
            return false;
        }
#else
        return false;
#endif
    }
    memcpy(kernels, k, sizeof(k));
    return true;
}

static void kernels_choose(void)
{
    if (!use("avx2"))
        use("sse2"); /* else the plain loops (kernels stay NULL) */
}

bool stk__tok_widen_use(const char *isa)
{
    pthread_once(&kernels_once, kernels_choose); /* so that it no longer overrides this choice */
    return use(isa);
}

/* x[i] = s[i] and, unless y is NULL, y[i] = s[i + 1], for i < n. */
static void widen(const uint8_t *src, uint32_t width, size_t n, void *x, void *y, bool i32)
{
    if (width == (i32 ? 4u : 8u)) { /* as wide as the output: the same bits */
        memcpy(x, src, n * width);
        if (y)
            memcpy(y, src + width, n * width);
        return;
    }
    pthread_once(&kernels_once, kernels_choose);
    widen_kernel *k = width == 2 ? kernels[i32] : width == 4 && !i32 ? kernels[2] : NULL;
    size_t i = k ? k(src, n, x, y) : 0;
    widen_plain(src, width, i, n, x, i32);
    if (y)
        widen_plain(src + width, width, i, n, y, i32);
}

void stk__tok_widen(const uint8_t *src, uint32_t width, size_t n, void *dst, bool i32)
{
    widen(src, width, n, dst, NULL, i32);
}

void stk__tok_window(const uint8_t *src, uint32_t width, size_t n, void *input_ids, void *labels,
                     bool i32)
{
    widen(src, width, n, input_ids, labels, i32);
}
