/*
 * _pyexec.c: a Python Dataset's __getitem__ run on stoker's worker threads (the thread
 * executor), and the GIL meter that tells the executors apart.
 *
 * ThreadExec(runner, fields): the loader's sample_fn_v2 takes the GIL on the worker thread,
 * calls runner(index, epoch, seed, worker, row) (python/stoker/_pydataset.py), which returns
 * (bufs, key, mask): one C-contiguous buffer per fixed leaf (None where the sample's leaf did
 * not fit the layout; a (tensor, address) pair for a torch tensor, whose .numpy() would let the
 * GIL go and take it back), and the row's object key and mask. The buffers are copied into the
 * sample's rows of the ring slot; a copy of more than COPY_NOGIL bytes runs with the GIL released
 * (the buffers stay referenced, so their memory stays put), so large samples are copied in
 * parallel. The last output field is the row's (key, mask) int64 pair.
 *
 * That runner call is a thread's first sample (it sets get_worker_info() and runs
 * worker_init_fn) and the probe's samples. After it the thread calls __getitem__ itself
 * (set_fast) and writes the leaves by the layout's plan (_leafput.c), with no Python frame of
 * stoker's: the runner's frames, its flatten and the (tensor, address) pairs cost 1.8 us a sample,
 * more than a small __getitem__ itself. The runner's _flatten takes a sample the plan does not
 * fit, and its failed() an exception, which the consumer raises as the runner's own would be.
 *
 * GilMeter(): start() (on the probed thread) starts a thread that repeatedly drops the GIL,
 * pauses and takes it again; lap() and stop() return (held_cpu_ns, free_cpu_ns) since start()
 * or the last lap: the probed thread's CPU time over the cycles whose take had to wait (it held
 * the GIL when the meter asked) and over the others (sleeping, reading, or inside
 * numpy/torch/PIL kernels that release it). CPU time, so a busy machine, which preempts the
 * threads and stretches wall time, does not move time from one side to the other (issue 24:
 * the wall-time meter read a preempted holder as a free GIL at load 18). The caller raises the
 * switch interval while it measures (_pyworker.probe_samples), so the meter never forces the
 * probed thread to hand the GIL over and wait for it to come back, a wait the load stretches.
 *
 * The same object serves the consumer's thread as a helper (stkpy_help_run: stk_loader_help with
 * the GIL already held), its runner then _pyhelp.HelpRunner; set_fast(..., here=True) lets that
 * thread take the fast path too (the training thread loading every batch at num_workers=0, where
 * get_worker_info() is None and no worker_init_fn runs, as in the DataLoader's main process).
 *
 * Lifetime: a ThreadExec outlives its C loader (the Loader object holds it until
 * stk_loader_destroy returned). At interpreter shutdown the callback refuses to take the GIL.
 */
#include "_core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#define COPY_NOGIL (256 * 1024)
/* The fast path times one __getitem__ in FAST_TIMED (stats()'s python_s is their mean times
 * the samples): two clock reads are ~2% of a sample of a few microseconds. */
#define FAST_TIMED 8

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

int stkpy_finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* ---- the GIL on a loader thread ---- */

/* PyGILState_Ensure/Release on a thread Python did not create builds a Python thread state on
 * every call and deletes it when the count drops to zero: a per-sample cost (most of a sample's
 * time on a loaded machine), and everything thread-local (threading.local, the worker info)
 * forgotten between samples. So the first take on a loader thread keeps one extra count: the
 * thread state lives on, recorded in the registry of the executor that owns the thread, and is
 * deleted by stkpy_tstates_free once the loader's threads were joined (a pthread key destructor
 * would run after glibc cleared Python's own thread key). */
static _Thread_local struct stkpy_tstates *tl_reg; /* the registry this thread's state is in */
static _Thread_local unsigned tl_calls;            /* stkpy_gil_take calls not yet dropped */

