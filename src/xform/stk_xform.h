/*
 * stk_xform.h: internal interfaces of the image pipeline (src/xform).
 *
 * A transform is compiled once (stk_transform, immutable, shared by all workers) and applied per
 * sample in three steps:
 *  1. plan   (stk_transform.c, each op's row in stk_ops.c, stk_crop.c): from the image size and
 *            the sample's random stream, fold the geometric ops (RandomResizedCrop, Resize,
 *            CenterCrop, the flips) into one resample per axis (stk__xaxis), draw the flips and
 *            the pixel kernels' parameters (ColorJitter), and choose the window and DCT scale to
 *            decode;
 *  2. decode (src/decode): only that window, at that scale;
 *  3. render (stk_resize.c, the kernels (stk_color.c), stk_normalize.c): resample the decoded
 *            buffer straight to the output size (flips included), run the pixel kernels, then
 *            convert and store into the batch.
 *
 * Geometry model (one axis). The resample maps a "grid" of `grid` pixels onto the full-resolution
 * interval [c0, c1): grid pixel u has its centre at c0 + (u + 0.5) * (c1 - c0) / grid, exactly as
 * PIL (and torchvision's antialiased resize) place output pixels. Filter taps are clipped to
 * [lim0, lim1), the extent of the image the resize op saw (the crop box for RandomResizedCrop, the
 * whole image for Resize), again as PIL does. Output pixel x (0..n-1) is grid pixel off + dir * x
 * (dir = -1 after an odd number of flips); grid pixels outside [v0, v1) (at most [0, grid)) are
 * padding (zero), which is how a CenterCrop larger than its input, Pad and RandomCrop's padding
 * behave in torchvision.
 */
#ifndef STK_XFORM_H
#define STK_XFORM_H

#include "decode/stk_decode.h"
#include "stk_internal.h"

#include <math.h>
#include <stdatomic.h>

#define STK__XF_MAX_OPS 16     /* ops per transform */
#define STK__XF_MAX_SIZE 16384 /* largest output (and op) height or width */
#define STK__XF_MAX_KERNEL 255 /* largest GaussianBlur kernel side */

/* The pixel limit stk_transform_opts.max_pixels = 0 stands for. */
#define STK__XF_DEFAULT_MAX_PIXELS (64ull << 20)

struct stk__op_def;

/* A compiled transform. Immutable after stk_transform_create. `media` says which pipeline runs
 * it (stk_media.h); the fields after `video` are the image pipeline's (an audio transform keeps
 * its ops here too, and its compiled pipeline behind `audio`; a video transform compiles its
 * image ops into a second, image, transform behind `video`). */
struct stk_transform {
    stk_media media;
    struct stk__atransform *audio; /* STK_MEDIA_AUDIO: stk_audio.h */
    struct stk__vtransform *video; /* STK_MEDIA_VIDEO: stk_video.h */
    stk_op ops[STK__XF_MAX_OPS];
    const struct stk__op_def *defs[STK__XF_MAX_OPS]; /* the table row of each op */
    size_t n_ops;
    stk_dtype dtype;
    bool nhwc;
    bool exact;
    uint64_t max_pixels;
    bool lenient;          /* stk_transform_opts.lenient: passed to each worker's decoder */
    uint32_t out_w, out_h; /* output size, fixed by the ops */
    bool pad_fill;         /* Pad/RandomCrop fill constant padding with pad_rgb (not 0) */
    uint8_t pad_rgb[3];
    bool normalize;        /* a Normalize op is present */
    float mean[3], std[3]; /* its parameters (float32, as torchvision's tensors) */
    /* The float output of each uint8 value per channel (stk__store_init): the exact per-value
     * result of ToTensor/Normalize/rounding, so the store is a table lookup. */
    float lut_f32[3][256];
    uint16_t lut_u16[3][256]; /* float16 / bfloat16 bits */
    /* float32 output by arithmetic (stk_normalize.c): per channel 1/std and std (1 and 1 without
     * Normalize), mean (0); set only where the arithmetic was checked equal to lut_f32 on all 256
     * values at create. */
    bool store_arith;
    float st_rstd[3], st_std[3], st_mean[3];
    /* The planes path may run (stk_transform.c): not exact. Tests and bench tools may clear it
     * after create to compare with the RGB path. */
    bool planar;
    stk__finish fin; /* finishing after the copy (stk_finish_opts.c); ops, dtype, nhwc above are
                      * then the workers' part: uint8 [H, W, 3] */
};

/* ---- finishing (stk_finish_opts.c) ---- */

/* With opts->finish_on_device, split compiled transform t (its ops checked) into the workers'
 * part (uint8 NHWC, the trailing Normalize dropped) and t->fin. STK_EINVAL with the reason. */
