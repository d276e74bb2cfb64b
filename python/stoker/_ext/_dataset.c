/*
 * _dataset.c: stoker._core.Dataset, an open dataset of any format (schema, files, random reads,
 * describe, pack to .stk). The writer of one .stk shard is stoker._core.Writer (_writer.c).
 *
 * It releases the GIL around file I/O. A Dataset is immutable after open, so reads from many
 * threads are fine; close() and collection wait for calls in flight (the in-flight counter, as
 * the loader's).
 */
#include "_core.h"

#include <pthread.h>
#include <string.h>

/* ---- Dataset ---- */

typedef struct {
    PyObject ob_base;
    stk_dataset *ds;
    int in_flight; /* reads running with the GIL released */
    int borrowers; /* loaders reading it (guarded by the GIL) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    PyObject *weakreflist;
} DatasetObject;

const stk_dataset *stkpy_dataset_get(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &StkDataset_Type)) {
        PyErr_Format(PyExc_TypeError, "expected a stoker Dataset, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    DatasetObject *d = (DatasetObject *)obj;
    if (!d->ds) {
        stkpy_raise(STK_ESTATE, "the dataset is closed");
        return NULL;
    }
    return d->ds;
}

void stkpy_dataset_borrow(PyObject *obj, int delta)
{
    ((DatasetObject *)obj)->borrowers += delta;
}

PyObject *stkpy_dataset_wrap(PyTypeObject *type, stk_dataset *ds)
{
    if (!PyType_IsSubtype(type, &StkDataset_Type)) {
        stk_dataset_close(ds);
        return PyErr_Format(PyExc_TypeError, "%.100s is not a stoker Dataset type", type->tp_name);
    }
    DatasetObject *self = (DatasetObject *)type->tp_alloc(type, 0);
    if (!self) {
        stk_dataset_close(ds);
        return NULL;
    }
    self->ds = ds;
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    return (PyObject *)self;
}

stk_dataset *stkpy_dataset_take(PyObject *obj)
{
    if (!stkpy_dataset_get(obj))
        return NULL;
    DatasetObject *d = (DatasetObject *)obj;
    if (d->borrowers > 0 || d->in_flight > 0) {
        stkpy_raise(STK_ESTATE, "the dataset is in use (a loader reads it)");
        return NULL;
    }
    stk_dataset *ds = d->ds;
    d->ds = NULL;
    return ds;
}

void stkpy_dataset_give(PyObject *obj, stk_dataset *ds)
{
    ((DatasetObject *)obj)->ds = ds;
}

/* The keys of a dict of paths as UTF-8 field names (kept alive by *keep), in the dict's order,
 * which is the order of PyDict_Values. */
static const char **dict_names(PyObject *dict, PyObject **keep)
{
    Py_ssize_t n = PyDict_Size(dict), pos = 0, i = 0;
    PyObject *key, *value;
    const char **names = PyMem_Calloc((size_t)n + 1, sizeof(char *));
    *keep = PyList_New(0);
    if (!names || !*keep)
        goto fail;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError,
                         "a dict of paths maps field names (str) to files, not %.100s keys",
                         Py_TYPE(key)->tp_name);
            goto fail;
        }
        PyObject *b = PyUnicode_AsUTF8String(key);
        if (!b || PyList_Append(*keep, b) < 0) {
            Py_XDECREF(b);
            goto fail;
        }
        Py_DECREF(b);
        names[i++] = PyBytes_AS_STRING(b);
    }
    return names;
fail:
    PyMem_Free(names);
    Py_CLEAR(*keep);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    return NULL;
}

