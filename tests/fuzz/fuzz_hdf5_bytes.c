/*
 * fuzz_hdf5_bytes.c: libFuzzer target for the HDF5 source (src/source/hdf5/) on byte-mutated
 * files: the input is written to a temporary file (libhdf5 cannot open a memfd's /proc path) and
 * opened with format "hdf5"; the first 64 records (1 MiB each at most) are read through both read
 * paths. Every open error must name the file, and open must not take time in proportion to a row
 * count the file declares but does not hold (issue 30: a 1.4 KB file declaring 10^7 vlen rows
 * never finished opening): libFuzzer's per-input timeout catches that.
 *
 * The library parses the file's metadata itself (Debian's libhdf5 1.10.8, not instrumented), and
 * on mutated metadata it crashes inside itself within seconds of fuzzing: a NULL write after a
 * failed malloc (H5C_protect / H5F__accum_read, from H5Lvisit), a heap over-read in
 * H5D__select_read, an overlapping memcpy in H5HG_read, multi-terabyte mallocs sized from the
 * file. stoker cannot guard those without parsing HDF5's metadata itself, so `make fuzz-ci`
 * leaves this target out (fuzz_hdf5 fuzzes what stoker decides, on files libhdf5 writes) and
 * `make fuzz-replay` runs it over its corpus: the damaged files stoker refuses before the library
 * trips on them stay refused. Run it by hand to look for more:
 *     make build/fuzz/fuzz_hdf5_bytes && FUZZ_SECONDS=60 bash scripts/fuzz_ci.sh \
 *         build/fuzz/fuzz_hdf5_bytes
 *
 * Corpus: tests/fuzz/corpus/hdf5_bytes, small files written by h5py (its README): contiguous and
 * chunked vlen bytes, gzip and shuffle, scalar and array columns, a group, a chunked vlen dataset
 * declaring 10^8 rows with nothing written, and the damaged files found so far.
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
