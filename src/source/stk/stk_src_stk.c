/*
 * stk_src_stk.c: `.stk` shards as a record source (docs/format.md is the spec, stk_format.h
 * its C mirror; the writer is format/stk_writer.c).
 *
 * Per shard: one open byte-source file and a copy of the index in memory (read at open, so a
 * shard truncated or rewritten while open gives a read error naming the file, never SIGBUS, and a
 * remote byte source needs one request for it). Everything a later read relies on is validated
 * at open: magic, version, footer, header and index checksums, every record's extent inside the
 * data region, and record offsets increasing without overlap. Records are read with one
 * scattered read straight into the caller's buffers.
 *
 * Checksum policy (owned here): a record's XXH3-64 is checked on its first read and remembered in
 * a bitmap (one bit per record, atomics; calloc'd pages stay untouched until a bit in them is
 * set), so later epochs re-read at copy speed; STK__READ_VERIFY_ALL checks again,
 * STK__READ_NO_VERIFY and STK_DATASET_NO_VERIFY never check. A field read in place (field_open:
 * an audio crop's bytes) leaves the check to field_open, which reads the whole record on its
 * first read, checks it and lends the field from memory, then lends the shard's file (later
 * epochs read only the crop's bytes).
 *
 * Datasets (docs/format.md "Directories"): a directory holding stoker-manifest.json is the
 * shards the manifest lists, nothing else (other *.stk files there are ignored: leftovers of an
 * interrupted clean-up); each must exist (as NAME or, after a pack killed just after its commit,
 * NAME.part) with the listed record count, index checksum and metadata. A directory without a
 * manifest is its *.stk files (packs before manifests). Shards of different datasets (another
 * "dataset_id" or "classes" in their writer metadata) are refused together unless the dataset is
 * opened with STK_DATASET_CONCAT.
 */
#include "source/stk/stk_format.h"
#include "source/stk_source.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

typedef struct shard {
    stk__file *f;
    uint64_t data_offset;
    uint64_t index_offset;
    uint64_t index_sum;
    uint64_t field_max[STK_MAX_FIELDS];
    uint64_t max_record;
    uint8_t *index;         /* the index region, copied */
    const uint8_t *entries; /* first record entry, inside index */
    uint64_t entry_size;
    stk_field fields[STK_MAX_FIELDS];
    uint32_t n_fields;
} shard;

typedef struct stkds {
    shard *shards;
    size_t n;
    _Atomic uint64_t *verified; /* one bit per record; NULL when never verifying */
} stkds;

/* ---- detection ---- */

static const char *const stk_suffixes[] = {".stk", NULL};

static int stk_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (n >= STK_FMT_MAGIC_SIZE && memcmp(head, STK_FMT_MAGIC, STK_FMT_MAGIC_SIZE) == 0)
        return 2;
    size_t len = strlen(path);
    if (!st->is_dir)
        return len > 4 && strcmp(path + len - 4, ".stk") == 0;
    stk__stat mst;
    char *m = stk__path_join(path, STK_MANIFEST_NAME);
    bool manifest = m && stk__vfs_stat(m, &mst, NULL, 0) == STK_OK;
    stk__free(m);
    if (!m)
        return -1;
    if (manifest)
        return 2;                                  /* a packed directory: its manifest says so */
    return stk__paths_dir_has(path, stk_suffixes); /* a directory of shards */
}

/* ---- open ---- */

/* Read exactly `size` bytes at `off`; a short file is "truncated" (in `what`). */
static stk_status read_at(stk__file *f, uint64_t off, void *buf, size_t size, const char *what,
                          char *err, size_t err_size)
{
    if (off > f->size || size > f->size - off)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: truncated shard (end of file in %s)",
                              f->path, what);
    return stk__vfs_read(f, off, buf, size, err, err_size);
}

/* Parse and check the header bytes (checksum already verified); *meta gets a copy of the
 * metadata JSON. */
