/*
 * _tokens.c: token corpora for stoker/tokens.py: tokens_open (stk_tokens_open) and tokens_mix
 * (stk_tokens_mix) make Dataset objects of the class they are given, tokens_info reads
 * stk_tokens_info_get. The GIL is released while a corpus opens (headers, indexes, an eos scan,
 * packing). tokens_cu_seqlens: a packed batch's cu_seqlens from its seq_lens, per batch.
 */
#include "_core.h"

#include <string.h>

static const char *const mode_names[] = {"windows", "random", "packed", "documents"};
static const char *const packing_names[] = {"best-fit", "first-fit"};

PyObject *stkpy_tokens_open(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"cls",         "paths",       "seq_len",     "mode",
                             "packing",     "format",      "eos",         "bos",
                             "token_bytes", "token_field", "ids_dtype",   "pad_id",
                             "verify",      "cache_dir",   "cache_limit", NULL};
    PyObject *cls, *data;
    unsigned int seq_len = 0, mode = STK_TOKENS_WINDOWS, packing = STK_PACKING_BEST_FIT;
    unsigned int token_bytes = 0;
    long long eos = -1, bos = -1, pad_id = 0;
    const char *format = NULL, *field = NULL, *ids = "int64", *cache_dir = NULL,
               *cache_limit = NULL;
    int verify = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|IIIzLLIzsLpzz:tokens_open", kwlist, &cls, &data,
                                     &seq_len, &mode, &packing, &format, &eos, &bos, &token_bytes,
                                     &field, &ids, &pad_id, &verify, &cache_dir, &cache_limit))
        return NULL;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "tokens_open: cls must be a Dataset class");
    stk_dtype dt;
    PyObject *ids_obj = PyUnicode_FromString(ids);
    int bad = !ids_obj || stkpy_parse_dtype(ids_obj, &dt) < 0;
    Py_XDECREF(ids_obj);
    if (bad)
        return NULL;
    PyObject *keep;
    size_t n;
    const char **paths = stkpy_paths(data, &keep, &n);
    if (!paths)
        return NULL;
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.paths = paths;
    o.n_paths = n;
    o.format = format;
    o.seq_len = seq_len;
    o.mode = mode;
    o.packing = packing;
    o.eos = eos;
    o.bos = bos;
    o.token_bytes = token_bytes;
    o.token_field = field;
    o.ids_dtype = dt;
    o.pad_id = pad_id;
    o.flags = verify ? 0 : STK_DATASET_NO_VERIFY;
    o.cache_dir = cache_dir;
    o.cache_limit = cache_limit;
    stk_dataset *ds = NULL;
    stk_status rc;
    char err[512] = "";
    Py_BEGIN_ALLOW_THREADS
    rc = stk_tokens_open(&o, &ds);
    if (rc < 0)
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    Py_END_ALLOW_THREADS
    PyMem_Free(paths);
    Py_DECREF(keep);
    if (rc < 0)
        return stkpy_raise(rc, err);
    return stkpy_dataset_wrap((PyTypeObject *)cls, ds);
}

PyObject *stkpy_tokens_mix(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"cls", "parts", "weights", "samples", NULL};
    PyObject *cls, *parts_obj, *weights_obj;
    unsigned long long samples = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|K:tokens_mix", kwlist, &cls, &parts_obj,
                                     &weights_obj, &samples))
        return NULL;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "tokens_mix: cls must be a Dataset class");
    PyObject *parts = PySequence_Fast(parts_obj, "tokens_mix: parts must be a sequence");
    PyObject *weights = parts ? PySequence_Fast(weights_obj, "weights must be a sequence") : NULL;
    if (!weights) {
        Py_XDECREF(parts);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
    PyObject *out = NULL;
    stk_dataset **ds = PyMem_Calloc((size_t)(n ? n : 1), sizeof(*ds));
    double *w = PyMem_Calloc((size_t)(n ? n : 1), sizeof(double));
    Py_ssize_t taken = 0;
    if (!ds || !w) {
        PyErr_NoMemory();
        goto done;
    }
    if (PySequence_Fast_GET_SIZE(weights) != n) {
        stkpy_invalid("tokens_mix: %zd parts but %zd weights", n,
                      PySequence_Fast_GET_SIZE(weights));
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        w[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(weights, i));
        if (w[i] == -1.0 && PyErr_Occurred())
            goto done;
    }
    for (; taken < n; taken++)
        if (!(ds[taken] = stkpy_dataset_take(PySequence_Fast_GET_ITEM(parts, taken))))
            goto done;
    stk_dataset *mix = NULL;
    stk_status rc = stk_tokens_mix(ds, w, (size_t)n, samples, &mix);
    if (rc < 0) {
        stkpy_raise(rc, stk_last_errmsg());
        goto done;
    }
    taken = 0; /* the mixture owns them */
    out = stkpy_dataset_wrap((PyTypeObject *)cls, mix);
done:
    for (Py_ssize_t i = 0; i < taken; i++) /* failed: the parts go back to their objects */
        stkpy_dataset_give(PySequence_Fast_GET_ITEM(parts, i), ds[i]);
    PyMem_Free(ds);
    PyMem_Free(w);
    Py_DECREF(parts);
    Py_DECREF(weights);
    return out;
}

