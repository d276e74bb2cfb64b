/*
 * stk_recfile.c: the `.stk` shard writer and the dataset reader (docs/format.md is the spec).
 *
 * Writer: everything goes to "<path>.tmp.<pid>.<n>" through a 1 MiB write buffer (large fields
 * bypass it), the index entries accumulate in memory, and close appends index + footer, rewrites
 * the header with the final count, fsyncs and renames. Any failure unlinks the temporary file,
 * so `path` only ever holds a complete shard.
 *
 * Reader: per shard one descriptor kept open and one read-only mapping of the index region (the
 * data region is never mapped: records are pread straight into the caller's memory, so RSS stays
 * bounded by what the caller holds, whatever the dataset size). Everything a later read relies
 * on is validated at open: magic, version, footer, header and index checksums, and every
 * record's extent inside the data region. After open the dataset is immutable, so concurrent
 * reads need no lock (pread on a shared descriptor).
 *
 * Checksums are XXH3-64. A record's checksum is over the concatenation of its field bytes, so a
 * streaming hash over the fields as they land in scattered destinations equals it.
 */
#include "io/stk_recfile_format.h"
#include "stk_internal.h"

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack: no allocation per record */
#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define WBUF_SIZE (1u << 20)        /* writer buffer */
#define WBUF_DIRECT (WBUF_SIZE / 4) /* fields at least this large are written directly */

/* STK_FAIL into the thread's stk_last_errmsg() (the reader has no handle to hold errors yet). */
#define STK_FAIL_LAST(code, ...)                                                                   \
    do {                                                                                           \
        rc = stk__set_last_error((code), __VA_ARGS__);                                             \
        goto fail;                                                                                 \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Shared helpers
 * ------------------------------------------------------------------------------------------- */

/* Fixed byte size of a field's value, or 0 for variable-length bytes. */
static uint64_t field_fixed_size(const stk_field *f)
{
    switch (f->kind) {
    case STK_FIELD_INT64:
        return 8;
    case STK_FIELD_FLOAT32:
        return 4;
    case STK_FIELD_ARRAY: {
        uint64_t n = stk_dtype_size(f->dtype);
        for (uint32_t d = 0; d < f->ndim; d++)
            n *= (uint64_t)f->shape[d]; /* validated: each dim <= 2^32, product checked below */
        return n;
    }
    default:
        return 0;
    }
}

/* Validate one field description; `why` gets the reason. Shapes are bounded so that the array's
 * byte size fits the u32 of an index entry. */
static bool field_valid(const stk_field *f, char *why, size_t why_size)
{
    size_t len = strnlen(f->name, STK_MAX_NAME);
    if (len == 0 || len == STK_MAX_NAME) {
        snprintf(why, why_size, "field name empty or longer than %d bytes", STK_MAX_NAME - 1);
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        char c = f->name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            snprintf(why, why_size, "field name '%.*s' has a character outside [A-Za-z0-9_.-]",
                     (int)len, f->name);
            return false;
        }
    }
    if ((unsigned)f->kind > STK_FIELD_ARRAY) {
        snprintf(why, why_size, "field '%s': unknown kind %u", f->name, (unsigned)f->kind);
        return false;
    }
    if (f->kind != STK_FIELD_ARRAY)
        return true;
    if (stk_dtype_size(f->dtype) == 0) {
        snprintf(why, why_size, "field '%s': unknown dtype %u", f->name, (unsigned)f->dtype);
        return false;
    }
    if (f->ndim < 1 || f->ndim > STK_MAX_DIMS) {
        snprintf(why, why_size, "field '%s': ndim %u not in 1..%d", f->name, f->ndim, STK_MAX_DIMS);
        return false;
    }
    uint64_t n = stk_dtype_size(f->dtype);
    for (uint32_t d = 0; d < f->ndim; d++) {
        if (f->shape[d] < 1 || f->shape[d] > UINT32_MAX || n * (uint64_t)f->shape[d] > UINT32_MAX) {
            snprintf(why, why_size,
                     "field '%s': shape dimension %u is %lld (need 1.., total under "
                     "4 GiB)",
                     f->name, d, (long long)f->shape[d]);
            return false;
        }
        n *= (uint64_t)f->shape[d];
    }
    return true;
}

/* The canonical form of a field: what the file stores and what readers compare. Scalars and
 * bytes carry their implied dtype and no shape. */
static stk_field field_canonical(const stk_field *f)
{
    stk_field c;
    memset(&c, 0, sizeof(c));
    memcpy(c.name, f->name, strnlen(f->name, STK_MAX_NAME - 1));
    c.kind = f->kind;
    switch (f->kind) {
    case STK_FIELD_BYTES:
        c.dtype = STK_DTYPE_UINT8;
        break;
    case STK_FIELD_INT64:
        c.dtype = STK_DTYPE_INT64;
        break;
    case STK_FIELD_FLOAT32:
        c.dtype = STK_DTYPE_FLOAT32;
        break;
    case STK_FIELD_ARRAY:
        c.dtype = f->dtype;
        c.ndim = f->ndim;
        for (uint32_t d = 0; d < f->ndim && d < STK_MAX_DIMS; d++)
            c.shape[d] = f->shape[d];
        break;
    }
    return c;
}

