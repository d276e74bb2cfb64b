/*
 * stk_loader.c: worker threads, the batch ring and the consumer side of a loader.
 *
 * Design (docs/design.md has the long form):
 *  - Batches form one sequence numbered by `seq` (monotonic over the loader's life, across
 *    epochs and resets); batch `seq` lives in slot seq % prefetch. The dispatcher state (the
 *    epoch and batch the next opened slot gets) and the consumer state (the epoch and batch the
 *    consumer gets next) walk the same epoch plans, so both agree on what each seq is.
 *  - Workers persist. Each takes the next sample ticket of the earliest batch that still has
 *    tickets (`claim_seq`): a lock-free compare-and-swap on the slot's ticket word, which packs
 *    the batch's seq (low 32 bits) beside the ticket so a worker holding a stale slot pointer can
 *    never take a ticket of a newer batch. When a batch's tickets run out, workers move on to the
 *    next batch while stragglers finish, so all threads cooperate on the batch needed first.
 *  - A slot is FREE -> FILLING (opened for a seq) -> READY (every sample done) -> HELD (borrowed
 *    by the consumer) -> FREE (stk_batch_release). A worker opens batch claim_seq only when its
 *    slot is FREE: that is the backpressure.
 *  - Errors are recorded on the slot (the lowest failing sample wins) and surface when the
 *    consumer reaches that batch.
 *  - Reset (set_epoch, load_state): bump `gen`, wait until no worker is inside a sample (`busy`),
 *    free every slot that is not HELD, and restart the dispatcher at the consumer's seq.
 *  - Destroy: stop and join the workers; slots still HELD keep the ring (`core`) alive through a
 *    reference count until their release.
 *
 * Stats: each worker adds its stage times to its own relaxed atomic counters (no lock);
 * stk_loader_stats_get sums them. Trace events go to per-thread append-only buffers whose
 * length is published with a release store, so a concurrent writer of the trace file reads only
 * complete events. Autotune runs on the consumer thread inside stk_loader_next (under `mu`):
 * every 250 ms it compares the consumer's wait with the workers' wait and moves `active`
 * (workers with id >= active park) and `depth` (batches opened ahead of the consumer).
 *
 * Locking: one mutex `mu` guards slot states, the dispatcher and consumer state, `busy` and the
 * reference count. Sample work runs without it. Condition variables: `cv_work` (workers: a slot
 * was freed, a reset finished, stop) and `cv_ready` (the consumer: a batch became READY; reset:
 * busy dropped to 0).
 */
#include "stk_internal.h"
#include "batch/stk_pinned.h"
#include "batch/stk_ring.h"
#include "cuda/stk_cuda.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_HELD };

#define STATE_VERSION 1
#define SKIP_MAX_TRIES 64 /* substitutes tried for one bad sample before giving up */

typedef struct core core;

struct stk_batch {
    core *c;
    uint32_t slot;
    bool pinned; /* the slot's memory is page-locked */
};

typedef struct slot {
    uint8_t *mem;
    int state;
    uint64_t seq;
    uint64_t epoch, number;   /* the batch's epoch and its number within the epoch */
    uint64_t first;           /* global position of the batch's first sample */
    uint64_t consumed;        /* global position reached once this step is taken */
    uint32_t count;           /* samples */
    _Atomic uint64_t ticket;  /* (seq low 32 bits) << 32 | next ticket */
    atomic_uint done;         /* samples finished */
    atomic_uint skipped;
    uint32_t err_sample;      /* lowest failed sample, or UINT32_MAX */
    stk_status err_code;
    char errmsg[STK_ERRMSG_SIZE];
    stk_batch handle;
    /* device path */
    bool draining; /* a worker is waiting for the slot's last copy (mu) */
    bool waited;   /* the consumer made wait_stream wait for this batch */
    void *wait_stream;
    void *use[STK__USE_MAX]; /* more streams reading the batch (stk_batch_device_use) */
    uint32_t n_use;
    uint64_t copy_bytes; /* bytes of the slot's last device copy */
} slot;

/* Trace stages. */
enum {
    TR_READ,
    TR_DECODE,
    TR_AUGMENT,
    TR_WAIT,
    TR_CWAIT,
    TR_STEP,
    TR_FINISH,   /* CPU finishing of a sample */
    TR_ISSUE,    /* queueing a batch's device copy */
    TR_WAITCOPY, /* a worker waiting for a slot's copy to complete before refilling it */
    TR_DCOPY,    /* device track: the host-to-device copy */
    TR_DFINISH,  /* device track: the finishing kernel */
    TR_N
};
static const char *const tr_names[TR_N] = {
    "read",         "decode",     "augment",       "wait for slot", "wait for batch", "step",
    "finish (cpu)", "copy issue", "wait for copy", "copy",          "finish"};

typedef struct tev {
    uint64_t t0, t1; /* ns since the loader was created */
    uint32_t stage;
    uint32_t arg;    /* sample (workers) or batch number (consumer) */
} tev;

/* An append-only trace buffer written by one thread. */
typedef struct tbuf {
    tev *ev;
    uint32_t cap;
    atomic_uint n; /* published with release: events [0, n) are complete */
} tbuf;

typedef struct worker {
    core *c;
    uint32_t id;
    pthread_t thread;
    _Atomic uint64_t read_ns, wait_ns;
    _Atomic uint64_t run_ns; /* time inside runs of samples; collate = run - read - transform */
    _Atomic uint64_t collate_seen; /* the largest collate time reported (stats_get) */
    _Atomic uint64_t finish_ns; /* CPU finishing */
    tbuf trace;
    stk__tworker *tw;
    uint8_t *scratch; /* encoded bytes of the transformed field */
    size_t scratch_size;
} worker;

/* The part of a loader that outlives stk_loader_destroy while batches are still held. */
struct core {
    pid_t pid;       /* the process that created the loader (see fork_child) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_ready;
    int refs;        /* 1 for the loader + 1 per HELD slot */
    bool stop;
    uint32_t busy;   /* workers inside sample work */
    atomic_uint gen; /* bumped by reset: workers drop what they hold */

    const stk_dataset *ds;
    stk_dataset *owned_ds;
    const stk_transform *transform;
    int tfield;
    stk__layout lay;
    uint32_t prefetch, n_threads, batch_size, rank, world;
    uint64_t seed, n;
    bool shuffle, drop_last, skip_corrupt, verify, pinned;
    slot *slots;
    worker *workers;
    _Atomic uint64_t *verified; /* one bit per record: checksum already verified by this loader */
    uint32_t n_started;

    /* dispatcher: what the next opened batch is */
    uint64_t claim_seq;  /* earliest batch that may still have tickets (or the next to open) */
    uint64_t open_seq;   /* next seq to open */
    uint64_t d_epoch, d_b;
    stk_plan d_plan;
    bool d_idle;         /* every epoch is empty: nothing to open */

    /* consumer */
    uint64_t c_seq, c_epoch, c_b, c_consumed;
    stk_plan c_plan;
    uint32_t held;

    /* stats */
    bool timed;          /* stage timing on (not STK_LOADER_NO_STATS) */
    uint64_t created_ns;
    atomic_uint_fast64_t st_batches, st_samples, st_bytes, st_skipped, st_errors;
    _Atomic uint64_t consumer_wait_ns;
    tbuf ctrace;         /* the consumer's track */
    uint64_t c_return_ns; /* when stk_loader_next last returned a batch (for "step") */

    /* autotune (consumer thread, under mu) */
    bool autotune;
    uint32_t active;     /* workers with id < active work; the others park */
    uint32_t depth;      /* batches opened ahead of the consumer */
    uint64_t at_last_ns, at_last_cwait, at_last_wwait, at_last_samples;
    uint32_t at_settle, at_changes, at_windows;
    uint32_t at_ceiling;     /* more threads than this gave no gain (re-probed every 5 s) */
    uint32_t at_prev;        /* threads before the last growth step */
    double at_rate_before;   /* samples/s in the window before the last growth step */
    bool at_grew;
    char at_reason[160];

