/* ops_index.c - aclnnInplaceIndexCopy and aclnnArgMax.
 *
 * InplaceIndexCopy: selfRef[..., index[i], ...] = source[..., i, ...] along dim; index is 0-d or
 * 1-d INT32 / INT64 with values in [0, selfRef.shape[dim]) (negative values count from the end,
 * as torch); source has selfRef's dtype and shape except len(index) along dim. Entries are
 * applied in order, so with repeated indices the last one wins. An index out of range is an
 * error of the launch (reported by the stream).
 * ArgMax: the index of the first maximum along dim (NaN counts as the maximum, as torch), out
 * INT64 or INT32 with dim removed (or 1 when keepdim). Rows run in parallel. A dense F32 row (a
 * decode step's logits) is cut into fixed chunks whose maxima (and NaN flags) are taken in
 * parallel, in vectors; the chunks are combined in order and only the chosen one is searched
 * for the position, so the index is the same for any thread count or instruction set.
 */
#include <math.h>
#include <stdlib.h>

#include "ah_convert.h"
#include "ah_rows.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif


#define INDEX_TYPES (AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64))

/* ---- InplaceIndexCopy ------------------------------------------------------------------------ */
typedef struct index_copy_params {
    int slot_self, slot_index, slot_source, dim;
} index_copy_params;

static void copy_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    aclDataType t = *(const aclDataType *)ctx;
    ah_convert_run(n, p[0], t, s[0], p[1], t, s[1]);
}

