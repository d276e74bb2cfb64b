/*
 * stk_hdf5_vlen.c: the row tables of the HDF5 source's variable-length-bytes datasets (h5py's
 * vlen_dtype(np.uint8), how encoded images are stored), moved out of stk_src_hdf5.c. A contiguous
 * dataset of such rows holds one 16-byte descriptor per row (u32 length, u64 global heap
 * collection address, u32 object index); walking the heap collections' object headers turns them
 * into each row's file offset and length, so the workers read rows by offset through the byte
 * source without the library's global lock. When the layout is not the one expected, the rows go
 * through the library and stk__h5_vlen_max finds the largest by reading them in blocks, the rows
 * of written chunks only when most declared rows were never written (open work bounded by the
 * file, not by the count it declares).
 *
 * Every offset and size read from the file is checked against the file's size before use.
 */
#include "common/stk_endian.h"
#include "source/hdf5/stk_hdf5.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* One row's heap reference, sorted by (collection, object) to resolve each collection once. */
typedef struct vref {
    uint64_t addr; /* global heap collection */
    uint32_t obj;  /* object index in it */
    uint32_t len;  /* sequence length (bytes) */
    uint64_t row;
} vref;

static int vref_cmp(const void *a, const void *b)
{
    const vref *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->obj < y->obj ? -1 : x->obj > y->obj;
}

/* Resolve the heap objects of refs[0..k) (one collection, sorted by object) to file offsets by
 * walking the collection's object headers ("GCOL", version 1, u64 size; then per object u16
 * index, u16 refcount, u32 reserved, u64 size, data padded to 8 bytes). false when the layout
 * is not as expected (the caller falls back to the library). */
static bool walk_collection(stk__h5col *c, stk__file *f, const vref *refs, size_t k)
{
    uint8_t h[16];
    uint64_t addr = refs[0].addr;
    if (addr > f->size || f->size - addr < 16 || stk__vfs_read(f, addr, h, 16, NULL, 0) < 0 ||
        memcmp(h, "GCOL", 4) != 0 || h[4] != 1)
        return false;
    uint64_t end = addr + stk__ld64(h + 8), pos = addr + 16;
    if (end > f->size || end < pos)
        return false;
    size_t done = 0;
    while (done < k && pos + 16 <= end) {
        if (stk__vfs_read(f, pos, h, 16, NULL, 0) < 0)
            return false;
        uint32_t obj = (uint32_t)(h[0] | h[1] << 8);
        uint64_t size = stk__ld64(h + 8);
        if (obj == 0 || size > end - pos - 16)
            break; /* free space: the rest of the collection */
        /* refs are sorted by object: every ref to this object */
        size_t lo = 0, hi = k;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (refs[mid].obj < obj)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < k && refs[lo].obj == obj; lo++, done++) {
            if (refs[lo].len != size)
                return false;
            c->voff[refs[lo].row] = pos + 16;
        }
        pos += 16 + STK_ALIGN_UP(size, 8);
    }
    return done == k;
}

/* Where every row of a contiguous vlen-bytes dataset lives in the file, from its descriptors
 * (u32 length, u64 collection address, u32 object index) and the heap collections' object
 * headers, so rows are read by offset from the workers like contiguous datasets. Sets c->voff
 * and c->vlen (12 bytes per row) and *max; leaves them NULL when the layout is not the one
 * expected (other offset sizes, filters): the rows then go through the library. Descriptors of
 * that layout whose heap objects are not where they say (a damaged file) are STK_EFORMAT: the
 * library given such a heap copies a megabyte between overlapping buffers (found by
 * fuzz_hdf5 in Debian's libhdf5 1.10.8, H5HG_read). Open reads the descriptors (16 bytes per
 * row) and one 16-byte header per heap object. */
