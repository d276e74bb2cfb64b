/*
 * test_imgfield.c: the field a transform reads. stk_dataset_image_field's pick (`image`, then
 * names such as WebDataset's `jpg` and TFRecord's `image/encoded`, then record 0's magic bytes,
 * then uint8 image arrays), its errors for several candidates and for none; uint8 image array
 * fields as the transform's input: geometry, conversion to RGB, and the loader's output on an
 * array equal bit for bit to its output on the same pixels encoded as PPM/PGM (decoded exactly),
 * for (H, W, 3), (3, H, W), (H, W) and (H, W, 1); a field of the wrong dtype or shape refused
 * naming it.
 */
#include "source/stk_imgfield.h"
#include "stk_internal.h"
#include "t.h"

#include <sys/stat.h>

static char tmpdir[256];
static int n_made;

#define W 40
#define H 30
#define N 6

/* Write a one-shard .stk of n records into tmpdir; value(rec, field) fills each field. */
typedef void (*value_fn)(uint64_t rec, size_t field, const stk_field *fd, stk_value *v,
                         uint8_t *buf);

static int make(const stk_field *fields, size_t nf, uint64_t n, value_fn fn, char *path,
                size_t size)
{
    snprintf(path, size, "%s/d%d-%d.stk", tmpdir, (int)getpid(), n_made++);
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = fields;
    o.n_fields = nf;
    stk_writer *w;
    T_OK(stk_writer_open(path, &o, &w));
    static uint8_t bufs[STK_MAX_FIELDS][4 * W * H + 64];
    for (uint64_t i = 0; i < n; i++) {
        stk_value v[STK_MAX_FIELDS];
        for (size_t vi = 0; vi < sizeof(v) / sizeof(v[0]); vi++)
            stk_value_init(&v[vi]);
        for (size_t f = 0; f < nf; f++)
            fn(i, f, &fields[f], &v[f], bufs[f]);
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

static stk_field bytes_field(const char *name)
{
    stk_field f = {.struct_size = sizeof(stk_field), .kind = STK_FIELD_BYTES};
    snprintf(f.name, sizeof(f.name), "%s", name);
    return f;
}

static stk_field array_field(const char *name, stk_dtype dt, uint32_t ndim, int64_t a, int64_t b,
                             int64_t c)
{
    stk_field f = {.struct_size = sizeof(stk_field),
                   .kind = STK_FIELD_ARRAY,
                   .dtype = dt,
                   .ndim = ndim,
                   .shape = {a, b, c}};
    snprintf(f.name, sizeof(f.name), "%s", name);
    return f;
}

static stk_field int_field(const char *name)
{
    stk_field f = {.struct_size = sizeof(stk_field), .kind = STK_FIELD_INT64};
    snprintf(f.name, sizeof(f.name), "%s", name);
    return f;
}

/* Pixel (x, y, channel c) of record i: smooth, with edges, different per record. */
static uint8_t pixel(uint64_t i, int x, int y, int c)
{
    return (uint8_t)((x * 7 + y * 3 + c * 50 + (int)i * 11 + ((x / 8 + y / 8) % 2) * 90) & 255);
}

/* Values for the pick tests: bytes that are text unless the field is `value` or `blob`, which
 * hold a JPEG's magic and a PNG's; arrays zero. */
static void pick_value(uint64_t rec, size_t f, const stk_field *fd, stk_value *v, uint8_t *buf)
{
    (void)rec;
    (void)f;
    static const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F'};
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', 13, 10, 26, 10, 0, 0};
    if (fd->kind == STK_FIELD_ARRAY) {
        v->size = stk__field_fixed_size(fd);
        memset(buf, 0, v->size);
        v->data = buf;
    } else if (fd->kind == STK_FIELD_BYTES) {
        bool j = strcmp(fd->name, "value") == 0, p = strcmp(fd->name, "blob") == 0;
        v->data = j ? jpeg : p ? png : (const uint8_t *)"some text";
        v->size = j ? sizeof(jpeg) : p ? sizeof(png) : 9;
    } else {
        v->i64 = 1;
    }
}

/* The pick on a dataset of these fields: its name, or "!" + stk_last_errmsg() on failure. */
static int pick(const stk_field *fields, size_t nf, char *out, size_t size)
{
    char path[512];
    T_CHECK(make(fields, nf, 3, pick_value, path, sizeof(path)) == 0);
    stk_dataset *ds;
    T_OK(stk_dataset_open((const char *const[]){path}, 1, 0, &ds));
    size_t f = 99;
    if (stk_dataset_image_field(ds, &f) == STK_OK)
        snprintf(out, size, "%s", stk_dataset_field(ds, f)->name);
    else
        snprintf(out, size, "!%s", stk_last_errmsg());
    stk_dataset_close(ds);
    return 0;
}

#define PICK(expect, ...)                                                                          \
    do {                                                                                           \
        const stk_field fs_[] = {__VA_ARGS__};                                                     \
        char got_[1024];                                                                           \
        T_CHECK(pick(fs_, sizeof(fs_) / sizeof(fs_[0]), got_, sizeof(got_)) == 0);                 \
        T_CHECKF(strcmp(got_, expect) == 0, "picked %s, expected %s", got_, expect);               \
    } while (0)

static int test_pick_by_name(void)
{
    /* WebDataset: the extension names the field */
    PICK("jpg", bytes_field("__key__"), int_field("cls"), bytes_field("jpg"), bytes_field("json"));
    PICK("seg.png", bytes_field("__key__"), bytes_field("seg.png"), bytes_field("txt"));
    PICK("JPEG", bytes_field("JPEG"), int_field("label"));
    /* TFRecord's key; image/format (text "jpeg") is not an image */
    PICK("image/encoded", bytes_field("image/encoded"), int_field("image/class/label"),
         bytes_field("image/format"));
    /* `image` wins over every other candidate */
    PICK("image", bytes_field("jpg"), bytes_field("image"), bytes_field("png"));
    /* a name wins over the magic of another field */
    PICK("webp", bytes_field("value"), bytes_field("webp"));
    return 0;
}

static int test_pick_by_magic(void)
{
    /* LMDB: `value` holds a JPEG; `__key__` is text */
    PICK("value", bytes_field("__key__"), bytes_field("value"));
    PICK("blob", bytes_field("blob"), int_field("label"), bytes_field("text"));
    return 0;
}

static int test_pick_arrays(void)
{
    PICK("images", array_field("images", STK_DTYPE_UINT8, 3, H, W, 3), int_field("labels"));
    PICK("chw", array_field("chw", STK_DTYPE_UINT8, 3, 3, H, W), int_field("labels"));
    PICK("gray", array_field("gray", STK_DTYPE_UINT8, 2, H, W, 0), int_field("labels"));
    /* three channels win over one; float arrays and small arrays are not images */
    PICK("rgb", array_field("mask", STK_DTYPE_UINT8, 2, H, W, 0),
         array_field("rgb", STK_DTYPE_UINT8, 3, H, W, 3),
         array_field("feat", STK_DTYPE_FLOAT32, 3, H, W, 3),
         array_field("tiny", STK_DTYPE_UINT8, 3, 4, 4, 3));
    /* encoded bytes win over arrays */
    PICK("png", array_field("rgb", STK_DTYPE_UINT8, 3, H, W, 3), bytes_field("png"));
    return 0;
}

static int test_pick_ambiguous_and_none(void)
{
    char got[1024];
    const stk_field two[] = {bytes_field("jpg"), bytes_field("png"), int_field("cls")};
    T_CHECK(pick(two, 3, got, sizeof(got)) == 0);
    T_CHECKF(got[0] == '!' && strstr(got, "'jpg', 'png'") && strstr(got, "transform_field=") &&
                 strstr(got, "--field") && strstr(got, "named as encoded images"),
             "%s", got);
    const stk_field sniffed[] = {bytes_field("value"), bytes_field("blob")};
    T_CHECK(pick(sniffed, 2, got, sizeof(got)) == 0);
    T_CHECKF(got[0] == '!' && strstr(got, "'value', 'blob'") && strstr(got, "record 0"), "%s", got);
    const stk_field arrays[] = {array_field("left", STK_DTYPE_UINT8, 3, H, W, 3),
                                array_field("right", STK_DTYPE_UINT8, 3, 3, H, W)};
    T_CHECK(pick(arrays, 2, got, sizeof(got)) == 0);
    T_CHECKF(got[0] == '!' && strstr(got, "'left', 'right'"), "%s", got);
    const stk_field none[] = {array_field("x", STK_DTYPE_FLOAT32, 2, 4, 5, 0), int_field("label"),
                              bytes_field("txt")};
    T_CHECK(pick(none, 3, got, sizeof(got)) == 0);
    T_CHECKF(got[0] == '!' && strstr(got, "no field for the transforms") &&
                 strstr(got, "'x' (float32 array)") && strstr(got, "'label' (int64)") &&
                 strstr(got, "'txt' (bytes)") && strstr(got, "transform_field="),
             "%s", got);
    T_EQ(stk_dataset_image_field(NULL, NULL), STK_EINVAL);
    return 0;
}

static int test_array_geometry(void)
{
    stk__imgarray a;
    char err[512];
    stk_field f = array_field("a", STK_DTYPE_UINT8, 3, H, W, 3);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == W && a.height == H && a.channels == 3 && !a.chw && a.size == W * H * 3);
    T_CHECK(!stk__imgarray_converts(&a));
    f = array_field("a", STK_DTYPE_UINT8, 3, 3, H, W);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == W && a.height == H && a.channels == 3 && a.chw);
    f = array_field("a", STK_DTYPE_UINT8, 3, H, W, 1);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == W && a.height == H && a.channels == 1 && !a.chw);
    f = array_field("a", STK_DTYPE_UINT8, 3, 1, H, W);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == W && a.height == H && a.channels == 1 && a.chw);
    f = array_field("a", STK_DTYPE_UINT8, 2, H, W, 0);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == W && a.height == H && a.channels == 1 && a.size == W * H);
    /* (3, H, 3) is interleaved: the last dimension wins */
    f = array_field("a", STK_DTYPE_UINT8, 3, 3, 5, 3);
    T_OK(stk__imgarray_of(&f, &a, err, sizeof(err)));
    T_CHECK(a.width == 5 && a.height == 3 && !a.chw);
    f = array_field("feat", STK_DTYPE_FLOAT32, 3, H, W, 3);
    T_EQ(stk__imgarray_of(&f, &a, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "field 'feat' is a float32 array of shape (30, 40, 3)"), "%s", err);
    f = array_field("four", STK_DTYPE_UINT8, 3, H, W, 4);
    T_EQ(stk__imgarray_of(&f, &a, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "'four' is a uint8 array of shape (30, 40, 4)"), "%s", err);
    f = array_field("v", STK_DTYPE_UINT8, 1, 7, 0, 0);
    T_EQ(stk__imgarray_of(&f, &a, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "shape (7,)"), "%s", err);
    f = int_field("label");
    T_EQ(stk__imgarray_of(&f, &a, err, sizeof(err)), STK_EINVAL);
    T_CHECKF(strstr(err, "field 'label' is an int64"), "%s", err);
    return 0;
}

