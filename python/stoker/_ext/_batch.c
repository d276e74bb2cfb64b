/*
 * _batch.c: stoker._core.Batch, one borrowed ring slot (stk_batch) of a Loader.
 *
 * A Batch releases its slot in tp_dealloc. Its tensors are Tensor views (_tensor.c) that hold a
 * reference to the Batch. The C library keeps the ring alive after stk_loader_destroy until the
 * last release, so a Batch does not keep the Loader alive.
 */
#include "_core.h"

typedef struct {
    PyObject ob_base;
    stk_batch *batch;
    pid_t pid;
    uint32_t size;
    uint64_t epoch, number;
    PyObject *weakreflist;
} BatchObject;

/* ---- Batch ---- */

PyObject *stkpy_batch_new(stk_batch *b)
{
    BatchObject *self = PyObject_New(BatchObject, &StkBatch_Type);
    if (!self) {
        stk_batch_release(b);
        return NULL;
    }
    self->batch = b;
    self->pid = stkpy_pid();
    self->size = stk_batch_n_samples(b);
    self->epoch = stk_batch_epoch(b);
    self->number = stk_batch_number(b);
    self->weakreflist = NULL;
    return (PyObject *)self;
}

static void Batch_dealloc(BatchObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    /* Thread-safe, and valid after the loader is destroyed. Not in a forked child: the
     * ring's lock may have been held by a thread that does not exist there. */
    if (self->pid == stkpy_pid())
        stk_batch_release(self->batch);
    PyObject_Free(self);
}

static PyObject *Batch_n_samples(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(self->size);
}

static PyObject *Batch_epoch(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->epoch);
}

static PyObject *Batch_number(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(self->number);
}

static Py_ssize_t Batch_len(BatchObject *self)
{
    return (Py_ssize_t)self->size;
}

static PyObject *Batch_device(BatchObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(stk_batch_device(self->batch));
}

/* The lengths of a bytes field as a Tensor, or None (new references; NULL on error). */
static PyObject *lengths_tensor(BatchObject *self, const stk_tensor *t)
{
    if (!t->lengths)
        return Py_NewRef(Py_None);
    char lname[STK_MAX_NAME + 8];
    snprintf(lname, sizeof(lname), "%s_lengths", t->name);
    return stkpy_tensor_new((PyObject *)self, lname, STK_DTYPE_INT64, (void *)t->lengths, 1,
                            t->shape);
}

/* One entry of tensors(): (name, Tensor, lengths), or of device_tensors(): (name, device
 * address, shape, dtype name, lengths). */
static PyObject *tensor_item(BatchObject *self, const stk_tensor *t, bool device)
{
    PyObject *lv = lengths_tensor(self, t);
    if (!lv)
        return NULL;
    PyObject *item = NULL;
    if (!device) {
        PyObject *tv =
            stkpy_tensor_new((PyObject *)self, t->name, t->dtype, t->data, (int)t->ndim, t->shape);
        if (tv)
            item = Py_BuildValue("(sNO)", t->name, tv, lv);
    } else {
        PyObject *shape = PyTuple_New((Py_ssize_t)t->ndim);
        for (uint32_t d = 0; shape && d < t->ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(t->shape[d]));
        if (shape)
            item = Py_BuildValue("(sNNsO)", t->name, PyLong_FromVoidPtr(t->data), shape,
                                 stkpy_dtype_name(t->dtype), lv);
    }
    Py_DECREF(lv);
    return item;
}

