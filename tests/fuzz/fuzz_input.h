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

/* A file holding the input; *path names it for stk_dataset_open. An anonymous one (memfd, named
 * /proc/self/fd/N) unless `real` is set or /proc is missing: then a temporary file under /tmp,
 * which the caller unlinks (libhdf5 cannot open a /proc/self/fd path: it resolves it to a real
 * path, and a memfd has none). */
__attribute__((unused)) static int fuzz_input_file_ex(const uint8_t *data, size_t size,
                                                      const char *name, bool real, char *path,
                                                      size_t path_size)
{
    int fd = real ? -1 : memfd_create(name, MFD_CLOEXEC);
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

/* fuzz_input_file_ex, anonymous when it can be. */
__attribute__((unused)) static int fuzz_input_file(const uint8_t *data, size_t size,
                                                   const char *name, char *path, size_t path_size)
{
    return fuzz_input_file_ex(data, size, name, false, path, path_size);
}

/* Open `path` as a dataset of `format`; NULL when refused, after checking that the message
 * names `name` (every open error must say which file). */
__attribute__((unused)) static stk_dataset *fuzz_open(const char *path, const char *format,
                                                      const char *name)
{
    const char *paths[1] = {path};
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = paths;
    o.n_paths = 1;
    o.format = format;
    stk_dataset *ds = NULL;
    if (stk_dataset_open_v2(&o, &ds) == STK_OK)
        return ds;
    if (strstr(stk_last_errmsg(), name) == NULL)
        abort();
    return NULL;
}

/* Read the first `max_records` records through both read paths. */
__attribute__((unused)) static void fuzz_read_some(const stk_dataset *ds, uint64_t max_records)
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
    uint64_t n = STK_MIN(stk_dataset_n_records(ds), max_records);
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

/* Read every record (bounded: MAX_RECORDS) through both read paths. */
__attribute__((unused)) static void fuzz_read_all(const stk_dataset *ds)
{
    fuzz_read_some(ds, MAX_RECORDS);
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
