/*
 * stk_pack.c: convert any dataset (any record source) to `.stk` shards: the one packer behind
 * `stoker pack` and Python's stoker.pack / pack_image_folder, so both follow the same shard-size
 * rule and the same output rules.
 *
 * Output: OUT ending in ".stk" without a shard size is one shard; otherwise OUT is a directory
 * receiving shard-00000.stk, shard-00001.stk, ... A new shard starts before one would exceed the
 * shard size (default 1 GiB), counting the index and footer it will end with (docs/format.md).
 * Records keep every field of the source, in order; the writer metadata is the source's first
 * file's metadata with "tool" added. Each shard appears under its name only when complete (the
 * writer's temporary name + rename); on failure the shards of this run and a directory it created
 * are removed. With `force`, an existing OUT file is replaced, and the other `*.stk` files of an
 * existing OUT directory are removed after every new shard is written.
 */
#include "format/stk_format.h"
#include "stk_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SHARD_SIZE (1ull << 30)

void stk_pack_opts_init(stk_pack_opts *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof(*opts));
    opts->struct_size = sizeof(*opts);
    opts->align = 64;
}

typedef struct packer {
    const stk_dataset *ds;
    const char *out;
    stk_pack_opts o;
    bool dir_mode, made_dir;
    char *meta;
    stk_writer *w;
    char cur[PATH_MAX];
    char **written;
    size_t n_written, cap_written;
    char err[STK_ERRMSG_SIZE];
} packer;

/* The source's first-file metadata with "tool" added (a JSON object), or NULL on OOM. */
static char *pack_metadata(const stk_dataset *ds, const char *tool)
{
    stk_shard_info si = {.struct_size = sizeof(si)};
    const char *m = stk_dataset_shard(ds, 0, &si) == STK_OK && si.metadata ? si.metadata : "{}";
    size_t len = strlen(m);
    while (len && (m[len - 1] == ' ' || m[len - 1] == '\n'))
        len--;
    const char *body = strchr(m, '{');
    bool object = body && len && m[len - 1] == '}';
    bool has_tool = strstr(m, "\"tool\"") != NULL;
    char t[128];
    snprintf(t, sizeof(t), "%s", tool && *tool ? tool : "stoker pack");
    for (char *c = t; *c; c++) /* keep the JSON valid whatever the caller wrote */
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = ' ';
    size_t size = len + strlen(t) + 64;
    char *s = stk__malloc(size);
    if (!s)
        return NULL;
    if (!object)
        snprintf(s, size, "{\"tool\": \"%s\"}", t);
    else if (has_tool)
        snprintf(s, size, "%.*s", (int)len, m);
    else {
        /* "{...}" -> "{..., "tool": "..."}" ("{}" -> "{"tool": "..."}") */
        const char *q = body + 1;
        while (*q == ' ' || *q == '\n')
            q++;
        bool empty = q == m + len - 1;
        snprintf(s, size, "%.*s%s\"tool\": \"%s\"}", (int)(len - 1), m, empty ? "" : ", ", t);
    }
    return s;
}

