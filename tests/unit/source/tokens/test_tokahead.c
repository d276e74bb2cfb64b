/*
 * test_tokahead.c: rows read ahead together (src/source/tokens/stk_tokahead.c, through the
 * seam's prepare): windows and random rows of three llm.c shards read after a prepare are byte
 * for byte the rows a cursor reads alone (rows across two shards included) and came from the
 * reads ahead where io_uring is to be had, a row prepared and not read being dropped by the next
 * prepare; packed rows likewise (every field; their runs of pieces read ahead); a file cut short
 * or rewritten in place after open is refused by every row's read, named exactly as without a
 * prepare. Every case runs twice: with the files mapped (the reads ahead are copies out of the
 * mappings, stk_mapped.h) and with STOKER_MMAP=0 (io_uring reads).
 */
#include "io/stk_uring.h"
#include "source/tokens/stk_tokens.h"
#include "t.h"
#include "data/fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define T_LEN 10
#define SHARD 700 /* tokens per shard */

/* An llm.c shard of SHARD uint16 ids: id k of the stream is (k * 7 + 3) % 65521. */
static void write_shard(const char *path, int k)
{
    int32_t h[256] = {20240520, 1, SHARD};
    FILE *f = fopen(path, "wb");
    fwrite(h, 1, sizeof(h), f);
    for (int i = 0; i < SHARD; i++) {
        uint16_t v = (uint16_t)(((k * SHARD + i) * 7 + 3) % 65521);
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
}

static stk_status open_rows(const char *const *paths, size_t n, uint32_t mode, stk_dataset **ds)
{
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.paths = paths;
    o.n_paths = n;
    o.seq_len = T_LEN;
    o.mode = mode;
    return stk_tokens_open(&o, ds);
}

/* Row i read with `cur` (and key) into row[] (input_ids then labels); the status. */
static stk_status read_row(stk_dataset *ds, stk__cursor *cur, const stk__readkey *key, uint64_t i,
                           int64_t row[2 * T_LEN], char *err, size_t err_size)
{
    void *dst[2] = {row, row + T_LEN};
    size_t cap[2] = {T_LEN * 8, T_LEN * 8};
    stk__recinfo info;
    return stk__dataset_read_keyed(ds, cur, key, i, dst, cap, 0, &info, err, err_size);
}

/* Whether this process' opens map the files (STOKER_MMAP=1) or read them (the default). */
static bool mapping(void)
{
    const char *env = getenv("STOKER_MMAP");
    return env && strcmp(env, "1") == 0;
}

static int rows_ahead(void)
{
    const char *dir = fx_tmpdir("tokahead");
    char p[3][300];
    const char *paths[3];
    for (int k = 0; k < 3; k++) {
        snprintf(p[k], sizeof(p[k]), "%s/fw_%06d.bin", dir, k);
        write_shard(p[k], k);
        paths[k] = p[k];
    }
    stk__uring *probe = stk__uring_open(STK__TOK_AHEAD);
    bool ring = probe != NULL || mapping(); /* rows are read ahead */
    stk__uring_close(probe);
    if (!ring)
        printf("  no io_uring here: rows are read one at a time (checked equal all the same)\n");
    for (uint32_t mode = STK_TOKENS_WINDOWS; mode <= STK_TOKENS_RANDOM; mode++) {
        stk_dataset *ds;
        T_OK(open_rows(paths, 3, mode, &ds));
        uint64_t n_rows = stk_dataset_n_records(ds);
        T_EQ(n_rows, (3 * SHARD - 1) / T_LEN);
        T_EQ(stk__dataset_prepare_max(ds), STK__TOK_AHEAD_ROWS);
        stk__cursor *a, *b;
        char err[STK_ERRMSG_SIZE];
        T_OK(stk__dataset_cursor_open(ds, &a, err, sizeof(err)));
        T_OK(stk__dataset_cursor_open(ds, &b, err, sizeof(err)));
        const stk__readkey key = {7, 3, true};
        /* rows 69 and 139 span two shards (tokens 690..700, 1390..1400) */
        uint64_t idx[STK__TOK_AHEAD_ROWS] = {5, 69, 0, 139, 208, 17, 100, 69, 33, 150};
        unsigned n = 10;
        for (int round = 0; round < 3; round++) {
            stk__dataset_prepare(ds, a, &key, idx, n);
            const stk__tokcur *ca = (const stk__tokcur *)a;
            unsigned within = 0; /* rows inside one shard (the rest are read the usual way) */
            for (unsigned k = 0; k < n; k++)
                within += (idx[k] * T_LEN) % SHARD != SHARD - T_LEN;
            if (ring && mode == STK_TOKENS_WINDOWS)
                T_CHECKF(ca->n_ahead == within, "%u rows ahead, not %u", ca->n_ahead, within);
            if (ring && mode == STK_TOKENS_RANDOM)
                T_CHECK(ca->n_ahead >= 1);
            for (unsigned k = 0; k < n - (round == 1 ? 4 : 0); k++) { /* round 1 leaves 4 */
                int64_t ra[2 * T_LEN], rb[2 * T_LEN];
                T_OK(read_row(ds, a, &key, idx[k], ra, err, sizeof(err)));
                T_OK(read_row(ds, b, &key, idx[k], rb, err, sizeof(err)));
                T_CHECKF(memcmp(ra, rb, sizeof(ra)) == 0, "mode %u, row %llu differs", mode,
                         (unsigned long long)idx[k]);
                if (mode == STK_TOKENS_WINDOWS) /* and it is the stream's */
                    for (int j = 0; j < T_LEN; j++) {
                        uint64_t at = idx[k] * T_LEN + (uint64_t)j;
                        T_EQ(ra[j], (int64_t)((at * 7 + 3) % 65521));
                        T_EQ(ra[T_LEN + j], (int64_t)(((at + 1) * 7 + 3) % 65521));
                    }
            }
            for (unsigned k = 0; ring && round != 1 && k < ca->n_ahead; k++)
                T_EQ(ca->ahead_first[k], UINT64_MAX); /* every row ahead was read from there */
            for (unsigned k = 0; k < n; k++)          /* other rows next round */
                idx[k] = (idx[k] * 31 + 11) % n_rows;
        }
        stk__dataset_cursor_close(ds, a);
        stk__dataset_cursor_close(ds, b);
        stk_dataset_close(ds);
    }
    fx_rmtree(dir);
    return 0;
}

static int test_rows_ahead_are_the_rows_read_alone(void)
{
    setenv("STOKER_MMAP", "1", 1);
    if (rows_ahead()) /* copied out of the mappings */
        return 1;
    setenv("STOKER_MMAP", "0", 1); /* read with io_uring */
    return rows_ahead();
}

/* Every field of row i read with `cur` into rec (fields back to back, each at its largest). */
static stk_status read_fields(stk_dataset *ds, stk__cursor *cur, uint64_t i, uint8_t *rec,
                              char *err, size_t err_size)
{
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS], at = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        dst[f] = rec + at;
        cap[f] = ds->field_max[f];
        at += ds->field_max[f];
    }
    memset(rec, 0x77, at);
    stk__recinfo info;
    static const stk__readkey key = {0, 0, false};
    return stk__dataset_read_keyed(ds, cur, &key, i, dst, cap, 0, &info, err, err_size);
}

