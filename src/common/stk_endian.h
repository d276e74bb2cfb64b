/*
 * stk_endian.h: little-endian loads and stores. Every integer of a file format is read and
 * written through these, never through a cast struct, so the code is independent of host byte
 * order and of struct padding.
 */
#ifndef STK_ENDIAN_H
#define STK_ENDIAN_H

#include <stdint.h>

static inline uint32_t stk__ld32(const void *p)
{
    const uint8_t *b = p;
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static inline uint64_t stk__ld64(const void *p)
{
    const uint8_t *b = p;
    return (uint64_t)stk__ld32(b) | (uint64_t)stk__ld32(b + 4) << 32;
}

static inline void stk__st32(void *p, uint32_t v)
{
    uint8_t *b = p;
    b[0] = (uint8_t)v;
    b[1] = (uint8_t)(v >> 8);
    b[2] = (uint8_t)(v >> 16);
    b[3] = (uint8_t)(v >> 24);
}

static inline void stk__st64(void *p, uint64_t v)
{
    stk__st32(p, (uint32_t)v);
    stk__st32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

#endif /* STK_ENDIAN_H */
