/* ah_rows.h - row-wise kernels (RmsNorm, Softmax, ArgMax): a tensor seen as rows along some of
 * its dims (the "inner" dims) indexed by the others, row gather / scatter through an F32 buffer,
 * and fixed-order reductions.
 *
 * Batch invariance: a row's reduction depends only on the row's values. The sums accumulate in 16
 * lanes (element i into lane i % 16, products and sums rounded separately, no FMA) and the lanes
 * are folded in a fixed tree, in the scalar, AVX2 and AVX-512 paths alike, so a row gives the same
 * bits whatever the batch, the thread count or the instruction set.
 */
#ifndef AH_ROWS_H
#define AH_ROWS_H

#include "ah_nd.h"

typedef struct ah_rows {
    char *base;         /* the view's first element */
    aclDataType dtype;
    int n_outer, n_inner;
    int64_t outer_dims[AH_OP_MAX_RANK], outer_strides[AH_OP_MAX_RANK]; /* bytes */
    int64_t inner_dims[AH_OP_MAX_RANK], inner_strides[AH_OP_MAX_RANK]; /* bytes, merged */
    int64_t n_rows, len;
} ah_rows;

/* Rows of t: the dims whose bit is set in inner_mask form a row (in order), the others index
 * the rows (row-major). */
void ah_rows_init(ah_rows *r, const aclTensor *t, unsigned inner_mask);
/* Address of row `row`'s first element. */
char *ah_rows_ptr(const ah_rows *r, int64_t row);
/* Row to / from len contiguous F32 values (converted; F64 rounds to F32). */
void ah_rows_load(const ah_rows *r, int64_t row, float *dst);
void ah_rows_store(const ah_rows *r, int64_t row, const float *src);
/* Same in double (for F64 tensors). */
void ah_rows_load_f64(const ah_rows *r, int64_t row, double *dst);
void ah_rows_store_f64(const ah_rows *r, int64_t row, const double *src);

/* Whether each row is one run of adjacent elements (read in place, no gather). */
static inline bool ah_rows_dense(const ah_rows *r) {
    return r->n_inner == 1 && r->inner_strides[0] == (int64_t)ah_dtype_size(r->dtype);
}

/* Fixed-order (16-lane) sums of x[i] and x[i]*x[i]. */
float ah_sum_f32(const float *x, int64_t n);
float ah_sum_sq_f32(const float *x, int64_t n);
double ah_sum_f64(const double *x, int64_t n);

/* Rows per ah_parallel_for task so that a task covers about 16K elements. */
static inline int64_t ah_rows_grain(int64_t len) {
    int64_t g = ((int64_t)1 << 14) / (len > 0 ? len : 1);
    return g > 0 ? g : 1;
}

#endif /* AH_ROWS_H */
