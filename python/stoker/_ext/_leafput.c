/*
 * _leafput.c: a sample's fixed leaves written into its rows by a plan, from the leaves' own
 * memory, with no Python frame of stoker's (both executors' fast path).
 *
 * _collate.Layout.fast_plan() describes a sample that is a tuple, list or dict of fixed leaves
 * as a tuple: (container type, (leaf, ...), _collate._leaf_bytes, keys), each leaf (kind, Leaf,
 * type, torch dtype, shape, nbytes), keys a dict's in order (None: a tuple or list).
 * stkpy_plan_parse() reads it once into a stkpy_plan; stkpy_plan_put() then checks a sample
 * against it and hands each leaf's bytes to a writer: a worker process's pwrite into the shared
 * ring (_ticketloop.c), or a worker thread's memcpy into the slot (_pyexec.c). A torch tensor is
 * written from its data_ptr after the dtype, shape, device, grad and contiguity checks (no layout
 * check: a tensor of another layout has no data_ptr); an int or float from its value; another fixed
 * kind (an ndarray, a NumPy scalar, a bool) through _collate._leaf_bytes. Anything else (another
 * type, dtype or shape, another container, keys in another order) answers false, and the caller's
 * Python path (Layout.flatten) handles the sample whole, as before: the leaves written so far are
 * rewritten or left unread.
 *
 * A tensor's six reads go to its type's descriptors, found once by the parse (torch's
 * getset descriptors and method descriptors, read off the type and called directly): looked up
 * by name per sample they cost ~0.3 us a leaf, ~15% of a 20-float TensorDataset sample's time
 * (issue 24, fifteenth round). Only descriptors of those two kinds are taken (else the name is
 * looked up): a getset is a data descriptor, which an instance cannot shadow; the two methods
 * could be shadowed only by an attribute set on the tensor object itself.
 */
#include "_core.h"

#include <string.h>

#define PREFETCH_MAX 512 /* bytes of a tensor leaf prefetched (a larger one streams anyway) */

static PyObject *s_dtype, *s_shape, *s_is_cpu, *s_requires_grad, *s_is_contiguous, *s_data_ptr;
enum { D_DTYPE, D_IS_CPU, D_REQUIRES_GRAD, D_SHAPE, D_IS_CONTIGUOUS, D_DATA_PTR };

int stkpy_plan_names(void)
{
    struct {
        PyObject **s;
        const char *name;
    } names[] = {{&s_dtype, "dtype"},
                 {&s_shape, "shape"},
                 {&s_is_cpu, "is_cpu"},
                 {&s_requires_grad, "requires_grad"},
                 {&s_is_contiguous, "is_contiguous"},
                 {&s_data_ptr, "data_ptr"}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!*names[i].s && !(*names[i].s = PyUnicode_InternFromString(names[i].name)))
            return -1;
    return 0;
}

