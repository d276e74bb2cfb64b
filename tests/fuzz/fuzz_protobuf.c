/*
 * fuzz_protobuf.c: libFuzzer target for the tf.train.Example wire-format reader
 * (stk__tf_example_parse, stk__tf_feature_value in src/source/tfrecord/stk_src_tfrecord.c). The
 * input is one serialized Example; every feature found is decoded into a buffer of its exact size
 * and into one too small. The reader must never read outside the input (ASan), loop forever or
 * crash, and every refusal must say where ("... at byte N").
 *
 * Corpus: tests/fuzz/corpus/protobuf (Examples from python/tests/test_tfrecord.py's writer:
 * packed and unpacked lists, unknown fields, a few malformed ones).
 */
#include "source/tfrecord/stk_tfrecord.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int each(void *ctx, const stk__tf_feature *f)
{
    (void)ctx;
    size_t size = 0;
    if (f->kind == STK__TF_NONE || (f->kind == STK__TF_BYTES && f->count != 1))
        return stk__tf_feature_value(f, NULL, 0, &size) == -1 ? 0 : (abort(), 0);
    uint8_t probe[16];
    int r = stk__tf_feature_value(f, probe, sizeof(probe), &size);
    if (r == 1 && size <= sizeof(probe))
        abort(); /* "too large" only when it is */
    if (r == 1 && size <= (64u << 20)) {
        uint8_t *buf = malloc(size ? size : 1);
        if (buf && stk__tf_feature_value(f, buf, size, &size) != 0)
            abort(); /* a value that fits must decode after a successful parse */
        free(buf);
    } else if (r < 0) {
        abort(); /* the parse validated every list */
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char why[256] = "";
    int r = stk__tf_example_parse(data, size, each, NULL, why, sizeof(why));
    if (r < 0 && !strstr(why, " at byte "))
        abort();
    return 0;
}