static bool field_equal(const stk_field *a, const stk_field *b)
{
    if (strcmp(a->name, b->name) != 0 || a->kind != b->kind || a->dtype != b->dtype ||
        a->ndim != b->ndim)
        return false;
    for (uint32_t d = 0; d < STK_MAX_DIMS; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return true;
}

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

void stk_writer_opts_init(stk_writer_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->align = 64;
}

/* write(2) all of buf, retrying on EINTR and short writes. */
static stk_status write_all(stk_writer *w, const void *data, size_t size)
{
    const uint8_t *p = data;
    while (size > 0) {
        ssize_t n = write(w->fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            w->failed = true;
            return stk__set_error(w->err, sizeof(w->err), STK_EIO, "%s: write failed: %s",
                                  w->tmp_path, n < 0 ? strerror(errno) : "no progress");
        }
        p += n;
        size -= (size_t)n;
    }
    return STK_OK;
}

static stk_status wbuf_flush(stk_writer *w)
{
    stk_status rc = write_all(w, w->buf, w->buf_len);
    w->buf_len = 0;
    return rc;
}

/* Append bytes at w->pos: small pieces are gathered in the buffer, large ones written through. */
static stk_status wbuf_put(stk_writer *w, const void *data, size_t size)
{
    stk_status rc = STK_OK;
    if (size == 0)
        return STK_OK; /* data may be NULL (an empty index) */
    if (size >= WBUF_DIRECT) {
        STK_TRY(wbuf_flush(w));
        STK_TRY(write_all(w, data, size));
    } else {
        if (w->buf_len + size > WBUF_SIZE)
            STK_TRY(wbuf_flush(w));
        memcpy(w->buf + w->buf_len, data, size);
        w->buf_len += size;
    }
    w->pos += size;
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
    if (opts->struct_size < offsetof(stk_writer_opts, align) + sizeof(opts->align))
        return stk__set_last_error(STK_EINVAL,
                                   "%s: stk_writer_opts not initialised "
                                   "(call stk_writer_opts_init)",
                                   path);
    if (!opts->fields || opts->n_fields < 1 || opts->n_fields > STK_MAX_FIELDS)
        return stk__set_last_error(STK_EINVAL, "%s: need 1..%d fields, got %zu", path,
                                   STK_MAX_FIELDS, opts->fields ? opts->n_fields : 0);
    if (opts->align == 0 || (opts->align & (opts->align - 1)) || opts->align > STK_FMT_MAX_ALIGN)
        return stk__set_last_error(STK_EINVAL, "%s: align %u is not a power of two in 1..%u", path,
                                   opts->align, STK_FMT_MAX_ALIGN);
    const char *meta = opts->metadata_json ? opts->metadata_json : "{}";
    size_t meta_size = strlen(meta);
    if (meta_size > STK_FMT_MAX_META)
        return stk__set_last_error(STK_EINVAL, "%s: metadata is %zu bytes (limit %u)", path,
                                   meta_size, STK_FMT_MAX_META);
    for (size_t i = 0; i < opts->n_fields; i++) {
        if (!field_valid(&opts->fields[i], why, sizeof(why)))
            return stk__set_last_error(STK_EINVAL, "%s: %s", path, why);
        for (size_t j = 0; j < i; j++)
            if (strcmp(opts->fields[i].name, opts->fields[j].name) == 0)
                return stk__set_last_error(STK_EINVAL, "%s: duplicate field name '%s'", path,
                                           opts->fields[i].name);
    }

    w = stk__calloc(1, sizeof(*w));
    if (!w)
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
    w->fd = -1;
    w->n_fields = (uint32_t)opts->n_fields;
    for (uint32_t i = 0; i < w->n_fields; i++)
        w->fields[i] = field_canonical(&opts->fields[i]);
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
        const stk_value *v = &values[f];
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
            if (v->size != field_fixed_size(fd))
                return stk__set_error(w->err, sizeof(w->err), STK_EINVAL,
                                      "%s: record %llu: array field '%s' needs %llu bytes, got %zu",
                                      w->path, (unsigned long long)w->count, fd->name,
                                      (unsigned long long)field_fixed_size(fd), v->size);
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

uint64_t stk_writer_count(const stk_writer *w)
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
static void fsync_parent(const char *path)
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

    if (pwrite(w->fd, hdr, w->header_size, 0) != (ssize_t)w->header_size)
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
    fsync_parent(w->path);
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

/* ---------------------------------------------------------------------------------------------
 * Reader
 * ------------------------------------------------------------------------------------------- */

typedef struct shard {
    char *path;
    int fd;
    uint32_t version;
    uint64_t first; /* global number of the first record */
    uint64_t count;
    uint64_t file_size;
    uint64_t data_offset;
    uint64_t index_offset;
    uint64_t index_sum;
    char *meta; /* NUL-terminated copy */
    stk_field fields[STK_MAX_FIELDS];
    uint32_t n_fields;
    uint64_t field_max[STK_MAX_FIELDS];
    uint64_t max_record;
    void *map; /* index region, page-aligned mapping */
    size_t map_size;
    const uint8_t *entries; /* first record entry, inside map */
    uint64_t entry_size;
} shard;

struct stk_dataset {
    shard *shards;
    size_t n_shards;
    uint64_t count;
    stk_field fields[STK_MAX_FIELDS];
    uint32_t n_fields;
    uint64_t field_max[STK_MAX_FIELDS];
    uint64_t max_record;
    uint64_t fingerprint;
    unsigned flags;
};

/* pread exactly size bytes at off; a short file is STK_EFORMAT (the shard is truncated). */
static stk_status pread_full(int fd, void *buf, size_t size, uint64_t off, const char *path,
                             const char *what)
{
    uint8_t *p = buf;
    while (size > 0) {
        ssize_t n = pread(fd, p, size, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return stk__set_last_error(STK_EIO, "%s: cannot read %s: %s", path, what,
                                       strerror(errno));
        if (n == 0)
            return stk__set_last_error(STK_EFORMAT, "%s: truncated shard (end of file in %s)", path,
                                       what);
        p += n;
        size -= (size_t)n;
        off += (uint64_t)n;
    }
    return STK_OK;
}

static void shard_close(shard *s)
{
    if (s->map)
        munmap(s->map, s->map_size);
    if (s->fd >= 0)
        close(s->fd);
    stk__free(s->meta);
    stk__free(s->path);
    memset(s, 0, sizeof(*s));
    s->fd = -1;
}

/* Parse and check the header bytes (checksum already verified) into s. */
static stk_status header_parse(shard *s, const uint8_t *h, uint64_t header_size)
{
    s->count = stk__ld64(h + STK_FMT_H_COUNT);
    s->data_offset = stk__ld64(h + STK_FMT_H_DATA_OFFSET);
    s->n_fields = stk__ld32(h + STK_FMT_H_N_FIELDS);
    uint32_t align = stk__ld32(h + STK_FMT_H_ALIGN);
    uint32_t meta_size = stk__ld32(h + STK_FMT_H_META_SIZE);
    const char *p = s->path;
    if (s->n_fields < 1 || s->n_fields > STK_MAX_FIELDS)
        return stk__set_last_error(STK_EFORMAT, "%s: corrupt header (%u fields)", p, s->n_fields);
    if (meta_size > STK_FMT_MAX_META || stk__fmt_header_size(s->n_fields, meta_size) != header_size)
        return stk__set_last_error(STK_EFORMAT, "%s: corrupt header (size mismatch)", p);
    if (align == 0 || (align & (align - 1)) || align > STK_FMT_MAX_ALIGN ||
        s->data_offset % align || s->data_offset < header_size)
        return stk__set_last_error(STK_EFORMAT, "%s: corrupt header (alignment %u, data at %llu)",
                                   p, align, (unsigned long long)s->data_offset);
    for (uint32_t i = 0; i < s->n_fields; i++) {
        const uint8_t *e = h + STK_FMT_H_FIXED + (size_t)i * STK_FMT_FIELD_SIZE;
        stk_field f;
        char why[160];
        memset(&f, 0, sizeof(f));
        memcpy(f.name, e + STK_FMT_F_NAME, STK_MAX_NAME);
        f.kind = (stk_field_kind)stk__ld32(e + STK_FMT_F_KIND);
        f.dtype = (stk_dtype)stk__ld32(e + STK_FMT_F_DTYPE);
        f.ndim = stk__ld32(e + STK_FMT_F_NDIM);
        for (int d = 0; d < STK_MAX_DIMS; d++)
            f.shape[d] = (int64_t)stk__ld64(e + STK_FMT_F_SHAPE + 8 * d);
        if (!field_valid(&f, why, sizeof(why)))
            return stk__set_last_error(STK_EFORMAT, "%s: corrupt schema (%s)", p, why);
        s->fields[i] = field_canonical(&f);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(s->fields[i].name, s->fields[j].name) == 0)
                return stk__set_last_error(STK_EFORMAT, "%s: corrupt schema (duplicate '%s')", p,
                                           s->fields[i].name);
    }
    s->meta = stk__malloc((size_t)meta_size + 1);
    if (!s->meta)
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", p);
    memcpy(s->meta, h + STK_FMT_H_FIXED + (size_t)s->n_fields * STK_FMT_FIELD_SIZE, meta_size);
    s->meta[meta_size] = '\0';
    return STK_OK;
}

/* Check every index entry: extent inside the data region, fixed-size fields of the right size,
 * stored maxima equal to the entries' maxima. After this a read never leaves the data region. */
static stk_status index_validate(shard *s, const uint8_t *idx)
{
    const char *p = s->path;
    if (memcmp(idx, STK_FMT_INDEX_MAGIC, 8) != 0 || stk__ld64(idx + STK_FMT_I_COUNT) != s->count ||
        stk__ld32(idx + STK_FMT_I_N_FIELDS) != s->n_fields)
        return stk__set_last_error(STK_EFORMAT, "%s: corrupt index (header disagrees)", p);
    s->max_record = stk__ld64(idx + STK_FMT_I_MAX_RECORD);
    uint64_t fixed[STK_MAX_FIELDS], seen[STK_MAX_FIELDS] = {0}, seen_record = 0;
    for (uint32_t f = 0; f < s->n_fields; f++) {
        s->field_max[f] = stk__ld64(idx + STK_FMT_I_FIXED + 8 * f);
        fixed[f] = field_fixed_size(&s->fields[f]);
    }
    for (uint64_t r = 0; r < s->count; r++) {
        const uint8_t *e = s->entries + r * s->entry_size;
        uint64_t off = stk__ld64(e + STK_FMT_E_OFFSET), size = 0;
        for (uint32_t f = 0; f < s->n_fields; f++) {
            uint64_t fs = stk__ld32(e + STK_FMT_E_SIZES + 4 * f);
            if (fixed[f] && fs != fixed[f])
                return stk__set_last_error(STK_EFORMAT,
                                           "%s: corrupt index (record %llu: field '%s' is %llu "
                                           "bytes, expected %llu)",
                                           p, (unsigned long long)r, s->fields[f].name,
                                           (unsigned long long)fs, (unsigned long long)fixed[f]);
            seen[f] = STK_MAX(seen[f], fs);
            size += fs;
        }
        /* sizes are u32 and at most 16 fields: no overflow; off is checked before subtracting */
        if (off < s->data_offset || off > s->index_offset || size > s->index_offset - off)
            return stk__set_last_error(STK_EFORMAT,
                                       "%s: corrupt index (record %llu lies outside the data "
                                       "region)",
                                       p, (unsigned long long)r);
        seen_record = STK_MAX(seen_record, size);
    }
    if (seen_record != s->max_record || memcmp(seen, s->field_max, 8 * s->n_fields) != 0)
        return stk__set_last_error(STK_EFORMAT,
                                   "%s: corrupt index (field maxima disagree with "
                                   "the entries)",
                                   p);
    return STK_OK;
}

/* Open one shard file and validate it completely (everything but the record checksums). */
static stk_status shard_open(shard *s, const char *path)
{
    stk_status rc = STK_OK;
    uint8_t *hdr = NULL;
    uint8_t fixed[STK_FMT_H_FIXED];
    uint8_t foot[STK_FMT_FOOTER_SIZE];
    struct stat st;
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->path = stk__strdup(path);
    if (!s->path)
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0)
        return stk__set_last_error(STK_EIO, "%s: %s", path, strerror(errno));
    if (fstat(s->fd, &st) != 0)
        return stk__set_last_error(STK_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return stk__set_last_error(STK_EIO, "%s: not a regular file", path);
    s->file_size = (uint64_t)st.st_size;

    /* Magic and version first: a future version may change everything after them. */
    size_t head = (size_t)STK_MIN(s->file_size, sizeof(fixed));
    STK_TRY(pread_full(s->fd, fixed, head, 0, path, "header"));
    if (memcmp(fixed, STK_FMT_MAGIC, STK_MIN(head, STK_FMT_MAGIC_SIZE)) != 0)
        return stk__set_last_error(STK_EFORMAT, "%s: bad magic (not a .stk shard)", path);
    if (head >= STK_FMT_H_VERSION + 4) {
        s->version = stk__ld32(fixed + STK_FMT_H_VERSION);
        if (s->version > STK_FMT_VERSION)
            return stk__set_last_error(STK_ENOTSUP,
                                       "%s: format version %u is newer than this stoker "
                                       "(reads %u)",
                                       path, s->version, STK_FMT_VERSION);
        if (s->version == 0)
            return stk__set_last_error(STK_EFORMAT, "%s: corrupt header (format version 0)", path);
    }

    /* Footer: present and intact, else the file is truncated or was never finished (a file
     * shorter than a header and a footer has none: this includes a cut inside the magic). */
    bool has_footer = s->file_size >= STK_FMT_H_FIXED + 8 + STK_FMT_FOOTER_SIZE;
    if (has_footer)
        STK_TRY(pread_full(s->fd, foot, sizeof(foot), s->file_size - sizeof(foot), path, "footer"));
    if (!has_footer || memcmp(foot + STK_FMT_T_MAGIC, STK_FMT_FOOTER_MAGIC, 8) != 0)
        return stk__set_last_error(STK_EFORMAT,
                                   "%s: truncated or incomplete shard (footer missing)", path);
    if (XXH3_64bits(foot, STK_FMT_T_SUM) != stk__ld64(foot + STK_FMT_T_SUM) ||
        stk__ld32(foot + STK_FMT_T_VERSION) != s->version)
        return stk__set_last_error(STK_EFORMAT,
                                   "%s: truncated or incomplete shard (footer "
                                   "damaged: checksum mismatch)",
                                   path);

    /* Header: its size bounds everything else, its checksum must match the footer's copy. */
    uint64_t header_size = stk__ld32(fixed + STK_FMT_H_HEADER_SIZE);
    uint64_t avail = s->file_size - STK_FMT_FOOTER_SIZE;
    if (header_size < STK_FMT_H_FIXED + 8 || header_size % 8 || header_size > avail)
        return stk__set_last_error(STK_EFORMAT, "%s: corrupt header (size %llu)", path,
                                   (unsigned long long)header_size);
    hdr = stk__malloc((size_t)header_size);
    if (!hdr)
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
    STK_TRY(pread_full(s->fd, hdr, (size_t)header_size, 0, path, "header"));
    uint64_t header_sum = XXH3_64bits(hdr, (size_t)header_size - 8);
    if (header_sum != stk__ld64(hdr + header_size - 8) ||
        header_sum != stk__ld64(foot + STK_FMT_T_HEADER_SUM))
        STK_FAIL_LAST(STK_EFORMAT, "%s: corrupt header (checksum mismatch)", path);
    STK_TRY(header_parse(s, hdr, header_size));
    if (stk__ld64(foot + STK_FMT_T_COUNT) != s->count)
        STK_FAIL_LAST(STK_EFORMAT, "%s: corrupt footer (record count disagrees with header)", path);

    /* Index region: exactly between the data region and the footer, sized by the count. */
    s->index_offset = stk__ld64(foot + STK_FMT_T_INDEX_OFFSET);
    uint64_t index_size = stk__ld64(foot + STK_FMT_T_INDEX_SIZE);
    s->entry_size = stk__fmt_entry_size(s->n_fields);
    uint64_t ifixed = stk__fmt_index_fixed(s->n_fields);
    if (s->index_offset < s->data_offset || s->index_offset > avail ||
        index_size != avail - s->index_offset || index_size < ifixed ||
        (index_size - ifixed) / s->entry_size != s->count ||
        (index_size - ifixed) % s->entry_size != 0)
        STK_FAIL_LAST(STK_EFORMAT,
                      "%s: corrupt footer (index at %llu, %llu bytes, for %llu "
                      "records)",
                      path, (unsigned long long)s->index_offset, (unsigned long long)index_size,
                      (unsigned long long)s->count);
    long page = sysconf(_SC_PAGESIZE);
    uint64_t map_off = s->index_offset & ~(uint64_t)(page - 1);
    s->map_size = (size_t)(avail - map_off);
    s->map = mmap(NULL, s->map_size, PROT_READ, MAP_PRIVATE, s->fd, (off_t)map_off);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        STK_FAIL_LAST(STK_EIO, "%s: cannot map the index: %s", path, strerror(errno));
    }
    const uint8_t *idx = (const uint8_t *)s->map + (s->index_offset - map_off);
    s->index_sum = XXH3_64bits(idx, (size_t)index_size);
    if (s->index_sum != stk__ld64(foot + STK_FMT_T_INDEX_SUM))
        STK_FAIL_LAST(STK_EFORMAT, "%s: corrupt index (checksum mismatch)", path);
    s->entries = idx + ifixed;
    STK_TRY(index_validate(s, idx));
fail:
    stk__free(hdr);
    return rc;
}

/* A growable list of shard paths. */
typedef struct pathlist {
    char **v;
    size_t n, cap;
} pathlist;

static stk_status pathlist_add(pathlist *l, const char *path)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = stk__realloc(l->v, cap * sizeof(*v));
        if (!v)
            return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n] = stk__strdup(path);
    if (!l->v[l->n])
        return stk__set_last_error(STK_ENOMEM, "%s: out of memory", path);
    l->n++;
    return STK_OK;
}

