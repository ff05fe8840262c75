/* backend.c - the public API over the function tables: registry, devices, buffer types,
 * buffers, tensor placement and copies, backends and events. Argument checks live here so each
 * backend implementation can assume well-formed calls. */
#include <stdlib.h>
#include <string.h>

#include "clm_impl.h"

/* ---- registry and devices ----------------------------------------------------------------- */
const char *clm_reg_name(const clm_reg *reg) { return reg ? reg->name : NULL; }

size_t clm_reg_device_count(const clm_reg *reg) { return reg ? reg->n_devices : 0; }

clm_status clm_reg_device(const clm_reg *reg, size_t index, clm_device **out) {
    CLM_CHECK_ARG(reg != NULL && out != NULL, "clm_reg_device: NULL argument");
    CLM_CHECK_ARG(index < reg->n_devices, "clm_reg_device: no device %zu (%s has %zu)", index, reg->name,
                  reg->n_devices);
    *out = reg->devices[index];
    return CLM_OK;
}

const char *clm_device_name(const clm_device *dev) { return dev->iface.get_name(dev); }
const char *clm_device_description(const clm_device *dev) { return dev->iface.get_description(dev); }
int32_t clm_device_get_type(const clm_device *dev) { return dev->iface.get_type(dev); }
int32_t clm_device_id(const clm_device *dev) { return dev->id; }
bool clm_device_caps_async(const clm_device *dev) { return dev->caps.async; }
bool clm_device_caps_events(const clm_device *dev) { return dev->caps.events; }
bool clm_device_caps_host_buffer(const clm_device *dev) { return dev->caps.host_buffer; }
bool clm_device_caps_buffer_from_host_ptr(const clm_device *dev) {
    return dev->caps.buffer_from_host_ptr && dev->iface.buffer_from_host_ptr != NULL;
}

bool clm_device_maps_host_type(const clm_device *dev, int32_t type) {
    return clm_device_caps_buffer_from_host_ptr(dev) && dev->iface.maps_host_type != NULL &&
           dev->iface.maps_host_type(dev, type);
}

clm_status clm_device_buffer_from_host_ptr(clm_device *dev, void *ptr, size_t size, clm_buffer **out) {
    CLM_CHECK_ARG(dev != NULL && ptr != NULL && out != NULL, "clm_device_buffer_from_host_ptr: NULL argument");
    *out = NULL;
    if (!clm_device_caps_buffer_from_host_ptr(dev))
        return clm_error(CLM_ERR_UNSUPPORTED, "%s: buffers over host memory need a device whose memory is the "
                         "host's (acl_host); copy the data into a device buffer", dev->iface.get_name(dev));
    CLM_CHECK_ARG(size > 0, "clm_device_buffer_from_host_ptr: size is 0");
    return dev->iface.buffer_from_host_ptr(dev, ptr, size, out);
}

clm_status clm_device_buffer_from_image(clm_device *dev, void *ptr, size_t size, clm_buffer **out) {
    CLM_CHECK_ARG(dev != NULL && ptr != NULL && out != NULL, "clm_device_buffer_from_image: NULL argument");
    *out = NULL;
    if (!clm_device_caps_buffer_from_host_ptr(dev) || dev->iface.buffer_from_image == NULL)
        return clm_error(CLM_ERR_UNSUPPORTED, "%s: buffers over a device image in host memory need a device whose "
                         "memory is the host's (acl_host); copy the data into a device buffer", dev->iface.get_name(dev));
    CLM_CHECK_ARG(size > 0, "clm_device_buffer_from_image: size is 0");
    return dev->iface.buffer_from_image(dev, ptr, size, out);
}

clm_status clm_device_memory(clm_device *dev, size_t *free_bytes, size_t *total_bytes) {
    CLM_CHECK_ARG(dev != NULL && free_bytes != NULL && total_bytes != NULL, "clm_device_memory: NULL argument");
    return dev->iface.get_memory(dev, free_bytes, total_bytes);
}

clm_status clm_device_init_backend(clm_device *dev, clm_backend **out) {
    CLM_CHECK_ARG(dev != NULL && out != NULL, "clm_device_init_backend: NULL argument");
    *out = NULL;
    return dev->iface.init_backend(dev, out);
}

