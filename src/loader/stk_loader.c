/*
 * stk_loader.c: a loader's life (create, destroy) and its consumer side (next, reset, info,
 * stats). The other stages are their own files (stk_loader_int.h lists them).
 *
 * Design (docs/design.md has the long form):
 *  - Batches form one sequence numbered by `seq` (monotonic over the loader's life, across
 *    epochs and resets); batch `seq` lives in ring slot seq % n_slots. The dispatcher state (the
 *    epoch and batch the next opened slot gets, stk_worker.c) and the consumer state (the epoch
 *    and batch the consumer gets next, here) walk the same epoch plans, so both agree on what
 *    each seq is.
 *  - Errors are recorded on the slot and surface when the consumer reaches that batch.
 *  - Reset (set_epoch, load_state): bump `gen`, wait until no worker is inside a sample (`busy`),
 *    free every slot that is not HELD, and restart the dispatcher at the consumer's seq.
 *  - Destroy: stop and join the workers; slots still HELD keep the ring (`core`) alive through
 *    its reference count until their release.
 *
 * Stats: each worker adds its stage times to its own relaxed atomic counters (no lock);
 * stk_loader_stats_get sums them. Autotune runs on the consumer thread inside stk_loader_next
 * (under mu): every 250 ms it feeds the last window to stk__autotune_decide and applies the
 * decision.
 *
 * Locking: the ring's mutex `mu` (stk_loader_int.h says what it guards). Condition variables:
 * `cv_work` (workers: a slot was freed, a reset finished, stop, autotune) and `cv_ready` (the
 * consumer: a batch became READY; reset: busy dropped to 0).
 */
#include "batch/stk_pinned.h"
#include "loader/stk_loader_int.h"
#include "xform/stk_xform.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Free the core (the last reference is gone). */
static void core_destroy(stk__ring *r, void *arg)
{
    (void)r;
    core *c = arg;
    char err[STK_ERRMSG_SIZE];
    /* Device buffers and pinned memory are freed with the device context current. */
    bool pushed = c->cudev_open && stk__cudev_push(&c->cudev, err, sizeof(err)) == STK_OK;
    stk__devring_destroy(c->dc.dev);
    stk__ring_free(&c->r);
    if (pushed)
        stk__cudev_pop(&c->cudev);
    if (c->cudev_open)
        stk__cudev_close(&c->cudev);
    stk__free(c->ctrace.ev);
    stk__free(c->dtrace.ev);
    stk__order_free(c);
    stk__free((void *)c->checked);
    stk_dataset_close(c->owned_ds);
    stk__free(c);
}

void stk_loader_opts_init(stk_loader_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->batch_size = 256;
    opts->n_threads = 0;
    opts->n_slots = 0;
    opts->rank = -1;
    opts->world = -1;
    opts->transform_field = NULL;
    opts->device = -1;
}

/* Stop and join every started worker (mu not held). */
static void stop_workers(core *c)
{
    pthread_mutex_lock(&c->r.mu);
    c->stop = true;
    atomic_fetch_add(&c->gen, 1); /* workers drop the batch they are in (a slow sample_fn) */
    pthread_cond_broadcast(&c->r.cv_work);
    pthread_mutex_unlock(&c->r.mu);
    for (uint32_t i = 0; i < c->n_started; i++)
        pthread_join(c->workers[i].thread, NULL);
    if (c->workers) {
        for (uint32_t i = 0; i < c->n_threads; i++) {
            stk__transform_worker_destroy(c->workers[i].tw);
            stk__dataset_cursor_close(c->ds, c->workers[i].cur);
            stk__free(c->workers[i].scratch);
            stk__free(c->workers[i].rgb);
            stk__free(c->workers[i].bscratch);
            stk__free(c->workers[i].in);
            stk__free(c->workers[i].trace.ev);
        }
        stk__free(c->workers);
        c->workers = NULL;
    }
    c->n_started = 0;
}

