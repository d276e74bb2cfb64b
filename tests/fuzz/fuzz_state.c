/*
 * fuzz_state.c: libFuzzer target for the resume state (stk_loader_load_state). The input, as
 * text, is loaded into two loaders over one small dataset written at start-up to an unlinked temp
 * file: one shuffled on one rank, one in order as rank 1 of 3 with drop_last. A refused state
 * must leave a message and the loader working; an accepted one must give batches of the
 * dataset's records, and the loader's own state must load back. Never a crash, hang or leak.
 *
 * The dataset is the same at every start (so is its fingerprint), so states taken from it pass
 * the identity check and mutations reach the position and epoch handling behind it.
 * Corpus: tests/fuzz/corpus/state (real states of this dataset, and near misses).
 */
#include "stoker.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_RECORDS 37
#define MAX_STATE 4096

static stk_dataset *ds;
static stk_loader *loaders[2];

static void cleanup(void)
{
    for (int i = 0; i < 2; i++)
        stk_loader_destroy(loaders[i]);
    stk_dataset_close(ds);
}

/* Write the dataset (record i: one int64 field = i) and open it; unlinked once open. */
static int make_dataset(void)
{
    char path[] = "/tmp/stk_fuzz_state_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    stk_field f = {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64};
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = &f;
    wo.n_fields = 1;
    stk_writer *w;
    int ok = stk_writer_open(path, &wo, &w) == STK_OK;
    for (int64_t i = 0; ok && i < N_RECORDS; i++) {
        stk_value v = {.struct_size = sizeof(stk_value), .i64 = i};
        ok = stk_writer_add(w, &v) == STK_OK;
    }
    ok = ok && stk_writer_close(w) == STK_OK;
    const char *paths[] = {path};
    ok = ok && stk_dataset_open(paths, 1, 0, &ds) == STK_OK;
    unlink(path);
    return ok ? 0 : -1;
}

static int setup(void)
{
    if (make_dataset() < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        stk_loader_opts o;
        stk_loader_opts_init(&o);
        o.dataset = ds;
        o.batch_size = 4;
        o.n_threads = 1;
        o.n_slots = 2;
        o.rank = i;
        o.world = i ? 3 : 1;
        o.flags = i ? STK_LOADER_DROP_LAST : STK_LOADER_SHUFFLE;
        if (stk_loader_create(&o, &loaders[i]) != STK_OK)
            return -1;
    }
    atexit(cleanup);
    return 0;
}

/* A few batches: every index a record of the dataset. */
static void check_batches(stk_loader *L)
{
    for (int k = 0; k < 3; k++) {
        stk_batch *b;
        stk_status rc = stk_loader_next(L, &b);
        if (rc == STK_END)
            continue; /* the epoch ended: the next call starts the next one */
        if (rc != STK_OK)
            abort();
        const int64_t *idx = stk_batch_indices(b);
        uint32_t n = stk_batch_n_samples(b);
        if (n == 0 || n > 4)
            abort();
        for (uint32_t j = 0; j < n; j++)
            if (idx[j] < 0 || idx[j] >= N_RECORDS)
                abort();
        stk_batch_release(b);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready; /* 0 not yet, 1 ready, -1 setup failed */
    if (!ready)
        ready = setup() == 0 ? 1 : -1;
    if (ready < 0)
        abort(); /* the fixture must work: a fuzzer that tests nothing is a failure */
    if (size > MAX_STATE)
        return 0;
    char *json = malloc(size + 1);
    if (!json)
        return 0;
    memcpy(json, data, size);
    json[size] = '\0';
    for (int i = 0; i < 2; i++) {
        stk_loader *L = loaders[i];
        stk_status rc = stk_loader_load_state(L, json);
        if (rc != STK_OK) {
            if (rc != STK_EINVAL && rc != STK_ENOTSUP)
                abort(); /* documented: EINVAL or ENOTSUP */
            if (!stk_loader_errmsg(L)[0])
                abort(); /* a refusal says why */
        }
        check_batches(L);
        char state[512];
        if (stk_loader_save_state(L, state, sizeof(state)) != STK_OK ||
            stk_loader_load_state(L, state) != STK_OK)
            abort(); /* the loader's own state loads back */
    }
    free(json);
    return 0;
}