clm_buffer_type *clm_device_buffer_type(clm_device *dev) { return dev->iface.get_buffer_type(dev); }

clm_buffer_type *clm_device_host_buffer_type(clm_device *dev) {
    return dev->iface.get_host_buffer_type ? dev->iface.get_host_buffer_type(dev) : NULL;
}

bool clm_device_supports_op(clm_device *dev, const clm_tensor *op) {
    return dev != NULL && op != NULL && dev->iface.supports_op(dev, op);
}

clm_status clm_device_supports_graph(clm_device *dev, const clm_graph *graph, uint8_t *out, size_t n) {
    CLM_CHECK_ARG(dev != NULL && graph != NULL && (out != NULL || graph->n_nodes == 0),
                  "clm_device_supports_graph: NULL argument");
    CLM_CHECK_ARG(n >= graph->n_nodes, "clm_device_supports_graph: %zu results for %zu nodes", n, graph->n_nodes);
    for (size_t i = 0; i < graph->n_nodes; i++) out[i] = clm_device_supports_op(dev, graph->nodes[i]) ? 1 : 0;
    return CLM_OK;
}

bool clm_device_supports_buft(clm_device *dev, const clm_buffer_type *buft) {
    return dev != NULL && buft != NULL && dev->iface.supports_buft(dev, buft);
}

bool clm_device_offload_op(clm_device *dev, const clm_tensor *op) {
    return dev != NULL && op != NULL && dev->iface.offload_op && dev->iface.offload_op(dev, op);
}

clm_status clm_device_event_new(clm_device *dev, clm_event **out) {
    CLM_CHECK_ARG(dev != NULL && out != NULL, "clm_device_event_new: NULL argument");
    *out = NULL;
    if (dev->iface.event_new == NULL) return clm_error(CLM_ERR_UNSUPPORTED, "%s has no events", clm_device_name(dev));
    return dev->iface.event_new(dev, out);
}

void clm_event_free(clm_event *event) {
    if (event != NULL) event->device->iface.event_free(event->device, event);
}

clm_status clm_event_synchronize(clm_event *event) {
    CLM_CHECK_ARG(event != NULL, "clm_event_synchronize: NULL event");
    return event->device->iface.event_synchronize(event->device, event);
}

/* ---- buffer types and buffers ----------------------------------------------------------------- */
const char *clm_buft_name(const clm_buffer_type *buft) { return buft->iface.get_name(buft); }
size_t clm_buft_alignment(const clm_buffer_type *buft) { return buft->iface.get_alignment(buft); }
bool clm_buft_is_host(const clm_buffer_type *buft) { return buft->iface.is_host && buft->iface.is_host(buft); }
clm_device *clm_buft_device(const clm_buffer_type *buft) { return buft->device; }

size_t clm_buft_max_size(const clm_buffer_type *buft) {
    return buft->iface.get_max_size ? buft->iface.get_max_size(buft) : SIZE_MAX;
}

size_t clm_buft_alloc_size(const clm_buffer_type *buft, const clm_tensor *tensor) {
    return buft->iface.get_alloc_size ? buft->iface.get_alloc_size(buft, tensor) : clm_nbytes(tensor);
}

clm_status clm_buft_alloc_buffer(clm_buffer_type *buft, size_t size, clm_buffer **out) {
    CLM_CHECK_ARG(buft != NULL && out != NULL, "clm_buft_alloc_buffer: NULL argument");
    *out = NULL;
    CLM_CHECK_ARG(size <= clm_buft_max_size(buft), "clm_buft_alloc_buffer: %zu bytes exceed %s's maximum %zu", size,
                  clm_buft_name(buft), clm_buft_max_size(buft));
    return buft->iface.alloc_buffer(buft, size, out);
}