stk_status stk__finish_compile(stk_transform *t, const stk_transform_opts *opts);
/* Make workers' output spec `s` the finished output when t has finishing. */
void stk__finish_output(const stk_transform *t, stk__tspec *s);

/* ---- geometry (stk_crop.c) ---- */

/* One axis of a sample's geometry (see the top of this file). */
typedef struct stk__xaxis {
    double c0, c1;     /* the grid spans [c0, c1) in full-resolution pixels */
    double lim0, lim1; /* taps are clipped to [lim0, lim1) */
    int64_t grid;      /* grid pixels */
    int64_t v0, v1;    /* grid pixels [v0, v1) are content, the others padding (zero) */
    int64_t off;       /* grid pixel of output pixel 0 */
    int dir;           /* +1, or -1 when mirrored */
    int64_t n;         /* current size; the output size once the plan is complete */
    int pad_mode;      /* STK__PAD_* of the padding the next crop makes (Pad/RandomCrop set it) */
    int n_pads;        /* the paddings since the last resize, innermost first: the image each */
    struct {           /* padded spanned grid pixels [lo, hi); pixels outside it got `mode` */
        int64_t lo, hi;
        int mode;
    } pads[STK__XF_MAX_OPS];
} stk__xaxis;

/* torchvision's padding_mode (stk_op.padding_mode). */
enum { STK__PAD_CONSTANT = 0, STK__PAD_EDGE = 1, STK__PAD_REFLECT = 2, STK__PAD_SYMMETRIC = 3 };

/* Grid pixel u of the axis, or where u lies in edge/reflect/symmetric padding, the pixel
 * numpy's pad (what torchvision uses on PIL images) copies there, through each padding from the
 * outermost in (constant padding stays outside the content [v0, v1)). */
int64_t stk__axis_pad_map(const stk__xaxis *a, int64_t u);

/* A RandomResizedCrop box, as torchvision's get_params returns it: top i, left j, h, w. */
typedef struct stk__box {
    int64_t i, j, h, w;
    bool fallback; /* none of the 10 tries fitted: central crop */
} stk__box;

/* Start an axis on an image of `size` pixels. */
void stk__axis_init(stk__xaxis *a, int64_t size);
/* Crop m pixels starting at current pixel c (c < 0 or c + m > n pads with zeros: the content
 * then shrinks to the current image, in grid pixels and in the taps' limits). */
void stk__axis_crop(stk__xaxis *a, int64_t c, int64_t m);
/* Mirror the current image. */
void stk__axis_flip(stk__xaxis *a);
/* Resize the current image to m pixels (antialiased bilinear; a no-op when m == n). */
void stk__axis_resize(stk__xaxis *a, int64_t m);
/* CenterCrop to m pixels: torchvision's offset int(round((n - m) / 2.0)) (Python rounds half to
 * even), or zero padding split as (m - n) // 2 before when m > n. */
void stk__axis_center_crop(stk__xaxis *a, int64_t m);

/* Uniform integer in [0, n) (torch.randint(0, n)); 0 when n <= 1. Unbiased (Lemire). */
uint64_t stk__rng_below(stk_rng *rng, uint64_t n);
/* Uniform double in [a, b). */
double stk__rng_range(stk_rng *rng, double a, double b);

/* torchvision's RandomResizedCrop.get_params on a height x width image: 10 tries of
 * area = H*W*U(scale), log-uniform aspect in ratio, w = round(sqrt(area*r)), h =
 * round(sqrt(area/r)), accepted when 0 < w <= W and 0 < h <= H, then i = randint(0, H-h+1), j =
 * randint(0, W-w+1); otherwise the central crop clamped to the ratio range. Draws 2 uniforms per
 * try, then 2 bounded integers on success. */
void stk__rrc_box(stk_rng *rng, int64_t height, int64_t width, const double scale[2],
                  const double ratio[2], stk__box *out);

/* A RandomErasing draw: erase rows i .. i+h-1, columns j .. j+w-1 when `on`. */
typedef struct stk__erase {
    const stk_op *op;
    bool on;
    int64_t i, j, h, w;
} stk__erase;

/* torchvision's RandomErasing.get_params on a height x width output: 10 tries of area =
 * H*W*U(scale), log-uniform aspect in ratio, h = round(sqrt(area*r)), w = round(sqrt(area/r)),
 * accepted when h < H and w < W, then i = randint(0, H-h+1), j = randint(0, W-w+1); otherwise
 * nothing is erased (out->on false). */
void stk__erase_box(stk_rng *rng, int64_t height, int64_t width, const double scale[2],
                    const double ratio[2], stk__erase *out);
