/*
 * stk_ring.h: the batch ring: `n_slots` slots of one layout, each holding one batch.
 *
 * A slot is FREE -> FILLING (opened for a batch seq) -> READY (every sample done) -> HELD
 * (borrowed by the consumer as a stk_batch) -> FREE (stk_batch_release). Workers take the
 * samples of a FILLING slot through its ticket word, a lock-free compare-and-swap that packs the
 * batch's seq (low 32 bits) beside the next ticket, so a worker holding a stale slot pointer can
 * never take a ticket of a newer batch. A failed sample is recorded on its slot; the lowest
 * sample wins, so the error a consumer sees does not depend on thread timing.
 *
 * Locking: `mu` guards slot states, `held` and the reference count (and whatever else its owner,
 * the loader, puts under it). The ring is shared with the batches the consumer holds: the owner
 * holds one reference and every HELD slot one, and the last unref calls `destroy`.
 */
#ifndef STK_RING_H
#define STK_RING_H

#include "batch/stk_layout.h"
#include "batch/stk_pinned.h"
#include "cuda/stk_devcopy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

enum { STK__SLOT_FREE, STK__SLOT_FILLING, STK__SLOT_READY, STK__SLOT_HELD };

struct stk__ring;

/* The handle of a slot's batch, handed to the consumer. */
struct stk_batch {
    stk__devbatch dv; /* its device side, handed down to src/cuda (stk_batch.c) */
    struct stk__ring *r;
    uint32_t slot;
    bool pinned; /* the slot's memory is page-locked */
};

typedef struct stk__slot {
    uint8_t *mem;
    int state;
    uint64_t seq;
    uint64_t epoch, number;  /* the batch's epoch and its number within the epoch */
    uint64_t first;          /* global position of the batch's first sample */
    uint32_t stride;         /* between its samples' positions (world when strided, else 1) */
    uint64_t consumed;       /* global position reached once this step is taken */
    uint32_t count;          /* samples */
    _Atomic uint64_t ticket; /* (seq low 32 bits) << 32 | next ticket */
    atomic_uint done;        /* samples finished */
    atomic_uint skipped;
    uint32_t err_sample; /* lowest failed sample, or UINT32_MAX */
    stk_status err_code;
    char errmsg[STK_ERRMSG_SIZE];
    bool draining;  /* a worker is waiting for the slot's last device copy (mu) */
    uint64_t freed; /* when it was last freed, on the ring's free_clock (mu) */
    bool used;      /* the memory behind it held a batch before (it moves with the memory; mu) */
    stk_batch handle;
} stk__slot;

typedef struct stk__ring {
    pid_t pid; /* the process that created it (see stk__ring_forked) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work;  /* workers: a slot was freed (and the owner's own reasons) */
    pthread_cond_t cv_ready; /* the consumer: a batch became READY; CLOCK_MONOTONIC */
    int refs;                /* 1 for the owner + 1 per HELD slot */
    uint32_t n_slots, held;
    stk__slot *slots;
    /* `lay` is where workers write, `view` what stk_batch_tensor shows (CPU finishing swaps in
     * its output). */
    stk__layout lay, view;
    size_t slot_alloc; /* bytes of one slot */
    bool pinned;       /* every slot is page-locked */
    stk__arena arena;  /* a shared ring's memfd holding every slot (fd -1: slots apart) */
    uint64_t pinned_bytes;
    /* Slots opened take the memory of the most recently freed slot (stk__ring_take_hot_locked);
     * only for a host-only ring of pageable slots (a device copy and the pinned flag are per
     * slot). free_clock stamps each free. (mu) */
    bool reuse_hot;
    uint64_t free_clock;
    /* Memory never written costs its first touch (a page fault per page, the kernel zeroing it;
     * on a VM the host backing it): 25-80x the stores themselves on this project's VM (issue 29).
     * Rather than open a batch in fresh memory, a worker may wait for used memory to be released
     * (stk__ring_fresh_wait_locked), for fresh_budget_ns in all: one slot written at 0.5 GB/s,
     * about its first touch on that VM (stk_ring_setup.c). The waits save a slot's first touch
     * when the run ends within the budget, and cost at most the budget when it does not. (mu) */
    int64_t fresh_budget_ns;
    uint32_t fresh_waiters; /* workers waiting so (mu) */
    uint32_t n_kept;        /* slots given memory an earlier ring wrote and kept (stk_pinned.c) */
    void (*destroy)(struct stk__ring *r, void *arg); /* called on the last unref, mu not held */
    void *destroy_arg;
    /* The device side (stk_ring_setup.c): set up once, torn down by stk__ring_teardown. */
    bool cudev_open; /* cudev's primary context is retained */
    stk__cudev cudev;
    stk__devcopy dc;      /* device copies and finishing; dc.dev NULL = host only */
    char dev_reason[256]; /* why part of the GPU path is off ("" when all asked for is on) */
} stk__ring;

/* What stk__ring_setup needs from the ring's owner. */
typedef struct stk__ring_args {
    uint32_t n_slots;
    stk__finish finish;    /* the transform's finishing (finish.on false: none) */
    bool sample_fn;        /* a per-sample callback runs: finishing is refused */
    bool batch_ops;        /* batch transforms run on the host: finishing moves to the CPU */
    bool want_pinned;      /* page-locked slots (a device copy implies them) */
    int32_t device;        /* the device to copy each batch to; -1 = none */
    uint64_t pinned_limit; /* cap on page-locked memory; 0 = the default */
    bool shared;           /* every slot in one memfd other processes can map (r->arena) */
} stk__ring_args;

