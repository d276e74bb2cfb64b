/*
 * test_vfs_fault.c: the fault-injecting byte source (src/io/stk_vfs_fault.c), which the format
 * tests and the fault fuzz target rely on: each kind of fault at a byte range and at the Nth
 * read, several at once, a lying size, stat and glob through it, and malformed plans refused
 * with a message naming the fault.
 */
#include "io/stk_vfs.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <stdio.h>
#include <string.h>

#define N 10000

static char g_file[256], g_dir[200];

/* A file of N bytes, byte k = k * 7 mod 251. */
static int setup(void)
{
    snprintf(g_dir, sizeof(g_dir), "%s", fx_tmpdir("vfsfault"));
    snprintf(g_file, sizeof(g_file), "%s/data.bin", g_dir);
    FILE *f = fopen(g_file, "wb");
    T_CHECK(f);
    for (int k = 0; k < N; k++)
        fputc(k * 7 % 251, f);
    T_CHECK(fclose(f) == 0);
    return 0;
}

static int teardown(void)
{
    fx_rmtree(g_dir);
    return 0;
}

/* Open PLAN over the file. */
static stk_status open_plan(const char *plan, stk__file **f, char *err, size_t err_size)
{
    char path[512];
    snprintf(path, sizeof(path), "stk-fault:%s:%s", plan, g_file);
    return stk__vfs_open(path, f, err, err_size);
}

static bool right(const uint8_t *b, uint64_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != (uint8_t)((off + i) * 7 % 251))
            return false;
    return true;
}

static int test_ranges(void)
{
    char err[STK_ERRMSG_SIZE];
    uint8_t b[512];
    stk__file *f;
    T_OK(open_plan("eio@1000-1099,short@5000,flip@7000-7001", &f, err, sizeof(err)));
    T_EQ(f->size, N);
    T_OK(stk__vfs_read(f, 0, b, 512, err, sizeof(err))); /* untouched bytes pass */
    T_CHECK(right(b, 0, 512));
    T_EQ(stk__vfs_read(f, 900, b, 101, err, sizeof(err)), STK_EIO); /* touches byte 1000 */
    T_CHECKF(strstr(err, "data.bin") && strstr(err, "injected I/O error at byte 1000"), "%s", err);
    T_EQ(stk__vfs_read(f, 1050, b, 10, err, sizeof(err)), STK_EIO);
    T_OK(stk__vfs_read(f, 1100, b, 100, err, sizeof(err)));
    T_EQ(stk__vfs_read(f, 4900, b, 200, err, sizeof(err)), STK_EIO);
    T_CHECKF(strstr(err, "short read (100 of 200 bytes"), "%s", err);
    T_OK(stk__vfs_read(f, 6990, b, 20, err, sizeof(err))); /* flipped bytes, no error */
    T_CHECK(right(b, 6990, 10) && right(b + 12, 7002, 8));
    T_CHECK(b[10] == (uint8_t)((7000 * 7 % 251) ^ 0x20) &&
            b[11] == (uint8_t)((7001 * 7 % 251) ^ 0x20));
    stk__vfs_close(f);
    return 0;
}

static int test_counted_and_size(void)
{
    char err[STK_ERRMSG_SIZE];
    uint8_t b[64];
    stk__file *f;
    T_OK(open_plan("eio#2,flip#3,short#5,size=20000", &f, err, sizeof(err)));
    T_EQ(f->size, 20000);
    T_OK(stk__vfs_read(f, 100, b, 64, err, sizeof(err))); /* read 1 */
    T_CHECK(right(b, 100, 64));
    T_EQ(stk__vfs_read(f, 100, b, 64, err, sizeof(err)), STK_EIO); /* read 2 */
    T_OK(stk__vfs_read(f, 100, b, 64, err, sizeof(err)));          /* read 3: first byte */
    T_CHECK(b[0] == (uint8_t)((100 * 7 % 251) ^ 0x20) && right(b + 1, 101, 63));
    T_OK(stk__vfs_read(f, 100, b, 64, err, sizeof(err)));          /* read 4 */
    T_EQ(stk__vfs_read(f, 100, b, 64, err, sizeof(err)), STK_EIO); /* read 5 */
    T_CHECKF(strstr(err, "short read (0 of 64"), "%s", err);
    /* past the real end of a file that claims more: the inner byte source's error */
    T_CHECK(stk__vfs_read(f, N - 10, b, 64, err, sizeof(err)) < 0);
    T_CHECKF(strstr(err, "data.bin"), "%s", err);
    stk__vfs_close(f);
    return 0;
}

static int test_stat_glob_and_bad_plans(void)
{
    char err[STK_ERRMSG_SIZE], path[512];
    stk__stat st;
    snprintf(path, sizeof(path), "stk-fault:eio@0:%s", g_file);
    T_OK(stk__vfs_stat(path, &st, err, sizeof(err)));
    T_CHECK(st.is_regular && st.size == N);
    snprintf(path, sizeof(path), "stk-fault:flip@3:%s/*.bin", g_dir);
    stk__strlist l = {0};
    T_OK(stk__vfs_for(path)->glob(path, &l, err, sizeof(err)));
    T_EQ(l.n, 1);
    snprintf(path, sizeof(path), "stk-fault:flip@3:%s", g_file);
    T_CHECKF(strcmp(l.v[0], path) == 0, "%s", l.v[0]);
    stk__strlist_free(&l);
    static const char *const bad[] = {"eio",    "eio@",   "eio@5-2",      "eio#0",
                                      "boom@1", "size=x", "flip@1,,eio@2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        stk__file *f = NULL;
        T_EQ(open_plan(bad[i], &f, err, sizeof(err)), STK_EINVAL);
        T_CHECKF(strstr(err, "bad fault"), "%s: %s", bad[i], err);
        T_CHECK(f == NULL);
    }
    stk__file *f = NULL;
    T_EQ(stk__vfs_open("stk-fault:eio@1", &f, err, sizeof(err)), STK_EINVAL); /* no path */
    T_OK(open_plan("", &f, err, sizeof(err))); /* an empty plan passes everything */
    stk__vfs_close(f);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_ranges), T_CASE(test_counted_and_size),
       T_CASE(test_stat_glob_and_bad_plans), T_CASE(teardown))
