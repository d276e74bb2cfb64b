/*
 * stk_tfrecord.h: the parts of the TFRecord source (stk_src_tfrecord.c) that tests and fuzz
 * targets call directly: CRC32C (hardware where the CPU has it, a table otherwise), TFRecord's
 * masking of it, and the protobuf wire-format reader for tf.train.Example; and the `.idx` text
 * index next to a file (stk_tfrecord_index.c), which the source reads and writes.
 *
 * Threads: the CRC and Example functions are pure (no state but a table built once,
 * thread-safely); the index functions touch only the file they are given and its `.idx`.
 */
#ifndef STK_TFRECORD_H
#define STK_TFRECORD_H

#include "io/stk_vfs.h"
#include "stk_internal.h"

/* CRC32C (Castagnoli, reflected 0x82F63B78) of n bytes, continuing from crc (0 to start). Uses
 * SSE4.2 when the CPU has it. */
uint32_t stk__crc32c(uint32_t crc, const void *data, size_t n);
/* The same with the table only (for tests comparing both). */
uint32_t stk__crc32c_sw(uint32_t crc, const void *data, size_t n);
/* Whether stk__crc32c uses the CPU's instruction. */
bool stk__crc32c_hw(void);
/* TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8. */
static inline uint32_t stk__crc32c_mask(uint32_t crc)
{
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* The list kinds of a tf.train.Feature (its oneof field numbers). */
enum { STK__TF_NONE = 0, STK__TF_BYTES = 1, STK__TF_FLOAT = 2, STK__TF_INT64 = 3 };

/* One feature of an Example, pointing into the parsed bytes. */
typedef struct stk__tf_feature {
    const uint8_t *key;
    size_t key_len;
    int kind;            /* STK__TF_*; NONE for a Feature with no list set */
    const uint8_t *list; /* the BytesList / FloatList / Int64List message */
    size_t list_len;
    uint64_t count; /* values in the list (packed and unpacked together) */
} stk__tf_feature;

/* Called once per map entry, in the order of the bytes (a key repeated later replaces the
 * earlier one, as protobuf's map semantics say). Returns 0 to go on, else stops the parse with
 * that value. */
typedef int (*stk__tf_feature_fn)(void *ctx, const stk__tf_feature *f);

/* Parse a serialized tf.train.Example (Example{Features features = 1}, Features{map<string,
 * Feature> feature = 1}, Feature{oneof BytesList = 1, FloatList = 2, Int64List = 3}), calling fn
 * for each feature. Unknown fields are skipped by wire type; every length is checked against the
 * bytes left. Returns 0, the callback's non-zero value, or -1 with the reason in why ("truncated
 * varint at byte 12", ...). Never reads outside [p, p + n). */
int stk__tf_example_parse(const uint8_t *p, size_t n, stk__tf_feature_fn fn, void *ctx, char *why,
                          size_t why_size);

/* The values of a feature, little-endian: bytes -> the one value (count must be 1), int64 ->
 * count int64s, float -> count float32s. Writes at most cap bytes to dst; *size gets the value's
 * size. Returns 0, 1 when the value is larger than cap (nothing written past cap), -1 for no
 * list, a bytes_list of other than one value, or
 * malformed lists (never after a successful stk__tf_example_parse of the same bytes). */
int stk__tf_feature_value(const stk__tf_feature *f, void *dst, size_t cap, size_t *size);

/* Where the one value of a bytes_list feature lies in the parsed bytes (no copy): 0, or -1 when
 * f is not a bytes_list of one value or the list is malformed. */
int stk__tf_bytes_value(const stk__tf_feature *f, const uint8_t **value, size_t *len);

/* ---- the frame index `<file>.idx` (stk_tfrecord_index.c) ---- */

/* Bytes around a record's data in its frame: u64 length, u32 masked CRC, then u32 masked CRC. */
#define STK__TF_FRAMING 16

/* Read `<path of tf_file>.idx` into *out (count + 1 frame offsets, the last one the file's size;
 * free with stk__free) and *count when it exists and describes tf_file exactly. Returns STK_OK
 * with *out untouched when there is none or it does not fit (the caller scans the frames),
 * STK_ENOMEM on allocation failure. Reads through the byte source. */
stk_status stk__tf_index_load(stk__file *tf_file, uint64_t **out, uint64_t *count, char *err,
                              size_t err_size);

/* Write tf_off[0..count] as `<path of tf_file>.idx` when tf_file is on local disk, no index exists
 * and its directory is writable; any failure leaves nothing behind (the index stays in memory
 * only). */
void stk__tf_index_save(const stk__file *tf_file, const uint64_t *tf_off, uint64_t count);

#endif /* STK_TFRECORD_H */
