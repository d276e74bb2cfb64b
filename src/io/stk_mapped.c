/*
 * stk_mapped.c: local files read in place through a read-only mapping, every touch guarded so
 * that a file cut short under it is an error and never a SIGBUS reaching the program
 * (stk_mapped.h).
 *
 * The guard: a thread about to touch mapped bytes records the mapping's address range and a
 * sigsetjmp point in a thread-local slot; the process' SIGBUS handler (installed once, at the
 * first mapping) jumps back to that point when the fault is the kernel's, in this thread, inside
 * that range. Any other SIGBUS goes to the handler installed before ours (the default action,
 * Python's faulthandler, a sanitizer's) as if ours were not there. The jump leaves only the
 * caller's function (stk__mapped_fn: reads and plain stores, no lock held), so nothing is left
 * half-done; the handler's mask (SIGBUS blocked) is undone by hand after the jump, since the
 * jump point saves no mask (saving it would cost a system call per use).
 */
#include "io/stk_mapped.h"

#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct stk__mapped {
    stk__file *f; /* borrowed */
    const uint8_t *base;
    uint64_t size; /* bytes mapped: the file's size at open */
    bool sealed;   /* a memfd sealed against writes and shrinking: it cannot change */
};

/* A use in progress on this thread. */
typedef struct guard {
    sigjmp_buf jump;
    const uint8_t *lo;
    uint64_t len;
} guard;

static __thread guard *volatile active;
static struct sigaction before; /* the SIGBUS handler in place when ours was installed */
static pthread_once_t install_once = PTHREAD_ONCE_INIT;
static bool installed;
static _Atomic uint64_t caught;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    guard *g = active;
    if (g && si->si_code > 0 && (uintptr_t)si->si_addr - (uintptr_t)g->lo < g->len) {
        active = NULL;
        atomic_fetch_add_explicit(&caught, 1, memory_order_relaxed);
        siglongjmp(g->jump, 1);
    }
    /* Not ours: as the handler before would have done. */
    if (before.sa_flags & SA_SIGINFO) {
        before.sa_sigaction(sig, si, uc);
    } else if (before.sa_handler != SIG_DFL && before.sa_handler != SIG_IGN) {
        before.sa_handler(sig);
    } else if (before.sa_handler == SIG_DFL || si->si_code > 0) {
        /* The default action (a fault cannot be ignored: the kernel would kill us anyway): a
         * fault happens again on return, a sent signal is raised again (blocked until then). */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        if (si->si_code <= 0)
            raise(SIGBUS);
    }
}

static void install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    installed = sigaction(SIGBUS, &sa, &before) == 0;
}

/* Whether fd is a memfd sealed against writes and shrinking (F_SEAL_WRITE, F_SEAL_SHRINK): its
 * bytes are those of the open for as long as it exists. */
static bool sealed(int fd)
{
#ifdef F_GET_SEALS
    int seals = fcntl(fd, F_GET_SEALS);
    return seals >= 0 && (seals & (F_SEAL_WRITE | F_SEAL_SHRINK)) == (F_SEAL_WRITE | F_SEAL_SHRINK);
#else
    (void)fd;
    return false;
#endif
}

stk_status stk__mapped_open(stk__file *f, stk__map_advice advice, stk__mapped **out, char *err,
                            size_t err_size)
{
    *out = NULL;
    int fd = stk__vfs_fd(f);
    if (fd < 0 || f->size == 0 || f->size > SIZE_MAX)
        return STK_OK;
    const char *env = getenv("STOKER_MMAP");
    bool seal = sealed(fd);
    if (!seal && (!env || strcmp(env, "1") != 0))
        return STK_OK;
    pthread_once(&install_once, install);
    if (!installed)
        return STK_OK;
    void *p = mmap(NULL, (size_t)f->size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return STK_OK; /* out of address space or map count: read it */
    madvise(p, (size_t)f->size, advice == STK__MAP_RANDOM ? MADV_RANDOM : MADV_NORMAL);
    stk__mapped *m = stk__calloc(1, sizeof(*m));
    if (!m) {
        munmap(p, (size_t)f->size);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", f->path);
    }
    *m = (stk__mapped){f, p, f->size, seal};
    *out = m;
    return STK_OK;
}

void stk__mapped_close(stk__mapped *m)
{
    if (!m)
        return;
    munmap((void *)m->base, (size_t)m->size);
    stk__free(m);
}

/* The error of a use of a file that is not the version opened (stk_vfs_posix.c's words). */
static stk_status changed(const stk__mapped *m, uint64_t offset, bool faulted, char *err,
                          size_t err_size)
{
    struct stat now;
    int fd = stk__vfs_fd(m->f);
    long long size = fd >= 0 && fstat(fd, &now) == 0 ? (long long)now.st_size : -1LL;
    return stk__set_error(err, err_size, STK_EIO,
                          "%s: changed while open (size %llu -> %lld%s), read at %llu: its "
                          "records would mix two versions; reopen the dataset",
                          m->f->path, (unsigned long long)m->size, size,
                          faulted ? ", cut short under the mapping" : "",
                          (unsigned long long)offset);
}

/* fn on the bytes [offset, offset + n), guarded; then (check) the version check. */
static stk_status guarded(const stk__mapped *m, uint64_t offset, size_t n, stk__mapped_fn *fn,
                          void *arg, bool check, char *err, size_t err_size)
{
    if (offset > m->size || n > m->size - offset)
        return stk__set_error(err, err_size, STK_EIO,
                              "%s: read of %zu bytes at %llu past its end (%llu bytes)", m->f->path,
                              n, (unsigned long long)offset, (unsigned long long)m->size);
    guard g;
    g.lo = m->base;
    g.len = m->size;
    if (sigsetjmp(g.jump, 0) != 0) { /* SIGBUS inside fn: the handler jumped here */
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
        return changed(m, offset, true, err, err_size);
    }
    active = &g;
    atomic_signal_fence(memory_order_seq_cst);
    fn(arg, m->base + offset, n);
    atomic_signal_fence(memory_order_seq_cst);
    active = NULL;
    /* After the use, as every POSIX read checks after reading (issue 30); a sealed file cannot
     * have changed. */
    if (check && !m->sealed && !stk__vfs_fd_unchanged(m->f))
        return changed(m, offset, false, err, err_size);
    return STK_OK;
}

stk_status stk__mapped_use(const stk__mapped *m, uint64_t offset, size_t n, stk__mapped_fn *fn,
                           void *arg, char *err, size_t err_size)
{
    return guarded(m, offset, n, fn, arg, true, err, err_size);
}

static void copy_to(void *dst, const uint8_t *bytes, size_t n)
{
    memcpy(dst, bytes, n);
}

stk_status stk__mapped_read(const stk__mapped *m, uint64_t offset, void *dst, size_t n, char *err,
                            size_t err_size)
{
    return guarded(m, offset, n, copy_to, dst, false, err, err_size);
}

uint64_t stk__mapped_caught(void)
{
    return atomic_load_explicit(&caught, memory_order_relaxed);
}
