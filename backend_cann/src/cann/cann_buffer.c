/* cann_buffer.c - the CANN device buffer type ("CANN<i>", aclrtMalloc) and the pinned host buffer
 * type ("CANN_Host", aclrtMallocHost), with their buffers. */
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

typedef struct cann_buffer_ctx {
    int device;
    void *dev_ptr;
} cann_buffer_ctx;

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static const cann_device_ctx *buft_device_ctx(const clm_buffer_type *buft) { return buft->context; }

/* ---- device buffers ----------------------------------------------------------------------- */
static void device_buffer_free(clm_buffer *buffer) {
    cann_buffer_ctx *ctx = buffer->context;
    if (cann_set_device(ctx->device) == CLM_OK) aclrtFree(ctx->dev_ptr);
    free(ctx);
}

static void *device_buffer_base(clm_buffer *buffer) { return ((cann_buffer_ctx *)buffer->context)->dev_ptr; }

static clm_status device_buffer_set_tensor(clm_buffer *buffer, clm_tensor *tensor, const void *data,
                                           size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemcpy((char *)tensor->data + offset, size, data, size, ACL_MEMCPY_HOST_TO_DEVICE));
    return CLM_OK;
}

static clm_status device_buffer_get_tensor(clm_buffer *buffer, const clm_tensor *tensor, void *data,
                                           size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemcpy(data, size, (const char *)tensor->data + offset, size, ACL_MEMCPY_DEVICE_TO_HOST));
    return CLM_OK;
}

static clm_status device_buffer_memset_tensor(clm_buffer *buffer, clm_tensor *tensor, uint8_t value,
                                              size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemset((char *)tensor->data + offset, size, value, size));
    return CLM_OK;
}

/* Device-to-device copy into this buffer; across devices only with peer access. */
static clm_status device_buffer_cpy_tensor(clm_buffer *buffer, const clm_tensor *src, clm_tensor *dst) {
    if (!cann_buffer_is_device(src->buffer)) return CLM_ERR_UNSUPPORTED;
    int src_dev = cann_buffer_device(src->buffer), dst_dev = cann_buffer_device(buffer);
    size_t size = clm_nbytes(src);
    clm_status st;
    if (src_dev != dst_dev) {
        int32_t can_access = 0;
        CANN_ACL(aclrtDeviceCanAccessPeer(&can_access, src_dev, dst_dev));
        if (!can_access) return CLM_ERR_UNSUPPORTED;
        if ((st = cann_set_device(src_dev)) != CLM_OK) return st;
        aclError err = aclrtDeviceEnablePeerAccess(dst_dev, 0);
        if (err != ACL_SUCCESS) aclGetRecentErrMsg(); /* already enabled is fine */
    }
    if ((st = cann_set_device(dst_dev)) != CLM_OK) return st;
    CANN_ACL(aclrtMemcpy(dst->data, size, src->data, size, ACL_MEMCPY_DEVICE_TO_DEVICE));
    return CLM_OK;
}

static clm_status device_buffer_clear(clm_buffer *buffer, uint8_t value) {
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemset(ctx->dev_ptr, buffer->size, value, buffer->size));
    return CLM_OK;
}

static const struct clm_buffer_i device_buffer_iface = {
    .free_buffer = device_buffer_free,
    .get_base = device_buffer_base,
    .init_tensor = NULL,
    .memset_tensor = device_buffer_memset_tensor,
    .set_tensor = device_buffer_set_tensor,
    .get_tensor = device_buffer_get_tensor,
    .cpy_tensor = device_buffer_cpy_tensor,
    .clear = device_buffer_clear,
};

bool cann_buffer_is_device(const clm_buffer *buffer) {
    return buffer != NULL && buffer->iface.get_base == device_buffer_base;
}

int cann_buffer_device(const clm_buffer *buffer) { return ((cann_buffer_ctx *)buffer->context)->device; }

/* ---- device buffer type ------------------------------------------------------------------- */
static const char *device_buft_name(const clm_buffer_type *buft) { return buft_device_ctx(buft)->name; }

static size_t device_buft_alignment(const clm_buffer_type *buft) { return CANN_BUFFER_ALIGNMENT; }

