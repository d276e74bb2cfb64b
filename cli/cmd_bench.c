/*
 * cmd_bench.c: `stoker bench DATA`: loader throughput on a dataset, and the ceiling it is judged
 * against, side by side in one process run.
 *
 * The loader run creates a loader, takes E epochs of batches as fast as they come (the consumer
 * only releases them) and reports samples/s, bytes/s, the time to the first batch and the peak
 * resident set. `--ceiling` then runs (bench_ceiling.c), on the same records and the same number
 * of threads, the work with nothing else around it: for raw records a plain memcpy of every
 * record's bytes out of memory (the records are first read into RAM); for an image recipe a
 * full-size decode of every image with libjpeg-turbo (TurboJPEG) or libspng and nothing else
 * (images in RAM); for an audio recipe libsndfile decoding every whole file to float (files in
 * RAM). The first epoch is reported apart from the later ones (the loader's first
 * includes its start-up and every image's first, checked read; bench_ceiling.c times its own).
 *
 * Lists (`--threads 1,2,4 --prefetch 2,4,8`) make a sweep: every combination is run, the ceiling
 * is measured at every thread count, and `--plot out.svg` draws throughput against threads, one
 * line per depth, with the ceiling drawn in (an SVG written here; no plotting dependency).
 */
#include "bench.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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
    char names[256];
    fprintf(f,
            "usage: stoker bench DATA... [options]\n"
            "\n"
            "Measure loader throughput on DATA (any format below: files, directories, globs,\n"
            "brace ranges or s3:// and http(s):// URLs) and, with\n"
            "--ceiling, the ceiling on the same records, in the same order, on as many threads:\n"
            "memcpy of the record bytes (raw) or a full-size decode of every image and nothing\n"
            "else (image recipes; JPEGs with libjpeg-turbo's TurboJPEG), or of every whole\n"
            "audio file with libsndfile (audio recipes). With several epochs the\n"
            "first epoch (start-up and every first read included) is reported apart from the\n"
            "later ones.\n"
            "\n"
            "options:\n"
            "  --recipe NAME       %s (default: raw)\n"
            "                      imagenet-train/-val: torchvision's ImageNet recipes;\n"
            "                      kws-train/-val: keyword spotting on audio files (a folder\n"
            "                      per class, tar members, .stk), as the speech-commands\n"
            "                      articles train: decode, Resample to 16 kHz, a 1 s random\n"
            "                      (val: centred) crop, MelSpectrogram(16000, n_mels=64),\n"
            "                      FrequencyMasking(8) and TimeMasking(20) for training\n"
            "                      (docs/audio.md; its ceiling: libsndfile decoding every\n"
            "                      whole file of the audio field)\n"
            "  --threads N         worker threads (default: one per CPU); 'auto' lets the\n"
            "                      loader choose online; a list (1,2,4) makes a sweep\n"
            "  --epochs E          epochs to run (default 1)\n"
            "  --batch-size B      samples per batch (default 256)\n"
            "  --prefetch P        batches prepared ahead of the one in use (ring slots - 1;\n"
            "                      default 3); a list (2,4,8) makes a sweep\n"
            "  --plot FILE.svg     sweep: draw samples/s against threads, with the ceiling\n"
            "  --trace FILE.json   write a Chrome/Perfetto trace of the (last) run\n"
            "  --max-samples M     stop after M samples (default: all epochs)\n"
            "  --shuffle           shuffle (seed from --seed, default 0)\n"
            "  --seed S\n"
            "  --exact             image recipes: decode exactly (full scale, PIL's IDCT and\n"
            "                      upsampling; the default for imagenet-val)\n"
            "  --fast              image recipes: the fast decode (the default for\n"
            "                      imagenet-train)\n"
            "  --no-verify         do not check record checksums (default: on first read)\n"
            "  --format NAME       DATA's format (listed below); default: detected\n"
            "  --field NAME        image recipes: the field they read (encoded image bytes or\n"
            "                      a uint8 image array); default: 'image', else the one field\n"
            "                      named or sniffed as an image, else the one uint8 image array\n"
            "  --no-stats          do not time the stages (measures what timing costs)\n"
            "  --ceiling           also measure the ceiling and print the ratio\n"
            "  --json              print one JSON object instead of a table\n"
            "  --quiet             no progress bar\n" STK_CLI_CACHE_HELP
            "  -h, --help          this help\n",
            stk_cli_recipes(names, sizeof(names)));
    stk_cli_print_formats(f);
}

