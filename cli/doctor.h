/*
 * doctor.h: what the parts of `stoker doctor` share (private to the CLI). cmd_doctor.c parses
 * the arguments, measures the loader and runs the command; doctor_python.c runs the user's
 * script under the Python profiler; doctor_report.c draws the verdict and the advice from the
 * measurements and prints the report. See cmd_doctor.c for what is measured and why.
 */
#ifndef STK_CLI_DOCTOR_H
#define STK_CLI_DOCTOR_H

#include "cli.h"

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
    long long prefetch; /* batches ahead (ring slots - 1); 0 = the library default */
    long long steps;    /* measured batches per run; 0 = bounded by time */
    double time_s;      /* time budget per probe; the step run gets twice that */
    const char *trace;
    const char *format;                                /* --format NAME, NULL = detected */
    bool json, quiet, exact, fast, shuffle, no_verify; /* exact: as decided (stk_cli_recipe) */
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

/* "read", "decode", "augment", "other": the names of stage_split.share[]. */
extern const char *const stk_doctor_stage_names[4];

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

/* ---- doctor_numbers.c: the numbers of the measured runs ---- */

/* Samples per second of a measured run (0 for an empty window). */
double stk_doctor_rate(const run_result *r);

/* The share of the run's threads' cores the process got (well below 1: other processes had them).
 */
double stk_doctor_on_cpu(const run_result *r);

/* The probe with the highest rate. */
int stk_doctor_best_probe(const doctor *d);

/* ---- doctor_python.c ---- */

/* Run the user's script under `python3 -m stoker.doctor`, keeping its JSON report in
 * d->py_json. Returns 0, or the CLI exit code after printing why. */
int stk_doctor_run_python(doctor *d);

/* ---- doctor_report.c ---- */

/* The verdict and the advice for a simulated step (MODE_STEP) or the script's (MODE_PYTHON). */
void stk_doctor_judge_step(doctor *d);
void stk_doctor_judge_python(doctor *d);

/* Print the report as JSON, or for humans. */
void stk_doctor_print_json(const doctor *d);
void stk_doctor_print_report(const doctor *d);

#endif
