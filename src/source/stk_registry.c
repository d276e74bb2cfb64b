/*
 * stk_registry.c: the registry of record sources (stk_sources.def: one line per format), format
 * detection, and opening a dataset (stk_dataset_open_v2; closing is the seam's, stk_source.c): the
 * one place that knows every format, above them all.
 *
 * Detection, in one place: the arguments are expanded (lists, brace ranges, globs); each path is
 * stat'ed and, for a file, its first bytes read; every source scores it (2: magic bytes, 1: name
 * or directory layout, 0: not mine) and the best score wins, ties going to the earlier source in
 * stk_sources.def. All paths of a dataset must be of one format. `format=` skips the scoring (the
 * source still validates what it opens).
 */
#include "io/stk_vfs_http.h"
#include "source/stk_source.h"

#include <inttypes.h>
#include <string.h>

#define HEAD_SIZE 64 /* bytes read from each file for detection */

/* The sources, each defined by its format (`const stk__source_methods stk__src_NAME`), known here
 * only, above them all. */
#define STK_SOURCE(name) extern const stk__source_methods stk__src_##name;
#include "source/stk_sources.def"
#undef STK_SOURCE

#define STK_SOURCE(name) &stk__src_##name,
static const stk__source_methods *const sources[] = {
#include "source/stk_sources.def"
    NULL};
#undef STK_SOURCE
#define N_SOURCES (sizeof(sources) / sizeof(sources[0]) - 1)

size_t stk_n_formats(void)
{
    return N_SOURCES;
}

const char *stk_format_name(size_t i)
{
    return i < N_SOURCES ? sources[i]->name : NULL;
}

const char *stk_format_summary(size_t i)
{
    return i < N_SOURCES ? sources[i]->summary : NULL;
}

/* "stk, npy, ..., imagefolder": every format's name, into buf (stoker.formats() and
 * docs/formats.md describe them; the descriptions outgrew one error message). */
static const char *format_list(char *buf, size_t size)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_SOURCES && n < size; i++) {
        int k = snprintf(buf + n, size - n, "%s%s", i ? ", " : "", sources[i]->name);
        if (k < 0)
            break;
        n += (size_t)k;
    }
    return buf;
}

/* The source for one path: the best probe score; NULL when none claims it. */
static const stk__source_methods *detect(const char *path, bool tokens, char *err, size_t err_size,
                                         stk_status *rc)
{
    stk__stat st;
    uint8_t head[HEAD_SIZE];
    size_t n = 0;
    *rc = stk__vfs_stat(path, &st, err, err_size);
    if (*rc < 0)
        return NULL;
    bool oom = false;
    if (!st.is_dir && st.is_regular && st.size > 0) {
        stk__file *f = NULL;
        n = (size_t)STK_MIN(st.size, sizeof(head));
        stk_status orc = stk__vfs_open(path, &f, NULL, 0);
        if (orc != STK_OK || stk__vfs_read(f, 0, head, n, NULL, 0))
            n = 0; /* unreadable: decide by name; opening it reports the reason */
        oom = orc == STK_ENOMEM;
        stk__vfs_close(f);
    }
    const stk__source_methods *best = NULL;
    int best_score = 0;
    /* For stk_tokens_open a token format that claims the path at all wins (a .npy of token ids
     * is numpy-tokens, not npy); otherwise, or when none does, every format competes. */
    for (int pass = tokens ? 0 : 1; pass < 2 && !best; pass++) {
        for (size_t i = 0; i < N_SOURCES && !oom; i++) {
            if (pass == 0 && !sources[i]->tokens)
                continue;
            int s = sources[i]->probe(path, &st, head, n);
            oom = s < 0;
            if (s > best_score) {
                best_score = s;
                best = sources[i];
            }
        }
    }
    if (oom) {
        *rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory detecting its format",
                             path);
        return NULL;
    }
    if (!best) {
        char list[512];
        *rc = stk__set_error(err, err_size, STK_EINVAL,
                             st.is_dir ? "%s: no .stk shards in this directory, nor another format "
                                         "stoker reads (%s); make shards with `stoker pack SRC DIR`"
                                       : "%s: unknown format (stoker reads: %s; "
                                         "docs/formats.md describes each)",
                             path, format_list(list, sizeof(list)));
    }
    return best;
}

/* The paths of a dataset whose fields the caller names: each argument expanded alone, to
 * exactly one file. */
static stk_status expand_named(const stk_dataset_opts *o, stk__strlist *out, char *err,
                               size_t err_size)
{
    for (size_t i = 0; i < o->n_paths; i++) {
        const char *name = o->field_names[i];
        size_t before = out->n;
        stk__stat st;
        if (!name || !*name)
            return stk__set_error(err, err_size, STK_EINVAL, "%s: its field has no name",
                                  o->paths[i] ? o->paths[i] : "(null)");
        stk_status rc = stk__paths_expand(o->paths + i, 1, out, err, err_size);
        if (rc < 0)
            return rc;
        if (out->n != before + 1)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "field '%s': %s names %zu files (a named field is one file)",
                                  name, o->paths[i], out->n - before);
        if (stk__vfs_stat(out->v[before], &st, NULL, 0) == STK_OK && st.is_dir)
            return stk__set_error(err, err_size, STK_EINVAL,
                                  "field '%s': %s is a directory (a named field is one file)", name,
                                  out->v[before]);
    }
    return STK_OK;
}