static stk_status header_parse(shard *s, stk__srcfile *sf, const uint8_t *h, uint64_t header_size,
                               char *err, size_t err_size)
{
    const char *p = sf->path;
    sf->count = stk__ld64(h + STK_FMT_H_COUNT);
    s->data_offset = stk__ld64(h + STK_FMT_H_DATA_OFFSET);
    s->n_fields = stk__ld32(h + STK_FMT_H_N_FIELDS);
    uint32_t align = stk__ld32(h + STK_FMT_H_ALIGN);
    uint32_t meta_size = stk__ld32(h + STK_FMT_H_META_SIZE);
    if (s->n_fields < 1 || s->n_fields > STK_MAX_FIELDS)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: corrupt header (%u fields)", p,
                              s->n_fields);
    if (meta_size > STK_FMT_MAX_META || stk__fmt_header_size(s->n_fields, meta_size) != header_size)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: corrupt header (size mismatch)", p);
    if (align == 0 || (align & (align - 1)) || align > STK_FMT_MAX_ALIGN ||
        s->data_offset % align || s->data_offset < header_size)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt header (alignment %u, data at %" PRIu64 ")", p, align,
                              s->data_offset);
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
        if (!stk__field_valid(&f, why, sizeof(why)))
            return stk__set_error(err, err_size, STK_EFORMAT, "%s: corrupt schema (%s)", p, why);
        s->fields[i] = stk__field_canonical(&f);
        for (uint32_t j = 0; j < i; j++)
            if (strcmp(s->fields[i].name, s->fields[j].name) == 0)
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "%s: corrupt schema (duplicate '%s')", p, s->fields[i].name);
    }
    sf->metadata = stk__malloc((size_t)meta_size + 1);
    if (!sf->metadata)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", p);
    memcpy(sf->metadata, h + STK_FMT_H_FIXED + (size_t)s->n_fields * STK_FMT_FIELD_SIZE, meta_size);
    sf->metadata[meta_size] = '\0';
    if (!stk_json_valid(sf->metadata)) /* docs/format.md: UTF-8 JSON text */
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt header (writer metadata is not valid JSON)", p);
    return STK_OK;
}

/* Check every index entry: extent inside the data region, records in increasing order without
 * overlap, fixed-size fields of the right size, stored maxima equal to the entries' maxima.
 * After this a read never leaves the data region and no two records share bytes. */
static stk_status index_validate(shard *s, const stk__srcfile *sf, char *err, size_t err_size)
{
    const char *p = sf->path;
    const uint8_t *idx = s->index;
    if (memcmp(idx, STK_FMT_INDEX_MAGIC, 8) != 0 || stk__ld64(idx + STK_FMT_I_COUNT) != sf->count ||
        stk__ld32(idx + STK_FMT_I_N_FIELDS) != s->n_fields)
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: corrupt index (header disagrees)",
                              p);
    s->max_record = stk__ld64(idx + STK_FMT_I_MAX_RECORD);
    uint64_t fixed[STK_MAX_FIELDS], seen[STK_MAX_FIELDS] = {0}, seen_record = 0;
    for (uint32_t f = 0; f < s->n_fields; f++) {
        s->field_max[f] = stk__ld64(idx + STK_FMT_I_FIXED + 8 * f);
        fixed[f] = stk__field_fixed_size(&s->fields[f]);
    }
    uint64_t prev_end = s->data_offset;
    for (uint64_t r = 0; r < sf->count; r++) {
        const uint8_t *e = s->entries + r * s->entry_size;
        uint64_t off = stk__ld64(e + STK_FMT_E_OFFSET), size = 0;
        for (uint32_t f = 0; f < s->n_fields; f++) {
            uint64_t fs = stk__ld32(e + STK_FMT_E_SIZES + 4 * f);
            if (fixed[f] && fs != fixed[f])
                return stk__set_error(err, err_size, STK_EFORMAT,
                                      "%s: corrupt index (record %" PRIu64
                                      ": field '%s' is %" PRIu64 " bytes, expected %" PRIu64 ")",
                                      p, r, s->fields[f].name, fs, fixed[f]);
            seen[f] = STK_MAX(seen[f], fs);
            size += fs;
        }
        /* sizes are u32 and at most 16 fields: no overflow; off is checked before subtracting */
        if (off < s->data_offset || off > s->index_offset || size > s->index_offset - off)
            return stk__set_error(
                err, err_size, STK_EFORMAT,
                "%s: corrupt index (record %" PRIu64 " lies outside the data region)", p, r);
        if (off < prev_end) /* docs/format.md: offsets increase, records do not overlap */
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: corrupt index (record %" PRIu64 " at byte %" PRIu64
                                  " overlaps the record before it, which ends at byte %" PRIu64 ")",
                                  p, r, off, prev_end);
        prev_end = off + size;
        seen_record = STK_MAX(seen_record, size);
    }
    if (seen_record != s->max_record || memcmp(seen, s->field_max, 8 * s->n_fields) != 0)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: corrupt index (field maxima disagree with the entries)", p);
    return STK_OK;
}

