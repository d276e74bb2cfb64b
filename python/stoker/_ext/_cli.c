/*
 * _cli.c: _core.cli_main(argv): the `stoker` command line (cli/, linked into the extension)
 * run in this process, for `python -m stoker` and the `stoker` command that pip installs
 * (stoker/__main__.py). Same code as the executable `make` builds, so the same behaviour.
 *
 * The CLI writes with C stdio, so both streams are flushed before returning to Python. The
 * GIL is released while it runs (a bench or doctor run takes seconds to minutes; doctor
 * --python forks and execs an interpreter meanwhile).
 */
#include "_core.h"

#include "cli.h" /* -Icli */

#include <stdio.h>

PyObject *stkpy_cli_main(PyObject *self, PyObject *arg)
{
    (void)self;
    PyObject *seq = PySequence_Fast(arg, "cli_main(argv): argv must be a list of str");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **bytes = PyMem_Calloc((size_t)n + 1, sizeof(*bytes));
    char **argv = PyMem_Calloc((size_t)n + 1, sizeof(*argv));
    PyObject *result = NULL;
    if (!bytes || !argv) {
        PyErr_NoMemory();
        goto done;
    }
    if (n < 1) {
        stkpy_invalid("cli_main(argv): argv needs at least the program name");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* file names as the OS sees them */
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(seq, i), &bytes[i]))
            goto done;
        argv[i] = PyBytes_AS_STRING(bytes[i]);
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_cli_main((int)n, argv);
    fflush(stdout);
    fflush(stderr);
    Py_END_ALLOW_THREADS
    result = PyLong_FromLong(rc);
done:
    for (Py_ssize_t i = 0; bytes && i < n; i++)
        Py_XDECREF(bytes[i]);
    PyMem_Free(bytes);
    PyMem_Free(argv);
    Py_DECREF(seq);
    return result;
}
