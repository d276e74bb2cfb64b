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
#include "cli.h"

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

#define MAX_PROBES 16
#define MAX_ADVICE 12
#define ADVICE_LEN 480
#define WAITED_S 1e-3 /* a step "waited" when its stk_loader_next blocked longer */
#define PY_STEPS 100  /* steps the profiler takes from a script without --steps */

typedef enum doctor_mode { MODE_CEILING, MODE_STEP, MODE_PYTHON } doctor_mode;

typedef struct doctor_args {
    char *const *paths;
    int n_paths;
    const char *recipe;
    doctor_mode mode;
    double step_ms;
    bool spin;
    const char *script; /* --python SCRIPT */
    char *const *script_args;
    int n_script_args;
    long long batch;
    long long threads;  /* step run; 0 = one per CPU */
    bool auto_threads;  /* --threads auto */
    long long prefetch; /* 0 = the library default */
    long long steps;    /* measured batches per run; 0 = bounded by time */
    double time_s;      /* time budget per probe; the step run gets twice that */
    const char *trace;
    bool json, quiet, exact, shuffle, no_verify;
} doctor_args;

/* One measured loader run (a probe or the step run). */
typedef struct run_result {
    unsigned threads, prefetch;
    uint64_t steps, samples, waited; /* in the window; waited = steps that blocked > 1 ms */
    double seconds, wait_s, step_s, max_wait_s, first_batch_s;
    double cpu_s;        /* CPU time this process got in the window */
    stk_loader_stats st; /* counters: deltas over the window; gauges: at its end */
} run_result;

/* How the workers' busy time splits, from a run's stats. */
typedef struct stage_split {
    double share[4]; /* read, decode, augment, other: fractions of the busy time */
    int dominant;    /* index into share */
    double busy;     /* busy thread-seconds / (threads * window): how loaded the workers were */
} stage_split;

static const char *const stage_names[4] = {"read", "decode", "augment", "other"};

/* The verdict on a step (simulated or the script's) and the advice drawn from it. */
typedef struct verdict {
    bool have; /* a step was measured */
    bool data_bound;
    double wait_share;                         /* waiting / (waiting + step) */
    double step_ms, wait_ms, samples_per_step; /* means per step */
    double demand;   /* samples/s the step consumes; INFINITY when it takes no time */
    double achieved; /* samples/s delivered under the step; NAN when unknown */
    unsigned cur_threads;
    int recommended;        /* the thread count advised; 0 = none */
    stk_diag_action action; /* what stk_diagnose calls for */
    int need, cur, best;    /* its probe indices: recommended (-1 = none), current, best */
    char advice[MAX_ADVICE][ADVICE_LEN];
    int n_advice;
} verdict;

typedef struct doctor {
    doctor_args a;
    stk_dataset *ds;
    stk_transform *t;
    int cpus;
    int probe_threads[MAX_PROBES];
    int n_probes;
    run_result probe[MAX_PROBES];
    stage_split split[MAX_PROBES];
    run_result step; /* MODE_STEP */
    char *py_json;   /* MODE_PYTHON: the profiler's report */
    verdict v;
    stk_cli_progress prog;
    uint64_t runs_done;
} doctor;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: stoker doctor DATA... [--recipe R] [--step-ms X | --python SCRIPT [ARGS...]]\n"
            "                    [options]\n"
            "\n"
            "Is training data-bound, by how much, where does the loader spend its time, and\n"
            "which settings fix it? The doctor measures the loader alone on DATA (.stk files,\n"
            "directories or globs) at 1, 2, 4, ... threads up to the CPU count (the ceiling),\n"
            "then the loader against a training step: simulated (--step-ms) or your own script\n"
            "run under the Python profiler (--python). Without either it reports the ceiling.\n"
            "Data-bound means waiting for batches more than 5%% of the time.\n"
            "\n"
            "options:\n"
            "  --recipe NAME       raw (default), imagenet-train or imagenet-val\n"
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
            "  --prefetch P        ring slots (default 4)\n"
            "  --steps S           measured batches per run (default: what --time allows);\n"
            "                      --python: steps of the script (default 100)\n"
            "  --time SEC          time budget of each ceiling run (default 1); the step run\n"
            "                      gets twice that\n"
            "  --trace FILE.json   write a Chrome/Perfetto trace of the step run (without a\n"
            "                      step: of the last ceiling run)\n"
            "  --shuffle           shuffle, as training does\n"
            "  --exact             image recipes: decode at full scale (no DCT downscaling)\n"
            "  --no-verify         do not check record checksums\n"
            "  --json              print one JSON object instead of the report\n"
            "  --quiet             no progress bar\n"
            "  -h, --help          this help\n");
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
        {"no-verify", no_argument, NULL, 'V'},
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
        case 'S':
        case 'x':
        case 'V':
        case 'j':
        case 'q':
            *(c == 'S'   ? &a->shuffle
              : c == 'x' ? &a->exact
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

/* CPUs this process may run on (the library's default thread count). */
static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    return n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
}

