/*
 * stk_source.h: record sources. Every input format (.stk shards, ImageFolder trees, a directory
 * of .npy files; WebDataset tar, TFRecord, HDF5, LMDB next) implements one table of functions,
 * as sqlite's sqlite3_io_methods or curl's protocol handlers, and fills the common part of the
 * dataset at open. The loader, the CLI (inspect, verify, bench, pack, doctor) and the Python
 * Dataset see only this: the public stk_dataset_* functions are thin wrappers over the table
 * (stk_source.c), which also holds the registry and format detection (magic bytes, then
 * extension; `format=` overrides), in one place.
 *
 * Adding a format: one new file defining `const stk__source_methods stk__src_NAME` and one line
 * `STK_SOURCE(NAME)` in stk_sources.def. docs/design.md walks through an example.
 *
 * Every byte a source reads goes through the byte-source interface (io/stk_vfs.h), so remote
 * storage plugs in below the formats.
 *
 * Threads: after open the dataset is immutable except for what a source guards itself (the
 * .stk source's verified-record bitmap uses atomics). `read` and `describe` may run on any
 * number of threads at once; a source that needs per-thread state (an LMDB read transaction, a
 * decompression buffer) provides a cursor, one per thread.
 */
#ifndef STK_SOURCE_H
#define STK_SOURCE_H

#include "io/stk_vfs.h"
#include "stk_internal.h"

typedef struct stk__source_methods stk__source_methods;

/* STK_FAIL for functions that report into (err, err_size) parameters. */
#define STK_FAIL_E(code, ...)                                                                      \
    do {                                                                                           \
        rc = stk__set_error(err, err_size, (code), __VA_ARGS__);                                   \
        goto fail;                                                                                 \
    } while (0)

/* Per-thread read state of a source (opaque; NULL for sources that need none). */
typedef struct stk__cursor stk__cursor;

/* One file (shard) of a dataset, as stoker inspect lists it. */
typedef struct stk__srcfile {
    char *path;
    uint64_t first;     /* global number of its first record */
    uint64_t count;     /* records */
    uint64_t size;      /* bytes of the file (the tree's image bytes for a directory source) */
    uint64_t data_size; /* bytes of record payload */
    uint32_t version;   /* format version (0 when the format has none) */
    char *metadata;     /* JSON ("{}" when the format has none) */
} stk__srcfile;

/* The common part of every open dataset, filled by the source's open (count, schema, maxima,
 * files, fingerprint) except m, flags, vfs and cache_dir, which the dispatcher sets. */
struct stk_dataset {
    const stk__source_methods *m;
    void *impl;     /* the source's own state */
    unsigned flags; /* STK_DATASET_* */
    /* During open only (NULL otherwise): the field name of each path, one file per path
     * (stk_dataset_opts.field_names), for sources with takes_names. */
    const char *const *open_names;
    /* During open only (NULL otherwise): the token options (stk_tokens_open) for sources with
     * `tokens`; NULL when the dataset is opened as records of documents. */
    const stk_tokens_opts *open_tokens;
    /* The source orders its records itself (a mixture: positions stay in order, its parts
     * shuffle themselves): a loader's STK_ORDER_ALL keeps them in order and passes the shuffle
     * setting in the read key. */
    bool self_ordered;
    uint64_t count;
    uint32_t n_fields;
    stk_field fields[STK_MAX_FIELDS];
    uint64_t field_max[STK_MAX_FIELDS]; /* largest size of each field over all records */
    uint64_t max_record;                /* largest total record size */
    uint64_t fingerprint;               /* identity for resume states */
    stk__srcfile *files;
    size_t n_files;
    stk__vfs_opts vfs; /* the byte sources' settings (stk_dataset_opts' cache), in force on the
                          thread around open, cursor_open and read */
    char *cache_dir;   /* owned copy behind vfs.cache_dir */
};

/* What a read found: where the record lives and each field's size. */
typedef struct stk__recinfo {
    uint32_t file;   /* index into ds->files */
    uint64_t local;  /* record number inside that file */
    uint64_t offset; /* byte offset of the record in the file (UINT64_MAX: not one place) */
    uint64_t size;   /* bytes of all fields */
    uint64_t field_size[STK_MAX_FIELDS];
} stk__recinfo;

/* What a record read in a loader may depend on besides the record number: records drawn per
 * epoch (token rows at random offsets, mixtures) are a pure function of (seed, epoch, record). */
typedef struct stk__readkey {
    uint64_t seed, epoch;
    bool shuffle;
} stk__readkey;

