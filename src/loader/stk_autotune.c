/*
 * stk_autotune.c: the autotune decision (stk_autotune.h), a pure function of the windows it is
 * fed.
 */
#include "loader/stk_autotune.h"

#include <string.h>

void stk__autotune_init(stk__autotune *a, uint32_t n_threads, uint32_t n_slots)
{
    memset(a, 0, sizeof(*a));
    a->n_threads = n_threads;
    a->n_slots = n_slots;
    a->active = 1;
    a->depth = STK_MIN(2, n_slots);
    a->ceiling = n_threads;
}

uint32_t stk__decoder_threads(uint32_t cores, uint32_t active, uint64_t samples,
                              uint32_t batch_size, uint32_t depth)
{
    uint64_t open = (uint64_t)STK_MAX(1u, batch_size) * STK_MAX(1u, depth); /* no overflow */
    uint64_t at_once = STK_MAX(1u, STK_MIN(STK_MIN((uint64_t)active, samples), open));
    uint64_t t = cores / at_once;
    return (uint32_t)STK_MIN(STK_MAX(t, 1u), (uint64_t)STK__DECODER_THREADS_MAX);
}

bool stk__autotune_decide(stk__autotune *a, const stk__at_window *w)
{
    double dt = (double)(w->dt_ns ? w->dt_ns : 1);
    double cw = (double)w->consumer_wait_ns / dt;
    double ww = (double)w->worker_wait_ns / dt; /* in threads' worth */
    double rate = (double)w->samples * 1e9 / dt;
    if (++a->windows % 20 == 0)
        a->ceiling = a->n_threads; /* the machine may have changed: probe again */
    if (a->settle > 0) {           /* let the last change show in a whole window first */
        a->settle--;
        return false;
    }
    uint32_t old = a->active, old_depth = a->depth;
    if (a->grew) {
        a->grew = false;
        if (rate < a->rate_before * 1.05) {
            /* More threads did not deliver more: the CPUs (or the storage) are the limit. */
            a->active = a->prev;
            a->ceiling = a->prev;
            snprintf(a->reason, sizeof(a->reason),
                     "%u threads gave no gain over %u (%.0f vs %.0f samples/s): back to %u", old,
                     a->prev, rate, a->rate_before, a->active);
            a->changes++;
            a->settle = 1;
            return true;
        }
    }
    uint32_t cap = STK_MIN(a->n_threads, a->ceiling);
    if (cw > 0.02 && a->active < cap) {
        a->active = cw > 0.30 ? STK_MIN(cap, a->active * 2) : a->active + 1;
        a->grew = true;
        a->prev = old;
        a->rate_before = rate;
        snprintf(a->reason, sizeof(a->reason),
                 "consumer waited %.0f%% of the time with %u thread%s: %u threads", cw * 100, old,
                 old == 1 ? "" : "s", a->active);
    } else if (cw > 0.02 && ww < 0.5 && a->depth < a->n_slots) {
        a->depth++;
        snprintf(a->reason, sizeof(a->reason),
                 "consumer waited %.0f%% with all %u threads busy: depth %u", cw * 100, old,
                 a->depth);
    } else if (cw < 0.005 && a->active > 1 && ww > 1.2) {
        a->active--;
        snprintf(a->reason, sizeof(a->reason),
                 "consumer never waited and %u threads idled %.1f threads' worth: %u threads", old,
                 ww, a->active);
    }
    if (a->active == old && a->depth == old_depth)
        return false;
    a->changes++;
    a->settle = 1;
    return true;
}
