/*
 * bench_tokloop.c: a C consumer of token rows (issue 26, bench/bench_tokens.py): the loader over a
 * corpus (stk_tokens_open, B = 32, T = 2048, shuffled), K batches taken and released at once, so
 * the figure is the loader's alone, without Python. Prints tokens/s and tokens per CPU-second of
 * the process. Not part of the library.
 *
 *   cc -O2 -Iinclude -o build/bench_tokloop bench/bench_tokloop.c build/libstoker.a $(LIBS)
 *   build/bench_tokloop CORPUS MODE THREADS K    (MODE: 0 windows, 1 random, 2 packed)
 *
 * (LIBS: the libraries the Makefile links the CLI with.)
 */
#define _GNU_SOURCE
#include <stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bench_tokloop CORPUS MODE THREADS K\n");
        return 2;
    }
    const char *path = argv[1];
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.paths = &path;
    o.n_paths = 1;
    o.seq_len = 2048;
    o.mode = (uint32_t)atoi(argv[2]);
    stk_dataset *ds;
    if (stk_tokens_open(&o, &ds) != STK_OK) {
        fprintf(stderr, "%s\n", stk_last_errmsg());
        return 1;
    }
    stk_loader_opts lo;
    stk_loader_opts_init(&lo);
    lo.dataset = ds;
    lo.batch_size = 32;
    lo.n_threads = atoi(argv[3]);
    lo.flags = STK_LOADER_SHUFFLE;
    stk_loader *L;
    if (stk_loader_create(&lo, &L) != STK_OK) {
        fprintf(stderr, "%s\n", stk_last_errmsg());
        return 1;
    }
    long K = atol(argv[4]), rows = 0;
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    for (long k = 0; k < K; k++) {
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
        rows += stk_batch_size(b);
        stk_batch_release(b);
    }
    double w = now(CLOCK_MONOTONIC) - w0, c = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
    printf("tokens/s %.0f tokens/cpu-s %.0f\n", rows * 2048.0 / w, rows * 2048.0 / c);
    stk_loader_destroy(L);
    stk_dataset_close(ds);
    return 0;
}
