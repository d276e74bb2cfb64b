/*
 * _loader_opts.h: the Loader's C structs to and from Python (_loader_opts.c, moved out of
 * _loader.c): keyword arguments -> stk_loader_opts, info/stats -> dict. Shared by _loader.c
 * and _loader_opts.c only.
 */
#ifndef STK_PY_LOADER_OPTS_H
#define STK_PY_LOADER_OPTS_H

#include "_core.h"

/* The options of one Loader(...) call and what they borrow or own until stk_loader_create has
 * copied them. `o` points into `ops`, the buffers and the argument objects: keep the struct
 * where stkpy_loader_args_parse filled it and the call's arguments alive until create. */
typedef struct stkpy_loader_args {
    stk_loader_opts o;
    stk_batch_op ops[STK_MAX_BATCH_OPS];
    Py_buffer ibuf, wbuf;    /* indices= / weights= (released by stkpy_loader_args_release) */
    const char **paths;      /* data= as paths (PyMem_Free'd by release), NULL for a Dataset */
    PyObject *keep;          /* owns the strings of `paths` (released by release) */
    PyObject *dataset_ref;   /* data= when it is a Dataset (borrowed) */
    PyObject *transform_ref; /* transform= when given (borrowed) */
    struct stkpy_map *map;   /* map=: owned by the caller after a successful parse */
    PyObject *exec_ref;      /* executor= (a ThreadExec or ProcPool; borrowed) */
} stkpy_loader_args;

/* Parse Loader(data, batch_size=256, ...)'s arguments into `a`. Returns 0, or -1 with an
 * exception (and nothing left to release in `a`). */
int stkpy_loader_args_parse(PyObject *args, PyObject *kw, stkpy_loader_args *a);

/* Release the buffers and path strings of `a` once stk_loader_create has copied them; a->map
 * stays (it lives as long as the loader). */
void stkpy_loader_args_release(stkpy_loader_args *a);

/* Loader.info() and Loader.stats(): the loader's stk_loader_info / stk_loader_stats as dicts
 * (call with the loader pinned). New references, or NULL with an exception. */
PyObject *stkpy_loader_info_dict(const stk_loader *loader);
PyObject *stkpy_loader_stats_dict(const stk_loader *loader);

#endif /* STK_PY_LOADER_OPTS_H */
