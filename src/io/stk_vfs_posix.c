/*
 * stk_vfs_posix.c: the POSIX byte source: files on local disks and mounts. One descriptor per
 * open file, shared by every worker thread (preadv at explicit offsets: no seek, no lock). A
 * non-regular file (FIFO, device, socket) is refused at open, before anything could block on it.
 * The dispatcher that picks a byte source per path is stk_vfs.c.
 */
#include "io/stk_vfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

typedef struct pfile {
    stk__file base;
    int fd;
} pfile;

static bool posix_claims(const char *path)
{
    (void)path;
    return true;
}

static uint64_t mtime_ns(const struct stat *st)
{
    return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

/* The error of a read of a file that is not the version opened (size or modification time
 * changed: rewritten in place, truncated, appended to). */
static stk_status changed(const stk__file *file, const struct stat *now, uint64_t offset, char *err,
                          size_t err_size)
{
    bool moved = now && mtime_ns(now) != file->mtime_ns;
    return stk__set_error(err, err_size, STK_EIO,
                          "%s: changed while open (size %llu -> %lld%s), read at %llu: its "
                          "records would mix two versions; reopen the dataset",
                          file->path, (unsigned long long)file->size,
                          now ? (long long)now->st_size : -1LL, moved ? ", modified since" : "",
                          (unsigned long long)offset);
}

static stk_status posix_open(const char *path, stk__file **out, char *err, size_t err_size)
{
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; the mode check below refuses it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return stk__set_error(err, err_size, STK_EIO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return stk__set_error(err, err_size, STK_EIO, "%s: not a regular file", path);
    }
    pfile *f = stk__calloc(1, sizeof(*f));
    char *p = stk__strdup(path);
    if (!f || !p) {
        close(fd);
        stk__free(f);
        stk__free(p);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    }
    f->base.vfs = &stk__vfs_posix;
    f->base.path = p;
    f->base.size = (uint64_t)st.st_size;
    f->base.mtime_ns = mtime_ns(&st);
    f->base.ino = (uint64_t)st.st_ino;
    f->fd = fd;
    *out = &f->base;
    return STK_OK;
}

static stk_status posix_read(stk__file *file, uint64_t offset, const stk__iov *iov, int n_iov,
                             char *err, size_t err_size)
{
    pfile *f = (pfile *)file;
    struct iovec v[STK_MAX_FIELDS + 1];
    size_t want = 0;
    if (n_iov < 0 || n_iov > (int)(sizeof(v) / sizeof(v[0])))
        return stk__set_error(err, err_size, STK_EINVAL, "%s: %d pieces in one read", file->path,
                              n_iov);
    for (int i = 0; i < n_iov; i++) {
        v[i].iov_base = iov[i].base;
        v[i].iov_len = iov[i].len;
        want += iov[i].len;
    }
    struct iovec *cur = v;
    int n = n_iov;
    if (want == 0)
        return STK_OK;
    uint64_t off = offset;
    size_t got = 0;
    while (n > 0) {
        ssize_t r = preadv(f->fd, cur, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return stk__set_error(err, err_size, STK_EIO,
                                  "%s: read of %zu bytes at %llu failed: %s", file->path, want,
                                  (unsigned long long)offset, strerror(errno));
        if (r == 0) {
            struct stat now;
            return changed(file, fstat(f->fd, &now) == 0 ? &now : NULL, offset + got, err,
                           err_size);
        }
        got += (size_t)r;
        off += (uint64_t)r;
        while (n > 0 && (size_t)r >= cur->iov_len) { /* resume after a short read */
            r -= (ssize_t)cur->iov_len;
            cur++;
            n--;
        }
        if (n > 0) {
            cur->iov_base = (uint8_t *)cur->iov_base + r;
            cur->iov_len -= (size_t)r;
        }
    }
    /* After the read: a write that changed the file before our bytes were read has changed
     * its modification time by now (issue 30: a tar rewritten in place under a reader gave old
     * samples, then new ones). */
    struct stat now;
    if (fstat(f->fd, &now) != 0 || (uint64_t)now.st_size != file->size ||
        mtime_ns(&now) != file->mtime_ns)
        return changed(file, &now, offset, err, err_size);
    return STK_OK;
}

static int posix_fd(const stk__file *file)
{
    return ((const pfile *)file)->fd;
}

bool stk__vfs_fd_unchanged(const stk__file *file)
{
    struct stat now;
    int fd = stk__vfs_fd(file);
    return fd >= 0 && fstat(fd, &now) == 0 && (uint64_t)now.st_size == file->size &&
           mtime_ns(&now) == file->mtime_ns;
}

static void posix_close(stk__file *file)
{
    pfile *f = (pfile *)file;
    close(f->fd);
    stk__free(file->path);
    stk__free(f);
}

static stk_status posix_stat(const char *path, stk__stat *st, char *err, size_t err_size)
{
    struct stat s;
    if (stat(path, &s) != 0)
        return stk__set_error(err, err_size, STK_EIO, "%s: %s", path, strerror(errno));
    st->is_dir = S_ISDIR(s.st_mode);
    st->is_regular = S_ISREG(s.st_mode);
    st->size = (uint64_t)s.st_size;
    st->dev = (uint64_t)s.st_dev;
    st->ino = (uint64_t)s.st_ino;
    return STK_OK;
}

static stk_status posix_list(const char *dir, stk__strlist *out, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    DIR *d = opendir(dir);
    if (!d)
        return stk__set_error(err, err_size, STK_EIO, "%s: %s", dir, strerror(errno));
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if ((rc = stk__strlist_add(out, e->d_name)) < 0) {
            stk__set_error(err, err_size, rc, "%s: out of memory", dir);
            break;
        }
        errno = 0;
    }
    if (rc == STK_OK && errno)
        rc = stk__set_error(err, err_size, STK_EIO, "%s: %s", dir, strerror(errno));
    closedir(d);
    return rc;
}

static stk_status posix_glob(const char *pattern, stk__strlist *out, char *err, size_t err_size)
{
    glob_t g;
    /* GLOB_NOSORT + our byte-order sort: the same order whatever the locale's collation. */
    int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH)
        return stk__set_error(err, err_size, STK_EIO, "%s: no file matches this pattern", pattern);
    if (grc != 0) {
        globfree(&g);
        return stk__set_error(err, err_size, grc == GLOB_NOSPACE ? STK_ENOMEM : STK_EIO,
                              "%s: cannot expand the pattern", pattern);
    }
    stk__strlist found = {0};
    stk_status rc = STK_OK;
    for (size_t i = 0; i < g.gl_pathc && rc == STK_OK; i++)
        rc = stk__strlist_add(&found, g.gl_pathv[i]);
    globfree(&g);
    stk__strlist_sort(&found);
    for (size_t i = 0; i < found.n && rc == STK_OK; i++)
        rc = stk__strlist_add(out, found.v[i]);
    stk__strlist_free(&found);
    if (rc < 0)
        return stk__set_error(err, err_size, rc, "%s: out of memory", pattern);
    return STK_OK;
}

const stk__vfs stk__vfs_posix = {
    .name = "posix",
    .claims = posix_claims,
    .open = posix_open,
    .read = posix_read,
    .close = posix_close,
    .stat = posix_stat,
    .list = posix_list,
    .glob = posix_glob,
    .fd = posix_fd,
};
