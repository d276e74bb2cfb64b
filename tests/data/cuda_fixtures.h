/*
 * cuda_fixtures.h: datasets, transforms and checks shared by the GPU path's tests: the CPU-only
 * ones with the fake driver (tests/unit/cuda/test_cuda.c) and the real-driver ones (tests/gpu/).
 * Include after t.h. Device memory is read through an `fx_fetch` callback: the fake's device
 * addresses are host memory, a real GPU's are copied back.
 */
#ifndef STK_CUDA_FIXTURES_H
#define STK_CUDA_FIXTURES_H

#include "data/fixtures.h"
#include "stoker.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fx_dir[256], fx_raw[512], fx_img[512];
static bool fx_have_images;

/* A temporary directory with raw.stk: n_raw records {data: fx_payload(i), label: 7i}, and img.stk:
 * 60 records {image: one of the two JPEG fixtures of tests/data/decode, label: i} when those are
 * found (the tests run from the repository root). */
FX_FN int fx_setup(const char *name, uint64_t n_raw)
{
    snprintf(fx_dir, sizeof(fx_dir), "/tmp/stk_%s.XXXXXX", name);
    T_CHECK(mkdtemp(fx_dir));
    snprintf(fx_raw, sizeof(fx_raw), "%s/raw.stk", fx_dir);
    snprintf(fx_img, sizeof(fx_img), "%s/img.stk", fx_dir);
    stk_field f[2] = {{.struct_size = sizeof(stk_field), .name = "data", .kind = STK_FIELD_BYTES},
                      {.struct_size = sizeof(stk_field), .name = "label", .kind = STK_FIELD_INT64}};
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    wo.fields = f;
    wo.n_fields = 2;
    stk_writer *w;
    T_OK(stk_writer_open(fx_raw, &wo, &w));
    for (uint64_t i = 0; i < n_raw; i++) {
        uint8_t buf[512];
        stk_value v[2] = {
            {.struct_size = sizeof(stk_value), .data = buf, .size = fx_payload(i, buf)},
            {.struct_size = sizeof(stk_value), .i64 = (int64_t)i * 7}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    size_t sz[2];
    uint8_t *jpg[2] = {fx_read_file("tests/data/decode/h4v2.jpg", &sz[0]),
                       fx_read_file("tests/data/decode/h2v4_prog.jpg", &sz[1])};
    fx_have_images = jpg[0] && jpg[1];
    if (fx_have_images) {
        snprintf(f[0].name, sizeof(f[0].name), "image");
        T_OK(stk_writer_open(fx_img, &wo, &w));
        for (uint64_t i = 0; i < 60; i++) {
            stk_value v[2] = {
                {.struct_size = sizeof(stk_value), .data = jpg[i % 2], .size = sz[i % 2]},
                {.struct_size = sizeof(stk_value), .i64 = (int64_t)i}};
            T_OK(stk_writer_add(w, v));
        }
        T_OK(stk_writer_close(w));
    } else {
        fprintf(stderr, "  tests/data/decode/*.jpg not found (run from the repository root): "
                        "image cases skip\n");
    }
    free(jpg[0]);
    free(jpg[1]);
    return 0;
}

FX_FN int fx_teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", fx_dir);
    T_EQ(system(cmd), 0);
    return 0;
}

/* Check a batch's host tensors against the generator (raw dataset); append its indices. */
FX_FN int fx_check_raw_batch(stk_batch *b, int64_t *seen, size_t *n_seen)
{
    stk_tensor data, label;
    stk_tensor_init(&data);
    stk_tensor_init(&label);
    T_OK(stk_batch_tensor(b, 0, &data));
    T_OK(stk_batch_tensor(b, 1, &label));
    const int64_t *idx = stk_batch_indices(b);
    for (uint32_t j = 0; j < stk_batch_n_samples(b); j++) {
        uint8_t want[512];
        size_t len = fx_payload((uint64_t)idx[j], want);
        T_EQ(data.lengths[j], len);
        T_CHECK(memcmp((uint8_t *)data.data + j * data.shape[1], want, len) == 0);
        T_EQ(((int64_t *)label.data)[j], idx[j] * 7);
        seen[(*n_seen)++] = idx[j];
    }
    return 0;
}

/* Every record 0..n-1 exactly once. */
FX_FN int fx_exactly_once(const int64_t *seen, size_t n_seen, size_t n)
{
    T_EQ(n_seen, n);
    uint8_t *count = calloc(n, 1);
    T_CHECK(count);
    for (size_t i = 0; i < n_seen; i++) {
        T_CHECK(seen[i] >= 0 && (size_t)seen[i] < n);
        count[seen[i]]++;
    }
    for (size_t i = 0; i < n; i++)
        T_EQ(count[i], 1);
    free(count);
    return 0;
}

/* Bytes of a device tensor, readable by the host (into scratch, of at least t->size bytes). */
typedef const void *(*fx_fetch)(const stk_tensor *t, void *scratch);

/* The device tensors of a batch equal its host tensors, byte for byte (the copy is complete: the
 * caller synchronised). */
FX_FN int fx_device_equals_host(stk_batch *b, fx_fetch fetch)
{
    for (size_t i = 0; i < stk_batch_n_tensors(b); i++) {
        stk_tensor h, d;
        stk_tensor_init(&h);
        stk_tensor_init(&d);
        T_OK(stk_batch_tensor(b, i, &h));
        T_OK(stk_batch_device_tensor(b, i, &d));
        T_CHECK(strcmp(h.name, d.name) == 0 && h.dtype == d.dtype && h.size == d.size);
        T_CHECK(d.data != h.data);
        void *scratch = malloc(d.size ? d.size : 1);
        T_CHECK(scratch);
        const void *got = fetch(&d, scratch);
        T_CHECKF(got && memcmp(h.data, got, h.size) == 0, "tensor %s differs on the device",
                 h.name);
        free(scratch);
        if (h.lengths)
            T_CHECK(d.lengths == h.lengths);
    }
    return 0;
}

/* A transform: RandomResizedCrop(40, 36) + ColorJitter + RandomHorizontalFlip [+ Normalize with
 * ImageNet's mean and std]. */
static const float FX_MEAN[3] = {0.485f, 0.456f, 0.406f}, FX_STD[3] = {0.229f, 0.224f, 0.225f};

/* The finishing formats both the fake-driver and the real-device tests check. */
static const struct {
    stk_dtype dtype;
    bool nhwc;
} FX_FINISH_CASES[3] = {
    {STK_DTYPE_FLOAT32, false}, {STK_DTYPE_BFLOAT16, true}, {STK_DTYPE_FLOAT16, false}};
FX_FN stk_transform *fx_transform_opts(bool normalize, stk_dtype dtype, bool nhwc, bool finish,
                                       float flip)
{
    stk_op ops[4];
    stk_op_init(&ops[0], STK_OP_RANDOM_RESIZED_CROP);
    ops[0].size[0] = 40;
    ops[0].size[1] = 36;
    stk_op_init(&ops[1], STK_OP_COLOR_JITTER);
    ops[1].brightness = ops[1].contrast = ops[1].saturation = 0.4;
    ops[1].hue = 0.1;
    stk_op_init(&ops[2], STK_OP_RANDOM_HORIZONTAL_FLIP);
    stk_op_init(&ops[3], STK_OP_NORMALIZE);
    memcpy(ops[3].mean, FX_MEAN, sizeof(FX_MEAN));
    memcpy(ops[3].std, FX_STD, sizeof(FX_STD));
    stk_transform_opts to;
    stk_transform_opts_init(&to);
    to.ops = ops;
    to.n_ops = normalize ? 4 : 3;
    to.dtype = dtype;
    to.nhwc = nhwc;
    to.finish_on_device = finish;
    to.finish_flip = flip;
    stk_transform *t = NULL;
    if (stk_transform_create(&to, &t) < 0)
        fprintf(stderr, "  transform: %s\n", stk_last_errmsg());
    return t;
}

FX_FN stk_transform *fx_transform(bool normalize, stk_dtype dtype, bool nhwc)
{
    return fx_transform_opts(normalize, dtype, nhwc, false, 0);
}

/* The same transform (with Normalize) finished by the loader: the workers output uint8
 * [40, 36, 3], the loader gives `dtype` in the layout asked for, each sample mirrored with
 * probability `flip`. */
FX_FN stk_transform *fx_finish_transform(stk_dtype dtype, bool nhwc, float flip)
{
    return fx_transform_opts(true, dtype, nhwc, true, flip);
}

/* A shuffled loader over the image dataset with `t` (finishing when t has it) and the given
 * device. */
FX_FN stk_loader *fx_img_loader(const stk_transform *t, int threads, int32_t device)
{
    const char *paths[] = {fx_img};
    stk_loader_opts o = fx_opts(paths, 8, threads);
    o.transform = t;
    o.flags = STK_LOADER_SHUFFLE;
    o.seed = 3;
    o.device = device;
    stk_loader *L = NULL;
    if (stk_loader_create(&o, &L) < 0)
        fprintf(stderr, "  loader: %s\n", stk_last_errmsg());
    return L;
}

/* One epoch of the finishing loader L (its device tensors when fetch is not NULL, else its host
 * tensors) against the CPU pipeline's output from loader R: equal bytes, same indices. */
FX_FN int fx_finish_matches(stk_loader *L, stk_loader *R, fx_fetch fetch)
{
    stk_batch *b, *r;
    stk_status rc;
    int batches = 0;
    while ((rc = stk_loader_next(L, &b)) == STK_OK) {
        T_OK(stk_loader_next(R, &r));
        T_EQ(stk_batch_n_samples(b), stk_batch_n_samples(r));
        T_CHECK(memcmp(stk_batch_indices(b), stk_batch_indices(r),
                       stk_batch_n_samples(b) * sizeof(int64_t)) == 0);
        stk_tensor got, want;
        stk_tensor_init(&got);
        stk_tensor_init(&want);
        T_OK(stk_batch_tensor(r, 0, &want));
        if (fetch) {
            T_OK(stk_batch_device_sync(b));
            T_OK(stk_batch_device_tensor(b, 0, &got));
        } else {
            T_OK(stk_batch_tensor(b, 0, &got));
        }
        T_CHECK(strcmp(got.name, "image") == 0 && got.dtype == want.dtype);
        T_CHECK(got.ndim == 4 && memcmp(got.shape, want.shape, sizeof(got.shape)) == 0);
        T_EQ(got.size, want.size);
        void *scratch = malloc(got.size);
        T_CHECK(scratch);
        const void *bytes = fetch ? fetch(&got, scratch) : got.data;
        T_CHECKF(bytes && memcmp(bytes, want.data, want.size) == 0, "batch %d differs", batches);
        free(scratch);
        stk_batch_release(b);
        stk_batch_release(r);
        batches++;
    }
    T_EQ(rc, STK_END);
    T_EQ(stk_loader_next(R, &r), STK_END);
    T_CHECK(batches > 0);
    return 0;
}

#endif /* STK_CUDA_FIXTURES_H */
