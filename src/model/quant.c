/* quant.c - scalar reference dequantization. */
#include "model/quant.h"

#include <string.h>

#include "model/dtype.h"

float mn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (mant << 13); /* inf / nan */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    } else if (mant == 0) {
        bits = sign;
    } else { /* subnormal: normalize */
        int e = -1;
        do {
            e++;
            mant <<= 1;
        } while (!(mant & 0x400));
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t mn_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 0x1f)
        return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1)))
        half++; /* may carry into the exponent, which is the correct rounding */
    return (uint16_t)half;
}

static uint16_t rd16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

void mn_dequant_row(uint32_t type, const void *row, float *out, size_t n)
{
    const uint8_t *p = row;
    switch (type) {
    case MN_F32:
        memcpy(out, p, n * sizeof(float));
        return;
    case MN_F16:
        for (size_t i = 0; i < n; i++)
            out[i] = mn_f16_to_f32(rd16(p + 2 * i));
        return;
    case MN_Q8_0:
        for (size_t b = 0; b < n / 32; b++, p += 34) {
            float d = mn_f16_to_f32(rd16(p));
            for (int j = 0; j < 32; j++)
                out[b * 32 + j] = d * (float)(int8_t)p[2 + j];
        }
        return;
    case MN_Q4_0:
        for (size_t b = 0; b < n / 32; b++, p += 18) {
            float d = mn_f16_to_f32(rd16(p));
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float)((p[2 + j] & 15) - 8);
                out[b * 32 + j + 16] = d * (float)((p[2 + j] >> 4) - 8);
            }
        }
        return;
    case MN_Q4_1:
        for (size_t b = 0; b < n / 32; b++, p += 20) {
            float d = mn_f16_to_f32(rd16(p)), m = mn_f16_to_f32(rd16(p + 2));
            for (int j = 0; j < 16; j++) {
                out[b * 32 + j] = d * (float)(p[4 + j] & 15) + m;
                out[b * 32 + j + 16] = d * (float)(p[4 + j] >> 4) + m;
            }
        }
        return;
    default:
        memset(out, 0, n * sizeof(float)); /* the loader rejects other types before we get here */
    }
}
