/*
 * stk_sys.c: what the library asks of the operating system, each asked one way: the CPU count
 * (once, under pthread_once; the affinity mask wins over the online count), the process id (kept,
 * and renewed in a forked child), the monotonic clock, and writing a whole buffer (EINTR and short
 * writes retried; the debug build's disk-full injection).
 */
#include "stk_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static uint32_t cpu_count;

/* Read the CPU count once; the affinity mask wins over the online count (containers, taskset). */
static void cpu_init(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set);
    cpu_count = n > 0 ? (uint32_t)n : 1;
}

uint32_t stk_n_cpus(void)
{
    pthread_once(&cpu_once, cpu_init);
    return cpu_count;
}

/* getpid() is a system call (glibc stopped caching it), about 2 us on a VM with page-table
 * isolation; the ring asks it at every batch release to tell a forked child (bench/RESULTS.md,
 * issue 26 tok3). The id is read once and renewed by a fork handler in the child. */
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;
static _Atomic pid_t pid_kept;

static void pid_renew(void)
{
    atomic_store_explicit(&pid_kept, getpid(), memory_order_relaxed);
}

static void pid_init(void)
{
    pid_renew();
    pthread_atfork(NULL, NULL, pid_renew);
}

pid_t stk__pid(void)
{
    pthread_once(&pid_once, pid_init);
    return atomic_load_explicit(&pid_kept, memory_order_relaxed);
}

uint64_t stk__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

bool stk__write_full(int fd, const void *buf, size_t size)
{
    const uint8_t *p = buf;
    while (size > 0) {
        ssize_t n = stk__fault_write_hit(size) ? -1 : write(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = 0;
            return false;
        }
        p += n;
        size -= (size_t)n;
    }
    return true;
}
