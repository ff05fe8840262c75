/* ops_rope.c - ROPE (ggml's rope_ext: normal and neox, partial rotation, freq_base / freq_scale,
 * YaRN, freq_factors) composed from aclnn elementwise ops.
 *
 * Angles: ggml rotates pair k (k < n_dims/2) of a token at position p by
 *     theta_k = p * base^(-2k/n_dims) / ff_k * g_k,  g_k = freq_scale * (1 - r_k) + r_k,
 * r_k = ext_factor * (1 - clamp((k - lo) / max(0.001, hi - lo), 0, 1)) from YaRN's correction dims
 * [lo, hi] (g_k = freq_scale without YaRN), with cos and sin scaled by
 * attn_factor * (1 + 0.1 ln(1/freq_scale)) under YaRN (attn_factor otherwise).
 * The per-pair factor base^(-2k/n_dims) * g_k depends only on the parameters: it is computed on
 * the host once and kept on the device. The cos / sin tables [n_dims/2, n_tokens] are built on
 * the device (Cast positions, Mul, Div by freq_factors, Sin, Cos, Muls) by the first ROPE of each
 * graph into a per-graph slot of the constant cache (cann_consts.c) and reused by every later ROPE
 * node with the same positions and parameters; the slots go stale at the start of each eager
 * graph_compute, so a captured graph contains the rebuild. prepare (the pre-pass) creates the
 * angle factors and reserves the slots before any capture.
 * Rotation: with x0 / x1 the pair members (normal: x[2k], x[2k+1]; neox: x[k], x[k+n_dims/2]),
 * viewed through strides, y0 = x0 cos - x1 sin and y1 = x0 sin + x1 cos (four aclnnMul into a
 * pool temporary, then two aclnnAdd into dst); dims past n_dims are copied unchanged.
 * One launch instead of six (CANN_LLM_ROPE=auto, the default): aclnnRotaryPositionEmbedding came
 * after CANN 8.1.RC1, so it is declared weak (aclnn_post81.h) and used only when the runtime has
 * it (acl_host does), for F32 nodes that rotate the whole head within the op's limits, with x as
 * BSND (ggml [D, heads, tokens, ne3] -> (ne3, tokens, heads, D)), mode 0 (half) for NeoX and 1
 * (interleave) for normal, and 1S1D cos / sin tables of full width D (NeoX: the half table twice;
 * normal: each value twice) built from the half tables by one broadcasting aclnnInplaceCopy into
 * the graph's slot (keyed apart from the half tables'; prepare reserves the larger size). The op
 * rounds each product and the sum as aclnnMul / aclnnAdd do, so both paths give the same bits
 * (tests/test_rope_fused.py). Decode step of the default model: 1269 -> 970 aclnn launches; on
 * acl_host a graph of its 60 ROPE nodes runs 3-11x faster and its decode about 3 % faster
 * (8-sequence batched decode about 10-17 %; docs/performance.md, ROPE).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"
#include "aclnn_post81.h"   /* aclnnRotaryPositionEmbedding, weak: NULL on runtimes without it */

typedef struct rope_key {
    const void *pos;
    const void *freq_factors;
    int64_t n_pos;
    int32_t n_dims, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    int32_t full_width; /* 0: cos, sin [n_dims/2, n_pos]; else the fused op's [n_dims, n_pos] in this mode + 1 */
} rope_key;

/* ---- ROPE ------------------------------------------------------------------------------------- */
typedef struct rope_params {
    int32_t n_dims, mode, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
} rope_params;

static rope_params read_params(const clm_tensor *op) {
    rope_params p = {.n_dims = op->op_params[1], .mode = op->op_params[2], .n_ctx_orig = op->op_params[4]};
    float f[6];
    memcpy(f, &op->op_params[5], sizeof(f));
    p.freq_base = f[0], p.freq_scale = f[1], p.ext_factor = f[2];
    p.attn_factor = f[3], p.beta_fast = f[4], p.beta_slow = f[5];
    return p;
}

