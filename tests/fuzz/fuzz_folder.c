/*
 * fuzz_folder.c: libFuzzer target for the ImageFolder tree walk
 * (src/source/folder/stk_src_folder.c). The input describes a small tree, built under a fresh
 * temporary directory: directories, files (image extensions in any case, other names, sizes 0..63),
 * symlinks (to a directory, an ancestor: a loop; to a file; dangling; to themselves), FIFOs named
 * like images, and odd names (spaces, punctuation, leading dots and dashes, UTF-8). The tree is
 * then opened as an ImageFolder dataset and checked against torchvision's rules:
 *   - open succeeds, or fails with a message (no class folders, a class without images, nesting
 *     too deep); it never hangs (FIFOs are never opened: a blocking open would time out);
 *   - every record is a regular image file under its class folder (label = the class's position
 *     in the sorted list of ROOT's directories, symlinks followed), read back with its size;
 *   - no path is listed twice; the order is torchvision's: by class, then by directory path,
 *     then by file name;
 *   - every image file created through real directories (no symlink on its path) is listed.
 *
 * Input: a sequence of operations, each an opcode byte and parameter bytes (see build_tree).
 * Corpus: tests/fuzz/corpus/folder (trees with each kind of entry).
 */
#include "stoker.h"

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_DIRS 24
#define MAX_FILES 48
#define MAX_OPS 96
#define MAX_DEPTH 5

typedef struct tree {
    char root[64];
    char dirs[MAX_DIRS][256]; /* relative to root; "" = root */
    int depth[MAX_DIRS];
    int real[MAX_DIRS]; /* no symlink on its path (every directory made here is real) */
    int n_dirs;
    char files[MAX_FILES][256]; /* image files made through real directories, in a class */
    int n_files;
} tree;

typedef struct input {
    const uint8_t *p;
    size_t n;
} input;

static unsigned next(input *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}

/* A file or directory name from the input: 1-12 pieces of an odd alphabet, never "." or "..". */
static void make_name(input *in, char *out, size_t size)
{
    static const char *const pieces[] = {"a",
                                         "B",
                                         "z",
                                         "0",
                                         "9",
                                         " ",
                                         "-",
                                         "_",
                                         ".",
                                         "#",
                                         "%",
                                         "'",
                                         "(",
                                         "+",
                                         "=",
                                         "~",
                                         ",",
                                         "\xc3\xa9",
                                         "\xe7\x8c\xab",
                                         "\xf0\x9f\x90\x88",
                                         "cat",
                                         "Dog",
                                         "..x"};
    size_t np = sizeof(pieces) / sizeof(pieces[0]);
    unsigned len = 1 + next(in) % 12;
    out[0] = '\0';
    for (unsigned i = 0; i < len; i++) {
        const char *piece = pieces[next(in) % np];
        if (strlen(out) + strlen(piece) + 1 < size)
            strcat(out, piece);
    }
    if (strcmp(out, ".") == 0 || strcmp(out, "..") == 0)
        strcpy(out, "dot");
}

static const char *const exts[] = {".jpg", ".JPG",  ".jpeg", ".Png", ".ppm", ".bmp",     ".pgm",
                                   ".tif", ".TIFF", ".webp", ".txt", "",     ".jpg.txt", ".gif"};

static int is_image(const char *name)
{
    static const char *const img[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                      ".pgm", ".tif",  ".tiff", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(img) / sizeof(img[0]); i++) {
        size_t e = strlen(img[i]);
        if (n >= e && strcasecmp(name + n - e, img[i]) == 0)
            return 1;
    }
    return 0;
}

/* root/rel/name into out (false when too long). */
static int join(char *out, size_t size, const char *root, const char *rel, const char *name)
{
    int n = snprintf(out, size, "%s%s%s%s%s", root, *rel ? "/" : "", rel, *name ? "/" : "", name);
    return n > 0 && (size_t)n < size;
}

/* Build the tree. Operations (opcode % 8): 0-1 directory, 2-3 file, 4 symlink to a directory,
 * 5 symlink to a file or nowhere, 6 FIFO named like an image, 7 symlink to itself. Each names its
 * parent directory by a byte (mod the directories made so far). */
static void build_tree(tree *t, input *in)
{
    for (int op = 0; op < MAX_OPS && in->n; op++) {
        unsigned code = next(in) % 8;
        int parent = (int)(next(in) % (unsigned)t->n_dirs);
        char name[128], path[512], target[512];
        make_name(in, name, 96);
        if (code == 2 || code == 3 || code == 5 || code == 6)
            strcat(name, exts[next(in) % (sizeof(exts) / sizeof(exts[0]))]);
        if (!join(path, sizeof(path), t->root, t->dirs[parent], name))
            continue;
        switch (code) {
        case 0:
        case 1:
            if (t->n_dirs < MAX_DIRS && t->depth[parent] < MAX_DEPTH && mkdir(path, 0755) == 0) {
                char rel[sizeof(t->dirs[0])];
                snprintf(rel, sizeof(rel), "%s%s%s", t->dirs[parent], *t->dirs[parent] ? "/" : "",
                         name);
                memcpy(t->dirs[t->n_dirs], rel, sizeof(rel));
                t->depth[t->n_dirs] = t->depth[parent] + 1;
                t->real[t->n_dirs] = t->real[parent];
                t->n_dirs++;
            }
            break;
        case 2:
        case 3: {
            FILE *f = fopen(path, "wx");
            if (!f)
                break;
            unsigned len = next(in) % 64;
            for (unsigned i = 0; i < len; i++)
                fputc((int)i, f);
            fclose(f);
            if (t->real[parent] && t->depth[parent] >= 1 && is_image(name) &&
                t->n_files < MAX_FILES) {
                char rel[sizeof(t->files[0])];
                snprintf(rel, sizeof(rel), "%s/%s", t->dirs[parent], name);
                memcpy(t->files[t->n_files++], rel, sizeof(rel));
            }
            break;
        }
        case 4: /* to any directory made so far: an ancestor (or itself) makes a loop */
            if (join(target, sizeof(target), t->root, t->dirs[next(in) % (unsigned)t->n_dirs], ""))
                (void)!symlink(target, path);
            break;
        case 5: /* relative: to a sibling name that may or may not exist */
            make_name(in, target, 96);
            strcat(target, exts[next(in) % (sizeof(exts) / sizeof(exts[0]))]);
            (void)!symlink(target, path);
            break;
        case 6:
            mkfifo(path, 0644);
            break;
        default:
            (void)!symlink(name, path);
            break;
        }
    }
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names of root's entries that are directories (symlinks followed): the classes. */
static int classes_of(const char *root, char **out, int max)
{
    char path[512];
    int n = 0;
    struct stat st;
    /* readdir through nftw would recurse; a plain opendir is enough here */
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && (e = readdir(d)) && n < max) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (join(path, sizeof(path), root, "", e->d_name) && stat(path, &st) == 0 &&
            S_ISDIR(st.st_mode))
            out[n++] = strdup(e->d_name);
    }
    if (d)
        closedir(d);
    qsort(out, (size_t)n, sizeof(*out), cmp_str);
    return n;
}

