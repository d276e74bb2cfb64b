/*
 * stk_src_tfrecord.c: TFRecord files of tf.train.Example as a record source (format name
 * "tfrecord"). A dataset is a list of files (globs and brace ranges expanded before) or a
 * directory of `.tfrecord` / `.tfrecords` files; record i is the i-th frame over the files in
 * order.
 *
 * Frame: u64 length (LE) | u32 masked CRC32C of those 8 bytes | data | u32 masked CRC32C of the
 * data. Checksums follow .stk's policy (docs/design.md, DESIGN.md "verify lazily, per record, on
 * first read"): every read checks the length CRC and that the length is the indexed one (12
 * bytes, nearly free); the data CRC (CRC32C with SSE4.2 where the CPU has it) is checked on a
 * record's first read and remembered in a bitmap (one bit per record, atomics), so later epochs
 * skip it; STK__READ_VERIFY_ALL checks it again, STK__READ_NO_VERIFY and STK_DATASET_NO_VERIFY
 * never do.
 *
 * Index (random access): one offset per record (8 bytes), from a DALI / `tfrecord`-package text
 * index `<file>.idx` ("offset length" per line, length including the 16 framing bytes) when one
 * exists and agrees with the file (contiguous frames covering it exactly), else from one scan of
 * the frame headers, checking each length CRC. A scanned index is written as `<file>.idx` (the
 * same text format, through a temporary file and a rename) when the file is on local disk and
 * its directory writable; otherwise it stays in memory only. A stale index cannot mislead a read:
 * each read checks that the frame at the offset has the indexed length and a valid length CRC.
 * The `.idx` reader and writer are in stk_tfrecord_index.c.
 *
 * CRC32C is in stk_crc32c.c, the Example reader in stk_tfexample.c (both declared in
 * stk_tfrecord.h, for the tests and fuzz targets too).
 *
 * Schema: the features of the first record: one field per key, named verbatim, sorted by name;
 * bytes_list of one value -> bytes; int64_list / float_list of one value -> int64 / float32, of k
 * values -> an int64 / float32 array [k]. A later record whose features differ (a missing or
 * extra key, another kind or length) is STK_EFORMAT at read, naming the file, record and offset.
 */
#include "common/stk_endian.h"
#include "source/stk_idxfile.h"
#include "source/stk_source.h"
#include "source/tfrecord/stk_tfrecord.h"

#include <stdatomic.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define TF_HEADER 12 /* u64 length + u32 masked crc */
#define TF_SCAN_WINDOW (256u << 10)
/* a remote file's scan window: one ranged GET (a request per header would cost a round trip) */
#define TF_SCAN_WINDOW_REMOTE (4u << 20)

/* ---- the source ---- */

typedef struct tffile {
    stk__file *f;
    uint64_t *off; /* count + 1 frame offsets; off[count] is the file size */
} tffile;

typedef struct tfds {
    tffile *files;
    _Atomic uint64_t *verified; /* one bit per record whose data CRC matched; NULL: never verify */
    /* The bytes field read in place (the first one; UINT32_MAX: none) and, per record, where its
     * value lies in the frame's data once a read has parsed it: offset << 32 | length (0:
     * unknown). A read that needs no CRC then puts the value straight into the batch row, the
     * rest of the frame into the cursor's buffer, and skips the copy. */
    uint32_t inplace;
    _Atomic uint64_t *vloc;
    int kind[STK_MAX_FIELDS];
    uint64_t values[STK_MAX_FIELDS]; /* values per record of each field */
    uint64_t max_len;                /* largest frame data */
} tfds;

struct stk__cursor {
    uint8_t *buf;
    size_t cap;
};

static bool has_ext(const char *path)
{
    size_t l = strlen(path);
    return (l > 9 && strcmp(path + l - 9, ".tfrecord") == 0) ||
           (l > 10 && strcmp(path + l - 10, ".tfrecords") == 0);
}

static bool frame_header_ok(const uint8_t *h)
{
    return stk__ld32(h + 8) == stk__crc32c_mask(stk__crc32c(0, h, 8));
}

