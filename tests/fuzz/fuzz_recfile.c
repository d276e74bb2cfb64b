/*
 * fuzz_recfile.c: libFuzzer target for the `.stk` reader. The input is written to an anonymous
 * file and opened as a one-shard dataset; every record (bounded: 10k records, 1 MiB each) is
 * read with and without checksum verification, through the public and the loader-internal read
 * paths. It must never crash, hang or leak, whatever the bytes.
 *
 * Most mutations break a checksum and stop at the first check. So each input also runs a second
 * time with its header, index and footer checksums recomputed ("repaired"), which lets the
 * fuzzer reach the schema, bounds and index validation behind them.
 *
 * Corpus: tests/fuzz/corpus/recfile, made by tests/data/gen_recfile_corpus.c.
 */
#include "source/stk/stk_format.h"
#include "source/stk_source.h"
#include "stk_internal.h"

#include "fuzz/fuzz_input.h"

#include <xxhash.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run_one(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, "recfile", path, sizeof(path));
    if (fd < 0)
        return;
    const char *paths[1] = {path};
    for (unsigned flags = 0; flags <= STK_DATASET_NO_VERIFY; flags += STK_DATASET_NO_VERIFY) {
        stk_dataset *ds = NULL;
        if (stk_dataset_open(paths, 1, flags, &ds) == STK_OK) {
            fuzz_read_all(ds);
            stk_dataset_close(ds);
        } else if (strstr(stk_last_errmsg(), path) == NULL) {
            abort(); /* every open error must name the file */
        }
    }
    close(fd);
    if (strncmp(path, "/tmp/", 5) == 0)
        unlink(path);
}

/* Recompute the header, index and footer checksums where the layout allows it. Returns whether
 * anything changed. */
static int repair(uint8_t *b, size_t size)
{
    if (size < STK_FMT_H_FIXED + 8 + STK_FMT_FOOTER_SIZE || memcmp(b, STK_FMT_MAGIC, 8) != 0)
        return 0;
    uint8_t *foot = b + size - STK_FMT_FOOTER_SIZE;
    uint8_t before[STK_FMT_FOOTER_SIZE];
    memcpy(before, foot, sizeof(before));
    uint64_t avail = size - STK_FMT_FOOTER_SIZE;
    uint64_t hs = stk__ld32(b + STK_FMT_H_HEADER_SIZE);
    int changed = 0;
    if (hs >= STK_FMT_H_FIXED + 8 && hs <= avail) {
        uint64_t sum = XXH3_64bits(b, hs - 8);
        changed |= stk__ld64(b + hs - 8) != sum;
        stk__st64(b + hs - 8, sum);
        stk__st64(foot + STK_FMT_T_HEADER_SUM, sum);
    }
    uint64_t io = stk__ld64(foot + STK_FMT_T_INDEX_OFFSET);
    uint64_t is = stk__ld64(foot + STK_FMT_T_INDEX_SIZE);
    if (io <= avail && is <= avail - io)
        stk__st64(foot + STK_FMT_T_INDEX_SUM, XXH3_64bits(b + io, is));
    stk__st64(foot + STK_FMT_T_SUM, XXH3_64bits(foot, STK_FMT_T_SUM));
    return changed || memcmp(before, foot, sizeof(before)) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_run_repaired(data, size, run_one, repair);
    return 0;
}
