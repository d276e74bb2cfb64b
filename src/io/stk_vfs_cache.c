/*
 * stk_vfs_cache.c: the on-disk cache of remote bytes, shared by every process on the machine.
 *
 * Layout under the cache directory: `entries/<sha256(key)>-<block>` (one block of STK_CACHE_BLOCK
 * bytes of one object version; key = URL + ETag + size), `entries/<sha256(key)>-<name>` (an aux
 * entry of that version: `stkidx`, a tar shard's member list; `tfidx`, a TFRecord file's frame
 * offsets; counted in the limit, evicted after the blocks), `tmp/` (entries being written), `.lock`
 * (flock'ed while an entry goes in; holds the entries' total size). A miss fetches the whole
 * block, writes it under tmp/ and renames it into entries/ (rename is atomic: a reader sees a
 * whole entry or none). Inserting takes the lock, evicts the least recently used blocks (atime,
 * set on every hit with futimens; then aux entries likewise) until the new one fits under the
 * limit, renames, and updates the total: entries never exceed the limit, whatever the number of
 * processes. Readers take no lock; an entry evicted while being read stays readable through its
 * open descriptor. flock is released when a process dies, so a crash never wedges the cache.
 */
#include "io/stk_sigv4.h"
#include "io/stk_vfs_http.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

struct stk__cache {
    char *dir, *entries, *tmp;
    uint64_t limit;
    int lock_fd;
    struct stk__cache *next; /* the process's caches (stk__cache_from_env) */
};

static stk_status mkdir_p(const char *d, char *err, size_t err_size)
{
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", d);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return stk__set_error(err, err_size, STK_EIO, "cache: %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return stk__set_error(err, err_size, STK_EIO, "cache: %s: %s", buf, strerror(errno));
    return STK_OK;
}

void stk__cache_close(stk__cache *c)
{
    if (!c)
        return;
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    stk__free(c->dir);
    stk__free(c->entries);
    stk__free(c->tmp);
    stk__free(c);
}

stk_status stk__cache_check_limit(const char *dir, uint64_t limit, char *err, size_t err_size)
{
    if (limit >= STK_CACHE_BLOCK)
        return STK_OK;
    return stk__set_error(err, err_size, STK_EINVAL,
                          "cache %s: the limit (%llu bytes) is smaller than one cache block "
                          "(%llu bytes): raise STOKER_CACHE_LIMIT / cache_limit=",
                          dir ? dir : "(STOKER_CACHE_DIR)", (unsigned long long)limit,
                          (unsigned long long)STK_CACHE_BLOCK);
}

stk_status stk__cache_open(const char *dir, uint64_t limit, stk__cache **out, char *err,
                           size_t err_size)
{
    *out = NULL;
    stk_status lrc = stk__cache_check_limit(dir, limit, err, err_size);
    if (lrc < 0)
        return lrc;
    stk__cache *c = stk__calloc(1, sizeof(*c));
    if (!c)
        return stk__set_error(err, err_size, STK_ENOMEM, "cache %s: out of memory", dir);
    c->lock_fd = -1;
    c->limit = limit;
    c->dir = stk__strdup(dir);
    c->entries = stk__path_join(dir, "entries");
    c->tmp = stk__path_join(dir, "tmp");
    char *lock = stk__path_join(dir, ".lock");
    stk_status rc = STK_OK;
    if (!c->dir || !c->entries || !c->tmp || !lock) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "cache %s: out of memory", dir);
        goto fail;
    }
    if ((rc = mkdir_p(c->entries, err, err_size)) < 0 || (rc = mkdir_p(c->tmp, err, err_size)) < 0)
        goto fail;
    c->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (c->lock_fd < 0) {
        rc = stk__set_error(err, err_size, STK_EIO, "cache: %s: %s", lock, strerror(errno));
        goto fail;
    }
    stk__free(lock);
    *out = c;
    return STK_OK;
fail:
    stk__free(lock);
    stk__cache_close(c);
    return rc;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static stk__cache *g_caches; /* kept for the process's lifetime: open files point at them */

