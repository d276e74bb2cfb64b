/*
 * _loader_opts.c: the C structs of stoker._core.Loader to and from Python values: its keyword
 * arguments turned into a stk_loader_opts, and stk_loader_info / stk_loader_stats turned into
 * the dicts of Loader.info() and Loader.stats(). Moved out of _loader.c (Loader_new,
 * Loader_info, Loader_stats), which keeps the object, its locking and its calls.
 *
 * Everything the options point at (batch ops, index/weight buffers, path strings, the map
 * state) lives in the stkpy_loader_args struct or in the call's arguments until
 * stk_loader_create has copied it; stkpy_loader_args_release then gives it back.
 */
#include "_loader_opts.h"

/* batch_ops: a sequence of (kind, alpha) with kind 1 = MixUp, 2 = CutMix (checked in C). */
static int parse_batch_ops(PyObject *obj, stk_batch_op *ops, uint32_t *n)
{
    PyObject *seq = PySequence_Fast(obj, "batch_ops must be a sequence of (kind, alpha)");
    if (!seq)
        return -1;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k > STK_MAX_BATCH_OPS) {
        Py_DECREF(seq);
        stkpy_invalid("at most %d batch transforms, got %zd", STK_MAX_BATCH_OPS, k);
        return -1;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        int kind;
        stk_batch_op_init(&ops[i], 0);
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "id", &kind, &ops[i].alpha)) {
            Py_DECREF(seq);
            return -1;
        }
        ops[i].kind = (stk_batch_op_kind)kind;
    }
    *n = (uint32_t)k;
    Py_DECREF(seq);
    return 0;
}

void stkpy_loader_args_release(stkpy_loader_args *a)
{
    if (a->ibuf.obj)
        PyBuffer_Release(&a->ibuf);
    if (a->wbuf.obj)
        PyBuffer_Release(&a->wbuf);
    PyMem_Free(a->paths);
    a->paths = NULL;
    Py_CLEAR(a->keep);
}

int stkpy_loader_args_parse(PyObject *args, PyObject *kw, stkpy_loader_args *a)
{
    static char *kwlist[] = {
        "data",         "batch_size",  "n_threads",    "n_slots",         "seed",
        "rank",         "world",       "shuffle",      "drop_last",       "skip_corrupt",
        "verify",       "pinned",      "transform",    "transform_field", "autotune",
        "trace_events", "device",      "pinned_limit", "batch_ops",       "batch_choice",
        "num_classes",  "label_field", "map_fn",       "map_fields",      "memory_budget",
        "indices",      "weights",     "num_samples",  "replacement",     "strided",
        "drop_tail",    "executor",    "caller_loads", "state",           NULL,
    };
    memset(a, 0, sizeof(*a));
    PyObject *data, *transform = Py_None;
    long long batch_size = 256;
    int n_threads = 0, n_slots = 0, rank = -1, world = -1;
    unsigned long long seed = 0;
    int shuffle = 0, drop_last = 0, skip_corrupt = 0, verify = 1, pinned = 0, autotune = 0;
    unsigned int trace_events = 0;
    const char *tfield = NULL; /* None: stk_dataset_image_field picks */
    int device = -1;
    unsigned long long pinned_limit = 0, memory_budget = 0;
    PyObject *batch_ops = Py_None, *map_fn = Py_None, *map_fields = Py_None;
    int batch_choice = 0;
    long long num_classes = 0;
    const char *label_field = NULL;
    PyObject *indices = Py_None, *weights = Py_None;
    unsigned long long num_samples = 0;
    int replacement = 0;
    int strided = 0, drop_tail = -1; /* -1: the tail follows drop_last */
    PyObject *executor = Py_None;
    int caller_loads = 0;
    const char *state = NULL;
    if (!PyArg_ParseTupleAndKeywords(
            args, kw, "O|LiiKiipppppOzpIiKOpLzOOKOOKppiOpz:Loader", kwlist, &data, &batch_size,
            &n_threads, &n_slots, &seed, &rank, &world, &shuffle, &drop_last, &skip_corrupt,
            &verify, &pinned, &transform, &tfield, &autotune, &trace_events, &device, &pinned_limit,
            &batch_ops, &batch_choice, &num_classes, &label_field, &map_fn, &map_fields,
            &memory_budget, &indices, &weights, &num_samples, &replacement, &strided, &drop_tail,
            &executor, &caller_loads, &state))
        return -1;
    stk_loader_opts *o = &a->o;
    stk_loader_opts_init(o);
    /* The epoch's order: indices (uint64) or weights (float64), C-contiguous buffers that
     * stoker/_torchcompat.py makes; copied by stk_loader_create. */
    if (indices != Py_None) {
        if (PyObject_GetBuffer(indices, &a->ibuf, PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        o->order = STK_ORDER_INDICES;
        o->indices = a->ibuf.buf;
        o->n_indices = (uint64_t)a->ibuf.len / sizeof(uint64_t);
    } else if (weights != Py_None) {
        if (PyObject_GetBuffer(weights, &a->wbuf, PyBUF_C_CONTIGUOUS) < 0)
            goto fail;
        o->order = STK_ORDER_WEIGHTED;
        o->weights = a->wbuf.buf;
        o->n_weights = (uint64_t)a->wbuf.len / sizeof(double);
        o->num_samples = num_samples;
        o->replacement = replacement;
    }
    if (batch_ops != Py_None && parse_batch_ops(batch_ops, a->ops, &o->n_batch_ops) < 0)
        goto fail;
    o->batch_ops = a->ops;
    o->batch_ops_choice = batch_choice;
    o->num_classes = num_classes;
    o->label_field = label_field;
    if (stkpy_map_setup(map_fn, map_fields, o, &a->map) < 0)
        goto fail;
    o->device = device;
    o->pinned_limit = pinned_limit;
    o->memory_budget = memory_budget;
    o->state = state; /* (borrowed from args, alive until the create that reads it) */
    if (PyObject_TypeCheck(data, &StkDataset_Type)) {
        o->dataset = stkpy_dataset_get(data);
        if (!o->dataset)
            goto fail;
        a->dataset_ref = data;
    } else {
        size_t n;
        a->paths = stkpy_paths(data, &a->keep, &n);
        if (!a->paths)
            goto fail;
        o->paths = a->paths;
        o->n_paths = n;
    }
    if (transform != Py_None) {
        o->transform = stkpy_transform_get(transform);
        if (!o->transform)
            goto fail;
        a->transform_ref = transform;
        o->transform_field = tfield;
    }
    o->batch_size = batch_size;
    o->n_threads = n_threads;
    o->n_slots = n_slots;
    o->seed = seed;
    o->rank = rank;
    o->world = world;
    o->flags = (shuffle ? STK_LOADER_SHUFFLE : 0) | (drop_last ? STK_LOADER_DROP_LAST : 0) |
               (skip_corrupt ? STK_LOADER_SKIP_CORRUPT : 0) | (verify ? 0 : STK_LOADER_NO_VERIFY) |
               (pinned ? STK_LOADER_PINNED : 0) | (autotune ? STK_LOADER_AUTOTUNE : 0) |
               (strided ? STK_LOADER_STRIDED : 0) | (caller_loads ? STK_LOADER_CALLER_LOADS : 0) |
               (drop_tail > 0    ? STK_LOADER_DROP_TAIL
                : drop_tail == 0 ? STK_LOADER_PAD_TAIL
                                 : 0);
    o->trace_events = trace_events;
    if (executor != Py_None) { /* a Python Dataset: its __getitem__ produces every row */
        if (map_fn != Py_None) {
            stkpy_invalid("executor= and map_fn= cannot be combined");
            goto fail;
        }
        if (stkpy_exec_setup(executor, o) < 0)
            goto fail;
        a->exec_ref = executor;
    }
    return 0;
fail:
    stkpy_loader_args_release(a);
    stkpy_map_free(a->map);
    a->map = NULL;
    return -1;
}

/* Loader.info(): the stk_loader_info as a dict. */
PyObject *stkpy_loader_info_dict(const stk_loader *loader)
{
    stk_loader_info i = {.struct_size = sizeof(i)};
    stk_loader_info_get(loader, &i);
    PyObject *out = Py_None, *shape = NULL; /* the transform's output, bound to the data */
    if (i.transform_ndim) {
        if (!(shape = PyTuple_New(i.transform_ndim)))
            return NULL;
        for (uint32_t k = 0; k < i.transform_ndim; k++)
            PyTuple_SET_ITEM(shape, k, PyLong_FromLongLong(i.transform_shape[k]));
        out = Py_BuildValue("{s:s,s:N}", "dtype", stkpy_dtype_name(i.transform_dtype), "shape",
                            shape);
        if (!out)
            return NULL;
    } else {
        Py_INCREF(out);
    }
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:I,s:K,s:n,s:O,s:N}", "n_threads", i.n_threads,
                         "n_slots", i.n_slots, "batch_size", i.batch_size, "rank", i.rank, "world",
                         i.world, "n_records", (unsigned long long)i.n_records, "slot_size",
                         (Py_ssize_t)i.slot_size, "pinned", i.pinned ? Py_True : Py_False,
                         "transform", out);
}

