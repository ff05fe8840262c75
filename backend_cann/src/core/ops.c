/* ops.c - constructors for the LLM ops: result shape and type, sources and op_params laid out
 * as ggml does, with the shape checks that make a graph well-formed. */
#include <stdint.h>
#include <string.h>

#include "clm_impl.h"

#define DIMS(t) (long long)(t)->ne[0], (long long)(t)->ne[1], (long long)(t)->ne[2], (long long)(t)->ne[3]
#define DIMS_FMT "[%lld,%lld,%lld,%lld]"

static bool is_float(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

/* A new node of `type` and shape ne[4] with op, sources and op params (copied bytes). */
static clm_status node(clm_context *ctx, int32_t op, int32_t type, const int64_t *ne, clm_tensor *const *srcs,
                       int n_src, const void *params, size_t params_size, clm_tensor **out) {
    return clm_new_op(ctx, op, type, CLM_MAX_DIMS, ne, srcs, n_src, params, params_size, out);
}

clm_status clm_mul_mat(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && b != NULL && out != NULL, "mul_mat: NULL argument");
    CLM_CHECK_ARG(a->ne[0] == b->ne[0] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0,
                  "mul_mat: '%s' " DIMS_FMT " and '%s' " DIMS_FMT " do not multiply", a->name, DIMS(a), b->name,
                  DIMS(b));
    CLM_CHECK_ARG(a->nb[0] <= a->nb[1], "mul_mat: '%s' must not be transposed", a->name);
    int64_t ne[4] = {a->ne[1], b->ne[1], b->ne[2], b->ne[3]};
    clm_tensor *srcs[2] = {a, b};
    return node(ctx, CLM_OP_MUL_MAT, CLM_TYPE_F32, ne, srcs, 2, NULL, 0, out);
}

clm_status clm_get_rows(clm_context *ctx, clm_tensor *a, clm_tensor *rows, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && rows != NULL && out != NULL, "get_rows: NULL argument");
    CLM_CHECK_ARG(rows->type == CLM_TYPE_I32, "get_rows: row ids '%s' must be i32", rows->name);
    CLM_CHECK_ARG(a->ne[2] == rows->ne[1] && rows->ne[3] == 1 && a->ne[3] == rows->ne[2],
                  "get_rows: '%s' " DIMS_FMT " and row ids " DIMS_FMT " do not match", a->name, DIMS(a), DIMS(rows));
    int64_t ne[4] = {a->ne[0], rows->ne[0], rows->ne[1], rows->ne[2]};
    clm_tensor *srcs[2] = {a, rows};
    return node(ctx, CLM_OP_GET_ROWS, a->type == CLM_TYPE_I32 ? CLM_TYPE_I32 : CLM_TYPE_F32, ne, srcs, 2, NULL, 0,
                out);
}

clm_status clm_set_rows(clm_context *ctx, clm_tensor *dst, clm_tensor *src, clm_tensor *rows, clm_tensor **out) {
    CLM_CHECK_ARG(dst != NULL && src != NULL && rows != NULL && out != NULL, "set_rows: NULL argument");
    CLM_CHECK_ARG(rows->type == CLM_TYPE_I32 || rows->type == CLM_TYPE_I64, "set_rows: row ids must be i32 or i64");
    CLM_CHECK_ARG(src->ne[0] == dst->ne[0] && rows->ne[0] == src->ne[1] && src->ne[2] % rows->ne[1] == 0 &&
                      src->ne[3] % rows->ne[2] == 0 && dst->ne[2] == src->ne[2] && dst->ne[3] == src->ne[3],
                  "set_rows: '%s' " DIMS_FMT " into '%s' " DIMS_FMT " with row ids " DIMS_FMT " do not match",
                  src->name, DIMS(src), dst->name, DIMS(dst), DIMS(rows));
    clm_tensor *view;
    clm_status st = clm_view_4d(ctx, dst, dst->ne[0], dst->ne[1], dst->ne[2], dst->ne[3], dst->nb[1], dst->nb[2],
                                dst->nb[3], 0, &view);
    if (st != CLM_OK) return st;
    view->op = CLM_OP_SET_ROWS;
    view->src[0] = src;
    view->src[1] = rows;
    view->src[2] = dst;  /* keeps dst in the graph, so its buffer is known */
    *out = view;
    return CLM_OK;
}

clm_status clm_rms_norm(clm_context *ctx, clm_tensor *a, float eps, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "rms_norm: NULL argument");
    CLM_CHECK_ARG(eps >= 0.0f, "rms_norm: eps %g is negative", eps);
    return node(ctx, CLM_OP_RMS_NORM, a->type, a->ne, &a, 1, &eps, sizeof(eps), out);
}