stk_status stk__h5_vlen_direct(stk__h5col *c, stk__file *f, hid_t plist, const char *dname,
                               uint64_t *max, char *err, size_t err_size)
{
    if (H5Pget_layout(plist) != H5D_CONTIGUOUS)
        return STK_OK;
    uint64_t n = c->dims[0], stor = H5Dget_storage_size(c->dset);
    haddr_t off = H5Dget_offset(c->dset);
    if (off == HADDR_UNDEF || n == 0 || stor != n * 16 || off > f->size || f->size - off < stor)
        return STK_OK;
    vref *refs = stk__calloc((size_t)n, sizeof(*refs));
    c->voff = stk__calloc((size_t)n, sizeof(uint64_t));
    c->vlen = stk__calloc((size_t)n, sizeof(uint32_t));
    if (!refs || !c->voff || !c->vlen) {
        stk__free(refs);
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory for %" PRIu64 " rows",
                              f->path, n);
    }
    uint8_t buf[16 * 1024];
    stk_status rc = STK_OK;
    for (uint64_t r = 0; r < n && rc == STK_OK;) {
        uint64_t k = STK_MIN(n - r, sizeof(buf) / 16);
        rc = stk__vfs_read(f, off + r * 16, buf, (size_t)(k * 16), err, err_size);
        for (uint64_t j = 0; rc == STK_OK && j < k; j++, r++) {
            uint32_t len = stk__ld32(buf + j * 16);
            /* an empty sequence needs no heap object: grouped apart, whatever it points at */
            refs[r] = (vref){len ? stk__ld64(buf + j * 16 + 4) : 0,
                             len ? stk__ld32(buf + j * 16 + 12) : 0, len, r};
            c->vlen[r] = refs[r].len;
            *max = STK_MAX(*max, refs[r].len);
        }
    }
    qsort(refs, (size_t)n, sizeof(*refs), vref_cmp);
    bool ok = rc == STK_OK;
    uint64_t bad = 0, bad_row = 0;
    for (size_t a = 0, b; ok && a < n; a = b) {
        for (b = a; b < n && refs[b].addr == refs[a].addr; b++)
            ;
        bool empty = true; /* every row of the group empty: nothing to find in a heap */
        for (size_t e = a; empty && e < b; e++)
            empty = refs[e].len == 0;
        ok = empty || walk_collection(c, f, refs + a, b - a);
        if (!ok) {
            bad = refs[a].addr;
            bad_row = refs[a].row;
        }
    }
    stk__free(refs);
    if (!ok && rc == STK_OK)
        rc = stk__set_error(err, err_size, STK_EFORMAT,
                            "%s: dataset '%s' row %" PRIu64 ": its bytes are not in the global "
                            "heap collection at byte %" PRIu64 " where its descriptor points "
                            "(a damaged file)",
                            f->path, dname, bad_row, bad);
    if (!ok) {
        stk__free(c->voff);
        stk__free(c->vlen);
        c->voff = NULL;
        c->vlen = NULL;
        *max = 0;
    }
    return rc;
}

#define VLEN_BLOCK_ROWS 65536       /* rows per library read at most */
#define VLEN_BLOCK_BYTES (8u << 20) /* bytes of row data per library read, about */
#define VLEN_SPARSE_CHUNKS 4096     /* written chunks listed one by one, at most */
#define VLEN_MIN_ROW 10 /* file bytes of a row descriptor at least: u32 length, heap id (2 + 4) */

/* The largest of rows [a, b) through the library, in blocks of as many rows as about
 * VLEN_BLOCK_BYTES of data at the previous block's average (one read per row cost 50 us: 53 s
 * for 10^6 rows). */
static stk_status vlen_rows_max(stk__h5col *c, uint64_t a, uint64_t b, const char *path,
                                const char *dname, uint64_t *max, char *err, size_t err_size)
{
    hvl_t *v = stk__malloc(VLEN_BLOCK_ROWS * sizeof(hvl_t));
    if (!v)
        return stk__set_error(err, err_size, STK_ENOMEM, "%s: out of memory", path);
    stk_status rc = STK_OK;
    uint64_t block = 1;
    for (uint64_t r = a; r < b && rc == STK_OK;) {
        hsize_t start = r, cnt = STK_MIN(block, b - r);
        hid_t ms = H5Screate_simple(1, &cnt, NULL);
        if (ms < 0 ||
            H5Sselect_hyperslab(c->fspace, H5S_SELECT_SET, &start, NULL, &cnt, NULL) < 0 ||
            H5Dread(c->dset, c->mtype, ms, c->fspace, H5P_DEFAULT, v) < 0) {
            char m[160], rows[64];
            if (cnt == 1)
                snprintf(rows, sizeof(rows), "row %" PRIu64, r);
            else
                snprintf(rows, sizeof(rows), "rows %" PRIu64 "..%" PRIu64, r,
                         r + (uint64_t)cnt - 1);
            rc = stk__set_error(err, err_size, STK_EIO, "%s: dataset '%s' %s: %s", path, dname,
                                rows, stk__h5_errmsg(m));
        } else {
            uint64_t bytes = 0;
            for (hsize_t k = 0; k < cnt; k++) {
                *max = STK_MAX(*max, (uint64_t)v[k].len);
                bytes += v[k].len;
            }
            H5Dvlen_reclaim(c->mtype, ms, H5P_DEFAULT, v);
            uint64_t avg = bytes / cnt;
            block = avg ? STK_MAX(1, STK_MIN(VLEN_BLOCK_ROWS, VLEN_BLOCK_BYTES / avg))
                        : VLEN_BLOCK_ROWS;
            r += cnt;
        }
        if (ms >= 0)
            H5Sclose(ms);
    }
    stk__free(v);
    return rc;
}