/* CPU seconds this process has used (all threads). */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The share of `threads` cores' time the process got during a run: well below 1 when the
 * workers were busy, other processes had the cores. */
static double on_cpu(const run_result *r)
{
    return r->seconds > 0 && r->threads ? r->cpu_s / (r->seconds * r->threads) : 0;
}

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
        r->cpu_s = cpu_now();
    } else {
        r->steps++;
        r->samples += stk_batch_size(b);
        r->waited += w > WAITED_S;
        r->max_wait_s = w > r->max_wait_s ? w : r->max_wait_s;
    }
    bool enough = a->steps ? r->steps >= (uint64_t)a->steps
                           : r->steps >= x->min_steps && w1 - x->win0 >= x->budget_s;
    if (enough) {
        r->seconds = w1 - x->win0;
        r->cpu_s = cpu_now() - r->cpu_s;
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
    o.prefetch = (int32_t)a->prefetch;
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
    r->prefetch = run.info.prefetch;
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

static double rate(const run_result *r)
{
    return r->seconds > 0 ? (double)r->samples / r->seconds : 0;
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

/* The probe with the highest ceiling. */
static int best_probe(const doctor *d)
{
    int k = 0;
    for (int i = 1; i < d->n_probes; i++)
        if (rate(&d->probe[i]) > rate(&d->probe[k]))
            k = i;
    return k;
}

/* ---- the Python profiler ---- */

/* The interpreter: $STOKER_PYTHON, else Debian's /usr/bin/python3, else python3 on PATH. */
static const char *python_interpreter(void)
{
    const char *env = getenv("STOKER_PYTHON");
    if (env && *env)
        return env;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* Read a whole (small) file into a NUL-terminated heap string; NULL if unreadable. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n - 1, f);
        if (n < cap - 1 || cap >= (64u << 20))
            break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) {
            free(buf);
            buf = NULL;
        }
        buf = grown;
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* In the child: the environment the profiler and the script see, then exec. PYTHONPATH gets
 * the build tree's python/ beside this executable first, so `stoker` imports from there. */
static void exec_profiler(const doctor *d, char **argv, int err_fd)
{
    char exe[4096], *pp = NULL;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        const char *old = getenv("PYTHONPATH");
        if (asprintf(&pp, "%s/python%s%s", exe, old && *old ? ":" : "", old ? old : "") > 0)
            setenv("PYTHONPATH", pp, 1);
    }
    size_t len = 1;
    for (int i = 0; i < d->a.n_paths; i++)
        len += strlen(d->a.paths[i]) + 1;
    char *data = calloc(len, 1);
    for (int i = 0; data && i < d->a.n_paths; i++) {
        if (i)
            strcat(data, ":");
        strcat(data, d->a.paths[i]);
    }
    if (data)
        setenv("STOKER_DATA", data, 1);
    setenv("STOKER_RECIPE", d->a.recipe, 1);
    if (d->a.json) /* stdout carries only the doctor's JSON: the script prints to stderr */
        dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(argv[0], argv);
    int e = errno;
    ssize_t w = write(err_fd, &e, sizeof(e));
    (void)w;
    _exit(127);
}

/* Run the script under `python3 -m stoker.doctor --json-out TMP [--steps N] SCRIPT ARGS...`
 * and keep its JSON report in d->py_json. Returns 0 or 1 (error printed). */
