/* ops_gather.c - aclnnIndexSelect, aclnnGatherV2 (gathers along one dim) and
 * aclnnRemainderTensorScalar (Python-style modulo, used to split packed int4 bytes).
 *
 * Gathers copy bits: out's slice i along dim is self's slice index[i] (out has self's dtype).
 * Indices are read when the op runs; one outside [0, self.shape[dim]) fails the launch with
 * ACLNN_ERR_PARAM_INVALID reported at the next synchronize (the NPU raises an AI core error).
 */
#include <math.h>
#include <string.h>

#include "ah_nd.h"


#define GATHER_DTYPES                                                                         \
    (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |            \
     AH_DTYPE_BIT(ACL_INT64) | AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT16) |             \
     AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_UINT8) | AH_DTYPE_BIT(ACL_BOOL) |               \
     AH_DTYPE_BIT(ACL_DOUBLE))
#define INDEX_DTYPES (AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64))

typedef struct gather_params {
    int slot_self, slot_index, slot_out;
    int dim; /* in self */
} gather_params;

typedef struct gather_ctx {
    const aclTensor *self, *index, *out;
    int dim;
    int64_t n_index;
    volatile int bad;
    volatile int64_t bad_value;
} gather_ctx;

static int64_t index_at(const aclTensor *t, int64_t i) {
    /* the index tensor is walked in row-major order of its view */
    int64_t off = t->offset;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->dims[d]) * t->strides[d];
        i /= t->dims[d];
    }
    if (t->dtype == ACL_INT32)
        return ((const int32_t *)t->data)[off];
    return ((const int64_t *)t->data)[off];
}

static void copy_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    const aclDataType *dt = ctx;
    ah_convert_run(n, p[0], *dt, s[0], p[1], *dt, s[1]);
}

/* Out's slice i (the index dims flattened, in out at dims [dim, dim + index rank)) <- self's slice
 * index[i]; the slice is every other dim. */
static void gather_range(void *vctx, int64_t begin, int64_t end) {
    gather_ctx *c = vctx;
    const aclTensor *self = c->self, *out = c->out;
    int irank = out->ndim - self->ndim + 1; /* index dims in out */
    int64_t es = (int64_t)ah_dtype_size(self->dtype);
    int64_t sdims[AH_OP_MAX_RANK], sstr[AH_OP_MAX_RANK], ostr[AH_OP_MAX_RANK];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (d == c->dim)
            continue;
        int od = d < c->dim ? d : d + irank - 1;
        sdims[n] = self->dims[d];
        sstr[n] = self->strides[d];
        ostr[n] = out->strides[od];
        n++;
    }
    if (n == 0) { /* 1-D self: one element per index */
        sdims[0] = 1, sstr[0] = 0, ostr[0] = 0;
        n = 1;
    }
    aclDataType dt = self->dtype;
    for (int64_t i = begin; i < end; i++) {
        int64_t idx = index_at(c->index, i);
        if (idx < 0 || idx >= self->dims[c->dim]) {
            c->bad = 1;
            c->bad_value = idx;
            continue;
        }
        /* out offset of slice i: unravel i over the index dims of out */
        int64_t ooff = out->offset, rem = i;
        for (int d = c->dim + irank - 1; d >= c->dim; d--) {
            ooff += (rem % out->dims[d]) * out->strides[d];
            rem /= out->dims[d];
        }
        ah_nd_operand ops[2] = {
            {(char *)out->data + ooff * es, dt, n, sdims, ostr},
            {(char *)self->data + (self->offset + idx * self->strides[c->dim]) * es, dt, n, sdims, sstr}};
        ah_nd_plan plan;
        if (ah_nd_plan_init(&plan, 2, ops))
            ah_nd_run(&plan, INT64_MAX, copy_segment, &dt);
    }
}

