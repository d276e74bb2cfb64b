/*
 * test_diagnose.c: stk_diagnose, the doctor's decision (src/doctor/stk_diagnose.c), fed
 * synthetic measurements: no loader, no clock. Each case is a training loop with known waits,
 * steps and loader-alone rates, and the verdict and action it must get.
 */
#include "stoker.h"
#include "t.h"

#include <math.h>

/* A loop of 100 steps of `step_ms` that waited `wait_ms` per step, batches of 256. */
static stk_diag_input loop(double wait_ms, double step_ms, int64_t cur)
{
    stk_diag_input in;
    stk_diag_input_init(&in);
    in.wait_s = 100 * wait_ms / 1e3;
    in.step_s = 100 * step_ms / 1e3;
    in.steps = 100;
    in.samples_per_step = 256;
    in.current_threads = cur;
    return in;
}

static stk_diag_result judge(const stk_diag_input *in)
{
    stk_diag_result r = {.struct_size = sizeof(r)};
    if (stk_diagnose(in, &r) != STK_OK)
        r.action = (stk_diag_action)-1;
    return r;
}

/* Rates of 1, 2, 4, 8 threads: 1000 samples/s per thread. */
static const int64_t threads[4] = {1, 2, 4, 8};
static const double rates[4] = {1000, 2000, 4000, 8000};

static void probes(stk_diag_input *in)
{
    in->probe_threads = threads;
    in->probe_rate = rates;
    in->n_probes = 4;
}

static int test_share_and_threshold(void)
{
    stk_diag_input in = loop(1, 9, 4); /* 10% waiting */
    stk_diag_result r = judge(&in);
    T_CHECK(fabs(r.wait_share - 0.1) < 1e-9);
    T_CHECK(r.data_bound);
    T_CHECK(fabs(r.wait_ms - 1) < 1e-9 && fabs(r.step_ms - 9) < 1e-9);
    T_CHECK(fabs(r.demand - 256 / 9e-3) < 1e-6);
    T_CHECK(r.data_bound_share == STK_DIAG_DATA_BOUND_SHARE && r.headroom == STK_DIAG_HEADROOM);
    in = loop(0.4, 9.6, 4); /* 4%: below the threshold */
    r = judge(&in);
    T_CHECK(!r.data_bound);
    T_EQ(r.action, STK_DIAG_KEEP);
    in = loop(0, 0, 4); /* neither waited nor stepped: no share, infinite demand */
    r = judge(&in);
    T_CHECK(r.wait_share == 0 && !r.data_bound && isinf(r.demand));
    return 0;
}

static int test_actions(void)
{
    /* step 256 samples per 100 ms = 2560/s; with 1.2 headroom 3072/s: 4 threads (4000/s). */
    stk_diag_input in = loop(50, 100, 2);
    probes(&in);
    stk_diag_result r = judge(&in);
    T_EQ(r.action, STK_DIAG_MORE);
    T_EQ(threads[r.recommended], 4);
    T_EQ(r.best, 3);
    T_EQ(threads[r.current], 2);
    in.current_threads = -1; /* unknown current count: still "use 4" */
    T_EQ(judge(&in).action, STK_DIAG_MORE);
    in.current_threads = 8; /* 8 threads alone keep up, yet the loop waited */
    T_EQ(judge(&in).action, STK_DIAG_CONTENTION);
    in = loop(50, 20, 8); /* 12800/s needed: no count keeps up */
    probes(&in);
    r = judge(&in);
    T_EQ(r.action, STK_DIAG_TOO_SLOW);
    T_EQ(r.recommended, -1);
    in = loop(0, 100, 8); /* not data-bound at 8; 4 would do */
    probes(&in);
    r = judge(&in);
    T_EQ(r.action, STK_DIAG_FEWER);
    T_EQ(threads[r.recommended], 4);
    in.current_threads = 2; /* not data-bound at 2, but only 4 has headroom */
    T_EQ(judge(&in).action, STK_DIAG_NO_HEADROOM);
    in.current_threads = 4;
    T_EQ(judge(&in).action, STK_DIAG_KEEP);
    in = loop(5, 0, 8); /* the step takes no time: demand unbounded, nothing keeps up */
    probes(&in);
    r = judge(&in);
    T_CHECK(isinf(r.demand));
    T_EQ(r.action, STK_DIAG_TOO_SLOW);
    return 0;
}

/* The headroom is a ratio: a rate exactly at demand * STK_DIAG_HEADROOM meets it. */
static int test_headroom_edge(void)
{
    double demand = 256 / 0.1;
    const int64_t t[2] = {1, 2};
    const double r2[2] = {demand * STK_DIAG_HEADROOM * 0.999, demand * STK_DIAG_HEADROOM};
    stk_diag_input in = loop(50, 100, 1);
    in.probe_threads = t;
    in.probe_rate = r2;
    in.n_probes = 2;
    stk_diag_result r = judge(&in);
    T_EQ(r.recommended, 1);
    return 0;
}

static int test_no_steps_and_bad_input(void)
{
    stk_diag_input in = loop(0, 0, 1);
    in.steps = 0;
    stk_diag_result r = judge(&in);
    T_EQ(r.action, STK_DIAG_UNKNOWN);
    T_CHECK(isnan(r.demand));
    stk_diag_result out = {.struct_size = sizeof(out)};
    T_EQ(stk_diagnose(NULL, &out), STK_EINVAL);
    T_EQ(stk_diagnose(&in, NULL), STK_EINVAL);
    in = loop(-1, 1, 1);
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "wait_s"));
    in = loop(1, NAN, 1);
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    in = loop(1, 1, 1);
    in.n_probes = 2; /* no arrays */
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    const int64_t desc[2] = {4, 2};
    const double rr[2] = {1, 2};
    in.probe_threads = desc;
    in.probe_rate = rr;
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    T_CHECK(strstr(stk_last_errmsg(), "ascend"));
    in = loop(1, 1, 1);
    in.struct_size = 0;
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    out.struct_size = 0;
    in = loop(1, 1, 1);
    T_EQ(stk_diagnose(&in, &out), STK_EINVAL);
    return 0;
}

/* A caller with a larger result struct than the library's: the tail is not written, and the
 * caller's struct_size is kept. */
static int test_result_size(void)
{
    struct {
        stk_diag_result r;
        unsigned char tail[16];
    } big;
    memset(&big, 0xab, sizeof(big));
    big.r.struct_size = sizeof(big);
    stk_diag_input in = loop(1, 9, 1);
    T_OK(stk_diagnose(&in, &big.r));
    T_EQ(big.r.struct_size, sizeof(stk_diag_result));
    for (size_t i = 0; i < sizeof(big.tail); i++)
        T_EQ(big.tail[i], 0xab);
    T_CHECK(strcmp(stk_diag_action_name(STK_DIAG_TOO_SLOW), "too_slow") == 0);
    T_CHECK(strcmp(stk_diag_action_name((stk_diag_action)99), "?") == 0);
    return 0;
}

T_MAIN(T_CASE(test_share_and_threshold), T_CASE(test_actions), T_CASE(test_headroom_edge),
       T_CASE(test_no_steps_and_bad_input), T_CASE(test_result_size))
