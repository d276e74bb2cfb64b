/*
 * stk_tar_index.c: the member-list cache of a tar shard (stk_tar.h). The members found by one
 * scan are written beside a local shard as `<shard>.stkidx` when its directory is writable,
 * validated at the next open against the shard's size, mtime and inode (and the cache's own
 * XXH3 checksum), and rebuilt when any differs. Writing is best effort: a read-only directory
 * only means the next open scans again. Moved out of stk_src_wds.c.
 */
#include "common/stk_endian.h"
#include "source/stk_tar.h"

#include <xxhash.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CACHE_SUFFIX ".stkidx"
#define CACHE_MAGIC "STKWDSX2" /* X2: 32-bit member sizes and the .gz trailer size */
#define CACHE_HEAD 56          /* magic, size, mtime, ino, n_members, names_size, reserved */

static char *cache_path(const char *shard)
{
    size_t n = strlen(shard);
    char *p = stk__malloc(n + sizeof(CACHE_SUFFIX));
    if (p) {
        memcpy(p, shard, n);
        memcpy(p + n, CACHE_SUFFIX, sizeof(CACHE_SUFFIX));
    }
    return p;
}

/* Size, mtime and inode of a local shard; false for remote ones (no cache). */
static bool shard_identity(const char *path, uint64_t id[3])
{
    struct stat st;
    if (stk__vfs_for(path) != &stk__vfs_posix || stat(path, &st) != 0)
        return false;
    id[0] = (uint64_t)st.st_size;
    id[1] = (uint64_t)st.st_mtim.tv_sec * 1000000000u + (uint64_t)st.st_mtim.tv_nsec;
    id[2] = (uint64_t)st.st_ino;
    return true;
}

/* Load the cached member list when it is valid for this shard; false otherwise (ml empty). */
static bool cache_load(const char *cpath, const uint64_t id[3], uint64_t shard_size,
                       stk__tar_members *ml)
{
    stk__file *cf = NULL;
    uint8_t *b = NULL;
    bool ok = false;
    if (stk__vfs_open(cpath, &cf, NULL, 0) != STK_OK || cf->size < CACHE_HEAD + 8 ||
        cf->size > ((uint64_t)1 << 40))
        goto out;
    size_t n = (size_t)cf->size;
    b = stk__malloc(n);
    if (!b || stk__vfs_read(cf, 0, b, n, NULL, 0) != STK_OK)
        goto out;
    if (memcmp(b, CACHE_MAGIC, 8) != 0 || stk__ld64(b + 8) != id[0] || stk__ld64(b + 16) != id[1] ||
        stk__ld64(b + 24) != id[2] || XXH3_64bits(b, n - 8) != stk__ld64(b + n - 8))
        goto out;
    uint64_t nm = stk__ld64(b + 32), names = stk__ld64(b + 40);
    if (nm > (n - CACHE_HEAD) / 24 || names != n - CACHE_HEAD - 8 - nm * 24 || names > UINT32_MAX)
        goto out;
    ml->v = stk__malloc(nm ? (size_t)nm * sizeof(stk__tar_member) : 1);
    ml->names = stk__malloc(names ? (size_t)names : 1);
    if (!ml->v || !ml->names)
        goto out;
    const uint8_t *e = b + CACHE_HEAD;
    for (uint64_t i = 0; i < nm; i++, e += 24) {
        stk__tar_member m = {stk__ld64(e), stk__ld32(e + 8), stk__ld32(e + 16), stk__ld32(e + 20),
                             stk__ld32(e + 12)};
        if (m.data_off < STK__TAR_BLOCK || m.data_off > shard_size ||
            m.size > shard_size - m.data_off || m.name_off > names ||
            m.name_len > names - m.name_off)
            goto out;
        ml->v[i] = m;
    }
    memcpy(ml->names, e, (size_t)names);
    ml->n = ml->cap = (size_t)nm;
    ml->names_len = ml->names_cap = (size_t)names;
    ok = true;
out:
    if (!ok)
        stk__tar_members_free(ml);
    stk__free(b);
    stk__vfs_close(cf);
    return ok;
}

/* Write the member list beside the shard (best effort: a read-only directory is no error). */
static void cache_store(const char *cpath, const uint64_t id[3], const stk__tar_members *ml)
{
    size_t n = CACHE_HEAD + ml->n * 24 + ml->names_len + 8;
    uint8_t *b = stk__calloc(1, n);
    char *tmp = stk__malloc(strlen(cpath) + 48);
    static _Atomic unsigned seq;
    if (!b || !tmp)
        goto out;
    memcpy(b, CACHE_MAGIC, 8);
    stk__st64(b + 8, id[0]);
    stk__st64(b + 16, id[1]);
    stk__st64(b + 24, id[2]);
    stk__st64(b + 32, ml->n);
    stk__st64(b + 40, ml->names_len);
    uint8_t *e = b + CACHE_HEAD;
    for (size_t i = 0; i < ml->n; i++, e += 24) {
        stk__st64(e, ml->v[i].data_off);
        stk__st32(e + 8, (uint32_t)ml->v[i].size); /* the scan refuses members of 4 GiB */
        stk__st32(e + 12, ml->v[i].gz_size);
        stk__st32(e + 16, ml->v[i].name_off);
        stk__st32(e + 20, ml->v[i].name_len);
    }
    if (ml->names_len)
        memcpy(e, ml->names, ml->names_len);
    stk__st64(b + n - 8, XXH3_64bits(b, n - 8));
    sprintf(tmp, "%s.tmp.%ld.%u", cpath, (long)getpid(), seq++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        goto out;
    size_t done = 0;
    while (done < n) {
        ssize_t k = write(fd, b + done, n - done);
        if (k <= 0)
            break;
        done += (size_t)k;
    }
    if (close(fd) != 0 || done != n || rename(tmp, cpath) != 0)
        unlink(tmp);
out:
    stk__free(b);
    stk__free(tmp);
}

stk_status stk__tar_index(stk__file *f, stk__tar_members *ml, bool *from_cache, char *err,
                          size_t err_size)
{
    uint64_t id[3] = {0};
    *from_cache = false;
    bool local = shard_identity(f->path, id) && id[0] == f->size;
    char *cpath = local ? cache_path(f->path) : NULL;
    if (cpath && cache_load(cpath, id, f->size, ml)) {
        *from_cache = true;
        stk__free(cpath);
        return STK_OK;
    }
    stk_status rc = stk__tar_scan(f, ml, err, err_size);
    if (rc == STK_OK && cpath)
        cache_store(cpath, id, ml);
    stk__free(cpath);
    return rc;
}
