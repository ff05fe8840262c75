/* ops_norm.c - RMS_NORM over ne0 via aclnnRmsNorm with a cached F32 ones gamma [ne0] (kept on the
 * backend, cann_consts.c, created by prepare) and the required rstd output in a pool temporary [1, ne1, ne2, ne3].
 *
 * The ADD + RMS_NORM + MUL(weight) fusion (CANN_LLM_FUSION, on by default): ADD(a, b) -> RMS_NORM ->
 * MUL(that, w[ne0]) as three consecutive nodes becomes one aclnnAddRmsNorm(a, b, w) writing the
 * ADD's tensor (xOut, the residual later nodes read) and the MUL's tensor (yOut); the RMS_NORM's
 * own tensor is not written, so the fusion needs that no other node reads it and that it is not
 * flagged an output (the scheduler flags what other splits or the caller read). Only all-F32
 * operands: then the fused result equals the three launches' bit for bit on acl_host (x * rstd
 * * 1 * w in the same order); with F16 / BF16 the unfused path rounds x * rstd before the MUL. */
#include <string.h>

#include "cann/cann_common.h"

static bool is_float_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

bool cann_supports_rms_norm(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    return is_float_type(src->type) && op->type == src->type && clm_are_same_shape(src, op) &&
           src->nb[0] == clm_type_size(src->type) && op->nb[0] == clm_type_size(op->type);
}

clm_status cann_prepare_rms_norm(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan) {
    (void)plan;
    void *unused = NULL;
    return cann_consts_ones(ctx, node->src[0]->ne[0], &unused);
}

clm_status cann_op_rms_norm(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    float eps;
    memcpy(&eps, &dst->op_params[0], sizeof(eps));
    void *gamma_data = NULL;
    clm_status st = cann_consts_ones(ctx, src->ne[0], &gamma_data);
    if (st != CLM_OK) return st;
    int64_t n_rows = src->ne[1] * src->ne[2] * src->ne[3];
    cann_temp rstd_mem;
    if ((st = cann_temp_alloc(ctx, (size_t)n_rows * sizeof(float), &rstd_mem)) != CLM_OK) return st;
    int64_t rstd_ne[4] = {1, src->ne[1], src->ne[2], src->ne[3]};
    size_t rstd_nb[4] = {sizeof(float), sizeof(float), sizeof(float) * (size_t)src->ne[1],
                         sizeof(float) * (size_t)(src->ne[1] * src->ne[2])};
    size_t gamma_nb = sizeof(float);
    aclTensor *acl_x = cann_acl_tensor(src), *acl_y = cann_acl_tensor(dst);
    aclTensor *acl_gamma = cann_acl_tensor_nd(gamma_data, CLM_TYPE_F32, src->ne, &gamma_nb, 1, 0);
    aclTensor *acl_rstd = cann_acl_tensor_nd(rstd_mem.ptr, CLM_TYPE_F32, rstd_ne, rstd_nb, 4, 0);
    if (acl_x == NULL || acl_y == NULL || acl_gamma == NULL || acl_rstd == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "%s: cannot describe the operands as aclTensors", clm_op_desc(dst));
    } else {
        st = CANN_ACLNN(ctx, RmsNorm, acl_x, acl_gamma, (double)eps, acl_y, acl_rstd);
    }
    cann_destroy_tensors(4, acl_x, acl_y, acl_gamma, acl_rstd);
    cann_temp_free(&rstd_mem);
    return st;
}

static bool is_f32_contiguous(const clm_tensor *t) { return t->type == CLM_TYPE_F32 && clm_is_contiguous(t); }

static bool overlap(const clm_tensor *x, const clm_tensor *y) {
    const char *x0 = x->data, *y0 = y->data;
    return x0 < y0 + clm_nbytes(y) && y0 < x0 + clm_nbytes(x);
}

static bool partly_overlap(const clm_tensor *x, const clm_tensor *y) {
    return overlap(x, y) && !(x->data == y->data && clm_nbytes(x) == clm_nbytes(y));
}

static bool graph_reads(const clm_graph *graph, const clm_tensor *t, size_t skip) {
    for (size_t j = 0; j < clm_graph_n_nodes(graph); j++) {
        if (j == skip) continue;
        const clm_tensor *n = clm_graph_node(graph, j);
        if (n->view_src == t) return true;
        for (int s = 0; s < CLM_MAX_SRC; s++) {
            if (n->src[s] == t) return true;
        }
    }
    return false;
}