/* Open one shard file and validate it completely (everything but the record checksums). */
static stk_status shard_open(shard *s, stk__srcfile *sf, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    uint8_t *hdr = NULL;
    uint8_t fixed[STK_FMT_H_FIXED];
    uint8_t foot[STK_FMT_FOOTER_SIZE];
    const char *path = sf->path;
    STK_TRY(stk__vfs_open(path, &s->f, err, err_size));
    sf->size = s->f->size;

    /* Magic and version first: a future version may change everything after them. */
    size_t head = (size_t)STK_MIN(sf->size, sizeof(fixed));
    STK_TRY(read_at(s->f, 0, fixed, head, "header", err, err_size));
    if (memcmp(fixed, STK_FMT_MAGIC, STK_MIN(head, STK_FMT_MAGIC_SIZE)) != 0)
        STK_FAIL_E(STK_EFORMAT, "%s: bad magic (not a .stk shard)", path);
    if (head >= STK_FMT_H_VERSION + 4) {
        sf->version = stk__ld32(fixed + STK_FMT_H_VERSION);
        if (sf->version > STK_FMT_VERSION)
            STK_FAIL_E(STK_ENOTSUP, "%s: format version %u is newer than this stoker (reads %u)",
                       path, sf->version, STK_FMT_VERSION);
        if (sf->version == 0)
            STK_FAIL_E(STK_EFORMAT, "%s: corrupt header (format version 0)", path);
    }

    /* Footer: present and intact, else the file is truncated or was never finished (a file
     * shorter than a header and a footer has none: this includes a cut inside the magic). */
    bool has_footer = sf->size >= STK_FMT_H_FIXED + 8 + STK_FMT_FOOTER_SIZE;
    if (has_footer)
        STK_TRY(
            read_at(s->f, sf->size - sizeof(foot), foot, sizeof(foot), "footer", err, err_size));
    if (!has_footer || memcmp(foot + STK_FMT_T_MAGIC, STK_FMT_FOOTER_MAGIC, 8) != 0)
        STK_FAIL_E(STK_EFORMAT, "%s: truncated or incomplete shard (footer missing)", path);
    if (XXH3_64bits(foot, STK_FMT_T_SUM) != stk__ld64(foot + STK_FMT_T_SUM) ||
        stk__ld32(foot + STK_FMT_T_VERSION) != sf->version)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: truncated or incomplete shard (footer damaged: checksum mismatch)", path);

    /* Header: its size bounds everything else, its checksum must match the footer's copy. */
    uint64_t header_size = stk__ld32(fixed + STK_FMT_H_HEADER_SIZE);
    uint64_t avail = sf->size - STK_FMT_FOOTER_SIZE;
    if (header_size < STK_FMT_H_FIXED + 8 || header_size % 8 || header_size > avail)
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt header (size %" PRIu64 ")", path, header_size);
    hdr = stk__malloc((size_t)header_size);
    if (!hdr)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
    STK_TRY(read_at(s->f, 0, hdr, (size_t)header_size, "header", err, err_size));
    uint64_t header_sum = XXH3_64bits(hdr, (size_t)header_size - 8);
    if (header_sum != stk__ld64(hdr + header_size - 8) ||
        header_sum != stk__ld64(foot + STK_FMT_T_HEADER_SUM))
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt header (checksum mismatch)", path);
    STK_TRY(header_parse(s, sf, hdr, header_size, err, err_size));
    if (stk__ld64(foot + STK_FMT_T_COUNT) != sf->count)
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt footer (record count disagrees with header)", path);

    /* Index region: exactly between the data region and the footer, sized by the count. */
    s->index_offset = stk__ld64(foot + STK_FMT_T_INDEX_OFFSET);
    uint64_t index_size = stk__ld64(foot + STK_FMT_T_INDEX_SIZE);
    s->entry_size = stk__fmt_entry_size(s->n_fields);
    uint64_t ifixed = stk__fmt_index_fixed(s->n_fields);
    if (s->index_offset < s->data_offset || s->index_offset > avail ||
        index_size != avail - s->index_offset || index_size < ifixed ||
        (index_size - ifixed) / s->entry_size != sf->count ||
        (index_size - ifixed) % s->entry_size != 0)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: corrupt footer (index at %" PRIu64 ", %" PRIu64 " bytes, for %" PRIu64
                   " records)",
                   path, s->index_offset, index_size, sf->count);
    s->index = stk__malloc((size_t)index_size);
    if (!s->index)
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory for the %" PRIu64 "-byte index", path,
                   index_size);
    STK_TRY(read_at(s->f, s->index_offset, s->index, (size_t)index_size, "index", err, err_size));
    s->index_sum = XXH3_64bits(s->index, (size_t)index_size);
    if (s->index_sum != stk__ld64(foot + STK_FMT_T_INDEX_SUM))
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt index (checksum mismatch)", path);
    s->entries = s->index + ifixed;
    STK_TRY(index_validate(s, sf, err, err_size));
    sf->data_size = s->index_offset - s->data_offset;
