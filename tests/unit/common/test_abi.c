/*
 * test_abi.c: the one ABI rule of include/stoker.h ("Structs") and the policies the library owns
 * for its front ends (issue 25): an init fills only the caller's struct_size (an older, shorter
 * caller's struct is not overrun); an input array is strided by its first element's struct_size
 * (a newer caller's larger elements, an older caller's smaller ones, an element not initialised
 * like the first refused by name); an output struct is written only as far as its struct_size
 * reaches, and one whose size is not set is refused; error detail goes to stk_last_errmsg(); the
 * CPU count, the image extensions, the recipes and the JSON reader the CLI and Python ask for.
 */
#include "stk_internal.h"
#include "t.h"

#include "data/fixtures.h"

#include <sched.h>
#include <string.h>

#define GUARD 0xA5

/* Whether the n bytes at p are all GUARD. */
static bool untouched(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != GUARD)
            return false;
    return true;
}

static int test_init_fills_only_the_callers_size(void)
{
    /* An older caller's stk_loader_opts ended before `seed`: the init must not write past it. */
    size_t old = offsetof(stk_loader_opts, seed);
    uint8_t buf[sizeof(stk_loader_opts) + 64];
    memset(buf, GUARD, sizeof(buf));
    stk_loader_opts_init_sized((stk_loader_opts *)(void *)buf, old);
    stk_loader_opts o;
    memcpy(&o, buf, old);
    T_EQ(o.struct_size, old);
    T_EQ(o.batch_size, 256); /* the defaults that fit */
    T_EQ(o.n_threads, 0);
    T_CHECK(untouched(buf + old, sizeof(buf) - old));
    /* the inline init passes the caller's sizeof */
    stk_loader_opts full;
    memset(&full, GUARD, sizeof(full));
    stk_loader_opts_init(&full);
    T_EQ(full.struct_size, sizeof(full));
    T_EQ(full.device, -1);
    T_EQ(full.rank, -1);
    /* the same for an op: a shorter op gets the defaults that fit, nothing after */
    size_t op_old = offsetof(stk_op, p);
    uint8_t ob[sizeof(stk_op) + 16];
    memset(ob, GUARD, sizeof(ob));
    stk_op_init_sized((stk_op *)(void *)ob, STK_OP_RANDOM_RESIZED_CROP, op_old);
    stk_op op;
    memcpy(&op, ob, op_old);
    T_EQ(op.struct_size, op_old);
    T_EQ(op.size[0], 224);
    T_CHECK(op.scale[0] == 0.08);
    T_CHECK(untouched(ob + op_old, sizeof(ob) - op_old));
    /* zero-default structs: the inline inits */
    stk_tensor t;
    memset(&t, GUARD, sizeof(t));
    stk_tensor_init(&t);
    T_EQ(t.struct_size, sizeof(t));
    T_CHECK(t.data == NULL && t.name == NULL && t.ndim == 0);
    stk_batch_op bo;
    stk_batch_op_init(&bo, STK_BATCH_CUTMIX);
    T_CHECK(bo.struct_size == sizeof(bo) && bo.kind == STK_BATCH_CUTMIX && bo.alpha == 1.0);
    return 0;
}

/* An op as a newer caller would have it: the library's op and fields the library does not know. */
typedef struct newer_op {
    stk_op op;
    double future[4];
} newer_op;

