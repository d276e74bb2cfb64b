/*
 * _core.c: the stoker._core extension module (CPython, limited to the public C API of libstoker).
 *
 * What lives here: the import-time version check (the header the module was compiled against
 * must match the library it is linked with; python-zstandard's rule), the exception table (one
 * class per stk_status under stoker.Error, py-lmdb's pattern), shared helpers (paths, dtypes)
 * and module-level functions. The types live in _dataset.c, _loader.c and _transform.c.
 *
 * Exceptions: Error(Exception) is the base. Each status has a subclass that also derives from
 * the matching built-in where one fits, so callers can catch either:
 *   STK_EINVAL    StokerInvalidError      (ValueError)
 *   STK_ENOMEM    StokerMemoryError       (MemoryError)
 *   STK_EIO       StokerIOError           (OSError)
 *   STK_EFORMAT   StokerFormatError
 *   STK_ELIMIT    StokerLimitError
 *   STK_ENOTSUP   StokerNotSupportedError
 *   STK_ESTATE    StokerStateError        (RuntimeError)
 *   STK_ECANCELED StokerCanceledError
 *   STK_EBUSY     StokerBusyError         (StokerLimitError: code that caught the ring-slots
 *                                          STK_ELIMIT of older versions still catches it)
 * Every class carries `status` (the stk_status number) as a class attribute.
 */
#include "_core.h"

#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

/* ---- exceptions ---- */

typedef struct exc_entry {
    stk_status status;
    const char *name;    /* attribute name in the module */
    const char *builtin; /* name of a builtin base, or NULL */
    stk_status parent;   /* the class of an earlier entry to derive from instead of Error; 0 */
    const char *doc;
    PyObject *cls;
} exc_entry;

static PyObject *error_base;

static exc_entry exc_table[] = {
    {STK_EINVAL, "StokerInvalidError", "ValueError", 0, "Invalid argument (STK_EINVAL).", NULL},
    {STK_ENOMEM, "StokerMemoryError", "MemoryError", 0, "Out of memory (STK_ENOMEM).", NULL},
    {STK_EIO, "StokerIOError", "OSError", 0, "I/O error: open, read, mmap (STK_EIO).", NULL},
    {STK_EFORMAT, "StokerFormatError", NULL, 0,
     "Malformed or corrupt data: bad magic, checksum, truncated file, undecodable image "
     "(STK_EFORMAT).",
     NULL},
    {STK_ELIMIT, "StokerLimitError", NULL, 0,
     "A limit was exceeded: pixels, record size, streams per batch (STK_ELIMIT).", NULL},
    {STK_ENOTSUP, "StokerNotSupportedError", NULL, 0,
     "Not supported: format version, field kind, missing driver (STK_ENOTSUP).", NULL},
    {STK_ESTATE, "StokerStateError", "RuntimeError", 0,
     "Call not valid in the object's current state (STK_ESTATE).", NULL},
    {STK_ECANCELED, "StokerCanceledError", NULL, 0, "The operation was cancelled (STK_ECANCELED).",
     NULL},
    {STK_EBUSY, "StokerBusyError", NULL, STK_ELIMIT,
     "The next ring slot is held by the caller: release the oldest batch (STK_EBUSY).", NULL},
};
#define N_EXC (sizeof(exc_table) / sizeof(exc_table[0]))

PyObject *stkpy_raise(stk_status status, const char *msg)
{
    PyObject *cls = error_base;
    for (size_t i = 0; i < N_EXC; i++)
        if (exc_table[i].status == status)
            cls = exc_table[i].cls;
    if (status == STK_ENOMEM && !msg)
        return PyErr_NoMemory();
    PyErr_SetString(cls, msg && *msg ? msg : stk_strerror(status));
    return NULL;
}

PyObject *stkpy_invalid(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return stkpy_raise(STK_EINVAL, buf);
}