static const char *const tf_suffixes[] = {".tfrecord", ".tfrecords", NULL};

static int tf_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (!st->is_dir) {
        if (n >= TF_HEADER && frame_header_ok(head) && stk__ld64(head) <= st->size)
            return 2;
        return has_ext(path);
    }
    return stk__paths_dir_has(path, tf_suffixes);
}

/* Build tf->off by reading every frame header; *max_len gets the largest frame. */
static stk_status scan_index(tffile *tf, uint64_t *count, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    const char *path = tf->f->path;
    uint64_t size = tf->f->size, at = 0, n = 0, cap = 0;
    uint64_t *off = NULL;
    /* A remote file is read through in large windows; a local one reads only the headers of
     * large frames (a pread each, cheap) */
    bool remote = tf->f->vfs != &stk__vfs_posix;
    size_t window = remote ? TF_SCAN_WINDOW_REMOTE : TF_SCAN_WINDOW;
    uint8_t *win = stk__malloc(window);
    uint64_t win_at = 0, win_len = 0, data_sum = 0;
    if (!win)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    while (at < size) {
        if (n + 1 >= cap) {
            uint64_t nc = cap ? cap * 2 : 1024;
            uint64_t *no = stk__realloc(off, (size_t)nc * sizeof(*off));
            if (!no)
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory for its index (%" PRIu64 " records)",
                           path, n);
            off = no;
            cap = nc;
        }
        if (size - at < TF_HEADER)
            STK_FAIL_E(STK_EFORMAT,
                       "%s record %" PRIu64 " at byte %" PRIu64 ": truncated frame (%" PRIu64
                       " bytes left, a frame header is 12)",
                       path, n, at, size - at);
        if (at < win_at || at + TF_HEADER > win_at + win_len) {
            /* small frames: read a window of headers and data; large ones: just the header */
            bool small = remote || (n > 0 && data_sum / n < 4096);
            win_at = at;
            win_len = STK_MIN(size - at, small ? window : TF_HEADER);
            STK_TRY(stk__vfs_read(tf->f, at, win, (size_t)win_len, err, err_size));
        }
        const uint8_t *h = win + (at - win_at);
        if (!frame_header_ok(h))
            STK_FAIL_E(STK_EFORMAT,
                       "%s record %" PRIu64 " at byte %" PRIu64
                       ": length CRC mismatch (not a TFRecord frame, or corrupt)",
                       path, n, at);
        uint64_t len = stk__ld64(h);
        if (len > size - at - TF_HEADER || size - at - TF_HEADER - len < 4)
            STK_FAIL_E(STK_EFORMAT,
                       "%s record %" PRIu64 " at byte %" PRIu64 ": truncated frame (%" PRIu64
                       " data bytes + 4 CRC bytes announced, %" PRIu64 " left in the file)",
                       path, n, at, len, size - at - TF_HEADER);
        off[n++] = at;
        data_sum += len;
        at += len + STK__TF_FRAMING;
    }
    if (!off && !(off = stk__malloc(sizeof(*off))))
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    off[n] = size;
    tf->off = off;
    off = NULL;
    *count = n;
fail:
    stk__free(off);
    stk__free(win);
    return rc;
}

static void tf_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const tfds *t = ds->impl;
    uint64_t local;
    size_t s = stk__dataset_file_of(ds, i, &local);
    snprintf(buf, size, "%s record %" PRIu64 " (global %" PRIu64 ") at byte %" PRIu64,
             ds->files[s].path, local, i, t->files[s].off[local]);
}

/* Whether read i must check the data CRC (see the top of the file). */
static bool crc_due(const tfds *t, uint64_t i, unsigned flags)
{
    if (flags & STK__READ_NO_VERIFY)
        return false;
    if (flags & STK__READ_VERIFY_ALL)
        return true;
    return t->verified &&
           !(atomic_load_explicit(&t->verified[i / 64], memory_order_relaxed) & (1ULL << (i % 64)));
}