/* Parse "1,2,4" into list (values >= min, at most MAX_LIST); nonzero (message printed) if bad. */
static int parse_list(const char *arg, const char *what, long long min, int *list, int *n)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof(buf), "%s", arg);
    *n = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long v;
        if (*n == MAX_LIST) {
            stk_cli_usage_error("bench", "%s: at most %d values", what, MAX_LIST);
            return 2;
        }
        if (stk_cli_parse_int(tok, what, min, 4096, &v))
            return 2;
        list[(*n)++] = (int)v;
    }
    if (*n == 0)
        return stk_cli_usage_error("bench", "%s: no value", what);
    return 0;
}

/* Parse the arguments into *a; returns 0, or the exit code to return (2 = usage). */
static int parse(int argc, char **argv, bench_args *a)
{
    static const struct option longopts[] = {
        {"recipe", required_argument, NULL, 'r'},
        {"threads", required_argument, NULL, 't'},
        {"epochs", required_argument, NULL, 'e'},
        {"batch-size", required_argument, NULL, 'b'},
        {"prefetch", required_argument, NULL, 'p'},
        {"max-samples", required_argument, NULL, 'm'},
        {"seed", required_argument, NULL, 's'},
        {"shuffle", no_argument, NULL, 'S'},
        {"exact", no_argument, NULL, 'x'},
        {"fast", no_argument, NULL, 'A'},
        {"ceiling", no_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"no-verify", no_argument, NULL, 'V'},
        {"plot", required_argument, NULL, 'P'},
        {"trace", required_argument, NULL, 'T'},
        {"no-stats", no_argument, NULL, 'N'},
        {"format", required_argument, NULL, 'F'},
        {"field", required_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        STK_CLI_CACHE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->recipe = "raw";
    a->epochs = 1;
    a->n_threads_list = a->n_prefetch_list = 1; /* 0 = library defaults */
    a->batch = 256;
    int c;
    long long v;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            a->recipe = optarg;
            break;
        case 't':
            if (strcmp(optarg, "auto") == 0) {
                a->auto_threads = true;
                a->n_threads_list = 1;
                a->threads_list[0] = 0;
            } else if (parse_list(optarg, "--threads", 0, a->threads_list, &a->n_threads_list)) {
                return 2;
            }
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
            if (parse_list(optarg, "--prefetch", 1, a->prefetch_list, &a->n_prefetch_list))
                return 2;
            break;
        case 'P':
            a->plot = optarg;
            break;
        case 'T':
            a->trace = optarg;
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
        case 'S':
            a->shuffle = true;
            break;
        case 'x':
            a->exact = true;
            break;
        case 'A':
            a->fast = true;
            break;
        case 'c':
            a->ceiling = true;
            break;
        case 'j':
            a->json = true;
            break;
        case 'q':
            a->quiet = true;
            break;
        case 'V':
            a->no_verify = true;
            break;
        case 'F':
            a->format = optarg;
            break;
        case 'f':
            a->field = optarg;
            break;
        case 'N':
            a->no_stats = true;
            break;
        case 'h':
            usage(stdout);
            return -1;
        case STK_CLI_OPT_CACHE_DIR:
        case STK_CLI_OPT_CACHE_LIMIT:
            stk_cli_cache_option(c, optarg);
            break;
        default:
            return stk_cli_getopt_error("bench", c, argv);
        }
    }
    if (optind >= argc)
        return stk_cli_usage_error("bench", "no DATA given");
    if (strcmp(a->recipe, "raw") != 0 && stk_recipe_n_ops(a->recipe) == 0) {
        char names[256];
        return stk_cli_usage_error("bench", "unknown recipe '%s' (%s)", a->recipe,
                                   stk_cli_recipes(names, sizeof(names)));
    }
    a->paths = (const char *const *)argv + optind;
    a->n_paths = (size_t)(argc - optind);
    return 0;
}