static PyObject *tensor_list(BatchObject *self, bool device)
{
    size_t n = stk_batch_n_tensors(self->batch);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        stk_tensor t;
        stk_tensor_init(&t);
        stk_status rc = device ? stk_batch_device_tensor(self->batch, i, &t)
                               : stk_batch_tensor(self->batch, i, &t);
        PyObject *item = NULL;
        if (rc < 0)
            stkpy_raise(rc, rc == STK_ENOTSUP ? "the batch is not on a device"
                                              : "tensor index out of range");
        else
            item = tensor_item(self, &t, device);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

/* tensors() -> list of (name, Tensor, lengths Tensor or None), in the batch's order. */
static PyObject *Batch_tensors(BatchObject *self, PyObject *noargs)
{
    (void)noargs;
    return tensor_list(self, false);
}

/* device_tensors() -> list of (name, device address, shape, dtype name, lengths Tensor or None):
 * the batch's tensors on its device (the lengths of bytes fields stay on the host). */
static PyObject *Batch_device_tensors(BatchObject *self, PyObject *noargs)
{
    (void)noargs;
    return tensor_list(self, true);
}

/* from_numpy(asarray(view)), or asarray(view) where from_numpy is NULL; takes `view` (NULL: an
 * exception is set, returned as NULL). */
static PyObject *converted(PyObject *view, PyObject *asarray, PyObject *from_numpy)
{
    if (!view)
        return NULL;
    PyObject *a = PyObject_CallOneArg(asarray, view);
    Py_DECREF(view);
    if (!a || !from_numpy)
        return a;
    PyObject *x = PyObject_CallOneArg(from_numpy, a);
    Py_DECREF(a);
    return x;
}

/* as_dict(cls, asarray, from_numpy): the host batch as a `cls` (a dict subclass, made without
 * calling its __init__) of from_numpy(asarray(view)) per tensor (from_numpy None: the arrays),
 * in the order of tensors(); None when a tensor needs the general conversion (a bytes field,
 * which adds its lengths, or bfloat16). The Loader's per-batch path (loader.py _next_batch):
 * from C, the calls cost a fraction of the same loop in Python (bench/RESULTS.md, issue 26
 * tok3). */
static PyObject *Batch_as_dict(BatchObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) ||
        !PyType_IsSubtype((PyTypeObject *)args[0], &PyDict_Type)) {
        PyErr_SetString(PyExc_TypeError, "as_dict(cls, asarray, from_numpy): cls a dict subclass");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *asarray = args[1], *from_numpy = args[2] == Py_None ? NULL : args[2];
    size_t n = stk_batch_n_tensors(self->batch);
    stk_tensor t[STK_MAX_FIELDS + 1]; /* the fields and the index */
    if (n > STK_MAX_FIELDS + 1)
        Py_RETURN_NONE;
    for (size_t i = 0; i < n; i++) {
        stk_tensor_init(&t[i]);
        if (stk_batch_tensor(self->batch, i, &t[i]) < 0 || t[i].lengths ||
            t[i].dtype == STK_DTYPE_BFLOAT16)
            Py_RETURN_NONE;
    }
    PyObject *empty = PyTuple_New(0);
    PyObject *out = empty ? cls->tp_new(cls, empty, NULL) : NULL;
    Py_XDECREF(empty);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *x = converted(stkpy_tensor_new((PyObject *)self, t[i].name, t[i].dtype, t[i].data,
                                                 (int)t[i].ndim, t[i].shape),
                                asarray, from_numpy);
        if (!x || PyDict_SetItemString(out, t[i].name, x) < 0)
            Py_CLEAR(out);
        Py_XDECREF(x);
    }
    return out;
}

/* The rows of field `i` as the view [n, *shape] of `dtype` (a new Tensor), where their bytes
 * fit; else NULL with a TypeError. */
static PyObject *leaf_view(BatchObject *self, size_t i, PyObject *spec)
{
    stk_tensor t;
    stk_tensor_init(&t);
    stk_dtype dt;
    PyObject *shape =
        PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 2 ? PyTuple_GET_ITEM(spec, 1) : NULL;
    if (!shape || !PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > STK_MAX_DIMS ||
        stk_batch_tensor(self->batch, i, &t) < 0 || t.ndim != 2 || t.dtype != STK_DTYPE_UINT8) {
        PyErr_SetString(PyExc_TypeError, "leaf_views: a leaf is (dtype name, shape) of a uint8 "
                                         "[n, nbytes] field");
        return NULL;
    }
    if (stkpy_parse_dtype(PyTuple_GET_ITEM(spec, 0), &dt) < 0)
        return NULL;
    int64_t dims[STK_MAX_DIMS + 1] = {t.shape[0]};
    int64_t bytes = (int64_t)stk_dtype_size(dt);
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++) {
        dims[d + 1] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        bytes *= dims[d + 1];
    }
    if (PyErr_Occurred())
        return NULL;
    if (bytes != t.shape[1]) {
        PyErr_Format(PyExc_TypeError, "leaf_views: field %zu holds %lld bytes a row, not %lld", i,
                     (long long)t.shape[1], (long long)bytes);
        return NULL;
    }
    return stkpy_tensor_new((PyObject *)self, t.name, dt, t.data, (int)PyTuple_GET_SIZE(shape) + 1,
                            dims);
}

/* leaf_views(leaves, asarray, from_numpy): a Python Dataset's batch whose rows all fit its
 * layout (_pydataset's per-batch path for fixed leaves only): [from_numpy(asarray(view))] of
 * fields 0.. seen as `leaves` ((dtype name, shape), ...) says, or None when a row has an object
 * key or mask (the int64 [n, 2] field after the leaves'): that batch takes the general path.
 * From C, its numpy calls cost a third of the Python path's (issue 24: ~14 us a batch, 0.2 us of
 * a tiny TensorDataset sample's ~3). */
