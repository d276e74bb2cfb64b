/*
 * stk_crc32c.c: CRC32C (Castagnoli) for the TFRecord source: slicing-by-8 tables built once
 * (pthread_once), and SSE4.2's crc32 instruction on three interleaved streams where the CPU has it
 * (checked at run time), giving the same values (tests/unit/source/tfrecord/test_tfrecord.c
 * compares both).
 */
#include "common/stk_endian.h"
#include "source/tfrecord/stk_tfrecord.h"

#include <pthread.h>
#include <string.h>

/* ---- CRC32C ---- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_has_hw;

/* Shifting a CRC over n zero bytes is linear: a 32x32 GF(2) matrix, applied through four
 * 256-entry tables (Mark Adler's crc32c.c). The hardware path runs three independent CRCs over
 * three adjacent blocks (the instruction's latency is 3 cycles, its throughput 1) and joins them
 * with these shifts. */
#define CRC_LONG 8192
#define CRC_SHORT 256
static uint32_t crc_long[4][256], crc_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = gf2_times(mat, mat[n]);
}

/* Tables applying the operator that shifts a CRC over len zero bytes. */
static void crc_zeros(uint32_t zeros[4][256], size_t len)
{
    uint32_t even[32], odd[32], row = 1;
    odd[0] = 0x82F63B78u;
    for (int n = 1; n < 32; n++, row <<= 1)
        odd[n] = row;
    gf2_square(even, odd); /* 2 zero bits */
    gf2_square(odd, even); /* 4 zero bits */
    const uint32_t *op = NULL;
    for (;;) { /* each square doubles: the first gives one zero byte */
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) {
            op = even;
            break;
        }
        gf2_square(odd, even);
        len >>= 1;
        if (len == 0) {
            op = odd;
            break;
        }
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            zeros[k][n] = gf2_times(op, n << (8 * k));
}

static uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc)
{
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STK_CRC_X86 1
static inline uint64_t ld64u(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_x86(uint32_t crc, const uint8_t *p,
                                                             size_t n)
{
    uint64_t c0 = ~crc & 0xffffffffu;
    for (; n && ((uintptr_t)p & 7); n--)
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    static const size_t blocks[2] = {CRC_LONG, CRC_SHORT};
    for (int b = 0; b < 2; b++) {
        size_t L = blocks[b];
        for (; n >= 3 * L; n -= 3 * L, p += 3 * L) {
            uint64_t c1 = 0, c2 = 0;
            for (size_t i = 0; i < L; i += 8) {
                c0 = __builtin_ia32_crc32di(c0, ld64u(p + i));
                c1 = __builtin_ia32_crc32di(c1, ld64u(p + L + i));
                c2 = __builtin_ia32_crc32di(c2, ld64u(p + 2 * L + i));
            }
            uint32_t(*z)[256] = b == 0 ? crc_long : crc_short;
            c0 = crc_shift(z, (uint32_t)c0) ^ c1;
            c0 = crc_shift(z, (uint32_t)c0) ^ c2;
        }
    }
    for (; n >= 8; n -= 8, p += 8)
        c0 = __builtin_ia32_crc32di(c0, ld64u(p));
    for (; n; n--)
        c0 = __builtin_ia32_crc32qi((uint32_t)c0, *p++);
    return ~(uint32_t)c0;
}
#endif

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_zeros(crc_long, CRC_LONG);
    crc_zeros(crc_short, CRC_SHORT);
#ifdef STK_CRC_X86
    __builtin_cpu_init();
    crc_has_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t stk__crc32c_sw(uint32_t crc, const void *data, size_t n)
{
    pthread_once(&crc_once, crc_init);
    const uint8_t *p = data;
    uint32_t c = ~crc;
    for (; n >= 8; n -= 8, p += 8) { /* slicing by 8 */
        uint32_t lo = c ^ stk__ld32(p), hi = stk__ld32(p + 4);
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
    }
    for (; n; n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

bool stk__crc32c_hw(void)
{
    pthread_once(&crc_once, crc_init);
    return crc_has_hw;
}

uint32_t stk__crc32c(uint32_t crc, const void *data, size_t n)
{
#ifdef STK_CRC_X86
    if (stk__crc32c_hw())
        return crc32c_x86(crc, data, n);
#endif
    return stk__crc32c_sw(crc, data, n);
}
