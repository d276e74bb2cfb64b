/*
 * fuzz_tfrecord.c: libFuzzer target for the TFRecord source (frames, index scan, Example reader
 * behind it). The input is written to an anonymous file and opened with format "tfrecord", with
 * and without data CRC checks; every record (bounded) is read. It must never crash, hang or leak,
 * and every open error must name the file.
 *
 * Most mutations break a CRC and stop at the first frame. So each input also runs a second time
 * with every frame's two masked CRC32C recomputed ("repaired", following the lengths as far as
 * they stay inside the input), which lets the fuzzer reach the protobuf reader and the schema
 * checks.
 *
 * Corpus: tests/fuzz/corpus/tfrecord (small valid files, written by python/tests/test_tfrecord.py's
 * writer, and a few broken ones).
 */
#include "common/stk_endian.h"
#include "fuzz/fuzz_input.h"
#include "source/tfrecord/stk_tfrecord.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_one(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, "tfrecord", path, sizeof(path));
    if (fd < 0)
        return;
    const char *paths[1] = {path};
    for (unsigned flags = 0; flags <= STK_DATASET_NO_VERIFY; flags += STK_DATASET_NO_VERIFY) {
        stk_dataset_opts o;
        stk_dataset_opts_init(&o);
        o.paths = paths;
        o.n_paths = 1;
        o.flags = flags;
        o.format = "tfrecord";
        stk_dataset *ds = NULL;
        if (stk_dataset_open_v2(&o, &ds) == STK_OK) {
            fuzz_read_all(ds);
            stk_dataset_close(ds);
        } else if (strstr(stk_last_errmsg(), path) == NULL) {
            abort(); /* every open error must name the file */
        }
    }
    close(fd);
    if (strncmp(path, "/tmp/", 5) == 0) {
        char idx[80];
        snprintf(idx, sizeof(idx), "%s.idx", path);
        unlink(idx); /* the index cache a writable directory gets */
        unlink(path);
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Recompute both CRCs of each frame. Returns whether anything changed. */
static int repair(uint8_t *b, size_t size)
{
    int changed = 0;
    size_t at = 0;
    while (size - at >= 16) {
        uint64_t len = stk__ld64(b + at);
        if (len > size - at - 16)
            break;
        uint32_t c = stk__crc32c_mask(stk__crc32c(0, b + at, 8));
        changed |= stk__ld32(b + at + 8) != c;
        put32(b + at + 8, c);
        c = stk__crc32c_mask(stk__crc32c(0, b + at + 12, (size_t)len));
        changed |= stk__ld32(b + at + 12 + len) != c;
        put32(b + at + 12 + len, c);
        at += (size_t)len + 16;
    }
    return changed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_run_repaired(data, size, run_one, repair);
    return 0;
}
