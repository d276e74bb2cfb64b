/*
 * stk_loader_int.h: the loader's internal state, shared by its files:
 *
 *   stk_loader.c      create and destroy (the loader's life)
 *   stk_consumer.c    the consumer: next, the resets, info and stats
 *   stk_worker.c      the worker threads: open batches, take tickets, read/transform/finish
 *                     samples, queue device copies
 *   stk_autotune.c    the autotune decision (pure; the consumer feeds it windows)
 *   stk_resume.c      stk_loader_save_state / stk_loader_load_state
 *   stk_trace.c       per-thread trace buffers and stk_loader_trace_write
 *
 * The ring (slots, states, tickets, refcount) is src/batch/stk_ring.c, the batch the consumer
 * holds src/batch/stk_batch.c, the ring's setup and device side src/batch/stk_ring_setup.c;
 * device copies and finishing are src/cuda/stk_devcopy.c and stk_finish_cpu.c.
 */
#ifndef STK_LOADER_INT_H
#define STK_LOADER_INT_H

/* The most bytes a loader's per-record memo holds (a video's packed frame index is ~100 bytes at
 * a constant frame rate: 64 MiB holds ~500,000 videos' indexes). */
#define STK__MEMO_CAP (64ull << 20)

#include "batch/stk_batchops.h"
#include "batch/stk_ring.h"
#include "cuda/stk_devcopy.h"
#include "loader/stk_autotune.h"
#include "loader/stk_order.h"
#include "source/stk_imgfield.h"
#include "source/stk_source.h"
#include "stk_internal.h"

#include <pthread.h>
#include <stdatomic.h>

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

typedef struct stk__memotab stk__memotab; /* stk_memotable.c */
typedef struct tev {
    uint64_t t0, t1; /* ns since the loader was created */
    uint32_t stage;
    uint32_t arg; /* sample (workers) or batch number (consumer) */
} tev;

/* An append-only trace buffer written by one thread. */
typedef struct tbuf {
    tev *ev;
    uint32_t cap;
    atomic_uint n; /* published with release: events [0, n) are complete */
} tbuf;

typedef struct core core;

/* A list of an epoch's records (STK_ORDER_WEIGHTED without replacement; stk_order.c). */
typedef struct stk__olist {
    uint64_t epoch;
    uint32_t refs; /* slots holding a batch of it, + 1 for the dispatcher's current list */
    uint64_t *idx; /* [m] */
} stk__olist;

typedef struct worker {
    core *c;
    uint32_t id;
    pthread_t thread;
    _Atomic uint64_t read_ns, wait_ns;
    _Atomic uint64_t run_ns; /* time inside runs of samples; collate = run - read - transform */
    _Atomic uint64_t collate_seen; /* the largest collate time reported (stats_get) */
    _Atomic uint64_t finish_ns;    /* CPU finishing */
    tbuf trace;
    stk__tworker *tw;
    stk__cursor *cur; /* the record source's per-thread state (NULL when it needs none) */
    uint8_t *scratch; /* encoded bytes of the transformed field */
    size_t scratch_size;
    uint8_t *rgb;        /* an image array field's value as RGB (when it is grayscale or planes) */
    uint8_t *bscratch;   /* batch transforms' scratch (bops.scratch_size) */
    uint8_t *in;         /* with sample_fn: the sample's fields, laid out as c->in_lay */
    uint32_t active;     /* c->at.active when this worker last took samples (read under mu) */
    uint32_t depth;      /* c->at.depth then */
    stk_sample_fn_v2 fn; /* the helper's callback in place of the loader's (stk_loader_help) */
    void *fn_ctx;
} worker;

/* The part of a loader that outlives stk_loader_destroy while batches are still held. The ring's
 * mutex `r.mu` guards the slot states, the dispatcher and consumer state, `busy`, `stop`, the
 * autotune state and the reference count; sample work runs without it. */
struct core {
    stk__ring r;
    bool stop;
    uint32_t busy;   /* workers inside sample work */
    uint32_t resets; /* resets waiting for busy == 0 (only they need its broadcast) */
    atomic_uint gen; /* bumped by reset: workers drop what they hold */

    const stk_dataset *ds;
    stk_dataset *owned_ds;