clm_status clm_buffer_init(clm_buffer_type *buft, struct clm_buffer_i iface, void *context, size_t size,
                           clm_buffer **out) {
    clm_buffer *buffer = calloc(1, sizeof(*buffer));
    if (buffer == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory for a buffer object");
    buffer->iface = iface;
    buffer->buft = buft;
    buffer->context = context;
    buffer->size = size;
    buffer->usage = CLM_BUFFER_USAGE_ANY;
    *out = buffer;
    return CLM_OK;
}

void clm_buffer_free(clm_buffer *buffer) {
    if (buffer == NULL) return;
    if (buffer->iface.free_buffer) buffer->iface.free_buffer(buffer);
    free(buffer);
}

void *clm_buffer_base(const clm_buffer *buffer) {
    return buffer->size == 0 ? NULL : buffer->iface.get_base((clm_buffer *)buffer);
}

size_t clm_buffer_size(const clm_buffer *buffer) { return buffer->size; }
clm_buffer_type *clm_buffer_buft(const clm_buffer *buffer) { return buffer->buft; }
void clm_buffer_set_usage(clm_buffer *buffer, int32_t usage) { buffer->usage = usage; }
int32_t clm_buffer_get_usage(const clm_buffer *buffer) { return buffer->usage; }
bool clm_buffer_is_host(const clm_buffer *buffer) { return clm_buft_is_host(buffer->buft); }

clm_status clm_buffer_get_raw(clm_buffer *buffer, size_t offset, void *dst, size_t size) {
    CLM_CHECK_ARG(buffer != NULL && (dst != NULL || size == 0), "clm_buffer_get_raw: NULL argument");
    CLM_CHECK_ARG(offset <= buffer->size && size <= buffer->size - offset,
                  "clm_buffer_get_raw: bytes [%zu, %zu) are outside the %zu-byte buffer", offset, offset + size,
                  buffer->size);
    if (buffer->iface.get_raw == NULL)
        return clm_error(CLM_ERR_UNSUPPORTED, "clm_buffer_get_raw: %s buffers have no raw read",
                         clm_buft_name(buffer->buft));
    return size == 0 ? CLM_OK : buffer->iface.get_raw(buffer, offset, dst, size);
}

clm_status clm_buffer_clear(clm_buffer *buffer, uint8_t value) {
    CLM_CHECK_ARG(buffer != NULL, "clm_buffer_clear: NULL buffer");
    return buffer->size == 0 ? CLM_OK : buffer->iface.clear(buffer, value);
}

/* ---- tensor placement and synchronous copies ------------------------------------------------- */
clm_status clm_tensor_alloc(clm_buffer *buffer, clm_tensor *tensor, size_t offset) {
    CLM_CHECK_ARG(buffer != NULL && tensor != NULL, "clm_tensor_alloc: NULL argument");
    CLM_CHECK_ARG(tensor->data == NULL && tensor->view_src == NULL,
                  "clm_tensor_alloc: '%s' is already allocated or is a view", tensor->name);
    size_t align = clm_buft_alignment(buffer->buft);
    CLM_CHECK_ARG(offset % align == 0, "clm_tensor_alloc: offset %zu of '%s' is not a multiple of %zu", offset,
                  tensor->name, align);
    size_t size = clm_buft_alloc_size(buffer->buft, tensor);
    CLM_CHECK_ARG(offset <= buffer->size && size <= buffer->size - offset,
                  "clm_tensor_alloc: '%s' (%zu bytes at offset %zu) does not fit in a buffer of %zu bytes",
                  tensor->name, size, offset, buffer->size);
    tensor->buffer = buffer;
    tensor->data = (char *)clm_buffer_base(buffer) + offset;
    if (buffer->iface.init_tensor) {
        clm_status st = buffer->iface.init_tensor(buffer, tensor);
        if (st != CLM_OK) {
            tensor->buffer = NULL;
            tensor->data = NULL;
            return st;
        }
    }
    return CLM_OK;
}

clm_status clm_tensor_view_init(clm_tensor *tensor) {
    CLM_CHECK_ARG(tensor != NULL && tensor->view_src != NULL, "clm_tensor_view_init: not a view");
    CLM_CHECK_ARG(tensor->view_src->buffer != NULL && tensor->view_src->data != NULL,
                  "clm_tensor_view_init: the source of view '%s' is not allocated", tensor->name);
    tensor->buffer = tensor->view_src->buffer;
    tensor->data = (char *)tensor->view_src->data + tensor->view_offs;
    clm_buffer *buffer = tensor->buffer;
    return buffer->iface.init_tensor ? buffer->iface.init_tensor(buffer, tensor) : CLM_OK;
}

static clm_status check_range(const clm_tensor *t, size_t offset, size_t size, const char *what) {
    CLM_CHECK_ARG(t != NULL, "%s: NULL tensor", what);
    CLM_CHECK_ARG(t->buffer != NULL && t->data != NULL, "%s: tensor '%s' is not allocated", what, t->name);
    size_t nbytes = clm_nbytes(t);
    CLM_CHECK_ARG(offset <= nbytes && size <= nbytes - offset,
                  "%s: bytes [%zu, %zu) are outside tensor '%s' of %zu bytes", what, offset, offset + size,
                  t->name, nbytes);
    return CLM_OK;
}

clm_status clm_tensor_set(clm_tensor *tensor, const void *data, size_t offset, size_t size) {
    clm_status st = check_range(tensor, offset, size, "clm_tensor_set");
    if (st != CLM_OK || size == 0) return st;
    CLM_CHECK_ARG(data != NULL, "clm_tensor_set: data is NULL");
    return tensor->buffer->iface.set_tensor(tensor->buffer, tensor, data, offset, size);
}

clm_status clm_tensor_get(const clm_tensor *tensor, void *data, size_t offset, size_t size) {
    clm_status st = check_range(tensor, offset, size, "clm_tensor_get");
    if (st != CLM_OK || size == 0) return st;
    CLM_CHECK_ARG(data != NULL, "clm_tensor_get: data is NULL");
    return tensor->buffer->iface.get_tensor(tensor->buffer, tensor, data, offset, size);
}

clm_status clm_tensor_memset(clm_tensor *tensor, uint8_t value, size_t offset, size_t size) {
    clm_status st = check_range(tensor, offset, size, "clm_tensor_memset");
    if (st != CLM_OK || size == 0) return st;
    return tensor->buffer->iface.memset_tensor(tensor->buffer, tensor, value, offset, size);
}

clm_status clm_tensor_copy(const clm_tensor *src, clm_tensor *dst) {
    clm_status st = check_range(src, 0, 0, "clm_tensor_copy");
    if (st == CLM_OK) st = check_range(dst, 0, 0, "clm_tensor_copy");
    if (st != CLM_OK) return st;
    CLM_CHECK_ARG(src->type == dst->type && clm_nbytes(src) == clm_nbytes(dst),
                  "clm_tensor_copy: '%s' and '%s' differ in type or size", src->name, dst->name);
    if (src == dst) return CLM_OK;
    if (clm_buffer_is_host(src->buffer)) return clm_tensor_set(dst, src->data, 0, clm_nbytes(src));
    if (clm_buffer_is_host(dst->buffer)) return clm_tensor_get(src, dst->data, 0, clm_nbytes(src));
    if (dst->buffer->iface.cpy_tensor) {
        clm_clear_error();
        st = dst->buffer->iface.cpy_tensor(dst->buffer, src, dst);
        if (st != CLM_ERR_UNSUPPORTED) return st;
    }
    /* Stage through host memory. */
    size_t n = clm_nbytes(src);
    void *tmp = malloc(n);
    if (tmp == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_tensor_copy: cannot stage %zu bytes", n);
    st = clm_tensor_get(src, tmp, 0, n);
    if (st == CLM_OK) st = clm_tensor_set(dst, tmp, 0, n);
    free(tmp);
    return st;
}

/* ---- backends ----------------------------------------------------------------------------------- */
/* Quantized tensors may be stored in a device layout that only the buffer's synchronous
 * set/get/cpy paths know (as in ggml's CANN backend): async copies of them go that way. */
static bool has_device_layout(const clm_tensor *tensor) {
    return clm_type_is_quantized(clm_tensor_storage(tensor)->type) && !clm_buffer_is_host(tensor->buffer);
}

void clm_backend_free(clm_backend *backend) {
    if (backend != NULL) backend->iface.free(backend);
}

const char *clm_backend_name(const clm_backend *backend) { return backend->iface.get_name(backend); }
clm_device *clm_backend_device(const clm_backend *backend) { return backend->device; }

clm_status clm_backend_set_tensor_async(clm_backend *backend, clm_tensor *tensor, const void *data, size_t offset,
                                        size_t size) {
    CLM_CHECK_ARG(backend != NULL, "clm_backend_set_tensor_async: NULL backend");
    clm_status st = check_range(tensor, offset, size, "clm_backend_set_tensor_async");
    if (st != CLM_OK || size == 0) return st;
    CLM_CHECK_ARG(data != NULL, "clm_backend_set_tensor_async: data is NULL");
    if (backend->iface.set_tensor_async == NULL || has_device_layout(tensor)) {
        if ((st = clm_backend_synchronize(backend)) != CLM_OK) return st;
        return clm_tensor_set(tensor, data, offset, size);
    }
    return backend->iface.set_tensor_async(backend, tensor, data, offset, size);
}

clm_status clm_backend_get_tensor_async(clm_backend *backend, const clm_tensor *tensor, void *data, size_t offset,
                                        size_t size) {
    CLM_CHECK_ARG(backend != NULL, "clm_backend_get_tensor_async: NULL backend");
    clm_status st = check_range(tensor, offset, size, "clm_backend_get_tensor_async");
    if (st != CLM_OK || size == 0) return st;
    CLM_CHECK_ARG(data != NULL, "clm_backend_get_tensor_async: data is NULL");
    if (backend->iface.get_tensor_async == NULL || has_device_layout(tensor)) {
        if ((st = clm_backend_synchronize(backend)) != CLM_OK) return st;
        return clm_tensor_get(tensor, data, offset, size);
    }
    return backend->iface.get_tensor_async(backend, tensor, data, offset, size);
}

clm_status clm_backend_cpy_tensor_async(clm_backend *backend_src, clm_backend *backend_dst, const clm_tensor *src,
                                        clm_tensor *dst) {
    CLM_CHECK_ARG(backend_src != NULL && backend_dst != NULL, "clm_backend_cpy_tensor_async: NULL backend");
    clm_status st = check_range(src, 0, 0, "clm_backend_cpy_tensor_async");
    if (st == CLM_OK) st = check_range(dst, 0, 0, "clm_backend_cpy_tensor_async");
    if (st != CLM_OK) return st;
    CLM_CHECK_ARG(src->type == dst->type && clm_nbytes(src) == clm_nbytes(dst),
                  "clm_backend_cpy_tensor_async: '%s' and '%s' differ in type or size", src->name, dst->name);
    if (src == dst) return CLM_OK;
    if (backend_dst->iface.cpy_tensor_async && !has_device_layout(src)) {
        clm_clear_error();
        st = backend_dst->iface.cpy_tensor_async(backend_src, backend_dst, src, dst);
        if (st != CLM_ERR_UNSUPPORTED) return st;
    }
    /* Not possible asynchronously: wait for both streams, then copy synchronously. */
    if ((st = clm_backend_synchronize(backend_src)) != CLM_OK) return st;
    if ((st = clm_backend_synchronize(backend_dst)) != CLM_OK) return st;
    return clm_tensor_copy(src, dst);
}

clm_status clm_backend_synchronize(clm_backend *backend) {
    CLM_CHECK_ARG(backend != NULL, "clm_backend_synchronize: NULL backend");
    return backend->iface.synchronize ? backend->iface.synchronize(backend) : CLM_OK;
}

clm_status clm_backend_graph_compute(clm_backend *backend, clm_graph *graph) {
    CLM_CHECK_ARG(backend != NULL && graph != NULL, "clm_backend_graph_compute: NULL argument");
    return backend->iface.graph_compute(backend, graph);
}

clm_status clm_backend_event_record(clm_backend *backend, clm_event *event) {
    CLM_CHECK_ARG(backend != NULL && event != NULL, "clm_backend_event_record: NULL argument");
    CLM_CHECK_ARG(backend->iface.event_record != NULL, "%s has no events", clm_backend_name(backend));
    return backend->iface.event_record(backend, event);
}

clm_status clm_backend_event_wait(clm_backend *backend, clm_event *event) {
    CLM_CHECK_ARG(backend != NULL && event != NULL, "clm_backend_event_wait: NULL argument");
    CLM_CHECK_ARG(backend->iface.event_wait != NULL, "%s has no events", clm_backend_name(backend));
    return backend->iface.event_wait(backend, event);
}
