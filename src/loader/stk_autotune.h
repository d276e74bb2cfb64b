/*
 * stk_autotune.h: the loader's autotune as a pure decision: fed one measurement window at a time
 * (how long it was, how long the consumer and the workers waited in it, how many samples were
 * consumed), it moves `active` (worker threads that work; the others park) and `depth` (batches
 * opened ahead of the consumer) and says why. No clock, no lock: the loader gathers the windows
 * (every 250 ms of consumption, on the consumer thread) and applies the decisions.
 *
 * The policy: grow the threads while the consumer waits (+1, doubling above 30% waiting); undo a
 * growth that did not bring 5% more samples/s and remember that count as the ceiling (forgotten
 * every 20 windows, so a changed machine is probed again); with every thread busy and the
 * consumer still waiting, open one more batch ahead; when the consumer never waits and the
 * workers idle more than 1.2 threads' worth, park one. After each change one window settles
 * unjudged.
 */
#ifndef STK_AUTOTUNE_H
#define STK_AUTOTUNE_H

#include "stk_internal.h"

/* One measurement window. */
typedef struct stk__at_window {
    uint64_t dt_ns;            /* its length (> 0) */
    uint64_t consumer_wait_ns; /* the consumer's wait for batches in it */
    uint64_t worker_wait_ns;   /* the workers' wait for slots in it, summed over the threads */
    uint64_t samples;          /* samples handed to the consumer in it */
} stk__at_window;

typedef struct stk__autotune {
    uint32_t n_threads, n_slots; /* the limits */
    uint32_t active;             /* workers with id < active work; the others park */
    uint32_t depth;              /* batches opened ahead of the consumer */
    uint32_t settle;             /* windows left to let the last change show */
    uint32_t changes, windows;
    uint32_t ceiling;   /* more threads than this gave no gain (forgotten every 20 windows) */
    uint32_t prev;      /* threads before the last growth step */
    double rate_before; /* samples/s in the window before the last growth step */
    bool grew;
    char reason[160]; /* the last change, in words */
} stk__autotune;

/* Start with one thread and min(2, n_slots) batches in flight. */
void stk__autotune_init(stk__autotune *a, uint32_t n_threads, uint32_t n_slots);
/* Judge window w; returns true when a->active or a->depth changed (a->reason says why). */
bool stk__autotune_decide(stk__autotune *a, const stk__at_window *w);

/* The most threads a codec gets for one sample (libavcodec's frame threads keep a picture each). */
#define STK__DECODER_THREADS_MAX 8
/* The thread plan's share for a codec's own threads (video: libavcodec's thread_count): the
 * cores left over by the samples decoded at once, cores / at_once within
 * 1 .. STK__DECODER_THREADS_MAX, where at_once = min(active, samples, batch_size * depth): the
 * active worker threads each decode one sample, but only the samples of the batches open ahead of
 * the consumer can be in flight (a batch of 2 with 2 batches ahead keeps 4 clips decoding however
 * many threads and cores there are; depth 0 counts as 1). One thread per sample when the samples
 * in flight fill the cores; more when fewer threads are active (autotune starting at one), the
 * dataset has fewer samples than threads, or the open batches hold fewer samples than the active
 * threads. Never more threads in all than max(cores, at_once) (tests/unit/loader/test_autotune.c,
 * over many-core inputs). Pure. */
uint32_t stk__decoder_threads(uint32_t cores, uint32_t active, uint64_t samples,
                              uint32_t batch_size, uint32_t depth);

#endif /* STK_AUTOTUNE_H */