/* The cursor's buffer for a frame of `frame` bytes at file offset `off`, placed at the same
 * offset modulo 64 as in the file: the kernel's copy out of the page cache is faster when source
 * and destination are aligned alike. NULL when out of memory. */
static uint8_t *frame_buf(stk__cursor *cur, uint64_t frame, uint64_t off)
{
    if (frame + 128 > cur->cap) {
        uint8_t *nb = stk__realloc(cur->buf, (size_t)frame + 128);
        if (!nb)
            return NULL;
        cur->buf = nb;
        cur->cap = (size_t)frame + 128;
    }
    return (uint8_t *)(((uintptr_t)cur->buf + 63) & ~(uintptr_t)63) + (size_t)(off & 63);
}

/* The frame header at b must still describe the indexed frame (length CRC, length). */
static stk_status check_frame_header(const stk_dataset *ds, uint64_t i, const uint8_t *b,
                                     uint64_t len, char *err, size_t err_size)
{
    if (frame_header_ok(b) && stk__ld64(b) == len)
        return STK_OK;
    char where[STK_ERRMSG_SIZE];
    tf_describe(ds, i, where, sizeof(where));
    return stk__set_error(
        err, err_size, STK_EFORMAT, "%s: %s (the file changed after its index was made?)", where,
        frame_header_ok(b) ? "frame length differs from the index" : "length CRC mismatch");
}

/* Read frame i into cur (grown as needed), the header checked against the index, the data CRC
 * when due. With `value` (a known place, vloc: offset << 32 | length), the bytes of that value go
 * to `value` instead and the buffer keeps a hole there. *data, *len: the payload. */
static stk_status read_frame(const stk_dataset *ds, stk__cursor *cur, uint64_t i, unsigned flags,
                             void *value, uint64_t vloc, const uint8_t **data, uint64_t *len,
                             char *err, size_t err_size)
{
    const tfds *t = ds->impl;
    uint64_t local;
    size_t s = stk__dataset_file_of(ds, i, &local);
    const tffile *tf = &t->files[s];
    uint64_t frame = tf->off[local + 1] - tf->off[local];
    char where[STK_ERRMSG_SIZE];
    uint8_t *b = frame_buf(cur, frame, tf->off[local]);
    if (!b) {
        tf_describe(ds, i, where, sizeof(where));
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", where);
    }
    size_t voff = (size_t)(vloc >> 32), vlen = (size_t)(vloc & UINT32_MAX);
    stk_status rc;
    if (value && TF_HEADER + voff + vlen <= frame - 4) {
        stk__iov iov[3] = {{b, TF_HEADER + voff},
                           {value, vlen},
                           {b + TF_HEADER + voff + vlen, (size_t)frame - TF_HEADER - voff - vlen}};
        rc = tf->f->vfs->read(tf->f, tf->off[local], iov, 3, err, err_size);
    } else {
        rc = stk__vfs_read(tf->f, tf->off[local], b, (size_t)frame, err, err_size);
    }
    if (rc < 0) {
        tf_describe(ds, i, where, sizeof(where));
        return stk__source_read_error(rc, where, tf->f->path, err, err_size);
    }
    *len = frame - STK__TF_FRAMING;
    *data = b + TF_HEADER;
    STK_TRY(check_frame_header(ds, i, b, *len, err, err_size));
    if (!value && crc_due(t, i, flags)) {
        if (stk__ld32(b + TF_HEADER + *len) !=
            stk__crc32c_mask(stk__crc32c(0, b + TF_HEADER, (size_t)*len))) {
            tf_describe(ds, i, where, sizeof(where));
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: data CRC mismatch (corrupt record)", where);
        }
        if (t->verified)
            atomic_fetch_or_explicit(&t->verified[i / 64], 1ULL << (i % 64), memory_order_relaxed);
    }
fail:
    return rc;
}

/* ---- schema from the first record ---- */

typedef struct schema_ctx {
    stk_dataset *ds;
    tfds *t;
    const char *where;
    char *err;
    size_t err_size;
    stk_status rc;
} schema_ctx;