fail:
    stk__free(hdr);
    return rc;
}

static void stk_close(stk_dataset *ds)
{
    stkds *d = ds->impl;
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++) {
        stk__vfs_close(d->shards[i].f);
        stk__free(d->shards[i].index);
    }
    stk__free(d->shards);
    stk__free((void *)d->verified);
    stk__free(d);
    ds->impl = NULL;
}

/* Hash of the dataset's identity: total count, then each shard's count and index checksum. */
static uint64_t fingerprint(const stk_dataset *ds, const stkds *d)
{
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    stk__fp_add_u64(h, ds->count);
    for (size_t i = 0; i < d->n; i++) {
        stk__fp_add_u64(h, ds->files[i].count);
        stk__fp_add_u64(h, d->shards[i].index_sum);
    }
    return stk__fp_end(h);
}

/* What a manifest says about one shard of the list (on = listed by a manifest). */
typedef struct want {
    bool on;
    uint64_t count, index_sum, meta_sum;
    char manifest[STK_ERRMSG_SIZE / 2]; /* the manifest's path, for messages */
} want;

/* Read a whole small file through the byte source (NUL-terminated); *out freed by the caller. */
static stk_status read_small(const char *path, uint64_t limit, char **out, char *err,
                             size_t err_size)
{
    stk__file *f = NULL;
    stk_status rc = stk__vfs_open(path, &f, err, err_size);
    *out = NULL;
    if (rc < 0)
        return rc;
    if (f->size > limit)
        rc = stk__set_error(err, err_size, STK_EFORMAT, "%s: too large (%" PRIu64 " bytes)", path,
                            f->size);
    else if (!(*out = stk__malloc((size_t)f->size + 1)))
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    else if ((rc = stk__vfs_read(f, 0, *out, (size_t)f->size, err, err_size)) == STK_OK)
        (*out)[f->size] = '\0';
    stk__vfs_close(f);
    if (rc < 0) {
        stk__free(*out);
        *out = NULL;
    }
    return rc;
}

/* A hex u64 member ("key": "0123456789abcdef") or a number member ("key": 12). */
static bool manifest_u64(const char *json, const char *key, bool hex, uint64_t *v)
{
    const char *p;
    size_t len;
    char end;
    if (!stk_json_member(json, key, &p, &len))
        return false;
    if (hex)
        return len == 18 && sscanf(p, "\"%16" SCNx64 "%c", v, &end) == 2 && end == '"';
    return len > 0 && len < 21 && p[0] >= '0' && p[0] <= '9' && sscanf(p, "%" SCNu64, v) == 1;
}

/* Add the shards that DIR's manifest lists to `list` (and what it says of them to `*wants`, grown
 * to list->n). Returns STK_OK with *found false when DIR has no manifest. */