static _Thread_local const stk__vfs_opts *t_opts; /* the calling thread's (NULL: env) */

const stk__vfs_opts *stk__vfs_opts_use(const stk__vfs_opts *o)
{
    const stk__vfs_opts *prev = t_opts;
    t_opts = o;
    return prev;
}

const stk__vfs_opts *stk__vfs_opts_current(void)
{
    return t_opts;
}

stk_status stk__cache_from_env(stk__cache **out, char *err, size_t err_size)
{
    *out = NULL;
    const stk__vfs_opts *o = t_opts;
    const char *dir = o && o->cache_dir ? o->cache_dir : getenv("STOKER_CACHE_DIR");
    if (!dir || !*dir)
        return STK_OK;
    const char *ls = getenv("STOKER_CACHE_LIMIT");
    uint64_t limit = (uint64_t)10 << 30;
    if (o && o->cache_limit)
        limit = o->cache_limit;
    else if (ls && *ls && !stk__parse_size(ls, &limit))
        return stk__set_error(err, err_size, STK_EINVAL,
                              "STOKER_CACHE_LIMIT=%s: not a size (bytes, or with K/M/G/T)", ls);
    pthread_mutex_lock(&g_lock);
    stk_status rc = STK_OK;
    stk__cache *c = g_caches;
    while (c && (strcmp(c->dir, dir) != 0 || c->limit != limit))
        c = c->next;
    if (!c && (rc = stk__cache_open(dir, limit, &c, err, err_size)) == STK_OK) {
        c->next = g_caches;
        g_caches = c;
    }
    pthread_mutex_unlock(&g_lock);
    *out = c;
    return rc;
}

/* ---- accounting and eviction (under the lock) ---- */

typedef struct entry {
    char name[96];
    struct timespec atime;
    uint64_t size;
    bool aux; /* an aux entry (its name does not end with a block number) */
} entry;

/* Eviction order: blocks before aux entries, each least recently used first. An aux entry (an
 * index) is a few bytes per record and saves reading a whole object again at the next open, so
 * a dataset larger than the cache keeps its indexes while its blocks come and go. */
static int by_atime(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->aux != y->aux)
        return x->aux ? 1 : -1;
    if (x->atime.tv_sec != y->atime.tv_sec)
        return x->atime.tv_sec < y->atime.tv_sec ? -1 : 1;
    return x->atime.tv_nsec < y->atime.tv_nsec ? -1 : x->atime.tv_nsec > y->atime.tv_nsec;
}

/* Scan the entries: their total, and when `evict_to` is not UINT64_MAX, unlink entries in
 * eviction order (by_atime) until the total is at most evict_to. Entries vanishing meanwhile
 * (another process evicting) are skipped. */
static uint64_t scan(const stk__cache *c, uint64_t evict_to)
{
    DIR *d = opendir(c->entries);
    if (!d)
        return 0;
    entry *v = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof(v->name) ||
            fstatat(dirfd(d), e->d_name, &st, 0) != 0)
            continue;
        total += (uint64_t)st.st_size;
        if (evict_to == UINT64_MAX)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            entry *nv = stk__realloc(v, nc * sizeof(*v));
            if (!nv)
                break;
            v = nv;
            cap = nc;
        }
        memcpy(v[n].name, e->d_name, strlen(e->d_name) + 1); /* length checked above */
        v[n].atime = st.st_atim;
        v[n].size = (uint64_t)st.st_size;
        const char *dash = strrchr(e->d_name, '-');
        v[n].aux = dash && dash[1] && !(dash[1] >= '0' && dash[1] <= '9');
        n++;
    }
    if (v && n > 1)
        qsort(v, n, sizeof(*v), by_atime);
    for (size_t i = 0; i < n && total > evict_to; i++)
        if (unlinkat(dirfd(d), v[i].name, 0) == 0 || errno == ENOENT)
            total -= v[i].size;
    closedir(d);
    stk__free(v);
    /* temporary files left by a process that died mid-write, after an hour */
    DIR *t = opendir(c->tmp);
    time_t now = time(NULL);
    while (t && (e = readdir(t))) {
        struct stat st;
        if (e->d_name[0] != '.' && fstatat(dirfd(t), e->d_name, &st, 0) == 0 &&
            now - st.st_mtime > 3600)
            unlinkat(dirfd(t), e->d_name, 0);
    }
    if (t)
        closedir(t);
    return total;
}

