/*
 * cmd_doctor.c: `stoker doctor DATA`: is the training loop data-bound, by how much, where does
 * the loader spend its time, and which settings fix it. Every line of advice is driven by a
 * number measured here; nothing is printed from a fixed list.
 *
 * Three measurements, in one process:
 *  1. The ceiling: the loader alone on DATA (no step; the consumer releases each batch at once)
 *     at 1, 2, 4, ... threads up to the CPU count, plus the user's --threads. Each run gives
 *     samples/s and, from stk_loader_stats over the same window, how the workers' time splits
 *     between read, decode, augment and the rest.
 *  2. With --step-ms, the step: the loader at --threads against a consumer that spends X ms per
 *     batch, sleeping by default (a GPU step leaves the CPU to the workers) or spinning
 *     (--step-kind spin: a trainer whose step keeps one core busy). Each stk_loader_next is
 *     timed (waiting) and each step; the loader's own consumer_wait/worker_wait counters over
 *     the same window are a cross-check.
 *  3. With --python, instead of 2, the user's script under `python3 -m stoker.doctor`
 *     (python/stoker/doctor.py, the Python profiler), whose JSON report gives the step and
 *     waiting times. It runs first, so that 1 can use the batch size the script reports.
 *
 * Every run skips its first batch (thread start, empty ring): its window runs from the arrival
 * of batch 0 to the arrival of batch k, so it holds k steps, k waits and k batches. The verdict
 * and the choice of advice come from stk_diagnose (src/doctor/stk_diagnose.c, shared with
 * stoker.profile): the waiting share of the window (> 5% = data-bound) and the demand
 * (samples per step / step time) against the measured ceilings; this file words the advice.
 */
#include "doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *f)
{
    char names[256];
    fprintf(f,
            "usage: stoker doctor DATA... [--recipe R] [--step-ms X | --python SCRIPT [ARGS...]]\n"
            "                    [options]\n"
            "\n"
            "Is training data-bound, by how much, where does the loader spend its time, and\n"
            "which settings fix it? The doctor measures the loader alone on DATA (any format\n"
            "below, detected from the data: files, directories, globs, brace ranges or\n"
            "s3:// and http(s):// URLs) at 1, 2, 4, ... threads up to the CPU count (the\n"
            "ceiling), then the loader against a training step: simulated (--step-ms) or your\n"
            "own script run under the Python profiler (--python). Without either it reports\n"
            "the ceiling. Data-bound means waiting for batches more than 5%% of the time.\n"
            "\n"
            "options:\n"
            "  --recipe NAME       %s (default: raw)\n"
            "  --step-ms X         simulate a training step of X ms per batch\n"
            "  --step-kind KIND    sleep (default: the step leaves the CPU to the loader, as a\n"
            "                      GPU step does) or spin (it keeps one core busy, as CPU work\n"
            "                      in the trainer does)\n"
            "  --python SCRIPT ... run SCRIPT with the arguments after it under the profiler\n"
            "                      (python3 -m stoker.doctor; STOKER_PYTHON picks another\n"
            "                      interpreter); the script sees STOKER_DATA and STOKER_RECIPE.\n"
            "                      Must come last.\n"
            "  --batch-size B      samples per batch (default 256, or with --python the\n"
            "                      script's, as its profiler reports it)\n"
            "  --threads N         worker threads of the step run (default: one per CPU);\n"
            "                      'auto' lets the loader choose online. The ceiling is always\n"
            "                      measured at 1, 2, 4, ... threads and at N.\n"
            "  --prefetch P        batches prepared ahead of the one in use (default 3)\n"
            "  --steps S           measured batches per run (default: what --time allows);\n"
            "                      --python: steps of the script (default 100)\n"
            "  --time SEC          time budget of each ceiling run (default 1); the step run\n"
            "                      gets twice that\n"
            "  --trace FILE.json   write a Chrome/Perfetto trace of the step run (without a\n"
            "                      step: of the last ceiling run)\n"
            "  --shuffle           shuffle, as training does\n"
            "  --exact             image recipes: decode exactly (full scale, PIL's IDCT and\n"
            "                      upsampling; the default for imagenet-val, which draws no\n"
            "                      random numbers)\n"
            "  --fast              image recipes: the fast decode (the default for\n"
            "                      imagenet-train)\n"
            "  --no-verify         do not check record checksums (formats that have them)\n"
            "  --format NAME       DATA's format (listed below); default: detected\n"
            "  --json              print one JSON object instead of the report\n"
            "  --quiet             no progress bar\n"
            "  -h, --help          this help\n",
            stk_cli_recipes(names, sizeof(names)));
    stk_cli_print_formats(f);
}

