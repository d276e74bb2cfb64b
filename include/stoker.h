/*
 * stoker.h: the one public header of libstoker, a training-data loader written in C.
 *
 * stoker reads records from packed `.stk` shards, processes them on native worker threads and
 * delivers them in batches, strictly in order, with exact-once epoch semantics, resumable state
 * and per-sample randomness that does not depend on the thread count. This header is the manual:
 * every declaration carries its contract. docs/design.md explains the threading and ownership
 * model, docs/format.md the shard format.
 *
 * Conventions (STYLE.md; CHANGES.md says what changed between versions):
 *
 *  - Status: every fallible call returns stk_status. STK_OK (0) is success; a positive value is
 *    a documented outcome that is not a failure (STK_END: the epoch is done); a negative value
 *    means the call did not do what was asked. Two negative codes are retryable rather than
 *    failures of the data: STK_EAGAIN (nothing was ready in time) and STK_EBUSY (the call would
 *    wait on a batch the caller holds); after either nothing has changed and the same call may
 *    be repeated (after releasing a batch, for STK_EBUSY). Codes are pinned: never renumbered.
 *  - Error detail: a call on a handle that one thread uses at a time (stk_loader, stk_writer,
 *    stk_decoder) leaves the text of its failure in that handle: stk_loader_errmsg,
 *    stk_writer_errmsg, stk_decoder_errmsg. Every other failing call (constructors, calls on
 *    the thread-safe stk_dataset and on stk_batch, calls documented thread-safe, free
 *    functions) leaves it in the calling thread's stk_last_errmsg(). No call writes error text
 *    into a buffer of the caller's (a stk_sample_fn writes its own failure into the one it is
 *    given: that is the callback's way out, not the library's).
 *  - Handles are opaque. Constructors fill an out-pointer; destructors accept NULL.
 *  - The library never prints, never exits and never aborts on bad input.
 *  - Structs: every struct in this header starts with `size_t struct_size`, the size of the
 *    struct the caller was compiled with, set by its init macro (stk_loader_opts_init(&o),
 *    stk_tensor_init(&t), stk_op_init(&op, kind), ...; each passes sizeof(*p) to an exported
 *    *_init_sized function, so an older, shorter struct is filled only as far as it reaches).
 *    Inputs: the library reads the caller's fields up to struct_size, the fields a shorter
 *    struct lacks taking their defaults. Outputs: the library writes only the fields that fit.
 *    Arrays of structs (stk_op[], stk_field[], stk_value[], stk_batch_op[]) are strided by their
 *    first element's struct_size, which every element must share. Structs the library hands
 *    out (stk_dataset_field, stk_op_param_at, a stk_sample_fn's tensors) carry the library's
 *    size. A struct_size below the size of struct_size plus one field is STK_EINVAL.
 *  - Versions: while the version is 0.x, every minor version changes the SONAME
 *    (libstoker.so.0.M) and may change calls in place; from 1.0 changes are additive and a
 *    revised call gets a `_v2` name (sqlite's rule). Building blocks (the fenced section at the
 *    end) may change in any minor version.
 *
 * Naming: one word per concept in C, the Python extension (stoker._core), stoker.Loader and the
 * CLI (STYLE.md section 3).
 *
 *   worker threads   C: n_threads. Python: n_threads= (num_workers=, the DataLoader's name, is
 *                    its alias), info()/stats()["n_threads"]. CLI: --threads N.
 *   ring slots       C: n_slots (batches in flight, the one the consumer holds included).
 *                    Python: info()["n_slots"].
 *   prefetch         batches prepared ahead of the one the consumer holds, n_slots - 1.
 *                    Python: prefetch=. CLI: --prefetch P. (C sets n_slots.)
 *   byte read-ahead  readahead (src/io); env STOKER_HTTP_READAHEAD.
 *   samples          stk_batch_n_samples; _core.Batch.n_samples.
 *   records          stk_dataset_n_records, stk_writer_n_records; Python len(dataset),
 *                    info()["n_records"], Writer.n_records; the CLI's "records".
 *   ranks            rank, world (C, _core); rank=, world_size= (torch's names, Python).
 *   resume state     stk_loader_save_state / stk_loader_load_state; _core save_state() /
 *                    load_state(); Python state_dict() / load_state_dict() (torch's names).
 *
 *   - A number of elements is n_<things> (n_paths, n_fields, n_records, n_threads, n_slots);
 *     never <thing>_count or num_<things>, except names taken from torch and torchvision with
 *     their meaning (num_classes, num_samples, num_ops, num_magnitude_bins,
 *     num_output_channels). Cumulative counters are plain plurals (stats.batches, .samples,
 *     .skipped; stk_pack_result.records). The CLI names things, not counts (--threads N, the
 *     bench JSON's "threads"), as shell tools do.
 *   - `_size` is bytes (slot_size, max_record_size, buf_size), never elements, except names
 *     taken from torch and torchvision with their meaning (batch_size: samples, world_size:
 *     ranks, kernel_size: pixels).
 *   - A pair that saves and restores is save_/load_ (stk_loader_save_state and
 *     stk_loader_load_state).
 *   - Verbs: create/destroy (heap objects), open/close (files), init (a caller's struct),
 *     next, release, get/set; a revised call is _v2 (never _ex).
 */
#ifndef STOKER_H
#define STOKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(STK_BUILDING_LIBRARY) || !defined(STK_API)
#define STK_API __attribute__((visibility("default")))
#endif

/* The empty initialiser of the inline _init functions below, in both languages (C++ warns on
 * {0}, C before C23 has no {}; a compound literal is C only). */
/* clang-format off */
#ifdef __cplusplus
#define STK_ZERO_INIT {}
#else
#define STK_ZERO_INIT {0}
#endif
/* clang-format on */

/* ---------------------------------------------------------------------------------------------
 * Version
 * ------------------------------------------------------------------------------------------- */

#define STK_VERSION_MAJOR 0
#define STK_VERSION_MINOR 3
#define STK_VERSION_PATCH 0
#define STK_VERSION_NUMBER (STK_VERSION_MAJOR * 10000 + STK_VERSION_MINOR * 100 + STK_VERSION_PATCH)
#define STK_VERSION_STRING "0.3.0"

/** The library's version as M*10000 + m*100 + p; compare with STK_VERSION_NUMBER to detect a
 *  header/library mismatch.
 *  Threads: thread-safe. */
STK_API unsigned stk_version_number(void);

/** The CPUs this process may run on: its affinity mask's count (containers, taskset), else the
 *  online CPUs; at least 1. What n_threads = 0 means, and the one count the CLI and the Python
 *  package use. Computed once per process.
 *  Threads: thread-safe. */
STK_API uint32_t stk_n_cpus(void);

/** The library's version as "M.m.p".
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_version_string(void);

/* ---------------------------------------------------------------------------------------------
 * Status codes (pinned forever; never renumbered)
 * ------------------------------------------------------------------------------------------- */

typedef int stk_status;

enum {
    STK_OK = 0,         /* success */
    STK_END = 1,        /* not an error: the epoch is done (stk_loader_next) */
    STK_EINVAL = -1,    /* invalid argument */
    STK_ENOMEM = -2,    /* out of memory */
    STK_EIO = -3,       /* I/O error (open, read, write, rename, mmap) */
    STK_EFORMAT = -4,   /* malformed or corrupt data (bad magic, checksum, truncated file) */
    STK_ELIMIT = -5,    /* a limit was exceeded (pixels, record size, slot size, streams) */
    STK_ENOTSUP = -6,   /* not supported (format version, field kind, missing driver) */
    STK_ESTATE = -7,    /* call not valid in the object's current state */
    STK_ECANCELED = -8, /* a sample callback was interrupted (stk_loader_help: call again) */
    STK_EAGAIN = -9,    /* nothing ready before the timeout: call again (nothing changed) */
    STK_EBUSY = -10     /* the next ring slot is held by the caller: release the oldest batch */
};

/** Static English text for a status code ("invalid argument", ...); never NULL, also for
 *  unknown codes.
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_strerror(stk_status code);

/** Detail of the last failure of a call that has no handle (constructors, stk_dataset_open,
 *  state parsing) on the calling thread, e.g. "data/a.stk: bad magic (not a .stk shard)".
 *  Returns "" when there was none.
 *  Lifetime: valid until the next failing stoker call on this thread.
 *  Threads: thread-safe; the buffer is per thread (C11 _Thread_local). */
STK_API const char *stk_last_errmsg(void);

/* ---------------------------------------------------------------------------------------------
 * Data types and fields
 * ------------------------------------------------------------------------------------------- */

/** Element type of a tensor or of a fixed-shape array field. */
typedef enum stk_dtype {
    STK_DTYPE_UINT8 = 0,
    STK_DTYPE_INT8 = 1,
    STK_DTYPE_INT16 = 2,
    STK_DTYPE_INT32 = 3,
    STK_DTYPE_INT64 = 4,
    STK_DTYPE_FLOAT16 = 5,
    STK_DTYPE_BFLOAT16 = 6,
    STK_DTYPE_FLOAT32 = 7,
    STK_DTYPE_FLOAT64 = 8
} stk_dtype;

/** Size in bytes of one element of `dtype`; 0 for an unknown value.
 *  Threads: thread-safe. */
STK_API size_t stk_dtype_size(stk_dtype dtype);

/** Lower-case name of `dtype` ("uint8", "float32", ...); "unknown" for an unknown value.
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_dtype_name(stk_dtype dtype);

/** What a record field holds. */
typedef enum stk_field_kind {
    STK_FIELD_BYTES = 0,   /* variable-length bytes (an encoded image, text, ...) */
    STK_FIELD_INT64 = 1,   /* one little-endian int64 (a class label) */
    STK_FIELD_FLOAT32 = 2, /* one little-endian float32 */
    STK_FIELD_ARRAY = 3    /* a fixed-shape array of `dtype`, C order */
} stk_field_kind;

#define STK_MAX_NAME 32 /* field and tensor names, including the terminating NUL */
#define STK_MAX_DIMS 4  /* dimensions of an array field (not counting the batch) */
#define STK_MAX_FIELDS 16

/** Lower-case name of a field kind ("bytes", "int64", "float32", "array"); "unknown" for an
 *  unknown value.
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_field_kind_name(stk_field_kind kind);

/** One field of a record schema. Initialise with stk_field_init (all zero: a bytes field). */
typedef struct stk_field {
    size_t struct_size;      /* set by stk_field_init(); never by hand */
    char name[STK_MAX_NAME]; /* NUL-terminated, unique within the schema, [A-Za-z0-9_./-] */
    stk_field_kind kind;
    stk_dtype dtype; /* STK_FIELD_ARRAY only (otherwise implied by kind) */
    uint32_t ndim;   /* STK_FIELD_ARRAY only: 1..STK_MAX_DIMS */
    int64_t shape[STK_MAX_DIMS];
} stk_field;

/** Zero `f` and set its struct_size (the caller's sizeof).
 *  Threads: thread-safe (touches only `f`). */
static inline void stk_field_init(stk_field *f)
{
    stk_field z = STK_ZERO_INIT;
    z.struct_size = sizeof(*f);
    *f = z;
}

/* ---------------------------------------------------------------------------------------------
 * Shard writer (`.stk` format, see docs/format.md)
 * ------------------------------------------------------------------------------------------- */

/** A shard being written. Thread-compatible: one thread at a time per writer. */
typedef struct stk_writer stk_writer;

/** Options for stk_writer_open. Initialise with stk_writer_opts_init, then set fields. */
typedef struct stk_writer_opts {
    size_t struct_size;        /* set by stk_writer_opts_init(); never by hand */
    const stk_field *fields;   /* the schema; copied at open */
    size_t n_fields;           /* 1..STK_MAX_FIELDS */
    const char *metadata_json; /* writer metadata stored in the header (NULL = "{}"); copied */
    uint32_t align;            /* record start alignment in bytes, a power of two (default 64) */
} stk_writer_opts;

/** Fill the first `struct_size` bytes of `opts` with defaults (no fields, metadata "{}", align
 *  64): what stk_writer_opts_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_writer_opts_init_sized(stk_writer_opts *opts, size_t struct_size);

/** Fill `opts` with defaults (no fields, metadata "{}", align 64). */
static inline void stk_writer_opts_init(stk_writer_opts *opts)
{
    stk_writer_opts_init_sized(opts, sizeof(*opts));
}

/** Start writing a shard to `path`. The data goes to a temporary name beside it
 *  ("<path>.tmp.<pid>.<n>") and reaches `path` only on a successful stk_writer_close: a crash
 *  or stk_writer_abort leaves no partial shard under `path`.
 *  @return STK_OK (*out set), STK_EINVAL (bad schema or option), STK_EIO (cannot create),
 *          STK_ENOMEM. Details in stk_last_errmsg().
 *  Lifetime: *out until stk_writer_close or stk_writer_abort. */
STK_API stk_status stk_writer_open(const char *path, const stk_writer_opts *opts, stk_writer **out);

/** One field value for stk_writer_add: `data`/`size` for bytes and array fields, `i64` or `f32`
 *  for scalar fields. Array fields must supply exactly prod(shape) * dtype size bytes.
 *  Initialise with stk_value_init. */
typedef struct stk_value {
    size_t struct_size; /* set by stk_value_init(); never by hand */
    const void *data;
    size_t size;
    int64_t i64;
    float f32;
} stk_value;

/** Zero `v` and set its struct_size (the caller's sizeof).
 *  Threads: thread-safe (touches only `v`). */
static inline void stk_value_init(stk_value *v)
{
    stk_value z = STK_ZERO_INIT;
    z.struct_size = sizeof(*v);
    *v = z;
}

/** Append one record; `values` holds one entry per schema field, in schema order (an array
 *  strided by values[0].struct_size: see "Structs" at the top).
 *  @return STK_OK, STK_EINVAL (wrong array size, record over 4 GiB), STK_EIO (write failed;
 *          the writer is then unusable: abort it), STK_ESTATE (after an earlier failure).
 *  Details in stk_writer_errmsg(). */
STK_API stk_status stk_writer_add(stk_writer *w, const stk_value *values);

/** Records added so far. */
STK_API uint64_t stk_writer_n_records(const stk_writer *w);

/** Bytes written to the data region so far (record payloads plus alignment padding). */
STK_API uint64_t stk_writer_data_size(const stk_writer *w);

/** Write the index and footer, fsync, rename the temporary file to its final name and free
 *  the writer (also on failure, in which case the temporary file is removed).
 *  @return STK_OK or STK_EIO; the detail is in stk_last_errmsg() since the handle is gone. */
STK_API stk_status stk_writer_close(stk_writer *w);

/** Discard the shard: remove the temporary file and free the writer. Accepts NULL. */
STK_API void stk_writer_abort(stk_writer *w);

/** Detail of the writer's last failure ("out.stk.tmp: No space left on device").
 *  Lifetime: valid until the next call on `w`. */
STK_API const char *stk_writer_errmsg(const stk_writer *w);

/* ---------------------------------------------------------------------------------------------
 * Dataset reader: one or more shards seen as records 0..N-1
 * ------------------------------------------------------------------------------------------- */

/** An open dataset. Immutable after open: every function below may be called from any number
 *  of threads at once, except stk_dataset_close. */
typedef struct stk_dataset stk_dataset;

/** Flags for stk_dataset_open. */
#define STK_DATASET_NO_VERIFY 0x1u /* do not check record checksums on read (index is checked) */
#define STK_DATASET_CONCAT                                                                         \
    0x2u /* `.stk`: read shards of different packs (another dataset_id or                          \
            class list in their metadata) as one dataset */

/** Open a dataset of the format detected from its paths: stk_dataset_open_v2 with these paths
 *  and flags and no format given.
 *  @return as stk_dataset_open_v2.
 *  Lifetime: *out until stk_dataset_close(*out). */
STK_API stk_status stk_dataset_open(const char *const *paths, size_t n_paths, unsigned flags,
                                    stk_dataset **out);

/** Options for stk_dataset_open_v2. Initialise with stk_dataset_opts_init, then set fields. More
 *  fields may be added at the end in later versions. */
