/*
 * stk_warp.c: PIL's affine warps on an interleaved RGB uint8 image, as torchvision 0.14 uses them
 * on PIL images (F.affine -> Image.transform(AFFINE); F.rotate -> Image.rotate), so that
 * RandomRotation, RandomAffine and the augmentation policies (stk_autoaug.c) give PIL's pixels.
 *
 * Pillow's Geometry.c, for RGB:
 *   - NEAREST: ImagingScaleAffine when the matrix has no rotation/shear terms; else 16.16 fixed
 *     point (affine_fixed) when the four corners map inside +-32768; else floating point. Input
 *     pixel = the floor of the mapped pixel centre (COORD: -1 for negatives);
 *   - BILINEAR: the generic engine: the mapped centre (x + 0.5, y + 0.5) must lie in [0, w) x
 *     [0, h), then x - 0.5, y - 0.5 interpolated between the clipped neighbours in double, and
 *     truncated to uint8;
 *   - outside the input: the fill colour (Image.new(mode, size, fillcolor) before the warp).
 * Image.rotate: counter-clockwise degrees; the transposes for 0/90/180/270 without a centre; the
 * matrix entries rounded to 15 decimals; expand grows the output to hold the whole image.
 *
 * Threads: pure functions.
 */
#include "xform/stk_xform.h"

#include <math.h>
#include <string.h>

static inline int coord(double v)
{
    return v < 0.0 ? -1 : (int)v;
}

static void fill_rgb(uint8_t *dst, size_t npix, const uint8_t fill[3])
{
    if (fill[0] == fill[1] && fill[1] == fill[2]) {
        memset(dst, fill[0], npix * 3);
        return;
    }
    for (size_t k = 0; k < npix; k++)
        memcpy(dst + k * 3, fill, 3);
}

static inline void put(uint8_t *dst, int dw, int x, int y, const uint8_t *src, int sw, int xi,
                       int yi)
{
    memcpy(dst + ((size_t)y * dw + x) * 3, src + ((size_t)yi * sw + xi) * 3, 3);
}

static void nearest(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh,
                    const double a[6])
{
    if (a[1] == 0 && a[3] == 0) { /* ImagingScaleAffine */
        double yo = a[5] + a[4] * 0.5;
        for (int y = 0; y < dh; y++, yo += a[4]) {
            int yi = coord(yo);
            if (yi < 0 || yi >= sh)
                continue;
            double xo = a[2] + a[0] * 0.5;
            for (int x = 0; x < dw; x++, xo += a[0]) {
                int xi = coord(xo);
                if (xi >= 0 && xi < sw)
                    put(dst, dw, x, y, src, sw, xi, yi);
            }
        }
        return;
    }
#define FITS(x, y)                                                                                 \
    (fabs(a[0] * (x) + a[1] * (y) + a[2]) < 32768.0 &&                                             \
     fabs(a[3] * (x) + a[4] * (y) + a[5]) < 32768.0)
    if (FITS(0, 0) && FITS(dw, dh) && FITS(0, dh) && FITS(dw, 0)) { /* affine_fixed: 16.16 */
#define FIX(v) ((int)floor((v)*65536.0 + 0.5))
        int a0 = FIX(a[0]), a1 = FIX(a[1]), a3 = FIX(a[3]), a4 = FIX(a[4]);
        int a2 = FIX(a[2] + a[1] * 0.5 + a[0] * 0.5), a5 = FIX(a[5] + a[4] * 0.5 + a[3] * 0.5);
#undef FIX
        for (int y = 0; y < dh; y++, a2 += a1, a5 += a4) {
            int xx = a2, yy = a5;
            for (int x = 0; x < dw; x++, xx += a0, yy += a3) {
                int xi = xx >> 16, yi = yy >> 16;
                if (xi >= 0 && xi < sw && yi >= 0 && yi < sh)
                    put(dst, dw, x, y, src, sw, xi, yi);
            }
        }
        return;
    }
#undef FITS
    double xo = a[2] + a[1] * 0.5 + a[0] * 0.5, yo = a[5] + a[4] * 0.5 + a[3] * 0.5;
    for (int y = 0; y < dh; y++, xo += a[1], yo += a[4]) {
        double xx = xo, yy = yo;
        for (int x = 0; x < dw; x++, xx += a[0], yy += a[3]) {
            int xi = coord(xx), yi = coord(yy);
            if (xi >= 0 && xi < sw && yi >= 0 && yi < sh)
                put(dst, dw, x, y, src, sw, xi, yi);
        }
    }
}

static inline int clip(int v, int n)
{
    return v < 0 ? 0 : v < n ? v : n - 1;
}

/* PIL's generic engine with bilinear_filter32RGB. */
static void bilinear(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh,
                     const double a[6])
{
    for (int y = 0; y < dh; y++) {
        for (int x = 0; x < dw; x++) {
            double xc = x + 0.5, yc = y + 0.5;
            double xin = a[0] * xc + a[1] * yc + a[2], yin = a[3] * xc + a[4] * yc + a[5];
            if (!(xin >= 0.0 && xin < sw && yin >= 0.0 && yin < sh))
                continue;
            xin -= 0.5;
            yin -= 0.5;
            int xf = (int)xin, yf = (int)yin; /* floor (xin, yin >= -0.5): no libm call */
            xf -= xin < xf;
            yf -= yin < yf;
            double dx = xin - xf, dy = yin - yf;
            const uint8_t *r0 = src + (size_t)clip(yf, sh) * sw * 3;
            const uint8_t *r1 = yf + 1 >= 0 && yf + 1 < sh ? src + (size_t)(yf + 1) * sw * 3 : NULL;
            size_t x0 = (size_t)clip(xf, sw) * 3, x1 = (size_t)clip(xf + 1, sw) * 3;
            uint8_t *o = dst + ((size_t)y * dw + x) * 3;
            for (int b = 0; b < 3; b++) {
                double v1 = r0[x0 + b] + (r0[x1 + b] - r0[x0 + b]) * dx;
                double v2 = r1 ? r1[x0 + b] + (r1[x1 + b] - r1[x0 + b]) * dx : v1;
                o[b] = (uint8_t)(v1 + (v2 - v1) * dy);
            }
        }
    }
}