    /* GPU path (docs/gpu.md). The views say where each tensor is: `lay` is where workers write,
     * `view` what stk_batch_tensor shows (CPU finishing swaps in its output), `dview` the device
     * buffer's tensors. */
    stk__layout view, dview;
    size_t slot_alloc; /* bytes of one host slot: layout, flip flags, CPU finishing output */
    uint64_t pinned_bytes;
    bool cudev_open; /* cudev's primary context is retained */
    stk__cudev cudev;
    stk__devring *dev; /* device buffers, stream, events; NULL = host only */
    int32_t device;
    stk_finish_where finish;
    int fin_t;         /* tensor finished (index in lay), or -1 */
    stk__fin_args fin; /* kernel arguments but the per-batch n and addresses */
    float fin_flip;
    size_t flags_offset;     /* uint8 flip flag per sample in the slot, or SIZE_MAX */
    size_t fin_host_offset;  /* CPU finishing output in the host slot, or SIZE_MAX */
    size_t fin_dev_offset;   /* device finishing output in the device buffer, or SIZE_MAX */
    size_t fin_row;          /* bytes of one finished sample */
    float fin_lut32[3][256]; /* CPU finishing: the kernel's value of each uint8, per channel */
    uint16_t fin_lut16[3][256];
    _Atomic uint64_t st_copies, st_h2d, st_copied, st_copy_ns, st_dfinish_ns;
    tbuf dtrace; /* the device track (appended under mu by whoever drains) */
    char dev_reason[256];
};

struct stk_loader {
    core *c;
    char errmsg[STK_ERRMSG_SIZE];
};

/* The clock for stats, or 0 when timing is off. */
static inline uint64_t tnow(const core *c)
{
    return c->timed ? stk__now_ns() : 0;
}

/* Append a trace event (by the buffer's own thread only). */
static void trace_add(const core *c, tbuf *b, uint32_t stage, uint64_t t0, uint64_t t1,
                      uint32_t arg)
{
    uint32_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    if (n >= b->cap)
        return; /* full: the trace keeps each thread's first events */
    b->ev[n] = (tev){t0 - c->created_ns, t1 - c->created_ns, stage, arg};
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

/* Plan epoch `epoch` of this rank from global position `start`. */
static void plan_epoch(const core *c, uint64_t start, stk_plan *p)
{
    stk_plan_init(p, c->n, start, c->batch_size, c->rank, c->world, c->drop_last);
}

static void core_free(core *c)
{
    char err[STK_ERRMSG_SIZE];
    /* Device buffers and pinned memory are freed with the device context current. */
    bool pushed = c->cudev_open && stk__cudev_push(&c->cudev, err, sizeof(err)) == STK_OK;
    stk__devring_destroy(c->dev);
    if (c->slots) {
        for (uint32_t i = 0; i < c->prefetch; i++)
            stk__slot_free(c->slots[i].mem, c->slot_alloc, c->slots[i].handle.pinned);
        stk__free(c->slots);
    }
    if (pushed)
        stk__cudev_pop(&c->cudev);
    if (c->cudev_open)
        stk__cudev_close(&c->cudev);
    stk__free((void *)c->verified);
    stk__free(c->ctrace.ev);
    stk__free(c->dtrace.ev);
    stk_dataset_close(c->owned_ds);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv_work);
    pthread_cond_destroy(&c->cv_ready);
    stk__free(c);
}

/* Whether we run in a child forked after the loader was created. The child has none of the
 * worker threads and may have inherited the mutex locked: it must not join, lock or free
 * anything of the loader (its memory is a copy-on-write copy; leaking it is harmless). */
static bool fork_child(const core *c)
{
    return getpid() != c->pid;
}

/* Drop one reference (mu held); returns true when the caller must free the core. */
static bool core_unref_locked(core *c)
{
    return --c->refs == 0;
}

/* ---- worker side ---- */

/* The ticket word's high half: the batch's seq (low 32 bits), so a stale slot pointer never
 * takes a newer batch's ticket. */
static inline uint64_t ticket_tag(uint64_t seq)
{
    return (seq & 0xffffffffULL) << 32;
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
        plan_epoch(c, 0, &c->d_plan);
        if (c->d_plan.n_batches == 0) {
            c->d_idle = true;
            return false;
        }
    }
    slot *s = &c->slots[c->open_seq % c->prefetch];
    s->seq = c->open_seq;
    s->epoch = c->d_epoch;
    stk_plan_batch(&c->d_plan, c->d_b, &s->first, &s->count, &s->consumed);
    /* A resumed epoch numbers its batches from the epoch's start, not from the resume point. */
    s->number = (c->d_plan.start / ((uint64_t)c->world * c->batch_size)) + c->d_b;
    atomic_store(&s->ticket, ticket_tag(s->seq));
    atomic_store(&s->done, 0);
    atomic_store(&s->skipped, 0);
    s->err_sample = UINT32_MAX;
    s->err_code = STK_OK;
    s->errmsg[0] = '\0';
    s->state = SLOT_FILLING;
    c->open_seq++;
    c->d_b++;
    return true;
}

/* Record a failed sample on its slot (mu held): the lowest sample number wins, so the error a
 * consumer sees does not depend on thread timing. */
static void slot_error_locked(slot *s, uint32_t sample, stk_status rc, const char *msg)
{
    if (sample < s->err_sample) {
        s->err_sample = sample;
        s->err_code = rc;
        snprintf(s->errmsg, sizeof(s->errmsg), "%s", msg);
    }
}

/* Read (and transform) record `idx` into row `t` of slot `s`. */
static stk_status load_record(core *c, worker *w, slot *s, uint32_t t, uint64_t idx, char *err,
                              size_t err_size)
{
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS];
    const stk__layout *lay = &c->lay;
    for (size_t i = 0; i + 1 < lay->n_tensors; i++) { /* the last tensor is "index" */
        const stk__tlayout *tl = &lay->t[i];
        if (tl->transformed) {
            dst[tl->field] = w->scratch;
            cap[tl->field] = w->scratch_size;
        } else {
            dst[tl->field] = s->mem + tl->offset + (size_t)t * tl->row_size;
            cap[tl->field] = tl->row_size;
        }
    }
    stk__recloc loc;
    /* Checksums are verified on a record's first read only (DESIGN.md: "lazily, per record, on
     * first read"): later epochs re-read it from the page cache at copy speed. */
    _Atomic uint64_t *word = c->verified ? &c->verified[idx / 64] : NULL;
    uint64_t bit = 1ULL << (idx % 64);
    bool verify = word && !(atomic_load_explicit(word, memory_order_relaxed) & bit);
    uint64_t t0 = tnow(c);
    stk_status rc = stk__dataset_read_fields(c->ds, idx, dst, cap, verify, &loc, err, err_size);
    uint64_t t1 = tnow(c);
    atomic_fetch_add_explicit(&w->read_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        trace_add(c, &w->trace, TR_READ, t0, t1, t);
    if (rc < 0)
        return rc;
    if (verify)
        atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->st_bytes, loc.size, memory_order_relaxed);
    for (size_t i = 0; i + 1 < lay->n_tensors; i++) {
        const stk__tlayout *tl = &lay->t[i];
        if (tl->bytes)
            ((int64_t *)(s->mem + tl->lengths_offset))[t] = (int64_t)loc.field_size[tl->field];
        if (tl->transformed) {
            stk_rng rng;
            char why[STK_ERRMSG_SIZE];
            stk_rng_init(&rng, c->seed, s->epoch, idx);
            uint64_t d0 = 0, a0 = 0;
            if (w->trace.cap)
                stk__transform_worker_stage_ns(w->tw, &d0, &a0);
            rc = stk__transform_apply(c->transform, w->tw, w->scratch,
                                      loc.field_size[tl->field], &rng,
                                      s->mem + tl->offset + (size_t)t * tl->row_size, why,
                                      sizeof(why));
            if (w->trace.cap) { /* split the call into its decode and augment slices */
                uint64_t d1, a1;
                stk__transform_worker_stage_ns(w->tw, &d1, &a1);
                trace_add(c, &w->trace, TR_DECODE, t1, t1 + (d1 - d0), t);
                trace_add(c, &w->trace, TR_AUGMENT, t1 + (d1 - d0), t1 + (d1 - d0) + (a1 - a0),
                          t);
            }
            if (rc < 0)
                return stk__set_error(err, err_size, rc,
                                      "%s record %" PRIu64 " (global %" PRIu64 "): %s",
                                      stk__dataset_shard_path(c->ds, loc.shard), loc.local, idx,
                                      why);
        }
    }
    return STK_OK;
}

/* Key of the finishing flip's random stream: a stream of its own beside the transform's. */
#define FLIP_KEY 0x5f1b9e37c4a2d861ULL

/* Finishing of sample t (uint8 [H, W, 3] in its row): draw its flip, and on the CPU path write
 * its finished output through the tables (the kernel's own values, stk_finish_body.h). */
