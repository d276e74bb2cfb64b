/*
 * stk_worker.c: the worker threads. Workers persist. Each takes the next sample ticket of the
 * earliest batch that still has tickets (`claim_seq`); when a batch's tickets run out, workers
 * move on to the next batch while stragglers finish, so all threads cooperate on the batch
 * needed first. A worker opens batch `open_seq` only when its slot is FREE and the autotune depth
 * allows one more batch ahead of the consumer: that is the backpressure. A sample is its record
 * read through the record source (which owns the checksum policy), transformed, and finished (flip
 * drawn; on the CPU path its finished output written); the worker completing a batch queues its
 * device copy before marking it READY, so the copy runs ahead of the consumer. A slot whose last
 * copy may still be reading it is refilled only once the copy completed (drain).
 *
 * stk_loader_help (at the end) lends the consumer's thread to the batch it waits for: one ticket
 * at a time, taken and finished as a worker's, with the caller's callback, through the worker
 * struct after the threads' (the Python front end loads part of its first batch that way).
 */
#include "loader/stk_loader_int.h"

#include <inttypes.h>
#include <string.h>

#define SKIP_MAX_TRIES 64   /* substitutes tried for one bad sample before giving up */
#define STK__PREPARE_MAX 64 /* records handed to a source's prepare at once, at most */

/* Tell the dataset which records the `count` positions from `first` (s->stride apart) of slot
 * s's epoch will read, in the loader's order (remote byte sources fetch them ahead, coalesced and
 * many at once; only called when some file is remote). */
static void readahead_records(core *c, const stk__slot *s, uint64_t first, uint32_t count)
{
    uint64_t idx[512];
    for (uint32_t t = 0; t < count; t += 512) {
        uint32_t k = STK_MIN(count - t, 512u);
        for (uint32_t j = 0; j < k; j++)
            idx[j] =
                stk__order_at(c, s, (first + (uint64_t)(t + j) * s->stride) % c->m) / c->per_record;
        stk__dataset_readahead(c->ds, idx, k);
    }
}

/* The record ticket t of slot s reads (the epoch's order at the ticket's position). */
static uint64_t ticket_record(core *c, const stk__slot *s, uint32_t t)
{
    return stk__order_at(c, s, (s->first + (uint64_t)t * s->stride) % c->m);
}

/* A worker (or the helping consumer) left its samples (mu held). A reset waits for busy == 0;
 * it is woken only then: the consumer waits on the same condition variable for its next batch,
 * and waking it for nothing costs two context switches a batch (bench/RESULTS.md, issue 26
 * tok3). */
static void end_busy_locked(core *c)
{
    if (--c->busy == 0 && c->resets)
        pthread_cond_broadcast(&c->r.cv_ready);
}

/* Open batch c->open_seq in its slot from the dispatcher state (mu held; the slot is FREE).
 * Returns false when there is nothing to open. */
static bool open_batch(core *c)
{
    if (c->d_idle)
        return false;
    /* Skip epochs without batches (a resumed epoch that was already done, or drop_last with a
     * tiny dataset); if a whole fresh epoch is empty, every epoch is: go idle. */
    while (c->d_b >= c->d_plan.n_batches) {
        c->d_epoch++;
        c->d_b = 0;
        stk__loader_plan(c, 0, &c->d_plan);
        if (c->d_plan.n_batches == 0) {
            c->d_idle = true;
            return false;
        }
    }
    stk__slot *s = stk__ring_slot(&c->r, c->open_seq);
    stk__ring_take_hot_locked(&c->r, s);
    uint32_t count;
    s->epoch = c->d_epoch;
    stk__order_open_locked(c, s);
    stk_plan_batch(&c->d_plan, c->d_b, &s->first, &count, &s->consumed);
    s->stride = c->d_plan.strided ? c->world : 1;
    /* A resumed epoch numbers its batches from the epoch's start, not from the resume point. */
    s->number = (c->d_plan.start / ((uint64_t)c->world * c->batch_size)) + c->d_b;
    stk__slot_open_locked(s, c->open_seq, count);
    /* its records, and read-ahead: the next batch's (ranges hinted before are not asked again) */
    if (c->readahead) {
        readahead_records(c, s, s->first, count);
        if (c->d_b + 1 < c->d_plan.n_batches) { /* the next batch: the same epoch and order */
            uint64_t first, consumed;
            uint32_t next;
            stk_plan_batch(&c->d_plan, c->d_b + 1, &first, &next, &consumed);
            readahead_records(c, s, first, next);
        }
    }
    c->open_seq++;
    c->d_b++;
    return true;
}

/* The transform on a uint8 image array value (size bytes in w->scratch): its pixels as RGB,
 * straight into the pipeline (nothing to decode). */
