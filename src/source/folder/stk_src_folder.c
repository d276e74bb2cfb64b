/*
 * stk_src_folder.c: an ImageFolder tree as a record source, read exactly as
 * torchvision.datasets.ImageFolder reads it, so labels and order match a PyTorch pipeline on the
 * same folder (and `stoker pack` of it):
 *   classes = sorted names (byte order) of ROOT's immediate subdirectories, symlinks followed;
 *   label   = the class's position in that list;
 *   files   = for root, _, fnames in sorted(os.walk(ROOT/class, followlinks=True)):
 *                 for fname in sorted(fnames): kept if its lower-cased name ends with one of
 *                 IMG_EXTENSIONS.
 * sorted(os.walk(...)) orders the walk by the full directory path string, not depth first, so
 * the walk first collects every directory with its files and then sorts the directories.
 * Differences, on purpose: a symlink loop is walked once instead of until the path gets too long;
 * an unreadable directory is an error instead of being skipped silently; an entry that is not a
 * regular file (a FIFO, a socket, a device) is skipped and listed in the metadata's "skipped",
 * never opened (opening a FIFO would block).
 *
 * Records: image (bytes: the file as stored), label (int64), path (bytes: relative to ROOT) — the
 * schema `stoker pack` writes. A tree without images but with audio files (.wav, .flac, .mp3,
 * .ogg, .oga, .opus, .aif, .aiff) is read the same way with `audio` in place of `image` (issue
 * 27), and a tree with neither but with videos (.mp4, .m4v, .mov, .mkv, .webm, .avi: the
 * Kinetics/UCF101 layout) with `video` (issue 28); format="audiofolder" / "videofolder" reads the
 * audio files / videos of a tree that has images too. Each file is
 * stat'ed at open (its size sizes the ring's rows) and must still have that size when read
 * ("changed since the dataset was opened" otherwise).
 */
#include "source/stk_source.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern const stk__source_methods stk__src_audiofolder; /* below: format="audiofolder" */
extern const stk__source_methods stk__src_videofolder; /* below: format="videofolder" */

/* What a tree's records hold: its files of one media kind (the first with files, in this order,
 * unless the format names one). */
typedef struct media_kind {
    const char *field;  /* the bytes field: "image", "audio", "video" */
    const char *source; /* the metadata's "source" */
    bool (*is_media)(const char *name);
    const char *exts; /* for messages */
} media_kind;

static const media_kind kinds_of_media[3] = {
    {"image", "imagefolder", stk__image_name,
     "images (extensions: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp)"},
    {"audio", "audiofolder", stk__audio_name,
     "audio files (extensions: .wav .flac .mp3 .ogg .oga .opus .aif .aiff)"},
    {"video", "videofolder", stk__video_name,
     "videos (extensions: .mp4 .m4v .mov .mkv .webm .avi)"}};

#define MAX_DEPTH 256 /* nested directories under a class */
#define MAX_SKIPPED_LISTED 16

typedef struct item {
    char *rel; /* relative to the root */
    uint64_t size;
    int64_t label;
} item;

typedef struct folder {
    char *root;
    item *items;
    size_t n, cap;
    stk__strlist skipped; /* non-regular entries left out */
} folder;

/* A directory of a class tree with its file names, as os.walk yields it. */
typedef struct walkdir {
    char *rel;
    stk__strlist files;
} walkdir;

typedef struct walk {
    const char *root;
    walkdir *dirs;
    size_t n, cap;
    uint64_t stack[MAX_DEPTH][2]; /* (dev, ino) of the directories on the current path */
    int depth;
} walk;

/* Any directory: the last source in detection order, so a directory of shards or of .npy files
 * goes to those, and any other directory gets ImageFolder's errors ("no class folders"). */
static int folder_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    (void)path;
    (void)head;
    (void)n;
    return st->is_dir;
}

