/*
 * test_ring.c: batch-slot layout: every tensor 64-byte aligned and disjoint, bytes fields as
 * [n, stride] rows with a lengths vector, scalars and arrays with their dtype and shape, the
 * transformed field replaced by the transform's output, "index" last, and overflow refused.
 */
#include "stk_internal.h"
#include "batch/stk_ring.h"
#include "t.h"

#include <unistd.h>

static char path[256];

static int make_shard(void)
{
    snprintf(path, sizeof(path), "/tmp/stk_test_ring_%d.stk", (int)getpid());
    stk_field f[4] = {{.name = "image", .kind = STK_FIELD_BYTES},
                      {.name = "label", .kind = STK_FIELD_INT64},
                      {.name = "weight", .kind = STK_FIELD_FLOAT32},
                      {.name = "box", .kind = STK_FIELD_ARRAY, .dtype = STK_DTYPE_INT16,
                       .ndim = 2, .shape = {2, 3}}};
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = f;
    o.n_fields = 4;
    stk_writer *w;
    T_OK(stk_writer_open(path, &o, &w));
    static uint8_t img[1000];
    int16_t box[6] = {0};
    for (int i = 0; i < 3; i++) {
        stk_value v[4] = {{.data = img, .size = (size_t)(100 + 400 * i)}, {.i64 = i}, {.f32 = 1},
                          {.data = box, .size = sizeof(box)}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

static int test_layout(void)
{
    const char *paths[] = {path};
    stk_dataset *ds;
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    stk__layout lay;
    char err[256];
    T_OK(stk__layout_init(&lay, ds, 7, -1, NULL, err, sizeof(err)));
    T_EQ(lay.n_tensors, 5);
    static const char *names[] = {"image", "label", "weight", "box", "index"};
    static const stk_dtype dt[] = {STK_DTYPE_UINT8, STK_DTYPE_INT64, STK_DTYPE_FLOAT32,
                                   STK_DTYPE_INT16, STK_DTYPE_INT64};
    static uint8_t slot[1 << 16] __attribute__((aligned(64)));
    T_CHECK(lay.slot_size <= sizeof(slot));
    T_EQ(lay.slot_size % 64, 0);
    size_t end = 0;
    for (size_t i = 0; i < lay.n_tensors; i++) {
        stk_tensor t;
        stk__layout_tensor(&lay, i, slot, 5, &t); /* a partial batch of 5 */
        T_CHECK(strcmp(t.name, names[i]) == 0);
        T_EQ(t.dtype, dt[i]);
        T_EQ(t.shape[0], 5);
        T_EQ(((uint8_t *)t.data - slot) % 64, 0);
        T_CHECK((size_t)((uint8_t *)t.data - slot) >= end); /* in order, not overlapping */
        end = (size_t)((uint8_t *)t.data - slot) + lay.t[i].row_size * 7;
        T_EQ(t.size, lay.t[i].row_size * 5);
    }
    T_CHECK(end <= lay.slot_size);
    stk_tensor img, box;
    stk__layout_tensor(&lay, 0, slot, 7, &img);
    T_EQ(img.ndim, 2);
    T_EQ(img.shape[1], 960); /* largest image (900 bytes) rounded up to 64 */
    T_CHECK(img.lengths != NULL);
    T_CHECK((uint8_t *)img.lengths >= (uint8_t *)img.data + img.size);
    stk__layout_tensor(&lay, 3, slot, 7, &box);
    T_EQ(box.ndim, 3);
    T_EQ(box.shape[1], 2);
    T_EQ(box.shape[2], 3);
    T_EQ(box.size, 7 * 6 * 2);
    T_CHECK(box.lengths == NULL);

    /* A transform's output replaces the field it reads. */
    stk__tspec spec = {.dtype = STK_DTYPE_FLOAT32, .ndim = 3, .shape = {3, 4, 5}};
    T_OK(stk__layout_init(&lay, ds, 2, 0, &spec, err, sizeof(err)));
    stk__layout_tensor(&lay, 0, slot, 2, &img);
    T_CHECK(strcmp(img.name, "image") == 0);
    T_EQ(img.dtype, STK_DTYPE_FLOAT32);
    T_EQ(img.ndim, 4);
    T_EQ(img.shape[3], 5);
    T_EQ(img.size, 2 * 3 * 4 * 5 * 4);
    T_CHECK(img.lengths == NULL);

    /* Sizes that overflow are refused with a message naming the field. */
    stk__tspec huge = {.dtype = STK_DTYPE_FLOAT64, .ndim = 4,
                       .shape = {1 << 20, 1 << 20, 1 << 20, 1 << 10}};
    T_EQ(stk__layout_init(&lay, ds, 0x7fffffff, 0, &huge, err, sizeof(err)), STK_ELIMIT);
    T_CHECK(strstr(err, "image"));
    stk_dataset_close(ds);
    unlink(path);
    return 0;
}

T_MAIN(T_CASE(make_shard), T_CASE(test_layout))