static stk_status manifest_load(const char *dir, stk__strlist *list, want **wants, bool *found,
                                char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    char *text = NULL, *path = stk__path_join(dir, STK_MANIFEST_NAME), *file = NULL;
    stk__stat st;
    *found = false;
    if (!path)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", dir);
    if (stk__vfs_stat(path, &st, NULL, 0) != STK_OK)
        goto fail; /* no manifest */
    *found = true;
    STK_TRY(read_small(path, 16ull * STK_FMT_MAX_META, &text, err, err_size));
    /* Its last member is the checksum of every byte before that member's line. */
    const char *ck = NULL;
    for (const char *q = text; (q = strstr(q, "\n  \"checksum\": \"")); q++)
        ck = q;
    uint64_t sum = 0, version = 0, id = 0, records = 0, n_shards = 0, meta_sum = 0;
    char end;
    if (!ck || sscanf(ck + 16, "%16" SCNx64 "%c", &sum, &end) != 2 || end != '"' ||
        sum != XXH3_64bits(text, (size_t)(ck - text) + 1) || !stk_json_valid(text))
        STK_FAIL_E(STK_EFORMAT,
                   "%s: damaged or edited manifest (checksum mismatch); repack the dataset, or "
                   "give its shard files by name to read them without it",
                   path);
    if (!manifest_u64(text, "stoker_manifest", false, &version) || version == 0)
        STK_FAIL_E(STK_EFORMAT, "%s: not a stoker manifest", path);
    if (version > STK_MANIFEST_VERSION)
        STK_FAIL_E(STK_ENOTSUP, "%s: manifest version %" PRIu64 " is newer than this stoker", path,
                   version);
    const char *sh;
    size_t sh_len;
    if (!manifest_u64(text, "dataset_id", true, &id) ||
        !manifest_u64(text, "records", false, &records) ||
        !manifest_u64(text, "shard_count", false, &n_shards) ||
        !manifest_u64(text, "metadata_checksum", true, &meta_sum) ||
        !stk_json_member(text, "shards", &sh, &sh_len) || *sh != '[')
        STK_FAIL_E(STK_EFORMAT, "%s: corrupt manifest (a member is missing)", path);
    uint64_t seen = 0, total = 0;
    const char *q = sh;
    while ((q = strstr(q, "{\"file\": \"")) && q < sh + sh_len) {
        char name[256];
        uint64_t count, isum;
        int used = 0;
        if (sscanf(q,
                   "{\"file\": \"%255[^\"\\/]\", \"records\": %" SCNu64
                   ", \"index_checksum\": \"%16" SCNx64 "\"}%n",
                   name, &count, &isum, &used) != 3 ||
            used == 0 || name[0] == '.')
            STK_FAIL_E(STK_EFORMAT, "%s: corrupt manifest (shard entry %" PRIu64 ")", path, seen);
        q += used;
        seen++;
        total += count;
        stk__free(file);
        if (!(file = stk__path_join(dir, name)))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        if (stk__vfs_stat(file, &st, NULL, 0) != STK_OK) {
            /* a pack killed after its commit, before renaming the parts */
            size_t n = strlen(file);
            char *part = stk__realloc(file, n + sizeof(STK_PART_SUFFIX));
            if (!part)
                STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
            file = part;
            memcpy(file + n, STK_PART_SUFFIX, sizeof(STK_PART_SUFFIX));
            if (stk__vfs_stat(file, &st, NULL, 0) != STK_OK) {
                file[n] = '\0';
                STK_FAIL_E(STK_EIO,
                           "%s: missing, but the manifest %s lists it (%" PRIu64
                           " records): the dataset is incomplete",
                           file, path, count);
            }
        }
        if (stk__strlist_add(list, file) < 0)
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        want *w = stk__realloc(*wants, list->n * sizeof(**wants));
        if (!w)
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", path);
        *wants = w;
        want *x = &w[list->n - 1];
        memset(x, 0, sizeof(*x));
        x->on = true;
        x->count = count;
        x->index_sum = isum;
        x->meta_sum = meta_sum;
        snprintf(x->manifest, sizeof(x->manifest), "%s", path);
    }
    if (seen != n_shards || total != records || seen == 0)
        STK_FAIL_E(STK_EFORMAT,
                   "%s: corrupt manifest (%" PRIu64 " shards of %" PRIu64 " records listed, "
                   "%" PRIu64 " of %" PRIu64 " announced)",
                   path, seen, total, n_shards, records);
fail:
    stk__free(file);
    stk__free(text);
    stk__free(path);
    return rc;
}

/* Whether shards a and b (writer metadata) are of one dataset: same "dataset_id" and same
 * "classes" (each compared as text; absent equals absent). *what says which differs. */
static bool same_dataset(const char *a, const char *b, const char **what)
{
    static const char *const keys[] = {"dataset_id", "classes"};
    for (int k = 0; k < 2; k++) {
        const char *va = "", *vb = "";
        size_t la = 0, lb = 0;
        stk_json_member(a, keys[k], &va, &la);
        stk_json_member(b, keys[k], &vb, &lb);
        if (la != lb || memcmp(va, vb, la) != 0) {
            *what = k == 0 ? "another dataset_id" : "another class list";
            return false;
        }
    }
    return true;
}

