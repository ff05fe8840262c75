/* ops_elementwise.c - aclnnAdd / Adds / InplaceAdd / Mul / Muls.
 *
 * out = self + alpha * other, out = self * other, with NumPy broadcasting, PyTorch promotion
 * (tensor-scalar rules for Adds / Muls) and a final cast to out's dtype. F16 / BF16 compute in F32
 * and round once to the promoted type (nearest even); a scalar operand is first converted to the
 * promoted type, alpha is applied in F32 (FLOAT / F16 / BF16) or F64 / int64. Integer results wrap.
 * Contiguous and broadcast-row F32 / F16 / BF16 runs are vectorised (AVX-512 / AVX2, runtime
 * dispatch), strided float runs go through F32 blocks; every path rounds the same way (no fused
 * multiply-add), so results do not depend on the CPU or thread count. out may be self or other (same view); a partial overlap between out
 * and an input is undefined, as in CANN.
 */
#pragma GCC optimize("fp-contract=off")

#include <string.h>

#include "ah_convert.h"
#include "ah_nd.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

typedef enum bin_kind { BIN_ADD, BIN_MUL } bin_kind;

typedef struct binary_params {
    bin_kind kind;
    aclDataType compute;        /* the promoted dtype */
    int slot_self, slot_other, slot_out; /* slot_other < 0: other is other_value */
    unsigned char other_value[16];       /* Adds / Muls scalar, converted to `compute` */
    bool scaled;                /* Add with alpha != 1 */
    double alpha_f;
    int64_t alpha_i;
} binary_params;

/* ---- F32 runs: a and b either contiguous or one broadcast value ---------------------------- */
typedef struct f32_run {
    int64_t n;
    float *out;
    const float *a, *b;
    bool a_bcast, b_bcast;
    bin_kind kind;
    bool scaled;
    float alpha;
} f32_run;

static inline float f32_op(const f32_run *r, float a, float b) {
    if (r->kind == BIN_MUL)
        return a * b;
    return r->scaled ? a + r->alpha * b : a + b;
}

static void f32_binary_scalar(const f32_run *r, int64_t i) {
    for (; i < r->n; i++)
        r->out[i] = f32_op(r, r->a_bcast ? r->a[0] : r->a[i], r->b_bcast ? r->b[0] : r->b[i]);
}

#ifdef AH_X86
__attribute__((target("avx2"))) static void f32_binary_avx2(const f32_run *r) {
    const __m256 a0 = _mm256_set1_ps(r->a[0]), b0 = _mm256_set1_ps(r->b[0]);
    const __m256 alpha = _mm256_set1_ps(r->alpha);
    int64_t i = 0;
    for (; i + 8 <= r->n; i += 8) {
        __m256 a = r->a_bcast ? a0 : _mm256_loadu_ps(r->a + i);
        __m256 b = r->b_bcast ? b0 : _mm256_loadu_ps(r->b + i);
        __m256 v = r->kind == BIN_MUL ? _mm256_mul_ps(a, b)
                   : r->scaled        ? _mm256_add_ps(a, _mm256_mul_ps(alpha, b))
                                      : _mm256_add_ps(a, b);
        _mm256_storeu_ps(r->out + i, v);
    }
    f32_binary_scalar(r, i);
}

__attribute__((target("avx512f"))) static void f32_binary_avx512(const f32_run *r) {
    const __m512 a0 = _mm512_set1_ps(r->a[0]), b0 = _mm512_set1_ps(r->b[0]);
    const __m512 alpha = _mm512_set1_ps(r->alpha);
    int64_t i = 0;
    for (; i + 16 <= r->n; i += 16) {
        __m512 a = r->a_bcast ? a0 : _mm512_loadu_ps(r->a + i);
        __m512 b = r->b_bcast ? b0 : _mm512_loadu_ps(r->b + i);
        __m512 v = r->kind == BIN_MUL ? _mm512_mul_ps(a, b)
                   : r->scaled        ? _mm512_add_ps(a, _mm512_mul_ps(alpha, b))
                                      : _mm512_add_ps(a, b);
        _mm512_storeu_ps(r->out + i, v);
    }
    f32_binary_scalar(r, i);
}
#endif