/* The length of the rows no chunk holds: the fill value (empty unless the writer set one). */
static stk_status vlen_fill_len(stk__h5col *c, hid_t plist, const char *path, const char *dname,
                                uint64_t *len, char *err, size_t err_size)
{
    H5D_fill_value_t st = H5D_FILL_VALUE_UNDEFINED;
    *len = 0;
    if (H5Pfill_value_defined(plist, &st) < 0 || st != H5D_FILL_VALUE_USER_DEFINED)
        return STK_OK;
    hvl_t v = {0, NULL};
    hid_t one = H5Screate(H5S_SCALAR);
    if (one < 0 || H5Pget_fill_value(plist, c->mtype, &v) < 0) {
        char m[160];
        if (one >= 0)
            H5Sclose(one);
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: dataset '%s': fill value: %s", path,
                              dname, stk__h5_errmsg(m));
    }
    *len = v.len;
    H5Dvlen_reclaim(c->mtype, one, H5P_DEFAULT, &v);
    H5Sclose(one);
    return STK_OK;
}

/* The largest row of a vlen dataset read through the library (when the heap could not be
 * resolved directly). The work is bounded by what the file holds, never by the rows it
 * declares (issue 30: a 1.4 KB file declaring 10^7 rows never finished opening): when the
 * declared rows are not far more than the written chunks hold, every row is read in blocks;
 * otherwise only the rows of the written chunks are (listed one by one, at most
 * VLEN_SPARSE_CHUNKS of them), and the others are the fill value. */
stk_status stk__h5_vlen_max(stk__h5col *c, hid_t plist, const char *path, uint64_t file_size,
                            const char *dname, uint64_t *max, char *err, size_t err_size)
{
    uint64_t n = c->dims[0];
    *max = 0;
    if (H5Pget_layout(plist) != H5D_CHUNKED) {
        /* contiguous or compact: the storage holds every row or none (never written, allocated
         * late: all rows are the fill value); a row's descriptor takes VLEN_MIN_ROW bytes */
        uint64_t stor = H5Dget_storage_size(c->dset);
        if (stor == 0)
            return vlen_fill_len(c, plist, path, dname, max, err, err_size);
        if (stor > file_size || n > stor / VLEN_MIN_ROW)
            return stk__set_error(err, err_size, STK_EFORMAT,
                                  "%s: dataset '%s' declares %" PRIu64 " rows but its storage "
                                  "holds %" PRIu64 " bytes (%" PRIu64 " in the file; a row's "
                                  "descriptor takes at least %d): a damaged file",
                                  path, dname, n, stor, file_size, VLEN_MIN_ROW);
        return vlen_rows_max(c, 0, n, path, dname, max, err, err_size);
    }
    hsize_t chunk = 0, n_alloc = 0;
    if (H5Pget_chunk(plist, 1, &chunk) != 1 || chunk == 0 || H5Sselect_all(c->fspace) < 0 ||
        H5Dget_num_chunks(c->dset, c->fspace, &n_alloc) < 0) {
        char m[160];
        return stk__set_error(err, err_size, STK_EFORMAT, "%s: dataset '%s': its chunks: %s", path,
                              dname, stk__h5_errmsg(m));
    }
    uint64_t held = (uint64_t)n_alloc * chunk; /* rows in written chunks, at most */
    if (n / 2 <= held || n <= VLEN_BLOCK_ROWS)
        return vlen_rows_max(c, 0, n, path, dname, max, err, err_size);
    if (n_alloc > VLEN_SPARSE_CHUNKS)
        return stk__set_error(err, err_size, STK_ELIMIT,
                              "%s: dataset '%s' declares %" PRIu64 " rows but its %llu written "
                              "chunks hold at most %" PRIu64 " (the rest were never written): "
                              "stoker reads such a sparse dataset only with at most %d written "
                              "chunks; resize it to its real length",
                              path, dname, n, (unsigned long long)n_alloc, held,
                              VLEN_SPARSE_CHUNKS);
    stk_status rc = vlen_fill_len(c, plist, path, dname, max, err, err_size);
    for (hsize_t i = 0; i < n_alloc && rc == STK_OK; i++) {
        hsize_t off[H5S_MAX_RANK] = {0}, size = 0;
        haddr_t addr;
        unsigned mask = 0;
        if (H5Sselect_all(c->fspace) < 0 ||
            H5Dget_chunk_info(c->dset, c->fspace, i, off, &mask, &addr, &size) < 0) {
            char m[160];
            return stk__set_error(err, err_size, STK_EFORMAT, "%s: dataset '%s': chunk %llu: %s",
                                  path, dname, (unsigned long long)i, stk__h5_errmsg(m));
        }
        if (off[0] < n)
            rc = vlen_rows_max(c, off[0], STK_MIN(n, off[0] + chunk), path, dname, max, err,
                               err_size);
    }
    return rc;
}
