/* ops_rope.c - ROPE (ggml's rope_ext: normal and neox, partial rotation, freq_base / freq_scale,
 * YaRN, freq_factors) composed from aclnn elementwise ops, and the backend's constant caches.
 *
 * Angles: ggml rotates pair k (k < n_dims/2) of a token at position p by
 *     theta_k = p * base^(-2k/n_dims) / ff_k * g_k,  g_k = freq_scale * (1 - r_k) + r_k,
 * r_k = ext_factor * (1 - clamp((k - lo) / max(0.001, hi - lo), 0, 1)) from YaRN's correction dims
 * [lo, hi] (g_k = freq_scale without YaRN), with cos and sin scaled by
 * attn_factor * (1 + 0.1 ln(1/freq_scale)) under YaRN (attn_factor otherwise).
 * The per-pair factor base^(-2k/n_dims) * g_k depends only on the parameters: it is computed on
 * the host once and kept on the device. The cos / sin tables [n_dims/2, n_tokens] are built on
 * the device (Cast positions, Mul, Div by freq_factors, Sin, Cos, Muls) by the first ROPE of each
 * graph and reused by every later ROPE node with the same positions and parameters; the cache
 * goes stale at the start of each graph_compute, so a captured graph contains the rebuild.
 * Rotation: with x0 / x1 the pair members (normal: x[2k], x[2k+1]; neox: x[k], x[k+n_dims/2]),
 * viewed through strides, y0 = x0 cos - x1 sin and y1 = x0 sin + x1 cos (four aclnnMul into a
 * pool temporary, then two aclnnAdd into dst); dims past n_dims are copied unchanged.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

#define NN_MAX_TABLES 16
#define NN_MAX_ROPE 4

typedef struct nn_table {
    int64_t n;
    float *host;   /* the values, to compare */
    void *dev;
} nn_table;

typedef struct rope_key {
    const void *pos;
    const void *freq_factors;
    int64_t n_pos;
    int32_t n_dims, n_ctx_orig;
    float freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
} rope_key;

typedef struct rope_entry {
    rope_key key;
    int64_t epoch;     /* graph in which cos / sin were built; stale otherwise */
    void *dev;         /* cos [n_dims/2, n_pos] then sin, F32 */
    size_t capacity;
} rope_entry;

struct cann_nn_cache {
    void *ones;
    int64_t n_ones;
    nn_table tables[NN_MAX_TABLES];
    int n_tables;
    rope_entry rope[NN_MAX_ROPE];
    int next_rope;     /* round-robin replacement */
    int64_t epoch;
};

