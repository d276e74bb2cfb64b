/*
 * test_tfrecord.c: the TFRecord source's parts (src/source/tfrecord/stk_src_tfrecord.c): CRC32C
 * against known vectors, the hardware and table paths agreeing on every length and alignment,
 * TFRecord's mask; the tf.train.Example wire-format reader on hand-written messages (packed and
 * unpacked lists, negative int64, unknown fields of every wire type, a repeated key) and on
 * malformed ones (each refused with a reason, never a read outside the bytes); and one file written
 * here read through stk_dataset_open, with a corrupted data CRC refused naming the file, record and
 * offset.
 */
#include "source/stk_source.h"
#include "source/tfrecord/stk_tfrecord.h"
#include "stk_internal.h"
#include "t.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

static int test_crc32c_vectors(void)
{
    uint8_t zeros[32] = {0}, ones[32], inc[32];
    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++)
        inc[i] = (uint8_t)i;
    /* RFC 3720 B.4 and the usual check value */
    T_EQ(stk__crc32c(0, "123456789", 9), 0xE3069283u);
    T_EQ(stk__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    T_EQ(stk__crc32c(0, zeros, 32), 0x8A9136AAu);
    T_EQ(stk__crc32c(0, ones, 32), 0x62A8AB43u);
    T_EQ(stk__crc32c(0, inc, 32), 0x46DD794Eu);
    T_EQ(stk__crc32c(0, "", 0), 0);
    /* continuing a CRC over pieces is the CRC of the whole */
    T_EQ(stk__crc32c(stk__crc32c(0, "1234", 4), "56789", 5), 0xE3069283u);
    /* TFRecord's mask, and the masked CRC of the length 3 as a frame header holds it */
    T_EQ(stk__crc32c_mask(0xE3069283u), 0xC78AB0E5u);
    T_EQ(stk__crc32c_mask(0), 0xA282EAD8u);
    uint8_t len3[8] = {3};
    T_EQ(stk__crc32c_mask(stk__crc32c(0, len3, 8)), 0x0E4999B0u);
    return 0;
}

/* The hardware path runs three CRCs over blocks of 8192 and 256 bytes and joins them: lengths
 * around those block sizes, at every alignment, must give what the table gives. */