static void pathlist_free(pathlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        stk__free(l->v[i]);
    stk__free(l->v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A writer's temporary file ("x.stk.tmp.<pid>.<n>"): never part of a dataset. */
static bool is_temp_name(const char *name)
{
    return strstr(name, ".tmp.") != NULL;
}

/* Append the `*.stk` files of directory `dir`, sorted by name (byte order). */
static stk_status expand_dir(pathlist *l, const char *dir)
{
    stk_status rc = STK_OK;
    pathlist names = {0};
    DIR *d = opendir(dir);
    if (!d)
        return stk__set_last_error(STK_EIO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".stk") == 0 && !is_temp_name(e->d_name))
            STK_TRY(pathlist_add(&names, e->d_name));
    }
    if (names.n == 0)
        STK_FAIL_LAST(STK_EINVAL, "%s: no .stk shards in this directory", dir);
    qsort(names.v, names.n, sizeof(*names.v), cmp_str);
    size_t dlen = strlen(dir);
    bool slash = dlen > 0 && dir[dlen - 1] == '/';
    for (size_t i = 0; i < names.n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof(path), "%s%s%s", dir, slash ? "" : "/", names.v[i]) >=
            (int)sizeof(path))
            STK_FAIL_LAST(STK_EINVAL, "%s/%s: path too long", dir, names.v[i]);
        STK_TRY(pathlist_add(l, path));
    }