    /* the epoch's order (stk_order.c): m positions per epoch */
    uint32_t order; /* stk_order_kind */
    bool replacement;
    uint64_t m;
    uint64_t order_hash; /* of the settings, in the resume state (0 = STK_ORDER_ALL) */
    uint64_t *ilist;     /* STK_ORDER_INDICES: [m] (replaced by set_indices in a reset) */
    double *cdf;         /* STK_ORDER_WEIGHTED: prefix sums of the weights [n] */
    double *weights;     /* without replacement: the weights [n], keys scratch, list pool */
    stk__okey *okeys;
    stk__olist *pool, *d_list; /* pool [n_pool]; the dispatcher's current list (mu) */
    stk__olist **slot_list;    /* [n_slots]: the list of the batch each slot holds (mu) */
    uint32_t n_pool;
    const stk_transform *transform;
    stk_transform *own_transform; /* the transform bound to this data (stk__transform_bind), the
                                   * one `transform` points at; NULL when it needed none */
    int tfield;
    bool tarray;   /* the transformed field is a uint8 image array, not encoded bytes */
    bool in_place; /* the transform reads its field in place (stk__transform_apply_in; the
                      source's field_open), not from a whole read into the worker's scratch */
    /* Per record, one bit: its image passed a strict decode to its end, so later reads may stop
     * after the window (stk__transform_worker_trust; NULL without an encoded-image transform) */
    _Atomic uint64_t *checked;
    stk__memo *memo; /* per-record blobs a transform keeps across epochs (video indexes); NULL */
    const char *memo_file, *memo_magic; /* where the memo's blobs are kept on disk (NULL: not) */
    stk__memotab *memo_tab; /* local shards' parts' blobs, beside each shard (NULL: not kept) */
    uint32_t cores;         /* stk_n_cpus() at create: the thread plan's codec threads */
    bool readahead; /* some file is remote and the source gives extents: hint the next records */
    stk__imgarray tgeom; /* its geometry */
    uint32_t n_slots, n_threads, batch_size, rank, world;
    uint64_t seed, n;
    uint32_t per_record; /* samples per record (a video transform's clips_per_video; else 1): the
                          * loader's n counts samples, sample i is clip i % per_record of record
                          * i / per_record */
    bool shuffle, skip_corrupt;
    uint32_t plan_flags; /* STK_PLAN_*: the tail, the partial last batch, the split */
    unsigned read_flags; /* STK__READ_* for every record read */
    worker *workers;     /* [n_threads + 1]: the last is stk_loader_help's (no thread of its own) */
    uint32_t n_started;
    /* stk_loader_help's sample whose callback was interrupted (consumer thread only): run again
     * first by the next call, unless a reset (gen) discarded its batch */
    bool h_pending;
    uint64_t h_seq;
    uint32_t h_t;
    unsigned h_gen;

    /* dispatcher: what the next opened batch is */
    uint64_t claim_seq; /* earliest batch that may still have tickets (or the next to open) */
    uint64_t open_seq;  /* next seq to open */
    uint64_t d_epoch, d_b;
    stk_plan d_plan;
    bool d_idle; /* every epoch is empty: nothing to open */

    /* consumer */
    uint64_t c_seq, c_epoch, c_b, c_consumed;
    stk_plan c_plan;
    bool c_waiting; /* the consumer waits in stk_loader_next for batch c_seq */

    /* stats */
    bool timed; /* stage timing on (not STK_LOADER_NO_STATS) */
    uint64_t created_ns;
    atomic_uint_fast64_t st_batches, st_samples, st_bytes, st_skipped, st_errors;
    atomic_uint_fast64_t st_indexed;       /* records whose memo blob this loader derived */
    atomic_uint_fast64_t st_index_loaded;  /* ... read from disk instead */
    atomic_uint_fast64_t st_index_unsaved; /* ... derived that found no place on disk */
    _Atomic uint64_t consumer_wait_ns;
    tbuf ctrace;          /* the consumer's track */
    uint64_t c_return_ns; /* when stk_loader_next last returned a batch (for "step") */

    /* autotune: at.active and at.depth steer the workers with or without it (under mu) */
    bool autotune;
    bool caller_loads; /* STK_LOADER_CALLER_LOADS: at.active stays 0, the consumer loads */
    stk__autotune at;
    uint64_t at_last_ns, at_last_cwait, at_last_wwait, at_last_samples;

    /* batch transforms (stk_batchops.c) and the per-sample callback */
    stk__batchops bops;
    stk_sample_fn sample_fn;
    stk_sample_fn_v2 sample_fn_v2;       /* called instead of sample_fn when set */
    stk_sample_ahead_fn sample_ahead_fn; /* with sample_fn_v2: samples announced before they run */
    void *sample_ctx;
    stk__layout in_lay; /* with sample_fn: one sample's fields as read (batch size 1) */

    /* memory_budget: the fixed part counted at create, decode buffers charged while running */
    stk__budget budget;
    bool budget_on;

