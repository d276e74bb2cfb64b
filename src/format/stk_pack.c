/*
 * stk_pack.c: convert any dataset (any record source) to `.stk` shards: the one packer behind
 * `stoker pack` and Python's stoker.pack / pack_image_folder, so both follow the same shard-size
 * rule and the same output rules.
 *
 * Output: OUT ending in ".stk" without a shard size is one shard; otherwise OUT is a directory
 * receiving shard-00000.stk, shard-00001.stk, ... A new shard starts before one would exceed the
 * shard size (default 1 GiB), counting the index and footer it will end with (docs/format.md).
 * Records keep every field of the source, in order; the writer metadata is the source's first
 * file's metadata with "tool" and a fresh random "dataset_id" added.
 *
 * A directory is published as a whole (docs/format.md "Directories"): the shards are written as
 * NAME.stk.part (invisible to readers), then the manifest OUT/stoker-manifest.json (shards,
 * record counts, index checksums, dataset id, metadata checksum) is written to a temporary name
 * and renamed into place: that rename is the commit. Only then are the parts renamed to NAME.stk
 * and the files of an older dataset in OUT removed. A failure or a kill before the commit leaves
 * OUT exactly as it was (plus, after a kill, *.part files that readers ignore and the next pack
 * removes); after it, readers see the complete new dataset. Over an existing dataset the new
 * shards get names of their own (shard-ID-00000.stk), so no old file is touched before the
 * commit. A single-file OUT appears under its name only when complete (the writer's temporary
 * name + rename); with `force` an existing OUT file is replaced at that rename. A directory
 * asked for where OUT is a file (`force`) is written as OUT.pack-ID.tmp next to it and swapped
 * with the file at the commit (swap_in), so a failure before leaves the old file as it was. An
 * existing directory OUT is always written as a directory (whatever its name), by the rules
 * above.
 */
#include "source/stk/stk_format.h"
#include "stk_internal.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEFAULT_SHARD_SIZE (1ull << 30)

void stk_pack_opts_init_sized(stk_pack_opts *opts, size_t struct_size)
{
    stk_pack_opts full = {.struct_size = sizeof(full), .align = 64};
    stk__init_store(opts, struct_size, &full, sizeof(full));
}

/* A finished shard of this run. */
typedef struct packed {
    char *name;     /* final name inside OUT (dir mode) or OUT itself */
    char *path;     /* where it is now: OUT/NAME.part before the commit */
    uint64_t count; /* records */
    uint64_t index_sum;
} packed;

typedef struct packer {
    const stk_dataset *ds;
    const char *out;    /* where the shards go: OUT, or the staging directory (swap_file) */
    const char *target; /* OUT as given */
    char staging[PATH_MAX];
    stk_pack_opts o;
    bool dir_mode, made_dir, own_names;
    bool swap_file; /* --force with OUT a file and a directory asked: staged, then swapped */
    uint64_t id;    /* the dataset id */
    char *meta;
    stk_writer *w;
    char name[96];      /* the open shard's final name */
    char cur[PATH_MAX]; /* the open shard's path */
    packed *done;
    size_t n_done, cap_done;
    char err[STK_ERRMSG_SIZE];
} packer;

/* A random 64-bit dataset id (never 0). */
static uint64_t random_id(void)
{
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != (ssize_t)sizeof(id))
        id = stk__mix64(stk__now_ns() ^ ((uint64_t)getpid() << 32));
    return id ? id : 1;
}

/* The source's first-file metadata (a JSON object; anything else is dropped) without its
 * "dataset_id", with "tool" (unless present) and "dataset_id": "<id>" added; NULL on OOM. */