/* Write the erase's value into the box of one stored sample (t's dtype, layout, size). */
void stk__erase_apply(const stk_transform *t, void *dst, const stk__erase *e);

/* torchvision's _compute_resized_output_size for Resize(short) on an h x w image (no max_size). */
void stk__resize_short(int64_t h, int64_t w, int64_t short_side, int64_t *out_h, int64_t *out_w);

/* ---- colour (stk_color.c) ---- */

enum { STK__JIT_BRIGHTNESS = 0, STK__JIT_CONTRAST = 1, STK__JIT_SATURATION = 2, STK__JIT_HUE = 3 };

/* One ColorJitter draw: the order of the four adjustments (torch.randperm(4)) and their factors
 * (applied only where on[k]). */
typedef struct stk__jitter {
    uint8_t order[4];
    bool on[4];
    double factor[4];
} stk__jitter;

/* Draw a ColorJitter op's parameters as torchvision's get_params: a random permutation of the four
 * adjustments, then one uniform factor for each enabled one in the order brightness, contrast,
 * saturation, hue. */
void stk__jitter_draw(stk_rng *rng, const stk_op *op, stk__jitter *out);
/* Apply the draw to an interleaved RGB uint8 image of npix pixels, in place. */
void stk__jitter_apply(uint8_t *rgb, size_t npix, const stk__jitter *j);
/* The single adjustments, as torchvision's functional_tensor on uint8 tensors. */
void stk__adjust_brightness(uint8_t *rgb, size_t npix, double factor);
void stk__adjust_contrast(uint8_t *rgb, size_t npix, double factor);
void stk__adjust_saturation(uint8_t *rgb, size_t npix, double factor);
void stk__adjust_hue(uint8_t *rgb, size_t npix, double factor);

/* ---- pixel ops (stk_pixops.c): torchvision 0.14's functional_tensor on uint8, bit for bit
 * (GaussianBlur: up to float rounding) on an interleaved RGB image of w x h pixels, in place ----
 */

/* rgb_to_grayscale: trunc((0.2989 r + 0.587 g) + 0.114 b) in float32, into all three channels. */
void stk__px_grayscale(uint8_t *rgb, size_t npix);
/* invert: 255 - x. */
void stk__px_invert(uint8_t *rgb, size_t npix);
/* posterize: x & (0xff << (8 - bits)), bits in 0..8. */
void stk__px_posterize(uint8_t *rgb, size_t npix, int bits);
/* solarize: x >= threshold ? 255 - x : x. */
void stk__px_solarize(uint8_t *rgb, size_t npix, double threshold);
/* autocontrast: per channel (x - min) * (255 / (max - min)) in float32, truncated; a flat channel
 * is unchanged. */
void stk__px_autocontrast(uint8_t *rgb, size_t npix);
/* equalize: per channel, torchvision's histogram lookup table (PIL's ImageOps.equalize). */
void stk__px_equalize(uint8_t *rgb, size_t npix);
/* adjust_sharpness: blend with the 3x3 smoothing (1 1 1 / 1 5 1 / 1 1 1) / 13 of the interior
 * (the border rows and columns blend with themselves); images under 3x3 are unchanged. Needs two
 * rows of scratch past 1024 pixels wide: @return false when they cannot be allocated. */
bool stk__px_sharpness(uint8_t *rgb, uint32_t w, uint32_t h, double factor);
/* gaussian_blur with a kx x ky kernel (odd) of this sigma, reflect padding, rounded. Needs
 * scratch of (size_t)w * h * 3 floats; @return false when it cannot be allocated (the image is
 * then unchanged). */
bool stk__px_gaussian_blur(uint8_t *rgb, uint32_t w, uint32_t h, int kx, int ky, double sigma);

/* ---- affine warps (stk_warp.c): PIL's, as torchvision uses them on PIL images ---- */

/* Interpolation of the warps: PIL's filter numbers (InterpolationMode.NEAREST, BILINEAR). */
enum { STK__INTERP_NEAREST = 0, STK__INTERP_BILINEAR = 2 };

/* Image.transform(AFFINE) of src (sw x sh) into dst (dw x dh, not overlapping src): `a` maps the
 * output pixel centre (x + 0.5, y + 0.5) to input coordinates; outside the input: fill. */
void stk__warp_affine(uint8_t *dst, int dw, int dh, const uint8_t *src, int sw, int sh,
                      const double a[6], int interp, const uint8_t fill[3]);
/* torchvision's _get_inverse_affine_matrix (inverted=True): angle and shear in degrees. */
void stk__warp_inverse_matrix(const double center[2], double angle, const double translate[2],
                              double scale, const double shear[2], double m[6]);