/* ---- the loader run ---- */

/* The bench's batch callback: count the samples until --epochs or --max-samples. */
typedef struct bench_run {
    const bench_args *a;
    bench_result *r;
    stk_cli_progress prog;
    double cpu0; /* process CPU seconds at the start */
} bench_run;

static int bench_batch(stk_cli_run *run, stk_batch *b, void *ctx)
{
    bench_run *br = ctx;
    bench_result *r = br->r;
    if (!b && run->epochs == 1) { /* the first epoch ended */
        r->first_epoch_samples = r->samples;
        r->first_epoch_s = run->arrived_s - run->start_s;
        r->first_epoch_cpu_s = stk_cli_process_cpu_s() - br->cpu0;
    }
    if (b) {
        if (r->samples == 0) {
            r->first_batch_s = run->arrived_s - run->start_s;
            stk_cli_progress_start(&br->prog, "bench",
                                   stk_loader_n_batches(run->loader) * (uint64_t)br->a->epochs,
                                   "batches", br->a->quiet || br->a->json);
        }
        r->samples += stk_batch_n_samples(b);
        stk_cli_progress_update(&br->prog, run->batches, 0);
    }
    return run->epochs >= (uint64_t)br->a->epochs ||
           (br->a->max_samples && r->samples >= br->a->max_samples);
}

static int run_loader(const bench_args *a, int threads, int prefetch, stk_transform *t,
                      const char *trace, bench_result *r)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.batch_size = a->batch;
    o.n_threads = threads;
    o.n_slots = prefetch ? prefetch + 1 : 0; /* 0: the library's default */
    o.trace_events = trace ? 1u << 16 : 0;
    o.seed = a->seed;
    o.rank = 0;
    o.world = 1;
    o.flags = (a->shuffle ? STK_LOADER_SHUFFLE : 0) | (a->no_verify ? STK_LOADER_NO_VERIFY : 0) |
              (a->auto_threads ? STK_LOADER_AUTOTUNE : 0) | (a->no_stats ? STK_LOADER_NO_STATS : 0);
    o.transform = t;
    o.transform_field = a->field;
    memset(r, 0, sizeof(*r));
    reset_peak_rss();
    r->rss_before_mib = proc_status_mib("VmRSS");
    stk_dataset *ds; /* opened here, with the cache options */
    int rc = stk_cli_open_data_as("bench", (char *const *)a->paths, (int)a->n_paths,
                                  a->no_verify ? STK_DATASET_NO_VERIFY : 0, a->format, &ds);
    if (rc)
        return rc;
    o.dataset = ds;
    /* The bar starts at the first batch, when the loader knows its batch count. */
    bench_run br = {.a = a, .r = r, .cpu0 = stk_cli_process_cpu_s()};
    stk_cli_run run;
    rc = stk_cli_loader_run("bench", &o, trace, &br.prog, bench_batch, &br, &run);
    r->cpu_s = stk_cli_process_cpu_s() - br.cpu0;
    stk_cli_progress_end(&br.prog);
    stk_dataset_close(ds);
    if (rc)
        return rc;
    r->seconds = run.end_s - run.start_s;
    if (run.epochs == 0) { /* stopped inside the first epoch (--max-samples) */
        r->first_epoch_samples = r->samples;
        r->first_epoch_s = r->seconds;
        r->first_epoch_cpu_s = r->cpu_s;
    }
    r->threads = run.info.n_threads;
    r->prefetch = run.info.n_slots - 1;
    r->slot_size = run.info.slot_size;
    r->ring_mib = (double)run.info.slot_size * run.info.n_slots / 1048576.0;
    r->st = run.stats;
    r->bytes = r->st.bytes_read;
    r->peak_rss_mib = proc_status_mib("VmHWM");
    if (a->auto_threads)
        r->threads = r->st.active_threads;
    return 0;
}