static void finish_sample(core *c, worker *w, slot *s, uint32_t t, uint64_t idx)
{
    uint8_t flip = 0;
    if (c->fin_flip > 0) {
        stk_rng rng;
        stk_rng_init(&rng, c->seed ^ FLIP_KEY, s->epoch, idx);
        flip = stk_rng_uniform(&rng) < (double)c->fin_flip;
        s->mem[c->flags_offset + t] = flip;
    }
    if (c->finish != STK_FINISH_CPU)
        return;
    uint64_t t0 = tnow(c);
    const uint8_t *in =
        s->mem + c->lay.t[c->fin_t].offset + (size_t)t * c->lay.t[c->fin_t].row_size;
    uint8_t *out = s->mem + c->fin_host_offset + (size_t)t * c->fin_row;
    size_t h = c->fin.h, wd = c->fin.w, hw = h * wd;
    bool f32 = c->fin.dtype == STK_DTYPE_FLOAT32, nhwc = c->fin.nhwc;
    for (size_t y = 0; y < h; y++)
        for (size_t x = 0; x < wd; x++) {
            const uint8_t *px = in + (y * wd + (flip ? wd - 1 - x : x)) * 3;
            size_t r = y * wd + x;
            for (size_t ch = 0; ch < 3; ch++) {
                size_t o = nhwc ? r * 3 + ch : ch * hw + r;
                if (f32)
                    ((float *)out)[o] = c->fin_lut32[ch][px[ch]];
                else
                    ((uint16_t *)out)[o] = c->fin_lut16[ch][px[ch]];
            }
        }
    uint64_t t1 = tnow(c);
    atomic_fetch_add_explicit(&w->finish_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        trace_add(c, &w->trace, TR_FINISH, t0, t1, t);
}

/* Produce sample `t` of slot `s`: its record, or under skip_corrupt the next good record of the
 * epoch's order (counted). */
static void do_sample(core *c, worker *w, slot *s, uint32_t t)
{
    char err[STK_ERRMSG_SIZE];
    uint64_t pos = s->first + t;
    uint64_t idx = stk_sampler_index(c->n, c->shuffle, c->seed, s->epoch, pos % c->n);
    stk_status rc = load_record(c, w, s, t, idx, err, sizeof(err));
    if (rc == STK_EFORMAT && c->skip_corrupt) {
        for (uint64_t k = 1; k <= SKIP_MAX_TRIES && k < c->n && rc == STK_EFORMAT; k++) {
            idx = stk_sampler_index(c->n, c->shuffle, c->seed, s->epoch, (pos + k) % c->n);
            char err2[STK_ERRMSG_SIZE];
            rc = load_record(c, w, s, t, idx, err2, sizeof(err2));
        }
        if (rc == STK_OK) {
            atomic_fetch_add(&s->skipped, 1);
        } else {
            char first[STK_ERRMSG_SIZE];
            memcpy(first, err, sizeof(first));
            snprintf(err, sizeof(err), "%.400s (on_error=skip: no good substitute among the "
                     "next %d records)", first, SKIP_MAX_TRIES);
            rc = STK_EFORMAT;
        }
    }
    ((int64_t *)(s->mem + c->lay.t[c->lay.n_tensors - 1].offset))[t] = (int64_t)idx;
    if (rc == STK_OK && c->fin_t >= 0)
        finish_sample(c, w, s, t, idx);
    if (rc < 0) {
        pthread_mutex_lock(&c->mu);
        slot_error_locked(s, t, rc, err);
        pthread_mutex_unlock(&c->mu);
    }
}

/* Take the next ticket of batch `seq` in slot `s`; false when none is left. */
static bool take_ticket(slot *s, uint64_t seq, uint32_t count, uint32_t *t)
{
    uint64_t want_tag = ticket_tag(seq);
    uint64_t cur = atomic_load(&s->ticket);
    for (;;) {
        if ((cur & 0xffffffff00000000ULL) != want_tag || (uint32_t)cur >= count)
            return false;
        if (atomic_compare_exchange_weak(&s->ticket, &cur, cur + 1)) {
            *t = (uint32_t)cur;
            return true;
        }
    }
}

/* ---- device copies ---- */

/* Append [offset, offset + size) to a range list. */
static void range_add(stk__range *r, size_t *n, size_t offset, size_t size)
{
    if (size)
        r[(*n)++] = (stk__range){offset, size};
}

/* Sort ranges by offset and merge those less than 4 KiB apart (one DMA beats two). */
static size_t ranges_merge(stk__range *r, size_t n)
{
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && r[j - 1].offset > r[j].offset; j--) {
            stk__range tmp = r[j];
            r[j] = r[j - 1];
            r[j - 1] = tmp;
        }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && r[i].offset <= r[m - 1].offset + r[m - 1].size + 4096) {
            size_t end = STK_MAX(r[m - 1].offset + r[m - 1].size, r[i].offset + r[i].size);
            r[m - 1].size = end - r[m - 1].offset;
        } else {
            r[m++] = r[i];
        }
    }
    return m;
}

/* Queue the device copy of completed batch `s` (and its finishing) on the loader's stream. Called
 * by the worker that completed it, without mu: the slot is FILLING with every sample done, so
 * nobody else touches it. A failed batch is not copied (the consumer only gets its error). */
static stk_status device_issue(core *c, worker *w, slot *s, char *err, size_t err_size)
{
    if (s->err_sample != UINT32_MAX)
        return STK_OK;
    /* CPU finishing: copy what the host view shows (its output, not the uint8 input). */
    const stk__layout *src = c->finish == STK_FINISH_CPU ? &c->view : &c->lay;
    stk__range r[2 * STK_MAX_TENSORS + 1];
    size_t n = 0, bytes = 0;
    for (size_t i = 0; i < src->n_tensors; i++) {
        const stk__tlayout *t = &src->t[i];
        range_add(r, &n, t->offset, t->row_size * s->count);
        if (t->bytes)
            range_add(r, &n, t->lengths_offset, sizeof(int64_t) * s->count);
    }
    if (c->finish == STK_FINISH_DEVICE && c->flags_offset != SIZE_MAX)
        range_add(r, &n, c->flags_offset, s->count);
    n = ranges_merge(r, n);
    for (size_t i = 0; i < n; i++)
        bytes += r[i].size;
    stk__fin_args a, *fin = NULL;
    if (c->finish == STK_FINISH_DEVICE) {
        CUdeviceptr base = stk__devring_base(c->dev, s->handle.slot);
        a = c->fin;
        a.n = s->count;
        a.in = base + c->lay.t[c->fin_t].offset;
        a.out = base + c->fin_dev_offset;
        a.flags = c->flags_offset != SIZE_MAX ? base + c->flags_offset : 0;
        fin = &a;
    }
    uint64_t t0 = tnow(c);
    char why[STK_ERRMSG_SIZE];
    stk_status rc = stk__devring_issue(c->dev, s->handle.slot, s->mem, r, n, fin, why, sizeof(why));
    uint64_t t1 = tnow(c);
    if (w->trace.cap)
        trace_add(c, &w->trace, TR_ISSUE, t0, t1, (uint32_t)s->number);
    if (rc < 0)
        return stk__set_error(err, err_size, rc,
                              "device %d copy of epoch %" PRIu64 " batch %" PRIu64 ": %s",
                              (int)c->device, s->epoch, s->number, why);
    s->copy_bytes = bytes;
    atomic_fetch_add_explicit(&c->st_copies, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->st_h2d, bytes, memory_order_relaxed);
    return STK_OK;
}

/* Wait until slot s's last copy completed so its host memory may be refilled (mu held on entry
 * and on return, released meanwhile; s->draining keeps other workers out). Counts the device
 * times of that copy and adds them to the device track. */