static PyObject *Dataset_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"data",      "verify",      "format", "concat",
                             "cache_dir", "cache_limit", "count",  NULL};
    PyObject *data, *cache_dir = Py_None, *cache_limit = Py_None;
    int verify = 1, concat = 0;
    const char *format = NULL;
    long long count = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|pzp$OOL:Dataset", kwlist, &data, &verify, &format,
                                     &concat, &cache_dir, &cache_limit, &count))
        return NULL;
    if (count >= 0 || (format && strcmp(format, "index") == 0)) {
        /* Dataset(name, format="index", count=N): N records that are their number (a Python
         * Dataset's indices; stk_dataset_open_index) */
        if (!PyUnicode_Check(data) || count < 0)
            return stkpy_invalid("format='index' takes a name (str) and count=N");
        stk_dataset *ids = NULL;
        stk_status irc = stk_dataset_open_index(PyUnicode_AsUTF8(data), (uint64_t)count, &ids);
        if (irc < 0)
            return stkpy_raise(irc, stk_last_errmsg());
        DatasetObject *self = (DatasetObject *)type->tp_alloc(type, 0);
        if (!self) {
            stk_dataset_close(ids);
            return NULL;
        }
        self->ds = ids;
        pthread_mutex_init(&self->mu, NULL);
        pthread_cond_init(&self->cv, NULL);
        return (PyObject *)self;
    }
    /* cache_dir: a path (str, bytes, os.PathLike); cache_limit: bytes (int) or "20G" */
    PyObject *cdir = NULL, *climit = NULL;
    if (cache_dir != Py_None && !PyUnicode_FSConverter(cache_dir, &cdir))
        return NULL;
    if (cache_limit != Py_None) {
        if (PyLong_Check(cache_limit) && !PyBool_Check(cache_limit)) {
            climit = PyObject_Str(cache_limit);
        } else if (PyUnicode_Check(cache_limit)) {
            Py_INCREF(cache_limit);
            climit = cache_limit;
        } else {
            PyErr_Format(PyExc_TypeError,
                         "cache_limit should be bytes (an int) or a size like \"20G\", not %.100s",
                         Py_TYPE(cache_limit)->tp_name);
        }
        if (!climit) {
            Py_XDECREF(cdir);
            return NULL;
        }
    }
    PyObject *keep, *keep_names = NULL;
    size_t n;
    const char **names = NULL;
    const char **paths = NULL;
    if (PyDict_Check(data)) { /* the NumPy dict form: {"image": "x.npy", ...} */
        PyObject *values = PyDict_Values(data);
        paths = values ? stkpy_paths(values, &keep, &n) : NULL;
        Py_XDECREF(values);
        if (paths && !(names = dict_names(data, &keep_names))) {
            PyMem_Free(paths);
            Py_DECREF(keep);
            paths = NULL;
        }
    } else {
        paths = stkpy_paths(data, &keep, &n);
    }
    if (!paths) {
        Py_XDECREF(cdir);
        Py_XDECREF(climit);
        return NULL;
    }
    stk_dataset *ds = NULL;
    stk_status rc;
    char err[512] = "";
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = paths;
    o.n_paths = n;
    o.flags = (verify ? 0 : STK_DATASET_NO_VERIFY) | (concat ? STK_DATASET_CONCAT : 0);
    o.format = format;
    o.field_names = names;
    o.cache_dir = cdir ? PyBytes_AS_STRING(cdir) : NULL;
    o.cache_limit = climit ? PyUnicode_AsUTF8(climit) : NULL;
    if (climit && !o.cache_limit) {
        rc = STK_ENOMEM; /* the exception is set */
    } else {
        Py_BEGIN_ALLOW_THREADS
        rc = stk_dataset_open_v2(&o, &ds);
        if (rc < 0)
            snprintf(err, sizeof(err), "%s", stk_last_errmsg());
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(paths);
    PyMem_Free(names);
    Py_DECREF(keep);
    Py_XDECREF(keep_names);
    Py_XDECREF(cdir);
    Py_XDECREF(climit);
    if (rc < 0 && PyErr_Occurred())
        return NULL;
    if (rc < 0)
        return stkpy_raise(rc, err);
    return stkpy_dataset_wrap(type, ds);
}

/* Wait (GIL released) until no read is in flight, then close. Returns -1 with an exception
 * while loaders still read the dataset. */
