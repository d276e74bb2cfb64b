/*
 * stk_writer.c: the `.stk` shard writer (docs/format.md is the spec; stk_format.h its C mirror).
 *
 * Everything goes to "<path>.tmp.<pid>.<n>" through a 1 MiB write buffer (large fields bypass
 * it), the index entries accumulate in memory, and close appends index + footer, rewrites the
 * header with the final count, fsyncs and renames. Any failure unlinks the temporary file, so
 * `path` only ever holds a complete shard. The reader is a record source
 * (src/source/stk/stk_src_stk.c).
 *
 * Checksums are XXH3-64. A record's checksum is over the concatenation of its field bytes.
 */
#include "source/stk/stk_format.h"
#include "stk_internal.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per record */
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writer buffer, written out at every multiple of its size in the file (see wbuf_put). */
#define WBUF_SIZE (2u << 20)

/* Serialise the header for `count` records; buf holds stk__fmt_header_size bytes. Returns the
 * header checksum (also stored in the header's last 8 bytes). */
static uint64_t header_encode(uint8_t *buf, uint64_t header_size, uint64_t count,
                              uint64_t data_offset, const stk_field *fields, uint32_t n_fields,
                              uint32_t align, const char *meta, uint32_t meta_size)
{
    memset(buf, 0, header_size);
    memcpy(buf, STK_FMT_MAGIC, STK_FMT_MAGIC_SIZE);
    stk__st32(buf + STK_FMT_H_VERSION, STK_FMT_VERSION);
    stk__st32(buf + STK_FMT_H_HEADER_SIZE, (uint32_t)header_size);
    stk__st64(buf + STK_FMT_H_COUNT, count);
    stk__st64(buf + STK_FMT_H_DATA_OFFSET, data_offset);
    stk__st32(buf + STK_FMT_H_N_FIELDS, n_fields);
    stk__st32(buf + STK_FMT_H_ALIGN, align);
    stk__st32(buf + STK_FMT_H_META_SIZE, meta_size);
    for (uint32_t i = 0; i < n_fields; i++) {
        uint8_t *e = buf + STK_FMT_H_FIXED + (size_t)i * STK_FMT_FIELD_SIZE;
        memcpy(e + STK_FMT_F_NAME, fields[i].name, strnlen(fields[i].name, STK_MAX_NAME - 1));
        stk__st32(e + STK_FMT_F_KIND, (uint32_t)fields[i].kind);
        stk__st32(e + STK_FMT_F_DTYPE, (uint32_t)fields[i].dtype);
        stk__st32(e + STK_FMT_F_NDIM, fields[i].ndim);
        for (int d = 0; d < STK_MAX_DIMS; d++)
            stk__st64(e + STK_FMT_F_SHAPE + 8 * d, (uint64_t)fields[i].shape[d]);
    }
    memcpy(buf + STK_FMT_H_FIXED + (size_t)n_fields * STK_FMT_FIELD_SIZE, meta, meta_size);
    uint64_t sum = XXH3_64bits(buf, header_size - 8);
    stk__st64(buf + header_size - 8, sum);
    return sum;
}

/* ---------------------------------------------------------------------------------------------
 * Writer
 * ------------------------------------------------------------------------------------------- */

struct stk_writer {
    char *path;     /* final name */
    char *tmp_path; /* what is being written */
    int fd;
    stk_field fields[STK_MAX_FIELDS];
    uint32_t n_fields;
    uint32_t align;
    char *meta;
    uint32_t meta_size;
    uint64_t header_size, data_offset;
    uint64_t pos; /* file offset of the next byte, buffered bytes included */
    uint8_t *buf; /* write buffer, WBUF_SIZE */
    size_t buf_len;
    uint8_t *index; /* serialised index entries */
    size_t index_len, index_cap;
    uint64_t count;
    uint64_t field_max[STK_MAX_FIELDS];
    uint64_t max_record;
    bool failed; /* a write failed: only abort/close remain */
    char err[STK_ERRMSG_SIZE];
};

static atomic_uint tmp_counter; /* makes temp names unique within the process */

