/* ops_activation.c - aclnnSilu, aclnnSwiGlu, aclnnGeluV2 and aclnnTanh.
 *
 * Silu: out = x / (1 + exp(-x)), F32 / F16 / BF16, self and out of one dtype and shape, any
 * strides. SwiGlu: x split in halves A | B along dim (that dim even), out = silu(A) * B with dim
 * halved; F32 / F16 / BF16, x and out contiguous and of one dtype. GeluV2: x and y F32 / F16 /
 * BF16 of one dtype and shape, any strides; approximate 1 = the tanh form 0.5 x (1 + tanh(sqrt(2/pi)
 * (x + 0.044715 x^3))), 0 = the erf form 0.5 x (1 + erf(x / sqrt 2)). Tanh: self float, integer or
 * BOOL (integers and BOOL computed as FLOAT), out F32 / F16 / BF16 of self's shape. F16 / BF16
 * compute in F32 and round once. Elementwise over the N-d engine, spread over the thread pool.
 *
 * The transcendental functions are this file's own, built from acl_host's exp (ah_exp.h): a
 * degree-6 polynomial after reduction by ln 2, within 1.01 ulp of the true value. tanh is an odd polynomial
 * below |x| 0.625 and 1 - 2 / (exp(2|x|) + 1) above; gelu (tanh form) is x / (1 + exp(-2u)), u the
 * tanh argument (no cancellation in 1 + tanh(u) for negative x; 2u in double); gelu (erf form) is
 * x Phi(x) with Phi from a polynomial of erf below |x| / sqrt 2 = 0.5 and exp(-x^2 / 2) times a
 * polynomial in
 * 1 / (1 + |x| / (2 sqrt 2)) above (x^2 split exactly with an fma, so the tail keeps its relative
 * accuracy). Each runs 16 lanes at a time on AVX-512, 8 on AVX2 (+ FMA) and the same operations
 * one element at a time elsewhere (tails, other CPUs): every operation is a correctly rounded IEEE
 * one, so an element's result does not depend on where it lies in a block, on the batch size, on
 * the thread count or on the instruction set.
 * glibc's scalar expf made SwiGlu the slowest element-wise op of batched decode (47 us for 8 x 1536
 * elements).
 */
#pragma GCC optimize("fp-contract=off")

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ah_convert.h"
#include "ah_exp.h"
#include "ah_nd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ACT_X86 1
#endif

#define FLOAT_TYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))
#define BLOCK 512

static inline float silu(float x) { return x / (1.0f + ah_exp(-x)); }

/* tanh: |x| < TANH_SMALL: |x| + |x| z P(z), z = x^2 (P fitted to the relative error, 4e-9);
 * above: 1 - 2 / (exp(2 min(|x|, TANH_BIG)) + 1) (1 in F32 from |x| 9.01 on); the sign of x. */
#define TANH_SMALL 0.625f
#define TANH_BIG 10.0f
static const float tanh_poly[5] = {-5.7049882886e-03f, 2.0639088524e-02f, -5.3739715528e-02f,
                                   1.3331442204e-01f, -3.3333281942e-01f};

static inline float act_tanh(float x) {
    if (x != x)
        return x;
    float a = fabsf(x), r;
    if (a < TANH_SMALL) {
        float z = a * a, p = tanh_poly[0];
        for (int i = 1; i < 5; i++)
            p = fmaf(p, z, tanh_poly[i]);
        r = fmaf(a * z, p, a);
    } else {
        float e = ah_exp(2.0f * fminf(a, TANH_BIG));
        r = 1.0f - 2.0f / (e + 1.0f);
    }
    return copysignf(r, x);
}

/* gelu, tanh form: 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), 2u = x (GELU_C1 + GELU_C3 x^2).
 * exp(-2u) magnifies an error of 2u by |2u| (up to 88), so 2u is taken in double (x^2 is exact
 * there) and split into F32 hi + lo: exp(-2u) = exp(-hi) (1 - lo). Its limit 0 at -inf. */
#define GELU_C1 1.5957691216057308   /* 2 sqrt(2 / pi) */
#define GELU_C3 0.0713548162726009   /* 2 sqrt(2 / pi) * 0.044715 */
#define GELU_ARG_MAX 100.0