PyGILState_STATE stkpy_gil_take(struct stkpy_tstates *reg)
{
    PyGILState_STATE g = PyGILState_Ensure();
    if (tl_reg != reg) { /* first time on this thread: keep its state */
        PyGILState_Ensure();
        pthread_mutex_lock(&reg->mu);
        if (reg->n == reg->cap) {
            size_t cap = reg->cap ? 2 * reg->cap : 16;
            PyThreadState **v = realloc(reg->v, cap * sizeof(*v));
            if (v) {
                reg->v = v;
                reg->cap = cap;
            }
        }
        if (reg->n < reg->cap) /* (else: left to the interpreter, never freed) */
            reg->v[reg->n++] = PyThreadState_Get();
        pthread_mutex_unlock(&reg->mu);
        tl_reg = reg;
    }
    tl_calls++;
    return g;
}

void stkpy_gil_drop(PyGILState_STATE g)
{
    tl_calls--;
    PyGILState_Release(g);
}

bool stkpy_in_worker_call(void)
{
    return tl_calls > 0;
}

void stkpy_tstates_init(struct stkpy_tstates *reg)
{
    memset(reg, 0, sizeof(*reg));
    pthread_mutex_init(&reg->mu, NULL);
    reg->pid = getpid();
}

void stkpy_tstates_free(struct stkpy_tstates *reg)
{
    /* Once the interpreter is finalizing it has deleted every thread state but its own
     * (Py_FinalizeEx, before the modules go): these are gone already. So are they in a forked
     * child (a DataLoader's worker, say) that collects this copy: Python deleted every other
     * thread's state after the fork, and deleting them again was a double free (SIGABRT). */
    bool here = reg->pid == getpid();
    for (size_t i = 0; here && i < reg->n && !stkpy_finalizing(); i++) {
        PyThreadState_Clear(reg->v[i]);
        PyThreadState_Delete(reg->v[i]);
    }
    free(reg->v);
    reg->v = NULL;
    reg->n = reg->cap = 0;
    if (here) /* (a child's copy of the lock may have been held by a thread it does not have) */
        pthread_mutex_destroy(&reg->mu);
}

/* ---- ThreadExec ---- */

typedef struct {
    PyObject ob_base;
    PyObject *runner;
    stk_field fields[STK_MAX_FIELDS];
    size_t n_fields;
    struct stkpy_tstates ts; /* the loader threads' Python states */
    /* the fast path (set_fast): __getitem__ called from here, its leaves written by the plan */
    PyObject *getitem, *flatten, *failed;
    stkpy_plan plan;
    bool kept_done;        /* the runner's `kept` (the probe's samples) is None for good */
    bool here_fast;        /* the consumer's thread (here_call) takes the fast path too */
    uint64_t fast_samples; /* samples the fast path loaded */
    uint64_t fast_timed;   /* those of them timed (one in FAST_TIMED), and their __getitem__ */
    uint64_t fast_ns;      /* time (GIL held) */
} ThreadExecObject;

static PyObject *s_kept;
static _Thread_local ThreadExecObject *tl_fast; /* the runner ran on this thread: the fast path
                                                   may (get_worker_info and worker_init_fn set) */