void stk_writer_opts_init_sized(stk_writer_opts *opts, size_t struct_size)
{
    stk_writer_opts full = {.struct_size = sizeof(full), .align = 64};
    stk__init_store(opts, struct_size, &full, sizeof(full));
}

/* write(2) all of buf (stk__write_full); a failure is the writer's. */
static stk_status write_all(stk_writer *w, const void *data, size_t size)
{
    if (stk__write_full(w->fd, data, size))
        return STK_OK;
    w->failed = true;
    return stk__set_error(w->err, sizeof(w->err), STK_EIO, "%s: write failed: %s", w->tmp_path,
                          errno ? strerror(errno) : "no progress");
}

static stk_status wbuf_flush(stk_writer *w)
{
    stk_status rc = write_all(w, w->buf, w->buf_len);
    w->buf_len = 0;
    return rc;
}

/* Append bytes at w->pos. The file is written in WBUF_SIZE pieces that start and end on
 * WBUF_SIZE boundaries (2 MiB, a huge page; only the last piece is shorter): the page cache then
 * keeps a freshly written shard in large folios (ext4, XFS), which readers' pread copies out of
 * about 1.5x faster per CPU second than out of the 4 KiB pages that unaligned writes leave
 * (bench/RESULTS.md, "Raw records against memcpy (issue 15)"). Whole aligned pieces of a large
 * field are written straight from the caller's memory. */
static stk_status wbuf_put(stk_writer *w, const void *data, size_t size)
{
    stk_status rc = STK_OK;
    const uint8_t *p = data;
    while (size > 0) { /* data may be NULL when size is 0 (an empty index) */
        size_t n;
        if (w->buf_len == 0 && size >= WBUF_SIZE) { /* w->pos is on a boundary here */
            n = size - size % WBUF_SIZE;
            STK_TRY(write_all(w, p, n));
        } else {
            n = STK_MIN(size, WBUF_SIZE - w->buf_len);
            memcpy(w->buf + w->buf_len, p, n);
            w->buf_len += n;
            if (w->buf_len == WBUF_SIZE)
                STK_TRY(wbuf_flush(w));
        }
        p += n;
        size -= n;
        w->pos += n;
    }
fail:
    return rc;
}

/* Append `size` zero bytes (alignment padding, at most STK_FMT_MAX_ALIGN). */
static stk_status wbuf_zero(stk_writer *w, uint64_t size)
{
    static const uint8_t zeros[4096];
    stk_status rc = STK_OK;
    while (size > 0) {
        size_t n = (size_t)STK_MIN(size, sizeof(zeros));
        STK_TRY(wbuf_put(w, zeros, n));
        size -= n;
    }
fail:
    return rc;
}

/* Close the descriptor, unlink the temporary file and free everything. */
static void writer_free(stk_writer *w, bool unlink_tmp)
{
    if (w->fd >= 0)
        close(w->fd);
    if (unlink_tmp && w->tmp_path)
        unlink(w->tmp_path);
    stk__free(w->path);
    stk__free(w->tmp_path);
    stk__free(w->meta);
    stk__free(w->buf);
    stk__free(w->index);
    stk__free(w);
}

