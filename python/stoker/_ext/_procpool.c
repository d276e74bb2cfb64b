/*
 * _procpool.c: a Python Dataset's __getitem__ run in worker processes that write each sample
 * straight into its rows of the loader's shared ring (the process executor; docs/design.md
 * "Python datasets").
 *
 * Each C worker thread of the loader is paired with one worker process (stk_sample_info.worker
 * picks it). The thread's sample_fn_v2 runs without the GIL: it sends the process a ticket (the
 * record index, epoch and per-sample seed, and the offsets of the sample's rows in the ring's
 * memfd, which every worker maps) over a Unix socket and waits for the reply; the process runs
 * __getitem__, writes the fixed leaves at those offsets and answers with a 32-byte header (status,
 * time spent in Python, the row's mask) and, only when the sample has object leaves (strings,
 * None, a leaf that did not fit), their pickle, kept here by key until the consumer takes it.
 * Nothing else crosses the socket per sample. Several tickets are in flight per worker: a thread
 * that took several samples at once sends them all first, in one write (announced by the
 * loader's sample_ahead_fn, proc_ahead), so that the process finds its next ticket in its socket
 * instead of waiting for it, and takes the replies in order, one per sample_fn_v2 call (a
 * worker's queue, `q`). How many: as many as keep ~1 ms of __getitem__ queued (the mean so
 * far), at most AHEAD_MAX, so a slow sample has nothing queued behind it at a batch's end.
 * Without timeout=, the tickets are OP_TICKET_HELD: the process holds a reply back while another
 * ticket waits in its socket and sends a run's replies in one write (a reply a sample would wake
 * this thread once a sample: a context switch on each side), and a sample whose reply it holds
 * writes its seed into its row's object key once its leaves are in the ring. A worker lost with
 * tickets queued fails only the one it was running (the first whose reply did not come and whose
 * row has no seed: held_done; the ones before it are done); the rest go to its restarted process,
 * and timeout= runs for each from when the process could start it (the later of its sending and the
 * previous reply). The ring's fd goes to a worker once (SCM_RIGHTS), and again after a rebuild gave
 * the loader a new ring; the layout (pickled once) goes with the first ticket.
 *
 * Worker processes are forked by a server process (python/stoker/_procpool.py: a fork of the
 * parent taken while it was single-threaded, or a fresh interpreter), never by this
 * multithreaded process. The server answers two requests on the control socket: SPAWN (fork a
 * worker on the socket passed with the request; reply: its pid) and REAP (wait for a pid; reply:
 * its wait status). A fork server that went lean (python/stoker/_pyworker_server.py) keeps no
 * dataset: it forks a worker bare and says so (CTL_WANTS_SPEC), and the thread that asked takes
 * the GIL and has `respec` pickle the dataset in this process and send it on the worker's socket
 * (send_spec); the pool's last SPAWN at its start is flagged CTL_THEN_LEAN, after which the fork
 * server goes lean. Once the workers renewed their copy of a dataset the training loop changed
 * (fresh_restarts()), every restart is forked bare that way (CTL_FRESH), whatever the server
 * holds: respec then sends the renewed dataset, never the server's first copy. The pool's first
 * SPAWNs are sent together and their answers read later, by the thread that first uses each worker
 * (spawn_finish): the server forks them one after the other (a fork of a process holding torch
 * takes milliseconds) while the constructor goes on and the training thread loads part of the first
 * batch (_pyhelp.py). When a worker's socket ends (killed by a signal, the OOM killer, an exit),
 * the thread asks the server how it died, names it in the sample's error (index and signal) and has
 * a new worker forked at once; after MAX_RESTARTS deaths in a row without a finished sample it
 * stops restarting that worker and fails its samples with the last reason. A new worker says when
 * it has started (ST_READY, after its set-up and worker_init_fn); the thread waits for that before
 * a ticket, under a start-up limit of its own (startup=; a worker that does not start in time is
 * killed and counted as a death), so that with a timeout, which runs from the ticket to a started
 * worker, only __getitem__ and the reply count: a sample that takes longer gets its worker killed
 * (SIGKILL) and fails naming the timeout.
 *
 * interrupt() (close) shuts every socket down, so a thread waiting on a worker returns at once
 * (STK_ECANCELED) and the loader's destroy never waits on a __getitem__.
 *
 * Locks: `mu` (init blob, arena, closing; cv: they changed), `ctl_mu` (the control socket), `tmu`
 * (the object and error tables). A worker slot (socket, pid, counters) belongs to the one thread
 * whose worker number it is. No lock is held while waiting on a worker.
 */
#include "_core.h"
#include "_procwire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CTL_SPAWN = 1, CTL_REAP = 2 };
/* CTL_THEN_LEAN (a SPAWN's flags): the pool's last worker at its start; the fork server may go
 * lean after it. CTL_FRESH (a restart's flags once fresh_restarts() was called: the training
 * loop changed the dataset and the workers renewed their copy): forked without the server's
 * copy, the first one, the worker waits for the dataset as it is now. CTL_WANTS_SPEC (a SPAWN
 * answer's err beside a pid): the worker was forked without the dataset and waits for it on its
 * socket (sent by `respec`). */
enum { CTL_THEN_LEAN = 1, CTL_FRESH = 2, CTL_WANTS_SPEC = 1 };
#define MAX_RESTARTS 3
#define N_ERRS 64

typedef struct ctl_msg {
    int32_t op, wid, pid, flags;
} ctl_msg;

typedef struct ctl_reply {
    int32_t value, err;
} ctl_reply;

/* Tickets in flight per worker process: at most AHEAD_MAX taken at a time; by default as many
 * as keep AHEAD_NS of __getitem__ (the mean so far, after AHEAD_MIN_SAMPLES) queued. */
#define AHEAD_MAX 8
#define AHEAD_NS 1000000ULL
#define AHEAD_MIN_SAMPLES 16

/* A ticket sent (or to send) to a worker process, and once done its result. */
typedef struct pticket {
    stk_sample_info info;
    const uint8_t *row; /* its first row: with index and epoch, which sample */
    int64_t *km;        /* its row's object key and mask (OP_TICKET_HELD: the seed once done) */
    bool held;          /* sent as OP_TICKET_HELD */
    struct {
        msg_hdr h;
        uint64_t off[STK_MAX_FIELDS];
    } t;
    size_t t_size;
    bool sent;        /* in the worker's socket (false after its worker was lost: resent) */
    bool done;        /* its reply read (r, payload), or failed (st, why) */
    uint64_t sent_ms; /* now_ms when sent */
    stk_status st;
    reply_hdr r;
    char *payload;
    char why[400];
} pticket;

typedef struct pworker {
    int sock; /* -1: no process */
    pid_t pid;
    uint32_t arena_seen; /* the arena id this process has mapped (0: none) */
    bool init_sent;
    bool starting; /* its ST_READY not read yet: timeout= does not run meanwhile */
    bool owed;     /* its SPAWN's answer not taken yet (the pool's first workers: spawn_finish) */
    int deaths;    /* in a row, without a finished sample since */
    char why[400];
    /* tickets in flight, in the order sent (replies come in that order): those announced
     * (proc_ahead) and not yet taken by their proc_call, and at most one not announced */
    pticket q[AHEAD_MAX + 2];
    uint32_t nq;
    uint64_t free_ms; /* when its last reply came (the next ticket could start then) */
} pworker;

typedef struct blob {
    uint64_t key;
    char *data;
    size_t size;
} blob;

typedef struct errblob {
    uint64_t index, epoch;
    char *data;
    size_t size;
} errblob;