static PyObject *Batch_leaf_views(BatchObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "leaf_views(leaves, asarray, from_numpy)");
        return NULL;
    }
    size_t n = (size_t)PyTuple_GET_SIZE(args[0]);
    stk_tensor km;
    stk_tensor_init(&km);
    if (stk_batch_tensor(self->batch, n, &km) < 0 || km.dtype != STK_DTYPE_INT64 || km.ndim != 2 ||
        km.shape[1] != 2) {
        PyErr_SetString(PyExc_TypeError, "leaf_views: no int64 [n, 2] field after the leaves");
        return NULL;
    }
    const int64_t *v = km.data;
    for (int64_t r = 0; r < 2 * km.shape[0]; r++)
        if (v[r])
            Py_RETURN_NONE;
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *x = converted(leaf_view(self, i, PyTuple_GET_ITEM(args[0], (Py_ssize_t)i)),
                                args[1], args[2] == Py_None ? NULL : args[2]);
        if (!x)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, x);
    }
    return out;
}

/* A CUstream handle from a Python int (torch.cuda.Stream.cuda_stream); 0 = the default stream. */
static int stream_arg(PyObject *arg, void **out)
{
    *out = arg == Py_None ? NULL : PyLong_AsVoidPtr(arg);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *Batch_device_wait(BatchObject *self, PyObject *arg)
{
    void *stream;
    if (stream_arg(arg, &stream) < 0)
        return NULL;
    stk_status rc = stk_batch_device_wait(self->batch, stream);
    if (rc < 0)
        return stkpy_raise(rc, rc == STK_ENOTSUP ? "the batch is not on a device"
                                                 : "cuStreamWaitEvent failed on that stream");
    Py_RETURN_NONE;
}

static PyObject *Batch_device_use(BatchObject *self, PyObject *arg)
{
    void *stream;
    if (stream_arg(arg, &stream) < 0)
        return NULL;
    stk_status rc = stk_batch_device_use(self->batch, stream);
    if (rc < 0)
        return stkpy_raise(rc, stk_last_errmsg());
    Py_RETURN_NONE;
}

static PyObject *Batch_device_sync(BatchObject *self, PyObject *noargs)
{
    (void)noargs;
    stk_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_batch_device_sync(self->batch);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stkpy_raise(rc, rc == STK_ENOTSUP ? "the batch is not on a device"
                                                 : "the batch's device copy failed");
    Py_RETURN_NONE;
}

static PyMethodDef Batch_methods[] = {
    {"tensors", (PyCFunction)Batch_tensors, METH_NOARGS,
     "tensors() -> list of (name, Tensor, lengths Tensor or None): the dataset's fields in "
     "schema order (a transformed field replaced by its output), then 'index'."},
    {"as_dict", (PyCFunction)(void (*)(void))Batch_as_dict, METH_FASTCALL,
     "as_dict(cls, asarray, from_numpy) -> cls of from_numpy(asarray(view)) per tensor, or None "
     "when one needs the general conversion (a bytes field, bfloat16)."},
    {"leaf_views", (PyCFunction)(void (*)(void))Batch_leaf_views, METH_FASTCALL,
     "leaf_views(leaves, asarray, from_numpy) -> [from_numpy(asarray(view)) of field i as "
     "leaves[i] = (dtype name, shape)], or None when a row has an object key or mask (the int64 "
     "[n, 2] field after the leaves): a Python Dataset's batch of fixed leaves."},
    {"device_tensors", (PyCFunction)Batch_device_tensors, METH_NOARGS,
     "device_tensors() -> list of (name, device address, shape, dtype, lengths Tensor or None): "
     "the batch's copy on its device (read it on a stream device_wait made wait)."},
    {"device_wait", (PyCFunction)Batch_device_wait, METH_O,
     "device_wait(stream): make CUDA stream `stream` (a CUstream as int; 0 = default) wait for "
     "the batch's copy, on the device; the release is then recorded on that stream."},
    {"device_use", (PyCFunction)Batch_device_use, METH_O,
     "device_use(stream): the batch is also read on CUDA stream `stream` (a CUstream as int): "
     "its release is recorded there too, and the buffer is reused only after that work "
     "(stk_batch_device_use)."},
    {"device_sync", (PyCFunction)Batch_device_sync, METH_NOARGS,
     "device_sync(): block until the batch's copy and finishing are done."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Batch_getset[] = {
    {"n_samples", (getter)Batch_n_samples, NULL, "Samples in the batch.", NULL},
    {"device", (getter)Batch_device, NULL,
     "The CUDA device the batch was copied to, or -1 (host only).", NULL},
    {"epoch", (getter)Batch_epoch, NULL, "The batch's epoch.", NULL},
    {"number", (getter)Batch_number, NULL, "The batch's number within its epoch.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Batch_as_sequence = {.sq_length = (lenfunc)Batch_len};

PyTypeObject StkBatch_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)Batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch borrowed from the loader's ring. The slot returns to the ring when "
              "this object and every Tensor made from it are gone.",
    .tp_methods = Batch_methods,
    .tp_getset = Batch_getset,
    .tp_as_sequence = &Batch_as_sequence,
    .tp_weaklistoffset = offsetof(BatchObject, weakreflist),
};
