/*
 * stk_vfs_lend.c: files a source lends for a field read in place (stk_source.h's field_open):
 * a borrowed view of a file the source keeps open (a .stk shard, a tar), whose close leaves the
 * file open, and a file in memory (a tar's gzipped member, gunzipped whole), whose close frees
 * the bytes. Both are read as any stk__file: stk__vfs_read at an offset.
 *
 * Threads: a lent file is one reader's; reads of a borrowed one go to the source's file, which
 * is thread-safe (positional reads).
 */
#include "io/stk_vfs.h"

#include <inttypes.h>
#include <string.h>

typedef struct lent {
    stk__file f;    /* first: the handle given out */
    stk__file *of;  /* borrowed: the source's file, else NULL */
    uint8_t *bytes; /* in memory: owned */
    stk__file *src; /* in memory: the file its bytes came from (NULL: not known) */
    uint64_t at;    /* ... and where in it */
} lent;

static stk_status borrowed_read(stk__file *f, uint64_t offset, const stk__iov *iov, int n_iov,
                                char *err, size_t err_size)
{
    stk__file *of = ((lent *)(void *)f)->of;
    return of->vfs->read(of, offset, iov, n_iov, err, err_size);
}

static int borrowed_fd(const stk__file *f)
{
    return stk__vfs_fd(((const lent *)(const void *)f)->of);
}

static stk_status mem_read(stk__file *f, uint64_t offset, const stk__iov *iov, int n_iov, char *err,
                           size_t err_size)
{
    const lent *l = (const lent *)(const void *)f;
    for (int i = 0; i < n_iov; i++) {
        if (offset > f->size || iov[i].len > f->size - offset)
            return stk__set_error(err, err_size, STK_EIO,
                                  "%s: read of %zu bytes at %" PRIu64 " past its end (%" PRIu64
                                  " bytes)",
                                  f->path, iov[i].len, offset, f->size);
        memcpy(iov[i].base, l->bytes + offset, iov[i].len);
        offset += iov[i].len;
    }
    return STK_OK;
}

static void lent_close(stk__file *f)
{
    lent *l = (lent *)(void *)f;
    stk__free(l->bytes);
    stk__free(l);
}

static const stk__vfs borrowed_vfs = {
    .name = "borrowed", .read = borrowed_read, .close = lent_close, .fd = borrowed_fd};
static const stk__vfs mem_vfs = {.name = "memory", .read = mem_read, .close = lent_close};

static stk_status lend(const stk__vfs *vfs, stk__file *of, uint8_t *bytes, const char *path,
                       uint64_t size, stk__file **out, char *err, size_t err_size)
{
    lent *l = stk__calloc(1, sizeof(*l));
    *out = NULL;
    if (!l) {
        stk__free(bytes);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    l->f.vfs = vfs;
    l->f.path = (char *)path; /* the source's, which outlives the lent file */
    l->f.size = size;
    l->of = of;
    l->bytes = bytes;
    *out = &l->f;
    return STK_OK;
}

stk_status stk__vfs_borrow(stk__file *of, stk__file **out, char *err, size_t err_size)
{
    stk_status rc = lend(&borrowed_vfs, of, NULL, of->path, of->size, out, err, err_size);
    if (rc >= 0) {
        (*out)->mtime_ns = of->mtime_ns;
        (*out)->ino = of->ino;
    }
    return rc;
}

stk_status stk__vfs_memfile(uint8_t *bytes, uint64_t size, const char *path, stk__file **out,
                            char *err, size_t err_size)
{
    return lend(&mem_vfs, NULL, bytes, path, size, out, err, err_size);
}

stk_status stk__vfs_memfile_of(uint8_t *bytes, uint64_t size, stk__file *src, uint64_t at,
                               stk__file **out, char *err, size_t err_size)
{
    stk_status rc = lend(&mem_vfs, NULL, bytes, src->path, size, out, err, err_size);
    if (rc >= 0) {
        ((lent *)(void *)*out)->src = src;
        ((lent *)(void *)*out)->at = at;
    }
    return rc;
}

bool stk__vfs_origin(const stk__file *f, stk__file **src, uint64_t *at)
{
    const lent *l = (const lent *)(const void *)f;
    *src = NULL;
    *at = 0;
    if (f && f->vfs == &borrowed_vfs)
        *src = l->of;
    else if (f && f->vfs == &mem_vfs && l->src) {
        *src = l->src;
        *at = l->at;
    }
    return *src != NULL;
}

bool stk__vfs_in_memory(const stk__file *f)
{
    return f && f->vfs == &mem_vfs;
}

bool stk__vfs_lent(const stk__file *f)
{
    return f && (f->vfs == &mem_vfs || f->vfs == &borrowed_vfs);
}
