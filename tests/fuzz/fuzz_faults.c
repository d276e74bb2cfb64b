/*
 * fuzz_faults.c: libFuzzer target for the formats' handling of a misbehaving transport: the
 * input's first bytes choose a format and a schedule of faults for the fault-injecting byte
 * source (src/io/stk_vfs_fault.c: I/O errors, short reads and flipped bytes at byte ranges or at
 * the Nth read); the rest is the file, written to a temporary file and opened as
 * `stk-fault:PLAN:FILE` with that format; every record (bounded: 10k records, 1 MiB each) is
 * read through both read paths. It must never crash, hang or leak, and every error, at open or
 * at read, must have a message naming the file (issue 30: an I/O failure in the tar scan had an
 * empty message).
 *
 * Input layout: byte 0: the format (mod 4: stk, wds, tfrecord, npy); byte 1: the number of
 * faults (mod 5); then 6 bytes per fault: kind (mod 3: eio, short, flip), mode (even: a byte
 * range, odd: the Nth read), u16 a, u16 length-or-N (little-endian); then the file.
 *
 * Corpus: tests/fuzz/corpus/faults (a header plus a seed of each format's corpus).
 */
#include "fuzz_input.h"
#include "stk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const formats[] = {"stk", "wds", "tfrecord", "npy"};
static const char *const suffixes[] = {".stk", ".tar", ".tfrecord", ".npy"};
static const char *const kinds[] = {"eio", "short", "flip"};

/* The plan ("eio@100-119,flip#3") from the input's header; returns the header's length, 0 when
 * the input is too short to have one. */
static size_t make_plan(const uint8_t *d, size_t size, int *fmt, char *plan, size_t plan_size)
{
    if (size < 2)
        return 0;
    *fmt = d[0] % 4;
    int n = d[1] % 5;
    size_t at = 2, used = 0;
    plan[0] = '\0';
    for (int i = 0; i < n && at + 6 <= size; i++, at += 6) {
        unsigned a = (unsigned)(d[at + 2] | d[at + 3] << 8),
                 b = (unsigned)(d[at + 4] | d[at + 5] << 8);
        int k =
            snprintf(plan + used, plan_size - used, "%s%s%c%u", used ? "," : "", kinds[d[at] % 3],
                     d[at + 1] % 2 ? '#' : '@', d[at + 1] % 2 ? b % 64 + 1 : a);
        if (k < 0 || (size_t)k >= plan_size - used)
            break;
        used += (size_t)k;
        if (d[at + 1] % 2 == 0) {
            k = snprintf(plan + used, plan_size - used, "-%u", a + b % 4096);
            if (k < 0 || (size_t)k >= plan_size - used)
                break;
            used += (size_t)k;
        }
    }
    return at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fmt = 0;
    char plan[256], file[64], path[400];
    size_t head = make_plan(data, size, &fmt, plan, sizeof(plan));
    if (head == 0)
        return 0;
    snprintf(file, sizeof(file), "/tmp/fuzz_faults_XXXXXX%s", suffixes[fmt]);
    int fd = mkstemps(file, (int)strlen(suffixes[fmt]));
    if (fd < 0)
        return 0;
    for (size_t off = head; off < size;) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    close(fd);
    snprintf(path, sizeof(path), "stk-fault:%s:%s", plan, file);
    stk_dataset *ds = fuzz_open(path, formats[fmt], file);
    if (ds) {
        uint64_t max = stk_dataset_max_record_size(ds);
        uint64_t n = STK_MIN(stk_dataset_n_records(ds), MAX_RECORDS);
        uint8_t *buf = max <= MAX_RECORD_SIZE ? malloc(max ? max : 1) : NULL;
        for (uint64_t i = 0; buf && i < n; i++) {
            stk_record r;
            stk_record_init(&r);
            if (stk_dataset_read(ds, i, buf, (size_t)max, &r) != STK_OK &&
                strstr(stk_last_errmsg(), file) == NULL)
                abort(); /* every read error has a message naming the file */
        }
        free(buf);
        fuzz_read_some(ds, 64);
        stk_dataset_close(ds);
    }
    unlink(file);
    char idx[96];
    snprintf(idx, sizeof(idx), "%s.stkidx", file); /* (not written: the fault path is not local) */
    unlink(idx);
    return 0;
}
