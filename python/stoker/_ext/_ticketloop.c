/*
 * _ticketloop.c: a worker process's end of its socket (WorkerPipe): the tickets read in runs, and
 * the samples that need no Python after __getitem__ written into the ring and answered here.
 *
 * python/stoker/_procpool.py's worker loop ran every ticket in Python: a recvmsg and a recv to take
 * it, the leaves' bytes (torch's .numpy()), a pwrite per leaf from Python, the reply packed and a
 * peek at the socket: ~18 us a sample on top of __getitem__, and the cache lines that code touched
 * made the next __getitem__ ~10 us slower (bench/RESULTS.md "Issue 24: the worker's ticket loop in
 * C"). WorkerPipe owns the socket's reading side: it reads whatever the socket holds into a
 * buffer (a run of tickets in one recv), and the SCM_RIGHTS descriptors that came with it are kept
 * for take_fds() (OP_ARENA's ring). run() takes tickets from the buffer and, for each, seeds (the
 * SeedWatch's before()), calls __getitem__, asks the watch whether the call drew from a generator
 * it watched, writes each fixed leaf with pwrite() straight from the tensor's memory (its
 * data_ptr) or from the number's value (the plan's, _leafput.c), writes the seed into the row's
 * object key, and holds the 32-byte reply back while more tickets wait (at most HELD_MAX;
 * _procpool.py's _Held before). It returns to Python for anything else, which Python answers as
 * before:
 *
 *   (RUN_OP, op, n, a, b, c, d)       another request (ARENA, INIT, PROBE); held replies sent
 *   (RUN_TICKET, op, index, epoch, seed, offs, stamp)     a ticket, when run() got no getitem
 *   (RUN_SAMPLE, ..., sample, py_ns, cpu_ns)  a sample the fast path does not write (an object
 *                                     leaf, another type, dtype or shape, a container that is
 *                                     not a tuple or list of fixed leaves, a failed pwrite)
 *   (RUN_AGAIN, ..., None, py_ns, cpu_ns)     the call drew from a watched generator: again, seeded
 *   None                              the socket ended (or failed): the loader went away
 *
 * and an exception __getitem__ raised propagates out of run() itself, traceback untouched, with
 * call_failed() true and ticket() naming the sample. The wire format is _procwire.h's.
 */
#include "_core.h"
#include "_procwire.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { RUN_OP = 0, RUN_TICKET = 1, RUN_SAMPLE = 2, RUN_AGAIN = 3 };
#define HELD_MAX 16
#define MAX_FDS 16
#define MAX_OFFS 1024

typedef struct {
    PyObject_HEAD int sock;
    uint8_t *in; /* bytes read and not yet taken: in[lo, hi) */
    size_t cap, lo, hi;
    int fds[MAX_FDS]; /* descriptors received, oldest first */
    int nfds;
    uint8_t *held; /* replies held back */
    size_t held_len, held_cap;
    int held_n;
    int arena; /* the ring's memfd (-1: none), owned by Python's _Arena */
    uint64_t arena_size;
    bool call_failed;        /* run() raised __getitem__'s exception */
    PyObject *last;          /* that ticket: (op, index, epoch, seed, offs, stamp, py_ns, cpu_ns) */
    uint64_t offs[MAX_OFFS]; /* the current ticket's offsets */
    stkpy_plan plan;         /* run()'s plan, parsed (_leafput.c) */
} WorkerPipe;

static uint64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void take_rights(WorkerPipe *p, struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (p->nfds < MAX_FDS)
                p->fds[p->nfds++] = fd;
            else
                close(fd);
        }
    }
}

/* Read what the socket holds into the buffer (room for at least `want` more bytes). Returns the
 * bytes read, 0 at the socket's end, -1 when nothing waits (block false), -2 with an exception
 * set (a signal handler's), -3 on a socket error. Blocking, the GIL is let go. */
