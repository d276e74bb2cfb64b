/*
 * stk_consumer.c: a loader's consumer side: stk_loader_next (in order, with the timeout, the
 * held-slot check and the autotuner's tick), the resets (set_epoch, set_indices; load_state's in
 * stk_resume.c) and the queries (epoch, batch count, info, stats, the ring's shared memory). The
 * loader's life is stk_loader.c, whose opening comment has the design.
 *
 * Autotune runs here, on the consumer thread inside stk_loader_next (under mu): every 250 ms it
 * feeds the last window to stk__autotune_decide and applies the decision.
 */
#include "batch/stk_pinned.h"
#include "loader/stk_loader_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AT_WINDOW_NS 250000000ull /* decide every 250 ms of consumption */

/* Sum of the workers' wait-for-slot time. */
static uint64_t workers_wait_ns(const core *c)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < c->n_threads; i++)
        sum += atomic_load_explicit(&c->workers[i].wait_ns, memory_order_relaxed);
    return sum;
}

/* One autotune step (consumer thread, mu held): every AT_WINDOW_NS, feed the window to the
 * decision and wake the workers when it moved them. */
static void autotune_tick(core *c, uint64_t now)
{
    uint64_t dt = now - c->at_last_ns;
    if (dt < AT_WINDOW_NS)
        return;
    uint64_t cwait = atomic_load_explicit(&c->consumer_wait_ns, memory_order_relaxed);
    uint64_t wwait = workers_wait_ns(c);
    uint64_t samples = atomic_load(&c->st_samples);
    stk__at_window w = {dt, cwait - c->at_last_cwait, wwait - c->at_last_wwait,
                        samples - c->at_last_samples};
    c->at_last_ns = now;
    c->at_last_cwait = cwait;
    c->at_last_wwait = wwait;
    c->at_last_samples = samples;
    if (stk__autotune_decide(&c->at, &w))
        pthread_cond_broadcast(&c->r.cv_work);
}

/* ---- consumer side ---- */

stk_status stk_loader_next(stk_loader *L, stk_batch **out)
{
    return stk_loader_next_timeout(L, out, -1);
}