static bool device_buft_is_host(const clm_buffer_type *buft) { return false; }

static clm_status device_buft_alloc(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    const cann_device_ctx *dev_ctx = buft_device_ctx(buft);
    clm_status st = cann_set_device(dev_ctx->device);
    if (st != CLM_OK) return st;
    size = align_up(size == 0 ? 1 : size, CANN_BUFFER_ALIGNMENT);
    void *dev_ptr = NULL;
    aclError err = aclrtMalloc(&dev_ptr, size, ACL_MEM_MALLOC_HUGE_FIRST);
    if (err != ACL_SUCCESS) {
        cann_acl_error(err, "aclrtMalloc");
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "%s: cannot allocate %.1f MiB of device memory (%s)", dev_ctx->name,
                         size / 1048576.0, clm_last_error());
    }
    cann_buffer_ctx *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        aclrtFree(dev_ptr);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    ctx->device = dev_ctx->device;
    ctx->dev_ptr = dev_ptr;
    st = clm_buffer_init(buft, device_buffer_iface, ctx, size, out);
    if (st != CLM_OK) {
        aclrtFree(dev_ptr);
        free(ctx);
    }
    return st;
}

/* ---- pinned host buffers ------------------------------------------------------------------- */
static void host_buffer_free(clm_buffer *buffer) { aclrtFreeHost(buffer->context); }

static void *host_buffer_base(clm_buffer *buffer) { return buffer->context; }

static clm_status host_buffer_set_tensor(clm_buffer *buffer, clm_tensor *tensor, const void *data, size_t offset,
                                         size_t size) {
    memcpy((char *)tensor->data + offset, data, size);
    return CLM_OK;
}

static clm_status host_buffer_get_tensor(clm_buffer *buffer, const clm_tensor *tensor, void *data, size_t offset,
                                         size_t size) {
    memcpy(data, (const char *)tensor->data + offset, size);
    return CLM_OK;
}

static clm_status host_buffer_memset_tensor(clm_buffer *buffer, clm_tensor *tensor, uint8_t value, size_t offset,
                                            size_t size) {
    memset((char *)tensor->data + offset, value, size);
    return CLM_OK;
}

static clm_status host_buffer_clear(clm_buffer *buffer, uint8_t value) {
    memset(buffer->context, value, buffer->size);
    return CLM_OK;
}

static const struct clm_buffer_i host_buffer_iface = {
    .free_buffer = host_buffer_free,
    .get_base = host_buffer_base,
    .memset_tensor = host_buffer_memset_tensor,
    .set_tensor = host_buffer_set_tensor,
    .get_tensor = host_buffer_get_tensor,
    .clear = host_buffer_clear,
};

static const char *host_buft_name(const clm_buffer_type *buft) { return "CANN_Host"; }

static size_t host_buft_alignment(const clm_buffer_type *buft) { return 64; }

static bool host_buft_is_host(const clm_buffer_type *buft) { return true; }

static clm_status host_buft_alloc(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    size = align_up(size == 0 ? 1 : size, CANN_BUFFER_ALIGNMENT);
    void *ptr = NULL;
    aclError err = aclrtMallocHost(&ptr, size);
    if (err != ACL_SUCCESS) return cann_acl_error(err, "aclrtMallocHost");
    clm_status st = clm_buffer_init(buft, host_buffer_iface, ptr, size, out);
    if (st != CLM_OK) aclrtFreeHost(ptr);
    return st;
}

void cann_buffer_types_init(cann_device_ctx *dev_ctx, clm_device *dev) {
    dev_ctx->buft = (clm_buffer_type){
        .iface = {.get_name = device_buft_name,
                  .alloc_buffer = device_buft_alloc,
                  .get_alignment = device_buft_alignment,
                  .is_host = device_buft_is_host},
        .device = dev,
        .context = dev_ctx,
    };
    dev_ctx->host_buft = (clm_buffer_type){
        .iface = {.get_name = host_buft_name,
                  .alloc_buffer = host_buft_alloc,
                  .get_alignment = host_buft_alignment,
                  .is_host = host_buft_is_host},
        .device = dev,
        .context = dev_ctx,
    };
}
