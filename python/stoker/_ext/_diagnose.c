/*
 * _diagnose.c: stoker._core.diagnose, the binding of stk_diagnose (src/doctor/stk_diagnose.c),
 * so that stoker.profile and `stoker doctor` reach their verdict and pick their advice through
 * the one decision function and its thresholds (DIAG_DATA_BOUND_SHARE, DIAG_HEADROOM).
 */
#include "_core.h"

#include <math.h>

#define MAX_PROBES 256

/* The thread count of probe index i, or None. */
static PyObject *probe_count(const int64_t *threads, int64_t i)
{
    return i >= 0 ? PyLong_FromLongLong(threads[i]) : Py_NewRef(Py_None);
}

/* Fill threads/rates (ascending) from a dict {threads: samples/s}; returns the count or -1. */
static Py_ssize_t read_probes(PyObject *probes, int64_t *threads, double *rates)
{
    if (probes == Py_None)
        return 0;
    if (!PyDict_Check(probes)) {
        stkpy_invalid("diagnose: probes should be a dict {threads: samples/s}, not %s",
                      Py_TYPE(probes)->tp_name);
        return -1;
    }
    Py_ssize_t n = PyDict_Size(probes), pos = 0, k = 0;
    if (n > MAX_PROBES) {
        stkpy_invalid("diagnose: at most %d probes, got %zd", MAX_PROBES, n);
        return -1;
    }
    PyObject *key, *val;
    while (PyDict_Next(probes, &pos, &key, &val)) {
        long long t = PyLong_AsLongLong(key);
        double r = PyFloat_AsDouble(val);
        if (PyErr_Occurred())
            return -1;
        /* insertion sort: a few probes */
        Py_ssize_t i = k++;
        while (i > 0 && threads[i - 1] > t) {
            threads[i] = threads[i - 1];
            rates[i] = rates[i - 1];
            i--;
        }
        threads[i] = t;
        rates[i] = r;
    }
    return n;
}

PyObject *stkpy_diagnose(PyObject *module, PyObject *args, PyObject *kw)
{
    (void)module;
    static char *kwlist[] = {"wait_s",          "step_s", "steps", "samples_per_step",
                             "current_threads", "probes", NULL};
    double wait_s, step_s, per_step;
    unsigned long long steps;
    PyObject *cur = Py_None, *probes = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ddKd|OO:diagnose", kwlist, &wait_s, &step_s, &steps,
                                     &per_step, &cur, &probes))
        return NULL;
    int64_t threads[MAX_PROBES];
    double rates[MAX_PROBES];
    Py_ssize_t n = read_probes(probes, threads, rates);
    if (n < 0)
        return NULL;
    stk_diag_input in;
    stk_diag_result r = {.struct_size = sizeof(r)};
    stk_diag_input_init(&in);
    in.wait_s = wait_s;
    in.step_s = step_s;
    in.steps = steps;
    in.samples_per_step = per_step;
    if (cur != Py_None) {
        in.current_threads = PyLong_AsLongLong(cur);
        if (in.current_threads == -1 && PyErr_Occurred())
            return NULL;
    }
    in.probe_threads = threads;
    in.probe_rate = rates;
    in.n_probes = (size_t)n;
    stk_status rc = stk_diagnose(&in, &r);
    if (rc != STK_OK)
        return stkpy_raise(rc, stk_last_errmsg());
    return Py_BuildValue("{s:s,s:O,s:d,s:d,s:d,s:d,s:N,s:N,s:N,s:d,s:d}", "action",
                         stk_diag_action_name(r.action), "data_bound",
                         r.data_bound ? Py_True : Py_False, "wait_share", r.wait_share, "wait_ms",
                         r.wait_ms, "step_ms", r.step_ms, "demand", r.demand, "recommended",
                         probe_count(threads, r.recommended), "best", probe_count(threads, r.best),
                         "current", probe_count(threads, r.current), "data_bound_share",
                         r.data_bound_share, "headroom", r.headroom);
}

int stkpy_diagnose_constants(PyObject *m)
{
    PyObject *share = PyFloat_FromDouble(STK_DIAG_DATA_BOUND_SHARE);
    PyObject *headroom = PyFloat_FromDouble(STK_DIAG_HEADROOM);
    int rc = share && headroom && PyModule_AddObjectRef(m, "DIAG_DATA_BOUND_SHARE", share) == 0 &&
                     PyModule_AddObjectRef(m, "DIAG_HEADROOM", headroom) == 0
                 ? 0
                 : -1;
    Py_XDECREF(share);
    Py_XDECREF(headroom);
    return rc;
}
