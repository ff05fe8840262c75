/* tensor.c - contexts (tensor arenas), tensor metadata, views and the node constructors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clm_impl.h"

/* ---- contexts ------------------------------------------------------------------------------- */
clm_status clm_context_new(size_t max_tensors, clm_context **out) {
    CLM_CHECK_ARG(out != NULL, "clm_context_new: out is NULL");
    CLM_CHECK_ARG(max_tensors > 0, "clm_context_new: max_tensors must be > 0");
    *out = NULL;
    clm_context *ctx = calloc(1, sizeof(*ctx));
    clm_tensor *tensors = calloc(max_tensors, sizeof(*tensors));
    if (ctx == NULL || tensors == NULL) {
        free(ctx);
        free(tensors);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_context_new: cannot allocate %zu tensors", max_tensors);
    }
    ctx->tensors = tensors;
    ctx->max_tensors = max_tensors;
    *out = ctx;
    return CLM_OK;
}

void clm_graph_free_internal(clm_graph *graph);

void clm_context_free(clm_context *ctx) {
    if (ctx == NULL) return;
    for (size_t i = 0; i < ctx->n_graphs; i++) clm_graph_free_internal(ctx->graphs[i]);
    free(ctx->graphs);
    free(ctx->tensors);
    free(ctx);
}

size_t clm_context_n_tensors(const clm_context *ctx) { return ctx ? ctx->n_tensors : 0; }

clm_tensor *clm_context_tensor(const clm_context *ctx, size_t i) {
    return (ctx && i < ctx->n_tensors) ? &ctx->tensors[i] : NULL;
}

/* ---- tensor metadata ------------------------------------------------------------------------ */
int64_t clm_nelements(const clm_tensor *t) { return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; }

int64_t clm_nrows(const clm_tensor *t) { return t->ne[1] * t->ne[2] * t->ne[3]; }

size_t clm_nbytes(const clm_tensor *t) {
    for (int i = 0; i < CLM_MAX_DIMS; i++) {
        if (t->ne[i] <= 0) return 0;
    }
    int64_t block = clm_type_block_size(t->type);
    size_t bytes;
    if (block == 1) {
        bytes = clm_type_size(t->type);
        for (int i = 0; i < CLM_MAX_DIMS; i++) bytes += (size_t)(t->ne[i] - 1) * t->nb[i];
    } else {
        bytes = (size_t)t->ne[0] * t->nb[0] / (size_t)block;
        for (int i = 1; i < CLM_MAX_DIMS; i++) bytes += (size_t)(t->ne[i] - 1) * t->nb[i];
    }
    return bytes;
}

bool clm_is_contiguous(const clm_tensor *t) {
    size_t expected = clm_type_size(t->type);
    if (t->nb[0] != expected) return false;
    expected = clm_row_size(t->type, t->ne[0]);
    for (int i = 1; i < CLM_MAX_DIMS; i++) {
        if (t->ne[i] != 1 && t->nb[i] != expected) return false;
        expected *= (size_t)t->ne[i];
    }
    return true;
}

bool clm_is_view_op(int32_t op) {
    return op == CLM_OP_VIEW || op == CLM_OP_RESHAPE || op == CLM_OP_PERMUTE || op == CLM_OP_TRANSPOSE;
}

bool clm_are_same_shape(const clm_tensor *a, const clm_tensor *b) {
    for (int i = 0; i < CLM_MAX_DIMS; i++) {
        if (a->ne[i] != b->ne[i]) return false;
    }
    return true;
}

bool clm_can_repeat(const clm_tensor *small, const clm_tensor *big) {
    for (int i = 0; i < CLM_MAX_DIMS; i++) {
        if (small->ne[i] <= 0 || big->ne[i] % small->ne[i] != 0) return false;
    }
    return true;
}

const clm_tensor *clm_tensor_storage(const clm_tensor *t) { return t->view_src ? t->view_src : t; }

