/*
 * stk_tokopen.c: stk_tokens_open, the public way in to a token corpus: check the options, find a
 * Megatron corpus by its prefix, open the paths through the registry (token formats preferred),
 * and wrap a dataset of any other format as a token column. It sits above the registry, which
 * opens the token formats below it (docs/design.md, Floors).
 */
#include "source/tokens/stk_tokens.h"

#include <inttypes.h>
#include <string.h>

/* Check the options; the message names the bad one. */
static stk_status opts_check(const stk_tokens_opts *o, char *err, size_t err_size)
{
    if (!o->paths || o->n_paths == 0)
        return stk__set_error(err, err_size, STK_EINVAL, "stk_tokens_open: no paths given");
    if (o->mode > STK_TOKENS_DOCUMENTS)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "tokens mode %u is not windows (0), random (1), packed (2) or "
                              "documents (3)",
                              o->mode);
    if (o->mode != STK_TOKENS_DOCUMENTS && (o->seq_len == 0 || o->seq_len > (1u << 30)))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "seq_len %u: must be 1 to 2^30 tokens per row", o->seq_len);
    if (o->packing > STK_PACKING_FIRST_FIT)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "packing %u is not best-fit (0) or first-fit (1)", o->packing);
    if (o->token_bytes != 0 && o->token_bytes != 2 && o->token_bytes != 4)
        return stk__set_error(err, err_size, STK_EINVAL, "token_bytes %u: 2 (uint16) or 4 (uint32)",
                              o->token_bytes);
    if (o->ids_dtype != STK_DTYPE_INT64 && o->ids_dtype != STK_DTYPE_INT32)
        return stk__set_error(err, err_size, STK_EINVAL, "ids_dtype %s: int64 or int32",
                              stk_dtype_name(o->ids_dtype));
    if (o->eos < -1 || o->bos < -1)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "eos=%" PRId64 " bos=%" PRId64 ": a token id, or -1 for none", o->eos,
                              o->bos);
    return STK_OK;
}

/* Wrap *ds, a dataset of another format, as a token column; on failure it is closed. */
static stk_status wrap_column(stk_dataset **ds, const stk_tokens_opts *o, const char *path)
{
    char err[STK_ERRMSG_SIZE] = "";
    stk_status rc = stk__tokcol_wrap(ds, o, err, sizeof(err));
    if (rc < 0)
        return stk__last_error_copy(rc, err);
    if ((*ds)->count == 0) {
        stk_dataset_close(*ds);
        *ds = NULL;
        return stk__set_last_error(STK_EINVAL, "%s: dataset is empty (0 rows)", path);
    }
    return STK_OK;
}

stk_status stk_tokens_open(const stk_tokens_opts *opts_in, stk_dataset **out)
{
    char err[STK_ERRMSG_SIZE];
    stk_tokens_opts o;
    stk_tokens_opts_init(&o);
    if (out)
        *out = NULL;
    if (!out || !stk__opts_load(&o, sizeof(o), opts_in))
        return stk__set_last_error(STK_EINVAL, "stk_tokens_open: NULL argument or options not "
                                               "initialised with stk_tokens_opts_init");
    stk_status rc = opts_check(&o, err, sizeof(err));
    if (rc < 0)
        return stk__last_error_copy(rc, err);
    /* A Megatron corpus is often named by its prefix ("data/corpus_text_document"): a path that
     * does not exist but whose .idx does is that .idx. */
    char **alt = stk__calloc(o.n_paths, sizeof(char *));
    if (!alt)
        return stk__set_last_error(STK_ENOMEM, "out of memory");
    for (size_t i = 0; i < o.n_paths && rc == STK_OK; i++) {
        stk__stat st;
        if (!o.paths[i] || stk__vfs_stat(o.paths[i], &st, NULL, 0) == STK_OK ||
            strpbrk(o.paths[i], "*?[{"))
            continue;
        char *idx = stk__megatron_path(o.paths[i], ".idx");
        if (!idx)
            rc = stk__set_last_error(STK_ENOMEM, "out of memory");
        else if (stk__vfs_stat(idx, &st, NULL, 0) == STK_OK)
            alt[i] = idx;
        else
            stk__free(idx);
    }
    const char **paths = rc == STK_OK ? stk__calloc(o.n_paths, sizeof(char *)) : NULL;
    if (rc < 0) {
        /* out of memory above */
    } else if (paths) {
        for (size_t i = 0; i < o.n_paths; i++)
            paths[i] = alt[i] ? alt[i] : o.paths[i];
        stk_dataset_opts d;
        stk_dataset_opts_init(&d);
        d.paths = paths;
        d.n_paths = o.n_paths;
        d.flags = o.flags;
        d.format = o.format;
        d.cache_dir = o.cache_dir;
        d.cache_limit = o.cache_limit;
        rc = stk__dataset_open_tokens(&d, &o, out);
        if (rc == STK_OK && !(*out)->m->tokens) /* records of documents: a token column */
            rc = wrap_column(out, &o, paths[0]);
    } else {
        rc = stk__set_last_error(STK_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < o.n_paths; i++)
        stk__free(alt[i]);
    stk__free(alt);
    stk__free(paths);
    return rc;
}
