/*
 * stk_vfs.h: byte sources. Every byte a record source reads comes through this small
 * VFS-style table (sqlite's sqlite3_vfs/sqlite3_io_methods, curl's protocol handlers): open a
 * file, its size, a scattered read at an offset, list a directory (or an object-store prefix),
 * expand a pattern, close. POSIX is the first implementation (stk_vfs_posix.c); a remote one
 * (HTTP ranged GETs, S3) is added as one more table claiming its URL scheme, without touching the
 * loader or any format.
 *
 * Contract for implementations:
 *  - `read` is thread-safe on one open file (worker threads share it; pread semantics) and reads
 *    exactly the bytes asked for or fails: a short file is STK_EFORMAT ("truncated"), a failed
 *    read STK_EIO. Messages name the path (and the offset for reads).
 *  - Errors go to (err, err_size), never to stderr; nothing here prints.
 *  - The file's size is taken at open and is what readers validate against. A file that shrinks
 *    later gives an error from `read`, never a signal (nothing is mapped).
 *  - A read gets the bytes of the version opened or fails: a local file whose size or
 *    modification time changed since the open (rewritten in place) fails every later read with
 *    STK_EIO "changed while open"; remote reads send If-Match on the ETag (or
 *    If-Unmodified-Since on Last-Modified) and check the answer's validator, so a replaced
 *    object is STK_EIO "changed since it was opened", never bytes of two versions.
 *
 * Path lists (stk_paths.c) expand what users write for a dataset, the same for every format:
 * lists, brace ranges (`train-{000000..000127}.tar`), globs, and directories listed with a
 * suffix filter, each sorted in byte order whatever the locale.
 */
#ifndef STK_VFS_H
#define STK_VFS_H

#include "stk_internal.h"

typedef struct stk__vfs stk__vfs;

/* An open file. Implementations embed it first in their own struct. */
typedef struct stk__file {
    const stk__vfs *vfs;
    char *path;    /* as opened */
    uint64_t size; /* at open */
    /* The version read pins (issue 30: a file rewritten under a reader gave a mix of two
     * versions): a local file's modification time (ns) and inode at open; for a remote object,
     * a hash of its ETag or Last-Modified (ino 0). A read of a changed file fails. */
    uint64_t mtime_ns, ino;
} stk__file;

/* One piece of a scattered read. */
typedef struct stk__iov {
    void *base;
    size_t len;
} stk__iov;

/* A byte range of a file (read-ahead hints). */
typedef struct stk__brange {
    uint64_t off, len;
} stk__brange;

/* What stat says about a path. */
typedef struct stk__stat {
    bool is_dir;
    bool is_regular; /* a regular file (not a FIFO, device or socket) */
    uint64_t size;
    uint64_t dev, ino; /* identity of the object (0 when the byte source has none) */
} stk__stat;

/* A growable list of strings (paths or names), owned. */
typedef struct stk__strlist {
    char **v;
    size_t n, cap;
} stk__strlist;

struct stk__vfs {
    const char *name; /* "posix", "s3", "http" */
    /* Whether this table serves `path` (a URL scheme; POSIX serves the rest). */
    bool (*claims)(const char *path);
    stk_status (*open)(const char *path, stk__file **out, char *err, size_t err_size);
    /* Read the pieces back to back from `offset` (one request for contiguous bytes). */
    stk_status (*read)(stk__file *f, uint64_t offset, const stk__iov *iov, int n_iov, char *err,
                       size_t err_size);
    void (*close)(stk__file *f);
    /* STK_OK with *st, STK_EIO when the path does not exist (message names it). */
    stk_status (*stat)(const char *path, stk__stat *st, char *err, size_t err_size);
    /* Names (not paths) of a directory's entries, unsorted, without "." and "..". */
    stk_status (*list)(const char *dir, stk__strlist *out, char *err, size_t err_size);
    /* Append the matches of a glob pattern, sorted; STK_EIO when nothing matches. */
    stk_status (*glob)(const char *pattern, stk__strlist *out, char *err, size_t err_size);
    /* Optional (NULL: a no-op, as for POSIX): a hint that the ranges will be read soon. Must not
     * block (it queues); ranges may be dropped (a later read fetches them itself) and are
     * reordered in place. Reads stay exact whatever the hint said. */
    void (*readahead)(stk__file *f, stk__brange *r, size_t n);
    /* Optional (NULL: none, as for POSIX, whose formats keep their indexes beside the file): a
     * small aux entry `name` ("stkidx") derived from f's bytes, kept by the byte source (the
     * remote block cache) under f's identity (URL, ETag or Last-Modified, size). aux_get: its
     * bytes in a fresh buffer (*out, *n; stk__free it), false when there is none (no cache,
     * missing, evicted); callers validate what they get. aux_put: store it, replacing, best
     * effort. Thread-safe. */
    bool (*aux_get)(stk__file *f, const char *name, uint8_t **out, size_t *n);
    void (*aux_put)(stk__file *f, const char *name, const void *buf, size_t n);
    /* Optional (NULL: none, as for remote files): the descriptor of a local file, for reads
     * batched outside `read` (stk_uring.h); -1 when there is none. */
    int (*fd)(const stk__file *f);
};

