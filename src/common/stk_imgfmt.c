/*
 * stk_imgfmt.c: image formats as the library recognises them, in one place: by their magic bytes
 * (what the decoders dispatch on and the transform-field pick sniffs) and by their file name
 * extensions (ImageFolder's list, torchvision's IMG_EXTENSIONS, and the field-name pick's, which
 * adds the other names the decoders read; the Python package asks for the list).
 */
#include "stk_internal.h"

#include <string.h>
#include <strings.h>

/* torchvision.datasets.folder.IMG_EXTENSIONS (what ImageFolder reads), then the other names of
 * formats the decoders read. */
static const char *const extensions[] = {".jpg", ".jpeg", ".png",  ".ppm",  ".bmp",
                                         ".pgm", ".tif",  ".tiff", ".webp", ".pnm"};
#define N_FOLDER 9 /* the first N_FOLDER: torchvision's */
#define N_EXTENSIONS (sizeof(extensions) / sizeof(extensions[0]))

size_t stk_n_image_extensions(void)
{
    return N_FOLDER;
}

const char *stk_image_extension(size_t i)
{
    return i < N_FOLDER ? extensions[i] : NULL;
}

bool stk__image_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < N_FOLDER; i++)
        if (strcasecmp(dot, extensions[i]) == 0)
            return true;
    return false;
}

bool stk__image_ext(const char *ext)
{
    for (size_t i = 0; i < N_EXTENSIONS; i++)
        if (strcasecmp(ext, extensions[i] + 1) == 0)
            return true;
    return false;
}

stk__imgfmt stk__image_magic(const uint8_t *p, size_t size)
{
    static const uint8_t jpeg[3] = {0xFF, 0xD8, 0xFF},
                         png[8] = {0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A};
    if (size >= sizeof(jpeg) && memcmp(p, jpeg, sizeof(jpeg)) == 0)
        return STK__IMG_JPEG;
    if (size >= sizeof(png) && memcmp(p, png, sizeof(png)) == 0)
        return STK__IMG_PNG;
    if (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0)
        return STK__IMG_WEBP;
    /* Classic TIFF (42) and BigTIFF (43), either byte order */
    if (size >= 4 && ((p[0] == 'I' && p[1] == 'I' && (p[2] == 42 || p[2] == 43) && p[3] == 0) ||
                      (p[0] == 'M' && p[1] == 'M' && p[2] == 0 && (p[3] == 42 || p[3] == 43))))
        return STK__IMG_TIFF;
    if (size >= 2 && p[0] == 'B' && p[1] == 'M')
        return STK__IMG_BMP;
    /* Every Netpbm type (P1-P7), so that the unsupported ones get stk_pnm.c's reason */
    if (size >= 2 && p[0] == 'P' && p[1] >= '1' && p[1] <= '7')
        return STK__IMG_PNM;
    return STK__IMG_UNKNOWN;
}
