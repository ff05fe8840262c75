/* cann_common.h - shared pieces of the CANN backend: device/backend contexts, error mapping from
 * ACL and aclnn status codes to clm_status, the aclTensor helper and the two-phase op call. */
#ifndef CANN_COMMON_H
#define CANN_COMMON_H

#include "acl/acl.h"
#include "cann/aclnn_api.h"
#include "core/clm_impl.h"

#define CANN_MAX_DEVICES 16
#define CANN_BUFFER_ALIGNMENT 128
#define CANN_MAX_ACL_DIMS 8

/* One per device: identity and its buffer types. */
typedef struct cann_device_ctx {
    int device;
    char name[16];          /* "CANN0" */
    char description[64];   /* aclrtGetSocName(): "Ascend910B4", or "acl_host" */
    clm_buffer_type buft;   /* device memory */
    clm_buffer_type host_buft;
} cann_device_ctx;

/* Scratch device memory for op workspaces, valid in stream order. A placeholder for the memory
 * pools: one reusable block; outgrown blocks are freed at the next synchronize. */
typedef struct cann_scratch {
    void *block;
    size_t size;
    void **retired;
    size_t n_retired;
} cann_scratch;

/* One per backend: a stream on a device. */
typedef struct cann_backend_ctx {
    int device;
    char name[16];
    aclrtStream stream;
    cann_scratch scratch;
} cann_backend_ctx;

/* Makes `device` current on the calling thread (aclrtSetDevice only when it changes). */
clm_status cann_set_device(int device);

/* Map a failed ACL / aclnn call to a clm_status with a message naming the call and including
 * aclGetRecentErrMsg(). */
clm_status cann_acl_error(aclError err, const char *call);
clm_status cann_aclnn_error(aclnnStatus status, const char *call);

#define CANN_ACL(call)                                               \
    do {                                                             \
        aclError cann_err_ = (call);                                 \
        if (cann_err_ != ACL_SUCCESS) return cann_acl_error(cann_err_, #call); \
    } while (0)

/* Workspace memory for one op launch on ctx's stream (NULL when size is 0). */
clm_status cann_scratch_get(cann_backend_ctx *ctx, size_t size, void **out);
/* Frees retired scratch blocks; the caller has synchronized the stream. */
void cann_scratch_release(cann_scratch *scratch, bool all);

/* ---- aclTensor helper (acl_tensor.c) ---------------------------------------------------------- */
aclDataType cann_acl_type(int32_t type);
/* An aclTensor over data with a ggml-order shape (ne, byte strides nb, n_dims dims): reversed to
 * row-major dims, strides in elements, byte offset -> element offset. NULL if it cannot. */
aclTensor *cann_acl_tensor_nd(void *data, int32_t type, const int64_t *ne, const size_t *nb, int n_dims,
                              size_t offset);
/* The whole tensor as a 4-d aclTensor. */
aclTensor *cann_acl_tensor(const clm_tensor *t);
/* A 1-d aclTensor over a contiguous tensor's n elements. */
aclTensor *cann_acl_tensor_flat(const clm_tensor *t);
/* Shapes for a ggml broadcast of src1 over src0 (src0->ne[i] % src1->ne[i] == 0): a repeated dim
 * splits into (src1->ne[i], ne/src1->ne[i]) so aclnn's size-1 broadcasting expresses it. Fills
 * ne/nb for both (and for dst, which has src0's shape) and returns the number of dims (<= 8). */
int cann_bcast_shape(const clm_tensor *src0, const clm_tensor *src1, const clm_tensor *dst, int64_t *ne0,
                     size_t *nb0, int64_t *ne1, size_t *nb1, size_t *nbd);

/* Two-phase aclnn call on ctx's stream: phase 1 with the given arguments, workspace from scratch,
 * phase 2. Evaluates to a clm_status. */
#define CANN_ACLNN(ctx, op, ...)                                                              \
    ({                                                                                        \
        uint64_t ws_size_ = 0;                                                                \
        aclOpExecutor *executor_ = NULL;                                                      \
        clm_status st_ = CLM_OK;                                                              \
        aclnnStatus ret_ = aclnn##op##GetWorkspaceSize(__VA_ARGS__, &ws_size_, &executor_);    \
        if (ret_ != ACLNN_SUCCESS) {                                                          \
            st_ = cann_aclnn_error(ret_, "aclnn" #op "GetWorkspaceSize");                     \
        } else {                                                                              \
            void *ws_ = NULL;                                                                 \
            st_ = cann_scratch_get((ctx), ws_size_, &ws_);                                    \
            if (st_ == CLM_OK) {                                                              \
                ret_ = aclnn##op(ws_, ws_size_, executor_, (ctx)->stream);                   \
                if (ret_ != ACLNN_SUCCESS) st_ = cann_aclnn_error(ret_, "aclnn" #op);         \
            }                                                                                 \
        }                                                                                     \
        st_;                                                                                  \
    })

/* Destroys descriptors (NULL-safe) in one call. */
void cann_destroy_tensors(int n, ...);

/* ---- op families ------------------------------------------------------------------------------ */
bool cann_supports_binary(const clm_tensor *op);
clm_status cann_op_binary(cann_backend_ctx *ctx, clm_tensor *dst);  /* ADD, MUL */
bool cann_supports_cpy(const clm_tensor *op);
clm_status cann_op_cpy(cann_backend_ctx *ctx, clm_tensor *dst);     /* CPY, DUP, CONT */

/* ---- buffers (cann_buffer.c) ------------------------------------------------------------------ */
void cann_buffer_types_init(cann_device_ctx *dev_ctx, clm_device *dev);
bool cann_buffer_is_device(const clm_buffer *buffer);
int cann_buffer_device(const clm_buffer *buffer);

/* ---- backend (cann_backend.c) ------------------------------------------------------------------ */
clm_status cann_backend_init(clm_device *dev, clm_backend **out);
bool cann_supports_op(clm_device *dev, const clm_tensor *op);

#endif /* CANN_COMMON_H */