typedef struct stk_dataset_opts {
    size_t struct_size;       /* set by stk_dataset_opts_init(); never by hand */
    const char *const *paths; /* what the user wrote: files, directories, globs and brace ranges
                                 ("train-{000000..000127}.stk"); copied at open */
    size_t n_paths;
    unsigned flags;     /* STK_DATASET_* */
    const char *format; /* a name from stk_format_name ("stk", "imagefolder", "npy"), or
                           NULL/"" to detect it (default); copied */
    /* NULL (default), or n_paths field names: path i is one file giving the field named
     * field_names[i] (Python's {"image": "x.npy", "label": "y.npy"}). Each path must then name
     * exactly one file (a glob matching one file is fine; a directory is not). Only formats
     * that read one field per file take names ("npy"); others refuse them. Copied at open. */
    const char *const *field_names;
    /* The on-disk cache of remote bytes (s3://, http(s):// paths; local files never use it),
     * shared by every process on the machine (docs/remote.md). */
    const char *cache_dir;   /* its directory (created if missing); NULL: STOKER_CACHE_DIR, and
                                no cache when that is unset; "": no cache; copied */
    const char *cache_limit; /* its size: bytes or with a K/M/G/T suffix ("20G", "512MB");
                                NULL/"": STOKER_CACHE_LIMIT, else 10G. At least one cache block
                                (4 MiB); copied */
} stk_dataset_opts;

/** Fill the first `struct_size` bytes of `opts` with defaults: what stk_dataset_opts_init
 *  calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_dataset_opts_init_sized(stk_dataset_opts *opts, size_t struct_size);

/** Fill `opts` with defaults (no paths, no flags, detect the format). */
static inline void stk_dataset_opts_init(stk_dataset_opts *opts)
{
    stk_dataset_opts_init_sized(opts, sizeof(*opts));
}

/** Open a dataset: one or more files (or a directory) of one format seen as records 0..N-1.
 *  Paths are expanded first (brace ranges, then glob patterns, each sorted in byte order); the
 *  format is the one named by opts->format, else detected from each path's first bytes (magic),
 *  then its name and directory layout; all paths must be of one format. Record numbers follow
 *  the order of the expanded paths. `.stk`: a directory stands for the shards its manifest
 *  (stoker-manifest.json, written by stk_pack) lists, each checked against it (present, record
 *  count, index checksum, metadata), other files there ignored; a directory without a manifest
 *  for its `*.stk` files sorted by name. Shards of different packs (dataset_id or class list in
 *  their metadata) are refused together unless flags has STK_DATASET_CONCAT. Metadata must be
 *  JSON. Each shard's header, footer and index are validated (magic, version, bounds, index
 *  checksum, records in order without overlap) and record checksums are checked on first read.
 *  `imagefolder`: a directory read as torchvision's ImageFolder (fields image, label, path).
 *  `npy`: `.npy` files (a directory or a list) sharing their first dimension, one field each,
 *  named after the file (x.npy -> "x") or by opts->field_names.
 *  Remote paths read through the cache named by cache_dir / cache_limit (or the environment).
 *  @return STK_OK (*out set), STK_EINVAL (no paths, unknown or mixed formats, empty dataset,
 *          schema mismatch, shards of different datasets, field_names with a format that takes
 *          none or a path naming no file or several, a cache_limit that is not a size or is
 *          below one cache block), STK_EIO (missing/unreadable file, a shard a manifest lists
 *          missing, a pattern matching nothing, a cache directory that cannot be made),
 *          STK_EFORMAT (bad magic,
 *          truncated, corrupt index, a damaged manifest or a shard disagreeing with it),
 *          STK_ENOTSUP (a format version
 *          newer than this library, an unsupported dtype), STK_ELIMIT (too many shards or
 *          records), STK_ENOMEM. Details, naming the file, in stk_last_errmsg().
 *  Lifetime: *out until stk_dataset_close(*out). */
STK_API stk_status stk_dataset_open_v2(const stk_dataset_opts *opts, stk_dataset **out);

/** Open a dataset of `n_records` records that have no fields: each record is only its number,
 *  and reading one reads nothing. For a loader whose per-sample callback produces every sample
 *  (stk_loader_opts.sample_fn_v2 writing its declared sample_fields): the loader keeps its
 *  order, ranks, tickets, ring, resume and stats. The Python binding opens one per Python
 *  Dataset object, whose __getitem__ the callback runs. stk_dataset_describe gives
 *  "NAME[i]" (`name` NULL or "": "dataset"; cut at 127 bytes), stk_dataset_format "index", and
 *  the fingerprint covers the name and the count (a resume state of another dataset is refused).
 *  @return STK_OK (*out set), STK_EINVAL (n_records 0, NULL out), STK_ENOMEM. Details in
 *          stk_last_errmsg().
 *  Lifetime: *out until stk_dataset_close(*out); `name` is copied. */
STK_API stk_status stk_dataset_open_index(const char *name, uint64_t n_records, stk_dataset **out);

/** Number of formats this library reads.
 *  Threads: thread-safe. */
STK_API size_t stk_n_formats(void);

/** Name of format `i` (< stk_n_formats(): "stk", "imagefolder", "npy", ...), or NULL.
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_format_name(size_t i);

/** One line saying what format `i` reads and as which records (for `--help` listings), or NULL
 *  when i >= stk_n_formats().
 *  Lifetime: static storage. Threads: thread-safe. */
STK_API const char *stk_format_summary(size_t i);

/** The number of file name extensions an ImageFolder tree's images may have (the `imagefolder`
 *  format reads those files, as torchvision's ImageFolder: its IMG_EXTENSIONS).
 *  Threads: thread-safe. */
STK_API size_t stk_n_image_extensions(void);

/** Extension `i` (< stk_n_image_extensions(): ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm",
 *  ".tif", ".tiff", ".webp"; matched without case), or NULL.
 *  Lifetime: static. Threads: thread-safe. */
STK_API const char *stk_image_extension(size_t i);

/** The number of file name extensions the library reads as audio: an audio folder tree's files
 *  (".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".aif", ".aiff") and the other containers
 *  libsndfile reads (".au", ".snd"), which also name audio fields in a record.
 *  Threads: thread-safe. */
STK_API size_t stk_n_audio_extensions(void);

/** Extension `i` (< stk_n_audio_extensions(); matched without case), or NULL.
 *  Lifetime: static. Threads: thread-safe. */
STK_API const char *stk_audio_extension(size_t i);

/** The format of an open dataset ("stk", "imagefolder", ...).
 *  Lifetime: static storage. */
STK_API const char *stk_dataset_format(const stk_dataset *ds);

/** Describe where record `index` lives, for messages: "data/shard-00003.stk record 1841
 *  (global 1841) at byte 123456", "train/dog/1.jpg (record 40)".
 *  @return STK_OK, or STK_EINVAL (NULL argument, index out of range; see stk_last_errmsg()).
 *  Threads: thread-safe. */
STK_API stk_status stk_dataset_describe(const stk_dataset *ds, uint64_t index, char *buf,
                                        size_t size);

/** Close the dataset and its files. Accepts NULL. Must not race with other calls. */
STK_API void stk_dataset_close(stk_dataset *ds);

/** Number of records. */
STK_API uint64_t stk_dataset_n_records(const stk_dataset *ds);

/** Number of fields in the schema (0 for NULL).
 *  Threads: thread-safe. */
STK_API size_t stk_dataset_n_fields(const stk_dataset *ds);

/** Field `i` of the schema, or NULL if `i` is out of range.
 *  Lifetime: valid until stk_dataset_close. Threads: thread-safe. */
STK_API const stk_field *stk_dataset_field(const stk_dataset *ds, size_t i);

/** Index of the field named `name`, or -1. */
STK_API int stk_dataset_find_field(const stk_dataset *ds, const char *name);

/** The field a transform applies to when none is named (stk_loader_opts.transform_field NULL,
 *  Python's transform_field=None, `stoker bench` without --field). In order, each step only when
 *  the ones before found nothing: the field named "image"; the bytes fields named as encoded
 *  images (extension jpg, jpeg, png, webp, bmp, tif, tiff, ppm, pgm or pnm after the last dot of
 *  the name's last '/' component, as WebDataset names them, or a name ending in
 *  "image/encoded", TFRecord's key); the other bytes fields whose value in record 0 starts with
 *  a JPEG, PNG, WebP or TIFF magic (read once, here); the uint8 image arrays of three channels,
 *  (H, W, 3) or (3, H, W); those of one channel, (H, W), (H, W, 1) or (1, H, W) (arrays with a
 *  side under 8 are not picked). One field found by a step is the answer.
 *  @return STK_OK (*field set), STK_EINVAL (several fields found by one step: the message names
 *          them; or none at all: the message lists the fields; both say to name one; also a NULL
 *          argument), or the failure of reading record 0 (STK_EIO, STK_EFORMAT, STK_ENOMEM, ...).
 *          Details in stk_last_errmsg().
 *  Threads: thread-safe. */
STK_API stk_status stk_dataset_image_field(const stk_dataset *ds, size_t *field);

/** Largest size in bytes of field `i` over all records (from the shards' index headers);
 *  the fixed size for scalar and array fields. */
STK_API uint64_t stk_dataset_field_max_size(const stk_dataset *ds, size_t i);

/** Largest total record size in bytes over all records. */
STK_API uint64_t stk_dataset_max_record_size(const stk_dataset *ds);

/** Per-file facts, for `stoker inspect`: the shards of a `.stk` dataset, the files of other
 *  formats (one entry for an ImageFolder tree: its root). */
typedef struct stk_shard_info {
    size_t struct_size;    /* set by stk_shard_info_init() (an output struct) */
    const char *path;      /* as resolved at open; valid until stk_dataset_close */
    uint64_t first_record; /* global number of the shard's first record */
    uint64_t n_records;
    uint64_t file_size;
    uint64_t data_size;   /* bytes of record payload (with padding) */
    uint32_t version;     /* format version of the shard */
    const char *metadata; /* the writer's metadata JSON ("{}" when the format has none; an
                             ImageFolder tree: its classes); valid until stk_dataset_close */
} stk_shard_info;

/** Zero `out` and set its struct_size (the caller's sizeof), before stk_dataset_shard. */
static inline void stk_shard_info_init(stk_shard_info *out)
{
    stk_shard_info z = STK_ZERO_INIT;
    z.struct_size = sizeof(*out);
    *out = z;
}

/** Number of files (shards) of the dataset: the `i` stk_dataset_shard takes.
 *  Threads: thread-safe. */
STK_API size_t stk_dataset_n_shards(const stk_dataset *ds);

/** Facts about file (shard) `i`. `out` is an output struct: set out->struct_size (see
 *  "Structs" at the top of this header).
 *  @return STK_OK, or STK_EINVAL (i out of range, NULL argument, struct_size not set).
 *  Lifetime: the strings until stk_dataset_close. Threads: thread-safe. */
STK_API stk_status stk_dataset_shard(const stk_dataset *ds, size_t i, stk_shard_info *out);

/** A 64-bit fingerprint of the dataset (record count and every shard's index checksum), used
 *  to check that a resume state belongs to this dataset. */
STK_API uint64_t stk_dataset_fingerprint(const stk_dataset *ds);

/** One record as read by stk_dataset_read: a view of each field inside the caller's buffer. An
 *  output struct: initialise with stk_record_init. */
typedef struct stk_record {
    size_t struct_size;                   /* set by stk_record_init() */
    uint64_t index;                       /* global record number */
    uint32_t shard;                       /* shard number */
    uint64_t local;                       /* record number inside the shard */
    size_t size;                          /* total bytes */
    const uint8_t *field[STK_MAX_FIELDS]; /* start of each field's bytes in the buffer */
    size_t field_size[STK_MAX_FIELDS];
} stk_record;

/** Zero `rec` and set its struct_size (the caller's sizeof). */
static inline void stk_record_init(stk_record *rec)
{
    stk_record z = STK_ZERO_INIT;
    z.struct_size = sizeof(*rec);
    *rec = z;
}

/** Read record `index` into `buf` (at least stk_dataset_max_record_size bytes, or the record's
 *  size) and verify its checksum unless the dataset was opened with STK_DATASET_NO_VERIFY.
 *  Scalar fields are read with stk_record_i64 / stk_record_f32. `out` is an output struct
 *  (stk_record_init).
 *  @return STK_OK, STK_EINVAL (index out of range, buffer too small, out->struct_size not set),
 *          STK_EIO (read failed), STK_EFORMAT (checksum mismatch). The detail, naming shard file
 *          and record ("shard-00003.stk record 1841: checksum mismatch"), in stk_last_errmsg().
 *  Lifetime: out->field[] point into `buf`.
 *  Threads: thread-safe (pread on a shared descriptor). */
STK_API stk_status stk_dataset_read(const stk_dataset *ds, uint64_t index, void *buf,
                                    size_t buf_size, stk_record *out);

/** Value of int64 field `f` of a record read with stk_dataset_read (0 if it is not 8 bytes).
 *  Threads: thread-safe. */
STK_API int64_t stk_record_i64(const stk_record *rec, size_t f);

/** Value of float32 field `f` of a record read with stk_dataset_read (0 if it is not 4 bytes).
 *  Threads: thread-safe. */
STK_API float stk_record_f32(const stk_record *rec, size_t f);

/* ---------------------------------------------------------------------------------------------
 * Token corpora: language-model pretraining data (docs/tokens.md)
 *
 * A token corpus is one stream of token ids, the files' tokens one file after another, cut into
 * documents: nanoGPT's raw uint16 `.bin`, llm.c's `.bin` shards (a 1,024-byte header), a
 * Megatron indexed dataset (`.idx` + `.bin`), raw or `.npy` numpy token arrays (OLMo), or a
 * token column of any dataset whose records are documents (`.stk` shards written by stoker
 * pack). stk_tokens_open turns it into a dataset whose records are rows of seq_len tokens, which
 * any loader reads with every loader semantic (epochs, shuffle, rank slices, exact resume).
 * stk_tokens_mix blends several such datasets by weight. stk_dataset_open on a token corpus
 * (no options) gives its documents as records instead (field "tokens": the stored ids as bytes).
 * ------------------------------------------------------------------------------------------- */

/** How rows are made from a corpus (stk_tokens_opts.mode). Every row has the fields input_ids
 *  and labels ([seq_len] of ids_dtype, labels[j] the token after input_ids[j]); packed rows add
 *  position_ids and seq_lens. */
typedef enum stk_tokens_mode {
    /* Row r is tokens [r*T, r*T + T + 1) of the stream (input_ids the first T, labels the last
     * T): floor((tokens - 1) / T) rows, every token in exactly one row's input_ids per epoch but
     * the last (tokens - 1) mod T. */
    STK_TOKENS_WINDOWS = 0,
    /* As many rows as WINDOWS, row r of epoch e starting at a uniform offset in [0, tokens - T)
     * drawn from (seed, e, r) (nanoGPT's get_batch). */
    STK_TOKENS_RANDOM = 1,
    /* Whole documents packed into rows of T positions (stk_tokens_packing), documents longer
     * than T split into pieces of T and a rest; labels are -100 after a document's last token
     * and on padding; position_ids count from 0 in each piece and in the padding; seq_lens
     * (int32 [P], P the most pieces of any row, padding counted as one) the lengths of the
     * row's pieces in order, then zeros: varlen attention's cu_seqlens are the running sum of
     * a batch's non-zero seq_lens. Needs document boundaries (a Megatron index, eos/bos, or a
     * column's records). */
    STK_TOKENS_PACKED = 2,
    /* Records are the documents: one bytes field "tokens" holding the stored ids (token_bytes
     * each, little-endian). What stk_dataset_open gives; seq_len is ignored. */
    STK_TOKENS_DOCUMENTS = 3
} stk_tokens_mode;

/** Packing rule (STK_TOKENS_PACKED): documents in corpus order, each into an open row with
 *  room for it (best fit: the fullest; first fit: the earliest opened), else a new row. The
 *  rows are fixed at open: a pure function of the corpus, seq_len and the rule. */
typedef enum stk_tokens_packing {
    STK_PACKING_BEST_FIT = 0,
    STK_PACKING_FIRST_FIT = 1
} stk_tokens_packing;

