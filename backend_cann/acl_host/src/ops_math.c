/* ops_math.c - aclnnSin, aclnnCos and aclnnDiv (the math the rotary cache is built with), and
 * aclnnClamp / aclnnIsNegInf (how the attention mask is split into a bias and a BOOL mask).
 *
 * Sin / Cos: integer, bool and float inputs, float outputs; F32 / F16 / BF16 compute in F32
 * (sinf / cosf), F64 in double. Div: true division with NumPy broadcasting; the result dtype is
 * the promotion of the inputs, integers and bool promote to FLOAT; out may be any float dtype the
 * result converts to. F16 / BF16 divide in F32 and round once. Clamp: float self, out of self's
 * shape and dtype, min / max scalars (NaN stays NaN). IsNegInf: float self, BOOL out of its shape
 * (contiguous F16 / BF16 / F32 runs compare bit patterns).
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>

#include "ah_convert.h"
#include "ah_nd.h"


#define FLOAT_OUT                                                                             \
    (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16) |            \
     AH_DTYPE_BIT(ACL_DOUBLE))
#define BLOCK 512

typedef enum math_kind { MATH_SIN, MATH_COS, MATH_DIV, MATH_CLAMP, MATH_ISNEGINF } math_kind;

typedef struct math_params {
    math_kind kind;
    int slot_a, slot_b, slot_out; /* slot_b < 0 for the unary ops */
    bool f64;                     /* compute in double */
    double lo, hi;                /* Clamp bounds */
    bool bounds_f32;              /* both bounds exact in F32 (the F16 fast path) */
} math_params;

typedef struct math_ctx {
    const math_params *p;
    aclDataType out_t, a_t, b_t;
} math_ctx;

/* Clamp of contiguous F16 runs (the attention mask's bias) in F32 with the vector converters:
 * the same bits as the double path, since every F16 value and both bounds (float-exact, checked
 * at prepare) are exact in F32. */
static void clamp_f16_run(const math_params *mp, int64_t n, char *const *p, int64_t s_in) {
    float x[BLOCK];
    const float lo = (float)mp->lo, hi = (float)mp->hi;
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        if (s_in == 2) {
            ah_f16_to_f32_row((const uint16_t *)(const void *)(p[1] + done * 2), x, m);
        } else { /* a broadcast (stride-0) input run */
            float v;
            ah_f16_to_f32_row((const uint16_t *)(const void *)p[1], &v, 1);
            for (int64_t i = 0; i < m; i++) x[i] = v;
        }
        for (int64_t i = 0; i < m; i++) x[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
        ah_f32_to_f16_row(x, (uint16_t *)(void *)(p[0] + done * 2), m);
    }
}

/* IsNegInf of a contiguous F16 / BF16 / F32 run into a contiguous BOOL one: -inf has one bit
 * pattern, so out = (bits == pattern), the same as the double path (the attention mask's split). */
static bool isneginf_run(aclDataType t, int64_t n, char *const *p) {
    uint8_t *out = (uint8_t *)p[0];
    if (t == ACL_FLOAT16 || t == ACL_BF16) {
        const uint16_t neg_inf = t == ACL_FLOAT16 ? 0xfc00u : 0xff80u;
        const uint16_t *in = (const uint16_t *)(const void *)p[1];
        for (int64_t i = 0; i < n; i++)
            out[i] = in[i] == neg_inf;
        return true;
    }
    if (t == ACL_FLOAT) {
        const uint32_t *in = (const uint32_t *)(const void *)p[1];
        for (int64_t i = 0; i < n; i++)
            out[i] = in[i] == 0xff800000u;
        return true;
    }
    return false;
}

static void math_segment(void *vctx, int64_t n, char *const *p, const int64_t *s) {
    const math_ctx *c = vctx;
    const math_params *mp = c->p;
    if (mp->kind == MATH_CLAMP && mp->bounds_f32 && c->a_t == ACL_FLOAT16 && c->out_t == ACL_FLOAT16 &&
        s[0] == 2 && (s[1] == 2 || s[1] == 0)) {
        clamp_f16_run(mp, n, p, s[1]);
        return;
    }
    if (mp->kind == MATH_ISNEGINF && c->out_t == ACL_BOOL && s[0] == 1 &&
        s[1] == (int64_t)ah_dtype_size(c->a_t) && isneginf_run(c->a_t, n, p))
        return;
    double a[BLOCK], b[BLOCK];
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        ah_load_f64(c->a_t, p[1] + done * s[1], s[1], m, a);
        if (mp->kind == MATH_DIV)
            ah_load_f64(c->b_t, p[2] + done * s[2], s[2], m, b);
        for (int64_t i = 0; i < m; i++) {
            if (mp->kind == MATH_CLAMP) {
                a[i] = a[i] < mp->lo ? mp->lo : a[i] > mp->hi ? mp->hi : a[i];
            } else if (mp->kind == MATH_ISNEGINF) {
                a[i] = a[i] == -INFINITY ? 1.0 : 0.0;
            } else if (mp->f64) {
                a[i] = mp->kind == MATH_SIN ? sin(a[i]) : mp->kind == MATH_COS ? cos(a[i]) : a[i] / b[i];
            } else {
                float x = (float)a[i];
                a[i] = mp->kind == MATH_SIN ? sinf(x) : mp->kind == MATH_COS ? cosf(x) : x / (float)b[i];
            }
        }
        ah_store_f64(c->out_t, p[0] + done * s[0], s[0], m, a);
    }
}