typedef struct {
    PyObject ob_base;
    pid_t owner; /* the creating process: a forked copy leaves the sockets alone */
    int ctl;
    pid_t server;
    PyObject *respec;        /* respec(fd): send the pickled spec to a worker forked without it */
    _Atomic bool fresh;      /* restarts are forked CTL_FRESH (fresh_restarts()) */
    struct stkpy_tstates ts; /* the loader threads' Python states (respec on a restart) */
    pthread_mutex_t ctl_mu;
    /* ctl_mu: the answers the server owes to the pool's first SPAWNs, for workers
     * [owed_next, owed_end), read in order by settle_locked into `answers` */
    uint32_t owed_next, owed_end;
    ctl_reply *answers;
    /* ctl_mu: the server has not yet said whether it took the loader's spec (ready_owed=True:
     * it answers after unpickling it, which may import torch; its u32 length and text come
     * before any SPAWN answer, settle_locked reads them); its text when it could not */
    bool ready_owed;
    char ready_why[600];
    uint32_t n;
    pworker *w;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char *init;
    size_t init_size;
    int arena_fd;
    uint8_t *arena_base;
    size_t arena_size;
    uint32_t arena_id;
    bool closing;
    stk_field fields[STK_MAX_FIELDS];
    size_t n_fields;
    int64_t timeout_ms;         /* per sample; 0: none */
    _Atomic int64_t startup_ms; /* a new worker's start-up (to its ST_READY); 0: none */
    _Atomic uint64_t key_next;
    pthread_mutex_t tmu;
    blob *blobs;
    size_t cap;
    errblob errs[N_ERRS];
    uint32_t err_next;
    _Atomic uint64_t py_ns, cpu_ns, samples, deaths, restarts;
    _Atomic uint32_t starting; /* threads waiting for a worker's start-up now */
    _Atomic uint32_t ahead;    /* tickets a thread takes at a time (0: ahead_want chooses) */
} ProcPoolObject;

/* Whether close() began (interrupt()). */
static bool pool_closing(ProcPoolObject *p)
{
    pthread_mutex_lock(&p->mu);
    bool closing = p->closing;
    pthread_mutex_unlock(&p->mu);
    return closing;
}

/* How a worker was lost (worker_died). */
typedef enum { LOST_ENDED, LOST_TIMEOUT, LOST_NO_START } lost_how;

/* Seconds as whole milliseconds (a positive time is at least 1 ms; <= 0: 0, none). */
static int64_t ms_of(double s)
{
    if (!(s > 0))
        return 0;
    int64_t ms = (int64_t)(s * 1000.0 + 0.5);
    return ms > 0 ? ms : 1;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000ULL + (uint64_t)ts.tv_nsec / 1000000ULL;
}

/* ---- socket helpers (no GIL) ---- */