/** Options for stk_tokens_open. Initialise with stk_tokens_opts_init, then set fields. More
 *  fields may be added at the end in later versions. */
typedef struct stk_tokens_opts {
    size_t struct_size;       /* set by stk_tokens_opts_init(); never by hand */
    const char *const *paths; /* files, globs, brace ranges, directories, as stk_dataset_open;
                                 a Megatron corpus by its prefix, .idx or .bin; copied */
    size_t n_paths;
    const char *format;      /* "nanogpt", "llmc", "megatron", "numpy-tokens", or a stoker format
                                whose records are documents ("stk", ...); NULL = detect (token
                                formats first); copied */
    uint32_t seq_len;        /* T, tokens per row, >= 1 (required but for DOCUMENTS) */
    uint32_t mode;           /* stk_tokens_mode (default STK_TOKENS_WINDOWS) */
    uint32_t packing;        /* stk_tokens_packing (default STK_PACKING_BEST_FIT) */
    int64_t eos;             /* a document ends after each token of this id; -1 = none (default).
                                Formats with a document index (Megatron, columns) ignore it */
    int64_t bos;             /* a document starts at each token of this id; -1 = none (default) */
    uint32_t token_bytes;    /* bytes per stored token of headerless files (nanogpt, raw
                                numpy-tokens) and column bytes fields: 2 or 4; 0 = the format's
                                (2; a column: its metadata's "token_bytes", else 2) (default 0) */
    const char *token_field; /* a column corpus: the field of token ids; NULL = "tokens" (or
                                the only bytes or integer array field); copied */
    stk_dtype ids_dtype;     /* STK_DTYPE_INT64 (default) or STK_DTYPE_INT32 */
    int64_t pad_id;          /* packed rows: input id of padding positions (default 0) */
    unsigned flags;          /* STK_DATASET_* */
    const char *cache_dir;   /* remote bytes: as stk_dataset_opts.cache_dir; copied */
    const char *cache_limit; /* as stk_dataset_opts.cache_limit; copied */
} stk_tokens_opts;

/** Fill the first `struct_size` bytes of `opts` with the defaults documented on each field:
 *  what stk_tokens_opts_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_tokens_opts_init_sized(stk_tokens_opts *opts, size_t struct_size);

/** Fill `opts` with the defaults documented on each field. */
static inline void stk_tokens_opts_init(stk_tokens_opts *opts)
{
    stk_tokens_opts_init_sized(opts, sizeof(*opts));
}

/** Open a token corpus as rows of seq_len tokens (a dataset: any loader reads it). Files are
 *  read in place through the byte sources (local, s3://, https://); the headers and indexes are
 *  checked at open: a bad magic, version or dtype, a token count that does not match the file
 *  size, a Megatron index whose arrays do not fit its size or whose sequences are not back to
 *  back in the `.bin`, or a truncated file is STK_EFORMAT naming the file and what is wrong.
 *  Documents come from a Megatron document index, else from eos/bos, else each file is one;
 *  eos/bos scan the whole stream once at open. A corpus too short for one row is STK_EINVAL.
 *  @return STK_OK (*out set), STK_EINVAL (no paths, seq_len 0, bad mode, packing, token_bytes
 *          or ids_dtype, PACKED without document boundaries, a column field that is not token
 *          ids, too few tokens), STK_EIO, STK_EFORMAT, STK_ENOTSUP (an unsupported dtype or
 *          format version), STK_ENOMEM. Details, naming the file, in stk_last_errmsg().
 *  Lifetime: *out until stk_dataset_close(*out). */
STK_API stk_status stk_tokens_open(const stk_tokens_opts *opts, stk_dataset **out);

/** Blend token datasets (from stk_tokens_open, all of one seq_len, mode and ids_dtype) into one
 *  whose position p of every epoch is a row of part d chosen by Megatron's blending rule: the
 *  part whose count so far falls furthest below weights[d] * p (ties to the lower d), so every
 *  window of positions holds each part within a few samples of its share. `samples` positions
 *  per epoch (0 = the parts' rows summed). Part d's k-th sample of epoch e is entry
 *  e * m_d + k of its endless stream of passes (m_d its samples per epoch), each pass a
 *  permutation of its rows from (seed, pass, d) with a shuffling loader (in order without), so a
 *  part repeats (m_d > rows) or is subsampled and continued next epoch (m_d < rows). A loader
 *  over a mixture keeps the positions in order (the parts shuffle themselves). Records add the
 *  int64 field "source" (the part). On success the mixture owns the parts (closed with it);
 *  on failure the caller still does.
 *  @return STK_OK (*out set), STK_EINVAL (n 0 or over 255, a part that is not a token rows
 *          dataset or differs from the first in fields, a weight negative or not finite, all
 *          weights 0), STK_ENOMEM. Details in stk_last_errmsg().
 *  Lifetime: *out until stk_dataset_close(*out). */
STK_API stk_status stk_tokens_mix(stk_dataset *const *parts, const double *weights, size_t n,
                                  uint64_t samples, stk_dataset **out);

/** Facts about a token dataset (stk_tokens_info_get). */
typedef struct stk_tokens_info {
    size_t struct_size;    /* set by the caller to sizeof(stk_tokens_info) (an output struct) */
    const char *format;    /* "nanogpt", "llmc", "megatron", "numpy-tokens", a column's format,
                              or "mix"; static or valid until stk_dataset_close */
    uint32_t token_bytes;  /* bytes per stored token */
    uint32_t seq_len;      /* T (0 for DOCUMENTS) */
    uint32_t mode;         /* stk_tokens_mode */
    uint32_t packing;      /* stk_tokens_packing */
    uint64_t n_tokens;     /* tokens in the corpus */
    uint64_t n_documents;  /* documents (each file one when no boundaries are known) */
    bool boundaries;       /* documents come from an index, eos/bos or records */
    uint64_t max_document; /* tokens of the longest document */
    uint64_t n_rows;       /* records: rows (documents for DOCUMENTS) */
    uint64_t n_row_tokens; /* positions of the rows holding tokens */
    uint64_t n_padding;    /* positions of the rows holding padding (PACKED) */
    uint64_t n_unused;     /* tokens in no row's input_ids (WINDOWS: the tail) */
    uint64_t doc_hist[48]; /* documents of length in [2^k, 2^(k+1)) (k = 0: lengths 0 and 1) */
    uint32_t n_parts;      /* a mixture: its parts (0 otherwise) */
} stk_tokens_info;

/** Fill `out` (an output struct: set out->struct_size) with the facts of a token dataset; for a
 *  mixture, the sums over its parts (rows: its positions per epoch).
 *  @return STK_OK, STK_EINVAL (not a token dataset, NULL, struct_size not set).
 *  Threads: thread-safe. */
STK_API stk_status stk_tokens_info_get(const stk_dataset *ds, stk_tokens_info *out);

/** Part `i` of a mixture: its dataset (owned by the mixture), its normalised weight and its
 *  samples per epoch.
 *  @return STK_OK, STK_EINVAL (not a mixture, i out of range; outputs may be NULL).
 *  Lifetime: *part until stk_dataset_close(mixture). Threads: thread-safe. */
STK_API stk_status stk_tokens_mix_part(const stk_dataset *mixture, size_t i,
                                       const stk_dataset **part, double *weight,
                                       uint64_t *per_epoch);

/* ---------------------------------------------------------------------------------------------
 * Packing: any dataset to `.stk` shards (the packer behind `stoker pack` and stoker.pack)
 * ------------------------------------------------------------------------------------------- */

/** Options for stk_pack. Initialise with stk_pack_opts_init. More fields may be added at the end
 *  in later versions. */
typedef struct stk_pack_opts {
    size_t struct_size;  /* set by stk_pack_opts_init(); never by hand */
    uint64_t shard_size; /* start a new shard before one would exceed this many bytes; setting
                            it makes OUT a directory (0 = one file for OUT ending in ".stk",
                            else 1 GiB shards in the directory OUT; default 0) */
    uint32_t align;      /* record alignment, a power of two (default 64) */
    bool force;          /* replace an existing OUT file; write into a non-empty OUT directory
                            and remove its other .stk files afterwards (default false) */
    const char *tool;    /* recorded as "tool" in the shards' metadata (default "stoker pack") */
    /* Called after each record, on the calling thread: records done, of total, bytes so far. */
    void (*progress)(void *ctx, uint64_t done, uint64_t total, uint64_t bytes);
    void *progress_ctx;
} stk_pack_opts;

/** Fill the first `struct_size` bytes of `opts` with the defaults documented on each field: what
 *  stk_pack_opts_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_pack_opts_init_sized(stk_pack_opts *opts, size_t struct_size);

/** Fill `opts` with the defaults documented on each field. */
static inline void stk_pack_opts_init(stk_pack_opts *opts)
{
    stk_pack_opts_init_sized(opts, sizeof(*opts));
}

/** What stk_pack wrote. An output struct (stk_pack_result_init): a caller built against an
 *  older, shorter struct gets only the fields it knows. */
typedef struct stk_pack_result {
    size_t struct_size;  /* set by stk_pack_result_init() */
    uint64_t records;    /* records written */
    uint64_t shards;     /* shard files written */
    uint64_t bytes;      /* record bytes */
    uint64_t file_bytes; /* bytes of the shard files on disk */
} stk_pack_result;

/** Zero `res` and set its struct_size (the caller's sizeof). */
static inline void stk_pack_result_init(stk_pack_result *res)
{
    stk_pack_result z = STK_ZERO_INIT;
    z.struct_size = sizeof(*res);
    *res = z;
}

/** Write every record of `ds` (any format), all fields in order, to `.stk` shards at `out`: one
 *  file when `out` ends in ".stk" and no shard size is set, else the directory `out` with
 *  shard-00000.stk, ... and stoker-manifest.json. Metadata: the dataset's first file's, with
 *  "tool" and a new random "dataset_id" added. A directory is published as a whole: shards are
 *  written as NAME.part, the manifest renamed into place is the commit, then the parts are
 *  renamed and an older dataset's files in `out` removed (with force, over an existing dataset,
 *  the new shards are named shard-ID-00000.stk, ...). A failure (or a kill) before the commit
 *  leaves `out` as it was; on failure nothing of this run is left.
 *  @return STK_OK, STK_EINVAL (bad options), STK_ESTATE (`out` exists and force is false),
 *          STK_EIO (cannot create or write), or a read error of `ds` (STK_EFORMAT, STK_EIO, ...,
 *          naming the record). Details in stk_last_errmsg().
 *  Threads: `ds` may be read by other threads meanwhile. */
STK_API stk_status stk_pack(const stk_dataset *ds, const char *out, const stk_pack_opts *opts,
                            stk_pack_result *res);

/* ---------------------------------------------------------------------------------------------
 * Transforms (image pipeline; see the "Images" section of DESIGN.md)
 * ------------------------------------------------------------------------------------------- */

/** A compiled per-sample transform that turns one field (an encoded image, or a uint8 image array:
 *  stk_loader_opts.transform_field) into a tensor.
 *  Immutable after create; may be shared by several loaders. */
typedef struct stk_transform stk_transform;

/** Ops, named and parameterised as in torchvision.transforms. New kinds are appended, never
 *  renumbered; stk_op_n_kinds and stk_op_kind_at enumerate the kinds this library has. */
typedef enum stk_op_kind {
    STK_OP_RANDOM_RESIZED_CROP = 0,      /* size, scale, ratio: torchvision's sampler (10 tries) */
    STK_OP_RESIZE = 1,                   /* size: (h, w), or shorter side when size[1] == 0 */
    STK_OP_CENTER_CROP = 2,              /* size: (h, w) */
    STK_OP_RANDOM_HORIZONTAL_FLIP = 3,   /* p */
    STK_OP_COLOR_JITTER = 4,             /* brightness, contrast, saturation, hue */
    STK_OP_NORMALIZE = 5,                /* mean, std (per channel, on the 0..1 scale) */
    STK_OP_RANDOM_VERTICAL_FLIP = 6,     /* p */
    STK_OP_GRAYSCALE = 7,                /* num_output_channels (3: stoker's images are RGB) */
    STK_OP_RANDOM_GRAYSCALE = 8,         /* p */
    STK_OP_RANDOM_INVERT = 9,            /* p */
    STK_OP_RANDOM_POSTERIZE = 10,        /* bits, p */
    STK_OP_RANDOM_SOLARIZE = 11,         /* threshold, p */
    STK_OP_RANDOM_ADJUST_SHARPNESS = 12, /* sharpness_factor, p */
    STK_OP_RANDOM_AUTOCONTRAST = 13,     /* p */
    STK_OP_RANDOM_EQUALIZE = 14,         /* p */
    STK_OP_GAUSSIAN_BLUR = 15,           /* kernel_size, sigma */
    STK_OP_RANDOM_CROP = 16,             /* size, padding, pad_if_needed, fill, padding_mode */
    STK_OP_PAD = 17,                     /* padding, fill, padding_mode */
    STK_OP_RANDOM_ERASING = 18,          /* p, scale, ratio, value: on the output tensor */
    STK_OP_TRIVIAL_AUGMENT_WIDE = 19,    /* num_magnitude_bins, interpolation, fill */
    STK_OP_RAND_AUGMENT = 20,    /* num_ops, magnitude, num_magnitude_bins, interpolation, fill */
    STK_OP_AUTO_AUGMENT = 21,    /* policy (0: IMAGENET, the only one), interpolation, fill */
    STK_OP_RANDOM_APPLY = 22,    /* transforms (the count of ops after it), p */
    STK_OP_RANDOM_CHOICE = 23,   /* transforms (the count of ops after it): one of them */
    STK_OP_RANDOM_ORDER = 24,    /* transforms (the count of ops after it): shuffled */
    STK_OP_RANDOM_ROTATION = 25, /* degrees, interpolation, expand, center, fill */
    STK_OP_RANDOM_AFFINE = 26,   /* degrees, translate, scale, shear, interpolation, fill, center */
    STK_OP_AUG_MIX =
        27, /* severity, mixture_width, chain_depth, alpha, all_ops, interpolation, fill */
    /* Audio ops (stk_op_media: STK_MEDIA_AUDIO), named and parameterised as torchaudio 0.13's
     * transforms, and stoker.audio's for what torchaudio lacks (docs/audio.md). */
    STK_OP_RESAMPLE = 28,          /* orig_freq, new_freq, resampling_method, lowpass_filter_width,
                                    * rolloff, beta: torchaudio's windowed sinc */
    STK_OP_DOWNMIX = 29,           /* channels: 1 (the mean of the channels) or 2 */
    STK_OP_AUDIO_RANDOM_CROP = 30, /* seconds: a uniform window, zero padding when shorter */
    STK_OP_AUDIO_CENTER_CROP = 31, /* seconds: the centred window, zero padding when shorter */
    STK_OP_AUDIO_PAD_TO = 32,      /* seconds: the first `seconds`, zero padding when shorter */
    STK_OP_VOL = 33,               /* gain, gain_type, then clamped to [-1, 1] */
    STK_OP_SPECTROGRAM = 34,       /* n_fft, win_length, hop_length, pad, window, power, ... */
    STK_OP_MEL_SPECTROGRAM = 35,   /* sample_rate, n_fft, ..., f_min, f_max, n_mels, norm, ... */
    STK_OP_MFCC = 36,              /* sample_rate, n_mfcc, dct_type, norm, log_mels, melkwargs */
    STK_OP_AMPLITUDE_TO_DB = 37,   /* stype, top_db */
    STK_OP_TIME_MASKING = 38,      /* time_mask_param, iid_masks, p */
    STK_OP_FREQUENCY_MASKING = 39, /* freq_mask_param, iid_masks */
    STK_OP_TIME_STRETCH = 40       /* hop_length, n_freq, fixed_rate or rate_range: torchaudio's
                                    * phase vocoder on a complex spectrogram */
} stk_op_kind;

/** What a transform reads and makes (stk_transform_opts.media): each kind is its own per-sample
 *  pipeline behind the same loader, ring and random stream (docs/design.md, "Adding a media
 *  kind"). New kinds are appended, never renumbered. */