/* The slot's fields under a sample_fn: its declared outputs (checked). */
static stk_status sample_fields(const stk_loader_opts *o, stk_field *fields, uint64_t *max_size,
                                size_t *n_fields, char *err, size_t err_size)
{
    if (!o->sample_fields || o->n_sample_fields < 1 || o->n_sample_fields > STK_MAX_FIELDS)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "sample_fn: %zu output fields declared (1..%d)", o->n_sample_fields,
                              STK_MAX_FIELDS);
    for (size_t f = 0; f < o->n_sample_fields; f++) {
        const stk_field *fd = &o->sample_fields[f];
        if (fd->kind == STK_FIELD_BYTES ||
            (fd->kind == STK_FIELD_ARRAY &&
             (fd->ndim < 1 || fd->ndim > STK_MAX_DIMS || stk_dtype_size(fd->dtype) == 0)))
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "sample_fn: output field '%.*s' cannot be batched (fixed-shape "
                                  "arrays, int64 and float32 only)",
                                  STK_MAX_NAME, fd->name);
        if (memchr(fd->name, 0, STK_MAX_NAME) == NULL || strcmp(fd->name, "index") == 0)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "sample_fn: output field %zu has an invalid name", f);
        fields[f] = *fd;
        max_size[f] = 0;
    }
    *n_fields = o->n_sample_fields;
    return STK_OK;
}

/* The field the transform reads: `name`, or stk_dataset_image_field's pick when NULL; an
 * encoded image (bytes) or a uint8 image array (c->tarray, c->tgeom). */
static stk_status transform_field(core *c, const char *name, char *err, size_t err_size)
{
    if (!name) {
        size_t f;
        stk_status rc = stk_dataset_image_field(c->ds, &f);
        if (rc < 0)
            return stk__set_error(err, err_size, rc, "%s", stk_last_errmsg());
        c->tfield = (int)f;
    } else if ((c->tfield = stk_dataset_find_field(c->ds, name)) < 0) {
        char list[STK_MAX_FIELDS * (STK_MAX_NAME + 2)] = "";
        for (size_t f = 0, at = 0; f < stk_dataset_n_fields(c->ds) && f < STK_MAX_FIELDS; f++)
            at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%s", f ? ", " : "",
                                   stk_dataset_field(c->ds, f)->name);
        return stk__set_error(err, err_size, STK_EINVAL,
                              "the transform's field '%s' is not in the dataset (its fields: %s)",
                              name, list);
    }
    const stk_field *fd = stk_dataset_field(c->ds, (size_t)c->tfield);
    if (fd->kind == STK_FIELD_BYTES)
        return STK_OK;
    c->tarray = true;
    return stk__imgarray_of(fd, &c->tgeom, err, err_size);
}

/* Resolve rank and world from options or environment. */
static stk_status resolve_rank(const stk_loader_opts *o, uint32_t *rank, uint32_t *world)
{
    if (o->rank == -1 && o->world == -1)
        return stk_env_rank(rank, world);
    if (o->rank < 0 || o->world < 1)
        return stk__set_last_error(STK_EINVAL,
                                   "rank %d / world size %d: rank must be >= 0 and world size "
                                   ">= 1 (or both -1 to read them from the environment)",
                                   (int)o->rank, (int)o->world);
    if (o->rank >= o->world)
        return stk__set_last_error(STK_EINVAL, "rank %d is not below world size %d", (int)o->rank,
                                   (int)o->world);
    *rank = (uint32_t)o->rank;
    *world = (uint32_t)o->world;
    return STK_OK;
}

/* The loader's fixed memory against opts.memory_budget (0 = none), at create: the ring, and per
 * thread the read scratch of the transformed field, the batch transforms' scratch and the
 * sample_fn buffer. What remains is the room for decode buffers, charged while running as they
 * grow (stk__decoder_reserve through the workers' stk__thread_budget): a decode that does not
 * fit fails its record. */