/* Image.rotate's output size (*nw, *nh) and matrix m (unset when it transposes) for a w x h
 * image; center NULL: the image centre. */
void stk__warp_rotate_size(int w, int h, double angle, const double *center, bool expand, int *nw,
                           int *nh, double m[6]);
/* Image.rotate(angle, interp, expand, center, fillcolor) of src (w x h) into dst (the size
 * stk__warp_rotate_size gives; not overlapping src). */
void stk__warp_rotate(uint8_t *dst, const uint8_t *src, int w, int h, double angle,
                      const double *center, bool expand, int interp, const uint8_t fill[3]);

/* ---- TrivialAugmentWide (stk_autoaug.c) ---- */

/* Its ops, in torchvision's _augmentation_space order. */
enum {
    STK__TA_IDENTITY = 0,
    STK__TA_SHEAR_X,
    STK__TA_SHEAR_Y,
    STK__TA_TRANSLATE_X,
    STK__TA_TRANSLATE_Y,
    STK__TA_ROTATE,
    STK__TA_BRIGHTNESS,
    STK__TA_COLOR,
    STK__TA_CONTRAST,
    STK__TA_SHARPNESS,
    STK__TA_POSTERIZE,
    STK__TA_SOLARIZE,
    STK__TA_AUTOCONTRAST,
    STK__TA_EQUALIZE,
    STK__TA_N,                 /* TrivialAugmentWide's and RandAugment's 14 */
    STK__TA_INVERT = STK__TA_N /* AutoAugment's one more */
};

#define STK__TA_MAX_OPS 8 /* RandAugment's num_ops at most */

/* The policies sharing these ops: their magnitude tables differ. */
enum {
    STK__POLICY_TRIVIAL_WIDE = 0,
    STK__POLICY_RAND = 1,
    STK__POLICY_AUTO = 2,
    STK__POLICY_AUGMIX = 3
};
#define STK__AA_N_POLICIES 25 /* AutoAugmentPolicy.IMAGENET's sub-policies */

/* One step of an AutoAugment sub-policy: (op, probability, magnitude bin or -1). */
typedef struct stk__aa_step {
    int op;
    double p;
    int bin;
} stk__aa_step;

/* AugMix (torchvision 0.14, on its tensor path): the original weighted by m0 plus `width` chains
 * of 1..4 ops from its own 13-op (all_ops) or 9-op table, each weighted by w[i]; the draw. */
#define STK__AM_MAX_WIDTH 8
#define STK__AM_MAX_DEPTH 4
typedef struct stk__augmix {
    float m0, w[STK__AM_MAX_WIDTH]; /* float32, as torch's _sample_dirichlet */
    int width, interp;
    uint8_t fill[3];
    struct {
        int n;
        int8_t op[STK__AM_MAX_DEPTH]; /* STK__TA_* */
        double magnitude[STK__AM_MAX_DEPTH];
    } chain[STK__AM_MAX_WIDTH];
} stk__augmix;

/* AugMix's forward on an h x w image: m = Dirichlet([alpha, alpha]), weights =
 * Dirichlet([alpha] * width) * m[1]; per chain its depth (chain_depth, or randint(1, 4)), per
 * op randint(len(space)), bin randint(severity) where the op has bins, randint(2) sign where
 * signed. Magnitudes are its 10-bin table's. */
void stk__am_draw(stk_rng *rng, const stk_op *op, int64_t h, int64_t w, stk__augmix *out);
/* The name of AugMix's op k of its table (all_ops order), NULL past it. */
const char *stk__am_op_name(int k);

/* One draw: n ops and their signed magnitudes (torchvision's Python floats), applied in order;
 * `policy`: AutoAugment's sub-policy index (-1 for the others). */
typedef struct stk__ta {
    int policy;
    int n;
    int interp;      /* the warps' interpolation (STK__INTERP_*) */
    uint8_t fill[3]; /* the warps' fill */
    int op[STK__TA_MAX_OPS];
    double magnitude[STK__TA_MAX_OPS];
} stk__ta;

/* AutoAugment (IMAGENET) on an h x w image, as its forward: sub-policy randint(25), two
 * uniforms and two randint(2) signs drawn up front; step i applies when u[i] <= p with bin
 * magnitudes of the 10-bin table, negated when signed and sign[i] == 0. */
void stk__aa_draw(stk_rng *rng, int64_t h, int64_t w, stk__ta *out);
/* Step `i` (0, 1) of sub-policy `k` of AutoAugmentPolicy.IMAGENET (NULL past them). */
const stk__aa_step *stk__aa_policy(int k, int i);
/* The name of TrivialAugmentWide's op `op` (torchvision's key), NULL past the list. */
const char *stk__ta_name(int op);
/* Whether op has magnitude bins (*is_signed: whether it draws a sign). */
bool stk__ta_has_bins(int op, bool *is_signed);
/* Magnitude of bin idx of op in `policy`'s table of `bins` bins for an h x w image
 * (torchvision's float32 table value; RandAugment's translations scale with the image). */
