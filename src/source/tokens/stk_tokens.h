/*
 * stk_tokens.h: token corpora inside the record-source layer (docs/tokens.md; the byte layouts
 * are in docs/formats.md "Token corpora").
 *
 * A corpus (stk__tokcorpus) is one stream of token ids in parts (files, or the records of a
 * dataset's token column) and its documents (start offsets into the stream). The files of each
 * format are parsed into one (stk_tokfiles.c: nanoGPT, llm.c, numpy; stk_megatron.c: the
 * indexed dataset), a column is wrapped into one (stk_tokcolumn.c), and stk_tokcorpus.c reads any
 * span of the stream and finds documents from eos/bos. A token dataset (stk__tokds) is a corpus
 * plus the rows made from it (stk_tokrows.c: windows, random offsets, packed rows, documents);
 * packing itself is a pure function (stk_tokpack.c). Mixtures blend token datasets
 * (stk_tokmix.c). stk_tokens_open (stk_tokopen.c) is the one file above the registry: it opens
 * paths through it and wraps a dataset of another format as a column.
 *
 * Threads: everything here is immutable after open; reads go through a per-thread cursor.
 */
#ifndef STK_TOKENS_H
#define STK_TOKENS_H

#include "io/stk_mapped.h"
#include "io/stk_uring.h"
#include "source/stk_source.h"

#include <stdatomic.h>

/* The stream's tokens of one file: `count` tokens from byte `data_offset`, global numbers
 * from `first`; `map`: the file mapped (stk__tokcorpus_map), read in place, else NULL. */
typedef struct stk__tokpart {
    stk__file *f;
    uint64_t data_offset;
    uint64_t first;
    uint64_t count;
    stk__mapped *map;
} stk__tokpart;

/* One stream of tokens and its documents. */
typedef struct stk__tokcorpus {
    const char *format; /* static: "nanogpt", "llmc", "megatron", "numpy-tokens", a column's */
    uint32_t width;     /* bytes per stored token: 1, 2, 4 or 8 (little-endian, unsigned) */
    uint64_t n_tokens;
    stk__tokpart *parts; /* file corpora: one per file, in stream order */
    size_t n_parts;
    /* Documents: document d is tokens [doc[d], doc[d + 1]); doc[n_docs] == n_tokens. Without
     * known boundaries (`bounded` false) each file is one document. */
    uint64_t *doc;
    uint64_t n_docs;
    bool bounded;
    /* Column corpora: document d is record d's field `col_field` of `col` (owned). */
    stk_dataset *col;
    uint32_t col_field;
    _Atomic uint64_t *col_checked; /* records whose whole read (checksum) passed, one bit each */
    bool col_extent;               /* the source gives the field's byte range (field_extent) */
} stk__tokcorpus;

/* A cursor's reads made together (stk_tokahead.c): up to STK__TOK_AHEAD_ROWS rows a time, in up
 * to STK__TOK_AHEAD reads (a window is one, a packed row one per run of its pieces): copies out
 * of the files' mappings, or io_uring reads where they are not mapped. */
#define STK__TOK_AHEAD_ROWS 16
#define STK__TOK_AHEAD 32

/* A reader's per-thread state: scratch for raw tokens and a column's record buffer, and the
 * rows read ahead together (stk_tokahead.c). */
typedef struct stk__tokcur {
    uint8_t *buf; /* raw tokens of one row (widths up to 8) */
    size_t buf_size;
    stk__cursor *col_cur; /* the column dataset's own cursor */
    uint8_t *rec;         /* a column record, read whole */
    size_t rec_size;
    uint64_t rec_doc; /* which record rec holds (UINT64_MAX: none) */
    stk__uring *ring; /* the reads ahead's ring (NULL: none yet, or none to be had) */
    bool ring_tried;  /* opened once: no ring then means none ever */
    uint8_t *ahead;   /* STK__TOK_AHEAD reads of raw tokens, ahead_row bytes apart */
    size_t ahead_row;
    uint32_t n_ahead;                     /* rows in it */
    uint64_t ahead_first[STK__TOK_AHEAD]; /* each read's first token (UINT64_MAX: spent) */
    uint64_t ahead_n[STK__TOK_AHEAD];     /* and its tokens */
} stk__tokcur;