static stk_status budget_check(core *c, uint64_t budget, char *err, size_t err_size)
{
    if (!budget)
        return STK_OK;
    uint64_t ring = (uint64_t)c->r.slot_alloc * c->n_slots, scratch = 0;
    if (c->transform)
        scratch = stk_dataset_field_max_size(c->ds, (size_t)c->tfield);
    scratch += c->bops.n ? c->bops.scratch_size : 0;
    scratch += stk__sampled(c) ? c->in_lay.slot_size : 0;
    uint64_t total = ring + scratch * c->n_threads + (c->checked ? (c->n / 64 + 1) * 8 : 0);
    c->budget.limit = budget;
    c->budget.fixed = total;
    c->budget_on = true;
    if (total <= budget && scratch * c->n_threads / c->n_threads == scratch)
        return STK_OK;
    return stk__set_error(err, err_size, STK_ELIMIT,
                          "memory budget of %" PRIu64 " bytes exceeded: the ring takes %" PRIu64
                          " (%u slots of %zu bytes), %u threads take %" PRIu64
                          " each in scratch (read, batch transforms, sample buffer), %" PRIu64
                          " in all, before any image is decoded; lower n_slots, batch size or "
                          "threads, or raise memory_budget",
                          budget, ring, c->n_slots, c->r.slot_alloc, c->n_threads, scratch, total);
}