double stk__ta_magnitude(int policy, int op, int64_t bins, int64_t idx, int64_t h, int64_t w);
/* TrivialAugmentWide's forward: randint(14), then randint(bins) with bins, then randint(2) if
 * signed. */
void stk__ta_draw(stk_rng *rng, int64_t bins, stk__ta *out);
/* RandAugment's forward on an h x w image: num_ops times randint(14), bin `magnitude`, then
 * randint(2) if signed. */
void stk__ra_draw(stk_rng *rng, int64_t num_ops, int64_t magnitude, int64_t bins, int64_t h,
                  int64_t w, stk__ta *out);

/* ---- the op table (stk_ops.c) ----
 *
 * One row per op kind (stk__op_def): its name, parameters, check, effect on the output size,
 * per-sample plan and pixel kernel. stk_transform_create, stk__xform_plan and stk__xform_render
 * only walk the rows; adding an op is one row plus its kernel (docs/images.md, "Adding an op"). */

/* Where an op acts in the per-sample pipeline (plan -> decode -> resample -> kernels -> store). */
typedef enum stk__op_stage {
    STK__OP_GEOMETRY = 0, /* moves pixels: its plan folds it into the per-axis resample */
    STK__OP_PIXEL = 1,    /* a kernel on the uint8 output-size image, after the resample */
    STK__OP_STORE = 2,    /* sets the conversion into the output dtype (at most one, last) */
    STK__OP_TENSOR = 3,   /* a pass over the stored output tensor (its dtype and layout) */
    /* The audio family's stages (stk_audio.h): */
    STK__OP_WAVE = 4,     /* on the waveform (Resample, the crops, Downmix, Vol) */
    STK__OP_SPECTRUM = 5, /* makes the spectrogram (Spectrogram, MelSpectrogram, MFCC) */
    STK__OP_SPECTRAL = 6  /* on the spectrogram (AmplitudeToDB, the masks) */
} stk__op_stage;

/* One sample's draw for a pixel kernel (filled by the op's plan, read by its kernel): one member
 * per kernel that needs more than its stk_op. */
/* The pixel ops of stk_pixops.c: their op (its parameters), whether they apply to this sample
 * (torch.rand(1) < p) and GaussianBlur's sigma. */
typedef struct stk__pixdraw {
    const stk_op *op; /* in the compiled transform (lives as long as it) */
    bool on;
    double sigma;
} stk__pixdraw;

/* A warp's draw (RandomRotation: angle; RandomAffine: all five), its op's parameters beside. */
typedef struct stk__warpdraw {
    const stk_op *op;
    double angle, translate[2], scale, shear[2];
} stk__warpdraw;

/* A RandomOrder draw: the order (a permutation of 0 .. n - 1) its n ops run in. */
typedef struct stk__orderdraw {
    int n;
    uint8_t perm[STK__XF_MAX_OPS];
} stk__orderdraw;

typedef union stk__opdraw {
    stk__jitter jitter; /* ColorJitter */
    stk__warpdraw warp; /* RandomRotation, RandomAffine */
    stk__pixdraw pix;   /* the ops of stk_pixops.c */
    stk__erase erase;   /* RandomErasing */
    stk__ta ta;         /* TrivialAugmentWide */
    stk__augmix augmix; /* AugMix */
} stk__opdraw;

/* What a pixel kernel works on: the uint8 image of one sample (the output size, or smaller
 * before a RandomRotation(expand=True)). */
typedef struct stk__pixctx {
    uint8_t *rgb; /* interleaved RGB, w * h pixels, rows of w * 3 bytes; modified in place (room
                   * for the output size) */
    uint32_t w, h;
    char *err; /* where a kernel that fails (out of memory for scratch) writes why */
    size_t err_size;
} stk__pixctx;

/* TrivialAugmentWide: apply a draw to the image (torchvision's _apply_op; warps as PIL's).
 * @return STK_OK or STK_ENOMEM (scratch; message in c->err). */
stk_status stk__ta_apply(const stk__pixctx *c, const stk__ta *d);
/* AugMix: mix the image with its chains as the draw says (float32, truncated to uint8).
 * @return STK_OK or STK_ENOMEM (scratch; message in c->err). */
stk_status stk__am_apply(const stk__pixctx *c, const stk__augmix *d);

struct stk__xplan;