static void f32_binary(const f32_run *r) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: f32_binary_avx512(r); return;
    case AH_ISA_AVX2: f32_binary_avx2(r); return;
    default: break;
    }
#endif
    f32_binary_scalar(r, 0);
}

/* ---- the segment kernel ------------------------------------------------------------------------ */
#define BLOCK 512

typedef struct binary_ctx {
    const binary_params *params;
    aclDataType out_t, a_t, b_t;
    bool uniform; /* out, self, other and compute share one of FLOAT / FLOAT16 / BF16 */
    bool f32_compute; /* every operand FLOAT / FLOAT16 / BF16, computed in F32 (or uniform) */
} binary_ctx;

static void to_f32(aclDataType t, const char *src, float *dst, int64_t n) {
    if (t == ACL_FLOAT16)
        ah_f16_to_f32_row((const uint16_t *)(const void *)src, dst, n);
    else
        ah_bf16_to_f32_row((const uint16_t *)(const void *)src, dst, n);
}

/* All operands of one float type t, out contiguous, inputs contiguous or broadcast. */
static void uniform_float_run(const binary_ctx *c, int64_t n, char *const *p, bool a_bcast,
                              bool b_bcast) {
    const binary_params *bp = c->params;
    f32_run r = {.kind = bp->kind, .scaled = bp->scaled, .alpha = (float)bp->alpha_f,
                 .a_bcast = a_bcast, .b_bcast = b_bcast};
    if (c->out_t == ACL_FLOAT) {
        r.n = n;
        r.out = (float *)(void *)p[0];
        r.a = (const float *)(const void *)p[1];
        r.b = (const float *)(const void *)p[2];
        f32_binary(&r);
        return;
    }
    size_t es = 2;
    float a[BLOCK], b[BLOCK], out[BLOCK];
    if (a_bcast)
        to_f32(c->a_t, p[1], a, 1);
    if (b_bcast)
        to_f32(c->b_t, p[2], b, 1);
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        if (!a_bcast)
            to_f32(c->a_t, p[1] + done * es, a, m);
        if (!b_bcast)
            to_f32(c->b_t, p[2] + done * es, b, m);
        r.n = m;
        r.out = out;
        r.a = a;
        r.b = b;
        f32_binary(&r);
        uint16_t *dst = (uint16_t *)(void *)(p[0] + done * es);
        if (c->out_t == ACL_FLOAT16)
            ah_f32_to_f16_row(out, dst, m);
        else
            ah_f32_to_bf16_row(out, dst, m);
    }
}

static int64_t wrap_to(aclDataType t, int64_t v) {
    switch (t) {
    case ACL_INT8: return (int8_t)(uint64_t)v;
    case ACL_INT16: return (int16_t)(uint64_t)v;
    case ACL_INT32: return (int32_t)(uint64_t)v;
    case ACL_UINT8: return (uint8_t)(uint64_t)v;
    case ACL_BOOL: return v != 0;
    default: return v;
    }
}

static double round_to(aclDataType t, float v) {
    if (t == ACL_FLOAT16)
        return ah_f16_to_f32(ah_f32_to_f16(v));
    if (t == ACL_BF16)
        return ah_bf16_to_f32(ah_f32_to_bf16(v));
    return v;
}