stk_status stk_writer_open(const char *path, const stk_writer_opts *opts, stk_writer **out)
{
    stk_status rc = STK_OK;
    stk_writer *w = NULL;
    uint8_t *hdr = NULL;
    char why[200];
    if (out)
        *out = NULL;
    if (!path || !*path || !opts || !out)
        return stk__set_last_error(STK_EINVAL, "stk_writer_open: NULL or empty argument");
    stk_writer_opts full;
    stk_writer_opts_init(&full);
    if (!stk__opts_load(&full, sizeof(full), opts))
        return stk__set_last_error(STK_EINVAL,
                                   "%s: stk_writer_opts not initialised "
                                   "(call stk_writer_opts_init)",
                                   path);
    opts = &full;
    if (!opts->fields || opts->n_fields < 1 || opts->n_fields > STK_MAX_FIELDS)
        return stk__set_last_error(STK_EINVAL, "%s: need 1..%d fields, got %zu", path,
                                   STK_MAX_FIELDS, opts->fields ? opts->n_fields : 0);
    stk_field fields[STK_MAX_FIELDS]; /* the caller's, at our stride */
    if (!stk__fields_load(fields, opts->fields, opts->n_fields, why, sizeof(why)))
        return stk__set_last_error(STK_EINVAL, "%s: %s", path, why);
    if (opts->align == 0 || (opts->align & (opts->align - 1)) || opts->align > STK_FMT_MAX_ALIGN)
        return stk__set_last_error(STK_EINVAL, "%s: align %u is not a power of two in 1..%u", path,
                                   opts->align, STK_FMT_MAX_ALIGN);
    const char *meta = opts->metadata_json ? opts->metadata_json : "{}";
    size_t meta_size = strlen(meta);
    if (meta_size > STK_FMT_MAX_META)
        return stk__set_last_error(STK_EINVAL, "%s: metadata is %zu bytes (limit %u)", path,
                                   meta_size, STK_FMT_MAX_META);
    if (!stk_json_valid(meta))
        return stk__set_last_error(STK_EINVAL, "%s: metadata is not valid JSON", path);
    for (size_t i = 0; i < opts->n_fields; i++) {
        if (!stk__field_valid(&fields[i], why, sizeof(why)))
            return stk__set_last_error(STK_EINVAL, "%s: %s", path, why);
        for (size_t j = 0; j < i; j++)
            if (strcmp(fields[i].name, fields[j].name) == 0)
                return stk__set_last_error(STK_EINVAL, "%s: duplicate field name '%s'", path,
                                           fields[i].name);
    }

    w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->n_fields = (uint32_t)opts->n_fields;
    for (uint32_t i = 0; i < w->n_fields; i++)
        w->fields[i] = stk__field_canonical(&fields[i]);
    w->align = opts->align;
    w->meta_size = (uint32_t)meta_size;
    w->path = stk__strdup(path);
    w->meta = stk__strdup(meta);
    w->buf = stk__malloc(WBUF_SIZE);
    size_t tmp_len = strlen(path) + 64;
    w->tmp_path = stk__malloc(tmp_len);
    if (!w->path || !w->meta || !w->buf || !w->tmp_path)
        STK_FAIL(w->err, STK_ENOMEM, "%s: out of memory", path);

    /* O_EXCL: a stale file of a dead process with our pid is skipped, never appended to. */
    for (int tries = 0; tries < 100 && w->fd < 0; tries++) {
        snprintf(w->tmp_path, tmp_len, "%s.tmp.%ld.%u", path, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1));
        w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd < 0 && errno != EEXIST)
            break;
    }
    if (w->fd < 0)
        STK_FAIL(w->err, STK_EIO, "%s: cannot create: %s", w->tmp_path, strerror(errno));

    /* Provisional header (count 0); close rewrites it with the final count. */
    w->header_size = stk__fmt_header_size(w->n_fields, w->meta_size);
    w->data_offset = STK_ALIGN_UP(w->header_size, w->align);
    hdr = stk__malloc(w->header_size);
    if (!hdr)
        STK_FAIL(w->err, STK_ENOMEM, "%s: out of memory", path);
    header_encode(hdr, w->header_size, 0, w->data_offset, w->fields, w->n_fields, w->align, w->meta,
                  w->meta_size);
    STK_TRY(wbuf_put(w, hdr, w->header_size));
    STK_TRY(wbuf_zero(w, w->data_offset - w->header_size));
    stk__free(hdr);
    *out = w;
    return STK_OK;
fail:
    stk__free(hdr);
    stk__last_error_copy(rc, w->err);
    writer_free(w, w->fd >= 0);
    return rc;
}