static void drain_slot(core *c, worker *w, slot *s)
{
    s->draining = true;
    uint64_t number = s->number, bytes = s->copy_bytes;
    pthread_mutex_unlock(&c->mu);
    char err[STK_ERRMSG_SIZE];
    stk__copytimes ct;
    uint64_t t0 = tnow(c);
    stk_status rc = stk__devring_drain(c->dev, s->handle.slot, &ct, err, sizeof(err));
    uint64_t t1 = tnow(c);
    atomic_fetch_add_explicit(&w->wait_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        trace_add(c, &w->trace, TR_WAITCOPY, t0, t1, (uint32_t)number);
    if (rc == STK_OK && ct.valid) {
        atomic_fetch_add_explicit(&c->st_copy_ns, ct.copied - ct.t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->st_dfinish_ns, ct.done - ct.copied, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->st_copied, bytes, memory_order_relaxed);
    }
    pthread_mutex_lock(&c->mu);
    if (rc == STK_OK && ct.valid && c->dtrace.cap) {
        trace_add(c, &c->dtrace, TR_DCOPY, ct.t0, ct.copied, (uint32_t)number);
        if (ct.done > ct.copied)
            trace_add(c, &c->dtrace, TR_DFINISH, ct.copied, ct.done, (uint32_t)number);
    }
    s->draining = false;
    pthread_cond_broadcast(&c->cv_work);
}

/* Wait for work (mu held), counting the time as worker wait. */
static void worker_wait(core *c, worker *w)
{
    uint64_t t0 = tnow(c);
    pthread_cond_wait(&c->cv_work, &c->mu);
    uint64_t t1 = tnow(c);
    atomic_fetch_add_explicit(&w->wait_ns, t1 - t0, memory_order_relaxed);
    if (w->trace.cap)
        trace_add(c, &w->trace, TR_WAIT, t0, t1, 0);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    core *c = w->c;
    if (c->dev) { /* copies are queued from this thread: make the context current for good */
        char err[STK_ERRMSG_SIZE];
        stk__devring_thread_init(c->dev, err, sizeof(err));
    }
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (c->stop)
            break;
        if (w->id >= c->active) { /* parked by autotune: not counted as waiting */
            pthread_cond_wait(&c->cv_work, &c->mu);
            continue;
        }
        slot *s = &c->slots[c->claim_seq % c->prefetch];
        if (c->claim_seq == c->open_seq && s->state == SLOT_FREE && c->dev &&
            (s->draining || stk__devring_pending(c->dev, s->handle.slot))) {
            /* The slot's last copy may still be reading it: refill only once it completed. */
            if (s->draining)
                worker_wait(c, w);
            else
                drain_slot(c, w, s);
            continue;
        }
        if (c->claim_seq == c->open_seq) {
            /* The next batch is not open yet: open it when its slot is free and the depth
             * allows another batch ahead of the consumer. */
            if (s->state != SLOT_FREE || c->open_seq - c->c_seq >= c->depth || !open_batch(c)) {
                worker_wait(c, w);
                continue;
            }
        }
        uint64_t seq = c->claim_seq;
        uint32_t count = s->count;
        unsigned gen = atomic_load(&c->gen);
        if ((uint32_t)atomic_load(&s->ticket) >= count) {
            c->claim_seq++; /* tickets exhausted: stragglers finish it, we move on */
            continue;
        }
        c->busy++;
        pthread_mutex_unlock(&c->mu);
        uint32_t t;
        uint64_t t0 = tnow(c);
        while (atomic_load(&c->gen) == gen && take_ticket(s, seq, count, &t)) {
            do_sample(c, w, s, t);
            if (atomic_fetch_add(&s->done, 1) + 1 == count) {
                /* Complete: queue its device copy before handing it out, so the copy runs
                 * ahead of the consumer. */
                char cerr[STK_ERRMSG_SIZE];
                stk_status crc = c->dev ? device_issue(c, w, s, cerr, sizeof(cerr)) : STK_OK;
                pthread_mutex_lock(&c->mu);
                if (s->seq == seq && s->state == SLOT_FILLING) {
                    if (crc < 0) /* after every sample's own error (those come first) */
                        slot_error_locked(s, UINT32_MAX - 1, crc, cerr);
                    s->state = SLOT_READY;
                    pthread_cond_broadcast(&c->cv_ready);
                }
                pthread_mutex_unlock(&c->mu);
            }
        }
        atomic_fetch_add_explicit(&w->run_ns, tnow(c) - t0, memory_order_relaxed);
        pthread_mutex_lock(&c->mu);
        if (--c->busy == 0)
            pthread_cond_broadcast(&c->cv_ready); /* a reset may be waiting for busy == 0 */
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- create / destroy ---- */

void stk_loader_opts_init(stk_loader_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->batch_size = 256;
    opts->n_threads = 0;
    opts->prefetch = 0;
    opts->rank = -1;
    opts->world = -1;
    opts->transform_field = "image";
    opts->device = -1;
    for (int ch = 0; ch < 3; ch++)
        opts->finish_std[ch] = 1.0f;
}

/* Stop and join every started worker (mu not held). */
static void stop_workers(core *c)
{
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->cv_work);
    pthread_mutex_unlock(&c->mu);
    for (uint32_t i = 0; i < c->n_started; i++)
        pthread_join(c->workers[i].thread, NULL);
    if (c->workers) {
        for (uint32_t i = 0; i < c->n_threads; i++) {
            stk__transform_worker_destroy(c->workers[i].tw);
            stk__free(c->workers[i].scratch);
            stk__free(c->workers[i].trace.ev);
        }
        stk__free(c->workers);
        c->workers = NULL;
    }
    c->n_started = 0;
}

/* ---- GPU path setup ---- */

/* "uint8 [224, 224, 3]" for error messages. */
static const char *tensor_desc(const stk__tlayout *t, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s [", stk_dtype_name(t->dtype));
    for (uint32_t d = 0; d < t->ndim && n > 0 && (size_t)n < size; d++)
        n += snprintf(buf + n, size - (size_t)n, "%s%" PRId64, d ? ", " : "", t->shape[d]);
    if (n > 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "]");
    return buf;
}

/* Check the finishing options and prepare its kernel arguments and CPU tables. */
static stk_status finish_setup(core *c, const stk_loader_opts *o, char *err, size_t err_size)
{
    c->fin_t = -1;
    if (o->finish_dtype == STK_DTYPE_UINT8)
        return STK_OK;
    if (o->finish_dtype != STK_DTYPE_FLOAT32 && o->finish_dtype != STK_DTYPE_FLOAT16 &&
        o->finish_dtype != STK_DTYPE_BFLOAT16)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "finish_dtype %s: finishing outputs float32, float16 or bfloat16 "
                              "(uint8 = no finishing)",
                              stk_dtype_name(o->finish_dtype));
    const char *name = o->transform_field ? o->transform_field : "image";
    int ti = -1;
    for (size_t i = 0; i + 1 < c->lay.n_tensors; i++)
        if (strcmp(c->lay.t[i].name, name) == 0)
            ti = (int)i;
    if (ti < 0)
        return stk__set_error(err, err_size, STK_EINVAL, "finishing: the dataset has no field '%s'",
                              name);
    const stk__tlayout *t = &c->lay.t[ti];
    char desc[96];
    if (t->dtype != STK_DTYPE_UINT8 || t->ndim != 3 || t->shape[2] != 3 || t->bytes)
        return stk__set_error(
            err, err_size, STK_EINVAL,
            "finishing needs a uint8 [H, W, 3] field: '%s' is %s (give the "
            "transform uint8 output with nhwc)",
            name, t->bytes ? "variable-length bytes" : tensor_desc(t, desc, sizeof(desc)));
    for (int ch = 0; ch < 3; ch++)
        if (!isfinite(o->finish_mean[ch]) || !isfinite(o->finish_std[ch]) ||
            o->finish_std[ch] == 0.0f)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "finishing: mean[%d] = %g, std[%d] = %g (finite, std non-zero)",
                                  ch, (double)o->finish_mean[ch], ch, (double)o->finish_std[ch]);
    if (!(o->finish_flip >= 0.0f && o->finish_flip <= 1.0f))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "finishing: flip probability %g is not in [0, 1]",
                              (double)o->finish_flip);
    uint64_t h = (uint64_t)t->shape[0], w = (uint64_t)t->shape[1];
    if (h * w > UINT32_MAX / c->batch_size) /* the kernel indexes pixels with 32 bits */
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "finishing: %u x %" PRIu64 " x %" PRIu64 " pixels per batch is over "
                              "2^32",
                              c->batch_size, h, w);
    c->fin_t = ti;
    c->fin_flip = o->finish_flip;
    c->fin_row = (size_t)(h * w * 3) * stk_dtype_size(o->finish_dtype);
    memset(&c->fin, 0, sizeof(c->fin));
    c->fin.h = (uint32_t)h;
    c->fin.w = (uint32_t)w;
    c->fin.dtype = (uint32_t)o->finish_dtype;
    c->fin.nhwc = o->finish_nhwc;
    for (int ch = 0; ch < 3; ch++) {
        c->fin.mean[ch] = o->finish_mean[ch];
        c->fin.std[ch] = o->finish_std[ch];
        for (uint32_t x = 0; x < 256; x++) { /* the kernel's values, for the CPU fallback */
            float v = stk__fin_value(x, o->finish_mean[ch], o->finish_std[ch]);
            c->fin_lut32[ch][x] = v;
            c->fin_lut16[ch][x] =
                (uint16_t)(o->finish_dtype == STK_DTYPE_BFLOAT16 ? stk__fin_bf16(v)
                                                                 : stk__fin_f16(v));
        }
    }
    return STK_OK;
}

