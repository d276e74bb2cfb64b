/*
 * bench.h: what the parts of `stoker bench` share (private to the CLI). cmd_bench.c parses the
 * arguments, runs the loader and reports; bench_ceiling.c (moved out of cmd_bench.c) measures the
 * ceiling the loader is judged against. See cmd_bench.c for what is measured and why.
 */
#ifndef STK_CLI_BENCH_H
#define STK_CLI_BENCH_H

#include "cli.h"

#define MAX_LIST 16

/* The parsed command line (cmd_bench.c). */
typedef struct bench_args {
    const char *const *paths;
    size_t n_paths;
    const char *recipe; /* "raw", "imagenet-train", "imagenet-val" */
    int threads_list[MAX_LIST], prefetch_list[MAX_LIST];
    int n_threads_list, n_prefetch_list;
    bool auto_threads; /* --threads auto: STK_LOADER_AUTOTUNE, capped by the CPU count */
    const char *trace, *plot;
    const char *format; /* --format: NULL = detect */
    const char *field;  /* --field: the field the recipe reads; NULL = stk_dataset_image_field */
    int epochs;
    int64_t batch;
    uint64_t seed, max_samples;
    bool shuffle, exact, fast, ceiling, json, quiet, no_verify, no_stats; /* exact: as used */
    bool audio; /* the recipe is an audio transform (kws-train, kws-val) */
} bench_args;

/* One measured run: the loader's (cmd_bench.c) or the ceiling's (bench_ceiling.c). */
typedef struct bench_result {
    uint64_t samples, bytes;
    double seconds, first_batch_s;
    double cpu_s; /* user + system CPU time of the process during the run (all its threads) */
    /* The first epoch alone (the loader: from before create to the end of epoch 1, so with its
     * start-up; the ceiling: its first pass, its threads' CPU time); the later epochs are the
     * rest of the run */
    uint64_t first_epoch_samples;
    double first_epoch_s, first_epoch_cpu_s;
    double rss_before_mib, peak_rss_mib, ring_mib;
    size_t slot_size;
    unsigned threads, prefetch;
    stk_loader_stats st;
    bool decoded; /* the ceiling decoded images or audio (else it copied the records or arrays) */
} bench_result;

/* The ceiling on a's records (at most --max-samples of them, preloaded into memory): `threads`
 * threads decode every image of the recipe's field (JPEGs with TurboJPEG, libjpeg-turbo's own
 * decoder), or for an audio recipe every whole audio file into float samples with libsndfile
 * (bench/audio_ceiling.c's decode); a raw run, or an array field: memcpy every record's bytes
 * through a slot_size buffer; a->epochs times. Fills *r (samples, bytes, seconds, cpu_s, the first
 * epoch's, threads, decoded). Returns 0, or 1 with the error printed. */
int stk_bench_run_ceiling(const bench_args *a, unsigned threads, size_t slot_size, bench_result *r);

#endif /* STK_CLI_BENCH_H */
