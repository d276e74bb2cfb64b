/*
 * fuzz_tar.c: libFuzzer target for the WebDataset tar reader (src/source/wds/stk_src_wds.c,
 * stk_tar.c). The input is written to an anonymous file and opened with format "wds"; every sample
 * (bounded: 10k samples, 1 MiB each) is read, and every error must name the file. It must never
 * crash, hang or leak, whatever the bytes.
 *
 * Most mutations break a header checksum and stop at the first header. So each input also runs
 * a second time with the checksum of every header along the member chain recomputed
 * ("repaired"), which lets the fuzzer reach the size, name, PAX, long-name and grouping logic.
 *
 * Corpus: tests/fuzz/corpus/tar (small shards written with Python's tarfile: ustar, GNU and
 * PAX formats, a missing field, a non-numeric cls, a truncated member; and GNU tar's PAX sparse
 * members, formats 0.0, 0.1 and 1.0, which must be refused: pax-sparse-*.tar).
 */
#include "fuzz_input.h"
#include "stk_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void read_all(const stk_dataset *ds, const char *path)
{
    uint64_t max = stk_dataset_max_record_size(ds);
    if (max > MAX_RECORD_SIZE)
        return;
    uint8_t *buf = malloc(max ? max : 1);
    uint64_t n = STK_MIN(stk_dataset_n_records(ds), MAX_RECORDS);
    for (uint64_t i = 0; buf && i < n; i++) {
        stk_record r;
        stk_record_init(&r);
        if (stk_dataset_read(ds, i, buf, (size_t)max, &r) == STK_OK) {
            for (size_t f = 0; f < stk_dataset_n_fields(ds); f++)
                (void)stk_record_i64(&r, f);
        } else if (strstr(stk_last_errmsg(), path) == NULL) {
            abort(); /* every read error names the file */
        }
    }
    free(buf);
}

static void run_one(const uint8_t *data, size_t size)
{
    char path[64];
    int fd = fuzz_input_file(data, size, "tar", path, sizeof(path));
    if (fd < 0)
        return;
    stk_dataset *ds = fuzz_open(path, "wds", path); /* (every open error names the file) */
    if (ds) {
        read_all(ds, path);
        stk_dataset_close(ds);
    }
    close(fd);
    if (strncmp(path, "/tmp/", 5) == 0) {
        char idx[80];
        unlink(path);
        snprintf(idx, sizeof(idx), "%s.stkidx", path);
        unlink(idx);
    }
}

/* Recompute the checksum of each header along the chain; returns whether anything changed. */
static int repair(uint8_t *b, size_t size)
{
    int changed = 0;
    for (size_t off = 0; off + 512 <= size;) {
        uint8_t *h = b + off;
        unsigned sum = 0;
        for (int i = 0; i < 512; i++)
            sum += i >= 148 && i < 156 ? ' ' : h[i];
        if (sum == 8 * ' ')
            break; /* an all-zero block: the end */
        char field[8];
        snprintf(field, sizeof(field), "%06o", sum & 0777777);
        if (memcmp(h + 148, field, 6) != 0 || h[154] != '\0' || h[155] != ' ') {
            memcpy(h + 148, field, 6);
            h[154] = '\0';
            h[155] = ' ';
            changed = 1;
        }
        uint64_t len = 0;
        for (int i = 124; i < 136 && h[i] >= '0' && h[i] <= '7'; i++)
            len = len * 8 + (uint64_t)(h[i] - '0');
        if (len > size)
            break;
        off += 512 + ((len + 511) & ~(uint64_t)511);
    }
    return changed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_run_repaired(data, size, run_one, repair);
    return 0;
}
