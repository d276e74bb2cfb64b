/*
 * bench_tokwiden.c: widening a window's uint16 ids to int64 input_ids and labels (issue 26),
 * variants side by side: the plain loops (what the library had: gcc -O2 leaves them scalar),
 * the library's stk__tok_window (its kernels: AVX2 where the CPU has it, else SSE2), one-pass
 * AVX2 and AVX-512 loops written here, and AVX2 in two passes (input_ids, then labels). B = 32
 * rows of T = 2048 tokens a batch into 4 rotating batch slots (1 MiB each, as a loader's ring),
 * from one hot buffer (the widening alone) or each row pread from FILE at the windows' offsets
 * in a shuffled order (the widening after the read, as the loader does it). Not part of the
 * library.
 *
 *   cc -O2 -Iinclude -o build/bench_tokwiden bench/bench_tokwiden.c build/libstoker.a -lpthread
 *   build/bench_tokwiden FILE plain|lib|avx2|avx512|avx2-2pass|none hot|pread K
 *     -> "tokens/cpu-s N" (none: the pread alone)
 */
#define _GNU_SOURCE
#include "bench_tokrows.h"

#include <fcntl.h>
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* the library's (src/source/tokens/stk_tokwiden.c; internal, linked from libstoker.a) */
void stk__tok_window(const uint8_t *src, uint32_t width, size_t n, void *input_ids, void *labels,
                     bool i32);

__attribute__((noinline)) static void plain1(const uint16_t *s, size_t n, int64_t *d)
{
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

static void w_plain(const uint16_t *s, size_t T, int64_t *x, int64_t *y)
{
    plain1(s, T, x);
    plain1(s + 1, T, y);
}

static void w_lib(const uint16_t *s, size_t T, int64_t *x, int64_t *y)
{
    stk__tok_window((const uint8_t *)s, 2, T, x, y, false);
}

__attribute__((noinline, target("avx2"))) static void w_avx2(const uint16_t *s, size_t T,
                                                             int64_t *x, int64_t *y)
{
    size_t i = 0;
    for (; i + 4 <= T; i += 4) {
        _mm256_storeu_si256((__m256i *)(x + i), _mm256_cvtepu16_epi64(_mm_loadl_epi64(
                                                    (const __m128i *)(const void *)(s + i))));
        _mm256_storeu_si256((__m256i *)(y + i), _mm256_cvtepu16_epi64(_mm_loadl_epi64(
                                                    (const __m128i *)(const void *)(s + i + 1))));
    }
    for (; i < T; i++) {
        x[i] = s[i];
        y[i] = s[i + 1];
    }
}

__attribute__((noinline, target("avx512f"))) static void w_avx512(const uint16_t *s, size_t T,
                                                                  int64_t *x, int64_t *y)
{
    size_t i = 0;
    for (; i + 8 <= T; i += 8) {
        _mm512_storeu_si512(
            x + i, _mm512_cvtepu16_epi64(_mm_loadu_si128((const __m128i *)(const void *)(s + i))));
        _mm512_storeu_si512(y + i, _mm512_cvtepu16_epi64(_mm_loadu_si128(
                                       (const __m128i *)(const void *)(s + i + 1))));
    }
    for (; i < T; i++) {
        x[i] = s[i];
        y[i] = s[i + 1];
    }
}

__attribute__((noinline, target("avx2"))) static void avx2_1(const uint16_t *s, size_t n,
                                                             int64_t *d)
{
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_si256((__m256i *)(d + i), _mm256_cvtepu16_epi64(_mm_loadl_epi64(
                                                    (const __m128i *)(const void *)(s + i))));
    for (; i < n; i++)
        d[i] = s[i];
}

static void w_avx2_2pass(const uint16_t *s, size_t T, int64_t *x, int64_t *y)
{
    avx2_1(s, T, x);
    avx2_1(s + 1, T, y);
}

static void w_none(const uint16_t *s, size_t T, int64_t *x, int64_t *y)
{
    (void)s, (void)T, (void)x, (void)y;
}

static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        void (*fn)(const uint16_t *, size_t, int64_t *, int64_t *);
    } v[] = {{"plain", w_plain},           {"lib", w_lib},  {"avx2", w_avx2}, {"avx512", w_avx512},
             {"avx2-2pass", w_avx2_2pass}, {"none", w_none}};
    int k = -1;
    for (int i = 0; argc == 5 && i < 6; i++)
        if (!strcmp(argv[2], v[i].name))
            k = i;
    bool pr = argc == 5 && !strcmp(argv[3], "pread");
    if (k < 0 || (!pr && strcmp(argv[3], "hot"))) {
        fprintf(stderr,
                "usage: bench_tokwiden FILE plain|lib|avx2|avx512|avx2-2pass|none hot|pread K\n");
        return 2;
    }
    if ((!strcmp(argv[2], "avx2") && !__builtin_cpu_supports("avx2")) ||
        (!strcmp(argv[2], "avx512") && !__builtin_cpu_supports("avx512f"))) {
        printf("tokens/cpu-s 0 (not on this CPU)\n");
        return 0;
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(argv[1]);
        return 1;
    }
    size_t B = 32, T = 2048, K = strtoul(argv[4], NULL, 10), slots = 4;
    rows_order ord = rows_order_make(((uint64_t)st.st_size / 2 - 1) / T);
    uint16_t *buf = aligned_alloc(64, 8192);
    int64_t *out = aligned_alloc(4096, slots * B * T * 16);
    if (!buf || !out || pread(fd, buf, (T + 1) * 2, 0) != (ssize_t)((T + 1) * 2)) {
        perror("setup");
        return 1;
    }
    memset(out, 0, slots * B * T * 16);
    double c0 = cpu_now();
    uint64_t r = 0;
    for (size_t b = 0; b < K; b++) {
        int64_t *slot = out + (b % slots) * B * T * 2;
        for (size_t j = 0; j < B; j++, r++) {
            uint64_t row = rows_order_at(&ord, r);
            if (pr && pread(fd, buf, (T + 1) * 2, (off_t)(row * T * 2)) != (ssize_t)((T + 1) * 2)) {
                perror("pread");
                return 1;
            }
            v[k].fn(buf, T, slot + j * T, slot + B * T + j * T);
        }
    }
    double cpu = cpu_now() - c0;
    int64_t *x = out + ((K - 1) % slots) * B * T * 2 + (B - 1) * T, *y = x + B * T;
    for (size_t j = 0; k != 5 && j < T; j++)
        if (x[j] != buf[j] || y[j] != buf[j + 1]) {
            fprintf(stderr, "%s: wrong id %zu\n", v[k].name, j);
            return 1;
        }
    printf("tokens/cpu-s %.0f\n", (double)K * (double)B * (double)T / cpu);
    return 0;
}
