/* hccl_int.h - glue between hccl.c (the HCCL API and the cross-process protocol) and
 * hccl_reduce.c (the element-wise reductions of HcclAllReduce).
 */
#ifndef AH_HCCL_INT_H
#define AH_HCCL_INT_H

#include <stddef.h>
#include <stdint.h>

#include "hccl_api.h"

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i] for i in [0, count), combined in rank
 * order with the result rounded to the element type after every step (as a chain of F16 adds on
 * the device is). dst may be one of the sources. dtype and op were validated by the caller. */
void ah_hccl_reduce(HcclDataType dtype, HcclReduceOp op, void *dst, const void *const *srcs,
                    uint32_t n, size_t count);

#endif /* AH_HCCL_INT_H */