/* Copy the runner's buffers into the rows (GIL held on entry and exit). */
static stk_status copy_rows(PyObject *bufs, stk_tensor *out, size_t n_fixed, char *err,
                            size_t err_size)
{
    Py_buffer views[STK_MAX_FIELDS];
    void *dst[STK_MAX_FIELDS];
    const void *src[STK_MAX_FIELDS];
    size_t len[STK_MAX_FIELDS];
    size_t n_views = 0, n_copies = 0, total = 0;
    stk_status rc = STK_OK;
    for (size_t i = 0; i < n_fixed; i++) {
        PyObject *b = PyList_GET_ITEM(bufs, (Py_ssize_t)i);
        if (b == Py_None) /* the leaf did not fit: it travels as an object */
            continue;
        if (PyTuple_CheckExact(b)) { /* (tensor, address): its out[i].size bytes, kept alive */
            void *p = PyTuple_GET_SIZE(b) == 2 ? PyLong_AsVoidPtr(PyTuple_GET_ITEM(b, 1)) : NULL;
            if (!p && out[i].size) {
                if (PyErr_Occurred())
                    PyErr_Clear();
                snprintf(err, err_size, "leaf %zu: no (tensor, address) pair", i);
                rc = STK_EFORMAT;
                goto done;
            }
            dst[n_copies] = out[i].data;
            src[n_copies] = p;
            len[n_copies++] = out[i].size;
            total += out[i].size;
            continue;
        }
        Py_buffer *v = &views[n_views];
        if (PyObject_GetBuffer(b, v, PyBUF_C_CONTIGUOUS) < 0) {
            stkpy_exception_text("__getitem__'s value", err, err_size);
            rc = STK_EFORMAT;
            goto done;
        }
        n_views++;
        if ((size_t)v->len != out[i].size) {
            snprintf(err, err_size, "leaf %zu has %zd bytes, not the layout's %zu", i, v->len,
                     out[i].size);
            rc = STK_EFORMAT;
            goto done;
        }
        dst[n_copies] = out[i].data;
        src[n_copies] = v->buf;
        len[n_copies++] = (size_t)v->len;
        total += (size_t)v->len;
    }
    if (total > COPY_NOGIL) {
        Py_BEGIN_ALLOW_THREADS
        for (size_t k = 0; k < n_copies; k++)
            if (len[k])
                memcpy(dst[k], src[k], len[k]);
        Py_END_ALLOW_THREADS
    } else {
        for (size_t k = 0; k < n_copies; k++)
            if (len[k])
                memcpy(dst[k], src[k], len[k]);
    }
done:
    for (size_t k = 0; k < n_views; k++)
        PyBuffer_Release(&views[k]);
    return rc;
}

/* The rows of a runner's answer (bufs, key, mask), which it takes (GIL held). */
static stk_status put_answer(PyObject *res, stk_tensor *out, size_t n_out, char *err,
                             size_t err_size)
{
    stk_status rc = STK_OK;
    PyObject *bufs;
    unsigned long long key, mask;
    if (!PyArg_ParseTuple(res, "O!KK", &PyList_Type, &bufs, &key, &mask) ||
        (size_t)PyList_GET_SIZE(bufs) + 1 != n_out) {
        if (PyErr_Occurred())
            PyErr_Clear();
        snprintf(err, err_size, "thread executor: the runner returned %zu-leaf rows for %zu fields",
                 PyTuple_Check(res) ? (size_t)PyTuple_GET_SIZE(res) : (size_t)0, n_out);
        rc = STK_ESTATE;
        goto done;
    }
    if ((rc = copy_rows(bufs, out, n_out - 1, err, err_size)) < 0)
        goto done;
    int64_t *km = out[n_out - 1].data;
    km[0] = (int64_t)key;
    km[1] = (int64_t)mask;
done:
    Py_DECREF(res);
    return rc;
}

/* The runner's call for one sample and the copy of its rows (GIL held). `here`: on the
 * consumer's thread (stk_loader_help), where an exception that is not an Exception (Ctrl-C's
 * KeyboardInterrupt) stays set for the caller and returns STK_ECANCELED: the sample is not
 * failed, it runs again at the next call. */
static stk_status call_runner(ThreadExecObject *x, const stk_sample_info *info, stk_tensor *out,
                              size_t n_out, char *err, size_t err_size, bool here)
{
    PyObject *res = PyObject_CallFunction(x->runner, "KKKII", (unsigned long long)info->index,
                                          (unsigned long long)info->epoch,
                                          (unsigned long long)info->seed, info->worker, info->row);
    if (!res && here && !PyErr_ExceptionMatches(PyExc_Exception)) {
        snprintf(err, err_size, "interrupted");
        return STK_ECANCELED;
    }
    if (!res) {
        stkpy_exception_text(NULL, err, err_size);
        return STK_EFORMAT; /* this record's failure: on_error="skip" skips it */
    }
    return put_answer(res, out, n_out, err, err_size);
}

/* ---- the fast path: no Python frame of stoker's between samples ---- */

/* stkpy_put_fn: leaf i into its row of the slot (a large one with the GIL let go: the sample
 * holds its memory meanwhile) */
static bool put_row(void *ctx, size_t i, const void *src, size_t n)
{
    stk_tensor *out = ctx;
    if (out[i].size != n)
        return false;
    if (n > COPY_NOGIL) {
        Py_BEGIN_ALLOW_THREADS
        memcpy(out[i].data, src, n);
        Py_END_ALLOW_THREADS
    } else if (n) {
        memcpy(out[i].data, src, n);
    }
    return true;
}