static int schema_feature(void *vctx, const stk__tf_feature *f)
{
    schema_ctx *c = vctx;
    stk_dataset *ds = c->ds;
    uint32_t j = 0;
    while (j < ds->n_fields && !(strlen(ds->fields[j].name) == f->key_len &&
                                 memcmp(ds->fields[j].name, f->key, f->key_len) == 0))
        j++;
    if (j == STK_MAX_FIELDS) {
        c->rc = stk__set_error(c->err, c->err_size, STK_ENOTSUP,
                               "%s: more than %d features (stoker reads at most %d fields)",
                               c->where, STK_MAX_FIELDS, STK_MAX_FIELDS);
        return 1;
    }
    int kl = (int)STK_MIN(f->key_len, 64);
    if (f->kind == STK__TF_NONE || f->count == 0 || (f->kind == STK__TF_BYTES && f->count != 1)) {
        c->rc = stk__set_error(c->err, c->err_size, STK_ENOTSUP,
                               "%s: feature '%.*s' has %s%" PRIu64
                               " values: stoker reads bytes_list of one value and int64/float "
                               "lists of a fixed length >= 1",
                               c->where, kl, (const char *)f->key,
                               f->kind == STK__TF_BYTES  ? "a bytes_list of "
                               : f->kind == STK__TF_NONE ? "no list, "
                                                         : "a list of ",
                               f->count);
        return 1;
    }
    stk_field fd;
    memset(&fd, 0, sizeof(fd));
    if (f->key_len >= STK_MAX_NAME || memchr(f->key, 0, f->key_len)) {
        c->rc = stk__set_error(c->err, c->err_size, STK_ENOTSUP,
                               "%s: feature name '%.*s' is longer than %d bytes or holds a NUL",
                               c->where, kl, (const char *)f->key, STK_MAX_NAME - 1);
        return 1;
    }
    memcpy(fd.name, f->key, f->key_len);
    if (f->kind == STK__TF_BYTES) {
        fd.kind = STK_FIELD_BYTES;
    } else if (f->count == 1) {
        fd.kind = f->kind == STK__TF_INT64 ? STK_FIELD_INT64 : STK_FIELD_FLOAT32;
    } else {
        fd.kind = STK_FIELD_ARRAY;
        fd.dtype = f->kind == STK__TF_INT64 ? STK_DTYPE_INT64 : STK_DTYPE_FLOAT32;
        fd.ndim = 1;
        fd.shape[0] = (int64_t)STK_MIN(f->count, (uint64_t)INT64_MAX);
    }
    char bad[160];
    if (!stk__field_valid(&fd, bad, sizeof(bad))) {
        c->rc = stk__set_error(c->err, c->err_size, STK_ENOTSUP, "%s: %s", c->where, bad);
        return 1;
    }
    ds->fields[j] = stk__field_canonical(&fd);
    c->t->kind[j] = f->kind;
    c->t->values[j] = f->count;
    if (j == ds->n_fields)
        ds->n_fields++;
    return 0;
}

static stk_status tf_schema(stk_dataset *ds, char *err, size_t err_size)
{
    tfds *t = ds->impl;
    stk__cursor cur = {0};
    const uint8_t *data;
    uint64_t len;
    char where[STK_ERRMSG_SIZE], why[256] = "";
    stk_status rc = read_frame(ds, &cur, 0, 0, NULL, 0, &data, &len, err, err_size);
    if (rc < 0)
        goto fail;
    tf_describe(ds, 0, where, sizeof(where));
    schema_ctx c = {ds, t, where, err, err_size, STK_OK};
    int r = stk__tf_example_parse(data, (size_t)len, schema_feature, &c, why, sizeof(why));
    if (r > 0)
        STK_TRY(c.rc);
    if (r < 0)
        STK_FAIL_E(STK_EFORMAT, "%s: not a tf.train.Example (%s)", where, why);
    if (ds->n_fields == 0)
        STK_FAIL_E(STK_EFORMAT, "%s: the first record has no features", where);
    /* fields sorted by name: the same schema whatever order the writer put the map in */
    for (uint32_t a = 1; a < ds->n_fields; a++)
        for (uint32_t b = a; b > 0 && strcmp(ds->fields[b - 1].name, ds->fields[b].name) > 0; b--) {
            stk_field tmp = ds->fields[b];
            ds->fields[b] = ds->fields[b - 1];
            ds->fields[b - 1] = tmp;
            int k = t->kind[b];
            t->kind[b] = t->kind[b - 1];
            t->kind[b - 1] = k;
            uint64_t v = t->values[b];
            t->values[b] = t->values[b - 1];
            t->values[b - 1] = v;
        }
fail:
    stk__free(cur.buf);
    return rc;
}