typedef enum stk_media {
    STK_MEDIA_IMAGE = 0, /* an encoded image or a uint8 image array -> [3, H, W] (or [H, W, 3]) */
    STK_MEDIA_AUDIO = 1, /* encoded audio (WAV, FLAC, Ogg Vorbis, Opus, MP3, ...) or a waveform
                          * array -> float32 [C, samples] or [C, bins, frames] */
    STK_MEDIA_VIDEO = 2  /* an encoded video file (MP4/MOV, Matroska/WebM, AVI) -> a clip of
                          * frames_per_clip frames, [T, H, W, 3] or [3, T, H, W] (docs/video.md),
                          * the image ops applied to every frame with one set of parameters */
} stk_media;

/** Where a video clip starts in its video (docs/video.md). */
typedef enum stk_clip_sampling {
    STK_CLIP_RANDOM = 0, /* each sample's clip starts at a uniform random frame (or time) drawn
                          * from its (seed, epoch, index) stream: training */
    STK_CLIP_UNIFORM = 1 /* clip k of clips_per_video starts at the k-th of that many evenly
                          * spaced positions, first and last included: evaluation */
} stk_clip_sampling;

/** What a video clip does in a video shorter than the clip. */
typedef enum stk_short_video {
    STK_SHORT_PAD = 0,  /* the clip's frames past the video's end repeat its last frame */
    STK_SHORT_LOOP = 1, /* the clip runs on from the video's first frame (frame numbers and times
                         * wrap around) */
    STK_SHORT_FAIL = 2  /* the record fails with STK_EFORMAT naming both lengths, so that
                         * STK_LOADER_SKIP_CORRUPT (on_error="skip") skips and counts it */
} stk_short_video;

/** One op. Unused parameters are ignored; stk_op_init gives torchvision's defaults. */
typedef struct stk_op {
    size_t struct_size; /* set by stk_op_init(); never by hand */
    stk_op_kind kind;
    int64_t size[2]; /* (h, w); Resize with size[1] == 0 resizes the shorter side */
    double scale[2]; /* RandomResizedCrop area range (default 0.08, 1.0); RandomErasing's */
    double ratio[2]; /* RandomResizedCrop aspect range (default 3/4, 4/3); RandomErasing's */
    double p;        /* probability of the Random* ops (default 0.5) */
    double brightness, contrast, saturation, hue; /* ColorJitter (default 0: off) */
    float mean[3], std[3];                        /* Normalize */
    int64_t num_output_channels; /* Grayscale: must be 3 (the output is RGB; default 3) */
    int64_t bits;                /* RandomPosterize: bits kept per channel, 0..8 (default 8) */
    double threshold;            /* RandomSolarize: values >= threshold invert (default 128) */
    double sharpness_factor;     /* RandomAdjustSharpness: 0 blurs, 1 keeps, 2 sharpens */
    int64_t kernel_size[2];      /* GaussianBlur (x, y) = (width, height) as torchvision: odd */
    double sigma[2];             /* GaussianBlur sigma range (default 0.1, 2.0) */
    int64_t padding[4];          /* Pad/RandomCrop: (left, top, right, bottom), >= 0 */
    int64_t pad_if_needed;       /* RandomCrop: 1 pads a side shorter than size (both ends) */
    double fill[3];  /* Pad/RandomCrop constant padding, the warps' outside: per channel, 0..255 */
    double value[3]; /* RandomErasing: per channel, in the output's units (after Normalize) */
    int64_t num_magnitude_bins; /* TrivialAugmentWide/RandAugment: 2..1024 (default 31) */
    int64_t num_ops;            /* RandAugment: ops per sample, 0..8 (default 2) */
    int64_t magnitude;          /* RandAugment: the bin, 0..num_magnitude_bins - 1 (default 9) */
    int64_t policy;             /* AutoAugment: 0 = AutoAugmentPolicy.IMAGENET (the only one) */
    int64_t
        n_transforms;  /* RandomApply/RandomChoice/RandomOrder: how many following ops are theirs */
    double degrees[2]; /* RandomRotation/RandomAffine: angle range, counter-clockwise degrees */
    int64_t interpolation; /* the warps (RandomRotation, RandomAffine, the policies): PIL's numbers,
                            * 0 NEAREST (default), 2 BILINEAR */
    int64_t expand;        /* RandomRotation: 1 grows the output to hold the whole rotated image */
    double center[2];      /* RandomRotation/RandomAffine: (x, y); NaN (default): image centre */
    double translate[2];   /* RandomAffine: max |shift| as fractions of (width, height) (0: none) */
    double shear[4];       /* RandomAffine: x range then y range, degrees (default 0: none) */
    int64_t padding_mode;  /* Pad/RandomCrop: 0 constant (fill), 1 edge, 2 reflect, 3 symmetric */
    int64_t severity;      /* AugMix: magnitude bins drawn from, 1..10 (default 3) */
    int64_t mixture_width; /* AugMix: chains mixed, 1..8 (default 3) */
    int64_t chain_depth;   /* AugMix: ops per chain, 1..4, or -1: uniform in 1..3 (default) */
    double alpha;          /* AugMix: Dirichlet/Beta parameter (default 1) */
    int64_t all_ops;       /* AugMix: 1 adds Brightness, Color, Contrast, Sharpness (default) */
    /* ---- audio ops (torchaudio's arguments; a string argument is the number given) ---- */
    int64_t orig_freq, new_freq;  /* Resample, Hz (default 16000, 16000); orig_freq is the rate
                                   * of waveform arrays: a decoded file is resampled from its own */
    int64_t resampling_method;    /* Resample: 0 "sinc_interp_hann" (0.13's "sinc_interpolation",
                                   * default), 1 "sinc_interp_kaiser" ("kaiser_window") */
    int64_t lowpass_filter_width; /* Resample (default 6) */
    double rolloff;               /* Resample (default 0.99) */
    double beta;                  /* Resample with kaiser: NaN = torchaudio's 14.769656459379492 */
    double seconds;               /* audio.RandomCrop/CenterCrop/PadTo: the output's length */
    int64_t channels;             /* audio.Downmix: 1 (default) or 2 */
    double gain;                  /* Vol (default 1) */
    int64_t gain_type;            /* Vol: 0 "amplitude" (default), 1 "db", 2 "power" */
    int64_t sample_rate;          /* MelSpectrogram, MFCC: the mel scale's rate (default 16000) */
    int64_t n_fft;                /* the spectrograms (default 400) */
    int64_t win_length;           /* 0 = n_fft (default) */
    int64_t hop_length;           /* 0 = win_length / 2 (default) */
    int64_t pad;                  /* zeros on both sides before the transform (default 0) */
    int64_t window;               /* window_fn: 0 torch.hann_window (default), 1 hamming_window,
                                   * 2 blackman_window, 3 torch.ones (rectangular) */
    int64_t periodic;             /* the window's periodic= (default 1, torch's) */
    double power;                 /* 1 (magnitude), 2 (power; default); Spectrogram: 0 for None,
                                   * the complex STFT, [..., 2] (real, imaginary) */
    int64_t normalized;           /* 0 False (default), 1 True or "window", 2 "frame_length" */
    int64_t stft_center;          /* center= (default 1): pad n_fft / 2 on both sides (pad_mode) */
    int64_t pad_mode;             /* 0 "reflect" (default), 1 "constant", 2 "replicate",
                                   * 3 "circular" */
    int64_t onesided;             /* 1 (default): n_fft / 2 + 1 bins, 0: n_fft */
    double f_min, f_max;          /* MelSpectrogram, MFCC (default 0, NaN = sample_rate // 2) */
    int64_t n_mels;               /* MelSpectrogram, MFCC (default 128) */
    int64_t mel_norm;             /* MelSpectrogram's norm: 0 None (default), 1 "slaney" */
    int64_t mel_scale;            /* 0 "htk" (default), 1 "slaney" */
    int64_t n_mfcc;               /* MFCC (default 40) */
    int64_t dct_type;             /* MFCC: 2, the only one (default) */
    int64_t dct_norm;             /* MFCC's norm: 0 None, 1 "ortho" (default) */
    int64_t log_mels;             /* MFCC: 1 log(mel + 1e-6) instead of dB (default 0) */
    int64_t stype;                /* AmplitudeToDB: 0 "power" (default), 1 "magnitude" */
    double top_db;                /* AmplitudeToDB (NaN = None, default), MFCC (default 80) */
    int64_t mask_param;           /* TimeMasking / FrequencyMasking: the widest mask */
    int64_t iid_masks;            /* 1: one mask per channel; 0 (default): one per sample */
    int64_t n_freq;               /* TimeStretch: the spectrogram's bins (default 201); its
                                   * hop_length 0 = (n_freq - 1) * 2 // 2 (torchaudio's) */
    double fixed_rate;            /* TimeStretch: the rate (> 1 faster; default 1); NaN: drawn */
    double rate_range[2];         /* TimeStretch with fixed_rate NaN: the rate uniform in [lo, hi]
                                   * per sample (stoker's; NaN, NaN by default) */
} stk_op;

/** Fill the first `struct_size` bytes of `op` with torchvision's defaults for `kind`: what
 *  stk_op_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_op_init_sized(stk_op *op, stk_op_kind kind, size_t struct_size);

/** Fill `op` with torchvision's defaults for `kind`. */
static inline void stk_op_init(stk_op *op, stk_op_kind kind)
{
    stk_op_init_sized(op, kind, sizeof(*op));
}

/** Options for stk_transform_create. Initialise with stk_transform_opts_init. */
typedef struct stk_transform_opts {
    size_t struct_size; /* set by stk_transform_opts_init(); never by hand */
    const stk_op *ops;  /* applied in order (strided by ops[0].struct_size); copied at create */
    size_t n_ops;
    stk_dtype dtype;       /* output: UINT8, FLOAT32 (default), FLOAT16 or BFLOAT16 */
    bool nhwc;             /* output layout HWC per sample (default false: CHW) */
    bool exact;            /* decode at full scale: no DCT-domain downscaling (default false) */
    uint64_t max_pixels;   /* larger images fail with STK_ELIMIT (default 64 Mpx) */
    bool finish_on_device; /* the workers output uint8 [H, W, 3] and the loader finishes (layout,
                            * x/255, Normalize's (x-mean)/std, the dtype cast) after the copy, on
                            * the device when it can, else on the CPU; needs a float dtype and
                            * Normalize (if any) last. stk_transform_output still gives the
                            * finished output. (default false) */
    float finish_flip;     /* with finish_on_device: mirror each sample with this probability,
                            * from its own random stream (default 0) */
    bool lenient;          /* default false (strict): a JPEG that libjpeg reports as corrupt
                            * ("Corrupt JPEG data: ...", bad Huffman code, premature end) fails
                            * with STK_EFORMAT and libjpeg's text, as PIL would reject it; the
                            * whole entropy-coded data is checked even when only a window is
                            * decoded (a PNG is decoded to its last row, so that every chunk's
                            * CRC is checked). true: libjpeg's recovery (grey or smeared blocks)
                            * is kept, only a truncated file fails, and decoding stops after the
                            * window (PNG chunks below it go unchecked). Audio: strict reads a
                            * compressed stream (FLAC, Vorbis, Opus, MP3) to its end on a
                            * record's first read and fails one that ends early or is corrupt;
                            * lenient decodes only what the crop keeps. */
    /* ---- audio (docs/audio.md) ---- */
    stk_media media;      /* STK_MEDIA_IMAGE (default); a transform whose first op is an audio op
                           * is an audio transform whatever this says */
    uint32_t sample_rate; /* audio: 0 (default): the files' own rate, which must be the same for
                           * all (a loader learns it from record 0: a file at another rate
                           * fails, naming both rates); > 0: without a Resample op every file is
                           * resampled to it first (and it is the rate of waveform arrays) */
    bool lengths;         /* audio: the output tensor carries each row's valid length (samples,
                           * or frames of a spectrogram) before its zero padding
                           * (stk_tensor.lengths; Python: "audio_lengths") (default false) */
    /* ---- video (media = STK_MEDIA_VIDEO; docs/video.md): the ops are image ops, applied to
     * every frame of a clip with one set of parameters (one crop box, one flip, one jitter) ---- */
    uint32_t frames_per_clip;        /* frames in a clip, T (default 16) */
    uint32_t frame_step;             /* a clip takes every frame_step-th frame (default 1) */
    double frame_rate;               /* > 0: instead of frame_step, the frames shown at
                                      * t0 + k / frame_rate seconds (variable frame rates
                                      * follow the container's timestamps); 0 (default) */
    uint32_t clips_per_video;        /* clips per video and epoch, K (default 1): a loader
                                      * gives K samples per record, sample i being clip i % K
                                      * of record i / K */
    stk_clip_sampling clip_sampling; /* default STK_CLIP_RANDOM */
    stk_short_video short_video;     /* default STK_SHORT_PAD */
    bool channels_first;             /* video: [3, T, H, W] per sample (torchvision's video
                                      * models); false (default): [T, H, W, 3] */
    uint32_t decoder_threads;        /* libavcodec's threads per clip; 0 (default): a loader's
                                      * thread plan decides, cores / the clips decoded at once
                                      * (1 when its threads fill the cores; 1 outside a
                                      * loader) (docs/video.md) */
    uint64_t max_clip_pixels;        /* a clip's frames at full size, T x width x height, at
                                      * most this (default 2^31); max_pixels is per frame */
} stk_transform_opts;

/** Fill the first `struct_size` bytes of `opts` with the defaults documented on each field (no
 *  ops, float32 CHW, strict): what stk_transform_opts_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_transform_opts_init_sized(stk_transform_opts *opts, size_t struct_size);

/** Fill `opts` with the defaults documented on each field (no ops, float32 CHW, strict). */
static inline void stk_transform_opts_init(stk_transform_opts *opts)
{
    stk_transform_opts_init_sized(opts, sizeof(*opts));
}

/** Compile a transform. The output size must be fixed by the ops (end with RandomResizedCrop,
 *  CenterCrop or Resize((h, w))).
 *  @return STK_OK (*out set), STK_EINVAL (bad parameter, output size not fixed, Normalize with
 *          uint8 output; with finish_on_device: a uint8 dtype, Normalize not last, a flip
 *          probability outside [0, 1]), STK_ENOMEM. Details in stk_last_errmsg().
 *  Lifetime: *out until stk_transform_destroy. */
STK_API stk_status stk_transform_create(const stk_transform_opts *opts, stk_transform **out);

/** Compile a named recipe: "imagenet-train" (RandomResizedCrop(224) + RandomHorizontalFlip +
 *  Normalize(ImageNet mean/std), float32 NCHW) or "imagenet-val" (Resize(256) + CenterCrop(224)
 *  + Normalize); the audio recipes "kws-train" (Resample to 16 kHz + audio.RandomCrop(1 s) +
 *  MelSpectrogram(16000, n_mels=64) + FrequencyMasking(8) + TimeMasking(20): float32 [1, 64,
 *  81] of a mono file) and "kws-val" (Resample + audio.CenterCrop(1 s) + MelSpectrogram).
 *  @return STK_OK, STK_EINVAL (unknown name; the message lists the recipes), STK_ENOMEM. */
STK_API stk_status stk_transform_recipe(const char *name, bool exact, stk_transform **out);

/** Whether any op of `t` takes numbers from the sample's random stream (the Random* ops,
 *  ColorJitter, GaussianBlur, the warps, the policies and the containers do; Resize, CenterCrop,
 *  Pad, Grayscale and Normalize do not: stk_op_draws per kind). A transform that draws nothing
 *  is deterministic, an evaluation transform: the Python package and the CLI decode it exactly
 *  (stk_transform_opts.exact) unless told otherwise, since evaluation results must not depend on
 *  the loader (docs/images.md "Exact by default").
 *  Threads: thread-safe (t is immutable). */
STK_API bool stk_transform_draws(const stk_transform *t);

/** The media kind of a transform (the pipeline it runs).
 *  Threads: thread-safe. */
STK_API stk_media stk_transform_media(const stk_transform *t);