static int test_op_arrays_are_strided_by_their_first_element(void)
{
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    stk_transform *t = NULL;
    /* a newer caller: larger elements, each with its own struct_size */
    newer_op big[2];
    memset(big, 0x7f, sizeof(big));
    stk_op_init(&big[0].op, STK_OP_RESIZE);
    big[0].op.size[0] = 64;
    big[0].op.size[1] = 48;
    stk_op_init(&big[1].op, STK_OP_RANDOM_HORIZONTAL_FLIP);
    big[0].op.struct_size = big[1].op.struct_size = sizeof(newer_op);
    o.ops = &big[0].op;
    o.n_ops = 2;
    T_OK(stk_transform_create(&o, &t));
    stk_dtype dt;
    uint32_t nd;
    int64_t shape[STK_MAX_DIMS];
    stk_transform_output(t, &dt, &nd, shape);
    T_CHECK(nd == 3 && shape[1] == 64 && shape[2] == 48); /* the second op read at the stride */
    stk_transform_destroy(t);
    /* an older caller: elements cut before `p`; the flip's p takes its default */
    size_t old = offsetof(stk_op, p);
    uint8_t small[2 * sizeof(stk_op)];
    stk_op a, b;
    stk_op_init(&a, STK_OP_CENTER_CROP);
    a.size[0] = a.size[1] = 32;
    stk_op_init(&b, STK_OP_RANDOM_VERTICAL_FLIP);
    a.struct_size = b.struct_size = old;
    memcpy(small, &a, old);
    memcpy(small + old, &b, old);
    o.ops = (const stk_op *)(const void *)small;
    T_OK(stk_transform_create(&o, &t));
    stk_transform_output(t, &dt, &nd, shape);
    T_CHECK(shape[1] == 32 && shape[2] == 32);
    stk_transform_destroy(t);
    /* an element not initialised like the first: refused, named */
    stk_op ops[2];
    stk_op_init(&ops[0], STK_OP_CENTER_CROP);
    memset(&ops[1], 0, sizeof(ops[1]));
    ops[1].kind = STK_OP_RANDOM_HORIZONTAL_FLIP;
    o.ops = ops;
    T_EQ(stk_transform_create(&o, &t), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "ops[1]") && strstr(stk_last_errmsg(), "stk_op_init"), "%s",
             stk_last_errmsg());
    T_CHECK(t == NULL);
    return 0;
}

static int test_fields_and_values_strides(void)
{
    const char *dir = fx_tmpdir("abi");
    T_CHECK(dir);
    char path[128];
    snprintf(path, sizeof(path), "%s/a.stk", dir);
    stk_writer *w = NULL;
    stk_writer_opts wo;
    stk_writer_opts_init(&wo);
    stk_field f[2];
    stk_field_init(&f[0]);
    snprintf(f[0].name, sizeof(f[0].name), "data");
    memset(&f[1], 0, sizeof(f[1])); /* not initialised: refused */
    snprintf(f[1].name, sizeof(f[1].name), "label");
    f[1].kind = STK_FIELD_INT64;
    wo.fields = f;
    wo.n_fields = 2;
    T_EQ(stk_writer_open(path, &wo, &w), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "field 1") && strstr(stk_last_errmsg(), "stk_field_init"),
             "%s", stk_last_errmsg());
    stk_field_init(&f[1]);
    snprintf(f[1].name, sizeof(f[1].name), "label");
    f[1].kind = STK_FIELD_INT64;
    T_OK(stk_writer_open(path, &wo, &w));
    stk_value v[2];
    stk_value_init(&v[0]);
    v[0].data = "abc";
    v[0].size = 3;
    memset(&v[1], 0, sizeof(v[1])); /* not initialised */
    v[1].i64 = 7;
    T_EQ(stk_writer_add(w, v), STK_EINVAL);
    T_CHECKF(strstr(stk_writer_errmsg(w), "values[1]"), "%s", stk_writer_errmsg(w));
    stk_value_init(&v[1]);
    v[1].i64 = 7;
    T_OK(stk_writer_add(w, v)); /* the writer stays usable after a refused record */
    T_OK(stk_writer_close(w));
    /* a record read back: its output struct must be sized; detail in stk_last_errmsg() */
    stk_dataset *ds;
    const char *paths[] = {path};
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    T_EQ(stk_dataset_field(ds, 0)->struct_size, sizeof(stk_field)); /* handed out: ours */
    uint8_t buf[64];
    stk_record r;
    memset(&r, 0, sizeof(r));
    T_EQ(stk_dataset_read(ds, 0, buf, sizeof(buf), &r), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "stk_record_init"), "%s", stk_last_errmsg());
    /* an older, shorter record: only its fields are written */
    size_t old = offsetof(stk_record, field);
    uint8_t rb[sizeof(stk_record)];
    memset(rb, GUARD, sizeof(rb));
    memcpy(rb, &old, sizeof(old));
    T_OK(stk_dataset_read(ds, 0, buf, sizeof(buf), (stk_record *)(void *)rb));
    memcpy(&r, rb, old);
    T_CHECK(r.struct_size == old && r.index == 0 && r.size == 3 + 8);
    T_CHECK(untouched(rb + old, sizeof(rb) - old));
    stk_record_init(&r);
    T_OK(stk_dataset_read(ds, 0, buf, sizeof(buf), &r));
    T_EQ(stk_record_i64(&r, 1), 7);
    T_EQ(stk_dataset_read(ds, 9, buf, sizeof(buf), &r), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "record 9"), "%s", stk_last_errmsg());
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_output_struct_prefix(void)
{
    stk_diag_input in;
    stk_diag_input_init(&in);
    in.wait_s = 1.0;
    in.step_s = 3.0;
    in.steps = 10;
    in.samples_per_step = 32;
    size_t old = offsetof(stk_diag_result, wait_share) + sizeof(double);
    uint8_t buf[sizeof(stk_diag_result)];
    memset(buf, GUARD, sizeof(buf));
    memcpy(buf, &old, sizeof(old));
    T_OK(stk_diagnose(&in, (stk_diag_result *)(void *)buf));
    stk_diag_result r;
    memcpy(&r, buf, old);
    T_CHECK(r.struct_size == old && r.data_bound && r.wait_share == 0.25);
    T_CHECK(untouched(buf + old, sizeof(buf) - old));
    return 0;
}