static int test_array_to_rgb(void)
{
    uint8_t src[3 * 2 * 2] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, buf[12];
    stk__imgarray a = {.width = 2, .height = 2, .channels = 3, .chw = false, .size = 12};
    T_CHECK(stk__imgarray_rgb(&a, src, buf) == src); /* already RGB: no copy */
    a.chw = true;
    T_CHECK(stk__imgarray_rgb(&a, src, buf) == buf);
    const uint8_t chw[12] = {1, 5, 9, 2, 6, 10, 3, 7, 11, 4, 8, 12};
    T_CHECK(memcmp(buf, chw, 12) == 0);
    a = (stk__imgarray){.width = 2, .height = 2, .channels = 1, .size = 4};
    T_CHECK(stk__imgarray_rgb(&a, src, buf) == buf);
    const uint8_t gray[12] = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
    T_CHECK(memcmp(buf, gray, 12) == 0);
    return 0;
}

/* ---- the loader on arrays against the same pixels encoded as PPM / PGM ---- */

enum { F_PPM, F_HWC, F_CHW, F_PGM, F_GRAY, F_GRAY1, F_FEAT, F_LABEL, N_F };

static void image_value(uint64_t rec, size_t f, const stk_field *fd, stk_value *v, uint8_t *buf)
{
    (void)fd;
    size_t at = 0;
    if (f == F_PPM || f == F_PGM)
        at = (size_t)sprintf((char *)buf, "P%c\n%d %d\n255\n", f == F_PPM ? '6' : '5', W, H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                uint8_t p = pixel(rec, x, y, c);
                if (f == F_PPM || f == F_HWC)
                    buf[at + ((size_t)y * W + x) * 3 + c] = p;
                else if (f == F_CHW)
                    buf[((size_t)c * H + y) * W + x] = p;
                else if (c == 0) /* grayscale: channel 0's values */
                    buf[at + (size_t)y * W + x] = p;
            }
    v->data = buf;
    v->size = f == F_FEAT  ? 4
              : f == F_PPM ? at + W * H * 3
              : f == F_PGM ? at + W * H
              : f == F_HWC ? W * H * 3
              : f == F_CHW ? W * H * 3
                           : W * H;
    v->i64 = (int64_t)rec;
}