stk_status stk_writer_add(stk_writer *w, const stk_value *values)
{
    stk_status rc = STK_OK;
    uint8_t scalar[STK_MAX_FIELDS][8];
    const void *data[STK_MAX_FIELDS];
    uint64_t size[STK_MAX_FIELDS];
    uint64_t total = 0;
    if (!w || !values)
        return STK_EINVAL;
    if (w->failed)
        return stk__set_error(w->err, sizeof(w->err), STK_ESTATE,
                              "%s: an earlier write failed; abort the writer", w->tmp_path);
    for (uint32_t f = 0; f < w->n_fields; f++) {
        const stk_field *fd = &w->fields[f];
        stk_value vf, *v = &vf;
        stk_value_init(v);
        if (!stk__elem_load(v, sizeof(*v), values, f)) /* strided by values[0].struct_size */
            return stk__set_error(w->err, sizeof(w->err), STK_EINVAL,
                                  "%s: record %llu: values[%u] not initialised with "
                                  "stk_value_init (struct_size unset or unlike values[0]'s)",
                                  w->path, (unsigned long long)w->count, f);
        switch (fd->kind) {
        case STK_FIELD_INT64:
            stk__st64(scalar[f], (uint64_t)v->i64);
            data[f] = scalar[f];
            size[f] = 8;
            break;
        case STK_FIELD_FLOAT32: {
            uint32_t bits;
            memcpy(&bits, &v->f32, 4);
            stk__st32(scalar[f], bits);
            data[f] = scalar[f];
            size[f] = 4;
            break;
        }
        case STK_FIELD_ARRAY:
            if (v->size != stk__field_fixed_size(fd))
                return stk__set_error(w->err, sizeof(w->err), STK_EINVAL,
                                      "%s: record %llu: array field '%s' needs %llu bytes, got %zu",
                                      w->path, (unsigned long long)w->count, fd->name,
                                      (unsigned long long)stk__field_fixed_size(fd), v->size);
            /* fall through */
        case STK_FIELD_BYTES:
            if (!v->data && v->size)
                return stk__set_error(w->err, sizeof(w->err), STK_EINVAL,
                                      "%s: record %llu: field '%s' has NULL data", w->path,
                                      (unsigned long long)w->count, fd->name);
            data[f] = v->data;
            size[f] = v->size;
            break;
        }
        total += size[f];
        if (size[f] > UINT32_MAX || total > UINT32_MAX)
            return stk__set_error(w->err, sizeof(w->err), STK_EINVAL,
                                  "%s: record %llu is over 4 GiB (field '%s')", w->path,
                                  (unsigned long long)w->count, fd->name);
    }

    /* Room for the index entry first, so a failed allocation leaves the file untouched. */
    size_t esize = (size_t)stk__fmt_entry_size(w->n_fields);
    if (w->index_len + esize > w->index_cap) {
        size_t cap = w->index_cap ? w->index_cap * 2 : 64 * esize;
        uint8_t *p = stk__realloc(w->index, cap);
        if (!p)
            return stk__set_error(w->err, sizeof(w->err), STK_ENOMEM, "%s: out of memory", w->path);
        w->index = p;
        w->index_cap = cap;
    }

    STK_TRY(wbuf_zero(w, STK_ALIGN_UP(w->pos, w->align) - w->pos));
    uint64_t offset = w->pos;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (uint32_t f = 0; f < w->n_fields; f++) {
        if (size[f] == 0)
            continue;
        XXH3_64bits_update(&st, data[f], (size_t)size[f]);
        STK_TRY(wbuf_put(w, data[f], (size_t)size[f]));
    }

    uint8_t *e = w->index + w->index_len;
    memset(e, 0, esize);
    stk__st64(e + STK_FMT_E_OFFSET, offset);
    stk__st64(e + STK_FMT_E_CHECKSUM, XXH3_64bits_digest(&st));
    for (uint32_t f = 0; f < w->n_fields; f++) {
        stk__st32(e + STK_FMT_E_SIZES + 4 * f, (uint32_t)size[f]);
        w->field_max[f] = STK_MAX(w->field_max[f], size[f]);
    }
    w->index_len += esize;
    w->max_record = STK_MAX(w->max_record, total);
    w->count++;
fail:
    return rc;
}

uint64_t stk_writer_n_records(const stk_writer *w)
{
    return w ? w->count : 0;
}

uint64_t stk_writer_data_size(const stk_writer *w)
{
    return w ? w->pos - w->data_offset : 0;
}

const char *stk_writer_errmsg(const stk_writer *w)
{
    return w ? w->err : "";
}

/* fsync the directory holding `path`, so the rename itself survives a crash (best effort). */
void stk__fsync_parent(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path + (slash == path)), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

