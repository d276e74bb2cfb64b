/*
 * cmd_bench.c: `stoker bench DATA`: loader throughput on a dataset, and the ceiling it is judged
 * against, side by side in one process run.
 *
 * The loader run creates a loader, takes E epochs of batches as fast as they come (the consumer
 * only releases them) and reports samples/s, bytes/s, the time to the first batch and the peak
 * resident set. `--ceiling` then runs, on the same records and the same number of threads, the
 * work with nothing else around it: for raw records a plain memcpy of every record's bytes out
 * of memory (the records are first read into RAM); for an image recipe a full-size decode of
 * every image with libjpeg-turbo/libspng and nothing else (stk_decoder_decode, images in RAM).
 */
#include "cli.h"

#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_args {
    const char *const *paths;
    size_t n_paths;
    const char *recipe; /* "raw", "imagenet-train", "imagenet-val" */
    int threads, epochs, prefetch;
    int64_t batch;
    uint64_t seed, max_samples;
    bool shuffle, exact, ceiling, json, quiet, no_verify;
} bench_args;

typedef struct bench_result {
    uint64_t samples, bytes;
    double seconds, first_batch_s;
    double rss_before_mib, peak_rss_mib, ring_mib;
    size_t slot_size;
    unsigned threads;
} bench_result;

/* A line of /proc/self/status in MiB ("VmRSS", "VmHWM"), or 0. */
static double proc_status_mib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = 0;
    size_t n = strlen(key);
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = strtod(line + n + 1, NULL) / 1024.0;
            break;
        }
    fclose(f);
    return v;
}

/* Reset the peak-RSS counter so VmHWM measures from here (Linux >= 4.0; harmless otherwise). */
static void reset_peak_rss(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: stoker bench DATA... [options]\n"
            "\n"
            "Measure loader throughput on DATA (.stk files, directories or globs) and, with\n"
            "--ceiling, the ceiling on the same records and threads: memcpy of the record bytes\n"
            "(raw) or a full-size decode of every image and nothing else (image recipes).\n"
            "\n"
            "options:\n"
            "  --recipe NAME       raw (default), imagenet-train or imagenet-val\n"
            "  --threads N         worker threads (default: one per CPU)\n"
            "  --epochs E          epochs to run (default 1)\n"
            "  --batch-size B      samples per batch (default 256)\n"
            "  --prefetch P        ring slots (default 4)\n"
            "  --max-samples M     stop after M samples (default: all epochs)\n"
            "  --shuffle           shuffle (seed from --seed, default 0)\n"
            "  --seed S\n"
            "  --exact             image recipes: decode at full scale (no DCT downscaling)\n"
            "  --no-verify         do not check record checksums (default: on first read)\n"
            "  --ceiling           also measure the ceiling and print the ratio\n"
            "  --json              print one JSON object instead of a table\n"
            "  --quiet             no progress bar\n"
            "  -h, --help          this help\n");
}

