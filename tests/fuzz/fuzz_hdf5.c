/*
 * fuzz_hdf5.c: libFuzzer target for what the HDF5 source (src/source/hdf5/) decides itself. The
 * input is not a file but a recipe: libhdf5 writes a well-formed file from it (datasets of every
 * type the source reads and some it refuses, ranks 0-3, contiguous, chunked and compact layouts,
 * gzip / shuffle / fletcher32, early and late allocation, rows left unwritten, first dimensions
 * declared up to 10^9, groups, old and new file formats), then the recipe damages the bytes that
 * stoker reads itself: a contiguous dataset's rows (for vlen bytes, the 16-byte descriptors that
 * stoker resolves without the library), the global heap collections it walks (in files with no
 * chunked or compact vlen dataset, whose heap only the library reads), and the raw chunks of
 * fixed-size datasets. The file is opened with format "hdf5" and its first 64 records
 * read through both read paths; every open error must name the file.
 *
 * Why not mutate the file's bytes (tests/fuzz/fuzz_hdf5_bytes.c does): Debian's libhdf5 1.10.8
 * parses the metadata itself and crashes within seconds on mutated metadata (a NULL write after
 * a failed malloc in H5C_protect / H5F__accum_read, reached from H5Lvisit; a heap over-read in
 * H5D__select_read; 2-16 TB mallocs sized from the file), so a byte-level run in CI fails on the
 * library, not on stoker. That target stays, replayed over its corpus by `make fuzz-replay`
 * (every damaged file stoker refuses before the library trips on it), and runs by hand; see
 * docs/reliability.md.
 */
#include "fuzz_input.h"
#include "stk_internal.h"

#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_DSETS 4
#define MAX_WRITTEN 16 /* rows written per dataset at most */
#define MAX_PATCHES 6
#define SCAN_MAX (1u << 20) /* bytes searched for heap collections */

/* The recipe: bytes taken in order; zeros once it runs out. */
typedef struct recipe {
    const uint8_t *p;
    size_t n, at;
} recipe;

static unsigned take(recipe *r)
{
    return r->at < r->n ? r->p[r->at++] : 0;
}

/* Where a dataset's bytes lie in the written file, for the damage afterwards. */
typedef struct where {
    haddr_t data;  /* contiguous storage, HADDR_UNDEF when none */
    hsize_t size;  /* its size */
    haddr_t chunk; /* the first written chunk of a fixed-size dataset, or HADDR_UNDEF */
    hsize_t chunk_size;
    bool lib_vlen; /* vlen rows whose descriptors only the library reads (chunked, compact) */
} where;

static const char *const NAMES[] = {"image", "label", "g/feat", "meta/x", "y", "g/h/z"};

/* The type of dataset kind k (the caller closes it); *vlen when rows are sequences. */
static hid_t kind_type(unsigned k, bool *vlen)
{
    *vlen = false;
    switch (k % 10) {
    case 0:
    case 1:
        *vlen = true;
        return H5Tvlen_create(H5T_NATIVE_UINT8);
    case 2:
        return H5Tcopy(H5T_STD_I64LE);
    case 3:
        return H5Tcopy(H5T_IEEE_F32LE);
    case 4:
        return H5Tcopy(H5T_STD_U8LE);
    case 5:
        return H5Tcopy(H5T_STD_I32BE);
    case 6:
        return H5Tcopy(H5T_IEEE_F64BE);
    case 7:
        return H5Tcopy(H5T_STD_I16LE);
    case 8: { /* refused: a fixed-length string */
        hid_t t = H5Tcopy(H5T_C_S1);
        H5Tset_size(t, 5);
        return t;
    }
    default: /* refused: a vlen of 4-byte integers */
        *vlen = true;
        return H5Tvlen_create(H5T_NATIVE_INT32);
    }
}