uint64_t stk__cache_bytes(const char *dir)
{
    stk__cache c = {.entries = stk__path_join(dir, "entries"), .tmp = stk__path_join(dir, "tmp")};
    uint64_t total = c.entries && c.tmp ? scan(&c, UINT64_MAX) : 0;
    stk__free(c.entries);
    stk__free(c.tmp);
    return total;
}

static bool total_read(int fd, uint64_t *total)
{
    char buf[32] = {0};
    ssize_t r = pread(fd, buf, sizeof(buf) - 1, 0);
    char *end;
    if (r <= 0)
        return false;
    *total = strtoull(buf, &end, 10);
    return end != buf && *end == '\n';
}

static void total_write(int fd, uint64_t total)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%llu\n", (unsigned long long)total);
    if (pwrite(fd, buf, (size_t)n, 0) == n)
        (void)!ftruncate(fd, n);
}

/* Move tmp into place as `path` (len bytes), evicting to keep the entries under the limit. An
 * entry already there (another process put it in first) stays, unless `replace` (an aux entry
 * found invalid): then the new one takes its place. */
static stk_status insert(stk__cache *c, const char *tmp, const char *path, uint64_t len,
                         bool replace, char *err, size_t err_size)
{
    while (flock(c->lock_fd, LOCK_EX) != 0)
        if (errno != EINTR)
            return stk__set_error(err, err_size, STK_EIO, "cache %s: lock: %s", c->dir,
                                  strerror(errno));
    uint64_t total;
    if (!total_read(c->lock_fd, &total))
        total = scan(c, UINT64_MAX);
    struct stat st;
    bool exists = stat(path, &st) == 0; /* another process put it in first */
    if (exists && !replace) {
        unlink(tmp);
    } else {
        if (exists) /* replaced: its bytes leave the total */
            total -= STK_MIN(total, (uint64_t)st.st_size);
        if (total + len > c->limit) { /* evict a sixteenth more, so scans stay rare */
            uint64_t slack = c->limit / 16, room = c->limit - len;
            total = scan(c, room > slack ? room - slack : room);
            if (total + len > c->limit) /* entries held by others' accounting: be exact */
                total = scan(c, room);
        }
        if (rename(tmp, path) != 0) {
            int e = errno;
            unlink(tmp);
            flock(c->lock_fd, LOCK_UN);
            return stk__set_error(err, err_size, STK_EIO, "cache: rename %s -> %s: %s", tmp, path,
                                  strerror(e));
        }
        total += len;
    }
    total_write(c->lock_fd, total);
    flock(c->lock_fd, LOCK_UN);
    return STK_OK;
}

/* Copy [lo, hi) of the request's bytes (relative to its start) from src into the pieces. */
static void scatter(const stk__iov *iov, int n_iov, size_t lo, size_t hi, const uint8_t *src)
{
    size_t pos = 0;
    for (int i = 0; i < n_iov && pos < hi; i++) {
        size_t a = pos, b = pos + iov[i].len;
        pos = b;
        size_t x = STK_MAX(a, lo), y = STK_MIN(b, hi);
        if (x < y)
            memcpy((uint8_t *)iov[i].base + (x - a), src + (x - lo), y - x);
    }
}

static _Atomic unsigned long g_seq;

/* Write entry `<hash>-<suffix>` (blen bytes) under tmp/ and insert it; tmp is a scratch path
 * buffer of dl bytes. A cache that cannot be written (disk full) only costs speed: false, and
 * nothing is left behind. */