clm_status clm_scale(clm_context *ctx, clm_tensor *a, float s, float b, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "scale: NULL argument");
    float params[2] = {s, b};
    return node(ctx, CLM_OP_SCALE, a->type, a->ne, &a, 1, params, sizeof(params), out);
}

clm_status clm_rope_ext(clm_context *ctx, clm_tensor *a, clm_tensor *pos, clm_tensor *freq_factors, int32_t n_dims,
                        int32_t mode, int32_t n_ctx_orig, float freq_base, float freq_scale, float ext_factor,
                        float attn_factor, float beta_fast, float beta_slow, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && pos != NULL && out != NULL, "rope: NULL argument");
    CLM_CHECK_ARG(pos->type == CLM_TYPE_I32 && pos->ne[0] == a->ne[2],
                  "rope: positions must be i32 [%lld] (one per token)", (long long)a->ne[2]);
    CLM_CHECK_ARG(n_dims > 0 && n_dims % 2 == 0 && n_dims <= a->ne[0],
                  "rope: n_dims %d must be even and at most head_dim %lld", n_dims, (long long)a->ne[0]);
    CLM_CHECK_ARG(mode == 0 || mode == CLM_ROPE_TYPE_NEOX, "rope: mode %d is not normal (0) or neox (2)", mode);
    CLM_CHECK_ARG(freq_factors == NULL || (freq_factors->type == CLM_TYPE_F32 && freq_factors->ne[0] >= n_dims / 2),
                  "rope: freq_factors must be f32 with at least n_dims/2 entries");
    int32_t params[11] = {0, n_dims, mode, 0, n_ctx_orig};
    float fparams[6] = {freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow};
    memcpy(&params[5], fparams, sizeof(fparams));
    clm_tensor *srcs[3] = {a, pos, freq_factors};
    return node(ctx, CLM_OP_ROPE, a->type, a->ne, srcs, freq_factors ? 3 : 2, params, sizeof(params), out);
}

clm_status clm_soft_max_ext(clm_context *ctx, clm_tensor *a, clm_tensor *mask, float scale, float max_bias,
                            clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "soft_max: NULL argument");
    if (mask != NULL) {
        CLM_CHECK_ARG(mask->type == CLM_TYPE_F16 || mask->type == CLM_TYPE_F32, "soft_max: mask must be f16 or f32");
        CLM_CHECK_ARG(mask->ne[0] == a->ne[0] && mask->ne[1] >= a->ne[1] && a->ne[2] % mask->ne[2] == 0 &&
                          a->ne[3] % mask->ne[3] == 0,
                      "soft_max: mask " DIMS_FMT " does not cover " DIMS_FMT, DIMS(mask), DIMS(a));
    }
    float params[2] = {scale, max_bias};
    clm_tensor *srcs[2] = {a, mask};
    return node(ctx, CLM_OP_SOFT_MAX, a->type, a->ne, srcs, mask ? 2 : 1, params, sizeof(params), out);
}

clm_status clm_flash_attn_ext(clm_context *ctx, clm_tensor *q, clm_tensor *k, clm_tensor *v, clm_tensor *mask,
                              float scale, float max_bias, float logit_softcap, clm_tensor **out) {
    CLM_CHECK_ARG(q != NULL && k != NULL && v != NULL && out != NULL, "flash_attn_ext: NULL argument");
    CLM_CHECK_ARG(q->ne[0] == k->ne[0] && k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] && q->ne[2] % k->ne[2] == 0 &&
                      q->ne[3] == k->ne[3] && k->ne[3] == v->ne[3],
                  "flash_attn_ext: q " DIMS_FMT ", k " DIMS_FMT ", v " DIMS_FMT " do not match", DIMS(q), DIMS(k),
                  DIMS(v));
    if (mask != NULL) {
        CLM_CHECK_ARG(mask->ne[0] == k->ne[1] && mask->ne[1] >= q->ne[1],
                      "flash_attn_ext: mask " DIMS_FMT " does not cover %lld queries x %lld keys", DIMS(mask),
                      (long long)q->ne[1], (long long)k->ne[1]);
    }
    int64_t ne[4] = {v->ne[0], q->ne[2], q->ne[1], q->ne[3]};
    float params[4] = {scale, max_bias, logit_softcap, 0.0f};
    clm_tensor *srcs[4] = {q, k, v, mask};
    return node(ctx, CLM_OP_FLASH_ATTN_EXT, CLM_TYPE_F32, ne, srcs, mask ? 4 : 3, params, sizeof(params), out);
}