bool cann_supports_rope(const clm_tensor *op) {
    const clm_tensor *x = op->src[0], *pos = op->src[1], *ff = op->src[2];
    rope_params p = read_params(op);
    if (x->type != CLM_TYPE_F32 && x->type != CLM_TYPE_F16) return false;
    if (op->type != x->type || !clm_are_same_shape(x, op)) return false;
    if (pos == NULL || pos->type != CLM_TYPE_I32 || pos->ne[0] != x->ne[2] || !clm_is_contiguous(pos)) return false;
    if (p.mode != 0 && p.mode != CLM_ROPE_TYPE_NEOX) return false;
    if (op->op_params[15] != 0) return false;   /* ggml's rotated-window offset (ggml_rope_set_offset) */
    if (p.n_dims <= 0 || p.n_dims % 2 != 0 || p.n_dims > x->ne[0]) return false;
    if (ff != NULL && (ff->type != CLM_TYPE_F32 || ff->ne[0] < p.n_dims / 2)) return false;
    return true;
}

/* YaRN correction dim: the pair index whose wavelength turns n_rot times over n_ctx_orig. */
static float corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2.0f * 3.14159265358979323846f)) / (2.0f * logf(base));
}

/* The per-pair angle factors (host), and the cos / sin scale. */
static void angle_factors(const rope_params *p, float *factors, float *mscale) {
    int half = p->n_dims / 2;
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_dims);
    float lo = floorf(corr_dim(p->n_dims, p->n_ctx_orig, p->beta_fast, p->freq_base));
    float hi = ceilf(corr_dim(p->n_dims, p->n_ctx_orig, p->beta_slow, p->freq_base));
    lo = fmaxf(0.0f, lo);
    hi = fminf((float)(p->n_dims - 1), hi);
    float t = 1.0f;
    for (int k = 0; k < half; k++) {
        float g = p->freq_scale;
        if (p->ext_factor != 0.0f) {
            float y = ((float)k - lo) / fmaxf(0.001f, hi - lo);
            float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            float mix = ramp * p->ext_factor;
            g = p->freq_scale * (1.0f - mix) + mix;
        }
        factors[k] = t * g;
        t *= theta_scale;
    }
    *mscale = p->attn_factor;
    if (p->ext_factor != 0.0f) *mscale *= 1.0f + 0.1f * logf(1.0f / p->freq_scale);
}