/* Send all of [buf, buf + n), with `fd` attached (SCM_RIGHTS) when >= 0. -1 with errno. */
static int send_all(int sock, const void *buf, size_t n, int fd)
{
    const char *p = buf;
    bool first = true;
    while (n > 0) {
        struct iovec iov = {.iov_base = (void *)p, .iov_len = n};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } cm;
        if (first && fd >= 0) {
            memset(&cm, 0, sizeof(cm));
            mh.msg_control = cm.buf;
            mh.msg_controllen = sizeof(cm.buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        ssize_t k = sendmsg(sock, &mh, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        first = false;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Read exactly n bytes before `deadline` (ms on now_ms's clock; 0: none). Without the GIL
 * (with_gil false): 0 on success, -1 on end of stream or error (errno; ETIMEDOUT when the
 * deadline passed). With the GIL held (with_gil true): released while waiting, in steps of at
 * most STEP_MS running the signal handlers between steps (Ctrl-C); -2 with a Python exception
 * set when a handler raised. */
#define STEP_MS 100
static int recv_wait(int sock, void *buf, size_t n, uint64_t deadline, bool with_gil)
{
    char *p = buf;
    while (n > 0) {
        int wait = with_gil ? STEP_MS : -1;
        if (deadline) {
            uint64_t t = now_ms();
            if (t >= deadline) {
                errno = ETIMEDOUT;
                return -1;
            }
            if (wait < 0 || deadline - t < (uint64_t)wait)
                wait = deadline - t > 1000000 ? 1000000 : (int)(deadline - t);
        }
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        int r, e;
        if (with_gil) {
            Py_BEGIN_ALLOW_THREADS
            r = poll(&pfd, 1, wait);
            e = errno;
            Py_END_ALLOW_THREADS
        } else {
            r = poll(&pfd, 1, wait);
            e = errno;
        }
        if (r < 0 && e != EINTR) {
            errno = e;
            return -1;
        }
        if (r <= 0) { /* a signal, or a step ended: the deadline is checked above */
            if (with_gil && PyErr_CheckSignals() < 0)
                return -2;
            continue;
        }
        ssize_t k = recv(sock, p, n, MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        if (k == 0) {
            errno = EPIPE;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int recv_all(int sock, void *buf, size_t n, uint64_t deadline)
{
    return recv_wait(sock, buf, n, deadline, false);
}

/* ---- the server (fork and reap) ---- */

/* Read the answers the server still owes to the pool's first SPAWNs (ProcPool_new sends them
 * all without waiting), in order, into `answers`: every later request on ctl waits for its own
 * answer after them. ctl_mu held. */
static void settle_locked(ProcPoolObject *p)
{
    if (p->ready_owed) {
        p->ready_owed = false;
        uint32_t n = 0;
        if (p->ctl < 0 || recv_all(p->ctl, &n, sizeof(n), 0) != 0) {
            snprintf(p->ready_why, sizeof(p->ready_why), "it exited before it was ready");
        } else if (n) {
            char text[2001];
            size_t k = n < sizeof(text) - 1 ? n : sizeof(text) - 1;
            if (recv_all(p->ctl, text, k, 0) != 0)
                k = 0;
            text[k] = 0;
            snprintf(p->ready_why, sizeof(p->ready_why), "%.500s", k ? text : "(no reason given)");
        }
    }
    while (p->owed_next < p->owed_end) {
        ctl_reply *r = &p->answers[p->owed_next++];
        if (p->ctl < 0 || recv_all(p->ctl, r, sizeof(*r), 0) != 0)
            *r = (ctl_reply){.value = -1, .err = 0}; /* the server exited */
    }
}

/* settle_locked, taking ctl_mu. */
static void settle(ProcPoolObject *p)
{
    pthread_mutex_lock(&p->ctl_mu);
    settle_locked(p);
    pthread_mutex_unlock(&p->ctl_mu);
}

/* The wait status of a worker that ended (asked of the server, its parent); -1 if unknown. */
static int reap_worker(ProcPoolObject *p, pid_t pid)
{
    ctl_msg m = {.op = CTL_REAP, .pid = pid};
    ctl_reply r = {.value = -1};
    pthread_mutex_lock(&p->ctl_mu);
    settle_locked(p);
    int rc = p->ctl < 0 ? -1 : send_all(p->ctl, &m, sizeof(m), -1);
    if (rc == 0)
        rc = recv_all(p->ctl, &r, sizeof(r), 0);
    pthread_mutex_unlock(&p->ctl_mu);
    return rc == 0 && r.err == 0 ? r.value : -1;
}

/* A worker forked by a lean fork server waits for the dataset on its socket `sock`: respec(sock)
 * pickles it in this process now and sends it, with the GIL (taken on a loader thread, or again
 * on the Python thread in ProcPool_new: from_python). 0, or -1 with err set. */
static int send_spec(ProcPoolObject *p, uint32_t wid, int sock, bool from_python, char *err,
                     size_t err_size)
{
    if (!p->respec) {
        snprintf(err, err_size,
                 "cannot start worker process %u: its server forked it without the dataset, "
                 "and this pool has none to send",
                 wid);
        return -1;
    }
    if (stkpy_finalizing()) {
        snprintf(err, err_size, "cannot start worker process %u: the interpreter is shutting down",
                 wid);
        return -1;
    }
    PyGILState_STATE g = from_python ? PyGILState_Ensure() : stkpy_gil_take(&p->ts);
    PyObject *r = PyObject_CallFunction(p->respec, "i", sock);
    int rc = 0;
    if (!r) {
        char text[300];
        stkpy_exception_text(NULL, text, sizeof(text));
        snprintf(err, err_size, "cannot start worker process %u: sending it the dataset failed: %s",
                 wid, text);
        rc = -1;
    }
    Py_XDECREF(r);
    if (from_python)
        PyGILState_Release(g);
    else
        stkpy_gil_drop(g);
    return rc;
}

/* Worker wid's SPAWN answered (r; sent: whether the request went out): its pid, and the dataset
 * sent when a lean server forked it without (from_python: see send_spec). 0, or -1 with err set
 * (its socket `sock` is then closed, and a worker forked without the dataset killed). */
static int spawn_answered(ProcPoolObject *p, uint32_t wid, int sock, bool sent, ctl_reply r,
                          bool from_python, char *err, size_t err_size)
{
    pworker *w = &p->w[wid];
    if (!sent || r.value <= 0) {
        close(sock);
        if (p->ready_why[0])
            snprintf(err, err_size,
                     "cannot start worker process %u: the worker server could not take the "
                     "dataset: %.300s",
                     wid, p->ready_why);
        else
            snprintf(err, err_size, "cannot start worker process %u: %s", wid,
                     !sent || (r.value < 0 && !r.err)
                         ? "the worker server (which forks the workers) has exited"
                         : strerror(r.err ? r.err : EAGAIN));
        return -1;
    }
    if (r.err == CTL_WANTS_SPEC && send_spec(p, wid, sock, from_python, err, err_size) != 0) {
        close(sock);
        kill(r.value, SIGKILL);
        reap_worker(p, r.value);
        return -1;
    }
    w->sock = sock;
    w->pid = r.value;
    w->arena_seen = 0;
    w->init_sent = false;
    w->starting = true;
    return 0;
}

/* Ask the server to fork worker `wid` on a new socket pair; the parent's end into w. then_lean:
 * the pool's last worker at its start (the fork server may go lean after it). A worker forked
 * without the dataset (a lean server's) gets it from send_spec. owe: do not wait for the
 * answer (the pool's first workers, asked for together: the server forks them one after the
 * other while this process goes on; spawn_finish takes it before the worker is used). */
static int spawn_worker(ProcPoolObject *p, uint32_t wid, bool then_lean, bool from_python, bool owe,
                        char *err, size_t err_size)
{
    pworker *w = &p->w[wid];
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, err_size, "cannot create a socket for worker process %u: %s", wid,
                 strerror(errno));
        return -1;
    }
    /* (a restart is never the pool's first spawn of the worker: from_python is false) */
    ctl_msg m = {.op = CTL_SPAWN,
                 .wid = (int32_t)wid,
                 .flags = (then_lean ? CTL_THEN_LEAN : 0) |
                          (!from_python && p->respec && atomic_load(&p->fresh) ? CTL_FRESH : 0)};
    ctl_reply r = {.value = -1};
    pthread_mutex_lock(&p->ctl_mu);
    if (!owe)
        settle_locked(p); /* (owed answers come before this one's) */
    int rc = p->ctl < 0 ? -1 : send_all(p->ctl, &m, sizeof(m), sv[1]);
    if (rc == 0 && owe) {
        p->owed_end = wid + 1; /* (asked for in worker order: wid == owed_end before) */
        w->sock = sv[0];
        w->owed = true;
    } else if (rc == 0) {
        rc = recv_all(p->ctl, &r, sizeof(r), 0);
    }
    pthread_mutex_unlock(&p->ctl_mu);
    close(sv[1]);
    if (rc == 0 && owe)
        return 0;
    return spawn_answered(p, wid, sv[0], rc == 0, r, from_python, err, err_size);
}

/* Worker wid's owed SPAWN answer taken (spawn_worker with owe), by the thread that uses the
 * worker, before anything is sent on its socket. 0, or -1 with err set and its socket closed:
 * then a sample that needs it restarts it, as after a death. */
static int spawn_finish(ProcPoolObject *p, uint32_t wid, bool from_python, char *err,
                        size_t err_size)
{
    pworker *w = &p->w[wid];
    if (!w->owed)
        return 0;
    settle(p);
    ctl_reply r = p->answers[wid]; /* (final once read) */
    int sock = w->sock;
    w->sock = -1;
    w->owed = false;
    if (spawn_answered(p, wid, sock, true, r, from_python, err, err_size) == 0)
        return 0;
    snprintf(w->why, sizeof(w->why), "%s", err);
    w->deaths++;
    return -1;
}

void stkpy_wait_status_text(int status, char *buf, size_t size)
{
    if (status < 0) {
        snprintf(buf, size, "ended (its exit status is unknown)");
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = strsignal(sig);
        snprintf(buf, size, "was killed by signal %d (%s%s)", sig, name ? name : "?",
                 sig == SIGKILL ? "; the kernel's OOM killer sends SIGKILL when memory runs out"
                                : "");
    } else if (WIFEXITED(status)) {
        snprintf(buf, size, "exited with status %d", WEXITSTATUS(status));
    } else {
        snprintf(buf, size, "ended (wait status %d)", status);
    }
}

/* Worker `w` is gone (its socket ended, or it was killed after a timeout or a start-up that did
 * not end): name how in err, restart it unless it keeps dying or the pool is closing. Returns
 * STK_EIO (STK_ECANCELED when closing). */
static stk_status worker_died(ProcPoolObject *p, uint32_t wid, const stk_sample_info *info,
                              lost_how lost, char *err, size_t err_size)
{
    pworker *w = &p->w[wid];
    close(w->sock);
    w->sock = -1;
    if (pool_closing(p)) {
        snprintf(err, err_size, "the loader is closing");
        return STK_ECANCELED;
    }
    int status = reap_worker(p, w->pid);
    char how[200];
    stkpy_wait_status_text(status, how, sizeof(how));
    if (lost == LOST_TIMEOUT)
        snprintf(w->why, sizeof(w->why),
                 "__getitem__(%llu) did not return within %.3g s (timeout=): worker process %u "
                 "(pid %d) was killed and is restarted",
                 (unsigned long long)info->index, (double)p->timeout_ms / 1000.0, wid, (int)w->pid);
    else if (lost == LOST_NO_START)
        snprintf(w->why, sizeof(w->why),
                 "worker process %u (pid %d) did not finish starting (its set-up and "
                 "worker_init_fn) within %.3g s, before sample %llu (epoch %llu): it was killed",
                 wid, (int)w->pid, (double)atomic_load(&p->startup_ms) / 1000.0,
                 (unsigned long long)info->index, (unsigned long long)info->epoch);
    else
        snprintf(w->why, sizeof(w->why),
                 "worker process %u (pid %d) %s while %s sample %llu (epoch %llu)", wid,
                 (int)w->pid, how,
                 w->starting ? "starting (its set-up or worker_init_fn), before" : "loading",
                 (unsigned long long)info->index, (unsigned long long)info->epoch);
    atomic_fetch_add(&p->deaths, 1);
    w->deaths++;
    snprintf(err, err_size, "%s", w->why);
    if (w->deaths <= MAX_RESTARTS) {
        char why[256];
        if (spawn_worker(p, wid, false, false, false, why, sizeof(why)) == 0)
            atomic_fetch_add(&p->restarts, 1);
        else
            snprintf(w->why + strlen(w->why), sizeof(w->why) - strlen(w->why), "; %s", why);
    }
    return STK_EIO;
}

/* A new worker's start-up: wait for its ST_READY (under startup_ms), so that the sample's
 * timeout= runs from its request to a worker that is ready, never through a fork, imports or a
 * slow worker_init_fn (a restarted worker's, or any worker's first sample on a loaded machine).
 * `starting` counts the threads waiting here (stats()). */
static stk_status await_start(ProcPoolObject *p, uint32_t wid, const stk_sample_info *info,
                              char *err, size_t err_size)
{
    pworker *w = &p->w[wid];
    if (!w->starting)
        return STK_OK;
    int64_t limit = atomic_load(&p->startup_ms);
    uint64_t deadline = limit > 0 ? now_ms() + (uint64_t)limit : 0;
    reply_hdr r;
    atomic_fetch_add(&p->starting, 1);
    int rc = recv_all(w->sock, &r, sizeof(r), deadline);
    int e = errno;
    atomic_fetch_sub(&p->starting, 1);
    if (rc == 0 && (r.status != ST_READY || r.payload)) {
        kill(w->pid, SIGKILL); /* not the protocol: lost like a worker that ended */
        rc = -1;
        e = EPROTO;
    }
    if (rc != 0 && e == ETIMEDOUT)
        kill(w->pid, SIGKILL);
    if (rc != 0)
        return worker_died(p, wid, info, e == ETIMEDOUT ? LOST_NO_START : LOST_ENDED, err,
                           err_size);
    w->starting = false;
    return STK_OK;
}

/* Before a thread takes samples (proc_ahead with out NULL): its worker's fork answered and, while
 * it starts, wait (under startup_ms) until it says something, without reading it, so that the
 * thread does not hold a ticket the training thread could load meanwhile (stk_loader_help).
 * Errors are left to the ticket that reads the worker next (await_start names them). */
static void await_ready(ProcPoolObject *p, uint32_t wid)
{
    pworker *w = &p->w[wid];
    char why[400];
    if (w->owed && spawn_finish(p, wid, false, why, sizeof(why)) != 0)
        return;
    if (!w->starting || w->sock < 0)
        return;
    int64_t limit = atomic_load(&p->startup_ms);
    struct pollfd pfd = {.fd = w->sock, .events = POLLIN};
    uint64_t deadline = limit > 0 ? now_ms() + (uint64_t)limit : 0;
    for (;;) {
        int wait = -1;
        if (deadline) {
            uint64_t t = now_ms();
            if (t >= deadline)
                return;
            wait = (int)(deadline - t);
        }
        int r = poll(&pfd, 1, wait);
        if (r >= 0 || errno != EINTR)
            return;
    }
}

/* ---- the per-sample callback ---- */

static void keep_blob(ProcPoolObject *p, uint64_t key, char *data, size_t size)
{
    pthread_mutex_lock(&p->tmu);
    blob *b = &p->blobs[key % p->cap];
    char *old = b->data;
    b->key = key;
    b->data = data;
    b->size = size;
    pthread_mutex_unlock(&p->tmu);
    free(old);
}

static void keep_error(ProcPoolObject *p, const stk_sample_info *info, char *data, size_t size)
{
    pthread_mutex_lock(&p->tmu);
    errblob *e = &p->errs[p->err_next++ % N_ERRS];
    char *old = e->data;
    e->index = info->index;
    e->epoch = info->epoch;
    e->data = data;
    e->size = size;
    pthread_mutex_unlock(&p->tmu);
    free(old);
}

/* The arena that holds `row` (waiting for a rebuilt loader's set_arena): false when closing. */
static bool arena_of(ProcPoolObject *p, const uint8_t *row, uint8_t **base, size_t *size)
{
    pthread_mutex_lock(&p->mu);
    while (!p->closing && (!p->init || p->arena_fd < 0 || row < p->arena_base ||
                           row >= p->arena_base + p->arena_size))
        pthread_cond_wait(&p->cv, &p->mu);
    bool closing = p->closing;
    *base = p->arena_base;
    *size = p->arena_size;
    pthread_mutex_unlock(&p->mu);
    return !closing;
}

/* A ticket for sample `info` into rows `out` (the last, the object key and mask, stays here). */
static stk_status ticket_make(ProcPoolObject *p, const stk_sample_info *info, stk_tensor *out,
                              size_t n_out, pticket *e, char *err, size_t err_size)
{
    uint8_t *base;
    size_t asize;
    if (!arena_of(p, out[0].data, &base, &asize)) {
        snprintf(err, err_size, "the loader is closing");
        return STK_ECANCELED;
    }
    size_t n_fixed = n_out - 1;
    memset(e, 0, sizeof(*e));
    e->info = *info;
    e->row = out[0].data;
    e->km = out[n_fixed].data;
    e->held = p->timeout_ms == 0; /* (a held reply would keep the deadline's clock wrong) */
    e->t.h = (msg_hdr){.op = e->held ? OP_TICKET_HELD : OP_TICKET,
                       .n = (uint32_t)n_fixed,
                       .a = info->index,
                       .b = info->epoch,
                       .c = info->seed,
                       .d = info->position};
    for (size_t i = 0; i < n_fixed; i++) {
        const uint8_t *d = out[i].data;
        if (d < base || d + out[i].size > base + asize) {
            snprintf(err, err_size, "process executor: a row outside the shared ring");
            return STK_ESTATE;
        }
        e->t.off[i] = (uint64_t)(d - base);
    }
    if (e->held) {
        const uint8_t *k = (const uint8_t *)e->km;
        if (k < base || k + 2 * sizeof(int64_t) > base + asize) {
            snprintf(err, err_size, "process executor: a row outside the shared ring");
            return STK_ESTATE;
        }
        e->km[0] = (int64_t)~info->seed; /* not the seed until the worker wrote it */
        e->t.off[n_fixed] = (uint64_t)(k - base);
        e->t.h.n++;
    }
    e->t_size = sizeof(msg_hdr) + e->t.h.n * sizeof(uint64_t);
    return STK_OK;
}

/* Send worker wid's tickets not sent yet, from queue entry `from` on, in one write (its ring and
 * the layout first when it has not had them). -1 when its socket ended (the reply's read finds
 * out how). */
static int queue_send(ProcPoolObject *p, uint32_t wid, uint32_t from)
{
    pworker *w = &p->w[wid];
    char buf[(AHEAD_MAX + 2) * sizeof(w->q[0].t)];
    size_t n = 0;
    for (uint32_t k = from; k < w->nq; k++)
        if (!w->q[k].sent) {
            memcpy(buf + n, &w->q[k].t, w->q[k].t_size);
            n += w->q[k].t_size;
        }
    if (!n)
        return 0;
    if (w->sock < 0)
        return -1;
    /* The ring's fd, a copy of its own taken under mu: set_arena (a rebuild's new ring, from
     * the training thread) closes the one it replaces meanwhile, and a send with that number
     * failed with EBADF or passed whatever file took the number next. A failed send counts as
     * the worker's death: it was restarted, from the fork server's copy of the dataset (issue
     * 24: a pass that mixed two copies after the training loop changed the dataset). */
    pthread_mutex_lock(&p->mu);
    uint32_t aid = p->arena_id;
    size_t asize = p->arena_size;
    int afd =
        w->arena_seen != aid && p->arena_fd >= 0 ? fcntl(p->arena_fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_unlock(&p->mu);
    if (w->arena_seen != aid) {
        msg_hdr h = {.op = OP_ARENA, .a = asize, .b = aid};
        int rc = afd >= 0 ? send_all(w->sock, &h, sizeof(h), afd) : -1;
        if (afd >= 0)
            close(afd);
        if (rc != 0)
            return -1;
        w->arena_seen = aid;
    }
    if (!w->init_sent) {
        msg_hdr h = {.op = OP_INIT, .a = p->init_size};
        if (send_all(w->sock, &h, sizeof(h), -1) != 0 ||
            send_all(w->sock, p->init, p->init_size, -1) != 0)
            return -1;
        w->init_sent = true;
    }
    if (send_all(w->sock, buf, n, -1) != 0)
        return -1;
    uint64_t t = now_ms();
    for (uint32_t k = from; k < w->nq; k++)
        if (!w->q[k].sent) {
            w->q[k].sent = true;
            w->q[k].sent_ms = t;
        }
    return 0;
}

/* Ticket e's result, st with its reason. */
static void ticket_fail(pticket *e, stk_status st, const char *why)
{
    e->done = true;
    e->st = st;
    snprintf(e->why, sizeof(e->why), "%s", why);
}

/* Worker wid's queue lost its process while ticket e was its next reply: e fails (the sample it
 * was running, or it had not started) unless it is done (the process ended between samples, its
 * held replies' samples done: held_done), the later ones go to the restarted worker. */
static void queue_lost(ProcPoolObject *p, uint32_t wid, pticket *e, lost_how lost)
{
    pworker *w = &p->w[wid];
    char why[sizeof(e->why)];
    stk_status st = worker_died(p, wid, &e->info, lost, why, sizeof(why));
    if (!e->done)
        ticket_fail(e, st, why);
    for (uint32_t i = 0; i < w->nq; i++)
        if (!w->q[i].done)
            w->q[i].sent = false;
}

/* Worker wid's process ended while its queue's ticket i was the next reply: the tickets from i
 * on whose samples it finished with their replies held back (OP_TICKET_HELD; such a reply has no
 * payload) wrote their seed into their row's object key as the last thing; those are done, as
 * if their replies had come. Returns the first ticket after them that it did not finish (the one
 * it was running, or one it had not started), or NULL when it finished every ticket it was sent
 * (it ended between samples). */
static pticket *held_done(ProcPoolObject *p, uint32_t wid, uint32_t i)
{
    pworker *w = &p->w[wid];
    for (; i < w->nq; i++) {
        pticket *e = &w->q[i];
        if (e->done)
            continue;
        if (!e->sent)
            return NULL;
        if (!e->held || (uint64_t)e->km[0] != e->info.seed)
            return e;
        w->deaths = 0;
        atomic_fetch_add(&p->samples, 1);
        e->done = true;
        e->st = STK_OK;
        memset(&e->r, 0, sizeof(e->r));
        e->payload = NULL;
    }
    return NULL;
}

/* Read the next reply of worker wid's queue (its first ticket not done; tickets not sent, after
 * a restart, are sent first, in order). timeout= runs from when the worker could start the
 * ticket: the later of its sending and the previous reply. */
static void queue_collect(ProcPoolObject *p, uint32_t wid)
{
    pworker *w = &p->w[wid];
    uint32_t i = 0;
    while (i < w->nq && w->q[i].done)
        i++;
    if (i == w->nq)
        return;
    pticket *e = &w->q[i];
    if (pool_closing(p)) {
        ticket_fail(e, STK_ECANCELED, "the loader is closing");
        return;
    }
    if (w->owed) { /* its fork's answer first (the pool's first workers) */
        char why[sizeof(e->why)];
        if (spawn_finish(p, wid, false, why, sizeof(why)) != 0) {
            if (pool_closing(p)) /* (interrupt() ends the control socket too) */
                ticket_fail(e, STK_ECANCELED, "the loader is closing");
            else
                ticket_fail(e, STK_EIO, why); /* (the rest, not sent, go to its restart) */
            return;
        }
    }
    if (!e->sent && w->sock < 0) { /* the queue's worker was lost: a new one gets the rest */
        char why[sizeof(e->why)];
        if (w->deaths > MAX_RESTARTS) {
            snprintf(why, sizeof(why),
                     "%.280s; it died %d times in a row without finishing a sample, so it is not "
                     "restarted (see the worker's stderr)",
                     w->why, w->deaths);
            ticket_fail(e, STK_EIO, why);
            return;
        }
        if (spawn_worker(p, wid, false, false, false, why, sizeof(why)) < 0) {
            ticket_fail(e, STK_EIO, why);
            return;
        }
        atomic_fetch_add(&p->restarts, 1);
    }
    queue_send(p, wid, i); /* (announced ones wait for the run's first reply to be asked for) */
    if (!e->sent) {
        queue_lost(p, wid, e, LOST_ENDED);
        return;
    }
    if (w->starting) {
        char why[sizeof(e->why)];
        stk_status st = await_start(p, wid, &e->info, why, sizeof(why));
        if (st != STK_OK) {
            ticket_fail(e, st, why);
            for (uint32_t k = i + 1; k < w->nq; k++)
                if (!w->q[k].done)
                    w->q[k].sent = false;
            return;
        }
        w->free_ms = now_ms();
    }
    uint64_t from = e->sent_ms > w->free_ms ? e->sent_ms : w->free_ms;
    uint64_t deadline = p->timeout_ms > 0 ? from + (uint64_t)p->timeout_ms : 0;
    reply_hdr r;
    int rc = recv_all(w->sock, &r, sizeof(r), deadline);
    char *payload = NULL;
    if (rc == 0 && r.payload) {
        if (!(payload = malloc(r.payload))) {
            kill(w->pid, SIGKILL); /* its reply cannot be read: lost like a worker that ended */
            errno = EPIPE;
            rc = -1;
        } else {
            rc = recv_all(w->sock, payload, r.payload, deadline);
        }
    }
    if (rc != 0) {
        bool timed_out = errno == ETIMEDOUT;
        free(payload);
        if (timed_out) {
            kill(w->pid, SIGKILL);
        } else {
            pticket *running = held_done(p, wid, i);
            if (running) /* (else it ended between samples: e is done, nothing of its lost) */
                e = running;
        }
        queue_lost(p, wid, e, timed_out ? LOST_TIMEOUT : LOST_ENDED);
        return;
    }
    w->free_ms = now_ms();
    w->deaths = 0;
    atomic_fetch_add(&p->py_ns, r.python_ns);
    atomic_fetch_add(&p->cpu_ns, r.cpu_ns);
    atomic_fetch_add(&p->samples, 1);
    e->done = true;
    e->st = STK_OK;
    e->r = r;
    e->payload = payload;
}

/* Take ticket i out of worker wid's queue (its payload goes with it). */
static void queue_remove(pworker *w, uint32_t i)
{
    memmove(&w->q[i], &w->q[i + 1], (w->nq - i - 1) * sizeof(pticket));
    w->nq--;
}

/* Tickets of worker wid's queue that will not be taken: those sent are waited for (their worker
 * may still write into their rows), the rest dropped. */
static void queue_forget(ProcPoolObject *p, uint32_t wid)
{
    pworker *w = &p->w[wid];
    for (;;) { /* (a worker lost meanwhile leaves the rest unsent: dropped, not sent again) */
        uint32_t n = 0;
        bool waiting = false;
        for (uint32_t i = 0; i < w->nq; i++)
            if (w->q[i].done || w->q[i].sent) {
                waiting |= !w->q[i].done;
                w->q[n++] = w->q[i];
            }
        w->nq = n;
        if (!waiting)
            break;
        queue_collect(p, wid);
    }
    for (uint32_t i = 0; i < w->nq; i++)
        free(w->q[i].payload);
    w->nq = 0;
}

/* How many tickets a thread takes at a time: set_ahead's, or by the samples' mean time so far
 * (AHEAD_NS of __getitem__ queued per worker at most: a slow sample has nothing queued behind
 * it while other workers idle at the end of a batch). */
static uint32_t ahead_want(ProcPoolObject *p)
{
    uint32_t fixed = atomic_load(&p->ahead);
    if (fixed)
        return fixed;
    uint64_t n = atomic_load(&p->samples), ns = atomic_load(&p->py_ns);
    if (n < AHEAD_MIN_SAMPLES)
        return 1;
    uint64_t mean = ns / n > 0 ? ns / n : 1;
    uint64_t k = AHEAD_NS / mean;
    return k < 1 ? 1 : k > AHEAD_MAX ? AHEAD_MAX : (uint32_t)k;
}

/* stk_sample_ahead_fn: the thread's next samples, queued to be sent at once (queue_collect, when
 * the first reply is asked for) so that the worker process finds each next ticket in its socket;
 * with out NULL, the run is over (cut short: what was sent is waited for). */
static uint32_t proc_ahead(void *ctx, const stk_sample_info *info, stk_tensor *out, size_t n_out)
{
    ProcPoolObject *p = ctx;
    uint32_t wid = info->worker % p->n;
    pworker *w = &p->w[wid];
    if (!out) {
        queue_forget(p, wid);
        await_ready(p, wid);
        return ahead_want(p);
    }
    if (w->nq >= AHEAD_MAX + 1) /* not queued: its sample_fn_v2 call sends it */
        return ahead_want(p);
    char why[200];
    pticket *e = &w->q[w->nq];
    if (ticket_make(p, info, out, n_out, e, why, sizeof(why)) != STK_OK)
        return 1; /* its sample_fn_v2 call fails the same way */
    w->nq++;      /* sent with the rest of the run (queue_collect) */
    return ahead_want(p);
}

static stk_status proc_call(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                            size_t n_in, stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    (void)in;
    (void)n_in;
    ProcPoolObject *p = ctx;
    uint32_t wid = info->worker % p->n;
    pworker *w = &p->w[wid];
    uint32_t i = 0;
    while (i < w->nq && !(w->q[i].info.index == info->index && w->q[i].info.epoch == info->epoch &&
                          w->q[i].row == out[0].data))
        i++;
    if (i == w->nq) { /* not announced (a substitute, or no sample_ahead_fn): after the rest */
        if (w->nq >= AHEAD_MAX + 2) {
            snprintf(err, err_size, "process executor: too many samples in flight");
            return STK_ESTATE;
        }
        stk_status st = ticket_make(p, info, out, n_out, &w->q[i], err, err_size);
        if (st != STK_OK)
            return st;
        w->nq++;
    }
    while (!w->q[i].done)
        queue_collect(p, wid);
    pticket e = w->q[i];
    queue_remove(w, i);
    if (e.st != STK_OK) {
        snprintf(err, err_size, "%s", e.why);
        return e.st;
    }
    reply_hdr r = e.r;
    char *payload = e.payload;
    if (r.status != ST_OK) {
        /* payload: u32 text length, the text ("ValueError: message"), the pickled wrapper */
        uint32_t tl = 0;
        if (r.payload >= 4)
            memcpy(&tl, payload, 4);
        if (tl > r.payload - 4)
            tl = 0;
        snprintf(err, err_size, "%.*s", (int)tl, payload ? payload + 4 : "");
        if (!tl)
            snprintf(err, err_size, "__getitem__ failed in worker process %u", wid);
        keep_error(p, info, payload, r.payload);
        return STK_EFORMAT; /* this record's failure: on_error="skip" skips it */
    }
    int64_t *km = out[n_out - 1].data;
    km[0] = 0;
    km[1] = (int64_t)r.mask;
    if (payload) {
        uint64_t key = atomic_fetch_add(&p->key_next, 1) + 1;
        keep_blob(p, key, payload, r.payload);
        km[0] = (int64_t)key;
    }
    return STK_OK;
}

int stkpy_procpool_setup(PyObject *obj, stk_loader_opts *o)
{
    ProcPoolObject *p = (ProcPoolObject *)obj;
    if (!p->init) {
        stkpy_raise(STK_ESTATE, "ProcPool: set_init(blob, fields) before creating a loader");
        return -1;
    }
    o->sample_fn_v2 = proc_call;
    o->sample_ahead_fn = proc_ahead;
    o->sample_ctx = p;
    o->sample_fields = p->fields;
    o->n_sample_fields = p->n_fields;
    o->flags |= STK_LOADER_SHARED_RING;
    if (o->n_threads <= 0 || (uint32_t)o->n_threads != p->n) {
        stkpy_invalid("a ProcPool of %u workers needs n_threads=%u", p->n, p->n);
        return -1;
    }
    return 0;
}

/* ---- the Python object ---- */

static void pool_interrupt(ProcPoolObject *p)
{
    if (p->owner != getpid())
        return; /* shutdown() would end the parent's connections too */
    pthread_mutex_lock(&p->mu);
    p->closing = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; p->w && i < p->n; i++)
        if (p->w[i].sock >= 0)
            shutdown(p->w[i].sock, SHUT_RDWR);
    if (p->ctl >= 0) /* a thread waiting for a fork's answer (settle_locked) returns too */
        shutdown(p->ctl, SHUT_RDWR);
}

static PyObject *ProcPool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ctl",     "server", "n_workers", "timeout",    "capacity",
                             "startup", "respec", "lean",      "ready_owed", NULL};
    int ctl, server, lean = 0, ready_owed = 0;
    unsigned int n;
    double timeout = 0, startup = 0;
    Py_ssize_t cap = 4096;
    PyObject *respec = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iiI|dndOpp:ProcPool", kwlist, &ctl, &server, &n,
                                     &timeout, &cap, &startup, &respec, &lean, &ready_owed))
        return NULL;
    if (n < 1 || n > 4096 || cap < 1)
        return stkpy_invalid("ProcPool: %u workers (1..4096), capacity %zd", n, cap);
    if (respec != Py_None && !PyCallable_Check(respec))
        return stkpy_invalid("ProcPool: respec must be callable or None");
    ProcPoolObject *p = (ProcPoolObject *)type->tp_alloc(type, 0);
    if (!p)
        return NULL;
    p->owner = getpid();
    p->ctl = -1;
    p->arena_fd = -1;
    p->respec = respec != Py_None ? Py_NewRef(respec) : NULL;
    atomic_store(&p->fresh, false);
    stkpy_tstates_init(&p->ts);
    pthread_mutex_init(&p->ctl_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->tmu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->n = n;
    p->cap = (size_t)cap;
    p->timeout_ms = ms_of(timeout);
    atomic_store(&p->startup_ms, ms_of(startup));
    /* STOKER_PROC_AHEAD=k: set_ahead(k) from the start (benchmarks, tests) */
    const char *ahead = getenv("STOKER_PROC_AHEAD");
    if (ahead && *ahead) {
        long k = strtol(ahead, NULL, 10);
        atomic_store(&p->ahead, k < 0 ? 0u : k > AHEAD_MAX ? (uint32_t)AHEAD_MAX : (uint32_t)k);
    }
    p->w = PyMem_Calloc(n, sizeof(pworker));
    p->answers = PyMem_Calloc(n, sizeof(ctl_reply));
    p->blobs = PyMem_Calloc((size_t)cap, sizeof(blob));
    if (!p->w || !p->answers || !p->blobs) {
        PyErr_NoMemory();
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++)
        p->w[i].sock = -1;
    p->ctl = ctl;
    p->ready_owed = ready_owed;
    p->server = server;
    char err[512] = "";
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (uint32_t i = 0; i < n && rc == 0; i++)
        rc = spawn_worker(p, i, lean && i + 1 == n, true, true, err, sizeof(err));
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        stkpy_raise(STK_EIO, err);
        goto fail;
    }
    return (PyObject *)p;
fail:
    Py_DECREF(p);
    return NULL;
}

static void pool_close(ProcPoolObject *p)
{
    if (p->owner != getpid())
        return; /* a forked copy: its locks may be held by threads it does not have */
    pool_interrupt(p);
    for (uint32_t i = 0; p->w && i < p->n; i++)
        if (p->w[i].sock >= 0) {
            close(p->w[i].sock);
            p->w[i].sock = -1;
        }
    pthread_mutex_lock(&p->ctl_mu);
    if (p->ctl >= 0)
        close(p->ctl); /* the server kills its workers and exits */
    p->ctl = -1;
    pthread_mutex_unlock(&p->ctl_mu);
    if (p->arena_fd >= 0)
        close(p->arena_fd);
    p->arena_fd = -1;
}

static void ProcPool_dealloc(ProcPoolObject *p)
{
    if (p->owner != getpid()) { /* leak the forked copy rather than touch its locks */
        Py_TYPE(p)->tp_free((PyObject *)p);
        return;
    }
    pool_close(p);
    for (size_t i = 0; p->blobs && i < p->cap; i++)
        free(p->blobs[i].data);
    for (size_t i = 0; i < N_ERRS; i++)
        free(p->errs[i].data);
    for (uint32_t i = 0; p->w && i < p->n; i++)
        for (uint32_t k = 0; k < p->w[i].nq; k++)
            free(p->w[i].q[k].payload);
    PyMem_Free(p->blobs);
    PyMem_Free(p->answers);
    PyMem_Free(p->w);
    PyMem_Free(p->init);
    pthread_mutex_destroy(&p->ctl_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->tmu);
    pthread_cond_destroy(&p->cv);
    stkpy_tstates_free(&p->ts); /* (the loader that ran on them was closed: it held p) */
    Py_CLEAR(p->respec);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *ProcPool_set_init(ProcPoolObject *p, PyObject *args)
{
    Py_buffer v;
    PyObject *fields;
    if (!PyArg_ParseTuple(args, "y*O:set_init", &v, &fields))
        return NULL;
    stk_field f[STK_MAX_FIELDS];
    size_t nf = 0;
    char *copy = NULL;
    if (stkpy_sample_fields(fields, f, &nf) < 0)
        goto fail;
    if (!(copy = PyMem_Malloc(v.len ? (size_t)v.len : 1))) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(copy, v.buf, (size_t)v.len);
    pthread_mutex_lock(&p->mu);
    bool had = p->init != NULL;
    if (!had) {
        memcpy(p->fields, f, sizeof(f));
        p->n_fields = nf;
        p->init = copy;
        p->init_size = (size_t)v.len;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    PyBuffer_Release(&v);
    if (had) {
        PyMem_Free(copy);
        return stkpy_raise(STK_ESTATE, "ProcPool.set_init: the layout is set once");
    }
    Py_RETURN_NONE;
fail:
    PyBuffer_Release(&v);
    return NULL;
}

static PyObject *ProcPool_set_arena(ProcPoolObject *p, PyObject *args)
{
    int fd;
    unsigned long long base, size;
    if (!PyArg_ParseTuple(args, "iKK:set_arena", &fd, &base, &size))
        return NULL;
    int dup = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0); /* (-1: none until the next one) */
    if (fd >= 0 && dup < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    pthread_mutex_lock(&p->mu);
    int old = p->arena_fd;
    p->arena_fd = dup;
    p->arena_base = (uint8_t *)(uintptr_t)base;
    p->arena_size = (size_t)size;
    p->arena_id++;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (old >= 0)
        close(old);
    Py_RETURN_NONE;
}

static PyObject *ProcPool_take_objects(ProcPoolObject *p, PyObject *keys)
{
    PyObject *seq = PySequence_Fast(keys, "keys must be a sequence");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        unsigned long long key = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        char *data = NULL;
        size_t size = 0;
        pthread_mutex_lock(&p->tmu);
        blob *b = &p->blobs[key % p->cap];
        if (key && b->key == key) {
            data = b->data;
            size = b->size;
            b->data = NULL;
            b->key = 0;
        }
        pthread_mutex_unlock(&p->tmu);
        PyObject *v = data ? PyBytes_FromStringAndSize(data, (Py_ssize_t)size) : Py_NewRef(Py_None);
        free(data);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    Py_DECREF(seq);
    return out;
}

static PyObject *ProcPool_take_error(ProcPoolObject *p, PyObject *arg)
{
    unsigned long long index = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    PyObject *res = NULL;
    pthread_mutex_lock(&p->tmu);
    for (uint32_t k = 0; k < N_ERRS && !res; k++) {
        errblob *e = &p->errs[(p->err_next + N_ERRS - 1 - k) % N_ERRS];
        if (e->data && e->index == index)
            res = PyBytes_FromStringAndSize(e->data, (Py_ssize_t)e->size);
    }
    pthread_mutex_unlock(&p->tmu);
    if (!res && !PyErr_Occurred())
        Py_RETURN_NONE;
    return res;
}

/* probe(worker, blob) -> (status, payload): worker `worker` runs the first samples (the pickled
 * request `blob`) before any loader exists, and replies with what it measured (or the
 * exception). Called once, at construction, before the C loader's threads run. The worker says
 * when it starts each sample (ST_STARTED, the index in python_ns): with a timeout, a sample
 * that takes longer gets the worker killed and raises StokerIOError naming it, as a ticket
 * does; a signal handler's exception (Ctrl-C) is raised while waiting. */
static PyObject *ProcPool_probe(ProcPoolObject *p, PyObject *args)
{
    unsigned int wid;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "Iy*:probe", &wid, &v))
        return NULL;
    if (wid >= p->n || p->w[wid].sock < 0) {
        PyBuffer_Release(&v);
        return stkpy_raise(STK_ESTATE, "ProcPool.probe: no such worker");
    }
    pworker *w = &p->w[wid];
    msg_hdr h = {.op = OP_PROBE, .a = (uint64_t)v.len};
    reply_hdr r = {0};
    char *payload = NULL;
    char why[400];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = spawn_finish(p, wid, true, why, sizeof(why));
    Py_END_ALLOW_THREADS
    if (rc != 0) {
        PyBuffer_Release(&v);
        return stkpy_raise(STK_EIO, why);
    }
    int sock = w->sock;
    Py_BEGIN_ALLOW_THREADS
    rc = send_all(sock, &h, sizeof(h), -1);
    if (rc == 0)
        rc = send_all(sock, v.buf, (size_t)v.len, -1);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    bool started = false, in_start = false;
    unsigned long long index = 0;
    uint64_t deadline = 0;
    for (;;) {
        if (rc != 0)
            break;
        in_start = w->starting;
        deadline = 0;
        int64_t limit = atomic_load(&p->startup_ms);
        if (in_start && limit > 0)
            deadline = now_ms() + (uint64_t)limit;
        else if (!in_start && p->timeout_ms > 0 && started)
            deadline = now_ms() + (uint64_t)p->timeout_ms;
        if (in_start)
            atomic_fetch_add(&p->starting, 1);
        rc = recv_wait(sock, &r, sizeof(r), deadline, true);
        if (in_start)
            atomic_fetch_sub(&p->starting, 1);
        if (rc == 0 && in_start) {
            if (r.status != ST_READY || r.payload) {
                rc = -1;
                errno = EPROTO;
                break;
            }
            w->starting = false;
            continue;
        }
        if (rc == 0 && r.status == ST_STARTED && !r.payload) {
            started = true;
            index = r.python_ns;
            continue;
        }
        if (rc == 0 && r.payload) {
            if (!(payload = malloc(r.payload)))
                return PyErr_NoMemory();
            rc = recv_wait(sock, payload, r.payload, deadline, true);
        }
        break;
    }
    int err = errno;
    free(rc == 0 ? NULL : payload);
    if (rc == -2)
        return NULL;
    if (rc != 0) {
        if (err == ETIMEDOUT || err == EPROTO)
            kill(w->pid, SIGKILL);
        if (err == ETIMEDOUT && in_start) {
            char msg[300];
            snprintf(msg, sizeof(msg),
                     "worker process %u (pid %d) did not finish starting (its set-up and "
                     "worker_init_fn) within %.3g s, before the constructor read the first "
                     "samples: it was killed",
                     wid, (int)w->pid, (double)atomic_load(&p->startup_ms) / 1000.0);
            return stkpy_raise(STK_EIO, msg);
        }
        if (err == ETIMEDOUT) {
            char msg[300];
            snprintf(msg, sizeof(msg),
                     "__getitem__(%llu) did not return within %.3g s (timeout=) while the "
                     "constructor read the first samples (which fix the batch layout): worker "
                     "process %u (pid %d) was killed",
                     index, (double)p->timeout_ms / 1000.0, wid, (int)w->pid);
            return stkpy_raise(STK_EIO, msg);
        }
        char msg[200];
        snprintf(msg, sizeof(msg), "worker process %u ended while %s (see its stderr)", wid,
                 in_start ? "it started (its set-up or worker_init_fn), before it read the "
                            "first samples"
                          : "it read the first samples");
        return stkpy_raise(STK_EIO, msg);
    }
    PyObject *res = Py_BuildValue("(Iy#)", r.status, payload ? payload : "", (Py_ssize_t)r.payload);
    free(payload);
    return res;
}

static PyObject *ProcPool_set_startup(ProcPoolObject *p, PyObject *arg)
{
    double s = PyFloat_AsDouble(arg);
    if (s == -1.0 && PyErr_Occurred())
        return NULL;
    atomic_store(&p->startup_ms, ms_of(s));
    Py_RETURN_NONE;
}

static PyObject *ProcPool_set_ahead(ProcPoolObject *p, PyObject *arg)
{
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred())
        return NULL;
    if (k < 0 || k > AHEAD_MAX)
        return stkpy_invalid("ProcPool.set_ahead: 0 (chosen by the samples' time) or 1..%d, "
                             "got %ld",
                             AHEAD_MAX, k);
    atomic_store(&p->ahead, (uint32_t)k);
    Py_RETURN_NONE;
}

static PyObject *ProcPool_stats(ProcPoolObject *p, PyObject *noargs)
{
    (void)noargs;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:I,s:I}", "python_ns",
                         (unsigned long long)atomic_load(&p->py_ns), "cpu_ns",
                         (unsigned long long)atomic_load(&p->cpu_ns), "samples",
                         (unsigned long long)atomic_load(&p->samples), "deaths",
                         (unsigned long long)atomic_load(&p->deaths), "restarts",
                         (unsigned long long)atomic_load(&p->restarts), "starting",
                         (unsigned int)atomic_load(&p->starting), "ahead", ahead_want(p));
}