/* Share of the workers' thread-time per stage, and who waited, from the loader's stats. */
static void print_stages(const bench_result *r)
{
    const stk_loader_stats *st = &r->st;
    double thread_ns = (double)st->wall_ns * (r->threads ? r->threads : 1);
    if (thread_ns <= 0 || st->wall_ns == 0)
        return;
    printf("  worker time: read %.0f%%, decode %.0f%%, augment %.0f%%, other %.0f%%, waiting for a "
           "free slot %.0f%%\n",
           100.0 * st->read_ns / thread_ns, 100.0 * st->decode_ns / thread_ns,
           100.0 * st->augment_ns / thread_ns, 100.0 * st->collate_ns / thread_ns,
           100.0 * st->worker_wait_ns / thread_ns);
    printf("  consumer waited for batches %.0f%% of the time\n",
           100.0 * st->consumer_wait_ns / st->wall_ns);
    if (st->autotune_changes)
        printf("  autotune: %u threads, depth %u after %u decisions (last: %s)\n",
               st->active_threads, st->depth, st->autotune_changes, st->autotune_reason);
}

/* Loader samples per CPU second over the ceiling's (0 when a run took no measurable CPU). */
static double cpu_ratio(const bench_result *lr, const bench_result *cr)
{
    if (lr->cpu_s <= 0 || cr->cpu_s <= 0 || cr->samples == 0)
        return 0;
    return (lr->samples / lr->cpu_s) / (cr->samples / cr->cpu_s);
}

/* One part of a run (its first epoch, or the later ones): samples, wall and CPU seconds. */
typedef struct part {
    uint64_t samples;
    double seconds, cpu_s;
} part;

static part first_part(const bench_result *r)
{
    return (part){r->first_epoch_samples, r->first_epoch_s, r->first_epoch_cpu_s};
}

static part later_part(const bench_result *r)
{
    return (part){r->samples - r->first_epoch_samples, r->seconds - r->first_epoch_s,
                  r->cpu_s - r->first_epoch_cpu_s};
}

static double per_s(double n, double s)
{
    return s > 0 ? n / s : 0;
}

/* "key": {"samples": .., "seconds": .., "samples_per_s": .., "cpu_s": ..}, or null when the part
 * is empty (one epoch: no later epochs). */
static void json_part(const char *key, part p)
{
    if (p.samples == 0) {
        printf(", \"%s\": null", key);
        return;
    }
    printf(", \"%s\": {\"samples\": %" PRIu64 ", \"seconds\": %.6f, \"samples_per_s\": %.1f, "
           "\"cpu_s\": %.6f}",
           key, p.samples, p.seconds, per_s((double)p.samples, p.seconds), p.cpu_s);
}

/* The loader's part over the ceiling's, by wall clock and per CPU second ("key": null and
 * "cpu_key": null when either part is empty). */
static void json_ratio(const char *key, part l, part c)
{
    double w = per_s((double)c.samples, c.seconds), u = per_s((double)c.samples, c.cpu_s);
    double lw = per_s((double)l.samples, l.seconds), lu = per_s((double)l.samples, l.cpu_s);
    if (l.samples == 0 || c.samples == 0 || w <= 0 || u <= 0 || lu <= 0) {
        printf(", \"%s\": null, \"cpu_%s\": null", key, key);
        return;
    }
    printf(", \"%s\": %.4f, \"cpu_%s\": %.4f", key, lw / w, key, lu / u);
}