/* Whether this sample may take the fast path: the runner ran on this thread before (its first
 * call sets get_worker_info() and runs worker_init_fn; a thread whose worker_init_fn failed
 * never gets here) or `here` is the consumer's thread with here_fast set, and the probe did not
 * load the sample already (the runner hands those out in epoch 0). */
static bool fast_allowed(ThreadExecObject *x, const stk_sample_info *info, bool here)
{
    if (!x->getitem || (here ? !x->here_fast : tl_fast != x))
        return false;
    if (x->kept_done)
        return true;
    PyObject *k = PyObject_GetAttr(x->runner, s_kept);
    bool ok = false;
    if (!k) {
        PyErr_Clear();
    } else if (k == Py_None) {
        ok = x->kept_done = true;
    } else if (info->epoch == 0 &&
               PyDict_CheckExact(k)) { /* (a later epoch: the runner drops it) */
        PyObject *i = PyLong_FromUnsignedLongLong(info->index);
        ok = i && PyDict_Contains(k, i) == 0;
        Py_XDECREF(i);
        if (PyErr_Occurred())
            PyErr_Clear();
    }
    Py_XDECREF(k);
    return ok;
}

/* __getitem__ called here and its leaves written by the plan; a sample the plan does not fit goes
 * through the runner's _flatten, an exception to the runner's failed() (the consumer's error
 * names the sample and the thread, as the runner's own call would) (GIL held). `here`: on the
 * consumer's thread, where an exception that is not an Exception stays set and returns
 * STK_ECANCELED, as in call_runner. */
static stk_status fast_call(ThreadExecObject *x, const stk_sample_info *info, stk_tensor *out,
                            size_t n_out, char *err, size_t err_size, bool here)
{
    bool timed = x->fast_samples++ % FAST_TIMED == 0;
    uint64_t t0 = timed ? now_ns() : 0;
    PyObject *i = PyLong_FromUnsignedLongLong(info->index);
    PyObject *sample = i ? PyObject_CallOneArg(x->getitem, i) : NULL;
    Py_XDECREF(i);
    if (timed) {
        x->fast_ns += now_ns() - t0;
        x->fast_timed++;
    }
    if (!sample && here && !PyErr_ExceptionMatches(PyExc_Exception)) {
        snprintf(err, err_size, "interrupted");
        return STK_ECANCELED;
    }
    if (!sample) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        PyErr_NormalizeException(&et, &ev, &tb);
        if (tb && ev)
            PyException_SetTraceback(ev, tb);
        PyObject *r = PyObject_CallFunction(
            x->failed, "KKI(OOO)", (unsigned long long)info->index, (unsigned long long)info->epoch,
            info->worker, et ? et : Py_None, ev ? ev : Py_None, tb ? tb : Py_None);
        if (r)
            Py_DECREF(r);
        else
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        stkpy_exception_text(NULL, err, err_size);
        return STK_EFORMAT;
    }
    if (x->plan.n + 1 == n_out && stkpy_plan_put(&x->plan, sample, put_row, out)) {
        Py_DECREF(sample);
        int64_t *km = out[n_out - 1].data;
        km[0] = km[1] = 0;
        return STK_OK;
    }
    PyObject *res = PyObject_CallOneArg(x->flatten, sample);
    Py_DECREF(sample);
    if (!res) {
        stkpy_exception_text("the thread executor's _flatten", err, err_size);
        return STK_EFORMAT;
    }
    return put_answer(res, out, n_out, err, err_size);
}

static stk_status thread_call(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                              size_t n_in, stk_tensor *out, size_t n_out, char *err,
                              size_t err_size)
{
    (void)in;
    (void)n_in;
    ThreadExecObject *x = ctx;
    if (stkpy_finalizing()) {
        snprintf(err, err_size, "__getitem__ not run: the interpreter is shutting down");
        return STK_ECANCELED;
    }
    PyGILState_STATE g = stkpy_gil_take(&x->ts);
    stk_status rc;
    if (fast_allowed(x, info, false)) {
        rc = fast_call(x, info, out, n_out, err, err_size, false);
    } else {
        rc = call_runner(x, info, out, n_out, err, err_size, false);
        if (rc == STK_OK)
            tl_fast = x;
    }
    stkpy_gil_drop(g);
    return rc;
}