fail:
    closedir(d);
    pathlist_free(&names);
    return rc;
}

/* Resolve one argument (file, directory or glob) into shard paths appended to l. */
static stk_status expand_path(pathlist *l, const char *arg)
{
    stk_status rc = STK_OK;
    struct stat st;
    if (stat(arg, &st) == 0)
        return S_ISDIR(st.st_mode) ? expand_dir(l, arg) : pathlist_add(l, arg);
    int err = errno;
    if (!strpbrk(arg, "*?["))
        return stk__set_last_error(STK_EIO, "%s: %s", arg, strerror(err));
    glob_t g;
    /* GLOB_NOSORT + strcmp: byte order, whatever the locale's collation says. */
    int grc = glob(arg, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH)
        return stk__set_last_error(STK_EIO, "%s: no file matches this pattern", arg);
    if (grc != 0) {
        globfree(&g);
        return stk__set_last_error(grc == GLOB_NOSPACE ? STK_ENOMEM : STK_EIO,
                                   "%s: cannot expand the pattern", arg);
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof(*g.gl_pathv), cmp_str);
    size_t kept = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *m = g.gl_pathv[i];
        const char *base = strrchr(m, '/');
        if (is_temp_name(base ? base + 1 : m))
            continue;
        if (stat(m, &st) == 0 && S_ISDIR(st.st_mode))
            STK_TRY(expand_dir(l, m));
        else
            STK_TRY(pathlist_add(l, m));
        kept++;
    }
    if (kept == 0)
        STK_FAIL_LAST(STK_EIO, "%s: no file matches this pattern (only temporary files)", arg);