static int run_python(doctor *d)
{
    const doctor_args *a = &d->a;
    struct stat sb;
    const char *tmpdir = getenv("TMPDIR");
    char tmp[4096], steps[32];
    snprintf(tmp, sizeof(tmp), "%s/stoker-doctor-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemp(tmp);
    if (fd < 0)
        return stk_cli_error("doctor", "%s: cannot create the report file: %s", tmp,
                             strerror(errno));
    close(fd);
    snprintf(steps, sizeof(steps), "%lld", a->steps ? a->steps : PY_STEPS);
    const char *py = python_interpreter();
    char **argv = calloc((size_t)a->n_script_args + 10, sizeof(*argv));
    int n = 0, pipefd[2] = {-1, -1}, rc = 1, status = 0, exec_errno = 0;
    if (!argv || pipe2(pipefd, O_CLOEXEC) != 0) {
        stk_cli_error("doctor", "cannot start %s: %s", py, strerror(errno));
        goto out;
    }
    argv[n++] = (char *)py;
    argv[n++] = "-m";
    argv[n++] = "stoker.doctor";
    argv[n++] = "--json-out";
    argv[n++] = tmp;
    argv[n++] = "--steps";
    argv[n++] = steps;
    argv[n++] = (char *)a->script;
    for (int i = 0; i < a->n_script_args; i++)
        argv[n++] = a->script_args[i];
    if (!a->json && !a->quiet && isatty(STDERR_FILENO))
        fprintf(stderr,
                "stoker doctor: running %s under the profiler (%s -m stoker.doctor, "
                "%s steps)\n",
                a->script, py, steps);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        stk_cli_error("doctor", "cannot start %s: %s", py, strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(pipefd[0]);
        exec_profiler(d, argv, pipefd[1]);
    }
    close(pipefd[1]);
    pipefd[1] = -1;
    if (read(pipefd[0], &exec_errno, sizeof(exec_errno)) <= 0)
        exec_errno = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (stat(tmp, &sb) == 0 && sb.st_size > 0 && (d->py_json = read_text(tmp)) &&
        (*stk_cli_json_ws(d->py_json) != '{' || !stk_cli_json_valid(d->py_json))) {
        free(d->py_json);
        d->py_json = NULL;
    }
    if (exec_errno) {
        stk_cli_error("doctor", "cannot run the Python interpreter '%s': %s (set STOKER_PYTHON)",
                      py, strerror(exec_errno));
    } else if (WIFSIGNALED(status)) {
        stk_cli_error("doctor", "%s under the profiler was killed by signal %d (%s)", a->script,
                      WTERMSIG(status), strsignal(WTERMSIG(status)));
    } else if (WEXITSTATUS(status) != 0) {
        /* The profiler's report says why when it got that far. */
        const char *se = d->py_json ? stk_cli_json_get(d->py_json, "script_error") : NULL;
        char why[ADVICE_LEN] = "see its messages above";
        if (se && *se == '"')
            stk_cli_json_str(se, why, sizeof(why));
        else if (d->py_json && stk_cli_json_num(d->py_json, "steps") == 0)
            snprintf(why, sizeof(why),
                     "it iterated no DataLoader or stoker.Loader: nothing "
                     "to measure");
        stk_cli_error("doctor",
                      "%s failed under the profiler (%s -m stoker.doctor): exit "
                      "status %d: %s",
                      a->script, py, WEXITSTATUS(status), why);
    } else if (!d->py_json) {
        stk_cli_error("doctor", "%s -m stoker.doctor wrote no JSON report to %s", py, tmp);
    } else {
        rc = 0;
    }
out:
    if (pipefd[0] >= 0)
        close(pipefd[0]);
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    free(argv);
    unlink(tmp);
    return rc;
}

/* ---- the verdict and the advice ---- */

/* A count for humans: "2,900", "950", "9.5". Rotating buffers: up to 8 per printf. */
static const char *num(double v)
{
    static char bufs[8][32];
    static int k;
    char *b = bufs[k++ & 7];
    if (!isfinite(v)) {
        snprintf(b, 32, "%s", isnan(v) ? "?" : "unbounded");
        return b;
    }
    if (fabs(v) < 10) {
        snprintf(b, 32, "%.1f", v);
        return b;
    }
    char digits[32];
    int len = snprintf(digits, sizeof(digits), "%.0f", fabs(v)), o = 0;
    if (v < 0)
        b[o++] = '-';
    for (int i = 0; i < len; i++) {
        if (i && (len - i) % 3 == 0)
            b[o++] = ',';
        b[o++] = digits[i];
    }
    b[o] = '\0';
    return b;
}

static void advise(verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void advise(verdict *v, const char *fmt, ...)
{
    if (v->n_advice == MAX_ADVICE)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->advice[v->n_advice++], ADVICE_LEN, fmt, ap);
    va_end(ap);
}

/* "s" unless n is 1. */
static const char *plural(double n)
{
    return n == 1 ? "" : "s";
}

/* The fix for the stage that dominates the workers' time at the best thread count. */
static void advise_stage(doctor *d)
{
    int k = best_probe(d);
    const stage_split *s = &d->split[k];
    const run_result *p = &d->probe[k];
    double pct = 100 * s->share[s->dominant];
    double rec_kb = p->st.samples ? (double)p->st.bytes_read / (double)p->st.samples / 1e3 : 0;
    verdict *v = &d->v;
    switch (s->dominant) {
    case 0:
        advise(v,
               "reading records is %.0f%% of the workers' time (%s MB/s from the shards at "
               "%u thread%s): pack into fewer, larger shards and put them on faster storage "
               "(local NVMe, or enough RAM for the page cache)",
               pct, num((double)p->st.bytes_read / p->seconds / 1e6), p->threads,
               plural(p->threads));
        break;
    case 1:
        if (d->a.exact)
            advise(v,
                   "decoding is %.0f%% of the workers' time at full scale (--exact): drop "
                   "--exact so JPEGs decode at the DCT scale nearest the output size",
                   pct);
        else
            advise(v,
                   "decoding is %.0f%% of the workers' time and DCT-scaled decode is already "
                   "on (records average %s kB): store the images nearer the training "
                   "resolution (fewer pixels to decode); shipping uint8 and normalising on the "
                   "GPU (device=\"cuda\") would free the %.0f%% spent augmenting",
                   pct, num(rec_kb), 100 * s->share[2]);
        break;
    case 2:
        advise(v,
               "augmentation (crop, resize, flip, normalise) is %.0f%% of the workers' time: "
               "move it to the GPU: ship uint8 and normalise on the GPU (device=\"cuda\")",
               pct);
        break;
    default:
        advise(v,
               "per-sample bookkeeping is %.0f%% of the workers' time (records average %s "
               "kB): samples are tiny; larger batches or larger records amortise it",
               pct, num(rec_kb));
        break;
    }
}

/* When the ceiling scales badly from 1 thread to the most measured, say so and why: more
 * threads will not help then. */
static void advise_scaling(doctor *d)
{
    const run_result *one = &d->probe[0], *all = &d->probe[d->n_probes - 1];
    if (d->n_probes < 2 || rate(one) <= 0)
        return;
    double gain = rate(all) / rate(one);
    if (gain / ((double)all->threads / one->threads) >= 0.6)
        return;
    char why[160];
    if (on_cpu(all) < 0.8 && d->split[d->n_probes - 1].busy > 0.9)
        snprintf(why, sizeof(why),
                 "other processes compete for the cores (the %u busy workers "
                 "got %.0f%% of %u cores' time)",
                 all->threads, 100 * on_cpu(all), all->threads);
    else
        snprintf(why, sizeof(why), "%s",
                 d->split[d->n_probes - 1].dominant == 0
                     ? "the storage is the limit"
                     : "memory bandwidth or shared caches limit it");
    advise(&d->v,
           "the ceiling does not scale: %u threads give %.2fx the samples/s of %u (%s vs "
           "%s): %s",
           all->threads, gain, one->threads, num(rate(all)), num(rate(one)), why);
}

/* Advice for a verdict from the demand against the measured ceilings. `loader` is the script's
 * loader ("torch.utils.data.DataLoader", ...), or NULL for stoker's own step run. */
static void advise_threads(doctor *d, const char *loader)
{
    verdict *v = &d->v;
    bool ours = !loader || strcmp(loader, "stoker.Loader") == 0;
    int need = v->recommended;
    const run_result *cur = &d->probe[v->cur], *top = &d->probe[v->best];
    double c_need = need ? rate(&d->probe[v->need]) : 0;
    unsigned ct = v->cur_threads;
    if (!v->data_bound) {
        if (need && !ours)
            advise(v,
                   "not data-bound: the script's %s keeps up; stoker.Loader would need %d "
                   "thread%s (num_workers=%d): measured ceiling %s samples/s vs %s needed",
                   loader, need, plural(need), need, num(c_need), num(v->demand));
        else if (v->action == STK_DIAG_FEWER)
            advise(v,
                   "not data-bound: threads could be reduced to %d (num_workers=%d), leaving "
                   "%u more core%s to the trainer: measured ceiling %s samples/s at %d thread%s "
                   "vs %s needed",
                   need, need, ct - (unsigned)need, plural(ct - (unsigned)need), num(c_need), need,
                   plural(need), num(v->demand));
        else if (v->action == STK_DIAG_NO_HEADROOM)
            advise(v,
                   "not data-bound, but with no headroom: the loader alone measured %s "
                   "samples/s at %u thread%s, %.2fx the %s samples/s the step consumes; %s%d "
                   "gives %s",
                   num(rate(cur)), cur->threads, plural(cur->threads), rate(cur) / v->demand,
                   num(v->demand), loader ? "num_workers=" : "--threads ", need, num(c_need));
        else
            advise(v,
                   "not data-bound: the loader alone reaches %s samples/s at %u thread%s, "
                   "%.2fx the %s samples/s the step consumes%s; keep %u",
                   num(rate(cur)), cur->threads, plural(cur->threads), rate(cur) / v->demand,
                   num(v->demand),
                   rate(cur) < v->demand * STK_DIAG_HEADROOM ? " (little headroom)" : "", ct);
        return;
    }
    if (need && !ours) {
        advise(v,
               "switch to stoker.Loader(STOKER_DATA, batch_size=%.0f, num_workers=%d, "
               "transforms=\"%s\"): measured ceiling %s samples/s at %d thread%s vs %s needed "
               "(%s samples per %.2f ms step)",
               v->samples_per_step, need, d->a.recipe, num(c_need), need, plural(need),
               num(v->demand), num(v->samples_per_step), v->step_ms);
    } else if (v->action == STK_DIAG_MORE) {
        char knob[64];
        if (loader) /* the script's stoker.Loader */
            snprintf(knob, sizeof(knob), "num_workers=%d", need);
        else
            snprintf(knob, sizeof(knob), "--threads %d (num_workers=%d)", need, need);
        advise(v,
               "use %s: measured ceiling %s samples/s vs %s needed (%s samples per %.2f ms "
               "step); %u thread%s reach%s %s",
               knob, num(c_need), num(v->demand), num(v->samples_per_step), v->step_ms, ct,
               plural(ct), ct == 1 ? "es" : "", num(rate(cur)));
    } else if (v->action == STK_DIAG_CONTENTION) { /* the loader alone keeps up, yet it waited */
        advise(v,
               "the loader alone reaches %s samples/s at %u thread%s (%.1fx the %s needed), "
               "yet the step waited %.1f%% of the time: %s",
               num(rate(cur)), cur->threads, plural(cur->threads), rate(cur) / v->demand,
               num(v->demand), 100 * v->wait_share,
               d->a.spin ? "the spinning step takes a core from the workers: leave it one "
                           "(fewer threads than cores) or move the step's CPU work to the GPU"
                         : "other processes compete for the cores, or the ring drains in "
                           "bursts");
    } else {
        if (!isfinite(v->demand))
            advise(v,
                   "the step takes no time (%.3f ms), so no thread count keeps up: the best "
                   "measured is %s samples/s at %u thread%s",
                   v->step_ms, num(rate(top)), top->threads, plural(top->threads));
        else if (rate(top) >= v->demand)
            advise(v,
                   "%u thread%s%s reach%s %s samples/s, only %.2fx the %s needed (%s samples "
                   "per %.2f ms step): too little headroom to absorb slow batches",
                   top->threads, plural(top->threads),
                   top->threads == (unsigned)d->cpus ? " (all cores)" : "",
                   top->threads == 1 ? "es" : "", num(rate(top)), rate(top) / v->demand,
                   num(v->demand), num(v->samples_per_step), v->step_ms);
        else
            advise(v,
                   "at best (%u thread%s%s) %s reaches only %s samples/s, %s needed "
                   "(%s samples per %.2f ms step): it is %.0f%% short",
                   top->threads, plural(top->threads),
                   top->threads == (unsigned)d->cpus ? ", all cores" : "",
                   ours ? "the loader" : "stoker.Loader", num(rate(top)), num(v->demand),
                   num(v->samples_per_step), v->step_ms, 100 * (1 - rate(top) / v->demand));
        if (ours && top->threads > ct)
            advise(v, "raise %s to %u: %s samples/s measured vs %s at %u",
                   loader ? "num_workers" : "--threads", top->threads, num(rate(top)),
                   num(rate(cur)), ct);
        advise_scaling(d);
        advise_stage(d);
    }
}

/* Depth: the consumer waited in bursts while workers idled on a full ring. */
static void advise_depth(doctor *d, const run_result *r)
{
    double worker_wait = r->st.wall_ns && r->threads
                             ? (double)r->st.worker_wait_ns / ((double)r->st.wall_ns * r->threads)
                             : 0;
    double waited = r->steps ? (double)r->waited / (double)r->steps : 0;
    /* Under autotune a depth below the allowed one is the tuner's to raise. */
    bool tuner_room = d->a.auto_threads && r->st.depth < r->prefetch;
    if (waited >= 0.05 && worker_wait >= 0.10 && d->v.wait_share >= 0.02 && !tuner_room)
        advise(&d->v,
               "the waits come in bursts: %" PRIu64 " of %" PRIu64 " steps waited (up "
               "to %.1f ms) while the workers spent %.0f%% of their time waiting for a free "
               "slot: raise --prefetch from %u to %u (prefetch_factor)",
               r->waited, r->steps, r->max_wait_s * 1e3, 100 * worker_wait, r->prefetch,
               2 * r->prefetch);
}

/* The verdict from stk_diagnose on the measured loop (totals over `steps`) against the ceilings
 * at d->v.cur_threads; fills d->v. Returns 0, or 1 when the measurements are unusable. */
static int diagnose(doctor *d, double wait_s, double step_s, uint64_t steps, double per_step)
{
    verdict *v = &d->v;
    int64_t threads[MAX_PROBES];
    double rates[MAX_PROBES];
    for (int i = 0; i < d->n_probes; i++) {
        threads[i] = d->probe_threads[i];
        rates[i] = rate(&d->probe[i]);
    }
    stk_diag_input in;
    stk_diag_result r = {.struct_size = sizeof(r)};
    stk_diag_input_init(&in);
    in.wait_s = wait_s;
    in.step_s = step_s;
    in.steps = steps;
    in.samples_per_step = per_step;
    in.current_threads = v->cur_threads;
    in.probe_threads = threads;
    in.probe_rate = rates;
    in.n_probes = (size_t)d->n_probes;
    v->have = true;
    if (stk_diagnose(&in, &r) != STK_OK)
        return 1;
    v->action = r.action;
    v->data_bound = r.data_bound;
    v->wait_share = r.wait_share;
    v->step_ms = r.step_ms;
    v->wait_ms = r.wait_ms;
    v->samples_per_step = per_step;
    v->demand = r.demand;
    v->need = (int)r.recommended;
    v->recommended = r.recommended >= 0 ? d->probe_threads[r.recommended] : 0;
    v->cur = r.current >= 0 ? (int)r.current : 0; /* below every probe: judge against the least */
    v->best = r.best >= 0 ? (int)r.best : 0;
    return 0;
}

/* Fill d->v from the simulated step run. */
static void judge_step(doctor *d)
{
    verdict *v = &d->v;
    const run_result *r = &d->step;
    v->achieved = rate(r);
    v->cur_threads = d->a.auto_threads ? r->st.active_threads : r->threads;
    diagnose(d, r->wait_s, r->step_s, r->steps,
             r->steps ? (double)r->samples / (double)r->steps : 0);
    advise_threads(d, NULL);
    advise_depth(d, r);
}

/* Fill d->v from the profiler's report. */
static void judge_python(doctor *d)
{
    verdict *v = &d->v;
    const char *j = d->py_json, *ld = stk_cli_json_get(j, "loader");
    char loader[128] = "";
    if (ld && *ld == '"')
        stk_cli_json_str(ld, loader, sizeof(loader));
    double step_ms = stk_cli_json_num(j, "step_ms"), wait_ms = stk_cli_json_num(j, "wait_ms");
    double per_step = stk_cli_json_num(j, "batch_size");
    v->achieved = stk_cli_json_num(j, "samples_per_s");
    double workers = stk_cli_json_num(j, "num_workers");
    /* The script's workers, or all cores for stoker's autotune (num_workers=None). */
    v->cur_threads = workers > 0                            ? (unsigned)workers
                     : strcmp(loader, "stoker.Loader") == 0 ? (unsigned)d->cpus
                                                            : 1;
    v->have = true;
    v->wait_share = NAN; /* the profiler measured no step: the verdict is unknown */
    /* The report's means per step, judged as one step: the same shares and demand. */
    if (step_ms >= 0 && wait_ms >= 0 &&
        !diagnose(d, wait_ms / 1e3, step_ms / 1e3, 1, per_step > 0 ? per_step : (double)d->a.batch))
        advise_threads(d, *loader ? loader : "the script's loader");
}

/* ---- output ---- */

static void print_json(const doctor *d)
{
    const doctor_args *a = &d->a;
    const verdict *v = &d->v;
    printf("{\"data\": [");
    for (int i = 0; i < a->n_paths; i++) {
        printf(i ? ", " : "");
        stk_cli_json_string(stdout, a->paths[i], strlen(a->paths[i]));
    }
    printf("], \"records\": %" PRIu64 ", \"recipe\": ", stk_dataset_count(d->ds));
    stk_cli_json_string(stdout, a->recipe, strlen(a->recipe));
    printf(", \"mode\": \"%s\", \"batch_size\": %lld, \"cpus\": %d, \"ceiling\": [",
           a->mode == MODE_STEP     ? "step"
           : a->mode == MODE_PYTHON ? "python"
                                    : "ceiling",
           a->batch, d->cpus);
    for (int i = 0; i < d->n_probes; i++) {
        const run_result *p = &d->probe[i];
        const stage_split *s = &d->split[i];
        printf("%s\n  {\"threads\": %u, \"samples_per_s\": %.1f, \"batches\": %" PRIu64
               ", \"seconds\": %.4f, \"stages\": {\"read\": %.4f, \"decode\": %.4f, "
               "\"augment\": %.4f, \"other\": %.4f}, \"dominant_stage\": \"%s\", "
               "\"worker_busy\": %.4f, \"on_cpu\": %.4f}",
               i ? "," : "", p->threads, rate(p), p->steps, p->seconds, s->share[0], s->share[1],
               s->share[2], s->share[3], stage_names[s->dominant], s->busy, on_cpu(p));
    }
    int best = best_probe(d);
    printf("\n], \"best_threads\": %u, \"best_samples_per_s\": %.1f, \"dominant_stage\": "
           "\"%s\"",
           d->probe[best].threads, rate(&d->probe[best]), stage_names[d->split[best].dominant]);
    if (a->mode == MODE_STEP) {
        const run_result *r = &d->step;
        const stk_loader_stats *st = &r->st;
        double cw = st->wall_ns ? (double)st->consumer_wait_ns / st->wall_ns : 0;
        double ww = st->wall_ns && r->threads
                        ? (double)st->worker_wait_ns / ((double)st->wall_ns * r->threads)
                        : 0;
        printf(", \"step\": {\"kind\": \"%s\", \"step_ms_target\": %.3f, \"threads\": %u, "
               "\"active_threads\": %u, \"autotune\": %s, \"prefetch\": %u, \"steps\": %" PRIu64
               ", \"seconds\": %.4f, \"step_ms\": %.4f, \"wait_ms\": %.4f, \"wait_share\": %.4f, "
               "\"max_wait_ms\": %.3f, \"steps_waited\": %" PRIu64 ", \"first_batch_ms\": %.2f, "
               "\"samples_per_s\": %.1f, \"ceiling_samples_per_s\": %.1f, "
               "\"loader_consumer_wait_share\": %.4f, \"loader_worker_wait_share\": %.4f, "
               "\"autotune_reason\": ",
               a->spin ? "spin" : "sleep", a->step_ms, r->threads, st->active_threads,
               a->auto_threads ? "true" : "false", r->prefetch, r->steps, r->seconds, v->step_ms,
               v->wait_ms, v->wait_share, r->max_wait_s * 1e3, r->waited, r->first_batch_s * 1e3,
               rate(r), rate(&d->probe[v->cur]), cw, ww);
        stk_cli_json_string(stdout, st->autotune_reason, strlen(st->autotune_reason));
        printf("}");
        if (a->trace) {
            printf(", \"trace\": ");
            stk_cli_json_string(stdout, a->trace, strlen(a->trace));
        }
    }
    if (a->mode == MODE_PYTHON) {
        const char *s = stk_cli_json_ws(d->py_json), *e = stk_cli_json_skip(s);
        printf(", \"python\": %.*s", (int)(e - s), s);
    }
    if (!v->have) {
        printf(", \"data_bound\": null, \"wait_share\": null, \"demand_samples_per_s\": null, "
               "\"action\": null, \"recommended_threads\": null, \"advice\": []}\n");
        return;
    }
    printf(", \"data_bound\": %s, \"wait_share\": ", v->data_bound ? "true" : "false");
    printf(isfinite(v->wait_share) ? "%.4f" : "null", v->wait_share);
    printf(", \"step_ms\": ");
    printf(isfinite(v->step_ms) ? "%.4f" : "null", v->step_ms);
    printf(", \"wait_ms\": ");
    printf(isfinite(v->wait_ms) ? "%.4f" : "null", v->wait_ms);
    printf(", \"demand_samples_per_s\": ");
    printf(isfinite(v->demand) ? "%.1f" : "null", v->demand);
    printf(", \"action\": \"%s\", \"recommended_threads\": ", stk_diag_action_name(v->action));
    printf(v->recommended ? "%d" : "null", v->recommended);
    printf(", \"advice\": [");
    for (int i = 0; i < v->n_advice; i++) {
        printf(i ? ", " : "");
        stk_cli_json_string(stdout, v->advice[i], strlen(v->advice[i]));
    }
    printf("]}\n");
}

static void print_ceiling(const doctor *d)
{
    const verdict *v = &d->v;
    printf("loader alone (no step), up to %.1f s per thread count:\n", d->a.time_s);
    printf("  %7s %11s %10s %6s %7s %8s %6s %7s\n", "threads", "samples/s",
           v->have && isfinite(v->demand) ? "vs demand" : "", "read", "decode", "augment", "other",
           "on-cpu");
    for (int i = 0; i < d->n_probes; i++) {
        const stage_split *s = &d->split[i];
        char vs[32] = "";
        if (v->have && isfinite(v->demand) && v->demand > 0)
            snprintf(vs, sizeof(vs), "%.2fx", rate(&d->probe[i]) / v->demand);
        printf("  %7u %11s %10s %5.0f%% %6.0f%% %7.0f%% %5.0f%% %6.0f%%\n", d->probe[i].threads,
               num(rate(&d->probe[i])), vs, 100 * s->share[0], 100 * s->share[1], 100 * s->share[2],
               100 * s->share[3], 100 * on_cpu(&d->probe[i]));
    }
    int best = best_probe(d);
    const stage_split *s = &d->split[best];
    printf("  dominant stage: %s (%.0f%% of the workers' busy time at %u thread%s; workers busy "
           "%.0f%% of the time)\n  (on-cpu: the share of the threads' time the process got "
           "on a core; low = other processes had them)\n",
           stage_names[s->dominant], 100 * s->share[s->dominant], d->probe[best].threads,
           plural(d->probe[best].threads), 100 * s->busy);
}

static void print_step(const doctor *d)
{
    const run_result *r = &d->step;
    const verdict *v = &d->v;
    const stk_loader_stats *st = &r->st;
    double cw = st->wall_ns ? (double)st->consumer_wait_ns / st->wall_ns : 0;
    double ww = st->wall_ns && r->threads
                    ? (double)st->worker_wait_ns / ((double)st->wall_ns * r->threads)
                    : 0;
    double ceil = rate(&d->probe[v->cur]);
    printf("\nstep: %.2f ms (%s) per batch of %lld, %u thread%s%s, prefetch %u: %" PRIu64
           " steps in %.2f s\n",
           d->a.step_ms, d->a.spin ? "spin" : "sleep", d->a.batch, v->cur_threads,
           plural(v->cur_threads), d->a.auto_threads ? " (autotune)" : "", r->prefetch, r->steps,
           r->seconds);
    printf("  per step: waiting %.2f ms, step %.2f ms -> waiting %.1f%% of the time; %" PRIu64
           " steps waited > 1 ms (longest %.1f ms)\n",
           v->wait_ms, v->step_ms, 100 * v->wait_share, r->waited, r->max_wait_s * 1e3);
    printf("  achieved %s samples/s; the step alone would take %s; the %u-thread ceiling is %s; "
           "first batch after %.0f ms\n",
           num(v->achieved), num(v->demand), v->cur_threads, num(ceil), r->first_batch_s * 1e3);
    printf("  loader stats: the consumer waited %.1f%% of the time; workers waited for a free "
           "slot %.0f%% of theirs\n",
           100 * cw, 100 * ww);
    if (d->a.auto_threads)
        printf("  autotune: %u threads, depth %u after %u decisions%s%s\n", st->active_threads,
               st->depth, st->autotune_changes, *st->autotune_reason ? "; last: " : "",
               st->autotune_reason);
}

static void print_python(const doctor *d)
{
    const char *j = d->py_json, *ld = stk_cli_json_get(j, "loader"),
               *adv = stk_cli_json_get(j, "advice");
    char loader[128] = "?", line[ADVICE_LEN];
    if (ld && *ld == '"')
        stk_cli_json_str(ld, loader, sizeof(loader));
    double workers = stk_cli_json_num(j, "num_workers"), sps = stk_cli_json_num(j, "samples_per_s");
    printf("\nscript %s: %.0f steps with %s", d->a.script, stk_cli_json_num(j, "steps"), loader);
    if (isfinite(workers))
        printf(" (num_workers=%.0f)", workers);
    printf("\n  per step: waiting %.2f ms, step %.2f ms -> waiting %.1f%% of the time",
           d->v.wait_ms, d->v.step_ms, 100 * d->v.wait_share);
    if (isfinite(sps))
        printf("; %s samples/s", num(sps));
    printf("\n");
    if (adv && *adv == '[') {
        const char *p = stk_cli_json_ws(adv + 1), *v, *v_end;
        bool first = true;
        while (stk_cli_json_item(&p, &v, &v_end) && *v == '"') {
            stk_cli_json_str(v, line, sizeof(line));
            printf("%s    - %s\n", first ? "  the profiler's advice:\n" : "", line);
            first = false;
        }
    }
}

static void print_report(const doctor *d)
{
    const doctor_args *a = &d->a;
    const verdict *v = &d->v;
    printf("stoker doctor: ");
    for (int i = 0; i < a->n_paths; i++)
        printf("%s%s", i ? " " : "", a->paths[i]);
    printf(" (%" PRIu64 " records), recipe %s, batch %lld, %d CPUs\n\n", stk_dataset_count(d->ds),
           a->recipe, a->batch, d->cpus);
    print_ceiling(d);
    if (a->mode == MODE_STEP)
        print_step(d);
    if (a->mode == MODE_PYTHON)
        print_python(d);
    if (!v->have) {
        int best = best_probe(d);
        printf("\nceiling: %s samples/s at best (%u thread%s); give --step-ms X or --python "
               "SCRIPT for a verdict\n",
               num(rate(&d->probe[best])), d->probe[best].threads, plural(d->probe[best].threads));
        return;
    }
    if (isnan(v->wait_share)) {
        printf("\nverdict: unknown (the profiler reported no waiting share)\n");
        return;
    }
    printf("\nverdict: %s: waiting for data %.1f%% of the time (data-bound above %.0f%%)\n",
           v->data_bound ? "DATA-BOUND" : "not data-bound", 100 * v->wait_share,
           100 * STK_DIAG_DATA_BOUND_SHARE);
    if (v->n_advice)
        printf("advice:\n");
    for (int i = 0; i < v->n_advice; i++)
        printf("  - %s\n", v->advice[i]);
    if (a->trace)
        printf("trace: %s (open it in https://ui.perfetto.dev)\n", a->trace);
}

/* ---- main ---- */

/* Open DATA, compile the recipe, check the script: every input error before any measuring. */
static int prepare(doctor *d)
{
    const doctor_args *a = &d->a;
    if (strcmp(a->recipe, "raw") != 0 && stk_transform_recipe(a->recipe, a->exact, &d->t) < 0)
        return stk_cli_usage_error("doctor", "%s", stk_last_errmsg());
    if (stk_cli_open_data("doctor", a->paths, a->n_paths, a->no_verify ? STK_DATASET_NO_VERIFY : 0,
                          &d->ds))
        return 1;
    if (stk_dataset_count(d->ds) == 0)
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
    if (a->mode == MODE_PYTHON && run_python(d))
        return 1;
    double script_batch = a->mode == MODE_PYTHON ? stk_cli_json_num(d->py_json, "batch_size") : NAN;
    if (a->batch == 0)
        a->batch = script_batch >= 1 && script_batch <= 1 << 24 ? (long long)script_batch : 256;
    d->cpus = cpu_count();
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
        judge_step(d);
    if (a->mode == MODE_PYTHON)
        judge_python(d);
    if (a->json)
        print_json(d);
    else
        print_report(d);
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
