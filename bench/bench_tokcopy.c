/*
 * bench_tokcopy.c: fixed windows of tokens against their ceilings (issue 26,
 * bench/bench_tokens.py): K batches of B rows of T + 1 uint16 tokens at the windows' offsets (row
 * r at token r * T), one thread, destinations rotating over 4 B-row slots as a loader's ring does.
 * Not part of the library.
 *
 *   pread   each row's 2 (T + 1) bytes pread from the file into its slot row, rows in a shuffled
 *           order (bench_tokrows.h): the bytes a loader must move
 *   widen   pread into a scratch row, then widened to int64 input_ids and labels rows of the slot
 *           in one pass: what the loader's read does per row, without the loader (built with
 *           -O3 -march=native, the compiler vectorises the loop for this machine's widest unit)
 *   mmap    each row's 2 (T + 1) bytes memcpy'd out of a read-only mapping of the file (the
 *           page cache mapped, MAP_POPULATE, and every page touched before the clock starts, so
 *           no system call nor page fault per row: the steady state of a process that touched
 *           the file before): a memcpy of the bytes a loader must move, as nanoGPT's memmap does
 *   mmap-widen  the same, widened to int64 input_ids and labels straight from the mapping
 *   mmap-first  as mmap, the mapping not populated: each page's first touch in the clock (a
 *           process's first pass over a file; on this VM a first touch costs about 2 us a page,
 *           bench/RESULTS.md issue 26 tok5)
 *   uring   the rows' bytes read as pread does, but a batch's B reads submitted to io_uring with
 *           one system call (raw syscalls, no liburing): what batching the reads would save
 *   uring-widen  the same, then widened as `widen` does
 *   memcpy  memcpy of the delivered bytes (16 per token: int64 input_ids and labels) from a hot
 *           buffer into the slot: a copy of the batch as the trainer receives it
 *   loop    the loader itself from C (stk_tokens_open of MODE: 0 windows, 1 random, 2 packed;
 *           THREADS workers, shuffled), each batch taken and released at once: its figure
 *           without Python. WARM batches are taken before the clock starts (a later epoch: the
 *           files already touched by this process); FILLS "plain" or "none" writes a packed
 *           row's computed ids with the scalar loop or not at all (its rows then wrong: the
 *           fills' share of the time, stk__tok_fill_use). STOKER_MMAP=1 in the environment:
 *           the files mapped (the default reads them).
 *
 *   cc -O3 -march=native -Iinclude -o build/bench_tokcopy bench/bench_tokcopy.c \
 *       build/libstoker.a $(LIBS)
 *   build/bench_tokcopy FILE METHOD B T K [MODE THREADS [WARM [FILLS]]]
 *       ->  "tokens/s N tokens/cpu-s M"
 *       (loop adds "consumer-us U": the CPU of the thread taking the batches, per batch)
 *
 * (LIBS: the libraries the Makefile links the CLI with.)
 */
#define _GNU_SOURCE
#include <stoker.h>

#include "bench_tokrows.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/io_uring.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

bool stk__tok_fill_use(const char *how); /* the library's, for benchmarks (stk_tokens.h) */

/* The loader over `path` from C: K batches after `warm` untimed ones; 0 or 1 on failure
 * (printed). */