fail:
    globfree(&g);
    return rc;
}

/* Hash of the dataset's identity: total count, then each shard's count and index checksum. */
static uint64_t fingerprint(const stk_dataset *ds)
{
    XXH3_state_t st;
    uint8_t b[16];
    XXH3_64bits_reset(&st);
    stk__st64(b, ds->count);
    XXH3_64bits_update(&st, b, 8);
    for (size_t i = 0; i < ds->n_shards; i++) {
        stk__st64(b, ds->shards[i].count);
        stk__st64(b + 8, ds->shards[i].index_sum);
        XXH3_64bits_update(&st, b, 16);
    }
    return XXH3_64bits_digest(&st);
}

stk_status stk_dataset_open(const char *const *paths, size_t n_paths, unsigned flags,
                            stk_dataset **out)
{
    stk_status rc = STK_OK;
    pathlist list = {0};
    stk_dataset *ds = NULL;
    if (out)
        *out = NULL;
    if (!out || !paths || n_paths == 0)
        return stk__set_last_error(STK_EINVAL, "stk_dataset_open: no paths given");
    for (size_t i = 0; i < n_paths; i++) {
        if (!paths[i] || !*paths[i])
            STK_FAIL_LAST(STK_EINVAL, "stk_dataset_open: path %zu is empty", i);
        STK_TRY(expand_path(&list, paths[i]));
    }
    if (list.n > UINT32_MAX)
        STK_FAIL_LAST(STK_ELIMIT, "%s: too many shards (%zu)", paths[0], list.n);

    ds = stk__calloc(1, sizeof(*ds));
    if (!ds || !(ds->shards = stk__calloc(list.n, sizeof(*ds->shards))))
        STK_FAIL_LAST(STK_ENOMEM, "%s: out of memory", paths[0]);
    for (size_t i = 0; i < list.n; i++)
        ds->shards[i].fd = -1;
    ds->flags = flags;
    for (size_t i = 0; i < list.n; i++) {
        shard *s = &ds->shards[i];
        ds->n_shards = i + 1; /* so a failure closes what this shard opened */
        STK_TRY(shard_open(s, list.v[i]));
        const shard *s0 = &ds->shards[0];
        bool same = s->n_fields == s0->n_fields;
        for (uint32_t f = 0; same && f < s->n_fields; f++)
            same = field_equal(&s->fields[f], &s0->fields[f]);
        if (!same)
            STK_FAIL_LAST(STK_EINVAL,
                          "%s: schema differs from %s (all shards of a dataset must "
                          "have the same fields)",
                          s->path, s0->path);
        if (s->count > UINT64_MAX - ds->count)
            STK_FAIL_LAST(STK_ELIMIT, "%s: too many records", s->path);
        s->first = ds->count;
        ds->count += s->count;
        for (uint32_t f = 0; f < s->n_fields; f++)
            ds->field_max[f] = STK_MAX(ds->field_max[f], s->field_max[f]);
        ds->max_record = STK_MAX(ds->max_record, s->max_record);
    }
    ds->n_fields = ds->shards[0].n_fields;
    memcpy(ds->fields, ds->shards[0].fields, sizeof(ds->fields));
    if (ds->count == 0)
        STK_FAIL_LAST(STK_EINVAL, "%s%s: dataset is empty (0 records)", paths[0],
                      n_paths > 1 ? " (and the other paths)" : "");
    ds->fingerprint = fingerprint(ds);
    pathlist_free(&list);
    stk__clear_last_error();
    *out = ds;
    return STK_OK;
fail:
    pathlist_free(&list);
    stk_dataset_close(ds);
    return rc;
}

