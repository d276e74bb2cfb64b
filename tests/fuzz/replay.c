/*
 * replay.c: runs a libFuzzer target's LLVMFuzzerTestOneInput over every file of a corpus
 * directory with a plain compiler (zstd's regression_driver), so `make test` replays the corpora
 * without libFuzzer. Prints "N passed, 0 failed"; a crash or sanitizer report fails the run.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (!d) {
        perror(argv[1]);
        return 1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof(*names));
            if (!names)
                return 1;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "%s: empty corpus\n", argv[1]);
        return 1;
    }
    qsort(names, n, sizeof(*names), cmp_names);
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], names[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            perror(path);
            return 1;
        }
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
        if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
            fprintf(stderr, "%s: read failed\n", path);
            return 1;
        }
        fclose(f);
        LLVMFuzzerTestOneInput(buf, (size_t)size);
        free(buf);
        free(names[i]);
    }
    free(names);
    printf("%zu passed, 0 failed\n", n);
    return 0;
}