/* Read flags. */
#define STK__READ_NO_VERIFY 0x1u  /* skip checksum checks (STK_LOADER_NO_VERIFY) */
#define STK__READ_VERIFY_ALL 0x2u /* check checksums even of records verified before */

struct stk__source_methods {
    const char *name;    /* the format= name: "stk", "imagefolder", "npy" */
    const char *summary; /* one line for `--help` (stk_format_summary) */
    bool takes_names;    /* open reads ds->open_names (one field per file, named by the caller) */
    bool tokens;         /* a token corpus format: open reads ds->open_tokens, and detection for
                            stk_tokens_open prefers it */
    /* How sure the source is that `path` is its format: 0 no, 1 by name (extension, directory
     * contents), 2 by content (magic bytes); -1 when it cannot tell for lack of memory (opening
     * fails with STK_ENOMEM rather than guess). `head` holds the first bytes of a file (n may
     * be less than asked, 0 for a directory). Must not block. */
    int (*probe)(const char *path, const stk__stat *st, const uint8_t *head, size_t n);
    /* Open the paths (expanded by stk__paths_expand; directories as given) and fill the common
     * part. On failure the dispatcher calls close on the partly opened dataset. */
    stk_status (*open)(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                       size_t err_size);
    /* Free the source's state (ds->impl) and everything open may have set. */
    void (*close)(stk_dataset *ds);
    /* Optional per-thread state for read; NULL when read needs none. */
    stk_status (*cursor_open)(const stk_dataset *ds, stk__cursor **out, char *err, size_t err_size);
    void (*cursor_close)(const stk_dataset *ds, stk__cursor *cur);
    /* Read record i: field f's bytes into dst[f] (capacity cap[f]; a larger field is
     * STK_ELIMIT). info receives the sizes and location. Errors name the file and record (as
     * describe does) and the reason. */
    stk_status (*read)(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                       const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                       size_t err_size);
    /* "data/shard-00003.stk record 1841 (global 1841) at byte 1234567": where record i is, for
     * error messages. */
    void (*describe)(const stk_dataset *ds, uint64_t i, char *buf, size_t size);
    /* Optional (NULL: no read-ahead): the file record i is read from and the byte range its read
     * covers, for read-ahead (stk__dataset_readahead). false when there is none to give. Must
     * not block; reads stay exact whatever the read-ahead did. */
    bool (*extent)(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r);
    /* Optional (NULL: read is the whole story): read record i as it is in the epoch and with the
     * seed of `key` (a loader's); `read` is this with seed 0, epoch 0, no shuffle. */
    stk_status (*read_keyed)(const stk_dataset *ds, stk__cursor *cur, const stk__readkey *key,
                             uint64_t i, void *const dst[], const size_t cap[], unsigned flags,
                             stk__recinfo *info, char *err, size_t err_size);
    /* Optional: the file and byte range of field f of record i, without reading it (a token
     * column reads spans of a document in place); false when there is none to give. Must not
     * block. */
    bool (*field_extent)(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                         stk__brange *r);
    /* Optional (NULL: fields are read whole): open field f of record i to be read in place, in
     * pieces (a transform that needs a second of a minute-long audio file): the file holding it
     * (*file, which the caller closes with stk__vfs_close) and the field's byte range there.
     * A source with field_open takes dst[f] NULL in `read` for such a field: its size is
     * reported (info->field_size[f]), its bytes are not read. *bytes: what field_open read
     * itself (a .stk record's checksum pass on its first read, a tar member's header; 0 for a
     * file opened). Errors name the file and record as read's do. */
    stk_status (*field_open)(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                             stk__brange *r, uint64_t *bytes, char *err, size_t err_size);
    /* Optional (NULL: none): how many records `prepare` takes at once (0 or 1: prepare is not
     * worth calling for this dataset). Must not block. */
    unsigned (*prepare_max)(const stk_dataset *ds);
    /* Optional: records idx[0..n) (n <= prepare_max) are the next this cursor reads, in this
     * order, with `key`: the source may read them together now (token rows: one system call for
     * all). The reads that follow return exactly what they would have without it and report
     * every error themselves; a record prepared but never read costs nothing more. */
    void (*prepare)(const stk_dataset *ds, stk__cursor *cur, const stk__readkey *key,
                    const uint64_t *idx, unsigned n);
};

/* Open a cursor for the calling thread (*out NULL when the source needs none). */
stk_status stk__dataset_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                    size_t err_size);
void stk__dataset_cursor_close(const stk_dataset *ds, stk__cursor *cur);

