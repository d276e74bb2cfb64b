/*
 * _core.h: declarations shared by the C files of the stoker._core extension module.
 *
 * _core.c       the module: version check, exception table, helpers, type registration
 * _dataset.c    Dataset (read side of .stk shards) and Writer (write side)
 * _loader.c     Loader (worker threads + ring)
 * _loader_opts.c  Loader's kwargs -> stk_loader_opts, info/stats -> dict (_loader_opts.h)
 * _batch.c      Batch (one borrowed ring slot)
 * _tensor.c     Tensor (a zero-copy buffer-protocol view of one tensor of a batch)
 * _transform.c  Transform (a compiled image pipeline) and the op table
 * _diagnose.c   diagnose(): the doctor's decision (stk_diagnose) for stoker.profile
 * _map.c        Loader(map=fn): the per-sample callback on the worker threads
 * _pyexec.c     a Python Dataset's __getitem__ on the worker threads; the GIL meter
 * _procpool.c   a Python Dataset's __getitem__ in worker processes writing the shared ring
 * _ticketloop.c  a worker process's end of its socket: tickets answered without Python between
 *                samples (_procwire.h: the wire format both speak)
 * _leafput.c    a sample's fixed leaves into its rows by a plan, without Python (both executors)
 * _tokens.c     token corpora: tokens_open, tokens_mix, tokens_info (stoker/tokens.py)
 * _cli.c        cli_main(argv): the `stoker` command line in this process (python -m stoker)
 *
 * The extension uses the public C API only (include/stoker.h), as the CLI does.
 */
#ifndef STK_PY_CORE_H
#define STK_PY_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sys/types.h>

/* The op introspection (transforms by name), the sampler (epoch_order), the rank from the
 * environment and the doctor's decision are building blocks. */
#define STK_BUILDING_BLOCKS
#include "stoker.h"

/* Raise the stoker exception for `status` (a negative stk_status) with `msg`, or with
 * stk_strerror(status) when msg is NULL or empty; returns NULL. */
PyObject *stkpy_raise(stk_status status, const char *msg);

/* Raise stoker's invalid-argument error (a ValueError) with a formatted message; returns
 * NULL. */
PyObject *stkpy_invalid(const char *fmt, ...);

/* Convert a str/bytes/os.PathLike or a sequence of them into a NULL-terminated array of C
 * strings. On success *keep holds the objects that own the strings (release it after use)
 * and *n the count. Returns the array (free with PyMem_Free) or NULL with an exception. */
const char **stkpy_paths(PyObject *obj, PyObject **keep, size_t *n);

/* getpid() without a system call: read once, renewed in the child of a fork() (_core.c). */
pid_t stkpy_pid(void);

/* Name of a dtype as numpy spells it, and the struct-module format character for the buffer
 * protocol (bfloat16 has none: exported as uint16 'H'). */
const char *stkpy_dtype_name(stk_dtype dt);
const char *stkpy_dtype_format(stk_dtype dt);
/* Parse a dtype name; returns 0 and sets *out, or -1 with a ValueError. */
int stkpy_parse_dtype(PyObject *obj, stk_dtype *out);

/* Type objects (initialised by the module). */
extern PyTypeObject StkDataset_Type;
extern PyTypeObject StkWriter_Type;
extern PyTypeObject StkLoader_Type;
extern PyTypeObject StkBatch_Type;
extern PyTypeObject StkTensor_Type;
extern PyTypeObject StkTransform_Type;

/* The C dataset of a Dataset object (NULL with an exception if closed or not a Dataset). */
const stk_dataset *stkpy_dataset_get(PyObject *obj);
/* A loader starts or stops borrowing a Dataset: close() refuses while it is borrowed. */
void stkpy_dataset_borrow(PyObject *obj, int delta);
/* A new object of `type` (StkDataset_Type or a subclass) owning `ds` (closed on failure). */
PyObject *stkpy_dataset_wrap(PyTypeObject *type, stk_dataset *ds);
/* Take the C dataset out of a Dataset object (which is closed after), for a new owner (a token
 * mixture); NULL with an exception when closed or in use. stkpy_dataset_give puts it back. */
stk_dataset *stkpy_dataset_take(PyObject *obj);
void stkpy_dataset_give(PyObject *obj, stk_dataset *ds);