static int loop(const char *path, size_t B, size_t T, long K, int mode, int threads, long warm,
                const char *fills)
{
    if (fills && !stk__tok_fill_use(fills)) {
        fprintf(stderr, "FILLS: vector, plain or none\n");
        return 2;
    }
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.paths = &path;
    o.n_paths = 1;
    o.seq_len = (uint32_t)T;
    o.mode = (uint32_t)mode;
    stk_dataset *ds;
    if (stk_tokens_open(&o, &ds) != STK_OK) {
        fprintf(stderr, "%s\n", stk_last_errmsg());
        return 1;
    }
    stk_loader_opts lo;
    stk_loader_opts_init(&lo);
    lo.dataset = ds;
    lo.batch_size = (int64_t)B;
    lo.n_threads = threads;
    lo.flags = STK_LOADER_SHUFFLE;
    stk_loader *L;
    if (stk_loader_create(&lo, &L) != STK_OK) {
        fprintf(stderr, "%s\n", stk_last_errmsg());
        return 1;
    }
    for (long k = 0; k < warm; k++) { /* untimed */
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END) {
            k--;
            continue;
        }
        if (rc != STK_OK) {
            fprintf(stderr, "%s\n", stk_loader_errmsg(L));
            return 1;
        }
        stk_batch_release(b);
    }
    long rows = 0;
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    double t0 = now(CLOCK_THREAD_CPUTIME_ID); /* this thread: the consumer's share */
    for (long k = 0; k < K; k++) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END) { /* the next epoch goes on */
            k--;
            continue;
        }
        if (rc != STK_OK) {
            fprintf(stderr, "%s\n", stk_loader_errmsg(L));
            return 1;
        }
        rows += stk_batch_n_samples(b);
        stk_batch_release(b);
    }
    double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double t = now(CLOCK_THREAD_CPUTIME_ID) - t0;
    printf("tokens/s %.0f tokens/cpu-s %.0f consumer-us %.1f\n", (double)rows * (double)T / w,
           (double)rows * (double)T / c, t / (double)K * 1e6);
    stk_loader_destroy(L);
    stk_dataset_close(ds);
    return 0;
}

/* A minimal io_uring (raw system calls): rings mapped, B reads a batch. */
typedef struct {
    int fd;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
} uring;

static int uring_open(uring *u, unsigned entries)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    u->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (u->fd < 0)
        return -1;
    size_t sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    uint8_t *sq = mmap(NULL, sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                       IORING_OFF_SQ_RING);
    uint8_t *cq = mmap(NULL, cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                       IORING_OFF_CQ_RING);
    u->sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, u->fd, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || u->sqes == MAP_FAILED)
        return -1;
    u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(cq + p.cq_off.head);
    u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    return 0;
}

