/* Fake quantization in one pass over a float32 tensor, with the values of the eager steps of
   model_explorer/formats/ bit for bit: the integer format (integer.py), scaled FP8, the MX
   formats, NVFP4 and group-wise INT (blocks.py, with elements.py's rounding).

   The integer format: out = clamp(round(x * multiplier), low, high) / divisor, rounding half
   to even, in float32, with a multiplier and a divisor per channel (channel c = i / inner %
   channels of a contiguous tensor; one channel: per tensor). As ATen's eager clamp: a NaN
   passes, and so does -0.0 at a bound of 0. Products, divisions and roundings, no sum: no
   fused multiply-add can change a value.

   Every kernel first bounds its input to [floor, ceiling] (-Inf and +Inf: unchanged), as
   torch.clamp would (a NaN passes): a ReLU's or ReLU6's pass that the kernel takes over
   (quantization/elision.py). Each loop is specialised to bounds or none (`bound`, a constant
   where it is inlined): the two steps cost 5-13% of a pass where there are none. */
#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

/* v within [floor, ceiling] where `bound`, in two steps, each a vector min or max (a NaN
   passes both) */
static inline __attribute__((always_inline)) float bounded(float v, float floor, float ceiling,
                                                           int bound)
{
    if (!bound)
        return v;
    v = v > ceiling ? ceiling : v;
    return v < floor ? floor : v;
}

/* Whether [floor, ceiling] bounds anything (the loops' `bound`). */
static inline __attribute__((always_inline)) int bounds(float floor, float ceiling)
{
    return !(floor == -INFINITY && ceiling == INFINITY);
}

static inline __attribute__((always_inline)) void
run(const float *restrict x, float *restrict out, int64_t n, float multiplier, float divisor,
    float low, float high, float floor, float ceiling, int bound)
{
    for (int64_t i = 0; i < n; i++) {
        const float r = nearbyintf(bounded(x[i], floor, ceiling, bound) * multiplier);
        const float below = r > high ? high : r; /* a min, then a max: both in vectors */
        out[i] = (below < low ? low : below) / divisor;
    }
}

/* The channel of value i of a contiguous tensor (channels of `inner` values each, repeated;
   one channel: per tensor) into *c, and where its span of that channel ends, at most `end`. */
static inline __attribute__((always_inline)) int64_t
channel_span(int64_t i, int64_t end, int64_t channels, int64_t inner, int64_t *c)
{
    *c = channels == 1 ? 0 : i / inner % channels;
    const int64_t stop = channels == 1 ? end : (i / inner + 1) * inner;
    return stop < end ? stop : end;
}

/* Values [start, end) of x into out. Returns 0. */
CLONES
int fake_quantize_integer(const float *x, float *out, int64_t start, int64_t end,
                          int64_t channels, int64_t inner, const float *multiplier,
                          const float *divisor, float low, float high, float floor,
                          float ceiling)
{
    const int bound = bounds(floor, ceiling);
    for (int64_t i = start, c, last; i < end; i = last) {
        last = channel_span(i, end, channels, inner, &c);
        if (bound)
            run(x + i, out + i, last - i, multiplier[c], divisor[c], low, high, floor, ceiling, 1);
        else
            run(x + i, out + i, last - i, multiplier[c], divisor[c], low, high, floor, ceiling, 0);
    }
    return 0;
}

/* ---- element types, scaled FP8 and the block formats ------------------------------------

   An element type is e[5]: its largest value, 2**min_exponent, 2**-mantissa_bits, and for an
   integer element (MX's INT8: no exponent bits) its step and the step's inverse (0 and 0 for a
   minifloat). A value is saturated to +-e[0] (NaN passes), then rounded half to even on the
   element's grid: the step is the value's binade 2**floor(log2|v|) (its exponent bits), at
   least the subnormal binade's, times 2**-mantissa_bits, so v / step and the product back are
   exact. FP16 is such an element too: group-wise INT rounds its scales with it. Each loop is
   specialised (always_inline, constant arguments) to one kind of element and block so that it
   has no branch and vectorises. */
