/* cann_device.c - the CANN registry (aclInit once, one device per aclrtGetDeviceCount()) and the
 * device interface: identity, memory, buffer types, backends, op support and events. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

static clm_reg cann_reg;
static clm_device cann_devices[CANN_MAX_DEVICES];
static clm_device *cann_device_ptrs[CANN_MAX_DEVICES];
static cann_device_ctx cann_device_ctxs[CANN_MAX_DEVICES];
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static clm_status reg_status;
static char reg_error[512];

static const cann_device_ctx *dev_ctx(const clm_device *dev) { return dev->context; }

static const char *device_name(const clm_device *dev) { return dev_ctx(dev)->name; }

static const char *device_description(const clm_device *dev) { return dev_ctx(dev)->description; }

static int32_t device_type(const clm_device *dev) { return CLM_DEVICE_TYPE_GPU; }

static clm_status device_memory(clm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    clm_status st = cann_set_device(dev_ctx(dev)->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtGetMemInfo(ACL_HBM_MEM, free_bytes, total_bytes));
    return CLM_OK;
}

static clm_buffer_type *device_buffer_type(clm_device *dev) { return &((cann_device_ctx *)dev->context)->buft; }

static clm_buffer_type *device_host_buffer_type(clm_device *dev) {
    return dev->caps.host_buffer ? &((cann_device_ctx *)dev->context)->host_buft : NULL;
}

static bool device_supports_buft(clm_device *dev, const clm_buffer_type *buft) {
    return buft == &dev_ctx(dev)->buft || buft == &dev_ctx(dev)->mapped_buft || buft == &dev_ctx(dev)->image_buft;
}

static clm_status device_buffer_from_host_ptr(clm_device *dev, void *ptr, size_t size, clm_buffer **out) {
    return cann_buffer_from_host_ptr((cann_device_ctx *)dev->context, ptr, size, out);
}

static clm_status device_buffer_from_image(clm_device *dev, void *ptr, size_t size, clm_buffer **out) {
    return cann_buffer_from_image((cann_device_ctx *)dev->context, ptr, size, out);
}

static bool device_maps_host_type(const clm_device *dev, int32_t type) {
    (void)dev;
    return cann_type_keeps_ggml_layout(type);
}

/* A batch large enough to be worth moving weights from host memory to the device (ggml's rule). */
static bool device_offload_op(clm_device *dev, const clm_tensor *op) {
    const char *env = getenv("GGML_OP_OFFLOAD_MIN_BATCH");
    int64_t min_batch = env ? atoll(env) : 32;
    return op->ne[1] >= min_batch && op->op != CLM_OP_GET_ROWS;
}

/* ---- events --------------------------------------------------------------------------------- */
static clm_status device_event_new(clm_device *dev, clm_event **out) {
    clm_status st = cann_set_device(dev_ctx(dev)->device);
    if (st != CLM_OK) return st;
    aclrtEvent acl_event = NULL;
    CANN_ACL(aclrtCreateEvent(&acl_event));
    clm_event *event = malloc(sizeof(*event));
    if (event == NULL) {
        aclrtDestroyEvent(acl_event);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    event->device = dev;
    event->context = acl_event;
    *out = event;
    return CLM_OK;
}

static void device_event_free(clm_device *dev, clm_event *event) {
    if (cann_set_device(dev_ctx(dev)->device) == CLM_OK) aclrtDestroyEvent(event->context);
    free(event);
}

static clm_status device_event_synchronize(clm_device *dev, clm_event *event) {
    clm_status st = cann_set_device(dev_ctx(dev)->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtSynchronizeEvent(event->context));
    return CLM_OK;
}

static const struct clm_device_i cann_device_iface = {
    .get_name = device_name,
    .get_description = device_description,
    .get_memory = device_memory,
    .get_type = device_type,
    .init_backend = cann_backend_init,
    .get_buffer_type = device_buffer_type,
    .get_host_buffer_type = device_host_buffer_type,
    .buffer_from_host_ptr = device_buffer_from_host_ptr,
    .maps_host_type = device_maps_host_type,
    .buffer_from_image = device_buffer_from_image,
    .supports_op = cann_supports_op,
    .supports_buft = device_supports_buft,
    .offload_op = device_offload_op,
    .event_new = device_event_new,
    .event_free = device_event_free,
    .event_synchronize = device_event_synchronize,
};

/* ---- registry ------------------------------------------------------------------------------- */
static void reg_init(void) {
    aclError err = aclInit(NULL);
    if (err != ACL_SUCCESS && err != ACL_ERROR_REPEAT_INITIALIZE) {
        reg_status = cann_acl_error(err, "aclInit");
        snprintf(reg_error, sizeof(reg_error), "%s", clm_last_error());
        return;
    }
    aclGetRecentErrMsg();
    uint32_t count = 0;
    err = aclrtGetDeviceCount(&count);
    if (err != ACL_SUCCESS) {
        reg_status = cann_acl_error(err, "aclrtGetDeviceCount");
        snprintf(reg_error, sizeof(reg_error), "%s", clm_last_error());
        return;
    }
    if (count > CANN_MAX_DEVICES) count = CANN_MAX_DEVICES;
    const char *soc = aclrtGetSocName();
    bool pinned = getenv("GGML_CANN_NO_PINNED") == NULL;
    /* Kernels read host memory registered for the device only where the device's memory is the
     * host's: on an NPU weights read across PCIe every token would be far slower than a copy. */
    bool device_is_host = strcmp(CLM_RUNTIME_NAME, "acl_host") == 0;
    for (uint32_t i = 0; i < count; i++) {
        cann_device_ctx *ctx = &cann_device_ctxs[i];
        clm_device *dev = &cann_devices[i];
        ctx->device = (int)i;
        snprintf(ctx->name, sizeof(ctx->name), "CANN%u", i);
        snprintf(ctx->description, sizeof(ctx->description), "%s", soc ? soc : "unknown Ascend device");
        *dev = (clm_device){
            .iface = cann_device_iface,
            .reg = &cann_reg,
            .id = (int32_t)i,
            .caps = {.async = true, .host_buffer = pinned, .events = true, .buffer_from_host_ptr = device_is_host},
            .context = ctx,
        };
        cann_buffer_types_init(ctx, dev);
        cann_device_ptrs[i] = dev;
    }
    cann_reg = (clm_reg){.name = "CANN", .n_devices = count, .devices = cann_device_ptrs, .context = NULL};
    reg_status = CLM_OK;
}

clm_status clm_cann_reg(clm_reg **out) {
    CLM_CHECK_ARG(out != NULL, "clm_cann_reg: out is NULL");
    pthread_once(&reg_once, reg_init);
    if (reg_status != CLM_OK) {
        *out = NULL;
        return clm_error(reg_status, "CANN registry unavailable: %s", reg_error);
    }
    *out = &cann_reg;
    return CLM_OK;
}
