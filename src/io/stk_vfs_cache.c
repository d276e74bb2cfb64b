/*
 * stk_vfs_cache.c: the on-disk cache of remote bytes, shared by every process on the machine.
 *
 * Layout under the cache directory: `entries/<sha256(key)>-<block>` (one block of STK_CACHE_BLOCK
 * bytes of one object version, key = URL + ETag + size, followed by its own checksums: one
 * XXH3-64 per 4 KiB chunk, seeded by the key's hash, the block and the chunk number),
 * `entries/<sha256(key)>-<name>` (an aux entry of that version: `stkidx`, a tar shard's member
 * list; `tfidx`, a TFRecord file's frame offsets; counted in the limit, evicted after the blocks),
 * `tmp/` (entries being written), `.lock` (flock'ed while an entry goes in; holds the entries'
 * total size). A miss fetches the whole block, writes it under tmp/ and renames it into entries/
 * (rename is atomic: a reader sees a whole entry or none). Inserting takes the lock, evicts the
 * least recently used blocks (atime, set on every hit with futimens; then aux entries likewise)
 * until the new one fits under the limit, renames, and updates the total: entries never exceed the
 * limit, whatever the number of processes. Readers take no lock; an entry evicted while being read
 * stays readable through its open descriptor. flock is released when a process dies, so a crash
 * never wedges the cache.
 *
 * A hit checks the checksum of every chunk it reads (issue 30: a flipped bit in a shared cache
 * was served to every job, every epoch, and for formats without checksums of their own, as
 * WebDataset tars, silently). An entry whose checksum or size is wrong (damage, a cut, the
 * layout before checksums) is evicted and its block fetched again; when that fails, the error
 * names the cache file.
 */
#include "common/stk_endian.h"
#include "io/stk_sigv4.h"
#include "io/stk_vfs_http.h"

#include <xxhash.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CHUNK 4096 /* bytes of a block under one checksum */

/* Bytes of the checksums after a block of blen bytes, and the whole entry's size. */
static size_t sums_size(size_t blen)
{
    return (blen + CHUNK - 1) / CHUNK * 8;
}

static uint64_t entry_size(size_t blen)
{
    return (uint64_t)blen + sums_size(blen);
}

/* The seed of an object's chunk checksums: the first 16 hex digits of its key's hash. */
static uint64_t key_seed(const char *hash)
{
    char h[17];
    memcpy(h, hash, 16);
    h[16] = '\0';
    return strtoull(h, NULL, 16);
}

/* The checksum of chunk k of block blk of the object whose key seeds `seed`. */
static uint64_t chunk_sum(const uint8_t *p, size_t n, uint64_t seed, uint64_t blk, size_t k)
{
    return XXH3_64bits_withSeed(p, n, seed ^ (blk << 24) ^ (uint64_t)k);
}

#define CHUNKS_PER_BLOCK (STK_CACHE_BLOCK / CHUNK)

static bool chunk_checked(_Atomic uint64_t *checked, uint64_t i)
{
    return (atomic_load_explicit(&checked[i / 64], memory_order_relaxed) >> (i % 64)) & 1;
}

struct stk__cache {
    char *dir, *entries, *tmp, *lock;
    uint64_t limit;
    int lock_fd;
    pthread_mutex_t remake;  /* one thread at a time makes the directories again */
    _Atomic bool unwritable; /* an insert failed even after making them again */
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
    struct stat st;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return stk__set_error(err, err_size, STK_EIO, "cache: %s: %s", buf, strerror(errno));
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return stk__set_error(err, err_size, STK_EIO, "cache: %s: not a directory", buf);
    return STK_OK;
}

/* Make the cache's directories and lock file if they are missing: at open, and again when
 * they were removed while the process lives (issue 30: a user or a tmp cleaner clearing the
 * directory left every later read a miss that could never be kept, with no message). A lock
 * file replaced by a new one is taken over in place (dup2 onto the same descriptor), so other
 * threads keep using c->lock_fd. */
