/* ah_load.h - float operands (F32, F16, BF16) of any element stride read as F32: one element, or
 * a run of n into a buffer (contiguous runs through the vectorised row conversions). Shared by the
 * matmul ops, which widen their operands into F32 panels. */
#ifndef AH_LOAD_H
#define AH_LOAD_H

#include <string.h>

#include "acl/acl_base.h"
#include "ah_convert.h"

/* Element i (in elements of dt) of the data at base, as F32. */
static inline float ah_load_one(aclDataType dt, const char *base, int64_t i) {
    switch (dt) {
    case ACL_FLOAT16: return ah_f16_to_f32(((const uint16_t *)(const void *)base)[i]);
    case ACL_BF16: return ah_bf16_to_f32(((const uint16_t *)(const void *)base)[i]);
    default: return ((const float *)(const void *)base)[i];
    }
}

/* n values of dt at base, stride elements apart -> dst (F32). */
static inline void ah_load_f32(aclDataType dt, const char *base, int64_t stride, int64_t n, float *dst) {
    if (stride == 1 && dt == ACL_FLOAT16)
        ah_f16_to_f32_row((const uint16_t *)(const void *)base, dst, n);
    else if (stride == 1 && dt == ACL_BF16)
        ah_bf16_to_f32_row((const uint16_t *)(const void *)base, dst, n);
    else if (stride == 1 && dt == ACL_FLOAT)
        memcpy(dst, base, (size_t)n * sizeof(float));
    else
        for (int64_t i = 0; i < n; i++)
            dst[i] = ah_load_one(dt, base, i * stride);
}

#endif /* AH_LOAD_H */