void stk_dataset_close(stk_dataset *ds)
{
    if (!ds)
        return;
    for (size_t i = 0; i < ds->n_shards; i++)
        shard_close(&ds->shards[i]);
    stk__free(ds->shards);
    stk__free(ds);
}

uint64_t stk_dataset_count(const stk_dataset *ds)
{
    return ds ? ds->count : 0;
}

size_t stk_dataset_n_fields(const stk_dataset *ds)
{
    return ds ? ds->n_fields : 0;
}

const stk_field *stk_dataset_field(const stk_dataset *ds, size_t i)
{
    return ds && i < ds->n_fields ? &ds->fields[i] : NULL;
}

int stk_dataset_find_field(const stk_dataset *ds, const char *name)
{
    for (uint32_t i = 0; ds && name && i < ds->n_fields; i++)
        if (strcmp(ds->fields[i].name, name) == 0)
            return (int)i;
    return -1;
}

uint64_t stk_dataset_field_max_size(const stk_dataset *ds, size_t i)
{
    if (!ds || i >= ds->n_fields)
        return 0;
    uint64_t fixed = field_fixed_size(&ds->fields[i]);
    return fixed ? fixed : ds->field_max[i];
}

uint64_t stk_dataset_max_record_size(const stk_dataset *ds)
{
    return ds ? ds->max_record : 0;
}