/* ---- arguments ---- */

/* Find --python SCRIPT: everything after SCRIPT belongs to the script, so the options end
 * there. Sets a->script and the script's arguments; returns the argc left for getopt, or -1
 * (usage error printed). */
static int split_python(int argc, char **argv, doctor_args *a)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        bool eq = strncmp(argv[i], "--python=", 9) == 0;
        if (!eq && strcmp(argv[i], "--python") != 0)
            continue;
        if (!eq && i + 1 >= argc) {
            stk_cli_usage_error("doctor", "option '--python' needs a value");
            return -1;
        }
        a->script = eq ? argv[i] + 9 : argv[i + 1];
        a->script_args = argv + i + (eq ? 1 : 2);
        a->n_script_args = argc - i - (eq ? 1 : 2);
        if (!*a->script) {
            stk_cli_usage_error("doctor", "option '--python' needs a value");
            return -1;
        }
        return i;
    }
    return argc;
}

/* Parse a finite number in [min, max]; nonzero (usage error printed) if bad. */
static int parse_double(const char *s, const char *what, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < min || v > max)
        return stk_cli_usage_error("doctor", "%s: invalid value '%s' (expected a number in %g..%g)",
                                   what, s, min, max);
    *out = v;
    return 0;
}

/* Parse the arguments into *a; returns 0, -1 (--help printed) or the exit code (2). */
static int parse(int argc, char **argv, doctor_args *a)
{
    static const struct option longopts[] = {
        {"recipe", required_argument, NULL, 'r'},
        {"step-ms", required_argument, NULL, 'm'},
        {"step-kind", required_argument, NULL, 'k'},
        {"batch-size", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'},
        {"prefetch", required_argument, NULL, 'p'},
        {"steps", required_argument, NULL, 's'},
        {"time", required_argument, NULL, 'T'},
        {"trace", required_argument, NULL, 'R'},
        {"shuffle", no_argument, NULL, 'S'},
        {"exact", no_argument, NULL, 'x'},
        {"fast", no_argument, NULL, 'F'},
        {"no-verify", no_argument, NULL, 'V'},
        {"format", required_argument, NULL, 'f'},
        {"json", no_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    memset(a, 0, sizeof(*a));
    a->recipe = "raw";
    a->step_ms = -1;
    a->time_s = 1.0;
    int n = split_python(argc, argv, a), c;
    /* the integer options, each >= 1 */
    const struct {
        int c;
        const char *what;
        long long max, *dst;
    } ints[] = {{'b', "--batch-size", 1 << 24, &a->batch},
                {'t', "--threads", 4096, &a->threads},
                {'p', "--prefetch", 4096, &a->prefetch},
                {'s', "--steps", 100000000, &a->steps}};
    if (n < 0)
        return 2;
    optind = 1;
    while ((c = getopt_long(n, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'r':
            a->recipe = optarg;
            break;
        case 'm':
            if (parse_double(optarg, "--step-ms", 0, 1e7, &a->step_ms))
                return 2;
            break;
        case 'k':
            if (strcmp(optarg, "sleep") != 0 && strcmp(optarg, "spin") != 0)
                return stk_cli_usage_error("doctor", "--step-kind: '%s' is not sleep or spin",
                                           optarg);
            a->spin = strcmp(optarg, "spin") == 0;
            break;
        case 't':
            a->auto_threads = strcmp(optarg, "auto") == 0;
            if (a->auto_threads)
                break;
            /* fall through */
        case 'b':
        case 'p':
        case 's':
            for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
                if (ints[i].c == c &&
                    stk_cli_parse_int(optarg, ints[i].what, 1, ints[i].max, ints[i].dst))
                    return 2;
            break;
        case 'T':
            if (parse_double(optarg, "--time", 0.01, 3600, &a->time_s))
                return 2;
            break;
        case 'R':
            a->trace = optarg;
            break;
        case 'f':
            a->format = optarg;
            break;
        case 'S':
        case 'x':
        case 'F':
        case 'V':
        case 'j':
        case 'q':
            *(c == 'S'   ? &a->shuffle
              : c == 'x' ? &a->exact
              : c == 'F' ? &a->fast
              : c == 'V' ? &a->no_verify
              : c == 'j' ? &a->json
                         : &a->quiet) = true;
            break;
        case 'h':
            usage(stdout);
            return -1;
        default:
            return stk_cli_getopt_error("doctor", c, argv);
        }
    }
    if (optind >= n)
        return stk_cli_usage_error("doctor", "no DATA given");
    if (a->script && a->step_ms >= 0)
        return stk_cli_usage_error("doctor", "--step-ms and --python exclude each other: "
                                             "simulate a step or profile a script");
    if (a->script && a->trace)
        return stk_cli_usage_error("doctor", "--trace traces stoker's own step run; a script's "
                                             "stoker.Loader takes trace=\"out.json\"");
    a->mode = a->script ? MODE_PYTHON : a->step_ms >= 0 ? MODE_STEP : MODE_CEILING;
    a->paths = argv + optind;
    a->n_paths = n - optind;
    return 0;
}

/* ---- measuring ---- */

/* Spend `ms` milliseconds as the training step would: asleep, or spinning on one core. */
static void simulate_step(double ms, bool spin)
{
    if (ms <= 0)
        return;
    if (spin) {
        double end = stk_cli_now() + ms / 1e3;
        while (stk_cli_now() < end) {
        }
        return;
    }
    struct timespec ts = {(time_t)(ms / 1e3), (long)(fmod(ms, 1e3) * 1e6)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Counters of `end` minus those of `start`, clamped at 0 (gauges and the autotune reason from
 * `end`). Clamped because collate_ns is derived: a run's time is added when the run ends, its
 * stages as they happen, so between two reads it can go down by up to one run. */
static stk_loader_stats stats_delta(const stk_loader_stats *start, const stk_loader_stats *end)
{
    stk_loader_stats d = *end;
    uint64_t *dst[] = {&d.batches,         &d.samples,    &d.bytes_read, &d.skipped,
                       &d.errors,          &d.wall_ns,    &d.read_ns,    &d.decode_ns,
                       &d.augment_ns,      &d.collate_ns, &d.copy_ns,    &d.worker_wait_ns,
                       &d.consumer_wait_ns};
    const uint64_t src[] = {start->batches,         start->samples,   start->bytes_read,
                            start->skipped,         start->errors,    start->wall_ns,
                            start->read_ns,         start->decode_ns, start->augment_ns,
                            start->collate_ns,      start->copy_ns,   start->worker_wait_ns,
                            start->consumer_wait_ns};
    for (size_t i = 0; i < sizeof(src) / sizeof(src[0]); i++)
        *dst[i] = *dst[i] > src[i] ? *dst[i] - src[i] : 0;
    return d;
}

/* The window of one doctor run, kept by its batch callback. */
typedef struct run_window {
    doctor *d;
    bool autotune, measuring;
    double step_ms, budget_s, win0;
    uint64_t min_steps;
    stk_loader_stats s0;
    run_result *r;
} run_window;

/* The doctor's batch callback: the window opens at the first batch (with autotune at the first
 * one after --time seconds: its ramp-up is not the steady state judged); each later batch adds
 * its wait and the step after it. Epochs advance by themselves (b NULL): keep going. */
static int doctor_batch(stk_cli_run *run, stk_batch *b, void *ctx)
{
    run_window *x = ctx;
    run_result *r = x->r;
    const doctor_args *a = &x->d->a;
    double w1 = run->arrived_s, w = run->wait_s;
    if (x->measuring)
        r->wait_s += w;
    if (!b)
        return 0;
    if (r->first_batch_s == 0)
        r->first_batch_s = w1 - run->start_s;
    if (!x->measuring && x->autotune && w1 - run->start_s < a->time_s) {
        /* still ramping up */
    } else if (!x->measuring) { /* the first batch opens the window */
        x->measuring = true;
        x->s0.struct_size = sizeof(x->s0);
        stk_loader_stats_get(run->loader, &x->s0);
        x->win0 = w1;
        r->cpu_s = stk_cli_process_cpu_s();
    } else {
        r->steps++;
        r->samples += stk_batch_n_samples(b);
        r->waited += w > WAITED_S;
        r->max_wait_s = w > r->max_wait_s ? w : r->max_wait_s;
    }
    bool enough = a->steps ? r->steps >= (uint64_t)a->steps
                           : r->steps >= x->min_steps && w1 - x->win0 >= x->budget_s;
    if (enough) {
        r->seconds = w1 - x->win0;
        r->cpu_s = stk_cli_process_cpu_s() - r->cpu_s;
        return 1;
    }
    if (x->step_ms >= 0)
        simulate_step(x->step_ms, a->spin);
    if (x->measuring)
        r->step_s += stk_cli_now() - w1;
    stk_cli_progress_update(&x->d->prog, x->d->runs_done, 0);
    return 0;
}

/* One loader run at `threads` (autotune: an upper bound): batches as fast as they come
 * (step_ms < 0) or with a simulated step after each, until --steps measured batches or
 * `budget_s` (and at least `min_steps`). Returns 0 or 1 (error printed). */
static int run_loader(doctor *d, int threads, bool autotune, double step_ms, double budget_s,
                      uint64_t min_steps, const char *trace, run_result *r)
{
    const doctor_args *a = &d->a;
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.dataset = d->ds;
    o.batch_size = a->batch;
    o.n_threads = threads;
    o.n_slots = a->prefetch ? (int32_t)a->prefetch + 1 : 0; /* 0: the library's default */
    o.rank = 0;
    o.world = 1;
    o.transform = d->t;
    o.trace_events = trace ? 1u << 16 : 0;
    o.flags = (a->shuffle ? STK_LOADER_SHUFFLE : 0) | (a->no_verify ? STK_LOADER_NO_VERIFY : 0) |
              (autotune ? STK_LOADER_AUTOTUNE : 0);
    memset(r, 0, sizeof(*r));
    run_window x = {.d = d,
                    .autotune = autotune,
                    .step_ms = step_ms,
                    .budget_s = budget_s,
                    .min_steps = min_steps,
                    .r = r};
    stk_cli_run run;
    int rc = stk_cli_loader_run("doctor", &o, trace, &d->prog, doctor_batch, &x, &run);
    r->threads = run.info.n_threads;
    r->prefetch = run.info.n_slots - 1;
    r->st = stats_delta(&x.s0, &run.stats);
    d->runs_done++;
    stk_cli_progress_update(&d->prog, d->runs_done, 0);
    return rc;
}

/* The stage split of a run's workers. */
static stage_split split_of(const run_result *r)
{
    stage_split s = {{0}, 0, 0};
    const stk_loader_stats *st = &r->st;
    double part[4] = {(double)st->read_ns, (double)st->decode_ns, (double)st->augment_ns,
                      (double)st->collate_ns};
    double busy = part[0] + part[1] + part[2] + part[3];
    for (int i = 0; i < 4; i++) {
        s.share[i] = busy > 0 ? part[i] / busy : 0;
        if (s.share[i] > s.share[s.dominant])
            s.dominant = i;
    }
    double capacity = (double)st->wall_ns * (r->threads ? r->threads : 1);
    s.busy = capacity > 0 ? busy / capacity : 0;
    return s;
}

/* The thread counts of the ceiling: 1, 2, 4, ... below the CPU count, the CPU count, and the
 * user's --threads, ascending. */
static void plan_probes(doctor *d)
{
    int *t = d->probe_threads, n = 0;
    for (int k = 1; k < d->cpus && n < MAX_PROBES - 2; k *= 2)
        t[n++] = k;
    t[n++] = d->cpus;
    int user = (int)d->a.threads;
    if (user > 0) {
        int i = n;
        while (i > 0 && t[i - 1] > user)
            i--;
        if (i == 0 || t[i - 1] != user) {
            memmove(t + i + 1, t + i, (size_t)(n - i) * sizeof(*t));
            t[i] = user;
            n++;
        }
    }
    d->n_probes = n;
}

/* ---- main ---- */

/* Open DATA, compile the recipe, check the script: every input error before any measuring. */
static int prepare(doctor *d)
{
    doctor_args *a = &d->a;
    if (strcmp(a->recipe, "raw") != 0 &&
        stk_cli_recipe("doctor", a->recipe, a->exact, a->fast, &d->t, &a->exact))
        return 2;
    if (stk_cli_open_data_as("doctor", a->paths, a->n_paths,
                             a->no_verify ? STK_DATASET_NO_VERIFY : 0, a->format, &d->ds))
        return 1;
    if (stk_dataset_n_records(d->ds) == 0)
        return stk_cli_error("doctor", "%s: empty dataset (no records)", a->paths[0]);
    if (a->script && access(a->script, R_OK) != 0)
        return stk_cli_error("doctor", "%s: %s", a->script, strerror(errno));
    return 0;
}

static int doctor_run(doctor *d)
{
    doctor_args *a = &d->a;
    int rc = prepare(d);
    if (rc)
        return rc;
    /* The script first: the ceiling is then measured at the batch size it uses. */
    if (a->mode == MODE_PYTHON && stk_doctor_run_python(d))
        return 1;
    double script_batch = a->mode == MODE_PYTHON ? stk_cli_json_num(d->py_json, "batch_size") : NAN;
    if (a->batch == 0)
        a->batch = script_batch >= 1 && script_batch <= 1 << 24 ? (long long)script_batch : 256;
    d->cpus = (int)(stk_n_cpus() > 4096 ? 4096 : stk_n_cpus()); /* the library's count */
    plan_probes(d);
    stk_cli_progress_start(&d->prog, "doctor", (uint64_t)d->n_probes + (a->mode == MODE_STEP),
                           "runs", a->quiet || a->json);
    for (int i = 0; i < d->n_probes; i++) {
        bool trace_here = a->mode == MODE_CEILING && i == d->n_probes - 1;
        if (run_loader(d, d->probe_threads[i], false, -1, a->time_s, 2,
                       trace_here ? a->trace : NULL, &d->probe[i]))
            return 1;
        d->split[i] = split_of(&d->probe[i]);
    }
    if (a->mode == MODE_STEP) {
        int threads = a->threads ? (int)a->threads : d->cpus;
        if (run_loader(d, threads, a->auto_threads, a->step_ms, 2 * a->time_s, 3, a->trace,
                       &d->step))
            return 1;
    }
    stk_cli_progress_end(&d->prog);
    if (a->mode == MODE_STEP)
        stk_doctor_judge_step(d);
    if (a->mode == MODE_PYTHON)
        stk_doctor_judge_python(d);
    if (a->json)
        stk_doctor_print_json(d);
    else
        stk_doctor_print_report(d);
    return 0;
}

int stk_cmd_doctor(int argc, char **argv)
{
    doctor *d = calloc(1, sizeof(*d));
    if (!d)
        return stk_cli_error("doctor", "out of memory");
    int rc = parse(argc, argv, &d->a);
    if (rc == 0)
        rc = doctor_run(d);
    else if (rc < 0)
        rc = 0;
    stk_transform_destroy(d->t);
    stk_dataset_close(d->ds);
    free(d->py_json);
    free(d);
    return rc;
}