/* Make tensor t of a view the finishing output at `offset`. */
static void finished_tensor(const core *c, stk__tlayout *t, size_t offset)
{
    t->dtype = (stk_dtype)c->fin.dtype;
    t->ndim = 3;
    int64_t h = c->fin.h, w = c->fin.w;
    int64_t chw[3] = {3, h, w}, hwc[3] = {h, w, 3};
    memcpy(t->shape, c->fin.nhwc ? hwc : chw, sizeof(chw));
    t->offset = offset;
    t->row_size = c->fin_row;
}

/* Note why part of the GPU path is off: "what: why", "; "-separated when there are several;
 * cut at the size of the stats field. */
static void dev_note(core *c, const char *what, const char *why)
{
    const char *parts[4] = {c->dev_reason[0] ? "; " : "", what, ": ", why};
    size_t n = strlen(c->dev_reason);
    for (int i = 0; i < 4; i++) {
        size_t k = STK_MIN(strlen(parts[i]), sizeof(c->dev_reason) - 1 - n);
        memcpy(c->dev_reason + n, parts[i], k);
        n += k;
    }
    c->dev_reason[n] = '\0';
}

/* The GPU path and the ring's memory: open the device (for pinning or copies), create the device
 * ring, place finishing, lay out the host slot, allocate the slots (pinned within the cap). */
static stk_status ring_setup(core *c, const stk_loader_opts *o, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char why[STK_ERRMSG_SIZE];
    c->device = -1;
    c->flags_offset = c->fin_host_offset = c->fin_dev_offset = SIZE_MAX;
    if ((rc = finish_setup(c, o, err, err_size)) < 0)
        return rc;
    size_t host = c->lay.slot_size, fsize = 0;
    if (c->fin_t >= 0 && c->fin_flip > 0) {
        c->flags_offset = (size_t)STK_ALIGN_UP(host, 64);
        host = c->flags_offset + c->batch_size;
    }
    host = (size_t)STK_ALIGN_UP(host, 64);
    if (c->fin_t >= 0 && !stk__mul_ok(c->fin_row, c->batch_size, &fsize))
        return stk__set_error(err, err_size, STK_ELIMIT, "finishing output too large");
    bool want_pinned = (o->flags & STK_LOADER_PINNED) || o->device >= 0;
    if (want_pinned) {
        if (stk__cudev_open(o->device >= 0 ? o->device : 0, &c->cudev, why, sizeof(why)) ==
            STK_OK) {
            c->cudev_open = true;
        } else {
            dev_note(c,
                     o->device >= 0 ? "no device copy and pageable ring"
                                    : "pageable ring (pinned memory needs CUDA)",
                     why);
            want_pinned = false;
        }
    }
    bool pushed = c->cudev_open && stk__cudev_push(&c->cudev, err, err_size) == STK_OK;
    if (c->cudev_open && !pushed) {
        rc = STK_EIO;
        goto fail;
    }
    if (o->device >= 0 && c->cudev_open) {
        why[0] = '\0';
        if ((rc = stk__devring_create(&c->cudev, c->prefetch, host, fsize, &c->dev, why,
                                      sizeof(why), err, err_size)) < 0)
            goto fail;
        c->device = o->device;
        if (c->fin_t >= 0) {
            c->finish = stk__devring_can_finish(c->dev) ? STK_FINISH_DEVICE : STK_FINISH_CPU;
            if (c->finish == STK_FINISH_CPU)
                dev_note(c, "finishing on the CPU", why);
        }
    } else if (c->fin_t >= 0) {
        c->finish = STK_FINISH_CPU;
    }
    c->view = c->dview = c->lay;
    if (c->finish == STK_FINISH_CPU) {
        /* The output follows the slot on the host; the device buffer has the same layout. */
        c->fin_host_offset = host;
        if (__builtin_add_overflow(host, fsize, &host)) {
            rc = stk__set_error(err, err_size, STK_ELIMIT, "batch slot too large");
            goto fail;
        }
        finished_tensor(c, &c->view.t[c->fin_t], c->fin_host_offset);
        c->dview = c->view;
    } else if (c->finish == STK_FINISH_DEVICE) {
        c->fin_dev_offset = host;
        finished_tensor(c, &c->dview.t[c->fin_t], c->fin_dev_offset);
    }
    c->slot_alloc = host;

    uint64_t limit = !want_pinned      ? 0
                     : o->pinned_limit ? o->pinned_limit
                                       : stk__pinned_limit_default();
    uint64_t ring = (uint64_t)STK_ALIGN_UP(host, 64) * c->prefetch, held = stk__pinned_total();
    if (want_pinned && (held > limit || ring > limit - held)) {
        char msg[STK_ERRMSG_SIZE];
        snprintf(msg, sizeof(msg),
                 "%u slots of %zu bytes would take pinned memory to %" PRIu64
                 " bytes, over the %" PRIu64 "-byte cap (opts.pinned_limit or STOKER_PINNED_LIMIT)",
                 c->prefetch, host, held + ring, limit);
        dev_note(c, "pageable ring", msg);
        want_pinned = false;
    }
    c->slots = stk__calloc(c->prefetch, sizeof(slot));
    if (!c->slots) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory allocating %u ring slots",
                            c->prefetch);
        goto fail;
    }
    c->pinned = want_pinned;
    for (uint32_t i = 0; i < c->prefetch; i++) {
        bool pinned = false;
        why[0] = '\0';
        c->slots[i].mem = stk__slot_alloc_ex(host, want_pinned, limit, &pinned, why, sizeof(why));
        if (!c->slots[i].mem) {
            rc = stk__set_error(err, err_size, STK_ENOMEM,
                                "out of memory allocating a ring slot of %zu bytes", host);
            goto fail;
        }
        if (want_pinned && !pinned && c->pinned)
            dev_note(c, "pageable ring", why);
        c->pinned = c->pinned && pinned;
        c->pinned_bytes += pinned ? (uint64_t)STK_ALIGN_UP(host, 64) : 0;
        c->slots[i].state = SLOT_FREE;
        c->slots[i].seq = UINT64_MAX;
        c->slots[i].handle.c = c;
        c->slots[i].handle.slot = i;
        c->slots[i].handle.pinned = pinned;
    }
fail:
    if (pushed)
        stk__cudev_pop(&c->cudev);
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
        return stk__set_last_error(STK_EINVAL, "rank %d is not below world size %d",
                                   (int)o->rank, (int)o->world);
    *rank = (uint32_t)o->rank;
    *world = (uint32_t)o->world;
    return STK_OK;
}