/* stk_tokens_info as a dict. */
static PyObject *info_dict(const stk_tokens_info *in)
{
    int top = 47;
    while (top > 0 && in->doc_hist[top] == 0)
        top--;
    PyObject *hist = PyList_New(top + 1);
    if (!hist)
        return NULL;
    for (int k = 0; k <= top; k++)
        PyList_SET_ITEM(hist, k, PyLong_FromUnsignedLongLong(in->doc_hist[k]));
    return Py_BuildValue(
        "{s:s,s:I,s:I,s:s,s:s,s:K,s:K,s:O,s:K,s:K,s:K,s:K,s:K,s:N,s:I}", "format", in->format,
        "token_bytes", in->token_bytes, "seq_len", in->seq_len, "mode",
        in->mode < 4 ? mode_names[in->mode] : "?", "packing",
        in->packing < 2 ? packing_names[in->packing] : "?", "n_tokens",
        (unsigned long long)in->n_tokens, "n_documents", (unsigned long long)in->n_documents,
        "boundaries", in->boundaries ? Py_True : Py_False, "max_document",
        (unsigned long long)in->max_document, "n_rows", (unsigned long long)in->n_rows,
        "n_row_tokens", (unsigned long long)in->n_row_tokens, "n_padding",
        (unsigned long long)in->n_padding, "n_unused", (unsigned long long)in->n_unused, "doc_hist",
        hist, "n_parts", in->n_parts);
}

PyObject *stkpy_tokens_info(PyObject *module, PyObject *obj)
{
    (void)module;
    const stk_dataset *ds = stkpy_dataset_get(obj);
    if (!ds)
        return NULL;
    stk_tokens_info in = {.struct_size = sizeof(in)};
    stk_status rc = stk_tokens_info_get(ds, &in);
    if (rc < 0)
        return stkpy_raise(rc, stk_last_errmsg());
    PyObject *d = info_dict(&in);
    if (!d || in.n_parts == 0)
        return d;
    PyObject *parts = PyList_New(in.n_parts);
    if (!parts || PyDict_SetItemString(d, "parts", parts) < 0)
        goto fail;
    for (uint32_t i = 0; i < in.n_parts; i++) {
        const stk_dataset *p;
        double w;
        uint64_t per;
        stk_tokens_info pi = {.struct_size = sizeof(pi)};
        if (stk_tokens_mix_part(ds, i, &p, &w, &per) < 0 || stk_tokens_info_get(p, &pi) < 0) {
            stkpy_raise(STK_EINVAL, stk_last_errmsg());
            goto fail;
        }
        PyObject *pd = info_dict(&pi);
        if (!pd)
            goto fail;
        PyList_SET_ITEM(parts, i, pd);
        PyObject *wv = PyFloat_FromDouble(w), *pv = PyLong_FromUnsignedLongLong(per);
        int bad = !wv || !pv || PyDict_SetItemString(pd, "weight", wv) < 0 ||
                  PyDict_SetItemString(pd, "per_epoch", pv) < 0;
        Py_XDECREF(wv);
        Py_XDECREF(pv);
        if (bad)
            goto fail;
    }
    Py_DECREF(parts);
    return d;
fail:
    Py_XDECREF(parts);
    Py_DECREF(d);
    return NULL;
}

/* tokens_cu_seqlens(seq_lens) -> bytearray: int32 [n + 1], 0 then the running sum of the n
 * non-zero lengths of a C-contiguous int32 buffer (a packed batch's seq_lens, [B, P]). Per
 * batch: numpy's mask, zeros and cumsum cost several times the loop (bench/RESULTS.md, issue
 * 26 tok3). */
PyObject *stkpy_tokens_cu_seqlens(PyObject *module, PyObject *obj)
{
    (void)module;
    Py_buffer b;
    if (PyObject_GetBuffer(obj, &b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    PyObject *out = NULL;
    if (b.itemsize != 4 || !b.format ||
        (strcmp(b.format, "i") != 0 && strcmp(b.format, "<i") != 0 &&
         strcmp(b.format, "=i") != 0)) {
        PyErr_SetString(PyExc_TypeError, "tokens_cu_seqlens: seq_lens must be int32");
        goto done;
    }
    const int32_t *s = b.buf;
    Py_ssize_t n = b.len / 4, k = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        k += s[i] != 0;
    out = PyByteArray_FromStringAndSize(NULL, (k + 1) * 4);
    if (out) {
        int32_t *cu = (int32_t *)(void *)PyByteArray_AS_STRING(out), sum = 0;
        cu[0] = 0;
        for (Py_ssize_t i = 0, j = 1; i < n; i++)
            if (s[i]) {
                sum += s[i];
                cu[j++] = sum;
            }
    }
done:
    PyBuffer_Release(&b);
    return out;
}
