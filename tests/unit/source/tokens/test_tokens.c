/*
 * test_tokens.c: token corpora from C (src/source/tokens/): packing against a naive reference of
 * first fit and best fit and the any-fit bound (any two rows hold more than T), Megatron's
 * blending rule within two samples of every share over every window, llm.c and Megatron files
 * written here read back row by row and their bad headers named, a C loader over a corpus
 * (every token once per epoch on 2 ranks x 3 threads, a state resumed on another world size), a
 * mixture through the public API, and (debug builds) every allocation of opening, packing,
 * mixing and reading failing in turn. python/tests/test_tokens.py covers every format and the
 * three-resume check; tests/cli/test_tokens.sh the CLI and the C example.
 */
#include "source/tokens/stk_tokens.h"
#include "t.h"
#include "data/fixtures.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- packing ---- */

/* Document starts of n documents of pseudo-random lengths in 1..max (some empty). */
static uint64_t *random_docs(uint64_t n, uint32_t max, uint64_t seed)
{
    uint64_t *doc = malloc((n + 1) * sizeof(*doc));
    doc[0] = 0;
    for (uint64_t d = 0; d < n; d++) {
        uint64_t r = stk__mix64(seed * 1000003 + d);
        uint64_t len = r % 17 == 0 ? 0 : 1 + (r >> 8) % max;
        doc[d + 1] = doc[d] + len;
    }
    return doc;
}

/* The naive packer: rows in opening order, each piece into the row the rule picks. Returns the
 * row of every piece (in corpus order) in where[] and the row count. */
static uint64_t naive_pack(const uint64_t *doc, uint64_t n, uint32_t T, uint32_t rule,
                           uint32_t *where, uint32_t *room, uint64_t *stamp)
{
    uint64_t rows = 0, k = 0, clock = 0;
    for (uint64_t d = 0; d < n; d++) {
        uint64_t L = doc[d + 1] - doc[d];
        for (uint64_t j = 0; j < L / T; j++) {
            room[rows] = 0;
            stamp[rows] = ++clock;
            where[k++] = (uint32_t)rows++;
        }
        uint32_t rest = (uint32_t)(L % T);
        if (!rest)
            continue;
        uint64_t pick = UINT64_MAX;
        for (uint64_t r = 0; r < rows; r++) {
            if (room[r] < rest)
                continue;
            if (pick == UINT64_MAX)
                pick = r;
            else if (rule == STK_PACKING_BEST_FIT &&
                     (room[r] < room[pick] || (room[r] == room[pick] && stamp[r] > stamp[pick])))
                pick = r;
            if (rule == STK_PACKING_FIRST_FIT)
                break;
        }
        if (pick == UINT64_MAX) {
            pick = rows++;
            room[pick] = T;
        }
        room[pick] -= rest;
        stamp[pick] = ++clock;
        where[k++] = (uint32_t)pick;
    }
    return rows;
}

static int check_pack(const uint64_t *doc, uint64_t n, uint32_t T, uint32_t rule)
{
    stk__tokpack p;
    char err[256];
    T_OK(stk__tokpack_build(doc, n, T, rule, &p, err, sizeof(err)));
    uint64_t tokens = doc[n], pieces = 0;
    for (uint64_t d = 0; d < n; d++) {
        uint64_t L = doc[d + 1] - doc[d];
        pieces += L / T + (L % T != 0);
    }
    uint32_t *where = malloc((pieces + 1) * sizeof(*where));
    uint32_t *room = malloc((pieces + 1) * sizeof(*room));
    uint64_t *stamp = malloc((pieces + 1) * sizeof(*stamp));
    uint64_t rows = naive_pack(doc, n, T, rule, where, room, stamp);
    T_EQ(p.n_rows, rows);
    T_EQ(p.n_seg, pieces);
    T_EQ(p.padding, rows * T - tokens);
    /* the same pieces in the same rows, in corpus order within a row */
    uint64_t *next = calloc(rows + 1, sizeof(*next)), k = 0;
    for (uint64_t d = 0; d < n; d++) {
        uint64_t L = doc[d + 1] - doc[d];
        for (uint64_t at = 0; at < L; k++) {
            uint64_t len = L - at >= T ? T : L - at;
            uint32_t r = where[k];
            uint64_t s = p.row[r] + next[r]++;
            T_CHECKF(s < p.row[r + 1], "row %u has too few pieces", r);
            T_EQ(p.seg[s].start, doc[d] + at);
            T_EQ(p.seg[s].len, len);
            T_EQ(p.seg[s].more, at + len < L);
            at += len;
        }
    }
    /* any-fit: two rows never fit in one (a later row's first piece did not fit the earlier) */
    uint64_t *fill = calloc(rows + 1, sizeof(*fill));
    for (uint64_t r = 0; r < rows; r++) {
        T_EQ(next[r], p.row[r + 1] - p.row[r]);
        for (uint64_t s = p.row[r]; s < p.row[r + 1]; s++)
            fill[r] += p.seg[s].len;
        T_CHECK(fill[r] >= 1 && fill[r] <= T);
    }
    for (uint64_t a = 0; a < rows; a++)
        for (uint64_t b = a + 1; b < rows; b++)
            T_CHECKF(fill[a] + fill[b] > T, "rows %llu and %llu hold %llu + %llu <= %u",
                     (unsigned long long)a, (unsigned long long)b, (unsigned long long)fill[a],
                     (unsigned long long)fill[b], T);
    free(fill);
    free(next);
    free(where);
    free(room);
    free(stamp);
    stk__tokpack_free(&p);
    return 0;
}