/* stk_loader_help's callback: the consumer's thread, which holds the GIL already. */
static stk_status here_call(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                            size_t n_in, stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    (void)in;
    (void)n_in;
    ThreadExecObject *x = ctx;
    if (fast_allowed(x, info, true))
        return fast_call(x, info, out, n_out, err, err_size, true);
    return call_runner(ctx, info, out, n_out, err, err_size, true);
}

int stkpy_help_run(PyObject *exec, stk_loader *L, uint32_t *ran)
{
    if (!PyObject_TypeCheck(exec, &StkThreadExec_Type)) {
        PyErr_Format(PyExc_TypeError, "_help: a ThreadExec, not %.100s", Py_TYPE(exec)->tp_name);
        return -1;
    }
    stk_status rc = stk_loader_help(L, here_call, exec, ran);
    if (rc == STK_ECANCELED && PyErr_Occurred())
        return -1; /* the KeyboardInterrupt, raised to the caller */
    if (rc < 0) {
        stkpy_raise(rc, stk_loader_errmsg(L));
        return -1;
    }
    return 0;
}

static PyObject *ThreadExec_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"runner", "fields", NULL};
    PyObject *runner, *fields;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:ThreadExec", kwlist, &runner, &fields))
        return NULL;
    if (!PyCallable_Check(runner)) {
        PyErr_SetString(PyExc_TypeError, "ThreadExec: runner must be callable");
        return NULL;
    }
    ThreadExecObject *self = (ThreadExecObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    stkpy_tstates_init(&self->ts);
    if (stkpy_sample_fields(fields, self->fields, &self->n_fields) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->runner = Py_NewRef(runner);
    return (PyObject *)self;
}

static void ThreadExec_dealloc(ThreadExecObject *self)
{
    /* the loaders using it were destroyed (their threads joined) before they let it go */
    stkpy_tstates_free(&self->ts);
    Py_CLEAR(self->runner);
    Py_CLEAR(self->getitem);
    Py_CLEAR(self->flatten);
    Py_CLEAR(self->failed);
    stkpy_plan_clear(&self->plan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_fast(getitem, plan, flatten, failed): before the loader starts (its threads read these
 * without a lock) */
static PyObject *ThreadExec_set_fast(ThreadExecObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"getitem", "plan", "flatten", "failed", "here", NULL};
    PyObject *getitem, *plan, *flatten, *failed;
    int here = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|p:set_fast", kwlist, &getitem, &plan, &flatten,
                                     &failed, &here))
        return NULL;
    if (!PyCallable_Check(getitem) || !PyCallable_Check(flatten) || !PyCallable_Check(failed))
        return stkpy_invalid("ThreadExec.set_fast: getitem, flatten and failed are callables");
    if (!s_kept && !(s_kept = PyUnicode_InternFromString("kept")))
        return NULL;
    stkpy_plan pl;
    if (stkpy_plan_parse(plan, &pl) < 0)
        return NULL;
    stkpy_plan_clear(&self->plan);
    self->plan = pl;
    Py_XSETREF(self->getitem, Py_NewRef(getitem));
    Py_XSETREF(self->flatten, Py_NewRef(flatten));
    Py_XSETREF(self->failed, Py_NewRef(failed));
    self->here_fast = here;
    Py_RETURN_NONE;
}

static PyObject *ThreadExec_fast_counts(ThreadExecObject *self, PyObject *noargs)
{
    (void)noargs;
    double ns = self->fast_timed
                    ? (double)self->fast_ns * (double)self->fast_samples / (double)self->fast_timed
                    : 0.0;
    return Py_BuildValue("KK", (unsigned long long)self->fast_samples, (unsigned long long)ns);
}

