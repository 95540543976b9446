/* tests/cuda_shim/cuda_fp16.h: the host stand-in for CUDA's __half (storage and the two
 * conversions the emitter uses), for cuda_shim.h. Round to nearest even, as __float2half_rn. */
#ifndef TESSERA_TESTS_CUDA_SHIM_FP16_H
#define TESSERA_TESTS_CUDA_SHIM_FP16_H
#include <stdint.h>
#include <string.h>

struct __half {
    uint16_t bits;
};

static inline float __half2float(__half h)
{
    uint32_t s = (uint32_t)(h.bits >> 15) << 31, e = h.bits >> 10 & 31, m = h.bits & 1023, u;
    if (e == 31) {
        u = s | 0x7f800000u | m << 13;
    } else if (e == 0) {
        if (m == 0) {
            u = s;
        } else { /* subnormal: normalise */
            int sh = 0;
            while (!(m & 1024)) {
                m <<= 1;
                sh++;
            }
            u = s | (uint32_t)(113 - sh) << 23 | (m & 1023) << 13;
        }
    } else {
        u = s | (e + 112) << 23 | m << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __half __float2half_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t s = u >> 16 & 0x8000u, a = u & 0x7fffffffu;
    __half h;
    if (a > 0x7f800000u) {
        h.bits = (uint16_t)(s | 0x7e00u);
    } else if (a >= 0x477ff000u) { /* rounds to >= 65520: infinity */
        h.bits = (uint16_t)(s | 0x7c00u);
    } else if (a < 0x38800000u) { /* subnormal or zero in f16 */
        float af;
        memcpy(&af, &a, 4);
        float q = af * 16777216.0f; /* 2^24: units of the smallest subnormal */
        uint32_t r = (uint32_t)q;
        float fr = q - (float)r;
        if (fr > 0.5f || (fr == 0.5f && (r & 1)))
            r++;
        h.bits = (uint16_t)(s | r);
    } else {
        uint32_t m = a + 0xfffu + ((a >> 13) & 1u); /* round to nearest even */
        h.bits = (uint16_t)(s | ((m - 0x38000000u) >> 13));
    }
    return h;
}
#endif
