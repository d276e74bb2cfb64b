/*
 * stk_finish_body.h: the finishing kernel's source, compiled twice from this one text: as C by
 * the library (src/cuda/stk_finish.h: the CPU fallback and the reference the tests check), and,
 * stringified into the NVRTC source by src/cuda/stk_cuda.c, as CUDA for the device. No include
 * guard: each includer defines STK__FIN_MATH / STK__FIN_KERNEL first (expand or stringify).
 *
 * Inside the two blocks there must be no preprocessor directive and no unbalanced parenthesis;
 * names the two sides define differently (STK__FIN_HD, stk__fin_bits, uintptr_t) are macros or
 * functions outside them. Every operation is exact IEEE float32 (two correctly rounded divisions,
 * no multiply-add to contract) or integer arithmetic, so the device computes bit for bit what
 * the CPU computes; the NVRTC options (-fmad=false, -prec-div=true, -ftz=false) keep it so.
 */
STK__FIN_MATH(

    /* Finishing of a batch: uint8 NHWC samples with 3 channels -> x / 255, (v - mean) / std,
     * rounded to the output dtype, in NCHW or NHWC, each sample mirrored where flags[n] != 0.
     * Passed by value as the kernel's only parameter; pointers are 64-bit addresses. */
    typedef struct stk__fin_args {
        uint64_t in;    /* uint8 [n, h, w, 3] */
        uint64_t out;   /* dtype [n, 3, h, w] or [n, h, w, 3] */
        uint64_t flags; /* uint8 [n]: mirror sample n; 0 = no flips */
        uint32_t n, h, w;
        uint32_t dtype; /* stk_dtype: 7 float32, 5 float16, 6 bfloat16 */
        uint32_t nhwc;
        uint32_t pad_;
        float mean[3], std[3];
    } stk__fin_args;

    /* torchvision's ToTensor then Normalize on one value, in float32: two IEEE divisions, exactly
     * the CPU pipeline's formula (src/xform/stk_normalize.c). */
    STK__FIN_HD float stk__fin_value(uint32_t x, float mean, float std) {
        float v = (float)x / 255.0f;
        return (v - mean) / std;
    }

    /* float32 -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN. */
    STK__FIN_HD uint32_t stk__fin_bf16(float f) {
        uint32_t u = stk__fin_bits(f);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            return (u >> 16) | 0x40u;
        return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    }

    /* float32 -> IEEE binary16 bits, round to nearest even, in integer arithmetic (no float
     * operation a compiler could contract): overflow gives inf, NaN a quiet NaN, tiny values
     * subnormals. */
    STK__FIN_HD uint32_t stk__fin_f16(float f) {
        uint32_t u = stk__fin_bits(f);
        uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
        if (a > 0x7f800000u)
            return sign | 0x7e00u;
        if (a >= 0x477ff000u) /* 65520 and above round to infinity */
            return sign | 0x7c00u;
        if (a < 0x38800000u) {   /* below 2^-14: a subnormal half, in units of 2^-24 */
            if (a < 0x33000000u) /* below 2^-25: rounds to zero */
                return sign;
            uint32_t shift = 126u - (a >> 23); /* 14..24 */
            uint32_t m = (a & 0x7fffffu) | 0x800000u;
            uint32_t q = m >> shift, r = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
            q += (r > half || (r == half && (q & 1u))) ? 1u : 0u;
            return sign | q;
        }
        uint32_t q = (a - 0x38000000u) >> 13, r = a & 0x1fffu; /* rebias 127 -> 15 */
        q += (r > 0x1000u || (r == 0x1000u && (q & 1u))) ? 1u : 0u;
        return sign | q;
    }

    /* Output pixel p (of n*h*w): read its source pixel (mirrored when the sample's flag is set),
     * write its 3 channels. */
    STK__FIN_HD void stk__fin_pixel(const stk__fin_args *a, uint32_t p) {
        uint32_t hw = a->h * a->w;
        uint32_t n = p / hw, r = p - n * hw;
        uint32_t y = r / a->w, x = r - y * a->w;
        const uint8_t *flags = (const uint8_t *)(uintptr_t)a->flags;
        uint32_t sx = (flags && flags[n]) ? a->w - 1u - x : x;
        const uint8_t *px =
            (const uint8_t *)(uintptr_t)a->in + ((uint64_t)n * hw + (uint64_t)y * a->w + sx) * 3u;
        for (uint32_t c = 0; c < 3u; c++) {
            float v = stk__fin_value(px[c], a->mean[c], a->std[c]);
            uint64_t o =
                a->nhwc ? ((uint64_t)n * hw + r) * 3u + c : ((uint64_t)n * 3u + c) * hw + r;
            if (a->dtype == 7u)
                ((float *)(uintptr_t)a->out)[o] = v;
            else
                ((uint16_t *)(uintptr_t)a->out)[o] =
                    (uint16_t)(a->dtype == 6u ? stk__fin_bf16(v) : stk__fin_f16(v));
        }
    }

)
STK__FIN_KERNEL(

    /* One thread per output pixel, grid-stride. */
    extern "C" __global__ void stk_finish(stk__fin_args a) {
        uint32_t total = a.n * a.h * a.w;
        for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p < total;
             p += gridDim.x * blockDim.x)
            stk__fin_pixel(&a, p);
    }

)
