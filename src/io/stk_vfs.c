/*
 * stk_vfs.c: the dispatcher of byte sources (stk_vfs.h), as sqlite's VFS list: the table of
 * sources in the order they are asked, stk__vfs_for (the first whose `claims` takes the path;
 * POSIX, last, takes every path) and the stk__vfs_* calls every reader makes through it. A new
 * byte source is one more table and one line in vfs_table[]; no format and not the loader changes.
 */
#include "io/stk_vfs.h"
#include "io/stk_vfs_http.h"

static const stk__vfs *const vfs_table[] = {
    &stk__vfs_fault, /* stk-fault:PLAN:PATH, for tests (stk_vfs_fault.c) */
    &stk__vfs_s3,    /* s3://bucket/key (stk_vfs_s3.c) */
    &stk__vfs_http,  /* http:// and https:// */
    NULL,
};

const stk__vfs *stk__vfs_for(const char *path)
{
    for (size_t i = 0; vfs_table[i]; i++)
        if (vfs_table[i]->claims(path))
            return vfs_table[i];
    return &stk__vfs_posix;
}

stk_status stk__vfs_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    return stk__vfs_for(path)->open(path, out, err, err_size);
}

stk_status stk__vfs_read(stk__file *f, uint64_t offset, void *buf, size_t size, char *err,
                         size_t err_size)
{
    stk__iov v = {buf, size};
    return f->vfs->read(f, offset, &v, 1, err, err_size);
}

void stk__vfs_close(stk__file *f)
{
    if (f)
        f->vfs->close(f);
}

stk_status stk__vfs_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    return stk__vfs_for(path)->stat(path, st, err, err_size);
}
