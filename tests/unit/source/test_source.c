/*
 * test_source.c: the record sources and the byte sources under them (src/source, src/io), each
 * fed data this file writes itself into temporary directories: format detection (magic bytes,
 * names, directory layouts, format= and its errors), path expansion (brace ranges, globs in byte
 * order, writers' temporary files), the ImageFolder source against torchvision's rules (order,
 * labels, skipped FIFOs, files changed after open), the npy source (dtypes, kinds, every refused
 * header), the .stk source's overlap check and a shard truncated while open (read error, no
 * SIGBUS), and the loader over an ImageFolder tree.
 */
#include "source/stk/stk_format.h"
#include "io/stk_vfs.h"
#include "source/stk_source.h"
#include "stk_internal.h"
#include "t.h"
#include "data/fixtures.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* A case that would block (a FIFO opened without O_NONBLOCK) is killed by SIGALRM instead of
 * hanging the suite. */
#define HANG_GUARD_S 60

/* ---- fixtures ---- */

/* mkdir -p of the directory part of dir/rel. */
static int make_parents(const char *dir, const char *rel)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    for (char *s = p + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return -1;
        *s = '/';
    }
    return 0;
}

/* Write n bytes to dir/rel (parents created), replacing it. */
static int put_file(const char *dir, const char *rel, const void *data, size_t n)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, rel);
    if (make_parents(dir, rel) != 0)
        return -1;
    FILE *f = fopen(p, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int open_fmt(const char *const *paths, size_t n, const char *format, stk_dataset **ds)
{
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    o.paths = paths;
    o.n_paths = n;
    o.format = format;
    return stk_dataset_open_v2(&o, ds);
}

static int open1(const char *path, const char *format, stk_dataset **ds)
{
    const char *paths[1] = {path};
    return open_fmt(paths, 1, format, ds);
}

/* Expect opening the paths to fail with `code` and a message holding each non-NULL want[]. */
static int expect_open_fail(const char *const *paths, size_t n, const char *format, int code,
                            const char *const want[3])
{
    stk_dataset *ds = (stk_dataset *)1;
    int rc = open_fmt(paths, n, format, &ds);
    const char *msg = stk_last_errmsg();
    T_CHECKF(rc == code, "%s: got %d (%s), want %d", paths[0], rc, msg, code);
    T_CHECK(ds == NULL);
    for (int i = 0; i < 3; i++)
        T_CHECKF(!want[i] || strstr(msg, want[i]), "message '%s' lacks '%s'", msg, want[i]);
    return 0;
}

#define EXPECT_OPEN_FAIL(paths, n, format, code, ...)                                              \
    T_CHECK(expect_open_fail(paths, n, format, code, (const char *const[3]){__VA_ARGS__}) == 0)

/* Record i of the test shards: `size` bytes, byte k = (i * 31 + k) & 255; label i * 3. */
static void payload(uint64_t i, uint8_t *buf, size_t size)
{
    for (size_t k = 0; k < size; k++)
        buf[k] = (uint8_t)(i * 31 + k);
}

/* A shard of records first..first+n-1, each `size` payload bytes, at `path`. */
static int write_shard(const char *path, uint64_t first, uint64_t n, size_t size)
{
    stk_writer *w;
    T_OK(fx_shard_open(path, &w));
    uint8_t buf[4096];
    T_CHECK(size <= sizeof(buf));
    for (uint64_t i = first; i < first + n; i++) {
        payload(i, buf, size);
        stk_value v[2] = {{.struct_size = sizeof(stk_value), .data = buf, .size = size},
                          {.struct_size = sizeof(stk_value), .i64 = (int64_t)i * 3}};
        T_OK(stk_writer_add(w, v));
    }
    T_OK(stk_writer_close(w));
    return 0;
}

/* A .npy file (format 1.0): the dict padded with spaces so that the data starts at a multiple of
 * 64, ending with a newline, as numpy writes it. */
static int write_npy(const char *path, const char *descr, bool fortran, const char *shape,
                     const void *data, size_t size)
{
    char dict[256], pre[10] = "\x93NUMPY\x01\x00";
    int k = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                     descr, fortran ? "True" : "False", shape);
    size_t hlen = (size_t)k + 1;
    hlen += (64 - (10 + hlen) % 64) % 64;
    T_CHECK(hlen < sizeof(dict));
    memset(dict + k, ' ', hlen - (size_t)k);
    dict[hlen - 1] = '\n';
    pre[8] = (char)(hlen & 255);
    pre[9] = (char)(hlen >> 8);
    FILE *f = fopen(path, "wb");
    T_CHECK(f != NULL);
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(dict, 1, hlen, f) == hlen &&
              (size == 0 || fwrite(data, 1, size, f) == size);
    T_CHECK(fclose(f) == 0 && ok);
    return 0;
}

/* ---- detection ---- */