static inline float act_gelu_tanh(float x) {
    if (x == -INFINITY)
        return 0.0f;
    double xd = x, m = xd * fma(xd * xd, GELU_C3, GELU_C1);
    m = fmin(fmax(m, -GELU_ARG_MAX), GELU_ARG_MAX); /* exp(-2u) is 0 or inf in F32 beyond */
    float hi = (float)m, lo = (float)(m - (double)hi);
    float e = ah_exp(-hi) * (1.0f - lo);
    return x / (1.0f + e);
}

/* gelu, erf form: x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, with a = |x| / sqrt 2:
 * a < ERF_SMALL: erf(a) = a P(a^2) (P fitted to the relative error, 1.4e-9), Phi = 1/2 -+ erf(a)/2;
 * above: erfc(a) = exp(-a^2) Q(t), t = 1 / (1 + a / 2) (Q fitted to exp(a^2) erfc(a) over
 * [0.5, 10], relative error 9e-10), Phi = erfc(a) / 2 for x < 0, 1 - erfc(a) / 2 otherwise.
 * a^2 = x^2 / 2 is taken as (hi + lo) / 2, hi + lo = x^2 exactly (fma), and exp(-(hi + lo) / 2) as
 * exp(-hi / 2) (1 - lo / 2). x is clamped to +-GELU_ERF_CLAMP for Phi (Phi is then 0 or 1 in F32);
 * its limit 0 at -inf. */
#define SQRT1_2 0.70710678118654752f
#define ERF_SMALL 0.5f
#define GELU_ERF_CLAMP 14.0f
static const float erf_poly[5] = {4.7180157687e-03f, -2.6757198755e-02f, 1.1282823082e-01f,
                                  -3.7612608592e-01f, 1.1283791656e+00f};
static const float erfc_poly[11] = {-7.3789527542e-03f, -4.1202331565e-02f, 2.8582749751e-01f,
                                    -5.3685772913e-01f, 3.5302238573e-01f, -8.2680485195e-02f,
                                    2.2731041923e-01f, 2.3652701684e-01f, 2.8341719591e-01f,
                                    2.8199721483e-01f, 3.1488846653e-06f};

static inline float act_gelu_erf(float x) {
    if (x != x)
        return x;
    if (x == -INFINITY)
        return 0.0f;
    float ax = fabsf(fminf(fmaxf(x, -GELU_ERF_CLAMP), GELU_ERF_CLAMP));
    float a = ax * SQRT1_2, phi;
    if (a < ERF_SMALL) {
        float z = a * a, p = erf_poly[0];
        for (int i = 1; i < 5; i++)
            p = fmaf(p, z, erf_poly[i]);
        float h = 0.5f * (a * p);
        phi = x < 0.0f ? 0.5f - h : 0.5f + h;
    } else {
        float t = 1.0f / fmaf(a, 0.5f, 1.0f), q = erfc_poly[0];
        for (int i = 1; i < 11; i++)
            q = fmaf(q, t, erfc_poly[i]);
        float hi = ax * ax, lo = fmaf(ax, ax, -hi);
        float h = 0.5f * (ah_exp(-0.5f * hi) * fmaf(-0.5f, lo, 1.0f) * q);
        phi = x < 0.0f ? h : 1.0f - h;
    }
    return x * phi;
}

typedef enum act_kind { ACT_SILU, ACT_GELU_TANH, ACT_GELU_ERF, ACT_TANH } act_kind;

#ifdef ACT_X86
/* a[i] = act(a[i]) (* b[i]) for i < m: W lanes at a time, the tail one element at a time */
#define ACT_LOOP(vec, one)                                                                      \
    do {                                                                                        \
        for (; i + W <= m; i += W) {                                                            \
            VT y = vec(VLOAD(a + i));                                                           \
            if (b)                                                                              \
                y = VMUL(y, VLOAD(b + i));                                                      \
            VSTORE(a + i, y);                                                                   \
        }                                                                                       \
        for (; i < m; i++)                                                                      \
            a[i] = b ? one(a[i]) * b[i] : one(a[i]);                                            \
    } while (0)

