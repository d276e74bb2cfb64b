/*
 * test_layout.c: batch-slot layout: every tensor 64-byte aligned and disjoint, bytes fields as
 * [n, stride] rows with a lengths vector, scalars and arrays with their dtype and shape, the
 * transformed field replaced by the transform's output, "index" last, and overflow refused.
 */
#include "stk_internal.h"
#include "batch/stk_layout.h"
#include "t.h"

/* The schema of a shard with these fields, whose largest image is 900 bytes. */
static const stk_field fields[4] = {
    {.struct_size = sizeof(stk_field), .name = "image", .kind = STK_FIELD_BYTES},
    {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64},
    {.struct_size = sizeof(stk_field), .name = "weight", .kind = STK_FIELD_FLOAT32},
    {.struct_size = sizeof(stk_field),
     .name = "box",
     .kind = STK_FIELD_ARRAY,
     .dtype = STK_DTYPE_INT16,
     .ndim = 2,
     .shape = {2, 3}}};
static const uint64_t max_size[4] = {900, 8, 4, 12};

static int test_layout(void)
{
    stk__layout lay;
    char err[256];
    T_OK(stk__layout_init(&lay, fields, max_size, 4, 7, -1, NULL, err, sizeof(err)));
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
        stk_tensor_init(&t);
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
    stk_tensor_init(&img);
    stk_tensor_init(&box);
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
    T_OK(stk__layout_init(&lay, fields, max_size, 4, 2, 0, &spec, err, sizeof(err)));
    stk__layout_tensor(&lay, 0, slot, 2, &img);
    T_CHECK(strcmp(img.name, "image") == 0);
    T_EQ(img.dtype, STK_DTYPE_FLOAT32);
    T_EQ(img.ndim, 4);
    T_EQ(img.shape[3], 5);
    T_EQ(img.size, 2 * 3 * 4 * 5 * 4);
    T_CHECK(img.lengths == NULL);

    /* Sizes that overflow are refused with a message naming the field. */
    stk__tspec huge = {
        .dtype = STK_DTYPE_FLOAT64, .ndim = 4, .shape = {1 << 20, 1 << 20, 1 << 20, 1 << 10}};
    T_EQ(stk__layout_init(&lay, fields, max_size, 4, 0x7fffffff, 0, &huge, err, sizeof(err)),
         STK_ELIMIT);
    T_CHECK(strstr(err, "image"));
    uint64_t absurd[4] = {UINT64_MAX - 8, 8, 4, 12}; /* a bytes size from a corrupt index */
    T_EQ(stk__layout_init(&lay, fields, absurd, 4, 2, -1, NULL, err, sizeof(err)), STK_ELIMIT);
    T_CHECK(strstr(err, "image"));
    return 0;
}

T_MAIN(T_CASE(test_layout))