clm_status clm_argmax(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "argmax: NULL argument");
    CLM_CHECK_ARG(a->ne[2] == 1 && a->ne[3] == 1, "argmax: '%s' must be a matrix", a->name);
    int64_t ne[4] = {a->ne[1], 1, 1, 1};
    return node(ctx, CLM_OP_ARGMAX, CLM_TYPE_I32, ne, &a, 1, NULL, 0, out);
}

/* UNARY: a float tensor -> the same shape and type, op_params[0] = the sub-op. */
static clm_status unary(clm_context *ctx, clm_tensor *a, int32_t op, const char *what, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "%s: needs a float tensor", what);
    int32_t params[1] = {op};
    return node(ctx, CLM_OP_UNARY, a->type, a->ne, &a, 1, params, sizeof(params), out);
}

/* GLU fused: a [2n, ...] -> [n, ...], op_params = {sub-op, swapped}. */
static clm_status glu(clm_context *ctx, clm_tensor *a, int32_t op, bool swapped, const char *what, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "%s: needs a float tensor", what);
    CLM_CHECK_ARG(a->ne[0] % 2 == 0, "%s: ne0 %lld of '%s' is odd", what, (long long)a->ne[0], a->name);
    int64_t ne[4] = {a->ne[0] / 2, a->ne[1], a->ne[2], a->ne[3]};
    int32_t params[2] = {op, swapped ? 1 : 0};
    return node(ctx, CLM_OP_GLU, a->type, ne, &a, 1, params, sizeof(params), out);
}

/* GLU split: gate a and linear part b of one shape and type, op_params = {sub-op, 0}. */
static clm_status glu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, int32_t op, const char *what,
                            clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && b != NULL && out != NULL && is_float(a->type), "%s: needs float tensors", what);
    CLM_CHECK_ARG(b->type == a->type, "%s: '%s' is %s and '%s' is %s", what, a->name, clm_type_name(a->type),
                  b->name, clm_type_name(b->type));
    CLM_CHECK_ARG(clm_are_same_shape(a, b), "%s: '%s' " DIMS_FMT " and '%s' " DIMS_FMT " differ", what, a->name,
                  DIMS(a), b->name, DIMS(b));
    int32_t params[2] = {op, 0};
    clm_tensor *srcs[2] = {a, b};
    return node(ctx, CLM_OP_GLU, a->type, a->ne, srcs, 2, params, sizeof(params), out);
}

clm_status clm_silu(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    return unary(ctx, a, CLM_UNARY_OP_SILU, "silu", out);
}

clm_status clm_gelu(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    return unary(ctx, a, CLM_UNARY_OP_GELU, "gelu", out);
}

clm_status clm_gelu_erf(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    return unary(ctx, a, CLM_UNARY_OP_GELU_ERF, "gelu_erf", out);
}

clm_status clm_tanh(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    return unary(ctx, a, CLM_UNARY_OP_TANH, "tanh", out);
}

clm_status clm_swiglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out) {
    return glu(ctx, a, CLM_GLU_OP_SWIGLU, swapped, "swiglu", out);
}

clm_status clm_swiglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return glu_split(ctx, a, b, CLM_GLU_OP_SWIGLU, "swiglu", out);
}

clm_status clm_geglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out) {
    return glu(ctx, a, CLM_GLU_OP_GEGLU, swapped, "geglu", out);
}

clm_status clm_geglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return glu_split(ctx, a, b, CLM_GLU_OP_GEGLU, "geglu", out);
}

clm_status clm_geglu_erf(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out) {
    return glu(ctx, a, CLM_GLU_OP_GEGLU_ERF, swapped, "geglu_erf", out);
}

clm_status clm_geglu_erf_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return glu_split(ctx, a, b, CLM_GLU_OP_GEGLU_ERF, "geglu_erf", out);
}

/* ---- the ops of a mixture-of-experts FFN (llama.cpp's build_moe_ffn) ------------------------- */

clm_status clm_argsort(clm_context *ctx, clm_tensor *a, int32_t order, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "argsort: needs a float tensor");
    CLM_CHECK_ARG(order == CLM_SORT_ORDER_ASC || order == CLM_SORT_ORDER_DESC,
                  "argsort: order %d is not ascending (0) or descending (1)", order);
    CLM_CHECK_ARG(a->ne[0] <= INT32_MAX, "argsort: ne0 %lld of '%s' does not fit an i32 index",
                  (long long)a->ne[0], a->name);
    int32_t params[1] = {order};
    return node(ctx, CLM_OP_ARGSORT, CLM_TYPE_I32, a->ne, &a, 1, params, sizeof(params), out);
}