void stk__warp_affine(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh,
                      const double a[6], int interp, const uint8_t fill[3])
{
    fill_rgb(dst, (size_t)dw * dh, fill);
    if (interp == STK__INTERP_BILINEAR)
        bilinear(dst, dw, dh, src, sw, sh, a);
    else
        nearest(dst, dw, dh, src, sw, sh, a);
}

void stk__warp_inverse_matrix(const double center[2], double angle, const double translate[2],
                              double scale, const double shear[2], double m[6])
{
    double rot = angle * M_PI / 180.0, sx = shear[0] * M_PI / 180.0, sy = shear[1] * M_PI / 180.0;
    double cx = center[0], cy = center[1], tx = translate[0], ty = translate[1];
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    m[0] = d / scale;
    m[1] = -b / scale;
    m[2] = 0.0 / scale;
    m[3] = -c / scale;
    m[4] = a / scale;
    m[5] = 0.0 / scale;
    m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
    m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
    m[2] += cx;
    m[5] += cy;
}

/* Python's round(x, 15) closely enough for cos/sin values (|x| <= 1). */
static double round15(double x)
{
    return nearbyint(x * 1e15) / 1e15;
}

static double angle360(double angle)
{
    angle = fmod(angle, 360.0); /* Python's %: the sign of the divisor */
    return angle < 0 ? angle + 360.0 : angle;
}

/* Whether Image.rotate takes a transpose (or copy) shortcut. */
static bool rotate_transposes(double angle, bool has_center, bool expand, int w, int h)
{
    angle = angle360(angle);
    return !has_center &&
           (angle == 0 || angle == 180 || ((angle == 90 || angle == 270) && (expand || w == h)));
}

void stk__warp_rotate_size(int w, int h, double angle, const double *center, bool expand, int *nw,
                           int *nh, double m[6])
{
    *nw = w;
    *nh = h;
    double a = angle360(angle);
    if (rotate_transposes(a, center != NULL, expand, w, h)) {
        if (a == 90 || a == 270) {
            *nw = h;
            *nh = w;
        }
        return;
    }
    double r = -a * M_PI / 180.0;
    double cx = center ? center[0] : w / 2.0, cy = center ? center[1] : h / 2.0;
    m[0] = round15(cos(r));
    m[1] = round15(sin(r));
    m[2] = 0.0;
    m[3] = round15(-sin(r));
    m[4] = round15(cos(r));
    m[5] = 0.0;
    double x0 = -cx, y0 = -cy;
    m[2] = m[0] * x0 + m[1] * y0 + m[2];
    m[5] = m[3] * x0 + m[4] * y0 + m[5];
    m[2] += cx;
    m[5] += cy;
    if (!expand)
        return;
    double xmin = HUGE_VAL, xmax = -HUGE_VAL, ymin = HUGE_VAL, ymax = -HUGE_VAL;
    const double corner[4][2] = {{0, 0}, {w, 0}, {w, h}, {0, h}};
    for (int k = 0; k < 4; k++) {
        double x = m[0] * corner[k][0] + m[1] * corner[k][1] + m[2];
        double y = m[3] * corner[k][0] + m[4] * corner[k][1] + m[5];
        xmin = fmin(xmin, x);
        xmax = fmax(xmax, x);
        ymin = fmin(ymin, y);
        ymax = fmax(ymax, y);
    }
    *nw = (int)(ceil(xmax) - floor(xmin));
    *nh = (int)(ceil(ymax) - floor(ymin));
    double tx = -(*nw - w) / 2.0, ty = -(*nh - h) / 2.0;
    double t2 = m[0] * tx + m[1] * ty + m[2], t5 = m[3] * tx + m[4] * ty + m[5];
    m[2] = t2;
    m[5] = t5;
}

void stk__warp_rotate(uint8_t *dst, const uint8_t *src, int w, int h, double angle,
                      const double *center, bool expand, int interp, const uint8_t fill[3])
{
    double m[6];
    int nw, nh;
    stk__warp_rotate_size(w, h, angle, center, expand, &nw, &nh, m);
    double a = angle360(angle);
    if (!rotate_transposes(a, center != NULL, expand, w, h)) {
        stk__warp_affine(dst, nw, nh, src, w, h, m, interp, fill);
        return;
    }
    if (a == 0) {
        memcpy(dst, src, (size_t)w * h * 3);
        return;
    }
    for (int y = 0; y < nh; y++)
        for (int x = 0; x < nw; x++) {
            int xi, yi;
            if (a == 180) {
                xi = w - 1 - x;
                yi = h - 1 - y;
            } else if (a == 90) { /* ROTATE_90: counter-clockwise */
                xi = w - 1 - y;
                yi = x;
            } else {
                xi = y;
                yi = h - 1 - x;
            }
            put(dst, nw, x, y, src, w, xi, yi);
        }
}