stk_status stk_loader_create(const stk_loader_opts *opts, stk_loader **out)
{
    stk_status rc = STK_OK;
    stk_loader *L = NULL;
    core *c = NULL;
    char err[STK_ERRMSG_SIZE] = "";
    *out = NULL;
    stk__clear_last_error();
    if (!opts || opts->struct_size < offsetof(stk_loader_opts, device))
        return stk__set_last_error(STK_EINVAL, "options not initialised with "
                                               "stk_loader_opts_init");
    /* A caller built against an older header passes a shorter struct: defaults for the rest. */
    stk_loader_opts full;
    stk_loader_opts_init(&full);
    memcpy(&full, opts, STK_MIN(opts->struct_size, sizeof(full)));
    full.struct_size = sizeof(full);
    opts = &full;
    if (opts->batch_size < 1 || opts->batch_size > 0x7fffffff)
        return stk__set_last_error(STK_EINVAL, "batch size %" PRId64 " is invalid (must be >= 1)",
                                   opts->batch_size);
    if (opts->n_threads < 0)
        return stk__set_last_error(STK_EINVAL, "thread count %d is invalid (must be >= 0; 0 = "
                                               "one per CPU)",
                                   (int)opts->n_threads);
    if (opts->prefetch < 0)
        return stk__set_last_error(STK_EINVAL, "prefetch %d is invalid (must be >= 1; 0 = default)",
                                   (int)opts->prefetch);
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
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv_work, NULL);
    pthread_condattr_t ca; /* cv_ready: timed waits (stk_loader_next_timeout) use CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv_ready, &ca);
    pthread_condattr_destroy(&ca);
    c->pid = getpid();
    c->refs = 1;
    L->c = c;
    if (opts->dataset) {
        c->ds = opts->dataset;
    } else {
        unsigned dflags = (opts->flags & STK_LOADER_NO_VERIFY) ? STK_DATASET_NO_VERIFY : 0;
        if ((rc = stk_dataset_open(opts->paths, opts->n_paths, dflags, &c->owned_ds)) < 0) {
            snprintf(err, sizeof(err), "%s", stk_last_errmsg());
            goto fail;
        }
        c->ds = c->owned_ds;
    }
    c->n = stk_dataset_count(c->ds);
    if (c->n == 0)
        STK_FAIL(err, STK_EINVAL, "dataset is empty (0 records)");
    c->batch_size = (uint32_t)opts->batch_size;
    c->n_threads = opts->n_threads ? (uint32_t)opts->n_threads : stk__cpu_count();
    c->prefetch = opts->prefetch ? (uint32_t)opts->prefetch : 4;
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
    c->active = c->autotune ? 1 : c->n_threads;
    c->depth = c->autotune ? STK_MIN(2, c->prefetch) : c->prefetch;
    c->at_last_ns = c->created_ns;
    c->at_ceiling = c->n_threads;
    c->verify = !(opts->flags & STK_LOADER_NO_VERIFY) && stk__dataset_verifies(c->ds);
    c->transform = opts->transform;
    c->tfield = -1;
    stk__tspec tspec;
    if (c->transform) {
        const char *fname = opts->transform_field ? opts->transform_field : "image";
        c->tfield = stk_dataset_find_field(c->ds, fname);
        if (c->tfield < 0)
            STK_FAIL(err, STK_EINVAL, "the transform's field '%s' is not in the dataset", fname);
        if (stk_dataset_field(c->ds, (size_t)c->tfield)->kind != STK_FIELD_BYTES)
            STK_FAIL(err, STK_EINVAL, "the transform's field '%s' is not a bytes field", fname);
        stk__transform_spec(c->transform, &tspec);
    }
    STK_TRY(stk__layout_init(&c->lay, c->ds, c->batch_size, c->tfield, &tspec, err,
                             sizeof(err)));
    if (c->verify) {
        /* calloc'd pages stay untouched (not resident) until a bit in them is set */
        c->verified = stk__calloc((size_t)((c->n + 63) / 64), sizeof(uint64_t));
        if (!c->verified)
            STK_FAIL(err, STK_ENOMEM, "out of memory for the %" PRIu64 "-record verify bitmap",
                     c->n);
    }

    STK_TRY(ring_setup(c, opts, err, sizeof(err)));

    /* Epoch 0 from position 0; the consumer and the dispatcher start in step. */
    plan_epoch(c, 0, &c->d_plan);
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
        if (c->dev) {
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
        if (c->transform) {
            w->scratch_size = stk_dataset_field_max_size(c->ds, (size_t)c->tfield);
            w->scratch = stk__malloc(w->scratch_size);
            if (!w->scratch)
                STK_FAIL(err, STK_ENOMEM, "out of memory allocating a %zu-byte read buffer",
                         w->scratch_size);
            if ((rc = stk__transform_worker_create(c->transform, &w->tw)) < 0)
                STK_FAIL(err, rc, "cannot create transform worker state: %s",
                         stk_last_errmsg());
        }
    }
    for (uint32_t i = 0; i < c->n_threads; i++) {
        if (pthread_create(&c->workers[i].thread, NULL, worker_main, &c->workers[i]) != 0)
            STK_FAIL(err, STK_ENOMEM, "cannot start worker thread %u", i);
        c->n_started++;
    }
    *out = L;
    return STK_OK;
fail:
    stop_workers(c);
    core_free(c);
    stk__free(L);
    return stk__last_error_copy(rc, err);
}

void stk_loader_destroy(stk_loader *L)
{
    if (!L)
        return;
    core *c = L->c;
    if (fork_child(c))
        return;
    stop_workers(c);
    pthread_mutex_lock(&c->mu);
    bool last = core_unref_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (last)
        core_free(c);
    stk__free(L);
}

/* ---- autotune ---- */

#define AT_WINDOW_NS 250000000ull /* decide every 250 ms of consumption */

/* Sum of the workers' wait-for-slot time. */
static uint64_t workers_wait_ns(const core *c)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < c->n_threads; i++)
        sum += atomic_load_explicit(&c->workers[i].wait_ns, memory_order_relaxed);
    return sum;
}

/* One autotune step (consumer thread, mu held): grow while the consumer waits, shrink while
 * the workers wait more than one thread's worth and the consumer does not. */
static void autotune_tick(core *c, uint64_t now)
{
    uint64_t dt = now - c->at_last_ns;
    if (dt < AT_WINDOW_NS)
        return;
    uint64_t cwait = atomic_load_explicit(&c->consumer_wait_ns, memory_order_relaxed);
    uint64_t wwait = workers_wait_ns(c);
    uint64_t samples = atomic_load(&c->st_samples);
    double cw = (double)(cwait - c->at_last_cwait) / (double)dt;
    double ww = (double)(wwait - c->at_last_wwait) / (double)dt; /* in threads' worth */
    double rate = (double)(samples - c->at_last_samples) * 1e9 / (double)dt;
    c->at_last_ns = now;
    c->at_last_cwait = cwait;
    c->at_last_wwait = wwait;
    c->at_last_samples = samples;
    if (++c->at_windows % 20 == 0)
        c->at_ceiling = c->n_threads; /* the machine may have changed: probe again */
    if (c->at_settle > 0) { /* let the last change show in a whole window first */
        c->at_settle--;
        return;
    }
    uint32_t old = c->active, old_depth = c->depth;
    if (c->at_grew) {
        c->at_grew = false;
        if (rate < c->at_rate_before * 1.05) {
            /* More threads did not deliver more: the CPUs (or the storage) are the limit. */
            c->active = c->at_prev;
            c->at_ceiling = c->at_prev;
            snprintf(c->at_reason, sizeof(c->at_reason),
                     "%u threads gave no gain over %u (%.0f vs %.0f samples/s): back to %u",
                     old, c->at_prev, rate, c->at_rate_before, c->active);
            c->at_changes++;
            c->at_settle = 1;
            pthread_cond_broadcast(&c->cv_work);
            return;
        }
    }
    uint32_t cap = STK_MIN(c->n_threads, c->at_ceiling);
    if (cw > 0.02 && c->active < cap) {
        c->active = cw > 0.30 ? STK_MIN(cap, c->active * 2) : c->active + 1;
        c->at_grew = true;
        c->at_prev = old;
        c->at_rate_before = rate;
        snprintf(c->at_reason, sizeof(c->at_reason),
                 "consumer waited %.0f%% of the time with %u thread%s: %u threads", cw * 100, old,
                 old == 1 ? "" : "s", c->active);
    } else if (cw > 0.02 && ww < 0.5 && c->depth < c->prefetch) {
        c->depth++;
        snprintf(c->at_reason, sizeof(c->at_reason),
                 "consumer waited %.0f%% with all %u threads busy: depth %u", cw * 100, old,
                 c->depth);
    } else if (cw < 0.005 && c->active > 1 && ww > 1.2) {
        c->active--;
        snprintf(c->at_reason, sizeof(c->at_reason),
                 "consumer never waited and %u threads idled %.1f threads' worth: %u threads",
                 old, ww, c->active);
    }
    if (c->active != old || c->depth != old_depth) {
        c->at_changes++;
        c->at_settle = 1;
        pthread_cond_broadcast(&c->cv_work);
    }
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
    uint64_t t_in = tnow(c);
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
    pthread_mutex_lock(&c->mu);
    if (c->ctrace.cap && c->c_return_ns) {
        trace_add(c, &c->ctrace, TR_STEP, c->c_return_ns, t_in, (uint32_t)c->c_seq);
        c->c_return_ns = 0; /* a repeated call after STK_EAGAIN is not another step */
    }
    if (c->autotune)
        autotune_tick(c, stk__now_ns());
    if (c->c_b >= c->c_plan.n_batches) {
        /* Epoch done: report it once, then the next call starts the next epoch. */
        c->c_epoch++;
        c->c_b = 0;
        c->c_consumed = 0;
        plan_epoch(c, 0, &c->c_plan);
        pthread_mutex_unlock(&c->mu);
        return STK_END;
    }
    uint64_t seq = c->c_seq;
    slot *s = &c->slots[seq % c->prefetch];
    if (s->state == SLOT_HELD) {
        /* The next batch's slot still holds a batch the consumer has not released: waiting
         * would deadlock. */
        uint32_t held = c->held;
        pthread_mutex_unlock(&c->mu);
        return stk__set_error(L->errmsg, sizeof(L->errmsg), STK_ELIMIT,
                              "the consumer holds %u of %u ring slots, including the one the "
                              "next batch needs: release the oldest batch (or raise prefetch)",
                              held, c->prefetch);
    }
    if (!(s->seq == seq && s->state == SLOT_READY)) {
        uint64_t t0 = tnow(c);
        bool timed_out = false;
        while (!(s->seq == seq && s->state == SLOT_READY) && !timed_out) {
            if (timeout_ms < 0)
                pthread_cond_wait(&c->cv_ready, &c->mu);
            else
                timed_out = pthread_cond_timedwait(&c->cv_ready, &c->mu, &deadline) == ETIMEDOUT;
        }
        uint64_t t1 = tnow(c);
        atomic_fetch_add_explicit(&c->consumer_wait_ns, t1 - t0, memory_order_relaxed);
        if (c->ctrace.cap)
            trace_add(c, &c->ctrace, TR_CWAIT, t0, t1, (uint32_t)seq);
        if (!(s->seq == seq && s->state == SLOT_READY)) {
            pthread_mutex_unlock(&c->mu);
            return STK_EAGAIN; /* nothing consumed: the caller may simply call again */
        }
    }
    c->c_seq++;
    c->c_b++;
    c->c_consumed = s->consumed;
    if (s->err_code < 0) {
        stk_status rc = s->err_code;
        snprintf(L->errmsg, sizeof(L->errmsg), "%s", s->errmsg);
        s->state = SLOT_FREE;
        atomic_fetch_add(&c->st_errors, 1);
        pthread_cond_broadcast(&c->cv_work);
        pthread_mutex_unlock(&c->mu);
        return rc;
    }
    s->state = SLOT_HELD;
    s->waited = false;
    s->n_use = 0;
    c->held++;
    c->refs++;
    atomic_fetch_add(&c->st_batches, 1);
    atomic_fetch_add(&c->st_samples, s->count);
    atomic_fetch_add(&c->st_skipped, atomic_load(&s->skipped));
    c->c_return_ns = tnow(c);
    pthread_mutex_unlock(&c->mu);
    *out = &s->handle;
    return STK_OK;
}

