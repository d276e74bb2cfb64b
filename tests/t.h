/*
 * t.h: the unit-test harness. A test file defines `static int test_x(void)` cases (return 0 on
 * success) and lists them in a `T_MAIN(...)` call; the binary runs each, prints a closing line
 * "N passed, N failed" and exits 0 (all passed), 1 (a failure) or 77 (every case skipped).
 * Each test_* case runs in a child process under a time limit (see "the runner" below).
 *
 *   static int test_sum(void) { T_CHECK(1 + 1 == 2); return 0; }
 *   T_MAIN(T_CASE(test_sum))
 */
#ifndef STK_T_H
#define STK_T_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define T_SKIP 77

/* Fail the current case with the expression's text and location. */
#define T_CHECK(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);             \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Like T_CHECK with a printf-style explanation. */
#define T_CHECKF(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "  %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* Compare integers, printing both values on failure. */
#define T_EQ(a, b)                                                                                 \
    do {                                                                                           \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                                    \
        if (t_a_ != t_b_) {                                                                        \
            fprintf(stderr, "  %s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a,    \
                    #b, t_a_, t_b_);                                                               \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

/* A status call that must return STK_OK; prints the message text otherwise. */
#define T_OK(expr)                                                                                 \
    do {                                                                                           \
        int t_rc_ = (expr);                                                                        \
        if (t_rc_ != 0) {                                                                          \
            fprintf(stderr, "  %s:%d: %s returned %d (%s) %s\n", __FILE__, __LINE__, #expr, t_rc_, \
                    stk_strerror(t_rc_), stk_last_errmsg());                                       \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

typedef struct t_case {
    const char *name;
    int (*fn)(void);
} t_case;

#define T_CASE(fn)                                                                                 \
    {                                                                                              \
#fn, fn                                                                                    \
    }

/* ---- the runner ----
 * Each case named test_* runs in a forked child (as libuv's runner does) with a time limit, so a
 * case that hangs or crashes fails by name ("timed out after N s", "killed by signal S") and the
 * next case still runs. A case with any other name (setup, teardown, make_shard) is a fixture: it
 * runs in the runner's own process, so what it prepares is inherited by the cases after it, and it
 * runs even when a filter selects other cases. Cases must not depend on each other's effects.
 *
 *   STK_TEST_TIMEOUT=N  seconds per case (default 60, 180 under ASan/TSan; 0 = no limit),
 *                       stretched by the machine's load: a case is stopped once it has run N s
 *                       times the 1-minute load average per CPU (at least 1, at most
 *                       T_MAX_LOAD_SCALE), so a hang still ends and a busy machine is no failure
 *   STK_TEST_NOFORK=1   run every case in-process (debuggers; a binary that must not fork, as
 *                       one holding a CUDA context, defines T_NOFORK before including t.h)
 *   STK_TEST_ONLY=a,b   run the cases whose name contains one of the substrings (argv[1] too)
 */
#ifndef T_NOFORK
#define T_NOFORK 0
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define T_DEFAULT_TIMEOUT 180 /* the sanitizers slow a case down several times */
#else
#define T_DEFAULT_TIMEOUT 60
#endif

#define T_MAX_LOAD_SCALE 16.0 /* a hung case ends within 16 limits however busy the machine */

static char t_alarm_msg_[256];     /* what the alarm handler prints for the in-process case */
static struct timespec t_here_t0_; /* when the in-process case started */
static unsigned t_timeout_;        /* seconds per case; 0 = none */
static volatile pid_t t_child_;    /* the forked case running, for the signal handler */

static inline void t_write_(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* How much the limit stretches now: the 1-minute load average per CPU, within [1, 16]. A case
 * on a machine running ten times its CPUs' worth of work gets ten times the seconds; its
 * verdict does not depend on what else runs (getloadavg reads /proc/loadavg with open/read,
 * safe in the alarm handler below). */
static inline double t_load_scale_(void)
{
    double load[1];
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(load, 1) != 1 || n < 1)
        return 1.0;
    double s = load[0] / (double)n;
    return s < 1.0 ? 1.0 : s > T_MAX_LOAD_SCALE ? T_MAX_LOAD_SCALE : s;
}

/* Whether a case that has run `elapsed` seconds is past its stretched limit. */
static inline int t_past_limit_(double elapsed, unsigned limit)
{
    return limit && elapsed >= (double)limit && elapsed >= (double)limit * t_load_scale_();
}

static inline double t_since_(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The in-process case's alarm: past the stretched limit, name the case and end the binary (the
 * case cannot be stopped any other way); before it (a loaded machine), look again in a while. */
static inline void t_on_alarm_(int sig)
{
    (void)sig;
    if (!t_past_limit_(t_since_(&t_here_t0_), t_timeout_)) {
        alarm(t_timeout_ / 4 + 1);
        return;
    }
    t_write_(t_alarm_msg_);
    _exit(1);
}

/* The runner is interrupted or killed by `timeout`: take the running case's process group
 * with it, then die of the same signal. */
static inline void t_on_term_(int sig)
{
    if (t_child_ > 0)
        kill(-t_child_, SIGKILL);
    signal(sig, SIG_DFL);
    raise(sig);
}

static inline int t_selected_(const char *name, int argc, char **argv)
{
    if (strncmp(name, "test_", 5) != 0)
        return 1; /* fixtures always run */
    if (argc > 1)
        return strstr(name, argv[1]) != NULL;
    const char *only = getenv("STK_TEST_ONLY");
    if (!only || !*only)
        return 1;
    for (const char *p = only; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0 && n < 128) {
            char part[128];
            memcpy(part, p, n);
            part[n] = '\0';
            if (strstr(name, part))
                return 1;
        }
        p += n + (p[n] == ',');
    }
    return 0;
}

/* Run one case in-process, under an alarm when there is a limit. */
static inline int t_run_here_(const t_case *c)
{
    if (t_timeout_) {
        snprintf(
            t_alarm_msg_, sizeof(t_alarm_msg_),
            "FAIL %s (past its %u s limit, load-stretched, in-process: the cases after it did not "
            "run)\n",
            c->name, t_timeout_);
        fflush(stdout);
        clock_gettime(CLOCK_MONOTONIC, &t_here_t0_);
        signal(SIGALRM, t_on_alarm_);
        alarm(t_timeout_);
    }
    int rc = c->fn();
    alarm(0);
    return rc;
}

/* Run one case in a child of its own process group; `why` says how it ended if not by exit. */
static inline int t_run_forked_(const t_case *c, char *why, size_t why_size)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, why_size, "fork failed: %s", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        exit(c->fn()); /* exit, not _exit: atexit cleanups and the leak checker run */
    }
    setpgid(pid, pid); /* also here, so the group exists before any kill */
    t_child_ = pid;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long nap_us = 200;
    int st = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0 && errno != EINTR) {
            snprintf(why, why_size, "waitpid: %s", strerror(errno));
            t_child_ = 0;
            return 1;
        }
        double elapsed = t_since_(&t0);
        if (t_past_limit_(elapsed, t_timeout_)) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            t_child_ = 0;
            snprintf(why, why_size, "timed out after %.0f s: limit %u s, load-stretched", elapsed,
                     t_timeout_);
            return 1;
        }
        struct timespec nap = {0, nap_us * 1000};
        nanosleep(&nap, NULL);
        if (nap_us < 20000)
            nap_us *= 2;
    }
    t_child_ = 0;
    kill(-pid, SIGKILL); /* anything the case left running in its group */
    if (WIFSIGNALED(st)) {
        snprintf(why, why_size, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
        return 1;
    }
    return WEXITSTATUS(st);
}

