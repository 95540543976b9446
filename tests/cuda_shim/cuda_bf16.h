/* tests/cuda_shim/cuda_bf16.h: the host stand-in for CUDA's __nv_bfloat16 (storage and the two
 * conversions the emitter uses), for cuda_shim.h. Round to nearest even. */
#ifndef TESSERA_TESTS_CUDA_SHIM_BF16_H
#define TESSERA_TESTS_CUDA_SHIM_BF16_H
#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
};

static inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u)
        h.bits = (uint16_t)(u >> 16 | 0x40u);
    else
        h.bits = (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
    return h;
}
#endif