#include <string.h>

#define ZERO_AMAX (1.0f / (1 << 24)) /* below it an amax counts as zero (integer.py) */
#define CHUNK 64                     /* positions of a block row whose scales are kept at once */
#define INLINE static inline __attribute__((always_inline))

typedef struct {
    float max, binade, step, integer_step, integer_inverse;
} element;

INLINE element read_element(const float *e)
{
    const element read = {e[0], e[1], e[2], e[3], e[4]};
    return read;
}

INLINE float bits_float(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

INLINE uint32_t float_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

/* v rounded to the element (`integer`: MX's INT8, a constant where it is inlined). */
INLINE float cast(float v, element e, int integer)
{
    v = v > e.max ? e.max : v; /* two steps, each a vector min or max (a NaN passes both) */
    v = v < -e.max ? -e.max : v;
    if (integer)
        return nearbyintf(v * e.integer_inverse) * e.integer_step;
    float binade = bits_float(float_bits(v) & 0x7F800000u);
    binade = binade < e.binade ? e.binade : binade;
    const float step = binade * e.step;
    return nearbyintf(v / step) * step;
}

/* A value's magnitude as an integer: for values without their sign the integers order as the
   values do, and every NaN lies above +Inf, so the integer max of a block is its max |x| with a
   NaN kept (as a NaN: its payload is of no account). An integer max is a plain reduction,
   which vectorises where a float one with NaN kept does not. */
INLINE uint32_t magnitude(float v)
{
    return float_bits(v) & 0x7FFFFFFFu;
}

INLINE uint32_t max_u32(uint32_t a, uint32_t b)
{
    return a > b ? a : b;
}

INLINE void scaled_run(const float *restrict x, float *restrict out, int64_t n, float scale,
                       float inverse, element e, int integer, float floor, float ceiling,
                       int bound)
{
    for (int64_t j = 0; j < n; j++)
        out[j] = cast(bounded(x[j], floor, ceiling, bound) * scale, e, integer) * inverse;
}

/* scaled_run specialised: an integer element or a minifloat, bounds or none. */
INLINE void scaled_any(const float *restrict x, float *restrict out, int64_t n, float scale,
                       float inverse, element e, float floor, float ceiling)
{
    const int integer = e.integer_step != 0.0f, bound = bounds(floor, ceiling);
    if (integer && bound)
        scaled_run(x, out, n, scale, inverse, e, 1, floor, ceiling, 1);
    else if (integer)
        scaled_run(x, out, n, scale, inverse, e, 1, floor, ceiling, 0);
    else if (bound)
        scaled_run(x, out, n, scale, inverse, e, 0, floor, ceiling, 1);
    else
        scaled_run(x, out, n, scale, inverse, e, 0, floor, ceiling, 0);
}

/* Scaled FP8 (or any element): out = cast(x * scale) * inverse, per tensor or per channel as
   the integer format. Values [start, end). Returns 0. */
CLONES
int fake_quantize_scaled(const float *x, float *out, int64_t start, int64_t end, int64_t channels,
                         int64_t inner, const float *scale, const float *inverse, const float *e,
                         float floor, float ceiling)
{
    const element el = read_element(e);
    for (int64_t i = start, c, last; i < end; i = last) {
        last = channel_span(i, end, channels, inner, &c);
        scaled_any(x + i, out + i, last - i, scale[c], inverse[c], el, floor, ceiling);
    }
    return 0;
}

/* 2**exponent for an integer exponent in [-127, 127], from its bits (2**-127 subnormal). */
INLINE float power_of_two(int32_t exponent)
{
    return bits_float(exponent > -127 ? (uint32_t)(exponent + 127) << 23 : 1u << 22);
}

enum { MX, NVFP4, GROUP_FP16, GROUP_FLOAT32 };

/* What a block format reads besides the values: p (MX {emax}; NVFP4 {tensor scale, its
   reciprocal, 1 where the tensor's amax is usable}; group-wise INT {largest integer}), the
   element, the block scale's element (NVFP4's E4M3, group-wise INT's FP16), the integers'
   bounds and the input's. */
typedef struct {
    float p0, p1, p2;
    element e, scale_element;
    float low, high, floor, ceiling;
} format;

/* A block's two numbers from its amax: MX and NVFP4 multiply its values by `first`, cast them
   to the element and multiply by `second`; group-wise INT with FP16 scales divides by `first`,
   rounds and clamps, and multiplies by `second`; with float32 scales (modelopt's) multiplies by
   `first` and divides by `second`. */
INLINE void block_numbers(int kind, float amax, const format *f, float *first, float *second)
{
    if (kind == MX) {
        const int32_t biased = (int32_t)(float_bits(amax) >> 23 & 0xFF);
        int32_t shared = biased - 127 - (int32_t)f->p0;
        shared = shared < -127 ? -127 : shared > 127 ? 127 : shared;
        *first = biased == 255 ? NAN : power_of_two(-shared);
        *second = biased == 255 ? NAN : power_of_two(shared);
    } else if (kind == NVFP4) {
        const float s = cast(amax / 6.0f / f->p0, f->scale_element, 0);
        const int usable = s != 0.0f && f->p2 != 0.0f; /* NaN != 0: a NaN block stays NaN */
        *first = usable ? f->p1 / s : 1.0f;
        *second = usable ? f->p0 * s : 0.0f;
    } else if (kind == GROUP_FP16) {
        const float s = isinf(amax) ? NAN : cast(amax / f->p0, f->scale_element, 0);
        const int zero = amax <= ZERO_AMAX || s == 0.0f;
        *first = zero ? 1.0f : s;
        *second = zero ? 0.0f : s;
    } else {
        const int zero = amax <= ZERO_AMAX;
        const float multiplier = zero ? 0.0f : f->p0 / amax;
        *first = multiplier;
        *second = zero ? 1.0f : multiplier;
    }
}

INLINE float block_value(int kind, int integer, int bound, float v, float first, float second,
                         const format *f)
{
    v = bounded(v, f->floor, f->ceiling, bound);
    if (kind == MX || kind == NVFP4)
        return cast(v * first, f->e, integer) * second;
    const float r = nearbyintf(kind == GROUP_FP16 ? v / first : v * first);
    /* the clamp in two steps, each a vector min or max (a NaN passes both) */
    const float below = r > f->high ? f->high : r;
    const float clamped = below < f->low ? f->low : below;
    return kind == GROUP_FP16 ? clamped * second : clamped / second;
}

/* Block rows [start, end) of a tensor seen as (outer, length, inner) with blocks of `block`
   values along `length` (the last one shorter where `length` is not a multiple): row r is
   block r % blocks of outer slice r / blocks, `inner` positions wide, each position's block
   scaled on its own; rows follow each other in memory. */
INLINE void blocks_run(int kind, int integer, int bound, const float *restrict x,
                       float *restrict out,
                       int64_t start, int64_t end, int64_t length, int64_t block, int64_t inner,
                       const format *f)
{
    const int64_t blocks = (length + block - 1) / block;
    uint32_t amax[CHUNK];
    float first[CHUNK], second[CHUNK];
    int64_t b = start % blocks, offset = start / blocks * length * inner + b * block * inner;
    for (int64_t r = start; r < end; r++) {
        const int64_t count = b == blocks - 1 ? length - b * block : block;
        for (int64_t i0 = 0; i0 < inner; i0 += CHUNK) {
            const int64_t width = inner - i0 < CHUNK ? inner - i0 : CHUNK;
            const float *restrict xs = x + offset + i0;
            float *restrict outs = out + offset + i0;
            for (int64_t i = 0; i < width; i++)
                amax[i] = 0;
            for (int64_t k = 0; k < count; k++)
                for (int64_t i = 0; i < width; i++)
                    amax[i] = max_u32(amax[i], magnitude(bounded(xs[k * inner + i], f->floor,
                                                                 f->ceiling, bound)));
            for (int64_t i = 0; i < width; i++)
                block_numbers(kind, bits_float(amax[i]), f, &first[i], &second[i]);
            for (int64_t k = 0; k < count; k++)
                for (int64_t i = 0; i < width; i++)
                    outs[k * inner + i] =
                        block_value(kind, integer, bound, xs[k * inner + i], first[i], second[i],
                                    f);
        }
        offset += count * inner;
        b = b == blocks - 1 ? 0 : b + 1;
    }
}

INLINE uint32_t run_amax(const float *restrict xs, int64_t count, const format *f, int bound)
{
    uint32_t amax = 0;
    for (int64_t k = 0; k < count; k++)
        amax = max_u32(amax, magnitude(bounded(xs[k], f->floor, f->ceiling, bound)));
    return amax;
}

/* blocks_run where blocks are consecutive values (inner 1), CHUNK blocks at a time: their
   amax, then their numbers (one vector pass across blocks), then their values. `fixed` is
   `block` as a constant (16, 32) where it is one, so that a whole block's loops unroll. It
   clamps to the bounds in any case (see blocks_any). */
INLINE void blocks_run_last(int kind, int integer, const float *restrict x, float *restrict out,
                            int64_t start, int64_t end, int64_t length, int64_t block,
                            int64_t fixed, const format *f)
{
    const int bound = 1;
    const int64_t blocks = (length + block - 1) / block;
    const int64_t size = fixed ? fixed : block;
    uint32_t amax[CHUNK];
    float first[CHUNK], second[CHUNK];
    int64_t counts[CHUNK], offsets[CHUNK];
    int64_t b = start % blocks, offset = start / blocks * length + b * size;
    for (int64_t r = start; r < end;) {
        const int64_t n = end - r < CHUNK ? end - r : CHUNK;
        for (int64_t j = 0; j < n; j++) {
            counts[j] = b == blocks - 1 ? length - b * size : size;
            offsets[j] = offset;
            offset += counts[j];
            b = b == blocks - 1 ? 0 : b + 1;
        }
        for (int64_t j = 0; j < n; j++)
            amax[j] = counts[j] == size ? run_amax(x + offsets[j], size, f, bound)
                                        : run_amax(x + offsets[j], counts[j], f, bound);
        for (int64_t j = 0; j < n; j++)
            block_numbers(kind, bits_float(amax[j]), f, &first[j], &second[j]);
        for (int64_t j = 0; j < n; j++) {
            const float *restrict xs = x + offsets[j];
            float *restrict outs = out + offsets[j];
            if (counts[j] == size)
                for (int64_t k = 0; k < size; k++)
                    outs[k] = block_value(kind, integer, bound, xs[k], first[j], second[j], f);
            else
                for (int64_t k = 0; k < counts[j]; k++)
                    outs[k] = block_value(kind, integer, bound, xs[k], first[j], second[j], f);
        }
        r += n;
    }
}

/* blocks_run or blocks_run_last, specialised to the element and the block, and blocks_run
   (blocks across an activation's channels) to `bound`. blocks_run_last clamps in any case:
   its loops are many (their instances with and without bounds tripled the compile, to 38 s),
   and the two steps cost them some 8% of a pass. */
INLINE void blocks_any(int kind, int integer, int bound, const float *x, float *out,
                       int64_t start, int64_t end, int64_t length, int64_t block, int64_t inner,
                       const format *f)
{
    if (inner > 1 && integer && bound)
        blocks_run(kind, 1, 1, x, out, start, end, length, block, inner, f);
    else if (inner > 1 && integer)
        blocks_run(kind, 1, 0, x, out, start, end, length, block, inner, f);
    else if (inner > 1 && bound)
        blocks_run(kind, 0, 1, x, out, start, end, length, block, inner, f);
    else if (inner > 1)
        blocks_run(kind, 0, 0, x, out, start, end, length, block, inner, f);
    else if (integer) /* MX's INT8: blocks of 32 */
        blocks_run_last(kind, 1, x, out, start, end, length, block, block == 32 ? 32 : 0, f);
    else if (block == 32)
        blocks_run_last(kind, 0, x, out, start, end, length, block, 32, f);
    else if (block == 16)
        blocks_run_last(kind, 0, x, out, start, end, length, block, 16, f);
    else
        blocks_run_last(kind, 0, x, out, start, end, length, block, 0, f);
}

INLINE int blocks_kind(int kind, const float *x, float *out, int64_t start, int64_t end,
                       int64_t length, int64_t block, int64_t inner, const float *p,
                       const float *scale_element, const float *e, float low, float high,
                       float floor, float ceiling)
{
    static const float none[5] = {0};
    const format f = {p[0],
                      p[1],
                      p[2],
                      read_element(e ? e : none),
                      read_element(scale_element ? scale_element : none),
                      low,
                      high,
                      floor,
                      ceiling};
    const int integer = e != 0 && e[3] != 0.0f;
    blocks_any(kind, integer, bounds(floor, ceiling), x, out, start, end, length, block, inner,
               &f);
    return 0;
}

/* Each block format's function: block rows [start, end) of x into out (see blocks_run);
   `e` the element (MX, NVFP4), `scale_element` the block scale's (NVFP4: E4M3; group-wise INT
   with FP16 scales: FP16), low and high the integers' bounds (group-wise INT), floor and
   ceiling the input's. Returns 0. */
#define BLOCK_FORMAT(name, kind)                                                                  \
    CLONES int name(const float *x, float *out, int64_t start, int64_t end, int64_t length,      \
                    int64_t block, int64_t inner, const float *p, const float *scale_element,    \
                    const float *e, float low, float high, float floor, float ceiling)            \
    {                                                                                             \
        return blocks_kind(kind, x, out, start, end, length, block, inner, p, scale_element, e,  \
                           low, high, floor, ceiling);                                            \
    }

BLOCK_FORMAT(fake_quantize_mx, MX)
BLOCK_FORMAT(fake_quantize_nvfp4, NVFP4)
BLOCK_FORMAT(fake_quantize_group_fp16, GROUP_FP16)
BLOCK_FORMAT(fake_quantize_group_float32, GROUP_FLOAT32)

/* ---- rows with gaps (a slice of the last axis, such as an attention's query of a packed
   projection): rows [start, end) of `length` values, row r at x + r * stride, into out's
   contiguous rows, per tensor. Returns 0. */
CLONES
int fake_quantize_integer_rows(const float *x, float *out, int64_t start, int64_t end,
                               int64_t length, int64_t stride, const float *multiplier,
                               const float *divisor, float low, float high, float floor,
                               float ceiling)
{
    const int bound = bounds(floor, ceiling);
    for (int64_t r = start; r < end; r++)
        if (bound)
            run(x + r * stride, out + r * length, length, multiplier[0], divisor[0], low, high,
                floor, ceiling, 1);
        else
            run(x + r * stride, out + r * length, length, multiplier[0], divisor[0], low, high,
                floor, ceiling, 0);
    return 0;
}

CLONES
int fake_quantize_scaled_rows(const float *x, float *out, int64_t start, int64_t end,
                              int64_t length, int64_t stride, const float *scale,
                              const float *inverse, const float *e, float floor, float ceiling)
{
    const element el = read_element(e);
    for (int64_t r = start; r < end; r++)
        scaled_any(x + r * stride, out + r * length, length, scale[0], inverse[0], el, floor,
                   ceiling);
    return 0;
}
