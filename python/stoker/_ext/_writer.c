/*
 * _writer.c: stoker._core.Writer, one .stk shard written through stk_writer_*.
 *
 * It releases the GIL around file I/O. A Writer is thread-compatible: a second thread calling it
 * while one is inside add() gets a RuntimeError instead of corrupting the shard. A Writer that is
 * never closed is aborted when it is collected: its temporary file is removed and no shard
 * appears under its name.
 */
#include "_core.h"

/* ---- Writer ---- */

typedef struct {
    PyObject ob_base;
    stk_writer *w;
    size_t n_fields;
    stk_field fields[STK_MAX_FIELDS];
    int busy;
    char path[1024];
} WriterObject;

static int parse_kind(const char *s, stk_field_kind *out)
{
    static const char *const names[] = {"bytes", "int64", "float32", "array"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (stk_field_kind)i;
            return 0;
        }
    stkpy_invalid("unknown field kind '%s' (use bytes, int64, float32 or array)", s);
    return -1;
}

/* One schema entry: (name, kind) or (name, "array", dtype, shape). */
static int parse_field(PyObject *spec, stk_field *f)
{
    stk_field_init(f);
    PyObject *t = PySequence_Tuple(spec);
    if (!t)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    const char *name, *kind;
    PyObject *dtype = NULL, *shape = NULL;
    int ok = n >= 2 && n <= 4 && (name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 0))) &&
             (kind = PyUnicode_AsUTF8(PyTuple_GET_ITEM(t, 1)));
    if (!ok) {
        Py_DECREF(t);
        if (!PyErr_Occurred())
            stkpy_invalid("a field is (name, kind) or (name, 'array', dtype, shape)");
        return -1;
    }
    if (strlen(name) >= STK_MAX_NAME) {
        Py_DECREF(t);
        stkpy_invalid("field name '%s' is longer than %d characters", name, STK_MAX_NAME - 1);
        return -1;
    }
    strcpy(f->name, name);
    if (parse_kind(kind, &f->kind) < 0) {
        Py_DECREF(t);
        return -1;
    }
    if (f->kind == STK_FIELD_ARRAY) {
        if (n != 4) {
            Py_DECREF(t);
            stkpy_invalid("array field '%s' needs (name, 'array', dtype, shape)", name);
            return -1;
        }
        dtype = PyTuple_GET_ITEM(t, 2);
        shape = PySequence_Tuple(PyTuple_GET_ITEM(t, 3));
        if (!shape || stkpy_parse_dtype(dtype, &f->dtype) < 0) {
            Py_XDECREF(shape);
            Py_DECREF(t);
            return -1;
        }
        Py_ssize_t nd = PyTuple_GET_SIZE(shape);
        if (nd < 1 || nd > STK_MAX_DIMS) {
            Py_DECREF(shape);
            Py_DECREF(t);
            stkpy_invalid("array field '%s': shape needs 1..%d dimensions", name, STK_MAX_DIMS);
            return -1;
        }
        f->ndim = (uint32_t)nd;
        for (Py_ssize_t d = 0; d < nd; d++) {
            f->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            if (f->shape[d] == -1 && PyErr_Occurred()) {
                Py_DECREF(shape);
                Py_DECREF(t);
                return -1;
            }
        }
        Py_DECREF(shape);
    } else if (n != 2) {
        Py_DECREF(t);
        stkpy_invalid("field '%s' of kind %s takes no dtype or shape", name, kind);
        return -1;
    }
    Py_DECREF(t);
    return 0;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"path", "fields", "metadata", "align", NULL};
    PyObject *path_obj, *fields_obj, *path_bytes = NULL;
    const char *metadata = NULL;
    unsigned int align = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|zI:Writer", kwlist, &path_obj, &fields_obj,
                                     &metadata, &align))
        return NULL;
    if (!PyUnicode_FSConverter(path_obj, &path_bytes))
        return NULL;
    WriterObject *self = (WriterObject *)type->tp_alloc(type, 0);
    PyObject *seq = NULL;
    if (!self)
        goto fail;
    snprintf(self->path, sizeof(self->path), "%s", PyBytes_AS_STRING(path_bytes));
    seq = PySequence_Fast(fields_obj, "fields must be a sequence of (name, kind, ...) tuples");
    if (!seq)
        goto fail;
    Py_ssize_t nf = PySequence_Fast_GET_SIZE(seq);
    if (nf < 1 || nf > STK_MAX_FIELDS) {
        stkpy_invalid("a schema has 1..%d fields, not %zd", STK_MAX_FIELDS, nf);
        goto fail;
    }
    for (Py_ssize_t i = 0; i < nf; i++)
        if (parse_field(PySequence_Fast_GET_ITEM(seq, i), &self->fields[i]) < 0)
            goto fail;
    self->n_fields = (size_t)nf;
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = self->fields;
    o.n_fields = self->n_fields;
    o.metadata_json = metadata;
    if (align)
        o.align = align;
    stk_status rc;
    char err[512] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_open(self->path, &o, &self->w);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        stkpy_raise(rc, err);
        goto fail;
    }
    Py_DECREF(seq);
    Py_DECREF(path_bytes);
    return (PyObject *)self;
fail:
    Py_XDECREF(seq);
    Py_XDECREF(path_bytes);
    Py_XDECREF(self);
    return NULL;
}

