/*
 * _loader.c: stoker._core.Loader, which wraps one stk_loader; _loader_opts.c parses its arguments.
 *
 * Each batch it hands out is a Batch (_batch.c) owning one borrowed ring slot; its tensors are
 * Tensor views (_tensor.c). The C library keeps the ring alive after stk_loader_destroy until
 * the last release, so a Batch does not keep the Loader alive.
 *
 * The GIL is released around every call that may block (create, next, set_epoch, load_state,
 * destroy). While it is released the handle is pinned by `in_flight` (py-lmdb #180): close() on
 * another thread waits for it to drop to zero instead of freeing the loader under a running
 * call. `consumer_busy` enforces the C loader's one-consumer contract: a second thread that
 * calls a consumer method while one is running gets a RuntimeError.
 *
 * Ctrl-C during a blocking next: the consumer calls stk_loader_next_timeout on its own thread
 * with the GIL released, in steps of 100 ms, running PyErr_CheckSignals between steps
 * (STK_EAGAIN consumes nothing, so an interrupted call loses or skips nothing). No thread hop
 * per batch: on two loaded cores each cross-thread wake-up can wait a scheduler slice, which
 * once cost Python a third of the C loader's throughput.
 *
 * A signal never costs a batch (issue 30): every result of the C next (batch, error, end of
 * epoch) is first parked in `res_*` (req == REQ_DONE), then signal handlers run, and only if
 * none raised is it handed over. A signal that came while the batch completed (before the
 * poll step noticed it) therefore raises with the result still parked, and the next call
 * delivers it. Past this point the Python layer (loader.py) converts the batch; a
 * KeyboardInterrupt there gives it back with `_unget`, and the next call returns it again.
 *
 * The test hook `_set_debug_delay` (a slow batch on demand) runs next on a helper thread
 * instead: the consumer posts a request and waits for the answer in the same 100 ms steps.
 * `_set_debug_delay(0)` ends a delay under way, so a test can hold a batch for as long as it
 * needs and release it on an event, never on the clock.
 * When a signal handler raises, that request stays pending: its batch (or error, or end of
 * epoch) is delivered by the next call to next(). set_epoch(), load_state() and close() wait
 * for the request and discard its result (and a batch given back).
 *
 * save_state() may be called from any thread at any time, also while another thread is inside
 * next() (a checkpoint thread): it answers from `st_cur`, the state after the last result
 * handed over, which the consumer updates under `mu` as it hands each one over. A parked or
 * given-back batch was not handed over, so it does not count.
 *
 * A timeout (set_timeout, the DataLoader's `timeout`) ends a next() that waited that long with
 * a RuntimeError, as the DataLoader's does; nothing is consumed, so the next call goes on.
 *
 * Lock order: the GIL, then `mu`. `mu` is never held while acquiring the GIL.
 */
#include "_core.h"
#include "_loader_opts.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#define STATE_BUF 512
#define ERR_BUF 512
#define POLL_NS 100000000L /* 100 ms between signal checks */

enum { REQ_IDLE, REQ_PENDING, REQ_DONE };

typedef struct {
    PyObject ob_base;
    stk_loader *loader;
    PyObject *dataset_ref;   /* the Dataset it reads, when created from one */
    PyObject *transform_ref; /* the Transform it applies; outlives the C loader */
    struct stkpy_map *map;   /* map=: the per-sample callback's state; outlives the C loader */
    PyObject *exec_ref;      /* executor=: a Python Dataset's executor; outlives the C loader */
    pid_t pid;               /* the creating process: after fork() there are no workers */
    bool closing, closed;
    bool in_help;       /* _help is running a sample here (GIL held throughout) */
    bool close_after;   /* close() was called from inside it (a signal handler): done on return */
    int in_flight;      /* calls running with the GIL released (guarded by mu) */
    bool consumer_busy; /* a consumer method is running (guarded by the GIL) */
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* in_flight dropped, a request finished */
    pthread_cond_t cv_req; /* the helper: a request was posted, or stop */
    /* helper thread running stk_loader_next */
    bool helper_started, helper_stop;
    pthread_t helper;
    int req;
    stk_status res_rc;
    stk_batch *res_batch;
    char res_err[ERR_BUF];
    /* what save_state() answers: the position after the results handed over (guarded by mu) */
    char st_cur[STATE_BUF];
    char st_prev[STATE_BUF];    /* st_cur before the last batch handed over (for _unget) */
    PyObject *held;             /* a Batch given back by _unget; next() returns it (GIL) */
    char held_state[STATE_BUF]; /* st_cur once `held` is handed over again */
    unsigned debug_delay_ms;    /* test hook: the helper sleeps before each next */
    int64_t debug_signal_at;    /* test hook: SIGINT when the wait returns this batch (-1: off) */
    int64_t timeout_ns; /* next() gives up after this long (0 = waits as long as it takes) */
    PyObject *weakreflist;
} LoaderObject;