static int test_packing_matches_reference(void)
{
    const uint32_t Ts[] = {1, 7, 64, 100};
    for (size_t t = 0; t < sizeof(Ts) / sizeof(Ts[0]); t++)
        for (uint64_t seed = 1; seed <= 4; seed++) {
            uint64_t *doc = random_docs(400, Ts[t] * 2 + 3, seed);
            for (uint32_t rule = 0; rule < 2; rule++)
                if (check_pack(doc, 400, Ts[t], rule))
                    return 1;
            free(doc);
        }
    uint64_t none[1] = {0}; /* no documents: no rows */
    stk__tokpack p;
    char err[256];
    T_OK(stk__tokpack_build(none, 0, 8, STK_PACKING_BEST_FIT, &p, err, sizeof(err)));
    T_EQ(p.n_rows, 0);
    stk__tokpack_free(&p);
    return 0;
}

/* ---- blending ---- */

static int test_blend_within_two_of_every_share(void)
{
    const double sets[][4] = {{0.7, 0.2, 0.1, 0},
                              {0.5, 0.5, 0, 0},
                              {0.33, 0.33, 0.34, 0},
                              {0.01, 0.09, 0.4, 0.5},
                              {1, 0, 0, 0}};
    const uint64_t N = 3000;
    uint8_t *src = malloc(N);
    uint64_t *prefix = malloc((N + 1) * 4 * sizeof(uint64_t));
    for (size_t s = 0; s < sizeof(sets) / sizeof(sets[0]); s++) {
        const double *w = sets[s];
        uint64_t counts[4];
        stk__tokmix_blend(w, 4, N, src, counts);
        T_EQ(counts[0] + counts[1] + counts[2] + counts[3], N);
        memset(prefix, 0, 4 * sizeof(uint64_t));
        for (uint64_t p = 0; p < N; p++)
            for (int d = 0; d < 4; d++)
                prefix[(p + 1) * 4 + d] = prefix[p * 4 + d] + (src[p] == d);
        for (int d = 0; d < 4; d++) {
            T_EQ(prefix[N * 4 + d], counts[d]);
            if (w[d] == 0)
                T_EQ(counts[d], 0);
            for (uint64_t len = 1; len <= N; len += 13)
                for (uint64_t a = 0; a + len <= N; a += 7) {
                    double c = (double)(prefix[(a + len) * 4 + d] - prefix[a * 4 + d]);
                    T_CHECKF(fabs(c - w[d] * (double)len) <= 2.0,
                             "set %zu part %d window [%llu, %llu): %g, share %g", s, d,
                             (unsigned long long)a, (unsigned long long)(a + len), c,
                             w[d] * (double)len);
                }
        }
    }
    free(src);
    free(prefix);
    return 0;
}

/* ---- files written here ---- */

static void write_u16(const char *path, const void *header, size_t hsize, const uint16_t *ids,
                      size_t n)
{
    FILE *f = fopen(path, "wb");
    if (header)
        fwrite(header, 1, hsize, f);
    fwrite(ids, 2, n, f);
    fclose(f);
}

/* A Megatron corpus: n_docs documents of 1 + d % 9 tokens (value = stream position), one sequence
 * each. */
