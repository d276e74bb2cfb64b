/*
 * _transform.c: stoker._core.Transform, a compiled per-sample pipeline (stk_transform: image or
 * audio, stk_transform_media).
 *
 * The Python layer (stoker/transforms/) turns torchvision-style op objects into plain dicts;
 * this file maps each dict onto an stk_op through the library's op table (stk_op_find,
 * stk_op_param_at: no op is named here, so a new op in the library needs no code in this file),
 * starting from stk_op_init's torchvision defaults, and compiles them with stk_transform_create,
 * or compiles a named recipe with stk_transform_recipe. op_names() and op_params(name) expose
 * the table to Python.
 * A Transform is immutable after create; loaders borrow it (the Loader object keeps a reference
 * until its C loader is destroyed, so the transform outlives every worker that uses it).
 */
#include "_core.h"

#include <math.h>

typedef struct {
    PyObject ob_base;
    stk_transform *t;
    PyObject *desc; /* what it was built from: a recipe name or the list of op dicts */
    bool strict;    /* !stk_transform_opts.lenient */
    bool exact;     /* stk_transform_opts.exact, as given or as decided for exact=None */
} TransformObject;

const stk_transform *stkpy_transform_get(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &StkTransform_Type)) {
        PyErr_Format(PyExc_TypeError, "expected a stoker._core.Transform, not %.100s",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return ((TransformObject *)obj)->t;
}

int stkpy_has_transforms(void)
{
    static int cached = -1;
    if (cached < 0) {
        stk_transform *t = NULL;
        cached = stk_transform_recipe("imagenet-val", false, &t) == STK_OK;
        stk_transform_destroy(t);
    }
    return cached;
}

/* Store one element of parameter `pa` (index i) from the number v into op. Returns 0, or -1
 * (no exception set) when v is not a number of the parameter's type. */
static int set_element(stk_op *op, const stk_op_param *pa, uint32_t i, PyObject *v)
{
    char *at = (char *)op + pa->offset;
    if (!PyNumber_Check(v))
        return -1;
    if (pa->type == STK_OP_PARAM_INT64) {
        long long n;
        if (PyFloat_Check(v)) { /* 224.0 is 224; 224.5 is an error */
            double d = PyFloat_AS_DOUBLE(v);
            if (!(d == floor(d) && fabs(d) < 9.0e18))
                return -1;
            n = (long long)d;
        } else {
            n = PyLong_AsLongLong(v);
            if (n == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return -1;
            }
        }
        ((int64_t *)(void *)at)[i] = n;
        return 0;
    }
    double d = PyFloat_AsDouble(v);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (pa->type == STK_OP_PARAM_FLOAT)
        ((float *)(void *)at)[i] = (float)d;
    else
        ((double *)(void *)at)[i] = d;
    return 0;
}

/* Set parameter `pa` from v: a number when it has one element, else a sequence of `count`
 * numbers. Returns 0 or -1 with a ValueError naming the op and the parameter. */
static int set_param(stk_op *op, const stk_op_param *pa, PyObject *v, const char *op_name)
{
    int ok = 0;
    if (pa->n_values == 1) {
        ok = set_element(op, pa, 0, v) == 0;
    } else {
        PyObject *t = PySequence_Check(v) && !PyUnicode_Check(v) ? PySequence_Tuple(v) : NULL;
        PyErr_Clear();
        ok = t && PyTuple_GET_SIZE(t) == (Py_ssize_t)pa->n_values;
        for (uint32_t i = 0; ok && i < pa->n_values; i++)
            ok = set_element(op, pa, i, PyTuple_GET_ITEM(t, i)) == 0;
        Py_XDECREF(t);
    }
    if (ok)
        return 0;
    PyObject *r = PyObject_Repr(v);
    const char *rs = r ? PyUnicode_AsUTF8(r) : NULL;
    PyErr_Clear();
    const char *what = pa->type == STK_OP_PARAM_INT64 ? "integer" : "number";
    if (pa->n_values == 1)
        stkpy_invalid("%s: parameter '%s' needs a %s, got %.200s", op_name, pa->name, what,
                      rs ? rs : "?");
    else
        stkpy_invalid("%s: parameter '%s' needs %u %ss, got %.200s", op_name, pa->name,
                      (unsigned)pa->n_values, what, rs ? rs : "?");
    Py_XDECREF(r);
    return -1;
}

/* The parameter of `kind` named `key`, or NULL. */
static const stk_op_param *find_param(stk_op_kind kind, const char *key)
{
    for (size_t j = 0; j < stk_op_n_params(kind); j++) {
        const stk_op_param *pa = stk_op_param_at(kind, j);
        if (strcmp(pa->name, key) == 0)
            return pa;
    }
    return NULL;
}

/* One op dict -> stk_op, through the library's op table: the kind by name (stk_op_find), the
 * torchvision defaults (stk_op_init), then each other key as one of the kind's parameters. */
static int parse_op(PyObject *d, stk_op *op)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "each op is a dict with a 'kind' key");
        return -1;
    }
    PyObject *k = PyDict_GetItemString(d, "kind"); /* borrowed */
    const char *name = k && PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
    if (!name) {
        if (!PyErr_Occurred())
            stkpy_invalid("an op dict needs a 'kind': the op's name (a str)");
        return -1;
    }
    stk_op_kind kind;
    if (stk_op_find(name, &kind) < 0) {
        stkpy_invalid("%s", stk_last_errmsg()); /* names the supported ops */
        return -1;
    }
    stk_op_init(op, kind);
    PyObject *key, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &v)) {
        const char *kn = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!kn) {
            if (!PyErr_Occurred())
                stkpy_invalid("%s: op dict keys are parameter names (str)", name);
            return -1;
        }
        if (strcmp(kn, "kind") == 0 || v == Py_None) /* None: the default */
            continue;
        const stk_op_param *pa = find_param(kind, kn);
        if (!pa) {
            char known[256] = "";
            size_t len = 0;
            for (size_t j = 0; j < stk_op_n_params(kind) && len < sizeof(known); j++)
                len += (size_t)snprintf(known + len, sizeof(known) - len, "%s%s", j ? ", " : "",
                                        stk_op_param_at(kind, j)->name);
            stkpy_invalid("%s has no parameter '%s' (its parameters: %s)", name, kn, known);
            return -1;
        }
        if (set_param(op, pa, v, name) < 0)
            return -1;
    }
    return 0;
}

