/*
 * fuzz_input.h: the fuzz targets' input as a file a dataset can open: an anonymous memfd named
 * through /proc/self/fd, or a temporary file under /tmp when there is no /proc (the caller
 * unlinks paths that start with "/tmp/").
 */
#ifndef FUZZ_INPUT_H
#define FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A file holding the input; *path names it. Returns the descriptor (close it), -1 on failure. */
static int fuzz_input_file(const char *tag, const uint8_t *data, size_t size, char *path,
                           size_t path_size)
{
    int fd = memfd_create(tag, MFD_CLOEXEC);
    if (fd >= 0) {
        snprintf(path, path_size, "/proc/self/fd/%d", fd);
        if (access(path, R_OK) != 0) { /* no /proc: fall back to a real file */
            close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        snprintf(path, path_size, "/tmp/fuzz_%s_XXXXXX", tag);
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

/* Run the input, then (inputs up to 4 MiB) a copy with its checksums recomputed by `repair`
 * when that changed anything: most mutations break a checksum, and the repaired copy reaches the
 * parsing behind it. */
static void fuzz_run_repaired(const uint8_t *data, size_t size,
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

#endif /* FUZZ_INPUT_H */