static PyMethodDef ThreadExec_methods[] = {
    {"set_fast", (PyCFunction)(void (*)(void))ThreadExec_set_fast, METH_VARARGS | METH_KEYWORDS,
     "set_fast(getitem, plan, flatten, failed, here=False): the worker threads call getitem "
     "themselves and write the leaves by plan (Layout.fast_plan(), or None), once the runner ran "
     "on the thread and the probe's samples are out; flatten(sample) -> (bufs, key, mask) takes a "
     "sample the plan does not fit, failed(index, epoch, worker, exc_info) hears of an "
     "exception. here: the consumer's thread (Loader._help/_load) takes the same path."},
    {"fast_counts", (PyCFunction)ThreadExec_fast_counts, METH_NOARGS,
     "fast_counts() -> (samples, ns): the samples the fast path loaded and their __getitem__ "
     "time (estimated from the one in 8 timed)."},
    {NULL, NULL, 0, NULL}};

PyTypeObject StkThreadExec_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.ThreadExec",
    .tp_basicsize = sizeof(ThreadExecObject),
    .tp_dealloc = (destructor)ThreadExec_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ThreadExec(runner, fields): a Python Dataset's __getitem__ on the loader's worker "
              "threads (Loader(executor=...)); runner(index, epoch, seed, worker, row) -> (bufs, "
              "key, mask).",
    .tp_new = ThreadExec_new,
    .tp_methods = ThreadExec_methods,
};

int stkpy_exec_setup(PyObject *exec, stk_loader_opts *o)
{
    if (PyObject_TypeCheck(exec, &StkProcPool_Type))
        return stkpy_procpool_setup(exec, o);
    if (!PyObject_TypeCheck(exec, &StkThreadExec_Type)) {
        PyErr_Format(PyExc_TypeError, "executor must be a ThreadExec or a ProcPool, not %.100s",
                     Py_TYPE(exec)->tp_name);
        return -1;
    }
    ThreadExecObject *x = (ThreadExecObject *)exec;
    o->sample_fn_v2 = thread_call;
    o->sample_ctx = x;
    o->sample_fields = x->fields;
    o->n_sample_fields = x->n_fields;
    return 0;
}

/* ---- GilMeter ---- */

typedef struct {
    PyObject ob_base;
    pthread_t thread;
    bool running;
    atomic_bool stop;
    clockid_t probe_clock;     /* the CPU clock of the thread that called start() */
    atomic_bool asking;        /* the meter thread is about to ask for the GIL the first time */
    uint64_t c0;               /* the probed thread's CPU time classified up to (GIL held) */
    uint64_t held_ns, free_ns; /* since start() or the last lap() (GIL held) */
} GilMeterObject;

#define METER_PAUSE_NS 50000  /* the gap in which the probed thread may take the GIL */
#define METER_WAITED_NS 20000 /* a take slower than this found the GIL held */

