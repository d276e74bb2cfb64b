/*
 * doctor_report.c: the verdict and the advice of `stoker doctor`, and the report. The choice
 * of advice comes from stk_diagnose (src/doctor/stk_diagnose.c, shared with stoker.profile);
 * this file words it from the numbers measured in cmd_doctor.c and prints them.
 */
#include "doctor.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int k = stk_doctor_best_probe(d);
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
                   "decoding is %.0f%% of the workers' time with the exact decode (full scale, "
                   "PIL's IDCT: --exact, or an evaluation recipe's default, which keeps its "
                   "pixels within one level of torchvision's): --fast decodes JPEGs at the DCT "
                   "scale nearest the output size, at the cost of that agreement",
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
    if (d->n_probes < 2 || stk_doctor_rate(one) <= 0)
        return;
    double gain = stk_doctor_rate(all) / stk_doctor_rate(one);
    if (gain / ((double)all->threads / one->threads) >= 0.6)
        return;
    char why[160];
    if (stk_doctor_on_cpu(all) < 0.8 && d->split[d->n_probes - 1].busy > 0.9)
        snprintf(why, sizeof(why),
                 "other processes compete for the cores (the %u busy workers "
                 "got %.0f%% of %u cores' time)",
                 all->threads, 100 * stk_doctor_on_cpu(all), all->threads);
    else
        snprintf(why, sizeof(why), "%s",
                 d->split[d->n_probes - 1].dominant == 0
                     ? "the storage is the limit"
                     : "memory bandwidth or shared caches limit it");
    advise(&d->v,
           "the ceiling does not scale: %u threads give %.2fx the samples/s of %u (%s vs "
           "%s): %s",
           all->threads, gain, one->threads, num(stk_doctor_rate(all)), num(stk_doctor_rate(one)),
           why);
}

/* Advice for a verdict from the demand against the measured ceilings. `loader` is the script's
 * loader ("torch.utils.data.DataLoader", ...), or NULL for stoker's own step run. */
