/*
 * _map.c: Loader(..., map=fn), the C side. The loader's sample_fn (stk_sample_fn in stoker.h)
 * runs on stoker's worker threads: it takes the GIL (PyGILState_Ensure), hands the sample to the
 * Python wrapper that loader.py built around the user's fn, copies what the wrapper returns into
 * the sample's rows of the batch, and lets the GIL go. The wrapper gets
 * (index, [(name, dtype, shape, data, length), ...]) with `data` a bytearray copy of the field
 * (length: valid bytes of a bytes field, else -1) and returns one C-contiguous buffer per output
 * field, in the order and with the sizes of the fields declared at create (loader.py checks
 * shapes and names the record through the message prefix the C loader adds).
 *
 * Lifetime: the map object lives from Loader creation to after stk_loader_destroy (close), which
 * joins the workers, so no call runs once it is freed. At interpreter shutdown the callback
 * refuses to take the GIL (the batch fails with STK_ECANCELED) instead of blocking forever.
 */
#include "_core.h"

#include <string.h>

struct stkpy_map {
    PyObject *fn; /* the wrapper */
    stk_field fields[STK_MAX_FIELDS];
    bool var[STK_MAX_FIELDS]; /* a bytes field's row: the value may be shorter */
    size_t n_fields;
    struct stkpy_tstates ts; /* the loader threads' Python states */
};

/* The sample's fields as the wrapper's argument list (GIL held). */
static PyObject *sample_items(const stk_tensor *in, size_t n_in)
{
    PyObject *items = PyList_New((Py_ssize_t)n_in);
    for (size_t i = 0; items && i < n_in; i++) {
        const stk_tensor *t = &in[i];
        PyObject *shape = PyTuple_New((Py_ssize_t)t->ndim - 1);
        for (uint32_t d = 1; shape && d < t->ndim; d++)
            PyTuple_SET_ITEM(shape, d - 1, PyLong_FromLongLong(t->shape[d]));
        PyObject *data = shape ? PyByteArray_FromStringAndSize(t->data, (Py_ssize_t)t->size) : NULL;
        PyObject *item = data ? Py_BuildValue("(ssNNL)", t->name, stkpy_dtype_name(t->dtype), shape,
                                              data, (long long)(t->lengths ? t->lengths[0] : -1))
                              : NULL;
        if (!item) {
            if (!data)
                Py_XDECREF(shape);
            Py_CLEAR(items);
            break;
        }
        PyList_SET_ITEM(items, (Py_ssize_t)i, item);
    }
    return items;
}

void stkpy_exception_text(const char *what, char *err, size_t err_size)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    const char *tname = type ? ((PyTypeObject *)type)->tp_name : "error";
    PyObject *s = value ? PyObject_Str(value) : NULL;
    const char *msg = s ? PyUnicode_AsUTF8(s) : NULL;
    if (!msg)
        PyErr_Clear();
    snprintf(err, err_size, "%s%s%s: %s", what ? what : "", what ? " raised " : "", tname,
             msg ? msg : "?");
    Py_XDECREF(s);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

static stk_status map_call(void *ctx, uint64_t index, const stk_tensor *in, size_t n_in,
                           stk_tensor *out, size_t n_out, char *err, size_t err_size)
{
    struct stkpy_map *m = ctx;
    if (stkpy_finalizing()) {
        snprintf(err, err_size, "map function not run: the interpreter is shutting down");
        return STK_ECANCELED;
    }
    PyGILState_STATE g = stkpy_gil_take(&m->ts);
    stk_status rc = STK_OK;
    PyObject *items = sample_items(in, n_in);
    PyObject *res =
        items ? PyObject_CallFunction(m->fn, "KO", (unsigned long long)index, items) : NULL;
    Py_XDECREF(items);
    if (!res) {
        stkpy_exception_text("map function", err, err_size);
        rc = STK_EFORMAT; /* this record's failure: on_error="skip" skips it */
        goto done;
    }
    if (!PyList_Check(res) || (size_t)PyList_GET_SIZE(res) != n_out) {
        snprintf(err, err_size, "map wrapper returned %zd values for %zu fields",
                 PyList_Check(res) ? PyList_GET_SIZE(res) : (Py_ssize_t)-1, n_out);
        rc = STK_ESTATE;
        goto done;
    }
    for (size_t i = 0; i < n_out; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PyList_GET_ITEM(res, (Py_ssize_t)i), &view, PyBUF_C_CONTIGUOUS) <
            0) {
            stkpy_exception_text("map function", err, err_size);
            rc = STK_EFORMAT;
            goto done;
        }
        /* a bytes field's value fills the start of its row (kind "bytes": the row is the
         * field's stride, the value at most that long; its length is the next field) */
        bool var = m->var[i];
        if (var ? (size_t)view.len > out[i].size : (size_t)view.len != out[i].size) {
            snprintf(err, err_size, "map function: field '%s' has %zd bytes, not %zu", out[i].name,
                     view.len, out[i].size);
            PyBuffer_Release(&view);
            rc = STK_EFORMAT;
            goto done;
        }
        memcpy(out[i].data, view.buf, var ? (size_t)view.len : out[i].size);
        PyBuffer_Release(&view);
    }