static stk_status transform_array(core *c, worker *w, size_t size, stk_rng *rng, void *dst,
                                  char *why, size_t why_size)
{
    const stk__imgarray *a = &c->tgeom;
    if (size != a->size) /* a source whose array values vary in size */
        return stk__set_error(why, why_size, STK_EFORMAT,
                              "field '%s' holds %zu bytes, not the %zu of a %ux%u uint8 image "
                              "of %u channel%s",
                              stk_dataset_field(c->ds, (size_t)c->tfield)->name, size, a->size,
                              a->height, a->width, a->channels, a->channels > 1 ? "s" : "");
    const uint8_t *rgb = stk__imgarray_rgb(a, w->scratch, w->rgb);
    return stk__transform_apply_rgb(c->transform, w->tw, rgb, a->width, a->height,
                                    (size_t)a->width * 3, rng, dst, why, why_size);
}

/* A field read in place: its bytes at `base` of file f, and what the transform read of them. */
typedef struct inplace {
    stk__file *f;
    uint64_t base, bytes;
} inplace;

static stk_status inplace_read(void *ctx, uint64_t offset, void *buf, size_t n, char *err,
                               size_t err_size)
{
    inplace *ip = ctx;
    ip->bytes += n;
    return stk__vfs_read(ip->f, ip->base + offset, buf, n, err, err_size);
}

/* The transform on a field read in place (c->in_place): `f` (which this closes) holds it at
 * range r; the transform reads what it needs of it. *bytes receives what it read. Record rec's
 * memo blob (a video's index) comes from, and goes to, its file on disk (stk_memofile.c). */
static stk_status transform_in_place(core *c, worker *w, uint64_t rec, stk__file *f, stk__brange r,
                                     stk_rng *rng, void *dst, uint64_t *bytes, char *why,
                                     size_t why_size)
{
    inplace ip = {f, r.off, 0};
    stk__bytesrc in = {r.len, inplace_read, &ip};
    const stk__vfs_opts *prev = stk__vfs_opts_use(&c->ds->vfs);
    const uint8_t *kept = c->memo ? stk__memofile_load(c, rec, f, r) : NULL;
    stk_status rc = stk__transform_apply_in(c->transform, w->tw, &in, rng, dst, why, why_size);
    if (rc >= 0 && c->memo)
        stk__memofile_store(c, rec, f, r, kept);
    stk__vfs_close(f);
    stk__vfs_opts_use(prev);
    *bytes = ip.bytes;
    return rc;
}

/* Append the record's original file path (the `path` bytes field stoker pack writes), read into
 * row `t` of `mem`, to its description `where`, unless the description already names it (an
 * ImageFolder record is its file). */
static void name_path(const stk__layout *lay, const uint8_t *mem, uint32_t t,
                      const stk__recinfo *loc, char *where, size_t size)
{
    for (size_t i = 0; i + 1 < lay->n_tensors; i++) {
        const stk__tlayout *tl = &lay->t[i];
        if (!tl->bytes || tl->transformed || strcmp(tl->name, "path") != 0)
            continue;
        char path[256];
        size_t n = STK_MIN((size_t)loc->field_size[tl->field], sizeof(path) - 1);
        memcpy(path, mem + tl->offset + (size_t)t * tl->row_size, n);
        path[n] = '\0';
        size_t len = strlen(where);
        if (n && memchr(path, 0, n) == NULL && !strstr(where, path) && len + n + 4 <= size) {
            where[len] = ' ';
            where[len + 1] = '(';
            memcpy(where + len + 2, path, n);
            memcpy(where + len + 2 + n, ")", 2);
        }
        return;
    }
}

/* Read (and transform) sample `idx` into row `t` of `mem`, laid out as `lay`: record
 * idx / per_record (clip idx % per_record of a video). */
