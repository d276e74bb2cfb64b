/*
 * stk_pinned.c: memory of ring slots, the one place it is allocated. Page-locked slots
 * (cuMemHostAlloc through src/cuda, with a CUDA context current) are counted process-wide in one
 * atomic and capped: the caller's limit, else env STOKER_PINNED_LIMIT, else a quarter of physical
 * memory (too much page-locked memory starves the page cache and can hang a machine). Over the
 * cap, or without CUDA, a slot is pageable and the reason is returned. STK_FAULT_ALLOC counts a
 * slot allocation as one allocation (stk__fault_alloc_hit). A shared ring takes all its slots
 * from one memfd arena instead (stk__arena_alloc), page-locked with cuMemHostRegister.
 *
 * A pageable slot of 2 MiB or more is 2 MiB aligned and asks for transparent huge pages
 * (MADV_HUGEPAGE; a hint, ignored where THP is off): the first epoch writes every slot for the
 * first time, and with 4 KiB pages that is a page fault per 4 KiB of output (147 per float32
 * 224x224 sample), which perf showed as a quarter of a one-epoch run's CPU time on this project's
 * VM (issue 29; bench/RESULTS.md has the figures). The kernel still zeroes the memory.
 *
 * Memory kept across loaders: a pageable slot of 2 MiB or more whose memory held a batch is not
 * freed with its ring but kept (stk__slot_keep, up to KEEP_N blocks), and the next ring with slots
 * of the same size takes it (stk__slot_alloc_kept) instead of memory never written, whose first
 * touch costs 0.3-0.4 CPU s per 147 MiB on this project's VM (issue 29, first5). A ring that had to
 * allocate a slot of 2 MiB or more fresh frees every block still kept (stk__slot_kept_trim), so at
 * most the memory of the rings closed since the last such ring is held. The blocks are in atomic
 * words, no lock: a child forked while another thread keeps or takes one sees each block kept or
 * not (its copy-on-write copy is its own).
 */
#include "batch/stk_pinned.h"
#include "cuda/stk_cuda.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static _Atomic uint64_t pinned_total; /* page-locked bytes held by every loader of the process */
static pthread_once_t limit_once = PTHREAD_ONCE_INIT;
static uint64_t default_limit;
static char limit_note[160];

/* The default cap: env STOKER_PINNED_LIMIT, else a quarter of physical memory. */
static void limit_init(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    default_limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : (1ULL << 30);
    const char *e = getenv("STOKER_PINNED_LIMIT");
    uint64_t v;
    if (e && *e) {
        if (stk__parse_size(e, &v))
            default_limit = v;
        else
            snprintf(limit_note, sizeof(limit_note),
                     " (STOKER_PINNED_LIMIT=\"%.60s\" is not a size such as 8G; ignored)", e);
    }
}

uint64_t stk__pinned_limit_default(void)
{
    pthread_once(&limit_once, limit_init);
    return default_limit;
}

uint64_t stk__pinned_total(void)
{
    return atomic_load(&pinned_total);
}

/* Reserve `size` pinned bytes under `limit`; false when they do not fit. */
static bool pinned_reserve(uint64_t size, uint64_t limit)
{
    uint64_t cur = atomic_load(&pinned_total);
    do {
        if (cur > limit || size > limit - cur)
            return false;
    } while (!atomic_compare_exchange_weak(&pinned_total, &cur, cur + size));
    return true;
}

/* Reserve `size` bytes of page-locked memory under `limit` (0: the default cap); when the cap
 * refuses them, say so in `why` and return false. */
static bool pinned_reserve_or_say(size_t size, uint64_t limit, char *why, size_t why_size)
{
    if (!limit)
        limit = stk__pinned_limit_default();
    if (pinned_reserve(size, limit))
        return true;
    pthread_once(&limit_once, limit_init);
    snprintf(why, why_size,
             "pinned memory limit: %zu more bytes would exceed the %" PRIu64 "-byte cap (%" PRIu64
             " held; opts.pinned_limit or STOKER_PINNED_LIMIT)%s",
             size, limit, stk__pinned_total(), limit_note);
    return false;
}

void *stk__slot_alloc_limit(size_t size, bool want_pinned, uint64_t limit, bool *pinned, char *why,
                            size_t why_size)
{
    *pinned = false;
    if (stk__fault_alloc_hit())
        return NULL;
    size = (size_t)STK_ALIGN_UP(size ? size : 1, 64);
    if (want_pinned && pinned_reserve_or_say(size, limit, why, why_size)) {
        void *p = NULL;
        if (stk__cuda_host_alloc(size, &p, why, why_size) == STK_OK) {
            *pinned = true;
            return p;
        }
        atomic_fetch_sub(&pinned_total, (uint64_t)size);
    }
    void *p = NULL;
    /* 64-byte alignment: whole cache lines, and what SIMD stores and DLPack consumers like;
     * 2 MiB for a slot that can hold huge pages. */
    size_t huge = (size_t)2 << 20;
    if (posix_memalign(&p, size >= huge ? huge : 64, size) != 0)
        return NULL;
    if (size >= huge)
        (void)madvise(p, size, MADV_HUGEPAGE); /* a hint: failure changes nothing */
    return p;
}