/* Collect directory `rel` (and, recursively, its subdirectories) with their file names. */
static stk_status walk_dir(walk *w, const char *rel, char *err, size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist names = {0};
    char *abs = stk__path_join(w->root, rel), *sub = NULL;
    stk__stat st;
    if (!abs)
        return stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    STK_TRY(stk__vfs_stat(abs, &st, err, err_size));
    for (int i = 0; i < w->depth; i++)
        if (st.ino && w->stack[i][0] == st.dev && w->stack[i][1] == st.ino)
            goto fail; /* a symlink back to an ancestor: already walked */
    if (w->depth == MAX_DEPTH)
        STK_FAIL_E(STK_ELIMIT, "%s: directories nested too deep", abs);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        walkdir *v = stk__realloc(w->dirs, cap * sizeof(*v));
        if (!v)
            STK_FAIL_E(STK_ENOMEM, "out of memory");
        w->dirs = v;
        w->cap = cap;
    }
    size_t me = w->n++;
    memset(&w->dirs[me], 0, sizeof(w->dirs[me]));
    if (!(w->dirs[me].rel = stk__strdup(rel)))
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    w->stack[w->depth][0] = st.dev;
    w->stack[w->depth][1] = st.ino;
    w->depth++;
    STK_TRY(stk__vfs_for(abs)->list(abs, &names, err, err_size));
    stk__strlist_sort(&names);
    for (size_t i = 0; i < names.n && rc == STK_OK; i++) {
        stk__free(sub);
        sub = stk__path_join(abs, names.v[i]);
        if (!sub)
            STK_FAIL_E(STK_ENOMEM, "out of memory");
        /* os.walk: is_dir() follows symlinks; anything else (a broken link too) is a file */
        if (stk__vfs_stat(sub, &st, NULL, 0) == STK_OK && st.is_dir) {
            char *r = stk__path_join(rel, names.v[i]);
            rc = r ? walk_dir(w, r, err, err_size)
                   : stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            stk__free(r);
        } else if (stk__strlist_add(&w->dirs[me].files, names.v[i]) < 0) {
            rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
        }
    }
    w->depth--;
fail:
    stk__free(sub);
    stk__free(abs);
    stk__strlist_free(&names);
    return rc;
}

static int cmp_walkdir(const void *a, const void *b)
{
    return strcmp(((const walkdir *)a)->rel, ((const walkdir *)b)->rel);
}

/* Files of walk w whose name is_media accepts (stk__image_name, stk__audio_name). */
static size_t count_media(const walk *w, bool (*is_media)(const char *))
{
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        for (size_t j = 0; j < w->dirs[i].files.n; j++)
            n += is_media(w->dirs[i].files.v[j]);
    return n;
}

/* Append the files is_media accepts (the images, or the audio files) of class `label` (walk w)
 * to the folder, in os.walk's sorted order. */
static stk_status add_class(folder *fo, walk *w, int64_t label, bool (*is_media)(const char *),
                            char *err, size_t err_size)
{
    if (w->n > 1)
        qsort(w->dirs, w->n, sizeof(*w->dirs), cmp_walkdir);
    for (size_t i = 0; i < w->n; i++) {
        const stk__strlist *files = &w->dirs[i].files;
        for (size_t j = 0; j < files->n; j++) {
            if (!is_media(files->v[j]))
                continue;
            char *rel = stk__path_join(w->dirs[i].rel, files->v[j]);
            char *abs = rel ? stk__path_join(fo->root, rel) : NULL;
            stk__stat st;
            stk_status rc = abs ? stk__vfs_stat(abs, &st, err, err_size)
                                : stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
            if (rc == STK_EIO) { /* "PATH: why" -> "PATH: cannot read: why" (a dangling link) */
                char why[STK_ERRMSG_SIZE];
                size_t la = strlen(abs);
                snprintf(why, sizeof(why), "%s",
                         strncmp(err, abs, la) == 0 && err[la] == ':' ? err + la + 2 : err);
                stk__set_error(err, err_size, rc, "%s: cannot read: %s", abs, why);
            }
            stk__free(abs);
            if (rc == STK_OK && !st.is_regular) {
                rc = stk__strlist_add(&fo->skipped, rel) < 0
                         ? stk__set_error(err, err_size, STK_ENOMEM, "out of memory")
                         : STK_OK;
                stk__free(rel);
                if (rc < 0)
                    return rc;
                continue;
            }
            if (rc == STK_OK && fo->n == fo->cap) {
                size_t cap = fo->cap ? fo->cap * 2 : 256;
                item *v = stk__realloc(fo->items, cap * sizeof(*v));
                if (v) {
                    fo->items = v;
                    fo->cap = cap;
                } else {
                    rc = stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
                }
            }
            if (rc < 0) {
                stk__free(rel);
                return rc;
            }
            fo->items[fo->n++] = (item){rel, st.size, label};
        }
    }
    return STK_OK;
}

static void walk_free(walk *w)
{
    for (size_t i = 0; i < w->n; i++) {
        stk__free(w->dirs[i].rel);
        stk__strlist_free(&w->dirs[i].files);
    }
    stk__free(w->dirs);
}

/* {"source": "imagefolder" (or "audiofolder", "videofolder"), "classes": [...], "skipped":
 * [first 16], "n_skipped": N}. */