static stk_status read_record(core *c, worker *w, const stk__layout *lay, uint8_t *mem, uint32_t t,
                              uint64_t epoch, uint64_t idx, char *err, size_t err_size)
{
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS];
    uint64_t rec = c->per_record > 1 ? idx / c->per_record : idx; /* no division for 1 */
    for (size_t i = 0; i + 1 < lay->n_tensors; i++) {             /* the last tensor is "index" */
        const stk__tlayout *tl = &lay->t[i];
        if (tl->aux)
            continue;
        if (tl->transformed) { /* read in place: not here (the source reports its size) */
            dst[tl->field] = c->in_place ? NULL : w->scratch;
            cap[tl->field] = c->in_place ? 0 : w->scratch_size;
        } else {
            dst[tl->field] = mem + tl->offset + (size_t)t * tl->row_size;
            cap[tl->field] = tl->row_size;
        }
    }
    stk__recinfo loc;
    /* Not timed where nothing is read (record numbers only, a Python Dataset's: two clock reads
     * were ~2% of a sample of a few microseconds) */
    bool timed = lay->n_tensors > 1 || w->trace.cap;
    uint64_t t0 = timed ? stk__loader_now(c) : 0;
    const stk__readkey key = {c->seed, epoch, c->shuffle}; /* records drawn per epoch (tokens) */
    stk_status rc = stk__dataset_read_keyed(c->ds, w->cur, &key, rec, dst, cap, c->read_flags, &loc,
                                            err, err_size);
    uint64_t t1 = timed ? stk__loader_now(c) : 0;
    atomic_fetch_add_explicit(&w->read_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_READ, t0, t1, t);
    if (rc < 0)
        return rc;
    /* the bytes read; a field read in place counts what the transform reads of it (below) */
    uint64_t in_place = c->in_place ? loc.field_size[c->tfield] : 0;
    atomic_fetch_add_explicit(&c->st_bytes, loc.size - in_place, memory_order_relaxed);
    for (size_t i = 0; i + 1 < lay->n_tensors; i++) {
        const stk__tlayout *tl = &lay->t[i];
        if (tl->bytes)
            ((int64_t *)(mem + tl->lengths_offset))[t] = (int64_t)loc.field_size[tl->field];
        if (tl->transformed) {
            stk_rng rng;
            char why[STK_ERRMSG_SIZE];
            stk_rng_init(&rng, c->seed, epoch, idx);
            uint64_t d0 = 0, a0 = 0;
            if (w->trace.cap)
                stk__transform_worker_stage_ns(w->tw, &d0, &a0);
            void *out = mem + tl->offset + (size_t)t * tl->row_size;
            if (c->tarray) {
                rc = transform_array(c, w, loc.field_size[tl->field], &rng, out, why, sizeof(why));
            } else { /* a strict decode reads to the image's end on its first read only */
                if (c->per_record > 1)
                    stk__transform_worker_clip(w->tw, (uint32_t)(idx % c->per_record));
                if (c->memo) {
                    stk__transform_worker_record(w->tw, c->memo, rec);
                    stk__transform_worker_threads(
                        w->tw,
                        stk__decoder_threads(c->cores, w->active, c->n, c->batch_size, w->depth));
                }
                /* single flight: one thread indexes a video whose other clips are in flight
                 * meanwhile; they wait for it and read its index (stk_memo.c) */
                bool claimed = c->memo && stk__memo_claim(c->memo, rec);
                _Atomic uint64_t *word = &c->checked[idx / 64];
                uint64_t bit = 1ULL << (idx % 64);
                bool trusted = atomic_load_explicit(word, memory_order_relaxed) & bit;
                stk__transform_worker_trust(w->tw, trusted);
                if (c->in_place) { /* the source opens the file (its errors name it) */
                    stk__file *f = NULL;
                    stk__brange r;
                    const stk__vfs_opts *prev = stk__vfs_opts_use(&c->ds->vfs);
                    uint64_t opened = 0; /* what the source read itself */
                    rc =
                        c->ds->m->field_open(c->ds, rec, tl->field, &f, &r, &opened, err, err_size);
                    stk__vfs_opts_use(prev);
                    atomic_fetch_add_explicit(&c->st_bytes, opened, memory_order_relaxed);
                    if (rc < 0) {
                        if (claimed)
                            stk__memo_release(c->memo, rec);
                        return rc;
                    }
                    uint64_t got = 0;
                    bool in_mem = stk__vfs_in_memory(f); /* read by field_open, counted */
                    rc = transform_in_place(c, w, rec, f, r, &rng, out, &got, why, sizeof(why));
                    atomic_fetch_add_explicit(&c->st_bytes, in_mem ? 0 : got, memory_order_relaxed);
                } else {
                    size_t had_size;
                    const uint8_t *had = c->memo ? stk__memo_get(c->memo, rec, &had_size) : NULL;
                    rc = stk__transform_apply(c->transform, w->tw, w->scratch,
                                              loc.field_size[tl->field], &rng, out, why,
                                              sizeof(why));
                    if (c->memo && stk__memo_get(c->memo, rec, &had_size) != had)
                        atomic_fetch_add_explicit(&c->st_indexed, 1, memory_order_relaxed);
                }
                if (rc >= 0 && !trusted && stk__transform_worker_checked(w->tw))
                    atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
                if (claimed)
                    stk__memo_release(c->memo, rec);
            }
            if (w->trace.cap) { /* split the call into its decode and augment slices */
                uint64_t d1, a1;
                stk__transform_worker_stage_ns(w->tw, &d1, &a1);
                stk__trace_add(c, &w->trace, TR_DECODE, t1, t1 + (d1 - d0), t);
                stk__trace_add(c, &w->trace, TR_AUGMENT, t1 + (d1 - d0), t1 + (d1 - d0) + (a1 - a0),
                               t);
            }
            if (rc < 0) {
                char where[STK_ERRMSG_SIZE];
                stk_dataset_describe(c->ds, rec, where, sizeof(where));
                name_path(lay, mem, t, &loc, where, sizeof(where));
                return stk__set_error(err, err_size, rc, "%s: %s", where, why);
            }
            if (tl->lengths_offset != SIZE_MAX) /* the output's valid length (audio) */
                ((int64_t *)(mem + tl->lengths_offset))[t] = stk__transform_worker_length(w->tw);
            if (lay->aux_t >= 0) { /* the transform's second output (video_pts) */
                const stk__tlayout *ax = &lay->t[lay->aux_t];
                stk__transform_worker_aux(w->tw, mem + ax->offset + (size_t)t * ax->row_size);
            }
        }
    }
    return STK_OK;
}