int stkpy_plan_parse(PyObject *plan, stkpy_plan *out)
{
    memset(out, 0, sizeof(*out));
    if (plan == Py_None)
        return 0;
    PyObject *leaves =
        PyTuple_Check(plan) && PyTuple_GET_SIZE(plan) == 4 ? PyTuple_GET_ITEM(plan, 1) : NULL;
    PyObject *keys = leaves ? PyTuple_GET_ITEM(plan, 3) : NULL;
    if (!leaves || !PyTuple_Check(leaves) || PyTuple_GET_SIZE(leaves) > STK_MAX_FIELDS ||
        !PyType_Check(PyTuple_GET_ITEM(plan, 0)) || (keys != Py_None && !PyTuple_Check(keys)) ||
        (keys != Py_None && PyTuple_GET_SIZE(keys) != PyTuple_GET_SIZE(leaves))) {
        stkpy_invalid("a fast plan is (type, leaves, leaf_bytes, keys), at most %d leaves",
                      STK_MAX_FIELDS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(leaves); i++) {
        PyObject *l = PyTuple_GET_ITEM(leaves, i);
        stkpy_plan_leaf *d = &out->leaf[i];
        if (!PyTuple_Check(l) || PyTuple_GET_SIZE(l) != 6 ||
            !PyType_Check(PyTuple_GET_ITEM(l, 2))) {
            stkpy_invalid("a fast plan's leaf is (kind, leaf, type, dtype, shape, nbytes)");
            stkpy_plan_clear(out); /* (the descriptors of the leaves before) */
            return -1;
        }
        d->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(l, 0));
        d->nbytes = PyLong_AsSize_t(PyTuple_GET_ITEM(l, 5));
        if (PyErr_Occurred()) {
            stkpy_plan_clear(out);
            return -1;
        }
        d->leaf = PyTuple_GET_ITEM(l, 1);
        d->type = (PyTypeObject *)PyTuple_GET_ITEM(l, 2);
        d->tdtype = PyTuple_GET_ITEM(l, 3);
        d->shape = PyTuple_GET_ITEM(l, 4);
        if (d->kind != STKPY_FAST_TENSOR)
            continue;
        PyObject *names[] = {s_dtype, s_is_cpu,        s_requires_grad,
                             s_shape, s_is_contiguous, s_data_ptr};
        /* (on the type, each of these is the descriptor itself) */
        for (int k = 0; k < STKPY_TENSOR_CHECKS; k++) {
            PyObject *desc = PyObject_GetAttr((PyObject *)d->type, names[k]);
            if (!desc)
                PyErr_Clear();
            bool ok = desc && (k >= D_IS_CONTIGUOUS ? Py_IS_TYPE(desc, &PyMethodDescr_Type)
                                                    : Py_IS_TYPE(desc, &PyGetSetDescr_Type));
            d->desc[k] = ok ? desc : NULL;
            if (!ok)
                Py_XDECREF(desc);
        }
    }
    out->owner = Py_NewRef(plan);
    out->type = (PyTypeObject *)PyTuple_GET_ITEM(plan, 0);
    out->leaf_bytes = PyTuple_GET_ITEM(plan, 2);
    out->keys = keys == Py_None ? NULL : keys;
    out->n = (size_t)PyTuple_GET_SIZE(leaves);
    return 0;
}

void stkpy_plan_clear(stkpy_plan *pl)
{
    for (size_t i = 0; i < STK_MAX_FIELDS; i++)
        for (int k = 0; k < STKPY_TENSOR_CHECKS; k++)
            Py_CLEAR(pl->leaf[i].desc[k]);
    Py_CLEAR(pl->owner);
    memset(pl, 0, sizeof(*pl));
}

/* Attribute k of tensor x (a new reference, or NULL with an exception): its getset's getter, or
 * its method called with no arguments, where the parse found the descriptor; else by name. */
static PyObject *tensor_get(const stkpy_plan_leaf *d, int k, PyObject *x, PyObject *name)
{
    PyObject *desc = d->desc[k];
    if (!desc)
        return k >= D_IS_CONTIGUOUS ? PyObject_CallMethodNoArgs(x, name)
                                    : PyObject_GetAttr(x, name);
    if (k >= D_IS_CONTIGUOUS)
        return PyObject_Vectorcall(desc, &x, 1, NULL);
    return Py_TYPE(desc)->tp_descr_get(desc, x, (PyObject *)Py_TYPE(x));
}

static bool attr_is(const stkpy_plan_leaf *d, int k, PyObject *x, PyObject *name, PyObject *want)
{
    PyObject *v = tensor_get(d, k, x, name);
    if (!v) {
        PyErr_Clear();
        return false;
    }
    bool same = v == want;
    Py_DECREF(v);
    return same;
}

/* A torch tensor leaf: its leaf's dtype and shape, on the CPU, strided, no grad, contiguous;
 * written from its memory. Its address is read first and its memory prefetched: a row drawn at
 * random from a large tensor is a cache miss, which the six checks then overlap (issue 24: the
 * copy of a 20-float TensorDataset row was ~0.2 us of a 3.5 us sample). A prefetch never faults,
 * so the address of a tensor the checks then refuse (on a GPU, say) is harmless. */