static bool put_entry(stk__cache *c, const char *hash, const char *suffix, const uint8_t *buf,
                      size_t blen, bool replace, char *tmp, size_t dl)
{
    char *path = stk__malloc(dl);
    if (!path)
        return false;
    snprintf(path, dl, "%s/%s-%s", c->entries, hash, suffix);
    snprintf(tmp, dl, "%s/%s-%s.%d.%lu", c->tmp, hash, suffix, (int)getpid(),
             (unsigned long)g_seq++);
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    bool wrote = tfd >= 0 && stk__write_full(tfd, buf, blen);
    if (tfd >= 0)
        close(tfd);
    if (wrote)
        wrote = insert(c, tmp, path, blen, replace, NULL, 0) == STK_OK;
    else if (tfd >= 0)
        unlink(tmp);
    stk__free(path);
    return wrote;
}

/* Block `blk` of the object hashed `hash`, as put_entry. */
static bool put_block(stk__cache *c, const char *hash, uint64_t blk, const uint8_t *buf,
                      size_t blen, char *tmp, size_t dl)
{
    char suffix[24];
    snprintf(suffix, sizeof(suffix), "%llu", (unsigned long long)blk);
    return put_entry(c, hash, suffix, buf, blen, false, tmp, dl);
}

static size_t path_size(const stk__cache *c)
{
    return strlen(c->entries) + strlen(c->tmp) + 200;
}

/* The path of entry `<sha256(key)>-<suffix>` (a fresh string; NULL when out of memory). */
static char *entry_path(const stk__cache *c, const char *key, const char *suffix)
{
    char hash[65];
    stk__sha256_hex(key, strlen(key), hash);
    size_t dl = path_size(c);
    char *path = stk__malloc(dl);
    if (path)
        snprintf(path, dl, "%s/%s-%s", c->entries, hash, suffix);
    return path;
}

bool stk__cache_has(stk__cache *c, const char *key, uint64_t size, uint64_t blk)
{
    char suffix[24];
    snprintf(suffix, sizeof(suffix), "%llu", (unsigned long long)blk);
    char *path = entry_path(c, key, suffix);
    if (!path)
        return false;
    struct stat st;
    uint64_t boff = blk * STK_CACHE_BLOCK;
    bool has = boff < size && stat(path, &st) == 0 &&
               (uint64_t)st.st_size == STK_MIN(STK_CACHE_BLOCK, size - boff);
    stk__free(path);
    return has;
}

bool stk__cache_put(stk__cache *c, const char *key, uint64_t size, uint64_t blk, const void *buf)
{
    uint64_t boff = blk * STK_CACHE_BLOCK;
    if (boff >= size)
        return false;
    char hash[65];
    stk__sha256_hex(key, strlen(key), hash);
    size_t dl = path_size(c);
    char *tmp = stk__malloc(dl);
    bool ok =
        tmp && put_block(c, hash, blk, buf, (size_t)STK_MIN(STK_CACHE_BLOCK, size - boff), tmp, dl);
    stk__free(tmp);
    return ok;
}