/* "image" -> STK_MEDIA_IMAGE, "audio" -> STK_MEDIA_AUDIO; -1 with a ValueError otherwise. */
static int parse_media(const char *name, stk_media *out)
{
    if (strcmp(name, "image") == 0)
        *out = STK_MEDIA_IMAGE;
    else if (strcmp(name, "audio") == 0)
        *out = STK_MEDIA_AUDIO;
    else if (strcmp(name, "video") == 0)
        *out = STK_MEDIA_VIDEO;
    else
        return stkpy_invalid("media must be 'image', 'audio' or 'video', not '%s'", name), -1;
    return 0;
}

PyObject *stkpy_op_names(PyObject *self, PyObject *args)
{
    (void)self;
    const char *mname = "image";
    stk_media media;
    if (!PyArg_ParseTuple(args, "|s:op_names", &mname) || parse_media(mname, &media) < 0)
        return NULL;
    size_t n = stk_op_n_kinds();
    PyObject *t = PyList_New(0);
    if (!t)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        stk_op_kind kind = STK_OP_RANDOM_RESIZED_CROP;
        stk_op_kind_at(i, &kind);
        if (stk_op_media(kind) != media)
            continue;
        PyObject *s = PyUnicode_FromString(stk_op_name(kind));
        if (!s || PyList_Append(t, s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(t);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *tuple = PyList_AsTuple(t);
    Py_DECREF(t);
    return tuple;
}

PyObject *stkpy_op_params(PyObject *self, PyObject *name_obj)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (!name)
        return NULL;
    stk_op_kind kind;
    if (stk_op_find(name, &kind) < 0)
        return stkpy_invalid("%s", stk_last_errmsg());
    static const char *const types[] = {"int64", "float64", "float32"};
    size_t n = stk_op_n_params(kind);
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (!t)
        return NULL;
    for (size_t j = 0; j < n; j++) {
        const stk_op_param *pa = stk_op_param_at(kind, j);
        const char *ty = (unsigned)pa->type < 3 ? types[pa->type] : "?";
        PyObject *e = Py_BuildValue("(ssI)", pa->name, ty, (unsigned)pa->n_values);
        if (!e) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)j, e);
    }
    return t;
}

