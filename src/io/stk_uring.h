/*
 * stk_uring.h: many reads of local files in one system call (Linux io_uring, raw system calls,
 * no liburing). A source that knows several reads ahead (token rows: a worker's share of a
 * batch) submits them together instead of one pread each: the per-call cost (the kernel entry,
 * its page-table switch) is paid once (bench/RESULTS.md, issue 26). Where the kernel or a seccomp
 * policy gives no io_uring (or on other systems), stk__uring_open returns NULL and callers read
 * as before.
 *
 * Lifetime: one ring per thread (a worker's cursor), closed by its owner.
 * Threads: a ring is used by one thread at a time.
 */
#ifndef STK_URING_H
#define STK_URING_H

#include "stk_internal.h"

typedef struct stk__uring stk__uring;

/* One read: len bytes at off of descriptor fd into buf; res receives the bytes read or -errno. */
typedef struct stk__uread {
    int fd;
    uint32_t len;
    void *buf;
    uint64_t off;
    int32_t res;
} stk__uread;

/* A ring for up to `entries` reads at once (a power of two is not needed); NULL when there is
 * none to be had (not Linux, a kernel without io_uring, a policy refusing it, no memory). */
stk__uring *stk__uring_open(unsigned entries);
void stk__uring_close(stk__uring *u);

/* Submit r[0..n) (n <= the ring's entries) and wait for all of them; each r[i].res is set.
 * Returns STK_OK, or STK_EIO when the ring itself failed (the results are then unknown: read
 * them another way; the ring is not to be used again). */
stk_status stk__uring_reads(stk__uring *u, stk__uread *r, unsigned n);

#endif