/* Record the release of held slot s on `first` (when `has_first`) and on every stream of
 * stk_batch_device_use, each once: the next copy into its device buffer waits for them all. */
static stk_status release_on(core *c, slot *s, bool has_first, void *first)
{
    void *v[STK__RELEASE_MAX];
    size_t n = 0;
    if (has_first)
        v[n++] = first;
    for (uint32_t i = 0; i < s->n_use; i++)
        if (!has_first || s->use[i] != first)
            v[n++] = s->use[i];
    return stk__devring_release_on(c->dev, s->handle.slot, v, n);
}

void stk_batch_release(stk_batch *b)
{
    if (!b)
        return;
    core *c = b->c;
    if (fork_child(c))
        return;
    slot *s = &c->slots[b->slot];
    if (c->dev && (s->waited || s->n_use)) /* the next copy into the buffer: after that work */
        release_on(c, s, s->waited, s->wait_stream);
    s->waited = false;
    s->n_use = 0;
    pthread_mutex_lock(&c->mu);
    s->state = SLOT_FREE;
    c->held--;
    pthread_cond_broadcast(&c->cv_work);
    bool last = core_unref_locked(c);
    pthread_mutex_unlock(&c->mu);
    if (last)
        core_free(c);
}

/* Discard everything not held and restart the dispatcher at the consumer's position: epoch
 * `epoch` from global position `start`. */
static void reset(core *c, uint64_t seed, uint64_t epoch, uint64_t start)
{
    pthread_mutex_lock(&c->mu);
    atomic_fetch_add(&c->gen, 1);
    while (c->busy > 0)
        pthread_cond_wait(&c->cv_ready, &c->mu);
    for (uint32_t i = 0; i < c->prefetch; i++) {
        slot *s = &c->slots[i];
        if (s->state != SLOT_HELD) {
            s->state = SLOT_FREE;
            s->seq = UINT64_MAX;
            atomic_store(&s->ticket, UINT64_MAX); /* no seq tag matches: no ticket is taken */
        }
    }
    c->seed = seed; /* no worker is inside a sample: safe to change */
    c->claim_seq = c->open_seq = c->c_seq;
    c->d_epoch = c->c_epoch = epoch;
    c->d_b = c->c_b = 0;
    c->d_idle = false;
    c->c_consumed = start;
    plan_epoch(c, start, &c->d_plan);
    c->c_plan = c->d_plan;
    pthread_cond_broadcast(&c->cv_work);
    pthread_mutex_unlock(&c->mu);
}

stk_status stk_loader_set_epoch(stk_loader *L, uint64_t epoch)
{
    core *c = L->c;
    pthread_mutex_lock(&c->mu);
    bool noop = c->c_epoch == epoch && c->c_b == 0 && c->c_consumed == 0;
    pthread_mutex_unlock(&c->mu);
    if (!noop)
        reset(c, c->seed, epoch, 0);
    return STK_OK;
}

uint64_t stk_loader_epoch(const stk_loader *L)
{
    core *c = L->c;
    pthread_mutex_lock(&c->mu);
    uint64_t e = c->c_epoch;
    pthread_mutex_unlock(&c->mu);
    return e;
}

uint64_t stk_loader_n_batches(const stk_loader *L)
{
    stk_plan p;
    plan_epoch(L->c, 0, &p);
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

void stk_loader_info_get(const stk_loader *L, stk_loader_info *out)
{
    const core *c = L->c;
    memset(out, 0, sizeof(*out));
    out->n_threads = c->n_threads;
    out->prefetch = c->prefetch;
    out->batch_size = c->batch_size;
    out->rank = c->rank;
    out->world = c->world;
    out->n_records = c->n;
    out->slot_size = c->slot_alloc;
    out->pinned = c->pinned;
}

void stk_loader_stats_get(const stk_loader *L, stk_loader_stats *out)
{
    core *c = L->c;
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
        while (col > seen && !atomic_compare_exchange_weak_explicit(
                                 &w->collate_seen, &seen, col, memory_order_relaxed,
                                 memory_order_relaxed)) {
        }
        out->collate_ns += col > seen ? col : seen;
        out->finish_ns += fin;
        out->worker_wait_ns += atomic_load_explicit(&w->wait_ns, memory_order_relaxed);
    }
    out->pinned = c->pinned;
    out->pinned_bytes = c->pinned_bytes;
    out->pinned_total = stk__pinned_total();
    out->device = c->dev ? c->device : -1;
    out->finish = (uint32_t)c->finish;
    out->copies = atomic_load_explicit(&c->st_copies, memory_order_relaxed);
    out->h2d_bytes = atomic_load_explicit(&c->st_h2d, memory_order_relaxed);
    out->copied_bytes = atomic_load_explicit(&c->st_copied, memory_order_relaxed);
    out->copy_ns = atomic_load_explicit(&c->st_copy_ns, memory_order_relaxed);
    out->finish_ns += atomic_load_explicit(&c->st_dfinish_ns, memory_order_relaxed);
    snprintf(out->device_reason, sizeof(out->device_reason), "%s", c->dev_reason);
    out->consumer_wait_ns = atomic_load_explicit(&c->consumer_wait_ns, memory_order_relaxed);
    pthread_mutex_lock(&c->mu);
    out->active_threads = c->active;
    out->depth = c->depth;
    out->autotune_changes = c->at_changes;
    snprintf(out->autotune_reason, sizeof(out->autotune_reason), "%s", c->at_reason);
    pthread_mutex_unlock(&c->mu);
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
        return stk__set_error(((stk_loader *)L)->errmsg, sizeof(L->errmsg), STK_EIO,
                              "%s: %s", path, strerror(errno));
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
                c->n_threads + 1, (int)c->device);
    trace_track(f, &c->ctrace, 0, &first);
    for (uint32_t i = 0; i < c->n_threads; i++)
        trace_track(f, &c->workers[i].trace, (int)i + 1, &first);
    if (c->dtrace.cap) {
        pthread_mutex_lock(&c->mu); /* the device track is appended under mu */
        trace_track(f, &c->dtrace, (int)c->n_threads + 1, &first);
        pthread_mutex_unlock(&c->mu);
    }
    fprintf(f, "\n]}\n");
    if (fclose(f) != 0)
        return stk__set_error(((stk_loader *)L)->errmsg, sizeof(L->errmsg), STK_EIO,
                              "%s: %s", path, strerror(errno));
    return STK_OK;
}