stk_status stk_loader_next_timeout(stk_loader *L, stk_batch **out, int64_t timeout_ms)
{
    core *c = L->c;
    *out = NULL;
    L->errmsg[0] = '\0';
    uint64_t t_in = stk__loader_now(c);
    struct timespec deadline;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &deadline); /* cv_ready runs on CLOCK_MONOTONIC */
        deadline.tv_sec += (time_t)(timeout_ms / 1000);
        deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&c->r.mu);
    if (c->ctrace.cap && c->c_return_ns) {
        stk__trace_add(c, &c->ctrace, TR_STEP, c->c_return_ns, t_in, (uint32_t)c->c_seq);
        c->c_return_ns = 0; /* a repeated call after STK_EAGAIN is not another step */
    }
    if (c->autotune)
        autotune_tick(c, stk__now_ns());
    if (c->c_b >= c->c_plan.n_batches) {
        /* Epoch done: report it once, then the next call starts the next epoch. */
        c->c_epoch++;
        c->c_b = 0;
        c->c_consumed = 0;
        stk__loader_plan(c, 0, &c->c_plan);
        pthread_mutex_unlock(&c->r.mu);
        return STK_END;
    }
    uint64_t seq = c->c_seq;
    stk__slot *s = stk__ring_slot(&c->r, seq);
    if (s->state == STK__SLOT_HELD) {
        /* The next batch's slot still holds a batch the consumer has not released: waiting
         * would deadlock. */
        uint32_t held = c->r.held;
        pthread_mutex_unlock(&c->r.mu);
        return stk__set_error(
            L->errmsg, sizeof(L->errmsg), STK_EBUSY,
            "the consumer holds %u of %u ring slots, including the one the "
            "next batch needs: release the oldest batch (or raise n_slots; Python: prefetch)",
            held, c->n_slots);
    }
    if (!(s->seq == seq && s->state == STK__SLOT_READY) && c->caller_loads) {
        /* No worker loads it: waiting would never end. */
        pthread_mutex_unlock(&c->r.mu);
        return stk__set_error(L->errmsg, sizeof(L->errmsg), STK_ESTATE,
                              "STK_LOADER_CALLER_LOADS: batch %llu is not loaded (call "
                              "stk_loader_help until it runs no sample first)",
                              (unsigned long long)seq);
    }
    if (!(s->seq == seq && s->state == STK__SLOT_READY) && timeout_ms == 0) {
        /* A poll: nothing is ready and nothing is waited for, so no consumer wait is counted
         * (a zero-length timed wait still queued for the mutex behind a busy worker). */
        pthread_mutex_unlock(&c->r.mu);
        return STK_EAGAIN;
    }
    if (!(s->seq == seq && s->state == STK__SLOT_READY)) {
        uint64_t t0 = stk__loader_now(c);
        bool timed_out = false;
        c->c_waiting = true;
        if (c->r.fresh_waiters && seq == c->open_seq) /* it waits for them: they stop waiting */
            pthread_cond_broadcast(&c->r.cv_work);
        while (!(s->seq == seq && s->state == STK__SLOT_READY) && !timed_out) {
            if (timeout_ms < 0)
                pthread_cond_wait(&c->r.cv_ready, &c->r.mu);
            else
                timed_out =
                    pthread_cond_timedwait(&c->r.cv_ready, &c->r.mu, &deadline) == ETIMEDOUT;
        }
        c->c_waiting = false;
        uint64_t t1 = stk__loader_now(c);
        atomic_fetch_add_explicit(&c->consumer_wait_ns, t1 - t0, memory_order_relaxed);
        if (c->ctrace.cap)
            stk__trace_add(c, &c->ctrace, TR_CWAIT, t0, t1, (uint32_t)seq);
        if (!(s->seq == seq && s->state == STK__SLOT_READY)) {
            pthread_mutex_unlock(&c->r.mu);
            return STK_EAGAIN; /* nothing consumed: the caller may simply call again */
        }
    }
    c->c_seq++;
    c->c_b++;
    c->c_consumed = s->consumed;
    if (s->err_code < 0) {
        stk_status rc = s->err_code;
        snprintf(L->errmsg, sizeof(L->errmsg), "%s", s->errmsg);
        stk__slot_release_locked(&c->r, s);
        atomic_fetch_add(&c->st_errors, 1);
        pthread_cond_broadcast(&c->r.cv_work);
        pthread_mutex_unlock(&c->r.mu);
        return rc;
    }
    stk__slot_hold_locked(&c->r, s);
    atomic_fetch_add(&c->st_batches, 1);
    atomic_fetch_add(&c->st_samples, s->count);
    atomic_fetch_add(&c->st_skipped, atomic_load(&s->skipped));
    c->c_return_ns = stk__loader_now(c);
    pthread_mutex_unlock(&c->r.mu);
    *out = &s->handle;
    return STK_OK;
}

/* Discard everything not held and restart the dispatcher at the consumer's position: epoch
 * `epoch` from global position `start`. */
void stk__loader_reset(core *c, uint64_t seed, uint64_t epoch, uint64_t start)
{
    stk__loader_reset_with(c, seed, epoch, start, NULL, 0);
}

void stk__loader_reset_with(core *c, uint64_t seed, uint64_t epoch, uint64_t start, uint64_t *list,
                            uint64_t m)
{
    pthread_mutex_lock(&c->r.mu);
    atomic_fetch_add(&c->gen, 1);
    c->resets++;
    while (c->busy > 0)
        pthread_cond_wait(&c->r.cv_ready, &c->r.mu);
    c->resets--;
    stk__ring_drop_locked(&c->r);
    c->seed = seed; /* no worker is inside a sample: safe to change */
    if (list) {
        c->ilist = list;
        c->m = m;
    }
    if (c->d_list) { /* the seed may have changed: the next batch makes its list anew */
        c->d_list->refs--;
        c->d_list = NULL;
    }
    c->claim_seq = c->open_seq = c->c_seq;
    c->d_epoch = c->c_epoch = epoch;
    c->d_b = c->c_b = 0;
    c->d_idle = false;
    c->c_consumed = start;
    stk__loader_plan(c, start, &c->d_plan);
    c->c_plan = c->d_plan;
    pthread_cond_broadcast(&c->r.cv_work);
    pthread_mutex_unlock(&c->r.mu);
}