/* AVX-512: 16 lanes, masks */
#define SFX _avx512
#define TGT __attribute__((target("avx512f")))
#define W 16
#define VT __m512
#define VM __mmask16
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VZERO _mm512_setzero_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VMUL _mm512_mul_ps
#define VDIV _mm512_div_ps
#define VMIN _mm512_min_ps
#define VMAX _mm512_max_ps
#define VFMA _mm512_fmadd_ps
#define VFMS _mm512_fmsub_ps
#define VEXP ah_exp16
#define VCMP(a, b, pred) _mm512_cmp_ps_mask((a), (b), (pred))
#define VSEL(m, yes, no) _mm512_mask_mov_ps((no), (m), (yes))
#define VABS(x) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)))
#define VSIGN(x) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u)))
#define VOR(a, b) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
/* 2u in double for the 16 lanes, as F32 hi and lo, 8 lanes at a time */
#define HT __m256
#define HTD __m512d
#define HLO(x) _mm512_castps512_ps256(x)
#define HHI(x) _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))
#define HJOIN(lo, hi) _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1))
#define DWIDE _mm512_cvtps_pd
#define DNARROW _mm512_cvtpd_ps
#define DSET1 _mm512_set1_pd
#define DMUL _mm512_mul_pd
#define DSUB _mm512_sub_pd
#define DFMA _mm512_fmadd_pd
#define DMIN _mm512_min_pd
#define DMAX _mm512_max_pd
#include "act_kernel.inc"

/* AVX2 + FMA: 8 lanes, compare results as blend masks */
#define SFX _avx2
#define TGT __attribute__((target("avx2,fma")))
#define W 8
#define VT __m256
#define VM __m256
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VZERO _mm256_setzero_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VMUL _mm256_mul_ps
#define VDIV _mm256_div_ps
#define VMIN _mm256_min_ps
#define VMAX _mm256_max_ps
#define VFMA _mm256_fmadd_ps
#define VFMS _mm256_fmsub_ps
#define VEXP ah_exp8
#define VCMP(a, b, pred) _mm256_cmp_ps((a), (b), (pred))
#define VSEL(m, yes, no) _mm256_blendv_ps((no), (yes), (m))
#define VABS(x) _mm256_and_ps((x), _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)))
#define VSIGN(x) _mm256_and_ps((x), _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)))
#define VOR _mm256_or_ps
#define HT __m128
#define HTD __m256d
#define HLO(x) _mm256_castps256_ps128(x)
#define HHI(x) _mm256_extractf128_ps((x), 1)
#define HJOIN(lo, hi) _mm256_set_m128((hi), (lo))
#define DWIDE _mm256_cvtps_pd
#define DNARROW _mm256_cvtpd_ps
#define DSET1 _mm256_set1_pd
#define DMUL _mm256_mul_pd
#define DSUB _mm256_sub_pd
#define DFMA _mm256_fmadd_pd
#define DMIN _mm256_min_pd
#define DMAX _mm256_max_pd
#include "act_kernel.inc"
#undef ACT_LOOP
#endif

#define ACT_LOOP_SCALAR(one)                                                                    \
    for (int64_t i = 0; i < m; i++)                                                             \
        a[i] = b ? one(a[i]) * b[i] : one(a[i]);

static void act_block(act_kind kind, float *a, const float *b, int64_t m) {
#ifdef ACT_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: act_block_avx512(kind, a, b, m); return;
    case AH_ISA_AVX2: act_block_avx2(kind, a, b, m); return;
    default: break;
    }
#endif
    switch (kind) {
    case ACT_SILU: ACT_LOOP_SCALAR(silu) break;
    case ACT_GELU_TANH: ACT_LOOP_SCALAR(act_gelu_tanh) break;
    case ACT_GELU_ERF: ACT_LOOP_SCALAR(act_gelu_erf) break;
    case ACT_TANH: ACT_LOOP_SCALAR(act_tanh) break;
    }
}

typedef struct act_params {
    int slot_in, slot_out;
    int dim;        /* SwiGlu: the split dim */
    act_kind kind;
} act_params;

typedef struct act_ctx {
    act_kind kind;
    aclDataType out_t, a_t, b_t;
} act_ctx;

/* operands: out, a (, b): out = act(a) (* b) */
static void act_segment(void *vctx, int64_t n, char *const *p, const int64_t *s, bool glu) {
    const act_ctx *c = vctx;
    float a[BLOCK], b[BLOCK];
    for (int64_t done = 0; done < n; done += BLOCK) {
        int64_t m = n - done < BLOCK ? n - done : BLOCK;
        ah_convert_run(m, (char *)a, ACL_FLOAT, 4, p[1] + done * s[1], c->a_t, s[1]);
        if (glu)
            ah_convert_run(m, (char *)b, ACL_FLOAT, 4, p[2] + done * s[2], c->b_t, s[2]);
        act_block(c->kind, a, glu ? b : NULL, m);
        ah_convert_run(m, p[0] + done * s[0], c->out_t, s[0], (const char *)a, ACL_FLOAT, 4);
    }
}