/* ---- Loader: entering and leaving calls ---- */

/* Pin the handle for a call. `consumer` calls (next, state, set_epoch, load_state) also take
 * the one-consumer flag. Returns 0, or -1 with an exception (closed, or busy). */
static int loader_enter(LoaderObject *self, bool consumer)
{
    if (self->closed || self->closing) {
        stkpy_raise(STK_ESTATE, "the loader is closed");
        return -1;
    }
    if (self->pid != stkpy_pid()) {
        stkpy_raise(STK_ESTATE, "a stoker loader cannot be used in a forked child (its worker "
                                "threads are in the parent): create the loader in the child");
        return -1;
    }
    if (consumer) {
        if (self->consumer_busy) {
            PyErr_SetString(PyExc_RuntimeError,
                            "the stoker loader is being used by another thread (one consumer at "
                            "a time)");
            return -1;
        }
        self->consumer_busy = true;
    }
    pthread_mutex_lock(&self->mu);
    self->in_flight++;
    pthread_mutex_unlock(&self->mu);
    return 0;
}

static void loader_leave(LoaderObject *self, bool consumer)
{
    if (consumer)
        self->consumer_busy = false;
    pthread_mutex_lock(&self->mu);
    if (--self->in_flight == 0)
        pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

/* ---- the next helper ---- */

static void *helper_main(void *arg)
{
    LoaderObject *self = arg; /* outlives this thread: close joins it first */
    pthread_mutex_lock(&self->mu);
    for (;;) {
        while (self->req != REQ_PENDING && !self->helper_stop)
            pthread_cond_wait(&self->cv_req, &self->mu);
        if (self->req != REQ_PENDING)
            break;
        stk_loader *L = self->loader;
        if (self->debug_delay_ms) { /* test hook; cut short by close or _set_debug_delay(0) */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += (time_t)(self->debug_delay_ms / 1000);
            ts.tv_nsec += (long)(self->debug_delay_ms % 1000) * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            while (!self->helper_stop && self->debug_delay_ms)
                if (pthread_cond_timedwait(&self->cv_req, &self->mu, &ts) == ETIMEDOUT)
                    break;
        }
        pthread_mutex_unlock(&self->mu);
        stk_batch *b = NULL;
        char err[ERR_BUF] = "";
        stk_status rc = stk_loader_next(L, &b);
        if (rc < 0) /* errmsg is valid until the next call on L: copy it now */
            snprintf(err, sizeof(err), "%s", stk_loader_errmsg(L));
        pthread_mutex_lock(&self->mu);
        self->res_rc = rc;
        self->res_batch = b;
        memcpy(self->res_err, err, sizeof(err));
        self->req = REQ_DONE;
        pthread_cond_broadcast(&self->cv);
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

/* Post a next request (GIL held, mu not held). */
static int post_request(LoaderObject *self)
{
    if (!self->helper_started) {
        int e = pthread_create(&self->helper, NULL, helper_main, self);
        if (e != 0) {
            errno = e;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        self->helper_started = true;
    }
    pthread_mutex_lock(&self->mu);
    self->req = REQ_PENDING;
    pthread_cond_signal(&self->cv_req);
    pthread_mutex_unlock(&self->mu);
    return 0;
}

/* Wait with the GIL released until no request is pending, for at most one poll step when
 * `step` is set. Returns whether no request is pending. */
static bool wait_request(LoaderObject *self, bool step)
{
    bool done;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    if (step) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += POLL_NS;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (self->req == REQ_PENDING)
            if (pthread_cond_timedwait(&self->cv, &self->mu, &ts) == ETIMEDOUT)
                break;
    } else {
        while (self->req == REQ_PENDING)
            pthread_cond_wait(&self->cv, &self->mu);
    }
    done = self->req != REQ_PENDING;
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    return done;
}

/* Wait for a pending request and throw its result away (its batch goes back to the ring).
 * Called before calls that move the consumer position. */
static void discard_request(LoaderObject *self)
{
    Py_CLEAR(self->held);
    wait_request(self, false);
    if (self->req == REQ_DONE) {
        stk_batch_release(self->res_batch);
        self->res_batch = NULL;
        self->req = REQ_IDLE;
    }
}

/* Note the position after a consumer call moved it, for save_state(); `handed` when a batch was
 * handed over (the state before it is kept for _unget). Inside loader_enter; any GIL state. */
static void state_note(LoaderObject *self, bool handed)
{
    char buf[STATE_BUF];
    if (stk_loader_save_state(self->loader, buf, sizeof(buf)) < 0)
        buf[0] = '\0';
    pthread_mutex_lock(&self->mu);
    if (handed)
        memcpy(self->st_prev, self->st_cur, STATE_BUF);
    memcpy(self->st_cur, buf, STATE_BUF);
    pthread_mutex_unlock(&self->mu);
}

/* ---- Loader: create and close ---- */

/* Loader(data, ...): the arguments become options (_loader_opts.c), then the C loader. */
static PyObject *Loader_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    stkpy_loader_args a;
    if (stkpy_loader_args_parse(args, kw, &a) < 0)
        return NULL;
    stk_loader *L = NULL;
    stk_status rc;
    char err[ERR_BUF] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_create(&a.o, &L);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    stkpy_loader_args_release(&a);
    if (rc < 0) {
        stkpy_map_free(a.map);
        return stkpy_raise(rc, err);
    }
    LoaderObject *self = (LoaderObject *)type->tp_alloc(type, 0);
    if (!self) {
        Py_BEGIN_ALLOW_THREADS
        stk_loader_destroy(L);
        Py_END_ALLOW_THREADS
        stkpy_map_free(a.map);
        return NULL;
    }
    self->loader = L;
    self->map = a.map;
    self->exec_ref = Py_XNewRef(a.exec_ref);
    self->pid = stkpy_pid();
    self->dataset_ref = Py_XNewRef(a.dataset_ref);
    if (a.dataset_ref)
        stkpy_dataset_borrow(a.dataset_ref, 1);
    self->transform_ref = Py_XNewRef(a.transform_ref);
    pthread_mutex_init(&self->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&self->cv, &ca);
    pthread_cond_init(&self->cv_req, &ca);
    pthread_condattr_destroy(&ca);
    self->req = REQ_IDLE;
    self->debug_signal_at = -1;
    state_note(self, false);
    return (PyObject *)self;
}

/* Close: refuse new calls, wait for calls in flight and the helper's request, stop the helper
 * and destroy the C loader (batches still held stay valid). GIL held on entry and exit. */
static void loader_close(LoaderObject *self)
{
    if (self->closed || !self->loader)
        return;
    if (self->pid != stkpy_pid()) {
        /* A forked child's copy: no workers or helper to stop, locks in unknown states.
         * Leave the parent's structures alone (the child's copy of the memory leaks). */
        self->loader = NULL;
        self->closed = true;
        Py_CLEAR(self->transform_ref);
        if (self->dataset_ref)
            stkpy_dataset_borrow(self->dataset_ref, -1);
        Py_CLEAR(self->dataset_ref);
        return;
    }
    self->closing = true;
    Py_CLEAR(self->held);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    /* Stop first: the helper finishes the request it has (stk_loader_next cannot be
     * cancelled; it returns once the batch is ready), then exits. */
    self->helper_stop = true;
    pthread_cond_signal(&self->cv_req);
    while (self->in_flight > 0 || self->req == REQ_PENDING)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    if (self->helper_started)
        pthread_join(self->helper, NULL);
    if (self->req == REQ_DONE) /* an interrupted next whose result was never delivered */
        stk_batch_release(self->res_batch);
    self->req = REQ_IDLE;
    stk_loader_destroy(self->loader); /* joins the workers */
    Py_END_ALLOW_THREADS
    stkpy_map_free(self->map); /* no worker runs the map function any more */
    self->map = NULL;
    Py_CLEAR(self->exec_ref); /* nor the executor */
    self->loader = NULL;
    self->helper_started = false;
    self->closed = true;
    Py_CLEAR(self->transform_ref);
    if (self->dataset_ref)
        stkpy_dataset_borrow(self->dataset_ref, -1);
    Py_CLEAR(self->dataset_ref);
}

static void Loader_dealloc(LoaderObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    loader_close(self);
    if (self->pid == stkpy_pid()) {
        /* Not in a forked child: glibc's pthread_cond_destroy waits for waiters that the
         * parent had (the helper thread), which never leave there. */
        pthread_mutex_destroy(&self->mu);
        pthread_cond_destroy(&self->cv);
        pthread_cond_destroy(&self->cv_req);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Loader_close(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (self->closing && !self->closed)
        Py_RETURN_NONE;  /* another thread is closing it */
    if (self->in_help) { /* from the sample _help runs (a signal handler): once it returned */
        self->close_after = true;
        Py_RETURN_NONE;
    }
    loader_close(self);
    Py_RETURN_NONE;
}

/* ---- Loader: consumer calls ---- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The deadline of a next() starting now (0 = none). */
static int64_t next_deadline(const LoaderObject *self)
{
    return self->timeout_ns > 0 ? now_ns() + self->timeout_ns : 0;
}

/* Whether a next() with this deadline has waited long enough; if so, raise the DataLoader's
 * error (a RuntimeError). Called outside loader_enter. */
static bool timed_out(const LoaderObject *self, int64_t deadline)
{
    if (!deadline || now_ns() < deadline)
        return false;
    char msg[160];
    snprintf(msg, sizeof(msg),
             "stoker.Loader timed out after %g seconds waiting for a batch (timeout=); nothing "
             "was consumed: the next call goes on waiting",
             (double)self->timeout_ns / 1e9);
    PyErr_SetString(PyExc_RuntimeError, msg);
    return true;
}

/* Test hook (_set_debug_signal): raise SIGINT on this, the consumer thread, when its wait
 * returned batch `debug_signal_at` (once), as if the signal had come in the poll step in which
 * the batch completed. */
static void debug_signal(LoaderObject *self, stk_status rc, const stk_batch *b)
{
    if (rc == STK_OK && self->debug_signal_at >= 0 &&
        stk_batch_number(b) == (uint64_t)self->debug_signal_at) {
        self->debug_signal_at = -1; /* once */
        raise(SIGINT);
    }
}

/* Park a result of the C next in res_* (REQ_DONE) until it is handed over. */
static void park_result(LoaderObject *self, stk_status rc, stk_batch *b, const char *err)
{
    pthread_mutex_lock(&self->mu);
    self->res_rc = rc;
    self->res_batch = b;
    if (err[0]) /* (every batch comes here: no format parse for an empty message) */
        snprintf(self->res_err, sizeof(self->res_err), "%s", err);
    else
        self->res_err[0] = '\0';
    self->req = REQ_DONE;
    pthread_mutex_unlock(&self->mu);
}

/* Run the C next on the calling thread: 100 ms timed waits with the GIL released, signals
 * checked between them; the result is parked. Inside loader_enter. Returns 0 (inside it), or
 * -1 with an exception (a signal handler raised, timeout, closed meanwhile), having left it:
 * nothing was consumed. */
static int fetch_direct(LoaderObject *self)
{
    stk_batch *b = NULL;
    stk_status rc;
    int64_t deadline = next_deadline(self);
    for (;;) {
        int64_t step_ms = POLL_NS / 1000000;
        if (deadline) {
            int64_t left_ms = (deadline - now_ns()) / 1000000;
            step_ms = left_ms < 1 ? 1 : left_ms < step_ms ? left_ms : step_ms;
        }
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_next_timeout(self->loader, &b, step_ms);
        Py_END_ALLOW_THREADS
        if (rc != STK_EAGAIN)
            break;
        /* Leave while signal handlers run: a handler may close the loader. */
        loader_leave(self, true);
        if (PyErr_CheckSignals() < 0 || timed_out(self, deadline))
            return -1;
        if (loader_enter(self, true) < 0)
            return -1;
    }
    /* errmsg is valid until the next call on the loader: copy it now */
    park_result(self, rc, b, rc < 0 ? stk_loader_errmsg(self->loader) : "");
    return 0;
}

/* The same through the helper thread (the _set_debug_delay hook): post a request unless one is
 * pending, wait for it in poll steps. Same contract as fetch_direct; a request interrupted by
 * a signal stays pending and the next call waits for it. */
static int fetch_helper(LoaderObject *self)
{
    int64_t deadline = next_deadline(self);
    for (;;) {
        pthread_mutex_lock(&self->mu);
        bool idle = self->req == REQ_IDLE;
        pthread_mutex_unlock(&self->mu);
        if (idle && post_request(self) < 0) {
            loader_leave(self, true);
            return -1;
        }
        if (wait_request(self, true))
            return 0;
        loader_leave(self, true);
        if (PyErr_CheckSignals() < 0 || timed_out(self, deadline))
            return -1;
        if (loader_enter(self, true) < 0)
            return -1;
    }
}

/* Hand over what is ready: a batch given back by _unget, else the parked result (REQ_DONE),
 * noting the new position for save_state(). Inside loader_enter; leaves it. Sets *again when
 * nothing was ready (a signal handler moved the position meanwhile). */
static PyObject *hand_over(LoaderObject *self, bool *again)
{
    *again = false;
    if (self->held) {
        PyObject *out = self->held;
        self->held = NULL;
        pthread_mutex_lock(&self->mu);
        memcpy(self->st_prev, self->st_cur, STATE_BUF);
        memcpy(self->st_cur, self->held_state, STATE_BUF);
        pthread_mutex_unlock(&self->mu);
        loader_leave(self, true);
        return out;
    }
    pthread_mutex_lock(&self->mu);
    bool done = self->req == REQ_DONE;
    stk_status rc = self->res_rc;
    stk_batch *b = self->res_batch;
    char err[ERR_BUF];
    memcpy(err, self->res_err, sizeof(err));
    if (done) {
        self->res_batch = NULL;
        self->req = REQ_IDLE;
    }
    pthread_mutex_unlock(&self->mu);
    if (!done) {
        loader_leave(self, true);
        *again = true;
        return NULL;
    }
    state_note(self, rc == STK_OK);
    loader_leave(self, true);
    if (rc == STK_OK)
        return stkpy_batch_new(b);
    if (rc == STK_END)
        return NULL;
    return stkpy_raise(rc, err);
}

/* tp_iternext: the next Batch; NULL without an exception at the end of an epoch (the next call
 * starts the next epoch); NULL with a stoker error for a failed batch (iteration may go on).
 * A signal that arrived by the time the result is ready raises instead, and the result is the
 * next call's. */
static PyObject *Loader_next(LoaderObject *self)
{
    for (;;) {
        if (loader_enter(self, true) < 0)
            return NULL;
        pthread_mutex_lock(&self->mu);
        bool ready = self->held || self->req == REQ_DONE;
        bool direct = self->req == REQ_IDLE && !self->debug_delay_ms;
        pthread_mutex_unlock(&self->mu);
        if (!ready) {
            if ((direct ? fetch_direct(self) : fetch_helper(self)) < 0)
                return NULL; /* a request left pending is delivered by the next call */
            debug_signal(self, self->res_rc, self->res_batch);
        }
        /* Signals that came meanwhile run now, with the result parked (and the loader left:
         * a handler may close it, which releases the result). */
        loader_leave(self, true);
        if (PyErr_CheckSignals() < 0)
            return NULL;
        if (loader_enter(self, true) < 0)
            return NULL;
        bool again;
        PyObject *out = hand_over(self, &again);
        if (!again)
            return out;
    }
}

/* Run samples of the batch the next next() returns here, on the consumer's thread, with
 * ThreadExec `exec` (stk_loader_help; the GIL stays held, as in the sample's __getitem__): one,
 * or with `all` until none is left to take or a signal handler closed the loader meanwhile.
 * *n: how many ran. A KeyboardInterrupt in a sample is raised with the sample still claimed:
 * the next call (or next()) runs it again. 0, or -1 with an exception. */
static int help_here(LoaderObject *self, PyObject *exec, bool all, unsigned long *n)
{
    *n = 0;
    if (loader_enter(self, true) < 0)
        return -1;
    uint32_t ran = 0;
    int r;
    self->in_help = true;
    do {
        r = stkpy_help_run(exec, self->loader, &ran);
        *n += ran;
    } while (all && r == 0 && ran && !self->close_after);
    self->in_help = false;
    loader_leave(self, true);
    if (self->close_after) {
        self->close_after = false;
        loader_close(self);
    }
    return r;
}

/* _help(exec): one sample; True when one ran, False when none was left to take. */
static PyObject *Loader_help(LoaderObject *self, PyObject *exec)
{
    unsigned long n;
    if (help_here(self, exec, false, &n) < 0)
        return NULL;
    return PyBool_FromLong(n != 0);
}

/* _load(exec): every sample left to take (the training thread loads every batch:
 * num_workers=0); how many ran. */
static PyObject *Loader_load(LoaderObject *self, PyObject *exec)
{
    unsigned long n;
    if (help_here(self, exec, true, &n) < 0)
        return NULL;
    return PyLong_FromUnsignedLong(n);
}

static PyObject *Loader_iter(PyObject *self)
{
    return Py_NewRef(self);
}

/* save_state(): any thread, any time (also while another thread is inside next(), and after
 * close: the last position); never waits. */
static PyObject *Loader_save_state(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (self->pid != stkpy_pid())
        return stkpy_raise(STK_ESTATE, "a stoker loader cannot be used in a forked child (its "
                                       "worker threads are in the parent): create the loader "
                                       "in the child");
    char buf[STATE_BUF];
    pthread_mutex_lock(&self->mu);
    memcpy(buf, self->st_cur, sizeof(buf));
    pthread_mutex_unlock(&self->mu);
    if (!buf[0])
        return stkpy_raise(STK_ELIMIT, "state does not fit its buffer");
    return PyUnicode_FromString(buf);
}

/* _unget(batch): give back the batch the last next() returned, whose delivery an exception
 * (a KeyboardInterrupt while it was converted) interrupted: the next next() returns it again,
 * and save_state() does not count it meanwhile. */
static PyObject *Loader_unget(LoaderObject *self, PyObject *batch)
{
    if (!PyObject_TypeCheck(batch, &StkBatch_Type)) {
        PyErr_SetString(PyExc_TypeError, "_unget takes a Batch");
        return NULL;
    }
    if (loader_enter(self, true) < 0)
        return NULL;
    if (self->held) {
        loader_leave(self, true);
        return stkpy_raise(STK_ESTATE, "a batch was already given back");
    }
    self->held = Py_NewRef(batch);
    pthread_mutex_lock(&self->mu);
    memcpy(self->held_state, self->st_cur, STATE_BUF);
    memcpy(self->st_cur, self->st_prev, STATE_BUF);
    pthread_mutex_unlock(&self->mu);
    loader_leave(self, true);
    Py_RETURN_NONE;
}

static PyObject *Loader_load_state(LoaderObject *self, PyObject *arg)
{
    const char *json = PyUnicode_AsUTF8(arg);
    if (!json)
        return NULL;
    if (loader_enter(self, true) < 0)
        return NULL;
    discard_request(self);
    stk_status rc;
    char err[ERR_BUF] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_load_state(self->loader, json);
    state_note(self, false);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_loader_errmsg(self->loader));
    Py_END_ALLOW_THREADS
    loader_leave(self, true);
    if (rc < 0)
        return stkpy_raise(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Loader_set_epoch(LoaderObject *self, PyObject *arg)
{
    long long e = PyLong_AsLongLong(arg);
    if (e == -1 && PyErr_Occurred())
        return NULL;
    if (e < 0)
        return stkpy_invalid("epoch %lld is negative", e);
    if (loader_enter(self, true) < 0)
        return NULL;
    discard_request(self);
    stk_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_set_epoch(self->loader, (uint64_t)e);
    state_note(self, false);
    Py_END_ALLOW_THREADS
    loader_leave(self, true);
    if (rc < 0)
        return stkpy_raise(rc, NULL);
    Py_RETURN_NONE;
}

static PyObject *Loader_set_indices(LoaderObject *self, PyObject *arg)
{
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (loader_enter(self, true) < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    discard_request(self);
    stk_status rc;
    char err[ERR_BUF] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_set_indices(self->loader, b.buf, (uint64_t)b.len / sizeof(uint64_t));
    state_note(self, false);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_loader_errmsg(self->loader));
    Py_END_ALLOW_THREADS
    loader_leave(self, true);
    PyBuffer_Release(&b);
    if (rc < 0)
        return stkpy_raise(rc, err);
    Py_RETURN_NONE;
}

/* ---- Loader: queries (any thread) ---- */

static PyObject *Loader_epoch(LoaderObject *self, void *c)
{
    (void)c;
    if (loader_enter(self, false) < 0)
        return NULL;
    uint64_t e = stk_loader_epoch(self->loader);
    loader_leave(self, false);
    return PyLong_FromUnsignedLongLong(e);
}

static Py_ssize_t Loader_len(LoaderObject *self)
{
    if (loader_enter(self, false) < 0)
        return -1;
    uint64_t n = stk_loader_n_batches(self->loader);
    loader_leave(self, false);
    return (Py_ssize_t)n;
}

static PyObject *Loader_info(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (loader_enter(self, false) < 0)
        return NULL;
    PyObject *d = stkpy_loader_info_dict(self->loader);
    loader_leave(self, false);
    return d;
}

/* ring_memory() -> (fd, base, size, pinned): the shared ring (fd -1 without one). */
static PyObject *Loader_ring_memory(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (loader_enter(self, false) < 0)
        return NULL;
    stk_ring_memory m;
    stk_ring_memory_init(&m);
    stk_loader_ring_memory(self->loader, &m);
    loader_leave(self, false);
    return Py_BuildValue("(iKKO)", m.fd, (unsigned long long)(uintptr_t)m.base,
                         (unsigned long long)m.size, m.pinned ? Py_True : Py_False);
}

static PyObject *Loader_stats(LoaderObject *self, PyObject *noargs)
{
    (void)noargs;
    if (loader_enter(self, false) < 0)
        return NULL;
    PyObject *d = stkpy_loader_stats_dict(self->loader);
    loader_leave(self, false);
    return d;
}

static PyObject *Loader_trace_write(LoaderObject *self, PyObject *arg)
{
    PyObject *bytes;
    if (!PyUnicode_FSConverter(arg, &bytes))
        return NULL;
    if (loader_enter(self, false) < 0) {
        Py_DECREF(bytes);
        return NULL;
    }
    stk_status rc;
    char err[ERR_BUF] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_trace_write(self->loader, PyBytes_AS_STRING(bytes));
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_loader_errmsg(self->loader));
    Py_END_ALLOW_THREADS
    loader_leave(self, false);
    Py_DECREF(bytes);
    if (rc < 0)
        return stkpy_raise(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Loader_closed(LoaderObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(self->closed || self->closing);
}

static PyObject *Loader_pending(LoaderObject *self, void *c)
{
    (void)c;
    pthread_mutex_lock(&self->mu);
    int r = self->req;
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(r != REQ_IDLE || self->held);
}

static PyObject *Loader_set_debug_delay(LoaderObject *self, PyObject *arg)
{
    long ms = PyLong_AsLong(arg);
    if (ms == -1 && PyErr_Occurred())
        return NULL;
    pthread_mutex_lock(&self->mu);
    self->debug_delay_ms = ms > 0 ? (unsigned)ms : 0;
    pthread_cond_broadcast(&self->cv_req); /* 0 ends a delay under way (tests wait on events) */
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

static PyObject *Loader_set_debug_signal(LoaderObject *self, PyObject *arg)
{
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    self->debug_signal_at = n < 0 ? -1 : n;
    Py_RETURN_NONE;
}

static PyObject *Loader_set_timeout(LoaderObject *self, PyObject *arg)
{
    double seconds = PyFloat_AsDouble(arg);
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    if (!(seconds >= 0) || seconds > 1e9)
        return stkpy_invalid("timeout should be a non-negative number of seconds, got %g", seconds);
    self->timeout_ns = (int64_t)(seconds * 1e9);
    Py_RETURN_NONE;
}

static PyObject *Loader_enter_ctx(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    return Py_NewRef(self);
}

static PyObject *Loader_exit_ctx(LoaderObject *self, PyObject *args)
{
    (void)args;
    loader_close(self);
    Py_RETURN_FALSE;
}

static PyMethodDef Loader_methods[] = {
    {"save_state", (PyCFunction)Loader_save_state, METH_NOARGS,
     "save_state() -> str: the resume state as JSON (position of the batches delivered so far); "
     "from any thread, at any time."},
    {"load_state", (PyCFunction)Loader_load_state, METH_O,
     "load_state(json): resume from a state (also one taken with another world size)."},
    {"set_indices", (PyCFunction)Loader_set_indices, METH_O,
     "set_indices(uint64 buffer): the epoch's index list from the current position on (an "
     "equal list keeps what is prepared)."},
    {"set_epoch", (PyCFunction)Loader_set_epoch, METH_O,
     "set_epoch(e): jump to the start of epoch e (a no-op when e is about to start)."},
    {"info", (PyCFunction)Loader_info, METH_NOARGS,
     "info() -> dict: resolved settings (n_threads, n_slots (ring slots), batch_size, rank, "
     "world, n_records, slot_size, pinned)."},
    {"stats", (PyCFunction)Loader_stats, METH_NOARGS,
     "stats() -> dict: counters and stage times (ns) since create, active_threads, depth and the "
     "autotuner's last reason (the fields of stk_loader_stats)."},
    {"ring_memory", (PyCFunction)Loader_ring_memory, METH_NOARGS,
     "ring_memory() -> (fd, base, size, pinned): the shared ring's memfd and its mapping here "
     "(fd -1 unless the loader was created with a ProcPool executor)."},
    {"trace_write", (PyCFunction)Loader_trace_write, METH_O,
     "trace_write(path): write the Chrome/Perfetto trace recorded so far (needs "
     "trace_events > 0)."},
    {"close", (PyCFunction)Loader_close, METH_NOARGS,
     "Stop the workers and free the loader; batches still held stay valid."},
    {"_help", (PyCFunction)Loader_help, METH_O,
     "_help(exec) -> bool: run one sample of the next batch on this thread with ThreadExec exec "
     "(False: none left to take)."},
    {"_load", (PyCFunction)Loader_load, METH_O,
     "_load(exec) -> int: run every sample of the next batch left to take on this thread with "
     "ThreadExec exec (a loader made with caller_loads=True); returns how many ran."},
    {"_unget", (PyCFunction)Loader_unget, METH_O,
     "_unget(batch): give back the batch the last next() returned, whose delivery an exception "
     "interrupted; the next next() returns it again and save_state() does not count it meanwhile."},
    {"_set_debug_delay", (PyCFunction)Loader_set_debug_delay, METH_O,
     "Test hook: make every next() take at least this many milliseconds (as a slow pipeline "
     "would), to test Ctrl-C during a blocking next."},
    {"_set_debug_signal", (PyCFunction)Loader_set_debug_signal, METH_O,
     "Test hook: raise SIGINT on the consumer thread when next()'s wait returns the batch of "
     "this number, once (as if the signal came in the poll step in which it completed); -1: "
     "off."},
    {"set_timeout", (PyCFunction)Loader_set_timeout, METH_O,
     "set_timeout(seconds): a next() that waits this long for its batch raises RuntimeError "
     "(nothing is consumed); 0 = wait as long as it takes (the default)."},
    {"__enter__", Loader_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Loader_exit_ctx, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Loader_getset[] = {
    {"epoch", (getter)Loader_epoch, NULL, "The epoch the next batch belongs to.", NULL},
    {"closed", (getter)Loader_closed, NULL, "Whether close() was called.", NULL},
    {"pending", (getter)Loader_pending, NULL,
     "Whether an interrupted next() left a request or a result that the next call delivers.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Loader_as_sequence = {.sq_length = (lenfunc)Loader_len};

PyTypeObject StkLoader_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)Loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Loader(data, batch_size=256, n_threads=0, n_slots=0, seed=0, rank=-1, "
              "world=-1, shuffle=False, drop_last=False, skip_corrupt=False, verify=True, "
              "pinned=False, transform=None, transform_field=None, autotune=False, "
              "trace_events=0, device=-1, pinned_limit=0, ..., strided=False, drop_tail=-1): "
              "the C loader with C semantics (n_threads 0 = one per CPU, n_slots = ring "
              "slots, 0 = default; strided: DistributedSampler's split among ranks; drop_tail "
              "1/0: drop/pad the uneven tail across ranks whatever drop_last, -1: as drop_last). "
              "next() returns a Batch; the end of an epoch is StopIteration, and the next call "
              "starts the next epoch.",
    .tp_new = Loader_new,
    .tp_iter = Loader_iter,
    .tp_iternext = (iternextfunc)Loader_next,
    .tp_methods = Loader_methods,
    .tp_getset = Loader_getset,
    .tp_as_sequence = &Loader_as_sequence,
    .tp_weaklistoffset = offsetof(LoaderObject, weakreflist),
};
