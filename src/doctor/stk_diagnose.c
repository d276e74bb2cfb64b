/*
 * stk_diagnose.c: the doctor's decision, shared by `stoker doctor` (cli/cmd_doctor.c) and
 * stoker.profile (python/stoker/_profile.py and _advice.py, through stoker._core.diagnose).
 *
 * Input: what a measured training loop did (time waiting for batches, time in the step, steps,
 * samples per step, the thread count it ran with) and, when taken, the loader alone at several
 * thread counts (samples/s each). Output: the waiting share and the data-bound verdict, the
 * demand (samples/s the step consumes), the fewest measured thread count that meets it with
 * headroom, and one action code that picks the advice. The callers word the advice; the
 * thresholds and every comparison live here only, so the two front ends cannot disagree.
 *
 * Pure: no clock, no I/O, no state; the unit test feeds it synthetic measurements.
 */
#include "stk_internal.h"

#include <math.h>
#include <string.h>

void stk_diag_input_init_sized(stk_diag_input *in, size_t struct_size)
{
    stk_diag_input full = {.struct_size = sizeof(full), .current_threads = -1};
    stk__init_store(in, struct_size, &full, sizeof(full));
}

const char *stk_diag_action_name(stk_diag_action action)
{
    switch (action) {
    case STK_DIAG_UNKNOWN:
        return "unknown";
    case STK_DIAG_KEEP:
        return "keep";
    case STK_DIAG_FEWER:
        return "fewer";
    case STK_DIAG_NO_HEADROOM:
        return "no_headroom";
    case STK_DIAG_MORE:
        return "more";
    case STK_DIAG_CONTENTION:
        return "contention";
    case STK_DIAG_TOO_SLOW:
        return "too_slow";
    }
    return "?";
}

/* A time or count the caller measured: finite and not negative. */
static bool measured(double x)
{
    return isfinite(x) && x >= 0;
}

stk_status stk_diagnose(const stk_diag_input *in, stk_diag_result *out)
{
    if (!in || !out)
        return stk__set_last_error(STK_EINVAL, "stk_diagnose: NULL %s", in ? "out" : "in");
    /* An older caller's shorter input struct is read as far as it goes, the rest defaults; a
     * shorter result is written as far as it goes (include/stoker.h, "Structs"). */
    stk_diag_input x;
    stk_diag_input_init(&x);
    if (!stk__opts_load(&x, sizeof(x), in) || out->struct_size < STK__STRUCT_MIN)
        return stk__set_last_error(STK_EINVAL,
                                   "stk_diagnose: struct_size not set (call "
                                   "stk_diag_input_init; set out->struct_size = sizeof *out)");
    if (!measured(x.wait_s) || !measured(x.step_s) || !measured(x.samples_per_step))
        return stk__set_last_error(STK_EINVAL,
                                   "stk_diagnose: wait_s %g, step_s %g and samples_per_step %g "
                                   "must be finite and >= 0",
                                   x.wait_s, x.step_s, x.samples_per_step);
    if (x.n_probes && (!x.probe_threads || !x.probe_rate))
        return stk__set_last_error(STK_EINVAL, "stk_diagnose: %zu probes but no arrays",
                                   x.n_probes);
    for (size_t i = 0; i < x.n_probes; i++) {
        if (!measured(x.probe_rate[i]))
            return stk__set_last_error(STK_EINVAL, "stk_diagnose: probe %zu: rate %g", i,
                                       x.probe_rate[i]);
        if (i && x.probe_threads[i] <= x.probe_threads[i - 1])
            return stk__set_last_error(STK_EINVAL,
                                       "stk_diagnose: probe thread counts must ascend (%lld "
                                       "after %lld)",
                                       (long long)x.probe_threads[i],
                                       (long long)x.probe_threads[i - 1]);
    }

    stk_diag_result r;
    stk_diag_result_init(&r);
    r.data_bound_share = STK_DIAG_DATA_BOUND_SHARE;
    r.headroom = STK_DIAG_HEADROOM;
    r.recommended = -1;
    r.best = -1;
    r.current = -1;
    for (size_t i = 0; i < x.n_probes; i++) {
        if (r.best < 0 || x.probe_rate[i] > x.probe_rate[r.best])
            r.best = (int64_t)i;
        if (x.current_threads >= 0 && x.probe_threads[i] <= x.current_threads)
            r.current = (int64_t)i; /* the largest measured count not above the current one */
    }
    if (x.steps == 0) {
        r.action = STK_DIAG_UNKNOWN;
        r.demand = NAN;
        goto done;
    }
    double busy = x.wait_s + x.step_s, step = x.step_s / (double)x.steps;
    r.wait_share = busy > 0 ? x.wait_s / busy : 0;
    r.data_bound = r.wait_share > STK_DIAG_DATA_BOUND_SHARE;
    r.step_ms = step * 1e3;
    r.wait_ms = x.wait_s / (double)x.steps * 1e3;
    r.demand = step < STK_DIAG_NO_STEP_S ? INFINITY : x.samples_per_step / step;
    for (size_t i = 0; i < x.n_probes && isfinite(r.demand); i++)
        if (x.probe_rate[i] >= r.demand * STK_DIAG_HEADROOM) {
            r.recommended = (int64_t)i;
            break;
        }
    int64_t need = r.recommended >= 0 ? x.probe_threads[r.recommended] : -1;
    int64_t cur = x.current_threads;
    if (!r.data_bound)
        r.action = need >= 0 && cur >= 0 && need < cur   ? STK_DIAG_FEWER
                   : need >= 0 && cur >= 0 && need > cur ? STK_DIAG_NO_HEADROOM
                                                         : STK_DIAG_KEEP;
    else
        r.action = need < 0                ? STK_DIAG_TOO_SLOW
                   : cur < 0 || need > cur ? STK_DIAG_MORE
                                           : STK_DIAG_CONTENTION;
done:
    stk__out_store(out, &r, sizeof(r)); /* the caller's size */
    return STK_OK;
}