static int test_crc32c_hw_matches_table(void)
{
    static uint8_t buf[60000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    static const size_t sizes[] = {767,   768,   769,   1000,  24575, 24576,
                                   24577, 25357, 49152, 49919, 59990};
    for (size_t off = 0; off < 8; off++) {
        for (size_t n = 0; n < 2000; n += n < 40 ? 1 : 37)
            T_CHECKF(stk__crc32c(7, buf + off, n) == stk__crc32c_sw(7, buf + off, n),
                     "offset %zu length %zu (hardware path: %d)", off, n, stk__crc32c_hw());
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
            T_CHECKF(stk__crc32c(0, buf + off, sizes[k]) == stk__crc32c_sw(0, buf + off, sizes[k]),
                     "offset %zu length %zu (hardware path: %d)", off, sizes[k], stk__crc32c_hw());
    }
    return 0;
}

/* ---- a tiny protobuf writer ---- */

typedef struct pb {
    uint8_t b[1024];
    size_t n;
} pb;

static void put(pb *p, const void *d, size_t n)
{
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void varint(pb *p, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        c |= v ? 0x80 : 0;
        put(p, &c, 1);
    } while (v);
}

static void ld(pb *p, uint32_t field, const pb *body)
{
    varint(p, (uint64_t)field << 3 | 2);
    varint(p, body->n);
    put(p, body->b, body->n);
}

/* Example{features{feature{key: <key>, value: Feature{<kind>: <list>}}}} for each entry. */
static void entry(pb *features, const char *key, int kind, const pb *list, bool junk)
{
    pb k = {0}, feat = {0}, e = {0};
    put(&k, key, strlen(key));
    ld(&feat, (uint32_t)kind, list);
    if (junk) { /* unknown fields of wire types 0, 1, 2, 5 */
        varint(&feat, 9 << 3 | 0);
        varint(&feat, (uint64_t)1 << 40);
        varint(&feat, 10 << 3 | 1);
        put(&feat, "12345678", 8);
        ld(&feat, 11, &k);
        varint(&feat, 12 << 3 | 5);
        put(&feat, "1234", 4);
    }
    ld(&e, 1, &k);
    ld(&e, 2, &feat);
    ld(features, 1, &e);
}

typedef struct seen {
    int n;
    stk__tf_feature f[8];
} seen;

static int collect(void *ctx, const stk__tf_feature *f)
{
    seen *s = ctx;
    if (s->n < 8)
        s->f[s->n++] = *f;
    return 0;
}

static int test_example_parse(void)
{
    pb bytes = {0}, i64 = {0}, i64u = {0}, flt = {0}, fltu = {0}, packed = {0}, img = {0};
    put(&img, "\xff\xd8jpeg", 6);
    ld(&bytes, 1, &img);
    /* int64 packed: 1, -2, 300 (negative: ten-byte two's complement varint) */
    varint(&packed, 1);
    varint(&packed, (uint64_t)-2);
    varint(&packed, 300);
    ld(&i64, 1, &packed);
    /* int64 unpacked: 7, then a packed chunk {1, -2, 300}: 4 values */
    varint(&i64u, 1 << 3 | 0);
    varint(&i64u, 7);
    ld(&i64u, 1, &packed);
    float fv[2] = {1.5f, -0.25f};
    pb fp = {0};
    put(&fp, fv, sizeof(fv));
    ld(&flt, 1, &fp);
    varint(&fltu, 1 << 3 | 5);
    put(&fltu, &fv[1], 4);
    pb features = {0}, ex = {0};
    entry(&features, "image/encoded", 1, &bytes, true);
    entry(&features, "label", 3, &i64, false);
    entry(&features, "mixed", 3, &i64u, false);
    entry(&features, "box", 2, &flt, true);
    entry(&features, "one", 2, &fltu, false);
    varint(&ex, 5 << 3 | 0); /* an unknown field before features */
    varint(&ex, 3);
    ld(&ex, 1, &features);
    seen s = {0};
    char why[128] = "";
    T_EQ(stk__tf_example_parse(ex.b, ex.n, collect, &s, why, sizeof(why)), 0);
    T_EQ(s.n, 5);
    T_CHECK(s.f[0].key_len == 13 && memcmp(s.f[0].key, "image/encoded", 13) == 0);
    T_EQ(s.f[0].kind, STK__TF_BYTES);
    T_EQ(s.f[0].count, 1);
    T_EQ(s.f[1].kind, STK__TF_INT64);
    T_EQ(s.f[1].count, 3);
    T_EQ(s.f[2].count, 4);
    T_EQ(s.f[3].kind, STK__TF_FLOAT);
    T_EQ(s.f[3].count, 2);
    T_EQ(s.f[4].count, 1);

    uint8_t out[64];
    size_t size;
    T_EQ(stk__tf_feature_value(&s.f[0], out, sizeof(out), &size), 0);
    T_CHECK(size == 6 && memcmp(out, "\xff\xd8jpeg", 6) == 0);
    T_EQ(stk__tf_feature_value(&s.f[0], out, 5, &size), 1); /* over the buffer */
    int64_t iv[4];
    T_EQ(stk__tf_feature_value(&s.f[1], iv, sizeof(iv), &size), 0);
    T_CHECK(size == 24 && iv[0] == 1 && iv[1] == -2 && iv[2] == 300);
    T_EQ(stk__tf_feature_value(&s.f[1], iv, 16, &size), 1);
    T_EQ(stk__tf_feature_value(&s.f[2], iv, sizeof(iv), &size), 0);
    T_CHECK(size == 32 && iv[0] == 7 && iv[1] == 1 && iv[2] == -2 && iv[3] == 300);
    float f2[2];
    T_EQ(stk__tf_feature_value(&s.f[3], f2, sizeof(f2), &size), 0);
    T_CHECK(size == 8 && f2[0] == 1.5f && f2[1] == -0.25f);
    T_EQ(stk__tf_feature_value(&s.f[4], f2, sizeof(f2), &size), 0);
    T_CHECK(size == 4 && f2[0] == -0.25f);

    /* every prefix of the message parses or fails cleanly (ASan checks the bounds) */
    for (size_t n = 0; n < ex.n; n++) {
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, ex.b, n);
        seen t = {0};
        int r = stk__tf_example_parse(copy, n, collect, &t, why, sizeof(why));
        T_CHECK(r == 0 || (r == -1 && strstr(why, " at byte ")));
        for (int k = 0; k < t.n; k++)
            (void)stk__tf_feature_value(&t.f[k], out, sizeof(out), &size);
        free(copy);
    }
    return 0;
}