/* Element i of parameter `pa` of op as a Python number. */
static PyObject *get_element(const stk_op *op, const stk_op_param *pa, uint32_t i)
{
    const char *at = (const char *)op + pa->offset;
    if (pa->type == STK_OP_PARAM_INT64)
        return PyLong_FromLongLong(((const int64_t *)(const void *)at)[i]);
    if (pa->type == STK_OP_PARAM_FLOAT) { /* the shortest decimal that reads back as this float:
                                           * 0.485f is 0.485, as it was written */
        float f = ((const float *)(const void *)at)[i];
        char buf[32];
        for (int digits = 6; digits <= 9; digits++) {
            snprintf(buf, sizeof(buf), "%.*g", digits, (double)f);
            if (strtof(buf, NULL) == f)
                break;
        }
        return PyFloat_FromDouble(strtod(buf, NULL));
    }
    return PyFloat_FromDouble(((const double *)(const void *)at)[i]);
}

/* An op as the dict Transform takes: {"kind": name, parameter: number or tuple, ...}. */
static PyObject *op_dict(const stk_op *op)
{
    PyObject *d = Py_BuildValue("{s:s}", "kind", stk_op_name(op->kind));
    for (size_t j = 0; d && j < stk_op_n_params(op->kind); j++) {
        const stk_op_param *pa = stk_op_param_at(op->kind, j);
        PyObject *v = pa->n_values == 1 ? get_element(op, pa, 0) : PyTuple_New(pa->n_values);
        for (uint32_t i = 0; v && pa->n_values > 1 && i < pa->n_values; i++) {
            PyObject *e = get_element(op, pa, i);
            if (!e)
                Py_CLEAR(v);
            else
                PyTuple_SET_ITEM(v, i, e);
        }
        if (!v || PyDict_SetItemString(d, pa->name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

PyObject *stkpy_recipes(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    return stkpy_names(stk_n_recipes(), stk_recipe_name);
}

PyObject *stkpy_recipe_ops(PyObject *self, PyObject *name_obj)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(name_obj);
    if (!name)
        return NULL;
    size_t n = stk_recipe_n_ops(name);
    if (n == 0)
        return stkpy_invalid("unknown transform recipe '%s'", name);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        stk_op op;
        stk_op_init(&op, STK_OP_NORMALIZE); /* any kind: stk_recipe_op fills it */
        PyObject *d = stk_recipe_op(name, i, &op) == STK_OK ? op_dict(&op) : NULL;
        if (!d) {
            if (!PyErr_Occurred())
                stkpy_invalid("%s", stk_last_errmsg());
            Py_CLEAR(list);
        } else {
            PyList_SET_ITEM(list, (Py_ssize_t)i, d);
        }
    }
    return list;
}

static PyObject *Transform_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ops",         "dtype",           "layout",
                             "exact",       "max_pixels",      "finish",
                             "strict",      "media",           "sample_rate",
                             "lengths",     "frames_per_clip", "frame_step",
                             "frame_rate",  "clips_per_video", "clip_sampling",
                             "short_video", "decoder_threads", "max_clip_pixels",
                             NULL};
    PyObject *ops_obj, *dtype_obj = NULL, *exact_obj = Py_False;
    const char *layout = "NCHW", *finish = NULL, *media = NULL, *sampling = NULL, *shortv = NULL;
    int strict = 1, lengths = 0;
    unsigned long long max_pixels = 0, max_clip_pixels = 0;
    unsigned int sample_rate = 0, frames_per_clip = 16, frame_step = 1, clips_per_video = 1,
                 decoder_threads = 0;
    double frame_rate = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OsOKzpzIpIIdIzzIK:Transform", kwlist, &ops_obj,
                                     &dtype_obj, &layout, &exact_obj, &max_pixels, &finish, &strict,
                                     &media, &sample_rate, &lengths, &frames_per_clip, &frame_step,
                                     &frame_rate, &clips_per_video, &sampling, &shortv,
                                     &decoder_threads, &max_clip_pixels))
        return NULL;
    /* exact=None: decide by the ops (issue 24): exact when none draws from the sample's stream
     * (an evaluation transform, whose results must not depend on the loader), else fast. */
    bool auto_exact = exact_obj == Py_None;
    int exact = auto_exact ? 0 : PyObject_IsTrue(exact_obj);
    if (exact < 0)
        return NULL;
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    if (media && parse_media(media, &o.media) < 0)
        return NULL;
    o.sample_rate = sample_rate;
    o.lengths = lengths != 0;
    o.frames_per_clip = frames_per_clip;
    o.frame_step = frame_step;
    o.frame_rate = frame_rate;
    o.clips_per_video = clips_per_video;
    o.decoder_threads = decoder_threads;
    if (max_clip_pixels)
        o.max_clip_pixels = max_clip_pixels;
    if (sampling && strcmp(sampling, "uniform") == 0)
        o.clip_sampling = STK_CLIP_UNIFORM;
    else if (sampling && strcmp(sampling, "random") != 0)
        return stkpy_invalid("clip_sampling must be 'random' or 'uniform', not '%s'", sampling);
    if (shortv && strcmp(shortv, "loop") == 0)
        o.short_video = STK_SHORT_LOOP;
    else if (shortv && strcmp(shortv, "skip") == 0)
        o.short_video = STK_SHORT_FAIL;
    else if (shortv && strcmp(shortv, "pad") != 0)
        return stkpy_invalid("short_video must be 'pad', 'loop' or 'skip', not '%s'", shortv);
    if (dtype_obj && dtype_obj != Py_None && stkpy_parse_dtype(dtype_obj, &o.dtype) < 0)
        return NULL;
    if (strcmp(layout, "NCHW") == 0 || strcmp(layout, "CHW") == 0)
        o.nhwc = false;
    else if (strcmp(layout, "NHWC") == 0 || strcmp(layout, "HWC") == 0)
        o.nhwc = true;
    else
        return stkpy_invalid("layout must be 'NCHW' or 'NHWC', not '%s'", layout);
    o.exact = exact != 0;
    if (finish && strcmp(finish, "device") != 0)
        return stkpy_invalid("finish must be 'device' or None, not '%s'", finish);
    o.finish_on_device = finish != NULL; /* the loader normalises and casts after the copy */
    o.lenient = !strict;
    if (max_pixels)
        o.max_pixels = max_pixels;
    stk_transform *t = NULL;
    stk_status rc;
    char err[512] = "";
    if (PyUnicode_Check(ops_obj)) {
        /* a recipe name; dtype and layout must stay the recipe's (float32 NCHW) */
        const char *name = PyUnicode_AsUTF8(ops_obj);
        if (!name)
            return NULL;
        if (o.dtype != STK_DTYPE_FLOAT32 || o.nhwc || max_pixels || finish || !strict)
            return stkpy_invalid("recipe '%s' is float32 NCHW and strict; build the ops "
                                 "yourself for another dtype, layout, finish or strict=False",
                                 name);
        rc = stk_transform_recipe(name, exact != 0, &t);
        if (rc == STK_OK && auto_exact && !stk_transform_draws(t)) {
            stk_transform_destroy(t);
            t = NULL;
            exact = 1;
            rc = stk_transform_recipe(name, true, &t);
        }
    } else {
        PyObject *seq = PySequence_Fast(ops_obj, "ops must be a recipe name or a list of dicts");
        if (!seq)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        stk_op *ops = PyMem_Calloc(n ? (size_t)n : 1, sizeof(stk_op));
        if (!ops) {
            Py_DECREF(seq);
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++)
            if (parse_op(PySequence_Fast_GET_ITEM(seq, i), &ops[i]) < 0) {
                PyMem_Free(ops);
                Py_DECREF(seq);
                return NULL;
            }
        Py_DECREF(seq);
        if (auto_exact) {
            exact = 1;
            for (Py_ssize_t i = 0; i < n; i++)
                if (stk_op_draws(ops[i].kind))
                    exact = 0;
            o.exact = exact != 0;
        }
        o.ops = ops;
        o.n_ops = (size_t)n;
        rc = stk_transform_create(&o, &t);
        PyMem_Free(ops);
    }
    if (rc < 0) {
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
        if (rc == STK_ENOTSUP && !stkpy_has_transforms())
            return stkpy_raise(rc, "this build of stoker has no image pipeline "
                                   "(stoker._core.has_transforms() is False)");
        return stkpy_raise(rc, err);
    }
    TransformObject *self = (TransformObject *)type->tp_alloc(type, 0);
    if (!self) {
        stk_transform_destroy(t);
        return NULL;
    }
    self->t = t;
    self->desc = Py_NewRef(ops_obj);
    self->strict = strict != 0;
    self->exact = exact != 0;
    return (PyObject *)self;
}