static char *metadata(const stk__strlist *classes, const stk__strlist *skipped,
                      const media_kind *mk)
{
    size_t size = 128, n_skip = STK_MIN(skipped->n, MAX_SKIPPED_LISTED);
    for (size_t i = 0; i < classes->n; i++)
        size += 6 * strlen(classes->v[i]) + 4;
    for (size_t i = 0; i < n_skip; i++)
        size += 6 * strlen(skipped->v[i]) + 4;
    char *s = stk__malloc(size), *p = s;
    if (!s)
        return NULL;
    p += sprintf(p, "{\"source\": \"%s\", \"classes\": [", mk->source);
    for (size_t i = 0; i < classes->n; i++)
        p = stk__json_put(p + (i ? sprintf(p, ", ") : 0), classes->v[i]);
    p += sprintf(p, "], \"skipped\": [");
    for (size_t i = 0; i < n_skip; i++)
        p = stk__json_put(p + (i ? sprintf(p, ", ") : 0), skipped->v[i]);
    sprintf(p, "], \"n_skipped\": %zu}", skipped->n);
    return s;
}

static void folder_close(stk_dataset *ds)
{
    folder *fo = ds->impl;
    if (!fo)
        return;
    for (size_t i = 0; i < fo->n; i++)
        stk__free(fo->items[i].rel);
    stk__free(fo->items);
    stk__free(fo->root);
    stk__strlist_free(&fo->skipped);
    stk__free(fo);
    ds->impl = NULL;
}

static stk_status folder_open(stk_dataset *ds, const char *const *paths, size_t n_paths, char *err,
                              size_t err_size)
{
    stk_status rc = STK_OK;
    stk__strlist entries = {0}, classes = {0}, empty = {0};
    walk *walks = NULL;
    const media_kind *mk = &kinds_of_media[0];
    if (n_paths != 1)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "%s: an ImageFolder dataset is one directory, got %zu paths",
                              paths[0], n_paths);
    const char *root = paths[0];
    stk__stat st;
    STK_TRY(stk__vfs_stat(root, &st, err, err_size));
    if (!st.is_dir)
        STK_FAIL_E(STK_EINVAL,
                   "%s: not a directory (an ImageFolder tree has one subfolder per class)", root);
    folder *fo = stk__calloc(1, sizeof(*fo));
    if (!fo || !(fo->root = stk__strdup(root))) {
        stk__free(fo);
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    }
    ds->impl = fo;
    for (size_t lr = strlen(fo->root); lr > 1 && fo->root[lr - 1] == '/'; lr--)
        fo->root[lr - 1] = '\0'; /* "train/" names records "train/cls/x.jpg", as stk__path_join */
    STK_TRY(stk__paths_list_dir(root, NULL, true, &entries, err, err_size));
    for (size_t i = 0; i < entries.n; i++) {
        stk__stat e;
        if (stk__vfs_stat(entries.v[i], &e, NULL, 0) == STK_OK && e.is_dir) {
            const char *base = strrchr(entries.v[i], '/');
            if (stk__strlist_add(&classes, base ? base + 1 : entries.v[i]) < 0)
                STK_FAIL_E(STK_ENOMEM, "out of memory");
        }
    }
    if (classes.n == 0)
        STK_FAIL_E(STK_EINVAL,
                   "%s: no .stk shards, no .npy files and no class folders in %s (an ImageFolder "
                   "tree has one subfolder per class, as torchvision expects; `stoker pack` makes "
                   "shards)",
                   root, root);
    /* Walk every class, then read images, or where the tree has none audio files, or where it
     * has neither videos (or what format="audiofolder" / "videofolder" says). */
    if (!(walks = stk__calloc(classes.n, sizeof(*walks))))
        STK_FAIL_E(STK_ENOMEM, "out of memory");
    for (size_t c = 0; c < classes.n; c++) {
        walks[c].root = root;
        STK_TRY(walk_dir(&walks[c], classes.v[c], err, err_size));
    }
    if (ds->m == &stk__src_audiofolder || ds->m == &stk__src_videofolder) {
        mk = &kinds_of_media[ds->m == &stk__src_audiofolder ? 1 : 2];
    } else {
        for (size_t k = 0; k < 3; k++) {
            size_t n = 0;
            for (size_t c = 0; c < classes.n; c++)
                n += count_media(&walks[c], kinds_of_media[k].is_media);
            if (n) {
                mk = &kinds_of_media[k];
                break;
            }
        }
    }
    for (size_t c = 0; c < classes.n; c++) {
        size_t before = fo->n;
        STK_TRY(add_class(fo, &walks[c], (int64_t)c, mk->is_media, err, err_size));
        if (fo->n == before && stk__strlist_add(&empty, classes.v[c]) < 0)
            STK_FAIL_E(STK_ENOMEM, "out of memory");
    }
    if (empty.n) { /* torchvision: "Found no valid file for the classes ..." */
        char names[256] = "";
        for (size_t i = 0, k = 0; i < empty.n && k + 1 < sizeof(names); i++)
            k +=
                (size_t)snprintf(names + k, sizeof(names) - k, "%s'%s'", i ? ", " : "", empty.v[i]);
        STK_FAIL_E(STK_EINVAL, "class folder%s %s in %s contain%s no %s", empty.n > 1 ? "s" : "",
                   names, root, empty.n > 1 ? "" : "s", mk->exts);
    }
    /* The schema stoker pack writes. */
    const char *const names[3] = {mk->field, "label", "path"};
    static const stk_field_kind kinds[3] = {STK_FIELD_BYTES, STK_FIELD_INT64, STK_FIELD_BYTES};
    ds->n_fields = 3;
    for (int f = 0; f < 3; f++) {
        stk_field fd;
        memset(&fd, 0, sizeof(fd));
        snprintf(fd.name, sizeof(fd.name), "%s", names[f]);
        fd.kind = kinds[f];
        ds->fields[f] = stk__field_canonical(&fd);
    }
    ds->count = fo->n;
    uint64_t total = 0;
    stk__fphash fp, *h = &fp;
    stk__fp_begin(h);
    stk__fp_add_u64(h, fo->n);
    for (size_t i = 0; i < fo->n; i++) {
        const item *it = &fo->items[i];
        size_t len = strlen(it->rel);
        ds->field_max[0] = STK_MAX(ds->field_max[0], it->size);
        ds->field_max[2] = STK_MAX(ds->field_max[2], len);
        ds->max_record = STK_MAX(ds->max_record, it->size + 8 + len);
        total += it->size;
        stk__fp_add(h, it->rel, len + 1);
        stk__fp_add_u64(h, it->size);
        stk__fp_add_u64(h, (uint64_t)it->label);
    }
    ds->field_max[1] = 8;
    ds->fingerprint = stk__fp_end(h);
    STK_TRY(stk__dataset_files_alloc(ds, 1, err, err_size));
    ds->files[0].path = stk__strdup(root);
    ds->files[0].count = fo->n;
    ds->files[0].size = ds->files[0].data_size = total;
    ds->files[0].metadata = metadata(&classes, &fo->skipped, mk);
    if (!ds->files[0].path || !ds->files[0].metadata)
        STK_FAIL_E(STK_ENOMEM, "out of memory");