static ssize_t fill(WorkerPipe *p, bool block, size_t want)
{
    if (p->lo == p->hi)
        p->lo = p->hi = 0;
    if (p->cap - p->hi < want && p->lo > 0) {
        memmove(p->in, p->in + p->lo, p->hi - p->lo);
        p->hi -= p->lo;
        p->lo = 0;
    }
    if (p->cap - p->hi < want) {
        size_t cap = p->cap;
        while (cap - p->hi < want)
            cap *= 2;
        uint8_t *in = PyMem_Realloc(p->in, cap);
        if (!in) {
            PyErr_NoMemory();
            return -2;
        }
        p->in = in;
        p->cap = cap;
    }
    for (;;) {
        union {
            char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
            struct cmsghdr align;
        } ctl;
        struct iovec iov = {p->in + p->hi, p->cap - p->hi};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl.buf)};
        ssize_t k;
        int err;
        if (block) {
            Py_BEGIN_ALLOW_THREADS
            k = recvmsg(p->sock, &mh, MSG_CMSG_CLOEXEC);
            err = errno;
            Py_END_ALLOW_THREADS
        } else {
            k = recvmsg(p->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
            err = errno;
        }
        if (k > 0) {
            take_rights(p, &mh);
            p->hi += (size_t)k;
            return k;
        }
        if (k == 0)
            return 0;
        if (err == EINTR) {
            if (PyErr_CheckSignals() < 0)
                return -2;
            continue;
        }
        if (!block && (err == EAGAIN || err == EWOULDBLOCK))
            return -1;
        return -3;
    }
}

/* At least n bytes buffered: 0, 1 at the socket's end (or an error on it), -1 with an exception. */
static int need(WorkerPipe *p, size_t n)
{
    while (p->hi - p->lo < n) {
        ssize_t k = fill(p, true, n - (p->hi - p->lo));
        if (k == -2)
            return -1;
        if (k <= 0)
            return 1;
    }
    return 0;
}

/* Whether the socket held more bytes (read into the buffer now, without blocking). */
static bool waiting_socket(WorkerPipe *p)
{
    ssize_t k = fill(p, false, 4096);
    if (k == -2)
        PyErr_Clear(); /* (no memory for a larger buffer: nothing read, so nothing waits) */
    return k > 0;
}

