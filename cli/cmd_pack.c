/*
 * cmd_pack.c: `stoker pack SRC OUT`: convert an ImageFolder tree into `.stk` shards.
 *
 * SRC is read exactly as torchvision.datasets.ImageFolder reads it, so labels and order match
 * a PyTorch pipeline on the same folder:
 *   classes = sorted names (byte order) of SRC's immediate subdirectories, symlinks followed;
 *   label   = the class's position in that list;
 *   files   = for root, _, fnames in sorted(os.walk(SRC/class, followlinks=True)):
 *                 for fname in sorted(fnames): kept if its lower-cased name ends with one of
 *                 IMG_EXTENSIONS.
 * sorted(os.walk(...)) orders the walk by the full directory path string, not depth first, so
 * the walk first collects every directory with its files and then sorts the directories.
 * Differences, on purpose: a symlink loop is walked once instead of until the path gets too
 * long, and an unreadable directory is an error instead of being skipped silently.
 *
 * Each image becomes one record: image (bytes: the file as stored, not re-encoded), label
 * (int64) and path (bytes: the path relative to SRC). docs/format.md has the worked example.
 */
#include "cli.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "pack"

/* torchvision.datasets.folder.IMG_EXTENSIONS */
static const char *const img_ext[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};
#define EXT_LIST ".jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp"

typedef struct pack_args {
    const char *src, *out;
    uint64_t shard_size; /* 0 = one shard */
    bool shard_size_set;
    uint32_t align;
    bool quiet, force;
} pack_args;

/* ---- small containers ---- */

typedef struct strvec {
    char **v;
    size_t n, cap;
} strvec;

/* Append `s` (taken over, freed with the vector); NULL means an allocation already failed. */
static int strvec_push(strvec *sv, char *s)
{
    if (!s)
        return -1;
    if (sv->n == sv->cap) {
        size_t cap = sv->cap ? sv->cap * 2 : 16;
        char **v = realloc(sv->v, cap * sizeof(*v));
        if (!v) {
            free(s);
            return -1;
        }
        sv->v = v;
        sv->cap = cap;
    }
    sv->v[sv->n++] = s;
    return 0;
}

static void strvec_free(strvec *sv)
{
    for (size_t i = 0; i < sv->n; i++)
        free(sv->v[i]);
    free(sv->v);
    memset(sv, 0, sizeof(*sv));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "a/b" (no doubled slash when a already ends with one) */
static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/')
        la--;
    char *s = malloc(la + lb + 2);
    if (s) {
        memcpy(s, a, la);
        s[la] = '/';
        memcpy(s + la + 1, b, lb + 1);
    }
    return s;
}

/* ---- the ImageFolder walk ---- */

/* One directory of a class tree with its (non-directory) entries, as os.walk yields it. */
typedef struct walkdir {
    char *rel; /* relative to SRC: "dog", "dog/sub" */
    strvec files;
} walkdir;

typedef struct walk {
    const char *src;
    walkdir *dirs;
    size_t n_dirs, cap_dirs;
    struct {
        dev_t dev;
        ino_t ino;
    } stack[256]; /* directories on the current path: symlink loop guard */
    int depth;
} walk;

static bool has_image_ext(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(img_ext) / sizeof(img_ext[0]); i++) {
        size_t e = strlen(img_ext[i]);
        if (n >= e && strcasecmp(name + n - e, img_ext[i]) == 0)
            return true;
    }
    return false;
}