static clm_status nn_cache(cann_backend_ctx *ctx, struct cann_nn_cache **out) {
    if (ctx->nn == NULL) {
        ctx->nn = calloc(1, sizeof(*ctx->nn));
        if (ctx->nn == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
        ctx->nn->epoch = 1;
    }
    *out = ctx->nn;
    return CLM_OK;
}


/* The stream is idle. Captured graphs may address these tables: drop them first. */
static void free_tables(cann_backend_ctx *ctx, struct cann_nn_cache *c) {
    cann_graph_cache_invalidate(ctx);
    for (int i = 0; i < c->n_tables; i++) {
        aclrtFree(c->tables[i].dev);
        free(c->tables[i].host);
    }
    c->n_tables = 0;
}

void cann_nn_cache_free(cann_backend_ctx *ctx) {
    struct cann_nn_cache *c = ctx->nn;
    if (c == NULL) return;
    aclrtSynchronizeStream(ctx->stream);
    if (c->ones != NULL) aclrtFree(c->ones);
    free_tables(ctx, c);
    for (int i = 0; i < NN_MAX_ROPE; i++) {
        if (c->rope[i].dev != NULL) aclrtFree(c->rope[i].dev);
    }
    aclGetRecentErrMsg();
    free(c);
    ctx->nn = NULL;
}

/* Device memory for a cache (queued work may still read what it replaces: drain first; captured
 * graphs may address it: drop them). */
static clm_status replace_buffer(cann_backend_ctx *ctx, void **ptr, size_t size) {
    if (*ptr != NULL) {
        CANN_ACL(aclrtSynchronizeStream(ctx->stream));
        cann_graph_cache_invalidate(ctx);
        CANN_ACL(aclrtFree(*ptr));
        *ptr = NULL;
    }
    CANN_ACL(aclrtMalloc(ptr, size, ACL_MEM_MALLOC_HUGE_FIRST));
    return CLM_OK;
}

clm_status cann_nn_ones(cann_backend_ctx *ctx, int64_t n, void **out) {
    struct cann_nn_cache *c = NULL;
    clm_status st = nn_cache(ctx, &c);
    if (st != CLM_OK) return st;
    if (c->n_ones < n) {
        int64_t len = n < 1024 ? 1024 : n;
        float *host = malloc((size_t)len * sizeof(float));
        if (host == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
        for (int64_t i = 0; i < len; i++) host[i] = 1.0f;
        c->n_ones = 0;
        st = replace_buffer(ctx, &c->ones, (size_t)len * sizeof(float));
        if (st == CLM_OK) {
            aclError err = aclrtMemcpy(c->ones, (size_t)len * sizeof(float), host, (size_t)len * sizeof(float),
                                       ACL_MEMCPY_HOST_TO_DEVICE);
            if (err != ACL_SUCCESS) st = cann_acl_error(err, "aclrtMemcpy (ones)");
            else c->n_ones = len;
        }
        free(host);
        if (st != CLM_OK) return st;
    }
    *out = c->ones;
    return CLM_OK;
}

clm_status cann_nn_table(cann_backend_ctx *ctx, const float *values, int64_t n, void **out) {
    struct cann_nn_cache *c = NULL;
    clm_status st = nn_cache(ctx, &c);
    if (st != CLM_OK) return st;
    size_t bytes = (size_t)n * sizeof(float);
    for (int i = 0; i < c->n_tables; i++) {
        if (c->tables[i].n == n && memcmp(c->tables[i].host, values, bytes) == 0) {
            *out = c->tables[i].dev;
            return CLM_OK;
        }
    }
    if (c->n_tables == NN_MAX_TABLES) {
        CANN_ACL(aclrtSynchronizeStream(ctx->stream));
        free_tables(ctx, c);
    }
    nn_table *t = &c->tables[c->n_tables];
    *t = (nn_table){.n = n, .host = malloc(bytes > 0 ? bytes : 1)};
    if (t->host == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    memcpy(t->host, values, bytes);
    aclError err = aclrtMalloc(&t->dev, bytes > 0 ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST);
    if (err == ACL_SUCCESS) err = aclrtMemcpy(t->dev, bytes, values, bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    if (err != ACL_SUCCESS) {
        if (t->dev != NULL) aclrtFree(t->dev);
        free(t->host);
        return cann_acl_error(err, "aclrtMalloc / aclrtMemcpy (constant table)");
    }
    c->n_tables++;
    *out = t->dev;
    return CLM_OK;
}

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
    clm_status st = cann_nn_table(ctx, factors, half, &factors_dev);
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

/* The node's cos / sin tables: cached for this graph, else rebuilt. */
static clm_status cos_sin(cann_backend_ctx *ctx, const clm_tensor *op, const rope_params *p, void **out) {
    struct cann_nn_cache *c = NULL;
    clm_status st = nn_cache(ctx, &c);
    if (st != CLM_OK) return st;
    rope_key key;
    memset(&key, 0, sizeof(key)); /* padding too: keys compare with memcmp */
    key.pos = op->src[1]->data;
    key.freq_factors = op->src[2] != NULL ? op->src[2]->data : NULL;
    key.n_pos = op->src[1]->ne[0];
    key.n_dims = p->n_dims, key.n_ctx_orig = p->n_ctx_orig;
    key.freq_base = p->freq_base, key.freq_scale = p->freq_scale, key.ext_factor = p->ext_factor;
    key.attn_factor = p->attn_factor, key.beta_fast = p->beta_fast, key.beta_slow = p->beta_slow;
    for (int i = 0; i < NN_MAX_ROPE; i++) {
        rope_entry *e = &c->rope[i];
        if (e->dev != NULL && e->epoch == c->epoch && memcmp(&e->key, &key, sizeof(key)) == 0) {
            *out = e->dev;
            return CLM_OK;
        }
    }
    rope_entry *e = &c->rope[c->next_rope];
    c->next_rope = (c->next_rope + 1) % NN_MAX_ROPE;
    size_t need = 2 * (size_t)(p->n_dims / 2) * (size_t)key.n_pos * sizeof(float);
    e->epoch = 0;
    if (e->capacity < need) {
        e->capacity = 0;
        if ((st = replace_buffer(ctx, &e->dev, need)) != CLM_OK) return st;
        e->capacity = need;
    }
    if ((st = build_cos_sin(ctx, op, p, e->dev)) != CLM_OK) return st;
    e->key = key;
    e->epoch = c->epoch;
    *out = e->dev;
    return CLM_OK;
}

clm_status cann_op_rope(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *x = dst->src[0];
    rope_params p = read_params(dst);
    void *tables = NULL;
    clm_status st = cos_sin(ctx, dst, &p, &tables);
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

/* ---- the per-graph pre-pass ------------------------------------------------------------------- */
static float alibi_slope(float max_bias, int64_t n_head, int64_t h) {
    int64_t n_head_log2 = 1;
    while (n_head_log2 * 2 <= n_head) n_head_log2 *= 2;
    float m0 = powf(2.0f, -(max_bias) / (float)n_head_log2);
    float m1 = powf(2.0f, -(max_bias / 2.0f) / (float)n_head_log2);
    return h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

clm_status cann_nn_alibi_slopes(cann_backend_ctx *ctx, float max_bias, int64_t n_head, void **out) {
    float table[CANN_MAX_ALIBI_HEADS];
    if (n_head > CANN_MAX_ALIBI_HEADS) {
        return clm_error(CLM_ERR_UNSUPPORTED, "ALiBi with %lld heads (at most %d)", (long long)n_head,
                         CANN_MAX_ALIBI_HEADS);
    }
    for (int64_t h = 0; h < n_head; h++) table[h] = alibi_slope(max_bias, n_head, h);
    return cann_nn_table(ctx, table, n_head, out);
}

/* Marks the sin/cos tables stale and creates every constant the graph's nodes will ask for (ones
 * gamma, angle factors, ALiBi slopes, sin/cos capacity) now, before a capture can begin: inside a
 * captured graph_compute no device allocation, host copy or synchronization may happen. */
void cann_nn_cache_graph_begin(cann_backend_ctx *ctx) {
    if (ctx->nn != NULL) ctx->nn->epoch++;
}

clm_status cann_nn_cache_prepare(cann_backend_ctx *ctx, clm_graph *graph) {
    struct cann_nn_cache *c = NULL;
    clm_status st = nn_cache(ctx, &c);
    if (st != CLM_OK) return st;
    c->epoch++;
    size_t rope_need = 0;
    for (size_t i = 0; i < clm_graph_n_nodes(graph) && st == CLM_OK; i++) {
        const clm_tensor *node = clm_graph_node(graph, i);
        void *unused = NULL;
        if (node->op == CLM_OP_RMS_NORM && cann_supports_rms_norm(node)) {
            st = cann_nn_ones(ctx, node->src[0]->ne[0], &unused);
        } else if (node->op == CLM_OP_SOFT_MAX && node->src[1] != NULL && cann_supports_soft_max(node)) {
            float max_bias;
            memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
            if (max_bias > 0.0f) st = cann_nn_alibi_slopes(ctx, max_bias, node->src[0]->ne[2], &unused);
        } else if (node->op == CLM_OP_FLASH_ATTN_EXT && node->src[3] != NULL && cann_supports_flash_attn_ext(node)) {
            float max_bias;
            memcpy(&max_bias, &node->op_params[1], sizeof(max_bias));
            if (max_bias > 0.0f) st = cann_nn_alibi_slopes(ctx, max_bias, node->src[0]->ne[2], &unused);
        } else if (node->op == CLM_OP_ROPE && cann_supports_rope(node)) {
            rope_params p = read_params(node);
            int64_t half = p.n_dims / 2;
            float *factors = malloc((size_t)half * sizeof(float)), mscale;
            if (factors == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
            angle_factors(&p, factors, &mscale);
            st = cann_nn_table(ctx, factors, half, &unused);
            free(factors);
            size_t need = 2 * (size_t)half * (size_t)node->src[1]->ne[0] * sizeof(float);
            if (need > rope_need) rope_need = need;
        }
    }
    for (int i = 0; i < NN_MAX_ROPE && st == CLM_OK && rope_need > 0; i++) {
        rope_entry *e = &c->rope[i];
        if (e->capacity < rope_need) {
            e->capacity = 0;
            e->epoch = 0;
            if ((st = replace_buffer(ctx, &e->dev, rope_need)) == CLM_OK) e->capacity = rope_need;
        }
    }
    return st;
}
