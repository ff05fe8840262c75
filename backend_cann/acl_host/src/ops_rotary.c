/* ops_rotary.c - aclnnRotaryPositionEmbedding (an op after CANN 8.1.RC1: aclnn_post81.h).
 *
 * y = x * cos + rotate(x) * sin along the last dim D, per row of x (the three leading dims index
 * the rows). Mode 0 (half): rotate(x) = cat(-x[D/2:], x[:D/2]); mode 1 (interleave): each pair
 * (x[2k], x[2k+1]) -> (-x[2k+1], x[2k]). Every element is computed in F32 as two products and a
 * sum, each rounded (no FMA): y[j] = x[j] c[j] + (-x[j']) s[j] or x[j] c[j] + x[j'] s[j], j' its
 * partner. So for F32 the result has the bits of aclnnMul, aclnnMul, aclnnAdd (alpha -1 / +1) over
 * the same operands, the composition the backend uses without this op. F16 / BF16 operands are
 * read as F32 and the result rounded once. The vectorised rows (AVX-512 / AVX2, F32, unit stride)
 * and the portable ones do the same operations in the same order; rows are independent, so the
 * result does not depend on the batch, the thread count or the ISA.
 *
 * Checks (the A2 / A3 operator document and the ops-transformer op_api; docs/acl_host.md): 4-D
 * x / cos / sin / out of one dtype F32 / F16 / BF16 (the 3-D TND layout is refused as not
 * implemented); out of x's shape; cos and sin of one shape, D equal to x's, even and < 896; each
 * leading dim of cos 1 or x's in the documented combinations (half: 11SD, B1SD, BNSD for BNSD x;
 * 1S1D, BS1D, BSND for BSND; S11D, SB1D, SBND for SBND; interleave: 11SD, 1S1D, S11D only) with
 * B, N < 1000 (half) or B * N < 1000 (interleave) for the layout the combination names; mode 0 or 1
 * (2, 3 exist only on Ascend 950). x, cos, sin may be strided; out must be contiguous (the
 * document's table). An empty out is a no-op (op_api returns before computing). out may be x itself
 * (the same view: each row is read before it is written), any other overlap is refused.
 */
#pragma GCC optimize("fp-contract=off")

#define CLM_ACLNN_POST81_DEFINE
#include "aclnn_post81.h"

#include <string.h>

#include "ah_convert.h"
#include "ah_nd.h"
#include "ah_rows.h"

#if defined(__x86_64__) || defined(__i386__)
#define AH_X86 1
#include <immintrin.h>
#endif

#define ROPE_OP "aclnnRotaryPositionEmbedding"
#define ROPE_FLOAT_TYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))
#define ROPE_MAX_D 896   /* D < 896 on A2 / A3 */
#define ROPE_MAX_BN 1000 /* B, N (half) and B * N (interleave) below this */

enum { ROPE_HALF = 0, ROPE_INTERLEAVE = 1 };

typedef struct rope_params {
    int slot_x, slot_cos, slot_sin, slot_out;
    int64_t mode;
} rope_params;

/* ---- one row: y = x c + rotate(x) s, in F32 --------------------------------------------------- */
static void half_row_scalar(const float *x, const float *c, const float *s, float *y, int64_t h, int64_t j) {
    for (; j < h; j++) {
        float a = x[j], b = x[j + h];
        float y0 = a * c[j] - b * s[j];
        float y1 = b * c[j + h] + a * s[j + h];
        y[j] = y0, y[j + h] = y1;
    }
}

static void interleave_row_scalar(const float *x, const float *c, const float *s, float *y, int64_t d, int64_t j) {
    for (; j < d; j += 2) {
        float a = x[j], b = x[j + 1];
        float y0 = a * c[j] + (-b) * s[j];
        float y1 = b * c[j + 1] + a * s[j + 1];
        y[j] = y0, y[j + 1] = y1;
    }
}

#ifdef AH_X86
#define SFX _avx512
#define TGT __attribute__((target("avx512f")))
#define W 16
#define VT __m512
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VMUL _mm512_mul_ps
#define VADD _mm512_add_ps
#define VSUB _mm512_sub_ps
#define VXOR(a, b) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define VSWAP_PAIRS(v) _mm512_permute_ps((v), 0xB1)
#define VNEG_EVEN() _mm512_castsi512_ps(_mm512_set4_epi32(0, (int)0x80000000u, 0, (int)0x80000000u))
#include "rope_kernel.inc"