typedef struct stk__op_def {
    const char *name; /* torchvision's (torchaudio's) class name */
    stk_op_kind kind; /* == the row's index in the table */
    stk_media media;  /* the pipeline it belongs to (the rows below STK__OP_WAVE: images) */
    stk__op_stage stage;
    bool after_store; /* may follow the STORE op (a flip commutes with a per-pixel store) */
    bool container;   /* RandomApply/RandomChoice/RandomOrder: the `n_transforms` ops after it */
    bool warp;        /* moves pixels on the output-size image (a pixel kernel): no geometric op may
                       * follow it */
    bool resamples;   /* resizes (Resize, RandomResizedCrop): padding before it is resampled as an
                       * edge extension, so a fill or padding_mode cannot precede it */
    bool draws;       /* its plan takes numbers from the sample's random stream (stk_op_draws): a
                       * transform of ops that do not is deterministic and decodes exactly by
                       * default in the front ends (issue 24) */
    const stk_op_param *params; /* torchvision's arguments, in its order */
    size_t n_params;
    /* Optional defaults beyond stk_op_init's common ones (e.g. Resize's size (256, 0)). */
    void (*init)(stk_op *op);
    /* Validate ops[i] and normalise it in place (square shorthand). Messages start with
     * "ops[i] (Name): ". @return STK_OK or STK_EINVAL (stk_last_errmsg set). */
    stk_status (*check)(size_t i, stk_op *op);
    /* The output size after the op, given the size before it in *h, *w (0: depends on the
     * image). NULL: unchanged. A pixel op's (RandomRotation's expand) applies after its kernel. */
    void (*size)(const stk_op *op, int64_t *h, int64_t *w);
    /* At create: record what the compiled transform needs (Normalize: mean, std). NULL: none. */
    void (*compile)(const stk_op *op, stk_transform *t);
    /* Per sample, in op order: fold the op into p's geometry and draw its randomness from rng
     * (into *draw, non-NULL exactly when the op has a kernel or a post). NULL: nothing to plan. */
    void (*plan)(const stk_op *op, stk_rng *rng, struct stk__xplan *p, stk__opdraw *draw);
    /* Pixel kernel (STK__OP_PIXEL ops): apply the draw to the image. Called once per sample in
     * op order; runs over every pixel, so it is the op's whole per-pixel cost. @return STK_OK,
     * or STK_ENOMEM (scratch; message in c->err). */
    stk_status (*kernel)(const stk__pixctx *c, const stk__opdraw *draw);
    /* Tensor pass (STK__OP_TENSOR ops): apply the draw to the stored sample at dst (t's output
     * dtype and layout), after the store. */
    void (*post)(const stk_transform *t, void *dst, const stk__opdraw *draw);
} stk__op_def;

/* A parameter of a row (torchvision's argument `name`: `n` elements of `type` at `field`). */
#define STK__PARAM(name, type, n, field)                                                           \
    {                                                                                              \
        sizeof(stk_op_param), name, STK_OP_PARAM_##type, n, offsetof(stk_op, field)                \
    }

/* Both numbers of a pair finite. */
static inline bool stk__finite2(const double v[2])
{
    return isfinite(v[0]) && isfinite(v[1]);
}

/* The pixel ops' rows (stk_ops_pixel.c): ColorJitter, Grayscale .. GaussianBlur, the policies. */
#define STK__PIXEL_N_ROWS 14
extern const stk__op_def stk__pixel_op_rows[STK__PIXEL_N_ROWS];
/* The parameter list {p} and the check of a probability p in [0, 1] (stk_ops.c). */
extern const stk_op_param stk__params_p[1];
stk_status stk__check_p(size_t i, stk_op *op);

/* The warps' rows (stk_ops_warp.c), kinds STK_OP_RANDOM_ROTATION and STK_OP_RANDOM_AFFINE. */
#define STK__WARP_N_ROWS 2
extern const stk__op_def stk__warp_op_rows[STK__WARP_N_ROWS];
/* Check an op's interpolation (0 NEAREST or 2 BILINEAR) and fill (0..255 per channel).
 * @return STK_OK or STK_EINVAL naming ops[i]. */
stk_status stk__check_interp_fill(size_t i, const stk_op *op);
/* Check an op's fill only (0..255 per channel). @return STK_OK or STK_EINVAL naming ops[i]. */
stk_status stk__check_fill(size_t i, const stk_op *op);
/* torchvision's _parse_fill for a PIL image: int() of each channel. */
void stk__fill_u8(const double fill[3], uint8_t out[3]);

/* The audio family's rows (stk_audio_ops.c), kinds STK_OP_RESAMPLE .. STK_OP_TIME_STRETCH;
 * their hooks beyond check and init are NULL: the audio pipeline (stk_audio.c) runs them. */