bool cann_match_add_rms_norm(const clm_graph *graph, size_t i) {
    size_t n_nodes = clm_graph_n_nodes(graph);
    if (i + 2 >= n_nodes) return false;
    const clm_tensor *add = clm_graph_node(graph, i), *norm = clm_graph_node(graph, i + 1),
                     *mul = clm_graph_node(graph, i + 2);
    if (add->op != CLM_OP_ADD || norm->op != CLM_OP_RMS_NORM || mul->op != CLM_OP_MUL) return false;
    const clm_tensor *a = add->src[0], *b = add->src[1];
    if (!is_f32_contiguous(add) || !is_f32_contiguous(a) || !is_f32_contiguous(b) || !clm_are_same_shape(a, add) ||
        !clm_are_same_shape(b, add)) {
        return false;
    }
    if (norm->src[0] != add || !is_f32_contiguous(norm) || !clm_are_same_shape(norm, add)) return false;
    const clm_tensor *w = mul->src[0] == norm ? mul->src[1] : mul->src[1] == norm ? mul->src[0] : NULL;
    if (w == NULL || w == norm || !is_f32_contiguous(w) || !is_f32_contiguous(mul) || !clm_are_same_shape(mul, add)) {
        return false;
    }
    if (w->ne[0] != add->ne[0] || w->ne[1] != 1 || w->ne[2] != 1 || w->ne[3] != 1) return false;
    if (clm_nelements(add) == 0) return false;  /* AddRmsNorm refuses empty tensors */
    /* The outputs (xOut = add, yOut = mul) may take an input's memory exactly (the same rows, read
     * before they are written) but not overlap it partly. */
    const clm_tensor *ins[3] = {a, b, w};
    for (int k = 0; k < 3; k++) {
        if (partly_overlap(add, ins[k]) || partly_overlap(mul, ins[k])) return false;
    }
    /* yOut may take xOut's memory exactly: the allocator gave the MUL the residual's memory, so
     * nothing reads the residual after the norm, and xOut goes to a pool temporary instead */
    if (mul->data == w->data || partly_overlap(mul, add)) return false;
    return (norm->flags & CLM_TENSOR_FLAG_OUTPUT) == 0 && !graph_reads(graph, norm, i + 2);
}

clm_status cann_op_add_rms_norm(cann_backend_ctx *ctx, clm_tensor *add, clm_tensor *norm, clm_tensor *mul) {
    const clm_tensor *w = mul->src[0] == norm ? mul->src[1] : mul->src[0];
    float eps;
    memcpy(&eps, &norm->op_params[0], sizeof(eps));
    int64_t n_rows = add->ne[1] * add->ne[2] * add->ne[3];
    cann_temp rstd_mem;
    clm_status st = cann_temp_alloc(ctx, (size_t)n_rows * sizeof(float), &rstd_mem);
    if (st != CLM_OK) return st;
    cann_temp x_mem = {0};
    void *x_data = add->data;
    if (mul->data == add->data) {
        if ((st = cann_temp_alloc(ctx, clm_nbytes(add), &x_mem)) != CLM_OK) {
            cann_temp_free(&rstd_mem);
            return st;
        }
        x_data = x_mem.ptr;
    }
    int64_t rstd_ne[4] = {1, add->ne[1], add->ne[2], add->ne[3]};
    size_t rstd_nb[4] = {sizeof(float), sizeof(float), sizeof(float) * (size_t)add->ne[1],
                         sizeof(float) * (size_t)(add->ne[1] * add->ne[2])};
    size_t w_nb = sizeof(float);
    aclTensor *acl_a = cann_acl_tensor(add->src[0]), *acl_b = cann_acl_tensor(add->src[1]);
    aclTensor *acl_x = cann_acl_tensor_nd(x_data, CLM_TYPE_F32, add->ne, add->nb, 4, 0);
    aclTensor *acl_y = cann_acl_tensor(mul);
    aclTensor *acl_w = cann_acl_tensor_nd(w->data, CLM_TYPE_F32, add->ne, &w_nb, 1, 0);
    aclTensor *acl_rstd = cann_acl_tensor_nd(rstd_mem.ptr, CLM_TYPE_F32, rstd_ne, rstd_nb, 4, 0);
    if (acl_a == NULL || acl_b == NULL || acl_x == NULL || acl_y == NULL || acl_w == NULL || acl_rstd == NULL) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "ADD+RMS_NORM+MUL: cannot describe the operands as aclTensors");
    } else {
        st = CANN_ACLNN(ctx, AddRmsNorm, acl_a, acl_b, acl_w, (double)eps, acl_y, acl_rstd, acl_x);
    }
    cann_destroy_tensors(6, acl_a, acl_b, acl_x, acl_y, acl_w, acl_rstd);
    if (x_mem.ptr != NULL) cann_temp_free(&x_mem);
    cann_temp_free(&rstd_mem);
    if (st == CLM_OK) ctx->fused_add_rms_norm++;
    return st;
}