/* The callback's view of row t of slot s: out[0, n) (returned) as stk_sample_fn's contract says. */
static size_t sample_outs(core *c, stk__slot *s, uint32_t t, stk_tensor *out)
{
    size_t n_out = c->r.lay.n_tensors - 1; /* not "index" */
    for (size_t i = 0; i < n_out; i++) {
        const stk__tlayout *tl = &c->r.lay.t[i];
        stk__layout_tensor(&c->r.lay, i, s->mem, 1, &out[i]);
        out[i].data = s->mem + tl->offset + (size_t)t * tl->row_size;
        if ((int)i == c->bops.lab_t) { /* the callback writes the int64 label (batch ops) */
            out[i].dtype = STK_DTYPE_INT64;
            out[i].ndim = 1;
            out[i].size = sizeof(int64_t);
        }
    }
    return n_out;
}

/* What sample_fn_v2 is told about record idx in row t of slot s. */
static stk_sample_info sample_info(const core *c, const worker *w, const stk__slot *s, uint32_t t,
                                   uint64_t idx)
{
    return (stk_sample_info){.struct_size = sizeof(stk_sample_info),
                             .index = idx,
                             .epoch = s->epoch,
                             .position = s->first + t,
                             .seed = stk_sample_seed(c->seed, s->epoch, idx),
                             .worker = w->id,
                             .row = t};
}

/* Run the sample_fn (or sample_fn_v2) on the sample in w->in (laid out as c->in_lay), writing row
 * t of slot s. */
static stk_status run_sample_fn(core *c, const worker *w, stk__slot *s, uint32_t t, uint64_t idx,
                                char *err, size_t err_size)
{
    stk_tensor in[STK_MAX_TENSORS], out[STK_MAX_TENSORS];
    size_t n_in = c->in_lay.n_tensors - 1; /* not "index" */
    for (size_t i = 0; i < n_in; i++)
        stk__layout_tensor(&c->in_lay, i, w->in, 1, &in[i]);
    size_t n_out = sample_outs(c, s, t, out);
    char why[STK_ERRMSG_SIZE];
    why[0] = '\0'; /* (not zero-filled: 512 bytes a sample) */
    stk_status rc;
    if (c->sample_fn_v2 || w->fn) {
        stk_sample_info info = sample_info(c, w, s, t, idx);
        rc = w->fn ? w->fn(w->fn_ctx, &info, in, n_in, out, n_out, why, sizeof(why))
                   : c->sample_fn_v2(c->sample_ctx, &info, in, n_in, out, n_out, why, sizeof(why));
    } else {
        rc = c->sample_fn(c->sample_ctx, idx, in, n_in, out, n_out, why, sizeof(why));
    }
    if (rc >= 0)
        return STK_OK;
    char where[STK_ERRMSG_SIZE];
    stk_dataset_describe(c->ds, idx / c->per_record, where, sizeof(where));
    return stk__set_error(err, err_size, rc, "%s: %s", where, why[0] ? why : "sample_fn failed");
}

/* Read (and transform) record `idx` into row `t` of slot `s` (through the sample_fn when there
 * is one). */
static stk_status load_record(core *c, worker *w, stk__slot *s, uint32_t t, uint64_t idx, char *err,
                              size_t err_size)
{
    if (stk__sampled(c)) { /* read into the worker's buffer, row 0 */
        stk_status rc = read_record(c, w, &c->in_lay, w->in, 0, s->epoch, idx, err, err_size);
        return rc < 0 ? rc : run_sample_fn(c, w, s, t, idx, err, err_size);
    }
    return read_record(c, w, &c->r.lay, s->mem, t, s->epoch, idx, err, err_size);
}

/* Finishing of sample t (uint8 [H, W, 3] in its row): draw its flip, and on the CPU path write
 * its finished output (stk_finish_cpu.c). */
static void finish_sample(core *c, worker *w, stk__slot *s, uint32_t t, uint64_t idx)
{
    const stk__devcopy *dc = &c->r.dc;
    bool flip = stk__finish_flip_draw(dc, c->seed, s->epoch, idx);
    if (dc->flags_offset != SIZE_MAX)
        s->mem[dc->flags_offset + t] = flip;
    if (dc->finish != STK_FINISH_CPU)
        return;
    uint64_t t0 = stk__loader_now(c);
    const stk__tlayout *in = &c->r.lay.t[dc->fin_t];
    stk__finish_cpu(dc, s->mem + in->offset + (size_t)t * in->row_size,
                    s->mem + dc->fin_host_offset + (size_t)t * dc->fin_row, flip);
    uint64_t t1 = stk__loader_now(c);
    atomic_fetch_add_explicit(&w->finish_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_FINISH, t0, t1, t);
}