static inline int t_run(const t_case *cases, size_t n, int argc, char **argv)
{
    int passed = 0, failed = 0, skipped = 0;
    const char *e = getenv("STK_TEST_TIMEOUT");
    t_timeout_ = e && *e ? (unsigned)strtoul(e, NULL, 10) : T_DEFAULT_TIMEOUT;
    e = getenv("STK_TEST_NOFORK");
    int fork_cases = !T_NOFORK && !(e && *e && strcmp(e, "0") != 0);
    if (fork_cases) {
        signal(SIGINT, t_on_term_);
        signal(SIGTERM, t_on_term_);
    }
    for (size_t i = 0; i < n; i++) {
        if (!t_selected_(cases[i].name, argc, argv))
            continue;
        char why[160] = "";
        int fixture = strncmp(cases[i].name, "test_", 5) != 0;
        int rc = fork_cases && !fixture ? t_run_forked_(&cases[i], why, sizeof(why))
                                        : t_run_here_(&cases[i]);
        const char *what = rc == 0 ? "ok" : rc == T_SKIP ? "skip" : "FAIL";
        if (why[0])
            printf("%-4s %s (%s)\n", what, cases[i].name, why);
        else
            printf("%-4s %s\n", what, cases[i].name);
        fflush(stdout);
        if (rc == 0)
            passed++;
        else if (rc == T_SKIP)
            skipped++;
        else
            failed++;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed)
        return 1;
    return passed == 0 && skipped > 0 ? T_SKIP : 0;
}

#define T_MAIN(...)                                                                                \
    int main(int argc, char **argv)                                                                \
    {                                                                                              \
        static const t_case t_cases_[] = {__VA_ARGS__};                                            \
        return t_run(t_cases_, sizeof(t_cases_) / sizeof(t_cases_[0]), argc, argv);                \
    }

#endif /* STK_T_H */