/* Parse the arguments into *a; returns 0, or the exit code to return (2 = usage). */
static int parse(int argc, char **argv, bench_args *a)
{
    static const struct option longopts[] = {
        {"recipe", required_argument, NULL, 'r'},   {"threads", required_argument, NULL, 't'},
        {"epochs", required_argument, NULL, 'e'},   {"batch-size", required_argument, NULL, 'b'},
        {"prefetch", required_argument, NULL, 'p'}, {"max-samples", required_argument, NULL, 'm'},
        {"seed", required_argument, NULL, 's'},     {"shuffle", no_argument, NULL, 'S'},
        {"exact", no_argument, NULL, 'x'},          {"ceiling", no_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},           {"quiet", no_argument, NULL, 'q'},
        {"no-verify", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->recipe = "raw";
    a->epochs = 1;
    a->batch = 256;
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r': a->recipe = optarg; break;
        case 't':
            if (stk_cli_parse_int(optarg, "--threads", 0, 4096, &v))
                return 2;
            a->threads = (int)v;
            break;
        case 'e':
            if (stk_cli_parse_int(optarg, "--epochs", 1, 1000000, &v))
                return 2;
            a->epochs = (int)v;
            break;
        case 'b':
            if (stk_cli_parse_int(optarg, "--batch-size", 1, 1 << 24, &v))
                return 2;
            a->batch = v;
            break;
        case 'p':
            if (stk_cli_parse_int(optarg, "--prefetch", 1, 4096, &v))
                return 2;
            a->prefetch = (int)v;
            break;
        case 'm':
            if (stk_cli_parse_int(optarg, "--max-samples", 1, INT64_MAX, &v))
                return 2;
            a->max_samples = (uint64_t)v;
            break;
        case 's':
            if (stk_cli_parse_int(optarg, "--seed", 0, INT64_MAX, &v))
                return 2;
            a->seed = (uint64_t)v;
            break;
        case 'S': a->shuffle = true; break;
        case 'x': a->exact = true; break;
        case 'c': a->ceiling = true; break;
        case 'j': a->json = true; break;
        case 'q': a->quiet = true; break;
        case 'V': a->no_verify = true; break;
        case 'h': usage(stdout); return -1;
        default: return stk_cli_getopt_error("bench", c, argv);
        }
    }
    if (optind >= argc)
        return stk_cli_usage_error("bench", "no DATA given");
    if (strcmp(a->recipe, "raw") != 0 && strcmp(a->recipe, "imagenet-train") != 0 &&
        strcmp(a->recipe, "imagenet-val") != 0) {
        return stk_cli_usage_error("bench", "unknown recipe '%s' (raw, imagenet-train, "
                                   "imagenet-val)", a->recipe);
    }
    a->paths = (const char *const *)argv + optind;
    a->n_paths = (size_t)(argc - optind);
    return 0;
}

/* ---- the loader run ---- */

static int run_loader(const bench_args *a, stk_transform *t, bench_result *r)
{
    stk_loader_opts o;
    stk_loader *L;
    stk_loader_opts_init(&o);
    o.paths = a->paths;
    o.n_paths = a->n_paths;
    o.batch_size = a->batch;
    o.n_threads = a->threads;
    o.prefetch = a->prefetch;
    o.seed = a->seed;
    o.rank = 0;
    o.world = 1;
    o.flags = (a->shuffle ? STK_LOADER_SHUFFLE : 0) | (a->no_verify ? STK_LOADER_NO_VERIFY : 0);
    o.transform = t;
    memset(r, 0, sizeof(*r));
    reset_peak_rss();
    r->rss_before_mib = proc_status_mib("VmRSS");
    double t0 = stk_cli_now();
    stk_status rc = stk_loader_create(&o, &L);
    if (rc < 0) {
        stk_cli_error("bench", "%s", stk_last_errmsg());
        return 1;
    }
    stk_loader_info info;
    stk_loader_info_get(L, &info);
    r->threads = info.n_threads;
    r->slot_size = info.slot_size;
    r->ring_mib = (double)info.slot_size * info.prefetch / 1048576.0;
    uint64_t per_epoch = stk_loader_n_batches(L), total = per_epoch * (uint64_t)a->epochs;
    stk_cli_progress prog;
    stk_cli_progress_start(&prog, "bench", total, "batches", a->quiet || a->json);
    uint64_t done = 0;
    int epochs = 0;
    while (epochs < a->epochs && (!a->max_samples || r->samples < a->max_samples)) {
        stk_batch *b;
        rc = stk_loader_next(L, &b);
        if (rc == STK_END) {
            epochs++;
            continue;
        }
        if (rc < 0) {
            stk_cli_progress_end(&prog);
            stk_cli_error("bench", "%s", stk_loader_errmsg(L));
            stk_loader_destroy(L);
            return 1;
        }
        if (r->samples == 0)
            r->first_batch_s = stk_cli_now() - t0;
        r->samples += stk_batch_size(b);
        stk_batch_release(b);
        stk_cli_progress_update(&prog, ++done, 0);
    }
    r->seconds = stk_cli_now() - t0;
    stk_cli_progress_end(&prog);
    stk_loader_stats st;
    stk_loader_stats_get(L, &st);
    r->bytes = st.bytes_read;
    r->peak_rss_mib = proc_status_mib("VmHWM");
    stk_loader_destroy(L);
    return 0;
}