stk_status stk_loader_set_epoch(stk_loader *L, uint64_t epoch)
{
    core *c = L->c;
    pthread_mutex_lock(&c->r.mu);
    bool noop = c->c_epoch == epoch && c->c_b == 0 && c->c_consumed == 0;
    pthread_mutex_unlock(&c->r.mu);
    if (!noop)
        stk__loader_reset(c, c->seed, epoch, 0);
    return STK_OK;
}

stk_status stk_loader_set_indices(stk_loader *L, const uint64_t *indices, uint64_t n_indices)
{
    core *c = L->c;
    L->errmsg[0] = '\0';
    if (c->order != STK_ORDER_INDICES)
        return stk__set_error(L->errmsg, sizeof(L->errmsg), STK_EINVAL,
                              "stk_loader_set_indices: the loader's order is not "
                              "STK_ORDER_INDICES");
    if (indices && n_indices == c->m && memcmp(indices, c->ilist, n_indices * 8) == 0)
        return STK_OK; /* the same list: keep what is prepared */
    uint64_t *list;
    stk_status rc = stk__order_list_new(c, indices, n_indices, &list, L->errmsg, sizeof(L->errmsg));
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&c->r.mu);
    uint64_t epoch = c->c_epoch, consumed = c->c_consumed;
    pthread_mutex_unlock(&c->r.mu);
    uint64_t *old = c->ilist;
    /* the reset waits until no worker is inside a sample, so none reads the old list after */
    stk__loader_reset_with(c, c->seed, epoch, consumed, list, n_indices);
    stk__free(old);
    stk__order_rehash(c);
    return STK_OK;
}

uint64_t stk_loader_epoch(const stk_loader *L)
{
    core *c = L->c;
    pthread_mutex_lock(&c->r.mu);
    uint64_t e = c->c_epoch;
    pthread_mutex_unlock(&c->r.mu);
    return e;
}

uint64_t stk_loader_n_batches(const stk_loader *L)
{
    stk_plan p;
    stk__loader_plan(L->c, 0, &p);
    return p.n_batches;
}

const stk_dataset *stk_loader_dataset(const stk_loader *L)
{
    return L->c->ds;
}

const char *stk_loader_errmsg(const stk_loader *L)
{
    return L->errmsg;
}

stk_status stk_loader_ring_memory(const stk_loader *L, stk_ring_memory *out)
{
    stk_ring_memory full = {.struct_size = sizeof(full), .fd = -1};
    if (!L || !out || out->struct_size == 0)
        return stk__set_last_error(STK_EINVAL, "stk_loader_ring_memory: NULL argument or "
                                               "struct_size not set");
    const stk__ring *r = &L->c->r;
    if (r->arena.fd >= 0) {
        full.fd = r->arena.fd;
        full.base = r->arena.base;
        full.size = r->arena.size;
        full.pinned = r->arena.pinned;
    }
    return stk__out_store(out, &full, sizeof(full)) ? STK_OK : STK_EINVAL;
}

stk_status stk_loader_info_get(const stk_loader *L, stk_loader_info *dst)
{
    const core *c = L->c;
    stk_loader_info full, *out = &full;
    memset(out, 0, sizeof(*out));
    out->n_threads = c->caller_loads ? 0 : c->n_threads; /* the worker threads running */
    out->n_slots = c->n_slots;
    out->batch_size = c->batch_size;
    out->rank = c->rank;
    out->world = c->world;
    out->n_records = c->n;
    out->slot_size = c->r.slot_alloc;
    out->pinned = c->r.pinned;
    if (c->transform)
        stk_transform_output(c->transform, &out->transform_dtype, &out->transform_ndim,
                             out->transform_shape);
    return stk__out_store(dst, &full, sizeof(full)) ? STK_OK : STK_EINVAL;
}

