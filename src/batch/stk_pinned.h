/*
 * stk_pinned.h: memory of ring slots, pageable or page-locked (pinned) within a process-wide cap.
 */
#ifndef STK_PINNED_H
#define STK_PINNED_H

#include "stk_internal.h"

/* 64-byte aligned buffer for ring slots, the one place ring memory is allocated. With
 * want_pinned (and a CUDA context current on the thread) it is page-locked when the process-wide
 * count of pinned bytes stays within `limit` (0 = stk__pinned_limit_default()); *pinned reports
 * it, and when it is not, why (why_size bytes) says why. Free with stk__slot_free. */
void *stk__slot_alloc_limit(size_t size, bool want_pinned, uint64_t limit, bool *pinned, char *why,
                            size_t why_size);
/* stk__slot_alloc_limit with the default limit, the reason dropped. */
void *stk__slot_alloc(size_t size, bool want_pinned, bool *pinned);
void stk__slot_free(void *p, size_t size, bool pinned);
/* Memory kept across loaders (stk_pinned.c): stk__slot_alloc_limit, except that a pageable slot
 * of 2 MiB or more takes a block of its size that an earlier ring's slot wrote and kept
 * (stk__slot_keep), *warm then true: memory already written, without the first touch. */
void *stk__slot_alloc_kept(size_t size, bool want_pinned, uint64_t limit, bool *pinned, bool *warm,
                           char *why, size_t why_size);
/* Free a slot, or keep its memory for the next ring: a pageable slot of 2 MiB or more whose memory
 * `used` (held a batch) is kept while one of the process's few places for it is free. */
void stk__slot_keep(void *p, size_t size, bool pinned, bool used);
/* Free every block kept (a ring that had to allocate a large slot afresh calls it; threads: any),
 * and the bytes kept now (tests: no ring may be made or freed meanwhile). */
void stk__slot_kept_trim(void);
size_t stk__slot_kept_bytes(void);
/* Page-locked bytes held by all ring slots of the process, and the default cap on them (env
 * STOKER_PINNED_LIMIT, e.g. "8G", else a quarter of physical memory; read once). */
uint64_t stk__pinned_total(void);
uint64_t stk__pinned_limit_default(void);

/* One shared-memory arena for a whole ring (STK_LOADER_SHARED_RING): a memfd of `size` bytes
 * (page-rounded) mapped MAP_SHARED, so other processes that map the fd write rows the consumer
 * reads. With want_pinned (a CUDA context current) the mapping is page-locked with
 * cuMemHostRegister within `limit` (0 = the default cap), counted with the other pinned slots;
 * *pinned says whether, and why says why not. Not /dev/shm: memfd memory is not bounded by a
 * tmpfs mount (Docker's 64 MB /dev/shm). */
typedef struct stk__arena {
    int fd; /* -1 when none */
    uint8_t *base;
    size_t size;
    bool pinned;
} stk__arena;
stk_status stk__arena_alloc(stk__arena *a, size_t size, bool want_pinned, uint64_t limit, char *why,
                            size_t why_size, char *err, size_t err_size);
/* Unregister, unmap and close (the caller has the device context current when it was pinned).
 * Accepts an arena never allocated (fd -1). */
void stk__arena_free(stk__arena *a);

#endif /* STK_PINNED_H */