/* ---- the ceiling ---- */

typedef struct ceiling_job {
    const uint8_t *const *rec; /* record (or image) bytes in memory */
    const size_t *size;
    size_t n, first, step;     /* this thread takes records first, first+step, ... */
    int epochs;
    bool decode;
    uint8_t *dst;              /* memcpy destination, one ring slot's worth */
    size_t dst_size;
    uint64_t samples, bytes;
    int failed;
    char err[256];
} ceiling_job;

static void *ceiling_thread(void *arg)
{
    ceiling_job *j = arg;
    stk_decoder *dec = NULL;
    if (j->decode && stk_decoder_create(0, &dec) < 0) {
        snprintf(j->err, sizeof(j->err), "cannot create a decoder");
        j->failed = 1;
        return NULL;
    }
    size_t at = 0;
    for (int e = 0; e < j->epochs && !j->failed; e++)
        for (size_t i = j->first; i < j->n; i += j->step) {
            if (j->decode) {
                stk_image img;
                if (stk_decoder_decode(dec, j->rec[i], j->size[i], &img) < 0) {
                    snprintf(j->err, sizeof(j->err), "record %zu: %s", i,
                             stk_decoder_errmsg(dec));
                    j->failed = 1;
                    break;
                }
            } else {
                /* Rotate through a slot-sized buffer as the loader rotates through rows. */
                if (at + j->size[i] > j->dst_size)
                    at = 0;
                memcpy(j->dst + at, j->rec[i], j->size[i]);
                at += (j->size[i] + 63) & ~(size_t)63;
            }
            j->samples++;
            j->bytes += j->size[i];
        }
    stk_decoder_destroy(dec);
    return NULL;
}

static int run_ceiling(const bench_args *a, unsigned threads, size_t slot_size, bench_result *r)
{
    stk_dataset *ds;
    if (stk_dataset_open(a->paths, a->n_paths, 0, &ds) < 0) {
        stk_cli_error("bench", "%s", stk_last_errmsg());
        return 1;
    }
    bool decode = strcmp(a->recipe, "raw") != 0;
    int field = decode ? stk_dataset_find_field(ds, "image") : -1;
    if (decode && field < 0) {
        stk_cli_error("bench", "the dataset has no 'image' field");
        stk_dataset_close(ds);
        return 1;
    }
    uint64_t n = stk_dataset_count(ds);
    if (a->max_samples && a->max_samples < n)
        n = a->max_samples;
    size_t max = stk_dataset_max_record_size(ds);
    uint8_t **rec = calloc(n, sizeof(*rec));
    size_t *size = calloc(n, sizeof(*size));
    uint8_t *buf = malloc(max ? max : 1);
    int rc = 0;
    if (!rec || !size || !buf) {
        stk_cli_error("bench", "out of memory preloading %" PRIu64 " records", n);
        rc = 1;
        goto out;
    }
    /* Preload: the ceiling measures the work itself, not the reading. */
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        stk_record recd;
        char err[256];
        if (stk_dataset_read(ds, i, buf, max, &recd, err, sizeof(err)) < 0) {
            stk_cli_error("bench", "%s", err);
            rc = 1;
            break;
        }
        const uint8_t *src = decode ? recd.field[field] : buf;
        size[i] = decode ? recd.field_size[field] : recd.size;
        rec[i] = malloc(size[i] ? size[i] : 1);
        if (!rec[i]) {
            rc = 1;
            break;
        }
        memcpy(rec[i], src, size[i]);
    }
    if (rc)
        goto out;
    ceiling_job *jobs = calloc(threads, sizeof(*jobs));
    pthread_t *tids = calloc(threads, sizeof(*tids));
    if (!jobs || !tids) {
        free(jobs);
        free(tids);
        rc = 1;
        goto out;
    }
    double t0 = stk_cli_now();
    for (unsigned k = 0; k < threads; k++) {
        jobs[k] = (ceiling_job){.rec = (const uint8_t *const *)rec, .size = size, .n = n,
                                .first = k, .step = threads, .epochs = a->epochs,
                                .decode = decode, .dst_size = slot_size};
        if (!decode)
            jobs[k].dst = malloc(slot_size);
        pthread_create(&tids[k], NULL, ceiling_thread, &jobs[k]);
    }
    memset(r, 0, sizeof(*r));
    for (unsigned k = 0; k < threads; k++) {
        pthread_join(tids[k], NULL);
        r->samples += jobs[k].samples;
        r->bytes += jobs[k].bytes;
        if (jobs[k].failed && !rc) {
            stk_cli_error("bench", "ceiling: %s", jobs[k].err);
            rc = 1;
        }
        free(jobs[k].dst);
    }
    r->seconds = stk_cli_now() - t0;
    r->threads = threads;
    free(jobs);
    free(tids);
