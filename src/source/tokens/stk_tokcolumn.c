/*
 * stk_tokcolumn.c: a token column of a dataset whose records are documents (`.stk` shards that
 * stoker pack wrote from a token corpus, or any format with a field of token ids) as a token
 * corpus: document d is record d's field, the stream their concatenation.
 *
 * The field is `token_field=`, else "tokens", else the only bytes or integer array field. A
 * bytes field holds little-endian ids of token_bytes= (else the shard metadata's "token_bytes",
 * else 2); a 1-D integer array field (uint8, int16, int32, int64) holds ids of its dtype's size.
 * The documents' lengths come from the source's index without reading a record when it gives
 * field extents (`.stk`), else from one read of every record at open.
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* The token field of ds (STK_EINVAL naming the fields when none or several fit). */
static stk_status pick_field(const stk_dataset *ds, const char *name, uint32_t *out, char *err,
                             size_t err_size)
{
    const char *path = ds->n_files ? ds->files[0].path : ds->m->name;
    if (name) {
        for (uint32_t f = 0; f < ds->n_fields; f++)
            if (strcmp(ds->fields[f].name, name) == 0) {
                *out = f;
                return STK_OK;
            }
        return stk__set_error(err, err_size, STK_EINVAL, "%s: no field '%s' (token_field=)", path,
                              name);
    }
    int found = -1, n = 0;
    for (uint32_t f = 0; f < ds->n_fields; f++) {
        if (strcmp(ds->fields[f].name, "tokens") == 0) {
            *out = f;
            return STK_OK;
        }
        const stk_field *fd = &ds->fields[f];
        if (fd->kind == STK_FIELD_BYTES ||
            (fd->kind == STK_FIELD_ARRAY && fd->ndim == 1 && fd->dtype < STK_DTYPE_FLOAT16)) {
            found = (int)f;
            n++;
        }
    }
    if (n == 1) {
        *out = (uint32_t)found;
        return STK_OK;
    }
    char names[256] = "";
    size_t at = 0;
    for (uint32_t f = 0; f < ds->n_fields && at < sizeof(names); f++)
        at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", f ? ", " : "",
                               ds->fields[f].name);
    return stk__set_error(err, err_size, STK_EINVAL,
                          "%s: which field holds the token ids? %s (fields: %s); name it with "
                          "token_field=",
                          path, n ? "several could" : "none is named 'tokens' or could be", names);
}

/* Bytes per token of field f. */
static stk_status field_width(const stk_dataset *ds, uint32_t f, const stk_tokens_opts *o,
                              uint32_t *w, char *err, size_t err_size)
{
    const stk_field *fd = &ds->fields[f];
    const char *path = ds->n_files ? ds->files[0].path : ds->m->name;
    if (fd->kind == STK_FIELD_BYTES) {
        const char *v;
        size_t len;
        *w = o->token_bytes;
        if (!*w && ds->n_files && ds->files[0].metadata &&
            stk_json_member(ds->files[0].metadata, "token_bytes", &v, &len))
            *w = (uint32_t)strtoul(v, NULL, 10);
        if (!*w)
            *w = 2;
        if (*w != 1 && *w != 2 && *w != 4 && *w != 8)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: metadata says token_bytes %u (1, 2, 4 or 8)", path, *w);
        return STK_OK;
    }
    if (fd->kind == STK_FIELD_ARRAY && fd->ndim == 1 &&
        (fd->dtype == STK_DTYPE_UINT8 || fd->dtype == STK_DTYPE_INT16 ||
         fd->dtype == STK_DTYPE_INT32 || fd->dtype == STK_DTYPE_INT64)) {
        *w = (uint32_t)stk_dtype_size(fd->dtype);
        return STK_OK;
    }
    char type[64];
    stk__field_str(fd, type, sizeof(type));
    return stk__set_error(err, err_size, STK_EINVAL,
                          "%s: field '%s' is %s, not token ids (bytes, or a 1-D array of uint8, "
                          "int16, int32 or int64)",
                          path, fd->name, type);
}

