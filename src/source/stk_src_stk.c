/*
 * stk_src_stk.c: `.stk` shards as a record source (docs/format.md is the spec, format/stk_format.h
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
 * STK__READ_NO_VERIFY and STK_DATASET_NO_VERIFY never check.
 */
#include "format/stk_format.h"
#include "source/stk_source.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <inttypes.h>
#include <stdatomic.h>
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

static int stk_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    if (n >= STK_FMT_MAGIC_SIZE && memcmp(head, STK_FMT_MAGIC, STK_FMT_MAGIC_SIZE) == 0)
        return 2;
    size_t len = strlen(path);
    if (!st->is_dir)
        return len > 4 && strcmp(path + len - 4, ".stk") == 0;
    stk__strlist l = {0};
    stk_status rc = stk__paths_list_dir(path, ".stk", false, &l, NULL, 0);
    bool any = rc == STK_OK && l.n > 0;
    stk__strlist_free(&l);
    return rc == STK_ENOMEM ? -1 : any; /* a directory of shards */
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

static stk_status stk_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                           size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist list = {0};
    for (size_t i = 0; i < n_paths; i++) { /* a directory stands for its shards, by name */
        stk__stat st;
        if (stk__vfs_stat(paths[i], &st, NULL, 0) == STK_OK && st.is_dir) {
            size_t before = list.n;
            /* directories named *.stk too: opening one names the problem */
            STK_TRY(stk__paths_list_dir(paths[i], ".stk", true, &list, err, err_size));
            if (list.n == before)
                STK_FAIL_E(STK_EINVAL,
                           "%s: no .stk shards in this directory (make them with `stoker pack SRC "
                           "%s`, or give format= for another format)",
                           paths[i], paths[i]);
        } else if (stk__strlist_add(&list, paths[i]) < 0) {
            STK_FAIL_E(STK_ENOMEM, "%s: out of memory", paths[i]);
        }
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
    stk__strlist_free(&list);
    return rc;
}

/* ---- reading ---- */

/* The shard holding record `index` (< count): the last one whose first record is <= index,
 * skipping empty shards; *local receives the record's number in it. */
static size_t locate(const stk_dataset *ds, uint64_t index, uint64_t *local)
{
    size_t lo = 0, hi = ds->n_files;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ds->files[mid].first <= index)
            lo = mid;
        else
            hi = mid;
    }
    while (index - ds->files[lo].first >= ds->files[lo].count)
        lo++; /* only when a later shard starts at the same number (empty shards) */
    *local = index - ds->files[lo].first;
    return lo;
}

static void stk_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const stkds *d = ds->impl;
    uint64_t local;
    size_t s = locate(ds, i, &local);
    const uint8_t *e = d->shards[s].entries + local * d->shards[s].entry_size;
    snprintf(buf, size, "%s record %" PRIu64 " (global %" PRIu64 ") at byte %" PRIu64,
             ds->files[s].path, local, i, stk__ld64(e + STK_FMT_E_OFFSET));
}

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
    size_t si = locate(ds, index, &local);
    const shard *s = &d->shards[si];
    const uint8_t *e = s->entries + local * s->entry_size;
    memset(info, 0, sizeof(*info));
    info->file = (uint32_t)si;
    info->local = local;
    info->offset = stk__ld64(e + STK_FMT_E_OFFSET);
    stk__iov iov[STK_MAX_FIELDS];
    int n = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        uint64_t fs = stk__ld32(e + STK_FMT_E_SIZES + 4 * f);
        info->field_size[f] = fs;
        info->size += fs;
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

const stk__source_methods stk__src_stk = {
    .name = "stk",
    .summary = ".stk shards: files, a directory of them, a glob or a list",
    .probe = stk_probe,
    .open = stk_open,
    .close = stk_close,
    .read = stk_read,
    .describe = stk_describe,
};