/* A text line for one part of the run, with its ratio to the same part of the ceiling's. */
static void print_part(const char *name, part l, const part *c)
{
    if (l.samples == 0)
        return;
    printf("  %-13s%10.1f samples/s  (%" PRIu64 " samples in %.3f s", name,
           per_s((double)l.samples, l.seconds), l.samples, l.seconds);
    if (c && c->samples && c->seconds > 0 && c->cpu_s > 0 && l.cpu_s > 0)
        printf("; / ceiling %.3f, per CPU second %.3f",
               per_s((double)l.samples, l.seconds) / per_s((double)c->samples, c->seconds),
               per_s((double)l.samples, l.cpu_s) / per_s((double)c->samples, c->cpu_s));
    printf(")\n");
}

static int report_single(const bench_args *a, const bench_result *lr, const bench_result *cr)
{
    double sps = lr->samples / lr->seconds, bps = lr->bytes / lr->seconds;
    const char *ckind = cr && cr->decoded ? (a->audio ? "audio decode" : "decode") : "memcpy";
    part lf = first_part(lr), ll = later_part(lr), cf = {0}, cl = {0};
    if (cr) {
        cf = first_part(cr);
        cl = later_part(cr);
    }
    if (a->json) {
        printf("{\"recipe\": \"%s\", \"exact\": %s, \"threads\": %u, \"prefetch\": %u, "
               "\"epochs\": %d, \"batch_size\": %" PRId64 ", \"samples\": %" PRIu64
               ", \"seconds\": %.6f, \"samples_per_s\": %.1f, \"bytes_per_s\": %.0f, "
               "\"first_batch_ms\": %.2f, \"rss_before_mib\": %.1f, \"peak_rss_mib\": %.1f, "
               "\"ring_mib\": %.1f, \"stats\": {\"read_ns\": %" PRIu64 ", \"decode_ns\": %" PRIu64
               ", \"augment_ns\": %" PRIu64 ", \"collate_ns\": %" PRIu64
               ", \"worker_wait_ns\": %" PRIu64 ", \"consumer_wait_ns\": %" PRIu64
               ", \"wall_ns\": %" PRIu64 ", \"active_threads\": %u, \"depth\": %u, "
               "\"autotune_changes\": %u, \"autotune_reason\": ",
               a->recipe, a->exact ? "true" : "false", lr->threads, lr->prefetch, a->epochs,
               a->batch, lr->samples, lr->seconds, sps, bps, lr->first_batch_s * 1e3,
               lr->rss_before_mib, lr->peak_rss_mib, lr->ring_mib, lr->st.read_ns, lr->st.decode_ns,
               lr->st.augment_ns, lr->st.collate_ns, lr->st.worker_wait_ns, lr->st.consumer_wait_ns,
               lr->st.wall_ns, lr->st.active_threads, lr->st.depth, lr->st.autotune_changes);
        stk_cli_json_string(stdout, lr->st.autotune_reason, strlen(lr->st.autotune_reason));
        printf("}, \"cpu_s\": %.6f", lr->cpu_s);
        json_part("first_epoch", lf);
        json_part("later_epochs", ll);
        if (cr) {
            printf(", \"ceiling\": {\"kind\": \"%s\", \"samples\": %" PRIu64
                   ", \"seconds\": %.6f, \"samples_per_s\": %.1f, \"bytes_per_s\": %.0f, "
                   "\"cpu_s\": %.6f",
                   ckind, cr->samples, cr->seconds, cr->samples / cr->seconds,
                   cr->bytes / cr->seconds, cr->cpu_s);
            json_part("first_epoch", cf);
            json_part("later_epochs", cl);
            printf("}, \"ratio_to_ceiling\": %.4f, \"cpu_ratio_to_ceiling\": %.4f",
                   sps / (cr->samples / cr->seconds), cpu_ratio(lr, cr));
            json_ratio("first_epoch_ratio_to_ceiling", lf, cf);
            json_ratio("later_epochs_ratio_to_ceiling", ll, cl);
        }
        printf("}\n");
        return 0;
    }
    printf("recipe %s%s, %u threads, prefetch %u, batch %" PRId64 ", %d epoch(s)\n", a->recipe,
           a->exact ? " (exact)" : "", lr->threads, lr->prefetch, a->batch, a->epochs);
    printf("  loader   %10.1f samples/s  %9.1f MB/s  (%" PRIu64 " samples in %.3f s)\n", sps,
           bps / 1e6, lr->samples, lr->seconds);
    if (a->epochs > 1) {
        print_part("first epoch", lf, cr ? &cf : NULL);
        print_part("later epochs", ll, cr ? &cl : NULL);
    }
    printf("  first batch %.2f ms; RSS %.1f MiB before, %.1f MiB peak; ring %.1f MiB\n",
           lr->first_batch_s * 1e3, lr->rss_before_mib, lr->peak_rss_mib, lr->ring_mib);
    print_stages(lr);
    if (cr)
        printf("  ceiling  %10.1f samples/s  %9.1f MB/s  (%s, same records and threads)\n"
               "  loader / ceiling = %.3f (per CPU second: %.3f)\n",
               cr->samples / cr->seconds, cr->bytes / cr->seconds / 1e6, ckind,
               sps / (cr->samples / cr->seconds), cpu_ratio(lr, cr));
    return 0;
}