size_t stk_dataset_n_shards(const stk_dataset *ds)
{
    return ds ? ds->n_shards : 0;
}

stk_status stk_dataset_shard(const stk_dataset *ds, size_t i, stk_shard_info *out)
{
    if (!ds || !out || i >= ds->n_shards)
        return STK_EINVAL;
    const shard *s = &ds->shards[i];
    out->path = s->path;
    out->first_record = s->first;
    out->n_records = s->count;
    out->file_size = s->file_size;
    out->data_size = s->index_offset - s->data_offset;
    out->version = s->version;
    out->metadata = s->meta;
    return STK_OK;
}

uint64_t stk_dataset_fingerprint(const stk_dataset *ds)
{
    return ds ? ds->fingerprint : 0;
}

const char *stk__dataset_shard_path(const stk_dataset *ds, uint32_t shard_no)
{
    return ds && shard_no < ds->n_shards ? ds->shards[shard_no].path : "";
}

bool stk__dataset_verifies(const stk_dataset *ds)
{
    return ds && !(ds->flags & STK_DATASET_NO_VERIFY);
}

stk_status stk__dataset_locate(const stk_dataset *ds, uint64_t index, stk__recloc *out, char *err,
                               size_t err_size)
{
    if (!ds || index >= ds->count)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %llu out of range (dataset has "
                              "%llu records)",
                              (unsigned long long)index, (unsigned long long)(ds ? ds->count : 0));
    /* Last shard whose first record is <= index; empty shards are skipped by the `<` below. */
    size_t lo = 0, hi = ds->n_shards;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->shards[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    while (index - ds->shards[lo].first >= ds->shards[lo].count)
        lo++; /* only when a later shard starts at the same number (empty shards) */
    const shard *s = &ds->shards[lo];
    uint64_t local = index - s->first;
    const uint8_t *e = s->entries + local * s->entry_size;
    out->shard = (uint32_t)lo;
    out->local = local;
    out->offset = stk__ld64(e + STK_FMT_E_OFFSET);
    out->checksum = stk__ld64(e + STK_FMT_E_CHECKSUM);
    uint64_t off = 0;
    for (uint32_t f = 0; f < STK_MAX_FIELDS; f++) {
        uint64_t fs = f < s->n_fields ? stk__ld32(e + STK_FMT_E_SIZES + 4 * f) : 0;
        out->field_off[f] = off;
        out->field_size[f] = fs;
        off += fs;
    }
    out->size = off;
    return STK_OK;
}

/* preadv the whole iovec array at off, resuming after short reads. */
static ssize_t preadv_full(int fd, struct iovec *iov, int n, uint64_t off)
{
    size_t total = 0;
    while (n > 0) {
        ssize_t got = preadv(fd, iov, n, (off_t)off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? -1 : (ssize_t)total;
        total += (size_t)got;
        off += (uint64_t)got;
        while (n > 0 && (size_t)got >= iov->iov_len) {
            got -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + got;
            iov->iov_len -= (size_t)got;
        }
    }
    return (ssize_t)total;
}

stk_status stk__dataset_read_fields(const stk_dataset *ds, uint64_t index, void *const dst[],
                                    const size_t cap[], bool verify, stk__recloc *loc, char *err,
                                    size_t err_size)
{
    stk__recloc l;
    stk_status rc = stk__dataset_locate(ds, index, &l, err, err_size);
    if (rc < 0)
        return rc;
    const shard *s = &ds->shards[l.shard];
    struct iovec iov[STK_MAX_FIELDS], keep[STK_MAX_FIELDS];
    int n = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        if (l.field_size[f] > cap[f])
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "%s record %llu (global %llu): field '%s' is %llu bytes, over "
                                  "the %zu-byte buffer",
                                  s->path, (unsigned long long)l.local, (unsigned long long)index,
                                  ds->fields[f].name, (unsigned long long)l.field_size[f], cap[f]);
        if (l.field_size[f] == 0)
            continue;
        if (n > 0 && (uint8_t *)iov[n - 1].iov_base + iov[n - 1].iov_len == dst[f]) {
            iov[n - 1].iov_len += (size_t)l.field_size[f]; /* adjacent: one piece, one-shot hash */
            continue;
        }
        iov[n].iov_base = dst[f];
        iov[n].iov_len = (size_t)l.field_size[f];
        n++;
    }
    memcpy(keep, iov, sizeof(*iov) * (size_t)n); /* preadv_full consumes iov */
    /* One syscall for all fields: they are contiguous in the file, scattered in memory. */
    ssize_t got = preadv_full(s->fd, iov, n, l.offset);
    if (got < 0)
        return stk__set_error(err, err_size, STK_EIO,
                              "%s record %llu (global %llu): read failed: "
                              "%s",
                              s->path, (unsigned long long)l.local, (unsigned long long)index,
                              strerror(errno));
    if ((uint64_t)got != l.size)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s record %llu (global %llu): short "
                              "read (file truncated since open?)",
                              s->path, (unsigned long long)l.local, (unsigned long long)index);
    if (verify) {
        uint64_t sum;
        if (n == 1) {
            sum = XXH3_64bits(keep[0].iov_base, keep[0].iov_len);
        } else {
            XXH3_state_t st;
            XXH3_64bits_reset(&st);
            for (int i = 0; i < n; i++)
                XXH3_64bits_update(&st, keep[i].iov_base, keep[i].iov_len);
            sum = XXH3_64bits_digest(&st);
        }
        if (sum != l.checksum)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s record %llu (global %llu): "
                                  "checksum mismatch (record corrupt)",
                                  s->path, (unsigned long long)l.local, (unsigned long long)index);
    }
    if (loc)
        *loc = l;
    return STK_OK;
}