/* Write the rows of `mask` (of the first MAX_WRITTEN) of dataset d, bytes from the recipe. */
static void write_rows(recipe *r, hid_t d, hid_t type, bool vlen, int rank, const hsize_t *dims,
                       unsigned mask)
{
    hid_t fspace = H5Dget_space(d);
    hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    for (int i = 0; i < rank; i++)
        count[i] = dims[i];
    count[0] = 1;
    hid_t mspace = H5Screate_simple(rank, count, NULL);
    size_t esize = vlen ? sizeof(hvl_t) : H5Tget_size(type);
    size_t row = esize;
    for (int i = 1; i < rank; i++)
        row *= (size_t)dims[i];
    uint8_t *buf = calloc(1, row);
    uint8_t bytes[64];
    for (hsize_t i = 0; buf && i < dims[0] && i < MAX_WRITTEN; i++) {
        if (!(mask >> i & 1))
            continue;
        start[0] = i;
        if (vlen) {
            hvl_t v = {.len = take(r) % 49, .p = bytes};
            hid_t super = H5Tget_super(type);
            if (H5Tget_size(super) == 4)
                v.len /= 4;
            H5Tclose(super);
            for (size_t b = 0; b < sizeof(bytes); b++)
                bytes[b] = (uint8_t)(i + b);
            memcpy(buf, &v, sizeof(v));
        } else {
            for (size_t b = 0; b < row; b++)
                buf[b] = (uint8_t)take(r);
        }
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL);
        H5Dwrite(d, type, mspace, fspace, H5P_DEFAULT, buf);
    }
    free(buf);
    H5Sclose(mspace);
    H5Sclose(fspace);
}

/* Make one dataset from the recipe in file fid; records where its bytes lie. */
static void make_dataset(recipe *r, hid_t fid, bool new_format, where *w)
{
    static const hsize_t HUGE[] = {1000, 1u << 20, 1000000000};
    w->data = w->chunk = HADDR_UNDEF;
    w->lib_vlen = false;
    unsigned name = take(r), kind = take(r), shape = take(r), lay = take(r), filt = take(r);
    bool vlen;
    hid_t type = kind_type(kind, &vlen);
    int rank = shape % 7 == 0 ? 0 : 1 + (int)(shape % 3);
    if (vlen && rank > 1)
        rank = 1;
    hsize_t dims[H5S_MAX_RANK], maxdims[H5S_MAX_RANK], chunk[H5S_MAX_RANK];
    bool huge = shape & 0x80;
    dims[0] = huge ? HUGE[take(r) % 3] : take(r) % 9;
    for (int i = 1; i < rank; i++)
        dims[i] = 1 + take(r) % 4;
    bool chunked = lay % 3 == 1 || (shape & 0x40) || (huge && new_format),
         compact = lay % 3 == 2 && !chunked;
    /* in the new format a huge dataset of fixed dimensions indexes every chunk it declares in
     * a fixed array written in full at creation (a gigabyte for 10^9 rows): unlimited instead */
    bool unlimited = rank > 0 && ((shape & 0x40) || (huge && new_format));
    for (int i = 0; i < rank; i++) {
        maxdims[i] = i == 0 && unlimited ? H5S_UNLIMITED : dims[i];
        hsize_t most = i > 0 ? dims[i] : unlimited || dims[0] > 8 ? 8 : dims[0] ? dims[0] : 1;
        chunk[i] = 1 + take(r) % most;
    }
    hid_t space = rank ? H5Screate_simple(rank, dims, maxdims) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    if (rank > 0 && chunked) {
        H5Pset_chunk(dcpl, rank, chunk);
        if (filt & 1)
            H5Pset_shuffle(dcpl);
        if (filt & 2)
            H5Pset_deflate(dcpl, 1 + (filt >> 4) % 9);
        if (filt & 4)
            H5Pset_fletcher32(dcpl);
    } else if (compact) {
        H5Pset_layout(dcpl, H5D_COMPACT);
    }
    if (filt & 8 && !huge) /* all of a huge dataset's chunks allocated: gigabytes of file */
        H5Pset_alloc_time(dcpl, chunked ? H5D_ALLOC_TIME_EARLY : H5D_ALLOC_TIME_LATE);
    hid_t d = H5Dcreate2(fid, NAMES[name % 6], type, space, lcpl, dcpl, H5P_DEFAULT);
    if (d >= 0) {
        unsigned mask = take(r) | take(r) << 8;
        if (huge && !chunked) /* writing allocates all of it: rows declared, none written */
            mask = 0;
        if (rank > 0)
            write_rows(r, d, type, vlen, rank, dims, mask);
        else if (mask & 1 && !vlen && H5Tget_class(type) != H5T_STRING) {
            uint8_t v[8] = {(uint8_t)take(r), (uint8_t)take(r)};
            H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        }
        H5Dflush(d);
        w->lib_vlen = vlen && (chunked || compact);
        /* (asking a huge chunked dataset for its size or chunks walks its whole chunk index) */
        w->data = chunked ? HADDR_UNDEF : H5Dget_offset(d);
        w->size = w->data != HADDR_UNDEF ? H5Dget_storage_size(d) : 0;
        hsize_t n_chunks = 0;
        hid_t fs = H5Dget_space(d);
        if (chunked && !vlen && !huge && H5Dget_num_chunks(d, fs, &n_chunks) >= 0 && n_chunks > 0) {
            hsize_t off[H5S_MAX_RANK];
            unsigned fmask;
            haddr_t addr;
            hsize_t csize;
            if (H5Dget_chunk_info(d, fs, 0, off, &fmask, &addr, &csize) >= 0) {
                w->chunk = addr;
                w->chunk_size = csize;
            }
        }
        H5Sclose(fs);
        H5Dclose(d);
    }
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
}