static aclError index_copy_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const index_copy_params *p = AH_EXEC_PARAMS(ex, const index_copy_params);
    const aclTensor *self = &ex->tensors[p->slot_self], *index = &ex->tensors[p->slot_index];
    const aclTensor *source = &ex->tensors[p->slot_source];
    int d = p->dim;
    int64_t n_index = ah_tensor_numel(index), size = self->ndim > 0 ? self->dims[d] : 1;
    int64_t idx_stride = index->ndim > 0 ? index->strides[0] : 0;
    const char *idx_base = (const char *)index->data + index->offset * (int64_t)ah_dtype_size(index->dtype);
    for (int64_t i = 0; i < n_index; i++) {
        int64_t at;
        ah_load_i64(index->dtype, idx_base + i * idx_stride * (int64_t)ah_dtype_size(index->dtype), 0, 1, &at);
        if (at < -size || at >= size)
            return ah_error(ACLNN_ERR_INNER, "%s: index[%lld] = %lld is outside [0, %lld) of selfRef dim %d",
                            ex->op, (long long)i, (long long)at, (long long)size, d);
        if (at < 0)
            at += size;
        aclTensor dst = *self, src = *source;
        if (self->ndim > 0) {
            dst.dims[d] = 1;
            dst.offset += at * self->strides[d];
            src.dims[d] = 1;
            src.offset += i * source->strides[d];
        }
        ah_nd_operand ops[2] = {ah_nd_tensor(&dst), ah_nd_tensor(&src)};
        ah_nd_plan plan;
        if (!ah_nd_plan_init(&plan, 2, ops))
            return ah_error(ACLNN_ERR_INNER, "%s: source slice does not match selfRef", ex->op);
        ah_nd_run(&plan, AH_ND_GRAIN, copy_segment, &dst.dtype);
    }
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnInplaceIndexCopyGetWorkspaceSize(aclTensor *selfRef, int64_t dim,
                                                         const aclTensor *index,
                                                         const aclTensor *source,
                                                         uint64_t *workspaceSize,
                                                         aclOpExecutor **executor) {
    const char *op = "aclnnInplaceIndexCopy";
    const uint64_t types = AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |
                           AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64) | AH_DTYPE_BIT(ACL_INT16) |
                           AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_UINT8) | AH_DTYPE_BIT(ACL_DOUBLE) |
                           AH_DTYPE_BIT(ACL_BOOL);
    AH_TRY(ah_check_tensor(op, "selfRef", selfRef, types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "index", index, INDEX_TYPES, 0, 1));
    AH_TRY(ah_check_tensor(op, "source", source, types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (source->dtype != selfRef->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: source dtype %s differs from selfRef dtype %s", op,
                        ah_dtype_name(source->dtype), ah_dtype_name(selfRef->dtype));
    int rank = selfRef->ndim > 0 ? selfRef->ndim : 1;
    if (dim < -rank || dim >= rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for selfRef of rank %d",
                        op, (long long)dim, -rank, rank - 1, selfRef->ndim);
    if (dim < 0)
        dim += rank;
    int64_t dims[AH_OP_MAX_RANK];
    for (int i = 0; i < selfRef->ndim; i++)
        dims[i] = i == dim ? ah_tensor_numel(index) : selfRef->dims[i];
    if (selfRef->ndim == 0 && ah_tensor_numel(index) != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: a 0-d selfRef takes one index", op);
    AH_TRY(ah_check_shape(op, "source", source, dims, selfRef->ndim,
                       "selfRef's shape with len(index) along dim"));
    aclOpExecutor *ex = ah_executor_new(op, index_copy_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    index_copy_params *p = AH_EXEC_PARAMS(ex, index_copy_params);
    p->slot_self = ah_executor_add_tensor(ex, "selfRef", selfRef, AH_INOUT);
    p->slot_index = ah_executor_add_tensor(ex, "index", index, AH_IN);
    p->slot_source = ah_executor_add_tensor(ex, "source", source, AH_IN);
    p->dim = (int)dim;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnInplaceIndexCopy(void *workspace, uint64_t workspaceSize,
                                         aclOpExecutor *executor, aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnInplaceIndexCopy");
}

/* ---- ArgMax ---------------------------------------------------------------------------------- */
typedef struct argmax_params {
    int slot_self, slot_out, dim;
} argmax_params;

typedef struct argmax_ctx {
    ah_rows x, y;
} argmax_ctx;

static void argmax_rows(void *vctx, int64_t begin, int64_t end) {
    const argmax_ctx *c = vctx;
    int64_t n = c->x.len;
    double *buf = malloc((size_t)n * sizeof(double));
    if (!buf)
        return;
    for (int64_t row = begin; row < end; row++) {
        ah_rows_load_f64(&c->x, row, buf);
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++) {
            double v = buf[i], m = buf[best];
            if (m != m)
                break; /* a NaN is the maximum; the first one wins */
            if (v > m || v != v)
                best = i;
        }
        ah_store_i64(c->y.dtype, ah_rows_ptr(&c->y, row), 0, 1, &best);
    }
    free(buf);
}

/* ---- dense F32 rows, in chunks ---- */
#define ARGMAX_CHUNK 16384 /* elements per task of a long row */
#define ARGMAX_LANES 16

typedef struct argmax_part {
    float v;  /* the chunk's largest value */
    bool nan; /* whether it holds a NaN */
} argmax_part;

typedef struct argmax_f32_ctx {
    ah_rows x;
    int64_t n_chunks;
    argmax_part *parts; /* n_rows * n_chunks */
} argmax_f32_ctx;

/* The largest value of x[0, n) (-inf for none) and whether a NaN was seen, in vectors where the
 * CPU has them (max(v, m) keeps m when v is NaN; a NaN is noted apart). */
static float chunk_max_scalar(const float *x, int64_t n, bool *nan) {
    float lane[ARGMAX_LANES];
    int any_nan = 0;
    for (int l = 0; l < ARGMAX_LANES; l++)
        lane[l] = -INFINITY;
    int64_t i = 0;
    for (; i + ARGMAX_LANES <= n; i += ARGMAX_LANES)
        for (int l = 0; l < ARGMAX_LANES; l++) {
            float v = x[i + l];
            any_nan |= v != v;
            lane[l] = v > lane[l] ? v : lane[l];
        }
    for (; i < n; i++) {
        any_nan |= x[i] != x[i];
        lane[0] = x[i] > lane[0] ? x[i] : lane[0];
    }
    float m = lane[0];
    for (int l = 1; l < ARGMAX_LANES; l++)
        m = lane[l] > m ? lane[l] : m;
    *nan = any_nan != 0;
    return m;
}

#ifdef AH_X86
__attribute__((target("avx2"))) static float chunk_max_avx2(const float *x, int64_t n, bool *nan) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q)));
        m0 = _mm256_max_ps(a, m0);
        m1 = _mm256_max_ps(b, m1);
    }
    float lane[8], m;
    _mm256_storeu_ps(lane, _mm256_max_ps(m0, m1));
    bool tail_nan;
    m = chunk_max_scalar(x + i, n - i, &tail_nan);
    for (int l = 0; l < 8; l++)
        m = lane[l] > m ? lane[l] : m;
    *nan = tail_nan || _mm256_movemask_ps(bad) != 0;
    return m;
}

__attribute__((target("avx512f"))) static float chunk_max_avx512(const float *x, int64_t n, bool *nan) {
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    __mmask16 bad = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        bad |= _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q);
        m0 = _mm512_max_ps(a, m0);
        m1 = _mm512_max_ps(b, m1);
    }
    float lane[16], m;
    _mm512_storeu_ps(lane, _mm512_max_ps(m0, m1));
    bool tail_nan;
    m = chunk_max_scalar(x + i, n - i, &tail_nan);
    for (int l = 0; l < 16; l++)
        m = lane[l] > m ? lane[l] : m;
    *nan = tail_nan || bad != 0;
    return m;
}
#endif

/* The largest value of x[0, n) (n > 0; -inf for none) and whether it holds a NaN. */
static float chunk_max(const float *x, int64_t n, bool *nan) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: return chunk_max_avx512(x, n, nan);
    case AH_ISA_AVX2: return chunk_max_avx2(x, n, nan);
    default: break;
    }
#endif
    return chunk_max_scalar(x, n, nan);
}