static char ds_img[512];

static int make_images(void)
{
    const stk_field fields[N_F] = {bytes_field("ppm"),
                                   array_field("hwc", STK_DTYPE_UINT8, 3, H, W, 3),
                                   array_field("chw", STK_DTYPE_UINT8, 3, 3, H, W),
                                   bytes_field("pgm"),
                                   array_field("gray", STK_DTYPE_UINT8, 2, H, W, 0),
                                   array_field("gray1", STK_DTYPE_UINT8, 3, H, W, 1),
                                   array_field("feat", STK_DTYPE_FLOAT32, 1, 1, 0, 0),
                                   int_field("label")};
    return make(fields, N_F, N, image_value, ds_img, sizeof(ds_img));
}

/* A transform with a random crop, a flip and Normalize to float32 (so that every step runs). */
static int make_transform(stk_transform **t)
{
    stk_op ops[3];
    stk_op_init(&ops[0], STK_OP_RANDOM_RESIZED_CROP);
    ops[0].size[0] = ops[0].size[1] = 24;
    stk_op_init(&ops[1], STK_OP_RANDOM_HORIZONTAL_FLIP);
    stk_op_init(&ops[2], STK_OP_NORMALIZE);
    for (int c = 0; c < 3; c++) {
        ops[2].mean[c] = 0.4f + 0.05f * c;
        ops[2].std[c] = 0.2f + 0.01f * c;
    }
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.ops = ops;
    o.n_ops = 3;
    T_OK(stk_transform_create(&o, t));
    return 0;
}