/** ImageNet's per-channel mean and standard deviation (R, G, B on the 0..1 scale) as torchvision's
 *  recipes normalise with them: the Normalize of the "imagenet-*" recipes. Initialisers of a
 *  double[3] (or float[3]). */
/* clang-format off */
#define STK_IMAGENET_MEAN {0.485, 0.456, 0.406}
#define STK_IMAGENET_STD {0.229, 0.224, 0.225}
/* clang-format on */

/** The per-sample output of a transform: dtype, rank and shape (without the batch dimension).
 *  An audio transform whose channel count or length depends on its input (no Downmix, the
 *  files' own rate) gives -1 there until a loader binds it to its dataset's record 0. */
STK_API void stk_transform_output(const stk_transform *t, stk_dtype *dtype, uint32_t *ndim,
                                  int64_t shape[STK_MAX_DIMS]);

/* ---------------------------------------------------------------------------------------------
 * Image decoder (full-size decode; the decode-only ceiling and C users)
 * ------------------------------------------------------------------------------------------- */

/** An image decoder with reusable buffers: JPEG, PNG, WebP, TIFF, BMP and binary PPM/PGM,
 *  told apart by their magic bytes. It is always strict: a JPEG that libjpeg reports as corrupt
 *  fails (stk_transform_opts.lenient has the details; there is no lenient public decoder).
 *  Thread-compatible: one thread at a time. */
typedef struct stk_decoder stk_decoder;

/** A decoded image: 8-bit RGB, interleaved. An output struct: initialise with stk_image_init. */
typedef struct stk_image {
    size_t struct_size;  /* set by stk_image_init() */
    const uint8_t *data; /* valid until the next call on the decoder */
    uint32_t width, height;
    size_t stride; /* bytes per row */
} stk_image;

/** Zero `img` and set its struct_size (the caller's sizeof). */
static inline void stk_image_init(stk_image *img)
{
    stk_image z = STK_ZERO_INIT;
    z.struct_size = sizeof(*img);
    *img = z;
}

/** Create a decoder refusing images over `max_pixels` (0 = 64 Mpx).
 *  @return STK_OK (*out set) or STK_ENOMEM. Lifetime: until stk_decoder_destroy. */
STK_API stk_status stk_decoder_create(uint64_t max_pixels, stk_decoder **out);

/** Destroy a decoder. Accepts NULL. */
STK_API void stk_decoder_destroy(stk_decoder *d);

/** Decode a whole image (any format above) at full size to RGB (grayscale, palette, 16-bit
 *  and CMYK converted, alpha dropped). `out` is an output struct (stk_image_init).
 *  @return STK_OK, STK_EINVAL (out->struct_size not set), STK_EFORMAT (corrupt, truncated, an
 * unsupported variant such as animated WebP or RLE BMP, or not an image; reason in
 * stk_decoder_errmsg, e.g. "JPEG: Corrupt JPEG data: bad Huffman code"), STK_ELIMIT (over
 * max_pixels), STK_ENOMEM. Lifetime: out->data until the next call on `d`. */
STK_API stk_status stk_decoder_decode(stk_decoder *d, const void *src, size_t size, stk_image *out);

/** Detail of the decoder's last failure ("" when none).
 *  Lifetime: valid until the next call on `d`. */
STK_API const char *stk_decoder_errmsg(const stk_decoder *d);

/** Check an encoded audio file (WAV, FLAC, Ogg Vorbis, Opus, MP3, AIFF; the format from its
 *  bytes) as the loader's strict first read does (docs/audio.md "Strict decoding"): a compressed
 *  stream decoded from start to end, which must give exactly the frames its header says with no
 *  decoder error and (Ogg) every page's CRC; a WAV's data chunk within the file. `rate`,
 *  `channels`, `frames` (each may be NULL) get the header's. `stoker verify` calls it.
 *  @return STK_OK, STK_EFORMAT (the reason in stk_last_errmsg(), e.g. "FLAC: Error : flac
 *  decoder lost sync. (after 45056 of its 132300 frames)"), STK_ELIMIT (over 64 channels),
 *  STK_ENOTSUP (built without libsndfile or libmpg123), STK_ENOMEM.
 *  Threads: thread-safe (each call its own decoder). */
STK_API stk_status stk_audio_check(const void *src, size_t size, uint32_t *rate, uint32_t *channels,
                                   int64_t *frames);

/** Destroy a transform. Accepts NULL. Must outlive every loader that uses it. */
STK_API void stk_transform_destroy(stk_transform *t);

/* ---------------------------------------------------------------------------------------------
 * Loader
 * ------------------------------------------------------------------------------------------- */

/** A loader: worker threads, a ring of batch slots and an epoch sampler over a dataset.
 *  Thread-compatible: one consumer thread at a time; stk_batch_release may be called from any
 *  thread. */
typedef struct stk_loader stk_loader;

/** A batch borrowed from the ring by stk_loader_next. */
typedef struct stk_batch stk_batch;

/* Loader flags. STK_LOADER_DROP_LAST drops the partial last batch and the uneven tail across
 * ranks; STK_LOADER_DROP_TAIL / STK_LOADER_PAD_TAIL decide the tail on their own (the DataLoader's
 * drop_last and DistributedSampler's drop_last apart: stk_plan_init_v2). */
#define STK_LOADER_SHUFFLE 0x1u      /* shuffle each epoch from (seed, epoch) */
#define STK_LOADER_DROP_LAST 0x2u    /* drop the partial last batch (and the tail, see above) */
#define STK_LOADER_SKIP_CORRUPT 0x4u /* on_error=skip: replace a bad sample, count it */
#define STK_LOADER_NO_VERIFY 0x8u    /* do not check record checksums */
#define STK_LOADER_PINNED 0x10u      /* allocate the ring page-locked (needs CUDA; else pageable) */
#define STK_LOADER_AUTOTUNE 0x20u    /* choose active threads and depth online (see below) */
#define STK_LOADER_NO_STATS 0x40u    /* do not time the stages (to measure what timing costs) */
#define STK_LOADER_STRIDED 0x80u     /* split among ranks as DistributedSampler: STK_PLAN_STRIDED */
#define STK_LOADER_DROP_TAIL 0x100u  /* drop the uneven tail across ranks, whatever DROP_LAST */
#define STK_LOADER_PAD_TAIL 0x200u   /* pad the uneven tail across ranks, whatever DROP_LAST */
#define STK_LOADER_SHARED_RING                                                                     \
    0x400u /* ring slots in one shared-memory file that other processes                            \
             can map (stk_loader_ring_memory) */
/* No worker thread starts: the consumer's thread loads each batch itself, calling
 * stk_loader_help until it returns *ran 0, then stk_loader_next (which fails with STK_ESTATE
 * instead of waiting for a batch nobody loads). Needs a sample callback; AUTOTUNE is ignored.
 * The Python front end's num_workers=0: the training thread loads, as the DataLoader's does. */
#define STK_LOADER_CALLER_LOADS 0x800u

/** A batch transform (stk_loader_opts.batch_ops), as torchvision.transforms.v2 defines it.
 *  Both draw lambda ~ Beta(alpha, alpha) once per batch from the batch's own random stream,
 *  keyed by (seed, epoch, batch number, rank): the same for any thread count and after resume.
 *  The labels become one-hot float32 [B, num_classes] rows, then
 *  - STK_BATCH_MIXUP: image = lambda * image + (1 - lambda) * image rolled by one along the
 *    batch (row i mixes with row i - 1, row 0 with the last); labels mixed alike. Needs a
 *    float32 image tensor.
 *  - STK_BATCH_CUTMIX: a box centred on a uniform pixel, half-sides int(0.5 * sqrt(1 - lambda)
 *    * W) and likewise H, clipped to the image, takes the rolled batch's pixels; the labels mix
 *    with lambda = 1 - box area / image area. Images of any dtype, [..., H, W] (or [H, W, C]
 *    when the transform outputs HWC). */
typedef enum stk_batch_op_kind { STK_BATCH_MIXUP = 1, STK_BATCH_CUTMIX = 2 } stk_batch_op_kind;

#define STK_MAX_BATCH_OPS 8

/** One batch transform: its kind and Beta parameter (alpha > 0; torchvision's default 1.0).
 *  Initialise with stk_batch_op_init. */
typedef struct stk_batch_op {
    size_t struct_size; /* set by stk_batch_op_init(); never by hand */
    stk_batch_op_kind kind;
    double alpha;
} stk_batch_op;

/** Set `op` to `kind` with torchvision's alpha (1.0) and its struct_size (the caller's sizeof).
 *  Threads: thread-safe (touches only `op`). */
static inline void stk_batch_op_init(stk_batch_op *op, stk_batch_op_kind kind)
{
    stk_batch_op z = STK_ZERO_INIT;
    z.struct_size = sizeof(*op);
    z.kind = kind;
    z.alpha = 1.0;
    *op = z;
}

/** Per-sample callback (stk_loader_opts.sample_fn), run by a worker thread on each sample after
 *  its record was read, decoded and transformed, before the batch is complete. `in` and `out`
 *  are arrays of the library's stk_tensor (each struct_size = the library's sizeof): a callback
 *  built against this header indexes them as arrays.
 *  `in[0, n_in)` are the sample's tensors as the loader would have batched them (shape[0] = 1;
 *  bytes fields with lengths[0] valid bytes), "index" not included; `out[0, n_out)` describe
 *  the sample's rows of the batch, one per stk_loader_opts.sample_fields entry (shape[0] = 1,
 *  data writable, size bytes): the callback fills every one. `index` is the record number.
 *  Return STK_OK, STK_EFORMAT for a failure of this record (skipped and counted under
 *  STK_LOADER_SKIP_CORRUPT, else the batch's error), or another status for a failure that no
 *  substitute can cure; write the reason into err (the loader prefixes the record's
 *  description).
 *  Threads: called concurrently from every worker thread; the loader holds none of its locks
 *  while it runs. Lifetime: `in`, `out` and their data only during the call; it is never called
 *  after stk_loader_destroy returned (destroy waits for running calls). */
typedef struct stk_tensor stk_tensor; /* below, with the batch accessors */
typedef stk_status (*stk_sample_fn)(void *ctx, uint64_t index, const stk_tensor *in, size_t n_in,
                                    stk_tensor *out, size_t n_out, char *err, size_t err_size);

/** What the loader tells a stk_sample_fn_v2 about the sample it is to produce. */
typedef struct stk_sample_info {
    size_t struct_size; /* sizeof(stk_sample_info) of the library that filled it */
    uint64_t index;     /* the record (as stk_sample_fn's index) */
    uint64_t epoch;     /* the epoch of the sample's batch */
    uint64_t position;  /* the sample's position in the epoch's global order */
    uint64_t seed;      /* stk_sample_seed(loader seed, epoch, index) */
    uint32_t worker;    /* the calling worker thread, 0..n_threads-1 (the same thread always
                           passes the same number) */
    uint32_t row;       /* the sample's row in its batch */
} stk_sample_info;

/** A 64-bit seed for other random generators, taken from the sample's own Philox stream of
 *  (seed, epoch, index), kept apart from the augmentation's (stk_rng_init of the same triple):
 *  what stk_sample_info.seed holds, so Python's random, NumPy's and torch's generators can be
 *  seeded per sample, the same for any thread, process or rank count and after a resume.
 *  Threads: thread-safe. */
STK_API uint64_t stk_sample_seed(uint64_t seed, uint64_t epoch, uint64_t index);

/** stk_sample_fn with the sample's epoch, position, seed, worker and row (stk_sample_info):
 *  called instead of sample_fn when stk_loader_opts.sample_fn_v2 is set, with the same contract
 *  (the same `in`, `out`, return values, threads and lifetime). */
typedef stk_status (*stk_sample_fn_v2)(void *ctx, const stk_sample_info *info, const stk_tensor *in,
                                       size_t n_in, stk_tensor *out, size_t n_out, char *err,
                                       size_t err_size);

/** Optional companion of stk_sample_fn_v2 (stk_loader_opts.sample_ahead_fn), for a callback
 *  that hands samples to someone else (the Python binding's worker processes): a worker thread
 *  that took several samples at once announces each, with the `info` and `out` that
 *  sample_fn_v2 will get for it, before it runs any of them through sample_fn_v2 in the same
 *  order, so the callback may start them ahead. `in` is not given (a callback that reads `in`
 *  starts nothing ahead). A sample announced is still produced by its sample_fn_v2 call (which
 *  returns its status); one run that is not announced (an on-error substitute) goes after those
 *  announced before it. With `out` NULL (n_out 0; only info->worker set), after each run: the
 *  thread will not run the announced samples it has not run yet (a reset or seek cut its run
 *  short); the callback returns only once nothing it started may still write into their rows.
 *  The thread also makes that call once before it takes its first sample: a callback may wait
 *  there until it can start the thread's samples (a worker process still starting), so that
 *  the samples it would hold meanwhile stay for other threads (stk_loader_help's included).
 *  Returns how many samples the thread should take at a time from now on (1: one, nothing
 *  ahead; the loader takes fewer near a batch's end).
 *  Threads: called by each worker thread for its own samples, like sample_fn_v2. */
typedef uint32_t (*stk_sample_ahead_fn)(void *ctx, const stk_sample_info *info, stk_tensor *out,
                                        size_t n_out);

/** The order of an epoch (stk_loader_opts.order). Every order is a pure function of (seed,
 *  epoch, position), so a resumed epoch continues exactly (stk_loader_load_state) and every
 *  rank computes the same global order.
 *  - STK_ORDER_ALL: every record once, in order, or with STK_LOADER_SHUFFLE permuted by
 *    stk_sampler_index (torch's SequentialSampler / RandomSampler).
 *  - STK_ORDER_INDICES: the positions are `indices`, in that order, or with STK_LOADER_SHUFFLE
 *    permuted per (seed, epoch) by stk_sampler_index over the list (torch's
 *    SubsetRandomSampler); stk_loader_set_indices replaces the list (a custom sampler's indices
 *    each epoch).
 *  - STK_ORDER_WEIGHTED: num_samples positions, record i drawn with probability
 *    weights[i] / sum(weights) (torch's WeightedRandomSampler): with replacement each position
 *    draws on its own (a Philox stream of (seed, epoch, position) kept apart from the
 *    augmentation streams, then a binary search of the weights' prefix sums); without
 *    replacement the epoch's list is the num_samples records of largest key log(u_i)/w_i with
 *    u_i uniform from the stream of (seed, epoch, i) (Efraimidis-Spirakis: the distribution of
 *    successive draws without replacement), made once per epoch (O(n log n), by the worker
 *    that opens the epoch's first batch). */
typedef enum stk_order_kind {
    STK_ORDER_ALL = 0,
    STK_ORDER_INDICES = 1,
    STK_ORDER_WEIGHTED = 2
} stk_order_kind;

/** Options for stk_loader_create. Initialise with stk_loader_opts_init. More fields may be
 *  added at the end in later versions. */