float clm_get_op_param_f32(const clm_tensor *t, int i) {
    float v;
    memcpy(&v, &t->op_params[i], sizeof(v));
    return v;
}

int32_t clm_get_op_param_i32(const clm_tensor *t, int i) { return t->op_params[i]; }

clm_status clm_tensor_set_name(clm_tensor *t, const char *name) {
    CLM_CHECK_ARG(t != NULL && name != NULL, "clm_tensor_set_name: NULL argument");
    strncpy(t->name, name, CLM_MAX_NAME - 1);
    t->name[CLM_MAX_NAME - 1] = '\0';
    return CLM_OK;
}

/* ---- construction --------------------------------------------------------------------------- */
static clm_status new_tensor_impl(clm_context *ctx, int32_t type, int32_t n_dims, const int64_t *ne,
                                  clm_tensor *view_src, size_t view_offs, clm_tensor **out) {
    CLM_CHECK_ARG(ctx != NULL && out != NULL, "clm_new_tensor: NULL context or out");
    *out = NULL;
    CLM_CHECK_ARG(clm_type_name(type) != NULL, "clm_new_tensor: unknown type %d", type);
    CLM_CHECK_ARG(n_dims >= 1 && n_dims <= CLM_MAX_DIMS, "clm_new_tensor: n_dims %d not in 1..4", n_dims);
    CLM_CHECK_ARG(ne != NULL, "clm_new_tensor: ne is NULL");
    for (int i = 0; i < n_dims; i++) {
        CLM_CHECK_ARG(ne[i] >= 0, "clm_new_tensor: ne[%d] = %lld is negative", i, (long long)ne[i]);
    }
    int64_t block = clm_type_block_size(type);
    CLM_CHECK_ARG(ne[0] % block == 0, "clm_new_tensor: ne[0] = %lld is not a multiple of %s's block size %lld",
                  (long long)ne[0], clm_type_name(type), (long long)block);
    if (ctx->n_tensors >= ctx->max_tensors) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_new_tensor: context is full (%zu tensors)", ctx->max_tensors);
    }
    clm_tensor *t = &ctx->tensors[ctx->n_tensors++];
    memset(t, 0, sizeof(*t));
    t->type = type;
    for (int i = 0; i < CLM_MAX_DIMS; i++) t->ne[i] = i < n_dims ? ne[i] : 1;
    t->nb[0] = clm_type_size(type);
    t->nb[1] = clm_row_size(type, t->ne[0]);
    for (int i = 2; i < CLM_MAX_DIMS; i++) t->nb[i] = t->nb[i - 1] * (size_t)t->ne[i - 1];
    if (view_src != NULL) {
        t->view_src = view_src->view_src ? view_src->view_src : view_src;
        t->view_offs = view_offs;
        t->buffer = t->view_src->buffer;
        if (t->view_src->data != NULL) t->data = (char *)t->view_src->data + view_offs;
    }
    *out = t;
    return CLM_OK;
}

clm_status clm_new_tensor(clm_context *ctx, int32_t type, int32_t n_dims, const int64_t *ne, clm_tensor **out) {
    return new_tensor_impl(ctx, type, n_dims, ne, NULL, 0, out);
}

/* A view of `a` with a's strides; the caller adjusts ne/nb and checks it fits. */
static clm_status new_view(clm_context *ctx, clm_tensor *a, int32_t op, size_t offset, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL, "view of a NULL tensor");
    clm_status st = new_tensor_impl(ctx, a->type, CLM_MAX_DIMS, a->ne, a, a->view_offs + offset, out);
    if (st != CLM_OK) return st;
    memcpy((*out)->nb, a->nb, sizeof(a->nb));
    (*out)->op = op;
    (*out)->src[0] = a;
    return CLM_OK;
}