static int test_example_malformed(void)
{
    static const struct {
        const char *bytes;
        size_t n;
        const char *why;
    } bad[] = {
        {"\x0a\x05\x0a\x03", 4, "overruns"},                                  /* length past end */
        {"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, "overruns"}, /* 11-byte varint */
        {"\x0b", 1, "groups are not supported"},                              /* wire type 3 */
        {"\x0e", 1, "invalid wire type"},                                     /* wire type 6 */
        {"\x00", 1, "field number 0"},
        {"\x08\x80", 2, "truncated varint"},
        {"\x09\x01\x02", 3, "truncated fixed-width"},
        {"\x0a\x08\x0a\x06\x12\x04\x12\x02\x08\x01", 10, "wrong wire type"}, /* varint float */
        {"\x0a\x08\x0a\x06\x12\x04\x12\x02\x0a\x01", 10, "overruns"},
        {"\x0a\x0b\x0a\x09\x12\x07\x12\x05\x0a\x03\x01\x02\x03", 13, "multiple of 4"},
        {"\x0a\x08\x0a\x06\x12\x04\x1a\x02\x0a\x01", 10, "overruns"},
        {"\x0a\x09\x0a\x07\x12\x05\x1a\x03\x0a\x01\x80", 11, "truncated varint in a packed"},
    };
    char why[128];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        seen s = {0};
        why[0] = '\0';
        int r = stk__tf_example_parse((const uint8_t *)bad[i].bytes, bad[i].n, collect, &s, why,
                                      sizeof(why));
        T_CHECKF(r == -1 && strstr(why, bad[i].why), "case %zu: r=%d why='%s' (want '%s')", i, r,
                 why, bad[i].why);
    }
    return 0;
}

/* ---- a file through stk_dataset_open ---- */

static void frame(FILE *f, const pb *data)
{
    uint8_t h[12];
    uint64_t n = data->n;
    for (int i = 0; i < 8; i++)
        h[i] = (uint8_t)(n >> (8 * i));
    uint32_t c = stk__crc32c_mask(stk__crc32c(0, h, 8));
    memcpy(h + 8, &c, 4); /* little-endian host (x86-64, aarch64) */
    fwrite(h, 1, 12, f);
    fwrite(data->b, 1, data->n, f);
    c = stk__crc32c_mask(stk__crc32c(0, data->b, data->n));
    fwrite(&c, 1, 4, f);
}

/* Five records {image/encoded: "imagebytes"[:5 + r], image/class/label: 10 r} at path; offs[r]:
 * each frame's offset. `swap`: record `swap` has its two features the other way round (the same
 * frame length, the image value elsewhere in it). */
/* The file's times, to put back after a change that models damage the reader cannot see in
 * the file's metadata (bits rotting on disk): a change that moves the modification time is a
 * rewrite, which reads refuse as "changed while open" before any checksum is looked at. */
static struct timespec g_times[2];
static bool g_have_times;

static void times_keep(const char *path)
{
    struct stat st;
    g_have_times = stat(path, &st) == 0;
    if (g_have_times) {
        g_times[0] = st.st_atim;
        g_times[1] = st.st_mtim;
    }
}

static void times_put_back(const char *path)
{
    if (g_have_times)
        utimensat(AT_FDCWD, path, g_times, 0);
}