/* ---- the corpus (stk_tokcorpus.c) ---- */

/* The part (file) holding tokens [first, first + n) whole and the byte offset of `first` in its
 * file; false when they are not in one file (or the corpus is a column's). */
bool stk__tokcorpus_locate(const stk__tokcorpus *c, uint64_t first, uint64_t n,
                           const stk__tokpart **part, uint64_t *offset);

/* Read tokens [first, first + n) of the stream, raw (n * width bytes), into dst. Errors name the
 * file (or record) and the token. flags: STK__READ_*. */
stk_status stk__tokcorpus_read(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t first,
                               uint64_t n, uint8_t *dst, unsigned flags, char *err,
                               size_t err_size);

/* Map the corpus' local files (stk_mapped.h; what cannot be mapped is read as before). */
stk_status stk__tokcorpus_map(stk__tokcorpus *c, stk__map_advice advice, char *err,
                              size_t err_size);

/* fn(arg, raw, n * width) on the raw tokens [first, first + n) (n * width <= the cursor's
 * buf_size): the ones read ahead, else straight from the file's mapping when the span lies in
 * one mapped file (no copy), else read into the cursor's buffer. Errors as
 * stk__tokcorpus_read's; what fn wrote is then not to be used. */
stk_status stk__tokcorpus_use(const stk__tokcorpus *c, stk__tokcur *cur, uint64_t first, uint64_t n,
                              stk__mapped_fn *fn, void *arg, unsigned flags, char *err,
                              size_t err_size);

/* ---- widening (stk_tokwiden.c) ---- */

/* The stored ids src[0..n) (width bytes each) as int64 (or int32) ids at dst. */
void stk__tok_widen(const uint8_t *src, uint32_t width, size_t n, void *dst, bool i32);

/* A window in one pass: input_ids[i] = src[i] and labels[i] = src[i + 1] for i < n (src holds
 * n + 1 ids), as int64 (or int32). */
void stk__tok_window(const uint8_t *src, uint32_t width, size_t n, void *input_ids, void *labels,
                     bool i32);

/* ---- computed ids of a packed row (stk_tokfill.c) ---- */

/* ids[at + j] = first + step * j for j < n, as int64 (or int32: the low 32 bits), written 16
 * bytes a store (a run of zeros: memset). Positions: (0, 1); padding and -100 labels: (v, 0). */
void stk__tok_fill(void *ids, bool i32, size_t at, size_t n, int64_t first, int64_t step);

/* Benchmarks only (bench/bench_tokcopy.c: the fills' share of a packed row): write the fills
 * "vector" (the default), "plain" (the scalar loop: the same ids) or "none" (not at all: rows
 * then WRONG, for timing only). false for another word. Not thread-safe: call it first. */
bool stk__tok_fill_use(const char *how);

/* Tests only: widen with "plain" loops, "sse2" or "avx2" from now on (false: not on this CPU or
 * build; nothing changed). Not thread-safe: call it before any widening runs. The first widening
 * otherwise picks the best this CPU has. */
bool stk__tok_widen_use(const char *isa);

/* Documents from eos (a document ends after it) and/or bos (one starts at it), -1 = unused:
 * one scan of the stream. Sets doc, n_docs, bounded. */
stk_status stk__tokcorpus_split(stk__tokcorpus *c, int64_t eos, int64_t bos, char *err,
                                size_t err_size);

/* One document per file (no boundaries known). */
stk_status stk__tokcorpus_doc_per_part(stk__tokcorpus *c, char *err, size_t err_size);

/* Add a part (a file's tokens) at the end of the stream. Takes f. */
stk_status stk__tokcorpus_add(stk__tokcorpus *c, stk__file *f, uint64_t data_offset, uint64_t count,
                              char *err, size_t err_size);