static clm_status check_view_fits(clm_tensor *view, const char *what) {
    const clm_tensor *base = view->view_src;
    size_t end = view->view_offs + clm_nbytes(view);
    if (end > clm_nbytes(base)) {
        return clm_error(CLM_ERR_INVALID_ARG, "%s: view ends at byte %zu, past the %zu bytes of '%s'",
                         what, end, clm_nbytes(base), base->name);
    }
    return CLM_OK;
}

clm_status clm_view_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                       size_t nb1, size_t nb2, size_t nb3, size_t offset, clm_tensor **out) {
    CLM_CHECK_ARG(ne0 >= 0 && ne1 >= 0 && ne2 >= 0 && ne3 >= 0, "clm_view_4d: negative extent");
    clm_tensor *t = NULL;
    clm_status st = new_view(ctx, a, CLM_OP_VIEW, offset, &t);
    if (st != CLM_OK) return st;
    t->ne[0] = ne0, t->ne[1] = ne1, t->ne[2] = ne2, t->ne[3] = ne3;
    t->nb[1] = nb1, t->nb[2] = nb2, t->nb[3] = nb3;
    if ((st = check_view_fits(t, "clm_view_4d")) != CLM_OK) {
        ctx->n_tensors--;
        return st;
    }
    *out = t;
    return CLM_OK;
}

clm_status clm_reshape_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3,
                          clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "clm_reshape_4d: NULL argument");
    CLM_CHECK_ARG(clm_is_contiguous(a), "clm_reshape_4d: '%s' is not contiguous", a->name);
    CLM_CHECK_ARG(ne0 * ne1 * ne2 * ne3 == clm_nelements(a),
                  "clm_reshape_4d: %lld elements cannot be reshaped to [%lld,%lld,%lld,%lld]",
                  (long long)clm_nelements(a), (long long)ne0, (long long)ne1, (long long)ne2, (long long)ne3);
    CLM_CHECK_ARG(ne0 % clm_type_block_size(a->type) == 0, "clm_reshape_4d: ne0 not a multiple of the block size");
    int64_t ne[4] = {ne0, ne1, ne2, ne3};
    clm_status st = new_tensor_impl(ctx, a->type, 4, ne, a, a->view_offs, out);
    if (st != CLM_OK) return st;
    (*out)->op = CLM_OP_RESHAPE;
    (*out)->src[0] = a;
    return CLM_OK;
}

clm_status clm_permute(clm_context *ctx, clm_tensor *a, int32_t axis0, int32_t axis1, int32_t axis2,
                       int32_t axis3, clm_tensor **out) {
    int32_t axes[4] = {axis0, axis1, axis2, axis3};
    bool seen[4] = {false, false, false, false};
    for (int i = 0; i < 4; i++) {
        CLM_CHECK_ARG(axes[i] >= 0 && axes[i] < 4 && !seen[axes[i]],
                      "clm_permute: (%d,%d,%d,%d) is not a permutation of 0..3", axis0, axis1, axis2, axis3);
        seen[axes[i]] = true;
    }
    clm_tensor *t = NULL;
    clm_status st = new_view(ctx, a, CLM_OP_PERMUTE, 0, &t);
    if (st != CLM_OK) return st;
    for (int i = 0; i < 4; i++) {
        t->ne[axes[i]] = a->ne[i];
        t->nb[axes[i]] = a->nb[i];
    }
    memcpy(t->op_params, axes, sizeof(axes));
    *out = t;
    return CLM_OK;
}

clm_status clm_transpose(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    clm_status st = clm_permute(ctx, a, 1, 0, 2, 3, out);
    if (st == CLM_OK) (*out)->op = CLM_OP_TRANSPOSE;
    return st;
}

/* A new contiguous result tensor with a's type and shape and op `op`. */
static clm_status new_like(clm_context *ctx, clm_tensor *a, int32_t op, clm_tensor **out) {
    clm_status st = new_tensor_impl(ctx, a->type, CLM_MAX_DIMS, a->ne, NULL, 0, out);
    if (st == CLM_OK) (*out)->op = op;
    return st;
}