static int test_policies_the_front_ends_ask_for(void)
{
    /* the CPU count: the affinity mask's, at least 1 */
    cpu_set_t set;
    T_CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
    T_EQ(stk_n_cpus(), (uint32_t)CPU_COUNT(&set));
    /* ImageFolder's extensions: torchvision's IMG_EXTENSIONS */
    static const char *const tv[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                     ".pgm", ".tif",  ".tiff", ".webp"};
    T_EQ(stk_n_image_extensions(), sizeof(tv) / sizeof(tv[0]));
    for (size_t i = 0; i < stk_n_image_extensions(); i++)
        T_CHECK(strcmp(stk_image_extension(i), tv[i]) == 0);
    T_CHECK(stk_image_extension(stk_n_image_extensions()) == NULL);
    T_CHECK(stk__image_name("a/b.JPEG") && stk__image_name(".png") && !stk__image_name("x.pnm") &&
            !stk__image_name("jpg"));
    T_CHECK(stk__image_ext("PNM") && stk__image_ext("webp") && !stk__image_ext("txt"));
    /* audio extensions: an audio folder tree's (stk__audio_name), then libsndfile's other names;
     * every one an audio field name (stk__audio_ext), as the CLI asks */
    T_EQ(stk_n_audio_extensions(), 10);
    for (size_t i = 0; i < stk_n_audio_extensions(); i++)
        T_CHECK(stk_audio_extension(i)[0] == '.' && stk__audio_ext(stk_audio_extension(i) + 1));
    T_CHECK(strcmp(stk_audio_extension(0), ".wav") == 0);
    T_CHECK(stk_audio_extension(stk_n_audio_extensions()) == NULL);
    T_CHECK(stk__audio_name("a/b.FLAC") && !stk__audio_name("b.au") && !stk__audio_ext("txt"));
    return 0;
}

