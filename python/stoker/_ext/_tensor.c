/*
 * _tensor.c: stoker._core.Tensor, a buffer-protocol view of one tensor of a batch.
 *
 * Format, shape and strides are filled in, so memoryview, numpy.asarray and torch see the right
 * dtype and shape without a copy. Each Tensor holds a reference to its owner (the Batch whose
 * ring slot holds the data), so the slot is released when the last view of any of its tensors
 * dies.
 */
#include "_core.h"

#include <string.h>

typedef struct {
    PyObject ob_base;
    PyObject *owner; /* the Batch whose slot holds the data */
    void *data;
    char name[STK_MAX_NAME + 8];
    stk_dtype dtype;
    int ndim;
    Py_ssize_t shape[STK_MAX_DIMS + 2];
    Py_ssize_t strides[STK_MAX_DIMS + 2];
    Py_ssize_t itemsize, len;
    Py_ssize_t exports;
} TensorObject;

/* ---- Tensor ---- */

PyObject *stkpy_tensor_new(PyObject *owner, const char *name, stk_dtype dtype, void *data, int ndim,
                           const int64_t *shape)
{
    TensorObject *t = PyObject_New(TensorObject, &StkTensor_Type);
    if (!t)
        return NULL;
    t->owner = Py_NewRef(owner);
    t->data = data;
    size_t n = strnlen(name, sizeof(t->name) - 1); /* (snprintf: a format parse a tensor) */
    memcpy(t->name, name, n);
    t->name[n] = '\0';
    t->dtype = dtype;
    t->ndim = ndim;
    t->itemsize = (Py_ssize_t)stk_dtype_size(dtype);
    t->exports = 0;
    Py_ssize_t stride = t->itemsize, len = t->itemsize;
    for (int d = ndim - 1; d >= 0; d--) {
        t->shape[d] = (Py_ssize_t)shape[d];
        t->strides[d] = stride;
        stride *= t->shape[d];
        len *= t->shape[d];
    }
    t->len = len;
    return (PyObject *)t;
}

static void Tensor_dealloc(TensorObject *self)
{
    Py_XDECREF(self->owner); /* the last reference to the Batch releases the slot */
    PyObject_Free(self);
}

static int Tensor_getbuffer(TensorObject *self, Py_buffer *view, int flags)
{
    view->obj = Py_NewRef((PyObject *)self);
    view->buf = self->data;
    view->len = self->len;
    view->readonly = 0; /* the slot belongs to the consumer until released */
    view->suboffsets = NULL;
    view->internal = NULL;
    if ((flags & PyBUF_ND) == PyBUF_ND) {
        view->itemsize = self->itemsize;
        view->format = (flags & PyBUF_FORMAT) ? (char *)stkpy_dtype_format(self->dtype) : NULL;
        view->ndim = self->ndim;
        view->shape = self->shape;
        view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    } else {
        /* a plain byte buffer: format "B" implied, one dimension */
        view->itemsize = 1;
        view->format = (flags & PyBUF_FORMAT) ? "B" : NULL;
        view->ndim = 1;
        view->shape = NULL;
        view->strides = NULL;
    }
    self->exports++;
    return 0;
}

static void Tensor_releasebuffer(TensorObject *self, Py_buffer *view)
{
    (void)view;
    self->exports--;
}

static PyBufferProcs Tensor_as_buffer = {(getbufferproc)Tensor_getbuffer,
                                         (releasebufferproc)Tensor_releasebuffer};

static PyObject *Tensor_name(TensorObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(self->name);
}

static PyObject *Tensor_dtype(TensorObject *self, void *c)
{
    (void)c;
    return PyUnicode_FromString(stkpy_dtype_name(self->dtype));
}

static PyObject *Tensor_shape(TensorObject *self, void *c)
{
    (void)c;
    PyObject *s = PyTuple_New(self->ndim);
    if (!s)
        return NULL;
    for (int d = 0; d < self->ndim; d++)
        PyTuple_SET_ITEM(s, d, PyLong_FromSsize_t(self->shape[d]));
    return s;
}

static PyObject *Tensor_nbytes(TensorObject *self, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(self->len);
}

static PyObject *Tensor_address(TensorObject *self, void *c)
{
    (void)c;
    return PyLong_FromVoidPtr(self->data);
}

static PyObject *Tensor_owner(TensorObject *self, void *c)
{
    (void)c;
    return Py_NewRef(self->owner);
}

static PyObject *Tensor_repr(TensorObject *self)
{
    char dims[128] = "";
    size_t off = 0;
    for (int d = 0; d < self->ndim && off < sizeof(dims); d++)
        off +=
            (size_t)snprintf(dims + off, sizeof(dims) - off, d ? ", %zd" : "%zd", self->shape[d]);
    return PyUnicode_FromFormat("<stoker._core.Tensor '%s' %s [%s]>", self->name,
                                stkpy_dtype_name(self->dtype), dims);
}

static PyGetSetDef Tensor_getset[] = {
    {"name", (getter)Tensor_name, NULL, "Field name, '<field>_lengths' or 'index'.", NULL},
    {"dtype", (getter)Tensor_dtype, NULL,
     "Element type name (bfloat16 is exported through the buffer protocol as uint16).", NULL},
    {"shape", (getter)Tensor_shape, NULL, "Shape, batch dimension first.", NULL},
    {"nbytes", (getter)Tensor_nbytes, NULL, "Size in bytes.", NULL},
    {"address", (getter)Tensor_address, NULL, "Address of the first byte (for tests).", NULL},
    {"batch", (getter)Tensor_owner, NULL, "The Batch whose ring slot holds the data.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject StkTensor_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Tensor",
    .tp_basicsize = sizeof(TensorObject),
    .tp_dealloc = (destructor)Tensor_dealloc,
    .tp_repr = (reprfunc)Tensor_repr,
    .tp_as_buffer = &Tensor_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A zero-copy view of one tensor of a batch, through the buffer protocol "
              "(memoryview, numpy.asarray, torch.frombuffer). Keeps its batch's ring slot "
              "borrowed while it, or any view made from it, is alive.",
    .tp_getset = Tensor_getset,
};
