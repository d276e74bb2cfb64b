/*
 * stk_util.c: version, dtype facts, CPU count and clock.
 */
#include "stk_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

unsigned stk_version_number(void)
{
    return STK_VERSION_NUMBER;
}

const char *stk_version_string(void)
{
    return STK_VERSION_STRING;
}

size_t stk_dtype_size(stk_dtype dtype)
{
    switch (dtype) {
    case STK_DTYPE_UINT8:
    case STK_DTYPE_INT8:
        return 1;
    case STK_DTYPE_INT16:
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16:
        return 2;
    case STK_DTYPE_INT32:
    case STK_DTYPE_FLOAT32:
        return 4;
    case STK_DTYPE_INT64:
    case STK_DTYPE_FLOAT64:
        return 8;
    }
    return 0;
}

const char *stk_dtype_name(stk_dtype dtype)
{
    switch (dtype) {
    case STK_DTYPE_UINT8:
        return "uint8";
    case STK_DTYPE_INT8:
        return "int8";
    case STK_DTYPE_INT16:
        return "int16";
    case STK_DTYPE_INT32:
        return "int32";
    case STK_DTYPE_INT64:
        return "int64";
    case STK_DTYPE_FLOAT16:
        return "float16";
    case STK_DTYPE_BFLOAT16:
        return "bfloat16";
    case STK_DTYPE_FLOAT32:
        return "float32";
    case STK_DTYPE_FLOAT64:
        return "float64";
    }
    return "unknown";
}

const char *stk_field_kind_name(stk_field_kind kind)
{
    switch (kind) {
    case STK_FIELD_BYTES:
        return "bytes";
    case STK_FIELD_INT64:
        return "int64";
    case STK_FIELD_FLOAT32:
        return "float32";
    case STK_FIELD_ARRAY:
        return "array";
    }
    return "unknown";
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static uint32_t cpu_count;

/* Read the CPU count once; the affinity mask wins over the online count (containers, taskset). */
static void cpu_init(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    cpu_count = n > 0 ? (uint32_t)n : 1;
}

uint32_t stk__cpu_count(void)
{
    pthread_once(&cpu_once, cpu_init);
    return cpu_count;
}

uint64_t stk__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool stk__write_full(int fd, const void *buf, size_t size)
{
    const uint8_t *p = buf;
    while (size > 0) {
        ssize_t n = stk__fault_write_hit(size) ? -1 : write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            return false;
        }
        p += n;
        size -= (size_t)n;
    }
    return true;
}

bool stk__opts_load(void *dst, size_t dst_size, const void *src)
{
    size_t n;
    if (!src)
        return false;
    memcpy(&n, src, sizeof(n));
    if (n < STK__STRUCT_MIN)
        return false;
    memcpy(dst, src, STK_MIN(n, dst_size)); /* a newer, longer struct: the fields we know */
    memcpy(dst, &dst_size, sizeof(dst_size));
    return true;
}

bool stk__out_store(void *dst, const void *full, size_t full_size)
{
    size_t n;
    if (!dst)
        return false;
    memcpy(&n, dst, sizeof(n));
    if (n < STK__STRUCT_MIN)
        return false;
    n = STK_MIN(n, full_size);
    memcpy(dst, full, n);
    memcpy(dst, &n, sizeof(n));
    return true;
}

void stk__init_store(void *dst, size_t dst_size, const void *full, size_t full_size)
{
    size_t n = STK_MIN(dst_size, full_size);
    if (!dst || n < sizeof(size_t))
        return;
    memcpy(dst, full, n);
    memcpy(dst, &n, sizeof(n));
}

bool stk__elem_load(void *dst, size_t dst_size, const void *array, size_t i)
{
    size_t stride, n;
    if (!array)
        return false;
    memcpy(&stride, array, sizeof(stride));
    if (stride < STK__STRUCT_MIN || i > SIZE_MAX / stride)
        return false;
    const char *src = (const char *)array + i * stride;
    memcpy(&n, src, sizeof(n));
    if (n != stride) /* an element not initialised like the first */
        return false;
    return stk__opts_load(dst, dst_size, src);
}

/* Parse "8G", "512M", "1048576", "0" (binary units, optional "B"/"iB"); false if malformed. */
bool stk__parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "kmgt";
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0))
        return false;
    const char *u = *end ? strchr(units, tolower((unsigned char)*end)) : NULL;
    for (const char *k = units; u && k <= u; k++)
        v *= 1024.0;
    end += u != NULL;
    end += *end == 'i';
    end += *end == 'b' || *end == 'B';
    if (*end != '\0' || v >= 18446744073709551615.0)
        return false;
    *out = (uint64_t)v;
    return true;
}

/* ---- the running memory budget ---- */

_Thread_local stk__budget *stk__thread_budget;

bool stk__budget_fits(uint64_t limit, uint64_t fixed, uint64_t held, uint64_t grow)
{
    return fixed <= limit && held <= limit - fixed && grow <= limit - fixed - held;
}

bool stk__budget_charge(stk__budget *b, uint64_t grow)
{
    uint64_t held = atomic_load_explicit(&b->held, memory_order_relaxed);
    do {
        if (!stk__budget_fits(b->limit, b->fixed, held, grow))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&b->held, &held, held + grow,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

/* ---- image formats by their magic bytes ---- */

stk__imgfmt stk__image_magic(const uint8_t *p, size_t size)
{
    static const uint8_t jpeg[3] = {0xFF, 0xD8, 0xFF},
                         png[8] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};
    if (size >= sizeof(jpeg) && memcmp(p, jpeg, sizeof(jpeg)) == 0)
        return STK__IMG_JPEG;
    if (size >= sizeof(png) && memcmp(p, png, sizeof(png)) == 0)
        return STK__IMG_PNG;
    if (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return STK__IMG_WEBP;
    /* Classic TIFF (42) and BigTIFF (43), either byte order */
    if (size >= 4 && ((p[0] == 'I' && p[1] == 'I' && (p[2] == 42 || p[2] == 43) && p[3] == 0) ||
                      (p[0] == 'M' && p[1] == 'M' && p[2] == 0 && (p[3] == 42 || p[3] == 43))))
        return STK__IMG_TIFF;
    if (size >= 2 && p[0] == 'B' && p[1] == 'M')
        return STK__IMG_BMP;
    /* Every Netpbm type (P1-P7), so that the unsupported ones get stk_pnm.c's reason */
    if (size >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7')
        return STK__IMG_PNM;
    return STK__IMG_UNKNOWN;
}