static void tf_close(stk_dataset *ds)
{
    tfds *t = ds->impl;
    for (size_t i = 0; t && t->files && i < ds->n_files; i++) {
        stk__vfs_close(t->files[i].f);
        stk__free(t->files[i].off);
    }
    if (t) {
        stk__free(t->files);
        stk__free((void *)t->verified);
        stk__free((void *)t->vloc);
    }
    stk__free(t);
    ds->impl = NULL;
}

static stk_status tf_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                          size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist list = {0};
    STK_TRY(stk__paths_files(paths, n_paths, tf_suffixes, ".tfrecord or .tfrecords files", &list,
                             err, err_size));
    tfds *t = stk__calloc(1, sizeof(*t));
    if (!t)
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    ds->impl = t;
    STK_TRY(stk__dataset_files_alloc(ds, list.n, err, err_size));
    if (!(t->files = stk__calloc(list.n, sizeof(*t->files))))
        STK_FAIL_E(STK_ENOMEM, "out of memory for %zu files", list.n);
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    for (size_t i = 0; i < list.n; i++) {
        tffile *tf = &t->files[i];
        stk__srcfile *sf = &ds->files[i];
        uint64_t count = 0;
        if (!(sf->path = stk__strdup(list.v[i]))) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            break;
        }
        if ((rc = stk__vfs_open(list.v[i], &tf->f, err, err_size)) < 0)
            break;
        if ((rc = stk__tf_index_load(tf->f, &tf->off, &count, err, err_size)) < 0)
            break;
        /* a remote file's offsets from an earlier scan, kept in the block cache */
        bool cached =
            !tf->off && stk__idx_offsets_load(tf->f, "tfidx", STK__TF_FRAMING, &tf->off, &count);
        /* inspect's metadata: where the frame offsets came from */
        if (!(sf->metadata = stk__strdup(!tf->off ? "{\"index\": \"scanned\"}"
                                         : cached ? "{\"index\": \"cached\"}"
                                                  : "{\"index\": \"idx\"}"))) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            break;
        }
        if (!tf->off) {
            if ((rc = scan_index(tf, &count, err, err_size)) < 0)
                break;
            if (count > 0)
                stk__tf_index_save(tf->f, tf->off, count);
            stk__idx_offsets_store(tf->f, "tfidx", tf->off, count);
        }
        for (uint64_t k = 0; k < count; k++)
            t->max_len = STK_MAX(t->max_len, tf->off[k + 1] - tf->off[k] - STK__TF_FRAMING);
        sf->first = ds->count;
        sf->count = count;
        sf->size = tf->f->size;
        sf->data_size = tf->f->size - count * STK__TF_FRAMING;
        ds->count += count;
        stk__fp_add_u64(h, sf->size);
        stk__fp_add_u64(h, count);
    }
    if (rc == STK_OK && !(ds->flags & STK_DATASET_NO_VERIFY) && ds->count &&
        !(t->verified = stk__calloc((size_t)((ds->count + 63) / 64), sizeof(uint64_t))))
        rc = stk__set_error(err, err_size, STK_ENOMEM,
                            "out of memory for the %" PRIu64 "-record verify bitmap", ds->count);
    if (rc == STK_OK && ds->count > 0)
        rc = tf_schema(ds, err, err_size);
    t->inplace = UINT32_MAX;
    for (uint32_t f = 0; rc == STK_OK && f < ds->n_fields && t->inplace == UINT32_MAX; f++)
        if (ds->fields[f].kind == STK_FIELD_BYTES)
            t->inplace = f;
    if (rc == STK_OK && t->inplace != UINT32_MAX &&
        !(t->vloc = stk__calloc((size_t)ds->count, sizeof(uint64_t))))
        rc = stk__set_error(err, err_size, STK_ENOMEM,
                            "out of memory for the %" PRIu64 "-record value index", ds->count);
    if (rc == STK_OK) {
        for (uint32_t f = 0; f < ds->n_fields; f++) {
            uint64_t fixed = stk__field_fixed_size(&ds->fields[f]);
            ds->field_max[f] = fixed ? fixed : t->max_len; /* a bytes value fits in its frame */
            ds->max_record += ds->field_max[f];
            stk__fp_add(h, &ds->fields[f], sizeof(ds->fields[f]));
        }
    }
    stk__fp_add_u64(h, ds->count);
    ds->fingerprint = stk__fp_end(h);