static void advise_threads(doctor *d, const char *loader)
{
    verdict *v = &d->v;
    bool ours = !loader || strcmp(loader, "stoker.Loader") == 0;
    int need = v->recommended;
    const run_result *cur = &d->probe[v->cur], *top = &d->probe[v->best];
    double c_need = need ? stk_doctor_rate(&d->probe[v->need]) : 0;
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
                   num(stk_doctor_rate(cur)), cur->threads, plural(cur->threads),
                   stk_doctor_rate(cur) / v->demand, num(v->demand),
                   loader ? "num_workers=" : "--threads ", need, num(c_need));
        else
            advise(v,
                   "not data-bound: the loader alone reaches %s samples/s at %u thread%s, "
                   "%.2fx the %s samples/s the step consumes%s; keep %u",
                   num(stk_doctor_rate(cur)), cur->threads, plural(cur->threads),
                   stk_doctor_rate(cur) / v->demand, num(v->demand),
                   stk_doctor_rate(cur) < v->demand * STK_DIAG_HEADROOM ? " (little headroom)" : "",
                   ct);
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
               plural(ct), ct == 1 ? "es" : "", num(stk_doctor_rate(cur)));
    } else if (v->action == STK_DIAG_CONTENTION) { /* the loader alone keeps up, yet it waited */
        advise(v,
               "the loader alone reaches %s samples/s at %u thread%s (%.1fx the %s needed), "
               "yet the step waited %.1f%% of the time: %s",
               num(stk_doctor_rate(cur)), cur->threads, plural(cur->threads),
               stk_doctor_rate(cur) / v->demand, num(v->demand), 100 * v->wait_share,
               d->a.spin ? "the spinning step takes a core from the workers: leave it one "
                           "(fewer threads than cores) or move the step's CPU work to the GPU"
                         : "other processes compete for the cores, or the ring drains in "
                           "bursts");
    } else {
        if (!isfinite(v->demand))
            advise(v,
                   "the step takes no time (%.3f ms), so no thread count keeps up: the best "
                   "measured is %s samples/s at %u thread%s",
                   v->step_ms, num(stk_doctor_rate(top)), top->threads, plural(top->threads));
        else if (stk_doctor_rate(top) >= v->demand)
            advise(v,
                   "%u thread%s%s reach%s %s samples/s, only %.2fx the %s needed (%s samples "
                   "per %.2f ms step): too little headroom to absorb slow batches",
                   top->threads, plural(top->threads),
                   top->threads == (unsigned)d->cpus ? " (all cores)" : "",
                   top->threads == 1 ? "es" : "", num(stk_doctor_rate(top)),
                   stk_doctor_rate(top) / v->demand, num(v->demand), num(v->samples_per_step),
                   v->step_ms);
        else
            advise(v,
                   "at best (%u thread%s%s) %s reaches only %s samples/s, %s needed "
                   "(%s samples per %.2f ms step): it is %.0f%% short",
                   top->threads, plural(top->threads),
                   top->threads == (unsigned)d->cpus ? ", all cores" : "",
                   ours ? "the loader" : "stoker.Loader", num(stk_doctor_rate(top)), num(v->demand),
                   num(v->samples_per_step), v->step_ms,
                   100 * (1 - stk_doctor_rate(top) / v->demand));
        if (ours && top->threads > ct)
            advise(v, "raise %s to %u: %s samples/s measured vs %s at %u",
                   loader ? "num_workers" : "--threads", top->threads, num(stk_doctor_rate(top)),
                   num(stk_doctor_rate(cur)), ct);
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
    bool tuner_room = d->a.auto_threads && r->st.depth < r->prefetch + 1; /* depth counts slots */
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
        rates[i] = stk_doctor_rate(&d->probe[i]);
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
void stk_doctor_judge_step(doctor *d)
{
    verdict *v = &d->v;
    const run_result *r = &d->step;
    v->achieved = stk_doctor_rate(r);
    v->cur_threads = d->a.auto_threads ? r->st.active_threads : r->threads;
    diagnose(d, r->wait_s, r->step_s, r->steps,
             r->steps ? (double)r->samples / (double)r->steps : 0);
    advise_threads(d, NULL);
    advise_depth(d, r);
}

/* Fill d->v from the profiler's report. */
void stk_doctor_judge_python(doctor *d)
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

void stk_doctor_print_json(const doctor *d)
{
    const doctor_args *a = &d->a;
    const verdict *v = &d->v;
    printf("{\"data\": [");
    for (int i = 0; i < a->n_paths; i++) {
        printf(i ? ", " : "");
        stk_cli_json_string(stdout, a->paths[i], strlen(a->paths[i]));
    }
    printf("], \"records\": %" PRIu64 ", \"recipe\": ", stk_dataset_n_records(d->ds));
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
               i ? "," : "", p->threads, stk_doctor_rate(p), p->steps, p->seconds, s->share[0],
               s->share[1], s->share[2], s->share[3], stk_doctor_stage_names[s->dominant], s->busy,
               stk_doctor_on_cpu(p));
    }
    int best = stk_doctor_best_probe(d);
    printf("\n], \"best_threads\": %u, \"best_samples_per_s\": %.1f, \"dominant_stage\": "
           "\"%s\"",
           d->probe[best].threads, stk_doctor_rate(&d->probe[best]),
           stk_doctor_stage_names[d->split[best].dominant]);
    if (a->mode == MODE_STEP) {
        const run_result *r = &d->step;
        const stk_loader_stats *st = &r->st;
        /* The loader's own counters over the window wait_share is a share of (waiting + step):
         * the loader counts only the time next() blocked, inside the doctor's timed calls, so
         * its consumer share can never exceed wait_share (tests/cli/test_doctor.sh checks it). */
        double span = r->wait_s + r->step_s;
        double cw = span > 0 ? (double)st->consumer_wait_ns * 1e-9 / span : 0;
        double ww =
            span > 0 && r->threads ? (double)st->worker_wait_ns * 1e-9 / (span * r->threads) : 0;
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
               stk_doctor_rate(r), stk_doctor_rate(&d->probe[v->cur]), cw, ww);
        stk_cli_json_string(stdout, st->autotune_reason, strlen(st->autotune_reason));
        printf("}");
        if (a->trace) {
            printf(", \"trace\": ");
            stk_cli_json_string(stdout, a->trace, strlen(a->trace));
        }
    }
    if (a->mode == MODE_PYTHON) {
        const char *s = stk_cli_json_ws(d->py_json), *e = stk_json_skip(s);
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
            snprintf(vs, sizeof(vs), "%.2fx", stk_doctor_rate(&d->probe[i]) / v->demand);
        printf("  %7u %11s %10s %5.0f%% %6.0f%% %7.0f%% %5.0f%% %6.0f%%\n", d->probe[i].threads,
               num(stk_doctor_rate(&d->probe[i])), vs, 100 * s->share[0], 100 * s->share[1],
               100 * s->share[2], 100 * s->share[3], 100 * stk_doctor_on_cpu(&d->probe[i]));
    }
    int best = stk_doctor_best_probe(d);
    const stage_split *s = &d->split[best];
    printf("  dominant stage: %s (%.0f%% of the workers' busy time at %u thread%s; workers busy "
           "%.0f%% of the time)\n  (on-cpu: the share of the threads' time the process got "
           "on a core; low = other processes had them)\n",
           stk_doctor_stage_names[s->dominant], 100 * s->share[s->dominant], d->probe[best].threads,
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
    double ceil = stk_doctor_rate(&d->probe[v->cur]);
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

/* The profiler's "costs" (the user's Python: executor, time per sample in __getitem__, its CPU
 * and GIL shares, bytes per batch, the free-__getitem__ rate; python/stoker/_advice.py costs()),
 * on one line as stoker.profile prints it. Nothing when the report has none. */
static void print_python_costs(const char *j)
{
    const char *v = stk_cli_json_get(j, "costs");
    if (!v || *v != '{')
        return;
    const char *end = stk_json_skip(v);
    char *c = end ? strndup(v, (size_t)(end - v)) : NULL; /* a valid object on its own */
    if (!c)
        return;
    char ex[32] = "", why[256] = "", line[ADVICE_LEN * 2] = "";
    size_t n = 0;
    const char *e = stk_cli_json_get(c, "executor"), *r = stk_cli_json_get(c, "executor_reason");
    if (e && *e == '"')
        stk_cli_json_str(e, ex, sizeof(ex));
    if (r && *r == '"')
        stk_cli_json_str(r, why, sizeof(why));
    double ms = stk_cli_json_num(c, "getitem_ms"), cpu = stk_cli_json_num(c, "getitem_cpu_share");
    double gil = stk_cli_json_num(c, "gil_share"), bytes = stk_cli_json_num(c, "batch_bytes");
    double tr = stk_cli_json_num(c, "transfer_samples_per_s");
    double tw = stk_cli_json_num(c, "transfer_workers");
#define ADD(...)                                                                                   \
    n += (size_t)snprintf(line + n, n < sizeof(line) ? sizeof(line) - n : 0, __VA_ARGS__)
    if (strcmp(ex, "thread") == 0 || strcmp(ex, "process") == 0)
        ADD("; executor %s%s%s%s", ex, *why ? " (" : "", why, *why ? ")" : "");
    else if (strcmp(ex, "main") == 0)
        ADD("; __getitem__ in the main process (num_workers=0)");
    if (isfinite(ms)) {
        ADD("; __getitem__ %.2f ms per sample", ms);
        if (isfinite(cpu))
            ADD(" (%.0f%% on a CPU)", 100 * cpu);
    }
    if (isfinite(gil))
        ADD("; GIL held %.0f%% of it", 100 * gil);
    if (strcmp(ex, "process") == 0 && isfinite(bytes) && bytes > 0)
        ADD("; %.2f MB per batch between processes", bytes / 1e6);
    if (isfinite(tr) && tr > 0)
        ADD("; the same batches with a free __getitem__: %.0f samples/s at num_workers=%.0f", tr,
            tw);
#undef ADD
    if (n > 2 && n < sizeof(line))
        printf("  python: %s\n", line + 2);
    free(c);
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
    print_python_costs(j);
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

void stk_doctor_print_report(const doctor *d)
{
    const doctor_args *a = &d->a;
    const verdict *v = &d->v;
    printf("stoker doctor: ");
    for (int i = 0; i < a->n_paths; i++)
        printf("%s%s", i ? " " : "", a->paths[i]);
    printf(" (%" PRIu64 " records), recipe %s, batch %lld, %d CPUs\n\n",
           stk_dataset_n_records(d->ds), a->recipe, a->batch, d->cpus);
    print_ceiling(d);
    if (a->mode == MODE_STEP)
        print_step(d);
    if (a->mode == MODE_PYTHON)
        print_python(d);
    if (!v->have) {
        int best = stk_doctor_best_probe(d);
        printf("\nceiling: %s samples/s at best (%u thread%s); give --step-ms X or --python "
               "SCRIPT for a verdict\n",
               num(stk_doctor_rate(&d->probe[best])), d->probe[best].threads,
               plural(d->probe[best].threads));
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