stk_status stk__cache_read(stk__cache *c, const char *key, uint64_t size, uint64_t offset,
                           const stk__iov *iov, int n_iov, stk__cache_fetch fetch, void *ctx,
                           char *err, size_t err_size)
{
    size_t want = 0;
    for (int i = 0; i < n_iov; i++)
        want += iov[i].len;
    if (want == 0)
        return STK_OK;
    if (offset > size || want > size - offset)
        return stk__set_error(err, err_size, STK_EFORMAT,
                              "read of %zu bytes at %llu is past the end (%llu bytes)", want,
                              (unsigned long long)offset, (unsigned long long)size);
    char hash[65];
    stk__sha256_hex(key, strlen(key), hash);
    size_t dl = path_size(c);
    char *path = stk__malloc(dl), *tmp = stk__malloc(dl);
    uint8_t *buf = NULL;
    stk_status rc = STK_OK;
    if (!path || !tmp) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        goto done;
    }
    for (uint64_t blk = offset / STK_CACHE_BLOCK; blk <= (offset + want - 1) / STK_CACHE_BLOCK;
         blk++) {
        uint64_t boff = blk * STK_CACHE_BLOCK;
        size_t blen = (size_t)STK_MIN(STK_CACHE_BLOCK, size - boff);
        /* this block's share of the request: request bytes [lo, hi), block bytes from `in` */
        uint64_t a = STK_MAX(offset, boff), b = STK_MIN(offset + want, boff + blen);
        size_t lo = (size_t)(a - offset), hi = (size_t)(b - offset);
        size_t in = (size_t)(a - boff);
        snprintf(path, dl, "%s/%s-%llu", c->entries, hash, (unsigned long long)blk);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size == blen) {
            /* a hit: read our part straight into the pieces */
            struct iovec v[STK_MAX_FIELDS + 1];
            int nv = 0;
            size_t pos = 0;
            for (int i = 0; i < n_iov && pos < hi && nv < (int)(sizeof(v) / sizeof(v[0])); i++) {
                size_t x = STK_MAX(pos, lo), y = STK_MIN(pos + iov[i].len, hi);
                if (x < y) {
                    v[nv].iov_base = (uint8_t *)iov[i].base + (x - pos);
                    v[nv].iov_len = y - x;
                    nv++;
                }
                pos += iov[i].len;
            }
            ssize_t r = preadv(fd, v, nv, (off_t)in);
            struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
            futimens(fd, ts); /* least recently used = oldest atime */
            close(fd);
            if (r == (ssize_t)(hi - lo))
                continue;
        } else if (fd >= 0) {
            close(fd);
        }
        /* a miss: fetch the whole block, keep it, copy our part */
        if (!buf && !(buf = stk__malloc(STK_CACHE_BLOCK))) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            goto done;
        }
        if ((rc = fetch(ctx, boff, buf, blen, err, err_size)) < 0)
            goto done;
        scatter(iov, n_iov, lo, hi, buf + in);
        struct stat now; /* the fetch may have waited for a read-ahead that put it in meanwhile */
        if (stat(path, &now) != 0 || (uint64_t)now.st_size != blen)
            put_block(c, hash, blk, buf, blen, tmp, dl);
    }
done:
    stk__free(buf);
    stk__free(path);
    stk__free(tmp);
    return rc;
}

/* ---- aux entries: small derived files of an object (a member list, a frame index) ---- */

#define AUX_MAX ((uint64_t)1 << 32) /* larger aux entries are neither kept nor read */

static bool aux_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 16)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9')))
            return false;
    return !(name[0] >= '0' && name[0] <= '9'); /* never a block's name */
}

bool stk__cache_aux_get(stk__cache *c, const char *key, const char *name, uint8_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    char *path = aux_name_ok(name) ? entry_path(c, key, name) : NULL;
    if (!path)
        return false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    stk__free(path);
    if (fd < 0)
        return false;
    struct stat st;
    uint8_t *b = NULL;
    bool ok = fstat(fd, &st) == 0 && st.st_size > 0 && (uint64_t)st.st_size <= AUX_MAX &&
              (b = stk__malloc((size_t)st.st_size)) != NULL;
    size_t got = 0;
    while (ok && got < (size_t)st.st_size) {
        ssize_t r = pread(fd, b + got, (size_t)st.st_size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        ok = r > 0;
        got += ok ? (size_t)r : 0;
    }
    if (ok) {
        struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
        futimens(fd, ts); /* least recently used = oldest atime, as for blocks */
        *out = b;
        *n = got;
    } else {
        stk__free(b);
    }
    close(fd);
    return ok;
}

bool stk__cache_aux_put(stk__cache *c, const char *key, const char *name, const void *buf, size_t n)
{
    if (!aux_name_ok(name) || n == 0 || n > AUX_MAX || n > c->limit)
        return false;
    char hash[65];
    stk__sha256_hex(key, strlen(key), hash);
    size_t dl = path_size(c);
    char *tmp = stk__malloc(dl);
    bool ok = tmp && put_entry(c, hash, name, buf, n, true, tmp, dl);
    stk__free(tmp);
    return ok;
}
