/*
 * stk_crop.c: box samplers and the per-axis geometry algebra of the fused transform.
 *
 * Every geometric op is folded into one stk__xaxis per axis (see stk_xform.h): crops and flips
 * move the output window over the resample grid, a resize re-bases the grid onto the window it
 * resizes. Nothing here touches pixels; stk_resize.c samples the decoded buffer where the axes
 * say. The samplers reproduce torchvision 0.14 (transforms.py, functional.py) rule for rule,
 * including Python's round-half-to-even in int(round(...)), with random numbers from the
 * sample's counter-based stream instead of torch's global generator.
 */
#include "xform/stk_xform.h"

#include <math.h>

void stk__axis_init(stk__xaxis *a, int64_t size)
{
    a->c0 = 0.0;
    a->c1 = (double)size;
    a->lim0 = 0.0;
    a->lim1 = (double)size;
    a->grid = size;
    a->v0 = 0;
    a->v1 = size;
    a->off = 0;
    a->dir = 1;
    a->n = size;
    a->pad_mode = STK__PAD_CONSTANT;
    a->n_pads = 0;
}

void stk__axis_crop(stk__xaxis *a, int64_t c, int64_t m)
{
    if (c < 0 || c + m > a->n) { /* padding: only the current image stays content */
        int64_t lo = a->dir > 0 ? a->off : a->off - a->n + 1, hi = lo + a->n;
        if (a->n_pads < STK__XF_MAX_OPS) {
            a->pads[a->n_pads].lo = lo;
            a->pads[a->n_pads].hi = hi;
            a->pads[a->n_pads].mode = a->pad_mode;
            a->n_pads++;
        }
        double span = a->c1 - a->c0;
        a->v0 = STK_MAX(a->v0, lo);
        a->v1 = STK_MIN(a->v1, hi);
        a->lim0 = STK_MAX(a->lim0, a->c0 + span * (double)lo / (double)a->grid);
        a->lim1 = STK_MIN(a->lim1, a->c0 + span * (double)hi / (double)a->grid);
    }
    a->off += a->dir * c;
    a->n = m;
}

/* u mapped into [lo, hi) by numpy's pad mode (u outside it). */
static int64_t pad_map1(int64_t u, int64_t lo, int64_t hi, int mode)
{
    int64_t len = hi - lo, k = u - lo;
    switch (mode) {
    case STK__PAD_EDGE:
        k = k < 0 ? 0 : len - 1;
        break;
    case STK__PAD_REFLECT: { /* ... 2 1 | 0 1 2 ... len-1 | len-2 ...: period 2 (len - 1) */
        int64_t period = 2 * (len - 1);
        if (period == 0) {
            k = 0;
            break;
        }
        k %= period;
        k = k < 0 ? k + period : k;
        k = k >= len ? period - k : k;
        break;
    }
    default: { /* symmetric: ... 1 0 | 0 1 ... len-1 | len-1 ...: period 2 len */
        int64_t period = 2 * len;
        k %= period;
        k = k < 0 ? k + period : k;
        k = k >= len ? period - 1 - k : k;
        break;
    }
    }
    return lo + k;
}

int64_t stk__axis_pad_map(const stk__xaxis *a, int64_t u)
{
    for (int s = a->n_pads - 1; s >= 0; s--) {
        int64_t lo = a->pads[s].lo, hi = a->pads[s].hi;
        if (u >= lo && u < hi)
            continue;
        if (a->pads[s].mode == STK__PAD_CONSTANT || hi <= lo)
            return u; /* padding: zero, or the fill */
        u = pad_map1(u, lo, hi, a->pads[s].mode);
    }
    return u;
}

void stk__axis_flip(stk__xaxis *a)
{
    a->off += a->dir * (a->n - 1);
    a->dir = -a->dir;
}

void stk__axis_resize(stk__xaxis *a, int64_t m)
{
    /* PIL skips an axis whose size does not change (and so does torchvision on PIL images). */
    if (m == a->n)
        return;
    int64_t lo = a->dir > 0 ? a->off : a->off - a->n + 1; /* grid pixels of the current image */
    int64_t hi = lo + a->n;
    double span = a->c1 - a->c0;
    /* Written as c0 + span * k / grid so that integer windows stay exact before any resize. */
    double c0 = a->c0 + span * (double)lo / (double)a->grid;
    double c1 = a->c0 + span * (double)hi / (double)a->grid;
    /* The resize sees the current image only; padding inside it is not content, so taps stay
     * within what was content before (an edge extension instead of zeros: documented). */
    a->lim0 = STK_MAX(a->lim0, c0);
    a->lim1 = STK_MIN(a->lim1, c1);
    a->c0 = c0;
    a->c1 = c1;
    a->grid = m;
    a->v0 = 0; /* padding inside the resized image was resampled as an edge extension */
    a->v1 = m;
    a->n_pads = 0;
    /* Resampling commutes with mirroring (the filter is symmetric), so a mirrored image stays
     * mirrored: output pixel 0 is the last grid pixel. */
    a->off = a->dir > 0 ? 0 : m - 1;
    a->n = m;
}