#define STK__AUDIO_N_ROWS 13
extern const stk__op_def stk__audio_op_rows[STK__AUDIO_N_ROWS];

/* The row of `kind`, or NULL for an unknown kind. */
const stk__op_def *stk__op_def_get(stk_op_kind kind);

/* Write the names of the ops (all of them, or only those with after_store when
 * after_store_only) into buf, separated by ", ". */
void stk__op_list_names(bool after_store_only, char *buf, size_t size);

/* ---- per-sample plan (stk_transform.c) ---- */

/* One pixel kernel to run on a sample: its row and its draw. */
typedef struct stk__xpix {
    const stk__op_def *def;
    const stk_op *op; /* its op in the compiled transform */
    stk__opdraw draw;
} stk__xpix;

typedef struct stk__xplan {
    stk__xaxis x, y; /* the output geometry */
    bool has_box;    /* a RandomResizedCrop drew `box` (the first one) */
    stk__box box;
    bool flip;  /* the output is mirrored (x.dir < 0) */
    bool vflip; /* the output is upside down (y.dir < 0) */
    uint32_t n_pix;
    stk__xpix pix[STK__XF_MAX_OPS];      /* pixel kernels in op order */
    bool decode;                         /* false when every output pixel is padding */
    uint32_t win_x, win_y, win_w, win_h; /* full-resolution window to decode */
    uint32_t min_w, min_h;               /* decoded size wanted (sets the DCT scale) */
    uint32_t den;                        /* DCT scale denominator asked for (1, 2, 4, 8) */
    bool fast; /* decode with stk__image_decode_fast: not `exact`, and the output is resampled */
    uint32_t skip;        /* set by a container's plan: bit j skips the j-th op after it */
    stk__orderdraw order; /* set by RandomOrder's plan: the order of the ops after it */
    int64_t pix_h, pix_w; /* the pixel ops' image size so far, when a pixel op changed it (0:
                           * the geometry's, y.n and x.n) */
} stk__xplan;

/* The image size the pixel op being planned sees (stk__xplan.pix_h/pix_w, else the axes'). */
void stk__plan_size(const stk__xplan *p, int64_t *h, int64_t *w);

/* Fold the ops over a width x height image, drawing randomness from rng in op order (each
 * op's plan: RandomResizedCrop its box; each flip one uniform; ColorJitter its permutation and
 * factors), and choose the decode window. */
void stk__xform_plan(const stk_transform *t, uint32_t width, uint32_t height, stk_rng *rng,
                     stk__xplan *out);

/* ---- resampling (stk_resize.c) ---- */

/* Tap table of one axis: output pixel i reads buffer pixels tmin[i] .. tmin[i] + tn[i] - 1 with
 * weights w[i*k ...] (fixed point, 1.0 = 16384). */
typedef struct stk__taps {
    int32_t *tmin, *tn;
    int16_t *w;
    size_t cap_i, cap_w; /* capacity in entries / weights */
} stk__taps;

/* What the tap tables were computed for: the two axes and the buffer's map and size. */
typedef struct stk__tapkey {
    stk__xaxis x, y;
    double origin[2], scale[2];
    uint32_t size[2];
} stk__tapkey;

/* Per-worker scratch of the resampler: tap tables and one int16 row; grown, never shrunk. */
typedef struct stk__rscratch {
    stk__taps x, y;
    stk__tapkey key; /* the tables are those of key when key_valid */
    bool key_valid;
    int16_t *row; /* vertical-pass result for one output row (7 fractional bits) */
    size_t cap_row;
    int16_t *blk; /* AVX2 path: a block of vertical-pass rows, then its transpose */
    size_t cap_blk;
    uint8_t *obuf; /* AVX2 path: a block's output, transposed */
    size_t cap_obuf;
    bool portable; /* use only the portable kernels: tests compare the two */
    bool no_vnni;  /* the AVX2 kernels even where the CPU has AVX512-VNNI: tests compare them */
} stk__rscratch;

void stk__rscratch_free(stk__rscratch *s);

/* Resample `src` (a decoded window with its map to full resolution) to x.n by y.n RGB pixels at
 * the positions the axes give, writing interleaved uint8 rows of `dst_stride` bytes. Antialiased
 * bilinear (PIL's triangle filter, support scaled by the downscale factor); padding pixels are 0.
 * @return STK_OK or STK_ENOMEM (scratch growth; message in err). */
stk_status stk__resample(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                         const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                         size_t err_size);

/* stk__resample on one plane (src: one byte per pixel, e.g. a plane of
 * stk__image_decode_planes), writing x.n by y.n bytes a row. */