stk_status stk_dataset_read(const stk_dataset *ds, uint64_t index, void *buf, size_t buf_size,
                            stk_record *out, char *errbuf, size_t errbuf_size)
{
    char local_err[STK_ERRMSG_SIZE];
    char *err = errbuf ? errbuf : local_err;
    size_t err_size = errbuf ? errbuf_size : sizeof(local_err);
    stk__recloc l;
    stk_status rc;
    if (!ds || !out || (!buf && buf_size)) {
        rc = stk__set_error(err, err_size, STK_EINVAL, "stk_dataset_read: NULL argument");
        goto fail;
    }
    rc = stk__dataset_locate(ds, index, &l, err, err_size);
    if (rc < 0)
        goto fail;
    if (l.size > buf_size) {
        rc = stk__set_error(err, err_size, STK_EINVAL,
                            "%s record %llu (global %llu): record is "
                            "%llu bytes, buffer only %zu",
                            ds->shards[l.shard].path, (unsigned long long)l.local,
                            (unsigned long long)index, (unsigned long long)l.size, buf_size);
        goto fail;
    }
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS];
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        dst[f] = (uint8_t *)buf + l.field_off[f];
        cap[f] = (size_t)l.field_size[f];
    }
    rc =
        stk__dataset_read_fields(ds, index, dst, cap, stk__dataset_verifies(ds), &l, err, err_size);
    if (rc < 0)
        goto fail;
    memset(out, 0, sizeof(*out));
    out->index = index;
    out->shard = l.shard;
    out->local = l.local;
    out->size = (size_t)l.size;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        out->field[f] = (const uint8_t *)buf + l.field_off[f];
        out->field_size[f] = (size_t)l.field_size[f];
    }
    return STK_OK;
fail:
    stk__last_error_copy(rc, err);
    return rc;
}

int64_t stk_record_i64(const stk_record *rec, size_t f)
{
    if (!rec || f >= STK_MAX_FIELDS || rec->field_size[f] != 8 || !rec->field[f])
        return 0;
    return (int64_t)stk__ld64(rec->field[f]);
}

float stk_record_f32(const stk_record *rec, size_t f)
{
    if (!rec || f >= STK_MAX_FIELDS || rec->field_size[f] != 4 || !rec->field[f])
        return 0.0f;
    uint32_t bits = stk__ld32(rec->field[f]);
    float v;
    memcpy(&v, &bits, 4);
    return v;
}