#define SFX _avx2
#define TGT __attribute__((target("avx2")))
#define W 8
#define VT __m256
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VMUL _mm256_mul_ps
#define VADD _mm256_add_ps
#define VSUB _mm256_sub_ps
#define VXOR _mm256_xor_ps
#define VSWAP_PAIRS(v) _mm256_permute_ps((v), 0xB1)
#define VNEG_EVEN() _mm256_castsi256_ps(_mm256_set_epi32(0, (int)0x80000000u, 0, (int)0x80000000u, 0, \
                                                        (int)0x80000000u, 0, (int)0x80000000u))
#include "rope_kernel.inc"
#endif

/* x, c, s and y rows of d floats; y may be x (each pair is read before it is written). Half mode
 * computes a c - b s, interleave a c + (-b) s: the same value (negation is exact and subtraction
 * adds the negation), each form the same on every path. */
static void rope_row(int64_t mode, const float *x, const float *c, const float *s, float *y, int64_t d) {
#ifdef AH_X86
    switch (ah_isa()) {
    case AH_ISA_AVX512: rope_row_avx512(mode, x, c, s, y, d); return;
    case AH_ISA_AVX2: rope_row_avx2(mode, x, c, s, y, d); return;
    default: break;
    }
#endif
    if (mode == ROPE_HALF)
        half_row_scalar(x, c, s, y, d / 2, 0);
    else
        interleave_row_scalar(x, c, s, y, d, 0);
}

/* ---- rows ------------------------------------------------------------------------------------- */
typedef struct rope_view {
    const char *base;       /* first element */
    int64_t stride[4];      /* bytes; 0 along a broadcast dim */
} rope_view;

typedef struct rope_ctx {
    int64_t mode, d, dims[3];
    aclDataType dtype;
    size_t es;
    bool direct;            /* F32 with unit-stride rows: no staging */
    rope_view x, cos, sin, out;
} rope_ctx;

static rope_view view_of(const aclTensor *t, const int64_t *x_dims) {
    rope_view v;
    int64_t es = (int64_t)ah_dtype_size(t->dtype);
    v.base = (const char *)t->data + t->offset * es;
    for (int i = 0; i < 4; i++)
        v.stride[i] = (t->dims[i] == 1 && x_dims[i] != 1) ? 0 : t->strides[i] * es;
    return v;
}

static inline const char *row_ptr(const rope_view *v, const int64_t *idx) {
    return v->base + idx[0] * v->stride[0] + idx[1] * v->stride[1] + idx[2] * v->stride[2];
}

static void rope_rows(void *vctx, int64_t begin, int64_t end) {
    const rope_ctx *c = vctx;
    float buf[4 * ROPE_MAX_D]; /* x, cos, sin, y rows in F32 when staged (D < ROPE_MAX_D: 14 KiB) */
    int64_t idx[3] = {begin / (c->dims[1] * c->dims[2]), (begin / c->dims[2]) % c->dims[1], begin % c->dims[2]};
    for (int64_t row = begin; row < end; row++) {
        const char *px = row_ptr(&c->x, idx), *pc = row_ptr(&c->cos, idx), *ps = row_ptr(&c->sin, idx);
        char *py = (char *)row_ptr(&c->out, idx);
        if (c->direct) {
            rope_row(c->mode, (const float *)(const void *)px, (const float *)(const void *)pc,
                     (const float *)(const void *)ps, (float *)(void *)py, c->d);
        } else {
            float *bx = buf, *bc = buf + c->d, *bs = buf + 2 * c->d, *by = buf + 3 * c->d;
            ah_convert_run(c->d, (char *)bx, ACL_FLOAT, 4, px, c->dtype, c->x.stride[3]);
            ah_convert_run(c->d, (char *)bc, ACL_FLOAT, 4, pc, c->dtype, c->cos.stride[3]);
            ah_convert_run(c->d, (char *)bs, ACL_FLOAT, 4, ps, c->dtype, c->sin.stride[3]);
            rope_row(c->mode, bx, bc, bs, by, c->d);
            ah_convert_run(c->d, py, c->dtype, (int64_t)c->es, (const char *)by, ACL_FLOAT, 4);
        }
        if (++idx[2] == c->dims[2]) {
            idx[2] = 0;
            if (++idx[1] == c->dims[1]) idx[1] = 0, idx[0]++;
        }
    }
}