/* The first position in x[0, n) of a NaN (nan) or of the value m, which x holds. */
#ifdef AH_X86
__attribute__((target("avx512f"))) static int64_t first_equal_avx512(const float *x, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + i), mv, _CMP_EQ_OQ);
        if (eq)
            return i + __builtin_ctz((unsigned)eq);
    }
    while (i < n - 1 && x[i] != m)
        i++;
    return i;
}
#endif

static int64_t first_position(const float *x, int64_t n, float m, bool nan) {
    int64_t i = 0;
    if (nan) {
        while (x[i] == x[i])
            i++;
        return i;
    }
#ifdef AH_X86
    if (ah_isa() == AH_ISA_AVX512)
        return first_equal_avx512(x, n, m);
#endif
    while (i < n - 1 && x[i] != m) /* m is one of the values (or every value is -inf) */
        i++;
    return i;
}

static void argmax_chunks(void *vctx, int64_t begin, int64_t end) {
    const argmax_f32_ctx *c = vctx;
    for (int64_t t = begin; t < end; t++) {
        int64_t row = t / c->n_chunks, at = t % c->n_chunks * ARGMAX_CHUNK;
        int64_t n = c->x.len - at < ARGMAX_CHUNK ? c->x.len - at : ARGMAX_CHUNK;
        argmax_part *p = &c->parts[t];
        p->v = chunk_max((const float *)ah_rows_ptr(&c->x, row) + at, n, &p->nan);
    }
}

/* A row's index from its chunks' maxima, in order: the first chunk with a NaN, else the first
 * chunk holding the largest value; then the first position of that in the chunk. */
static int64_t argmax_combine(const argmax_f32_ctx *c, int64_t row) {
    const argmax_part *parts = &c->parts[row * c->n_chunks];
    int64_t k = 0;
    for (int64_t j = 1; j < c->n_chunks && !parts[k].nan; j++)
        if (parts[j].nan || parts[j].v > parts[k].v)
            k = j;
    int64_t at = k * ARGMAX_CHUNK, n = c->x.len - at < ARGMAX_CHUNK ? c->x.len - at : ARGMAX_CHUNK;
    return at + first_position((const float *)ah_rows_ptr(&c->x, row) + at, n, parts[k].v, parts[k].nan);
}

static aclError argmax_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const argmax_params *p = AH_EXEC_PARAMS(ex, const argmax_params);
    const aclTensor *x = &ex->tensors[p->slot_self];
    argmax_ctx c;
    ah_rows_init(&c.x, x, x->ndim > 0 ? 1u << p->dim : 0u);
    ah_rows_init(&c.y, &ex->tensors[p->slot_out], 0u);
    if (c.x.n_rows == 0 || c.x.len == 0)
        return ACL_SUCCESS;
    if (c.x.dtype == ACL_FLOAT && ah_rows_dense(&c.x)) {
        argmax_f32_ctx f = {c.x, (c.x.len + ARGMAX_CHUNK - 1) / ARGMAX_CHUNK, NULL};
        f.parts = malloc((size_t)(c.x.n_rows * f.n_chunks) * sizeof *f.parts);
        if (!f.parts)
            return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclnnArgMax: out of host memory");
        ah_parallel_for(c.x.n_rows * f.n_chunks, f.n_chunks > 1 ? 1 : ah_rows_grain(c.x.len),
                        argmax_chunks, &f);
        for (int64_t row = 0; row < c.x.n_rows; row++) {
            int64_t best = argmax_combine(&f, row);
            ah_store_i64(c.y.dtype, ah_rows_ptr(&c.y, row), 0, 1, &best);
        }
        free(f.parts);
        return ACL_SUCCESS;
    }
    ah_parallel_for(c.x.n_rows, ah_rows_grain(c.x.len), argmax_rows, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnArgMaxGetWorkspaceSize(const aclTensor *self, int64_t dim, bool keepdim,
                                               aclTensor *out, uint64_t *workspaceSize,
                                               aclOpExecutor **executor) {
    const char *op = "aclnnArgMax";
    AH_TRY(ah_check_tensor(op, "self", self, AH_DTYPES_ARITH & ~AH_DTYPE_BIT(ACL_BOOL), 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, INDEX_TYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    int rank = self->ndim > 0 ? self->ndim : 1;
    if (dim < -rank || dim >= rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for self of rank %d",
                        op, (long long)dim, -rank, rank - 1, self->ndim);
    if (dim < 0)
        dim += rank;
    if (self->ndim > 0 && self->dims[dim] == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self is empty along dim %lld", op, (long long)dim);
    int64_t dims[AH_OP_MAX_RANK];
    int nd = 0;
    for (int i = 0; i < self->ndim; i++) {
        if (i != dim)
            dims[nd++] = self->dims[i];
        else if (keepdim)
            dims[nd++] = 1;
    }
    AH_TRY(ah_check_shape(op, "out", out, dims, nd, keepdim ? "self's shape with dim 1" : "self's shape without dim"));
    aclOpExecutor *ex = ah_executor_new(op, argmax_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    argmax_params *p = AH_EXEC_PARAMS(ex, argmax_params);
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    p->dim = (int)dim;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnArgMax(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnArgMax");
}
