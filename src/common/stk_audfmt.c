/*
 * stk_audfmt.c: audio formats as the library recognises them, in one place: by their magic bytes
 * (what the audio decoders dispatch on and the transform-field pick sniffs) and by their file
 * name extensions (the audio folder tree's list, and the field-name pick's, which adds the other
 * names libsndfile reads).
 */
#include "stk_internal.h"

#include <string.h>
#include <strings.h>

/* The audio folder tree's extensions (what stk_audio_dec.c decodes), then the other names of
 * containers libsndfile reads. */
static const char *const extensions[] = {".wav",  ".flac", ".mp3",  ".ogg", ".oga",
                                         ".opus", ".aif",  ".aiff", ".au",  ".snd"};
#define N_FOLDER 8 /* the first N_FOLDER: an audio folder tree's */
#define N_EXTENSIONS (sizeof(extensions) / sizeof(extensions[0]))

size_t stk_n_audio_extensions(void)
{
    return N_EXTENSIONS;
}

const char *stk_audio_extension(size_t i)
{
    return i < N_EXTENSIONS ? extensions[i] : NULL;
}

bool stk__audio_name(const char *name)
{
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < N_FOLDER; i++)
        if (strcasecmp(dot, extensions[i]) == 0)
            return true;
    return false;
}

bool stk__audio_ext(const char *ext)
{
    for (size_t i = 0; i < N_EXTENSIONS; i++)
        if (strcasecmp(ext, extensions[i] + 1) == 0)
            return true;
    return false;
}

/* An MPEG audio frame header (MPEG 1, 2 or 2.5; layer I, II or III) at p: the sync bits and no
 * reserved field value. */
static bool mpeg_frame_header(const uint8_t *p, size_t size)
{
    if (size < 4 || p[0] != 0xFF || (p[1] & 0xE0) != 0xE0)
        return false;
    unsigned version = (p[1] >> 3) & 3, layer = (p[1] >> 1) & 3, bitrate = p[2] >> 4,
             rate = (p[2] >> 2) & 3;
    return version != 1 && layer != 0 && bitrate != 15 && rate != 3;
}

stk__audfmt stk__audio_magic(const uint8_t *p, size_t size, bool strong)
{
    if (size >= 12 &&
        (memcmp(p, "RIFF", 4) == 0 || memcmp(p, "RIFX", 4) == 0 || memcmp(p, "RF64", 4) == 0) &&
        memcmp(p + 8, "WAVE", 4) == 0)
        return STK__AUD_WAV;
    if (size >= 12 && memcmp(p, "FORM", 4) == 0 &&
        (memcmp(p + 8, "AIFF", 4) == 0 || memcmp(p + 8, "AIFC", 4) == 0))
        return STK__AUD_AIFF;
    if (size >= 4 && memcmp(p, "fLaC", 4) == 0)
        return STK__AUD_FLAC;
    if (size >= 27 && memcmp(p, "OggS", 4) == 0) {
        size_t at = 27 + (size_t)p[26]; /* the first packet, after the segment table */
        if (size >= at + 7 && memcmp(p + at, "\x01vorbis", 7) == 0)
            return STK__AUD_VORBIS;
        if (size >= at + 8 && memcmp(p + at, "OpusHead", 8) == 0)
            return STK__AUD_OPUS;
        return STK__AUD_OGG;
    }
    /* An ID3v2 tag: 10 bytes, then its syncsafe size (and a 10-byte footer when flagged) */
    if (size >= 10 && memcmp(p, "ID3", 3) == 0 && p[3] >= 2 && p[3] <= 4 &&
        !((p[6] | p[7] | p[8] | p[9]) & 0x80)) {
        size_t tag = 10 + ((size_t)p[6] << 21 | (size_t)p[7] << 14 | (size_t)p[8] << 7 | p[9]) +
                     (p[5] & 0x10 ? 10 : 0);
        if (size >= tag + 4 && memcmp(p + tag, "fLaC", 4) == 0)
            return STK__AUD_FLAC;
        return STK__AUD_MP3;
    }
    if (size >= 4 && (memcmp(p, ".snd", 4) == 0 || memcmp(p, "caff", 4) == 0))
        return STK__AUD_OTHER;
    if (!strong && mpeg_frame_header(p, size))
        return STK__AUD_MP3;
    return STK__AUD_UNKNOWN;
}

const char *stk__audfmt_name(stk__audfmt f)
{
    static const char *const names[] = {"unknown", "WAV", "FLAC", "Ogg Vorbis", "Ogg Opus",
                                        "Ogg",     "MP3", "AIFF", "audio"};
    return (unsigned)f < sizeof(names) / sizeof(names[0]) ? names[f] : "unknown";
}