static int test_detect_stk(void)
{
    const char *dir = fx_tmpdir("source");
    char bin[256], shards[256], p[512];
    snprintf(bin, sizeof(bin), "%s/data.bin", dir);
    T_CHECK(write_shard(bin, 0, 3, 10) == 0);
    stk_dataset *ds;
    T_OK(open1(bin, NULL, &ds)); /* by magic: the name says nothing */
    T_CHECK(strcmp(stk_dataset_format(ds), "stk") == 0);
    T_EQ(stk_dataset_n_records(ds), 3);
    stk_dataset_close(ds);

    snprintf(shards, sizeof(shards), "%s/shards", dir);
    T_CHECK(mkdir(shards, 0755) == 0);
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof(p), "%s/part-%d.stk", shards, s);
        T_CHECK(write_shard(p, (uint64_t)s * 4, 4, 10) == 0);
    }
    T_OK(open1(shards, NULL, &ds)); /* a directory of shards */
    T_CHECK(strcmp(stk_dataset_format(ds), "stk") == 0);
    T_EQ(stk_dataset_n_shards(ds), 2);
    T_EQ(stk_dataset_n_records(ds), 8);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_detect_folder_and_npy(void)
{
    const char *dir = fx_tmpdir("source");
    char tree[256], npys[256], one[512];
    snprintf(tree, sizeof(tree), "%s/tree", dir);
    T_CHECK(put_file(tree, "cat/1.jpg", "abc", 3) == 0);
    T_CHECK(put_file(tree, "dog/2.png", "defg", 4) == 0);
    stk_dataset *ds;
    T_OK(open1(tree, NULL, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "imagefolder") == 0);
    T_EQ(stk_dataset_n_records(ds), 2);
    stk_dataset_close(ds);

    snprintf(npys, sizeof(npys), "%s/arrays", dir);
    T_CHECK(mkdir(npys, 0755) == 0);
    int64_t lab[4] = {4, 3, 2, 1};
    float x[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    snprintf(one, sizeof(one), "%s/label.npy", npys);
    T_CHECK(write_npy(one, "<i8", false, "(4,)", lab, sizeof(lab)) == 0);
    snprintf(one, sizeof(one), "%s/x.npy", npys);
    T_CHECK(write_npy(one, "<f4", false, "(4,)", x, sizeof(x)) == 0);
    T_OK(open1(npys, NULL, &ds)); /* a directory of .npy files */
    T_CHECK(strcmp(stk_dataset_format(ds), "npy") == 0);
    T_EQ(stk_dataset_n_fields(ds), 2);
    stk_dataset_close(ds);
    T_OK(open1(one, NULL, &ds)); /* one .npy file */
    T_CHECK(strcmp(stk_dataset_format(ds), "npy") == 0);
    T_EQ(stk_dataset_n_fields(ds), 1);
    T_EQ(stk_dataset_n_records(ds), 4);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_detect_errors(void)
{
    const char *dir = fx_tmpdir("source");
    char txt[512], shard[512], npy[512];
    snprintf(txt, sizeof(txt), "%s/notes.txt", dir);
    T_CHECK(put_file(dir, "notes.txt", "hello, world\n", 13) == 0);
    const char *p1[] = {txt};
    /* every format by name, whatever their number (the list once held descriptions too and
     * outgrew the message) */
    EXPECT_OPEN_FAIL(p1, 1, NULL, STK_EINVAL, txt, "unknown format (stoker reads: stk, ",
                     "imagefolder; docs/formats.md");
    EXPECT_OPEN_FAIL(p1, 1, NULL, STK_EINVAL, "npy, ");

    snprintf(shard, sizeof(shard), "%s/a.stk", dir);
    snprintf(npy, sizeof(npy), "%s/b.npy", dir);
    T_CHECK(write_shard(shard, 0, 2, 8) == 0);
    int64_t v[2] = {1, 2};
    T_CHECK(write_npy(npy, "<i8", false, "(2,)", v, sizeof(v)) == 0);
    const char *mixed[] = {shard, npy};
    char a_is[600], b_is[600];
    snprintf(a_is, sizeof(a_is), "%s is stk", shard);
    snprintf(b_is, sizeof(b_is), "%s is npy", npy);
    EXPECT_OPEN_FAIL(mixed, 2, NULL, STK_EINVAL, a_is, b_is, "must be of one format");

    EXPECT_OPEN_FAIL(p1, 1, "parquet", STK_EINVAL, "unknown format 'parquet' (stoker reads: stk, ",
                     "imagefolder)", "npy, ");
    fx_rmtree(dir);
    return 0;
}

/* A directory holding a shard and class subfolders is both a directory of shards and an
 * ImageFolder tree: detection prefers stk (the earlier source), format= chooses. */
static int test_format_override(void)
{
    const char *dir = fx_tmpdir("source");
    char shard[512];
    snprintf(shard, sizeof(shard), "%s/extra.stk", dir);
    T_CHECK(write_shard(shard, 0, 5, 8) == 0);
    T_CHECK(put_file(dir, "cls/1.jpg", "x", 1) == 0);
    stk_dataset *ds;
    T_OK(open1(dir, NULL, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "stk") == 0);
    T_EQ(stk_dataset_n_records(ds), 5);
    stk_dataset_close(ds);
    T_OK(open1(dir, "imagefolder", &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "imagefolder") == 0);
    T_EQ(stk_dataset_n_records(ds), 1);
    T_EQ(stk_dataset_n_fields(ds), 3);
    stk_dataset_close(ds);
    /* format= still validates: a shard is not a directory of classes */
    const char *p[] = {shard};
    EXPECT_OPEN_FAIL(p, 1, "imagefolder", STK_EINVAL, shard, "not a directory", NULL);
    fx_rmtree(dir);
    return 0;
}

static int test_format_names(void)
{
    static const char *const want[] = {"stk", "imagefolder", "npy"};
    size_t n = stk_n_formats();
    T_CHECK(n >= 3);
    for (size_t w = 0; w < 3; w++) { /* each once, in whatever detection order */
        int seen = 0;
        for (size_t i = 0; i < n; i++)
            seen += strcmp(stk_format_name(i), want[w]) == 0;
        T_CHECKF(seen == 1, "format %s listed %d times", want[w], seen);
    }
    for (size_t i = 0; i < n; i++) {
        T_CHECK(stk_format_name(i) && *stk_format_name(i));
        for (size_t j = 0; j < i; j++)
            T_CHECK(strcmp(stk_format_name(i), stk_format_name(j)) != 0);
    }
    T_CHECK(stk_format_name(n) == NULL);
    T_CHECK(stk_format_name((size_t)-1) == NULL);
    return 0;
}

/* A FIFO is never opened for reading (open would block until a writer came): given directly it
 * is refused as not a regular file. */
static int test_fifo_path(void)
{
    const char *dir = fx_tmpdir("source");
    char fifo[512];
    snprintf(fifo, sizeof(fifo), "%s/pipe.stk", dir);
    T_CHECK(mkfifo(fifo, 0644) == 0);
    alarm(HANG_GUARD_S);
    const char *p[] = {fifo};
    EXPECT_OPEN_FAIL(p, 1, NULL, STK_EIO, fifo, "not a regular file", NULL);
    EXPECT_OPEN_FAIL(p, 1, "npy", STK_EIO, fifo, "not a regular file", NULL);
    alarm(0);
    fx_rmtree(dir);
    return 0;
}

/* ---- path expansion ---- */

static int test_brace_range(void)
{
    const char *dir = fx_tmpdir("source");
    char p[512], pattern[512], err[STK_ERRMSG_SIZE];
    for (int s = 0; s < 3; s++) { /* shard s holds s + 1 records */
        snprintf(p, sizeof(p), "%s/s-%02d.stk", dir, s);
        T_CHECK(write_shard(p, 0, (uint64_t)s + 1, 8) == 0);
    }
    snprintf(pattern, sizeof(pattern), "%s/s-{00..02}.stk", dir);
    const char *args[] = {pattern};
    stk__strlist out = {0};
    T_OK(stk__paths_expand(args, 1, &out, err, sizeof(err)));
    T_EQ(out.n, 3);
    for (int s = 0; s < 3; s++) {
        snprintf(p, sizeof(p), "%s/s-%02d.stk", dir, s);
        T_CHECKF(strcmp(out.v[s], p) == 0, "%s != %s", out.v[s], p);
    }
    stk__strlist_free(&out);

    stk_dataset *ds;
    T_OK(open1(pattern, NULL, &ds));
    T_EQ(stk_dataset_n_shards(ds), 3);
    T_EQ(stk_dataset_n_records(ds), 1 + 2 + 3);
    for (int s = 0; s < 3; s++) {
        stk_shard_info si = {.struct_size = sizeof(si)};
        T_OK(stk_dataset_shard(ds, (size_t)s, &si));
        snprintf(p, sizeof(p), "%s/s-%02d.stk", dir, s);
        T_CHECK(strcmp(si.path, p) == 0);
        T_EQ(si.n_records, s + 1);
    }
    stk_dataset_close(ds);

    /* one name of the range is missing: the error names it */
    snprintf(pattern, sizeof(pattern), "%s/s-{00..03}.stk", dir);
    snprintf(p, sizeof(p), "%s/s-03.stk", dir);
    const char *missing[] = {pattern};
    EXPECT_OPEN_FAIL(missing, 1, NULL, STK_EIO, p, NULL, NULL);
    fx_rmtree(dir);
    return 0;
}

static int test_glob_byte_order(void)
{
    /* a collating locale would sort these case-insensitively; byte order is wanted whatever the
     * locale (try one that differs; the C locale is the fallback) */
    char *old = stk__strdup(setlocale(LC_COLLATE, NULL));
    if (!setlocale(LC_COLLATE, "en_US.UTF-8"))
        setlocale(LC_COLLATE, "C.UTF-8");
    static const char *const sorted[] = {"A1.stk", "B.stk", "_.stk", "a.stk", "b.stk"};
    static const int create_order[] = {3, 1, 4, 0, 2};
    const char *dir = fx_tmpdir("source");
    char p[512], pattern[512], err[STK_ERRMSG_SIZE];
    for (int k = 0; k < 5; k++) {
        int s = create_order[k];
        snprintf(p, sizeof(p), "%s/%s", dir, sorted[s]);
        T_CHECK(write_shard(p, 0, (uint64_t)s + 1, 8) == 0);
    }
    snprintf(pattern, sizeof(pattern), "%s/*.stk", dir);
    const char *args[] = {pattern};
    stk__strlist out = {0};
    T_OK(stk__paths_expand(args, 1, &out, err, sizeof(err)));
    T_EQ(out.n, 5);
    for (int s = 0; s < 5; s++) {
        snprintf(p, sizeof(p), "%s/%s", dir, sorted[s]);
        T_CHECKF(strcmp(out.v[s], p) == 0, "match %d is %s, want %s", s, out.v[s], p);
    }
    stk__strlist_free(&out);
    stk_dataset *ds;
    T_OK(open1(pattern, NULL, &ds));
    T_EQ(stk_dataset_n_shards(ds), 5);
    for (int s = 0; s < 5; s++) { /* record numbers follow the sorted paths */
        stk_shard_info si = {.struct_size = sizeof(si)};
        T_OK(stk_dataset_shard(ds, (size_t)s, &si));
        T_EQ(si.n_records, s + 1);
    }
    stk_dataset_close(ds);
    setlocale(LC_COLLATE, old ? old : "C");
    stk__free(old);
    fx_rmtree(dir);
    return 0;
}

static int test_own_files_ignored(void)
{
    const char *dir = fx_tmpdir("source");
    char p[512], pattern[512], err[STK_ERRMSG_SIZE];
    snprintf(p, sizeof(p), "%s/s-00.stk", dir);
    T_CHECK(write_shard(p, 0, 4, 8) == 0);
    /* a writer's leftover: garbage that would fail to open if it were taken for a shard */
    T_CHECK(put_file(dir, "s-01.stk.tmp.4242.0", "STOKER\0\1partial", 15) == 0);
    /* indexes a loader keeps beside the data: never data either, so "s-*" matches the same files
     * before and after a loader wrote them (a format would refuse them) */
    T_CHECK(put_file(dir, "s-00.stk.stkvidx", "STKPTAB1", 8) == 0);
    T_CHECK(put_file(dir, "s-02.tar.stkidx", "STKTIDX1", 8) == 0);
    snprintf(pattern, sizeof(pattern), "%s/s-*", dir);
    const char *args[] = {pattern};
    stk__strlist out = {0};
    T_OK(stk__paths_expand(args, 1, &out, err, sizeof(err)));
    T_EQ(out.n, 1);
    T_CHECK(strcmp(out.v[0], p) == 0);
    stk__strlist_free(&out);
    T_OK(stk__paths_list_dir(dir, NULL, false, &out, err, sizeof(err)));
    T_EQ(out.n, 1);
    T_CHECK(strcmp(out.v[0], p) == 0);
    stk__strlist_free(&out);
    stk_dataset *ds;
    T_OK(open1(pattern, NULL, &ds));
    T_EQ(stk_dataset_n_records(ds), 4);
    stk_dataset_close(ds);
    T_OK(open1(dir, NULL, &ds));
    T_EQ(stk_dataset_n_shards(ds), 1);
    stk_dataset_close(ds);

    snprintf(pattern, sizeof(pattern), "%s/s-01*", dir); /* matches only the temporary file */
    const char *only_tmp[] = {pattern};
    EXPECT_OPEN_FAIL(only_tmp, 1, NULL, STK_EIO, pattern, "only stoker's temporary or index files",
                     NULL);
    snprintf(pattern, sizeof(pattern), "%s/*.stk?*", dir); /* matches only the two indexes */
    const char *only_idx[] = {pattern};
    EXPECT_OPEN_FAIL(only_idx, 1, NULL, STK_EIO, pattern, "only stoker's temporary or index files",
                     NULL);
    fx_rmtree(dir);
    return 0;
}

/* A directory stands for its files with the format's suffixes: several suffixes merged into one
 * byte-ordered list, other names and temporary files left out, none an error naming the
 * directory and what was looked for. */
static int test_dir_files(void)
{
    const char *dir = fx_tmpdir("source");
    char err[STK_ERRMSG_SIZE], sub[512];
    const char *const names[] = {"b.tfrecords", "a.tfrecord", "C.tfrecord", "x.txt",
                                 "c.tfrecord.tmp.1.0"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        T_CHECK(put_file(dir, names[i], "x", 1) == 0);
    const char *const suf[] = {".tfrecord", ".tfrecords", NULL}, *const none[] = {".tar", NULL};
    stk__strlist out = {0};
    T_OK(stk__paths_dir_files(dir, suf, "TFRecord files", false, &out, err, sizeof(err)));
    T_EQ(out.n, 3);
    const char *const want[] = {"C.tfrecord", "a.tfrecord", "b.tfrecords"};
    for (size_t i = 0; i < 3; i++)
        T_CHECKF(strcmp(strrchr(out.v[i], '/') + 1, want[i]) == 0, "%s", out.v[i]);
    T_EQ(stk__paths_dir_has(dir, suf), 1);
    T_EQ(stk__paths_dir_has(dir, none), 0);
    T_EQ(stk__paths_dir_files(dir, none, ".tar shards", false, &out, err, sizeof(err)), STK_EINVAL);
    T_EQ(out.n, 3);
    T_CHECKF(strstr(err, dir) && strstr(err, "no .tar shards in this directory"), "%s", err);
    stk__strlist_free(&out);
    /* a list of arguments: a file kept as given, a directory replaced by its files */
    snprintf(sub, sizeof(sub), "%s/x.txt", dir);
    const char *args[] = {sub, dir};
    T_OK(stk__paths_files(args, 2, suf, "TFRecord files", &out, err, sizeof(err)));
    T_EQ(out.n, 4);
    T_CHECK(strcmp(out.v[0], sub) == 0);
    stk__strlist_free(&out);
    fx_rmtree(dir);
    return 0;
}

/* ---- ImageFolder ---- */

/* The test tree: classes Bee, ant, cat (byte order: upper case first); "ant" nests directories
 * whose names sort differently as full paths than depth first ("a b" < "a-b" < "a/b" < "a0");
 * upper-case extensions count, .txt/.gif and files at the root do not. */
static const char *const tree_files[] = {
    "Bee/b.jpg",      "Bee/A.PNG",     "Bee/notes.txt", "Bee/c.jpeg",    "ant/x.jpg",
    "ant/a/z.jpg",    "ant/a/b/y.jpg", "ant/a b/v.png", "ant/a-b/w.jpg", "ant/a0/u.JPG",
    "ant/a0/t.jpeg~", "cat/c1.webp",   "cat/B.tiff",    "cat/anim.gif",  "cat/deep/1/2/3.bmp",
    "root.jpg",       "README.txt",
};
#define N_TREE (sizeof(tree_files) / sizeof(tree_files[0]))
static const char *const tree_classes[] = {"Bee", "ant", "cat"};

/* Content of the file at rel: 5 + (hash % 300) bytes derived from the name. */
static size_t content_of(const char *rel, uint8_t *buf)
{
    uint32_t h = 2166136261u;
    for (const char *s = rel; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    size_t n = 5 + h % 300;
    for (size_t k = 0; k < n; k++)
        buf[k] = (uint8_t)(h >> (k % 4 * 8)) ^ (uint8_t)k;
    return n;
}

static int put_content(const char *root, const char *rel)
{
    uint8_t buf[512];
    return put_file(root, rel, buf, content_of(rel, buf));
}

/* torchvision's IMG_EXTENSIONS test: the lower-cased name ends with one of them. */
static bool is_image(const char *name)
{
    static const char *const ext[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
        size_t e = strlen(ext[i]);
        if (n >= e && strcasecmp(name + n - e, ext[i]) == 0)
            return true;
    }
    return false;
}

/* The torchvision order of two paths "class/dirs.../file": classes sorted; inside a class,
 * sorted(os.walk()) orders by the directory's path, then sorted(fnames) by the name. */
static int cmp_torchvision(const void *pa, const void *pb)
{
    const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
    size_t ca = strcspn(a, "/"), cb = strcspn(b, "/");
    int c = strncmp(a, b, ca < cb ? ca : cb);
    if (c || ca != cb)
        return c ? c : ca < cb ? -1 : 1;
    size_t da = (size_t)(strrchr(a, '/') - a), db = (size_t)(strrchr(b, '/') - b);
    c = strncmp(a, b, da < db ? da : db);
    if (c || da != db)
        return c ? c : da < db ? -1 : 1;
    return strcmp(a + da + 1, b + db + 1);
}

/* The expected records of a tree made of `files`: images inside a class folder, in torchvision's
 * order; returns how many. */
static size_t expected_order(const char *const *files, size_t n, const char **out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(files[i], '/') && is_image(files[i]))
            out[k++] = files[i];
    qsort(out, k, sizeof(*out), cmp_torchvision);
    return k;
}

/* Label of rel: the position of its class among `classes`. */
static int64_t label_of(const char *rel, const char *const *classes, size_t n_classes)
{
    size_t len = strcspn(rel, "/");
    for (size_t c = 0; c < n_classes; c++)
        if (strlen(classes[c]) == len && strncmp(rel, classes[c], len) == 0)
            return (int64_t)c;
    return -1;
}

/* Check record i of an ImageFolder dataset rooted at root: path rel, its label and bytes. */
static int check_folder_record(const stk_dataset *ds, const char *root, uint64_t i, const char *rel,
                               int64_t label)
{
    uint8_t buf[2048], want[512];
    char where[1024], want_where[1024];
    stk_record r;
    stk_record_init(&r);
    int rc = stk_dataset_read(ds, i, buf, sizeof(buf), &r);
    T_CHECKF(rc == STK_OK, "record %llu: %s", (unsigned long long)i, stk_last_errmsg());
    T_CHECKF(r.field_size[2] == strlen(rel) && memcmp(r.field[2], rel, strlen(rel)) == 0,
             "record %llu is %.*s, want %s", (unsigned long long)i, (int)r.field_size[2],
             (const char *)r.field[2], rel);
    T_EQ(stk_record_i64(&r, 1), label);
    size_t n = content_of(rel, want);
    T_EQ(r.field_size[0], n);
    T_CHECK(memcmp(r.field[0], want, n) == 0);
    T_OK(stk_dataset_describe(ds, i, where, sizeof(where)));
    snprintf(want_where, sizeof(want_where), "%s/%s (record %llu)", root, rel,
             (unsigned long long)i);
    T_CHECKF(strcmp(where, want_where) == 0, "'%s' != '%s'", where, want_where);
    return 0;
}

static int test_folder_tree(void)
{
    const char *dir = fx_tmpdir("source");
    char root[512], p[600];
    snprintf(root, sizeof(root), "%s/train", dir);
    for (size_t i = 0; i < N_TREE; i++)
        T_CHECK(put_content(root, tree_files[i]) == 0);
    /* a FIFO named like an image (opening it would block) and a symlink back to its class */
    snprintf(p, sizeof(p), "%s/cat/zz.jpg", root);
    T_CHECK(mkfifo(p, 0644) == 0);
    snprintf(p, sizeof(p), "%s/cat/loop", root);
    T_CHECK(symlink(".", p) == 0);
    const char *order[N_TREE];
    size_t n = expected_order(tree_files, N_TREE, order);
    T_EQ(n, 12);
    /* the rule's point: a sibling directory "a-b" comes before the nested "a/b" */
    T_CHECK(strcmp(order[6], "ant/a-b/w.jpg") == 0 && strcmp(order[7], "ant/a/b/y.jpg") == 0);

    alarm(HANG_GUARD_S);
    stk_dataset *ds;
    T_OK(open1(root, NULL, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "imagefolder") == 0);
    T_EQ(stk_dataset_n_records(ds), n);
    T_EQ(stk_dataset_n_fields(ds), 3);
    static const char *const names[3] = {"image", "label", "path"};
    static const stk_field_kind kinds[3] = {STK_FIELD_BYTES, STK_FIELD_INT64, STK_FIELD_BYTES};
    for (size_t f = 0; f < 3; f++) {
        T_CHECK(strcmp(stk_dataset_field(ds, f)->name, names[f]) == 0);
        T_EQ(stk_dataset_field(ds, f)->kind, kinds[f]);
    }
    for (size_t i = 0; i < n; i++)
        T_CHECK(check_folder_record(ds, root, i, order[i], label_of(order[i], tree_classes, 3)) ==
                0);
    stk_shard_info si = {.struct_size = sizeof(si)};
    T_EQ(stk_dataset_n_shards(ds), 1);
    T_OK(stk_dataset_shard(ds, 0, &si));
    T_CHECK(strcmp(si.path, root) == 0);
    T_EQ(si.n_records, n);
    T_CHECKF(strstr(si.metadata, "\"classes\": [\"Bee\", \"ant\", \"cat\"]") &&
                 strstr(si.metadata, "\"skipped\": [\"cat/zz.jpg\"]") &&
                 strstr(si.metadata, "\"n_skipped\": 1"),
             "metadata %s", si.metadata);
    stk_dataset_close(ds);
    /* the root given with a trailing slash: the same records, described the same way */
    snprintf(p, sizeof(p), "%s/", root);
    T_OK(open1(p, NULL, &ds));
    T_EQ(stk_dataset_n_records(ds), n);
    T_CHECK(check_folder_record(ds, root, 4, order[4], 1) == 0);
    alarm(0);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

static int test_folder_empty_class(void)
{
    const char *dir = fx_tmpdir("source");
    T_CHECK(put_content(dir, "a/1.jpg") == 0);
    T_CHECK(put_content(dir, "empty/notes.txt") == 0);
    T_CHECK(put_content(dir, "empty/sub/x.gif") == 0);
    char want[600];
    snprintf(want, sizeof(want), "class folder 'empty' in %s contains no images", dir);
    const char *p[] = {dir};
    EXPECT_OPEN_FAIL(p, 1, NULL, STK_EINVAL, want, NULL, NULL);
    EXPECT_OPEN_FAIL(p, 1, "imagefolder", STK_EINVAL, want, NULL, NULL);
    fx_rmtree(dir);
    return 0;
}

static int test_folder_changed_and_fingerprint(void)
{
    const char *dir = fx_tmpdir("source");
    static const char *const files[] = {"x/1.jpg", "x/2.jpg", "y/3.png"};
    for (size_t i = 0; i < 3; i++)
        T_CHECK(put_content(dir, files[i]) == 0);
    stk_dataset *ds, *again, *changed;
    T_OK(open1(dir, NULL, &ds));
    T_OK(open1(dir, NULL, &again));
    T_CHECK(stk_dataset_fingerprint(ds) != 0);
    T_EQ(stk_dataset_fingerprint(ds), stk_dataset_fingerprint(again));
    stk_dataset_close(again);

    /* x/2.jpg (record 1) rewritten with another size after open */
    uint8_t buf[2048];
    size_t old = content_of("x/2.jpg", buf);
    memset(buf, 7, sizeof(buf));
    T_CHECK(put_file(dir, "x/2.jpg", buf, old + 10) == 0);
    stk_record r;
    stk_record_init(&r);
    char want[600];
    T_CHECK(check_folder_record(ds, dir, 0, "x/1.jpg", 0) == 0);
    int rc = stk_dataset_read(ds, 1, buf, sizeof(buf), &r);
    T_EQ(rc, STK_EFORMAT);
    const char *err = stk_last_errmsg();
    snprintf(want, sizeof(want),
             "%s/x/2.jpg (record 1): changed since the dataset was opened (size %zu -> %zu)", dir,
             old, old + 10);
    T_CHECKF(strcmp(err, want) == 0, "'%s' != '%s'", err, want);
    stk__recinfo info; /* the same failure without a message buffer */
    T_EQ(stk__dataset_locate(ds, 1, &info, NULL, 0), STK_EFORMAT);
    T_CHECK(check_folder_record(ds, dir, 2, "y/3.png", 1) == 0);

    T_OK(open1(dir, NULL, &changed));
    T_CHECK(stk_dataset_fingerprint(changed) != stk_dataset_fingerprint(ds));
    stk_dataset_close(changed);
    /* a new file changes it too */
    T_CHECK(put_content(dir, "y/4.png") == 0);
    T_OK(open1(dir, NULL, &again));
    T_EQ(stk_dataset_n_records(again), 4);
    T_CHECK(stk_dataset_fingerprint(again) != stk_dataset_fingerprint(ds));
    stk_dataset_close(again);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* ---- npy ---- */

#define NPY_N 5

static int test_npy_fields(void)
{
    const char *dir = fx_tmpdir("source");
    char p[512];
    uint8_t img[NPY_N][4][4][3];
    int64_t label[NPY_N];
    float score[NPY_N];
    int32_t w[NPY_N];
    for (int i = 0; i < NPY_N; i++) {
        for (size_t k = 0; k < 48; k++)
            ((uint8_t *)img[i])[k] = (uint8_t)(i * 48 + k);
        label[i] = (int64_t)i * 1000 - 2;
        score[i] = 0.25f * (float)i - 1.0f;
        w[i] = -7 * i;
    }
    snprintf(p, sizeof(p), "%s/img.npy", dir);
    T_CHECK(write_npy(p, "|u1", false, "(5, 4, 4, 3)", img, sizeof(img)) == 0);
    snprintf(p, sizeof(p), "%s/label.npy", dir);
    T_CHECK(write_npy(p, "<i8", false, "(5,)", label, sizeof(label)) == 0);
    snprintf(p, sizeof(p), "%s/score.npy", dir);
    T_CHECK(write_npy(p, "<f4", false, "(5,)", score, sizeof(score)) == 0);
    snprintf(p, sizeof(p), "%s/w.npy", dir);
    T_CHECK(write_npy(p, "<i4", false, "(5,)", w, sizeof(w)) == 0);
    T_CHECK(put_file(dir, "README.txt", "not a field", 11) == 0);

    stk_dataset *ds;
    T_OK(open1(dir, NULL, &ds));
    T_CHECK(strcmp(stk_dataset_format(ds), "npy") == 0);
    T_EQ(stk_dataset_n_records(ds), NPY_N);
    T_EQ(stk_dataset_n_fields(ds), 4); /* one per file, in name order */
    const stk_field *f = stk_dataset_field(ds, 0);
    T_CHECK(strcmp(f->name, "img") == 0);
    T_EQ(f->kind, STK_FIELD_ARRAY);
    T_EQ(f->dtype, STK_DTYPE_UINT8);
    T_EQ(f->ndim, 3);
    T_CHECK(f->shape[0] == 4 && f->shape[1] == 4 && f->shape[2] == 3);
    f = stk_dataset_field(ds, 1);
    T_CHECK(strcmp(f->name, "label") == 0);
    T_EQ(f->kind, STK_FIELD_INT64);
    f = stk_dataset_field(ds, 2);
    T_CHECK(strcmp(f->name, "score") == 0);
    T_EQ(f->kind, STK_FIELD_FLOAT32);
    f = stk_dataset_field(ds, 3);
    T_CHECK(strcmp(f->name, "w") == 0);
    T_EQ(f->kind, STK_FIELD_ARRAY);
    T_EQ(f->dtype, STK_DTYPE_INT32);
    T_EQ(f->ndim, 1);
    T_EQ(f->shape[0], 1);
    static const uint64_t row[4] = {48, 8, 4, 4};
    for (size_t k = 0; k < 4; k++)
        T_EQ(stk_dataset_field_max_size(ds, k), row[k]);
    T_EQ(stk_dataset_max_record_size(ds), 64);
    T_EQ(stk_dataset_n_shards(ds), 4);
    for (int i = 0; i < NPY_N; i++) {
        uint8_t buf[64];
        stk_record r;
        stk_record_init(&r);
        T_OK(stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r));
        T_EQ(r.size, 64);
        T_EQ(r.field_size[0], 48);
        T_CHECK(memcmp(r.field[0], img[i], 48) == 0);
        T_EQ(stk_record_i64(&r, 1), label[i]);
        T_CHECK(stk_record_f32(&r, 2) == score[i]);
        int32_t wv;
        T_EQ(r.field_size[3], 4);
        memcpy(&wv, r.field[3], 4);
        T_EQ(wv, w[i]);
    }
    char where[600], want[600];
    T_OK(stk_dataset_describe(ds, 3, where, sizeof(where)));
    snprintf(want, sizeof(want), "%s/img.npy row 3 at byte %d", dir, 128 + 3 * 48);
    T_CHECKF(strcmp(where, want) == 0, "'%s' != '%s'", where, want);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* The dict form from C: stk_dataset_opts.field_names names each file's field; a pattern must
 * name one file; formats that read no named files refuse names. */
static int test_npy_named_fields(void)
{
    const char *dir = fx_tmpdir("source");
    char a[256], b[256], pat[256], shard[256];
    int64_t v[4] = {10, 11, 12, 13};
    float x[4] = {0.5f, 1.5f, 2.5f, 3.5f};
    snprintf(a, sizeof(a), "%s/values-a.npy", dir);
    snprintf(b, sizeof(b), "%s/values-b.npy", dir);
    T_CHECK(write_npy(a, "<i8", false, "(4,)", v, sizeof(v)) == 0);
    T_CHECK(write_npy(b, "<f4", false, "(4,)", x, sizeof(x)) == 0);
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    const char *paths[] = {b, a}, *names[] = {"score", "label"};
    o.paths = paths;
    o.n_paths = 2;
    o.field_names = names;
    stk_dataset *ds;
    T_OK(stk_dataset_open_v2(&o, &ds));
    T_EQ(stk_dataset_n_records(ds), 4);
    T_CHECK(strcmp(stk_dataset_field(ds, 0)->name, "score") == 0); /* the caller's order */
    T_CHECK(strcmp(stk_dataset_field(ds, 1)->name, "label") == 0);
    uint8_t buf[64];
    stk_record r;
    stk_record_init(&r);
    T_OK(stk_dataset_read(ds, 2, buf, sizeof(buf), &r));
    T_CHECK(stk_record_f32(&r, 0) == 2.5f);
    T_EQ(stk_record_i64(&r, 1), 12);
    stk_dataset_close(ds);

    snprintf(pat, sizeof(pat), "%s/values-*.npy", dir);
    const char *glob2[] = {pat}, *one[] = {"v"};
    o.paths = glob2;
    o.n_paths = 1;
    o.field_names = one;
    ds = (stk_dataset *)1;
    T_EQ(stk_dataset_open_v2(&o, &ds), STK_EINVAL);
    T_CHECK(ds == NULL);
    T_CHECKF(strstr(stk_last_errmsg(), "field 'v'") && strstr(stk_last_errmsg(), "names 2 files"),
             "%s", stk_last_errmsg());
    const char *empty[] = {""}, *dirs[] = {dir};
    o.field_names = empty;
    o.paths = paths;
    T_EQ(stk_dataset_open_v2(&o, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "has no name"), "%s", stk_last_errmsg());
    o.field_names = one;
    o.paths = dirs;
    T_EQ(stk_dataset_open_v2(&o, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "is a directory"), "%s", stk_last_errmsg());
    snprintf(shard, sizeof(shard), "%s/s.stk", dir);
    T_CHECK(write_shard(shard, 0, 2, 8) == 0);
    const char *stk_path[] = {shard};
    o.paths = stk_path;
    T_EQ(stk_dataset_open_v2(&o, &ds), STK_EINVAL);
    T_CHECKF(strstr(stk_last_errmsg(), "format stk takes no field names"), "%s", stk_last_errmsg());
    fx_rmtree(dir);
    return 0;
}

static int test_npy_errors(void)
{
    const char *dir = fx_tmpdir("source");
    char a[256], b[256];
    int64_t v[6] = {1, 2, 3, 4, 5, 6};
    snprintf(a, sizeof(a), "%s/a.npy", dir);
    snprintf(b, sizeof(b), "%s/b.npy", dir);
    T_CHECK(write_npy(a, "<i8", false, "(5,)", v, 5 * 8) == 0);
    T_CHECK(write_npy(b, "<i8", false, "(6,)", v, 6 * 8) == 0);
    const char *two[] = {a, b};
    char rows[600];
    snprintf(rows, sizeof(rows), "%s has 6 rows but %s has 5", b, a);
    EXPECT_OPEN_FAIL(two, 2, NULL, STK_EINVAL, rows, "share their first dimension", NULL);
    const char *d[] = {dir};
    EXPECT_OPEN_FAIL(d, 1, NULL, STK_EINVAL, rows, NULL, NULL);

    const char *one[] = {a};
    T_CHECK(write_npy(a, "<i8", true, "(5,)", v, 5 * 8) == 0);
    EXPECT_OPEN_FAIL(one, 1, NULL, STK_ENOTSUP, a, "Fortran-order", NULL);
    T_CHECK(write_npy(a, "|O", false, "(5,)", v, 5 * 8) == 0);
    EXPECT_OPEN_FAIL(one, 1, NULL, STK_ENOTSUP, a, "object dtype", NULL);
    T_CHECK(write_npy(a, ">f4", false, "(5,)", v, 5 * 4) == 0);
    EXPECT_OPEN_FAIL(one, 1, NULL, STK_ENOTSUP, a, "big-endian", NULL);
    T_CHECK(write_npy(a, "<i8", false, "(5,)", v, 3 * 8 + 5) == 0); /* 3 rows and a bit */
    EXPECT_OPEN_FAIL(one, 1, NULL, STK_EFORMAT, a, "truncated (5 rows of 8 bytes", NULL);
    T_CHECK(write_npy(a, "<i8", false, "(5,)", v, 5 * 8) == 0); /* intact again */
    stk_dataset *ds;
    T_OK(open1(a, NULL, &ds));
    T_EQ(stk_dataset_n_records(ds), 5);
    /* cut after open: every read names the file, the row and what happened (the file is not
     * the version opened any more, before the cut too) */
    struct stat st;
    T_CHECK(stat(a, &st) == 0);
    T_CHECK(truncate(a, st.st_size - 2 * 8) == 0);
    uint8_t buf[8];
    stk_record r;
    stk_record_init(&r);
    char row[400];
    for (int i = 2; i <= 3; i++) {
        T_EQ(stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r), STK_EIO);
        const char *err = stk_last_errmsg();
        snprintf(row, sizeof(row), "%s row %d: changed while open (size %lld -> %lld", a, i,
                 (long long)st.st_size, (long long)st.st_size - 16);
        T_CHECKF(strstr(err, row) == err, "'%s' does not start with '%s'", err, row);
    }
    stk__recinfo info; /* the same failure without a message buffer */
    T_EQ(stk__dataset_locate(ds, 4, &info, NULL, 0), STK_EIO);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* ---- .stk ---- */

/* Set record `r`'s offset in a shard's index to `off`, then recompute the index checksum and the
 * footer's, so that only the index's own rules can object. */
static int set_record_offset(const char *path, uint64_t r, uint64_t off)
{
    int fd = open(path, O_RDWR);
    T_CHECK(fd >= 0);
    struct stat st;
    T_CHECK(fstat(fd, &st) == 0);
    uint8_t foot[STK_FMT_FOOTER_SIZE], hdr[STK_FMT_H_FIXED];
    T_CHECK(pread(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr));
    T_CHECK(pread(fd, foot, sizeof(foot), st.st_size - STK_FMT_FOOTER_SIZE) ==
            (ssize_t)sizeof(foot));
    uint64_t index_off = stk__ld64(foot + STK_FMT_T_INDEX_OFFSET);
    size_t index_size = (size_t)stk__ld64(foot + STK_FMT_T_INDEX_SIZE);
    uint32_t n_fields = stk__ld32(hdr + STK_FMT_H_N_FIELDS);
    uint8_t *idx = malloc(index_size);
    T_CHECK(idx && pread(fd, idx, index_size, (off_t)index_off) == (ssize_t)index_size);
    uint8_t *e = idx + stk__fmt_index_fixed(n_fields) + r * stk__fmt_entry_size(n_fields);
    stk__st64(e + STK_FMT_E_OFFSET, off);
    stk__st64(foot + STK_FMT_T_INDEX_SUM, XXH3_64bits(idx, index_size));
    stk__st64(foot + STK_FMT_T_SUM, XXH3_64bits(foot, STK_FMT_T_SUM));
    bool ok =
        pwrite(fd, idx, index_size, (off_t)index_off) == (ssize_t)index_size &&
        pwrite(fd, foot, sizeof(foot), st.st_size - STK_FMT_FOOTER_SIZE) == (ssize_t)sizeof(foot);
    free(idx);
    close(fd);
    T_CHECK(ok);
    return 0;
}

static int test_stk_overlap(void)
{
    const char *dir = fx_tmpdir("source");
    char path[512];
    snprintf(path, sizeof(path), "%s/o.stk", dir);
    T_CHECK(write_shard(path, 0, 4, 100) == 0); /* records of one size: any offset fits */
    stk_dataset *ds;
    stk__recinfo r1, r2;
    T_OK(open1(path, NULL, &ds));
    T_OK(stk__dataset_locate(ds, 1, &r1, NULL, 0));
    T_OK(stk__dataset_locate(ds, 2, &r2, NULL, 0));
    stk_dataset_close(ds);
    T_CHECK(r2.offset >= r1.offset + r1.size);
    /* the patch itself keeps the shard valid: same offset, checksums recomputed */
    T_CHECK(set_record_offset(path, 2, r2.offset) == 0);
    T_OK(open1(path, NULL, &ds));
    stk_dataset_close(ds);
    /* record 2 moved onto record 1: inside the data region, checksums right, only overlapping */
    T_CHECK(set_record_offset(path, 2, r1.offset) == 0);
    char want[200];
    snprintf(want, sizeof(want),
             "corrupt index (record 2 at byte %llu overlaps the record before it, which ends at "
             "byte %llu)",
             (unsigned long long)r1.offset, (unsigned long long)(r1.offset + r1.size));
    const char *p[] = {path};
    EXPECT_OPEN_FAIL(p, 1, NULL, STK_EFORMAT, path, want, NULL);
    fx_rmtree(dir);
    return 0;
}

#define TR_N 20
#define TR_SIZE 1000
#define TR_BATCH 4
#define TR_CUT 5 /* the record the file is cut at */

/* A shard truncated while open: every later read names the file and "changed while open" (the
 * file is not the version opened, before the cut too: issue 30), from stk_dataset_read and
 * from a loader (an error for each batch, no SIGBUS: nothing is mapped). */
static int test_stk_truncated_while_open(void)
{
    const char *dir = fx_tmpdir("source");
    char path[512], sizes[128], err[STK_ERRMSG_SIZE];
    snprintf(path, sizeof(path), "%s/t.stk", dir);
    T_CHECK(write_shard(path, 0, TR_N, TR_SIZE) == 0);
    struct stat st;
    T_CHECK(stat(path, &st) == 0);
    stk_dataset *ds;
    stk__recinfo cut;
    T_OK(open1(path, NULL, &ds));
    T_OK(stk__dataset_locate(ds, TR_CUT, &cut, NULL, 0));
    uint8_t buf[2 * TR_SIZE], want[TR_SIZE];
    stk_record r;
    stk_record_init(&r);
    T_OK(stk_dataset_read(ds, TR_CUT - 1, buf, sizeof(buf), &r));
    payload(TR_CUT - 1, want, TR_SIZE);
    T_CHECK(memcmp(r.field[0], want, TR_SIZE) == 0);
    T_CHECK(truncate(path, (off_t)cut.offset) == 0);
    snprintf(sizes, sizeof(sizes), "changed while open (size %lld -> %llu", (long long)st.st_size,
             (unsigned long long)cut.offset);
    for (int i = TR_CUT - 1; i <= 12; i += 12 - (TR_CUT - 1)) {
        char rec[64];
        snprintf(rec, sizeof(rec), "record %d (global %d)", i, i);
        T_EQ(stk_dataset_read(ds, (uint64_t)i, buf, sizeof(buf), &r), STK_EIO);
        snprintf(err, sizeof(err), "%s", stk_last_errmsg());
        T_CHECKF(strstr(err, path) && strstr(err, rec) && strstr(err, sizes), "%s", err);
    }
    stk__recinfo info; /* the same failure without a message buffer */
    T_EQ(stk__dataset_locate(ds, 12, &info, NULL, 0), STK_EIO);

    const char *paths[] = {path};
    for (int threads = 1; threads <= 2; threads++) {
        stk_loader_opts o = fx_opts(paths, TR_BATCH, threads);
        o.paths = NULL;
        o.n_paths = 0;
        o.dataset = ds;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        stk_batch *b;
        for (int k = 0; k < TR_N / TR_BATCH; k++) { /* every batch: the file changed */
            b = (stk_batch *)1;
            T_EQ(stk_loader_next(L, &b), STK_EIO);
            T_CHECK(b == NULL);
            char rec[64];
            /* the batch's lowest failing record */
            snprintf(rec, sizeof(rec), "record %d (global %d)", k * TR_BATCH, k * TR_BATCH);
            const char *m = stk_loader_errmsg(L);
            T_CHECKF(strstr(m, path) && strstr(m, rec) && strstr(m, sizes), "batch %d: %s", k, m);
        }
        T_EQ(stk_loader_next(L, &b), STK_END);
        stk_loader_destroy(L);
    }
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* A shard rewritten in place while open, with the same size and layout (how shards get
 * regenerated): every read after the rewrite fails naming the file, never the new version's
 * bytes mixed with the old's (issue 30). The shard's time is set back first, as for a dataset
 * written before the run: a rewrite within the file system's timestamp granularity of the
 * original write would not show in the modification time. */
static int test_stk_rewritten_while_open(void)
{
    const char *dir = fx_tmpdir("source");
    char path[512];
    snprintf(path, sizeof(path), "%s/t.stk", dir);
    T_CHECK(write_shard(path, 0, TR_N, TR_SIZE) == 0);
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    T_CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
    stk_dataset *ds;
    T_OK(open1(path, NULL, &ds));
    uint8_t buf[2 * TR_SIZE];
    stk_record r;
    stk_record_init(&r);
    T_OK(stk_dataset_read(ds, 3, buf, sizeof(buf), &r));
    T_CHECK(write_shard(path, 0, TR_N, TR_SIZE) == 0);           /* the same records, a new file */
    T_EQ(stk_dataset_read(ds, 3, buf, sizeof(buf), &r), STK_OK); /* renamed */
    stk_dataset_close(ds);
    /* in place: the same inode, written over */
    T_CHECK(utimensat(AT_FDCWD, path, old, 0) == 0);
    T_OK(open1(path, NULL, &ds));
    T_OK(stk_dataset_read(ds, 3, buf, sizeof(buf), &r));
    FILE *f = fopen(path, "r+b");
    T_CHECK(f && fseek(f, 100, SEEK_SET) == 0 && fputc('x', f) != EOF && fclose(f) == 0);
    T_EQ(stk_dataset_read(ds, 3, buf, sizeof(buf), &r), STK_EIO);
    const char *err = stk_last_errmsg();
    T_CHECKF(strstr(err, path) && strstr(err, "changed while open") &&
                 strstr(err, "would mix two versions"),
             "%s", err);
    stk_dataset_close(ds);
    fx_rmtree(dir);
    return 0;
}

/* ---- the loader over an ImageFolder tree ---- */

#define LF_PER_CLASS 17

static int test_loader_imagefolder(void)
{
    const char *dir = fx_tmpdir("source");
    static const char *const classes[] = {"Zeta", "alpha", "beta"};
    static char names[3 * LF_PER_CLASS][32];
    size_t n = 0;
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < LF_PER_CLASS; k++) {
            snprintf(names[n], sizeof(names[n]), "%s/%s%d.jpg", classes[c], k % 3 ? "sub/" : "", k);
            T_CHECK(put_content(dir, names[n]) == 0);
            n++;
        }
    const char *paths[] = {dir};
    for (int run = 0; run < 2; run++) {
        stk_loader_opts o = fx_opts(paths, 6, 2);
        o.format = run ? "imagefolder" : NULL;
        o.flags = run ? STK_LOADER_SHUFFLE : 0;
        o.seed = 5;
        stk_loader *L;
        T_OK(stk_loader_create(&o, &L));
        const stk_dataset *ds = stk_loader_dataset(L);
        T_CHECK(strcmp(stk_dataset_format(ds), "imagefolder") == 0);
        T_EQ(stk_dataset_n_records(ds), n);
        for (int epoch = 0; epoch < 2; epoch++) {
            uint32_t seen[3 * LF_PER_CLASS] = {0};
            size_t total = 0;
            stk_batch *b;
            stk_status rc;
            while ((rc = stk_loader_next(L, &b)) == STK_OK) {
                stk_tensor img, label, path, index;
                stk_tensor_init(&img);
                stk_tensor_init(&label);
                stk_tensor_init(&path);
                stk_tensor_init(&index);
                T_EQ(stk_batch_n_tensors(b), 4);
                T_OK(stk_batch_tensor(b, 0, &img));
                T_OK(stk_batch_tensor(b, 1, &label));
                T_OK(stk_batch_tensor(b, 2, &path));
                T_OK(stk_batch_tensor(b, 3, &index));
                T_CHECK(strcmp(img.name, "image") == 0 && strcmp(path.name, "path") == 0 &&
                        strcmp(index.name, "index") == 0);
                for (uint32_t j = 0; j < stk_batch_n_samples(b); j++) {
                    int64_t idx = ((const int64_t *)index.data)[j];
                    T_CHECK(idx >= 0 && (size_t)idx < n);
                    seen[idx]++;
                    total++;
                    char rel[64], where[1024];
                    T_CHECK(path.lengths[j] < (int64_t)sizeof(rel));
                    memcpy(rel, (const uint8_t *)path.data + j * path.shape[1],
                           (size_t)path.lengths[j]);
                    rel[path.lengths[j]] = '\0';
                    uint8_t want[512];
                    size_t len = content_of(rel, want);
                    T_EQ(img.lengths[j], len);
                    T_CHECK(memcmp((const uint8_t *)img.data + j * img.shape[1], want, len) == 0);
                    T_EQ(((const int64_t *)label.data)[j], label_of(rel, classes, 3));
                    /* the row is the record its index names */
                    T_OK(stk_dataset_describe(ds, (uint64_t)idx, where, sizeof(where)));
                    T_CHECKF(strstr(where, rel) != NULL, "%s is not %s", where, rel);
                }
                stk_batch_release(b);
            }
            T_CHECKF(rc == STK_END, "next: %d %s", rc, stk_loader_errmsg(L));
            T_EQ(total, n);
            for (size_t i = 0; i < n; i++)
                T_EQ(seen[i], 1);
        }
        stk_loader_destroy(L);
    }
    fx_rmtree(dir);
    return 0;
}

T_MAIN(T_CASE(test_detect_stk), T_CASE(test_detect_folder_and_npy), T_CASE(test_detect_errors),
       T_CASE(test_format_override), T_CASE(test_format_names), T_CASE(test_fifo_path),
       T_CASE(test_brace_range), T_CASE(test_glob_byte_order), T_CASE(test_own_files_ignored),
       T_CASE(test_dir_files), T_CASE(test_folder_tree), T_CASE(test_folder_empty_class),
       T_CASE(test_folder_changed_and_fingerprint), T_CASE(test_npy_fields),
       T_CASE(test_npy_named_fields), T_CASE(test_npy_errors), T_CASE(test_stk_overlap),
       T_CASE(test_stk_truncated_while_open), T_CASE(test_stk_rewritten_while_open),
       T_CASE(test_loader_imagefolder))