/* ---- sweep and plot ---- */

static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                     "#9467bd", "#8c564b", "#e377c2", "#17becf"};

/* An SVG line chart: samples/s against threads, one line per depth, the ceiling dashed. */
static int write_plot(const bench_args *a, const double *sps, const double *ceil_sps)
{
    FILE *f = fopen(a->plot, "w");
    if (!f)
        return stk_cli_error("bench", "%s: cannot write the plot", a->plot);
    const int W = 720, H = 440, L = 80, R = 170, T = 50, B = 60;
    int nt = a->n_threads_list, np = a->n_prefetch_list;
    double ymax = 0;
    int xmax = 1;
    for (int i = 0; i < nt; i++) {
        xmax = a->threads_list[i] > xmax ? a->threads_list[i] : xmax;
        ymax = ceil_sps[i] > ymax ? ceil_sps[i] : ymax;
        for (int j = 0; j < np; j++)
            ymax = sps[i * np + j] > ymax ? sps[i * np + j] : ymax;
    }
    ymax = ymax > 0 ? ymax * 1.1 : 1;
#define PX(t) (L + (double)(t) / xmax * (W - L - R))
#define PY(v) (T + (1.0 - (v) / ymax) * (H - T - B))
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"25\" font-size=\"15\">stoker bench: %s, batch %" PRId64 "</text>\n",
            W, H, L, a->recipe, a->batch);
    for (int k = 0; k <= 5; k++) { /* y grid and labels */
        double v = ymax * k / 5;
        fprintf(f,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
                L, PY(v), W - R, PY(v), L - 6, PY(v) + 4, v);
    }
    for (int i = 0; i < nt; i++) /* x ticks at the measured thread counts */
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%d</text>\n",
                PX(a->threads_list[i]), H - B + 18, a->threads_list[i]);
    fprintf(f,
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n"
            "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">worker threads</text>\n"
            "<text x=\"18\" y=\"%d\" transform=\"rotate(-90 18 %d)\" "
            "text-anchor=\"middle\">samples/s</text>\n",
            L, H - B, W - R, H - B, L, T, L, H - B, (L + W - R) / 2, H - 15, (T + H - B) / 2,
            (T + H - B) / 2);
    for (int j = 0; j <= np; j++) { /* one polyline per depth, then the ceiling */
        const char *color = j < np ? colors[j % 8] : "black";
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", color,
                j < np ? "" : " stroke-dasharray=\"6,4\"");
        for (int i = 0; i < nt; i++)
            fprintf(f, "%.1f,%.1f ", PX(a->threads_list[i]),
                    PY(j < np ? sps[i * np + j] : ceil_sps[i]));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < nt; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                    PX(a->threads_list[i]), PY(j < np ? sps[i * np + j] : ceil_sps[i]), color);
        int ly = T + 10 + j * 20;
        fprintf(f,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                "<text x=\"%d\" y=\"%d\">",
                W - R + 15, ly, W - R + 40, ly, color, j < np ? "" : " stroke-dasharray=\"6,4\"",
                W - R + 46, ly + 4);
        if (j < np)
            fprintf(f, "prefetch %d</text>\n", a->prefetch_list[j]);
        else
            fprintf(f, "%s ceiling</text>\n", strcmp(a->recipe, "raw") ? "decode" : "memcpy");
    }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        return stk_cli_error("bench", "%s: write failed", a->plot);
    return 0;
}