/* Per-dataset settings of the remote byte sources (stk_dataset_opts' cache_dir / cache_limit).
 * They reach the byte sources' open through the calling thread: the dataset sets them around its
 * open and its reads (stk__dataset_read), so no format passes them along. */
/* The answers of remote HEAD requests by path (size and ETag or Last-Modified), kept for the
 * length of one dataset open, so that a URL asked about several times (the path expansion's
 * existence check, the directory check, the open) costs one request (stk_vfs_http.c). A hash
 * table, open addressing; zero-initialised empty. */
typedef struct stk__head_seen {
    char *path; /* NULL: an empty slot */
    char *validator;
    uint64_t hash, size;
} stk__head_seen;
typedef struct stk__head_memo {
    stk__head_seen *v;
    size_t n, cap; /* cap: 0 or a power of two */
} stk__head_memo;
void stk__head_memo_clear(stk__head_memo *m);

typedef struct stk__vfs_opts {
    const char *cache_dir; /* NULL: STOKER_CACHE_DIR (unset: no cache); "": no cache */
    uint64_t cache_limit;  /* bytes; 0: STOKER_CACHE_LIMIT, else 10 GiB */
    stk__head_memo *heads; /* during a dataset open: the HEAD answers so far; NULL: none kept */
} stk__vfs_opts;

/* Make `o` (NULL: the environment's) the settings of the calling thread's opens; returns the
 * previous ones, for the caller to put back. */
const stk__vfs_opts *stk__vfs_opts_use(const stk__vfs_opts *o);
/* The calling thread's settings (NULL: the environment's). */
const stk__vfs_opts *stk__vfs_opts_current(void);

/* The byte source serving `path`: the first registered table that claims it, else POSIX. */
const stk__vfs *stk__vfs_for(const char *path);

/* Open `path` with the byte source serving it. */
stk_status stk__vfs_open(const char *path, stk__file **out, char *err, size_t err_size);

/* Read `size` bytes at `offset` into buf (one piece). */
stk_status stk__vfs_read(stk__file *f, uint64_t offset, void *buf, size_t size, char *err,
                         size_t err_size);

/* Hint that the ranges of f will be read soon (f->vfs->readahead; a no-op without one). */
static inline void stk__vfs_readahead(stk__file *f, stk__brange *r, size_t n)
{
    if (f->vfs->readahead && n)
        f->vfs->readahead(f, r, n);
}

/* f's aux entry `name` (f->vfs->aux_get; false without one). */
static inline bool stk__vfs_aux_get(stk__file *f, const char *name, uint8_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    return f->vfs->aux_get && f->vfs->aux_get(f, name, out, n);
}

/* Store f's aux entry `name` (f->vfs->aux_put; a no-op without one). */
static inline void stk__vfs_aux_put(stk__file *f, const char *name, const void *buf, size_t n)
{
    if (f->vfs->aux_put)
        f->vfs->aux_put(f, name, buf, n);
}

/* f's local descriptor (f->vfs->fd; -1 without one). */
static inline int stk__vfs_fd(const stk__file *f)
{
    return f->vfs->fd ? f->vfs->fd(f) : -1;
}

/* Whether a file with a local descriptor is still the version opened (its size and modification
 * time as at open): what every POSIX read checks after reading, for reads made outside `read`
 * (stk_uring.h) to check once after theirs. false for a file without a descriptor. */
bool stk__vfs_fd_unchanged(const stk__file *f);

/* Close a file (accepts NULL). */
void stk__vfs_close(stk__file *f);

/* Files a source lends for a field read in place (stk_vfs_lend.c), closed with stk__vfs_close:
 * a view of `of` (which stays open: the source's; it must outlive the view), and a file of the
 * `size` bytes at `bytes` (stk__malloc'd; owned from the call, freed at close, also on failure)
 * named `path` (borrowed: must outlive the file). */