static clm_status binary_op(clm_context *ctx, int32_t op, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    const char *name = clm_op_name(op);
    CLM_CHECK_ARG(a != NULL && b != NULL && out != NULL, "%s: NULL argument", name);
    CLM_CHECK_ARG(clm_can_repeat(b, a),
                  "%s: '%s' [%lld,%lld,%lld,%lld] does not broadcast to '%s' [%lld,%lld,%lld,%lld]", name,
                  b->name, (long long)b->ne[0], (long long)b->ne[1], (long long)b->ne[2], (long long)b->ne[3],
                  a->name, (long long)a->ne[0], (long long)a->ne[1], (long long)a->ne[2], (long long)a->ne[3]);
    clm_status st = new_like(ctx, a, op, out);
    if (st != CLM_OK) return st;
    (*out)->src[0] = a;
    (*out)->src[1] = b;
    return CLM_OK;
}

clm_status clm_add(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return binary_op(ctx, CLM_OP_ADD, a, b, out);
}

clm_status clm_mul(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return binary_op(ctx, CLM_OP_MUL, a, b, out);
}

clm_status clm_div(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    return binary_op(ctx, CLM_OP_DIV, a, b, out);
}

clm_status clm_cpy(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && b != NULL && out != NULL, "clm_cpy: NULL argument");
    CLM_CHECK_ARG(clm_nelements(a) == clm_nelements(b), "clm_cpy: '%s' has %lld elements, '%s' has %lld",
                  a->name, (long long)clm_nelements(a), b->name, (long long)clm_nelements(b));
    clm_tensor *t = NULL;
    clm_status st = new_view(ctx, b, CLM_OP_CPY, 0, &t);
    if (st != CLM_OK) return st;
    t->src[0] = a;
    t->src[1] = b;
    char name[2 * CLM_MAX_NAME + 16];  /* clm_tensor_set_name truncates */
    snprintf(name, sizeof(name), "%s (copy of %s)", b->name, a->name);
    clm_tensor_set_name(t, name);
    *out = t;
    return CLM_OK;
}

clm_status clm_cont(clm_context *ctx, clm_tensor *a, clm_tensor **out) {
    CLM_CHECK_ARG(a != NULL && out != NULL, "clm_cont: NULL argument");
    clm_status st = new_like(ctx, a, CLM_OP_CONT, out);
    if (st == CLM_OK) (*out)->src[0] = a;
    return st;
}

clm_status clm_new_op(clm_context *ctx, int32_t op, int32_t type, int32_t n_dims, const int64_t *ne,
                      clm_tensor *const *srcs, int32_t n_src, const void *params, size_t params_size,
                      clm_tensor **out) {
    CLM_CHECK_ARG(op > CLM_OP_NONE && op < CLM_OP_COUNT && !clm_is_view_op(op),
                  "clm_new_op: op %d is not a compute op (views have their own constructors)", op);
    CLM_CHECK_ARG(n_src >= 0 && n_src <= CLM_MAX_SRC, "clm_new_op: n_src %d not in 0..%d", n_src, CLM_MAX_SRC);
    CLM_CHECK_ARG(n_src == 0 || srcs != NULL, "clm_new_op: srcs is NULL");
    CLM_CHECK_ARG(params_size <= sizeof(((clm_tensor *)0)->op_params) && (params_size == 0 || params != NULL),
                  "clm_new_op: %zu bytes of op params exceed %zu", params_size, sizeof(((clm_tensor *)0)->op_params));
    clm_status st = new_tensor_impl(ctx, type, n_dims, ne, NULL, 0, out);
    if (st != CLM_OK) return st;
    (*out)->op = op;
    for (int i = 0; i < n_src; i++) (*out)->src[i] = srcs[i];
    if (params_size) memcpy((*out)->op_params, params, params_size);
    return CLM_OK;
}
