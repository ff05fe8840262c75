/* acl_tensor.c - ggml-shaped tensors to aclTensor descriptors, and ACL/aclnn error mapping. */
#include <stdarg.h>
#include <stdlib.h>

#include "cann/cann_common.h"

aclDataType cann_acl_type(int32_t type) {
    switch (type) {
        case CLM_TYPE_F32: return ACL_FLOAT;
        case CLM_TYPE_F16: return ACL_FLOAT16;
        case CLM_TYPE_BF16: return ACL_BF16;
        case CLM_TYPE_F64: return ACL_DOUBLE;
        case CLM_TYPE_I8: return ACL_INT8;
        case CLM_TYPE_I16: return ACL_INT16;
        case CLM_TYPE_I32: return ACL_INT32;
        case CLM_TYPE_I64: return ACL_INT64;
        case CLM_TYPE_Q8_0: return ACL_INT8;  /* the quants part of the device layout */
        case CLM_TYPE_Q4_0: return ACL_INT4;
        default: return ACL_DT_UNDEFINED;
    }
}

aclTensor *cann_acl_tensor_nd(void *data, int32_t type, const int64_t *ne, const size_t *nb, int n_dims,
                              size_t offset) {
    if (n_dims < 1 || n_dims > CANN_MAX_ACL_DIMS) return NULL;
    aclDataType dtype = cann_acl_type(type);
    size_t elem_size = clm_type_size(type);
    if (dtype == ACL_DT_UNDEFINED || elem_size == 0 || clm_type_block_size(type) != 1) return NULL;
    int64_t dims[CANN_MAX_ACL_DIMS], strides[CANN_MAX_ACL_DIMS];
    int64_t elem_offset = (int64_t)(offset / elem_size);
    int64_t storage_len = elem_offset + 1;
    for (int i = 0; i < n_dims; i++) {
        /* ggml dim i is the (n_dims - 1 - i)-th row-major dim. */
        dims[n_dims - 1 - i] = ne[i];
        strides[n_dims - 1 - i] = (int64_t)(nb[i] / elem_size);
        storage_len += (ne[i] - 1) * (int64_t)(nb[i] / elem_size);
    }
    return aclCreateTensor(dims, (uint64_t)n_dims, dtype, strides, elem_offset, ACL_FORMAT_ND, &storage_len, 1,
                           data);
}

aclTensor *cann_acl_tensor(const clm_tensor *t) {
    return cann_acl_tensor_nd(t->data, t->type, t->ne, t->nb, CLM_MAX_DIMS, 0);
}

aclTensor *cann_acl_tensor_flat(const clm_tensor *t) {
    int64_t ne = clm_nelements(t);
    size_t nb = clm_type_size(t->type);
    return cann_acl_tensor_nd(t->data, t->type, &ne, &nb, 1, 0);
}

int cann_bcast_shape(const clm_tensor *src0, const clm_tensor *src1, const clm_tensor *dst, int64_t *ne0,
                     size_t *nb0, int64_t *ne1, size_t *nb1, size_t *nbd) {
    int n = 0;
    for (int i = 0; i < CLM_MAX_DIMS; i++) {
        int64_t repeat = src0->ne[i] / src1->ne[i];
        if (src1->ne[i] != 1 && repeat != 1) {
            /* inner part: src1's extent, same strides */
            ne0[n] = src1->ne[i], nb0[n] = src0->nb[i], nbd[n] = dst->nb[i];
            ne1[n] = src1->ne[i], nb1[n] = src1->nb[i];
            n++;
            /* outer part: the repetitions; src1 broadcasts along it */
            ne0[n] = repeat, nb0[n] = src0->nb[i] * (size_t)src1->ne[i], nbd[n] = dst->nb[i] * (size_t)src1->ne[i];
            ne1[n] = 1, nb1[n] = src1->nb[i] * (size_t)src1->ne[i];
            n++;
        } else {
            ne0[n] = src0->ne[i], nb0[n] = src0->nb[i], nbd[n] = dst->nb[i];
            ne1[n] = src1->ne[i], nb1[n] = src1->nb[i];
            n++;
        }
    }
    return n;
}

aclTensor *cann_acl_view(void *data, aclDataType dt, int nd, const int64_t *dims, const int64_t *strides,
                         int64_t offset) {
    int64_t extent = offset + 1;
    for (int i = 0; i < nd; i++) extent += (dims[i] - 1) * strides[i];
    return aclCreateTensor(dims, (uint64_t)nd, dt, strides, offset, ACL_FORMAT_ND, &extent, 1, data);
}

void cann_destroy_tensors(int n, ...) {
    va_list args;
    va_start(args, n);
    for (int i = 0; i < n; i++) aclDestroyTensor(va_arg(args, aclTensor *));
    va_end(args);
}

/* ---- errors --------------------------------------------------------------------------------- */
static const char *recent_message(void) {
    const char *msg = aclGetRecentErrMsg();
    return (msg != NULL && msg[0] != '\0') ? msg : "no further detail from the runtime";
}

clm_status cann_acl_error(aclError err, const char *call) {
    bool oom = err == ACL_ERROR_RT_MEMORY_ALLOCATION || err == ACL_ERROR_RT_DEVICE_OOM || err == ACL_ERROR_BAD_ALLOC;
    return clm_error(oom ? CLM_ERR_OUT_OF_MEMORY : CLM_ERR_DEVICE, "%s failed with ACL error %d: %s", call, err,
                     recent_message());
}

clm_status cann_aclnn_error(aclnnStatus status, const char *call) {
    clm_status st = (status == ACLNN_ERR_PARAM_INVALID || status == ACLNN_ERR_PARAM_NULLPTR) ? CLM_ERR_UNSUPPORTED
                                                                                          : CLM_ERR_DEVICE;
    return clm_error(st, "%s failed with aclnn status %d: %s", call, status, recent_message());
}

clm_status cann_set_device(int device) {
    int32_t current = -1;
    if (aclrtGetDevice(&current) == ACL_SUCCESS && current == device) return CLM_OK;
    aclGetRecentErrMsg(); /* "no device set" is expected here: drop it */
    CANN_ACL(aclrtSetDevice(device));
    return CLM_OK;
}
