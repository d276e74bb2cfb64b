/*
 * stk_loader.c: a loader's life: its options, create (the dataset, the transform field, the
 * rank, the ring and its device side, the order, the workers) and destroy. What its consumer
 * calls (next, the resets, info, stats) is stk_consumer.c; the other stages are their own files
 * (stk_loader_int.h lists them).
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
 * consumer: a batch became READY, broadcast after unlocking; a reset: busy dropped to 0, broadcast
 * only while one waits, `resets`).
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
    stk__ring_teardown(&c->r);
    stk__free(c->ctrace.ev);
    stk__free(c->dtrace.ev);
    stk__order_free(c);
    stk__free((void *)c->checked);
    stk__memotab_destroy(c->memo_tab); /* writes its tables: before the memo's blobs go */
    stk__memo_destroy(c->memo);
    stk_dataset_close(c->owned_ds);
    stk_transform_destroy(c->own_transform);
    stk__free(c);
}

void stk_loader_opts_init_sized(stk_loader_opts *opts, size_t struct_size)
{
    stk_loader_opts full = {.struct_size = sizeof(full),
                            .batch_size = 256,
                            .n_threads = 0, /* online CPUs */
                            .n_slots = 0,   /* the default depth */
                            .rank = -1,
                            .world = -1,
                            .transform_field = NULL,
                            .device = -1};
    stk__init_store(opts, struct_size, &full, sizeof(full));
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
        for (uint32_t i = 0; i <= c->n_threads; i++) { /* and the helper's */
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
    char why[160];
    if (!stk__fields_load(fields, o->sample_fields, o->n_sample_fields, why, sizeof(why)))
        return stk__set_error(err, err_size, STK_EINVAL, "sample_fn: output %s", why);
    for (size_t f = 0; f < o->n_sample_fields; f++) {
        const stk_field *fd = &fields[f];
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
        max_size[f] = 0;
    }
    *n_fields = o->n_sample_fields;
    return STK_OK;
}

#define SKIP_READS 64 /* records tried for the binding under on_error=skip */

/* Fit the transform to the field it reads (stk__transform_bind): a kind whose output depends on
 * its data (audio: the files' rate and channels) gets a bound copy, c->own_transform, from the
 * field and, when it needs them, record 0's bytes (under on_error=skip, the first record that
 * reads and decodes). */
static stk_status bind_transform(core *c, const stk_field *fd, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    uint8_t *buf = NULL;
    char why[STK_ERRMSG_SIZE] = "", where[STK_ERRMSG_SIZE] = "";
    if (!stk__transform_bind_reads(c->transform, fd)) {
        rc = stk__transform_bind(c->transform, fd, NULL, 0, &c->own_transform, why, sizeof(why));
        goto done;
    }
    size_t cap = stk_dataset_max_record_size(c->ds);
    if (!(buf = stk__malloc(cap ? cap : 1)))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory reading record 0");
    /* Record 0; under on_error=skip, the first good one of the next SKIP_READS */
    for (uint64_t i = 0; i < STK_MIN(c->n, (uint64_t)SKIP_READS); i++) {
        stk_record rec;
        char w[STK_ERRMSG_SIZE];
        stk_record_init(&rec);
        rc = stk_dataset_read(c->ds, i, buf, cap, &rec);
        if (rc < 0)
            snprintf(w, sizeof(w), "%s", stk_last_errmsg());
        else
            rc = stk__transform_bind(c->transform, fd, rec.field[c->tfield],
                                     rec.field_size[c->tfield], &c->own_transform, w, sizeof(w));
        if (i == 0) {
            memcpy(why, w, sizeof(why));
            stk_dataset_describe(c->ds, 0, where, sizeof(where));
        }
        if (!c->skip_corrupt || (rc != STK_EFORMAT && rc != STK_ELIMIT))
            break;
    }
    stk__free(buf);
    if (rc < 0)
        return stk__set_error(
            err, err_size, rc,
            "%s: %s (read when the loader starts, to learn the files' rate and "
            "channel count; with sample_rate= (or a Resample before the crop) and a Downmix it "
            "is not needed)",
            where, why);
done:
    if (rc < 0)
        return stk__set_error(err, err_size, rc, "%s", why);
    if (c->own_transform)
        c->transform = c->own_transform;
    return STK_OK;
}

/* The field the transform reads: `name`, or its media kind's pick when NULL (for images
 * stk_dataset_image_field's); for images an encoded image (bytes) or a uint8 image array
 * (c->tarray, c->tgeom); then the transform bound to it. */
static stk_status transform_field(core *c, const char *name, char *err, size_t err_size)
{
    stk_media media = stk_transform_media(c->transform);
    if (!name) {
        size_t f;
        stk_status rc = stk__dataset_media_field(c->ds, media, &f);
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
    if (media == STK_MEDIA_IMAGE && fd->kind != STK_FIELD_BYTES) { /* pixels, no decode */
        c->tarray = true;
        stk_status rc = stk__imgarray_of(fd, &c->tgeom, err, err_size);
        if (rc < 0)
            return rc;
    }
    stk_status rc = bind_transform(c, fd, err, err_size);
    /* a transform that needs only part of a long record (an audio crop) reads it in place where
     * the source can give a field so */
    c->in_place = rc == STK_OK && fd->kind == STK_FIELD_BYTES && c->ds->m->field_open &&
                  stk__transform_reads_in_place(c->transform) && !getenv("STOKER_READ_WHOLE");
    return rc;
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
    if (c->transform && !c->in_place) /* a field read in place needs no read buffer */
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
    c->per_record = 1;
    for (size_t k = 0; c->ds->m->extent && k < c->ds->n_files && !c->readahead; k++)
        c->readahead = stk__vfs_for(c->ds->files[k].path)->readahead != NULL;
    if (c->n == 0)
        STK_FAIL(err, STK_EINVAL, "dataset is empty (0 records)");
    c->batch_size = (uint32_t)opts->batch_size;
    c->n_threads = opts->n_threads ? (uint32_t)opts->n_threads : stk_n_cpus();
    c->cores = stk_n_cpus();
    c->n_slots = opts->n_slots ? (uint32_t)opts->n_slots : 4;
    c->rank = rank;
    c->world = world;
    c->seed = opts->seed;
    c->shuffle = opts->flags & STK_LOADER_SHUFFLE;
    if ((opts->flags & STK_LOADER_DROP_TAIL) && (opts->flags & STK_LOADER_PAD_TAIL))
        STK_FAIL(err, STK_EINVAL, "flags STK_LOADER_DROP_TAIL and STK_LOADER_PAD_TAIL together");
    /* DROP_LAST alone drops both the tail across ranks and the partial last batch; the TAIL
     * flags decide the tail on their own (DistributedSampler's drop_last vs the DataLoader's). */
    bool drop_last = opts->flags & STK_LOADER_DROP_LAST;
    bool drop_tail =
        (opts->flags & STK_LOADER_DROP_TAIL) || (drop_last && !(opts->flags & STK_LOADER_PAD_TAIL));
    c->plan_flags = (drop_last ? STK_PLAN_DROP_LAST : 0) | (drop_tail ? STK_PLAN_DROP_TAIL : 0) |
                    ((opts->flags & STK_LOADER_STRIDED) ? STK_PLAN_STRIDED : 0);
    c->skip_corrupt = opts->flags & STK_LOADER_SKIP_CORRUPT;
    c->timed = !(opts->flags & STK_LOADER_NO_STATS);
    c->created_ns = stk__now_ns();
    c->autotune = opts->flags & STK_LOADER_AUTOTUNE;
    /* Autotune starts with one thread and two batches ahead, and grows from there. */
    stk__autotune_init(&c->at, c->n_threads, c->n_slots);
    c->caller_loads = opts->flags & STK_LOADER_CALLER_LOADS;
    if (c->caller_loads)
        c->autotune = false;
    if (!c->autotune) { /* every thread works and every slot may be ahead */
        c->at.active = c->caller_loads ? 0 : c->n_threads;
        c->at.depth = c->n_slots;
    }
    c->at_last_ns = c->created_ns;
    c->read_flags = (opts->flags & STK_LOADER_NO_VERIFY) ? STK__READ_NO_VERIFY : 0;
    c->transform = opts->transform;
    c->tfield = -1;
    stk__tspec tspec;
    memset(&tspec, 0, sizeof(tspec));
    if (c->transform) {
        STK_TRY(transform_field(c, opts->transform_field, err, sizeof(err)));
        stk__transform_spec(c->transform, &tspec);
        uint32_t per = stk__transform_per_record(c->transform);
        if (per > 1 && c->n > UINT64_MAX / 2 / per)
            STK_FAIL(err, STK_EINVAL, "%llu records x %u clips per video is too many samples",
                     (unsigned long long)c->n, per);
        c->per_record = per;
        if (stk__transform_keeps_memo(c->transform) &&
            !(c->memo = stk__memo_create(c->n, STK__MEMO_CAP)))
            STK_FAIL(err, STK_ENOMEM, "out of memory for the per-record memo");
        c->memo_file = stk__transform_memo_file(c->transform, &c->memo_magic);
        if (c->memo && c->memo_file &&
            !(c->memo_tab = stk__memotab_create(c->memo_file, c->memo_magic)))
            STK_FAIL(err, STK_ENOMEM, "out of memory for the shards' index tables");
        c->n *= per;
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
    if (c->caller_loads && !opts->sample_fn && !opts->sample_fn_v2)
        STK_FAIL(err, STK_EINVAL, "flag STK_LOADER_CALLER_LOADS needs a sample callback");
    if (c->caller_loads && opts->device >= 0) /* (the consumer's batch would wait for its copy) */
        STK_FAIL(err, STK_EINVAL, "flag STK_LOADER_CALLER_LOADS with a device copy (device %d)",
                 opts->device);
    if (opts->sample_fn || opts->sample_fn_v2) {
        /* Workers read each record into their own buffer (laid out as in_lay); the slot holds
         * what the callback writes. */
        STK_TRY(stk__layout_init(&c->in_lay, fields, max_size, n_fields, 1, c->tfield, &tspec, err,
                                 sizeof(err)));
        STK_TRY(sample_fields(opts, fields, max_size, &n_fields, err, sizeof(err)));
        c->sample_fn = opts->sample_fn;
        c->sample_fn_v2 = opts->sample_fn_v2;
        c->sample_ahead_fn = opts->sample_fn_v2 ? opts->sample_ahead_fn : NULL;
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

    stk__ring_args ra = {.n_slots = c->n_slots,
                         .finish = {.on = false},
                         .sample_fn = stk__sampled(c),
                         .batch_ops = c->bops.n > 0,
                         .want_pinned = (opts->flags & STK_LOADER_PINNED) != 0,
                         .device = opts->device,
                         .pinned_limit = opts->pinned_limit,
                         .shared = (opts->flags & STK_LOADER_SHARED_RING) != 0};
    if (c->transform)
        stk__transform_finish(c->transform, &ra.finish);
    STK_TRY(stk__ring_setup(&c->r, &ra, err, sizeof(err)));
    bool hwc = c->r.dc.fin_t >= 0 ? c->r.dc.fin.nhwc != 0
                                  : c->transform && stk__transform_nhwc(c->transform);
    STK_TRY(stk__batchops_init(&c->bops, &c->r.view,
                               !c->transform ? "image"
                               : tspec.name  ? tspec.name /* the output's own name: "audio" */
                                             : stk_dataset_field(c->ds, (size_t)c->tfield)->name,
                               label, hwc, err, sizeof(err)));
    STK_TRY(budget_check(c, opts->memory_budget, err, sizeof(err)));

    /* Epoch 0 from position 0; the consumer and the dispatcher start in step. */
    stk__loader_plan(c, 0, &c->d_plan);
    c->c_plan = c->d_plan;

    c->workers = stk__calloc(c->n_threads + 1, sizeof(worker)); /* + stk_loader_help's */
    if (!c->workers)
        STK_FAIL(err, STK_ENOMEM, "out of memory allocating %u workers", c->n_threads);
    if (opts->trace_events) {
        c->timed = true; /* a trace needs the clock */
        c->ctrace.cap = opts->trace_events;
        c->ctrace.ev = stk__calloc(opts->trace_events, sizeof(tev));
        if (!c->ctrace.ev)
            STK_FAIL(err, STK_ENOMEM, "out of memory for the trace buffers");
        if (c->r.dc.dev) {
            c->dtrace.cap = opts->trace_events;
            c->dtrace.ev = stk__calloc(opts->trace_events, sizeof(tev));
            if (!c->dtrace.ev)
                STK_FAIL(err, STK_ENOMEM, "out of memory for the trace buffers");
        }
    }
    /* with a sample callback, one more: stk_loader_help's (no thread of its own) */
    for (uint32_t i = 0; i < c->n_threads + (stk__sampled(c) ? 1u : 0u); i++) {
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
            w->scratch_size =
                c->in_place ? 1 : stk_dataset_field_max_size(c->ds, (size_t)c->tfield);
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
    if (opts->state && (rc = stk_loader_load_state(L, opts->state)) < 0)
        STK_FAIL(err, rc, "%s", L->errmsg);
    /* (CALLER_LOADS: none would ever take a sample; their workers[] entries stay for the stats) */
    for (uint32_t i = 0; i < (c->caller_loads ? 0 : c->n_threads); i++) {
        if (pthread_create(&c->workers[i].thread, NULL, stk__worker_main, &c->workers[i]) != 0)
            STK_FAIL(err, STK_ENOMEM, "cannot start worker thread %u", i);
        /* Named before create returns, not when the thread first runs (which a loaded machine
         * can delay): counting "stk-worker" threads is exact from here on (issue 30). */
        pthread_setname_np(c->workers[i].thread, "stk-worker");
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