static char *pack_metadata(const stk_dataset *ds, const char *tool, uint64_t id)
{
    stk_shard_info si = {.struct_size = sizeof(si)};
    const char *m = stk_dataset_shard(ds, 0, &si) == STK_OK && si.metadata ? si.metadata : "{}";
    const char *open = strchr(m, '{'), *close = strrchr(m, '}');
    bool object = stk_json_valid(m) && open && close;
    const char *v;
    size_t vlen;
    bool has_tool = object && stk_json_member(m, "tool", &v, &vlen);
    /* the object's members, without a "dataset_id" member: [open+1, cut) + [resume, close) */
    const char *cut = close, *resume = close;
    if (object && stk_json_member(m, "dataset_id", &v, &vlen)) {
        const char *k = NULL;
        for (const char *q = open; (q = strstr(q, "\"dataset_id\"")) && q < v; q++)
            k = q;
        cut = k;
        resume = v + vlen;
        while (*resume == ' ' || *resume == '\n' || *resume == '\t' || *resume == '\r')
            resume++;
        if (*resume == ',')
            resume++;
        else /* the last member: drop the comma before it */
            while (cut > open + 1 && strchr(" \n\t\r,", cut[-1]))
                cut--;
    }
    char t[128];
    snprintf(t, sizeof(t), "%s", tool && *tool ? tool : "stoker pack");
    for (char *c = t; *c; c++) /* keep the JSON valid whatever the caller wrote */
        if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
            *c = ' ';
    size_t size = strlen(m) + strlen(t) + 96;
    char *s = stk__malloc(size);
    if (!s)
        return NULL;
    int n = 0;
    if (object) {
        n = snprintf(s, size, "{%.*s%.*s", (int)(cut - open - 1), open + 1, (int)(close - resume),
                     resume);
        /* trim, then a separator when members remain */
        while (n > 1 && strchr(" \n\t\r", s[n - 1]))
            n--;
        s[n] = '\0';
        const char *q = s + 1;
        while (*q && strchr(" \n\t\r", *q))
            q++;
        if (*q)
            n += snprintf(s + n, size - (size_t)n, ", ");
    } else {
        n = snprintf(s, size, "{");
    }
    if (!has_tool)
        n += snprintf(s + n, size - (size_t)n, "\"tool\": \"%s\", ", t);
    snprintf(s + n, size - (size_t)n, "\"dataset_id\": \"%016" PRIx64 "\"}", id);
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
        /* The old file stays until the commit: the directory is written next to it and swapped
         * in (swap_in). */
        if (snprintf(p->staging, sizeof(p->staging), "%s.pack-%016" PRIx64 ".tmp", p->out, p->id) >=
            (int)sizeof(p->staging))
            return stk__set_error(p->err, sizeof(p->err), STK_EINVAL, "%s: path too long", p->out);
        p->swap_file = true;
        p->out = p->staging;
        exists = false;
    }
    if (exists && !dir_is_empty(p->out) && !p->o.force)
        return stk__set_error(p->err, sizeof(p->err), STK_ESTATE,
                              "%s is not empty (use --force to write into it; its old .stk files "
                              "are then replaced)",
                              p->out);
    /* Over an existing dataset (or the leftovers of a killed pack) the new shards get names of
     * their own, so that no old file is touched before the commit. */
    p->own_names = exists && !dir_is_empty(p->out);
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
    if (p->dir_mode) {
        if (p->own_names)
            snprintf(p->name, sizeof(p->name), "shard-%08" PRIx64 "-%05zu.stk", p->id >> 32,
                     p->n_done);
        else
            snprintf(p->name, sizeof(p->name), "shard-%05zu.stk", p->n_done);
        snprintf(p->cur, sizeof(p->cur), "%s%s%s" STK_PART_SUFFIX, p->out,
                 p->out[strlen(p->out) - 1] == '/' ? "" : "/", p->name);
    } else {
        snprintf(p->name, sizeof(p->name), "%s", p->out);
        snprintf(p->cur, sizeof(p->cur), "%s", p->out);
    }
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

/* The index checksum of a finished shard, from its footer (0 when unreadable: the manifest
 * then disagrees with the shard and readers say so). */
static uint64_t shard_index_sum(const char *path)
{
    uint8_t foot[STK_FMT_FOOTER_SIZE];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    uint64_t sum = 0;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(foot) &&
        pread(fd, foot, sizeof(foot), st.st_size - (off_t)sizeof(foot)) == (ssize_t)sizeof(foot))
        sum = stk__ld64(foot + STK_FMT_T_INDEX_SUM);
    if (fd >= 0)
        close(fd);
    return sum;
}

static stk_status close_shard(packer *p)
{
    stk_writer *w = p->w;
    p->w = NULL;
    uint64_t count = stk_writer_n_records(w);
    if (stk_writer_close(w) != STK_OK)
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s", stk_last_errmsg());
    if (p->n_done == p->cap_done) {
        size_t cap = p->cap_done ? 2 * p->cap_done : 16;
        packed *v = stk__realloc(p->done, cap * sizeof(*v));
        if (!v) {
            unlink(p->cur);
            return stk__set_error(p->err, sizeof(p->err), STK_ENOMEM, "out of memory");
        }
        p->done = v;
        p->cap_done = cap;
    }
    packed *d = &p->done[p->n_done];
    d->name = stk__strdup(p->name);
    d->path = stk__strdup(p->cur);
    if (!d->name || !d->path) {
        stk__free(d->name);
        stk__free(d->path);
        unlink(p->cur);
        return stk__set_error(p->err, sizeof(p->err), STK_ENOMEM, "out of memory");
    }
    d->count = count;
    d->index_sum = shard_index_sum(p->cur);
    p->n_done++;
    return STK_OK;
}