/* Where token t lies, for messages: "a.bin token 17 (byte 1058)" / "x.stk record 3 token 5". */
void stk__tokcorpus_where(const stk__tokcorpus *c, uint64_t t, char *buf, size_t size);

void stk__tokcorpus_free(stk__tokcorpus *c);
stk_status stk__tokcur_open(const stk__tokcorpus *c, size_t buf_size, stk__tokcur **out, char *err,
                            size_t err_size);
void stk__tokcur_close(const stk__tokcorpus *c, stk__tokcur *cur);

/* ---- the file formats (stk_tokfiles.c, stk_megatron.c): parse the files into a corpus ---- */

/* A format's parser: the files (already expanded) into c's parts and (Megatron) documents;
 * `token_bytes` from the options (0 = the format's). */
typedef stk_status (*stk__tokparse_fn)(stk__tokcorpus *c, const char *const *paths, size_t n,
                                       uint32_t token_bytes, char *err, size_t err_size);

/* The path of a Megatron corpus' index or data file for `path` (its prefix, .idx or .bin):
 * a fresh string, NULL when out of memory. */
char *stk__megatron_path(const char *path, const char *ext);

/* ---- packing (stk_tokpack.c): a pure function of the document lengths ---- */

/* One piece of a document in a packed row. */
typedef struct stk__tokseg {
    uint64_t start; /* first token (stream position) */
    uint32_t len;   /* tokens */
    uint32_t more;  /* 1: the document goes on after this piece (its next token is the label) */
} stk__tokseg;

/* Rows of T positions: row r holds seg[row[r] .. row[r + 1]), then padding. */
typedef struct stk__tokpack {
    stk__tokseg *seg;
    uint64_t n_seg;
    uint64_t *row; /* [n_rows + 1] */
    uint64_t n_rows;
    uint64_t padding; /* positions of all rows not holding a token */
} stk__tokpack;

/* Pack documents [doc[d], doc[d + 1]) (d < n_docs; empty ones skipped) into rows of T by
 * `packing` (stk_tokens_packing). STK_ENOMEM, STK_ELIMIT (over 2^32 rows). */
stk_status stk__tokpack_build(const uint64_t *doc, uint64_t n_docs, uint32_t T, uint32_t packing,
                              stk__tokpack *out, char *err, size_t err_size);
void stk__tokpack_free(stk__tokpack *p);

/* ---- token datasets (stk_tokrows.c) ---- */

typedef struct stk__tokds {
    stk__tokcorpus c;
    stk_tokens_opts o; /* the settings (paths and strings not kept) */
    uint32_t T;
    uint64_t n_rows;
    stk__tokpack pack;
    uint32_t max_pieces; /* packed: the most pieces in a row, padding counted as one */
    uint64_t max_doc;
} stk__tokds;

/* The open of every token format: the paths' files (a directory stands for its files ending
 * with one of `suffixes`, "no WHAT in this directory" when none), parsed with `parse`, then
 * documents and rows per ds->open_tokens (NULL: documents, as stk_dataset_open gives). */
stk_status stk__tokds_open(stk_dataset *ds, const char *const *paths, size_t n_paths,
                           const char *const *suffixes, const char *what, const char *format,
                           stk__tokparse_fn parse, char *err, size_t err_size);

/* Wrap an open dataset whose records are documents (a token column) into a token dataset with
 * the options t; *ds is replaced by the wrapper, which owns the dataset (closed with it, also on
 * failure). */
stk_status stk__tokcol_wrap(stk_dataset **ds, const stk_tokens_opts *t, char *err, size_t err_size);

/* The dataset part of a column wrapper around t's corpus (filled by stk_tokcolumn.c). */
stk_status stk__tokds_setup(stk_dataset *ds, stk__tokds *t, const stk_tokens_opts *o, char *err,
                            size_t err_size);

/* The facts of stk_tokens_info_get for one token dataset / a mixture (sums over its parts). */
void stk__tokds_info(const stk__tokds *t, stk_tokens_info *in);
stk_status stk__tokmix_info(const stk_dataset *ds, stk_tokens_info *in);

