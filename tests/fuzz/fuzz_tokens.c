/*
 * fuzz_tokens.c: libFuzzer target for the token corpus parsers (src/source/tokens/): an llm.c
 * shard, a numpy token array (.npy header or raw) or a Megatron index with its .bin, opened with
 * stk_tokens_open as windows, random or packed rows and every row read (bounded). It must never
 * crash, hang or leak, and every error must name the file, whatever the bytes.
 *
 * Input: byte 0 picks the format (mod 3: llmc, numpy-tokens, megatron) and the rows (/ 3 mod 3);
 * for Megatron bytes 1-4 (little-endian) split the rest into the .idx and the .bin.
 * Corpus: tests/fuzz/corpus/tokens (valid files of each format, written by
 * python/tests/token_corpora.py).
 */
#include "fuzz_input.h"
#include "stk_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool write_file(const char *path, const uint8_t *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    char dir[] = "/tmp/fuzz_tokens_XXXXXX", a[96], b[96];
    if (!mkdtemp(dir))
        return 0;
    int kind = data[0] % 3;
    uint32_t mode = (uint32_t)(data[0] / 3) % 3;
    const char *format = kind == 0 ? "llmc" : kind == 1 ? "numpy-tokens" : "megatron";
    bool ok;
    if (kind == 2) {
        uint32_t split;
        memcpy(&split, data + 1, 4);
        size_t rest = size - 5, k = split % (rest + 1);
        snprintf(a, sizeof(a), "%s/c.idx", dir);
        snprintf(b, sizeof(b), "%s/c.bin", dir);
        ok = write_file(a, data + 5, k) && write_file(b, data + 5 + k, rest - k);
    } else {
        snprintf(a, sizeof(a), "%s/c.%s", dir, kind == 0 ? "bin" : "npy");
        b[0] = '\0';
        ok = write_file(a, data + 1, size - 1);
    }
    if (ok) {
        const char *paths[1] = {a};
        stk_tokens_opts o;
        stk_tokens_opts_init(&o);
        o.paths = paths;
        o.n_paths = 1;
        o.format = format;
        o.seq_len = 4;
        o.mode = mode;
        o.eos = kind == 2 ? -1 : 0; /* documents at each 0 (Megatron has its index) */
        stk_dataset *ds = NULL;
        if (stk_tokens_open(&o, &ds) == STK_OK) {
            uint8_t buf[512];
            uint64_t n = STK_MIN(stk_dataset_n_records(ds), MAX_RECORDS);
            for (uint64_t i = 0; i < n; i++) {
                stk_record r;
                stk_record_init(&r);
                if (stk_dataset_read(ds, i, buf, sizeof(buf), &r) != STK_OK &&
                    !strstr(stk_last_errmsg(), dir))
                    abort(); /* every read error names the file */
            }
            stk_dataset_close(ds);
        } else if (!strstr(stk_last_errmsg(), dir) && !strstr(stk_last_errmsg(), "memory")) {
            abort(); /* every open error names the file */
        }
    }
    unlink(a);
    if (b[0])
        unlink(b);
    rmdir(dir);
    return 0;
}