static stk_status stk_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                           size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist list = {0};
    want *wants = NULL;
    for (size_t i = 0; i < n_paths; i++) { /* a directory: its manifest, else its shards */
        stk__stat st;
        bool manifest = false,
             is_dir = stk__vfs_stat(paths[i], &st, NULL, 0) == STK_OK && st.is_dir;
        size_t listed = list.n;
        if (is_dir)
            STK_TRY(manifest_load(paths[i], &list, &wants, &manifest, err, err_size));
        if (manifest) {
            continue;
        } else if (is_dir) {
            /* directories named *.stk too: opening one names the problem */
            STK_TRY(stk__paths_dir_files(paths[i], stk_suffixes,
                                         ".stk shards (make them with `stoker pack SRC DIR`, or "
                                         "give format= for another format)",
                                         true, &list, err, err_size));
        } else if (stk__strlist_add(&list, paths[i]) < 0) {
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[i]);
        }
        want *w = stk__realloc(wants, (list.n ? list.n : 1) * sizeof(*wants));
        if (!w)
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[i]);
        wants = w;
        for (size_t j = listed; j < list.n; j++)
            wants[j].on = false;
    }
    if (list.n > UINT32_MAX)
        STK_FAIL_E(STK_ELIMIT, "%s: too many shards (%zu)", paths[0], list.n);
    stkds *d = stk__calloc(1, sizeof(*d));
    if (!d || !(d->shards = stk__calloc(list.n, sizeof(*d->shards)))) {
        stk__free(d);
        STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[0]);
    }
    ds->impl = d;
    STK_TRY(stk__dataset_files_alloc(ds, list.n, err, err_size));
    for (size_t i = 0; i < list.n; i++) {
        shard *s = &d->shards[i];
        stk__srcfile *sf = &ds->files[i];
        d->n = i + 1; /* so a failure closes what this shard opened */
        if (!(sf->path = stk__strdup(list.v[i])))
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", list.v[i]);
        STK_TRY(shard_open(s, sf, err, err_size));
        const shard *s0 = &d->shards[0];
        bool same = s->n_fields == s0->n_fields;
        for (uint32_t f = 0; same && f < s->n_fields; f++)
            same = stk__field_equal(&s->fields[f], &s0->fields[f]);
        if (!same)
            STK_FAIL_E(STK_EINVAL,
                       "%s: schema differs from %s (all shards of a dataset must have the same "
                       "fields)",
                       sf->path, ds->files[0].path);
        const want *w = &wants[i];
        if (w->on && (sf->count != w->count || s->index_sum != w->index_sum))
            STK_FAIL_E(STK_EFORMAT,
                       "%s: %" PRIu64 " records, index checksum %016" PRIx64 ", but the manifest "
                       "%s lists %" PRIu64 " records, %016" PRIx64
                       " (a shard of another pack, or changed since)",
                       sf->path, sf->count, s->index_sum, w->manifest, w->count, w->index_sum);
        if (w->on && XXH3_64bits(sf->metadata, strlen(sf->metadata)) != w->meta_sum)
            STK_FAIL_E(STK_EFORMAT,
                       "%s: writer metadata differs from the manifest %s (a shard of another "
                       "pack)",
                       sf->path, w->manifest);
        const char *what;
        if (!(ds->flags & STK_DATASET_CONCAT) &&
            !same_dataset(ds->files[0].metadata, sf->metadata, &what))
            STK_FAIL_E(STK_EINVAL,
                       "%s: a shard of a different dataset than %s (%s in its metadata); shards "
                       "of different packs are not mixed unless asked (concat: "
                       "STK_DATASET_CONCAT, `--concat`, Dataset(..., concat=True))",
                       sf->path, ds->files[0].path, what);
        if (sf->count > UINT64_MAX - ds->count)
            STK_FAIL_E(STK_ELIMIT, "%s: too many records", sf->path);
        sf->first = ds->count;
        ds->count += sf->count;
        for (uint32_t f = 0; f < s->n_fields; f++)
            ds->field_max[f] = STK_MAX(ds->field_max[f], s->field_max[f]);
        ds->max_record = STK_MAX(ds->max_record, s->max_record);
    }
    ds->n_fields = d->shards[0].n_fields;
    memcpy(ds->fields, d->shards[0].fields, sizeof(ds->fields));
    ds->fingerprint = fingerprint(ds, d);
    if (!(ds->flags & STK_DATASET_NO_VERIFY) && ds->count) {
        d->verified = stk__calloc((size_t)((ds->count + 63) / 64), sizeof(uint64_t));
        if (!d->verified)
            STK_FAIL_E(STK_ENOMEM, "out of memory for the %" PRIu64 "-record verify bitmap",
                       ds->count);
    }
fail:
    stk__free(wants);
    stk__strlist_free(&list);
    return rc;
}

/* ---- reading ---- */