static int packed_rows_ahead(void)
{
    const char *dir = fx_tmpdir("tokahead_packed");
    char path[300];
    snprintf(path, sizeof(path), "%s/train.bin", dir);
    FILE *f = fopen(path, "wb");
    for (uint64_t i = 0; i < 5000; i++) { /* documents of 1..40 tokens, each ended by eos 0 */
        uint16_t v = stk__mix64(i) % 40 == 0 ? 0 : (uint16_t)(1 + (i * 7) % 1000);
        fwrite(&v, 2, 1, f);
    }
    fclose(f);
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    const char *paths[1] = {path};
    o.paths = paths;
    o.n_paths = 1;
    o.seq_len = T_LEN;
    o.mode = STK_TOKENS_PACKED;
    o.eos = 0;
    stk_dataset *ds;
    T_OK(stk_tokens_open(&o, &ds));
    T_EQ(stk__dataset_prepare_max(ds), STK__TOK_AHEAD_ROWS);
    uint64_t n_rows = stk_dataset_n_records(ds);
    stk__cursor *a, *b;
    char err[STK_ERRMSG_SIZE];
    T_OK(stk__dataset_cursor_open(ds, &a, err, sizeof(err)));
    T_OK(stk__dataset_cursor_open(ds, &b, err, sizeof(err)));
    T_CHECK((stk__tokds_of(ds)->c.parts[0].map != NULL) == mapping());
    stk__uring *probe = stk__uring_open(STK__TOK_AHEAD);
    bool ring = probe != NULL || mapping(); /* rows are read ahead */
    stk__uring_close(probe);
    uint8_t ra[1024], rb[1024];
    T_CHECK(ds->max_record <= sizeof(ra));
    uint64_t idx[STK__TOK_AHEAD_ROWS];
    for (int round = 0; round < 20; round++) {
        for (unsigned k = 0; k < STK__TOK_AHEAD_ROWS; k++)
            idx[k] = stk__mix64((uint64_t)round * 100 + k) % n_rows;
        static const stk__readkey key = {0, 0, false};
        stk__dataset_prepare(ds, a, &key, idx, STK__TOK_AHEAD_ROWS);
        const stk__tokcur *ca = (const stk__tokcur *)a;
        if (ring)
            T_CHECK(ca->n_ahead >= STK__TOK_AHEAD_ROWS); /* a read or more a row */
        for (unsigned k = 0; k < STK__TOK_AHEAD_ROWS; k++) {
            T_OK(read_fields(ds, a, idx[k], ra, err, sizeof(err)));
            T_OK(read_fields(ds, b, idx[k], rb, err, sizeof(err)));
            T_CHECKF(memcmp(ra, rb, ds->max_record) == 0, "packed row %llu differs",
                     (unsigned long long)idx[k]);
        }
        for (unsigned k = 0; ring && k < ca->n_ahead; k++) /* every read ahead was used */
            T_EQ(ca->ahead_first[k], UINT64_MAX);
    }
    stk__dataset_cursor_close(ds, a);
    stk__dataset_cursor_close(ds, b);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_packed_rows_ahead_are_the_rows_read_alone(void)
{
    setenv("STOKER_MMAP", "1", 1);
    if (packed_rows_ahead())
        return 1;
    setenv("STOKER_MMAP", "0", 1);
    return packed_rows_ahead();
}

/* The rows of `path` (20000 ids, rows of T_LEN) after `change` altered the file since open: read
 * with and without a prepare, the same status and message for every row, and every row refused
 * (the file is not the version opened). Mapped, the rows past the cut's page touch pages that
 * are gone: the SIGBUS is caught (counted) and named as the rest. */
static int check_changed(const char *path, const char *change)
{
    stk_dataset *ds;
    const char *paths[1] = {path};
    T_OK(open_rows(paths, 1, STK_TOKENS_WINDOWS, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "nanogpt") == 0);
    T_CHECK((stk__tokds_of(ds)->c.parts[0].map != NULL) == mapping());
    if (!strcmp(change, "cut")) {
        T_CHECK(truncate(path, 1000 * 2) == 0); /* tokens 1000.. gone */
    } else {                                    /* rewritten in place: same size, new bytes */
        FILE *f = fopen(path, "r+b");
        uint16_t v = 9;
        fwrite(&v, 2, 1, f);
        fclose(f);
        struct timespec later[2] = {{0, UTIME_OMIT}, {4000000000, 0}};
        T_CHECK(utimensat(AT_FDCWD, path, later, 0) == 0); /* a new mtime, whatever the clock */
    }
    stk__cursor *a, *b;
    char ea[STK_ERRMSG_SIZE], eb[STK_ERRMSG_SIZE];
    T_OK(stk__dataset_cursor_open(ds, &a, ea, sizeof(ea)));
    T_OK(stk__dataset_cursor_open(ds, &b, ea, sizeof(ea)));
    const stk__readkey key = {1, 0, false};
    /* rows 150 and 99 (tokens 990..1000) are past a cut, 1500 pages past it */
    uint64_t idx[5] = {3, 150, 99, 10, 1500};
    uint64_t caught = stk__mapped_caught();
    stk__dataset_prepare(ds, a, &key, idx, 5);
    const stk__tokcur *ca = (const stk__tokcur *)a;
    for (uint32_t k = 0; k < ca->n_ahead; k++)
        T_EQ(ca->ahead_first[k], UINT64_MAX); /* nothing taken from a changed file */
    for (int k = 0; k < 5; k++) {
        int64_t ra[2 * T_LEN], rb[2 * T_LEN];
        stk_status rca = read_row(ds, a, &key, idx[k], ra, ea, sizeof(ea));
        stk_status rcb = read_row(ds, b, &key, idx[k], rb, eb, sizeof(eb));
        T_EQ(rca, rcb);
        T_CHECKF(rca < 0, "%s: row %llu read from a file changed since open", change,
                 (unsigned long long)idx[k]);
        T_CHECKF(strcmp(ea, eb) == 0, "with rows ahead: %s\nwithout: %s", ea, eb);
        T_CHECKF(strstr(ea, "train.bin") && strstr(ea, "changed while open"), "%s", ea);
    }
    if (mapping() && !strcmp(change, "cut")) /* prepare's copy, then each cursor's read */
        T_EQ(stk__mapped_caught(), caught + 3);
    else
        T_EQ(stk__mapped_caught(), caught);
    stk__dataset_cursor_close(ds, a);
    stk__dataset_cursor_close(ds, b);
    stk_dataset_close(ds);
    return 0;
}

static int test_changed_file_named_as_without(void)
{
    const char *dir = fx_tmpdir("tokahead_cut");
    char path[300];
    snprintf(path, sizeof(path), "%s/train.bin", dir);
    static const char *const changes[] = {"cut", "rewritten", "cut", "rewritten"};
    setenv("STOKER_MMAP", "1", 1);
    for (int c = 0; c < 4; c++) {
        if (c == 2)
            setenv("STOKER_MMAP", "0", 1); /* mapped first, then read */
        FILE *f = fopen(path, "wb");
        for (int i = 0; i < 20000; i++) {
            uint16_t v = (uint16_t)i;
            fwrite(&v, 2, 1, f);
        }
        fclose(f);
        if (check_changed(path, changes[c]))
            return 1;
    }
    fx_rmtree(dir);
    return 0;
}

T_MAIN(T_CASE(test_rows_ahead_are_the_rows_read_alone),
       T_CASE(test_packed_rows_ahead_are_the_rows_read_alone),
       T_CASE(test_changed_file_named_as_without))
