/*
 * stk_uring.c: many reads of local files in one system call (io_uring through raw system calls;
 * see stk_uring.h). Reads of page-cache-resident data complete inside the submitting call, so a
 * batch of them costs one kernel entry instead of one each.
 */
#include "io/stk_uring.h"

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/io_uring.h>)
#define STK_HAVE_URING 1
#endif
#endif

#ifdef STK_HAVE_URING
#include <errno.h>
#include <linux/io_uring.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

struct stk__uring {
    int fd;
    unsigned entries;
    unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail, *cq_mask;
    struct io_uring_sqe *sqes;
    struct io_uring_cqe *cqes;
    void *sq_map, *cq_map;
    size_t sq_size, cq_size, sqes_size;
    bool broken;
};

stk__uring *stk__uring_open(unsigned entries)
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    stk__uring *u = stk__calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (u->fd < 0) { /* ENOSYS, EPERM (seccomp, io_uring_disabled), ENOMEM */
        stk__free(u);
        return NULL;
    }
    u->entries = p.sq_entries < p.cq_entries ? p.sq_entries : p.cq_entries;
    u->sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    u->cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    u->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    u->sq_map = mmap(NULL, u->sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                     IORING_OFF_SQ_RING);
    u->cq_map = mmap(NULL, u->cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                     IORING_OFF_CQ_RING);
    void *sqes = mmap(NULL, u->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, u->fd,
                      IORING_OFF_SQES);
    u->sqes = sqes == MAP_FAILED ? NULL : sqes;
    if (u->sq_map == MAP_FAILED || u->cq_map == MAP_FAILED || !u->sqes || entries > u->entries) {
        stk__uring_close(u);
        return NULL;
    }
    uint8_t *sq = u->sq_map, *cq = u->cq_map;
    u->sq_tail = (unsigned *)(void *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(void *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(void *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(void *)(cq + p.cq_off.head);
    u->cq_tail = (unsigned *)(void *)(cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(void *)(cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(void *)(cq + p.cq_off.cqes);
    return u;
}

void stk__uring_close(stk__uring *u)
{
    if (!u)
        return;
    if (u->sqes)
        munmap(u->sqes, u->sqes_size);
    if (u->cq_map && u->cq_map != MAP_FAILED)
        munmap(u->cq_map, u->cq_size);
    if (u->sq_map && u->sq_map != MAP_FAILED)
        munmap(u->sq_map, u->sq_size);
    close(u->fd);
    stk__free(u);
}

/* io_uring_enter: submit `submit` entries and wait for `wait` completions; the count submitted,
 * or -1 (a signal, or the kernel short of resources for a moment, is retried). */
static int enter(int fd, unsigned submit, unsigned wait)
{
    for (;;) {
        long rc = syscall(__NR_io_uring_enter, fd, submit, wait, IORING_ENTER_GETEVENTS, NULL, 0);
        if (rc >= 0 || (errno != EINTR && errno != EAGAIN && errno != EBUSY))
            return rc < 0 ? -1 : (int)rc;
    }
}

stk_status stk__uring_reads(stk__uring *u, stk__uread *r, unsigned n)
{
    if (u->broken || n > u->entries)
        return STK_EIO;
    unsigned tail = *u->sq_tail;
    for (unsigned i = 0; i < n; i++, tail++) {
        unsigned k = tail & *u->sq_mask;
        struct io_uring_sqe *e = &u->sqes[k];
        memset(e, 0, sizeof(*e));
        e->opcode = IORING_OP_READ;
        e->fd = r[i].fd;
        e->addr = (uint64_t)(uintptr_t)r[i].buf;
        e->len = r[i].len;
        e->off = r[i].off;
        e->user_data = i;
        u->sq_array[k] = k;
        r[i].res = -EINPROGRESS;
    }
    __atomic_store_n(u->sq_tail, tail, __ATOMIC_RELEASE);
    unsigned submitted = 0, done = 0;
    while (done < n) {
        /* submit what is left (the kernel may take fewer than asked) and wait for the rest */
        int s = enter(u->fd, n - submitted, n - done);
        if (s < 0) {
            u->broken = true; /* reads may still be in flight into the callers' buffers */
            return STK_EIO;
        }
        submitted += (unsigned)s;
        unsigned head = *u->cq_head, t = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE);
        for (; head != t; head++, done++) {
            const struct io_uring_cqe *c = &u->cqes[head & *u->cq_mask];
            if (c->user_data < n)
                r[c->user_data].res = c->res;
        }
        __atomic_store_n(u->cq_head, head, __ATOMIC_RELEASE);
    }
    return STK_OK;
}

#else /* no io_uring: callers read one at a time */

stk__uring *stk__uring_open(unsigned entries)
{
    (void)entries;
    return NULL;
}

void stk__uring_close(stk__uring *u)
{
    (void)u;
}

stk_status stk__uring_reads(stk__uring *u, stk__uread *r, unsigned n)
{
    (void)u, (void)r, (void)n;
    return STK_EIO;
}
#endif