static void stk_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const stkds *d = ds->impl;
    uint64_t local;
    size_t s = stk__dataset_file_of(ds, i, &local);
    const uint8_t *e = d->shards[s].entries + local * d->shards[s].entry_size;
    snprintf(buf, size, "%s record %" PRIu64 " (global %" PRIu64 ") at byte %" PRIu64,
             ds->files[s].path, local, i, stk__ld64(e + STK_FMT_E_OFFSET));
}

static stk_status read_fields(const stk_dataset *ds, uint64_t i, void *const dst[], char *err,
                              size_t err_size);

static stk_status stk_read(const stk_dataset *ds, stk__cursor *cur, uint64_t index,
                           void *const dst[], const size_t cap[], unsigned flags,
                           stk__recinfo *info, char *err, size_t err_size)
{
    (void)cur;
    const stkds *d = ds->impl;
    char where[STK_ERRMSG_SIZE];
    uint64_t local;
    if (index >= ds->count)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %" PRIu64 " out of range (dataset has %" PRIu64 " records)",
                              index, ds->count);
    size_t si = stk__dataset_file_of(ds, index, &local);
    const shard *s = &d->shards[si];
    const uint8_t *e = s->entries + local * s->entry_size;
    memset(info, 0, sizeof(*info));
    info->file = (uint32_t)si;
    info->local = local;
    info->offset = stk__ld64(e + STK_FMT_E_OFFSET);
    stk__iov iov[STK_MAX_FIELDS];
    int n = 0;
    bool in_place = false;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        uint64_t fs = stk__ld32(e + STK_FMT_E_SIZES + 4 * f);
        info->field_size[f] = fs;
        info->size += fs;
        if (!dst[f]) { /* read in place (stk_field_open checks the record) */
            in_place = true;
            continue;
        }
        if (fs > cap[f]) {
            stk_describe(ds, index, where, sizeof(where));
            return stk__set_error(err, err_size, STK_ELIMIT,
                                  "%s: field '%s' is %" PRIu64 " bytes, over the %zu-byte buffer",
                                  where, ds->fields[f].name, fs, cap[f]);
        }
        if (fs == 0)
            continue;
        if (n > 0 && (uint8_t *)iov[n - 1].base + iov[n - 1].len == dst[f]) {
            iov[n - 1].len += (size_t)fs; /* adjacent: one piece, one-shot hash */
            continue;
        }
        iov[n].base = dst[f];
        iov[n].len = (size_t)fs;
        n++;
    }
    if (in_place) /* each field at its own offset: stk_field_extent's */
        return read_fields(ds, index, dst, err, err_size);
    /* One request for all fields: contiguous in the file, scattered in memory. */
    stk_status rc = s->f->vfs->read(s->f, info->offset, iov, n, err, err_size);
    if (rc < 0) {
        stk_describe(ds, index, where, sizeof(where));
        return stk__source_read_error(rc, where, s->f->path, err, err_size);
    }
    /* Checksums: on a record's first read only (unless asked), see the top of the file. */
    _Atomic uint64_t *word = d->verified ? &d->verified[index / 64] : NULL;
    uint64_t bit = 1ULL << (index % 64);
    bool verify = word && !(flags & STK__READ_NO_VERIFY) &&
                  ((flags & STK__READ_VERIFY_ALL) ||
                   !(atomic_load_explicit(word, memory_order_relaxed) & bit));
    if (verify) {
        uint64_t sum;
        if (n == 1) {
            sum = XXH3_64bits(iov[0].base, iov[0].len);
        } else {
            XXH3_state_t st;
            XXH3_64bits_reset(&st);
            for (int i = 0; i < n; i++)
                XXH3_64bits_update(&st, iov[i].base, iov[i].len);
            sum = XXH3_64bits_digest(&st);
        }
        if (sum != stk__ld64(e + STK_FMT_E_CHECKSUM)) {
            stk_describe(ds, index, where, sizeof(where));
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: checksum mismatch (record corrupt)", where);
        }
        atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
    }
    return STK_OK;
}

/* Byte ranges of the records, per shard, to the shards' byte sources (remote ones read them ahead).
 */
static bool stk_extent(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r)
{
    const stkds *d = ds->impl;
    uint64_t local;
    const shard *s = &d->shards[stk__dataset_file_of(ds, i, &local)];
    const uint8_t *e = s->entries + local * s->entry_size;
    uint64_t size = 0;
    for (uint32_t k = 0; k < ds->n_fields; k++)
        size += stk__ld32(e + STK_FMT_E_SIZES + 4 * k);
    *f = s->f;
    *r = (stk__brange){stk__ld64(e + STK_FMT_E_OFFSET), size};
    return true;
}

