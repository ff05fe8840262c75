/* cann_buffer.c - the CANN device buffer type ("CANN<i>", aclrtMalloc), the pinned host buffer
 * type ("CANN_Host", aclrtMallocHost) and buffers over host memory mapped for the device
 * (aclrtHostRegister): ggml bytes ("CANN<i>_Mapped") or a device buffer's image ("CANN<i>_Image"),
 * with their buffers. Q8_0 / Q4_0 / Q4_1 tensors are stored
 * in the device layout of quant_layout.h: set/get/memset convert whole blocks on the way, in
 * chunks through a bounded host staging buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"
#include "cann/quant_layout.h"

#define CANN_STAGING_BYTES ((size_t)8 << 20)  /* host staging per quantized set/get/memset call */

typedef struct cann_buffer_ctx {
    int device;
    void *dev_ptr;   /* what aclrtMalloc returned (64-byte aligned, as CANN documents) */
    void *base;      /* dev_ptr rounded up to CANN_BUFFER_ALIGNMENT: what tensors are placed from */
} cann_buffer_ctx;

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

static const cann_device_ctx *buft_device_ctx(const clm_buffer_type *buft) { return buft->context; }

/* ---- repacked quantized tensors ----------------------------------------------------------- */
/* A block-granular byte range [offset, offset + size) of a tensor, resolved against its base
 * tensor: the regions span the base's blocks (all dims), a view starts at block view_offs / bytes. */
typedef struct qrange {
    const cann_qlayout *layout;  /* NULL: the tensor is stored as ggml stores it */
    char *base;                  /* device address of the base tensor */
    size_t n_blocks;             /* blocks of the base tensor */
    size_t first, count;         /* blocks of the range */
} qrange;

static size_t base_blocks(const clm_tensor *base) {
    int64_t n = clm_nelements(base);
    return n > 0 ? (size_t)n / CANN_QL_BLOCK : 0;
}

static clm_status quant_range(const clm_tensor *tensor, size_t offset, size_t size, const char *what,
                              qrange *out) {
    const clm_tensor *base = clm_tensor_storage(tensor);
    const cann_qlayout *l = cann_qlayout_get(base->type);
    *out = (qrange){.layout = l};
    if (l == NULL) return CLM_OK;
    size_t view_offs = tensor->view_src ? tensor->view_offs : 0;
    CLM_CHECK_ARG(tensor->type == base->type, "%s: '%s' (%s) views '%s' (%s); a view of a repacked %s tensor must "
                  "keep its type", what, tensor->name, clm_type_name(tensor->type), base->name, l->name, l->name);
    CLM_CHECK_ARG((view_offs + offset) % l->block_bytes == 0 && size % l->block_bytes == 0,
                  "%s: bytes [%zu, %zu) of %s tensor '%s' are not whole %zu-byte blocks (the %s layout is converted "
                  "block by block)", what, view_offs + offset, view_offs + offset + size, l->name, tensor->name,
                  l->block_bytes, l->name);
    out->base = (char *)tensor->data - view_offs;
    out->n_blocks = base_blocks(base);
    out->first = (view_offs + offset) / l->block_bytes;
    out->count = size / l->block_bytes;
    CLM_CHECK_ARG(out->first <= out->n_blocks && out->count <= out->n_blocks - out->first,
                  "%s: blocks [%zu, %zu) are outside the %zu blocks of '%s'", what, out->first,
                  out->first + out->count, out->n_blocks, base->name);
    return CLM_OK;
}

/* Staging holds k blocks region after region; parts[r] is region r's part. */
static void staging_parts(const cann_qlayout *l, uint8_t *staging, size_t k, void *parts[]) {
    for (int r = 0; r < l->n_regions; r++) parts[r] = staging + cann_qlayout_region_offset(l, k, r);
}

static uint8_t *staging_alloc(const qrange *q, size_t *k_max) {
    size_t k = CANN_STAGING_BYTES / q->layout->device_block_bytes;
    *k_max = k < q->count ? k : q->count;
    return malloc(*k_max * q->layout->device_block_bytes);
}