stk_status stk_loader_create(const stk_loader_opts *opts, stk_loader **out)
{
    stk_status rc = STK_OK;
    stk_loader *L = NULL;
    core *c = NULL;
    char err[STK_ERRMSG_SIZE] = "";
    *out = NULL;
    stk__clear_last_error();
    /* A caller built against an older header passes a shorter struct: defaults for the rest. */
    stk_loader_opts full;
    stk_loader_opts_init(&full);
    if (!stk__opts_load(&full, sizeof(full), opts))
        return stk__set_last_error(STK_EINVAL, "options not initialised with "
                                               "stk_loader_opts_init");
    opts = &full;
    if (opts->batch_size < 1)
        return stk__set_last_error(STK_EINVAL, "batch size %" PRId64 " is invalid (must be >= 1)",
                                   opts->batch_size);
    if (opts->batch_size > 0x7fffffff)
        return stk__set_last_error(STK_EINVAL,
                                   "batch size %" PRId64 " is too large (at most 2147483647)",
                                   opts->batch_size);
    if (opts->n_threads < 0)
        return stk__set_last_error(STK_EINVAL,
                                   "thread count %d is invalid (must be >= 0; 0 = "
                                   "one per CPU)",
                                   (int)opts->n_threads);
    if (opts->n_slots < 0)
        return stk__set_last_error(STK_EINVAL, "n_slots %d is invalid (must be >= 1; 0 = default)",
                                   (int)opts->n_slots);
    if (!opts->dataset && (!opts->paths || opts->n_paths == 0))
        return stk__set_last_error(STK_EINVAL, "no data: give dataset paths or an open dataset");
    uint32_t rank, world;
    if ((rc = resolve_rank(opts, &rank, &world)) < 0)
        return rc;

    c = stk__calloc(1, sizeof(*c));
    L = stk__calloc(1, sizeof(*L));
    if (!c || !L) {
        stk__free(c);
        stk__free(L);
        return stk__set_last_error(STK_ENOMEM, "out of memory creating the loader");
    }
    stk__ring_init(&c->r);
    c->r.destroy = core_destroy;
    c->r.destroy_arg = c;
    L->c = c;
    if (opts->dataset) {
        c->ds = opts->dataset;
    } else {
        stk_dataset_opts dopts;
        stk_dataset_opts_init(&dopts);
        dopts.paths = opts->paths;
        dopts.n_paths = opts->n_paths;
        dopts.flags = (opts->flags & STK_LOADER_NO_VERIFY) ? STK_DATASET_NO_VERIFY : 0;
        dopts.format = opts->format;
        if ((rc = stk_dataset_open_v2(&dopts, &c->owned_ds)) < 0) {
            snprintf(err, sizeof(err), "%s", stk_last_errmsg());
            goto fail;
        }
        c->ds = c->owned_ds;
    }
    c->n = stk_dataset_n_records(c->ds);
    for (size_t k = 0; c->ds->m->extent && k < c->ds->n_files && !c->readahead; k++)
        c->readahead = stk__vfs_for(c->ds->files[k].path)->readahead != NULL;
    if (c->n == 0)
        STK_FAIL(err, STK_EINVAL, "dataset is empty (0 records)");
    c->batch_size = (uint32_t)opts->batch_size;
    c->n_threads = opts->n_threads ? (uint32_t)opts->n_threads : stk__cpu_count();
    c->n_slots = opts->n_slots ? (uint32_t)opts->n_slots : 4;
    c->rank = rank;
    c->world = world;
    c->seed = opts->seed;
    c->shuffle = opts->flags & STK_LOADER_SHUFFLE;
    c->drop_last = opts->flags & STK_LOADER_DROP_LAST;
    c->skip_corrupt = opts->flags & STK_LOADER_SKIP_CORRUPT;
    c->timed = !(opts->flags & STK_LOADER_NO_STATS);
    c->created_ns = stk__now_ns();
    c->autotune = opts->flags & STK_LOADER_AUTOTUNE;
    /* Autotune starts with one thread and two batches ahead, and grows from there. */
    stk__autotune_init(&c->at, c->n_threads, c->n_slots);
    if (!c->autotune) { /* every thread works and every slot may be ahead */
        c->at.active = c->n_threads;
        c->at.depth = c->n_slots;
    }
    c->at_last_ns = c->created_ns;
    c->read_flags = (opts->flags & STK_LOADER_NO_VERIFY) ? STK__READ_NO_VERIFY : 0;
    c->transform = opts->transform;
    c->tfield = -1;
    stk__tspec tspec;
    if (c->transform) {
        STK_TRY(transform_field(c, opts->transform_field, err, sizeof(err)));
        stk__transform_spec(c->transform, &tspec);
        if (!c->tarray && !(c->checked = stk__calloc((size_t)(c->n / 64 + 1), sizeof(uint64_t))))
            STK_FAIL(err, STK_ENOMEM, "out of memory for the per-record check bits");
    }
    stk_field fields[STK_MAX_FIELDS];
    uint64_t max_size[STK_MAX_FIELDS];
    size_t n_fields = STK_MIN(stk_dataset_n_fields(c->ds), (size_t)STK_MAX_FIELDS);
    for (size_t f = 0; f < n_fields; f++) {
        fields[f] = *stk_dataset_field(c->ds, f);
        max_size[f] = stk_dataset_field_max_size(c->ds, f);
    }
    STK_TRY(stk__batchops_opts(&c->bops, opts, err, sizeof(err)));
    int tf = c->tfield;
    if (opts->sample_fn || opts->sample_fn_v2) {
        /* Workers read each record into their own buffer (laid out as in_lay); the slot holds
         * what the callback writes. */
        STK_TRY(stk__layout_init(&c->in_lay, fields, max_size, n_fields, 1, c->tfield, &tspec, err,
                                 sizeof(err)));
        STK_TRY(sample_fields(opts, fields, max_size, &n_fields, err, sizeof(err)));
        c->sample_fn = opts->sample_fn;
        c->sample_fn_v2 = opts->sample_fn_v2;
        c->sample_ctx = opts->sample_ctx;
        tf = -1;
    }
    const char *label = opts->label_field ? opts->label_field : "label";
    if (c->bops.n) { /* the int64 label becomes float32 [num_classes] soft targets */
        size_t lf = 0;
        while (lf < n_fields && strcmp(fields[lf].name, label) != 0)
            lf++;
        if (lf == n_fields || fields[lf].kind != STK_FIELD_INT64)
            STK_FAIL(err, STK_EINVAL,
                     "batch transforms: the label field '%s' is %s (MixUp/CutMix need an int64 "
                     "class label field)",
                     label, lf == n_fields ? "not in the batch" : "not an int64 field");
        stk__batchops_label_field(&c->bops, &fields[lf]);
    }
    STK_TRY(stk__order_setup(c, opts, err, sizeof(err)));
    /* A slot holds at most the records one rank gets in an epoch: batch_size=5000 over 1,000
     * records must not allocate 5000-row slots. */
    uint64_t per_rank = c->m / world + (c->m % world != 0);
    uint32_t rows = (uint32_t)STK_MIN((uint64_t)c->batch_size, STK_MAX(per_rank, (uint64_t)1));
    STK_TRY(stk__layout_init(&c->r.lay, fields, max_size, n_fields, rows, tf, &tspec, err,
                             sizeof(err)));

    STK_TRY(stk__ring_setup(c, opts, err, sizeof(err)));
    bool hwc =
        c->dc.fin_t >= 0 ? c->dc.fin.nhwc != 0 : c->transform && stk__transform_nhwc(c->transform);
    STK_TRY(stk__batchops_init(&c->bops, &c->r.view,
                               c->transform ? stk_dataset_field(c->ds, (size_t)c->tfield)->name
                                            : "image",
                               label, hwc, err, sizeof(err)));
    STK_TRY(budget_check(c, opts->memory_budget, err, sizeof(err)));

    /* Epoch 0 from position 0; the consumer and the dispatcher start in step. */
    stk__loader_plan(c, 0, &c->d_plan);
    c->c_plan = c->d_plan;

    c->workers = stk__calloc(c->n_threads, sizeof(worker));
    if (!c->workers)
        STK_FAIL(err, STK_ENOMEM, "out of memory allocating %u workers", c->n_threads);
    if (opts->trace_events) {
        c->timed = true; /* a trace needs the clock */
        c->ctrace.cap = opts->trace_events;
        c->ctrace.ev = stk__calloc(opts->trace_events, sizeof(tev));
        if (!c->ctrace.ev)
            STK_FAIL(err, STK_ENOMEM, "out of memory for the trace buffers");
        if (c->dc.dev) {
            c->dtrace.cap = opts->trace_events;
            c->dtrace.ev = stk__calloc(opts->trace_events, sizeof(tev));
            if (!c->dtrace.ev)
                STK_FAIL(err, STK_ENOMEM, "out of memory for the trace buffers");
        }
    }
    for (uint32_t i = 0; i < c->n_threads; i++) {
        worker *w = &c->workers[i];
        w->c = c;
        w->id = i;
        if (opts->trace_events) {
            w->trace.cap = opts->trace_events;
            w->trace.ev = stk__calloc(opts->trace_events, sizeof(tev));
            if (!w->trace.ev)
                STK_FAIL(err, STK_ENOMEM, "out of memory for the trace buffers");
        }
        if ((rc = stk__dataset_cursor_open(c->ds, &w->cur, err, sizeof(err))) < 0)
            goto fail;
        if (c->bops.n && !(w->bscratch = stk__malloc(c->bops.scratch_size)))
            STK_FAIL(err, STK_ENOMEM, "out of memory for the batch transforms' scratch");
        if (stk__sampled(c) && !(w->in = stk__malloc(c->in_lay.slot_size)))
            STK_FAIL(err, STK_ENOMEM, "out of memory for a %zu-byte sample buffer",
                     c->in_lay.slot_size);
        if (c->transform) {
            w->scratch_size = stk_dataset_field_max_size(c->ds, (size_t)c->tfield);
            w->scratch = stk__malloc(w->scratch_size);
            if (!w->scratch)
                STK_FAIL(err, STK_ENOMEM, "out of memory allocating a %zu-byte read buffer",
                         w->scratch_size);
            if (c->tarray && stk__imgarray_converts(&c->tgeom) &&
                !(w->rgb = stk__malloc((size_t)c->tgeom.width * c->tgeom.height * 3)))
                STK_FAIL(err, STK_ENOMEM, "out of memory for a %ux%u RGB image buffer",
                         c->tgeom.width, c->tgeom.height);
            if ((rc = stk__transform_worker_create(c->transform, &w->tw)) < 0)
                STK_FAIL(err, rc, "cannot create transform worker state: %s", stk_last_errmsg());
        }
    }
    for (uint32_t i = 0; i < c->n_threads; i++) {
        if (pthread_create(&c->workers[i].thread, NULL, stk__worker_main, &c->workers[i]) != 0)
            STK_FAIL(err, STK_ENOMEM, "cannot start worker thread %u", i);
        c->n_started++;
    }
    *out = L;
    return STK_OK;
fail:
    stop_workers(c);
    core_destroy(&c->r, c);
    stk__free(L);
    return stk__last_error_copy(rc, err);
}