/* _tokens.c: token corpora (stk_tokens_open, stk_tokens_mix, stk_tokens_info_get). */
PyObject *stkpy_tokens_open(PyObject *module, PyObject *args, PyObject *kw);
PyObject *stkpy_tokens_mix(PyObject *module, PyObject *args, PyObject *kw);
PyObject *stkpy_tokens_info(PyObject *module, PyObject *ds);
PyObject *stkpy_tokens_cu_seqlens(PyObject *module, PyObject *seq_lens);

/* The C transform of a Transform object (NULL with an exception if not a Transform). */
const stk_transform *stkpy_transform_get(PyObject *obj);

/* A new Batch owning the borrowed slot `b` (released in its dealloc; released at once when
 * the object cannot be created). Returns a new reference, or NULL with an exception. */
PyObject *stkpy_batch_new(stk_batch *b);
/* A new Tensor viewing `data` (C-contiguous, `ndim` dims of `shape`), keeping `owner` alive
 * while it exists. Returns a new reference, or NULL with an exception. */
PyObject *stkpy_tensor_new(PyObject *owner, const char *name, stk_dtype dtype, void *data, int ndim,
                           const int64_t *shape);

/* _core.diagnose(wait_s, step_s, steps, samples_per_step, current_threads=None, probes=None)
 * -> dict: stk_diagnose's verdict; probes is {threads: samples/s}. */
PyObject *stkpy_diagnose(PyObject *module, PyObject *args, PyObject *kw);
/* Add DIAG_DATA_BOUND_SHARE and DIAG_HEADROOM to the module; 0 or -1 with an exception. */
int stkpy_diagnose_constants(PyObject *m);

/* _core.cli_main(argv) -> int: run the `stoker` command line (cli/) on argv (list of str,
 * argv[0] the program name) in this process; returns its exit code. */
PyObject *stkpy_cli_main(PyObject *self, PyObject *arg);

/* Whether the image pipeline is linked and works (a recipe compiles). */
int stkpy_has_transforms(void);

/* _core.op_names() -> tuple of the library's op names; _core.op_params(name) -> tuple of
 * (parameter name, element type, count) from its op table. */
PyObject *stkpy_op_names(PyObject *self, PyObject *args);
PyObject *stkpy_op_params(PyObject *self, PyObject *name);
/* recipes() -> the recipe names; recipe_ops(name) -> its ops as Transform's dicts (the
 * library's recipes: stk_recipe_name, stk_recipe_op). */
PyObject *stkpy_recipes(PyObject *self, PyObject *noargs);
/* The tuple of name(0 .. n-1) (the library's lists: formats, recipes, image extensions). */
PyObject *stkpy_names(size_t n, const char *(*name)(size_t i));
PyObject *stkpy_recipe_ops(PyObject *self, PyObject *name);

/* Loader(map=...) (_map.c): set o's sample_fn from the loader.py wrapper `fn` and its output
 * fields [(name, kind, dtype, shape)]; *out is NULL when fn is None. Free the map after the
 * C loader is destroyed. Returns 0, or -1 with an exception. */
struct stkpy_map;
int stkpy_map_setup(PyObject *fn, PyObject *fields, stk_loader_opts *o, struct stkpy_map **out);
void stkpy_map_free(struct stkpy_map *m);
/* Parse [(name, kind, dtype, shape)] (kind "int64", "float32" or "array") into at most
 * STK_MAX_FIELDS sample fields; 0, or -1 with an exception. */
int stkpy_sample_fields(PyObject *fields, stk_field *out, size_t *n_out);
/* "WHAT raised ValueError: message" (or "ValueError: message" when what is NULL) of the pending
 * exception, which is cleared, into err. GIL held. */
void stkpy_exception_text(const char *what, char *err, size_t err_size);

/* The GIL on a loader's worker thread (_pyexec.c): like PyGILState_Ensure/Release, but the
 * thread's Python state is kept between calls, recorded in `reg` (one per executor), so a
 * per-sample call does not build and delete it each time and thread-local values persist.
 * stkpy_tstates_free (GIL held, after the loader's threads were joined) deletes them. */
struct stkpy_tstates {
    pthread_mutex_t mu;
    PyThreadState **v;
    size_t n, cap;
    pid_t pid; /* the process the states are in: a forked child's copy must not delete them */
};
PyGILState_STATE stkpy_gil_take(struct stkpy_tstates *reg);
void stkpy_gil_drop(PyGILState_STATE g);
/* Whether the calling thread is a loader's worker inside a call into Python (between
 * stkpy_gil_take and stkpy_gil_drop): a finalizer the collector runs there must not close that
 * loader in place, since closing joins the very thread it runs on. */