static void write_megatron(const char *prefix, uint64_t n_docs)
{
    char p[300];
    uint64_t S = n_docs, D = n_docs + 1, at = 0;
    snprintf(p, sizeof(p), "%s.bin", prefix);
    FILE *bin = fopen(p, "wb");
    snprintf(p, sizeof(p), "%s.idx", prefix);
    FILE *idx = fopen(p, "wb");
    uint64_t version = 1;
    uint8_t code = 8;
    fwrite("MMIDIDX\0\0", 1, 9, idx);
    fwrite(&version, 8, 1, idx);
    fwrite(&code, 1, 1, idx);
    fwrite(&S, 8, 1, idx);
    fwrite(&D, 8, 1, idx);
    for (uint64_t d = 0; d < n_docs; d++) {
        int32_t len = 1 + (int32_t)(d % 9);
        fwrite(&len, 4, 1, idx);
    }
    for (uint64_t d = 0; d < n_docs; d++) {
        int64_t ptr = (int64_t)at * 2;
        fwrite(&ptr, 8, 1, idx);
        for (uint64_t k = 0; k < 1 + d % 9; k++, at++) {
            uint16_t v = (uint16_t)at;
            fwrite(&v, 2, 1, bin);
        }
    }
    for (uint64_t d = 0; d <= n_docs; d++) {
        int64_t v = (int64_t)d;
        fwrite(&v, 8, 1, idx);
    }
    fclose(idx);
    fclose(bin);
}

static stk_status open_tokens(const char *path, uint32_t T, uint32_t mode, stk_dataset **ds)
{
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    o.pad_id = -1; /* padding apart from every token */
    o.paths = &path;
    o.n_paths = 1;
    o.seq_len = T;
    o.mode = mode;
    return stk_tokens_open(&o, ds);
}

static int test_llmc_and_megatron_rows_and_errors(void)
{
    const char *dir = fx_tmpdir("tok");
    char path[300], prefix[200];
    uint16_t ids[1000];
    for (int i = 0; i < 1000; i++)
        ids[i] = (uint16_t)(i * 3);
    int32_t h[256] = {20240520, 1, 1000};
    snprintf(path, sizeof(path), "%s/a.bin", dir);
    write_u16(path, h, sizeof(h), ids, 1000);
    stk_dataset *ds;
    T_OK(open_tokens(path, 10, STK_TOKENS_WINDOWS, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "llmc") == 0);
    T_EQ(stk_dataset_n_records(ds), 99);
    uint8_t buf[256];
    stk_record rec;
    stk_record_init(&rec);
    T_OK(stk_dataset_read(ds, 42, buf, sizeof(buf), &rec));
    const int64_t *x = (const int64_t *)rec.field[0], *y = (const int64_t *)rec.field[1];
    for (int j = 0; j < 10; j++) {
        T_EQ(x[j], 3 * (420 + j));
        T_EQ(y[j], 3 * (421 + j));
    }
    stk_dataset_close(ds);
    /* the header's count one more than the tokens there */
    h[2] = 1001;
    write_u16(path, h, sizeof(h), ids, 1000);
    T_CHECK(open_tokens(path, 10, STK_TOKENS_WINDOWS, &ds) == STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), "a.bin: truncated llm.c shard: its header says 1001"), "%s",
             stk_last_errmsg());

    snprintf(prefix, sizeof(prefix), "%s/mega", dir);
    write_megatron(prefix, 300);
    T_OK(open_tokens(prefix, 8, STK_TOKENS_PACKED, &ds));
    stk_tokens_info in = {.struct_size = sizeof(in)};
    T_OK(stk_tokens_info_get(ds, &in));
    T_EQ(in.n_documents, 300);
    T_CHECK(in.boundaries);
    T_EQ(in.max_document, 9);
    T_EQ(in.n_row_tokens, in.n_tokens);
    T_EQ(in.n_padding, in.n_rows * 8 - in.n_tokens);
    /* every token of the stream exactly once over the packed rows */
    uint8_t *seen = calloc(in.n_tokens, 1);
    for (uint64_t r = 0; r < stk_dataset_n_records(ds); r++) {
        uint8_t rb[512];
        T_OK(stk_dataset_read(ds, r, rb, sizeof(rb), &rec));
        const int64_t *ix = (const int64_t *)rec.field[0], *lab = (const int64_t *)rec.field[1];
        const int64_t *pos = (const int64_t *)rec.field[2];
        for (int j = 0; j < 8; j++) {
            if (ix[j] == -1) { /* padding, to the row's end */
                T_EQ(lab[j], -100);
                continue;
            }
            T_CHECK(ix[j] >= 0 && (uint64_t)ix[j] < in.n_tokens);
            seen[ix[j]]++;
            if (pos[j] > 0) /* inside a piece: consecutive tokens */
                T_EQ(ix[j], ix[j - 1] + 1);
        }
    }
    for (uint64_t t = 0; t < in.n_tokens; t++)
        T_EQ(seen[t], 1);
    free(seen);
    stk_dataset_close(ds);
    /* a pointer moved: named */
    snprintf(path, sizeof(path), "%s.idx", prefix);
    FILE *f = fopen(path, "r+b");
    int64_t bad = 8; /* sequence 2 starts at byte 6 */
    fseek(f, 34 + 4 * 300 + 8 * 2, SEEK_SET);
    fwrite(&bad, 8, 1, f);
    fclose(f);
    T_CHECK(open_tokens(prefix, 8, STK_TOKENS_WINDOWS, &ds) == STK_EFORMAT);
    T_CHECKF(strstr(stk_last_errmsg(), "mega.idx: sequence 2 starts at byte 8"), "%s",
             stk_last_errmsg());
    fx_rmtree(dir);
    return 0;
}