/* OUT/NAME (one slash), into buf. */
static void out_path(const packer *p, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s%s%s", p->out, p->out[strlen(p->out) - 1] == '/' ? "" : "/", name);
}

/* The manifest's text (docs/format.md "Directories"), its last member the XXH3-64 of every
 * byte before that member's line. NULL on OOM. */
static char *manifest_text(const packer *p, uint64_t records)
{
    size_t size = 512 + 6 * strlen(p->meta);
    for (size_t i = 0; i < p->n_done; i++)
        size += 6 * strlen(p->done[i].name) + 128;
    char *s = stk__malloc(size), *q = s;
    if (!s)
        return NULL;
    q += sprintf(q,
                 "{\n  \"stoker_manifest\": %d,\n  \"dataset_id\": \"%016" PRIx64
                 "\",\n  \"records\": %" PRIu64 ",\n  \"shard_count\": %zu,\n"
                 "  \"metadata_checksum\": \"%016" PRIx64 "\",\n  \"metadata\": ",
                 STK_MANIFEST_VERSION, p->id, records, p->n_done,
                 (uint64_t)XXH3_64bits(p->meta, strlen(p->meta)));
    q = stk__json_put(q, p->meta);
    q += sprintf(q, ",\n  \"shards\": [\n");
    for (size_t i = 0; i < p->n_done; i++) {
        q += sprintf(q, "    {\"file\": ");
        q = stk__json_put(q, p->done[i].name);
        q += sprintf(q, ", \"records\": %" PRIu64 ", \"index_checksum\": \"%016" PRIx64 "\"}%s\n",
                     p->done[i].count, p->done[i].index_sum, i + 1 < p->n_done ? "," : "");
    }
    q += sprintf(q, "  ],\n");
    sprintf(q, "  \"checksum\": \"%016" PRIx64 "\"\n}\n",
            (uint64_t)XXH3_64bits(s, (size_t)(q - s)));
    return s;
}

/* The commit: the manifest written to a temporary name, synced, renamed into place. */
static stk_status write_manifest(packer *p, uint64_t records)
{
    char path[PATH_MAX], tmp[PATH_MAX + 32];
    out_path(p, STK_MANIFEST_NAME, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    char *text = manifest_text(p, records);
    if (!text)
        return stk__set_error(p->err, sizeof(p->err), STK_ENOMEM, "%s: out of memory", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    bool ok = fd >= 0 && stk__write_full(fd, text, strlen(text)) && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        e = errno;
    }
    stk__free(text);
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        e = errno;
    }
    if (!ok) {
        unlink(tmp);
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s: cannot write: %s", path,
                              strerror(e));
    }
    stk__fsync_parent(path);
    return STK_OK;
}

/* After the commit: the parts under their names, then OUT's files that are not this dataset's
 * (older shards, parts and temporary files of killed packs) removed. Best effort: a part left
 * unrenamed is still read (the manifest accepts NAME.part). */
static void publish(packer *p)
{
    for (size_t i = 0; i < p->n_done; i++) {
        char final[PATH_MAX];
        out_path(p, p->done[i].name, final, sizeof(final));
        if (rename(p->done[i].path, final) == 0) {
            stk__free(p->done[i].path);
            p->done[i].path = stk__strdup(final); /* NULL (OOM) only loses file_bytes */
        }
    }
    DIR *d = opendir(p->out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *n = e->d_name;
        size_t len = strlen(n);
        bool shard = len > 4 && strcmp(n + len - 4, ".stk") == 0;
        bool part = len > 9 && strcmp(n + len - 9, ".stk" STK_PART_SUFFIX) == 0;
        bool tmp = strstr(n, ".stk.tmp.") || strstr(n, ".stk" STK_PART_SUFFIX ".tmp.") ||
                   strncmp(n, STK_MANIFEST_NAME ".tmp.", strlen(STK_MANIFEST_NAME) + 5) == 0;
        bool ours = false;
        for (size_t i = 0; i < p->n_done && !ours; i++)
            ours = strcmp(p->done[i].name, n) == 0;
        if ((shard || part || tmp) && !ours) {
            char path[PATH_MAX];
            out_path(p, n, path, sizeof(path));
            unlink(path);
        }
    }
    if (d)
        closedir(d);
    char manifest[PATH_MAX];
    out_path(p, STK_MANIFEST_NAME, manifest, sizeof(manifest));
    stk__fsync_parent(manifest);
}

