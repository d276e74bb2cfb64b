/*
 * bench_copyceil.c: this machine's memory-copy ceiling for one sample's copy into a loader's ring
 * (issue 24, pysleep): T threads each memcpy BLOCK-byte blocks from 64 source blocks (a dataset's
 * tensors in memory) into a ring of DST blocks (a ring larger than the last-level cache, as the
 * loader's is for 602 KB samples), for one second; prints the GB/s of all threads together and
 * the blocks (samples) per second that makes. With MODE 1 the stores are non-temporal (SSE2
 * streaming stores), to see whether skipping the destination's read-for-ownership helps here.
 * Not part of the library; the figures are in bench/RESULTS.md.
 *
 *   cc -O2 -pthread -o build/bench_copyceil bench/bench_copyceil.c
 *   build/bench_copyceil BLOCK THREADS DST [MODE]     (e.g. 602112 2 256)
 */
#include <emmintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_THREADS 16
#define N_SRC 64

static size_t block;
static int streaming;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void nt_copy(char *d, const char *s, size_t n)
{
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t k = n / 64;
    for (size_t i = 0; i < k; i++, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, n - 64 * k);
    _mm_sfence();
}

struct worker {
    char *src, *dst;
    size_t n_dst;
    double gbs;
};

static void *run(void *arg)
{
    struct worker *w = arg;
    size_t i = 0, j = 0, n = 0;
    double t0 = now(), t;
    do {
        for (int k = 0; k < 16; k++, n++) {
            if (streaming)
                nt_copy(w->dst + j * block, w->src + i * block, block);
            else
                memcpy(w->dst + j * block, w->src + i * block, block);
            i = (i + 1) % N_SRC;
            j = (j + 1) % w->n_dst;
        }
    } while ((t = now()) - t0 < 1.0);
    w->gbs = (double)n * (double)block / (t - t0) / 1e9;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench_copyceil BLOCK THREADS DST [MODE]\n");
        return 2;
    }
    block = strtoull(argv[1], NULL, 10);
    int n_threads = atoi(argv[2]);
    size_t n_dst = strtoull(argv[3], NULL, 10);
    streaming = argc > 4 && atoi(argv[4]) == 1;
    if (block == 0 || n_threads < 1 || n_threads > MAX_THREADS || n_dst == 0) {
        fprintf(stderr, "bench_copyceil: BLOCK > 0, 1 <= THREADS <= %d, DST > 0\n", MAX_THREADS);
        return 2;
    }
    pthread_t th[MAX_THREADS];
    struct worker w[MAX_THREADS];
    for (int k = 0; k < n_threads; k++) {
        w[k].n_dst = n_dst;
        w[k].src = aligned_alloc(64, N_SRC * block);
        w[k].dst = aligned_alloc(64, n_dst * block);
        if (!w[k].src || !w[k].dst) {
            fprintf(stderr, "bench_copyceil: out of memory\n");
            return 1;
        }
        memset(w[k].src, 1, N_SRC * block); /* both written once: no first-touch faults timed */
        memset(w[k].dst, 2, n_dst * block);
    }
    for (int k = 0; k < n_threads; k++)
        pthread_create(&th[k], NULL, run, &w[k]);
    double total = 0;
    for (int k = 0; k < n_threads; k++) {
        pthread_join(th[k], NULL);
        total += w[k].gbs;
    }
    printf("%s block %zu, %d thread(s), ring of %zu blocks: %.2f GB/s = %.0f blocks/s\n",
           streaming ? "streaming" : "memcpy", block, n_threads, n_dst, total,
           total * 1e9 / (double)block);
    return 0;
}