stk_status stk__resample_plane(stk__rscratch *s, const stk__decoded *src, const stk__xaxis *x,
                               const stk__xaxis *y, uint8_t *dst, size_t dst_stride, char *err,
                               size_t err_size);

/* ---- conversion and store (stk_normalize.c) ---- */

/* Interleaved RGB (uint8) from npix pixels of Y, Cb, Cr planes (JFIF), converted in float32
 * and rounded to the nearest level. */
void stk__ycc_to_rgb(const uint8_t *py, const uint8_t *pu, const uint8_t *pv, size_t npix,
                     uint8_t *rgb);
/* stk__store of the RGB image stk__ycc_to_rgb would make of w x h planes, without making it, the
 * same bytes; only where it has a kernel for it (float32 NCHW with the arithmetic store):
 * false, nothing written, otherwise. */
bool stk__store_ycc(const stk_transform *t, const uint8_t *py, const uint8_t *pu, const uint8_t *pv,
                    uint32_t w, uint32_t h, void *dst);
/* The kernels of stk__store_ycc, which runs the first of them this CPU has. */
typedef enum {
    STK__YCC_AVX512, /* 16 pixels a step (AVX-512F), the rest as STK__YCC_AVX2 */
    STK__YCC_AVX2,   /* 8 pixels a step (AVX2 and FMA), the rest through the tables */
    STK__YCC_KERNELS /* how many */
} stk__ycc_kernel;
/* stk__store_ycc with kernel k only (the tests compare each one with the tables): false, nothing
 * written, where stk__store_ycc would return false or this CPU lacks k's instructions. */
bool stk__store_ycc_kernel(const stk_transform *t, stk__ycc_kernel k, const uint8_t *py,
                           const uint8_t *pu, const uint8_t *pv, uint32_t w, uint32_t h, void *dst);

/* IEEE binary16 and bfloat16 from float, round to nearest even (NaN stays NaN, quiet). */
uint16_t stk__f32_to_f16(float f);
uint16_t stk__f32_to_bf16(float f);
float stk__f16_to_f32(uint16_t h);

/* Fill the transform's lookup tables from its dtype, mean and std. */
void stk__store_init(stk_transform *t);

/* Convert an interleaved RGB uint8 image (w x h, tightly packed) to the transform's output dtype
 * and layout at dst: x / 255 as float32, then (v - mean) / std when normalising, then rounded
 * to the dtype; uint8 is copied (NHWC) or split into planes (NCHW). */
void stk__store(const stk_transform *t, const uint8_t *rgb, uint32_t w, uint32_t h, void *dst);
/* stk__store through the lookup tables only (what a CPU without AVX2 and FMA runs; the tests
 * check that both give the same bytes). */
void stk__store_table(const stk_transform *t, const uint8_t *rgb, uint32_t w, uint32_t h,
                      void *dst);

/* ---- worker and rendering (stk_transform.c) ---- */

/* Nanoseconds spent per stage by one worker (cumulative; for profiling and `stoker doctor`). */
/* Written by the worker thread only, read by stats readers on other threads: relaxed atomics. */
typedef struct stk__xtimes {
    _Atomic uint64_t samples;
    _Atomic uint64_t probe_ns, decode_ns, resize_ns, jitter_ns, store_ns;
} stk__xtimes;

struct stk__tworker {
    stk_media media; /* STK_MEDIA_IMAGE: every kind's worker starts with its kind (stk_media.c) */
    stk__decoder *dec;
    stk__rscratch rs;
    uint8_t *img; /* the uint8 output image before conversion */
    size_t img_cap;
    stk__xtimes times;
};

/* Step 3 of the pipeline: resample `src` per the plan, run the pixel kernels, store into dst. */
stk_status stk__xform_render(const stk_transform *t, stk__tworker *w, const stk__xplan *plan,
                             const stk__decoded *src, void *dst, char *err, size_t err_size);

/* Stage timings of a worker. */
const stk__xtimes *stk__transform_worker_times(const stk__tworker *w);

/* The image kind's worker rows of stk__media_image (stk_media.h), in stk_apply.c: what the
 * stk__transform_worker_* calls and stk__transform_apply do for an image transform. */
stk_status stk__image_worker_create(const stk_transform *t, stk__tworker **out);
void stk__image_worker_destroy(stk__tworker *w);
void stk__image_stage_ns(const stk__tworker *w, uint64_t *decode_ns, uint64_t *augment_ns);
void stk__image_trust(stk__tworker *w, bool trusted);
bool stk__image_checked(const stk__tworker *w);
stk_status stk__image_apply(const stk_transform *t, stk__tworker *w, const void *src, size_t size,
                            stk_rng *rng, void *dst, char *err, size_t err_size);

#endif /* STK_XFORM_H */
