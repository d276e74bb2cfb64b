/*
 * stk_hdf5.h: what the HDF5 source (stk_src_hdf5.c) shares with the reader of its
 * variable-length-bytes row tables (stk_hdf5_vlen.c, moved out of stk_src_hdf5.c): one dataset
 * of a file as a column, and the functions that find where its rows lie.
 *
 * Threads: the functions here run at open, on the opening thread, with the library's own lock.
 */
#ifndef STK_HDF5_H
#define STK_HDF5_H

#include "source/stk_source.h"

#include <hdf5.h>

/* One dataset of one file, read as a column of rows. */
typedef struct stk__h5col {
    int mode; /* how rows are read: COL_OFFSET, COL_LIB or COL_VLEN (stk_src_hdf5.c) */
    hid_t dset, mtype, fspace, mspace;
    int rank;
    hsize_t dims[H5S_MAX_RANK];
    uint64_t offset;   /* COL_OFFSET: file offset of row 0 */
    uint64_t row_size; /* fixed size of a row (0 for vlen) */
    uint64_t *voff;    /* COL_VLEN read directly: each row's file offset and length */
    uint32_t *vlen;
} stk__h5col;

/* The innermost message of the library's error stack in buf (160 bytes), or a fixed text when
 * there is none; returns the text. */
const char *stk__h5_errmsg(char *buf);

/* Where every row of a contiguous vlen-bytes column (dataset dname) lies in the file f: sets
 * c->voff and c->vlen (and *max, the largest row) from the rows' descriptors and the global heap,
 * or leaves them NULL when the layout is not the one expected (the rows then go through the
 * library). Returns STK_OK, STK_ENOMEM, STK_EFORMAT (descriptors pointing where the heap has no
 * such object: a damaged file, never handed to the library), or the byte source's error. */
stk_status stk__h5_vlen_direct(stk__h5col *c, stk__file *f, hid_t plist, const char *dname,
                               uint64_t *max, char *err, size_t err_size);

/* The largest row of a vlen column (creation properties plist) in *max, read through the
 * library in blocks: every row, or when most declared rows lie in chunks never written, the rows
 * of the written chunks and the fill value; a contiguous or compact dataset never written is all
 * fill value (work bounded by what the file of file_size bytes holds). Returns STK_OK, STK_EIO
 * naming path, dataset dname and the rows, STK_ELIMIT for a dataset of more than 4096 written
 * chunks declaring more than twice the rows they hold, STK_EFORMAT for storage that cannot hold
 * the rows declared, STK_ENOMEM. */
stk_status stk__h5_vlen_max(stk__h5col *c, hid_t plist, const char *path, uint64_t file_size,
                            const char *dname, uint64_t *max, char *err, size_t err_size);

#endif /* STK_HDF5_H */