static void unary_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    act_segment(ctx, n, p, s, false);
}

static void glu_segment(void *ctx, int64_t n, char *const *p, const int64_t *s) {
    act_segment(ctx, n, p, s, true);
}

/* Silu, GeluV2, Tanh: out = act(in), elementwise */
static aclError unary_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const act_params *ap = AH_EXEC_PARAMS(ex, const act_params);
    ah_nd_operand ops[2] = {ah_nd_tensor(&ex->tensors[ap->slot_out]),
                            ah_nd_tensor(&ex->tensors[ap->slot_in])};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 2, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: the input does not match out", ex->op);
    act_ctx c = {ap->kind, ops[0].dtype, ops[1].dtype, ops[1].dtype};
    /* one grain for all four: gelu costs twice silu per element (1.1 against 0.6 ns on AVX-512).
     * A decode row of 6912 was slower split in two tasks (10.6 us) than inline (8.7 us) and stays
     * inline; an 8-row batched decode's 8 x 1536 silu (the gate of a split GLU, 8.4 us inline)
     * runs as two tasks, as swiglu_run's */
    ah_nd_run(&plan, AH_ND_GRAIN / 6, unary_segment, &c);
    return ACL_SUCCESS;
}

static aclError swiglu_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const act_params *ap = AH_EXEC_PARAMS(ex, const act_params);
    const aclTensor *x = &ex->tensors[ap->slot_in];
    /* the halves: x's view with dims[dim] halved, the second one offset by half of it */
    aclTensor a = *x, b = *x;
    a.dims[ap->dim] /= 2;
    b.dims[ap->dim] /= 2;
    b.offset += a.dims[ap->dim] * x->strides[ap->dim];
    ah_nd_operand ops[3] = {ah_nd_tensor(&ex->tensors[ap->slot_out]), ah_nd_tensor(&a),
                            ah_nd_tensor(&b)};
    ah_nd_plan plan;
    if (!ah_nd_plan_init(&plan, 3, ops))
        return ah_error(ACLNN_ERR_INNER, "%s: the halves of x do not match out", ex->op);
    act_ctx c = {ACT_SILU, ops[0].dtype, ops[1].dtype, ops[2].dtype};
    /* a finer grain than the unary ops': an 8-row batched decode's 8 x 1536 outputs (6 us on one
     * core) run as two tasks, 4.4-4.7 us on two polling cores (quiet machine; a busy one gains
     * nothing); one decode row up to 10922 outputs stays inline */
    ah_nd_run(&plan, AH_ND_GRAIN / 6, glu_segment, &c);
    return ACL_SUCCESS;
}

/* Phase 1 of the elementwise activations: in_name / out_name checked against their dtype masks,
 * out of in's shape (and dtype when same_dtype), then the executor. */