/* ---- a C loader over a corpus ---- */

static int test_loader_every_token_once_and_resume(void)
{
    const char *dir = fx_tmpdir("tokl");
    char path[256];
    enum { N = 16 * 60 + 1, T = 16 };
    uint16_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (uint16_t)i;
    snprintf(path, sizeof(path), "%s/t.bin", dir);
    write_u16(path, NULL, 0, ids, N);
    stk_dataset *ds;
    T_OK(open_tokens(path, T, STK_TOKENS_WINDOWS, &ds));
    static int seen[N];
    memset(seen, 0, sizeof(seen));
    for (int rank = 0; rank < 2; rank++) {
        stk_loader_opts o;
        stk_loader_opts_init(&o);
        o.dataset = ds;
        o.batch_size = 4;
        o.n_threads = 3;
        o.rank = rank;
        o.world = 2;
        o.flags = STK_LOADER_SHUFFLE;
        o.seed = 7;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        stk_batch *b;
        stk_status rc;
        while ((rc = stk_loader_next(L, &b)) == STK_OK) {
            stk_tensor x;
            stk_tensor_init(&x);
            T_OK(stk_batch_tensor(b, 0, &x));
            const int64_t *v = x.data;
            for (int64_t k = 0; k < x.shape[0] * T; k++)
                seen[v[k]]++;
            stk_batch_release(b);
        }
        T_EQ(rc, STK_END);
        stk_loader_destroy(L);
    }
    for (int i = 0; i < 60 * T; i++)
        T_EQ(seen[i], 1);
    T_EQ(seen[60 * T], 0); /* the last token is only a label */
    /* a state after 4 steps on one rank resumes on 3 ranks at the same global position */
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.dataset = ds;
    o.batch_size = 6;
    o.n_threads = 2;
    o.rank = 0;
    o.world = 1;
    o.flags = STK_LOADER_SHUFFLE;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    int64_t want[6 * 6];
    char state[512];
    for (int s = 0; s < 5; s++) {
        stk_batch *b;
        T_OK(stk_loader_next(L, &b));
        if (s == 3)
            T_OK(stk_loader_save_state(L, state, sizeof(state)));
        if (s == 4)
            memcpy(want, stk_batch_indices(b), 6 * sizeof(int64_t));
        stk_batch_release(b);
    }
    stk_loader_destroy(L);
    for (int rank = 0; rank < 3; rank++) {
        o.batch_size = 2;
        o.rank = rank;
        o.world = 3;
        T_OK(stk_loader_create(&o, &L));
        T_OK(stk_loader_load_state(L, state));
        stk_batch *b;
        T_OK(stk_loader_next(L, &b));
        T_EQ(stk_batch_indices(b)[0], want[2 * rank]);
        T_EQ(stk_batch_indices(b)[1], want[2 * rank + 1]);
        stk_batch_release(b);
        stk_loader_destroy(L);
    }
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_mix_public_api(void)
{
    const char *dir = fx_tmpdir("tokm");
    char a[256], b[256];
    uint16_t ids[801];
    for (int i = 0; i < 801; i++)
        ids[i] = (uint16_t)i;
    snprintf(a, sizeof(a), "%s/a.bin", dir);
    snprintf(b, sizeof(b), "%s/b.bin", dir);
    write_u16(a, NULL, 0, ids, 801);
    write_u16(b, NULL, 0, ids, 401);
    stk_dataset *parts[2];
    T_OK(open_tokens(a, 8, STK_TOKENS_WINDOWS, &parts[0]));
    T_OK(open_tokens(b, 8, STK_TOKENS_WINDOWS, &parts[1]));
    const double w[2] = {3, 1};
    stk_dataset *mix;
    T_CHECK(stk_tokens_mix(parts, w, 0, 0, &mix) == STK_EINVAL);
    const double bad[2] = {1, NAN};
    T_CHECK(stk_tokens_mix(parts, bad, 2, 0, &mix) == STK_EINVAL);
    T_OK(stk_tokens_mix(parts, w, 2, 200, &mix)); /* owns the parts from here */
    T_EQ(stk_dataset_n_records(mix), 200);
    T_CHECK(stk_dataset_find_field(mix, "source") == 2);
    const stk_dataset *p;
    double wd;
    uint64_t per;
    T_OK(stk_tokens_mix_part(mix, 1, &p, &wd, &per));
    T_CHECK(p == parts[1] && fabs(wd - 0.25) < 1e-12 && per == 50);
    stk_tokens_info in = {.struct_size = sizeof(in)};
    T_OK(stk_tokens_info_get(mix, &in));
    T_EQ(in.n_parts, 2);
    T_EQ(in.n_rows, 200);
    T_EQ(in.n_tokens, 801 + 401);
    uint8_t buf[512];
    stk_record rec;
    stk_record_init(&rec);
    int counts[2] = {0, 0};
    for (uint64_t i = 0; i < 200; i++) {
        T_OK(stk_dataset_read(mix, i, buf, sizeof(buf), &rec));
        counts[stk_record_i64(&rec, 2)]++;
    }
    T_EQ(counts[0], 150);
    T_EQ(counts[1], 50);
    stk_dataset_close(mix);
    fx_rmtree(dir);
    return 0;
}

/* Every allocation of opening (a header, an index, an eos scan, packing, a column), mixing and
 * reading failing in turn: STK_ENOMEM saying "memory", or success; never a crash or leak. */
static int test_alloc_failures_tokens(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    const char *dir = fx_tmpdir("toka");
    char prefix[256], bin[256];
    snprintf(prefix, sizeof(prefix), "%s/m", dir);
    snprintf(bin, sizeof(bin), "%s/e.bin", dir);
    write_megatron(prefix, 50);
    uint16_t ids[300];
    for (int i = 0; i < 300; i++)
        ids[i] = (uint16_t)(i % 7);
    write_u16(bin, NULL, 0, ids, 300);
    int failures = 0, oks = 0;
    for (long k = 1; k < 2000 && oks < 30; k++) {
        stk__fault_alloc_set(k);
        stk_dataset *parts[2] = {NULL, NULL}, *mix = NULL;
        stk_tokens_opts o;
        stk_tokens_opts_init(&o);
        const char *p0 = prefix, *p1 = bin;
        o.paths = &p0;
        o.n_paths = 1;
        o.seq_len = 8;
        o.mode = STK_TOKENS_PACKED;
        stk_status rc = stk_tokens_open(&o, &parts[0]);
        if (rc == STK_OK) {
            o.paths = &p1;
            o.eos = 0;
            rc = stk_tokens_open(&o, &parts[1]);
        }
        const double w[2] = {1, 2};
        if (rc == STK_OK && (rc = stk_tokens_mix(parts, w, 2, 0, &mix)) == STK_OK)
            parts[0] = parts[1] = NULL;
        if (rc == STK_OK) {
            uint8_t buf[1024];
            stk_record rec;
            stk_record_init(&rec);
            for (uint64_t i = 0; i < stk_dataset_n_records(mix) && rc == STK_OK; i++)
                rc = stk_dataset_read(mix, i, buf, sizeof(buf), &rec);
        }
        stk__fault_alloc_set(0);
        T_CHECKF(rc == STK_OK || (rc == STK_ENOMEM && strstr(stk_last_errmsg(), "memory")),
                 "allocation %ld: rc %d (%s)", k, rc, stk_last_errmsg());
        failures += rc == STK_ENOMEM;
        oks = rc == STK_OK ? oks + 1 : 0;
        stk_dataset_close(mix);
        stk_dataset_close(parts[0]);
        stk_dataset_close(parts[1]);
    }
    T_CHECKF(failures >= 20, "%d failures", failures);
    fx_rmtree(dir);
    return 0;
#else
    return T_SKIP;
#endif
}

T_MAIN(T_CASE(test_packing_matches_reference), T_CASE(test_blend_within_two_of_every_share),
       T_CASE(test_llmc_and_megatron_rows_and_errors),
       T_CASE(test_loader_every_token_once_and_resume), T_CASE(test_mix_public_api),
       T_CASE(test_alloc_failures_tokens))