stk_status stk_loader_stats_get(const stk_loader *L, stk_loader_stats *dst)
{
    core *c = L->c;
    stk_loader_stats full, *out = &full;
    memset(out, 0, sizeof(*out));
    out->batches = atomic_load(&c->st_batches);
    out->samples = atomic_load(&c->st_samples);
    out->bytes_read = atomic_load(&c->st_bytes);
    out->indexed = atomic_load(&c->st_indexed);
    out->index_loaded = atomic_load(&c->st_index_loaded);
    out->index_unsaved = atomic_load(&c->st_index_unsaved);
    out->skipped = atomic_load(&c->st_skipped);
    out->errors = atomic_load(&c->st_errors);
    out->wall_ns = stk__now_ns() - c->created_ns;
    for (uint32_t i = 0; i < c->n_threads; i++) {
        worker *w = &c->workers[i];
        uint64_t read = atomic_load_explicit(&w->read_ns, memory_order_relaxed), d = 0, a = 0;
        uint64_t run = atomic_load_explicit(&w->run_ns, memory_order_relaxed);
        if (w->tw)
            stk__transform_worker_stage_ns(w->tw, &d, &a);
        out->read_ns += read;
        out->decode_ns += d;
        out->augment_ns += a;
        /* collate: what runs of samples took beyond reading and transforming. The stage times
         * grow per sample and run_ns per run, so the difference can shrink between two calls:
         * report the largest value seen, so that every counter only grows. */
        uint64_t fin = atomic_load_explicit(&w->finish_ns, memory_order_relaxed);
        uint64_t col = run > read + d + a + fin ? run - read - d - a - fin : 0;
        uint64_t seen = atomic_load_explicit(&w->collate_seen, memory_order_relaxed);
        while (col > seen &&
               !atomic_compare_exchange_weak_explicit(&w->collate_seen, &seen, col,
                                                      memory_order_relaxed, memory_order_relaxed)) {
        }
        out->collate_ns += col > seen ? col : seen;
        out->finish_ns += fin;
        out->worker_wait_ns += atomic_load_explicit(&w->wait_ns, memory_order_relaxed);
    }
    out->pinned = c->r.pinned;
    out->pinned_bytes = c->r.pinned_bytes;
    out->pinned_total = stk__pinned_total();
    out->device = c->r.dc.dev ? c->r.dc.device : -1;
    out->finish = (uint32_t)c->r.dc.finish;
    out->copies = atomic_load_explicit(&c->r.dc.st_copies, memory_order_relaxed);
    out->h2d_bytes = atomic_load_explicit(&c->r.dc.st_h2d, memory_order_relaxed);
    out->copied_bytes = atomic_load_explicit(&c->r.dc.st_copied, memory_order_relaxed);
    out->copy_ns = atomic_load_explicit(&c->r.dc.st_copy_ns, memory_order_relaxed);
    out->finish_ns += atomic_load_explicit(&c->r.dc.st_dfinish_ns, memory_order_relaxed);
    snprintf(out->device_reason, sizeof(out->device_reason), "%s", c->r.dev_reason);
    out->consumer_wait_ns = atomic_load_explicit(&c->consumer_wait_ns, memory_order_relaxed);
    pthread_mutex_lock(&c->r.mu);
    out->active_threads = c->at.active;
    out->depth = c->at.depth;
    out->autotune_changes = c->at.changes;
    snprintf(out->autotune_reason, sizeof(out->autotune_reason), "%s", c->at.reason);
    pthread_mutex_unlock(&c->r.mu);
    return stk__out_store(dst, &full, sizeof(full)) ? STK_OK : STK_EINVAL;
}