enum { KEEP_N = 8 };
#define KEEP_MIN ((size_t)2 << 20)
/* Blocks kept: their address, with the block's size in its first 8 bytes; 0 = none. */
static _Atomic uintptr_t kept[KEEP_N];

/* Keep block b (its size in its first 8 bytes) in a free place, else free it. */
static void keep_block(uintptr_t b)
{
    for (int i = 0; i < KEEP_N; i++) {
        uintptr_t none = 0;
        if (atomic_compare_exchange_strong(&kept[i], &none, b))
            return;
    }
    free((void *)b);
}

void *stk__slot_alloc_kept(size_t size, bool want_pinned, uint64_t limit, bool *pinned, bool *warm,
                           char *why, size_t why_size)
{
    *warm = false;
    size_t want = (size_t)STK_ALIGN_UP(size ? size : 1, 64);
    if (want_pinned || want < KEEP_MIN)
        return stk__slot_alloc_limit(size, want_pinned, limit, pinned, why, why_size);
    for (int i = 0; i < KEEP_N; i++) {
        /* Own the block before reading its size: another thread may take and free it. */
        uintptr_t b = atomic_exchange(&kept[i], 0);
        if (!b)
            continue;
        if (*(const size_t *)b != want) {
            keep_block(b);
            continue;
        }
        *pinned = false;
        if (stk__fault_alloc_hit()) { /* counted as the allocation it stands for */
            free((void *)b);
            return NULL;
        }
        *warm = true;
        return (void *)b;
    }
    return stk__slot_alloc_limit(size, want_pinned, limit, pinned, why, why_size);
}

void stk__slot_keep(void *p, size_t size, bool pinned, bool used)
{
    size_t have = (size_t)STK_ALIGN_UP(size ? size : 1, 64);
    if (p && !pinned && used && have >= KEEP_MIN) {
        *(size_t *)p = have;
        keep_block((uintptr_t)p);
        return;
    }
    stk__slot_free(p, size, pinned);
}

void stk__slot_kept_trim(void)
{
    for (int i = 0; i < KEEP_N; i++)
        free((void *)atomic_exchange(&kept[i], 0));
}

size_t stk__slot_kept_bytes(void)
{
    size_t n = 0;
    for (int i = 0; i < KEEP_N; i++) {
        uintptr_t b = atomic_load(&kept[i]);
        n += b ? *(const size_t *)b : 0;
    }
    return n;
}

void *stk__slot_alloc(size_t size, bool want_pinned, bool *pinned)
{
    char why[STK_ERRMSG_SIZE];
    return stk__slot_alloc_limit(size, want_pinned, 0, pinned, why, sizeof(why));
}

void stk__slot_free(void *p, size_t size, bool pinned)
{
    if (pinned && p) {
        stk__cuda_host_free(p);
        atomic_fetch_sub(&pinned_total, (uint64_t)STK_ALIGN_UP(size ? size : 1, 64));
        return;
    }
    free(p);
}

stk_status stk__arena_alloc(stk__arena *a, size_t size, bool want_pinned, uint64_t limit, char *why,
                            size_t why_size, char *err, size_t err_size)
{
    memset(a, 0, sizeof(*a));
    a->fd = -1;
    long page = sysconf(_SC_PAGESIZE);
    size_t psize = page > 0 ? (size_t)page : 4096;
    size = size ? size : 1;
    if (size > SIZE_MAX - psize)
        return stk__set_error(err, err_size, STK_ELIMIT, "ring of %zu bytes too large", size);
    size = (size + psize - 1) / psize * psize;
    if (stk__fault_alloc_hit())
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for a %zu-byte ring", size);
    int fd = memfd_create("stoker-ring", MFD_CLOEXEC);
    if (fd < 0)
        return stk__set_error(err, err_size, errno == ENOMEM ? STK_ENOMEM : STK_EIO,
                              "memfd_create for the shared ring: %s", strerror(errno));
    if (ftruncate(fd, (off_t)size) != 0) {
        int e = errno;
        close(fd);
        return stk__set_error(err, err_size, STK_ENOMEM,
                              "cannot size the shared ring to %zu bytes: %s", size, strerror(e));
    }
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return stk__set_error(err, err_size, STK_ENOMEM, "cannot map the %zu-byte shared ring: %s",
                              size, strerror(e));
    }
    a->fd = fd;
    a->base = p;
    a->size = size;
    if (want_pinned && pinned_reserve_or_say(size, limit, why, why_size)) {
        if (stk__cuda_host_register(p, size, why, why_size) == STK_OK)
            a->pinned = true;
        else
            atomic_fetch_sub(&pinned_total, (uint64_t)size);
    }
    return STK_OK;
}

void stk__arena_free(stk__arena *a)
{
    if (a->fd < 0)
        return;
    if (a->pinned) {
        stk__cuda_host_unregister(a->base);
        atomic_fetch_sub(&pinned_total, (uint64_t)a->size);
    }
    munmap(a->base, a->size);
    close(a->fd);
    a->fd = -1;
    a->base = NULL;
}
