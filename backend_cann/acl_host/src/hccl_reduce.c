/* hccl_reduce.c - the reductions behind HcclAllReduce: sum, prod, max and min over the types
 * HCCL 8.1 documents for it (int8, int16, int32, fp16, fp32, bf16), in rank order, so that every
 * rank computes bit-identical results. Integers wrap on overflow. F16 and BF16 are combined in
 * F32 and rounded back to the element type after every step; F32 carries a product or sum of two
 * halves exactly enough that this equals a correctly rounded F16/BF16 operation. Max and min
 * propagate NaN.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "ah_convert.h"
#include "hccl_int.h"

#define BLOCK 256

static inline float comb_f(HcclReduceOp op, float a, float b)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return a + b;
    case HCCL_REDUCE_PROD: return a * b;
    case HCCL_REDUCE_MAX: return (isnan(a) || a >= b) ? a : b;
    default: return (isnan(a) || a <= b) ? a : b;
    }
}

/* Integer types: sums and products in the unsigned type of the same width (wrap around). */
#define DEFINE_INT(NAME, T, UT)                                                                   \
    static void NAME(HcclReduceOp op, T *dst, const void *const *srcs, uint32_t n, size_t count)  \
    {                                                                                             \
        if (dst != srcs[0])                                                                       \
            memcpy(dst, srcs[0], count * sizeof(T));                                              \
        for (uint32_t j = 1; j < n; j++) {                                                        \
            const T *s = srcs[j];                                                                 \
            switch (op) {                                                                         \
            case HCCL_REDUCE_SUM:                                                                 \
                for (size_t i = 0; i < count; i++)                                                \
                    dst[i] = (T)(UT)((UT)dst[i] + (UT)s[i]);                                      \
                break;                                                                            \
            case HCCL_REDUCE_PROD:                                                                \
                for (size_t i = 0; i < count; i++)                                                \
                    dst[i] = (T)(UT)((UT)dst[i] * (UT)s[i]);                                      \
                break;                                                                            \
            case HCCL_REDUCE_MAX:                                                                 \
                for (size_t i = 0; i < count; i++)                                                \
                    dst[i] = s[i] > dst[i] ? s[i] : dst[i];                                       \
                break;                                                                            \
            default:                                                                              \
                for (size_t i = 0; i < count; i++)                                                \
                    dst[i] = s[i] < dst[i] ? s[i] : dst[i];                                       \
                break;                                                                            \
            }                                                                                     \
        }                                                                                         \
    }
DEFINE_INT(reduce_i8, int8_t, uint8_t)
DEFINE_INT(reduce_i16, int16_t, uint16_t)
DEFINE_INT(reduce_i32, int32_t, uint32_t)

static void reduce_f32(HcclReduceOp op, float *dst, const void *const *srcs, uint32_t n,
                       size_t count)
{
    if (dst != srcs[0])
        memcpy(dst, srcs[0], count * sizeof(float));
    for (uint32_t j = 1; j < n; j++) {
        const float *s = srcs[j];
        if (op == HCCL_REDUCE_SUM) {
            for (size_t i = 0; i < count; i++)
                dst[i] += s[i];
        } else if (op == HCCL_REDUCE_PROD) {
            for (size_t i = 0; i < count; i++)
                dst[i] *= s[i];
        } else {
            for (size_t i = 0; i < count; i++)
                dst[i] = comb_f(op, dst[i], s[i]);
        }
    }
}

/* F16 / BF16: blocks of BLOCK elements in F32, rounded to the type after each rank. */
static void reduce_half(HcclReduceOp op, bool bf16, uint16_t *dst, const void *const *srcs,
                        uint32_t n, size_t count)
{
    float acc[BLOCK], x[BLOCK];
    for (size_t b = 0; b < count; b += BLOCK) {
        size_t m = count - b < BLOCK ? count - b : BLOCK;
        const uint16_t *s0 = (const uint16_t *)srcs[0] + b;
        for (size_t i = 0; i < m; i++)
            acc[i] = bf16 ? ah_bf16_to_f32(s0[i]) : ah_f16_to_f32(s0[i]);
        for (uint32_t j = 1; j < n; j++) {
            const uint16_t *s = (const uint16_t *)srcs[j] + b;
            for (size_t i = 0; i < m; i++)
                x[i] = bf16 ? ah_bf16_to_f32(s[i]) : ah_f16_to_f32(s[i]);
            for (size_t i = 0; i < m; i++) {
                float r = comb_f(op, acc[i], x[i]);
                acc[i] = bf16 ? ah_bf16_to_f32(ah_f32_to_bf16(r)) : ah_f16_to_f32(ah_f32_to_f16(r));
            }
        }
        for (size_t i = 0; i < m; i++)
            dst[b + i] = bf16 ? ah_f32_to_bf16(acc[i]) : ah_f32_to_f16(acc[i]);
    }
}

void ah_hccl_reduce(HcclDataType dtype, HcclReduceOp op, void *dst, const void *const *srcs,
                    uint32_t n, size_t count)
{
    switch (dtype) {
    case HCCL_DATA_TYPE_INT8: reduce_i8(op, dst, srcs, n, count); break;
    case HCCL_DATA_TYPE_INT16: reduce_i16(op, dst, srcs, n, count); break;
    case HCCL_DATA_TYPE_INT32: reduce_i32(op, dst, srcs, n, count); break;
    case HCCL_DATA_TYPE_FP32: reduce_f32(op, dst, srcs, n, count); break;
    case HCCL_DATA_TYPE_FP16: reduce_half(op, false, dst, srcs, n, count); break;
    case HCCL_DATA_TYPE_BFP16: reduce_half(op, true, dst, srcs, n, count); break;
    default: break;
    }
}