/* Run one epoch with the transform on `field` (NULL: picked); copy the transformed tensor of
 * the whole epoch (in order) into out, its name into name. Returns the status of create. */
static stk_status run(const stk_transform *t, const char *field, float *out, char *name)
{
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    o.paths = (const char *const[]){ds_img};
    o.n_paths = 1;
    o.batch_size = N;
    o.n_threads = 2;
    o.seed = 7;
    o.rank = 0;
    o.world = 1;
    o.transform = t;
    o.transform_field = field;
    stk_loader *L;
    stk_status rc = stk_loader_create(&o, &L);
    if (rc < 0)
        return rc;
    stk_batch *b;
    if ((rc = stk_loader_next(L, &b)) == STK_OK) {
        for (size_t i = 0; i < stk_batch_n_tensors(b); i++) {
            stk_tensor tt;
            stk_tensor_init(&tt);
            stk_batch_tensor(b, i, &tt);
            if (tt.dtype == STK_DTYPE_FLOAT32 && tt.ndim == 4) {
                memcpy(out, tt.data, tt.size);
                snprintf(name, STK_MAX_NAME, "%s", tt.name);
            }
        }
        stk_batch_release(b);
    }
    stk_loader_destroy(L);
    return rc;
}

#define OUT_FLOATS (N * 3 * 24 * 24)