fail:
    for (size_t c = 0; walks && c < classes.n; c++)
        walk_free(&walks[c]);
    stk__free(walks);
    stk__strlist_free(&entries);
    stk__strlist_free(&classes);
    stk__strlist_free(&empty);
    return rc;
}

static void folder_describe(const stk_dataset *ds, uint64_t i, char *buf, size_t size)
{
    const folder *fo = ds->impl;
    size_t lr = strlen(fo->root);
    snprintf(buf, size, "%s%s%s (record %" PRIu64 ")", fo->root,
             lr && fo->root[lr - 1] == '/' ? "" : "/", fo->items[i].rel, i);
}

/* The byte source's error about record i's file ("PATH: why") as "WHERE: why" (read's errors). */
static stk_status item_error(const stk_dataset *ds, uint64_t i, stk_status rc, char *err,
                             size_t err_size)
{
    const folder *fo = ds->impl;
    char where[STK_ERRMSG_SIZE];
    char *abs = stk__path_join(fo->root, fo->items[i].rel);
    if (!abs)
        return rc;
    folder_describe(ds, i, where, sizeof(where));
    rc = stk__source_read_error(rc, where, abs, err, err_size);
    stk__free(abs);
    return rc;
}

/* Open record i's file, which must still have the size it had when the dataset was opened. */
static stk_status open_item(const stk_dataset *ds, uint64_t i, stk__file **out, char *err,
                            size_t err_size)
{
    const folder *fo = ds->impl;
    const item *it = &fo->items[i];
    char *abs = stk__path_join(fo->root, it->rel);
    stk__file *f = NULL;
    *out = NULL;
    stk_status rc = abs ? stk__vfs_open(abs, &f, err, err_size)
                        : stk__set_error(err, err_size, STK_ENOMEM, "out of memory");
    if (rc == STK_OK && f->size != it->size)
        rc = stk__set_error(err, err_size, STK_EFORMAT,
                            "%s: changed since the dataset was opened (size %" PRIu64 " -> %" PRIu64
                            ")",
                            abs, it->size, f->size);
    stk__free(abs);
    if (rc < 0) {
        stk__vfs_close(f);
        return item_error(ds, i, rc, err, err_size);
    }
    *out = f;
    return STK_OK;
}