static aclError math_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const math_params *mp = AH_EXEC_PARAMS(ex, const math_params);
    int n = mp->slot_b >= 0 ? 3 : 2;
    ah_nd_operand ops[3] = {ah_nd_tensor(&ex->tensors[mp->slot_out]),
                            ah_nd_tensor(&ex->tensors[mp->slot_a]),
                            mp->slot_b >= 0 ? ah_nd_tensor(&ex->tensors[mp->slot_b])
                                            : ah_nd_tensor(&ex->tensors[mp->slot_a])};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, n, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: operands do not broadcast to out", ex->op);
    math_ctx c = {mp, ops[0].dtype, ops[1].dtype, ops[2].dtype};
    ah_nd_run(&plan, AH_ND_GRAIN / 8, math_segment, &c);
    return ACL_SUCCESS;
}

static aclnnStatus unary_prepare(const char *op, math_kind kind, const char *in_name,
                                 const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                 aclOpExecutor **executor) {
    AH_TRY(ah_check_tensor(op, in_name, self, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_OUT, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "the input's shape"));
    aclOpExecutor *ex = ah_executor_new(op, math_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    math_params *mp = AH_EXEC_PARAMS(ex, math_params);
    mp->kind = kind;
    mp->slot_a = ah_executor_add_tensor(ex, in_name, self, AH_IN);
    mp->slot_b = -1;
    mp->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    mp->f64 = self->dtype == ACL_DOUBLE || out->dtype == ACL_DOUBLE;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSinGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
    return unary_prepare("aclnnSin", MATH_SIN, "self", self, out, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSin(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSin");
}

AH_API aclnnStatus aclnnCosGetWorkspaceSize(const aclTensor *input, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
    return unary_prepare("aclnnCos", MATH_COS, "input", input, out, workspaceSize, executor);
}

AH_API aclnnStatus aclnnCos(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnCos");
}

AH_API aclnnStatus aclnnDivGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                            aclTensor *out, uint64_t *workspaceSize,
                                            aclOpExecutor **executor) {
    const char *op = "aclnnDiv";
    AH_TRY(ah_check_tensor(op, "self", self, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "other", other, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_OUT, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    aclDataType result = ah_promote_types(self->dtype, other->dtype);
    if (result == ACL_DT_UNDEFINED)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self dtype %s and other dtype %s do not promote",
                        op, ah_dtype_name(self->dtype), ah_dtype_name(other->dtype));
    if (!ah_dtype_is_float(result))
        result = ACL_FLOAT;
    int64_t dims[AH_OP_MAX_RANK];
    int ndim;
    AH_TRY(ah_check_broadcast(op, "self", self, "other", other, dims, &ndim));
    AH_TRY(ah_check_shape(op, "out", out, dims, ndim, "the broadcast shape"));
    aclOpExecutor *ex = ah_executor_new(op, math_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    math_params *mp = AH_EXEC_PARAMS(ex, math_params);
    mp->kind = MATH_DIV;
    mp->slot_a = ah_executor_add_tensor(ex, "self", self, AH_IN);
    mp->slot_b = ah_executor_add_tensor(ex, "other", other, AH_IN);
    mp->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    mp->f64 = result == ACL_DOUBLE;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnDiv(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnDiv");
}

#define FLOAT_IN (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))

AH_API aclnnStatus aclnnClampGetWorkspaceSize(const aclTensor *self, const aclScalar *clipValueMin,
                                              const aclScalar *clipValueMax, aclTensor *out,
                                              uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnClamp";
    AH_TRY(ah_check_tensor(op, "self", self, FLOAT_IN, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_IN, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (!clipValueMin && !clipValueMax)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: clipValueMin and clipValueMax are both NULL",
                        op);
    if (out->dtype != self->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out has dtype %s, self has %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(self->dtype));
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    double lo = -INFINITY, hi = INFINITY;
    if (clipValueMin)
        ah_convert_value(clipValueMin->dtype, clipValueMin->value.bytes, ACL_DOUBLE, &lo);
    if (clipValueMax)
        ah_convert_value(clipValueMax->dtype, clipValueMax->value.bytes, ACL_DOUBLE, &hi);
    aclOpExecutor *ex = ah_executor_new(op, math_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    math_params *mp = AH_EXEC_PARAMS(ex, math_params);
    mp->kind = MATH_CLAMP;
    mp->slot_a = ah_executor_add_tensor(ex, "self", self, AH_IN);
    mp->slot_b = -1;
    mp->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    mp->f64 = true;
    mp->lo = lo, mp->hi = hi;
    mp->bounds_f32 = (double)(float)lo == lo && (double)(float)hi == hi;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnClamp(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                              const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnClamp");
}

AH_API aclnnStatus aclnnIsNegInfGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                                 uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnIsNegInf";
    AH_TRY(ah_check_tensor(op, "self", self, FLOAT_IN, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPE_BIT(ACL_BOOL), 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    aclOpExecutor *ex = ah_executor_new(op, math_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    math_params *mp = AH_EXEC_PARAMS(ex, math_params);
    mp->kind = MATH_ISNEGINF;
    mp->slot_a = ah_executor_add_tensor(ex, "self", self, AH_IN);
    mp->slot_b = -1;
    mp->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    mp->f64 = true;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnIsNegInf(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                 const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnIsNegInf");
}