/* Build the exception classes and add them to the module. */
static int add_exceptions(PyObject *m)
{
    PyObject *builtins = PyEval_GetBuiltins(); /* borrowed */
    error_base = PyErr_NewExceptionWithDoc(
        "stoker.Error", "Base class of every error stoker raises; `status` is the C status code.",
        NULL, NULL);
    if (!error_base || PyModule_AddObjectRef(m, "Error", error_base) < 0)
        return -1;
    for (size_t i = 0; i < N_EXC; i++) {
        exc_entry *e = &exc_table[i];
        PyObject *bases, *dict, *st;
        PyObject *parent = error_base;
        for (size_t k = 0; k < i && e->parent; k++)
            if (exc_table[k].status == e->parent)
                parent = exc_table[k].cls;
        if (e->builtin) {
            PyObject *b = PyDict_GetItemString(builtins, e->builtin); /* borrowed */
            if (!b)
                return -1;
            bases = PyTuple_Pack(2, parent, b);
        } else {
            bases = PyTuple_Pack(1, parent);
        }
        dict = PyDict_New();
        st = PyLong_FromLong(e->status);
        if (!bases || !dict || !st || PyDict_SetItemString(dict, "status", st) < 0) {
            Py_XDECREF(bases);
            Py_XDECREF(dict);
            Py_XDECREF(st);
            return -1;
        }
        Py_DECREF(st);
        char qualname[64];
        snprintf(qualname, sizeof(qualname), "stoker.%s", e->name);
        e->cls = PyErr_NewExceptionWithDoc(qualname, e->doc, bases, dict);
        Py_DECREF(bases);
        Py_DECREF(dict);
        if (!e->cls || PyModule_AddObjectRef(m, e->name, e->cls) < 0)
            return -1;
    }
    PyObject *st = PyLong_FromLong(0);
    if (!st || PyObject_SetAttrString(error_base, "status", st) < 0) {
        Py_XDECREF(st);
        return -1;
    }
    Py_DECREF(st);
    return 0;
}

/* ---- helpers ---- */

const char **stkpy_paths(PyObject *obj, PyObject **keep, size_t *n)
{
    *keep = NULL;
    *n = 0;
    PyObject *list;
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyObject_HasAttrString(obj, "__fspath__")) {
        list = PyList_New(1);
        if (!list)
            return NULL;
        Py_INCREF(obj);
        PyList_SET_ITEM(list, 0, obj);
    } else {
        list = PySequence_List(obj);
        if (!list) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "data must be a path (str or os.PathLike) or a list of paths, not %.100s",
                         Py_TYPE(obj)->tp_name);
            return NULL;
        }
    }
    Py_ssize_t len = PyList_GET_SIZE(list);
    if (len == 0) {
        Py_DECREF(list);
        stkpy_invalid("no data: the list of paths is empty");
        return NULL;
    }
    PyObject *enc = PyList_New(len);
    const char **paths = PyMem_Calloc((size_t)len + 1, sizeof(char *));
    if (!enc || !paths)
        goto fail;
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(PyList_GET_ITEM(list, i), &b))
            goto fail;
        PyList_SET_ITEM(enc, i, b);
        paths[i] = PyBytes_AS_STRING(b);
        if ((Py_ssize_t)strlen(paths[i]) != PyBytes_GET_SIZE(b)) {
            PyErr_SetString(PyExc_ValueError, "embedded NUL byte in a path");
            goto fail;
        }
    }
    Py_DECREF(list);
    *keep = enc;
    *n = (size_t)len;
    return paths;
fail:
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    Py_DECREF(list);
    Py_XDECREF(enc);
    PyMem_Free(paths);
    return NULL;
}

static const char *const dtype_names[] = {"uint8",   "int8",     "int16",   "int32",  "int64",
                                          "float16", "bfloat16", "float32", "float64"};
static const char *const dtype_formats[] = {"B", "b", "h", "i", "q", "e", "H", "f", "d"};
#define N_DTYPES (sizeof(dtype_names) / sizeof(dtype_names[0]))

/* ---- the process id ---- */

/* getpid() is a system call (about 2 us on a VM with page-table isolation), and a batch's way
 * through next() asked it six times (the forked-child checks): read once, renewed in the child of
 * a fork() (its pthread_atfork handler runs there; os.fork calls fork()). */
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;
static _Atomic pid_t pid_kept;

static void pid_renew(void)
{
    atomic_store_explicit(&pid_kept, getpid(), memory_order_relaxed);
}

static void pid_init(void)
{
    pid_renew();
    pthread_atfork(NULL, NULL, pid_renew);
}

pid_t stkpy_pid(void)
{
    pthread_once(&pid_once, pid_init);
    return atomic_load_explicit(&pid_kept, memory_order_relaxed);
}

const char *stkpy_dtype_name(stk_dtype dt)
{
    return (unsigned)dt < N_DTYPES ? dtype_names[dt] : "unknown";
}

const char *stkpy_dtype_format(stk_dtype dt)
{
    return (unsigned)dt < N_DTYPES ? dtype_formats[dt] : "B";
}