typedef struct stk_loader_opts {
    size_t struct_size;       /* set by stk_loader_opts_init(); never by hand */
    const char *const *paths; /* dataset paths as for stk_dataset_open; copied at create */
    size_t n_paths;
    const stk_dataset *dataset;     /* or an open dataset (borrowed; must outlive the loader) */
    int64_t batch_size;             /* samples per batch, >= 1 (default 256) */
    int32_t n_threads;              /* worker threads; 0 = stk_n_cpus() (default 0); < 0 invalid */
    int32_t n_slots;                /* ring slots (batches in flight, the one the consumer holds
                                       included; Python's prefetch + 1), >= 1; 0 = default (4) */
    uint64_t seed;                  /* shuffle and augmentation seed (default 0) */
    int32_t rank;                   /* this process's rank; -1 = from the environment (default) */
    int32_t world;                  /* number of ranks; -1 = from the environment (default) */
    uint32_t flags;                 /* STK_LOADER_* */
    const stk_transform *transform; /* NULL = raw records (default); borrowed */
    const char *transform_field;    /* field the transform reads: encoded image bytes, or a
                                       uint8 image array (H, W, 3), (3, H, W), (H, W), (H, W, 1)
                                       or (1, H, W), fed as RGB without a decode (grayscale
                                       repeated into 3 channels); NULL = the field
                                       stk_dataset_image_field picks (default) */
    uint32_t trace_events; /* per-thread trace capacity in events; 0 = no trace (default) */
    /* ---- GPU path (docs/gpu.md). CUDA is loaded at run time; without it these degrade to the
     * CPU path and stk_loader_stats.device_reason says why. ---- */
    int32_t device;        /* CUDA device to copy each batch to, ahead of the consumer, on
                              the loader's own stream; -1 = none (default). Implies a
                              pinned ring. */
    uint64_t pinned_limit; /* cap in bytes on page-locked memory held by all loaders of the
                              process; a ring that would exceed it stays pageable. 0 = env
                              STOKER_PINNED_LIMIT (e.g. "8G"), else 1/4 of RAM (default) */
    /* Finishing (normalise, cast, layout after the copy) is the transform's:
     * stk_transform_opts.finish_on_device. stk_batch_device_tensor shows the finished tensor;
     * stk_batch_tensor shows it after CPU finishing, the uint8 input when the device finishes. */
    const char *format; /* with paths: the dataset's format (stk_dataset_opts.format);
                           NULL = detect it (default); copied */
    /* ---- batch transforms (stk_batch_op): applied to each complete batch by the worker that
     * completed it, before it is handed out (and before its device copy) ---- */
    const stk_batch_op *batch_ops; /* NULL = none (default); strided by
                                      batch_ops[0].struct_size; copied at create */
    uint32_t n_batch_ops;          /* 0..STK_MAX_BATCH_OPS */
    bool batch_ops_choice;         /* apply one op per batch, chosen uniformly (torchvision's
                                      RandomChoice); false = each op in turn (default) */
    int64_t num_classes;           /* with batch_ops: classes of the one-hot labels, >= 1 */
    const char *label_field;       /* with batch_ops: the int64 label field, which becomes
                                      float32 [num_classes] soft targets (default "label");
                                      the images are transform_field's tensor */
    /* ---- per-sample callback (stk_sample_fn): the Python binding's map= ---- */
    stk_sample_fn sample_fn;        /* NULL = none (default) */
    void *sample_ctx;               /* passed to sample_fn; borrowed, must outlive the loader */
    const stk_field *sample_fields; /* the tensors sample_fn writes (array, int64 or float32
                                       fields; no bytes), which replace the record's fields
                                       in the batch; strided by sample_fields[0].struct_size;
                                       copied at create */
    size_t n_sample_fields;         /* 1..STK_MAX_FIELDS with sample_fn */
    uint64_t memory_budget;         /* bytes this loader may use at most: the ring (n_slots slots)
                                       and each thread's scratch (read, batch transforms, sample
                                       buffer) are counted at create (over it, create fails with
                                       STK_ELIMIT saying what takes what); the image decoders'
                                       buffers are charged as they grow while running, and a decode
                                       that would go over fails its record with STK_ELIMIT, named
                                       (skipped under STK_LOADER_SKIP_CORRUPT). 0 = none (default) */
    /* ---- the epoch's order (stk_order_kind; docs/python.md "Samplers"): which records an
     * epoch reads and in what order. An epoch is a sequence of positions, split among ranks and
     * batched as for STK_ORDER_ALL; each position names one record. ---- */
    uint32_t order;          /* stk_order_kind (default STK_ORDER_ALL) */
    const uint64_t *indices; /* STK_ORDER_INDICES: the records of an epoch, each < the record
                                count, repeats allowed; copied at create */
    uint64_t n_indices;      /* STK_ORDER_INDICES: >= 1 */
    const double *weights;   /* STK_ORDER_WEIGHTED: one per record, finite and >= 0, at least
                                one > 0; copied at create */
    uint64_t n_weights;      /* STK_ORDER_WEIGHTED: the record count */
    uint64_t num_samples;    /* STK_ORDER_WEIGHTED: positions per epoch, >= 1; without
                                replacement at most the number of positive weights */
    bool replacement;        /* STK_ORDER_WEIGHTED: draw with replacement (default false) */
    /* ---- the per-sample callback with the sample's info (stk_sample_fn_v2); when set it is
     * called instead of sample_fn, with sample_ctx and sample_fields as for sample_fn ---- */
    stk_sample_fn_v2 sample_fn_v2; /* NULL = none (default) */
    /* with sample_fn_v2: samples announced before they run (stk_sample_ahead_fn); NULL = none
     * (default: one sample taken at a time) */
    stk_sample_ahead_fn sample_ahead_fn;
    /* a resume state (stk_loader_save_state's JSON) the loader starts at, checked as
     * stk_loader_load_state checks it and applied before any worker starts, so that no sample
     * of epoch 0 is loaded for nothing (a loader rebuilt at another's position); NULL = epoch 0
     * (default). Read at create only */
    const char *state;
} stk_loader_opts;

/** Fill the first `struct_size` bytes of `opts` with the defaults documented on each field: what
 *  stk_loader_opts_init calls with the caller's sizeof.
 *  Threads: thread-safe. */
STK_API void stk_loader_opts_init_sized(stk_loader_opts *opts, size_t struct_size);

/** Fill `opts` with the defaults documented on each field. */
static inline void stk_loader_opts_init(stk_loader_opts *opts)
{
    stk_loader_opts_init_sized(opts, sizeof(*opts));
}

/** Create a loader and start its worker threads. The first epoch is 0 (or the position of
 *  opts.state, or the one restored later with stk_loader_load_state). Workers start filling the
 *  ring at once.
 *  With STK_LOADER_AUTOTUNE, n_threads (0 = stk_n_cpus()) and n_slots are upper bounds: the
 *  loader starts one thread working and, every 250 ms of consumption, adds threads while the
 *  consumer waits for batches (doubling while it waits more than 30% of the time), raises the
 *  depth when every allowed thread is busy and the consumer still waits, and parks a thread when
 *  the consumer never waits and the workers' idle time exceeds one thread's worth. It ends on the
 *  fewest threads that keep the consumer from waiting; stats report the choice and why.
 *  A device that cannot be used (no driver, no such device) is not an error: the loader runs on
 *  the host and stk_loader_stats.device_reason says why (docs/gpu.md).
 *  @return STK_OK (*out set), STK_EINVAL (batch size 0 or over 2^31-1, negative threads,
 *          rank >= world, no data, empty dataset, unknown field; a transform field
 *          that is neither bytes nor a uint8 image array, or none or several picked when none
 *          is named (stk_dataset_image_field); batch_ops with a bad kind,
 *          alpha or num_classes, no int64 label field, MixUp on non-float32 images;
 *          sample_fields empty, too many or not batchable, or sample_fn with a finish_on_device
 *          transform; an unknown order, an empty or out-of-range index list, weights not one
 *          per record, negative, not finite or all 0, num_samples 0 or without replacement
 *          over the records of positive weight), STK_ELIMIT (batch slot too large; finishing
 *          over 2^32 pixels per batch; over memory_budget), STK_EIO/STK_EFORMAT/STK_ENOTSUP
 *          (from opening the dataset, or reading record 0 to pick the transform field),
 *          STK_ENOMEM (also: device buffers). Details in stk_last_errmsg().
 *  Lifetime: *out until stk_loader_destroy(*out). */
STK_API stk_status stk_loader_create(const stk_loader_opts *opts, stk_loader **out);

/** Stop the workers and free the loader, at any point: mid-epoch, with batches outstanding
 *  (their memory stays valid until each is released; the last release frees the ring).
 *  Accepts NULL. In a process forked after the loader was created (which has none of its
 *  threads), this and stk_batch_release do nothing: the child's copy is left alone.
 *  Threads: not concurrently with stk_loader_next on the same loader. */
STK_API void stk_loader_destroy(stk_loader *loader);

/** Borrow the next batch of the current epoch, blocking until it is ready.
 *  When the epoch is done, returns STK_END once with *out NULL; the next call starts the next
 *  epoch (epochs advance by themselves). A failed sample makes this call return its error
 *  (the batch is dropped; the next call continues with the following batch) unless
 *  STK_LOADER_SKIP_CORRUPT replaced it.
 *  @return STK_OK (*out set), STK_END, STK_EBUSY (the slot the next batch needs is still held
 *          by the consumer: release the oldest batch, or raise n_slots; nothing changed), or
 *          <0 with the detail naming shard file and record in stk_loader_errmsg().
 *  Lifetime: *out stays valid until stk_batch_release(*out).
 *  Threads: one consumer thread at a time. */
STK_API stk_status stk_loader_next(stk_loader *loader, stk_batch **out);

/** stk_loader_next with a time limit: waits at most `timeout_ms` milliseconds for the next batch
 *  (a negative value waits as long as it takes, like stk_loader_next). Bindings use it to stay
 *  responsive (Python checks for Ctrl-C between calls) without a thread hop per batch.
 *  @return as stk_loader_next, or STK_EAGAIN when no batch was ready in time; then nothing has
 *          changed and the call may simply be repeated.
 *  Threads: one consumer thread at a time. */
STK_API stk_status stk_loader_next_timeout(stk_loader *loader, stk_batch **out, int64_t timeout_ms);

/** Run one sample of the batch the next stk_loader_next returns on the calling thread, with
 *  `fn(ctx, ...)` in place of the loader's stk_sample_fn_v2 (it must produce the rows the
 *  loader's callback would: the Python front end's training thread loads part of its first batch
 *  while the workers start). The sample is claimed like a worker's ticket (exactly once, its
 *  failure the batch's as a worker's, on_error=skip's substitutes alike); the batch is opened
 *  first when no worker has opened it yet. stk_sample_info.worker is n_threads. With
 *  STK_LOADER_CALLER_LOADS one call runs every sample of that batch left to take (no worker
 *  would), and its time counts as the consumer's wait (stk_loader_stats).
 *  @return STK_OK with *ran the samples that ran (1, or with STK_LOADER_CALLER_LOADS up to the
 *          batch's), 0 when none was left to take (the batch is ready, its tickets are out, it
 *          cannot be opened yet, or the epoch is done); STK_ECANCELED when fn returned it
 *          (interrupted; *ran the samples before it): the sample stays claimed, and the next
 *          call runs it again first (a reset discards it); STK_EINVAL without a sample
 *          callback.
 *  Threads: the consumer's thread, between its stk_loader_next calls. */
STK_API stk_status stk_loader_help(stk_loader *loader, stk_sample_fn_v2 fn, void *ctx,
                                   uint32_t *ran);

/** Detail of the loader's last failure.
 *  Lifetime: valid until the next call on the loader. */
STK_API const char *stk_loader_errmsg(const stk_loader *loader);

/** The epoch the next batch belongs to (the current one while it is in progress). */
STK_API uint64_t stk_loader_epoch(const stk_loader *loader);

/** Number of batches this rank receives in a full epoch (len(loader) in Python). */
STK_API uint64_t stk_loader_n_batches(const stk_loader *loader);

/** The loader's dataset. Lifetime: until stk_loader_destroy. */
STK_API const stk_dataset *stk_loader_dataset(const stk_loader *loader);

/** Resolved settings: threads, ring depth, batch size, rank and world. */
typedef struct stk_loader_info {
    size_t struct_size; /* set by stk_loader_info_init() (an output struct) */
    uint32_t n_threads; /* worker threads running (0 with STK_LOADER_CALLER_LOADS) */
    uint32_t n_slots;   /* ring slots */
    uint32_t batch_size;
    uint32_t rank;
    uint32_t world;
    uint64_t n_records;
    size_t slot_size; /* bytes of one ring slot: min(batch_size, ceil(records / world)) rows */
    bool pinned;      /* ring is page-locked */
    /* The transform's per-sample output as the loader runs it (stk_transform_output of the
     * transform bound to this data: an audio transform's channels and length filled in);
     * ndim 0 without a transform. */
    stk_dtype transform_dtype;
    uint32_t transform_ndim;
    int64_t transform_shape[STK_MAX_DIMS];
} stk_loader_info;

/** Zero `out` and set its struct_size (the caller's sizeof). */
static inline void stk_loader_info_init(stk_loader_info *out)
{
    stk_loader_info z = STK_ZERO_INIT;
    z.struct_size = sizeof(*out);
    *out = z;
}

/** Fill `out` (an output struct: stk_loader_info_init) with the resolved settings.
 *  @return STK_OK, or STK_EINVAL (out->struct_size not set).
 *  Threads: thread-safe. */
STK_API stk_status stk_loader_info_get(const stk_loader *loader, stk_loader_info *out);

/** Where the ring's memory is, for STK_LOADER_SHARED_RING: every slot lies in one memfd
 *  (an anonymous shared-memory file, not /dev/shm) mapped at `base` in this process, so another
 *  process that maps `fd` (passed to it, e.g. over a Unix socket) writes a sample's rows at
 *  their offset from `base` (a stk_sample_fn's out[i].data - base). With STK_LOADER_PINNED (or a
 *  device) and CUDA present, the mapping is page-locked (cuMemHostRegister) within the pinned
 *  cap, as other rings are. */
typedef struct stk_ring_memory {
    size_t struct_size; /* set by stk_ring_memory_init() (an output struct) */
    int fd;             /* the memfd; -1 without STK_LOADER_SHARED_RING. Owned by the loader:
                           dup() it to keep it */
    void *base;         /* its mapping in this process (NULL without the flag) */
    size_t size;        /* bytes of the mapping: every slot */
    bool pinned;        /* page-locked */
} stk_ring_memory;

/** Zero `out` and set its struct_size (the caller's sizeof). */
static inline void stk_ring_memory_init(stk_ring_memory *out)
{
    stk_ring_memory z = STK_ZERO_INIT;
    z.struct_size = sizeof(*out);
    *out = z;
}

/** Fill `out` (an output struct: stk_ring_memory_init) with the ring's shared memory.
 *  @return STK_OK (fd -1 and base NULL when the loader was created without
 *          STK_LOADER_SHARED_RING), or STK_EINVAL (NULL argument, struct_size not set).
 *  Lifetime: fd and base stay valid while the ring lives: until stk_loader_destroy and the
 *  release of the last batch. Threads: thread-safe. */
STK_API stk_status stk_loader_ring_memory(const stk_loader *loader, stk_ring_memory *out);

/** Counters and stage times, cumulative since create, summed over the worker threads. Each
 *  worker times its stages with a monotonic clock into its own counters (no lock); reading them
 *  is cheap enough to do every step. Times are 0 with STK_LOADER_NO_STATS. */
typedef struct stk_loader_stats {
    size_t struct_size;        /* set by stk_loader_stats_init() (an output struct) */
    uint64_t batches;          /* delivered to the consumer */
    uint64_t samples;          /* delivered to the consumer */
    uint64_t bytes_read;       /* record bytes read from shards */
    uint64_t skipped;          /* samples replaced under STK_LOADER_SKIP_CORRUPT */
    uint64_t errors;           /* batches that failed */
    uint64_t wall_ns;          /* since create */
    uint64_t read_ns;          /* reading records (pread, checksum) */
    uint64_t decode_ns;        /* decoding images (header probe included) */
    uint64_t augment_ns;       /* crop/resize/flip/jitter/normalise/store into the slot */
    uint64_t collate_ns;       /* the rest of a sample's work (tickets, indices, completion) */
    uint64_t copy_ns;          /* device time of the host-to-device copies seen complete
                                  (h2d bandwidth = copied_bytes / copy_ns) */
    uint64_t worker_wait_ns;   /* active workers waiting for a free ring slot: the consumer
                                  (or a full ring) holds them back */
    uint64_t consumer_wait_ns; /* stk_loader_next blocked: the loader holds the consumer back */
    uint32_t active_threads;   /* worker threads currently working (autotune may park some) */
    uint32_t depth;            /* batches allowed in flight (autotune may lower it) */
    uint32_t autotune_changes; /* decisions the autotuner has taken */
    char autotune_reason[160]; /* why the last decision was taken ("" when none) */
    /* ---- GPU path ---- */
    bool pinned;             /* every ring slot is page-locked */
    uint64_t pinned_bytes;   /* page-locked bytes of this loader's ring */
    uint64_t pinned_total;   /* page-locked bytes of all loaders in the process */
    int32_t device;          /* device batches are copied to; -1 = none (or unavailable) */
    uint32_t finish;         /* stk_finish_where: where finishing runs */
    uint64_t copies;         /* batches whose device copy was issued */
    uint64_t h2d_bytes;      /* bytes of those copies */
    uint64_t copied_bytes;   /* bytes of the copies seen complete (copy_ns covers these) */
    uint64_t finish_ns;      /* finishing: device time of the kernel, or CPU time (fallback) */
    char device_reason[256]; /* why the ring is not pinned, there is no device copy or
                                finishing fell back to the CPU; "" when all requested is on */
    /* ---- added in 0.3.x (read when struct_size covers them) ---- */
    uint64_t indexed;       /* videos this loader indexed (a pass over the file's packets): found
                               neither in its memory nor in an index file (docs/video.md) */
    uint64_t index_loaded;  /* videos whose index this loader read from an index file (beside
                               the data or in the cache directory) instead */
    uint64_t index_unsaved; /* local videos this loader indexed whose index found no place on
                               disk (no writable directory beside the data, no cache directory):
                               kept in its memory only */
} stk_loader_stats;