/* Fills e->dev with cos then sin [half, n_pos] for the node's positions. */
static clm_status build_cos_sin(cann_backend_ctx *ctx, const clm_tensor *op, const rope_params *p, void *dev) {
    const clm_tensor *pos = op->src[1], *ff = op->src[2];
    int64_t half = p->n_dims / 2, n_pos = pos->ne[0];
    float *factors = malloc((size_t)half * sizeof(float)), mscale;
    if (factors == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    angle_factors(p, factors, &mscale);
    void *factors_dev = NULL;
    clm_status st = cann_consts_table(ctx, factors, half, &factors_dev);
    free(factors);
    if (st != CLM_OK) return st;
    cann_temp pos_f;
    if ((st = cann_temp_alloc(ctx, (size_t)n_pos * sizeof(float), &pos_f)) != CLM_OK) return st;
    char *cos_dev = dev, *sin_dev = (char *)dev + (size_t)(half * n_pos) * sizeof(float);
    const size_t f4 = sizeof(float);
    int64_t ne_pos[2] = {1, n_pos}, ne_fac[2] = {half, 1}, ne_tab[2] = {half, n_pos};
    size_t nb_pos[2] = {f4, f4}, nb_fac[2] = {f4, f4 * (size_t)half}, nb_tab[2] = {f4, f4 * (size_t)half};
    size_t nb_i32 = sizeof(int32_t);
    aclTensor *acl_pos_i = cann_acl_tensor_nd(pos->data, CLM_TYPE_I32, &n_pos, &nb_i32, 1, 0);
    aclTensor *acl_pos_f1 = cann_acl_tensor_nd(pos_f.ptr, CLM_TYPE_F32, &n_pos, nb_pos, 1, 0);
    aclTensor *acl_pos_f = cann_acl_tensor_nd(pos_f.ptr, CLM_TYPE_F32, ne_pos, nb_pos, 2, 0);
    aclTensor *acl_fac = cann_acl_tensor_nd(factors_dev, CLM_TYPE_F32, ne_fac, nb_fac, 2, 0);
    aclTensor *acl_cos = cann_acl_tensor_nd(cos_dev, CLM_TYPE_F32, ne_tab, nb_tab, 2, 0);
    aclTensor *acl_sin = cann_acl_tensor_nd(sin_dev, CLM_TYPE_F32, ne_tab, nb_tab, 2, 0);
    aclTensor *acl_ff = ff != NULL ? cann_acl_tensor_nd(ff->data, CLM_TYPE_F32, ne_fac, ff->nb, 2, 0) : NULL;
    aclScalar *ms = aclCreateScalar(&mscale, ACL_FLOAT);
    if (acl_pos_i == NULL || acl_pos_f1 == NULL || acl_pos_f == NULL || acl_fac == NULL || acl_cos == NULL ||
        acl_sin == NULL || (ff != NULL && acl_ff == NULL) || ms == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the rope tables", clm_op_desc(op));
        goto done;
    }
    /* theta (in the cos table) = pos * factor [/ freq_factor] */
    if ((st = CANN_ACLNN(ctx, Cast, acl_pos_i, ACL_FLOAT, acl_pos_f1)) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Mul, acl_pos_f, acl_fac, acl_cos)) != CLM_OK) goto done;
    if (ff != NULL && (st = CANN_ACLNN(ctx, Div, acl_cos, acl_ff, acl_cos)) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Sin, acl_cos, acl_sin)) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Cos, acl_cos, acl_cos)) != CLM_OK) goto done;
    if (mscale != 1.0f) {
        if ((st = CANN_ACLNN(ctx, Muls, acl_cos, ms, acl_cos)) != CLM_OK) goto done;
        if ((st = CANN_ACLNN(ctx, Muls, acl_sin, ms, acl_sin)) != CLM_OK) goto done;
    }
done:
    aclDestroyScalar(ms);
    cann_destroy_tensors(7, acl_pos_i, acl_pos_f1, acl_pos_f, acl_fac, acl_cos, acl_sin, acl_ff);
    cann_temp_free(&pos_f);
    return st;
}

/* ---- the one-launch path: aclnnRotaryPositionEmbedding --------------------------------------- */
/* The op's limits on A2 / A3 (docs/acl_host.md): D < 896; B, N < 1000 in half mode, B * N < 1000
 * in interleave mode (x as BSND: B = ne3, N = ne1). */
#define ROPE_OP_MAX_D 896
#define ROPE_OP_MAX_BN 1000

/* The byte range a ggml view touches. */
static void view_extent(const clm_tensor *t, const char **first, size_t *size) {
    size_t last = clm_type_size(t->type);
    for (int i = 0; i < CLM_MAX_DIMS; i++) last += (size_t)(t->ne[i] - 1) * t->nb[i];
    *first = t->data;
    *size = last;
}

/* Whether a node can be one aclnnRotaryPositionEmbedding: the runtime has it and CANN_LLM_ROPE
 * allows it, F32 x and dst (F16 keeps the composition), the whole head rotated, the op's shape
 * limits, dst contiguous (the op's out) and either x itself or not overlapping it. */
static bool rope_fusable(const cann_backend_ctx *ctx, const clm_tensor *dst, const rope_params *p) {
    const clm_tensor *x = dst->src[0];
    if (!ctx->rope_fused || aclnnRotaryPositionEmbeddingGetWorkspaceSize == NULL ||
        aclnnRotaryPositionEmbedding == NULL)
        return false;
    if (x->type != CLM_TYPE_F32 || dst->type != CLM_TYPE_F32 || p->n_dims != x->ne[0]) return false;
    if (x->ne[0] >= ROPE_OP_MAX_D || x->nb[0] != sizeof(float)) return false;
    bool neox = p->mode == CLM_ROPE_TYPE_NEOX;
    if (neox ? (x->ne[1] >= ROPE_OP_MAX_BN || x->ne[3] >= ROPE_OP_MAX_BN) : x->ne[1] * x->ne[3] >= ROPE_OP_MAX_BN)
        return false;
    if (!clm_is_contiguous(dst)) return false;
    if (x->data == dst->data && memcmp(x->nb, dst->nb, sizeof(x->nb)) == 0) return true;
    const char *xa, *da;
    size_t xn, dn;
    view_extent(x, &xa, &xn);
    view_extent(dst, &da, &dn);
    return xa + xn <= da || da + dn <= xa;
}

