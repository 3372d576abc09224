/* Integer fake quantization in one pass over a float32 tensor, with the values of the eager
   steps of model_explorer/formats/integer.py, bit for bit: out = clamp(round(x * multiplier),
   low, high) / divisor, rounding half to even, in float32, with a multiplier and a divisor per
   channel (channel c = i / inner % channels of a contiguous tensor; one channel: per tensor).
   As ATen's eager clamp: a NaN passes, and so does -0.0 at a bound of 0. A product and a
   rounding, no sum: no fused multiply-add can change a value. */
#include <math.h>
#include <stdint.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(NO_CLONES)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

static inline __attribute__((always_inline)) void
run(const float *restrict x, float *restrict out, int64_t n, float multiplier, float divisor,
    float low, float high)
{
    for (int64_t i = 0; i < n; i++) {
        const float r = nearbyintf(x[i] * multiplier);
        out[i] = (r < low ? low : r > high ? high : r) / divisor;
    }
}

/* Values [start, end) of x into out. Returns 0. */
CLONES
int fake_quantize_integer(const float *x, float *out, int64_t start, int64_t end,
                          int64_t channels, int64_t inner, const float *multiplier,
                          const float *divisor, float low, float high)
{
    if (channels == 1) {
        run(x + start, out + start, end - start, multiplier[0], divisor[0], low, high);
        return 0;
    }
    for (int64_t i = start; i < end;) {
        const int64_t c = i / inner % channels, stop = (i / inner + 1) * inner;
        const int64_t last = stop < end ? stop : end;
        run(x + i, out + i, last - i, multiplier[c], divisor[c], low, high);
        i = last;
    }
    return 0;
}