/* Field f of record i: the record's bytes hold the fields back to back, in schema order. */
static bool stk_field_extent(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                             stk__brange *r)
{
    const stkds *d = ds->impl;
    uint64_t local;
    const shard *s = &d->shards[stk__dataset_file_of(ds, i, &local)];
    const uint8_t *e = s->entries + local * s->entry_size;
    uint64_t off = stk__ld64(e + STK_FMT_E_OFFSET);
    for (size_t k = 0; k < f; k++)
        off += stk__ld32(e + STK_FMT_E_SIZES + 4 * k);
    *file = s->f;
    *r = (stk__brange){off, stk__ld32(e + STK_FMT_E_SIZES + 4 * f)};
    return true;
}

/* The fields of record i with a buffer (dst[f] not NULL), each read on its own (a field between
 * them is read in place): no checksum (stk_field_open's). */
static stk_status read_fields(const stk_dataset *ds, uint64_t i, void *const dst[], char *err,
                              size_t err_size)
{
    for (size_t f = 0; f < ds->n_fields; f++) {
        stk__file *file;
        stk__brange r;
        stk_field_extent(ds, i, f, &file, &r);
        if (!dst[f] || !r.len)
            continue;
        stk_status rc = stk__vfs_read(file, r.off, dst[f], (size_t)r.len, err, err_size);
        if (rc < 0) {
            char where[STK_ERRMSG_SIZE];
            stk_describe(ds, i, where, sizeof(where));
            return stk__source_read_error(rc, where, file->path, err, err_size);
        }
    }
    return STK_OK;
}

/* Field f of record i read in place: on the record's first read (unless verification is off) the
 * whole record is read, its checksum checked, and the field lent from memory (no second read of
 * its bytes); later, the shard's file is lent. */
static stk_status stk_field_open(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                                 stk__brange *r, uint64_t *bytes, char *err, size_t err_size)
{
    *bytes = 0;
    const stkds *d = ds->impl;
    stk__file *sf;
    stk__brange rec;
    char where[STK_ERRMSG_SIZE];
    *file = NULL;
    if (i >= ds->count || f >= ds->n_fields)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field %zu of record %" PRIu64 " cannot be read in place", f, i);
    stk_extent(ds, i, &sf, &rec);
    stk_field_extent(ds, i, f, &sf, r);
    _Atomic uint64_t *word = d->verified ? &d->verified[i / 64] : NULL;
    uint64_t bit = 1ULL << (i % 64);
    if (!word || (atomic_load_explicit(word, memory_order_relaxed) & bit))
        return stk__vfs_borrow(sf, file, err, err_size);
    uint64_t local;
    const shard *s = &d->shards[stk__dataset_file_of(ds, i, &local)];
    const uint8_t *e = s->entries + local * s->entry_size;
    uint8_t *buf = stk__malloc(rec.len ? (size_t)rec.len : 1);
    if (!buf)
        return stk__set_error(err, err_size, STK_ENOMEM,
                              "out of memory for record %" PRIu64 " (%" PRIu64 " bytes)", i,
                              rec.len);
    stk_status rc = stk__vfs_read(sf, rec.off, buf, (size_t)rec.len, err, err_size);
    if (rc < 0) {
        stk__free(buf);
        stk_describe(ds, i, where, sizeof(where));
        return stk__source_read_error(rc, where, sf->path, err, err_size);
    }
    *bytes = rec.len;
    if (XXH3_64bits(buf, (size_t)rec.len) != stk__ld64(e + STK_FMT_E_CHECKSUM)) {
        stk__free(buf);
        stk_describe(ds, i, where, sizeof(where));
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: checksum mismatch (record corrupt)",
                              where);
    }
    atomic_fetch_or_explicit(word, bit, memory_order_relaxed);
    memmove(buf, buf + (r->off - rec.off), (size_t)r->len);
    uint64_t at = r->off;
    *r = (stk__brange){0, r->len};
    return stk__vfs_memfile_of(buf, r->len, sf, at, file, err, err_size);
}

const stk__source_methods stk__src_stk = {
    .name = "stk",
    .summary = ".stk shards: files, a directory of them, a glob or a list",
    .probe = stk_probe,
    .open = stk_open,
    .close = stk_close,
    .read = stk_read,
    .describe = stk_describe,
    .extent = stk_extent,
    .field_extent = stk_field_extent,
    .field_open = stk_field_open,
};