stk_status stk_writer_close(stk_writer *w)
{
    stk_status rc = STK_OK;
    uint8_t *hdr = NULL;
    if (!w)
        return stk__set_last_error(STK_EINVAL, "stk_writer_close: NULL writer");
    if (w->failed)
        STK_FAIL(w->err, STK_EIO, "%s: an earlier write failed; shard discarded", w->path);

    /* Index: fixed part and field maxima, then the entries accumulated by add. */
    STK_TRY(wbuf_zero(w, STK_ALIGN_UP(w->pos, 8) - w->pos));
    uint64_t index_offset = w->pos;
    uint8_t fixed[STK_FMT_I_FIXED + 8 * STK_MAX_FIELDS];
    size_t fixed_size = (size_t)stk__fmt_index_fixed(w->n_fields);
    memset(fixed, 0, sizeof(fixed));
    memcpy(fixed, STK_FMT_INDEX_MAGIC, 8);
    stk__st64(fixed + STK_FMT_I_COUNT, w->count);
    stk__st32(fixed + STK_FMT_I_N_FIELDS, w->n_fields);
    stk__st64(fixed + STK_FMT_I_MAX_RECORD, w->max_record);
    for (uint32_t f = 0; f < w->n_fields; f++)
        stk__st64(fixed + STK_FMT_I_FIXED + 8 * f, w->field_max[f]);
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, fixed, fixed_size);
    XXH3_64bits_update(&st, w->index, w->index_len);
    uint64_t index_sum = XXH3_64bits_digest(&st);
    STK_TRY(wbuf_put(w, fixed, fixed_size));
    STK_TRY(wbuf_put(w, w->index, w->index_len));

    /* Final header (count known now) and the footer that ties header and index together. */
    hdr = stk__malloc(w->header_size);
    if (!hdr)
        STK_FAIL(w->err, STK_ENOMEM, "%s: out of memory", w->path);
    uint64_t header_sum = header_encode(hdr, w->header_size, w->count, w->data_offset, w->fields,
                                        w->n_fields, w->align, w->meta, w->meta_size);
    uint8_t foot[STK_FMT_FOOTER_SIZE];
    memset(foot, 0, sizeof(foot));
    stk__st64(foot + STK_FMT_T_INDEX_OFFSET, index_offset);
    stk__st64(foot + STK_FMT_T_INDEX_SIZE, fixed_size + w->index_len);
    stk__st64(foot + STK_FMT_T_INDEX_SUM, index_sum);
    stk__st64(foot + STK_FMT_T_COUNT, w->count);
    stk__st64(foot + STK_FMT_T_HEADER_SUM, header_sum);
    stk__st32(foot + STK_FMT_T_VERSION, STK_FMT_VERSION);
    stk__st64(foot + STK_FMT_T_SUM, XXH3_64bits(foot, STK_FMT_T_SUM));
    memcpy(foot + STK_FMT_T_MAGIC, STK_FMT_FOOTER_MAGIC, 8);
    STK_TRY(wbuf_put(w, foot, sizeof(foot)));
    STK_TRY(wbuf_flush(w));

    if (stk__fault_write_hit(w->header_size) ||
        pwrite(w->fd, hdr, w->header_size, 0) != (ssize_t)w->header_size)
        STK_FAIL(w->err, STK_EIO, "%s: write failed: %s", w->tmp_path, strerror(errno));
    if (fsync(w->fd) != 0)
        STK_FAIL(w->err, STK_EIO, "%s: fsync failed: %s", w->tmp_path, strerror(errno));
    if (close(w->fd) != 0) {
        w->fd = -1;
        STK_FAIL(w->err, STK_EIO, "%s: close failed: %s", w->tmp_path, strerror(errno));
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0)
        STK_FAIL(w->err, STK_EIO, "%s: cannot rename %s to it: %s", w->path, w->tmp_path,
                 strerror(errno));
    stk__fsync_parent(w->path);
    stk__free(hdr);
    writer_free(w, false);
    return STK_OK;
fail:
    stk__free(hdr);
    stk__last_error_copy(rc, w->err);
    writer_free(w, true);
    return rc;
}

void stk_writer_abort(stk_writer *w)
{
    if (w)
        writer_free(w, true);
}
