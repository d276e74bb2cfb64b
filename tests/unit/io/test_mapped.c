/*
 * test_mapped.c: local files read in place through a guarded mapping (src/io/stk_mapped.c): the
 * bytes are the file's; a file cut short under the mapping (before a use, or during one) is
 * STK_EIO naming it, never a SIGBUS reaching the program; a file rewritten in place is refused
 * after the use; every other SIGBUS still reaches the handler installed before ours, or the
 * default action (the process dies of it); empty files, files without a descriptor, and every
 * file unless STOKER_MMAP=1 (mapping is asked for) get no mapping, but for a sealed memfd.
 */
#include "io/stk_mapped.h"
#include "t.h"
#include "data/fixtures.h"

#include <fcntl.h>
#include <stdbool.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGES 4
#define SIZE (PAGES * 4096 + 100)

static char g_dir[200];

/* A fresh file of SIZE bytes, byte k = k * 7 mod 251, at path. */
static int write_file(char *path, size_t size, const char *name)
{
    snprintf(path, 300, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "wb");
    T_CHECK(f);
    for (size_t k = 0; k < size; k++)
        fputc((int)(k * 7 % 251), f);
    T_CHECK(fclose(f) == 0);
    return 0;
}

/* A use's function: sum the bytes into *arg. */
static void sum(void *arg, const uint8_t *b, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i] * (i + 1);
    *(uint64_t *)arg = s;
}

static uint64_t expect_sum(uint64_t off, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += ((off + i) * 7 % 251) * (i + 1);
    return s;
}

static int open_mapped(const char *path, stk__file **f, stk__mapped **m)
{
    char err[STK_ERRMSG_SIZE];
    T_OK(stk__vfs_open(path, f, err, sizeof(err)));
    T_OK(stk__mapped_open(*f, STK__MAP_NORMAL, m, err, sizeof(err)));
    T_CHECK(*m != NULL);
    return 0;
}

static int test_bytes_read_in_place(void)
{
    char path[300], err[STK_ERRMSG_SIZE];
    T_CHECK(write_file(path, SIZE, "a.bin") == 0);
    stk__file *f;
    stk__mapped *m;
    T_CHECK(open_mapped(path, &f, &m) == 0);
    static const uint64_t at[][2] = {{0, 1}, {0, SIZE}, {4095, 2}, {SIZE - 7, 7}, {9000, 3000}};
    for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
        uint64_t s = 0;
        T_OK(stk__mapped_use(m, at[k][0], (size_t)at[k][1], sum, &s, err, sizeof(err)));
        T_EQ(s, expect_sum(at[k][0], (size_t)at[k][1]));
    }
    uint64_t s = 0; /* past the end: refused before touching anything */
    T_EQ(stk__mapped_use(m, SIZE - 3, 4, sum, &s, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "a.bin") && strstr(err, "past its end"), "%s", err);
    T_EQ(stk__mapped_caught(), 0);
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