static uint64_t cpu_ns(clockid_t c)
{
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Classify the probed thread's CPU time since the last classification as held or free. Called
 * with the GIL held (by the meter after a take, or by the probed thread in lap()/stop()), so
 * the two never race. */
static void meter_classify(GilMeterObject *m, bool held)
{
    uint64_t c1 = cpu_ns(m->probe_clock);
    uint64_t d = c1 > m->c0 ? c1 - m->c0 : 0;
    m->c0 = c1;
    if (held)
        m->held_ns += d;
    else
        m->free_ns += d;
}

/* Each cycle: drop the GIL, pause, take it again. The probed thread's CPU time over the cycle
 * counts as GIL-held when the take had to wait (the GIL was held when the meter asked: a
 * thread running bytecode keeps it), else as GIL-free (sleeping, reading, or in a kernel that
 * released it). CPU time, not wall time, and a classification, not a duration: a busy machine
 * that preempts either thread stretches the cycles but does not move CPU time from one side to
 * the other. */
static void *meter_main(void *arg)
{
    GilMeterObject *m = arg;
    const struct timespec pause = {0, METER_PAUSE_NS};
    atomic_store(&m->asking, true);
    while (!atomic_load(&m->stop)) {
        uint64_t a = now_ns();
        PyGILState_STATE g = PyGILState_Ensure();
        uint64_t b = now_ns();
        if (!atomic_load(&m->stop)) /* (stop() classified the rest itself) */
            meter_classify(m, b - a > METER_WAITED_NS);
        PyGILState_Release(g);
        nanosleep(&pause, NULL);
    }
    return NULL;
}

static PyObject *GilMeter_start(GilMeterObject *m, PyObject *noargs)
{
    (void)noargs;
    if (m->running)
        Py_RETURN_NONE;
    if (pthread_getcpuclockid(pthread_self(), &m->probe_clock) != 0)
        return PyErr_Format(PyExc_RuntimeError, "GilMeter: no CPU clock for this thread");
    atomic_store(&m->stop, false);
    atomic_store(&m->asking, false);
    m->held_ns = m->free_ns = 0;
    m->c0 = cpu_ns(m->probe_clock);
    if (pthread_create(&m->thread, NULL, meter_main, m) != 0)
        return PyErr_Format(PyExc_RuntimeError, "GilMeter: cannot start its thread");
    m->running = true;
    /* Return once the meter is about to ask for the GIL (held here), so that a call shorter
     * than the thread's start on a busy machine is still classified. */
    while (!atomic_load(&m->asking))
        sched_yield();
    Py_RETURN_NONE;
}

/* (held_ns, free_ns) since start() or the last lap, then zeroed. The CPU time since the meter's
 * last take counts as held: the caller holds the GIL now, and it is at most one cycle. */
static PyObject *meter_lap(GilMeterObject *m)
{
    meter_classify(m, true);
    PyObject *r =
        Py_BuildValue("(KK)", (unsigned long long)m->held_ns, (unsigned long long)m->free_ns);
    m->held_ns = m->free_ns = 0;
    return r;
}

/* Called with the GIL held, from the probed thread or from another (the constructor releasing a
 * probe it stopped waiting for): the first call joins the meter's thread, a later or concurrent
 * one returns at once (running is cleared before the GIL is let go for the join). */
static void meter_stop(GilMeterObject *m)
{
    if (!m->running)
        return;
    m->running = false;
    atomic_store(&m->stop, true);
    pthread_t thread = m->thread;
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
}

static PyObject *GilMeter_stop(GilMeterObject *m, PyObject *noargs)
{
    (void)noargs;
    if (!m->running)
        return Py_BuildValue("(KK)", 0ULL, 0ULL);
    PyObject *r = meter_lap(m);
    meter_stop(m);
    return r;
}

/* lap(): what stop() returns, since start() or the last lap, with the meter left running (one
 * thread measures a run of calls: no thread start and join per call). */
static PyObject *GilMeter_lap(GilMeterObject *m, PyObject *noargs)
{
    (void)noargs;
    if (!m->running)
        return Py_BuildValue("(KK)", 0ULL, 0ULL);
    return meter_lap(m);
}

static void GilMeter_dealloc(GilMeterObject *m)
{
    meter_stop(m);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyMethodDef GilMeter_methods[] = {
    {"start", (PyCFunction)GilMeter_start, METH_NOARGS,
     "start(): begin classifying this thread's CPU time as GIL-held or GIL-free."},
    {"stop", (PyCFunction)GilMeter_stop, METH_NOARGS,
     "stop() -> (held_cpu_ns, free_cpu_ns): the CPU time of the thread that called start() "
     "since start() or the last lap(), split by whether it held the GIL (the meter's takes had "
     "to wait) or not."},
    {"lap", (PyCFunction)GilMeter_lap, METH_NOARGS,
     "lap() -> (held_cpu_ns, free_cpu_ns): the same, the meter left running."},
    {NULL, NULL, 0, NULL}};

PyTypeObject StkGilMeter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.GilMeter",
    .tp_basicsize = sizeof(GilMeterObject),
    .tp_dealloc = (destructor)GilMeter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "GilMeter(): splits the calling thread's CPU time into GIL-held and GIL-free.",
    .tp_methods = GilMeter_methods,
    .tp_new = PyType_GenericNew,
};

PyObject *stkpy_sample_seed(PyObject *self, PyObject *args)
{
    (void)self;
    unsigned long long seed, epoch, index;
    if (!PyArg_ParseTuple(args, "KKK:sample_seed", &seed, &epoch, &index))
        return NULL;
    return PyLong_FromUnsignedLongLong(stk_sample_seed(seed, epoch, index));
}