/* A failure of one record that on_error=skip replaces: a corrupt record, or one over a limit
 * (max_pixels, the running memory_budget). */
static bool skippable(stk_status rc)
{
    return rc == STK_EFORMAT || rc == STK_ELIMIT;
}

/* Produce sample `t` of slot `s`: its record `idx` (the epoch's order at the sample's position),
 * or under skip_corrupt the next good record of that order (counted). Returns STK_ECANCELED,
 * with nothing recorded, when the helper's callback was interrupted (stk_loader_help); else
 * STK_OK (a failure is the slot's). */
static stk_status do_sample(core *c, worker *w, stk__slot *s, uint32_t t, uint64_t idx)
{
    char err[STK_ERRMSG_SIZE];
    uint64_t pos = s->first + (uint64_t)t * s->stride;
    stk_status rc = load_record(c, w, s, t, idx, err, sizeof(err));
    if (rc == STK_ECANCELED && w->fn)
        return rc;
    if (skippable(rc) && c->skip_corrupt) {
        for (uint64_t k = 1; k <= SKIP_MAX_TRIES && k < c->m && skippable(rc); k++) {
            idx = stk__order_at(c, s, (pos + k) % c->m);
            char err2[STK_ERRMSG_SIZE];
            rc = load_record(c, w, s, t, idx, err2, sizeof(err2));
        }
        if (rc == STK_ECANCELED && w->fn)
            return rc;
        if (rc == STK_OK) {
            atomic_fetch_add(&s->skipped, 1);
        } else {
            char first[STK_ERRMSG_SIZE];
            memcpy(first, err, sizeof(first));
            snprintf(err, sizeof(err),
                     "%.400s (on_error=skip: no good substitute among the "
                     "next %d records)",
                     first, SKIP_MAX_TRIES);
            rc = STK_EFORMAT;
        }
    }
    ((int64_t *)(s->mem + c->r.lay.t[c->r.lay.n_tensors - 1].offset))[t] = (int64_t)idx;
    if (rc == STK_OK && c->r.dc.fin_t >= 0)
        finish_sample(c, w, s, t, idx);
    if (rc < 0) {
        pthread_mutex_lock(&c->r.mu);
        stk__slot_error_locked(s, t, rc, err);
        pthread_mutex_unlock(&c->r.mu);
    }
    return STK_OK;
}

/* Append [offset, offset + size) to a range list. */
static void range_add(stk__range *r, size_t *n, size_t offset, size_t size)
{
    if (size)
        r[(*n)++] = (stk__range){offset, size};
}

/* Queue the device copy of completed batch `s` (and its finishing) on the loader's stream. Called
 * by the worker that completed it, without mu: the slot is FILLING with every sample done, so
 * nobody else touches it. A failed batch is not copied (the consumer only gets its error). */
static stk_status device_issue(core *c, worker *w, stk__slot *s, char *err, size_t err_size)
{
    if (s->err_sample != UINT32_MAX)
        return STK_OK;
    /* What the host view shows (with CPU finishing its output, not the uint8 input). */
    const stk__layout *src = &c->r.view;
    stk__range r[2 * STK_MAX_TENSORS + 1];
    size_t n = 0;
    for (size_t i = 0; i < src->n_tensors; i++) {
        const stk__tlayout *t = &src->t[i];
        range_add(r, &n, t->offset, t->row_size * s->count);
        if (t->lengths_offset != SIZE_MAX)
            range_add(r, &n, t->lengths_offset, sizeof(int64_t) * s->count);
    }
    uint64_t t0 = stk__loader_now(c);
    stk_status rc = stk__devcopy_issue(&c->r.dc, &s->handle.dv, s->count, r, n, s->epoch, s->number,
                                       err, err_size);
    uint64_t t1 = stk__loader_now(c);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_ISSUE, t0, t1, (uint32_t)s->number);
    return rc;
}

/* Apply the batch transforms to completed batch `s` (on the host, before its device copy, so
 * both paths see the same batch). Called like device_issue by the worker that completed it. */
static stk_status batch_ops(core *c, worker *w, stk__slot *s, char *err, size_t err_size)
{
    if (!c->bops.n || s->err_sample != UINT32_MAX)
        return STK_OK;
    /* The batch's own stream: (seed, epoch, number within the epoch, rank). */
    uint64_t key = s->number * c->world + c->rank;
    int64_t bad = -1;
    char why[STK_ERRMSG_SIZE];
    stk_status rc = stk__batchops_apply(&c->bops, &c->r.view, s->mem, s->count, c->seed, s->epoch,
                                        key, w->bscratch, &bad, why, sizeof(why));
    if (rc < 0 && bad >= 0) { /* a record's label: name the record */
        char where[STK_ERRMSG_SIZE];
        stk_dataset_describe(c->ds, (uint64_t)bad, where, sizeof(where));
        return stk__set_error(err, err_size, rc, "%s: %s", where, why);
    }
    if (rc < 0)
        snprintf(err, err_size, "%s", why);
    return rc;
}