stk_status stk__vfs_borrow(stk__file *of, stk__file **out, char *err, size_t err_size);
stk_status stk__vfs_memfile(uint8_t *bytes, uint64_t size, const char *path, stk__file **out,
                            char *err, size_t err_size);
/* As stk__vfs_memfile, for bytes that are those of `src` (the source's open file, which must
 * outlive this one) from offset `at` (a .stk record's field read whole to check it) or derived
 * from them alone (a tar's gzipped member, gunzipped): stk__vfs_origin names them. */
stk_status stk__vfs_memfile_of(uint8_t *bytes, uint64_t size, stk__file *src, uint64_t at,
                               stk__file **out, char *err, size_t err_size);
/* Where lent file f's bytes come from: *src the source's file and *at the offset there of f's
 * offset 0 (a borrowed view: its file, 0; stk__vfs_memfile_of's). false (NULL, 0): f is not lent,
 * or is a file in memory of no known origin. */
bool stk__vfs_origin(const stk__file *f, stk__file **src, uint64_t *at);
/* Whether f is a file in memory (stk__vfs_memfile): reading it is no I/O (not counted as read). */
bool stk__vfs_in_memory(const stk__file *f);
/* Whether f is lent (borrowed or in memory): a part of a source's file, not a file of its own
 * (nothing is kept beside it: stk_memofile.c). */
bool stk__vfs_lent(const stk__file *f);

/* stat through the byte source serving `path`. */
stk_status stk__vfs_stat(const char *path, stk__stat *st, char *err, size_t err_size);

/* The POSIX byte source (files on local disks and mounts). */
extern const stk__vfs stk__vfs_posix;
/* `stk-fault:PLAN:PATH`: PATH through scheduled faults, for tests (stk_vfs_fault.c). */
extern const stk__vfs stk__vfs_fault;

/* ---- string lists (stk_paths.c) ---- */

stk_status stk__strlist_add(stk__strlist *l, const char *s);
void stk__strlist_sort(stk__strlist *l); /* byte order */
void stk__strlist_free(stk__strlist *l);

/* "dir/name" with exactly one slash between them (a fresh stk__malloc string, NULL on OOM). */
char *stk__path_join(const char *dir, const char *name);

/* Expand the dataset arguments into paths, in order: each argument's brace ranges
 * ("a-{00..12}.tar", zero padding kept, at most 1,000,000 names), then glob patterns (sorted
 * matches; no match is an error naming the pattern); an argument that names nothing is an error
 * naming it. Directories are kept as they are (formats decide what a directory holds). */
stk_status stk__paths_expand(const char *const *args, size_t n_args, stk__strlist *out, char *err,
                             size_t err_size);

/* The entries of directory `dir` whose names end with `suffix` (all when NULL), as full paths
 * sorted by name; temporary writer files ("x.stk.tmp.<pid>.<n>") are left out. Directories are
 * left out unless `dirs` is true. */
stk_status stk__paths_list_dir(const char *dir, const char *suffix, bool dirs, stk__strlist *out,
                               char *err, size_t err_size);

/* A directory given as a dataset stands for its files whose names end with one of `suffixes`
 * (NULL-terminated: {".tfrecord", ".tfrecords", NULL}), appended to out sorted by name as
 * stk__paths_list_dir lists them (directories too when `dirs`). None is STK_EINVAL
 * "DIR: no WHAT in this directory" (what: ".tar shards"). Every file format's open uses this. */
stk_status stk__paths_dir_files(const char *dir, const char *const *suffixes, const char *what,
                                bool dirs, stk__strlist *out, char *err, size_t err_size);

/* The files of a file format's dataset arguments (already expanded by stk__paths_expand): each
 * directory replaced by its files (stk__paths_dir_files), anything else kept as given. */
stk_status stk__paths_files(const char *const *paths, size_t n_paths, const char *const *suffixes,
                            const char *what, stk__strlist *out, char *err, size_t err_size);

/* For a format's probe: 1 when directory `dir` holds at least one file ending with one of
 * `suffixes`, 0 when none (or it cannot be listed), -1 when out of memory. Does not block. */
int stk__paths_dir_has(const char *dir, const char *const *suffixes);

/* Whether `name` is one of stoker's own files, never data: a writer's temporary file
 * ("<shard>.tmp.<pid>.<n>") or an index kept beside the data ("<shard>.stkidx", "<video or
 * shard>.stkvidx"), so a pattern of every file in "shards/" matches the same data before and
 * after a loader wrote its indexes. */
bool stk__path_not_data(const char *name);

#endif /* STK_VFS_H */