static bool dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    bool empty = true;
    while (d && empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    if (d)
        closedir(d);
    return empty;
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(tmp, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

/* Decide the output mode and check (or prepare) OUT. */
static stk_status prepare_out(packer *p)
{
    size_t n = strlen(p->out);
    struct stat st;
    bool exists = stat(p->out, &st) == 0;
    p->dir_mode = p->o.shard_size || n < 4 || strcmp(p->out + n - 4, ".stk") != 0 ||
                  (exists && S_ISDIR(st.st_mode));
    if (!p->dir_mode) {
        if (exists && !p->o.force)
            return stk__set_error(p->err, sizeof(p->err), STK_ESTATE,
                                  "%s already exists (use --force to replace it)", p->out);
        return STK_OK;
    }
    if (exists && !S_ISDIR(st.st_mode)) {
        if (!p->o.force)
            return stk__set_error(p->err, sizeof(p->err), STK_ESTATE,
                                  "%s already exists and is not a directory (use --force to "
                                  "replace it)",
                                  p->out);
        if (unlink(p->out) != 0)
            return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s: cannot remove: %s", p->out,
                                  strerror(errno));
        exists = false;
    }
    if (exists && !dir_is_empty(p->out) && !p->o.force)
        return stk__set_error(p->err, sizeof(p->err), STK_ESTATE,
                              "%s is not empty (use --force to write into it; its old .stk files "
                              "are then replaced)",
                              p->out);
    if (!exists) {
        if (make_dirs(p->out) != 0)
            return stk__set_error(p->err, sizeof(p->err), STK_EIO,
                                  "%s: cannot create directory: %s", p->out, strerror(errno));
        p->made_dir = true;
    }
    return STK_OK;
}

static stk_status open_shard(packer *p)
{
    if (p->dir_mode)
        snprintf(p->cur, sizeof(p->cur), "%s%sshard-%05zu.stk", p->out,
                 p->out[strlen(p->out) - 1] == '/' ? "" : "/", p->n_written);
    else
        snprintf(p->cur, sizeof(p->cur), "%s", p->out);
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    stk_field fields[STK_MAX_FIELDS];
    size_t nf = stk_dataset_n_fields(p->ds);
    for (size_t f = 0; f < nf; f++)
        fields[f] = *stk_dataset_field(p->ds, f);
    o.fields = fields;
    o.n_fields = nf;
    o.metadata_json = p->meta;
    o.align = p->o.align;
    if (stk_writer_open(p->cur, &o, &p->w) != STK_OK)
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s", stk_last_errmsg());
    return STK_OK;
}

static stk_status close_shard(packer *p)
{
    stk_writer *w = p->w;
    p->w = NULL;
    if (stk_writer_close(w) != STK_OK)
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s", stk_last_errmsg());
    if (p->n_written == p->cap_written) {
        size_t cap = p->cap_written ? 2 * p->cap_written : 16;
        char **v = stk__realloc(p->written, cap * sizeof(*v));
        if (!v)
            return stk__set_error(p->err, sizeof(p->err), STK_ENOMEM, "out of memory");
        p->written = v;
        p->cap_written = cap;
    }
    if (!(p->written[p->n_written] = stk__strdup(p->cur)))
        return stk__set_error(p->err, sizeof(p->err), STK_ENOMEM, "out of memory");
    p->n_written++;
    return STK_OK;
}

/* Remove OUT's *.stk files that this run did not write (after --force). */
static void remove_stale(packer *p)
{
    DIR *d = opendir(p->out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".stk") != 0)
            continue;
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", p->out, e->d_name);
        bool ours = false;
        for (size_t i = 0; i < p->n_written && !ours; i++) {
            const char *base = strrchr(p->written[i], '/');
            ours = strcmp(base ? base + 1 : p->written[i], e->d_name) == 0;
        }
        if (!ours)
            unlink(path);
    }
    if (d)
        closedir(d);
}

/* File size of the shard being written once it holds n records whose data ends at data_end:
 * index (fixed part, per-field maxima, one entry per record) and footer (docs/format.md). */
static uint64_t shard_file_size(uint64_t data_end, uint64_t n, uint32_t nf)
{
    return STK_ALIGN_UP(data_end, 8) + stk__fmt_index_fixed(nf) + stk__fmt_entry_size(nf) * n +
           STK_FMT_FOOTER_SIZE;
}