fail:
    stk__strlist_free(&list);
    return rc;
}

static stk_status tf_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                 size_t err_size)
{
    (void)ds;
    *out = stk__calloc(1, sizeof(**out));
    return *out ? STK_OK : stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
}

static void tf_cursor_close(const stk_dataset *ds, stk__cursor *cur)
{
    (void)ds;
    if (cur)
        stk__free(cur->buf);
    stk__free(cur);
}

typedef struct read_ctx {
    const stk_dataset *ds;
    void *const *dst;
    const size_t *cap;
    stk__recinfo *info;
    uint32_t seen;
    stk_status rc;
    const uint8_t *data; /* the frame's data (with a hole at vloc when in_place) */
    uint64_t vloc;       /* the in-place field's value: offset << 32 | length, found or known */
    bool in_place;       /* its value was read into dst[t->inplace] already */
    uint32_t found;      /* times the in-place field's key occurred (a repeated key: not learnt) */
    char msg[200];
} read_ctx;

static int read_feature(void *vctx, const stk__tf_feature *f)
{
    read_ctx *c = vctx;
    const stk_dataset *ds = c->ds;
    const tfds *t = ds->impl;
    int kl = (int)STK_MIN(f->key_len, 64);
    uint32_t j = 0;
    while (j < ds->n_fields && !(strlen(ds->fields[j].name) == f->key_len &&
                                 memcmp(ds->fields[j].name, f->key, f->key_len) == 0))
        j++;
    if (j == ds->n_fields) {
        snprintf(c->msg, sizeof(c->msg), "feature '%.*s' is not in the schema (the first record's)",
                 kl, (const char *)f->key);
        c->rc = STK_EFORMAT;
        return 1;
    }
    static const char *const kinds[] = {"no", "bytes", "float", "int64"};
    if (f->kind != t->kind[j] || f->count != t->values[j]) {
        snprintf(c->msg, sizeof(c->msg),
                 "feature '%s' is a %s list of %" PRIu64 " values, the schema says %s of %" PRIu64,
                 ds->fields[j].name, kinds[f->kind], f->count, kinds[t->kind[j]], t->values[j]);
        c->rc = STK_EFORMAT;
        return 1;
    }
    size_t size;
    int r;
    if (j == t->inplace) { /* where the value lies: learnt, or checked against what was read */
        const uint8_t *v;
        r = stk__tf_bytes_value(f, &v, &size);
        uint64_t at = r == 0 ? (uint64_t)(v - c->data) : 0;
        c->found++;
        if (r == 0 && c->in_place && ((at << 32) | size) != c->vloc) {
            snprintf(c->msg, sizeof(c->msg), "field '%s' moved in its frame", ds->fields[j].name);
            c->rc = STK_EFORMAT;
            return 1;
        }
        if (r == 0 && !c->in_place) {
            if (at < UINT32_MAX && size < UINT32_MAX)
                c->vloc = at << 32 | size;
            r = stk__tf_feature_value(f, c->dst[j], c->cap[j], &size);
        }
    } else {
        r = stk__tf_feature_value(f, c->dst[j], c->cap[j], &size);
    }
    if (r != 0) {
        snprintf(c->msg, sizeof(c->msg), r > 0 ? "field '%s' is over its buffer" : "malformed %s",
                 ds->fields[j].name);
        c->rc = r > 0 ? STK_ELIMIT : STK_EFORMAT;
        return 1;
    }
    c->seen |= 1u << j;
    c->info->size += size - c->info->field_size[j]; /* a repeated key replaces the value */
    c->info->field_size[j] = size;
    return 0;
}

