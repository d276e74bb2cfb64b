/*
 * bench_firsttouch.c: what writing fresh memory costs on this machine, the price a loader's ring
 * pays in its first epoch (every slot is written for the first time) and the reason its slots of
 * 2 MiB or more ask for transparent huge pages (src/batch/stk_pinned.c, issue 29). For each round:
 * mmap MB of anonymous memory, optionally madvise(MADV_HUGEPAGE), memset it (the first touch: a
 * page fault per page, the kernel zeroing the page, and on a VM whatever the host does to back
 * the page), memset it again (the same stores on memory already there), munmap. Prints GB/s of
 * both passes, wall clock. Not part of the library; the figures are in bench/RESULTS.md.
 *
 *   cc -O2 -o build/bench_firsttouch bench/bench_firsttouch.c
 *   build/bench_firsttouch MB ROUNDS
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One round: GB/s of the first and the second pass over `n` fresh bytes. */
static int round_gbs(size_t n, int huge, double *first, double *second)
{
    unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    if (huge)
        (void)madvise(p, n, MADV_HUGEPAGE); /* a hint, as in stk_pinned.c */
    double t0 = now_s();
    memset(p, 1, n);
    double t1 = now_s();
    memset(p, 2, n);
    double t2 = now_s();
    /* Read one byte back so the stores cannot be dropped. */
    int ok = p[n / 2] == 2;
    munmap(p, n);
    *first = (double)n / (t1 - t0) / 1e9;
    *second = (double)n / (t2 - t1) / 1e9;
    return ok ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0) {
        fprintf(stderr, "usage: bench_firsttouch MB ROUNDS\n");
        return 2;
    }
    size_t n = (size_t)atoi(argv[1]) << 20;
    int rounds = atoi(argv[2]);
    for (int r = 0; r < rounds; r++)
        for (int huge = 0; huge < 2; huge++) { /* 4 KiB and 2 MiB pages alternate */
            double first, second;
            if (round_gbs(n, huge, &first, &second) < 0) {
                fprintf(stderr, "bench_firsttouch: mmap of %zu MB failed\n", n >> 20);
                return 1;
            }
            printf("%s pages, %zu MB: first touch %.3f GB/s, second pass %.3f GB/s\n",
                   huge ? "2 MiB" : "4 KiB", n >> 20, first, second);
        }
    return 0;
}
