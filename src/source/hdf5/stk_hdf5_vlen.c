/*
 * stk_hdf5_vlen.c: the row tables of the HDF5 source's variable-length-bytes datasets (h5py's
 * vlen_dtype(np.uint8), how encoded images are stored), moved out of stk_src_hdf5.c. A contiguous
 * dataset of such rows holds one 16-byte descriptor per row (u32 length, u64 global heap
 * collection address, u32 object index); walking the heap collections' object headers turns them
 * into each row's file offset and length, so the workers read rows by offset through the byte
 * source without the library's global lock. When the layout is not the one expected, the rows go
 * through the library and stk__h5_vlen_max finds the largest by reading each.
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
 * expected (other offset sizes, filters, anything odd): the rows then go through the library.
 * Open reads the descriptors (16 bytes per row) and one 16-byte header per heap object. */
stk_status stk__h5_vlen_direct(stk__h5col *c, stk__file *f, hid_t plist, uint64_t *max, char *err,
                               size_t err_size)
{
    uint64_t n = c->dims[0], stor = H5Dget_storage_size(c->dset);
    haddr_t off = H5Dget_offset(c->dset);
    if (H5Pget_layout(plist) != H5D_CONTIGUOUS || off == HADDR_UNDEF || n == 0 || stor != n * 16 ||
        off > f->size || f->size - off < stor)
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
            refs[r] = (vref){stk__ld64(buf + j * 16 + 4), stk__ld32(buf + j * 16 + 12),
                             stk__ld32(buf + j * 16), r};
            c->vlen[r] = refs[r].len;
            *max = STK_MAX(*max, refs[r].len);
        }
    }
    qsort(refs, (size_t)n, sizeof(*refs), vref_cmp);
    bool ok = rc == STK_OK;
    for (size_t a = 0, b; ok && a < n; a = b) {
        for (b = a; b < n && refs[b].addr == refs[a].addr; b++)
            ;
        /* an empty sequence has no heap object (address 0) */
        ok = refs[a].len == 0 && refs[b - 1].len == 0 ? true
                                                      : walk_collection(c, f, refs + a, b - a);
    }
    stk__free(refs);
    if (!ok) {
        stk__free(c->voff);
        stk__free(c->vlen);
        c->voff = NULL;
        c->vlen = NULL;
        *max = 0;
    }
    return rc;
}

/* The largest row of a vlen dataset by reading every row through the library (when the heap
 * could not be resolved directly). */
stk_status stk__h5_vlen_max(stk__h5col *c, const char *path, const char *dname, uint64_t *max,
                            char *err, size_t err_size)
{
    uint64_t n = c->dims[0];
    *max = 0;
    for (uint64_t r = 0; r < n; r++) {
        hvl_t v = {0, NULL};
        hsize_t start = r, one = 1;
        if (H5Sselect_hyperslab(c->fspace, H5S_SELECT_SET, &start, NULL, &one, NULL) < 0 ||
            H5Dread(c->dset, c->mtype, c->mspace, c->fspace, H5P_DEFAULT, &v) < 0) {
            char m[160];
            return stk__set_error(err, err_size, STK_EIO, "%s: dataset '%s' row %" PRIu64 ": %s",
                                  path, dname, r, stk__h5_errmsg(m));
        }
        *max = STK_MAX(*max, (uint64_t)v.len);
        H5Dvlen_reclaim(c->mtype, c->mspace, H5P_DEFAULT, &v);
    }
    return STK_OK;
}
