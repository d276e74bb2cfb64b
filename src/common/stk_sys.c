/*
 * stk_sys.c: what the library asks of the operating system, each asked one way: the CPU count
 * (once, under pthread_once; the affinity mask wins over the online count), the monotonic clock,
 * and writing a whole buffer (EINTR and short writes retried; the debug build's disk-full
 * injection).
 */
#include "stk_internal.h"

#include <errno.h>
#include <pthread.h>
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