/* Blocks [first, first + k) between staging and each region of the device tensor. */
static clm_status copy_regions(const qrange *q, uint8_t *staging, size_t first, size_t k, bool upload) {
    const cann_qlayout *l = q->layout;
    for (int r = 0; r < l->n_regions; r++) {
        size_t bytes = k * l->region_bytes[r];
        char *dev = q->base + cann_qlayout_region_offset(l, q->n_blocks, r) + first * l->region_bytes[r];
        if (upload) {
            CANN_ACL(aclrtMemcpy(dev, bytes, staging, bytes, ACL_MEMCPY_HOST_TO_DEVICE));
        } else {
            CANN_ACL(aclrtMemcpy(staging, bytes, dev, bytes, ACL_MEMCPY_DEVICE_TO_HOST));
        }
        staging += bytes;
    }
    return CLM_OK;
}

/* ggml blocks -> device. With repeat, src holds enough blocks for one chunk and is reused. */
static clm_status quant_set(const qrange *q, const clm_tensor *tensor, const uint8_t *src, bool repeat) {
    const cann_qlayout *l = q->layout;
    size_t k_max, k;
    uint8_t *staging = staging_alloc(q, &k_max);
    if (staging == NULL) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of staging for '%s'",
                         k_max * l->device_block_bytes, tensor->name);
    }
    clm_status st = CLM_OK;
    for (size_t done = 0; done < q->count && st == CLM_OK; done += k) {
        k = q->count - done < k_max ? q->count - done : k_max;
        void *parts[CANN_QL_MAX_REGIONS];
        staging_parts(l, staging, k, parts);
        cann_qlayout_pack(l, repeat ? src : src + done * l->block_bytes, k, parts);
        st = copy_regions(q, staging, q->first + done, k, true);
    }
    free(staging);
    return st;
}

static clm_status quant_get(const qrange *q, const clm_tensor *tensor, uint8_t *dst) {
    const cann_qlayout *l = q->layout;
    size_t k_max, k;
    uint8_t *staging = staging_alloc(q, &k_max);
    if (staging == NULL) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of staging for '%s'",
                         k_max * l->device_block_bytes, tensor->name);
    }
    clm_status st = CLM_OK;
    for (size_t done = 0; done < q->count && st == CLM_OK; done += k) {
        k = q->count - done < k_max ? q->count - done : k_max;
        st = copy_regions(q, staging, q->first + done, k, false);
        if (st != CLM_OK) break;
        void *parts[CANN_QL_MAX_REGIONS];
        staging_parts(l, staging, k, parts);
        cann_qlayout_unpack(l, (const void *const *)parts, k, dst + done * l->block_bytes);
    }
    free(staging);
    return st;
}

/* memset on the ggml representation: every byte of the blocks becomes value, then converted. */
static clm_status quant_memset(const qrange *q, const clm_tensor *tensor, uint8_t value) {
    size_t k = CANN_STAGING_BYTES / q->layout->device_block_bytes;
    if (k > q->count) k = q->count;
    uint8_t *blocks = malloc(k * q->layout->block_bytes);
    if (blocks == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "cannot stage a memset of '%s'", tensor->name);
    memset(blocks, value, k * q->layout->block_bytes);
    clm_status st = quant_set(q, tensor, blocks, true);
    free(blocks);
    return st;
}

/* Device bytes of a base tensor's data (repacked size for Q8_0 / Q4_0 / Q4_1), without padding. */
static size_t device_data_bytes(const clm_tensor *t) {
    const cann_qlayout *l = cann_qlayout_get(t->type);
    return l ? cann_qlayout_device_bytes(l, base_blocks(t)) : clm_nbytes(t);
}

/* As ggml-cann: a quantized tensor whose ne0 is not a multiple of 512 gets one row of
 * (512 - ne0 % 512) elements of padding after its data (in the device layout's bytes per block). */