static bool put_tensor(const stkpy_plan_leaf *d, size_t i, PyObject *x, stkpy_put_fn put, void *ctx)
{
    PyObject *ptr = tensor_get(d, D_DATA_PTR, x, s_data_ptr);
    const char *addr = ptr ? PyLong_AsVoidPtr(ptr) : NULL;
    Py_XDECREF(ptr);
    if (!addr) {
        PyErr_Clear();
        return false;
    }
    size_t ahead = d->nbytes < PREFETCH_MAX ? d->nbytes : PREFETCH_MAX;
    for (size_t k = 0; k < ahead; k += 64)
        __builtin_prefetch(addr + k);
    if (ahead > 64) /* (an unaligned row's last line) */
        __builtin_prefetch(addr + ahead - 1);
    /* (no layout check: a tensor of another layout, sparse or MKL-DNN, has no storage, and its
     * data_ptr() raised above) */
    if (!attr_is(d, D_DTYPE, x, s_dtype, d->tdtype) ||
        !attr_is(d, D_IS_CPU, x, s_is_cpu, Py_True) ||
        !attr_is(d, D_REQUIRES_GRAD, x, s_requires_grad, Py_False))
        return false;
    PyObject *sh = tensor_get(d, D_SHAPE, x, s_shape);
    int eq = sh ? PyObject_RichCompareBool(sh, d->shape, Py_EQ) : -1;
    Py_XDECREF(sh);
    if (eq != 1) {
        PyErr_Clear();
        return false;
    }
    PyObject *c = tensor_get(d, D_IS_CONTIGUOUS, x, s_is_contiguous);
    bool contiguous = c == Py_True;
    Py_XDECREF(c);
    if (!contiguous) {
        PyErr_Clear();
        return false;
    }
    return put(ctx, i, addr, d->nbytes);
}

static bool put_leaf(const stkpy_plan *pl, size_t i, PyObject *x, stkpy_put_fn put, void *ctx)
{
    const stkpy_plan_leaf *d = &pl->leaf[i];
    if (Py_TYPE(x) != d->type)
        return false;
    if (d->kind == STKPY_FAST_TENSOR)
        return put_tensor(d, i, x, put, ctx);
    if (d->kind == STKPY_FAST_INT || d->kind == STKPY_FAST_FLOAT) {
        uint8_t b[8];
        if (d->kind == STKPY_FAST_INT) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                return false;
            }
            memcpy(b, &v, 8);
        } else {
            double v = PyFloat_AS_DOUBLE(x);
            memcpy(b, &v, 8);
        }
        return d->nbytes == 8 && put(ctx, i, b, 8);
    }
    /* another fixed kind (an ndarray, a NumPy scalar, a bool): _collate._leaf_bytes */
    PyObject *buf = PyObject_CallFunctionObjArgs(pl->leaf_bytes, d->leaf, x, NULL);
    if (!buf || buf == Py_None) {
        PyErr_Clear();
        Py_XDECREF(buf);
        return false;
    }
    Py_buffer view;
    bool ok = false;
    if (PyObject_GetBuffer(buf, &view, PyBUF_C_CONTIGUOUS) == 0) {
        ok = (size_t)view.len == d->nbytes && put(ctx, i, view.buf, d->nbytes);
        PyBuffer_Release(&view);
    } else {
        PyErr_Clear();
    }
    Py_DECREF(buf);
    return ok;
}

/* A dict sample: its keys the plan's, in the plan's order (as _collate's walk asks), each value
 * written as its leaf. */
static bool put_dict(const stkpy_plan *pl, PyObject *sample, stkpy_put_fn put, void *ctx)
{
    Py_ssize_t n = (Py_ssize_t)pl->n, pos = 0, i = 0;
    if (PyDict_GET_SIZE(sample) != n)
        return false;
    PyObject *k, *v;
    bool ok = true;
    while (ok && PyDict_Next(sample, &pos, &k, &v)) {
        if (i >= n)
            return false;
        Py_INCREF(k);
        Py_INCREF(v);
        PyObject *want = PyTuple_GET_ITEM(pl->keys, i);
        int eq = k == want ? 1 : PyObject_RichCompareBool(k, want, Py_EQ);
        if (eq < 0)
            PyErr_Clear();
        ok = eq == 1 && put_leaf(pl, (size_t)i, v, put, ctx);
        Py_DECREF(k);
        Py_DECREF(v);
        i++;
    }
    return ok && i == n;
}

bool stkpy_plan_put(const stkpy_plan *pl, PyObject *sample, stkpy_put_fn put, void *ctx)
{
    if (!pl->owner || Py_TYPE(sample) != pl->type)
        return false;
    if (pl->keys)
        return PyDict_CheckExact(sample) && put_dict(pl, sample, put, ctx);
    PyObject *seq = PySequence_Fast(sample, "");
    if (!seq) {
        PyErr_Clear();
        return false;
    }
    bool ok = (size_t)PySequence_Fast_GET_SIZE(seq) == pl->n;
    for (size_t i = 0; ok && i < pl->n; i++)
        ok = put_leaf(pl, i, PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i), put, ctx);
    Py_DECREF(seq);
    return ok;
}
