/*
 * bench_readpath.c: ways of getting random ~100 KB records out of a page-cached file into a
 * ring-like destination, per CPU second (issue 15: raw records against memcpy). Not part of the
 * library; the figures are in bench/RESULTS.md.
 *
 *   cc -O2 -pthread -o build/bench_readpath bench/bench_readpath.c [-luring -DWITH_URING]
 *   build/bench_readpath FILE METHOD THREADS EPOCHS [DST_BYTES]
 *
 * FILE is read as back-to-back records of 90-110 KB (64-byte aligned, a fixed pseudo-random
 * layout), visited in a shuffled order (another rotation each epoch), each thread taking every
 * THREADS-th record and copying it into its own DST_BYTES buffer (default 7 MB, one loader slot)
 * as the loader writes ring rows. METHOD:
 *   memcpy      the file preloaded into anonymous memory, memcpy out (stoker bench's ceiling)
 *   pread       one pread per record (the loader's path)
 *   mmap-keep   the whole file mapped, memcpy out, never unmapped (RSS grows with the file)
 *   mmap-record the whole file mapped, memcpy out, then MADV_DONTNEED on the record's pages
 *               rounded out to 64 KB (fault-around maps neighbours too): RSS bounded
 *   mmap-window the whole file mapped; each thread keeps an LRU of 8 mapped 2 MiB chunks and
 *               MADV_DONTNEEDs the chunk it evicts (RSS <= threads x 16 MiB + the destination)
 *   mmap-map    one mmap(MAP_POPULATE) + memcpy + munmap per record
 *   uring       io_uring READ_FIXED into the registered destination, 8 reads per submit
 *               (built only with -DWITH_URING -luring)
 * Prints GB per CPU second (the threads' CPU time: meaningful on a shared machine), GB per wall
 * second, peak RSS and the file pages still mapped at the end.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef WITH_URING
#include <liburing.h>
#endif

enum { M_MEMCPY, M_PREAD, M_KEEP, M_RECORD, M_WINDOW, M_MAP, M_URING };
static const char *const names[] = {"memcpy",      "pread",    "mmap-keep", "mmap-record",
                                    "mmap-window", "mmap-map", "uring"};

#define CHUNK (2u << 20)
#define WINDOW_CHUNKS 8
#define URING_BATCH 8

static int fd, method, threads, epochs, n;
static size_t fsize, dst_size = 7000000;
static uint8_t *map, *mem;
static uint64_t *off;
static uint32_t *sz, *perm;

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct job {
    int k;
    uint64_t bytes;
    double cpu;
} job;

/* Keep chunk c mapped in this thread's LRU window, unmapping the least recently used one. */
static void window_touch(uint64_t *lru, int *nl, uint64_t c)
{
    int hit = -1;
    for (int q = 0; q < *nl; q++)
        if (lru[q] == c)
            hit = q;
    if (hit < 0 && *nl == WINDOW_CHUNKS) {
        uint64_t at = lru[0] * CHUNK, len = CHUNK;
        if (at + len > fsize)
            len = fsize - at;
        madvise(map + at, len, MADV_DONTNEED);
        hit = 0;
    }
    if (hit >= 0) {
        memmove(lru + hit, lru + hit + 1, (size_t)(*nl - hit - 1) * sizeof(*lru));
        (*nl)--;
    }
    lru[(*nl)++] = c;
}