static size_t row_padding(const clm_tensor *t) {
    if (!clm_type_is_quantized(t->type) || device_data_bytes(t) == 0) return 0;
    int64_t pad = (CANN_QL_ROW_PADDING - t->ne[0] % CANN_QL_ROW_PADDING) % CANN_QL_ROW_PADDING;
    const cann_qlayout *l = cann_qlayout_get(t->type);
    return l ? (size_t)pad / CANN_QL_BLOCK * l->device_block_bytes : clm_row_size(t->type, pad);
}

/* ---- device buffers ----------------------------------------------------------------------- */
static void device_buffer_free(clm_buffer *buffer) {
    cann_buffer_ctx *ctx = buffer->context;
    if (cann_set_device(ctx->device) == CLM_OK) aclrtFree(ctx->dev_ptr);
    free(ctx);
}

static void *device_buffer_base(clm_buffer *buffer) { return ((cann_buffer_ctx *)buffer->context)->base; }

/* Zeroes the padding tail of a quantized base tensor (views share their base's). */
static clm_status device_buffer_init_tensor(clm_buffer *buffer, clm_tensor *tensor) {
    size_t pad = tensor->view_src == NULL ? row_padding(tensor) : 0;
    if (pad == 0) return CLM_OK;
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemset((char *)tensor->data + device_data_bytes(tensor), pad, 0, pad));
    return CLM_OK;
}

static clm_status device_buffer_set_tensor(clm_buffer *buffer, clm_tensor *tensor, const void *data,
                                           size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    qrange q = {0};
    clm_status st = quant_range(tensor, offset, size, "set_tensor", &q);
    if (st == CLM_OK) st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    if (q.layout != NULL) return quant_set(&q, tensor, data, false);
    CANN_ACL(aclrtMemcpy((char *)tensor->data + offset, size, data, size, ACL_MEMCPY_HOST_TO_DEVICE));
    return CLM_OK;
}

static clm_status device_buffer_get_tensor(clm_buffer *buffer, const clm_tensor *tensor, void *data,
                                           size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    qrange q = {0};
    clm_status st = quant_range(tensor, offset, size, "get_tensor", &q);
    if (st == CLM_OK) st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    if (q.layout != NULL) return quant_get(&q, tensor, data);
    CANN_ACL(aclrtMemcpy(data, size, (const char *)tensor->data + offset, size, ACL_MEMCPY_DEVICE_TO_HOST));
    return CLM_OK;
}

static clm_status device_buffer_memset_tensor(clm_buffer *buffer, clm_tensor *tensor, uint8_t value,
                                              size_t offset, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    qrange q = {0};
    clm_status st = quant_range(tensor, offset, size, "memset_tensor", &q);
    if (st == CLM_OK) st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    if (q.layout != NULL) return quant_memset(&q, tensor, value);
    CANN_ACL(aclrtMemset((char *)tensor->data + offset, size, value, size));
    return CLM_OK;
}

/* Device-to-device copy into this buffer; across devices only with peer access. Repacked tensors
 * copy their device bytes when both are whole base tensors; views of them go through the host. */
static clm_status device_buffer_cpy_tensor(clm_buffer *buffer, const clm_tensor *src, clm_tensor *dst) {
    if (!cann_buffer_is_device(src->buffer)) return CLM_ERR_UNSUPPORTED;
    size_t size = clm_nbytes(src);
    if (cann_qlayout_get(clm_tensor_storage(src)->type) || cann_qlayout_get(clm_tensor_storage(dst)->type)) {
        if (src->view_src || dst->view_src || src->type != dst->type || base_blocks(src) != base_blocks(dst)) {
            return CLM_ERR_UNSUPPORTED;
        }
        size = device_data_bytes(src);
    }
    int src_dev = cann_buffer_device(src->buffer), dst_dev = cann_buffer_device(buffer);
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
    CANN_ACL(aclrtMemset(ctx->base, buffer->size, value, buffer->size));
    return CLM_OK;
}

/* The weight cache's writer reads from a thread of its own while the model's stream may be
 * capturing a graph: captures begin in THREAD_LOCAL mode (graph_capture.c), which leaves other
 * threads' synchronous copies alone. */