/* Collect directory `rel` (and, recursively, its subdirectories) with their files. */
static int walk_dir(walk *w, const char *rel)
{
    char *abs = join(w->src, rel);
    DIR *d = abs ? opendir(abs) : NULL;
    int rc = 1;
    struct stat st;
    strvec subdirs = {0};
    if (!abs)
        return stk_cli_error(CMD, "out of memory");
    if (!d || fstat(dirfd(d), &st) != 0) {
        stk_cli_error(CMD, "%s: %s", abs, strerror(errno));
        goto done;
    }
    for (int i = 0; i < w->depth; i++)
        if (w->stack[i].dev == st.st_dev && w->stack[i].ino == st.st_ino) {
            rc = 0; /* a symlink back to an ancestor: already walked */
            goto done;
        }
    if (w->depth == (int)(sizeof(w->stack) / sizeof(w->stack[0]))) {
        stk_cli_error(CMD, "%s: directories nested too deep", abs);
        goto done;
    }
    if (w->n_dirs == w->cap_dirs) {
        size_t cap = w->cap_dirs ? w->cap_dirs * 2 : 16;
        walkdir *v = realloc(w->dirs, cap * sizeof(*v));
        if (!v) {
            stk_cli_error(CMD, "out of memory");
            goto done;
        }
        w->dirs = v;
        w->cap_dirs = cap;
    }
    size_t me = w->n_dirs++;
    memset(&w->dirs[me], 0, sizeof(w->dirs[me]));
    w->dirs[me].rel = strdup(rel);
    if (!w->dirs[me].rel) {
        stk_cli_error(CMD, "out of memory");
        goto done;
    }
    w->stack[w->depth].dev = st.st_dev;
    w->stack[w->depth].ino = st.st_ino;
    w->depth++;
    struct dirent *e;
    rc = 0;
    errno = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        /* os.walk: is_dir() follows symlinks; anything else (broken link too) is a file */
        bool is_dir = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        if (strvec_push(is_dir ? &subdirs : &w->dirs[me].files, strdup(e->d_name)))
            rc = stk_cli_error(CMD, "out of memory");
        errno = 0;
    }
    if (rc == 0 && errno)
        rc = stk_cli_error(CMD, "%s: %s", abs, strerror(errno));
    for (size_t i = 0; rc == 0 && i < subdirs.n; i++) {
        char *sub = join(rel, subdirs.v[i]);
        rc = sub ? walk_dir(w, sub) : stk_cli_error(CMD, "out of memory");
        free(sub);
    }
    w->depth--;
done:
    strvec_free(&subdirs);
    if (d)
        closedir(d);
    free(abs);
    return rc;
}

static int cmp_walkdir(const void *a, const void *b)
{
    return strcmp(((const walkdir *)a)->rel, ((const walkdir *)b)->rel);
}

/* One image to pack. */
typedef struct item {
    char *rel;
    int64_t label;
} item;

typedef struct tree {
    strvec classes;
    item *items;
    size_t n_items, cap_items;
} tree;

static void tree_free(tree *t)
{
    strvec_free(&t->classes);
    for (size_t i = 0; i < t->n_items; i++)
        free(t->items[i].rel);
    free(t->items);
}