/* Each record's token count into c->doc (prefix sums). */
static stk_status doc_lengths(stk__tokcorpus *c, char *err, size_t err_size)
{
    const stk_dataset *ds = c->col;
    stk_status rc = STK_OK;
    uint8_t *buf = NULL;
    stk__cursor *cur = NULL;
    if (!(c->doc = stk__malloc((size_t)(ds->count + 1) * sizeof(uint64_t))))
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory for %" PRIu64 " documents",
                              ds->count);
    uint64_t fixed = stk__field_fixed_size(&ds->fields[c->col_field]);
    c->doc[0] = 0;
    for (uint64_t d = 0; d < ds->count; d++) {
        uint64_t size = fixed;
        stk__file *f;
        stk__brange r;
        if (!fixed && c->col_extent && ds->m->field_extent(ds, d, c->col_field, &f, &r)) {
            size = r.len;
        } else if (!fixed) { /* no index to ask: read the record once */
            stk__recinfo info;
            if (!buf && !(buf = stk__malloc((size_t)STK_MAX(ds->max_record, 1))))
                STK_FAIL_E(STK_ENOMEM, "out of memory");
            if (!cur) /* a source's per-thread state (an LMDB transaction, ...) */
                STK_TRY(stk__dataset_cursor_open(ds, &cur, err, err_size));
            void *dst[STK_MAX_FIELDS];
            size_t cap[STK_MAX_FIELDS], at = 0;
            for (uint32_t k = 0; k < ds->n_fields; k++) {
                dst[k] = buf + at;
                cap[k] = (size_t)ds->field_max[k];
                at += cap[k];
            }
            STK_TRY(stk__dataset_read(ds, cur, d, dst, cap, 0, &info, err, err_size));
            size = info.field_size[c->col_field];
        }
        if (size % c->width) {
            char where[STK_ERRMSG_SIZE];
            stk_dataset_describe(ds, d, where, sizeof(where));
            STK_FAIL_E(STK_EFORMAT,
                       "%s: field '%s' holds %" PRIu64 " bytes, not a whole number of %u-byte "
                       "tokens",
                       where, ds->fields[c->col_field].name, size, c->width);
        }
        c->doc[d + 1] = c->doc[d] + size / c->width;
    }
    c->n_docs = ds->count;
    c->n_tokens = c->doc[ds->count];
    c->bounded = true;
fail:
    stk__dataset_cursor_close(ds, cur);
    stk__free(buf);
    return rc;
}

/* The column's files, shown as the wrapper's (stoker inspect). */
static stk_status copy_files(stk_dataset *ds, const stk_dataset *in, char *err, size_t err_size)
{
    STK_TRY_RET(stk__dataset_files_alloc(ds, in->n_files, err, err_size));
    for (size_t i = 0; i < in->n_files; i++) {
        ds->files[i] = in->files[i];
        ds->files[i].path = stk__strdup(in->files[i].path);
        ds->files[i].metadata = stk__strdup(in->files[i].metadata ? in->files[i].metadata : "{}");
        if (!ds->files[i].path || !ds->files[i].metadata)
            return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    }
    return STK_OK;
}

stk_status stk__tokcol_wrap(stk_dataset **dsp, const stk_tokens_opts *o, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk_dataset *in = *dsp, *ds = NULL;
    stk__tokds *t = NULL;
    uint32_t field;
    *dsp = NULL;
    STK_TRY(pick_field(in, o->token_field, &field, err, err_size));
    if (!(ds = stk__calloc(1, sizeof(*ds))) || !(t = stk__calloc(1, sizeof(*t))))
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    ds->m = &stk__src_tokcol;
    ds->impl = t;
    ds->flags = in->flags;
    stk__tokcorpus *c = &t->c;
    c->format = "token-column";
    c->col = in; /* owned from here: closed with ds */
    in = NULL;
    c->col_field = field;
    c->col_extent = c->col->m->field_extent != NULL;
    STK_TRY(field_width(c->col, field, o, &c->width, err, err_size));
    if (!(c->col->flags & STK_DATASET_NO_VERIFY) &&
        !(c->col_checked = stk__calloc((size_t)(c->col->count / 64 + 1), sizeof(uint64_t))))
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    STK_TRY(doc_lengths(c, err, err_size));
    STK_TRY(copy_files(ds, c->col, err, err_size));
    STK_TRY(stk__tokds_setup(ds, t, o, err, err_size));
    *dsp = ds;
    return STK_OK;
fail:
    stk_dataset_close(in);
    stk_dataset_close(ds);
    if (!ds)
        stk__free(t);
    return rc;
}

/* Not in stk_sources.def: stk_tokens_open makes one around a dataset of another format. */
const stk__source_methods stk__src_tokcol = {
    .name = "token-column",
    .summary = "the token ids of a dataset's records (a .stk token column)",
    .close = stk__tokds_close,
    .cursor_open = stk__tokds_cursor_open,
    .cursor_close = stk__tokds_cursor_close,
    .read = stk__tokds_read,
    .read_keyed = stk__tokds_read_keyed,
    .describe = stk__tokds_describe,
};