static clm_status device_buffer_get_raw(clm_buffer *buffer, size_t offset, void *dst, size_t size) {
    cann_buffer_ctx *ctx = buffer->context;
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemcpy(dst, size, (const char *)ctx->base + offset, size, ACL_MEMCPY_DEVICE_TO_HOST));
    return CLM_OK;
}

static const struct clm_buffer_i device_buffer_iface = {
    .free_buffer = device_buffer_free,
    .get_base = device_buffer_base,
    .init_tensor = device_buffer_init_tensor,
    .memset_tensor = device_buffer_memset_tensor,
    .set_tensor = device_buffer_set_tensor,
    .get_tensor = device_buffer_get_tensor,
    .cpy_tensor = device_buffer_cpy_tensor,
    .clear = device_buffer_clear,
    .get_raw = device_buffer_get_raw,
};

bool cann_buffer_is_device(const clm_buffer *buffer) {
    return buffer != NULL && buffer->iface.get_base == device_buffer_base;
}

int cann_buffer_device(const clm_buffer *buffer) { return ((cann_buffer_ctx *)buffer->context)->device; }

/* ---- device buffer type ------------------------------------------------------------------- */
static const char *device_buft_name(const clm_buffer_type *buft) { return buft_device_ctx(buft)->name; }

static size_t device_buft_alignment(const clm_buffer_type *buft) { return CANN_BUFFER_ALIGNMENT; }

static bool device_buft_is_host(const clm_buffer_type *buft) { return false; }

/* Repacked size plus one row of padding for quantized tensors (see row_padding). */
static size_t device_buft_alloc_size(const clm_buffer_type *buft, const clm_tensor *tensor) {
    return device_data_bytes(tensor) + row_padding(tensor);
}

