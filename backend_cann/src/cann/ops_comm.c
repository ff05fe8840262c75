/* ops_comm.c - tensor parallelism: a backend's HCCL communicator (made from a RootInfo that rank
 * 0 creates and the other ranks receive) and the collective nodes that run over it on the
 * backend's stream: ALL_REDUCE (sum, HcclAllReduce) and ALL_GATHER (HcclAllGather, rank r's block
 * at index r of ne3). Tensors move device to device; nothing goes through the host. */
#include <stdio.h>
#include <string.h>

#include "cann/cann_common.h"

/* An HCCL failure as a clm_status, with the runtime's recent message (acl_host names the call,
 * the ranks and what each of them called). */
static clm_status hccl_error(HcclResult hr, const char *call) {
    const char *msg = aclGetRecentErrMsg();
    clm_status st = hr == HCCL_E_NOT_SUPPORT ? CLM_ERR_UNSUPPORTED
                    : hr == HCCL_E_PARA || hr == HCCL_E_PTR ? CLM_ERR_INVALID_ARG
                                                             : CLM_ERR_DEVICE;
    return clm_error(st, "%s failed with HCCL error %d (%s)%s%s", call, (int)hr, HcclGetErrorString(hr),
                     msg && *msg ? ": " : "", msg ? msg : "");
}

static cann_backend_ctx *comm_backend(clm_backend *backend, const char *api) {
    if (!cann_backend_is_cann(backend)) {
        clm_error(CLM_ERR_INVALID_ARG, "%s: not a CANN backend", api);
        return NULL;
    }
    return backend->context;
}

clm_status clm_cann_comm_root_info(clm_backend *backend, void *out, size_t size) {
    cann_backend_ctx *ctx = comm_backend(backend, "clm_cann_comm_root_info");
    if (ctx == NULL) return CLM_ERR_INVALID_ARG;
    CLM_CHECK_ARG(out != NULL && size == sizeof(HcclRootInfo),
                  "clm_cann_comm_root_info: needs a buffer of %d bytes (CLM_COMM_ROOT_INFO_BYTES), got %zu",
                  (int)sizeof(HcclRootInfo), size);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    HcclRootInfo info;
    HcclResult hr = HcclGetRootInfo(&info);
    if (hr != HCCL_SUCCESS) return hccl_error(hr, "HcclGetRootInfo");
    memcpy(out, &info, sizeof(info));
    return CLM_OK;
}

clm_status clm_cann_comm_init(clm_backend *backend, int32_t n_ranks, int32_t rank, const void *root_info,
                              size_t size) {
    cann_backend_ctx *ctx = comm_backend(backend, "clm_cann_comm_init");
    if (ctx == NULL) return CLM_ERR_INVALID_ARG;
    CLM_CHECK_ARG(root_info != NULL && size == sizeof(HcclRootInfo),
                  "clm_cann_comm_init: the RootInfo must be %d bytes (CLM_COMM_ROOT_INFO_BYTES), got %zu",
                  (int)sizeof(HcclRootInfo), size);
    CLM_CHECK_ARG(n_ranks >= 1 && rank >= 0 && rank < n_ranks,
                  "clm_cann_comm_init: rank %d is not in 0..n_ranks-1 (n_ranks %d)", rank, n_ranks);
    if (ctx->comm != NULL) {
        return clm_error(CLM_ERR_STATE, "clm_cann_comm_init: %s already belongs to a communicator (rank %d of %d)",
                         ctx->name, ctx->comm_rank, ctx->comm_ranks);
    }
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    HcclRootInfo info;
    memcpy(&info, root_info, sizeof(info));
    HcclComm comm = NULL;
    HcclResult hr = HcclCommInitRootInfo((uint32_t)n_ranks, &info, (uint32_t)rank, &comm);
    if (hr != HCCL_SUCCESS) return hccl_error(hr, "HcclCommInitRootInfo");
    ctx->comm = comm;
    ctx->comm_ranks = n_ranks;
    ctx->comm_rank = rank;
    return CLM_OK;
}

void cann_comm_free(cann_backend_ctx *ctx) {
    if (ctx->comm == NULL) return;
    aclrtSynchronizeStream(ctx->stream);
    if (HcclCommDestroy(ctx->comm) != HCCL_SUCCESS) aclGetRecentErrMsg();
    ctx->comm = NULL;
}

static bool hccl_type(int32_t type, HcclDataType *out) {
    switch (type) {
    case CLM_TYPE_F32: *out = HCCL_DATA_TYPE_FP32; return true;
    case CLM_TYPE_F16: *out = HCCL_DATA_TYPE_FP16; return true;
    case CLM_TYPE_BF16: *out = HCCL_DATA_TYPE_BFP16; return true;
    default: return false;
    }
}

/* Contiguous F32/F16/BF16 of one type, the sizes clm_all_reduce / clm_all_gather give. */
bool cann_supports_comm(const clm_tensor *op) {
    const clm_tensor *src = op->src[0];
    HcclDataType t;
    if (src == NULL || src->type != op->type || !hccl_type(op->type, &t)) return false;
    if (!clm_is_contiguous(src) || !clm_is_contiguous(op)) return false;
    int64_t n_out = op->op == CLM_OP_ALL_GATHER ? op->op_params[0] : 1;
    return n_out >= 1 && clm_nelements(op) == clm_nelements(src) * n_out;
}

clm_status cann_op_comm(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *src = dst->src[0];
    const char *what = dst->op == CLM_OP_ALL_REDUCE ? "ALL_REDUCE" : "ALL_GATHER";
    if (ctx->comm == NULL) {
        return clm_error(CLM_ERR_STATE, "%s: %s has no communicator (a tensor-parallel rank joins one with "
                         "clm_cann_comm_init)", what, ctx->name);
    }
    if (dst->op == CLM_OP_ALL_GATHER && dst->op_params[0] != ctx->comm_ranks) {
        return clm_error(CLM_ERR_INVALID_ARG, "ALL_GATHER '%s' gathers %d ranks, the communicator of %s has %d",
                         dst->name, dst->op_params[0], ctx->name, ctx->comm_ranks);
    }
    HcclDataType type = HCCL_DATA_TYPE_FP32;
    if (!hccl_type(dst->type, &type)) {
        return clm_error(CLM_ERR_UNSUPPORTED, "%s '%s': type %s is not F32, F16 or BF16", what, dst->name,
                         clm_type_name(dst->type));
    }
    uint64_t count = (uint64_t)clm_nelements(src);
    HcclResult hr = dst->op == CLM_OP_ALL_REDUCE
                        ? HcclAllReduce(src->data, dst->data, count, type, HCCL_REDUCE_SUM, ctx->comm, ctx->stream)
                        : HcclAllGather(src->data, dst->data, count, type, ctx->comm, ctx->stream);
    if (hr != HCCL_SUCCESS) return hccl_error(hr, dst->op == CLM_OP_ALL_REDUCE ? "HcclAllReduce" : "HcclAllGather");
    return CLM_OK;
}