void stk__axis_center_crop(stk__xaxis *a, int64_t m)
{
    int64_t n = a->n, c;
    if (m > n) {
        c = -((m - n) / 2); /* torchvision pads (m - n) // 2 before, the rest after */
    } else {
        int64_t d = n - m;
        c = d / 2;
        if ((d & 1) && (c & 1)) /* (d / 2.0) ends in .5: Python's round goes to the even one */
            c++;
    }
    stk__axis_crop(a, c, m);
}

uint64_t stk__rng_below(stk_rng *rng, uint64_t n)
{
    if (n <= 1)
        return 0;
    /* Lemire's multiply-shift with rejection: exact uniformity, usually one draw. */
    unsigned __int128 m = (unsigned __int128)stk_rng_u64(rng) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = (0 - n) % n;
        while (low < threshold) {
            m = (unsigned __int128)stk_rng_u64(rng) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double stk__rng_range(stk_rng *rng, double a, double b)
{
    return a + (b - a) * stk_rng_uniform(rng);
}

/* Python's int(round(x)) for the finite, non-negative values used here (half to even). */
static int64_t py_round(double x)
{
    if (!(x < 9.0e18)) /* also catches NaN: treated as "too large", rejected by the caller */
        return INT64_MAX;
    return (int64_t)nearbyint(x);
}

void stk__erase_box(stk_rng *rng, int64_t height, int64_t width, const double scale[2],
                    const double ratio[2], stk__erase *out)
{
    double area = (double)height * (double)width;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    out->on = false;
    for (int t = 0; t < 10; t++) {
        double target = area * stk__rng_range(rng, scale[0], scale[1]);
        double aspect = exp(stk__rng_range(rng, lr0, lr1));
        int64_t h = py_round(sqrt(target * aspect));
        int64_t w = py_round(sqrt(target / aspect));
        if (h < height && w < width) {
            out->i = (int64_t)stk__rng_below(rng, (uint64_t)(height - h + 1));
            out->j = (int64_t)stk__rng_below(rng, (uint64_t)(width - w + 1));
            out->h = h;
            out->w = w;
            out->on = true;
            return;
        }
    }
}

void stk__rrc_box(stk_rng *rng, int64_t height, int64_t width, const double scale[2],
                  const double ratio[2], stk__box *out)
{
    double area = (double)height * (double)width;
    double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
    for (int t = 0; t < 10; t++) {
        double target = area * stk__rng_range(rng, scale[0], scale[1]);
        double aspect = exp(stk__rng_range(rng, lr0, lr1));
        int64_t w = py_round(sqrt(target * aspect));
        int64_t h = py_round(sqrt(target / aspect));
        if (0 < w && w <= width && 0 < h && h <= height) {
            out->i = (int64_t)stk__rng_below(rng, (uint64_t)(height - h + 1));
            out->j = (int64_t)stk__rng_below(rng, (uint64_t)(width - w + 1));
            out->h = h;
            out->w = w;
            out->fallback = false;
            return;
        }
    }
    /* Fallback to the central crop, clamped to the ratio range. */
    double in_ratio = (double)width / (double)height;
    double rmin = STK_MIN(ratio[0], ratio[1]), rmax = STK_MAX(ratio[0], ratio[1]);
    int64_t w, h;
    if (in_ratio < rmin) {
        w = width;
        h = py_round((double)w / rmin);
    } else if (in_ratio > rmax) {
        h = height;
        w = py_round((double)h * rmax);
    } else {
        w = width;
        h = height;
    }
    /* torchvision can return an empty box for extreme ratio ranges (then fails to resize); we
     * keep at least one pixel. */
    h = STK_MIN(STK_MAX(h, 1), height);
    w = STK_MIN(STK_MAX(w, 1), width);
    out->i = (height - h) / 2;
    out->j = (width - w) / 2;
    out->h = h;
    out->w = w;
    out->fallback = true;
}

void stk__resize_short(int64_t h, int64_t w, int64_t short_side, int64_t *out_h, int64_t *out_w)
{
    int64_t s = w <= h ? w : h, l = w <= h ? h : w;
    /* Python: int(requested_new_short * long / short), a true (double) division, truncated. */
    int64_t new_long = (int64_t)((double)(short_side * l) / (double)s);
    if (w <= h) {
        *out_w = short_side;
        *out_h = new_long;
    } else {
        *out_h = short_side;
        *out_w = new_long;
    }
}
