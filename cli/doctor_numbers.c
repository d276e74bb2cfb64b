/*
 * doctor_numbers.c: the numbers `stoker doctor` draws from its measured runs, shared by the
 * command that measures them (cmd_doctor.c) and the report that judges and prints them
 * (doctor_report.c), so that neither reaches into the other: a run's rate and CPU share, the
 * best probe, the names of the workers' stages.
 */
#include "doctor.h"

const char *const stk_doctor_stage_names[4] = {"read", "decode", "augment", "other"};

double stk_doctor_rate(const run_result *r)
{
    return r->seconds > 0 ? (double)r->samples / r->seconds : 0;
}

/* The share of `threads` cores' time the process got during a run: well below 1 when the
 * workers were busy, other processes had the cores. */
double stk_doctor_on_cpu(const run_result *r)
{
    return r->seconds > 0 && r->threads ? r->cpu_s / (r->seconds * r->threads) : 0;
}

/* The probe with the highest ceiling. */
int stk_doctor_best_probe(const doctor *d)
{
    int k = 0;
    for (int i = 1; i < d->n_probes; i++)
        if (stk_doctor_rate(&d->probe[i]) > stk_doctor_rate(&d->probe[k]))
            k = i;
    return k;
}
