/*
 * stk_imgfield.c: which field a transform reads when the caller names none
 * (stk_dataset_image_field: the loader, the Python Loader and `stoker bench` all ask it), and
 * uint8 image array fields as RGB pixels (stk_imgfield.h).
 *
 * The pick, in order, each step only when the one before found nothing:
 *  1. a field named `image`;
 *  2. bytes fields named as encoded images: a name whose extension (after the last dot of its
 *     last `/` component, or the whole component) is an image format's (jpg, jpeg, png, webp,
 *     bmp, tif, tiff, ppm, pgm, pnm: WebDataset's fields), or ending in `image/encoded`
 *     (TFRecord's key);
 *  3. the other bytes fields whose value in record 0 starts with an image's magic (JPEG, PNG,
 *     WebP, TIFF; LMDB's `value`, an HDF5 vlen dataset);
 *  4. uint8 image arrays of three channels (H, W, 3) or (3, H, W), then of one channel (H, W),
 *     (H, W, 1) or (1, H, W); both sides at least 8 pixels (smaller 2-D arrays are rarely
 *     images).
 * One candidate in a step is the pick; several are an error naming them; none at all an error
 * listing the fields. Either error says how to name the field.
 */
#include "source/stk_imgfield.h"

#include <ctype.h>
#include <inttypes.h>
#include <string.h>

#define MIN_AUTO_SIDE 8 /* step 4: smaller arrays are not picked without being named */
#define HOW_TO_NAME "name it with transform_field= (Python) or --field (stoker bench)"

stk_status stk__imgarray_of(const stk_field *f, stk__imgarray *out, char *err, size_t err_size)
{
    char shape[96] = "";
    size_t at = 0;
    for (uint32_t d = 0; f->kind == STK_FIELD_ARRAY && d < f->ndim && d < STK_MAX_DIMS; d++)
        at += (size_t)snprintf(shape + at, sizeof(shape) - at, "%s%" PRId64, d ? ", " : "",
                               f->shape[d]);
    const int64_t *s = f->shape;
    int64_t h = 0, w = 0, ch = 0;
    bool chw = false;
    if (f->kind == STK_FIELD_ARRAY && f->dtype == STK_DTYPE_UINT8) {
        if (f->ndim == 2) {
            h = s[0], w = s[1], ch = 1;
        } else if (f->ndim == 3 && (s[2] == 3 || s[2] == 1)) {
            h = s[0], w = s[1], ch = s[2];
        } else if (f->ndim == 3 && (s[0] == 3 || s[0] == 1)) {
            h = s[1], w = s[2], ch = s[0], chw = true;
        }
    }
    if (ch == 0 || h < 1 || w < 1 || h > UINT32_MAX / 4 || w > UINT32_MAX / 4) {
        if (f->kind != STK_FIELD_ARRAY)
            return stk__set_error(
                err, err_size, STK_EINVAL,
                "field '%.*s' is %s: a transform reads an encoded image (a bytes field) or a "
                "uint8 image array (H, W, 3), (H, W, 1), (H, W), (3, H, W) or (1, H, W)",
                STK_MAX_NAME, f->name, f->kind == STK_FIELD_INT64 ? "an int64" : "a float32");
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field '%.*s' is a %s array of shape (%s%s): a transform reads an "
                              "encoded image (a bytes field) or a uint8 image array (H, W, 3), "
                              "(H, W, 1), (H, W), (3, H, W) or (1, H, W)",
                              STK_MAX_NAME, f->name, stk_dtype_name(f->dtype), shape,
                              f->ndim == 1 ? "," : "");
    }
    out->width = (uint32_t)w;
    out->height = (uint32_t)h;
    out->channels = (uint32_t)ch;
    out->chw = chw;
    out->size = (size_t)w * (size_t)h * (size_t)ch;
    return STK_OK;
}

const uint8_t *stk__imgarray_rgb(const stk__imgarray *a, const uint8_t *src, uint8_t *buf)
{
    if (!stk__imgarray_converts(a))
        return src;
    size_t npix = (size_t)a->width * a->height;
    if (a->channels == 1) { /* (H, W), (H, W, 1) and (1, H, W) are the same bytes */
        for (size_t i = 0; i < npix; i++)
            buf[3 * i] = buf[3 * i + 1] = buf[3 * i + 2] = src[i];
    } else { /* (3, H, W): interleave the planes */
        const uint8_t *r = src, *g = src + npix, *b = src + 2 * npix;
        for (size_t i = 0; i < npix; i++) {
            buf[3 * i] = r[i];
            buf[3 * i + 1] = g[i];
            buf[3 * i + 2] = b[i];
        }
    }
    return buf;
}

/* Step 2: whether `name` says the field holds encoded images. */
static bool named_as_image(const char *name)
{
    size_t n = strnlen(name, STK_MAX_NAME);
    static const char enc[] = "image/encoded";
    size_t ne = sizeof(enc) - 1;
    if (n >= ne && strcmp(name + n - ne, enc) == 0 && (n == ne || name[n - ne - 1] == '/'))
        return true;
    const char *last = strrchr(name, '/');
    last = last ? last + 1 : name;
    const char *dot = strrchr(last, '.');
    const char *ext = dot ? dot + 1 : last;
    if (stk__image_ext(ext))
        return true;
    return false;
}

/* Step 3: whether `p` starts with the magic of an image format (stk__image_magic, the decoders'
 * own; only magics too long to occur in text by chance: BMP's "BM" and Netpbm's "P6" are left to
 * the names). */