/* n float elements (F32 / F16 / BF16) at a byte stride (0: one value) to F32, exactly. */
static void widen(aclDataType t, const char *src, int64_t stride, int64_t n, float *dst) {
    size_t es = ah_dtype_size(t);
    if (stride == (int64_t)es && t != ACL_FLOAT) {
        to_f32(t, src, dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++, src += stride) {
        uint16_t h;
        if (t == ACL_FLOAT) {
            memcpy(&dst[i], src, 4);
            continue;
        }
        memcpy(&h, src, 2);
        dst[i] = t == ACL_FLOAT16 ? ah_f16_to_f32(h) : ah_bf16_to_f32(h);
    }
}

/* n F32 values to a float dtype at a byte stride, rounded to nearest even. */
static void narrow(aclDataType t, char *dst, int64_t stride, int64_t n, const float *src) {
    size_t es = ah_dtype_size(t);
    if (stride == (int64_t)es && t != ACL_FLOAT) {
        if (t == ACL_FLOAT16)
            ah_f32_to_f16_row(src, (uint16_t *)(void *)dst, n);
        else
            ah_f32_to_bf16_row(src, (uint16_t *)(void *)dst, n);
        return;
    }
    for (int64_t i = 0; i < n; i++, dst += stride) {
        if (t == ACL_FLOAT) {
            memcpy(dst, &src[i], 4);
            continue;
        }
        uint16_t h = t == ACL_FLOAT16 ? ah_f32_to_f16(src[i]) : ah_f32_to_bf16(src[i]);
        memcpy(dst, &h, 2);
    }
}

/* Float operands at any strides (ROPE's pair members are every other element), computed in F32
 * with one rounding to the result's dtype: blocks widened to F32, the vectorised F32 kernel,
 * narrowed back. The bits of generic_run, without its round trip through double. */
static void float_strided_run(const binary_ctx *c, int64_t n, char *const *p, const int64_t *s) {
    const binary_params *bp = c->params;
    float a[BLOCK], b[BLOCK], out[BLOCK];
    f32_run r = {.kind = bp->kind, .scaled = bp->scaled, .alpha = (float)bp->alpha_f,
                 .a_bcast = s[1] == 0, .b_bcast = s[2] == 0, .out = out, .a = a, .b = b};
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        widen(c->a_t, p[1] + done * s[1], s[1], r.a_bcast ? 1 : m, a);
        widen(c->b_t, p[2] + done * s[2], s[2], r.b_bcast ? 1 : m, b);
        r.n = m;
        f32_binary(&r);
        narrow(c->out_t, p[0] + done * s[0], s[0], m, out);
    }
}

/* Any dtypes and strides: blocks through the compute domain. */
static void generic_run(const binary_ctx *c, int64_t n, char *const *p, const int64_t *s) {
    const binary_params *bp = c->params;
    aclDataType ct = bp->compute;
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        const char *pa = p[1] + done * s[1], *pb = p[2] + done * s[2];
        char *po = p[0] + done * s[0];
        if (ah_dtype_is_float(ct)) {
            double a[BLOCK], b[BLOCK];
            ah_load_f64(c->a_t, pa, s[1], m, a);
            ah_load_f64(c->b_t, pb, s[2], m, b);
            if (ct == ACL_DOUBLE) {
                for (int64_t i = 0; i < m; i++)
                    a[i] = bp->kind == BIN_MUL ? a[i] * b[i]
                           : bp->scaled        ? a[i] + bp->alpha_f * b[i]
                                               : a[i] + b[i];
            } else {
                float alpha = (float)bp->alpha_f;
                for (int64_t i = 0; i < m; i++) {
                    float x = (float)a[i], y = (float)b[i];
                    float v = bp->kind == BIN_MUL ? x * y : bp->scaled ? x + alpha * y : x + y;
                    a[i] = round_to(ct, v);
                }
            }
            ah_store_f64(c->out_t, po, s[0], m, a);
        } else {
            int64_t a[BLOCK], b[BLOCK];
            ah_load_i64(c->a_t, pa, s[1], m, a);
            ah_load_i64(c->b_t, pb, s[2], m, b);
            uint64_t alpha = (uint64_t)bp->alpha_i;
            for (int64_t i = 0; i < m; i++) {
                uint64_t x = (uint64_t)a[i], y = (uint64_t)b[i];
                uint64_t v = bp->kind == BIN_MUL ? x * y : bp->scaled ? x + alpha * y : x + y;
                a[i] = wrap_to(ct, (int64_t)v);
            }
            ah_store_i64(c->out_t, po, s[0], m, a);
        }
    }
}

static void binary_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    const binary_ctx *c = ctx;
    if (c->uniform) {
        int64_t es = (int64_t)ah_dtype_size(c->out_t);
        bool a_ok = s[1] == es || s[1] == 0, b_ok = s[2] == es || s[2] == 0;
        if (s[0] == es && a_ok && b_ok) {
            uniform_float_run(c, n, p, s[1] == 0, s[2] == 0);
            return;
        }
    }
    if (c->f32_compute) {
        float_strided_run(c, n, p, s);
        return;
    }
    generic_run(c, n, p, s);
}

static bool half_or_f32(aclDataType t) {
    return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16;
}