/* Wait until slot s's last copy completed so its host memory may be refilled (mu held on entry
 * and on return, released meanwhile; s->draining keeps other workers out). Adds the copy's device
 * times to the device track. */
static void drain_slot(core *c, worker *w, stk__slot *s)
{
    s->draining = true;
    uint64_t number = s->number;
    pthread_mutex_unlock(&c->r.mu);
    char err[STK_ERRMSG_SIZE];
    stk__copytimes ct;
    uint64_t t0 = stk__loader_now(c);
    stk_status rc = stk__devcopy_drain(&c->r.dc, &s->handle.dv, &ct, err, sizeof(err));
    uint64_t t1 = stk__loader_now(c);
    atomic_fetch_add_explicit(&w->wait_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_WAITCOPY, t0, t1, (uint32_t)number);
    pthread_mutex_lock(&c->r.mu);
    if (rc == STK_OK && ct.valid && c->dtrace.cap) {
        stk__trace_add(c, &c->dtrace, TR_DCOPY, ct.t0, ct.copied, (uint32_t)number);
        if (ct.done > ct.copied)
            stk__trace_add(c, &c->dtrace, TR_DFINISH, ct.copied, ct.done, (uint32_t)number);
    }
    s->draining = false;
    pthread_cond_broadcast(&c->r.cv_work);
}

/* Wait for work (mu held), counting the time as worker wait. */
static void worker_wait(core *c, worker *w)
{
    uint64_t t0 = stk__loader_now(c);
    pthread_cond_wait(&c->r.cv_work, &c->r.mu);
    uint64_t t1 = stk__loader_now(c);
    atomic_fetch_add_explicit(&w->wait_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_WAIT, t0, t1, 0);
}

/* Rather than open the next batch in memory never written, whose first touch can cost more than
 * the wait (stk_ring.h), wait up to FRESH_SLICE_NS for used memory to be released, while the
 * ring's budget lasts (mu held, slot s FREE; true when it waited: the caller looks again). */
#define FRESH_SLICE_NS 1000000
static bool fresh_wait(core *c, worker *w, stk__slot *s)
{
    stk__ring *r = &c->r;
    stk__ring_take_hot_locked(r, s);
    if (c->d_idle || !stk__ring_fresh_wait_locked(r, s, c->c_waiting && c->c_seq == c->open_seq))
        return false;
    uint64_t t0 = stk__now_ns(), slice = STK_MIN((uint64_t)r->fresh_budget_ns, FRESH_SLICE_NS);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until); /* cv_work's clock */
    until.tv_nsec += (long)slice;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    r->fresh_waiters++;
    pthread_cond_timedwait(&r->cv_work, &r->mu, &until);
    r->fresh_waiters--;
    uint64_t t1 = stk__now_ns();
    r->fresh_budget_ns -= (int64_t)(t1 - t0); /* spent whether or not stats are timed */
    if (c->timed)
        atomic_fetch_add_explicit(&w->wait_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        stk__trace_add(c, &w->trace, TR_WAIT, t0, t1, 0);
    return true;
}

/* Batch s (seq) has every sample done: its batch ops, then its device copy queued before it is
 * handed out (so the copy runs ahead of the consumer), then READY. */
static void complete_batch(core *c, worker *w, stk__slot *s, uint64_t seq)
{
    char cerr[STK_ERRMSG_SIZE];
    stk_status crc = batch_ops(c, w, s, cerr, sizeof(cerr));
    if (crc == STK_OK && c->r.dc.dev)
        crc = device_issue(c, w, s, cerr, sizeof(cerr));
    pthread_mutex_lock(&c->r.mu);
    bool ready = s->seq == seq && s->state == STK__SLOT_FILLING;
    if (ready) {
        if (crc < 0) /* after every sample's own error (those come first) */
            stk__slot_error_locked(s, UINT32_MAX - 1, crc, cerr);
        s->state = STK__SLOT_READY;
    }
    pthread_mutex_unlock(&c->r.mu);
    /* Woken after the unlock: woken under it, the consumer would find the mutex still held
     * and sleep again on it (a second pair of context switches). The ring outlives this call
     * (destroy joins the workers first). */
    if (ready)
        pthread_cond_broadcast(&c->r.cv_ready);
}

/* Samples t..t+n-1 of slot s (records idx[0..n)) are this worker's next: tell the source, which
 * may read them together (stk__dataset_prepare; the time counts as reading). */
static void prepare_records(core *c, worker *w, const stk__slot *s, const uint64_t *idx, uint32_t n)
{
    const stk__readkey key = {c->seed, s->epoch, c->shuffle};
    if (c->per_record > 1) /* idx are samples, not records (clips of a video) */
        return;
    uint64_t t0 = stk__loader_now(c);
    stk__dataset_prepare(c->ds, w->cur, &key, idx, n);
    atomic_fetch_add_explicit(&w->read_ns, stk__loader_now(c) - t0, memory_order_relaxed);
}