/* "windows", "random", "packed", "documents". */
const char *stk__tokens_mode_name(uint32_t mode);

/* The column wrapper and the mixture: sources made by stk_tokens_open / stk_tokens_mix, never
 * detected (not in stk_sources.def). */
extern const stk__source_methods stk__src_tokcol;
extern const stk__source_methods stk__src_tokmix;

/* The token dataset behind ds (a token format or a column wrapper), or NULL. */
const stk__tokds *stk__tokds_of(const stk_dataset *ds);

/* Methods every token source shares (the formats fill their tables with them). */
void stk__tokds_close(stk_dataset *ds);
stk_status stk__tokds_cursor_open(const stk_dataset *ds, stk__cursor **out, char *err,
                                  size_t err_size);
void stk__tokds_cursor_close(const stk_dataset *ds, stk__cursor *cur);
stk_status stk__tokds_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i, void *const dst[],
                           const size_t cap[], unsigned flags, stk__recinfo *info, char *err,
                           size_t err_size);
stk_status stk__tokds_read_keyed(const stk_dataset *ds, stk__cursor *cur, const stk__readkey *key,
                                 uint64_t i, void *const dst[], const size_t cap[], unsigned flags,
                                 stk__recinfo *info, char *err, size_t err_size);
void stk__tokds_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size);
bool stk__tokds_extent(const stk_dataset *ds, uint64_t i, stk__file **f, stk__brange *r);

/* Row r's first token for WINDOWS and RANDOM (key: the loader's seed and epoch). */
uint64_t stk__tokds_row_start(const stk__tokds *t, const stk__readkey *key, uint64_t r);

/* PACKED: the run of pieces k.. of a row (its pieces k..end-1) read with one read: tokens
 * [*first, *first + *n), at most cap of them; returns the piece after the run. */
uint64_t stk__tokds_packed_run(const stk__tokds *t, uint64_t cap, uint64_t k, uint64_t end,
                               uint64_t *first, uint64_t *n);

/* ---- rows read ahead together (stk_tokahead.c) ---- */

/* STK__TOK_AHEAD_ROWS for windows, random and packed rows of local files (the rows a loader's
 * worker reads together: copied out of the mappings with one version check, or read with one
 * system call), else 0. */
unsigned stk__tokds_prepare_max(const stk_dataset *ds);
/* Read rows idx[0..n) into the cursor's rows ahead, together (copies out of the mappings, else
 * io_uring), each file's version checked once after; rows that cannot be (a row across two
 * files, a failed read, no io_uring for files not mapped) are left to the usual read. */
void stk__tokds_prepare(const stk_dataset *ds, stk__cursor *cur, const stk__readkey *key,
                        const uint64_t *idx, unsigned n);
/* The raw tokens [first, first + n) when they were read ahead (then spent), else NULL. */
const uint8_t *stk__tokcur_ahead(stk__tokcur *cur, uint64_t first, uint64_t n);
/* Free what the rows ahead hold (the cursor's close). */
void stk__tokcur_ahead_free(stk__tokcur *cur);

/* The methods of every token format's table (its own name, summary, probe and open beside). */
#define STK__TOKEN_METHODS                                                                         \
    .tokens = true, .close = stk__tokds_close, .cursor_open = stk__tokds_cursor_open,              \
    .cursor_close = stk__tokds_cursor_close, .read = stk__tokds_read,                              \
    .read_keyed = stk__tokds_read_keyed, .describe = stk__tokds_describe,                          \
    .extent = stk__tokds_extent, .prepare_max = stk__tokds_prepare_max,                            \
    .prepare = stk__tokds_prepare

/* ---- mixtures (stk_tokmix.c) ---- */

/* Megatron's blending rule over n positions: src[p] is the part of position p (weights
 * normalised, sum 1), counts[d] the positions of part d. Pure. */
void stk__tokmix_blend(const double *w, size_t n_parts, uint64_t n, uint8_t *src, uint64_t *counts);

#endif /* STK_TOKENS_H */