static int send_all(WorkerPipe *p, const uint8_t *b, size_t n)
{
    while (n) {
        ssize_t k;
        int err;
        Py_BEGIN_ALLOW_THREADS
        k = send(p->sock, b, n, MSG_NOSIGNAL);
        err = errno;
        Py_END_ALLOW_THREADS
        if (k < 0) {
            if (err == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    return -1;
                continue;
            }
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

static int held_add(WorkerPipe *p, const void *b, size_t n)
{
    if (p->held_cap - p->held_len < n) {
        size_t cap = p->held_cap ? p->held_cap : 1024;
        while (cap - p->held_len < n)
            cap *= 2;
        uint8_t *h = PyMem_Realloc(p->held, cap);
        if (!h) {
            PyErr_NoMemory();
            return -1;
        }
        p->held = h;
        p->held_cap = cap;
    }
    memcpy(p->held + p->held_len, b, n);
    p->held_len += n;
    return 0;
}

/* Send the held replies, then b[0, n). */
static int flush(WorkerPipe *p, const void *b, size_t n)
{
    if (p->held_len) {
        if (n && held_add(p, b, n) < 0)
            return -1;
        size_t len = p->held_len;
        p->held_len = 0;
        p->held_n = 0;
        return send_all(p, p->held, len);
    }
    return n ? send_all(p, b, n) : 0;
}

/* Hold a reply back; the held replies go when HELD_MAX are held or no request waits. */
static int hold(WorkerPipe *p, const void *b, size_t n)
{
    if (held_add(p, b, n) < 0)
        return -1;
    p->held_n++;
    if (p->held_n >= HELD_MAX || !(p->hi > p->lo || waiting_socket(p)))
        return flush(p, NULL, 0);
    return 0;
}

/* ---- a sample's fixed leaves straight into the ring ---- */

static bool put(WorkerPipe *p, const void *src, size_t n, uint64_t off)
{
    if (p->arena < 0 || off > p->arena_size || n > p->arena_size - off)
        return false;
    const uint8_t *s = src;
    while (n) {
        ssize_t k = pwrite(p->arena, s, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false; /* (Python's _Arena writes it, or says why) */
        s += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return true;
}

/* stkpy_put_fn: leaf i at the current ticket's offset i */
static bool put_at(void *ctx, size_t i, const void *src, size_t n)
{
    WorkerPipe *p = ctx;
    return put(p, src, n, p->offs[i]);
}

/* ---- the methods ---- */

static PyObject *offs_tuple(const uint64_t *offs, size_t n)
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; t && i < n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(offs[i]);
        if (!v) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, v);
    }
    return t;
}

/* The ticket's offsets (a tuple) and seed stamp (its offset, or None) as objects, for a ticket
 * that goes back to Python. 0, or -1 with an exception. */
static int ticket_objs(WorkerPipe *p, size_t n_offs, bool held, uint64_t stamp, PyObject **offs,
                       PyObject **stamp_obj)
{
    *stamp_obj = held ? PyLong_FromUnsignedLongLong(stamp) : Py_NewRef(Py_None);
    *offs = offs_tuple(p->offs, n_offs);
    if (*stamp_obj && *offs)
        return 0;
    Py_CLEAR(*stamp_obj);
    Py_CLEAR(*offs);
    return -1;
}

/* run(getitem, plan, before, drew): see the file's comment. plan: None (every sample goes back
 * to Python) or (container type, (leaf, ...), leaf_bytes, keys), each leaf (kind, Leaf,
 * type, torch dtype, shape, nbytes), keys a dict's (None: a tuple or list); before(seed) and
 * drew() the SeedWatch's (None: no seeding). */
static PyObject *pipe_run(WorkerPipe *p, PyObject *args)
{
    PyObject *getitem, *plan, *before, *drew;
    if (!PyArg_ParseTuple(args, "OOOO", &getitem, &plan, &before, &drew))
        return NULL;
    if (plan != (p->plan.owner ? p->plan.owner : Py_None)) {
        stkpy_plan_clear(&p->plan);
        if (stkpy_plan_parse(plan, &p->plan) < 0)
            return NULL;
    }
    p->call_failed = false;
    for (;;) {
        if (PyErr_CheckSignals() < 0)
            return NULL;
        if (p->hi == p->lo && p->held_len && flush(p, NULL, 0) < 0)
            return NULL;
        int r = need(p, sizeof(msg_hdr));
        if (r != 0) {
            if (r > 0)
                Py_RETURN_NONE;
            return NULL;
        }
        msg_hdr h;
        memcpy(&h, p->in + p->lo, sizeof h);
        if (h.op != OP_TICKET && h.op != OP_TICKET_HELD) {
            p->lo += sizeof h;
            if (flush(p, NULL, 0) < 0)
                return NULL;
            return Py_BuildValue("iIIKKKK", RUN_OP, h.op, h.n, (unsigned long long)h.a,
                                 (unsigned long long)h.b, (unsigned long long)h.c,
                                 (unsigned long long)h.d);
        }
        if (h.n > MAX_OFFS || (h.op == OP_TICKET_HELD && h.n == 0))
            Py_RETURN_NONE; /* not a ticket this loader sends: end as at a broken socket */
        r = need(p, sizeof h + 8 * (size_t)h.n);
        if (r != 0) {
            if (r > 0)
                Py_RETURN_NONE;
            return NULL;
        }
        memcpy(p->offs, p->in + p->lo + sizeof h, 8 * (size_t)h.n);
        p->lo += sizeof h + 8 * (size_t)h.n;
        if (h.op != OP_TICKET_HELD && flush(p, NULL, 0) < 0)
            return NULL;
        size_t n_offs = h.n;
        bool held = h.op == OP_TICKET_HELD;
        uint64_t stamp = 0;
        if (held)
            stamp = p->offs[--n_offs];
        uint64_t index = h.a, epoch = h.b, seed = h.c;
        PyObject *offs, *stamp_obj; /* made only for a ticket that goes back to Python */
        if (getitem == Py_None) {
            if (ticket_objs(p, n_offs, held, stamp, &offs, &stamp_obj) < 0)
                return NULL;
            return Py_BuildValue("iIKKKNN", RUN_TICKET, h.op, (unsigned long long)index,
                                 (unsigned long long)epoch, (unsigned long long)seed, offs,
                                 stamp_obj);
        }
        if (before != Py_None) {
            PyObject *s = PyLong_FromUnsignedLongLong(seed);
            PyObject *v = s ? PyObject_CallOneArg(before, s) : NULL;
            Py_XDECREF(s);
            if (!v)
                return NULL;
            Py_DECREF(v);
        }
        uint64_t t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        PyObject *i = PyLong_FromUnsignedLongLong(index);
        PyObject *sample = i ? PyObject_CallOneArg(getitem, i) : NULL;
        Py_XDECREF(i);
        uint64_t py_ns = clock_ns(CLOCK_MONOTONIC) - t0,
                 cpu_ns = clock_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (!sample) { /* __getitem__'s exception, out of run() as it is */
            PyObject *et, *ev, *tb;
            PyErr_Fetch(&et, &ev, &tb);
            Py_CLEAR(p->last);
            if (ticket_objs(p, n_offs, held, stamp, &offs, &stamp_obj) == 0)
                p->last =
                    Py_BuildValue("IKKKNNKK", h.op, (unsigned long long)index,
                                  (unsigned long long)epoch, (unsigned long long)seed, offs,
                                  stamp_obj, (unsigned long long)py_ns, (unsigned long long)cpu_ns);
            if (!p->last) {
                Py_XDECREF(et);
                Py_XDECREF(ev);
                Py_XDECREF(tb);
                return NULL;
            }
            PyErr_Restore(et, ev, tb);
            p->call_failed = true;
            return NULL;
        }
        int kind = -1;
        if (drew != Py_None) {
            PyObject *d = PyObject_CallNoArgs(drew);
            int t = d ? PyObject_IsTrue(d) : -1;
            Py_XDECREF(d);
            if (t < 0) {
                Py_DECREF(sample);
                return NULL;
            }
            if (t)
                kind = RUN_AGAIN;
        }
        if (kind < 0 && p->plan.n == n_offs && stkpy_plan_put(&p->plan, sample, put_at, p) &&
            (!held || put(p, &seed, 8, stamp))) {
            Py_DECREF(sample);
            reply_hdr rep = {ST_OK, 0, py_ns, 0, cpu_ns};
            if ((held ? hold(p, &rep, sizeof rep) : flush(p, &rep, sizeof rep)) < 0)
                return NULL;
            continue;
        }
        if (kind < 0)
            kind = RUN_SAMPLE;
        else
            Py_SETREF(sample, Py_NewRef(Py_None));
        if (ticket_objs(p, n_offs, held, stamp, &offs, &stamp_obj) < 0) {
            Py_DECREF(sample);
            return NULL;
        }
        return Py_BuildValue("iIKKKNNNKK", kind, h.op, (unsigned long long)index,
                             (unsigned long long)epoch, (unsigned long long)seed, offs, stamp_obj,
                             sample, (unsigned long long)py_ns, (unsigned long long)cpu_ns);
    }
}

static PyObject *pipe_recv(WorkerPipe *p, PyObject *arg)
{
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n < 0)
        return PyErr_Occurred() ? NULL : stkpy_invalid("WorkerPipe.recv: a negative count");
    int r = need(p, (size_t)n);
    if (r < 0)
        return NULL;
    if (r > 0) {
        PyErr_SetString(PyExc_EOFError, "the loader's socket ended");
        return NULL;
    }
    PyObject *b = PyBytes_FromStringAndSize((const char *)p->in + p->lo, n);
    if (b)
        p->lo += (size_t)n;
    return b;
}

static PyObject *pipe_take_fds(WorkerPipe *p, PyObject *noargs)
{
    (void)noargs;
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < p->nfds; i++) {
        PyObject *v = PyLong_FromLong(p->fds[i]);
        if (!v || PyList_Append(l, v) < 0)
            Py_CLEAR(l);
        Py_XDECREF(v);
    }
    if (l)
        p->nfds = 0;
    return l;
}