static int write_five_swap(const char *path, long offs[5], int swap)
{
    times_keep(path);
    FILE *f = fopen(path, "wb");
    T_CHECK(f);
    for (int r = 0; r < 5; r++) {
        pb img = {0}, bl = {0}, lab = {0}, feats = {0}, ex = {0};
        put(&img, "imagebytes", 5 + (size_t)r);
        ld(&bl, 1, &img);
        varint(&lab, 1 << 3 | 0);
        varint(&lab, (uint64_t)(r * 10));
        if (r == swap)
            entry(&feats, "image/class/label", 3, &lab, false);
        entry(&feats, "image/encoded", 1, &bl, false);
        if (r != swap)
            entry(&feats, "image/class/label", 3, &lab, false);
        ld(&ex, 1, &feats);
        offs[r] = ftell(f);
        frame(f, &ex);
    }
    T_CHECK(fclose(f) == 0);
    times_put_back(path);
    return 0;
}

static int write_five(const char *path, long offs[5])
{
    return write_five_swap(path, offs, -1);
}

/* Flip the byte at `off` of the file; off < 0: the first byte of the first "imageb" (the image
 * value, not the key) at or after -off. */
static int flip_byte(const char *path, long off)
{
    times_keep(path);
    FILE *f = fopen(path, "r+b");
    T_CHECK(f);
    if (off < 0) {
        char buf[4096];
        size_t n = fread(buf, 1, sizeof(buf), f);
        const char *p = memmem(buf - off, n + (size_t)off, "imageb", 6);
        T_CHECK(-off < (long)n && p);
        off = (long)(p - buf);
    }
    T_CHECK(fseek(f, off, SEEK_SET) == 0);
    int c = fgetc(f);
    T_CHECK(c != EOF && fseek(f, off, SEEK_SET) == 0);
    fputc(c ^ 0x5a, f);
    T_CHECK(fclose(f) == 0);
    times_put_back(path);
    return 0;
}

/* A fresh temporary directory (dir: "/tmp/stk_tfrec_XXXXXX") holding a.tfrecord of write_five;
 * path and idx (256 and 300 bytes) receive the file's and its index's paths. */
static int five_in_tmpdir(char *dir, char *path, char *idx, long offs[5])
{
    T_CHECK(mkdtemp(dir));
    snprintf(path, 256, "%s/a.tfrecord", dir);
    snprintf(idx, 300, "%s.idx", path);
    T_CHECK(write_five(path, offs) == 0);
    return 0;
}

static int test_dataset_roundtrip_and_bad_crc(void)
{
    char dir[] = "/tmp/stk_tfrec_XXXXXX", path[256], idx[300];
    long offs[5];
    T_CHECK(five_in_tmpdir(dir, path, idx, offs) == 0);
    FILE *f;
    const char *paths[] = {path};
    stk_dataset *ds = NULL;
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "tfrecord") == 0);
    T_EQ(stk_dataset_n_records(ds), 5);
    T_EQ(stk_dataset_n_fields(ds), 2);
    T_CHECK(strcmp(stk_dataset_field(ds, 0)->name, "image/class/label") == 0);
    T_EQ(stk_dataset_field(ds, 0)->kind, STK_FIELD_INT64);
    T_EQ(stk_dataset_field(ds, 1)->kind, STK_FIELD_BYTES);
    uint8_t buf[256];
    stk_record rec;
    stk_record_init(&rec);
    char err[512];
    for (int r = 0; r < 5; r++) {
        T_OK(stk_dataset_read(ds, (uint64_t)r, buf, sizeof(buf), &rec));
        T_EQ(stk_record_i64(&rec, 0), r * 10);
        T_CHECK(rec.field_size[1] == 5 + (size_t)r && memcmp(rec.field[1], "imagebytes", 5) == 0);
    }
    stk_dataset_close(ds);
    FILE *ix = fopen(idx, "r");
    T_CHECK(ix); /* the scanned index, cached beside the file */
    long o, l;
    T_CHECK(fscanf(ix, "%ld %ld", &o, &l) == 2 && o == 0 && l == offs[1]);
    fclose(ix);

    /* flip a byte of record 3's data: its read names the file, record and offset */
    f = fopen(path, "r+b");
    T_CHECK(f);
    fseek(f, offs[3] + 14, SEEK_SET);
    fputc('X', f);
    fclose(f);
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    T_OK(stk_dataset_read(ds, 2, buf, sizeof(buf), &rec));
    T_EQ(stk_dataset_read(ds, 3, buf, sizeof(buf), &rec), STK_EFORMAT);
    snprintf(err, sizeof(err), "%s", stk_last_errmsg());
    char want[400];
    snprintf(want, sizeof(want), "%s record 3 (global 3) at byte %ld: data CRC mismatch", path,
             offs[3]);
    T_CHECKF(strstr(err, want), "got '%s'", err);
    stk_dataset_close(ds);
    unlink(idx);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* Each allocation of an open (index scan, schema) and of the reads failing in turn: STK_ENOMEM
 * saying "out of memory", never a crash or a leak (ASan), until every one has been tried. */