/* The commit of a directory replacing a file: the staged directory and the old file exchange
 * names in one step (renameat2 RENAME_EXCHANGE), then the old file, now under the staging name,
 * is removed. Where the file system cannot exchange, the old file is removed just before the
 * rename (the only window in which OUT is absent). Afterwards p->out is OUT. */
static stk_status swap_in(packer *p)
{
    bool swapped = renameat2(AT_FDCWD, p->staging, AT_FDCWD, p->target, RENAME_EXCHANGE) == 0;
    if (swapped) {
        unlink(p->staging); /* the old file */
    } else if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s: cannot move %s into place: %s",
                              p->target, p->staging, strerror(errno));
    } else if ((unlink(p->target) != 0 && errno != ENOENT) || rename(p->staging, p->target) != 0) {
        return stk__set_error(p->err, sizeof(p->err), STK_EIO, "%s: cannot move %s into place: %s",
                              p->target, p->staging, strerror(errno));
    }
    stk__fsync_parent(p->target);
    p->out = p->target;
    for (size_t i = 0; i < p->n_done; i++) {
        char final[PATH_MAX];
        out_path(p, p->done[i].name, final, sizeof(final));
        stk__free(p->done[i].path);
        p->done[i].path = stk__strdup(final); /* NULL (OOM) only loses file_bytes */
    }
    return STK_OK;
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
    p.out = p.target = out;
    uint32_t nf = (uint32_t)stk_dataset_n_fields(ds);
    uint64_t n = stk_dataset_n_records(ds), total_bytes = 0;
    p.id = random_id();
    p.meta = pack_metadata(ds, p.o.tool, p.id);
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
        stk_record_init(&r);
        if ((rc = stk_dataset_read(ds, i, buf, room, &r)) < 0) {
            snprintf(p.err, sizeof(p.err), "%s", stk_last_errmsg());
            goto fail;
        }
        uint64_t count = stk_writer_n_records(p.w);
        uint64_t start = STK_ALIGN_UP(data_offset + stk_writer_data_size(p.w), p.o.align);
        if (limit && count > 0 && shard_file_size(start + r.size, count + 1, nf) > limit) {
            STK_TRY(close_shard(&p));
            STK_TRY(open_shard(&p));
        }
        stk_value v[STK_MAX_FIELDS];
        for (uint32_t f = 0; f < nf; f++) {
            stk_value_init(&v[f]);
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
    if (p.dir_mode) {
        STK_TRY(write_manifest(&p, n)); /* the commit (of a staged directory: swap_in) */
        publish(&p);
        if (p.swap_file)
            STK_TRY(swap_in(&p));
    }
    if (res) {
        stk_pack_result full;
        memset(&full, 0, sizeof(full));
        full.records = n;
        full.shards = p.n_done;
        full.bytes = total_bytes;
        for (size_t i = 0; i < p.n_done; i++) {
            struct stat st;
            if (p.done[i].path && stat(p.done[i].path, &st) == 0)
                full.file_bytes += (uint64_t)st.st_size;
        }
        stk__out_store(res, &full, sizeof(full));
    }
fail:
    if (rc < 0) {
        /* Before the commit (a failure cannot come after it): leave nothing of this run, the
         * open shard, the finished parts, a new OUT dir; an old dataset in OUT is untouched. */
        stk_writer_abort(p.w);
        for (size_t i = 0; i < p.n_done; i++)
            unlink(p.done[i].path);
        if (p.swap_file && p.out == p.staging) { /* the staged manifest, if written */
            char m[PATH_MAX + 32];
            out_path(&p, STK_MANIFEST_NAME, m, sizeof(m));
            unlink(m);
        }
        if (p.made_dir)
            rmdir(p.out);
        stk__last_error_copy(rc, p.err);
    }
    for (size_t i = 0; i < p.n_done; i++) {
        stk__free(p.done[i].name);
        stk__free(p.done[i].path);
    }
    stk__free(p.done);
    stk__free(p.meta);
    stk__free(buf);
    return rc;
}