static aclError binary_run(const aclOpExecutor *ex, void *workspace) {
    const binary_params *bp = AH_EXEC_PARAMS(ex, const binary_params);
    const aclTensor *out = &ex->tensors[bp->slot_out], *self = &ex->tensors[bp->slot_self];
    ah_nd_operand ops[3] = {ah_nd_tensor(out), ah_nd_tensor(self),
                            bp->slot_other >= 0 ? ah_nd_tensor(&ex->tensors[bp->slot_other])
                                                : ah_nd_value(bp->other_value, bp->compute)};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 3, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: operands do not broadcast to out", ex->op);
    binary_ctx c = {bp, ops[0].dtype, ops[1].dtype, ops[2].dtype, false, false};
    aclDataType t = bp->compute;
    c.uniform = (t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16) && c.out_t == t &&
                c.a_t == t && c.b_t == t;
    c.f32_compute = c.uniform || (t == ACL_FLOAT && half_or_f32(c.out_t) && half_or_f32(c.a_t) &&
                                  half_or_f32(c.b_t));
    ah_nd_run(&plan, AH_ND_GRAIN, binary_segment, &c);
    return ACL_SUCCESS;
}

/* ---- phase 1 ------------------------------------------------------------------------------------ */
static aclnnStatus check_alpha(const char *op, const aclScalar *alpha, aclDataType compute,
                               binary_params *bp) {
    aclnnStatus st = ah_check_scalar(op, "alpha", alpha, AH_DTYPES_ARITH);
    if (st != ACLNN_SUCCESS)
        return st;
    if (!ah_dtype_is_float(compute) && ah_dtype_is_float(alpha->dtype))
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: alpha of dtype %s cannot scale an integral %s result", op,
                        ah_dtype_name(alpha->dtype), ah_dtype_name(compute));
    if (alpha->dtype == ACL_BOOL && compute != ACL_BOOL)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: a BOOL alpha needs a BOOL result, not %s",
                        op, ah_dtype_name(compute));
    ah_convert_value(alpha->dtype, alpha->value.bytes, ACL_DOUBLE, &bp->alpha_f);
    ah_convert_value(alpha->dtype, alpha->value.bytes, ACL_INT64, &bp->alpha_i);
    bp->scaled = ah_dtype_is_float(compute) ? bp->alpha_f != 1.0 : bp->alpha_i != 1;
    return ACLNN_SUCCESS;
}

static aclnnStatus check_cast_to_out(const char *op, const char *out_name, aclDataType compute,
                                     const aclTensor *out) {
    if (ah_can_cast(compute, out->dtype))
        return ACLNN_SUCCESS;
    return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: result dtype %s cannot be cast to %s dtype %s",
                    op, ah_dtype_name(compute), out_name, ah_dtype_name(out->dtype));
}


