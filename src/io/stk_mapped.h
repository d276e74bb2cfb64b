/*
 * stk_mapped.h: a local file's bytes read in place from a read-only shared mapping of the page
 * cache, with no system call and no copy into a buffer of ours (token rows: the ids are widened
 * straight from the mapping into the batch row; bench/RESULTS.md, issue 26). The guarantees of a
 * read stay those of stk_vfs.h: the bytes of the version opened or a named error, never a signal.
 *
 *  - A file cut short under the mapping makes a touch past its new end raise SIGBUS. Every touch
 *    of mapped bytes runs under a guard (stk__mapped_use): a SIGBUS at an address of the mapping
 *    while this thread is inside the guard is caught (one process-wide handler, installed at the
 *    first mapping and chaining every other SIGBUS to the handler there before it) and becomes
 *    STK_EIO "changed while open", naming the file and the offset.
 *  - A file rewritten in place (same size) is caught as stk_vfs_posix.c's reads catch it: after
 *    the bytes were used, its size and modification time are compared with those at open
 *    (stk__mapped_use), or once after a group of copies (stk__mapped_read, then
 *    stk__vfs_fd_unchanged: on a VM a system call costs microseconds, as much as the copy of a
 *    row it would check).
 *  - Mapping is asked for: STOKER_MMAP=1 in the environment (read at each open). Without it
 *    nothing is mapped and every read is stk__vfs_read's, because on a VM with shadow page
 *    tables a page's first touch in a process costs microseconds and a one-pass read is 2-3x
 *    slower mapped (bench/RESULTS.md, issue 26, tok5 and lead). Except a memfd sealed against
 *    writes and shrinking (F_SEAL_WRITE, F_SEAL_SHRINK: stoker's copies of arrays held in
 *    memory, python/stoker/_memnpy.py): it is in memory already, read for many epochs, and it
 *    cannot change, so it is always mapped and its uses need no version check (no system call
 *    a read; bench/RESULTS.md, issue 24, "The memory files sealed and mapped"). Remote files,
 *    files without a descriptor, empty files and files the kernel will not map get no mapping
 *    either (stk__mapped_open gives NULL): they are read with stk__vfs_read.
 *
 * Lifetime: a mapping borrows its file (which must outlive it) and is closed by its owner.
 * Threads: stk__mapped_use may run on any number of threads at once on one mapping.
 */
#ifndef STK_MAPPED_H
#define STK_MAPPED_H

#include "io/stk_vfs.h"

typedef struct stk__mapped stk__mapped;

/* How the mapping will be read (madvise): rows at random places, or in no known order. */
typedef enum stk__map_advice { STK__MAP_NORMAL, STK__MAP_RANDOM } stk__map_advice;

/* Map f (a local regular file) whole. *out is NULL, with STK_OK, when f is not to be mapped (no
 * descriptor, empty, STOKER_MMAP not 1, no SIGBUS guard to be had, or mmap refused): read it with
 * stk__vfs_read. Errors only for out of memory. */
stk_status stk__mapped_open(stk__file *f, stk__map_advice advice, stk__mapped **out, char *err,
                            size_t err_size);
void stk__mapped_close(stk__mapped *m); /* accepts NULL */

/* What a guarded use does with the bytes: fn(arg, bytes, n). It must only read them (no lock, no
 * allocation: a SIGBUS leaves it at any instruction) and write memory of its caller's. */
typedef void stk__mapped_fn(void *arg, const uint8_t *bytes, size_t n);

/* Run fn on the file's bytes [offset, offset + n) in place, then check that the file is still
 * the version opened. STK_EIO naming the file when it was cut short (before or during the use)
 * or changed since the open; what fn wrote is then not to be used. */
stk_status stk__mapped_use(const stk__mapped *m, uint64_t offset, size_t n, stk__mapped_fn *fn,
                           void *arg, char *err, size_t err_size);

/* Copy the bytes [offset, offset + n) to dst, guarded, without the version check: for a group of
 * reads checked once after (stk__vfs_fd_unchanged), as reads batched outside `read` are
 * (stk_uring.h): a system call a read is what a mapping saves. STK_EIO when cut short. */
stk_status stk__mapped_read(const stk__mapped *m, uint64_t offset, void *dst, size_t n, char *err,
                            size_t err_size);

/* Tests only: the number of SIGBUS the guard has caught in this process. */
uint64_t stk__mapped_caught(void);

#endif /* STK_MAPPED_H */
