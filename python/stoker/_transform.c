/*
 * _transform.c: stoker._core.Transform, a compiled per-sample image pipeline (stk_transform).
 *
 * The Python layer (stoker/transforms.py) turns torchvision-style op objects into plain dicts;
 * this file maps each dict onto an stk_op (starting from stk_op_init's torchvision defaults) and
 * compiles them with stk_transform_create, or compiles a named recipe with stk_transform_recipe.
 * A Transform is immutable after create; loaders borrow it (the Loader object keeps a reference
 * until its C loader is destroyed, so the transform outlives every worker that uses it).
 */
#include "_core.h"

typedef struct {
    PyObject ob_base;
    stk_transform *t;
    PyObject *desc; /* what it was built from: a recipe name or the list of op dicts */
    bool strict;    /* !stk_transform_opts.lenient */
} TransformObject;

static const struct {
    const char *name;
    stk_op_kind kind;
} op_names[] = {{"RandomResizedCrop", STK_OP_RANDOM_RESIZED_CROP},
                {"Resize", STK_OP_RESIZE},
                {"CenterCrop", STK_OP_CENTER_CROP},
                {"RandomHorizontalFlip", STK_OP_RANDOM_HORIZONTAL_FLIP},
                {"ColorJitter", STK_OP_COLOR_JITTER},
                {"Normalize", STK_OP_NORMALIZE}};
#define N_OPS (sizeof(op_names) / sizeof(op_names[0]))

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

/* Read `n` doubles from d[key] (a number when n == 1, else a sequence of n numbers) into out;
 * absent keys leave out unchanged. Returns 0 or -1 with an exception. */
static int get_doubles(PyObject *d, const char *key, double *out, Py_ssize_t n)
{
    PyObject *v = PyDict_GetItemString(d, key); /* borrowed */
    if (!v || v == Py_None)
        return 0;
    if (n == 1) {
        out[0] = PyFloat_AsDouble(v);
        return out[0] == -1.0 && PyErr_Occurred() ? -1 : 0;
    }
    PyObject *t = PySequence_Tuple(v);
    if (!t)
        return -1;
    if (PyTuple_GET_SIZE(t) != n) {
        Py_DECREF(t);
        stkpy_invalid("op parameter '%s' needs %zd numbers", key, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = PyFloat_AsDouble(PyTuple_GET_ITEM(t, i));
        if (out[i] == -1.0 && PyErr_Occurred()) {
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t);
    return 0;
}

/* One op dict -> stk_op. */
static int parse_op(PyObject *d, stk_op *op)
{
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "each op is a dict with a 'kind' key");
        return -1;
    }
    PyObject *k = PyDict_GetItemString(d, "kind");
    const char *kind = k ? PyUnicode_AsUTF8(k) : NULL;
    if (!kind) {
        if (!PyErr_Occurred())
            stkpy_invalid("an op dict needs a 'kind'");
        return -1;
    }
    size_t i;
    for (i = 0; i < N_OPS; i++)
        if (strcmp(kind, op_names[i].name) == 0)
            break;
    if (i == N_OPS) {
        stkpy_invalid("unknown op '%s' (supported: RandomResizedCrop, Resize, CenterCrop, "
                      "RandomHorizontalFlip, ColorJitter, Normalize)",
                      kind);
        return -1;
    }
    stk_op_init(op, op_names[i].kind);
    double size[2] = {(double)op->size[0], (double)op->size[1]};
    double mean[3] = {op->mean[0], op->mean[1], op->mean[2]};
    double std[3] = {op->std[0], op->std[1], op->std[2]};
    if (get_doubles(d, "size", size, 2) < 0 || get_doubles(d, "scale", op->scale, 2) < 0 ||
        get_doubles(d, "ratio", op->ratio, 2) < 0 || get_doubles(d, "p", &op->p, 1) < 0 ||
        get_doubles(d, "brightness", &op->brightness, 1) < 0 ||
        get_doubles(d, "contrast", &op->contrast, 1) < 0 ||
        get_doubles(d, "saturation", &op->saturation, 1) < 0 ||
        get_doubles(d, "hue", &op->hue, 1) < 0 || get_doubles(d, "mean", mean, 3) < 0 ||
        get_doubles(d, "std", std, 3) < 0)
        return -1;
    op->size[0] = (int64_t)size[0];
    op->size[1] = (int64_t)size[1];
    for (int c = 0; c < 3; c++) {
        op->mean[c] = (float)mean[c];
        op->std[c] = (float)std[c];
    }
    return 0;
}

static PyObject *Transform_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ops", "dtype", "layout", "exact", "max_pixels", "strict", NULL};
    PyObject *ops_obj, *dtype_obj = NULL;
    const char *layout = "NCHW";
    int exact = 0, strict = 1;
    unsigned long long max_pixels = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OspKp:Transform", kwlist, &ops_obj, &dtype_obj,
                                     &layout, &exact, &max_pixels, &strict))
        return NULL;
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    if (dtype_obj && dtype_obj != Py_None && stkpy_parse_dtype(dtype_obj, &o.dtype) < 0)
        return NULL;
    if (strcmp(layout, "NCHW") == 0 || strcmp(layout, "CHW") == 0)
        o.nhwc = false;
    else if (strcmp(layout, "NHWC") == 0 || strcmp(layout, "HWC") == 0)
        o.nhwc = true;
    else
        return stkpy_invalid("layout must be 'NCHW' or 'NHWC', not '%s'", layout);
    o.exact = exact != 0;
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
        if (o.dtype != STK_DTYPE_FLOAT32 || o.nhwc || max_pixels || !strict)
            return stkpy_invalid("recipe '%s' is float32 NCHW and strict; build the ops "
                                 "yourself for another dtype, layout or strict=False",
                                 name);
        rc = stk_transform_recipe(name, exact != 0, &t);
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

static PyGetSetDef Transform_getset[] = {
    {"output", (getter)Transform_output, NULL,
     "Per-sample output: a dict with dtype and shape (without the batch dimension).", NULL},
    {"source", (getter)Transform_desc, NULL, "The recipe name or the op dicts it was built from.",
     NULL},
    {"strict", (getter)Transform_strict, NULL,
     "True (the default): a corrupt JPEG is an error; False: libjpeg's lenient recovery.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject StkTransform_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._core.Transform",
    .tp_basicsize = sizeof(TransformObject),
    .tp_dealloc = (destructor)Transform_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Transform(ops, dtype='float32', layout='NCHW', exact=False, max_pixels=0, "
              "strict=True): compile a recipe name ('imagenet-train', 'imagenet-val') or a list "
              "of op dicts ({'kind': 'Resize', 'size': (256, 0)}, ...). strict=False keeps "
              "libjpeg's lenient decoding of corrupt JPEGs instead of failing the record.",
    .tp_new = Transform_new,
    .tp_getset = Transform_getset,
};