out:
    if (rec)
        for (uint64_t i = 0; i < n; i++)
            free(rec[i]);
    free(rec);
    free(size);
    free(buf);
    stk_dataset_close(ds);
    return rc;
}

int stk_cmd_bench(int argc, char **argv)
{
    bench_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    stk_transform *t = NULL;
    if (strcmp(a.recipe, "raw") != 0 && stk_transform_recipe(a.recipe, a.exact, &t) < 0) {
        stk_cli_error("bench", "%s", stk_last_errmsg());
        return 1;
    }
    bench_result lr, cr;
    rc = run_loader(&a, t, &lr);
    if (rc == 0 && a.ceiling)
        rc = run_ceiling(&a, lr.threads, lr.slot_size, &cr);
    stk_transform_destroy(t);
    if (rc)
        return rc;
    double sps = lr.samples / lr.seconds, bps = lr.bytes / lr.seconds;
    const char *ckind = strcmp(a.recipe, "raw") ? "decode" : "memcpy";
    if (a.json) {
        printf("{\"recipe\": \"%s\", \"exact\": %s, \"threads\": %u, \"epochs\": %d, "
               "\"batch_size\": %" PRId64 ", \"samples\": %" PRIu64 ", \"seconds\": %.6f, "
               "\"samples_per_s\": %.1f, \"bytes_per_s\": %.0f, \"first_batch_ms\": %.2f, "
               "\"rss_before_mib\": %.1f, \"peak_rss_mib\": %.1f, \"ring_mib\": %.1f",
               a.recipe, a.exact ? "true" : "false", lr.threads, a.epochs, a.batch, lr.samples,
               lr.seconds, sps, bps, lr.first_batch_s * 1e3, lr.rss_before_mib,
               lr.peak_rss_mib, lr.ring_mib);
        if (a.ceiling)
            printf(", \"ceiling\": {\"kind\": \"%s\", \"samples\": %" PRIu64
                   ", \"seconds\": %.6f, \"samples_per_s\": %.1f, \"bytes_per_s\": %.0f}, "
                   "\"ratio_to_ceiling\": %.4f",
                   ckind, cr.samples, cr.seconds, cr.samples / cr.seconds,
                   cr.bytes / cr.seconds, sps / (cr.samples / cr.seconds));
        printf("}\n");
        return 0;
    }
    printf("recipe %s%s, %u threads, batch %" PRId64 ", %d epoch(s)\n", a.recipe,
           a.exact ? " (exact)" : "", lr.threads, a.batch, a.epochs);
    printf("  loader   %10.1f samples/s  %9.1f MB/s  (%" PRIu64 " samples in %.3f s)\n", sps,
           bps / 1e6, lr.samples, lr.seconds);
    printf("  first batch %.2f ms; RSS %.1f MiB before, %.1f MiB peak; ring %.1f MiB\n",
           lr.first_batch_s * 1e3, lr.rss_before_mib, lr.peak_rss_mib, lr.ring_mib);
    if (a.ceiling)
        printf("  ceiling  %10.1f samples/s  %9.1f MB/s  (%s, same records and threads)\n"
               "  loader / ceiling = %.3f\n",
               cr.samples / cr.seconds, cr.bytes / cr.seconds / 1e6, ckind, sps /
               (cr.samples / cr.seconds));
    return 0;
}