/* ---- resume state ---- */

stk_status stk_loader_state(const stk_loader *L, char *buf, size_t buf_size)
{
    core *c = L->c;
    pthread_mutex_lock(&c->mu);
    uint64_t epoch = c->c_epoch, consumed = c->c_consumed;
    pthread_mutex_unlock(&c->mu);
    int n = snprintf(buf, buf_size,
                     "{\"format\": \"stoker-state\", \"version\": %d, \"records\": %" PRIu64
                     ", \"fingerprint\": \"%016" PRIx64 "\", \"seed\": %" PRIu64
                     ", \"shuffle\": %s, \"epoch\": %" PRIu64 ", \"consumed\": %" PRIu64 "}",
                     STATE_VERSION, c->n, stk_dataset_fingerprint(c->ds), c->seed,
                     c->shuffle ? "true" : "false", epoch, consumed);
    if (n < 0 || (size_t)n >= buf_size)
        return STK_ELIMIT;
    return STK_OK;
}

/* Find "key": in a flat JSON object and return a pointer to its value, or NULL. */
static const char *json_find(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* Read an unsigned integer value; false if missing or malformed. */
static bool json_u64(const char *json, const char *key, uint64_t *out)
{
    const char *p = json_find(json, key);
    if (!p || *p < '0' || *p > '9')
        return false;
    char *end;
    *out = strtoull(p, &end, 10);
    return end != p;
}

stk_status stk_loader_load_state(stk_loader *L, const char *json)
{
    core *c = L->c;
    stk_status rc = STK_OK;
    uint64_t version, records, seed, epoch, consumed, fp;
    L->errmsg[0] = '\0';
    if (!json)
        STK_FAIL(L->errmsg, STK_EINVAL, "state is NULL");
    const char *fmt = json_find(json, "format");
    if (!fmt || strncmp(fmt, "\"stoker-state\"", 14) != 0)
        STK_FAIL(L->errmsg, STK_EINVAL, "not a stoker loader state (no \"format\": "
                                        "\"stoker-state\")");
    if (!json_u64(json, "version", &version))
        STK_FAIL(L->errmsg, STK_EINVAL, "state has no valid \"version\"");
    if (version > STATE_VERSION)
        STK_FAIL(L->errmsg, STK_ENOTSUP,
                 "state version %" PRIu64 " is newer than this stoker (reads %d)", version,
                 STATE_VERSION);
    const char *fps = json_find(json, "fingerprint");
    if (!json_u64(json, "records", &records) || !json_u64(json, "seed", &seed) ||
        !json_u64(json, "epoch", &epoch) || !json_u64(json, "consumed", &consumed) || !fps ||
        *fps != '"')
        STK_FAIL(L->errmsg, STK_EINVAL, "state is missing records, seed, epoch, consumed or "
                                        "fingerprint");
    fp = strtoull(fps + 1, NULL, 16);
    const char *sh = json_find(json, "shuffle");
    bool shuffle = sh && strncmp(sh, "true", 4) == 0;
    if (records != c->n || fp != stk_dataset_fingerprint(c->ds))
        STK_FAIL(L->errmsg, STK_EINVAL,
                 "state belongs to another dataset (%" PRIu64 " records, fingerprint %016" PRIx64
                 "; this one has %" PRIu64 ", %016" PRIx64 ")",
                 records, fp, c->n, stk_dataset_fingerprint(c->ds));
    if (shuffle != c->shuffle)
        STK_FAIL(L->errmsg, STK_EINVAL, "state was taken with shuffle=%s, this loader has "
                                        "shuffle=%s",
                 shuffle ? "true" : "false", c->shuffle ? "true" : "false");
    if (consumed > c->n + 0x7fffffffULL) /* padding is always below one world size */
        STK_FAIL(L->errmsg, STK_EINVAL, "state position %" PRIu64 " is past the epoch's end",
                 consumed);
    reset(c, seed, epoch, consumed);
    return STK_OK;
fail:
    return rc;
}

/* ---- batches ---- */

uint32_t stk_batch_size(const stk_batch *b)
{
    return b->c->slots[b->slot].count;
}

uint64_t stk_batch_epoch(const stk_batch *b)
{
    return b->c->slots[b->slot].epoch;
}

uint64_t stk_batch_number(const stk_batch *b)
{
    return b->c->slots[b->slot].number;
}

size_t stk_batch_n_tensors(const stk_batch *b)
{
    return b->c->lay.n_tensors;
}

stk_status stk_batch_tensor(const stk_batch *b, size_t i, stk_tensor *out)
{
    const core *c = b->c;
    if (i >= c->view.n_tensors)
        return STK_EINVAL;
    const slot *s = &c->slots[b->slot];
    stk__layout_tensor(&c->view, i, s->mem, s->count, out);
    return STK_OK;
}

const int64_t *stk_batch_indices(const stk_batch *b)
{
    const core *c = b->c;
    const slot *s = &c->slots[b->slot];
    return (const int64_t *)(s->mem + c->lay.t[c->lay.n_tensors - 1].offset);
}

/* ---- batches on the device ---- */

int32_t stk_batch_device(const stk_batch *b)
{
    return b->c->dev ? b->c->device : -1;
}

stk_status stk_batch_device_tensor(const stk_batch *b, size_t i, stk_tensor *out)
{
    const core *c = b->c;
    if (!c->dev)
        return STK_ENOTSUP;
    if (i >= c->dview.n_tensors)
        return STK_EINVAL;
    const slot *s = &c->slots[b->slot];
    CUdeviceptr base = stk__devring_base(c->dev, b->slot);
    stk__layout_tensor(&c->dview, i, (uint8_t *)(uintptr_t)base, s->count, out);
    if (c->dview.t[i].bytes) /* lengths stay on the host */
        out->lengths = (const int64_t *)(s->mem + c->dview.t[i].lengths_offset);
    return STK_OK;
}

stk_status stk_batch_device_wait(stk_batch *b, void *stream)
{
    core *c = b->c;
    if (!c->dev)
        return STK_ENOTSUP;
    slot *s = &c->slots[b->slot];
    stk_status rc = stk__devring_wait(c->dev, b->slot, stream);
    if (rc == STK_OK) {
        s->waited = true;
        s->wait_stream = stream;
    }
    return rc;
}

stk_status stk_batch_device_sync(stk_batch *b)
{
    core *c = b->c;
    if (!c->dev)
        return STK_ENOTSUP;
    return stk__devring_sync(c->dev, b->slot);
}

stk_status stk_batch_device_use(stk_batch *b, void *stream)
{
    core *c = b->c;
    if (!c->dev)
        return stk__set_last_error(STK_ENOTSUP, "the batch is not on a device");
    if (fork_child(c)) /* the child cannot use the device; its releases do nothing */
        return STK_OK;
    slot *s = &c->slots[b->slot];
    for (uint32_t i = 0; i < s->n_use; i++)
        if (s->use[i] == stream)
            return STK_OK; /* recorded once */
    /* The streams reading the batch: these, and the one it waited on (counted once). */
    uint32_t n = s->n_use;
    bool is_wait = s->waited && s->wait_stream == stream;
    for (uint32_t i = 0; s->waited && i < s->n_use; i++)
        if (s->use[i] == s->wait_stream) {
            n--;
            break;
        }
    n += s->waited;
    if (is_wait) {
        /* Listed too, so that stk_batch_release_after(b, other) still records on it (when the
         * list is full, the device_wait after the uses put it over the bound: the plain release
         * still records on it). */
        if (s->n_use < STK__USE_MAX)
            s->use[s->n_use++] = stream;
        return STK_OK;
    }
    if (n >= STK__USE_MAX)
        return stk__set_last_error(STK_ELIMIT,
                                   "a batch can be read on at most %d streams, counting the one "
                                   "stk_batch_device_wait made wait, and this one already is on "
                                   "%u: make one of them wait for this stream's work instead "
                                   "(cuStreamWaitEvent)",
                                   STK__USE_MAX, n);
    s->use[s->n_use++] = stream;
    return STK_OK;
}

stk_status stk_batch_release_after(stk_batch *b, void *stream)
{
    if (!b)
        return STK_OK;
    core *c = b->c;
    stk_status rc = STK_OK;
    if (c->dev && !fork_child(c)) {
        slot *s = &c->slots[b->slot];
        rc = release_on(c, s, true, stream);
        s->waited = false;
        s->n_use = 0;
    }
    stk_batch_release(b);
    return rc;
}