clm_status clm_sum_rows(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "sum_rows: needs a float tensor");
    int64_t ne[4] = {1, a->ne[1], a->ne[2], a->ne[3]};
    return node(ctx, CLM_OP_SUM_ROWS, a->type, ne, &a, 1, NULL, 0, out);
}

clm_status clm_clamp(clm_context *ctx, clm_tensor *a, float min, float max, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "clamp: needs a float tensor");
    float params[2] = {min, max};
    return node(ctx, CLM_OP_CLAMP, a->type, a->ne, &a, 1, params, sizeof(params), out);
}

/* The asserts of ggml_mul_mat_id, in its order. */
clm_status clm_mul_mat_id(clm_context *ctx, clm_tensor *as, clm_tensor *b, clm_tensor *ids, clm_tensor **out) {
    CLM_CHECK_ARG(as != NULL && b != NULL && ids != NULL && out != NULL, "mul_mat_id: NULL argument");
    CLM_CHECK_ARG(as->nb[0] <= as->nb[1], "mul_mat_id: '%s' must not be transposed", as->name);
    CLM_CHECK_ARG(ids->type == CLM_TYPE_I32, "mul_mat_id: expert ids '%s' must be i32", ids->name);
    CLM_CHECK_ARG(as->ne[3] == 1, "mul_mat_id: '%s' " DIMS_FMT " must be 3-d (one matrix per expert)", as->name,
                  DIMS(as));
    CLM_CHECK_ARG(b->ne[3] == 1, "mul_mat_id: '%s' " DIMS_FMT " must be 3-d", b->name, DIMS(b));
    CLM_CHECK_ARG(ids->ne[2] == 1 && ids->ne[3] == 1, "mul_mat_id: expert ids " DIMS_FMT " must be 2-d", DIMS(ids));
    CLM_CHECK_ARG(ids->ne[1] == b->ne[2], "mul_mat_id: expert ids " DIMS_FMT " need one list per token of '%s' " DIMS_FMT,
                  DIMS(ids), b->name, DIMS(b));
    CLM_CHECK_ARG(as->ne[0] == b->ne[0], "mul_mat_id: '%s' " DIMS_FMT " and '%s' " DIMS_FMT " do not multiply",
                  as->name, DIMS(as), b->name, DIMS(b));
    CLM_CHECK_ARG(b->ne[1] > 0 && ids->ne[0] % b->ne[1] == 0,
                  "mul_mat_id: '%s' " DIMS_FMT " has %lld rows per token, which do not broadcast to %lld experts",
                  b->name, DIMS(b), (long long)b->ne[1], (long long)ids->ne[0]);
    int64_t ne[4] = {as->ne[1], ids->ne[0], b->ne[2], 1};
    clm_tensor *srcs[3] = {as, b, ids};
    return node(ctx, CLM_OP_MUL_MAT_ID, CLM_TYPE_F32, ne, srcs, 3, NULL, 0, out);
}

/* ---- collectives of tensor parallelism (run by a backend with a communicator) --------------- */

clm_status clm_all_reduce(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "all_reduce: needs a float tensor");
    CLM_CHECK_ARG(clm_is_contiguous(a), "all_reduce: '%s' must be contiguous", a->name);
    return node(ctx, CLM_OP_ALL_REDUCE, a->type, a->ne, &a, 1, NULL, 0, out);
}

clm_status clm_all_gather(clm_context *ctx, clm_tensor *a, int32_t n_ranks, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL && is_float(a->type), "all_gather: needs a float tensor");
    CLM_CHECK_ARG(clm_is_contiguous(a), "all_gather: '%s' must be contiguous", a->name);
    CLM_CHECK_ARG(a->ne[3] == 1, "all_gather: '%s' " DIMS_FMT " must have at most 3 dims (ne3 gets the ranks)",
                  a->name, DIMS(a));
    CLM_CHECK_ARG(n_ranks >= 1, "all_gather: n_ranks %d must be >= 1", n_ranks);
    int64_t ne[4] = {a->ne[0], a->ne[1], a->ne[2], n_ranks};
    int32_t params[1] = {n_ranks};
    return node(ctx, CLM_OP_ALL_GATHER, a->type, ne, &a, 1, params, sizeof(params), out);
}
