/*
 * stk_paths.c: what users write for a dataset, expanded into paths the same way for every format:
 * a list of arguments, each with brace ranges ("shards/train-{000000..000127}.tar"), then glob
 * patterns, each level sorted in byte order (never the locale's collation). Directories are kept
 * for the formats to interpret (a directory of shards, an ImageFolder tree).
 */
#include "io/stk_vfs.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BRACE_NAMES 1000000 /* one brace range expands to at most this many names */

/* Parse "{A..B}" at p (p points at '{'): the bounds, their text widths and the end ('}'). Only
 * decimal ranges: other braces are left to glob. */
static bool brace_range(const char *p, unsigned long long *a, unsigned long long *b, int *width,
                        const char **end)
{
    char *q;
    if (p[1] < '0' || p[1] > '9')
        return false;
    *a = strtoull(p + 1, &q, 10);
    int wa = (int)(q - (p + 1));
    if (q[0] != '.' || q[1] != '.' || q[2] < '0' || q[2] > '9')
        return false;
    const char *bs = q + 2;
    *b = strtoull(bs, &q, 10);
    if (*q != '}' || *a > *b)
        return false;
    /* "{000..127}": zero padded to the first bound's width, as bash does */
    *width = p[1] == '0' && wa > 1 ? wa : 0;
    *end = q;
    return true;
}

/* Expand the first brace range of `arg` (recursively the later ones) into out. */
static stk_status brace_expand(const char *arg, stk__strlist *out, char *err, size_t err_size)
{
    const char *open = strchr(arg, '{');
    unsigned long long a, b;
    int width;
    const char *close;
    while (open && !brace_range(open, &a, &b, &width, &close))
        open = strchr(open + 1, '{');
    if (!open) {
        if (stk__strlist_add(out, arg) < 0)
            return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", arg);
        return STK_OK;
    }
    if (b - a >= MAX_BRACE_NAMES)
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "%s: the range {%llu..%llu} has over %d names", arg, a, b,
                              MAX_BRACE_NAMES);
    size_t pre = (size_t)(open - arg), len = strlen(arg);
    char *buf = stk__malloc(len + 32);
    if (!buf)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", arg);
    stk_status rc = STK_OK;
    for (unsigned long long v = a; v <= b && rc == STK_OK; v++) {
        snprintf(buf, len + 32, "%.*s%0*llu%s", (int)pre, arg, width, v, close + 1);
        rc = brace_expand(buf, out, err, err_size);
    }
    stk__free(buf);
    return rc;
}

/* Whether `name` ends with one of `suffixes` (NULL-terminated; a NULL list takes every name). */
static bool has_suffix(const char *name, const char *const *suffixes)
{
    if (!suffixes)
        return true;
    size_t len = strlen(name);
    for (; *suffixes; suffixes++) {
        size_t ls = strlen(*suffixes);
        if (len > ls && strcmp(name + len - ls, *suffixes) == 0)
            return true;
    }
    return false;
}

bool stk__path_not_data(const char *name)
{
    static const char *const ours[] = {".stkidx", ".stkvidx", NULL}; /* indexes beside data */
    return strstr(name, ".tmp.") != NULL || has_suffix(name, ours);
}

stk_status stk__paths_expand(const char *const *args, size_t n_args, stk__strlist *out, char *err,
                             size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist names = {0};
    if (!args || n_args == 0)
        return stk__set_error(err, err_size, STK_EINVAL, "no paths given");
    for (size_t i = 0; i < n_args && rc == STK_OK; i++) {
        if (!args[i] || !*args[i]) {
            rc = stk__set_error(err, err_size, STK_EINVAL, "path %zu is empty", i);
            break;
        }
        rc = brace_expand(args[i], &names, err, err_size);
    }
    for (size_t i = 0; i < names.n && rc == STK_OK; i++) {
        const char *p = names.v[i];
        stk__stat st;
        const stk__vfs *vfs = stk__vfs_for(p);
        rc = vfs->stat(p, &st, err, err_size);
        if (rc == STK_OK) {
            rc = stk__strlist_add(out, p) < 0
                     ? stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", p)
                     : STK_OK;
        } else if (strpbrk(p, "*?[")) { /* not a path: a pattern */
            size_t before = out->n;
            rc = vfs->glob(p, out, err, err_size);
            /* stoker's own files (temporary, indexes) are never data */
            size_t k = before;
            for (size_t j = before; j < out->n; j++) {
                const char *base = strrchr(out->v[j], '/');
                if (stk__path_not_data(base ? base + 1 : out->v[j]))
                    stk__free(out->v[j]);
                else
                    out->v[k++] = out->v[j];
            }
            out->n = k;
            if (rc == STK_OK && k == before)
                rc = stk__set_error(
                    err, err_size, STK_EIO,
                    "%s: no file matches this pattern (only stoker's temporary or index files)", p);
        }
    }
    stk__strlist_free(&names);
    return rc;
}

static stk_status list_dir(const char *dir, const char *const *suffixes, bool dirs,
                           stk__strlist *out, char *err, size_t err_size)
{
    stk__strlist names = {0};
    const stk__vfs *vfs = stk__vfs_for(dir);
    stk_status rc = vfs->list(dir, &names, err, err_size);
    stk__strlist_sort(&names);
    for (size_t i = 0; i < names.n && rc == STK_OK; i++) {
        const char *n = names.v[i];
        if (!has_suffix(n, suffixes) || stk__path_not_data(n))
            continue;
        char *p = stk__path_join(dir, n);
        stk__stat st;
        if (!p) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", dir);
            break;
        }
        /* a broken link or a vanished entry counts as a file: opening it names the problem */
        bool is_dir = vfs->stat(p, &st, NULL, 0) == STK_OK && st.is_dir;
        if ((!is_dir || dirs) && stk__strlist_add(out, p) < 0)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", dir);
        stk__free(p);
    }
    stk__strlist_free(&names);
    return rc;
}

stk_status stk__paths_list_dir(const char *dir, const char *suffix, bool dirs, stk__strlist *out,
                               char *err, size_t err_size)
{
    const char *one[] = {suffix, NULL};
    return list_dir(dir, suffix ? one : NULL, dirs, out, err, err_size);
}

stk_status stk__paths_dir_files(const char *dir, const char *const *suffixes, const char *what,
                                bool dirs, stk__strlist *out, char *err, size_t err_size)
{
    size_t before = out->n;
    stk_status rc = list_dir(dir, suffixes, dirs, out, err, err_size);
    if (rc == STK_OK && out->n == before)
        rc = stk__set_error(err, err_size, STK_EINVAL, "%s: no %s in this directory", dir, what);
    return rc;
}

stk_status stk__paths_files(const char *const *paths, size_t n_paths, const char *const *suffixes,
                            const char *what, stk__strlist *out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    for (size_t i = 0; i < n_paths && rc == STK_OK; i++) {
        stk__stat st;
        if (stk__vfs_stat(paths[i], &st, NULL, 0) == STK_OK && st.is_dir)
            rc = stk__paths_dir_files(paths[i], suffixes, what, false, out, err, err_size);
        else if (stk__strlist_add(out, paths[i]) < 0)
            rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", paths[i]);
    }
    return rc;
}

int stk__paths_dir_has(const char *dir, const char *const *suffixes)
{
    stk__strlist l = {0};
    stk_status rc = list_dir(dir, suffixes, false, &l, NULL, 0);
    bool any = rc == STK_OK && l.n > 0;
    stk__strlist_free(&l);
    return rc == STK_ENOMEM ? -1 : any;
}
