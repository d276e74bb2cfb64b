/*
 * stk_trace.c: the loader's trace. Each thread appends its stage events to its own buffer (no
 * lock), publishing the length with a release store, so stk_loader_trace_write, which may run
 * while the loader does, reads only complete events. Tracks: tid 0 the consumer, tid k worker
 * k-1, then the device (copies and finishing as the GPU ran them).
 */
#include "loader/stk_loader_int.h"

#include <errno.h>
#include <string.h>

static const char *const tr_names[TR_N] = {
    "read",         "decode",     "augment",       "wait for slot", "wait for batch", "step",
    "finish (cpu)", "copy issue", "wait for copy", "copy",          "finish"};

void stk__trace_add(const core *c, tbuf *b, uint32_t stage, uint64_t t0, uint64_t t1, uint32_t arg)
{
    uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    if (n >= b->cap)
        return; /* full: the trace keeps each thread's first events */
    b->ev[n] = (tev){t0 - c->created_ns, t1 - c->created_ns, stage, arg};
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

/* Write one track's complete events as trace-event JSON objects. */
static void trace_track(FILE *f, const tbuf *b, int tid, bool *first)
{
    uint32_t n = atomic_load_explicit(&((tbuf *)b)->n, memory_order_acquire);
    for (uint32_t i = 0; i < n; i++) {
        const tev *e = &b->ev[i];
        fprintf(f,
                "%s\n{\"name\": \"%s\", \"cat\": \"stoker\", \"ph\": \"X\", \"pid\": 1, "
                "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, \"args\": {\"%s\": %u}}",
                *first ? "" : ",", tr_names[e->stage], tid, (double)e->t0 / 1e3,
                (double)(e->t1 - e->t0) / 1e3,
                tid == 0 || e->stage >= TR_ISSUE ? "batch" : "sample", e->arg);
        *first = false;
    }
}

stk_status stk_loader_trace_write(const stk_loader *L, const char *path)
{
    core *c = L->c;
    if (!c->ctrace.cap)
        return stk__set_error(((stk_loader *)L)->errmsg, sizeof(L->errmsg), STK_ESTATE,
                              "tracing is off: create the loader with trace_events > 0");
    FILE *f = fopen(path, "w");
    if (!f)
        return stk__set_error(((stk_loader *)L)->errmsg, sizeof(L->errmsg), STK_EIO, "%s: %s", path,
                              strerror(errno));
    bool first = true;
    fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [");
    /* Track names: tid 0 is the consumer, tid k the worker k-1. */
    fprintf(f, "\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": 0, "
               "\"args\": {\"name\": \"consumer\"}}");
    first = false;
    for (uint32_t i = 0; i < c->n_threads; i++)
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %u, "
                "\"args\": {\"name\": \"worker %u\"}}",
                i + 1, i);
    if (c->dtrace.cap) /* the device track: copies and finishing as the GPU ran them */
        fprintf(f,
                ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": 1, \"tid\": %u, "
                "\"args\": {\"name\": \"device %d (loader stream)\"}}",
                c->n_threads + 1, (int)c->r.dc.device);
    trace_track(f, &c->ctrace, 0, &first);
    for (uint32_t i = 0; i < c->n_threads; i++)
        trace_track(f, &c->workers[i].trace, (int)i + 1, &first);
    if (c->dtrace.cap) {
        pthread_mutex_lock(&c->r.mu); /* the device track is appended under mu */
        trace_track(f, &c->dtrace, (int)c->n_threads + 1, &first);
        pthread_mutex_unlock(&c->r.mu);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0)
        return stk__set_error(((stk_loader *)L)->errmsg, sizeof(L->errmsg), STK_EIO, "%s: %s", path,
                              strerror(errno));
    return STK_OK;
}