static int test_loader_array_equals_encoded(void)
{
    stk_transform *t;
    T_CHECK(make_transform(&t) == 0);
    static float ppm[OUT_FLOATS], hwc[OUT_FLOATS], chw[OUT_FLOATS], pgm[OUT_FLOATS],
        gray[OUT_FLOATS], gray1[OUT_FLOATS];
    char name[STK_MAX_NAME];
    T_OK(run(t, "ppm", ppm, name));
    T_OK(run(t, "hwc", hwc, name));
    T_CHECK(strcmp(name, "hwc") == 0);
    T_OK(run(t, "chw", chw, name));
    T_OK(run(t, "pgm", pgm, name));
    T_OK(run(t, "gray", gray, name));
    T_OK(run(t, "gray1", gray1, name));
    T_CHECK(memcmp(ppm, hwc, sizeof(ppm)) == 0);
    T_CHECK(memcmp(ppm, chw, sizeof(ppm)) == 0);
    T_CHECK(memcmp(ppm, pgm, sizeof(ppm)) != 0); /* the gray images are other pixels */
    T_CHECK(memcmp(pgm, gray, sizeof(pgm)) == 0);
    T_CHECK(memcmp(pgm, gray1, sizeof(pgm)) == 0);
    stk_transform_destroy(t);
    return 0;
}

static int test_loader_picks_and_refuses(void)
{
    stk_transform *t;
    T_CHECK(make_transform(&t) == 0);
    static float out[OUT_FLOATS];
    char name[STK_MAX_NAME] = "";
    /* ppm and pgm are both named as images: the loader says so */
    T_EQ(run(t, NULL, out, name), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "'ppm', 'pgm'"), "%s", stk_last_errmsg());
    T_EQ(run(t, "feat", out, name), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "field 'feat' is a float32 array of shape (1,)"), "%s",
             stk_last_errmsg());
    T_EQ(run(t, "label", out, name), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "field 'label' is an int64"), "%s", stk_last_errmsg());
    T_EQ(run(t, "nope", out, name), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "'nope' is not in the dataset (its fields: ppm, hwc"), "%s",
             stk_last_errmsg());
    stk_transform_destroy(t);

    /* a dataset of a uint8 array and a label: the array is picked */
    const stk_field fields[] = {array_field("x", STK_DTYPE_UINT8, 3, H, W, 3), int_field("y")};
    char path[512];
    T_CHECK(make(fields, 2, N, pick_value, path, sizeof(path)) == 0);
    stk_loader_opts o;
    stk_loader_opts_init(&o);
    T_CHECK(o.transform_field == NULL);
    T_OK(stk_transform_recipe("imagenet-val", false, &t));
    o.paths = (const char *const[]){path};
    o.n_paths = 1;
    o.batch_size = 2;
    o.n_threads = 1;
    o.transform = t;
    stk_loader *L;
    T_OK(stk_loader_create(&o, &L));
    stk_batch *b;
    T_OK(stk_loader_next(L, &b));
    stk_tensor tt;
    stk_tensor_init(&tt);
    T_OK(stk_batch_tensor(b, 0, &tt));
    T_CHECK(strcmp(tt.name, "x") == 0 && tt.ndim == 4 && tt.shape[1] == 3 && tt.shape[2] == 224);
    stk_batch_release(b);
    stk_loader_destroy(L);
    stk_transform_destroy(t);
    return 0;
}

static int setup(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/stk_test_imgfield.XXXXXX");
    T_CHECK(mkdtemp(tmpdir));
    T_CHECK(make_images() == 0);
    return 0;
}

static int teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    T_CHECK(system(cmd) == 0);
    return 0;
}

T_MAIN(T_CASE(setup), T_CASE(test_pick_by_name), T_CASE(test_pick_by_magic),
       T_CASE(test_pick_arrays), T_CASE(test_pick_ambiguous_and_none), T_CASE(test_array_geometry),
       T_CASE(test_array_to_rgb), T_CASE(test_loader_array_equals_encoded),
       T_CASE(test_loader_picks_and_refuses), T_CASE(teardown))
