/*
 * gen_sampling.c: writes the JPEG fixtures of tests/data/decode/ that TurboJPEG cannot make:
 * unusual sampling factors (luma h4v2 and h2v4 over 1x1 chroma) for which libjpeg-turbo 2.1's
 * jpeg_crop_scanline is wrong at 1/2 and 1/4 scale (see crop_is_exact in src/decode/stk_jpeg.c).
 * Not part of the build; the outputs are committed. To regenerate, from the repository root:
 *   cc tests/data/decode/gen_sampling.c -ljpeg -o /tmp/gen_sampling && /tmp/gen_sampling
 */
#include <stdio.h>
#include <stdlib.h>

#include <jpeglib.h>

static void write_jpeg(const char *path, int hy, int vy, int progressive)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    FILE *f = fopen(path, "wb");
    if (!f)
        exit(1);
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = 101;
    c.image_height = 75;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    c.comp_info[0].h_samp_factor = hy;
    c.comp_info[0].v_samp_factor = vy;
    if (progressive)
        jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    unsigned char row[101 * 3];
    unsigned s = 7;
    for (int y = 0; y < 75; y++) {
        for (int i = 0; i < 101 * 3; i++) {
            s = s * 1664525u + 1013904223u;
            int edge = ((i / 3 / 13 + y / 11) % 2) * 90;
            row[i] = (unsigned char)((i * 2 + y * 3 + edge + (s >> 27)) & 255);
        }
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

int main(void)
{
    write_jpeg("tests/data/decode/h4v2.jpg", 4, 2, 0);
    write_jpeg("tests/data/decode/h2v4_prog.jpg", 2, 4, 1);
    return 0;
}
