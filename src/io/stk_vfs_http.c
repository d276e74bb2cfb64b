/*
 * stk_vfs_http.c: remote files as VFS files (open: a HEAD through the transport, stk_http.c;
 * read: from the read-ahead when it holds the range, else through the block cache, else one
 * ranged GET; close: when the read-ahead lets go) and the http:// / https:// byte source. The S3
 * byte source (stk_vfs_s3.c) opens, reads and closes its files through the same functions.
 */
#include "io/stk_http_int.h"

#include <string.h>
#include <xxhash.h>

static stk_status fetch_direct(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                               size_t err_size);

stk_status stk__remote_open(const char *path, const stk__vfs *vfs, stk__s3cfg *cfg, stk__target *t,
                            stk__file **out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    *out = NULL;
    stk__rfile *f = stk__calloc(1, sizeof(*f));
    if (f && cfg) { /* taken over: freed with the file from here on */
        f->s3 = true;
        f->cfg = *cfg;
        f->t = *t;
        memset(cfg, 0, sizeof(*cfg));
        memset(t, 0, sizeof(*t));
    }
    if (!f || !(f->base.path = stk__strdup(path))) {
        stk__rfile_free(f);
        if (cfg) {
            stk__s3cfg_free(cfg);
            stk__target_free(t);
        }
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    f->base.vfs = vfs;
    if (!f->s3 && !(f->t.url = stk__strdup(path))) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    char validator[256];
    if ((rc = stk__remote_head(f, path, &f->base.size, validator, sizeof(validator), err,
                               err_size)) < 0)
        goto fail;
    f->validator_etag = validator[0] == '"' || (validator[0] == 'W' && validator[1] == '/');
    if (!(f->validator = stk__strdup(validator))) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    f->base.mtime_ns = XXH3_64bits(validator, strlen(validator)); /* the version, for indexes */
    if ((rc = stk__cache_from_env(&f->cache, err, err_size)) < 0)
        goto fail;
    if (f->cache) /* NULL when out of memory: every hit is checked */
        f->checked = stk__calloc(stk__cache_checked_words(f->base.size), sizeof(uint64_t));
    if (f->cache && !(f->cache_key = stk__http_fmt("%s\n%s\n%llu", f->t.url, validator,
                                                   (unsigned long long)f->base.size))) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    *out = &f->base;
    return STK_OK;
fail:
    stk__rfile_free(f);
    return rc;
}

bool stk__remote_aux_get(stk__file *file, const char *name, uint8_t **out, size_t *n)
{
    stk__rfile *f = (stk__rfile *)file;
    return f->cache && stk__cache_aux_get(f->cache, f->cache_key, name, out, n);
}

void stk__remote_aux_put(stk__file *file, const char *name, const void *buf, size_t n)
{
    stk__rfile *f = (stk__rfile *)file;
    if (f->cache)
        stk__cache_aux_put(f->cache, f->cache_key, name, buf, n);
}

/* The cache's miss path when only a hit will do. */
static stk_status fetch_none(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                             size_t err_size)
{
    (void)ctx, (void)off, (void)buf, (void)len;
    return stk__set_error(err, err_size, STK_EIO, "evicted");
}

static stk_status read_pieces(stk__rfile *f, uint64_t offset, const stk__iov *iov, int n_iov,
                              char *err, size_t err_size)
{
    size_t want = 0;
    for (int i = 0; i < n_iov; i++)
        want += iov[i].len;
    if (want == 0)
        return STK_OK;
    if (offset > f->base.size || want > f->base.size - offset)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "%s: read of %zu bytes at %llu is past the end (%llu bytes)",
                              f->base.path, want, (unsigned long long)offset,
                              (unsigned long long)f->base.size);
    int took = stk__readahead_take(f, offset, iov, n_iov, want);
    char scratch[STK_ERRMSG_SIZE];
    if (took == STK__TAKE_HIT)
        return STK_OK;
    if (took == STK__TAKE_CACHED &&
        stk__cache_read_checked(f->cache, f->cache_key, f->base.size, offset, iov, n_iov,
                                fetch_none, NULL, f->checked, scratch, sizeof(scratch)) == STK_OK) {
        stk__readahead_cached(f, offset);
        return STK_OK;
    }
    stk__http_sink s = {.iov = iov, .n = n_iov, .want = want};
    stk__http_resp r = {.s = &s};
    stk__http_req q = stk__rfile_get(f, offset, want);
    return stk__http_request(&q, &r, f->base.path, err, err_size);
}

static stk_status fetch_direct(void *ctx, uint64_t off, void *buf, size_t len, char *err,
                               size_t err_size)
{
    stk__iov v = {buf, len};
    return read_pieces(ctx, off, &v, 1, err, err_size);
}

stk_status stk__remote_read(stk__file *file, uint64_t offset, const stk__iov *iov, int n_iov,
                            char *err, size_t err_size)
{
    stk__rfile *f = (stk__rfile *)file;
    if (f->cache)
        return stk__cache_read_checked(f->cache, f->cache_key, f->base.size, offset, iov, n_iov,
                                       fetch_direct, f, f->checked, err, err_size);
    return read_pieces(f, offset, iov, n_iov, err, err_size);
}

void stk__remote_close(stk__file *file)
{
    stk__rfile *f = (stk__rfile *)file;
    if (stk__readahead_forget(f))
        stk__rfile_free(f);
}

/* ---- HTTP(S) ---- */

static bool http_claims(const char *path)
{
    return strncmp(path, "http://", 7) == 0 || strncmp(path, "https://", 8) == 0;
}

static stk_status http_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    return stk__remote_open(path, &stk__vfs_http, NULL, NULL, out, err, err_size);
}

static stk_status http_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    stk__rfile f = {.t.url = (char *)path};
    memset(st, 0, sizeof(*st));
    STK_TRY_RET(stk__remote_head(&f, path, &st->size, NULL, 0, err, err_size));
    st->is_regular = true;
    return STK_OK;
}

static stk_status http_list(const char *dir, stk__strlist *out, char *err, size_t err_size)
{
    (void)out;
    return stk__set_error(err, err_size, STK_ENOTSUP,
                          "%s: plain HTTP(S) cannot list a directory: give the shards' URLs, or a "
                          "brace range (https://host/train-{0000..0127}.stk)",
                          dir);
}

static stk_status http_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    return http_list(pattern, out, err, err_size);
}

const stk__vfs stk__vfs_http = {
    .name = "http",
    .claims = http_claims,
    .open = http_open,
    .read = stk__remote_read,
    .close = stk__remote_close,
    .stat = http_stat,
    .list = http_list,
    .glob = http_glob,
    .readahead = stk__remote_readahead,
    .aux_get = stk__remote_aux_get,
    .aux_put = stk__remote_aux_put,
};
