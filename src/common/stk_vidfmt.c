/*
 * stk_vidfmt.c: video files as the library recognises them, in one place: by their file name
 * extensions (a video folder tree's list and the transform-field pick's) and by the magic bytes
 * of the containers the video decoder reads (MP4/MOV, Matroska/WebM, AVI), which the field pick
 * sniffs.
 */
#include "stk_internal.h"

#include <string.h>
#include <strings.h>

/* The containers stk_avcodec.c opens, by their usual extensions. */
static const char *const extensions[] = {".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi"};
#define N_EXTENSIONS (sizeof(extensions) / sizeof(extensions[0]))

bool stk__video_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    return dot && stk__video_ext(dot + 1);
}

bool stk__video_ext(const char *ext)
{
    for (size_t i = 0; i < N_EXTENSIONS; i++)
        if (strcasecmp(ext, extensions[i] + 1) == 0)
            return true;
    return false;
}

bool stk__video_magic(const uint8_t *p, size_t size)
{
    return (size >= 8 && memcmp(p + 4, "ftyp", 4) == 0) ||         /* MP4, MOV */
           (size >= 4 && memcmp(p, "\x1a\x45\xdf\xa3", 4) == 0) || /* EBML: Matroska, WebM */
           (size >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "AVI ", 4) == 0);
}