/* self (op) other tensor -> out; inplace: out is self. alpha NULL for Mul. */
static aclnnStatus binary_tensor_prepare(const char *op, bin_kind kind, const aclTensor *self,
                                         const aclTensor *other, const aclScalar *alpha,
                                         const aclTensor *out, bool inplace,
                                         uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *self_name = inplace ? "selfRef" : "self";
    AH_TRY(ah_check_tensor(op, self_name, self, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "other", other, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    if (!inplace)
        AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    if (kind == BIN_ADD && !alpha)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: alpha is NULL", op);
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    binary_params bp = {.kind = kind, .alpha_f = 1.0, .alpha_i = 1};
    bp.compute = ah_promote_types(self->dtype, other->dtype);
    if (bp.compute == ACL_DT_UNDEFINED)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s dtype %s and other dtype %s do not promote",
                        op, self_name, ah_dtype_name(self->dtype), ah_dtype_name(other->dtype));
    int64_t dims[AH_OP_MAX_RANK];
    int ndim;
    AH_TRY(ah_check_broadcast(op, self_name, self, "other", other, dims, &ndim));
    AH_TRY(ah_check_shape(op, inplace ? "selfRef" : "out", inplace ? self : out, dims, ndim,
                       "the broadcast shape"));
    AH_TRY(check_cast_to_out(op, inplace ? "selfRef" : "out", bp.compute, inplace ? self : out));
    if (kind == BIN_ADD)
        AH_TRY(check_alpha(op, alpha, bp.compute, &bp));
    aclOpExecutor *ex = ah_executor_new(op, binary_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    bp.slot_self = ah_executor_add_tensor(ex, self_name, self, inplace ? AH_INOUT : AH_IN);
    bp.slot_other = ah_executor_add_tensor(ex, "other", other, AH_IN);
    bp.slot_out = inplace ? bp.slot_self : ah_executor_add_tensor(ex, "out", out, AH_OUT);
    *AH_EXEC_PARAMS(ex, binary_params) = bp;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

/* self (op) scalar -> out. alpha NULL for Muls. */
static aclnnStatus binary_scalar_prepare(const char *op, bin_kind kind, const aclTensor *self,
                                         const aclScalar *other, const aclScalar *alpha,
                                         const aclTensor *out, uint64_t *workspaceSize,
                                         aclOpExecutor **executor) {
    AH_TRY(ah_check_tensor(op, "self", self, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_scalar(op, "other", other, AH_DTYPES_ARITH));
    AH_TRY(ah_check_tensor(op, "out", out, AH_DTYPES_ARITH, 0, AH_OP_MAX_RANK));
    if (kind == BIN_ADD && !alpha)
        return ah_error(ACLNN_ERR_PARAM_NULLPTR, "%s: alpha is NULL", op);
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    binary_params bp = {.kind = kind, .alpha_f = 1.0, .alpha_i = 1, .slot_other = -1};
    bp.compute = ah_promote_tensor_scalar(self->dtype, other->dtype);
    AH_TRY(ah_check_shape(op, "out", out, self->dims, self->ndim, "self's shape"));
    AH_TRY(check_cast_to_out(op, "out", bp.compute, out));
    if (kind == BIN_ADD)
        AH_TRY(check_alpha(op, alpha, bp.compute, &bp));
    ah_convert_value(other->dtype, other->value.bytes, bp.compute, bp.other_value);
    aclOpExecutor *ex = ah_executor_new(op, binary_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    bp.slot_self = ah_executor_add_tensor(ex, "self", self, AH_IN);
    bp.slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    *AH_EXEC_PARAMS(ex, binary_params) = bp;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

/* ---- the API ------------------------------------------------------------------------------------- */
AH_API aclnnStatus aclnnAddGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                            const aclScalar *alpha, aclTensor *out,
                                            uint64_t *workspaceSize, aclOpExecutor **executor) {
    return binary_tensor_prepare("aclnnAdd", BIN_ADD, self, other, alpha, out, false,
                                 workspaceSize, executor);
}

AH_API aclnnStatus aclnnAdd(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnAdd");
}

AH_API aclnnStatus aclnnAddsGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
                                             const aclScalar *alpha, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor) {
    return binary_scalar_prepare("aclnnAdds", BIN_ADD, self, other, alpha, out, workspaceSize,
                                 executor);
}

AH_API aclnnStatus aclnnAdds(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnAdds");
}

AH_API aclnnStatus aclnnInplaceAddGetWorkspaceSize(const aclTensor *selfRef,
                                                   const aclTensor *other, const aclScalar *alpha,
                                                   uint64_t *workspaceSize,
                                                   aclOpExecutor **executor) {
    return binary_tensor_prepare("aclnnInplaceAdd", BIN_ADD, selfRef, other, alpha, selfRef, true,
                                 workspaceSize, executor);
}

AH_API aclnnStatus aclnnInplaceAdd(void *workspace, uint64_t workspaceSize,
                                   aclOpExecutor *executor, aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnInplaceAdd");
}

AH_API aclnnStatus aclnnMulGetWorkspaceSize(const aclTensor *self, const aclTensor *other,
                                            aclTensor *out, uint64_t *workspaceSize,
                                            aclOpExecutor **executor) {
    return binary_tensor_prepare("aclnnMul", BIN_MUL, self, other, NULL, out, false,
                                 workspaceSize, executor);
}

AH_API aclnnStatus aclnnMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                            aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnMul");
}

AH_API aclnnStatus aclnnMulsGetWorkspaceSize(const aclTensor *self, const aclScalar *other,
                                             aclTensor *out, uint64_t *workspaceSize,
                                             aclOpExecutor **executor) {
    return binary_scalar_prepare("aclnnMuls", BIN_MUL, self, other, NULL, out, workspaceSize,
                                 executor);
}

AH_API aclnnStatus aclnnMuls(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnMuls");
}