/* Read record i through the source (see stk__source_methods.read). */
static inline stk_status stk__dataset_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i,
                                           void *const dst[], const size_t cap[], unsigned flags,
                                           stk__recinfo *info, char *err, size_t err_size)
{
    const stk__vfs_opts *prev = stk__vfs_opts_use(&ds->vfs); /* a source opening lazily */
    stk_status rc = ds->m->read(ds, cur, i, dst, cap, flags, info, err, err_size);
    stk__vfs_opts_use(prev);
    return rc;
}

/* Read record i as epoch key->epoch of a loader seeded key->seed (read_keyed when the source has
 * one, else read). */
static inline stk_status stk__dataset_read_keyed(const stk_dataset *ds, stk__cursor *cur,
                                                 const stk__readkey *key, uint64_t i,
                                                 void *const dst[], const size_t cap[],
                                                 unsigned flags, stk__recinfo *info, char *err,
                                                 size_t err_size)
{
    if (!ds->m->read_keyed)
        return stk__dataset_read(ds, cur, i, dst, cap, flags, info, err, err_size);
    const stk__vfs_opts *prev = stk__vfs_opts_use(&ds->vfs);
    stk_status rc = ds->m->read_keyed(ds, cur, key, i, dst, cap, flags, info, err, err_size);
    stk__vfs_opts_use(prev);
    return rc;
}

/* How many records stk__dataset_prepare takes at once (1: it is a no-op for this dataset). */
static inline unsigned stk__dataset_prepare_max(const stk_dataset *ds)
{
    unsigned n = ds->m->prepare && ds->m->prepare_max ? ds->m->prepare_max(ds) : 1;
    return n ? n : 1;
}

/* Records idx[0..n) are the next `cur` reads (see stk__source_methods.prepare). */
static inline void stk__dataset_prepare(const stk_dataset *ds, stk__cursor *cur,
                                        const stk__readkey *key, const uint64_t *idx, unsigned n)
{
    if (!ds->m->prepare || n < 2)
        return;
    const stk__vfs_opts *prev = stk__vfs_opts_use(&ds->vfs);
    ds->m->prepare(ds, cur, key, idx, n);
    stk__vfs_opts_use(prev);
}

/* Open a dataset as stk_dataset_open_v2 does, with token options t (NULL: none): detection then
 * prefers token formats, and a dataset of another format is wrapped as a token column. */
stk_status stk__dataset_open_tokens(const stk_dataset_opts *o, const stk_tokens_opts *t,
                                    stk_dataset **out);

/* Hint that records idx[0..n) will be read soon: their extents, gathered per file, go to the
 * byte sources' read-ahead (stk__vfs_readahead; remote files read them ahead, coalesced). A no-op
 * for sources without extent and files without read-ahead (local ones). */
void stk__dataset_readahead(const stk_dataset *ds, const uint64_t *idx, size_t n);

/* Where record i lives (file, local number, offset, field sizes): a read without checksum check
 * into scratch buffers. For tests and tools, not for the hot path. */
stk_status stk__dataset_locate(const stk_dataset *ds, uint64_t i, stk__recinfo *info, char *err,
                               size_t err_size);

/* A read error from the byte source, rewritten to say which record: "WHERE: REASON", where
 * REASON is the message in err without its leading "PATH: " (byte sources start with the path,
 * which WHERE names already). err may be NULL (err_size 0). Returns rc. */
stk_status stk__source_read_error(stk_status rc, const char *where, const char *path, char *err,
                                  size_t err_size);

/* The file holding record `index` (< count): the last one whose first record is <= index,
 * skipping empty files; *local receives the record's number in it. For sources whose files hold
 * consecutive records (files[].first, files[].count set). */
size_t stk__dataset_file_of(const stk_dataset *ds, uint64_t index, uint64_t *local);

/* A field's type for messages: "uint8 [32, 32, 3]", "int64", "float32", "bytes". */
void stk__field_str(const stk_field *f, char *buf, size_t size);

/* Set up the files array for n files (zeroed); STK_ENOMEM with a message. */
stk_status stk__dataset_files_alloc(stk_dataset *ds, size_t n, char *err, size_t err_size);

/* XXH3-64 helpers for fingerprints: start, add bytes, add a u64, finish. */
typedef struct stk__fphash {
    _Alignas(64) unsigned char state[640]; /* an XXH3 state, on the caller's stack: no allocation
                                              that could fail (stk_source.c checks the size) */
} stk__fphash;
void stk__fp_begin(stk__fphash *h);
void stk__fp_add(stk__fphash *h, const void *data, size_t size);
void stk__fp_add_u64(stk__fphash *h, uint64_t v);
uint64_t stk__fp_end(stk__fphash *h);

#endif /* STK_SOURCE_H */
