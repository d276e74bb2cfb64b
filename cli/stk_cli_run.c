/*
 * stk_cli_run.c: the CLI's one loader run loop (`stoker bench` and `stoker doctor`): create a
 * loader, take its batches and time each wait, hand every batch to the command, and on the way
 * out read the stats, write the trace and destroy the loader. What a command does with a batch
 * (count it, simulate a training step, open or close a measuring window) and when it stops is
 * its callback's business. Also the CPU time a run took (the process's, every thread).
 */
#include "cli.h"

#include <string.h>
#include <sys/resource.h>

int stk_cli_loader_run(const char *cmd, const stk_loader_opts *o, const char *trace,
                       stk_cli_progress *prog, stk_cli_batch_fn fn, void *ctx, stk_cli_run *run)
{
    stk_loader *L;
    memset(run, 0, sizeof(*run));
    run->start_s = stk_cli_now();
    if (stk_loader_create(o, &L) < 0)
        return stk_cli_error(cmd, "%s", stk_last_errmsg());
    run->loader = L;
    run->info.struct_size = sizeof(run->info);
    stk_loader_info_get(L, &run->info);
    int stop = 0;
    while (!stop) {
        stk_batch *b;
        double w0 = stk_cli_now();
        stk_status rc = stk_loader_next(L, &b);
        run->arrived_s = stk_cli_now();
        run->wait_s = run->arrived_s - w0;
        if (rc < 0) {
            if (prog)
                stk_cli_progress_end(prog);
            stk_cli_error(cmd, "%s", stk_loader_errmsg(L));
            stk_loader_destroy(L);
            run->loader = NULL;
            return 1;
        }
        if (rc == STK_END) { /* the next call starts the next epoch */
            run->epochs++;
            stop = fn(run, NULL, ctx);
            continue;
        }
        run->batches++;
        stop = fn(run, b, ctx);
        stk_batch_release(b);
    }
    run->end_s = stk_cli_now();
    run->stats.struct_size = sizeof(run->stats);
    stk_loader_stats_get(L, &run->stats);
    int failed = trace && stk_loader_trace_write(L, trace) < 0;
    if (failed) {
        if (prog)
            stk_cli_progress_end(prog);
        stk_cli_error(cmd, "%s: %s", trace, stk_loader_errmsg(L));
    }
    stk_loader_destroy(L);
    run->loader = NULL;
    return failed;
}

/* User + system CPU seconds of this process so far (every thread). On a machine shared with other
 * jobs, bytes per CPU second compares the loader with its ceiling where wall-clock cannot. */
double stk_cli_process_cpu_s(void)
{
    struct rusage u;
    if (getrusage(RUSAGE_SELF, &u) != 0)
        return 0;
    return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + (double)u.ru_stime.tv_sec +
           u.ru_stime.tv_usec * 1e-6;
}