/* send(data) and hold(reply): `arg`'s bytes to flush() or hold(). */
static PyObject *pipe_out(WorkerPipe *p, PyObject *arg,
                          int (*out)(WorkerPipe *, const void *, size_t))
{
    Py_buffer v;
    if (PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    int r = out(p, v.buf, (size_t)v.len);
    PyBuffer_Release(&v);
    if (r < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *pipe_send(WorkerPipe *p, PyObject *arg)
{
    return pipe_out(p, arg, flush);
}

static PyObject *pipe_hold(WorkerPipe *p, PyObject *arg)
{
    return pipe_out(p, arg, hold);
}

static PyObject *pipe_set_arena(WorkerPipe *p, PyObject *args)
{
    int fd;
    unsigned long long size;
    if (!PyArg_ParseTuple(args, "iK", &fd, &size))
        return NULL;
    p->arena = fd;
    p->arena_size = size;
    Py_RETURN_NONE;
}

static PyObject *pipe_waiting_bytes(WorkerPipe *p, PyObject *noargs)
{
    (void)noargs;
    int in_socket = 0;
    if (ioctl(p->sock, FIONREAD, &in_socket) != 0)
        in_socket = 0;
    return PyLong_FromSize_t(p->hi - p->lo + (size_t)(in_socket > 0 ? in_socket : 0));
}

static PyObject *pipe_call_failed(WorkerPipe *p, PyObject *noargs)
{
    (void)noargs;
    return PyBool_FromLong(p->call_failed);
}

static PyObject *pipe_ticket(WorkerPipe *p, PyObject *noargs)
{
    (void)noargs;
    return Py_NewRef(p->last ? p->last : Py_None);
}

static int pipe_init(WorkerPipe *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"fd", NULL};
    int fd;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i", kwlist, &fd))
        return -1;
    if (!p->in) {
        p->in = PyMem_Malloc(65536);
        if (!p->in) {
            PyErr_NoMemory();
            return -1;
        }
        p->cap = 65536;
    }
    p->sock = fd;
    p->arena = -1;
    return 0;
}

static void pipe_dealloc(WorkerPipe *p)
{
    for (int i = 0; i < p->nfds; i++)
        close(p->fds[i]);
    PyMem_Free(p->in);
    PyMem_Free(p->held);
    Py_XDECREF(p->last);
    stkpy_plan_clear(&p->plan);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyMethodDef pipe_methods[] = {
    {"run", (PyCFunction)pipe_run, METH_VARARGS,
     "run(getitem, plan, before, drew) -> tuple or None: answer tickets until one needs Python "
     "(_ticketloop.c's opening comment)."},
    {"recv", (PyCFunction)pipe_recv, METH_O,
     "recv(n) -> bytes: the next n bytes (a request's payload); EOFError at the socket's end."},
    {"take_fds", (PyCFunction)pipe_take_fds, METH_NOARGS,
     "take_fds() -> list: the descriptors received since the last call (SCM_RIGHTS)."},
    {"send", (PyCFunction)pipe_send, METH_O, "send(data): the held replies, then data."},
    {"hold", (PyCFunction)pipe_hold, METH_O,
     "hold(reply): hold a reply back; the held ones go when no request waits, or at 16."},
    {"set_arena", (PyCFunction)pipe_set_arena, METH_VARARGS,
     "set_arena(fd, size): the ring's memfd, which run() writes rows into (fd -1: none; the "
     "caller owns it)."},
    {"waiting_bytes", (PyCFunction)pipe_waiting_bytes, METH_NOARGS,
     "waiting_bytes() -> int: the bytes of requests not taken yet, read or still in the socket."},
    {"call_failed", (PyCFunction)pipe_call_failed, METH_NOARGS,
     "call_failed() -> bool: whether the last run() raised __getitem__'s exception."},
    {"ticket", (PyCFunction)pipe_ticket, METH_NOARGS,
     "ticket() -> (op, index, epoch, seed, offs, stamp, py_ns, cpu_ns): the sample whose "
     "__getitem__ raised."},
    {NULL, NULL, 0, NULL}};

PyTypeObject StkWorkerPipe_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.WorkerPipe",
    .tp_basicsize = sizeof(WorkerPipe),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WorkerPipe(fd): a worker process's end of its socket to the loader (the process "
              "executor): the tickets read in runs and answered without Python between samples.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)pipe_init,
    .tp_dealloc = (destructor)pipe_dealloc,
    .tp_methods = pipe_methods,
};