static aclError rope_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const rope_params *p = AH_EXEC_PARAMS(ex, const rope_params);
    const aclTensor *x = &ex->tensors[p->slot_x];
    if (p->mode < 0) return ACL_SUCCESS; /* empty out */
    rope_ctx c = {.mode = p->mode, .d = x->dims[3], .dtype = x->dtype, .es = ah_dtype_size(x->dtype)};
    for (int i = 0; i < 3; i++) c.dims[i] = x->dims[i];
    c.x = view_of(x, x->dims);
    c.cos = view_of(&ex->tensors[p->slot_cos], x->dims);
    c.sin = view_of(&ex->tensors[p->slot_sin], x->dims);
    c.out = view_of(&ex->tensors[p->slot_out], x->dims);
    c.direct = c.dtype == ACL_FLOAT && c.x.stride[3] == 4 && c.cos.stride[3] == 4 && c.sin.stride[3] == 4 &&
               c.out.stride[3] == 4;
    int64_t n_rows = c.dims[0] * c.dims[1] * c.dims[2];
    if (n_rows == 0 || c.d == 0) return ACL_SUCCESS;
    ah_parallel_for(n_rows, ah_rows_grain(c.d), rope_rows, &c);
    return ACL_SUCCESS;
}

/* ---- phase 1 ---------------------------------------------------------------------------------- */
/* A cos / sin combination: which leading dims are x's (the others 1), the layout it names, and
 * where B and N are in x. */
typedef struct rope_combo {
    bool full[3];
    const char *form, *layout;
    int b, n;
} rope_combo;

static const rope_combo HALF_COMBOS[] = {
    {{0, 0, 1}, "11SD", "BNSD", 0, 1}, {{1, 0, 1}, "B1SD", "BNSD", 0, 1}, {{1, 1, 1}, "BNSD", "BNSD", 0, 1},
    {{0, 1, 0}, "1S1D", "BSND", 0, 2}, {{1, 1, 0}, "BS1D", "BSND", 0, 2}, {{1, 1, 1}, "BSND", "BSND", 0, 2},
    {{1, 0, 0}, "S11D", "SBND", 1, 2}, {{1, 1, 0}, "SB1D", "SBND", 1, 2}, {{1, 1, 1}, "SBND", "SBND", 1, 2},
};
static const rope_combo INTERLEAVE_COMBOS[] = {
    {{0, 0, 1}, "11SD", "BNSD", 0, 1}, {{0, 1, 0}, "1S1D", "BSND", 0, 2}, {{1, 0, 0}, "S11D", "SBND", 1, 2},
};

/* The first documented combination cos's leading dims match whose B / N limits x meets; the
 * message says which rule failed when none does. */
static aclnnStatus check_broadcast(const aclTensor *x, const aclTensor *cos, int64_t mode) {
    const rope_combo *combos = mode == ROPE_HALF ? HALF_COMBOS : INTERLEAVE_COMBOS;
    size_t n = mode == ROPE_HALF ? sizeof(HALF_COMBOS) / sizeof(HALF_COMBOS[0])
                                 : sizeof(INTERLEAVE_COMBOS) / sizeof(INTERLEAVE_COMBOS[0]);
    const rope_combo *shape_ok = NULL;
    for (size_t i = 0; i < n; i++) {
        const rope_combo *k = &combos[i];
        bool match = true;
        for (int d = 0; d < 3; d++)
            match = match && cos->dims[d] == (k->full[d] ? x->dims[d] : 1);
        if (!match) continue;
        shape_ok = k;
        int64_t b = x->dims[k->b], nn = x->dims[k->n];
        if (mode == ROPE_HALF ? (b < ROPE_MAX_BN && nn < ROPE_MAX_BN) : (b * nn < ROPE_MAX_BN))
            return ACLNN_SUCCESS;
    }
    char xs[96], cs[96];
    ah_shape_str(xs, sizeof xs, x->dims, 4);
    ah_shape_str(cs, sizeof cs, cos->dims, 4);
    if (shape_ok != NULL)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: x %s as %s with cos / sin %s: %s must be below %d in %s mode", ROPE_OP, xs,
                        shape_ok->layout, shape_ok->form, mode == ROPE_HALF ? "B and N" : "B * N", ROPE_MAX_BN,
                        mode == ROPE_HALF ? "half" : "interleave");
    return ah_error(ACLNN_ERR_PARAM_INVALID,
                    "%s: cos / sin %s do not broadcast to x %s in a documented form (%s mode: %s)", ROPE_OP, cs,
                    xs, mode == ROPE_HALF ? "half" : "interleave",
                    mode == ROPE_HALF ? "11SD, B1SD, BNSD / 1S1D, BS1D, BSND / S11D, SB1D, SBND"
                                      : "11SD, 1S1D or S11D only");
}