static PyObject *ProcPool_pids(ProcPoolObject *p, PyObject *noargs)
{
    (void)noargs;
    PyObject *out = PyList_New(p->n);
    Py_BEGIN_ALLOW_THREADS
    settle(p); /* the answers still owed to the first SPAWNs (their pids) */
    Py_END_ALLOW_THREADS
    for (uint32_t i = 0; out && i < p->n; i++) {
        const pworker *w = &p->w[i];
        long pid = w->owed ? (long)p->answers[i].value : w->sock >= 0 ? (long)w->pid : -1L;
        PyObject *v = PyLong_FromLong(pid > 0 ? pid : -1L);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *ProcPool_interrupt(ProcPoolObject *p, PyObject *noargs)
{
    (void)noargs;
    pool_interrupt(p);
    Py_RETURN_NONE;
}

static PyObject *ProcPool_close(ProcPoolObject *p, PyObject *noargs)
{
    (void)noargs;
    pool_close(p);
    Py_RETURN_NONE;
}

/* fresh_restarts(): the workers renewed their copy of a dataset the training loop changed; a
 * worker restarted from now on gets the dataset from `respec` (a pool without one keeps the
 * server's forks) as the training process has it, not the fork server's copy (the first one, which
 * a fork of the training process holds, or a lean server's kept copy): a restart must never bring
 * back the dataset as it was. */
static PyObject *ProcPool_fresh_restarts(ProcPoolObject *p, PyObject *noargs)
{
    (void)noargs;
    atomic_store(&p->fresh, true);
    Py_RETURN_NONE;
}

static PyMethodDef ProcPool_methods[] = {
    {"fresh_restarts", (PyCFunction)ProcPool_fresh_restarts, METH_NOARGS,
     "fresh_restarts(): restarted workers get the dataset from respec from now on (the training "
     "loop changed it and the workers renewed their copy), never the fork server's copy."},
    {"set_init", (PyCFunction)ProcPool_set_init, METH_VARARGS,
     "set_init(blob, fields): the pickled layout every worker receives once, before its first "
     "ticket, and the ring fields it fills [(name, kind, dtype, shape)]."},
    {"set_arena", (PyCFunction)ProcPool_set_arena, METH_VARARGS,
     "set_arena(fd, base, size): the loader's shared ring (Loader.ring_memory()); workers map "
     "it before their next ticket. fd -1: none, tickets wait for the next one (a rebuilt "
     "loader's ring may lie where the old one was)."},
    {"take_objects", (PyCFunction)ProcPool_take_objects, METH_O,
     "take_objects(keys) -> list: each key's pickled object leaves (None when not kept)."},
    {"take_error", (PyCFunction)ProcPool_take_error, METH_O,
     "take_error(index) -> bytes or None: the last failure a worker reported for that sample "
     "(u32 text length, text, pickled exception wrapper)."},
    {"probe", (PyCFunction)ProcPool_probe, METH_VARARGS,
     "probe(worker, blob) -> (status, payload): the worker runs the first samples (blob: their "
     "pickled (index, epoch, seed) list) and replies with the first sample and its measurements "
     "(status 0), or the exception (status 1); before a loader exists."},
    {"set_startup", (PyCFunction)ProcPool_set_startup, METH_O,
     "set_startup(seconds): the limit on a new worker's start-up from now on (0: none)."},
    {"set_ahead", (PyCFunction)ProcPool_set_ahead, METH_O,
     "set_ahead(k): tickets each loader thread takes at a time and keeps in flight to its "
     "worker process (1: one; 0, the default: as many as keep ~1 ms of __getitem__ queued, "
     "by the mean so far, at most 8)."},
    {"stats", (PyCFunction)ProcPool_stats, METH_NOARGS,
     "stats() -> dict: python_ns, cpu_ns, samples, deaths, restarts, starting (threads "
     "waiting for a new worker's start-up now) and ahead (tickets a thread takes at a time "
     "now)."},
    {"pids", (PyCFunction)ProcPool_pids, METH_NOARGS,
     "pids() -> list: each worker's process id (-1 while it has none)."},
    {"interrupt", (PyCFunction)ProcPool_interrupt, METH_NOARGS,
     "interrupt(): every waiting call returns (STK_ECANCELED); before the loader is closed."},
    {"close", (PyCFunction)ProcPool_close, METH_NOARGS,
     "close(): interrupt, then close the sockets; the server kills its workers and exits."},
    {NULL, NULL, 0, NULL}};

PyTypeObject StkProcPool_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.ProcPool",
    .tp_basicsize = sizeof(ProcPoolObject),
    .tp_dealloc = (destructor)ProcPool_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ProcPool(ctl, server, n_workers, timeout=0, capacity=4096, startup=0, "
              "respec=None, lean=False, ready_owed=False): worker processes forked by the server "
              "on control "
              "socket `ctl`, writing samples into the loader's shared ring "
              "(Loader(executor=...)). timeout: seconds a sample may take from its request to a "
              "started worker; startup: seconds a new worker may take to start (its set-up and "
              "worker_init_fn; 0: no limit); respec(fd): sends the pickled dataset to a worker "
              "that a lean fork server forked without it; lean: the fork server may go lean "
              "after the last worker started here; ready_owed: the server's answer whether it "
              "took the dataset (a u32 length, then why not) is still to be read on ctl.",
    .tp_methods = ProcPool_methods,
    .tp_new = ProcPool_new,
};