/* Read n spans (dst[i], len bytes at off[i]) with one submission; 0 when all were whole. */
static int uring_reads(uring *u, int fd, uint16_t *const *dst, const uint64_t *off, size_t len,
                       unsigned n)
{
    unsigned tail = *u->sq_tail;
    for (unsigned i = 0; i < n; i++, tail++) {
        unsigned k = tail & *u->sq_mask;
        struct io_uring_sqe *e = &u->sqes[k];
        memset(e, 0, sizeof(*e));
        e->opcode = IORING_OP_READ;
        e->fd = fd;
        e->addr = (uint64_t)(uintptr_t)dst[i];
        e->len = (unsigned)len;
        e->off = off[i];
        u->sq_array[k] = k;
    }
    __atomic_store_n(u->sq_tail, tail, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, u->fd, n, n, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
        return -1;
    unsigned head = *u->cq_head, done = 0, bad = 0;
    while (done < n) {
        unsigned t = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
        for (; head != t; head++, done++)
            bad += u->cqes[head & *u->cq_mask].res != (int)len;
        __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
        if (done < n &&
            syscall(__NR_io_uring_enter, u->fd, 0, n - done, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
            return -1;
    }
    return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    if (argc != 6 && (argc < 8 || argc > 10)) {
        fprintf(stderr, "usage: bench_tokcopy FILE "
                        "pread|widen|mmap|mmap-widen|mmap-first|uring|uring-widen|memcpy|loop B T "
                        "K [MODE THREADS [WARM [FILLS]]]\n");
        return 2;
    }
    if (!strcmp(argv[2], "loop"))
        return loop(argv[1], strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10), atol(argv[5]),
                    argc >= 8 ? atoi(argv[6]) : 0, argc >= 8 ? atoi(argv[7]) : 1,
                    argc >= 9 ? atol(argv[8]) : 0, argc >= 10 ? argv[9] : NULL);
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        perror(argv[1]);
        return 1;
    }
    const char *m = argv[2];
    size_t B = strtoul(argv[3], NULL, 10), T = strtoul(argv[4], NULL, 10);
    size_t K = strtoul(argv[5], NULL, 10);
    rows_order ord = rows_order_make(((uint64_t)st.st_size / 2 - 1) / T);
    uint16_t *raw = malloc(4 * B * (T + 1) * 2);
    int64_t *out = aligned_alloc(64, 4 * B * T * 16);
    int64_t *hot = aligned_alloc(64, B * T * 16);
    memset(out, 0, 4 * B * T * 16);
    memset(hot, 1, B * T * 16);
    const uint16_t *map = NULL;
    if (!strncmp(m, "mmap", 4)) {
        /* MAP_POPULATE: mapped before the clock starts (no page fault per row: the steady
         * state of a process that already touched the file) */
        bool first = !strcmp(m, "mmap-first");
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | (first ? 0 : MAP_POPULATE),
                       fd, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        map = p;
        /* Populated is not enough on a VM with shadow page tables: each page's first touch
         * still costs (about 2 us). Touch every page before the clock: the steady state. */
        volatile uint8_t sink = 0;
        for (off_t o = 0; !first && o < st.st_size; o += 4096)
            sink ^= ((const uint8_t *)p)[o];
        (void)sink;
    }
    uring u;
    bool use_uring = !strncmp(m, "uring", 5);
    if (use_uring && uring_open(&u, (unsigned)B) < 0) {
        perror("io_uring");
        return 1;
    }
    uint16_t **dsts = malloc(B * sizeof(*dsts));
    uint64_t *offs = malloc(B * sizeof(*offs));
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    uint64_t r = 0;
    for (size_t k = 0; k < K; k++) {
        size_t slot = k % 4;
        if (!strcmp(m, "memcpy")) {
            memcpy(out + slot * B * T * 2, hot, B * T * 16);
            continue;
        }
        if (use_uring) { /* the batch's reads at once, then (uring-widen) the widening */
            for (size_t b = 0; b < B; b++, r++) {
                dsts[b] = raw + (slot * B + b) * (T + 1);
                offs[b] = rows_order_at(&ord, r) * T * 2;
            }
            if (uring_reads(&u, fd, dsts, offs, (T + 1) * 2, (unsigned)B) < 0) {
                perror("io_uring read");
                return 1;
            }
            for (size_t b = 0; strcmp(m, "uring") && b < B; b++) {
                int64_t *restrict x = out + slot * B * T * 2 + b * T, *restrict y = x + B * T;
                const uint16_t *restrict s = dsts[b];
                for (size_t j = 0; j < T; j++) {
                    x[j] = s[j];
                    y[j] = s[j + 1];
                }
            }
            continue;
        }
        for (size_t b = 0; b < B; b++, r++) {
            uint64_t row = rows_order_at(&ord, r);
            uint16_t *dst = raw + (slot * B + b) * (T + 1);
            if (map) {
                const uint16_t *s = map + row * T;
                if (!strcmp(m, "mmap") || !strcmp(m, "mmap-first")) {
                    memcpy(dst, s, (T + 1) * 2);
                } else {
                    int64_t *restrict x = out + slot * B * T * 2 + b * T, *restrict y = x + B * T;
                    for (size_t j = 0; j < T; j++) {
                        x[j] = s[j];
                        y[j] = s[j + 1];
                    }
                }
                continue;
            }
            if (pread(fd, dst, (T + 1) * 2, (off_t)(row * T * 2)) != (ssize_t)((T + 1) * 2)) {
                perror("pread");
                return 1;
            }
            if (!strcmp(m, "widen")) {
                int64_t *restrict x = out + slot * B * T * 2 + b * T, *restrict y = x + B * T;
                const uint16_t *restrict s = dst;
                for (size_t j = 0; j < T; j++) { /* one pass (-O3 -march=native vectorises it) */
                    x[j] = s[j];
                    y[j] = s[j + 1];
                }
            }
        }
    }
    double w = now(CLOCK_MONOTONIC) - w0, cpu = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    double tokens = (double)K * (double)B * (double)T;
    printf("tokens/s %.0f tokens/cpu-s %.0f check %lld\n", tokens / w, tokens / cpu,
           (long long)(out[7] + raw[5]));
    return 0;
}