/* The samples a sample_ahead_fn's answer `want` has a thread take at a time. */
static uint32_t ahead_taken(uint32_t want)
{
    return STK_MIN(STK_MAX(want, 1u), (unsigned)STK__PREPARE_MAX);
}

/* Samples t..t+n-1 of slot s (records idx[0..n)) are this worker's next: announce them to the
 * sample_ahead_fn, which may start them ahead. Returns the samples it wants taken at a time. */
static uint32_t announce_samples(core *c, worker *w, stk__slot *s, uint32_t t, const uint64_t *idx,
                                 uint32_t n)
{
    uint32_t want = 1;
    for (uint32_t k = 0; k < n; k++) {
        stk_tensor out[STK_MAX_TENSORS];
        size_t n_out = sample_outs(c, s, t + k, out);
        stk_sample_info info = sample_info(c, w, s, t + k, idx[k]);
        want = c->sample_ahead_fn(c->sample_ctx, &info, out, n_out);
    }
    return ahead_taken(want);
}

/* The run is over: the sample_ahead_fn forgets what was announced and not run (a reset cut the
 * run short; it returns once nothing it started may still write into the rows). Also called
 * once before the thread's first sample. Returns the samples it wants taken at a time. */
static uint32_t forget_samples(core *c, const worker *w)
{
    stk_sample_info info = {.struct_size = sizeof(info), .worker = w->id};
    return ahead_taken(c->sample_ahead_fn(c->sample_ctx, &info, NULL, 0));
}

void *stk__worker_main(void *arg)
{
    worker *w = arg;
    core *c = w->c;
    /* records a source reads together (1: one at a time) */
    uint32_t many = STK_MIN(stk__dataset_prepare_max(c->ds), (unsigned)STK__PREPARE_MAX);
    uint32_t ahead = 1; /* samples the sample_ahead_fn wants at a time */
    /* "stk-worker" in top, py-spy, gdb and /proc/<pid>/task/<tid>/comm (tests count them); its
     * creator names it too, through /proc, so that the name holds before it first runs */
    pthread_setname_np(pthread_self(), "stk-worker");
    stk__thread_budget = c->budget_on ? &c->budget : NULL; /* decode buffers charge it */
    if (c->r.dc.dev) { /* copies are queued from this thread: make the context current for good */
        char err[STK_ERRMSG_SIZE];
        stk__devring_thread_init(c->r.dc.dev, err, sizeof(err));
    }
    if (c->sample_ahead_fn) /* before the first sample: it may wait for what this thread's need */
        ahead = forget_samples(c, w);
    pthread_mutex_lock(&c->r.mu);
    for (;;) {
        if (c->stop)
            break;
        if (w->id >= c->at.active) { /* parked by autotune: not counted as waiting */
            pthread_cond_wait(&c->r.cv_work, &c->r.mu);
            continue;
        }
        stk__slot *s = stk__ring_slot(&c->r, c->claim_seq);
        if (c->claim_seq == c->open_seq && s->state == STK__SLOT_FREE && c->r.dc.dev &&
            (s->draining || stk__devring_pending(c->r.dc.dev, s->handle.slot))) {
            /* The slot's last copy may still be reading it: refill only once it completed. */
            if (s->draining)
                worker_wait(c, w);
            else
                drain_slot(c, w, s);
            continue;
        }
        if (c->claim_seq == c->open_seq) {
            /* The next batch is not open yet: open it when its slot is free and the depth
             * allows another batch ahead of the consumer (in used memory if it comes soon). */
            if (s->state == STK__SLOT_FREE && c->open_seq - c->c_seq < c->at.depth &&
                fresh_wait(c, w, s))
                continue; /* it waited: look again */
            if (s->state != STK__SLOT_FREE || c->open_seq - c->c_seq >= c->at.depth ||
                !open_batch(c)) {
                worker_wait(c, w);
                continue;
            }
        }
        uint64_t seq = c->claim_seq;
        uint32_t count = s->count;
        unsigned gen = atomic_load(&c->gen);
        if (stk__slot_tickets_out(s)) {
            c->claim_seq++; /* tickets exhausted: stragglers finish it, we move on */
            continue;
        }
        /* Tickets taken at a time: one, or where the source reads records together (token
         * rows) or the sample_ahead_fn starts samples ahead (worker processes), up to half this
         * worker's share of the batch. */
        uint32_t want =
            STK_MIN(STK_MAX(many, ahead), STK_MAX(1u, count / (2 * STK_MAX(1u, c->at.active))));
        c->busy++;
        w->active = c->at.active;
        w->depth = c->at.depth;
        pthread_mutex_unlock(&c->r.mu);
        uint32_t t, n;
        uint64_t t0 = stk__loader_now(c);
        while (atomic_load(&c->gen) == gen && stk__slot_take_tickets(s, seq, count, want, &t, &n)) {
            uint64_t idx[STK__PREPARE_MAX]; /* the samples' records, in the epoch's order */
            for (uint32_t k = 0; k < n; k++)
                idx[k] = ticket_record(c, s, t + k);
            if (n > 1 && many > 1)
                prepare_records(c, w, s, idx, n);
            if (c->sample_ahead_fn)
                ahead = announce_samples(c, w, s, t, idx, n);
            for (uint32_t k = 0; k < n && atomic_load(&c->gen) == gen; k++) {
                do_sample(c, w, s, t + k, idx[k]);
                if (atomic_fetch_add(&s->done, 1) + 1 == count)
                    complete_batch(c, w, s, seq);
            }
            if (c->sample_ahead_fn) /* the run is over (or was cut short) */
                forget_samples(c, w);
        }
        atomic_fetch_add_explicit(&w->run_ns, stk__loader_now(c) - t0, memory_order_relaxed);
        pthread_mutex_lock(&c->r.mu);
        end_busy_locked(c);
    }
    pthread_mutex_unlock(&c->r.mu);
    return NULL;
}

