/* ah_nd.h - the generic N-d engine the elementwise-style aclnn ops are built on: dtype algebra
 * (PyTorch promotion, allowed casts), conversion of element blocks between any real dtype and a
 * double / int64 compute domain, and the strided broadcast iterator.
 *
 * An op describes its operands (output first) as ah_nd_operand, builds an ah_nd_plan - broadcast
 * to the output's shape, dims of size 1 dropped, dims ordered by the output's strides, and
 * neighbouring dims merged wherever every operand is contiguous across them - and calls
 * ah_nd_run with a segment kernel. The kernel sees runs of n elements with one byte stride per
 * operand (typically element-sized = contiguous, or 0 = broadcast) and handles them as it likes.
 * ah_nd_run splits the elements over the thread pool (inline below `grain` elements). Every
 * element is independent, so results do not depend on the thread count.
 */
#ifndef AH_ND_H
#define AH_ND_H

#include "ah_tensor.h"

#define AH_ND_MAX_OPERANDS 4
#define AH_ND_GRAIN ((int64_t)1 << 15) /* elements per task for cheap elementwise kernels */

/* ---- dtype algebra -------------------------------------------------------------------------- */
bool ah_dtype_is_float(aclDataType t);    /* FLOAT16, BF16, FLOAT, DOUBLE */
bool ah_dtype_is_integer(aclDataType t);  /* signed and unsigned ints, not BOOL */
/* PyTorch promotion of two tensors' dtypes; ACL_DT_UNDEFINED if they do not promote. */
aclDataType ah_promote_types(aclDataType a, aclDataType b);
/* Tensor (op) scalar: a scalar only changes the category (bool < integer < float): a float
 * tensor keeps its dtype; an integer or bool tensor with a float scalar takes the scalar's dtype;
 * a bool tensor with an integer scalar takes the scalar's dtype. */
aclDataType ah_promote_tensor_scalar(aclDataType tensor, aclDataType scalar);
/* The documented output conversion: anything to anything except a non-BOOL to BOOL. */
bool ah_can_cast(aclDataType from, aclDataType to);

/* ---- element conversion ------------------------------------------------------------------------- */
/* n elements at p (byte stride) to/from double or int64. Float -> integer: NaN gives 0, other
 * values truncate toward zero and saturate at the type's range; to BOOL is != 0. Integer ->
 * narrower integer wraps (two's complement). Float -> F16/BF16 rounds to nearest even (DOUBLE ->
 * F16/BF16 goes through FLOAT). */
void ah_load_f64(aclDataType t, const char *p, int64_t stride, int64_t n, double *dst);
void ah_load_i64(aclDataType t, const char *p, int64_t stride, int64_t n, int64_t *dst);
void ah_store_f64(aclDataType t, char *p, int64_t stride, int64_t n, const double *src);
void ah_store_i64(aclDataType t, char *p, int64_t stride, int64_t n, const int64_t *src);
/* One value of type `from` (e.g. an aclScalar) to type `to`, same rules. */
void ah_convert_value(aclDataType from, const void *src, aclDataType to, void *dst);

/* n elements from src (dtype st, byte stride ss) to dst (dtype dt, byte stride ds). Same dtype
 * copies bits; contiguous same-dtype runs are memmove; F32 <-> F16 / BF16 runs are vectorised. */
void ah_convert_run(int64_t n, char *dst, aclDataType dt, int64_t ds, const char *src,
                    aclDataType st, int64_t ss);

/* ---- the iterator -------------------------------------------------------------------------------- */
typedef struct ah_nd_operand {
    char *data;             /* address of the view's first element */
    aclDataType dtype;
    int ndim;
    const int64_t *dims;
    const int64_t *strides; /* elements */
} ah_nd_operand;

static inline ah_nd_operand ah_nd_tensor(const aclTensor *t) {
    ah_nd_operand op = {(char *)((uintptr_t)t->data +
                                 (uintptr_t)(t->offset * (int64_t)ah_dtype_size(t->dtype))),
                        t->dtype, t->ndim, t->dims, t->strides};
    return op;
}

/* A single value broadcast everywhere (a scalar operand). */
static inline ah_nd_operand ah_nd_value(const void *value, aclDataType dtype) {
    ah_nd_operand op = {(char *)(uintptr_t)value, dtype, 0, NULL, NULL};
    return op;
}

typedef struct ah_nd_plan {
    int ndim; /* >= 1 */
    int n_operands;
    int64_t numel;
    int64_t shape[AH_OP_MAX_RANK];
    char *base[AH_ND_MAX_OPERANDS];
    int64_t stride[AH_ND_MAX_OPERANDS][AH_OP_MAX_RANK]; /* bytes */
    aclDataType dtype[AH_ND_MAX_OPERANDS];
} ah_nd_plan;

/* operands[0] is the output: its shape is the iteration shape, the others broadcast to it.
 * False if an operand does not broadcast or ranks exceed AH_OP_MAX_RANK (validated in phase 1,
 * so only a programming error). */
bool ah_nd_plan_init(ah_nd_plan *plan, int n_operands, const ah_nd_operand *operands);

/* Kernel over one run: ptrs[k] / strides[k] (bytes) of operand k. */
typedef void (*ah_nd_kernel)(void *ctx, int64_t n, char *const *ptrs, const int64_t *strides);
void ah_nd_run(const ah_nd_plan *plan, int64_t grain, ah_nd_kernel kernel, void *ctx);

#endif /* AH_ND_H */