/* XOR one byte at offset `at` of the file fd (inside its `size` bytes). */
static void patch(int fd, uint64_t at, uint64_t size, uint8_t x)
{
    uint8_t b;
    if (at >= size || pread(fd, &b, 1, (off_t)at) != 1)
        return;
    b ^= x ? x : 0x80;
    (void)!pwrite(fd, &b, 1, (off_t)at);
}

/* Damage what stoker reads itself (see the opening comment), as the recipe's tail says. */
static void damage(recipe *r, int fd, const where *w, size_t nw)
{
    off_t end = lseek(fd, 0, SEEK_END);
    size_t scan = end > (off_t)SCAN_MAX ? SCAN_MAX : (size_t)end; /* a huge dataset is sparse */
    uint8_t *file = scan ? malloc(scan) : NULL;
    if (!file || pread(fd, file, scan, 0) != (ssize_t)scan) {
        free(file);
        return;
    }
    uint64_t gcol[8];
    size_t ng = 0;
    bool lib_vlen = false;
    for (size_t i = 0; i < nw; i++)
        lib_vlen |= w[i].lib_vlen;
    for (size_t i = 0; i + 4 <= scan && ng < 8; i++)
        if (memcmp(file + i, "GCOL", 4) == 0)
            gcol[ng++] = (uint64_t)i;
    free(file);
    unsigned n = take(r) % (MAX_PATCHES + 1);
    for (unsigned i = 0; i < n; i++) {
        unsigned what = take(r), pick = take(r);
        uint64_t off = take(r) | take(r) << 8;
        uint8_t x = (uint8_t)take(r);
        const where *ww = &w[pick % nw];
        switch (what % 3) {
        case 0: /* a contiguous dataset's rows or vlen descriptors */
            if (ww->data != HADDR_UNDEF && ww->size > 0)
                patch(fd, ww->data + off % ww->size, (uint64_t)end, x);
            break;
        case 1: /* a global heap collection (the vlen rows' bytes and their headers), in files
                 * whose vlen rows stoker resolves itself: libhdf5 1.10.8 trusts a damaged heap
                 * (H5HG_read copies between overlapping buffers, reads past the collection) and
                 * stoker cannot check what only the library reads (docs/reliability.md) */
            if (ng > 0 && !lib_vlen)
                patch(fd, gcol[pick % ng] + off % 4096, (uint64_t)end, x);
            break;
        default: /* a raw chunk of a fixed-size dataset */
            if (ww->chunk != HADDR_UNDEF && ww->chunk_size > 0)
                patch(fd, ww->chunk + off % ww->chunk_size, (uint64_t)end, x);
            break;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failed recipes are normal */
        quiet = true;
    }
    recipe r = {data, size, 0};
    char path[64];
    int fd = fuzz_input_file_ex(NULL, 0, "h5", true, path, sizeof(path)); /* a real file */
    if (fd < 0)
        return 0;
    unsigned head = take(&r);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (head & 1) /* the new format: other group, heap and chunk index structures */
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    hid_t fid = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    where w[MAX_DSETS];
    size_t nw = 1 + (head >> 1) % MAX_DSETS;
    if (fid >= 0) {
        for (size_t i = 0; i < nw; i++)
            make_dataset(&r, fid, head & 1, &w[i]);
        H5Fclose(fid);
        damage(&r, fd, w, nw);
        stk_dataset *ds = fuzz_open(path, "hdf5", path);
        if (ds) {
            fuzz_read_some(ds, 64);
            stk_dataset_close(ds);
        }
    }
    close(fd);
    unlink(path);
    return 0;
}
