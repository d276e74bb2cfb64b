/*
 * bench_dsread.c: the `.stk` read path without the loader (issue 15, raw records against memcpy):
 * stk_dataset_read of every record in the loader's shuffled order (stk_sampler_index, seed 0),
 * no checksums, into SLOTS rotating destinations of 64 rows each (one slot: what a bare loop
 * would use; two: what a double-buffered loader writes through), 10 epochs; prints GB per CPU
 * second (this process's CPU time) of the best epoch and of all 10. Not part of the library; the
 * figures are in bench/RESULTS.md.
 *
 *   cc -O2 -Iinclude -o build/bench_dsread bench/bench_dsread.c build/libstoker.a $(LIBS)
 *   build/bench_dsread FILE.stk [SLOTS]
 *
 * (LIBS: the libraries the Makefile links the CLI with.)
 */
#define _GNU_SOURCE
#define STK_BUILDING_BLOCKS /* stk_sampler_index */
#include <stoker.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_dsread FILE.stk [SLOTS]\n");
        return 2;
    }
    const char *paths[1] = {argv[1]};
    size_t slots = argc > 2 ? (size_t)atol(argv[2]) : 1;
    stk_dataset *ds;
    if (slots < 1 || stk_dataset_open(paths, 1, STK_DATASET_NO_VERIFY, &ds) != STK_OK) {
        fprintf(stderr, "bench_dsread: %s\n", slots < 1 ? "SLOTS must be >= 1" : stk_last_errmsg());
        return 1;
    }
    uint64_t n = stk_dataset_n_records(ds);
    size_t max = stk_dataset_max_record_size(ds);
    size_t row = (max + 63) & ~(size_t)63, rows = 64 * slots;
    void *mem = NULL;
    if (posix_memalign(&mem, 64, row * rows) != 0) {
        fprintf(stderr, "bench_dsread: out of memory\n");
        return 1;
    }
    uint8_t *dst = mem;
    memset(dst, 0, row * rows); /* mapped before any timing */
    double best = 1e30, all = 0.0;
    uint64_t bytes = 0;
    for (uint64_t e = 0; e < 10; e++) {
        double t0 = cpu_seconds();
        bytes = 0;
        for (uint64_t k = 0; k < n; k++) {
            stk_record rec;
            stk_record_init(&rec);
            uint64_t i = stk_sampler_index(n, true, 0, e, k);
            if (stk_dataset_read(ds, i, dst + (k % rows) * row, max, &rec) != 0) {
                fprintf(stderr, "bench_dsread: %s\n", stk_last_errmsg());
                return 1;
            }
            bytes += rec.size;
        }
        double t = cpu_seconds() - t0;
        best = t < best ? t : best;
        all += t;
    }
    printf("stk_dataset_read, %zu slot(s) of 64 rows: %.2f GB per CPU second (best epoch), %.2f "
           "(all 10)\n",
           slots, (double)bytes / best / 1e9, (double)bytes * 10 / all / 1e9);
    free(mem);
    stk_dataset_close(ds);
    return 0;
}