void stk_loader_destroy(stk_loader *L)
{
    if (!L)
        return;
    core *c = L->c;
    if (stk__ring_forked(&c->r))
        return;
    stop_workers(c);
    pthread_mutex_lock(&c->r.mu);
    bool last = stk__ring_unref_locked(&c->r);
    pthread_mutex_unlock(&c->r.mu);
    if (last)
        core_destroy(&c->r, c);
    stk__free(L);
}

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
    if (!(s->seq == seq && s->state == STK__SLOT_READY)) {
        uint64_t t0 = stk__loader_now(c);
        bool timed_out = false;
        while (!(s->seq == seq && s->state == STK__SLOT_READY) && !timed_out) {
            if (timeout_ms < 0)
                pthread_cond_wait(&c->r.cv_ready, &c->r.mu);
            else
                timed_out =
                    pthread_cond_timedwait(&c->r.cv_ready, &c->r.mu, &deadline) == ETIMEDOUT;
        }
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
    while (c->busy > 0)
        pthread_cond_wait(&c->r.cv_ready, &c->r.mu);
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
    out->n_threads = c->n_threads;
    out->n_slots = c->n_slots;
    out->batch_size = c->batch_size;
    out->rank = c->rank;
    out->world = c->world;
    out->n_records = c->n;
    out->slot_size = c->r.slot_alloc;
    out->pinned = c->r.pinned;
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
    out->device = c->dc.dev ? c->dc.device : -1;
    out->finish = (uint32_t)c->dc.finish;
    out->copies = atomic_load_explicit(&c->dc.st_copies, memory_order_relaxed);
    out->h2d_bytes = atomic_load_explicit(&c->dc.st_h2d, memory_order_relaxed);
    out->copied_bytes = atomic_load_explicit(&c->dc.st_copied, memory_order_relaxed);
    out->copy_ns = atomic_load_explicit(&c->dc.st_copy_ns, memory_order_relaxed);
    out->finish_ns += atomic_load_explicit(&c->dc.st_dfinish_ns, memory_order_relaxed);
    snprintf(out->device_reason, sizeof(out->device_reason), "%s", c->dev_reason);
    out->consumer_wait_ns = atomic_load_explicit(&c->consumer_wait_ns, memory_order_relaxed);
    pthread_mutex_lock(&c->r.mu);
    out->active_threads = c->at.active;
    out->depth = c->at.depth;
    out->autotune_changes = c->at.changes;
    snprintf(out->autotune_reason, sizeof(out->autotune_reason), "%s", c->at.reason);
    pthread_mutex_unlock(&c->r.mu);
    return stk__out_store(dst, &full, sizeof(full)) ? STK_OK : STK_EINVAL;
}