static bool ranges_overlap(const aclTensor *a, const aclTensor *b) {
    const char *pa, *pb;
    size_t na, nb;
    ah_tensor_extent(a, &pa, &na);
    ah_tensor_extent(b, &pb, &nb);
    return na > 0 && nb > 0 && pa < pb + nb && pb < pa + na;
}

static bool same_view(const aclTensor *a, const aclTensor *b) {
    if (a->data != b->data || a->offset != b->offset || a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i] || (a->dims[i] != 1 && a->strides[i] != b->strides[i])) return false;
    return true;
}

AH_API aclnnStatus aclnnRotaryPositionEmbeddingGetWorkspaceSize(const aclTensor *x, const aclTensor *cos,
                                                                const aclTensor *sin, int64_t mode, aclTensor *out,
                                                                uint64_t *workspaceSize,
                                                                aclOpExecutor **executor) {
    const char *op = ROPE_OP;
    const struct { const char *name; const aclTensor *t; } all[] = {{"x", x}, {"cos", cos}, {"sin", sin}, {"out", out}};
    for (size_t i = 0; i < 4; i++) {
        AH_TRY(ah_check_tensor(op, all[i].name, all[i].t, ROPE_FLOAT_TYPES, 3, 4));
        if (all[i].t->ndim != 4)
            return ah_error(ACLNN_ERR_PARAM_INVALID,
                            "%s: %s is 3-D: the TND layout is not implemented by acl_host (4-D BSND / BNSD / "
                            "SBND only)", op, all[i].name);
    }
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (mode == 2 || mode == 3)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: mode %lld (%s) is supported on Ascend 950 only; Atlas A2 / A3 take 0 (half) or 1 "
                        "(interleave)", op, (long long)mode, mode == 2 ? "quarter" : "interleave-half");
    if (mode != ROPE_HALF && mode != ROPE_INTERLEAVE)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: mode %lld is not 0 (half) or 1 (interleave)", op,
                        (long long)mode);
    for (size_t i = 1; i < 4; i++)
        if (all[i].t->dtype != x->dtype)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s dtype %s differs from x dtype %s", op, all[i].name,
                            ah_dtype_name(all[i].t->dtype), ah_dtype_name(x->dtype));
    bool empty = ah_tensor_numel(out) == 0;
    if (!empty) {
        AH_TRY(ah_check_shape(op, "out", out, x->dims, 4, "x's shape"));
        AH_TRY(ah_check_shape(op, "sin", sin, cos->dims, 4, "cos's shape"));
        int64_t d = x->dims[3];
        if (cos->dims[3] != d)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: cos / sin last dim %lld differs from x's D %lld", op,
                            (long long)cos->dims[3], (long long)d);
        if (d % 2 != 0 || d >= ROPE_MAX_D)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: D = %lld must be even and below %d", op, (long long)d,
                            ROPE_MAX_D);
        AH_TRY(check_broadcast(x, cos, mode));
        if (!ah_tensor_is_contiguous(out))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out must be contiguous", op);
        if (ranges_overlap(out, x) && !same_view(out, x))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out overlaps x without being the same view", op);
        if (ranges_overlap(out, cos) || ranges_overlap(out, sin))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out overlaps %s", op,
                            ranges_overlap(out, cos) ? "cos" : "sin");
    }
    aclOpExecutor *ex = ah_executor_new(op, rope_run);
    if (!ex) return ACLNN_ERR_INNER;
    rope_params *p = AH_EXEC_PARAMS(ex, rope_params);
    p->slot_x = ah_executor_add_tensor(ex, "x", x, AH_IN);
    p->slot_cos = ah_executor_add_tensor(ex, "cos", cos, AH_IN);
    p->slot_sin = ah_executor_add_tensor(ex, "sin", sin, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    p->mode = empty ? -1 : mode;
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnRotaryPositionEmbedding(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, ROPE_OP);
}