static int test_recipes(void)
{
    T_EQ(stk_n_recipes(), 4);
    T_CHECK(strcmp(stk_recipe_name(0), "imagenet-train") == 0);
    T_CHECK(strcmp(stk_recipe_name(1), "imagenet-val") == 0);
    T_CHECK(strcmp(stk_recipe_name(2), "kws-train") == 0);
    T_CHECK(strcmp(stk_recipe_name(3), "kws-val") == 0);
    T_CHECK(stk_recipe_name(4) == NULL);
    T_EQ(stk_recipe_n_ops("kws-train"), 5);
    T_EQ(stk_recipe_n_ops("imagenet-val"), 3);
    T_EQ(stk_recipe_n_ops("resnet"), 0);
    stk_op op;
    stk_op_init(&op, STK_OP_NORMALIZE);
    T_OK(stk_recipe_op("imagenet-val", 0, &op));
    T_CHECK(op.kind == STK_OP_RESIZE && op.size[0] == 256 && op.size[1] == 0);
    T_OK(stk_recipe_op("imagenet-train", 2, &op));
    static const float mean[3] = STK_IMAGENET_MEAN, std[3] = STK_IMAGENET_STD;
    T_CHECK(op.kind == STK_OP_NORMALIZE && memcmp(op.mean, mean, sizeof(mean)) == 0 &&
            memcmp(op.std, std, sizeof(std)) == 0);
    T_EQ(stk_recipe_op("imagenet-train", 3, &op), STK_EINVAL);
    T_OK(stk_recipe_op("kws-train", 2, &op));
    T_CHECK(op.kind == STK_OP_MEL_SPECTROGRAM && op.n_mels == 64 && op.sample_rate == 16000);
    T_OK(stk_recipe_op("kws-train", 4, &op));
    T_CHECK(op.kind == STK_OP_TIME_MASKING && op.mask_param == 20);
    T_EQ(stk_recipe_op("resnet", 0, &op), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "resnet"), "%s", stk_last_errmsg());
    /* the recipe's ops compile to what stk_transform_recipe compiles */
    stk_op ops[3];
    for (size_t i = 0; i < 3; i++) {
        stk_op_init(&ops[i], STK_OP_NORMALIZE);
        T_OK(stk_recipe_op("imagenet-train", i, &ops[i]));
    }
    stk_transform_opts o;
    stk_transform_opts_init(&o);
    o.ops = ops;
    o.n_ops = 3;
    stk_transform *a = NULL, *b = NULL;
    T_OK(stk_transform_create(&o, &a));
    T_OK(stk_transform_recipe("imagenet-train", false, &b));
    stk_dtype da, db;
    uint32_t na, nb;
    int64_t sa[STK_MAX_DIMS], sb[STK_MAX_DIMS];
    stk_transform_output(a, &da, &na, sa);
    stk_transform_output(b, &db, &nb, sb);
    T_CHECK(da == db && na == nb && memcmp(sa, sb, na * sizeof(int64_t)) == 0);
    stk_transform_destroy(a);
    stk_transform_destroy(b);
    return 0;
}

static int test_json_reader(void)
{
    const char *j = " {\"a\": [1, {\"b\": \"x\\\"y\"}], \"n\": -1.5e3, \"t\": true} ";
    T_CHECK(stk_json_valid(j));
    const char *v;
    size_t n;
    T_CHECK(stk_json_member(j, "n", &v, &n) && n == 6 && strncmp(v, "-1.5e3", 6) == 0);
    T_CHECK(stk_json_member(j, "a", &v, &n) && v[0] == '[' && v[n - 1] == ']');
    T_CHECK(!stk_json_member(j, "b", &v, &n)); /* top level only */
    const char *end = stk_json_skip("  [1, 2] tail");
    T_CHECK(end && strcmp(end, " tail") == 0);
    static const char *const bad[] = {"",   "{",       "[1,]", "{\"a\" 1}",
                                      "01", "\"\\x\"", "tru",  "{\"a\": 1} x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        T_CHECKF(!stk_json_valid(bad[i]), "'%s' taken as valid", bad[i]);
    T_CHECK(stk_json_skip(NULL) == NULL && !stk_json_valid(NULL));
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 99);
    deep[199] = '\0';
    T_CHECK(!stk_json_valid(deep)); /* unbalanced */
    return 0;
}

T_MAIN(T_CASE(test_init_fills_only_the_callers_size),
       T_CASE(test_op_arrays_are_strided_by_their_first_element),
       T_CASE(test_fields_and_values_strides), T_CASE(test_output_struct_prefix),
       T_CASE(test_policies_the_front_ends_ask_for), T_CASE(test_recipes), T_CASE(test_json_reader))