/** Zero `out` and set its struct_size (the caller's sizeof). */
static inline void stk_loader_stats_init(stk_loader_stats *out)
{
    stk_loader_stats z = STK_ZERO_INIT;
    z.struct_size = sizeof(*out);
    *out = z;
}

/** Fill `out` (an output struct: stk_loader_stats_init). Every counter only grows from one call
 *  to the next.
 *  @return STK_OK, or STK_EINVAL (out->struct_size not set).
 *  Threads: thread-safe. */
STK_API stk_status stk_loader_stats_get(const stk_loader *loader, stk_loader_stats *out);

/** Write a Chrome/Perfetto trace (trace-event JSON) of the events recorded so far: one track per
 *  worker thread (read, decode, augment, wait-for-slot slices) and one for the consumer (wait
 *  slices inside stk_loader_next, and the time between calls as "step"). Needs
 *  opts.trace_events > 0; each thread keeps its first trace_events events.
 *  @return STK_OK, STK_ESTATE (tracing not enabled), STK_EIO (cannot write `path`).
 *  Threads: may run while the loader works; events being written are left out. */
STK_API stk_status stk_loader_trace_write(const stk_loader *loader, const char *path);

/** Jump to epoch `epoch` (position 0). Batches already prepared are discarded; batches the
 *  consumer still holds stay valid. Setting the epoch that is about to start anyway (nothing of
 *  it consumed yet) is a cheap no-op, so calling it before every epoch, as with PyTorch's
 *  DistributedSampler, costs nothing.
 *  @return STK_OK. */
STK_API stk_status stk_loader_set_epoch(stk_loader *loader, uint64_t epoch);

/** Replace the index list of an STK_ORDER_INDICES loader (copied) from the consumer's current
 *  position on: the epoch and the position within it stay, batches prepared with the old list
 *  are discarded (a list equal to the current one changes nothing and keeps them). Bindings call
 *  it at the start of each epoch with a custom sampler's indices.
 *  @return STK_OK, STK_EINVAL (not an STK_ORDER_INDICES loader, NULL or empty list, an index
 *          not below the record count), STK_ELIMIT (the list gives a rank more records than the
 *          ring's slots hold rows: slots are sized to min(batch_size, records per rank) at
 *          create), STK_ENOMEM. Details in stk_loader_errmsg().
 *  Threads: not concurrently with stk_loader_next on the same loader. */
STK_API stk_status stk_loader_set_indices(stk_loader *loader, const uint64_t *indices,
                                          uint64_t n_indices);

/** Write the resume state as a NUL-terminated JSON object into `buf`: format version, dataset
 *  fingerprint and size, seed, shuffle, epoch, and the global position consumed by the batches
 *  delivered so far (taken after the last batch of an epoch it resumes to zero batches; taken
 *  after STK_END, to the whole next epoch); with an order other than STK_ORDER_ALL also
 *  "order", a checksum of the order's settings (kind, list or weights, num_samples,
 *  replacement), which stk_loader_load_state requires to match.
 *  @return STK_OK, or STK_ELIMIT if `buf_size` is too small (256 bytes always suffice with
 *          STK_ORDER_ALL, 320 with any order). */
STK_API stk_status stk_loader_save_state(const stk_loader *loader, char *buf, size_t buf_size);

/** Restore a state from stk_loader_save_state, possibly taken with another world size or thread
 *  count: the rest of that epoch is re-split among this loader's ranks, then epochs continue.
 *  Prefetched batches are discarded.
 *  @return STK_OK, STK_EINVAL (not a stoker state, a state from another dataset or with other
 *          shuffle or order settings, or an impossible position), STK_ENOTSUP (newer state
 * version). Details in stk_loader_errmsg(). The seed is taken from the state. */
STK_API stk_status stk_loader_load_state(stk_loader *loader, const char *json);

/** One output tensor of a batch. For a bytes field the data is [n, stride] uint8 with each
 *  sample's bytes at the start of its row and its length in `lengths`; the rest of the row is
 *  not zeroed (it holds whatever an earlier batch left there). */
typedef struct stk_tensor {
    size_t struct_size; /* set by stk_tensor_init() (an output struct) */
    const char *name;   /* field name, or "index" */
    stk_dtype dtype;
    uint32_t ndim; /* including the leading batch dimension */
    int64_t shape[STK_MAX_DIMS + 2];
    void *data;             /* 64-byte aligned, C order */
    size_t size;            /* bytes */
    const int64_t *lengths; /* bytes fields: valid bytes per sample; NULL otherwise */
} stk_tensor;

/** Zero `t` and set its struct_size (the caller's sizeof), before stk_batch_tensor. */
static inline void stk_tensor_init(stk_tensor *t)
{
    stk_tensor z = STK_ZERO_INIT;
    z.struct_size = sizeof(*t);
    *t = z;
}

/** Samples in the batch (the batch size, or fewer for the last batch of an epoch). */
STK_API uint32_t stk_batch_n_samples(const stk_batch *b);

/** The epoch the batch belongs to.
 *  Threads: the thread holding the batch. */
STK_API uint64_t stk_batch_epoch(const stk_batch *b);

/** The batch's number within its epoch (counted from the epoch's start, also after a resume).
 *  Threads: the thread holding the batch. */
STK_API uint64_t stk_batch_number(const stk_batch *b);

/** Number of output tensors of the batch: the dataset's fields in schema order (a field
 *  consumed by the transform replaced by its output), then "index".
 *  Threads: the thread holding the batch. */
STK_API size_t stk_batch_n_tensors(const stk_batch *b);

/** Tensor `i` of the batch (see stk_batch_n_tensors): the dataset's fields in schema order (a field
 *  consumed by the transform is replaced by its output), then "index" (int64 [n], the global
 *  record number of each sample). `out` is an output struct (stk_tensor_init).
 *  @return STK_OK or STK_EINVAL (i out of range, out->struct_size not set).
 *  Lifetime: data valid until stk_batch_release(b). */
STK_API stk_status stk_batch_tensor(const stk_batch *b, size_t i, stk_tensor *out);

/** The record numbers of the batch's samples (the "index" tensor's data).
 *  Lifetime: until stk_batch_release(b). */
STK_API const int64_t *stk_batch_indices(const stk_batch *b);

/** Return the batch's slot to the ring. Accepts NULL. For a batch on a device: if the consumer
 *  made a stream wait for it (stk_batch_device_wait), the release is recorded on that stream as
 *  by stk_batch_release_after, and on every stream given to stk_batch_device_use; otherwise the
 *  device buffer may be overwritten by a later copy as soon as the ring reuses the slot, so work
 *  still reading it must be finished.
 *  Threads: thread-safe; any thread may release. */
STK_API void stk_batch_release(stk_batch *b);

/* ---------------------------------------------------------------------------------------------
 * GPU path (docs/gpu.md): pinned ring, copies on the loader's stream, finishing on the device
 *
 * With opts.device >= 0 the worker that completes a batch queues its copy to a device buffer
 * (one per ring slot) on the loader's own CUDA stream, then the finishing kernel, then an event,
 * before the batch is handed out: copies run ahead of the consumer and overlap its compute.
 * A consumer on stream S:
 *
 *     stk_loader_next(L, &b);
 *     stk_batch_device_tensor(b, i, &t);          t.data is a device address
 *     stk_batch_device_wait(b, S);                S waits for the copy; the host does not
 *     ... launch work reading t.data on S ...
 *     stk_batch_release_after(b, S);              the buffer is reused only after S's work
 *
 * The host slot is refilled only after its copy completed, and the device buffer is overwritten
 * only after the event recorded on S at release (both on the device, no host wait). A batch also
 * read on other streams names them with stk_batch_device_use: the release is recorded on each
 * of them too, and the next copy waits for them all. Streams are
 * CUstream handles passed as void* (NULL = the legacy default stream) of the device's primary
 * context, the one the CUDA runtime and PyTorch use.
 * ------------------------------------------------------------------------------------------- */

/** Where finishing (stk_transform_opts.finish_on_device) runs. */
typedef enum stk_finish_where {
    STK_FINISH_NONE = 0,  /* not requested */
    STK_FINISH_CPU = 1,   /* on the worker threads: no device, or the kernel could not be loaded */
    STK_FINISH_DEVICE = 2 /* by the kernel on the loader's stream, after the copy */
} stk_finish_where;

/** Whether CUDA is usable for `device`: loads the driver (once per process) and looks the device
 *  up, without creating a context (cheap). On success `buf` (may be NULL) receives "CUDA driver
 *  12.4, device 0: NVIDIA H100 80GB HBM3 (compute capability 9.0)". The driver is libcuda.so.1,
 *  or the library named by env STOKER_LIBCUDA.
 *  @return STK_OK, or STK_ENOTSUP with the reason in stk_last_errmsg() ("libcuda.so.1: cannot
 *          open shared object file: No such file or directory", "cuInit: CUDA_ERROR_NO_DEVICE
 *          (...)"); buf is then "".
 *  Threads: thread-safe. */
STK_API stk_status stk_cuda_probe(int32_t device, char *buf, size_t buf_size);

/** The device the batch was copied to, or -1 when it lives on the host only (no device asked,
 *  or CUDA unavailable: see stk_loader_stats.device_reason). */
STK_API int32_t stk_batch_device(const stk_batch *b);

/** Tensor `i` of the batch on the device: as stk_batch_tensor, with `data` a device address
 *  (a CUdeviceptr as void*). The finished field has the finishing dtype and layout
 *  ([n, 3, H, W] or [n, H, W, 3]); the others the host tensor's. For bytes fields `lengths`
 *  points to host memory. Read it only on a stream that stk_batch_device_wait made wait, or
 *  after stk_batch_device_sync.
 *  @return STK_OK, STK_EINVAL (i out of range, out->struct_size not set), STK_ENOTSUP (the
 *          batch is not on a device).
 *  Lifetime: data valid until stk_batch_release(b) (and the work queued before it on the
 *  release stream). */
STK_API stk_status stk_batch_device_tensor(const stk_batch *b, size_t i, stk_tensor *out);

/** Make `stream` wait (on the device, cuStreamWaitEvent) until the batch's copy and finishing
 *  are done; the calling thread does not wait. Remembers `stream` for stk_batch_release.
 *  @return STK_OK, STK_ENOTSUP (not on a device), STK_EIO (the driver refused: bad stream).
 *  Threads: the thread holding the batch. */
STK_API stk_status stk_batch_device_wait(stk_batch *b, void *stream);

/** Block the calling thread until the batch's copy and finishing are done.
 *  @return STK_OK, STK_ENOTSUP (not on a device), STK_EIO (the copy failed on the device). */
STK_API stk_status stk_batch_device_sync(stk_batch *b);

/** The batch is also read on `stream` (another stream than the one stk_batch_device_wait made
 *  wait): at release an event is recorded on `stream` too, and the next copy into this device
 *  buffer waits (on the device, no host wait) for the work queued there before the release, as
 *  for the wait or release stream. It does not make `stream` wait for the copy: order `stream`
 *  after the wait stream (or call stk_batch_device_wait(b, stream) first). This is what
 *  PyTorch's tensor.record_stream does for memory PyTorch allocated; it does nothing for these
 *  buffers, which PyTorch did not allocate. A stream given twice counts once.
 *  @return STK_OK, STK_ENOTSUP (not on a device), STK_ELIMIT (the batch is already read on 4
 *          streams, counting its wait stream; see stk_last_errmsg).
 *  Threads: the thread holding the batch. */
STK_API stk_status stk_batch_device_use(stk_batch *b, void *stream);

/** Release the batch after the work queued so far on `stream`: records an event there (and on
 *  each stream of stk_batch_device_use) that the next copy into this device buffer waits for (on
 *  the device). Then as stk_batch_release.
 *  Without a device it is stk_batch_release. Accepts NULL.
 *  @return STK_OK, or STK_EIO when the event could not be recorded (the batch is released
 *          anyway; the buffer is then protected only by work already finished).
 *  Threads: thread-safe; any thread may release. */
STK_API stk_status stk_batch_release_after(stk_batch *b, void *stream);

/* =============================================================================================
 * Building blocks (fenced; as zstd fences its static-linking-only API)
 *
 * The pieces the loader is made of, exported for tools that rebuild part of it: the per-sample
 * random stream, the sampler and its rank split, the recipes' ops, the JSON reader, op
 * introspection (how a front end fills any op by torchvision's argument names) and the doctor's
 * decision. They are exported, documented and
 * tested like the rest, but they may change in any minor version (CHANGES.md lists it), where the
 * API above changes only as "Versions" at the top says. Define STK_BUILDING_BLOCKS before
 * including this header to see them.
 * ============================================================================================= */
#if defined(STK_BUILDING_BLOCKS) || defined(STK_BUILDING_LIBRARY)

/* ---------------------------------------------------------------------------------------------
 * Per-sample random stream
 * ------------------------------------------------------------------------------------------- */

/** A counter-based random stream (Philox4x32-10) keyed by (seed, epoch, sample index): the
 *  numbers a sample's augmentation draws depend on nothing else, so outputs are identical for
 *  any thread count, rank count or resumption. Caller-owned, thread-compatible. */
typedef struct stk_rng {
    size_t struct_size; /* set by stk_rng_init() */
    uint32_t key[2];
    uint32_t ctr[4];
    uint32_t buf[4];
    uint32_t used; /* words of buf already returned */
} stk_rng;

/** Position `rng` (its first `struct_size` bytes) at the start of the stream of (seed, epoch,
 *  index): what stk_rng_init calls with the caller's sizeof. */
STK_API void stk_rng_init_sized(stk_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index,
                                size_t struct_size);

/** Position `rng` at the start of the stream of (seed, epoch, index). */
static inline void stk_rng_init(stk_rng *rng, uint64_t seed, uint64_t epoch, uint64_t index)
{
    stk_rng_init_sized(rng, seed, epoch, index, sizeof(*rng));
}

/** The next 32 random bits of the stream.
 *  Threads: thread-compatible (the caller owns `rng`). */
STK_API uint32_t stk_rng_u32(stk_rng *rng);

/** The next 64 random bits of the stream (two 32-bit draws, low word first).
 *  Threads: thread-compatible. */
STK_API uint64_t stk_rng_u64(stk_rng *rng);

/** A double uniform in [0, 1) with 53 random bits (one 64-bit draw).
 *  Threads: thread-compatible. */
STK_API double stk_rng_uniform(stk_rng *rng);

/* ---------------------------------------------------------------------------------------------
 * Sampler: the order of an epoch and its split among ranks
 * ------------------------------------------------------------------------------------------- */

/** Record at position `pos` of epoch `epoch`'s global order over `n` records: `pos` itself
 *  without shuffle; with shuffle a bijection of [0, n) derived from (seed, epoch) only, computed
 *  in O(1) memory (a keyed Feistel network with cycle walking), so datasets of 10^9 records need
 *  no permutation table. `pos` must be < n.
 *  Threads: thread-safe. */
STK_API uint64_t stk_sampler_index(uint64_t n, bool shuffle, uint64_t seed, uint64_t epoch,
                                   uint64_t pos);