static void *run(void *arg)
{
    job *j = arg;
    uint8_t *dst = aligned_alloc(4096, (dst_size + 4095) & ~(size_t)4095);
    memset(dst, 0, dst_size);
    size_t at = 0;
    uint64_t lru[WINDOW_CHUNKS];
    int nl = 0;
#ifdef WITH_URING
    struct io_uring ring;
    int queued = 0;
    if (method == M_URING) {
        struct iovec rv = {dst, dst_size};
        if (io_uring_queue_init(32, &ring, 0) || io_uring_register_buffers(&ring, &rv, 1)) {
            fprintf(stderr, "io_uring setup failed\n");
            exit(1);
        }
    }
#endif
    double c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
    for (int e = 0; e < epochs; e++)
        for (int i = j->k; i < n; i += threads) {
            uint32_t r = perm[(i + (size_t)e * 7919) % (size_t)n];
            size_t s = sz[r];
            uint64_t o = off[r];
            if (at + s > dst_size)
                at = 0;
            uint8_t *d = dst + at;
            at += (s + 63) & ~(size_t)63;
            uint64_t a = o & ~(uint64_t)65535, b = (o + s + 65535) & ~(uint64_t)65535;
            switch (method) {
            case M_MEMCPY:
                memcpy(d, mem + o, s);
                break;
            case M_PREAD:
                if (pread(fd, d, s, (off_t)o) != (ssize_t)s) {
                    perror("pread");
                    exit(1);
                }
                break;
            case M_KEEP:
                memcpy(d, map + o, s);
                break;
            case M_RECORD:
                memcpy(d, map + o, s);
                if (b > fsize)
                    b = (fsize + 4095) & ~(uint64_t)4095;
                madvise(map + a, b - a, MADV_DONTNEED);
                break;
            case M_WINDOW:
                for (uint64_t c = o / CHUNK; c <= (o + s - 1) / CHUNK; c++)
                    window_touch(lru, &nl, c);
                memcpy(d, map + o, s);
                break;
            case M_MAP: {
                uint64_t pa = o & ~(uint64_t)4095, len = o + s - pa;
                uint8_t *m = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, (off_t)pa);
                if (m == MAP_FAILED) {
                    perror("mmap");
                    exit(1);
                }
                memcpy(d, m + (o - pa), s);
                munmap(m, len);
                break;
            }
#ifdef WITH_URING
            case M_URING: {
                struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
                io_uring_prep_read_fixed(sqe, fd, d, (unsigned)s, o, 0);
                if (++queued == URING_BATCH) {
                    io_uring_submit_and_wait(&ring, (unsigned)queued);
                    struct io_uring_cqe *cqe;
                    while (queued && io_uring_peek_cqe(&ring, &cqe) == 0) {
                        if (cqe->res < 0) {
                            fprintf(stderr, "read failed: %s\n", strerror(-cqe->res));
                            exit(1);
                        }
                        io_uring_cqe_seen(&ring, cqe);
                        queued--;
                    }
                }
                break;
            }
#endif
            }
            j->bytes += s;
        }
    j->cpu = clock_s(CLOCK_THREAD_CPUTIME_ID) - c0;
    free(dst);
    return NULL;
}

static long status_kib(const char *key)
{
    char line[256];
    long v = 0;
    size_t k = strlen(key);
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, k) == 0 && line[k] == ':')
            v = atol(line + k + 1);
    if (f)
        fclose(f);
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s FILE METHOD THREADS EPOCHS [DST_BYTES]\n", argv[0]);
        return 2;
    }
    method = -1;
    for (int m = 0; m <= M_URING; m++)
        if (strcmp(argv[2], names[m]) == 0)
            method = m;
#ifndef WITH_URING
    if (method == M_URING)
        method = -1;
#endif
    threads = atoi(argv[3]);
    epochs = atoi(argv[4]);
    if (argc > 5)
        dst_size = strtoull(argv[5], NULL, 0);
    if (method < 0 || threads < 1 || threads > 64 || epochs < 1 || dst_size < 200000) {
        fprintf(stderr, "bad arguments (method: memcpy pread mmap-keep mmap-record mmap-window "
                        "mmap-map uring)\n");
        return 2;
    }
    struct stat st;
    if ((fd = open(argv[1], O_RDONLY)) < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 1;
    }
    fsize = (size_t)st.st_size;
    size_t cap = fsize / 90000 + 1;
    off = malloc(cap * sizeof(*off));
    sz = malloc(cap * sizeof(*sz));
    perm = malloc(cap * sizeof(*perm));
    uint64_t x = 88172645463325252ull;
    for (uint64_t o = 0;;) { /* xorshift64: the same layout and order on every run */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t s = 90000 + (uint32_t)(x % 20001);
        if (o + s > fsize)
            break;
        off[n] = o;
        sz[n] = s;
        perm[n] = (uint32_t)n;
        n++;
        o += (s + 63) & ~(uint64_t)63;
    }
    for (int i = n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int k = (int)(x % (uint64_t)(i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    if (method == M_MEMCPY) {
        mem = malloc(fsize);
        if (!mem || pread(fd, mem, fsize, 0) != (ssize_t)fsize) {
            fprintf(stderr, "cannot preload %s\n", argv[1]);
            return 1;
        }
    } else if (method == M_KEEP || method == M_RECORD || method == M_WINDOW) {
        map = mmap(NULL, fsize, PROT_READ, MAP_SHARED, fd, 0);
        if (map == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
    }
    pthread_t tid[64];
    job jobs[64];
    double t0 = clock_s(CLOCK_MONOTONIC);
    for (int k = 0; k < threads; k++) {
        jobs[k] = (job){.k = k};
        pthread_create(&tid[k], NULL, run, &jobs[k]);
    }
    uint64_t bytes = 0;
    double cpu = 0;
    for (int k = 0; k < threads; k++) {
        pthread_join(tid[k], NULL);
        bytes += jobs[k].bytes;
        cpu += jobs[k].cpu;
    }
    double wall = clock_s(CLOCK_MONOTONIC) - t0;
    printf("%-11s threads %d: %6.2f GB/cpu-s %6.2f GB/s  peak RSS %ld MiB, file pages mapped at "
           "the end %ld MiB\n",
           names[method], threads, (double)bytes / cpu / 1e9, (double)bytes / wall / 1e9,
           status_kib("VmHWM") / 1024, status_kib("RssFile") / 1024);
    return 0;
}