static stk_status folder_read(const stk_dataset *ds, stk__cursor *cur, uint64_t i,
                              void *const dst[], const size_t cap[], unsigned flags,
                              stk__recinfo *info, char *err, size_t err_size)
{
    (void)cur;
    (void)flags;
    const folder *fo = ds->impl;
    char where[STK_ERRMSG_SIZE];
    if (i >= ds->count)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "record %" PRIu64 " out of range (dataset has %" PRIu64 " records)",
                              i, ds->count);
    const item *it = &fo->items[i];
    size_t len = strlen(it->rel);
    memset(info, 0, sizeof(*info));
    info->local = i;
    info->offset = 0;
    info->field_size[0] = it->size;
    info->field_size[1] = 8;
    info->field_size[2] = len;
    info->size = it->size + 8 + len;
    if ((dst[0] && it->size > cap[0]) || 8 > cap[1] || len > cap[2]) {
        folder_describe(ds, i, where, sizeof(where));
        return stk__set_error(err, err_size, STK_ELIMIT, "%s: record over its buffer", where);
    }
    if (dst[0]) { /* else read in place (folder_field_open) */
        stk__file *f = NULL;
        stk_status rc = open_item(ds, i, &f, err, err_size);
        if (rc < 0)
            return rc;
        rc = stk__vfs_read(f, 0, dst[0], (size_t)it->size, err, err_size);
        stk__vfs_close(f);
        if (rc < 0)
            return item_error(ds, i, rc, err, err_size);
    }
    uint8_t *l = dst[1];
    for (int b = 0; b < 8; b++)
        l[b] = (uint8_t)((uint64_t)it->label >> (8 * b));
    memcpy(dst[2], it->rel, len);
    return STK_OK;
}

/* The file itself is the record's first field (image, audio or video). */
static stk_status folder_field_open(const stk_dataset *ds, uint64_t i, size_t f, stk__file **file,
                                    stk__brange *r, uint64_t *bytes, char *err, size_t err_size)
{
    *bytes = 0;
    *file = NULL;
    if (i >= ds->count || f != 0)
        return stk__set_error(err, err_size, STK_EINVAL,
                              "field %zu of record %" PRIu64 " cannot be read in place", f, i);
    stk_status rc = open_item(ds, i, file, err, err_size);
    if (rc < 0)
        return rc;
    *r = (stk__brange){0, ((const folder *)ds->impl)->items[i].size};
    return STK_OK;
}

const stk__source_methods stk__src_imagefolder = {
    .name = "imagefolder",
    .summary = "an ImageFolder tree, ROOT/<class>/**/<image>, as torchvision reads it (or of "
               "audio files, when it holds no image, or of videos, when it holds neither)",
    .probe = folder_probe,
    .open = folder_open,
    .close = folder_close,
    .read = folder_read,
    .describe = folder_describe,
    .field_open = folder_field_open,
};

/* Never detected (a directory is imagefolder's, which reads audio or video in a tree without
 * images): format="audiofolder" reads the audio files of a tree that holds images too (cover
 * art), format="videofolder" its videos (thumbnails beside them). */
static int audiofolder_probe(const char *path, const stk__stat *st, const uint8_t *head, size_t n)
{
    (void)path, (void)st, (void)head, (void)n;
    return 0;
}

const stk__source_methods stk__src_audiofolder = {
    .name = "audiofolder",
    .summary = "a tree ROOT/<class>/**/<audio file> (wav, flac, mp3, ogg, opus, aiff), labelled "
               "as ImageFolder labels images",
    .probe = audiofolder_probe,
    .open = folder_open,
    .close = folder_close,
    .read = folder_read,
    .describe = folder_describe,
    .field_open = folder_field_open,
};

const stk__source_methods stk__src_videofolder = {
    .name = "videofolder",
    .summary = "a tree ROOT/<class>/**/<video> (mp4, mkv, webm, avi, mov; Kinetics, UCF101), "
               "labelled as ImageFolder labels images",
    .probe = audiofolder_probe,
    .open = folder_open,
    .close = folder_close,
    .read = folder_read,
    .describe = folder_describe,
    .field_open = folder_field_open,
};