/** How one rank walks an epoch (see DESIGN.md, "Distributed"). Filled by stk_plan_init or
 *  stk_plan_init_v2. */
typedef struct stk_plan {
    size_t struct_size; /* set by stk_plan_init() / stk_plan_init_v2() */
    uint64_t n;         /* records in the dataset */
    uint64_t start;     /* global position the epoch (re)starts from (resume point) */
    uint64_t end;       /* one past the last global position used (with padding) */
    uint64_t per_rank;  /* samples this rank receives in this epoch */
    uint64_t n_batches; /* batches this rank receives */
    uint32_t batch_size;
    uint32_t rank, world;
    bool drop_last; /* the rank's partial last batch is dropped */
    bool drop_tail; /* the epoch's uneven tail across ranks is dropped (else padded); v2 */
    bool strided;   /* a step's positions go to the ranks in turn (STK_PLAN_STRIDED); v2 */
} stk_plan;

/* stk_plan_init_v2 flags. */
/* Drop the rank's partial last batch (the DataLoader's drop_last). */
#define STK_PLAN_DROP_LAST 0x1u
/* Truncate the positions to a multiple of world instead of padding (DistributedSampler's
 * drop_last). */
#define STK_PLAN_DROP_TAIL 0x2u
/* Rank r takes positions g+r, g+r+world, ... of each global step g (DistributedSampler's
 * interleaved split) instead of the step's r-th consecutive slice. */
#define STK_PLAN_STRIDED 0x4u

/** Plan an epoch for `rank` of `world` from global position `start`: positions run
 *  start..end-1, where end pads (by wrapping to the start of the order, as PyTorch's
 *  DistributedSampler) so every rank gets the same count ceil((n-start)/world), or truncates
 *  to floor((n-start)/world) each with drop_last. Each global step of world*batch_size
 *  positions is cut into `world` consecutive slices, slice r for rank r; a shorter last step is
 *  cut into equal slices. With drop_last a rank's partial last batch is dropped.
 *  The same as stk_plan_init_v2 with flags STK_PLAN_DROP_LAST | STK_PLAN_DROP_TAIL when
 *  drop_last, else 0. stk_plan_init passes the caller's sizeof to stk_plan_init_sized.
 *  @return STK_OK or STK_EINVAL (n == 0, batch_size == 0, world == 0, rank >= world, a
 *          struct_size too small). */
STK_API stk_status stk_plan_init_sized(stk_plan *plan, uint64_t n, uint64_t start,
                                       uint32_t batch_size, uint32_t rank, uint32_t world,
                                       bool drop_last, size_t struct_size);

/** stk_plan_init_sized with the caller's sizeof(stk_plan). */
static inline stk_status stk_plan_init(stk_plan *plan, uint64_t n, uint64_t start,
                                       uint32_t batch_size, uint32_t rank, uint32_t world,
                                       bool drop_last)
{
    return stk_plan_init_sized(plan, n, start, batch_size, rank, world, drop_last, sizeof(*plan));
}

/** stk_plan_init with the two halves of drop_last apart and a choice of split (`flags`,
 *  STK_PLAN_*): the uneven tail across ranks is truncated with STK_PLAN_DROP_TAIL, else padded;
 *  a rank's partial last batch is dropped with STK_PLAN_DROP_LAST, else kept. Each global step
 *  of world*batch_size positions (the last one shorter, a multiple of world) is split into
 *  world equal parts: consecutive slices, or with STK_PLAN_STRIDED every world-th position
 *  from g+r, which makes a rank's samples over the epoch positions start+r, start+r+world, ...
 *  and its batches PyTorch's DataLoader batches over DistributedSampler(rank) for every
 *  combination of the sampler's and the loader's drop_last. stk_plan_init_v2 passes the
 *  caller's sizeof to stk_plan_init_v2_sized.
 *  @return STK_OK or STK_EINVAL (as stk_plan_init_sized, or an unknown flag). */
STK_API stk_status stk_plan_init_v2_sized(stk_plan *plan, uint64_t n, uint64_t start,
                                          uint32_t batch_size, uint32_t rank, uint32_t world,
                                          uint32_t flags, size_t struct_size);

/** stk_plan_init_v2_sized with the caller's sizeof(stk_plan). */
static inline stk_status stk_plan_init_v2(stk_plan *plan, uint64_t n, uint64_t start,
                                          uint32_t batch_size, uint32_t rank, uint32_t world,
                                          uint32_t flags)
{
    return stk_plan_init_v2_sized(plan, n, start, batch_size, rank, world, flags, sizeof(*plan));
}

/** The global positions of batch `b` for the plan's rank: *first and *n_samples (the rank's
 *  samples are positions first, first+s, ..., first+(n_samples-1)*s with s = world for a
 *  strided plan and 1 otherwise, each mapped to a record by stk_sampler_index(pos mod n)),
 *  and *consumed, the global position reached once every rank has taken this step.
 *  @return STK_OK or STK_EINVAL (b >= n_batches). */
STK_API stk_status stk_plan_batch(const stk_plan *plan, uint64_t b, uint64_t *first,
                                  uint32_t *n_samples, uint64_t *consumed);

/** Rank and world size from the environment: RANK/WORLD_SIZE (torchrun), else
 *  SLURM_PROCID/SLURM_NTASKS, else OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE, else 0/1.
 *  @return STK_OK, or STK_EINVAL when a variable is set but not a valid number or the rank is
 *          out of range (details in stk_last_errmsg()). */
STK_API stk_status stk_env_rank(uint32_t *rank, uint32_t *world);

/* ---------------------------------------------------------------------------------------------
 * Recipes: the ops of stk_transform_recipe's names, for front ends that build on them
 * ------------------------------------------------------------------------------------------- */

/** The number of named recipes (stk_transform_recipe).
 *  Threads: thread-safe (static data). */
STK_API size_t stk_n_recipes(void);

/** Name of recipe `i` ("imagenet-train", "imagenet-val", "kws-train", "kws-val"), or NULL when i >=
 * stk_n_recipes(). Lifetime: static. Threads: thread-safe. */
STK_API const char *stk_recipe_name(size_t i);

/** The number of ops of recipe `name` (0 for an unknown name).
 *  Threads: thread-safe. */
STK_API size_t stk_recipe_n_ops(const char *name);

/** Op `i` of recipe `name`, as stk_transform_recipe compiles it, into `out` (an output struct:
 *  initialise it with stk_op_init first, any kind).
 *  @return STK_OK, or STK_EINVAL (unknown name, i out of range, NULL or uninitialised out; see
 *          stk_last_errmsg()).
 *  Threads: thread-safe. */
STK_API stk_status stk_recipe_op(const char *name, size_t i, stk_op *out);

/* ---------------------------------------------------------------------------------------------
 * JSON: the library's one reader (writer metadata, the resume state), also the CLI's
 * ------------------------------------------------------------------------------------------- */

/** The end of the JSON value at `p` (leading whitespace skipped), just past it: RFC 8259, nesting
 *  at most 64 deep.
 *  @return the end, or NULL when `p` is NULL or does not start a valid value.
 *  Lifetime: points into `p`. Threads: thread-safe. */
STK_API const char *stk_json_skip(const char *p);

/** Whether `text` is exactly one JSON value (whitespace around it allowed).
 *  Threads: thread-safe. */
STK_API bool stk_json_valid(const char *text);

/** The raw text of the value of top-level key `key` in the JSON object `json`: *val and *len
 *  bytes (a string with its quotes, an array with its brackets, a number as written).
 *  @return true, or false when the key is absent or `json` is not a valid object up to it.
 *  Lifetime: *val points into `json`. Threads: thread-safe. */
STK_API bool stk_json_member(const char *json, const char *key, const char **val, size_t *len);

/* ---------------------------------------------------------------------------------------------
 * Op introspection
 * ------------------------------------------------------------------------------------------- */

/** How the elements of an op parameter are stored in stk_op (see stk_op_param). */
typedef enum stk_op_param_type {
    STK_OP_PARAM_INT64 = 0,  /* int64_t */
    STK_OP_PARAM_DOUBLE = 1, /* double */
    STK_OP_PARAM_FLOAT = 2   /* float */
} stk_op_param_type;

/** One parameter of an op kind: torchvision's argument `name` and where it lives in stk_op, so
 *  that a front end (the Python package) can fill any op from (name, value) pairs without
 *  knowing the op. Owned by the library (struct_size: the library's): read it through the
 *  pointer stk_op_param_at returns, never copy an array of them. */
typedef struct stk_op_param {
    size_t struct_size;     /* the library's sizeof(stk_op_param) */
    const char *name;       /* torchvision's argument name: "size", "scale", "p", "mean", ... */
    stk_op_param_type type; /* type of each element */
    uint32_t n_values;      /* elements: 1 (a number), 2 (a pair, e.g. (h, w)), 3 (per channel) */
    size_t offset;          /* byte offset of the first element in stk_op */
} stk_op_param;

/** The number of op kinds this library supports (the rows of its op table). Enumerate them with
 *  stk_op_kind_at(0 .. stk_op_n_kinds() - 1).
 *  Threads: thread-safe (static data). */
STK_API size_t stk_op_n_kinds(void);

/** The op table's `draws` column: whether ops of this kind take numbers from the sample's random
 *  stream (their output then depends on more than the image; see stk_transform_draws).
 *  @return false also for a kind this library does not know.
 *  Threads: thread-safe (static data). */
STK_API bool stk_op_draws(stk_op_kind kind);

/** The kind of supported op number `i`, in table order (which is enum order).
 *  @return STK_OK (*out set) or STK_EINVAL (i >= stk_op_n_kinds(), or out NULL; *out untouched).
 *  Threads: thread-safe (static data). */
STK_API stk_status stk_op_kind_at(size_t i, stk_op_kind *out);

/** The torchvision class name of an op kind ("RandomResizedCrop", ...).
 *  @return the name, or NULL for a kind this library does not know.
 *  Lifetime: static. Threads: thread-safe. */
STK_API const char *stk_op_name(stk_op_kind kind);

/** The media kind an op kind belongs to: STK_MEDIA_AUDIO for the audio ops, STK_MEDIA_IMAGE for
 *  the image ops and for kinds this library does not know (stk_op_name says which are known).
 *  Threads: thread-safe (static data). */
STK_API stk_media stk_op_media(stk_op_kind kind);

/** Look up an op kind by its torchvision class name (exact, case-sensitive).
 *  @return STK_OK (*out set) or STK_EINVAL (unknown name, or a NULL argument; *out untouched;
 *          the message in stk_last_errmsg() lists the supported names).
 *  Threads: thread-safe. */
STK_API stk_status stk_op_find(const char *name, stk_op_kind *out);

/** The number of parameters of an op kind (0 for an unknown kind).
 *  Threads: thread-safe (static data). */
STK_API size_t stk_op_n_params(stk_op_kind kind);

/** Parameter `i` of an op kind, in torchvision's argument order.
 *  @return the parameter, or NULL when the kind is unknown or i >= stk_op_n_params(kind).
 *  Lifetime: static. Threads: thread-safe. */
STK_API const stk_op_param *stk_op_param_at(stk_op_kind kind, size_t i);

/* ---------------------------------------------------------------------------------------------
 * The doctor's decision: is a training loop data-bound, and what fixes it
 * ------------------------------------------------------------------------------------------- */

/* The thresholds of stk_diagnose (`stoker doctor` and stoker.profile both use them). */
#define STK_DIAG_DATA_BOUND_SHARE 0.05 /* waiting more than this share of the time = data-bound */
#define STK_DIAG_HEADROOM 1.2          /* a thread count keeps up at >= demand * this */
#define STK_DIAG_NO_STEP_S 5e-5        /* a mean step shorter than this takes no time */

/** What the measurements call for: picks the advice; the caller words it. */
typedef enum stk_diag_action {
    STK_DIAG_UNKNOWN = 0,     /* no step was measured */
    STK_DIAG_KEEP = 1,        /* not data-bound: keep the current thread count */
    STK_DIAG_FEWER = 2,       /* not data-bound: the fewer threads of `recommended` keep up too */
    STK_DIAG_NO_HEADROOM = 3, /* not data-bound, but only the more threads of `recommended`
                                 keep up with headroom */
    STK_DIAG_MORE = 4,        /* data-bound: the threads of `recommended` (more than now, or
                                 the current count is unknown) meet the demand */
    STK_DIAG_CONTENTION = 5,  /* data-bound, yet the loader alone keeps up at the current
                                 count: the step competes for the cores or waits come in bursts */
    STK_DIAG_TOO_SLOW = 6     /* data-bound, and no measured thread count keeps up */
} stk_diag_action;

/** Measurements of a training loop for stk_diagnose. Initialise with stk_diag_input_init;
 *  more fields may be added at the end in later versions. */
typedef struct stk_diag_input {
    size_t struct_size;      /* set by stk_diag_input_init(); never by hand */
    double wait_s;           /* total seconds the loop waited for batches in the window */
    double step_s;           /* total seconds of the steps in the window */
    uint64_t steps;          /* steps in the window; 0 = nothing measured */
    double samples_per_step; /* mean samples per batch */
    int64_t current_threads; /* workers the loop ran with; -1 (the default) = not known */
    /* The loader alone (no step), when measured: thread counts in ascending order and the
     * samples/s at each. Borrowed for the call. */
    const int64_t *probe_threads;
    const double *probe_rate;
    size_t n_probes;
} stk_diag_input;

/** The verdict of stk_diagnose and the numbers it came from. An output struct
 *  (stk_diag_result_init): fields past its struct_size are not written. */
typedef struct stk_diag_result {
    size_t struct_size; /* set by stk_diag_result_init() (an output struct) */
    stk_diag_action action;
    bool data_bound;         /* wait_share > data_bound_share */
    double wait_share;       /* wait_s / (wait_s + step_s); 0 when both are 0 */
    double wait_ms, step_ms; /* means per step */
    double demand;           /* samples/s the step consumes; INFINITY when it takes no time,
                                NAN when no step was measured */
    int64_t recommended;     /* probe index of the fewest threads at >= demand * headroom; -1 */
    int64_t best;            /* probe index of the highest rate; -1 without probes */
    int64_t current;         /* probe index of the largest count not above current_threads; -1 */
    double data_bound_share; /* the thresholds used: STK_DIAG_DATA_BOUND_SHARE */
    double headroom;         /* and STK_DIAG_HEADROOM */
} stk_diag_result;

/** Set the defaults of the first `struct_size` bytes of `in`: all zero, current_threads -1,
 *  struct_size filled. Accepts NULL. What stk_diag_input_init calls with the caller's sizeof.
 *  Threads: thread-safe (touches only `in`). */
STK_API void stk_diag_input_init_sized(stk_diag_input *in, size_t struct_size);

/** Set the defaults of `in`: all zero, current_threads -1, struct_size filled. */
static inline void stk_diag_input_init(stk_diag_input *in)
{
    stk_diag_input_init_sized(in, sizeof(*in));
}

/** Zero `out` and set its struct_size (the caller's sizeof). */
static inline void stk_diag_result_init(stk_diag_result *out)
{
    stk_diag_result z = STK_ZERO_INIT;
    z.struct_size = sizeof(*out);
    *out = z;
}

/** Judge a measured training loop: the waiting share, data-bound or not, the demand, and the
 *  fewest measured thread count that meets it with headroom. Pure: no clock, no I/O.
 *  @return STK_OK (*out filled), or STK_EINVAL (NULL, struct_size not set, a negative or
 *          non-finite time, probes without arrays, probe thread counts not ascending; see
 *          stk_last_errmsg; *out untouched).
 *  Threads: thread-safe. */
STK_API stk_status stk_diagnose(const stk_diag_input *in, stk_diag_result *out);

/** Name of an action: "unknown", "keep", "fewer", "no_headroom", "more", "contention",
 *  "too_slow" ("?" for a value out of range).
 *  Lifetime: static text; never NULL. Threads: thread-safe. */
STK_API const char *stk_diag_action_name(stk_diag_action action);

#endif /* STK_BUILDING_BLOCKS */

#ifdef __cplusplus
}
#endif
#endif /* STOKER_H */