static clm_status device_buft_alloc(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    const cann_device_ctx *dev_ctx = buft_device_ctx(buft);
    clm_status st = cann_set_device(dev_ctx->device);
    if (st != CLM_OK) return st;
    size = align_up(size == 0 ? 1 : size, CANN_BUFFER_ALIGNMENT);
    /* aclrtMalloc promises 64-byte alignment; the buffer type promises CANN_BUFFER_ALIGNMENT, which
     * ggml's allocator assumes of the base when it packs tensors: allocate the difference more. */
    void *dev_ptr = NULL;
    aclError err = aclrtMalloc(&dev_ptr, size + CANN_BUFFER_ALIGNMENT - CANN_MALLOC_ALIGNMENT, ACL_MEM_MALLOC_HUGE_FIRST);
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
    ctx->base = (void *)align_up((size_t)dev_ptr, CANN_BUFFER_ALIGNMENT);
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

/* ---- host memory mapped for the device ----------------------------------------------------- */
/* The caller's memory (a model file's map) registered with aclrtHostRegister: kernels read the
 * tensors where they lie. The mapped address may not be used for copies (acl_rt.h), so reads go
 * through the host address and writes are refused: nothing writes weights. */
typedef struct cann_mapped_ctx {
    int device;
    char *host;      /* the caller's address */
    char *dev_ptr;   /* what aclrtHostRegister returned */
} cann_mapped_ctx;

bool cann_type_keeps_ggml_layout(int32_t type) { return cann_qlayout_get(type) == NULL; }

static void mapped_buffer_free(clm_buffer *buffer) {
    cann_mapped_ctx *ctx = buffer->context;
    if (cann_set_device(ctx->device) == CLM_OK) aclrtHostUnregister(ctx->host);
    free(ctx);
}

static void *mapped_buffer_base(clm_buffer *buffer) { return ((cann_mapped_ctx *)buffer->context)->dev_ptr; }

static clm_status mapped_buffer_init_tensor(clm_buffer *buffer, clm_tensor *tensor) {
    const clm_tensor *base = tensor->view_src ? tensor->view_src : tensor;
    CLM_CHECK_ARG(cann_type_keeps_ggml_layout(base->type), "'%s' (%s) cannot lie in %s: the device keeps %s "
                  "in its own layout; copy it into a device buffer", tensor->name, clm_type_name(base->type),
                  clm_buft_name(buffer->buft), clm_type_name(base->type));
    return CLM_OK;
}

static clm_status mapped_buffer_read_only(clm_buffer *buffer, const clm_tensor *tensor, const char *what) {
    return clm_error(CLM_ERR_UNSUPPORTED, "%s of '%s': %s is host memory mapped for the device, read "
                     "where it lies and never written through the backend", what, tensor->name,
                     clm_buft_name(buffer->buft));
}

static clm_status mapped_buffer_set_tensor(clm_buffer *buffer, clm_tensor *tensor, const void *data,
                                           size_t offset, size_t size) {
    (void)data, (void)offset, (void)size;
    return mapped_buffer_read_only(buffer, tensor, "set_tensor");
}

static clm_status mapped_buffer_memset_tensor(clm_buffer *buffer, clm_tensor *tensor, uint8_t value,
                                              size_t offset, size_t size) {
    (void)value, (void)offset, (void)size;
    return mapped_buffer_read_only(buffer, tensor, "memset_tensor");
}

static clm_status mapped_buffer_get_tensor(clm_buffer *buffer, const clm_tensor *tensor, void *data,
                                           size_t offset, size_t size) {
    const cann_mapped_ctx *ctx = buffer->context;
    memcpy(data, ctx->host + ((const char *)tensor->data - ctx->dev_ptr) + offset, size);
    return CLM_OK;
}

static clm_status mapped_buffer_clear(clm_buffer *buffer, uint8_t value) {
    (void)value;
    return clm_error(CLM_ERR_UNSUPPORTED, "clear: %s is host memory mapped for the device, never written "
                     "through the backend", clm_buft_name(buffer->buft));
}

static const struct clm_buffer_i mapped_buffer_iface = {
    .free_buffer = mapped_buffer_free,
    .get_base = mapped_buffer_base,
    .init_tensor = mapped_buffer_init_tensor,
    .memset_tensor = mapped_buffer_memset_tensor,
    .set_tensor = mapped_buffer_set_tensor,
    .get_tensor = mapped_buffer_get_tensor,
    .clear = mapped_buffer_clear,
};

/* ---- device images in host memory mapped for the device ---------------------------------------- */
/* The raw bytes of a device buffer (clm_buffer_get_raw), e.g. a weight cache file, registered as
 * above: tensors keep the device buffer type's placement and layouts, and reads undo the layout
 * from the host address as device_buffer_get_tensor does from a download. */
static clm_status image_buffer_get_tensor(clm_buffer *buffer, const clm_tensor *tensor, void *data,
                                          size_t offset, size_t size) {
    const cann_mapped_ctx *ctx = buffer->context;
    qrange q = {0};
    clm_status st = quant_range(tensor, offset, size, "get_tensor", &q);
    if (st != CLM_OK) return st;
    if (q.layout == NULL) return mapped_buffer_get_tensor(buffer, tensor, data, offset, size);
    const char *host_base = ctx->host + (q.base - ctx->dev_ptr);
    const void *parts[CANN_QL_MAX_REGIONS];
    for (int r = 0; r < q.layout->n_regions; r++) {
        parts[r] = host_base + cann_qlayout_region_offset(q.layout, q.n_blocks, r) + q.first * q.layout->region_bytes[r];
    }
    cann_qlayout_unpack(q.layout, parts, q.count, data);
    return CLM_OK;
}

static clm_status image_buffer_get_raw(clm_buffer *buffer, size_t offset, void *dst, size_t size) {
    memcpy(dst, ((cann_mapped_ctx *)buffer->context)->host + offset, size);
    return CLM_OK;
}

static const struct clm_buffer_i image_buffer_iface = {
    .free_buffer = mapped_buffer_free,
    .get_base = mapped_buffer_base,
    /* no init_tensor: the padding was zeroed in the buffer the image was taken from */
    .memset_tensor = mapped_buffer_memset_tensor,
    .set_tensor = mapped_buffer_set_tensor,
    .get_tensor = image_buffer_get_tensor,
    .clear = mapped_buffer_clear,
    .get_raw = image_buffer_get_raw,
};

static clm_status register_host_buffer(cann_device_ctx *dev_ctx, clm_buffer_type *buft, struct clm_buffer_i iface,
                                       void *ptr, size_t size, clm_buffer **out) {
    clm_status st = cann_set_device(dev_ctx->device);
    if (st != CLM_OK) return st;
    void *dev_ptr = NULL;
    aclError err = aclrtHostRegister(ptr, size, ACL_HOST_REGISTER_MAPPED, &dev_ptr);
    if (err != ACL_SUCCESS) return cann_acl_error(err, "aclrtHostRegister");
    cann_mapped_ctx *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        aclrtHostUnregister(ptr);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    *ctx = (cann_mapped_ctx){.device = dev_ctx->device, .host = ptr, .dev_ptr = dev_ptr};
    st = clm_buffer_init(buft, iface, ctx, size, out);
    if (st != CLM_OK) {
        aclrtHostUnregister(ptr);
        free(ctx);
    }
    return st;
}

clm_status cann_buffer_from_host_ptr(cann_device_ctx *dev_ctx, void *ptr, size_t size, clm_buffer **out) {
    return register_host_buffer(dev_ctx, &dev_ctx->mapped_buft, mapped_buffer_iface, ptr, size, out);
}

clm_status cann_buffer_from_image(cann_device_ctx *dev_ctx, void *ptr, size_t size, clm_buffer **out) {
    return register_host_buffer(dev_ctx, &dev_ctx->image_buft, image_buffer_iface, ptr, size, out);
}

static const char *mapped_buft_name(const clm_buffer_type *buft) { return buft_device_ctx(buft)->mapped_name; }
static const char *image_buft_name(const clm_buffer_type *buft) { return buft_device_ctx(buft)->image_name; }

/* GGUF aligns tensor data to 32 bytes by default: the placement rule of a model file's map. */
static size_t mapped_buft_alignment(const clm_buffer_type *buft) { return 32; }

/* As ggml stores them: no repacking and no row padding (the memory is not ours to pad). */
static size_t mapped_buft_alloc_size(const clm_buffer_type *buft, const clm_tensor *tensor) {
    return clm_nbytes(tensor);
}

static clm_status mapped_buft_alloc(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    (void)size, (void)out;
    return clm_error(CLM_ERR_UNSUPPORTED, "%s buffers are made over host memory "
                     "(clm_device_buffer_from_host_ptr), not allocated", mapped_buft_name(buft));
}

static clm_status image_buft_alloc(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    (void)size, (void)out;
    return clm_error(CLM_ERR_UNSUPPORTED, "%s buffers are made over a device image in host memory "
                     "(clm_device_buffer_from_image), not allocated", image_buft_name(buft));
}

void cann_buffer_types_init(cann_device_ctx *dev_ctx, clm_device *dev) {
    snprintf(dev_ctx->mapped_name, sizeof(dev_ctx->mapped_name), "%s_Mapped", dev_ctx->name);
    snprintf(dev_ctx->image_name, sizeof(dev_ctx->image_name), "%s_Image", dev_ctx->name);
    dev_ctx->buft = (clm_buffer_type){
        .iface = {.get_name = device_buft_name,
                  .alloc_buffer = device_buft_alloc,
                  .get_alignment = device_buft_alignment,
                  .get_alloc_size = device_buft_alloc_size,
                  .is_host = device_buft_is_host},
        .device = dev,
        .context = dev_ctx,
    };
    dev_ctx->mapped_buft = (clm_buffer_type){
        .iface = {.get_name = mapped_buft_name,
                  .alloc_buffer = mapped_buft_alloc,
                  .get_alignment = mapped_buft_alignment,
                  .get_alloc_size = mapped_buft_alloc_size,
                  .is_host = device_buft_is_host},
        .device = dev,
        .context = dev_ctx,
    };
    dev_ctx->image_buft = (clm_buffer_type){   /* placed as the device type places, see above */
        .iface = {.get_name = image_buft_name,
                  .alloc_buffer = image_buft_alloc,
                  .get_alignment = device_buft_alignment,
                  .get_alloc_size = device_buft_alloc_size,
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