static stk_status tf_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                          const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                          size_t err_size)
{
    stk__cursor local = {0};
    stk__cursor *c = cur ? cur : &local;
    const uint8_t *data;
    uint64_t len;
    char where[STK_ERRMSG_SIZE], why[256] = "";
    const tfds *t = ds->impl;
    uint64_t l;
    size_t file = stk__dataset_file_of(ds, i, &l);
    uint64_t vloc = t->vloc ? atomic_load_explicit(&t->vloc[i], memory_order_relaxed) : 0;
    /* the bytes value straight into its row when no CRC is due and where it lies is known */
    bool in_place = vloc && !crc_due(t, i, flags) && (vloc & UINT32_MAX) <= cap[t->inplace];
    stk_status rc;
    for (;;) {
        memset(info, 0, sizeof(*info));
        info->file = (uint32_t)file;
        info->local = l;
        info->offset = t->files[file].off[l];
        rc = read_frame(ds, c, i, flags, in_place ? dst[t->inplace] : NULL, vloc, &data, &len, err,
                        err_size);
        if (rc < 0)
            goto fail;
        read_ctx rx = {ds, dst, cap, info, 0, STK_OK, data, in_place ? vloc : 0, in_place, 0, ""};
        int r = stk__tf_example_parse(data, (size_t)len, read_feature, &rx, why, sizeof(why));
        uint32_t f = 0;
        while (r == 0 && f < ds->n_fields && (rx.seen & (1u << f)))
            f++;
        if (r == 0 && f == ds->n_fields) {
            if (t->vloc && !in_place && rx.vloc && rx.found == 1)
                atomic_store_explicit(&t->vloc[i], rx.vloc, memory_order_relaxed);
            goto fail; /* rc is STK_OK */
        }
        if (in_place) {
            /* the frame is not as a previous read found it (the file changed under the index):
             * read and check it whole, as for a first read */
            in_place = false;
            flags = (flags & ~STK__READ_NO_VERIFY) | STK__READ_VERIFY_ALL;
            continue;
        }
        tf_describe(ds, i, where, sizeof(where));
        if (r > 0)
            STK_FAIL_E(rx.rc, "%s: %s", where, rx.msg);
        if (r < 0)
            STK_FAIL_E(STK_EFORMAT, "%s: not a tf.train.Example (%s)", where, why);
        STK_FAIL_E(STK_EFORMAT, "%s: feature '%s' is missing (the first record has it)", where,
                   ds->fields[f].name);
    }
fail:
    if (c == &local)
        stk__free(local.buf);
    return rc;
}

/* The frame of record i (read-ahead of remote files). */
static bool tf_extent(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r)
{
    const tfds *t = ds->impl;
    uint64_t local;
    const tffile *tf = &t->files[stk__dataset_file_of(ds, i, &local)];
    *f = tf->f;
    *r = (stk__brange){tf->off[local], tf->off[local + 1] - tf->off[local]};
    return true;
}

const stk__source_methods stk__src_tfrecord = {
    .name = "tfrecord",
    .summary = "TFRecord files of tf.train.Example, one field per feature",
    .probe = tf_probe,
    .open = tf_open,
    .close = tf_close,
    .cursor_open = tf_cursor_open,
    .cursor_close = tf_cursor_close,
    .read = tf_read,
    .describe = tf_describe,
    .extent = tf_extent,
};