int stkpy_parse_dtype(PyObject *obj, stk_dtype *out)
{
    PyObject *s = PyObject_Str(obj); /* accepts "float32", numpy.dtype, torch.float32 */
    if (!s)
        return -1;
    const char *name = PyUnicode_AsUTF8(s);
    if (!name) {
        Py_DECREF(s);
        return -1;
    }
    if (strncmp(name, "torch.", 6) == 0)
        name += 6;
    static const struct {
        const char *alias;
        stk_dtype dt;
    } aliases[] = {{"half", STK_DTYPE_FLOAT16},   {"float", STK_DTYPE_FLOAT32},
                   {"double", STK_DTYPE_FLOAT64}, {"long", STK_DTYPE_INT64},
                   {"int", STK_DTYPE_INT32},      {"short", STK_DTYPE_INT16}};
    for (size_t i = 0; i < N_DTYPES; i++)
        if (strcmp(name, dtype_names[i]) == 0) {
            *out = (stk_dtype)i;
            Py_DECREF(s);
            return 0;
        }
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(name, aliases[i].alias) == 0) {
            *out = aliases[i].dt;
            Py_DECREF(s);
            return 0;
        }
    stkpy_invalid("unknown dtype '%s' (use uint8, int8, int16, int32, int64, float16, bfloat16, "
                  "float32 or float64)",
                  name);
    Py_DECREF(s);
    return -1;
}

/* ---- module functions ---- */

static PyObject *mod_version(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(stk_version_string());
}

static PyObject *mod_strerror(PyObject *self, PyObject *arg)
{
    (void)self;
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(stk_strerror((stk_status)code));
}

static PyObject *mod_has_transforms(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyBool_FromLong(stkpy_has_transforms());
}

static PyObject *mod_env_rank(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    uint32_t rank, world;
    stk_status rc = stk_env_rank(&rank, &world);
    if (rc < 0)
        return stkpy_raise(rc, stk_last_errmsg());
    return Py_BuildValue("(II)", rank, world);
}

static PyObject *mod_epoch_order(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"n", "shuffle", "seed", "epoch", "count", NULL};
    unsigned long long n, seed = 0, epoch = 0, count = ~0ULL;
    int shuffle = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "K|pKKK:epoch_order", kwlist, &n, &shuffle, &seed,
                                     &epoch, &count))
        return NULL;
    unsigned long long m = count < n ? count : n;
    if (m > ((unsigned long long)1 << 31))
        return stkpy_invalid("epoch_order: n=%llu is too large for a list", m);
    PyObject *list = PyList_New((Py_ssize_t)m);
    if (!list)
        return NULL;
    for (unsigned long long p = 0; p < m; p++) {
        PyObject *v =
            PyLong_FromUnsignedLongLong(stk_sampler_index(n, shuffle != 0, seed, epoch, p));
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)p, v);
    }
    return list;
}

static PyObject *mod_cuda_probe(PyObject *self, PyObject *args)
{
    (void)self;
    int device = 0;
    if (!PyArg_ParseTuple(args, "|i:cuda_probe", &device))
        return NULL;
    char buf[512] = "";
    stk_status rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_cuda_probe(device, buf, sizeof(buf));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Os)", rc == STK_OK ? Py_True : Py_False,
                         rc == STK_OK ? buf : stk_last_errmsg());
}

/* n_cpus() -> the library's CPU count (stk_n_cpus). */
static PyObject *mod_in_worker_call(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyBool_FromLong(stkpy_in_worker_call());
}

static PyObject *mod_n_cpus(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return PyLong_FromUnsignedLong(stk_n_cpus());
}

/* wait_status_text(status) -> how a worker process ended (stkpy_wait_status_text). */
static PyObject *mod_wait_status_text(PyObject *self, PyObject *arg)
{
    (void)self;
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    int status = v < 0 || v > INT_MAX ? -1 : (int)v;
    char buf[256];
    stkpy_wait_status_text(status, buf, sizeof(buf));
    return PyUnicode_FromString(buf);
}

/* image_extensions() -> the extensions ImageFolder reads (stk_image_extension). */
static PyObject *mod_image_extensions(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return stkpy_names(stk_n_image_extensions(), stk_image_extension);
}

/* formats() -> tuple of the format names the library reads (stk_format_name). */
static PyObject *mod_formats(PyObject *m, PyObject *noargs)
{
    (void)m;
    (void)noargs;
    return stkpy_names(stk_n_formats(), stk_format_name);
}

PyObject *stkpy_names(size_t n, const char *(*name)(size_t i))
{
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(name(i));
        if (!s)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
    }
    return t;
}