static aclError gather_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const gather_params *p = AH_EXEC_PARAMS(ex, const gather_params);
    gather_ctx c = {.self = &ex->tensors[p->slot_self], .index = &ex->tensors[p->slot_index],
                    .out = &ex->tensors[p->slot_out], .dim = p->dim};
    c.n_index = ah_tensor_numel(c.index);
    int64_t slice = ah_tensor_numel(c.self) / (c.self->dims[p->dim] ? c.self->dims[p->dim] : 1);
    int64_t grain = slice >= 4096 ? 1 : 4096 / (slice ? slice : 1);
    ah_parallel_for(c.n_index, grain, gather_range, &c);
    if (c.bad)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: index %lld is outside [0, %lld) of self's dim %d", ex->op,
                        (long long)c.bad_value, (long long)c.self->dims[p->dim], p->dim);
    return ACL_SUCCESS;
}

/* Shared phase 1: index_select needs a 0-D / 1-D index; GatherV2 takes any index rank (out rank
 * = self rank + index rank - 1). */
static aclnnStatus gather_prepare(const char *op, bool any_index_rank, const aclTensor *self, int64_t dim,
                                  const aclTensor *index, aclTensor *out, uint64_t *workspaceSize,
                                  aclOpExecutor **executor) {
    AH_TRY(ah_check_tensor(op, "self", self, GATHER_DTYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "index", index, INDEX_DTYPES, 0, any_index_rank ? AH_OP_MAX_RANK : 1));
    AH_TRY(ah_check_tensor(op, "out", out, GATHER_DTYPES, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (out->dtype != self->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out has dtype %s, expected self's %s", op, ah_dtype_name(out->dtype),
                        ah_dtype_name(self->dtype));
    int rank = self->ndim ? self->ndim : 1;
    if (dim < -rank || dim >= rank)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d]", op, (long long)dim, -rank, rank - 1);
    if (dim < 0)
        dim += rank;
    if (self->ndim == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: a 0-D self is not implemented by acl_host", op);
    int64_t dims[2 * AH_OP_MAX_RANK];
    int n = 0;
    for (int d = 0; d < self->ndim; d++) {
        if (d != dim) {
            dims[n++] = self->dims[d];
        } else if (any_index_rank) {
            for (int j = 0; j < index->ndim; j++)
                dims[n++] = index->dims[j];
        } else {
            dims[n++] = ah_tensor_numel(index);
        }
    }
    if (n > AH_OP_MAX_RANK)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out would have rank %d > %d", op, n, AH_OP_MAX_RANK);
    AH_TRY(ah_check_shape(op, "out", out, dims, n, "self's shape with dim replaced by index's"));
    if (!any_index_rank && index->ndim == 0 && out->ndim != self->ndim)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out rank differs from self's", op);
    aclOpExecutor *ex = ah_executor_new(op, gather_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    gather_params *p = AH_EXEC_PARAMS(ex, gather_params);
    p->dim = (int)dim;
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_index = ah_executor_add_tensor(ex, "index", index, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnIndexSelectGetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                                    aclTensor *out, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor) {
    return gather_prepare("aclnnIndexSelect", false, self, dim, index, out, workspaceSize, executor);
}

AH_API aclnnStatus aclnnIndexSelect(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnIndexSelect");
}

AH_API aclnnStatus aclnnGatherV2GetWorkspaceSize(const aclTensor *self, int64_t dim, const aclTensor *index,
                                                 aclTensor *out, uint64_t *workspaceSize, aclOpExecutor **executor) {
    return gather_prepare("aclnnGatherV2", true, self, dim, index, out, workspaceSize, executor);
}

AH_API aclnnStatus aclnnGatherV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                 aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnGatherV2");
}

/* ==== RemainderTensorScalar: out = self - other * floor(self / other) ================================ */
typedef struct rem_params {
    int slot_self, slot_out;
    aclDataType compute;
    double other_f;
    int64_t other_i;
} rem_params;

typedef struct rem_run_ctx {
    rem_params p;
    aclDataType out_t, in_t;
} rem_run_ctx;

#define REM_BLOCK 256

static void rem_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    const rem_run_ctx *rc = ctx;
    const rem_params *rp = &rc->p;
    aclDataType out_t = rc->out_t, in_t = rc->in_t;
    for (int64_t done = 0; done < n; done += REM_BLOCK) {
        int64_t m = n - done < REM_BLOCK ? n - done : REM_BLOCK;
        if (ah_dtype_is_float(rp->compute)) {
            double v[REM_BLOCK];
            ah_load_f64(in_t, p[1] + done * s[1], s[1], m, v);
            double b = rp->other_f;
            for (int64_t i = 0; i < m; i++) {
                double r = fmod(v[i], b);
                if (r != 0 && ((r < 0) != (b < 0)))
                    r += b;
                v[i] = rp->compute == ACL_DOUBLE ? r : (double)(float)r;
            }
            ah_store_f64(out_t, p[0] + done * s[0], s[0], m, v);
        } else {
            int64_t v[REM_BLOCK];
            ah_load_i64(in_t, p[1] + done * s[1], s[1], m, v);
            int64_t b = rp->other_i;
            for (int64_t i = 0; i < m; i++) {
                int64_t r = b == 0 ? 0 : (b == -1 ? 0 : v[i] % b);
                if (r != 0 && ((r < 0) != (b < 0)))
                    r += b;
                v[i] = r;
            }
            ah_store_i64(out_t, p[0] + done * s[0], s[0], m, v);
        }
    }
}

static aclError rem_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    rem_run_ctx c;
    c.p = *AH_EXEC_PARAMS(ex, const rem_params);
    ah_nd_operand ops[2] = {ah_nd_tensor(&ex->tensors[c.p.slot_out]), ah_nd_tensor(&ex->tensors[c.p.slot_self])};
    c.out_t = ops[0].dtype;
    c.in_t = ops[1].dtype;
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 2, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: self does not match out", ex->op);
    ah_nd_run(&plan, AH_ND_GRAIN, rem_segment, &c);
    return ACL_SUCCESS;
}

AH_API aclnnStatus aclnnRemainderTensorScalarGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
                                                              aclTensor *out, uint64_t *workspaceSize,
                                                              aclOpExecutor **executor) {
    const char *op = "aclnnRemainderTensorScalar";
    uint64_t in_types = AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64) | AH_DTYPE_BIT(ACL_FLOAT16) |
                        AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_DOUBLE);
    uint64_t out_types = in_types | AH_DTYPE_BIT(ACL_UINT8) | AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_INT16);
    AH_TRY(ah_check_tensor(op, "self", self, in_types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_scalar(op, "other", other, AH_DTYPES_ARITH));
    AH_TRY(ah_check_tensor(op, "out", out, out_types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    aclDataType compute = ah_promote_tensor_scalar(self->dtype, other->dtype);
    if (!(in_types & AH_DTYPE_BIT(compute)))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self %s and other %s promote to %s, not supported", op,
                        ah_dtype_name(self->dtype), ah_dtype_name(other->dtype), ah_dtype_name(compute));
    if (!ah_can_cast(compute, out->dtype))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: cannot cast %s to out's %s", op, ah_dtype_name(compute),
                        ah_dtype_name(out->dtype));
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, rem_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    rem_params *p = AH_EXEC_PARAMS(ex, rem_params);
    p->compute = compute;
    ah_convert_value(other->dtype, other->value.bytes, ACL_DOUBLE, &p->other_f);
    ah_convert_value(other->dtype, other->value.bytes, ACL_INT64, &p->other_i);
    if (compute == ACL_FLOAT16 || compute == ACL_FLOAT)
        p->other_f = (double)(float)p->other_f;
    p->slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnRemainderTensorScalar(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                              aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnRemainderTensorScalar");
}
