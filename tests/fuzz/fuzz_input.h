/*
 * fuzz_input.h: shared by the fuzz targets that open their input as a dataset file: the input
 * written to an anonymous file (memfd, else a temporary file under /tmp), and every record read
 * (bounded) through the public and the loader-internal read paths.
 */
#ifndef STK_FUZZ_INPUT_H
#define STK_FUZZ_INPUT_H

#include "source/stk_source.h"
#include "stk_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAX_RECORDS 10000
#define MAX_RECORD_SIZE (1u << 20)

/* An unlinked file holding the input; *path names it for stk_dataset_open. */
__attribute__((unused)) static int fuzz_input_file(const uint8_t *data, size_t size,
                                                   const char *name, char *path, size_t path_size)
{
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd >= 0) {
        snprintf(path, path_size, "/proc/self/fd/%d", fd);
        if (access(path, R_OK) != 0) { /* no /proc: fall back to a real file */
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        snprintf(path, path_size, "/tmp/fuzz_%s_XXXXXX", name);
        fd = mkstemp(path);
        if (fd < 0)
            return -1;
    }
    size_t off = 0;
    while (off < size) {
        ssize_t n = write(fd, data + off, size - off);
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    return fd;
}

/* Read every record through both read paths. */
__attribute__((unused)) static void fuzz_read_all(const stk_dataset *ds)
{
    uint64_t max = stk_dataset_max_record_size(ds);
    size_t nf = stk_dataset_n_fields(ds);
    uint64_t sum_max = 0; /* scattered layout: each field at its own max-size region */
    for (size_t f = 0; f < nf; f++) {
        if (stk_dataset_field(ds, f)->name[0] == '\0')
            abort(); /* validated at open */
        sum_max += stk_dataset_field_max_size(ds, f);
    }
    if (max > MAX_RECORD_SIZE || sum_max > STK_MAX_FIELDS * (uint64_t)MAX_RECORD_SIZE)
        return;
    uint8_t *buf = malloc(max ? max : 1);
    uint8_t *scatter = malloc(sum_max ? sum_max : 1);
    void *dst[STK_MAX_FIELDS];
    size_t cap[STK_MAX_FIELDS];
    size_t off = 0;
    for (size_t f = 0; f < nf; f++) {
        cap[f] = (size_t)stk_dataset_field_max_size(ds, f);
        dst[f] = scatter + off;
        off += cap[f];
    }
    for (size_t s = 0; s < stk_dataset_n_shards(ds); s++) {
        stk_shard_info si = {.struct_size = sizeof(si)};
        if (stk_dataset_shard(ds, s, &si) == STK_OK)
            (void)strlen(si.metadata);
    }
    (void)stk_dataset_fingerprint(ds);
    uint64_t n = STK_MIN(stk_dataset_n_records(ds), MAX_RECORDS);
    for (uint64_t i = 0; buf && scatter && i < n; i++) {
        stk_record r;
        stk_record_init(&r);
        char err[256];
        if (stk_dataset_read(ds, i, buf, (size_t)max, &r) == STK_OK) {
            for (size_t f = 0; f < nf; f++)
                (void)(stk_record_i64(&r, f) + stk_record_f32(&r, f));
        }
        stk__recinfo loc;
        (void)stk__dataset_read(ds, NULL, i, dst, cap, STK__READ_VERIFY_ALL, &loc, err,
                                sizeof(err));
    }
    free(buf);
    free(scatter);
}

/* Run the input as it is, then (inputs up to 4 MiB) once more with its checksums recomputed by
 * `repair` when that changed anything, so mutations get past the first checksum check. */
__attribute__((unused)) static void fuzz_run_repaired(const uint8_t *data, size_t size,
                                                      void (*run)(const uint8_t *, size_t),
                                                      int (*repair)(uint8_t *, size_t))
{
    run(data, size);
    if (size > (4u << 20))
        return;
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return;
    memcpy(copy, data, size);
    if (repair(copy, size))
        run(copy, size);
    free(copy);
}

#endif /* STK_FUZZ_INPUT_H */
