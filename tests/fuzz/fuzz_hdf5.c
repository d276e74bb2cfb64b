/*
 * fuzz_hdf5.c: libFuzzer target for the HDF5 source (src/source/hdf5/): the input is written to
 * a temporary file (libhdf5 cannot open a memfd's /proc path) and opened with format "hdf5"; the
 * first 64 records (1 MiB each at most) are read through both read paths. Every open error must
 * name the file, and open must not take time in proportion to a row count the file declares but
 * does not hold (issue 30: a 1.4 KB file declaring 10^7 vlen rows never finished opening):
 * libFuzzer's per-input timeout (30 s in make fuzz-ci) catches that.
 *
 * The library parses the file's metadata itself (Debian's libhdf5, not instrumented: a crash
 * inside it shows as a crash of this target, with libhdf5 frames on top).
 *
 * Corpus: tests/fuzz/corpus/hdf5, small files written by h5py (tests/fuzz/corpus/hdf5/README):
 * contiguous and chunked vlen bytes, gzip and shuffle, scalar and array columns, a group, and a
 * chunked vlen dataset declaring 10^8 rows with nothing written.
 */
#include "fuzz_input.h"
#include "stk_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file_ex(data, size, "h5", true, path, sizeof(path)); /* a real file */
    if (fd < 0)
        return 0;
    stk_dataset *ds = fuzz_open(path, "hdf5", path);
    if (ds) {
        fuzz_read_some(ds, 64); /* a row through the library costs ~0.5 ms under ASan */
        stk_dataset_close(ds);
    }
    close(fd);
    unlink(path);
    return 0;
}