static stk_status cache_dirs(stk__cache *c, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    pthread_mutex_lock(&c->remake);
    struct stat have, now;
    bool lock_ok = c->lock_fd >= 0 && fstat(c->lock_fd, &have) == 0 && stat(c->lock, &now) == 0 &&
                   have.st_ino == now.st_ino && have.st_dev == now.st_dev;
    if ((rc = mkdir_p(c->entries, err, err_size)) == STK_OK &&
        (rc = mkdir_p(c->tmp, err, err_size)) == STK_OK && !lock_ok) {
        int fd = open(c->lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0) {
            rc = stk__set_error(err, err_size, STK_EIO, "cache: %s: %s", c->lock, strerror(errno));
        } else if (c->lock_fd < 0) {
            c->lock_fd = fd;
        } else {
            dup2(fd, c->lock_fd); /* keeps O_CLOEXEC off: set it again */
            fcntl(c->lock_fd, F_SETFD, FD_CLOEXEC);
            close(fd);
        }
    }
    if (rc == STK_OK)
        c->unwritable = false;
    pthread_mutex_unlock(&c->remake);
    return rc;
}

/* Whether the directories are still there (cheap: one stat). */
static bool cache_dirs_there(const stk__cache *c)
{
    struct stat st, lk;
    return stat(c->tmp, &st) == 0 && S_ISDIR(st.st_mode) && stat(c->lock, &lk) == 0;
}

void stk__cache_close(stk__cache *c)
{
    if (!c)
        return;
    if (c->lock_fd >= 0)
        close(c->lock_fd);
    pthread_mutex_destroy(&c->remake);
    stk__free(c->dir);
    stk__free(c->entries);
    stk__free(c->tmp);
    stk__free(c->lock);
    stk__free(c);
}

