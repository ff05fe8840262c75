/* clm_impl.h - internal structures of the ggml-style core: contexts, graphs and the function
 * tables (buffer type, buffer, backend, device, registry) that a backend fills in. Python never
 * sees this header; the public surface is include/cann_llm.h.
 */
#ifndef CLM_IMPL_H
#define CLM_IMPL_H

#include "cann_llm.h"

/* ---- errors: every failing path records a message for clm_last_error() ------------------------ */
clm_status clm_error(clm_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a message only if none is pending from a deeper call (keeps the root cause). */
clm_status clm_error_keep(clm_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define CLM_CHECK_ARG(cond, ...)                                    \
    do {                                                            \
        if (!(cond)) return clm_error(CLM_ERR_INVALID_ARG, __VA_ARGS__); \
    } while (0)

/* ---- contexts and graphs ------------------------------------------------------------------- */
struct clm_context {
    clm_tensor *tensors;   /* arena of max_tensors tensors, never moved */
    size_t n_tensors;
    size_t max_tensors;
    clm_graph **graphs;    /* graphs created in this context, freed with it */
    size_t n_graphs;
};

struct clm_graph {
    clm_context *ctx;
    clm_tensor **nodes;    /* computed tensors in topological order */
    size_t n_nodes;
    clm_tensor **leafs;    /* inputs and weights (op NONE) */
    size_t n_leafs;
    size_t max_nodes;
    clm_tensor **visited;  /* open-addressing set of tensors already added */
    size_t visited_size;
};

/* ---- function tables (as ggml-backend-impl.h) ------------------------------------------------ */
struct clm_buffer_type_i {
    const char *(*get_name)(const clm_buffer_type *buft);
    clm_status (*alloc_buffer)(clm_buffer_type *buft, size_t size, clm_buffer **out);
    size_t (*get_alignment)(const clm_buffer_type *buft);
    size_t (*get_max_size)(const clm_buffer_type *buft);                         /* NULL: SIZE_MAX */
    size_t (*get_alloc_size)(const clm_buffer_type *buft, const clm_tensor *t);  /* NULL: nbytes */
    bool (*is_host)(const clm_buffer_type *buft);
};

struct clm_buffer_type {
    struct clm_buffer_type_i iface;
    clm_device *device;
    void *context;
};

struct clm_buffer_i {
    void (*free_buffer)(clm_buffer *buffer);
    void *(*get_base)(clm_buffer *buffer);
    clm_status (*init_tensor)(clm_buffer *buffer, clm_tensor *tensor);            /* optional */
    clm_status (*memset_tensor)(clm_buffer *buffer, clm_tensor *tensor, uint8_t value,
                                size_t offset, size_t size);
    clm_status (*set_tensor)(clm_buffer *buffer, clm_tensor *tensor, const void *data,
                             size_t offset, size_t size);
    clm_status (*get_tensor)(clm_buffer *buffer, const clm_tensor *tensor, void *data,
                             size_t offset, size_t size);
    /* Copies src (in any buffer) into dst (in this buffer); CLM_ERR_UNSUPPORTED if it cannot. */
    clm_status (*cpy_tensor)(clm_buffer *buffer, const clm_tensor *src, clm_tensor *dst);
    clm_status (*clear)(clm_buffer *buffer, uint8_t value);
    /* The raw bytes as stored (device layouts, padding); optional. */
    clm_status (*get_raw)(clm_buffer *buffer, size_t offset, void *dst, size_t size);
};

struct clm_buffer {
    struct clm_buffer_i iface;
    clm_buffer_type *buft;
    void *context;
    size_t size;
    int32_t usage;
};

/* Creates a buffer object around a backend context (the caller owns it via clm_buffer_free). */
clm_status clm_buffer_init(clm_buffer_type *buft, struct clm_buffer_i iface, void *context,
                           size_t size, clm_buffer **out);

struct clm_backend_i {
    const char *(*get_name)(const clm_backend *backend);
    void (*free)(clm_backend *backend);
    clm_status (*set_tensor_async)(clm_backend *backend, clm_tensor *tensor, const void *data,
                                   size_t offset, size_t size);
    clm_status (*get_tensor_async)(clm_backend *backend, const clm_tensor *tensor, void *data,
                                   size_t offset, size_t size);
    /* CLM_ERR_UNSUPPORTED means "not possible": the caller falls back to a synchronous copy. */
    clm_status (*cpy_tensor_async)(clm_backend *backend_src, clm_backend *backend_dst,
                                   const clm_tensor *src, clm_tensor *dst);
    clm_status (*synchronize)(clm_backend *backend);
    clm_status (*graph_compute)(clm_backend *backend, clm_graph *graph);
    clm_status (*event_record)(clm_backend *backend, clm_event *event);
    clm_status (*event_wait)(clm_backend *backend, clm_event *event);
};

struct clm_backend {
    struct clm_backend_i iface;
    clm_device *device;
    void *context;
};

struct clm_device_i {
    const char *(*get_name)(const clm_device *dev);
    const char *(*get_description)(const clm_device *dev);
    clm_status (*get_memory)(clm_device *dev, size_t *free_bytes, size_t *total_bytes);
    int32_t (*get_type)(const clm_device *dev);
    clm_status (*init_backend)(clm_device *dev, clm_backend **out);
    clm_buffer_type *(*get_buffer_type)(clm_device *dev);
    clm_buffer_type *(*get_host_buffer_type)(clm_device *dev);                   /* optional */
    clm_status (*buffer_from_host_ptr)(clm_device *dev, void *ptr, size_t size,
                                       clm_buffer **out);                        /* optional */
    bool (*maps_host_type)(const clm_device *dev, int32_t type);                  /* optional */
    clm_status (*buffer_from_image)(clm_device *dev, void *ptr, size_t size,
                                    clm_buffer **out);                           /* optional */
    bool (*supports_op)(clm_device *dev, const clm_tensor *op);
    bool (*supports_buft)(clm_device *dev, const clm_buffer_type *buft);
    bool (*offload_op)(clm_device *dev, const clm_tensor *op);                   /* optional */
    clm_status (*event_new)(clm_device *dev, clm_event **out);
    void (*event_free)(clm_device *dev, clm_event *event);
    clm_status (*event_synchronize)(clm_device *dev, clm_event *event);
};

struct clm_device_caps {
    bool async;
    bool host_buffer;
    bool events;
    bool buffer_from_host_ptr;
};

struct clm_device {
    struct clm_device_i iface;
    clm_reg *reg;
    int32_t id;
    struct clm_device_caps caps;
    void *context;
};

struct clm_event {
    clm_device *device;
    void *context;
};

struct clm_reg {
    const char *name;
    size_t n_devices;
    clm_device **devices;
    void *context;
};

/* ---- helpers shared by backends ---------------------------------------------------------------- */
/* The tensor whose buffer holds the data: a view's ultimate source, else the tensor itself. */
const clm_tensor *clm_tensor_storage(const clm_tensor *tensor);
bool clm_can_repeat(const clm_tensor *small, const clm_tensor *big);
/* The host's AVX-512 forms of the loader's conversions and layout pack may run (convert.c). */
bool clm_host_avx512(void);
bool clm_are_same_shape(const clm_tensor *a, const clm_tensor *b);
float clm_get_op_param_f32(const clm_tensor *tensor, int i);
int32_t clm_get_op_param_i32(const clm_tensor *tensor, int i);

#endif /* CLM_IMPL_H */