static int dataset_close(DatasetObject *self)
{
    if (!self->ds)
        return 0;
    if (self->borrowers > 0) {
        stkpy_raise(STK_ESTATE, "the dataset is still used by a loader: close the loader first");
        return -1;
    }
    stk_dataset *ds = self->ds;
    self->ds = NULL; /* new reads now fail; wait for the running ones */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    while (self->in_flight > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    pthread_mutex_unlock(&self->mu);
    stk_dataset_close(ds);
    Py_END_ALLOW_THREADS
    return 0;
}

static void Dataset_dealloc(DatasetObject *self)
{
    if (self->weakreflist)
        PyObject_ClearWeakRefs((PyObject *)self);
    if (self->ds) {
        stk_dataset_close(self->ds); /* no read can be in flight: it would hold a reference */
        self->ds = NULL;
    }
    pthread_mutex_destroy(&self->mu);
    pthread_cond_destroy(&self->cv);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Dataset_close(DatasetObject *self, PyObject *noargs)
{
    (void)noargs;
    if (dataset_close(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Dataset_enter(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    Py_INCREF(self);
    return self;
}

static PyObject *Dataset_exit(DatasetObject *self, PyObject *args)
{
    (void)args;
    if (dataset_close(self) < 0)
        return NULL;
    Py_RETURN_FALSE;
}

static Py_ssize_t Dataset_len(DatasetObject *self)
{
    if (!stkpy_dataset_get((PyObject *)self))
        return -1;
    return (Py_ssize_t)stk_dataset_n_records(self->ds);
}

/* A field as a dict: name, kind, dtype, shape (per record), max_size. */
static PyObject *field_dict(const stk_dataset *ds, size_t i)
{
    const stk_field *f = stk_dataset_field(ds, i);
    PyObject *shape;
    stk_dtype dt;
    switch (f->kind) {
    case STK_FIELD_ARRAY:
        dt = f->dtype;
        shape = PyTuple_New(f->ndim);
        if (!shape)
            return NULL;
        for (uint32_t d = 0; d < f->ndim; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong(f->shape[d]));
        break;
    case STK_FIELD_INT64:
        dt = STK_DTYPE_INT64;
        shape = PyTuple_New(0);
        break;
    case STK_FIELD_FLOAT32:
        dt = STK_DTYPE_FLOAT32;
        shape = PyTuple_New(0);
        break;
    default:
        dt = STK_DTYPE_UINT8;
        shape = Py_BuildValue("(O)", Py_None);
        break;
    }
    if (!shape)
        return NULL;
    PyObject *d =
        Py_BuildValue("{s:s,s:s,s:s,s:N,s:K}", "name", f->name, "kind",
                      stk_field_kind_name(f->kind), "dtype", stkpy_dtype_name(dt), "shape", shape,
                      "max_size", (unsigned long long)stk_dataset_field_max_size(ds, i));
    return d;
}

static PyObject *Dataset_fields(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    size_t n = stk_dataset_n_fields(self->ds);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *d = field_dict(self->ds, i);
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    return list;
}

static PyObject *Dataset_shards(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    size_t n = stk_dataset_n_shards(self->ds);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        stk_shard_info si = {.struct_size = sizeof(si)};
        stk_status rc = stk_dataset_shard(self->ds, i, &si);
        if (rc < 0) {
            Py_DECREF(list);
            return stkpy_raise(rc, NULL);
        }
        PyObject *d = Py_BuildValue("{s:s,s:K,s:K,s:K,s:K,s:I,s:s}", "path", si.path,
                                    "first_record", (unsigned long long)si.first_record,
                                    "n_records", (unsigned long long)si.n_records, "file_size",
                                    (unsigned long long)si.file_size, "data_size",
                                    (unsigned long long)si.data_size, "version", si.version,
                                    "metadata", si.metadata ? si.metadata : "{}");
        if (!d) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    return list;
}

static PyObject *Dataset_fingerprint(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    char buf[24];
    snprintf(buf, sizeof(buf), "%016llx", (unsigned long long)stk_dataset_fingerprint(self->ds));
    return PyUnicode_FromString(buf);
}

static PyObject *Dataset_closed(DatasetObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->ds == NULL);
}

static PyObject *Dataset_max_record_size(DatasetObject *self, void *closure)
{
    (void)closure;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    return PyLong_FromUnsignedLongLong(stk_dataset_max_record_size(self->ds));
}

/* Pin the dataset for a call that releases the GIL (close waits for it). */
static void dataset_enter(DatasetObject *self)
{
    pthread_mutex_lock(&self->mu);
    self->in_flight++;
    pthread_mutex_unlock(&self->mu);
}

static void dataset_leave(DatasetObject *self)
{
    pthread_mutex_lock(&self->mu);
    if (--self->in_flight == 0)
        pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

/* read(i) -> dict: bytes and array fields as bytes, int64 as int, float32 as float. */
static PyObject *Dataset_read(DatasetObject *self, PyObject *arg)
{
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    long long idx = PyLong_AsLongLong(arg);
    if (idx == -1 && PyErr_Occurred())
        return NULL;
    uint64_t n = stk_dataset_n_records(self->ds);
    if (idx < 0)
        idx += (long long)n;
    if (idx < 0 || (uint64_t)idx >= n) {
        PyErr_Format(PyExc_IndexError, "record %lld is out of range (the dataset has %llu)", idx,
                     (unsigned long long)n);
        return NULL;
    }
    size_t cap = (size_t)stk_dataset_max_record_size(self->ds);
    void *buf = PyMem_Malloc(cap ? cap : 1);
    if (!buf)
        return PyErr_NoMemory();
    stk_record rec;
    stk_record_init(&rec);
    stk_status rc;
    dataset_enter(self);
    const stk_dataset *ds = self->ds;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_dataset_read(ds, (uint64_t)idx, buf, cap, &rec);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc < 0) {
        stkpy_raise(rc, stk_last_errmsg()); /* this thread's: the read ran on it */
        goto done;
    }
    out = PyDict_New();
    if (!out)
        goto done;
    for (size_t f = 0; f < stk_dataset_n_fields(ds); f++) {
        const stk_field *fd = stk_dataset_field(ds, f);
        PyObject *v;
        if (fd->kind == STK_FIELD_INT64)
            v = PyLong_FromLongLong(stk_record_i64(&rec, f));
        else if (fd->kind == STK_FIELD_FLOAT32)
            v = PyFloat_FromDouble(stk_record_f32(&rec, f));
        else
            v = PyBytes_FromStringAndSize((const char *)rec.field[f],
                                          (Py_ssize_t)rec.field_size[f]);
        if (!v || PyDict_SetItemString(out, fd->name, v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(v);
    }
done:
    PyMem_Free(buf);
    dataset_leave(self);
    return out;
}

/* describe(i) -> str: where record i lives ("shard.stk record 3 (global 3) at byte 4096"). */
static PyObject *Dataset_describe(DatasetObject *self, PyObject *arg)
{
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    unsigned long long idx = PyLong_AsUnsignedLongLong(arg);
    if (idx == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    char buf[512];
    if (stk_dataset_describe(self->ds, idx, buf, sizeof(buf)) < 0) {
        PyErr_SetString(PyExc_IndexError, buf);
        return NULL;
    }
    return PyUnicode_DecodeUTF8(buf, (Py_ssize_t)strlen(buf), "replace");
}

typedef struct {
    PyObject *fn;
    uint64_t next; /* call fn when done reaches this */
    int failed;
} progress_ctx;

/* stk_pack's progress callback (GIL released around stk_pack): about 100 calls of fn. */
static void pack_progress(void *ctx, uint64_t done, uint64_t total, uint64_t bytes)
{
    progress_ctx *p = ctx;
    if (p->failed || (done < p->next && done != total))
        return;
    p->next = done + (total / 100 ? total / 100 : 1);
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(p->fn, "KKK", (unsigned long long)done,
                                        (unsigned long long)total, (unsigned long long)bytes);
    if (!r)
        p->failed = 1; /* the exception stays set; the pack itself goes on */
    Py_XDECREF(r);
    PyGILState_Release(g);
}

/* pack(out, shard_size=0, align=64, force=False, tool=None, progress=None) -> dict. */
static PyObject *Dataset_pack(DatasetObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"out", "shard_size", "align", "force", "tool", "progress", NULL};
    PyObject *out_obj, *progress = Py_None, *out_bytes = NULL;
    unsigned long long shard_size = 0;
    unsigned int align = 64;
    int force = 0;
    const char *tool = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|KIpzO:pack", kwlist, &out_obj, &shard_size,
                                     &align, &force, &tool, &progress))
        return NULL;
    if (!stkpy_dataset_get((PyObject *)self) || !PyUnicode_FSConverter(out_obj, &out_bytes))
        return NULL;
    stk_pack_opts o;
    stk_pack_opts_init(&o);
    o.shard_size = shard_size;
    o.align = align;
    o.force = force != 0;
    o.tool = tool;
    progress_ctx pc = {progress, 0, 0};
    if (progress != Py_None) {
        o.progress = pack_progress;
        o.progress_ctx = &pc;
    }
    stk_pack_result r = {.struct_size = sizeof(r)};
    stk_status rc;
    char err[512] = "";
    dataset_enter(self);
    Py_BEGIN_ALLOW_THREADS
    rc = stk_pack(self->ds, PyBytes_AS_STRING(out_bytes), &o, &r);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    dataset_leave(self);
    Py_DECREF(out_bytes);
    if (pc.failed)
        return NULL;
    if (rc < 0)
        return stkpy_raise(rc, err);
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "records", (unsigned long long)r.records, "shards",
                         (unsigned long long)r.shards, "bytes", (unsigned long long)r.bytes,
                         "file_bytes", (unsigned long long)r.file_bytes);
}

static PyObject *Dataset_format(DatasetObject *self, void *c)
{
    (void)c;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    return PyUnicode_FromString(stk_dataset_format(self->ds));
}

static PyObject *Dataset_image_field(DatasetObject *self, PyObject *unused)
{
    (void)unused;
    if (!stkpy_dataset_get((PyObject *)self))
        return NULL;
    size_t f = 0;
    stk_status rc;
    char err[512] = "";
    dataset_enter(self);
    Py_BEGIN_ALLOW_THREADS /* may read record 0 */
    rc = stk_dataset_image_field(self->ds, &f);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    dataset_leave(self);
    if (rc < 0)
        return stkpy_raise(rc, err);
    return PyUnicode_FromString(stk_dataset_field(self->ds, f)->name);
}

static PyMethodDef Dataset_methods[] = {
    {"image_field", (PyCFunction)Dataset_image_field, METH_NOARGS,
     "image_field() -> str: the field transforms apply to when transform_field is not given "
     "(stk_dataset_image_field); ValueError naming the candidates when several or none "
     "qualify."},
    {"describe", (PyCFunction)Dataset_describe, METH_O,
     "describe(i) -> str: where record i lives, as error messages name it."},
    {"pack", (PyCFunction)(void (*)(void))Dataset_pack, METH_VARARGS | METH_KEYWORDS,
     "pack(out, shard_size=0, align=64, force=False, tool=None, progress=None) -> dict: write "
     "every record to .stk shards at `out` (stk_pack; `stoker pack` does the same)."},
    {"close", (PyCFunction)Dataset_close, METH_NOARGS, "Close the dataset (idempotent)."},
    {"read", (PyCFunction)Dataset_read, METH_O,
     "read(i) -> dict: record i; bytes and array fields as bytes, int64 as int, float32 as "
     "float. The checksum is verified unless opened with verify=False."},
    {"__enter__", Dataset_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Dataset_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Dataset_getset[] = {
    {"fields", (getter)Dataset_fields, NULL,
     "The schema: a list of dicts (name, kind, dtype, shape, max_size).", NULL},
    {"shards", (getter)Dataset_shards, NULL,
     "The shards: a list of dicts (path, first_record, n_records, file_size, data_size, "
     "version, metadata).",
     NULL},
    {"fingerprint", (getter)Dataset_fingerprint, NULL,
     "The dataset's 64-bit fingerprint as 16 hex digits (record count and index checksums).", NULL},
    {"max_record_size", (getter)Dataset_max_record_size, NULL, "Largest record in bytes.", NULL},
    {"closed", (getter)Dataset_closed, NULL, "Whether close() was called.", NULL},
    {"format", (getter)Dataset_format, NULL, "The format: 'stk', 'imagefolder', 'npy', ...", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods Dataset_as_sequence = {.sq_length = (lenfunc)Dataset_len};

PyTypeObject StkDataset_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Dataset",
    .tp_basicsize = sizeof(DatasetObject),
    .tp_dealloc = (destructor)Dataset_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Dataset(data, verify=True): open .stk shards (a file, a directory, a glob, or a "
              "list of them) as records 0..N-1.",
    .tp_new = Dataset_new,
    .tp_methods = Dataset_methods,
    .tp_getset = Dataset_getset,
    .tp_as_sequence = &Dataset_as_sequence,
    .tp_weaklistoffset = offsetof(DatasetObject, weakreflist),
};