/* Fills dev with the full-width cos then sin [n_dims, n_pos] from the half tables: neox repeats
 * the half ([c0..c_{h-1}, c0..c_{h-1}]), normal repeats each value ([c0, c0, c1, c1, ...]); one
 * broadcasting aclnnInplaceCopy over both tables. */
static clm_status build_full_cos_sin(cann_backend_ctx *ctx, const clm_tensor *op, const rope_params *p, void *dev) {
    int64_t half = p->n_dims / 2, d = p->n_dims, n_pos = op->src[1]->ne[0];
    cann_temp tables;
    clm_status st = cann_temp_alloc(ctx, 2 * (size_t)(half * n_pos) * sizeof(float), &tables);
    if (st != CLM_OK) return st;
    if ((st = build_cos_sin(ctx, op, p, tables.ptr)) == CLM_OK) {
        const size_t f4 = sizeof(float);
        bool neox = p->mode == CLM_ROPE_TYPE_NEOX;
        /* dst [half, 2, n_pos, 2 tables] (neox) or [2, half, n_pos, 2 tables] (normal); src the
         * half tables with the repeated dim of size 1 */
        int64_t ne_d[4] = {neox ? half : 2, neox ? 2 : half, n_pos, 2};
        size_t nb_d[4] = {f4, neox ? f4 * (size_t)half : 2 * f4, f4 * (size_t)d, f4 * (size_t)(d * n_pos)};
        int64_t ne_s[4] = {neox ? half : 1, neox ? 1 : half, n_pos, 2};
        size_t nb_s[4] = {f4, f4, f4 * (size_t)half, f4 * (size_t)(half * n_pos)};
        aclTensor *td = cann_acl_tensor_nd(dev, CLM_TYPE_F32, ne_d, nb_d, 4, 0);
        aclTensor *ts = cann_acl_tensor_nd(tables.ptr, CLM_TYPE_F32, ne_s, nb_s, 4, 0);
        st = (td == NULL || ts == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the rope tables", clm_op_desc(op))
                 : CANN_ACLNN(ctx, InplaceCopy, td, ts);
        cann_destroy_tensors(2, td, ts);
    }
    cann_temp_free(&tables);
    return st;
}

/* The node's cos / sin tables (half or full width): cached for this graph, else rebuilt. */
static clm_status cos_sin(cann_backend_ctx *ctx, const clm_tensor *op, const rope_params *p, bool full, void **out) {
    rope_key key;
    memset(&key, 0, sizeof(key)); /* padding too: keys compare bytewise */
    key.pos = op->src[1]->data;
    key.freq_factors = op->src[2] != NULL ? op->src[2]->data : NULL;
    key.n_pos = op->src[1]->ne[0];
    key.n_dims = p->n_dims, key.n_ctx_orig = p->n_ctx_orig;
    key.freq_base = p->freq_base, key.freq_scale = p->freq_scale, key.ext_factor = p->ext_factor;
    key.attn_factor = p->attn_factor, key.beta_fast = p->beta_fast, key.beta_slow = p->beta_slow;
    key.full_width = full ? p->mode + 1 : 0;
    size_t need = 2 * (size_t)(full ? p->n_dims : p->n_dims / 2) * (size_t)key.n_pos * sizeof(float);
    bool fresh = false;
    clm_status st = cann_consts_slot(ctx, &key, sizeof(key), need, out, &fresh);
    if (st != CLM_OK || fresh) return st;
    st = full ? build_full_cos_sin(ctx, op, p, *out) : build_cos_sin(ctx, op, p, *out);
    if (st != CLM_OK) return st;
    cann_consts_slot_built(ctx, *out, &key, sizeof(key));
    return CLM_OK;
}

/* x [D, heads, tokens, ne3] as BSND (ne3, tokens, heads, D), the tables as 1S1D, dst as out. */
static clm_status rope_fused(cann_backend_ctx *ctx, clm_tensor *dst, const rope_params *p) {
    const clm_tensor *x = dst->src[0];
    void *tables = NULL;
    clm_status st = cos_sin(ctx, dst, p, true, &tables);
    if (st != CLM_OK) return st;
    int64_t d = p->n_dims, n_pos = x->ne[2];
    int64_t ne_t[4] = {d, 1, n_pos, 1};
    size_t nb_t[4] = {4, 4 * (size_t)d, 4 * (size_t)d, 4 * (size_t)(d * n_pos)};
    aclTensor *tx = cann_acl_tensor_nd(x->data, x->type, x->ne, x->nb, 4, 0);
    aclTensor *tc = cann_acl_tensor_nd(tables, CLM_TYPE_F32, ne_t, nb_t, 4, 0);
    aclTensor *ts = cann_acl_tensor_nd((char *)tables + (size_t)(d * n_pos) * 4, CLM_TYPE_F32, ne_t, nb_t, 4, 0);
    aclTensor *td = cann_acl_tensor_nd(dst->data, dst->type, dst->ne, dst->nb, 4, 0);
    int64_t mode = p->mode == CLM_ROPE_TYPE_NEOX ? 0 : 1; /* the op's half / interleave */
    if (tx == NULL || tc == NULL || ts == NULL || td == NULL)
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    else
        st = CANN_ACLNN(ctx, RotaryPositionEmbedding, tx, tc, ts, mode, td);
    cann_destroy_tensors(4, tx, tc, ts, td);
    if (st == CLM_OK) ctx->rope_fused_nodes++;
    return st;
}

clm_status cann_op_rope(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *x = dst->src[0];
    rope_params p = read_params(dst);
    if (rope_fusable(ctx, dst, &p)) return rope_fused(ctx, dst, &p);
    void *tables = NULL;
    clm_status st = cos_sin(ctx, dst, &p, false, &tables);
    if (st != CLM_OK) return st;
    int64_t half = p.n_dims / 2, n_pos = x->ne[2];
    bool neox = p.mode == CLM_ROPE_TYPE_NEOX;
    size_t xes = clm_type_size(x->type), des = clm_type_size(dst->type);
    /* pair members as strided views of x and dst */
    int64_t ne_h[4] = {half, x->ne[1], x->ne[2], x->ne[3]};
    size_t nb_x[4] = {neox ? xes : 2 * xes, x->nb[1], x->nb[2], x->nb[3]};
    size_t nb_d[4] = {neox ? des : 2 * des, dst->nb[1], dst->nb[2], dst->nb[3]};
    size_t off_x1 = neox ? (size_t)half * xes : xes, off_d1 = neox ? (size_t)half * des : des;
    /* cos / sin [half, 1, n_pos, 1]: broadcast over heads and ne3 */
    int64_t ne_t[4] = {half, 1, n_pos, 1};
    size_t nb_t[4] = {4, 4 * (size_t)half, 4 * (size_t)half, 4 * (size_t)(half * n_pos)};
    /* four products [half, ne1, ne2, ne3] F32 */
    size_t nb_p[4] = {4, 4 * (size_t)half, 4 * (size_t)(half * x->ne[1]), 4 * (size_t)(half * x->ne[1] * x->ne[2])};
    size_t prod_bytes = nb_p[3] * (size_t)x->ne[3];
    cann_temp prods;
    if ((st = cann_temp_alloc(ctx, 4 * prod_bytes, &prods)) != CLM_OK) return st;
    char *pb = prods.ptr;
    aclTensor *x0 = cann_acl_tensor_nd(x->data, x->type, ne_h, nb_x, 4, 0);
    aclTensor *x1 = cann_acl_tensor_nd(x->data, x->type, ne_h, nb_x, 4, off_x1);
    aclTensor *d0 = cann_acl_tensor_nd(dst->data, dst->type, ne_h, nb_d, 4, 0);
    aclTensor *d1 = cann_acl_tensor_nd(dst->data, dst->type, ne_h, nb_d, 4, off_d1);
    aclTensor *tc = cann_acl_tensor_nd(tables, CLM_TYPE_F32, ne_t, nb_t, 4, 0);
    aclTensor *ts = cann_acl_tensor_nd((char *)tables + (size_t)(half * n_pos) * 4, CLM_TYPE_F32, ne_t, nb_t, 4, 0);
    aclTensor *pr[4];
    for (int i = 0; i < 4; i++) pr[i] = cann_acl_tensor_nd(pb + (size_t)i * prod_bytes, CLM_TYPE_F32, ne_h, nb_p, 4, 0);
    float one = 1.0f, minus_one = -1.0f;
    aclScalar *plus = aclCreateScalar(&one, ACL_FLOAT), *minus = aclCreateScalar(&minus_one, ACL_FLOAT);
    aclTensor *tail_x = NULL, *tail_d = NULL;
    if (x0 == NULL || x1 == NULL || d0 == NULL || d1 == NULL || tc == NULL || ts == NULL || pr[0] == NULL ||
        pr[1] == NULL || pr[2] == NULL || pr[3] == NULL || plus == NULL || minus == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
        goto done;
    }
    /* every read of x before any write of dst (dst may alias x) */
    if ((st = CANN_ACLNN(ctx, Mul, x0, tc, pr[0])) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Mul, x1, ts, pr[1])) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Mul, x0, ts, pr[2])) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Mul, x1, tc, pr[3])) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Add, pr[0], pr[1], minus, d0)) != CLM_OK) goto done;
    if ((st = CANN_ACLNN(ctx, Add, pr[2], pr[3], plus, d1)) != CLM_OK) goto done;
    bool same = x->data == dst->data && memcmp(x->nb, dst->nb, sizeof(x->nb)) == 0 && x->type == dst->type;
    if (p.n_dims < x->ne[0] && !same) {
        int64_t ne_tail[4] = {x->ne[0] - p.n_dims, x->ne[1], x->ne[2], x->ne[3]};
        tail_x = cann_acl_tensor_nd(x->data, x->type, ne_tail, x->nb, 4, (size_t)p.n_dims * xes);
        tail_d = cann_acl_tensor_nd(dst->data, dst->type, ne_tail, dst->nb, 4, (size_t)p.n_dims * des);
        st = (tail_x == NULL || tail_d == NULL)
                 ? clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the unrotated tail", clm_op_desc(dst))
                 : CANN_ACLNN(ctx, InplaceCopy, tail_d, tail_x);
    }
done:
    aclDestroyScalar(plus);
    aclDestroyScalar(minus);
    cann_destroy_tensors(12, x0, x1, d0, d1, tc, ts, pr[0], pr[1], pr[2], pr[3], tail_x, tail_d);
    cann_temp_free(&prods);
    return st;
}

/* The pre-pass: the angle factors table now, and a sin/cos slot for the node's positions (full
 * width when the node takes the one-launch path). */
clm_status cann_prepare_rope(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan) {
    rope_params p = read_params(node);
    int64_t half = p.n_dims / 2;
    float *factors = malloc((size_t)half * sizeof(float)), mscale;
    if (factors == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    angle_factors(&p, factors, &mscale);
    void *unused = NULL;
    clm_status st = cann_consts_table(ctx, factors, half, &unused);
    free(factors);
    bool full = rope_fusable(ctx, node, &p);
    size_t need = 2 * (size_t)(full ? p.n_dims : half) * (size_t)node->src[1]->ne[0] * sizeof(float);
    if (need > plan->slot_bytes) plan->slot_bytes = need;
    return st;
}