/* Read record i as the loader does (flags 0: checksums on first read), or with `flags`. */
static stk_status read_as_loader(const stk_dataset *ds, uint64_t i, unsigned flags, char *err,
                                 size_t err_size)
{
    uint8_t a[8], b[64];
    void *const dst[] = {a, b};
    const size_t cap[] = {sizeof(a), sizeof(b)};
    stk__recinfo info;
    stk_status rc = stk__dataset_read(ds, NULL, i, dst, cap, flags, &info, err, err_size);
    /* record i's values (the image's first byte flipped by some cases below: not compared) */
    int64_t label;
    memcpy(&label, a, 8);
    if (rc == STK_OK && (info.field_size[1] != 5 + i || memcmp(b + 1, "imagebytes" + 1, 4 + i) ||
                         label != (int64_t)(10 * i)))
        return stk__set_error(err, err_size, STK_EINVAL, "record %d: wrong values", (int)i);
    return rc;
}

/* The data CRC follows .stk's policy: checked on a record's first read, remembered, checked
 * again only when asked (STK__READ_VERIFY_ALL: stk_dataset_read and `stoker verify`), never
 * under STK_DATASET_NO_VERIFY; the length CRC on every read. */
static int test_crc_checked_on_first_read(void)
{
    char dir[] = "/tmp/stk_tfrec_XXXXXX", path[256], idx[300];
    long offs[5];
    T_CHECK(five_in_tmpdir(dir, path, idx, offs) == 0);
    const char *paths[] = {path};
    stk_dataset *ds = NULL, *nv = NULL;
    T_OK(stk_dataset_open(paths, 1, 0, &ds));
    T_OK(stk_dataset_open(paths, 1, STK_DATASET_NO_VERIFY, &nv));
    char err[512];
    T_OK(read_as_loader(ds, 3, 0, err, sizeof(err))); /* verified */
    T_CHECK(flip_byte(path, -offs[3]) == 0);          /* its image bytes, after the check */
    T_OK(read_as_loader(ds, 3, 0, err, sizeof(err)));
    T_EQ(read_as_loader(ds, 3, STK__READ_VERIFY_ALL, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "record 3 (global 3)") && strstr(err, "data CRC mismatch"), "%s", err);
    /* a record read for the first time after the damage: refused, every time */
    T_CHECK(flip_byte(path, -offs[4]) == 0);
    T_EQ(read_as_loader(ds, 4, 0, err, sizeof(err)), STK_EFORMAT);
    T_EQ(read_as_loader(ds, 4, 0, err, sizeof(err)), STK_EFORMAT);
    /* without verification the bytes are read as they are (the Example still parses) */
    T_OK(read_as_loader(nv, 4, 0, err, sizeof(err)));
    T_OK(read_as_loader(ds, 4, STK__READ_NO_VERIFY, err, sizeof(err)));
    /* a verified record whose image value is read straight into its row: its place in the frame
     * is checked (the same frame length, the features swapped: an error, not wrong bytes) */
    for (int k = 0; k < 3; k++)
        T_OK(read_as_loader(ds, 1, 0, err, sizeof(err)));
    T_CHECK(write_five_swap(path, offs, 1) == 0);
    T_OK(read_as_loader(ds, 1, 0, err, sizeof(err))); /* read again whole, checked, right values */
    T_OK(read_as_loader(ds, 1, 0, err, sizeof(err))); /* and in place at its new place */
    T_CHECK(write_five_swap(path, offs, 2) == 0);     /* the same, CRC damaged too */
    T_OK(read_as_loader(ds, 2, 0, err, sizeof(err)));
    T_OK(read_as_loader(ds, 2, 0, err, sizeof(err)));
    T_CHECK(write_five(path, offs) == 0);
    /* back to its first layout with one byte damaged: the in-place read misses, the whole read
     * finds the CRC wrong */
    T_CHECK(flip_byte(path, offs[2] + 12 + 40) == 0);
    T_EQ(read_as_loader(ds, 2, 0, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "record 2 (global 2)") && strstr(err, "data CRC mismatch"), "%s", err);
    T_CHECK(write_five(path, offs) == 0);
    T_CHECK(flip_byte(path, -offs[3]) == 0);
    /* the length CRC is checked on every read, verified or not */
    T_CHECK(flip_byte(path, offs[3] + 9) == 0);
    T_EQ(read_as_loader(ds, 3, 0, err, sizeof(err)), STK_EFORMAT);
    T_CHECKF(strstr(err, "length CRC mismatch"), "%s", err);
    T_EQ(read_as_loader(nv, 3, 0, err, sizeof(err)), STK_EFORMAT);
    stk_dataset_close(ds);
    stk_dataset_close(nv);
    unlink(idx);
    unlink(path);
    rmdir(dir);
    return 0;
}