/* Initialise the locks of r (zeroed by the caller); one reference, the owner's. */
void stk__ring_init(stk__ring *r);
/* Allocate `n_slots` FREE slots of `size` bytes, page-locked within `limit` bytes (0 = the default
 * cap) when `want_pinned` (a CUDA context current); when a slot could not be pinned, *why says why
 * (and r->pinned is false). `shared`: every slot in one memfd arena (r->arena) that other
 * processes can map. `dc` is the device side each batch handle points to. STK_ENOMEM. */
stk_status stk__ring_alloc(stk__ring *r, uint32_t n_slots, size_t size, bool want_pinned,
                           uint64_t limit, bool shared, stk__devcopy *dc, char *why,
                           size_t why_size, char *err, size_t err_size);
/* Free the slots' memory and the locks (the caller has the device context current for pinned
 * slots). */
void stk__ring_free(stk__ring *r);
/* Lay out r's memory (r->lay set) and set up its device side (stk_ring_setup.c): the device,
 * finishing placement, the slot size, the device ring, the slots (pinned within the cap). What
 * could not be had goes to r->dev_reason; errors are STK_EINVAL (finishing impossible),
 * STK_ELIMIT, STK_ENOMEM, STK_EIO. */
stk_status stk__ring_setup(stk__ring *r, const stk__ring_args *a, char *err, size_t err_size);
/* Tests: the fresh-memory budget stk__ring_setup gives every ring from now on (-1, the default:
 * one slot written at 0.5 GB/s). Set it only while no loader is being created. */
extern int64_t stk__fresh_budget_test_ns;
/* Free the slots, the device buffers and the device context (stk_ring_setup.c); the ring's last
 * reference is gone. */
void stk__ring_teardown(stk__ring *r);

/* Whether we run in a child forked after the ring was created. The child has none of the worker
 * threads and may have inherited the mutex locked: it must not lock or free anything of the ring
 * (its memory is a copy-on-write copy; leaking it is harmless). */
bool stk__ring_forked(const stk__ring *r);
/* Drop one reference (mu held); true when the caller must destroy the ring's owner. */
bool stk__ring_unref_locked(stk__ring *r);

/* The slot of batch seq. */
static inline stk__slot *stk__ring_slot(const stk__ring *r, uint64_t seq)
{
    return &r->slots[seq % r->n_slots];
}

/* Make slot s FREE (mu held; it is READY, HELD or FILLING without workers): its memory becomes
 * the most recently freed. */
void stk__slot_release_locked(stk__ring *r, stk__slot *s);
/* Give FREE slot s, about to be opened, the memory of the most recently freed FREE slot (mu held;
 * a no-op unless r->reuse_hot), or while none was freed, memory that held a batch before (kept
 * from an earlier ring, stk_pinned.c) over memory never written: a worker then writes into memory
 * the cache still holds instead of cycling through every slot's. The slot (its seq, state and
 * handle) stays where the batch order puts it; only the memory behind it moves, between FREE slots
 * nobody reads. */
void stk__ring_take_hot_locked(stk__ring *r, stk__slot *s);
/* Whether a worker about to open FREE slot s (its hot memory taken) should wait for used memory
 * instead (mu held): s's memory was never used, hot reuse is on, budget is left, and some other
 * slot's memory is in use (FILLING, READY or HELD: the consumer will release it).
 * `consumer_needs_it`: the consumer is waiting for the very batch s would hold; never wait then. */
bool stk__ring_fresh_wait_locked(const stk__ring *r, const stk__slot *s, bool consumer_needs_it);
/* Open FREE slot s for batch `seq` of `count` samples (mu held): no ticket taken, no error. */
void stk__slot_open_locked(stk__slot *s, uint64_t seq, uint32_t count);
/* Take the next sample ticket of batch `seq` (of `count` samples, read under mu when the batch
 * was claimed) in slot s; false when none is left (or the slot holds another batch now).
 * Lock-free. */
bool stk__slot_take_ticket(stk__slot *s, uint64_t seq, uint32_t count, uint32_t *t);
/* The same for up to `want` tickets at once (want >= 1): tickets *t .. *t + *n - 1. */
bool stk__slot_take_tickets(stk__slot *s, uint64_t seq, uint32_t count, uint32_t want, uint32_t *t,
                            uint32_t *n);
/* Whether every ticket of s's batch was taken (mu held). */
bool stk__slot_tickets_out(stk__slot *s);
/* Record failed sample `sample` on s (mu held): the lowest sample number wins. */
void stk__slot_error_locked(stk__slot *s, uint32_t sample, stk_status rc, const char *msg);
/* Hand READY slot s to the consumer (mu held): HELD, one more reference. */
void stk__slot_hold_locked(stk__ring *r, stk__slot *s);
/* Free every slot the consumer does not hold (mu held): no ticket of them is taken any more. */
void stk__ring_drop_locked(stk__ring *r);

#endif /* STK_RING_H */