static aclnnStatus unary_prepare(const char *op, act_kind kind, const char *in_name, const aclTensor *in,
                                 uint64_t in_types, const char *out_name, const aclTensor *out,
                                 uint64_t out_types, bool same_dtype, uint64_t *workspaceSize,
                                 aclOpExecutor **executor) {
    AH_TRY(ah_check_tensor(op, in_name, in, in_types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, out_name, out, out_types, 0, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (same_dtype && out->dtype != in->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s dtype %s differs from %s dtype %s", op, out_name,
                        ah_dtype_name(out->dtype), in_name, ah_dtype_name(in->dtype));
    char what[32];
    snprintf(what, sizeof what, "%s's shape", in_name);
    AH_TRY(ah_check_shape(op, out_name, out, in->dims, in->ndim, what));
    aclOpExecutor *ex = ah_executor_new(op, unary_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    act_params *ap = AH_EXEC_PARAMS(ex, act_params);
    ap->kind = kind;
    ap->slot_in = ah_executor_add_tensor(ex, in_name, in, AH_IN);
    ap->slot_out = ah_executor_add_tensor(ex, out_name, out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSiluGetWorkspaceSize(const aclTensor *self, aclTensor *out,
                                             uint64_t *workspaceSize, aclOpExecutor **executor) {
    return unary_prepare("aclnnSilu", ACT_SILU, "self", self, FLOAT_TYPES, "out", out, FLOAT_TYPES, true,
                         workspaceSize, executor);
}

AH_API aclnnStatus aclnnSilu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSilu");
}

AH_API aclnnStatus aclnnSwiGluGetWorkspaceSize(const aclTensor *x, int64_t dim,
                                               const aclTensor *out, uint64_t *workspaceSize,
                                               aclOpExecutor **executor) {
    const char *op = "aclnnSwiGlu";
    AH_TRY(ah_check_tensor(op, "x", x, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_TYPES, 1, AH_OP_MAX_RANK));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (out->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out dtype %s differs from x dtype %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(x->dtype));
    if (dim < -x->ndim || dim >= x->ndim)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: dim %lld is outside [%d, %d] for x of rank %d",
                        op, (long long)dim, -x->ndim, x->ndim - 1, x->ndim);
    if (dim < 0)
        dim += x->ndim;
    if (ah_tensor_numel(x) == 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x is an empty tensor, which SwiGlu does not "
                        "support", op);
    if (x->dims[dim] % 2 != 0)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x has odd size %lld along dim %lld", op,
                        (long long)x->dims[dim], (long long)dim);
    if (!ah_tensor_is_contiguous(x) || !ah_tensor_is_contiguous(out))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x and out must be contiguous", op);
    int64_t dims[AH_OP_MAX_RANK];
    for (int i = 0; i < x->ndim; i++)
        dims[i] = i == dim ? x->dims[i] / 2 : x->dims[i];
    AH_TRY(ah_check_shape(op, "out", out, dims, x->ndim, "x's shape with dim halved"));
    aclOpExecutor *ex = ah_executor_new(op, swiglu_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    act_params *ap = AH_EXEC_PARAMS(ex, act_params);
    ap->kind = ACT_SILU;
    ap->slot_in = ah_executor_add_tensor(ex, "x", x, AH_IN);
    ap->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    ap->dim = (int)dim;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnSwiGlu(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnSwiGlu");
}

/* GeluV2: approximate 0 = "none" (erf), 1 = "tanh". The operator document allows 0 or 1 only; the
 * op_api source (ops-nn aclnn_gelu_v2.cpp) maps every value but 1 to "none" without an error, so
 * this refusal is stricter than hardware (a value outside the document is a caller's bug). */
AH_API aclnnStatus aclnnGeluV2GetWorkspaceSize(const aclTensor *x, int64_t approximate, aclTensor *y,
                                               uint64_t *workspaceSize, aclOpExecutor **executor) {
    const char *op = "aclnnGeluV2";
    if (x != NULL && y != NULL && approximate != 0 && approximate != 1)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: approximate %lld is not 0 (none) or 1 (tanh)", op,
                        (long long)approximate);
    return unary_prepare(op, approximate == 1 ? ACT_GELU_TANH : ACT_GELU_ERF, "x", x, FLOAT_TYPES, "y", y,
                         FLOAT_TYPES, true, workspaceSize, executor);
}

AH_API aclnnStatus aclnnGeluV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnGeluV2");
}

/* Tanh: self FLOAT / FLOAT16 / BF16 / BOOL / UINT8 / INT8 / INT16 / INT32 / INT64 (integers and
 * BOOL are computed as FLOAT); out FLOAT / FLOAT16 / BF16 (what the result casts to: the op_api
 * source checks the cast from FLOAT, or self's float dtype, to out's dtype). */
#define TANH_IN_TYPES                                                                         \
    (FLOAT_TYPES | AH_DTYPE_BIT(ACL_BOOL) | AH_DTYPE_BIT(ACL_UINT8) | AH_DTYPE_BIT(ACL_INT8) |  \
     AH_DTYPE_BIT(ACL_INT16) | AH_DTYPE_BIT(ACL_INT32) | AH_DTYPE_BIT(ACL_INT64))
AH_API aclnnStatus aclnnTanhGetWorkspaceSize(const aclTensor *self, aclTensor *out, uint64_t *workspaceSize,
                                             aclOpExecutor **executor) {
    return unary_prepare("aclnnTanh", ACT_TANH, "self", self, TANH_IN_TYPES, "out", out, FLOAT_TYPES, false,
                         workspaceSize, executor);
}

AH_API aclnnStatus aclnnTanh(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                             const aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnTanh");
}