/* (directory, name) of a relative path, compared as torchvision orders a class's files. */
static int walk_order(const char *a, const char *b)
{
    const char *sa = strrchr(a, '/'), *sb = strrchr(b, '/');
    size_t da = (size_t)(sa - a), db = (size_t)(sb - b);
    char x[256], y[256];
    snprintf(x, sizeof(x), "%.*s", (int)da, a);
    snprintf(y, sizeof(y), "%.*s", (int)db, b);
    int c = strcmp(x, y);
    return c ? c : strcmp(sa + 1, sb + 1);
}

static void check(const tree *t)
{
    stk_dataset_opts o;
    stk_dataset_opts_init(&o);
    const char *paths[] = {t->root};
    o.paths = paths;
    o.n_paths = 1;
    o.format = "imagefolder";
    stk_dataset *ds = NULL;
    stk_status rc = stk_dataset_open_v2(&o, &ds);
    if (rc != STK_OK) {
        if (rc != STK_EINVAL && rc != STK_ELIMIT && rc != STK_EIO)
            abort(); /* only "no classes", "no images", "too deep", an unreadable entry */
        if (!stk_last_errmsg()[0])
            abort();
        return;
    }
    char *classes[MAX_DIRS + 8];
    int n_classes = classes_of(t->root, classes, MAX_DIRS + 8);
    uint64_t n = stk_dataset_n_records(ds);
    int fi = stk_dataset_find_field(ds, "image"), fl = stk_dataset_find_field(ds, "label"),
        fp = stk_dataset_find_field(ds, "path");
    if (fi < 0 || fl < 0 || fp < 0 || n == 0)
        abort();
    size_t cap = (size_t)stk_dataset_max_record_size(ds);
    uint8_t *buf = malloc(cap ? cap : 1);
    char **rels = calloc(n, sizeof(*rels));
    int64_t *labels = calloc(n, sizeof(*labels));
    if (!buf || !rels || !labels)
        abort();
    for (uint64_t i = 0; i < n; i++) {
        stk_record r;
        stk_record_init(&r);
        if (stk_dataset_read(ds, i, buf, cap, &r) != STK_OK)
            abort(); /* nothing changed since the open */
        rels[i] = strndup((const char *)r.field[fp], r.field_size[fp]);
        labels[i] = stk_record_i64(&r, (size_t)fl);
        char path[600];
        struct stat st;
        if (!rels[i] || !join(path, sizeof(path), t->root, rels[i], "") || stat(path, &st) != 0 ||
            !S_ISREG(st.st_mode) || (uint64_t)st.st_size != r.field_size[fi] ||
            !is_image(strrchr(rels[i], '/') ? strrchr(rels[i], '/') + 1 : rels[i]))
            abort(); /* a regular image file, read whole */
        const char *slash = strchr(rels[i], '/');
        if (!slash || labels[i] < 0 || labels[i] >= n_classes ||
            strncmp(rels[i], classes[labels[i]], (size_t)(slash - rels[i])) != 0 ||
            classes[labels[i]][slash - rels[i]] != '\0')
            abort(); /* in its class folder, labelled by the class's sorted position */
        if (i > 0 && (labels[i] < labels[i - 1] ||
                      (labels[i] == labels[i - 1] && walk_order(rels[i - 1], rels[i]) >= 0)))
            abort(); /* torchvision's order, each path once */
    }
    for (int f = 0; f < t->n_files; f++) { /* every image reachable without symlinks */
        int found = 0;
        for (uint64_t i = 0; i < n && !found; i++)
            found = strcmp(rels[i], t->files[f]) == 0;
        if (!found)
            abort();
    }
    for (uint64_t i = 0; i < n; i++)
        free(rels[i]);
    for (int c = 0; c < n_classes; c++)
        free(classes[c]);
    free(rels);
    free(labels);
    free(buf);
    stk_dataset_close(ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static tree t;
    memset(&t, 0, sizeof(t));
    snprintf(t.root, sizeof(t.root), "/tmp/stk_fuzz_folder_XXXXXX");
    if (!mkdtemp(t.root))
        return 0;
    t.n_dirs = 1; /* the root */
    t.real[0] = 1;
    input in = {data, size};
    build_tree(&t, &in);
    check(&t);
    nftw(t.root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