stk_status stk_pack(const stk_dataset *ds, const char *out, const stk_pack_opts *opts_in,
                    stk_pack_result *res)
{
    stk_status rc = STK_OK;
    packer p;
    uint8_t *buf = NULL;
    memset(&p, 0, sizeof(p));
    stk_pack_opts_init(&p.o);
    if (!ds || !out || !*out || (opts_in && !stk__opts_load(&p.o, sizeof(p.o), opts_in)))
        return stk__set_last_error(STK_EINVAL, "stk_pack: NULL argument or options not "
                                               "initialised with stk_pack_opts_init");
    if (res && res->struct_size < STK__STRUCT_MIN)
        return stk__set_last_error(STK_EINVAL, "stk_pack: result.struct_size not set");
    if (p.o.align == 0 || (p.o.align & (p.o.align - 1)) || p.o.align > STK_FMT_MAX_ALIGN)
        return stk__set_last_error(STK_EINVAL, "align %u is not a power of two in 1..%u", p.o.align,
                                   STK_FMT_MAX_ALIGN);
    p.ds = ds;
    p.out = out;
    uint32_t nf = (uint32_t)stk_dataset_n_fields(ds);
    uint64_t n = stk_dataset_count(ds), total_bytes = 0;
    p.meta = pack_metadata(ds, p.o.tool);
    size_t cap[STK_MAX_FIELDS], room = 0;
    for (uint32_t f = 0; f < nf; f++)
        room += cap[f] = (size_t)stk_dataset_field_max_size(ds, f);
    buf = stk__malloc(room ? room : 1);
    if (!p.meta || !buf)
        STK_FAIL(p.err, STK_ENOMEM, "%s: out of memory", out);
    STK_TRY(prepare_out(&p));
    uint64_t header = stk__fmt_header_size(nf, strlen(p.meta));
    uint64_t data_offset = STK_ALIGN_UP(header, p.o.align);
    uint64_t limit = p.o.shard_size ? p.o.shard_size : (p.dir_mode ? DEFAULT_SHARD_SIZE : 0);
    STK_TRY(open_shard(&p));
    for (uint64_t i = 0; i < n; i++) {
        stk_record r;
        if ((rc = stk_dataset_read(ds, i, buf, room, &r, p.err, sizeof(p.err))) < 0)
            goto fail;
        uint64_t count = stk_writer_count(p.w);
        uint64_t start = STK_ALIGN_UP(data_offset + stk_writer_data_size(p.w), p.o.align);
        if (limit && count > 0 && shard_file_size(start + r.size, count + 1, nf) > limit) {
            STK_TRY(close_shard(&p));
            STK_TRY(open_shard(&p));
        }
        stk_value v[STK_MAX_FIELDS];
        memset(v, 0, sizeof(v));
        for (uint32_t f = 0; f < nf; f++) {
            v[f].data = r.field[f];
            v[f].size = r.field_size[f];
            v[f].i64 = stk_record_i64(&r, f);
            v[f].f32 = stk_record_f32(&r, f);
        }
        if (stk_writer_add(p.w, v) != STK_OK) {
            char where[STK_ERRMSG_SIZE];
            stk_dataset_describe(ds, i, where, sizeof(where));
            STK_FAIL(p.err, STK_EIO, "%s: %s", where, stk_writer_errmsg(p.w));
        }
        total_bytes += r.size;
        if (p.o.progress)
            p.o.progress(p.o.progress_ctx, i + 1, n, total_bytes);
    }
    STK_TRY(close_shard(&p));
    if (p.dir_mode && p.o.force)
        remove_stale(&p);
    if (res) {
        stk_pack_result full;
        memset(&full, 0, sizeof(full));
        full.records = n;
        full.shards = p.n_written;
        full.bytes = total_bytes;
        for (size_t i = 0; i < p.n_written; i++) {
            struct stat st;
            if (stat(p.written[i], &st) == 0)
                full.file_bytes += (uint64_t)st.st_size;
        }
        stk__out_store(res, &full, sizeof(full));
    }
fail:
    if (rc < 0) {
        /* Leave nothing half-made: the open shard, the shards of this run, a new OUT dir. */
        stk_writer_abort(p.w);
        for (size_t i = 0; i < p.n_written; i++)
            unlink(p.written[i]);
        if (p.made_dir)
            rmdir(out);
        stk__last_error_copy(rc, p.err);
    }
    for (size_t i = 0; i < p.n_written; i++)
        stk__free(p.written[i]);
    stk__free(p.written);
    stk__free(p.meta);
    stk__free(buf);
    return rc;
}
