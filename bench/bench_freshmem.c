/*
 * bench_freshmem.c: what one fresh ring slot costs to write on this machine, in CPU time, and
 * whether transparent huge pages took effect (issue 29, first5). Maps MB of anonymous memory
 * (2 MiB aligned), MODE 0: 4 KiB pages, 1: madvise(MADV_HUGEPAGE) as src/batch/stk_pinned.c does
 * for ring slots, 2: the same and MADV_POPULATE_WRITE before the stores; memsets it twice and
 * prints both passes' rates, the first pass's CPU seconds (getrusage) and the mapping's
 * AnonHugePages from /proc/self/smaps. Run it twice with a pause between to see what memory freed
 * by the previous process costs (`bench_freshmem 147 1; sleep 3; bench_freshmem 147 1`). Not part
 * of the library; the figures are in bench/RESULTS.md.
 *
 *   cc -O2 -o build/bench_freshmem bench/bench_freshmem.c
 *   build/bench_freshmem MB MODE
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/* AnonHugePages (kB) of the mapping holding p, or -1. */
static long anon_huge_kb(const void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    unsigned long lo, hi;
    int in = 0;
    long kb = -1;
    while (fgets(line, sizeof(line), f)) {
        char c;
        if (sscanf(line, "%lx-%lx %c", &lo, &hi, &c) == 3) {
            in = (unsigned long)p >= lo && (unsigned long)p < hi;
            continue;
        }
        if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[2]) < 0 || atoi(argv[2]) > 2) {
        fprintf(stderr, "usage: bench_freshmem MB MODE (0: 4 KiB, 1: MADV_HUGEPAGE, 2: + "
                        "MADV_POPULATE_WRITE)\n");
        return 2;
    }
    size_t n = (size_t)atoi(argv[1]) << 20, huge = (size_t)2 << 20;
    int mode = atoi(argv[2]);
    unsigned char *m =
        mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    unsigned char *p = (unsigned char *)(((unsigned long)m + huge - 1) & ~(huge - 1));
    if (mode >= 1)
        (void)madvise(p, n, MADV_HUGEPAGE);
    double t0 = now_s(), c0 = cpu_s();
    if (mode == 2 && madvise(p, n, MADV_POPULATE_WRITE) != 0)
        perror("madvise(MADV_POPULATE_WRITE)");
    memset(p, 1, n);
    double t1 = now_s(), c1 = cpu_s();
    memset(p, 2, n);
    double t2 = now_s();
    printf("mode %d, %zu MB: first write %.3f GB/s (%.3f CPU s, %.3f s wall), second %.2f GB/s, "
           "AnonHugePages %ld kB, byte %d\n",
           mode, n >> 20, (double)n / (t1 - t0) / 1e9, c1 - c0, t1 - t0,
           (double)n / (t2 - t1) / 1e9, anon_huge_kb(p), p[n / 2]);
    return 0;
}