static int test_alloc_failures_tfrecord(void)
{
#ifdef STK_DEBUG
    extern void stk__fault_alloc_set(long n);
    char dir[] = "/tmp/stk_tfoom_XXXXXX", path[256], idx[300];
    T_CHECK(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/o.tfrecord", dir);
    snprintf(idx, sizeof(idx), "%s.idx", path);
    FILE *f = fopen(path, "wb");
    T_CHECK(f);
    for (int r = 0; r < 3; r++) {
        pb img = {0}, bl = {0}, feats = {0}, ex = {0};
        put(&img, "abcdefgh", 3 + (size_t)r);
        ld(&bl, 1, &img);
        entry(&feats, "image/encoded", 1, &bl, false);
        ld(&ex, 1, &feats);
        frame(f, &ex);
    }
    T_CHECK(fclose(f) == 0);
    const char *paths[] = {path};
    int failures = 0, ok_in_a_row = 0;
    /* a failure in the index cache write is silent (the index stays in memory): done after a run
     * of successes longer than any such stretch */
    for (long k = 1; k < 1000 && ok_in_a_row < 20; k++) {
        unlink(idx); /* scan every time (the cache write may fail too: silently) */
        stk_dataset *ds = NULL;
        uint8_t buf[64];
        stk_record rec;
        stk_record_init(&rec);
        char err[512] = "";
        stk__fault_alloc_set(k);
        stk_status rc = stk_dataset_open(paths, 1, 0, &ds);
        if (rc != STK_OK)
            snprintf(err, sizeof(err), "%s", stk_last_errmsg());
        for (uint64_t i = 0; rc == STK_OK && i < 3; i++)
            if ((rc = stk_dataset_read(ds, i, buf, sizeof(buf), &rec)) != STK_OK)
                snprintf(err, sizeof(err), "%s", stk_last_errmsg());
        stk__fault_alloc_set(0);
        stk_dataset_close(ds);
        T_CHECKF(rc == STK_OK || (rc == STK_ENOMEM && strstr(err, "out of memory")),
                 "allocation %ld: rc %d (%s)", k, rc, err);
        failures += rc == STK_ENOMEM;
        ok_in_a_row = rc == STK_OK ? ok_in_a_row + 1 : 0;
    }
    T_CHECKF(ok_in_a_row == 20 && failures > 3, "%d failures, then %d successes", failures,
             ok_in_a_row);
    unlink(idx);
    unlink(path);
    rmdir(dir);
    return 0;
#else
    return T_SKIP;
#endif
}

T_MAIN(T_CASE(test_crc32c_vectors), T_CASE(test_crc32c_hw_matches_table),
       T_CASE(test_example_parse), T_CASE(test_example_malformed),
       T_CASE(test_dataset_roundtrip_and_bad_crc), T_CASE(test_crc_checked_on_first_read),
       T_CASE(test_alloc_failures_tfrecord))