bool stkpy_in_worker_call(void);
void stkpy_tstates_init(struct stkpy_tstates *reg);
void stkpy_tstates_free(struct stkpy_tstates *reg);
/* Whether the interpreter is finalizing (a loader thread must not take the GIL then: it would
 * hang; the thread states were deleted). */
int stkpy_finalizing(void);

/* Python datasets (_pyexec.c: the thread executor and the GIL meter; _procpool.c: worker
 * processes). Loader(executor=obj) with a ThreadExec or a ProcPool: set o's sample_fn_v2,
 * sample_ctx and sample_fields from it (the Loader keeps a reference until its C loader is
 * destroyed). Returns 0, or -1 with an exception (not an executor). */
int stkpy_exec_setup(PyObject *exec, stk_loader_opts *o);
/* One sample of the batch the consumer waits for, run on this thread (GIL held) by ThreadExec
 * `exec` (stk_loader_help): 0 (*ran 1 when one ran), or -1 with an exception (a
 * KeyboardInterrupt the sample raised: it runs again at the next call). */
int stkpy_help_run(PyObject *exec, stk_loader *L, uint32_t *ran);
extern PyTypeObject StkThreadExec_Type;
extern PyTypeObject StkGilMeter_Type;
extern PyTypeObject StkProcPool_Type;
/* _ticketloop.c: a worker process's end of its socket. */
extern PyTypeObject StkWorkerPipe_Type;

/* _leafput.c: a sample's fixed leaves written by _collate.Layout.fast_plan()'s plan. A leaf's
 * kind (the plan's first item): a tensor written from its memory, an int or float from its
 * value, another fixed kind through _collate._leaf_bytes. */
enum { STKPY_FAST_TENSOR = 1, STKPY_FAST_INT = 2, STKPY_FAST_FLOAT = 3, STKPY_FAST_OTHER = 4 };
#define STKPY_TENSOR_CHECKS 6 /* the attributes a tensor leaf's put reads */
typedef struct {
    int kind;
    size_t nbytes;
    PyTypeObject *type;              /* the leaf's exact type */
    PyObject *leaf, *tdtype, *shape; /* (borrowed from the plan) */
    /* a tensor leaf: its type's descriptors of the attributes put_tensor reads, in
     * _leafput.c's order (owned; NULL: looked up by name) */
    PyObject *desc[STKPY_TENSOR_CHECKS];
} stkpy_plan_leaf;
typedef struct {
    PyObject *owner;      /* the plan tuple (NULL: no plan; every sample is Python's) */
    PyTypeObject *type;   /* the sample's container type */
    PyObject *keys;       /* a dict's keys in order, or NULL (a tuple or list) */
    PyObject *leaf_bytes; /* _collate._leaf_bytes */
    size_t n;
    stkpy_plan_leaf leaf[STK_MAX_FIELDS];
} stkpy_plan;
/* Leaf i's n bytes from src into the sample's row: false when they cannot go (the caller's
 * Python path then takes the sample whole). */
typedef bool (*stkpy_put_fn)(void *ctx, size_t i, const void *src, size_t n);
/* plan (a fast_plan() tuple, or None) -> *out, holding a reference: 0, or -1 with an exception. */
int stkpy_plan_parse(PyObject *plan, stkpy_plan *out);
void stkpy_plan_clear(stkpy_plan *pl);
/* Every leaf of `sample` through put(ctx, ...), when the sample fits the plan (GIL held). */
bool stkpy_plan_put(const stkpy_plan *pl, PyObject *sample, stkpy_put_fn put, void *ctx);
/* The attribute names it looks up, made once by the module's init (0, or -1 with an exception). */
int stkpy_plan_names(void);
/* The ProcPool side of stkpy_exec_setup, and the sample seed (module function). */
int stkpy_procpool_setup(PyObject *pool, stk_loader_opts *o);

/* How a worker process ended, from its wait status (< 0: not known), into buf: "was killed by
 * signal 9 (Killed; ...)", "exited with status 1" (_procpool.c; also _core.wait_status_text for
 * the iterable loader's workers). */
void stkpy_wait_status_text(int status, char *buf, size_t size);
PyObject *stkpy_sample_seed(PyObject *self, PyObject *args);

#endif /* STK_PY_CORE_H */