static void Transform_dealloc(TransformObject *self)
{
    stk_transform_destroy(self->t);
    Py_XDECREF(self->desc);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Transform_output(TransformObject *self, void *closure)
{
    (void)closure;
    stk_dtype dt;
    uint32_t ndim;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(self->t, &dt, &ndim, shape);
    PyObject *s = PyTuple_New(ndim);
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < ndim; i++)
        PyTuple_SET_ITEM(s, i, PyLong_FromLongLong(shape[i]));
    return Py_BuildValue("{s:s,s:N}", "dtype", stkpy_dtype_name(dt), "shape", s);
}

static PyObject *Transform_desc(TransformObject *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->desc);
}

static PyObject *Transform_strict(TransformObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->strict);
}

static PyObject *Transform_exact(TransformObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->exact);
}

static PyObject *Transform_draws(TransformObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(stk_transform_draws(self->t));
}

static PyObject *Transform_media(TransformObject *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(stk_transform_media(self->t) == STK_MEDIA_AUDIO ? "audio"
                                                                                : "image");
}

static PyGetSetDef Transform_getset[] = {
    {"output", (getter)Transform_output, NULL,
     "Per-sample output: a dict with dtype and shape (without the batch dimension).", NULL},
    {"source", (getter)Transform_desc, NULL, "The recipe name or the op dicts it was built from.",
     NULL},
    {"strict", (getter)Transform_strict, NULL,
     "True (the default): a corrupt JPEG is an error; False: libjpeg's lenient recovery.", NULL},
    {"exact", (getter)Transform_exact, NULL,
     "Whether it decodes exactly (full scale, PIL's IDCT and upsampling): as given, or for "
     "exact=None whether no op draws from the sample's random stream.",
     NULL},
    {"draws", (getter)Transform_draws, NULL,
     "Whether any op draws from the sample's random stream (False: an evaluation transform).",
     NULL},
    {"media", (getter)Transform_media, NULL, "'image' or 'audio': the pipeline it runs.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject StkTransform_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Transform",
    .tp_basicsize = sizeof(TransformObject),
    .tp_dealloc = (destructor)Transform_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Transform(ops, dtype='float32', layout='NCHW', exact=False, max_pixels=0, "
              "finish=None, strict=True): compile a recipe name ('imagenet-train', "
              "'imagenet-val') or a list of op dicts ({'kind': 'Resize', 'size': (256, 0)}, ...). "
              "exact=None: exact when no op draws from the sample's random stream (.exact says "
              "which was chosen, .draws whether an op draws). "
              "finish='device': the workers output uint8 [H, W, 3] and a loader finishes (layout, "
              "Normalize, dtype) after its copy to the device; .output is the finished output. "
              "strict=False keeps libjpeg's lenient decoding of corrupt JPEGs instead of failing "
              "the record. Audio (media='audio', or audio op dicts): sample_rate= (the rate the "
              "ops run at without a Resample op; 0: the files' own), lengths=True (the output "
              "carries each row's valid length); .output shows -1 where a loader fills it in "
              "from its data. Video (media='video'; the ops are image ops applied to every frame "
              "of a clip with one set of parameters): frames_per_clip=16, frame_step=1 or "
              "frame_rate=F (seconds, the container's timestamps), clips_per_video=1, "
              "clip_sampling='random' or 'uniform', short_video='pad', 'loop' or 'skip', "
              "decoder_threads=0 (the loader's thread plan), max_clip_pixels=2**31; layout 'NHWC' "
              "gives [T, H, W, 3] per "
              "sample, 'NCHW' [3, T, H, W].",
    .tp_new = Transform_new,
    .tp_getset = Transform_getset,
};