done:
    Py_XDECREF(res);
    stkpy_gil_drop(g);
    return rc;
}

int stkpy_sample_fields(PyObject *fields, stk_field *out, size_t *n_out)
{
    PyObject *seq = PySequence_Fast(fields, "sample fields must be a sequence");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > STK_MAX_FIELDS) {
        stkpy_invalid("map: the function returns %zd fields (1..%d)", n, STK_MAX_FIELDS);
        goto fail;
    }
    memset(out, 0, sizeof(stk_field) * (size_t)n);
    for (Py_ssize_t i = 0; i < n; i++) {
        /* (name, kind, dtype, shape) with kind "int64", "float32" or "array" */
        const char *name, *kind;
        PyObject *dtype, *shape;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "ssOO", &name, &kind, &dtype,
                              &shape))
            goto fail;
        stk_field *f = &out[i];
        stk_field_init(f);
        if (strlen(name) >= STK_MAX_NAME) {
            stkpy_invalid("map: field name '%s' is too long (at most %d characters)", name,
                          STK_MAX_NAME - 1);
            goto fail;
        }
        snprintf(f->name, sizeof(f->name), "%s", name);
        if (strcmp(kind, "int64") == 0) {
            f->kind = STK_FIELD_INT64;
        } else if (strcmp(kind, "float32") == 0) {
            f->kind = STK_FIELD_FLOAT32;
        } else {
            f->kind = STK_FIELD_ARRAY;
            if (stkpy_parse_dtype(dtype, &f->dtype) < 0)
                goto fail;
            Py_ssize_t nd = PySequence_Size(shape);
            if (nd < 1 || nd > STK_MAX_DIMS) {
                stkpy_invalid("map: field '%s' has %zd dimensions (1..%d)", name, nd, STK_MAX_DIMS);
                goto fail;
            }
            f->ndim = (uint32_t)nd;
            for (Py_ssize_t d = 0; d < nd; d++) {
                PyObject *v = PySequence_GetItem(shape, d);
                f->shape[d] = v ? PyLong_AsLongLong(v) : -1;
                Py_XDECREF(v);
                if (PyErr_Occurred())
                    goto fail;
            }
        }
    }
    *n_out = (size_t)n;
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

int stkpy_map_setup(PyObject *fn, PyObject *fields, stk_loader_opts *o, struct stkpy_map **out)
{
    *out = NULL;
    if (fn == Py_None)
        return 0;
    struct stkpy_map *m = PyMem_Calloc(1, sizeof(*m));
    if (!m) {
        PyErr_NoMemory();
        return -1;
    }
    if (stkpy_sample_fields(fields, m->fields, &m->n_fields) < 0) {
        PyMem_Free(m);
        return -1;
    }
    stkpy_tstates_init(&m->ts);
    for (size_t i = 0; i + 1 < m->n_fields; i++) { /* "x" uint8 [stride] + "x_lengths" */
        char want[STK_MAX_NAME + 16];
        snprintf(want, sizeof(want), "%s_lengths", m->fields[i].name);
        m->var[i] = m->fields[i].kind == STK_FIELD_ARRAY && m->fields[i].dtype == STK_DTYPE_UINT8 &&
                    m->fields[i].ndim == 1 && m->fields[i + 1].kind == STK_FIELD_INT64 &&
                    strcmp(m->fields[i + 1].name, want) == 0;
    }
    m->fn = Py_NewRef(fn);
    o->sample_fn = map_call;
    o->sample_ctx = m;
    o->sample_fields = m->fields;
    o->n_sample_fields = m->n_fields;
    *out = m;
    return 0;
}

void stkpy_map_free(struct stkpy_map *m)
{
    if (!m)
        return;
    stkpy_tstates_free(&m->ts); /* the loader's threads were joined */
    Py_XDECREF(m->fn);
    PyMem_Free(m);
}