stk_status stk__cache_check_limit(const char *dir, uint64_t limit, char *err, size_t err_size)
{
    if (limit >= entry_size(STK_CACHE_BLOCK))
        return STK_OK;
    return stk__set_error(err, err_size, STK_EINVAL,
                          "cache %s: the limit (%llu bytes) is smaller than one cache block "
                          "(%llu bytes with its checksums): raise STOKER_CACHE_LIMIT / "
                          "cache_limit=",
                          dir ? dir : "(STOKER_CACHE_DIR)", (unsigned long long)limit,
                          (unsigned long long)entry_size(STK_CACHE_BLOCK));
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
    pthread_mutex_init(&c->remake, NULL);
    c->dir = stk__strdup(dir);
    c->entries = stk__path_join(dir, "entries");
    c->tmp = stk__path_join(dir, "tmp");
    c->lock = stk__path_join(dir, ".lock");
    stk_status rc = STK_OK;
    if (!c->dir || !c->entries || !c->tmp || !c->lock) {
        rc = stk__set_error(err, err_size, STK_ENOMEM, "cache %s: out of memory", dir);
        goto fail;
    }
    if ((rc = cache_dirs(c, err, err_size)) < 0)
        goto fail;
    *out = c;
    return STK_OK;
fail:
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
    } else if (c && (c->unwritable || !cache_dirs_there(c))) {
        rc = cache_dirs(c, err, err_size); /* removed since: made again, or the open says why */
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

/* Write entry `<hash>-<suffix>` (blen bytes, then `tail` of tail_len bytes) under tmp/ and
 * insert it; tmp is a scratch path buffer of dl bytes. A cache that cannot be written (disk
 * full) only costs speed: false, and nothing is left behind. */
static bool put_entry(stk__cache *c, const char *hash, const char *suffix, const uint8_t *buf,
                      size_t blen, const uint8_t *tail, size_t tail_len, bool replace, char *tmp,
                      size_t dl)
{
    char *path = stk__malloc(dl);
    if (!path)
        return false;
    snprintf(path, dl, "%s/%s-%s", c->entries, hash, suffix);
    snprintf(tmp, dl, "%s/%s-%s.%d.%lu", c->tmp, hash, suffix, (int)getpid(),
             (unsigned long)g_seq++);
    int tfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (tfd < 0 && errno == ENOENT && cache_dirs(c, NULL, 0) == STK_OK) /* removed meanwhile */
        tfd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    bool wrote = tfd >= 0 && stk__write_full(tfd, buf, blen) &&
                 (!tail_len || stk__write_full(tfd, tail, tail_len));
    if (tfd >= 0)
        close(tfd);
    if (wrote)
        wrote = insert(c, tmp, path, blen + tail_len, replace, NULL, 0) == STK_OK;
    else if (tfd >= 0)
        unlink(tmp);
    stk__free(path);
    return wrote;
}

/* Block `blk` of the object hashed `hash` with its checksums, as put_entry; `replace` an entry
 * found damaged meanwhile. */
static bool put_block(stk__cache *c, const char *hash, uint64_t blk, const uint8_t *buf,
                      size_t blen, bool replace, char *tmp, size_t dl)
{
    char suffix[24];
    snprintf(suffix, sizeof(suffix), "%llu", (unsigned long long)blk);
    size_t ns = sums_size(blen);
    uint8_t *sums = stk__malloc(ns);
    if (!sums)
        return false;
    uint64_t seed = key_seed(hash);
    for (size_t k = 0; k * CHUNK < blen; k++)
        stk__st64(sums + 8 * k, chunk_sum(buf + k * CHUNK, STK_MIN((size_t)CHUNK, blen - k * CHUNK),
                                          seed, blk, k));
    bool ok = put_entry(c, hash, suffix, buf, blen, sums, ns, replace, tmp, dl);
    stk__free(sums);
    if (!ok) /* not even after making the directories again: misses stop fetching whole blocks */
        c->unwritable = true;
    return ok;
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
               (uint64_t)st.st_size == entry_size((size_t)STK_MIN(STK_CACHE_BLOCK, size - boff));
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
    bool ok = tmp && put_block(c, hash, blk, buf, (size_t)STK_MIN(STK_CACHE_BLOCK, size - boff),
                               false, tmp, dl);
    stk__free(tmp);
    return ok;
}

/* The n bytes at position pos of the concatenation of v[0..nv): in place when one piece holds
 * them, else gathered into tmp. */
static const uint8_t *gather(const struct iovec *v, int nv, size_t pos, size_t n, uint8_t *tmp)
{
    size_t at = 0, done = 0;
    for (int i = 0; i < nv && done < n; i++) {
        size_t a = at, b = at + v[i].iov_len;
        at = b;
        if (pos + done >= b)
            continue;
        size_t from = pos + done - a, k = STK_MIN(n - done, b - (pos + done));
        if (done == 0 && k == n)
            return (const uint8_t *)v[i].iov_base + from;
        memcpy(tmp + done, (const uint8_t *)v[i].iov_base + from, k);
        done += k;
    }
    return tmp;
}

/* A hit: read block bytes [in, in + hi - lo) of the entry open as fd (block blk, blen bytes)
 * into the request's bytes [lo, hi), with the rest of the 4 KiB chunks they touch, and check
 * each chunk against its checksum, unless `checked` says this process checked it before (then
 * only our bytes are read); the chunks checked now are noted there. false when a read falls
 * short or a checksum differs. */
static bool hit_read(int fd, const char *hash, uint64_t blk, size_t blen, const stk__iov *iov,
                     int n_iov, size_t lo, size_t hi, size_t in, _Atomic uint64_t *checked)
{
    size_t len = hi - lo, c0 = in / CHUNK, c1 = (in + len - 1) / CHUNK;
    size_t span_a = c0 * CHUNK, span_b = STK_MIN((c1 + 1) * CHUNK, blen);
    uint8_t head[CHUNK], tail[CHUNK], tmp[CHUNK];
    struct iovec v[STK_MAX_FIELDS + 3];
    int nv = 0;
    uint64_t first = blk * CHUNKS_PER_BLOCK; /* the block's first chunk in `checked` */
    bool all = checked != NULL;
    for (size_t k = c0; all && k <= c1; k++)
        all = chunk_checked(checked, first + k);
    if (all) { /* read before, checked then: our bytes only, straight into the pieces */
        span_a = in;
        span_b = in + len;
    }
    if (in > span_a)
        v[nv++] = (struct iovec){head, in - span_a};
    size_t pos = 0;
    for (int i = 0; i < n_iov && pos < hi && nv < (int)(sizeof(v) / sizeof(v[0])) - 1; i++) {
        size_t x = STK_MAX(pos, lo), y = STK_MIN(pos + iov[i].len, hi);
        if (x < y)
            v[nv++] = (struct iovec){(uint8_t *)iov[i].base + (x - pos), y - x};
        pos += iov[i].len;
    }
    if (span_b > in + len)
        v[nv++] = (struct iovec){tail, span_b - (in + len)};
    ssize_t r = preadv(fd, v, nv, (off_t)span_a);
    if (r != (ssize_t)(span_b - span_a))
        return false;
    if (all)
        return true;
    size_t n_sums = c1 - c0 + 1;
    uint8_t sums[CHUNKS_PER_BLOCK * 8];
    if (pread(fd, sums, n_sums * 8, (off_t)(blen + c0 * 8)) != (ssize_t)(n_sums * 8))
        return false;
    uint64_t seed = key_seed(hash);
    for (size_t k = c0; k <= c1; k++) {
        size_t n = STK_MIN((size_t)CHUNK, blen - k * CHUNK);
        const uint8_t *p = gather(v, nv, k * CHUNK - span_a, n, tmp);
        if (chunk_sum(p, n, seed, blk, k) != stk__ld64(sums + 8 * (k - c0)))
            return false;
    }
    for (size_t k = c0; checked && k <= c1; k++) /* checked: later hits read it as it is */
        atomic_fetch_or_explicit(&checked[(first + k) / 64], (uint64_t)1 << ((first + k) % 64),
                                 memory_order_relaxed);
    return true;
}

/* Evict the damaged entry open as fd at path (unless another process replaced it meanwhile),
 * taking its bytes out of the total. Best effort. */
static void evict_damaged(stk__cache *c, int fd, const char *path)
{
    struct stat mine, now;
    if (fstat(fd, &mine) != 0)
        return;
    while (flock(c->lock_fd, LOCK_EX) != 0)
        if (errno != EINTR)
            return;
    if (stat(path, &now) == 0 && now.st_ino == mine.st_ino && now.st_dev == mine.st_dev &&
        unlink(path) == 0) {
        uint64_t total;
        if (total_read(c->lock_fd, &total))
            total_write(c->lock_fd, total - STK_MIN(total, (uint64_t)mine.st_size));
    }
    flock(c->lock_fd, LOCK_UN);
}

stk_status stk__cache_read(stk__cache *c, const char *key, uint64_t size, uint64_t offset,
                           const stk__iov *iov, int n_iov, stk__cache_fetch fetch, void *ctx,
                           char *err, size_t err_size)
{
    return stk__cache_read_checked(c, key, size, offset, iov, n_iov, fetch, ctx, NULL, err,
                                   err_size);
}

stk_status stk__cache_read_checked(stk__cache *c, const char *key, uint64_t size, uint64_t offset,
                                   const stk__iov *iov, int n_iov, stk__cache_fetch fetch,
                                   void *ctx, _Atomic uint64_t *checked, char *err, size_t err_size)
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
        bool damaged = false;
        if (fd >= 0) {
            struct stat st;
            damaged = !(fstat(fd, &st) == 0 && (uint64_t)st.st_size == entry_size(blen) &&
                        hit_read(fd, hash, blk, blen, iov, n_iov, lo, hi, in, checked));
            if (!damaged) { /* a hit, checked */
                struct timespec ts[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
                futimens(fd, ts); /* least recently used = oldest atime */
                close(fd);
                continue;
            }
            evict_damaged(c, fd, path);
            close(fd);
        }
        /* a miss: fetch the whole block, keep it, copy our part; while the cache cannot be
         * written, fetch only our part (a block that cannot be kept would cost a whole block's
         * transfer per read: the silent slowdown of issue 30) */
        if (!buf && !(buf = stk__malloc(STK_CACHE_BLOCK))) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            goto done;
        }
        if (c->unwritable && !damaged) {
            if ((rc = fetch(ctx, a, buf, hi - lo, err, err_size)) < 0)
                goto done;
            scatter(iov, n_iov, lo, hi, buf);
            continue;
        }
        char why[STK_ERRMSG_SIZE];
        if ((rc = fetch(ctx, boff, buf, blen, why, sizeof(why))) < 0) {
            if (damaged)
                stk__set_error(err, err_size, rc,
                               "cache block %s failed its checksum (evicted), and fetching it "
                               "again failed: %s",
                               path, why);
            else
                stk__set_error(err, err_size, rc, "%s", why);
            goto done;
        }
        scatter(iov, n_iov, lo, hi, buf + in);
        struct stat now; /* the fetch may have waited for a read-ahead that put it in meanwhile */
        if (stat(path, &now) != 0 || (uint64_t)now.st_size != entry_size(blen))
            put_block(c, hash, blk, buf, blen, damaged, tmp, dl);
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
    bool ok = tmp && put_entry(c, hash, name, buf, n, NULL, 0, true, tmp, dl);
    stk__free(tmp);
    return ok;
}