static PyObject *mod_has_audio(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
#ifdef STK_HAVE_SNDFILE
    const int sndfile = 1;
#else
    const int sndfile = 0;
#endif
#ifdef STK_HAVE_MPG123
    const int mpg123 = 1;
#else
    const int mpg123 = 0;
#endif
#ifdef STK_HAVE_FFTW
    const int fftw = 1;
#else
    const int fftw = 0;
#endif
    return Py_BuildValue("{s:O,s:O,s:O}", "sndfile", sndfile ? Py_True : Py_False, "mpg123",
                         mpg123 ? Py_True : Py_False, "fftw", fftw ? Py_True : Py_False);
}

static PyObject *mod_has_video(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
#ifdef STK_HAVE_AVCODEC
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef module_methods[] = {
    {"formats", mod_formats, METH_NOARGS,
     "formats() -> tuple: the format names Dataset(format=...) takes, in detection order."},
    {"cuda_probe", mod_cuda_probe, METH_VARARGS,
     "cuda_probe(device=0) -> (usable, text): whether stoker can use CUDA device `device` (it "
     "loads libcuda.so.1, or $STOKER_LIBCUDA, once), with the driver and device, or the reason."},
    {"version", mod_version, METH_NOARGS, "version() -> str: the library version (\"M.m.p\")."},
    {"sample_seed", stkpy_sample_seed, METH_VARARGS,
     "sample_seed(seed, epoch, index) -> int: the per-sample seed a Python Dataset's worker "
     "seeds random, NumPy and torch with (stk_sample_seed)."},
    {"in_worker_call", mod_in_worker_call, METH_NOARGS,
     "in_worker_call() -> bool: whether this thread is a loader's worker running Python code "
     "for it (a sample or a map= call): a loader must not be closed in place there."},
    {"wait_status_text", mod_wait_status_text, METH_O,
     "wait_status_text(status) -> str: how a worker process ended, from its wait status "
     "(negative: not known)."},
    {"n_cpus", mod_n_cpus, METH_NOARGS,
     "n_cpus() -> int: the CPUs this process may run on (what n_threads=0 means)."},
    {"image_extensions", mod_image_extensions, METH_NOARGS,
     "image_extensions() -> tuple: the file name extensions ImageFolder reads (\".jpg\", ...)."},
    {"recipes", stkpy_recipes, METH_NOARGS,
     "recipes() -> tuple: the names of the library's transform recipes."},
    {"recipe_ops", stkpy_recipe_ops, METH_O,
     "recipe_ops(name) -> list: the recipe's ops as the dicts Transform takes."},
    {"strerror", mod_strerror, METH_O, "strerror(code) -> str: text of a status code."},
    {"has_transforms", mod_has_transforms, METH_NOARGS,
     "has_transforms() -> bool: whether the image pipeline (decoders and transforms) is "
     "available in this build."},
    {"op_names", stkpy_op_names, METH_VARARGS,
     "op_names(media='image') -> tuple: the ops of that media kind the library supports "
     "(torchvision's, or torchaudio's, class names; 'audio.RandomCrop', ... for stoker.audio's "
     "own), in the order of its op table."},
    {"has_audio", mod_has_audio, METH_NOARGS,
     "has_audio() -> dict: which audio libraries this build has ('sndfile': WAV, FLAC, Ogg "
     "Vorbis, Opus; 'mpg123': MP3; 'fftw': the spectrograms)."},
    {"has_video", mod_has_video, METH_NOARGS,
     "has_video() -> bool: whether this build decodes video (libavformat, libavcodec and "
     "libswscale; docs/video.md)."},
    {"op_params", stkpy_op_params, METH_O,
     "op_params(name) -> tuple of (parameter, type, count): the parameters op `name` takes in "
     "an op dict, e.g. ('size', 'int64', 2)."},
    {"env_rank", mod_env_rank, METH_NOARGS,
     "env_rank() -> (rank, world): from RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS or "
     "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else (0, 1)."},
    {"epoch_order", (PyCFunction)(void (*)(void))mod_epoch_order, METH_VARARGS | METH_KEYWORDS,
     "epoch_order(n, shuffle=False, seed=0, epoch=0, count=n) -> list: the global order of an "
     "epoch (record at each position; its first `count` positions), as the loader's sampler "
     "computes it."},
    {"cli_main", stkpy_cli_main, METH_O,
     "cli_main(argv) -> int: run the stoker command line on argv (argv[0] the program name) "
     "in this process, as the `stoker` executable does; returns the exit code."},
    {"diagnose", (PyCFunction)(void (*)(void))stkpy_diagnose, METH_VARARGS | METH_KEYWORDS,
     "diagnose(wait_s, step_s, steps, samples_per_step, current_threads=None, probes=None) -> "
     "dict: the doctor's verdict (stk_diagnose) on a measured loop; probes is {threads: "
     "samples/s} of the loader alone. Keys: action, data_bound, wait_share, wait_ms, step_ms, "
     "demand, recommended, best, current (thread counts or None), data_bound_share, headroom."},
    {"tokens_open", (PyCFunction)(void (*)(void))stkpy_tokens_open, METH_VARARGS | METH_KEYWORDS,
     "tokens_open(cls, paths, seq_len, mode, ...) -> cls: a token corpus as rows "
     "(stk_tokens_open; stoker.tokens)."},
    {"tokens_mix", (PyCFunction)(void (*)(void))stkpy_tokens_mix, METH_VARARGS | METH_KEYWORDS,
     "tokens_mix(cls, parts, weights, samples=0) -> cls: a blend of token datasets, which it "
     "takes over (stk_tokens_mix; stoker.mix)."},
    {"tokens_info", stkpy_tokens_info, METH_O,
     "tokens_info(dataset) -> dict: the facts of a token dataset (stk_tokens_info_get), with "
     "'parts' for a mixture."},
    {"tokens_cu_seqlens", stkpy_tokens_cu_seqlens, METH_O,
     "tokens_cu_seqlens(seq_lens) -> bytearray: int32 0 then the running sum of the non-zero "
     "entries of an int32 buffer (a packed batch's cu_seqlens from its seq_lens)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    "stoker._core",
    "C core of stoker: datasets, writers, loaders, zero-copy batches and transforms.",
    -1,
    module_methods,
    NULL,
    NULL,
    NULL,
    NULL};

PyMODINIT_FUNC PyInit__core(void);

PyMODINIT_FUNC PyInit__core(void)
{
    if (stk_version_number() != STK_VERSION_NUMBER) {
        PyErr_Format(PyExc_ImportError,
                     "stoker._core was compiled against libstoker %d.%d.%d but is linked with %s; "
                     "rebuild the extension (make python)",
                     STK_VERSION_MAJOR, STK_VERSION_MINOR, STK_VERSION_PATCH, stk_version_string());
        return NULL;
    }
    PyTypeObject *types[] = {&StkDataset_Type,    &StkWriter_Type,   &StkLoader_Type,
                             &StkBatch_Type,      &StkTensor_Type,   &StkTransform_Type,
                             &StkThreadExec_Type, &StkGilMeter_Type, &StkProcPool_Type,
                             &StkWorkerPipe_Type};
    if (stkpy_plan_names() < 0)
        return NULL;
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyType_Ready(types[i]) < 0)
            return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    if (add_exceptions(m) < 0)
        goto fail;
    const char *names[] = {"Dataset",   "Writer",     "Loader",   "Batch",    "Tensor",
                           "Transform", "ThreadExec", "GilMeter", "ProcPool", "WorkerPipe"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (PyModule_AddObjectRef(m, names[i], (PyObject *)types[i]) < 0)
            goto fail;
    if (PyModule_AddIntConstant(m, "VERSION_NUMBER", STK_VERSION_NUMBER) < 0 ||
        PyModule_AddStringConstant(m, "__version__", stk_version_string()) < 0 ||
        stkpy_diagnose_constants(m) < 0)
        goto fail;
    static const double mean[3] = STK_IMAGENET_MEAN, std[3] = STK_IMAGENET_STD;
    PyObject *mt = Py_BuildValue("(ddd)", mean[0], mean[1], mean[2]);
    PyObject *st = Py_BuildValue("(ddd)", std[0], std[1], std[2]);
    int bad = !mt || !st || PyModule_AddObjectRef(m, "IMAGENET_MEAN", mt) < 0 ||
              PyModule_AddObjectRef(m, "IMAGENET_STD", st) < 0;
    Py_XDECREF(mt);
    Py_XDECREF(st);
    if (bad)
        goto fail;
    static const struct {
        const char *name;
        long v;
    } consts[] = {{"OK", STK_OK},         {"END", STK_END},
                  {"EINVAL", STK_EINVAL}, {"ENOMEM", STK_ENOMEM},
                  {"EIO", STK_EIO},       {"EFORMAT", STK_EFORMAT},
                  {"ELIMIT", STK_ELIMIT}, {"ENOTSUP", STK_ENOTSUP},
                  {"ESTATE", STK_ESTATE}, {"ECANCELED", STK_ECANCELED},
                  {"EBUSY", STK_EBUSY}};
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0)
            goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