static bool image_magic(const uint8_t *p, size_t n)
{
    stk__imgfmt fmt = stk__image_magic(p, n);
    return fmt == STK__IMG_JPEG || fmt == STK__IMG_PNG || fmt == STK__IMG_WEBP ||
           fmt == STK__IMG_TIFF;
}

/* Step 4: 3 for a uint8 image array of three channels, 1 for one channel, 0 for neither (or too
 * small to be picked unnamed). */
static uint32_t auto_array_channels(const stk_field *f)
{
    stk__imgarray a;
    char why[8];
    if (stk__imgarray_of(f, &a, why, sizeof(why)) < 0 || a.width < MIN_AUTO_SIDE ||
        a.height < MIN_AUTO_SIDE)
        return 0;
    return a.channels;
}

/* Append "'name'" (", " between) to list. */
static void list_add(char *list, size_t size, const char *name)
{
    size_t at = strlen(list);
    snprintf(list + at, size - at, "%s'%.*s'", at ? ", " : "", STK_MAX_NAME, name);
}

/* Sniff the bytes fields of record 0 that step 2 did not look at; mark the candidates. */
static stk_status sniff_record0(const stk_dataset *ds, bool *cand, size_t *n_cand)
{
    stk_status rc = STK_OK;
    size_t nf = stk_dataset_n_fields(ds), size = stk_dataset_max_record_size(ds);
    bool any = false;
    for (size_t f = 0; f < nf; f++)
        any |= stk_dataset_field(ds, f)->kind == STK_FIELD_BYTES;
    if (!any || stk_dataset_n_records(ds) == 0)
        return STK_OK;
    uint8_t *buf = stk__malloc(size ? size : 1);
    if (!buf)
        return stk__set_last_error(STK_ENOMEM, "out of memory reading record 0 (%zu bytes)", size);
    stk_record rec;
    stk_record_init(&rec);
    rc = stk_dataset_read(ds, 0, buf, size, &rec);
    if (rc < 0) {
        char why[STK_ERRMSG_SIZE];
        snprintf(why, sizeof(why), "%s", stk_last_errmsg());
        stk__set_last_error(rc, "%s (read to find the field the transforms apply to; %s)", why,
                            HOW_TO_NAME);
        goto fail;
    }
    for (size_t f = 0; f < nf && f < STK_MAX_FIELDS; f++)
        if (stk_dataset_field(ds, f)->kind == STK_FIELD_BYTES &&
            image_magic(rec.field[f], rec.field_size[f])) {
            cand[f] = true;
            (*n_cand)++;
        }
fail:
    stk__free(buf);
    return rc;
}

stk_status stk_dataset_image_field(const stk_dataset *ds, size_t *field)
{
    if (!ds || !field)
        return stk__set_last_error(STK_EINVAL, "stk_dataset_image_field: NULL %s",
                                   !ds ? "dataset" : "field");
    size_t nf = STK_MIN(stk_dataset_n_fields(ds), (size_t)STK_MAX_FIELDS);
    int img = stk_dataset_find_field(ds, "image");
    if (img >= 0) {
        *field = (size_t)img;
        return STK_OK;
    }
    static const char *const what[] = {
        "named as encoded images", "holding an encoded image in record 0",
        "uint8 image arrays of three channels", "uint8 image arrays of one channel"};
    for (int step = 0; step < 4; step++) {
        bool cand[STK_MAX_FIELDS] = {false};
        size_t n = 0;
        for (size_t f = 0; f < nf; f++) {
            const stk_field *fd = stk_dataset_field(ds, f);
            bool c = step == 0   ? fd->kind == STK_FIELD_BYTES && named_as_image(fd->name)
                     : step == 2 ? auto_array_channels(fd) == 3
                     : step == 3 ? auto_array_channels(fd) == 1
                                 : false;
            cand[f] = c;
            n += c;
        }
        if (step == 1) {
            stk_status rc = sniff_record0(ds, cand, &n);
            if (rc < 0)
                return rc;
        }
        if (n == 0)
            continue;
        char list[STK_MAX_FIELDS * (STK_MAX_NAME + 4) + 1] = "";
        for (size_t f = 0; f < nf; f++)
            if (cand[f]) {
                *field = f;
                list_add(list, sizeof(list), stk_dataset_field(ds, f)->name);
            }
        if (n == 1)
            return STK_OK;
        return stk__set_last_error(STK_EINVAL,
                                   "cannot tell which field the transforms apply to: %zu fields "
                                   "are %s (%s); %s",
                                   n, what[step], list, HOW_TO_NAME);
    }
    char list[STK_MAX_FIELDS * (STK_MAX_NAME + 16) + 1] = "";
    for (size_t f = 0; f < nf; f++) {
        const stk_field *fd = stk_dataset_field(ds, f);
        size_t at = strlen(list);
        snprintf(list + at, sizeof(list) - at, "%s'%.*s' (%s%s%s)", at ? ", " : "", STK_MAX_NAME,
                 fd->name, fd->kind == STK_FIELD_ARRAY ? stk_dtype_name(fd->dtype) : "",
                 fd->kind == STK_FIELD_ARRAY ? " " : "", stk_field_kind_name(fd->kind));
    }
    return stk__set_last_error(STK_EINVAL,
                               "no field for the transforms to apply to: none is named 'image', "
                               "named as encoded images (jpg, png, ..., image/encoded), holds an "
                               "encoded image in record 0 or is a uint8 image array (H, W, 3), "
                               "(3, H, W) or (H, W); the fields: %s; %s",
                               list, HOW_TO_NAME);
}