static void Writer_dealloc(WriterObject *self)
{
    if (self->w) /* never closed: discard, so no partial shard appears */
        stk_writer_abort(self->w);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int writer_check(WriterObject *self)
{
    if (!self->w) {
        stkpy_raise(STK_ESTATE, "the writer is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "the writer is in use by another thread");
        return -1;
    }
    return 0;
}

/* add(values): one record; `values` holds one entry per field in schema order. */
static PyObject *Writer_add(WriterObject *self, PyObject *arg)
{
    if (writer_check(self) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(arg, "a record is a sequence of values in schema order");
    if (!seq)
        return NULL;
    if ((size_t)PySequence_Fast_GET_SIZE(seq) != self->n_fields) {
        Py_DECREF(seq);
        return stkpy_invalid("a record needs %zu values (one per field), got %zd", self->n_fields,
                             PySequence_Fast_GET_SIZE(seq));
    }
    stk_value v[STK_MAX_FIELDS];
    Py_buffer views[STK_MAX_FIELDS];
    size_t n_views = 0;
    PyObject *ret = NULL;
    for (size_t i = 0; i < self->n_fields; i++)
        stk_value_init(&v[i]);
    for (size_t i = 0; i < self->n_fields; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
        const stk_field *f = &self->fields[i];
        if (f->kind == STK_FIELD_INT64) {
            v[i].i64 = PyLong_AsLongLong(o);
            if (v[i].i64 == -1 && PyErr_Occurred())
                goto done;
        } else if (f->kind == STK_FIELD_FLOAT32) {
            double d = PyFloat_AsDouble(o);
            if (d == -1.0 && PyErr_Occurred())
                goto done;
            v[i].f32 = (float)d;
        } else {
            if (PyUnicode_Check(o)) {
                stkpy_invalid("field '%s' takes bytes, not str (encode it first)", f->name);
                goto done;
            }
            if (PyObject_GetBuffer(o, &views[n_views], PyBUF_C_CONTIGUOUS) < 0)
                goto done;
            v[i].data = views[n_views].buf;
            v[i].size = (size_t)views[n_views].len;
            n_views++;
        }
    }
    stk_status rc;
    char err[512] = "";
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_add(self->w, v);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_writer_errmsg(self->w));
    Py_END_ALLOW_THREADS
    self->busy = 0;
    if (rc < 0) {
        stkpy_raise(rc, err);
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (size_t k = 0; k < n_views; k++)
        PyBuffer_Release(&views[k]);
    Py_DECREF(seq);
    return ret;
}

static PyObject *Writer_close(WriterObject *self, PyObject *noargs)
{
    (void)noargs;
    if (!self->w)
        Py_RETURN_NONE;
    if (writer_check(self) < 0)
        return NULL;
    stk_writer *w = self->w;
    self->w = NULL;
    stk_status rc;
    char err[512] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_close(w);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stkpy_raise(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Writer_abort(WriterObject *self, PyObject *noargs)
{
    (void)noargs;
    if (self->w) {
        if (writer_check(self) < 0)
            return NULL;
        stk_writer_abort(self->w);
        self->w = NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Writer_enter(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    Py_INCREF(self);
    return self;
}

static PyObject *Writer_exit(WriterObject *self, PyObject *args)
{
    PyObject *exc_type = PyTuple_Size(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    PyObject *r = exc_type == Py_None ? Writer_close(self, NULL) : Writer_abort(self, NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *Writer_n_records(WriterObject *self, void *closure)
{
    (void)closure;
    if (!self->w)
        return stkpy_raise(STK_ESTATE, "the writer is closed");
    return PyLong_FromUnsignedLongLong(stk_writer_n_records(self->w));
}

static PyObject *Writer_data_size(WriterObject *self, void *closure)
{
    (void)closure;
    if (!self->w)
        return stkpy_raise(STK_ESTATE, "the writer is closed");
    return PyLong_FromUnsignedLongLong(stk_writer_data_size(self->w));
}

static PyObject *Writer_closed(WriterObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->w == NULL);
}

static PyObject *Writer_path(WriterObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_DecodeFSDefault(self->path);
}

static PyMethodDef Writer_methods[] = {
    {"add", (PyCFunction)Writer_add, METH_O,
     "add(values): append one record; values in schema order (bytes-like for bytes and array "
     "fields, int for int64, float for float32)."},
    {"close", (PyCFunction)Writer_close, METH_NOARGS,
     "Write the index, fsync and rename the shard into place."},
    {"abort", (PyCFunction)Writer_abort, METH_NOARGS,
     "Discard the shard (its temporary file is removed)."},
    {"__enter__", Writer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Writer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Writer_getset[] = {
    {"n_records", (getter)Writer_n_records, NULL, "Records added so far.", NULL},
    {"data_size", (getter)Writer_data_size, NULL, "Bytes of record data written so far.", NULL},
    {"closed", (getter)Writer_closed, NULL, "Whether the writer was closed or aborted.", NULL},
    {"path", (getter)Writer_path, NULL, "The shard's final path.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject StkWriter_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Writer",
    .tp_basicsize = sizeof(WriterObject),
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writer(path, fields, metadata=None, align=64): write one .stk shard. fields is a "
              "sequence of (name, kind) or (name, 'array', dtype, shape); kind is bytes, int64, "
              "float32 or array.",
    .tp_new = Writer_new,
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
};