/* Find the classes and images of SRC in ImageFolder order. */
static int scan_tree(const char *src, tree *t)
{
    struct stat st;
    memset(t, 0, sizeof(*t));
    if (stat(src, &st) != 0)
        return stk_cli_error(CMD, "%s: %s", src, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return stk_cli_error(CMD,
                             "%s: not a directory (SRC must be an ImageFolder tree: one "
                             "subfolder per class)",
                             src);
    DIR *d = opendir(src);
    if (!d)
        return stk_cli_error(CMD, "%s: %s", src, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool is_dir = fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
        if (is_dir && strvec_push(&t->classes, strdup(e->d_name)))
            rc = stk_cli_error(CMD, "out of memory");
    }
    closedir(d);
    if (rc)
        return rc;
    if (t->classes.n == 0)
        return stk_cli_error(CMD,
                             "no class folders in %s (an ImageFolder tree has one "
                             "subfolder per class, as torchvision expects)",
                             src);
    qsort(t->classes.v, t->classes.n, sizeof(char *), cmp_str);

    strvec empty = {0};
    for (size_t c = 0; rc == 0 && c < t->classes.n; c++) {
        walk w;
        memset(&w, 0, sizeof(w));
        w.src = src;
        size_t before = t->n_items;
        rc = walk_dir(&w, t->classes.v[c]);
        if (rc == 0)
            qsort(w.dirs, w.n_dirs, sizeof(*w.dirs), cmp_walkdir);
        for (size_t i = 0; i < w.n_dirs; i++) {
            strvec *f = &w.dirs[i].files;
            if (f->n) /* qsort(NULL, 0) is undefined */
                qsort(f->v, f->n, sizeof(char *), cmp_str);
            for (size_t j = 0; rc == 0 && j < f->n; j++) {
                if (!has_image_ext(f->v[j]))
                    continue;
                if (t->n_items == t->cap_items) {
                    size_t cap = t->cap_items ? t->cap_items * 2 : 256;
                    item *v = realloc(t->items, cap * sizeof(*v));
                    if (!v) {
                        rc = stk_cli_error(CMD, "out of memory");
                        break;
                    }
                    t->items = v;
                    t->cap_items = cap;
                }
                t->items[t->n_items].rel = join(w.dirs[i].rel, f->v[j]);
                t->items[t->n_items].label = (int64_t)c;
                if (!t->items[t->n_items++].rel)
                    rc = stk_cli_error(CMD, "out of memory");
            }
            strvec_free(f);
            free(w.dirs[i].rel);
        }
        free(w.dirs);
        if (rc == 0 && t->n_items == before && strvec_push(&empty, strdup(t->classes.v[c])))
            rc = stk_cli_error(CMD, "out of memory");
    }
    if (rc == 0 && empty.n) {
        /* torchvision: "Found no valid file for the classes ... Supported extensions are: ..." */
        fprintf(stderr, "stoker %s: class folder%s ", CMD, empty.n > 1 ? "s" : "");
        for (size_t i = 0; i < empty.n; i++)
            fprintf(stderr, "%s'%s'", i ? ", " : "", empty.v[i]);
        fprintf(stderr, " in %s contain%s no images (extensions: %s)\n", src,
                empty.n > 1 ? "" : "s", EXT_LIST);
        rc = 1;
    }
    strvec_free(&empty);
    return rc;
}

/* ---- writing ---- */

typedef struct packer {
    const pack_args *a;
    bool dir_mode, made_dir;
    char *meta;
    size_t meta_len;
    stk_writer *w;
    char *cur;      /* path of the shard being written */
    strvec written; /* shards completed by this run */
    uint64_t data_offset, total_bytes;
    uint8_t *buf;
    size_t buf_cap;
} packer;

static const stk_field pack_fields[3] = {
    {.name = "image", .kind = STK_FIELD_BYTES},
    {.name = "label", .kind = STK_FIELD_INT64},
    {.name = "path", .kind = STK_FIELD_BYTES},
};

/* {"source": "imagefolder", "classes": [...], "tool": "stoker pack <version>"} */
static char *metadata_json(const strvec *classes, size_t *len)
{
    char *s = NULL;
    FILE *f = open_memstream(&s, len);
    if (!f)
        return NULL;
    fputs("{\"source\": \"imagefolder\", \"classes\": [", f);
    for (size_t i = 0; i < classes->n; i++) {
        if (i)
            fputs(", ", f);
        stk_cli_json_string(f, classes->v[i], strlen(classes->v[i]));
    }
    fprintf(f, "], \"tool\": \"stoker pack %s\"}", stk_version_string());
    if (fclose(f) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* File size of a shard of this schema holding n records whose data ends at data_end: index
 * (32 + 8 per field, then 32 bytes per record for 3 fields) and footer (64), as laid out in
 * docs/format.md. Used to start a new shard before one would exceed --shard-size. */
static uint64_t shard_file_size(uint64_t data_end, uint64_t n)
{
    return align_up(data_end, 8) + 32 + 8 * 3 + 32 * n + 64;
}

static int open_shard(packer *p)
{
    char name[64];
    free(p->cur);
    if (p->dir_mode) {
        snprintf(name, sizeof(name), "shard-%05zu.stk", p->written.n);
        p->cur = join(p->a->out, name);
    } else {
        p->cur = strdup(p->a->out);
    }
    if (!p->cur)
        return stk_cli_error(CMD, "out of memory");
    stk_writer_opts o;
    stk_writer_opts_init(&o);
    o.fields = pack_fields;
    o.n_fields = 3;
    o.metadata_json = p->meta;
    o.align = p->a->align;
    if (stk_writer_open(p->cur, &o, &p->w) != STK_OK)
        return stk_cli_error(CMD, "%s", stk_last_errmsg());
    return 0;
}

static int close_shard(packer *p)
{
    stk_writer *w = p->w;
    p->w = NULL;
    if (stk_writer_close(w) != STK_OK)
        return stk_cli_error(CMD, "%s", stk_last_errmsg());
    if (strvec_push(&p->written, strdup(p->cur)))
        return stk_cli_error(CMD, "out of memory");
    return 0;
}

/* Read all of `path` into p->buf; *size receives its length. */
static int read_file(packer *p, const char *path, size_t *size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return stk_cli_error(CMD, "%s: cannot read: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return stk_cli_error(CMD, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > UINT32_MAX - 65536) {
        close(fd);
        return stk_cli_error(CMD, "%s: file is over 4 GiB (a record's limit)", path);
    }
    size_t want = (size_t)st.st_size, got = 0;
    if (want + 1 > p->buf_cap) {
        uint8_t *b = realloc(p->buf, want + 1);
        if (!b) {
            close(fd);
            return stk_cli_error(CMD, "%s: out of memory", path);
        }
        p->buf = b;
        p->buf_cap = want + 1;
    }
    /* Read one byte past the size seen by fstat, to notice a file that grew meanwhile. */
    for (;;) {
        ssize_t n = read(fd, p->buf + got, p->buf_cap - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int err = errno;
            close(fd);
            return stk_cli_error(CMD, "%s: cannot read: %s", path, strerror(err));
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got == p->buf_cap) {
            close(fd);
            return stk_cli_error(CMD, "%s: file changed while being read", path);
        }
    }
    close(fd);
    *size = got;
    return 0;
}

/* Remove `dir`'s *.stk files that this run did not write (after --force). */
static void remove_stale(packer *p)
{
    DIR *d = opendir(p->a->out);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 4, ".stk") != 0)
            continue;
        char *path = join(p->a->out, e->d_name);
        bool ours = false;
        for (size_t i = 0; path && i < p->written.n && !ours; i++)
            ours = strcmp(p->written.v[i], path) == 0;
        if (path && !ours)
            unlink(path);
        free(path);
    }
    if (d)
        closedir(d);
}