/* Run every (threads, prefetch) combination, the ceiling at every thread count; print a table
 * (or JSON) and draw the plot. */
static int run_sweep(const bench_args *a, stk_transform *t)
{
    int nt = a->n_threads_list, np = a->n_prefetch_list;
    double sps[MAX_LIST * MAX_LIST], ceil_sps[MAX_LIST];
    bench_result r, cr;
    if (a->json)
        printf("{\"recipe\": \"%s\", \"batch_size\": %" PRId64 ", \"runs\": [", a->recipe,
               a->batch);
    else
        printf("%-8s %-9s %14s %14s %10s\n", "threads", "prefetch", "samples/s", "ceiling",
               "ratio");
    for (int i = 0; i < nt; i++) {
        for (int j = 0; j < np; j++) {
            bool last = i == nt - 1 && j == np - 1;
            if (run_loader(a, a->threads_list[i], a->prefetch_list[j], t, last ? a->trace : NULL,
                           &r))
                return 1;
            sps[i * np + j] = r.samples / r.seconds;
            if (j == 0 && stk_bench_run_ceiling(a, r.threads, r.slot_size, &cr))
                return 1;
            if (j == 0)
                ceil_sps[i] = cr.samples / cr.seconds;
            if (a->json)
                printf("%s\n{\"threads\": %u, \"prefetch\": %u, \"samples_per_s\": %.1f, "
                       "\"ceiling_samples_per_s\": %.1f, \"consumer_wait\": %.4f}",
                       i || j ? "," : "", r.threads, r.prefetch, sps[i * np + j], ceil_sps[i],
                       r.st.wall_ns ? (double)r.st.consumer_wait_ns / r.st.wall_ns : 0.0);
            else
                printf("%-8u %-9u %14.1f %14.1f %10.3f\n", r.threads, r.prefetch, sps[i * np + j],
                       ceil_sps[i], sps[i * np + j] / ceil_sps[i]);
            fflush(stdout);
        }
    }
    if (a->json)
        printf("\n]}\n");
    return a->plot ? write_plot(a, sps, ceil_sps) : 0;
}

int stk_cmd_bench(int argc, char **argv)
{
    bench_args a;
    int rc = parse(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    stk_transform *t = NULL;
    if (strcmp(a.recipe, "raw") != 0 &&
        (rc = stk_cli_recipe("bench", a.recipe, a.exact, a.fast, &t, &a.exact)))
        return rc;
    a.audio = t && stk_transform_media(t) == STK_MEDIA_AUDIO;
    if (a.n_threads_list > 1 || a.n_prefetch_list > 1 || a.plot) {
        if (a.auto_threads) {
            stk_transform_destroy(t);
            return stk_cli_usage_error("bench", "--threads auto cannot be swept or plotted");
        }
        rc = run_sweep(&a, t);
        stk_transform_destroy(t);
        return rc;
    }
    bench_result lr, cr;
    rc = run_loader(&a, a.threads_list[0], a.prefetch_list[0], t, a.trace, &lr);
    if (rc == 0 && a.ceiling)
        rc = stk_bench_run_ceiling(&a, lr.threads, lr.slot_size, &cr);
    stk_transform_destroy(t);
    if (rc)
        return rc;
    return report_single(&a, &lr, a.ceiling ? &cr : NULL);
}