    /* GPU path (docs/gpu.md): the device side is the ring's (r.dc, r.cudev, r.dev_reason) */
    tbuf dtrace; /* the device track (appended under mu by whoever drains) */
};

struct stk_loader {
    core *c;
    char errmsg[STK_ERRMSG_SIZE];
};

/* Whether a per-sample callback (sample_fn or sample_fn_v2) produces the slot's rows. */
static inline bool stk__sampled(const core *c)
{
    return c->sample_fn || c->sample_fn_v2;
}

/* The clock for stats, or 0 when timing is off. */
static inline uint64_t stk__loader_now(const core *c)
{
    return c->timed ? stk__now_ns() : 0;
}

/* Plan this rank's part of an epoch from global position `start`. */
static inline void stk__loader_plan(const core *c, uint64_t start, stk_plan *p)
{
    stk_plan_init_v2(p, c->m, start, c->batch_size, c->rank, c->world, c->plan_flags);
}

/* Append a trace event (by the buffer's own thread only; the device track under mu). */
void stk__trace_add(const core *c, tbuf *b, uint32_t stage, uint64_t t0, uint64_t t1, uint32_t arg);

/* ---- the memo kept on disk (stk_memofile.c), with the dataset's vfs settings in use ---- */

/* Record rec's memo blob, read from its index file beside f (field range r of f) when the memo
 * holds none yet; NULL when there is none (or it does not check). The pointer is what
 * stk__memofile_store compares against. */
const uint8_t *stk__memofile_load(core *c, uint64_t rec, stk__file *f, stk__brange r);
/* Write rec's memo blob beside f when it is not `before` (derived, or derived again after a stale
 * one, by the apply since stk__memofile_load). Best effort. */
void stk__memofile_store(core *c, uint64_t rec, stk__file *f, stk__brange r, const uint8_t *before);

/* ---- local shards' parts' memo blobs, one table file beside each shard (stk_memotable.c) ---- */

/* A table of the blobs kept as `<shard>.<name>` with blob layout `magic`; NULL when out of
 * memory. Destroy writes what is not written yet. Threads: every call is serialised. */
stk__memotab *stk__memotab_create(const char *name, const char magic[8]);
void stk__memotab_destroy(stk__memotab *t); /* accepts NULL */
/* Part (off, len) of local shard src: its blob set as memo record rec; true when found. */
bool stk__memotab_get(stk__memotab *t, const stk__file *src, uint64_t off, uint64_t len,
                      stk__memo *memo, uint64_t rec);
/* Add part (off, len)'s blob (derived by this loader), written with its shard's table now or
 * later. Returns the blobs that found no place on disk by this call (0 usually). */
uint64_t stk__memotab_put(stk__memotab *t, const stk__file *src, uint64_t off, uint64_t len,
                          const void *blob, size_t n);

/* The worker thread (stk_worker.c); arg is its worker. */
void *stk__worker_main(void *arg);

/* Discard everything not held and restart the dispatcher at the consumer's position: epoch
 * `epoch` from global position `start`, with `seed` (stk_loader.c). */
void stk__loader_reset(core *c, uint64_t seed, uint64_t epoch, uint64_t start);
/* The same, replacing the STK_ORDER_INDICES list by `list` ([m], owned by the loader after)
 * while no worker is inside a sample. */
void stk__loader_reset_with(core *c, uint64_t seed, uint64_t epoch, uint64_t start, uint64_t *list,
                            uint64_t m);

/* The order (stk_order.c): set up from the options at create (c->n, n_slots, batch_size and
 * world known), freed with the core; the record at position pos (< m) of slot s's batch's
 * epoch; a slot being opened takes its epoch's list (mu held). */
stk_status stk__order_setup(core *c, const stk_loader_opts *o, char *err, size_t err_size);
void stk__order_free(core *c);
uint64_t stk__order_at(const core *c, const stk__slot *s, uint64_t pos);
void stk__order_open_locked(core *c, const stk__slot *s);
/* A new STK_ORDER_INDICES list for stk_loader_set_indices, checked (each index below the record
 * count; no more rows per rank than the ring's slots hold: STK_ELIMIT) and copied into *out
 * ([n], the caller's; STK_EINVAL, STK_ENOMEM). After a reset swapped it in, stk__order_rehash
 * updates the checksum of the settings that the resume state carries. */
stk_status stk__order_list_new(const core *c, const uint64_t *indices, uint64_t n, uint64_t **out,
                               char *err, size_t err_size);
void stk__order_rehash(core *c);

#endif /* STK_LOADER_INT_H */