void stk_dataset_opts_init_sized(stk_dataset_opts *opts, size_t struct_size)
{
    stk_dataset_opts full = {.struct_size = sizeof(full)};
    stk__init_store(opts, struct_size, &full, sizeof(full));
}

stk_status stk_dataset_open_v2(const stk_dataset_opts *opts_in, stk_dataset **out)
{
    return stk__dataset_open_tokens(opts_in, NULL, out);
}

stk_status stk__dataset_open_tokens(const stk_dataset_opts *opts_in, const stk_tokens_opts *tokens,
                                    stk_dataset **out)
{
    stk_status rc = STK_OK;
    char err[STK_ERRMSG_SIZE] = "";
    stk__strlist paths = {0};
    stk_dataset *ds = NULL;
    if (out)
        *out = NULL;
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    if (!out || !stk__opts_load(&o, sizeof(o), opts_in))
        return stk__set_last_error(STK_EINVAL, "stk_dataset_open_v2: NULL argument or options "
                                               "not initialised with stk_dataset_opts_init");
    if (!o.paths || o.n_paths == 0)
        return stk__set_last_error(STK_EINVAL, "stk_dataset_open: no paths given");
    /* the cache settings, in force on this thread while the files open, and the remote HEAD
     * answers of this open */
    stk__head_memo heads = {0};
    stk__vfs_opts vo = {.cache_dir = o.cache_dir, .heads = &heads};
    if (o.cache_limit && *o.cache_limit) {
        if (!stk__parse_size(o.cache_limit, &vo.cache_limit))
            return stk__set_last_error(STK_EINVAL,
                                       "cache_limit=%s: not a size (bytes, or with K/M/G/T: "
                                       "\"20G\", \"512MB\")",
                                       o.cache_limit);
        if (stk__cache_check_limit(o.cache_dir, vo.cache_limit, err, sizeof(err)) < 0)
            return stk__set_last_error(STK_EINVAL, "%s", err);
    }
    const stk__vfs_opts *prev_vo = stk__vfs_opts_use(&vo);
    if (o.field_names)
        STK_TRY(expand_named(&o, &paths, err, sizeof(err)));
    else
        STK_TRY(stk__paths_expand(o.paths, o.n_paths, &paths, err, sizeof(err)));

    const stk__source_methods *m = NULL;
    if (o.format && *o.format) {
        for (size_t i = 0; i < N_SOURCES && !m; i++)
            if (strcmp(sources[i]->name, o.format) == 0)
                m = sources[i];
        if (!m) {
            char list[512];
            STK_FAIL(err, STK_EINVAL, "unknown format '%s' (stoker reads: %s)", o.format,
                     format_list(list, sizeof(list)));
        }
    } else {
        for (size_t i = 0; i < paths.n; i++) {
            const stk__source_methods *pm = detect(paths.v[i], tokens, err, sizeof(err), &rc);
            if (!pm)
                goto fail;
            if (m && pm != m)
                STK_FAIL(err, STK_EINVAL,
                         "%s is %s but %s is %s: the paths of a dataset must be of one format "
                         "(format= chooses one)",
                         paths.v[0], m->name, paths.v[i], pm->name);
            m = pm;
        }
    }

    ds = stk__calloc(1, sizeof(*ds));
    if (!ds)
        STK_FAIL(err, STK_ENOMEM, "%s: out of memory", paths.v[0]);
    if (o.field_names && !m->takes_names)
        STK_FAIL(err, STK_EINVAL,
                 "%s: format %s takes no field names (a dict of paths, one file per field, is "
                 "for npy)",
                 paths.v[0], m->name);
    ds->vfs.cache_limit = vo.cache_limit;
    if (o.cache_dir && !(ds->vfs.cache_dir = ds->cache_dir = stk__strdup(o.cache_dir)))
        STK_FAIL(err, STK_ENOMEM, "%s: out of memory", paths.v[0]);
    ds->m = m; /* from here on, closing calls the source's close */
    ds->flags = o.flags;
    ds->open_names = o.field_names;
    ds->open_tokens = m->tokens ? tokens : NULL;
    rc = m->open(ds, (const char *const *)paths.v, paths.n, err, sizeof(err));
    ds->open_names = NULL;
    ds->open_tokens = NULL;
    STK_TRY(rc);
    if (ds->count == 0)
        STK_FAIL(err, STK_EINVAL, "%s%s: dataset is empty (0 records)", o.paths[0],
                 o.n_paths > 1 ? " (and the other paths)" : "");
    for (uint32_t f = 0; f < ds->n_fields; f++) /* handed out by stk_dataset_field: ours */
        ds->fields[f].struct_size = sizeof(ds->fields[f]);
    stk__strlist_free(&paths);
    stk__vfs_opts_use(prev_vo);
    stk__head_memo_clear(&heads);
    stk__clear_last_error();
    *out = ds;
    return STK_OK;
fail:
    stk__strlist_free(&paths);
    stk_dataset_close(ds);
    stk__vfs_opts_use(prev_vo);
    stk__head_memo_clear(&heads);
    return stk__last_error_copy(rc, err);
}

stk_status stk_dataset_open(const char *const *paths, size_t n_paths, unsigned flags,
                            stk_dataset **out)
{
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = paths;
    o.n_paths = n_paths;
    o.flags = flags;
    return stk_dataset_open_v2(&o, out);
}
