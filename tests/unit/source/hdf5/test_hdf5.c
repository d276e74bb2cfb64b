/*
 * test_hdf5.c: the HDF5 source (src/source/hdf5/stk_src_hdf5.c) from C, on files this file writes
 * with libhdf5: detection, count, schema (scalar, array and vlen-bytes fields, subgroups, scalar
 * datasets left out), every row of every dataset read back (contiguous rows by offset, a chunked
 * gzip dataset and big-endian data through the library), several files as one dataset; and the
 * bad inputs: a truncated file, unsupported dtypes (uint16, compound), datasets of different
 * lengths, an empty dataset, no dataset of rank >= 1, files whose datasets differ.
 */
#include "source/stk_source.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#include <hdf5.h>

#include <stdio.h>
#include <string.h>

#define N 23

static herr_t put(hid_t file, const char *name, hid_t ftype, hid_t mtype, int rank,
                  const hsize_t *dims, hid_t dcpl, const void *data)
{
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    hid_t d = H5Dcreate2(file, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    herr_t rc = d < 0 ? -1 : H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    if (d >= 0)
        H5Dclose(d);
    H5Sclose(sp);
    H5Pclose(lcpl);
    return rc;
}

/* Row r (of rows first..first+n-1 in this file) of the test datasets:
 *   image     vlen uint8, r % 9 bytes of value r (contiguous: read by offset)
 *   label     int64 10 r - 3
 *   g/x       float32 (2, 3): 6 r + k
 *   feat      float64 (4,), chunked + gzip: r + k / 4 (through the library)
 *   be        big-endian int32 (2,): r, -r (through the library, converted)
 *   version   a scalar: metadata, not a field */
static int write_file(const char *path, int first, int n)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    T_CHECK(f >= 0);
    hsize_t d1[1] = {(hsize_t)n}, d3[3] = {(hsize_t)n, 2, 3}, d2[2] = {(hsize_t)n, 4},
            db[2] = {(hsize_t)n, 2};
    static uint8_t bytes[N][16];
    hvl_t img[N];
    int64_t label[N];
    float x[N][2][3];
    double feat[N][4];
    int32_t be[N][2];
    for (int i = 0; i < n; i++) {
        int r = first + i;
        memset(bytes[i], r, sizeof(bytes[i]));
        img[i] = (hvl_t){(size_t)(r % 9), bytes[i]};
        label[i] = 10 * r - 3;
        for (int k = 0; k < 6; k++)
            x[i][k / 3][k % 3] = (float)(6 * r + k);
        for (int k = 0; k < 4; k++)
            feat[i][k] = r + k / 4.0;
        be[i][0] = r;
        be[i][1] = -r;
    }
    hid_t vt = H5Tvlen_create(H5T_NATIVE_UCHAR);
    T_CHECK(put(f, "image", vt, vt, 1, d1, H5P_DEFAULT, img) >= 0);
    H5Tclose(vt);
    T_CHECK(put(f, "label", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d1, H5P_DEFAULT, label) >= 0);
    T_CHECK(put(f, "g/x", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, d3, H5P_DEFAULT, x) >= 0);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t chunk[2] = {n < 5 ? (hsize_t)n : 5, 4}; /* no larger than the dataset */
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_deflate(dcpl, 6);
    T_CHECK(put(f, "feat", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 2, d2, dcpl, feat) >= 0);
    H5Pclose(dcpl);
    T_CHECK(put(f, "be", H5T_STD_I32BE, H5T_NATIVE_INT32, 2, db, H5P_DEFAULT, be) >= 0);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t v = H5Dcreate2(f, "version", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int three = 3;
    T_CHECK(v >= 0 && H5Dwrite(v, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &three) >= 0);
    H5Dclose(v);
    H5Sclose(sp);
    T_CHECK(H5Fclose(f) >= 0);
    return 0;
}

static int open_list(const char *const *paths, size_t n, stk_dataset **ds)
{
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = paths;
    o.n_paths = n;
    return stk_dataset_open_v2(&o, ds);
}

/* Record r of a dataset of the test files, field by field (fields in byte order of the paths:
 * be, feat, g/x, image, label). */
static int check_record(const stk_dataset *ds, uint64_t i, int r)
{
    static uint8_t buf[1024];
    stk_record rec;
    stk_record_init(&rec);
    T_OK(stk_dataset_read(ds, i, buf, sizeof(buf), &rec));
    int32_t be[2];
    double feat[4];
    float x[6];
    memcpy(be, rec.field[0], 8);
    memcpy(feat, rec.field[1], 32);
    memcpy(x, rec.field[2], 24);
    T_CHECKF(be[0] == r && be[1] == -r, "record %d: be %d %d", r, be[0], be[1]);
    for (int k = 0; k < 4; k++)
        T_CHECK(feat[k] == r + k / 4.0);
    for (int k = 0; k < 6; k++)
        T_CHECK(x[k] == (float)(6 * r + k));
    T_EQ(rec.field_size[3], r % 9);
    for (size_t k = 0; k < rec.field_size[3]; k++)
        T_EQ(rec.field[3][k], r);
    T_EQ(stk_record_i64(&rec, 4), 10 * r - 3);
    return 0;
}

/* describe(i) holds `want`. */
static int describes(const stk_dataset *ds, uint64_t i, const char *want)
{
    char where[512];
    T_OK(stk_dataset_describe(ds, i, where, sizeof(where)));
    T_CHECKF(strstr(where, want), "'%s' lacks '%s'", where, want);
    return 0;
}

static int test_read_rows(void)
{
    const char *dir = fx_tmpdir("hdf5");
    char path[256];
    snprintf(path, sizeof(path), "%s/d.h5", dir);
    T_CHECK(write_file(path, 0, N) == 0);
    const char *paths[] = {path};
    stk_dataset *ds;
    T_OK(open_list(paths, 1, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "hdf5") == 0);
    T_EQ(stk_dataset_n_records(ds), N);
    T_EQ(stk_dataset_n_fields(ds), 5); /* "version" is metadata */
    static const char *const names[] = {"be", "feat", "g/x", "image", "label"};
    for (uint32_t f = 0; f < 5; f++)
        T_CHECKF(strcmp(stk_dataset_field(ds, f)->name, names[f]) == 0, "field %u", f);
    const stk_field *x = stk_dataset_field(ds, 2);
    T_CHECK(x->kind == STK_FIELD_ARRAY && x->dtype == STK_DTYPE_FLOAT32 && x->ndim == 2 &&
            x->shape[0] == 2 && x->shape[1] == 3);
    T_CHECK(stk_dataset_field(ds, 0)->dtype == STK_DTYPE_INT32);
    T_CHECK(stk_dataset_field(ds, 1)->dtype == STK_DTYPE_FLOAT64);
    T_EQ(stk_dataset_field(ds, 3)->kind, STK_FIELD_BYTES);
    T_EQ(stk_dataset_field(ds, 4)->kind, STK_FIELD_INT64);
    T_EQ(stk_dataset_field_max_size(ds, 3), 8);
    for (int r = 0; r < N; r++)
        T_CHECK(check_record(ds, (uint64_t)r, r) == 0);
    stk_shard_info si = {.struct_size = sizeof(si)};
    T_OK(stk_dataset_shard(ds, 0, &si));
    T_CHECKF(strstr(si.metadata, "\"library\": [\"be\", \"feat\"]"), "%s", si.metadata);
    T_CHECK(describes(ds, 4, "d.h5 row 4") == 0);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_several_files(void)
{
    const char *dir = fx_tmpdir("hdf5");
    char a[256], b[256], c[256], pattern[256];
    snprintf(a, sizeof(a), "%s/p-0.h5", dir);
    snprintf(b, sizeof(b), "%s/p-1.h5", dir);
    snprintf(c, sizeof(c), "%s/p-2.h5", dir);
    T_CHECK(write_file(a, 0, 9) == 0);
    T_CHECK(write_file(b, 9, 1) == 0);
    T_CHECK(write_file(c, 10, N - 10) == 0);
    snprintf(pattern, sizeof(pattern), "%s/p-{0..2}.h5", dir);
    const char *paths[] = {pattern};
    stk_dataset *ds;
    T_OK(open_list(paths, 1, &ds));
    T_EQ(stk_dataset_n_records(ds), N);
    T_EQ(stk_dataset_n_shards(ds), 3);
    for (int r = 0; r < N; r++)
        T_CHECK(check_record(ds, (uint64_t)r, r) == 0);
    T_CHECK(describes(ds, 11, "p-2.h5 row 1 (global 11)") == 0);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* A file with one 1-d dataset `name` of n elements of type ftype, never written (fill value). */
static int write_one(const char *path, const char *name, hid_t ftype, int n)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    T_CHECK(f >= 0);
    hsize_t d[1] = {(hsize_t)n};
    hid_t sp = H5Screate_simple(1, d, NULL);
    hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    T_CHECK(ds >= 0);
    H5Dclose(ds);
    H5Sclose(sp);
    T_CHECK(H5Fclose(f) >= 0);
    return 0;
}

static int expect_fail(const char *const *paths, size_t n, int code, const char *w1, const char *w2)
{
    stk_dataset *ds = (stk_dataset *)1;
    int rc = open_list(paths, n, &ds);
    const char *m = stk_last_errmsg();
    T_CHECKF(rc == code, "%s: got %d (%s), want %d", paths[0], rc, m, code);
    T_CHECK(ds == NULL);
    T_CHECKF(strstr(m, w1) && (!w2 || strstr(m, w2)), "'%s' lacks '%s' / '%s'", m, w1,
             w2 ? w2 : "");
    return 0;
}

static int test_bad_files(void)
{
    const char *dir = fx_tmpdir("hdf5");
    char good[256], cut[256], u16[256], cmp[256], empty[256], lens[256], scalar[256], other[256];
    snprintf(good, sizeof(good), "%s/good.h5", dir);
    T_CHECK(write_file(good, 0, N) == 0);
    /* truncated: the file's end (and its metadata) missing */
    snprintf(cut, sizeof(cut), "%s/cut.h5", dir);
    size_t n;
    uint8_t *b = fx_read_file(good, &n);
    T_CHECK(b && n > 4096);
    FILE *f = fopen(cut, "wb");
    T_CHECK(f && fwrite(b, 1, n / 2, f) == n / 2 && fclose(f) == 0);
    free(b);
    const char *p1[] = {cut};
    T_CHECK(expect_fail(p1, 1, STK_EFORMAT, "cut.h5", NULL) == 0);
    /* unsupported dtypes: unsigned 16-bit, compound */
    snprintf(u16, sizeof(u16), "%s/u16.h5", dir);
    T_CHECK(write_one(u16, "depth", H5T_STD_U16LE, 4) == 0);
    const char *p2[] = {u16};
    T_CHECK(expect_fail(p2, 1, STK_ENOTSUP, "u16.h5: dataset 'depth' has unsigned 2-byte", NULL) ==
            0);
    snprintf(cmp, sizeof(cmp), "%s/cmp.h5", dir);
    hid_t ct = H5Tcreate(H5T_COMPOUND, 8);
    H5Tinsert(ct, "a", 0, H5T_NATIVE_INT32);
    H5Tinsert(ct, "b", 4, H5T_NATIVE_FLOAT);
    T_CHECK(write_one(cmp, "rec", ct, 4) == 0);
    H5Tclose(ct);
    const char *p3[] = {cmp};
    T_CHECK(expect_fail(p3, 1, STK_ENOTSUP, "cmp.h5: dataset 'rec' has an element type", NULL) ==
            0);
    /* an empty dataset: no records */
    snprintf(empty, sizeof(empty), "%s/empty.h5", dir);
    T_CHECK(write_one(empty, "x", H5T_STD_I64LE, 0) == 0);
    const char *p4[] = {empty};
    T_CHECK(expect_fail(p4, 1, STK_EINVAL, "empty.h5", "dataset is empty (0 records)") == 0);
    /* datasets of different lengths */
    snprintf(lens, sizeof(lens), "%s/lens.h5", dir);
    hid_t h = H5Fcreate(lens, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    int64_t z[6] = {0};
    hsize_t d5[1] = {5}, d6[1] = {6};
    T_CHECK(put(h, "a", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d5, H5P_DEFAULT, z) >= 0);
    T_CHECK(put(h, "g/b", H5T_STD_I64LE, H5T_NATIVE_INT64, 1, d6, H5P_DEFAULT, z) >= 0);
    H5Fclose(h);
    const char *p5[] = {lens};
    T_CHECK(expect_fail(p5, 1, STK_EINVAL, "lens.h5: dataset 'g/b' has 6 rows but 'a' has 5",
                        NULL) == 0);
    /* only a scalar: nothing to read as records */
    snprintf(scalar, sizeof(scalar), "%s/scalar.h5", dir);
    h = H5Fcreate(scalar, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t v = H5Dcreate2(h, "v", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dclose(v);
    H5Sclose(sp);
    H5Fclose(h);
    const char *p6[] = {scalar};
    T_CHECK(expect_fail(p6, 1, STK_EINVAL, "scalar.h5: no datasets of rank >= 1", NULL) == 0);
    /* several files whose datasets differ: the file is named */
    snprintf(other, sizeof(other), "%s/other.h5", dir);
    T_CHECK(write_one(other, "label", H5T_STD_I64LE, 3) == 0);
    const char *p7[] = {good, other};
    T_CHECK(expect_fail(p7, 2, STK_EINVAL, "other.h5: dataset 'be' is in", "good.h5") == 0);
    const char *p8[] = {good, u16};
    T_CHECK(expect_fail(p8, 2, STK_ENOTSUP, "u16.h5: dataset 'depth'", NULL) == 0);
    fx_rmtree(dir);
    return 0;
}

T_MAIN(T_CASE(test_read_rows), T_CASE(test_several_files), T_CASE(test_bad_files))