/* ---- the consumer's thread as a helper (stk_loader_help) ---- */

/* The ticket stk_loader_help runs (mu held): the interrupted one still pending, else the next of
 * the consumer's batch, opened first when no worker opened it yet. False when there is none. */
static bool help_claim(core *c, stk__slot *s, uint64_t seq, uint32_t *t)
{
    unsigned gen = atomic_load(&c->gen);
    if (c->h_pending) {
        c->h_pending = false;
        if (c->h_gen == gen && c->h_seq == seq && s->seq == seq && s->state == STK__SLOT_FILLING) {
            *t = c->h_t;
            return true;
        }
    }
    if (c->stop || c->c_b >= c->c_plan.n_batches)
        return false;
    if (c->claim_seq < seq && seq == c->open_seq) /* no worker moved on past the batches it took */
        c->claim_seq = seq;
    if (seq == c->open_seq && c->claim_seq == seq && s->state == STK__SLOT_FREE && !c->r.dc.dev &&
        c->open_seq - c->c_seq < c->at.depth && open_batch(c))
        pthread_cond_broadcast(&c->r.cv_work); /* the workers join in */
    uint32_t n;
    return s->seq == seq && s->state == STK__SLOT_FILLING &&
           stk__slot_take_tickets(s, seq, s->count, 1, t, &n);
}

stk_status stk_loader_help(stk_loader *L, stk_sample_fn_v2 fn, void *ctx, uint32_t *ran)
{
    core *c = L->c;
    *ran = 0;
    L->errmsg[0] = '\0';
    if (!fn || !stk__sampled(c))
        return stk__set_error(L->errmsg, sizeof(L->errmsg), STK_EINVAL,
                              "stk_loader_help: no callback, or the loader has no sample callback");
    worker *w = &c->workers[c->n_threads];
    pthread_mutex_lock(&c->r.mu);
    uint64_t seq = c->c_seq;
    stk__slot *s = stk__ring_slot(&c->r, seq);
    uint32_t t;
    if (!help_claim(c, s, seq, &t)) {
        pthread_mutex_unlock(&c->r.mu);
        return STK_OK;
    }
    unsigned gen = atomic_load(&c->gen);
    uint32_t count = s->count;
    c->busy++; /* a reset waits for this sample, as for a worker's */
    pthread_mutex_unlock(&c->r.mu);
    w->fn = fn;
    w->fn_ctx = ctx;
    uint64_t t0 = stk__loader_now(c);
    stk_status rc;
    uint32_t n = 0;
    /* One sample; with no worker (caller_loads) every ticket left, taken one at a time as a
     * worker takes them, under one lock and one clock for the batch (a sample of a few
     * microseconds paid ~0.2 us for them; issue 24). */
    for (;;) {
        rc = do_sample(c, w, s, t, ticket_record(c, s, t));
        if (rc != STK_OK)
            break;
        n++;
        if (atomic_fetch_add(&s->done, 1) + 1 == count) {
            complete_batch(c, w, s, seq);
            break;
        }
        if (!c->caller_loads || atomic_load(&c->gen) != gen ||
            !stk__slot_take_ticket(s, seq, count, &t))
            break;
    }
    uint64_t ran_ns = stk__loader_now(c) - t0;
    atomic_fetch_add_explicit(&w->run_ns, ran_ns, memory_order_relaxed);
    if (c->caller_loads) /* the consumer loads instead of waiting: its wait for data */
        atomic_fetch_add_explicit(&c->consumer_wait_ns, ran_ns, memory_order_relaxed);
    w->fn = NULL;
    pthread_mutex_lock(&c->r.mu);
    if (rc == STK_ECANCELED) { /* claimed, not done: the next call runs it first */
        c->h_pending = true;
        c->h_seq = seq;
        c->h_t = t;
        c->h_gen = gen;
    }
    end_busy_locked(c);
    pthread_mutex_unlock(&c->r.mu);
    *ran = n;
    if (rc < 0)
        return stk__set_error(L->errmsg, sizeof(L->errmsg), rc,
                              "stk_loader_help: the sample's callback was interrupted");
    return STK_OK;
}