static int test_cut_short_before_a_use_is_named_not_sigbus(void)
{
    char path[300], err[STK_ERRMSG_SIZE];
    T_CHECK(write_file(path, SIZE, "cut.bin") == 0);
    stk__file *f;
    stk__mapped *m;
    T_CHECK(open_mapped(path, &f, &m) == 0);
    T_CHECK(truncate(path, 4096) == 0); /* pages 1.. gone */
    uint64_t s = 0;
    T_EQ(stk__mapped_use(m, 8192, 100, sum, &s, err, sizeof(err)), STK_EIO); /* SIGBUS there */
    T_CHECKF(strstr(err, "cut.bin") && strstr(err, "changed while open") &&
                 strstr(err, "cut short under the mapping") && strstr(err, "read at 8192"),
             "%s", err);
    T_EQ(stk__mapped_caught(), 1);
    /* the page still there: read, then refused (the file is not the version opened) */
    T_EQ(stk__mapped_use(m, 0, 100, sum, &s, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "changed while open") && !strstr(err, "cut short"), "%s", err);
    T_EQ(stk__mapped_caught(), 1);
    /* the thread goes on: SIGBUS is not left blocked, a second fault is caught as the first */
    T_EQ(stk__mapped_use(m, 4096 * 3, 10, sum, &s, err, sizeof(err)), STK_EIO);
    T_EQ(stk__mapped_caught(), 2);
    sigset_t now;
    T_CHECK(pthread_sigmask(SIG_BLOCK, NULL, &now) == 0);
    T_CHECK(!sigismember(&now, SIGBUS));
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

/* A use's function that cuts its own file short, then reads a page past the cut: the race of
 * a writer truncating between the check and the touch, made certain. */
static const char *g_cut_path;
static void cut_then_sum(void *arg, const uint8_t *b, size_t n)
{
    if (truncate(g_cut_path, 10) != 0)
        abort();
    sum(arg, b, n);
}

static int test_cut_short_during_a_use_is_named_not_sigbus(void)
{
    char path[300], err[STK_ERRMSG_SIZE];
    T_CHECK(write_file(path, SIZE, "during.bin") == 0);
    stk__file *f;
    stk__mapped *m;
    T_CHECK(open_mapped(path, &f, &m) == 0);
    g_cut_path = path;
    uint64_t s = 0;
    T_EQ(stk__mapped_use(m, 4096, 8192, cut_then_sum, &s, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "during.bin") && strstr(err, "cut short under the mapping") &&
                 strstr(err, "-> 10"),
             "%s", err);
    T_EQ(stk__mapped_caught(), 1);
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

static int test_rewritten_in_place_is_refused_after_the_use(void)
{
    char path[300], err[STK_ERRMSG_SIZE];
    T_CHECK(write_file(path, SIZE, "rewrite.bin") == 0);
    stk__file *f;
    stk__mapped *m;
    T_CHECK(open_mapped(path, &f, &m) == 0);
    uint64_t s = 0;
    T_OK(stk__mapped_use(m, 0, 64, sum, &s, err, sizeof(err)));
    FILE *w = fopen(path, "r+b"); /* same size, new bytes, a new modification time */
    T_CHECK(w && fputc(99, w) == 99 && fclose(w) == 0);
    struct timespec later[2] = {{0, UTIME_OMIT}, {4000000000, 0}};
    T_CHECK(utimensat(AT_FDCWD, path, later, 0) == 0);
    T_EQ(stk__mapped_use(m, 0, 64, sum, &s, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "rewrite.bin") && strstr(err, "changed while open"), "%s", err);
    T_EQ(stk__mapped_caught(), 0);
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

/* ---- other SIGBUS: as if the guard were not there ---- */

static volatile sig_atomic_t g_theirs;
static sigjmp_buf g_out;

static void their_handler(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    g_theirs++;
    if (si->si_code > 0) /* a fault: leave the faulting code, as a handler of theirs would */
        siglongjmp(g_out, 1);
}

/* A mapping of our own (not stoker's) of `path`, whose page 2 is then cut away. */
static const volatile uint8_t *own_cut_mapping(const char *path)
{
    int fd = open(path, O_RDONLY);
    void *p = fd >= 0 ? mmap(NULL, SIZE, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    if (fd >= 0)
        close(fd);
    if (p == MAP_FAILED || truncate(path, 4096) != 0)
        return NULL;
    return p;
}

static int test_other_sigbus_reaches_the_handler_before(void)
{
    char path[300], own[300], err[STK_ERRMSG_SIZE];
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = their_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    T_CHECK(sigaction(SIGBUS, &sa, NULL) == 0); /* before the first mapping: chained to */
    T_CHECK(write_file(path, SIZE, "ours.bin") == 0);
    T_CHECK(write_file(own, SIZE, "theirs.bin") == 0);
    stk__file *f;
    stk__mapped *m;
    T_CHECK(open_mapped(path, &f, &m) == 0);
    raise(SIGBUS); /* a sent one */
    T_EQ(g_theirs, 1);
    const volatile uint8_t *p = own_cut_mapping(own);
    T_CHECK(p != NULL);
    if (sigsetjmp(g_out, 1) == 0) { /* a fault outside stoker's mappings */
        uint8_t v = p[8192];
        (void)v;
        T_CHECK(!"a read past the cut gave no SIGBUS");
    }
    T_EQ(g_theirs, 2);
    T_EQ(stk__mapped_caught(), 0);
    T_CHECK(truncate(path, 4096) == 0); /* and one in ours: the guard's, not theirs */
    uint64_t s = 0;
    T_EQ(stk__mapped_use(m, 8192, 10, sum, &s, err, sizeof(err)), STK_EIO);
    T_EQ(g_theirs, 2);
    T_EQ(stk__mapped_caught(), 1);
    munmap((void *)p, SIZE);
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

/* In a child: map a file with stoker (installing the guard), then `how` a SIGBUS outside it;
 * the child's wait status. */
static int child_status(const char *how)
{
    char path[300], own[300];
    if (write_file(path, SIZE, "child.bin") || write_file(own, SIZE, "child_own.bin"))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGBUS, SIG_DFL);
        stk__file *f;
        stk__mapped *m;
        if (open_mapped(path, &f, &m))
            _exit(3);
        if (!strcmp(how, "raise")) {
            raise(SIGBUS);
        } else {
            const volatile uint8_t *p = own_cut_mapping(own);
            if (p)
                (void)p[8192];
        }
        _exit(0); /* survived: wrong */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static int test_other_sigbus_keeps_the_default_action(void)
{
    for (int k = 0; k < 2; k++) {
        int st = child_status(k ? "fault" : "raise");
        T_CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS, "%s: status %#x", k ? "fault" : "raise",
                 st);
    }
    return 0;
}

static int test_files_not_mapped(void)
{
    char path[300], empty[300], err[STK_ERRMSG_SIZE], fault[400];
    T_CHECK(write_file(path, SIZE, "plain.bin") == 0);
    T_CHECK(write_file(empty, 0, "empty.bin") == 0);
    stk__file *f;
    stk__mapped *m = (stk__mapped *)&m;
    T_OK(stk__vfs_open(empty, &f, err, sizeof(err))); /* nothing to map */
    T_OK(stk__mapped_open(f, STK__MAP_NORMAL, &m, err, sizeof(err)));
    T_CHECK(m == NULL);
    stk__vfs_close(f);
    snprintf(fault, sizeof(fault), "stk-fault:eio@999999:%s", path); /* no descriptor */
    T_OK(stk__vfs_open(fault, &f, err, sizeof(err)));
    T_OK(stk__mapped_open(f, STK__MAP_NORMAL, &m, err, sizeof(err)));
    T_CHECK(m == NULL);
    stk__vfs_close(f);
    T_OK(stk__vfs_open(path, &f, err, sizeof(err)));
    setenv("STOKER_MMAP", "0", 1);
    T_OK(stk__mapped_open(f, STK__MAP_RANDOM, &m, err, sizeof(err)));
    T_CHECK(m == NULL);
    unsetenv("STOKER_MMAP"); /* the default: read, not mapped */
    T_OK(stk__mapped_open(f, STK__MAP_RANDOM, &m, err, sizeof(err)));
    T_CHECK(m == NULL);
    setenv("STOKER_MMAP", "1", 1);
    T_OK(stk__mapped_open(f, STK__MAP_RANDOM, &m, err, sizeof(err)));
    T_CHECK(m != NULL);
    stk__mapped_close(m);
    stk__vfs_close(f);
    return 0;
}

/* A memfd of SIZE bytes (byte k = k * 7 mod 251), sealed against writes and shrinking or not;
 * its /proc/self/fd path in path. */
static int memfd_file(char *path, bool seal)
{
    int fd = memfd_create("t-mapped", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    T_CHECK(fd >= 0);
    for (size_t k = 0; k < SIZE; k++) {
        uint8_t b = (uint8_t)(k * 7 % 251);
        T_CHECK(write(fd, &b, 1) == 1);
    }
    if (seal)
        T_CHECK(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) == 0);
    snprintf(path, 300, "/proc/self/fd/%d", fd);
    return fd;
}

static int test_sealed_memfd_mapped_unasked(void)
{
    /* A sealed memfd (an array stoker copied out of Python) is mapped without STOKER_MMAP=1 and
     * read in place; an unsealed one is not. */
    char path[300], err[STK_ERRMSG_SIZE];
    unsetenv("STOKER_MMAP");
    for (int seal = 0; seal <= 1; seal++) {
        int fd = memfd_file(path, seal);
        T_CHECK(fd >= 0);
        stk__file *f;
        stk__mapped *m;
        T_OK(stk__vfs_open(path, &f, err, sizeof(err)));
        T_OK(stk__mapped_open(f, STK__MAP_RANDOM, &m, err, sizeof(err)));
        T_CHECK((m != NULL) == (seal == 1));
        if (m) {
            uint64_t s = 0;
            T_OK(stk__mapped_use(m, 4000, 300, sum, &s, err, sizeof(err)));
            T_EQ(s, expect_sum(4000, 300));
            uint8_t row[16];
            T_OK(stk__mapped_read(m, SIZE - 16, row, sizeof(row), err, sizeof(err)));
            T_EQ(row[15], (uint8_t)((SIZE - 1) * 7 % 251));
            T_CHECK(write(fd, row, 1) < 0); /* the seal holds: nothing can change it */
        }
        stk__mapped_close(m);
        stk__vfs_close(f);
        close(fd);
    }
    setenv("STOKER_MMAP", "1", 1);
    return 0;
}

static int setup(void)
{
    const char *d = fx_tmpdir("mapped");
    T_CHECK(d);
    snprintf(g_dir, sizeof(g_dir), "%s", d);
    setenv("STOKER_MMAP", "1", 1); /* mapping is asked for */
    return 0;
}

static int teardown(void)
{
    if (g_dir[0])
        fx_rmtree(g_dir);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_bytes_read_in_place),
       T_CASE(test_cut_short_before_a_use_is_named_not_sigbus),
       T_CASE(test_cut_short_during_a_use_is_named_not_sigbus),
       T_CASE(test_rewritten_in_place_is_refused_after_the_use),
       T_CASE(test_other_sigbus_reaches_the_handler_before),
       T_CASE(test_other_sigbus_keeps_the_default_action), T_CASE(test_files_not_mapped),
       T_CASE(test_sealed_memfd_mapped_unasked), T_CASE(teardown))