/* Loader.stats(): the stk_loader_stats as a dict (the profiler and doctor read its keys). */
PyObject *stkpy_loader_stats_dict(const stk_loader *loader)
{
    stk_loader_stats s = {.struct_size = sizeof(s)};
    stk_loader_stats_get(loader, &s);
    static const char *const where[] = {"none", "cpu", "device"};
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:I,s:I,s:s,s:O,s:K,s:K,s:i,s:s,"
        "s:K,s:K,s:K,s:K,s:s,s:K,s:K,s:K}",
        "batches", (unsigned long long)s.batches, "samples", (unsigned long long)s.samples,
        "bytes_read", (unsigned long long)s.bytes_read, "skipped", (unsigned long long)s.skipped,
        "errors", (unsigned long long)s.errors, "wall_ns", (unsigned long long)s.wall_ns, "read_ns",
        (unsigned long long)s.read_ns, "decode_ns", (unsigned long long)s.decode_ns, "augment_ns",
        (unsigned long long)s.augment_ns, "collate_ns", (unsigned long long)s.collate_ns, "copy_ns",
        (unsigned long long)s.copy_ns, "worker_wait_ns", (unsigned long long)s.worker_wait_ns,
        "consumer_wait_ns", (unsigned long long)s.consumer_wait_ns, "active_threads",
        s.active_threads, "depth", s.depth, "autotune_changes", s.autotune_changes,
        "autotune_reason", s.autotune_reason, "pinned", s.pinned ? Py_True : Py_False,
        "pinned_bytes", (unsigned long long)s.pinned_bytes, "pinned_total",
        (unsigned long long)s.pinned_total, "device", s.device, "finish",
        s.finish < 3 ? where[s.finish] : "unknown", "copies", (unsigned long long)s.copies,
        "h2d_bytes", (unsigned long long)s.h2d_bytes, "copied_bytes",
        (unsigned long long)s.copied_bytes, "finish_ns", (unsigned long long)s.finish_ns,
        "device_reason", s.device_reason, "indexed", (unsigned long long)s.indexed, "index_loaded",
        (unsigned long long)s.index_loaded, "index_unsaved", (unsigned long long)s.index_unsaved);
}