/* mkdir -p */
static int make_dirs(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", path) >= (int)sizeof(tmp)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(tmp, 0777) != 0 && errno != EEXIST)
                return -1;
            *s = '/';
        }
    return mkdir(tmp, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

static bool dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    bool empty = true;
    while (d && empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    if (d)
        closedir(d);
    return empty;
}

/* Decide the output mode and check (or prepare) OUT. */
static int prepare_out(packer *p)
{
    const pack_args *a = p->a;
    size_t n = strlen(a->out);
    struct stat st;
    bool exists = stat(a->out, &st) == 0;
    p->dir_mode = a->shard_size_set || n < 4 || strcmp(a->out + n - 4, ".stk") != 0 ||
                  (exists && S_ISDIR(st.st_mode));
    if (!p->dir_mode) {
        if (exists && !a->force)
            return stk_cli_error(CMD, "%s already exists (use --force to replace it)", a->out);
        return 0;
    }
    if (exists && !S_ISDIR(st.st_mode)) {
        if (!a->force)
            return stk_cli_error(CMD,
                                 "%s already exists and is not a directory (use --force to "
                                 "replace it)",
                                 a->out);
        if (unlink(a->out) != 0)
            return stk_cli_error(CMD, "%s: cannot remove: %s", a->out, strerror(errno));
        exists = false;
    }
    if (exists && !dir_is_empty(a->out) && !a->force)
        return stk_cli_error(CMD,
                             "%s is not empty (use --force to write into it; its old .stk "
                             "files are then replaced)",
                             a->out);
    if (!exists) {
        if (make_dirs(a->out) != 0)
            return stk_cli_error(CMD, "%s: cannot create directory: %s", a->out, strerror(errno));
        p->made_dir = true;
    }
    return 0;
}

static int pack(const pack_args *a)
{
    tree t;
    packer p;
    memset(&p, 0, sizeof(p));
    p.a = a;
    double t0 = stk_cli_now();
    int rc = scan_tree(a->src, &t);
    if (rc)
        goto out;
    p.meta = metadata_json(&t.classes, &p.meta_len);
    if (!p.meta) {
        rc = stk_cli_error(CMD, "out of memory");
        goto out;
    }
    rc = prepare_out(&p);
    if (rc)
        goto out;
    uint64_t header = align_up(48 + 3 * 80 + p.meta_len, 8) + 8; /* docs/format.md */
    p.data_offset = align_up(header, a->align);
    uint64_t limit = a->shard_size ? a->shard_size : (p.dir_mode ? (1ull << 30) : 0);

    stk_cli_progress prog;
    stk_cli_progress_start(&prog, CMD, t.n_items, "records", a->quiet);
    rc = open_shard(&p);
    for (size_t i = 0; rc == 0 && i < t.n_items; i++) {
        char *abs = join(a->src, t.items[i].rel);
        size_t size = 0;
        rc = abs ? read_file(&p, abs, &size) : stk_cli_error(CMD, "out of memory");
        free(abs);
        if (rc)
            break;
        size_t rel_len = strlen(t.items[i].rel);
        uint64_t count = stk_writer_count(p.w);
        uint64_t start = align_up(p.data_offset + stk_writer_data_size(p.w), a->align);
        if (limit && count > 0 && shard_file_size(start + size + 8 + rel_len, count + 1) > limit) {
            rc = close_shard(&p);
            if (rc == 0)
                rc = open_shard(&p);
            if (rc)
                break;
        }
        stk_value v[3];
        memset(v, 0, sizeof(v));
        v[0].data = p.buf;
        v[0].size = size;
        v[1].i64 = t.items[i].label;
        v[2].data = t.items[i].rel;
        v[2].size = rel_len;
        if (stk_writer_add(p.w, v) != STK_OK) {
            rc = stk_cli_error(CMD, "%s/%s: %s", a->src, t.items[i].rel, stk_writer_errmsg(p.w));
            break;
        }
        p.total_bytes += size;
        stk_cli_progress_update(&prog, i + 1, p.total_bytes);
    }
    if (rc == 0)
        rc = close_shard(&p);
    stk_cli_progress_end(&prog);
    if (rc)
        goto out;
    if (p.dir_mode && a->force)
        remove_stale(&p);
    uint64_t on_disk = 0;
    for (size_t i = 0; i < p.written.n; i++) {
        struct stat st;
        if (stat(p.written.v[i], &st) == 0)
            on_disk += (uint64_t)st.st_size;
    }
    double secs = stk_cli_now() - t0;
    if (!a->quiet) {
        char b1[32], b2[32];
        printf("packed %zu records (%zu classes) from %s into %zu shard%s in %s: %s of images, "
               "%s on disk, %.2f s (%.1f MB/s)\n",
               t.n_items, t.classes.n, a->src, p.written.n, p.written.n == 1 ? "" : "s", a->out,
               stk_cli_format_size(p.total_bytes, b1, sizeof(b1)),
               stk_cli_format_size(on_disk, b2, sizeof(b2)), secs,
               secs > 0 ? (double)p.total_bytes / secs / 1e6 : 0.0);
    }
out:
    if (rc) {
        /* Leave nothing half-made: the open shard, the shards of this run, a new OUT dir. */
        stk_writer_abort(p.w);
        for (size_t i = 0; i < p.written.n; i++)
            unlink(p.written.v[i]);
        if (p.made_dir)
            rmdir(a->out);
    }
    free(p.cur);
    free(p.buf);
    free(p.meta);
    strvec_free(&p.written);
    tree_free(&t);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: stoker pack SRC OUT [--shard-size SIZE] [--align N] [--force] [--quiet]\n"
           "\n"
           "Pack an ImageFolder tree (SRC/<class>/**/<image>, as torchvision.datasets.ImageFolder\n"
           "reads it) into .stk shards. Each image becomes a record with the fields\n"
           "  image  bytes  the file exactly as stored (not re-encoded)\n"
           "  label  int64  the class index (classes sorted by name)\n"
           "  path   bytes  the file's path relative to SRC\n"
           "Images are the files ending in " EXT_LIST " (any case).\n"
           "\n"
           "OUT ending in .stk (without --shard-size) is written as one shard; otherwise OUT is a\n"
           "directory that receives shard-00000.stk, shard-00001.stk, ...\n"
           "\n"
           "options:\n"
           "  --shard-size SIZE  start a new shard before one would exceed SIZE bytes\n"
           "                     (512M, 1G, 100k, plain bytes; default 1G for a directory)\n"
           "  --align N          record alignment in bytes, a power of two (default 64)\n"
           "  --force            replace an existing OUT file, or write into a non-empty OUT\n"
           "                     directory (its other .stk files are removed afterwards)\n"
           "  --quiet            no progress bar, no summary\n"
           "  -h, --help         show this help\n");
}

int stk_cmd_pack(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"shard-size", required_argument, NULL, 's'},
        {"align", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    pack_args a;
    memset(&a, 0, sizeof(a));
    a.align = 64;
    int c;
    long long v;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":hfq", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (stk_cli_parse_size(optarg, &a.shard_size) != 0)
                return stk_cli_usage_error(CMD,
                                           "--shard-size: invalid size '%s' (e.g. 512M, 1G, "
                                           "100k, 4096)",
                                           optarg);
            a.shard_size_set = true;
            break;
        case 'a':
            if (stk_cli_parse_int(optarg, "--align", 1, 1 << 20, &v) || (v & (v - 1)))
                return stk_cli_usage_error(CMD, "--align must be a power of two in 1..1048576");
            a.align = (uint32_t)v;
            break;
        case 'f':
            a.force = true;
            break;
        case 'q':
            a.quiet = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return stk_cli_getopt_error(CMD, c, argv);
        }
    }
    if (argc - optind != 2)
        return stk_cli_usage_error(CMD, "expected SRC and OUT, got %d argument%s", argc - optind,
                                   argc - optind == 1 ? "" : "s");
    a.src = argv[optind];
    a.out = argv[optind + 1];
    return pack(&a);
}
