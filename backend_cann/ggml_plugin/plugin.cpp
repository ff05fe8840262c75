// plugin.cpp - cann-llm's CANN backend as a ggml backend (libggml-cann-llm.so): the registry
// "CANN_LLM", one device per CANN device ("CANN_LLM0", ...), its buffer type, buffers, backends and
// events, each a thin layer over the clm_* interfaces. ggml loads it at run time (GGML_BACKEND_DL)
// through ggml_backend_init / ggml_backend_score.
//
// ggml's interfaces return void where ours return a status: a failed copy or synchronize there is
// fatal in ggml's convention (ggml_abort with our message), a failed allocation returns NULL and
// a failed graph GGML_STATUS_FAILED, which ggml reports.
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "cann_llm.h"
extern "C" {
#include "core/clm_impl.h"   // the C core's internal tables (no C++ guards of its own)
}
#include "ggml-backend-impl.h"
#include "tensor_map.h"

namespace cann_llm_plugin {

namespace {

struct plugin_device {
    clm_device *clm = nullptr;
    std::string name;          // "CANN_LLM0"
    std::string description;   // "acl_host" or the Ascend SoC
    ggml_backend_buffer_type buft{};
    ggml_backend_device device{};
};

struct plugin_backend {
    clm_backend *clm = nullptr;
    plugin_device *device = nullptr;
    graph_map graphs;
};

[[noreturn]] void fail(const char *what) {
    ggml_abort(__FILE__, __LINE__, "CANN_LLM: %s: %s", what, clm_last_error());
}

void report(const char *what) { std::fprintf(stderr, "CANN_LLM: %s: %s\n", what, clm_last_error()); }

plugin_device *device_of(ggml_backend_dev_t dev) { return static_cast<plugin_device *>(dev->context); }
plugin_device *device_of_buft(ggml_backend_buffer_type_t buft) { return device_of(buft->device); }
plugin_backend *backend_of(ggml_backend_t backend) { return static_cast<plugin_backend *>(backend->context); }
clm_buffer *buffer_of(ggml_backend_buffer_t buffer) { return static_cast<clm_buffer *>(buffer->context); }
clm_buffer_type *clm_buft_of(ggml_backend_buffer_type_t buft) {
    return clm_device_buffer_type(device_of_buft(buft)->clm);
}

// A one-call mirror of a tensor; a tensor ggml gives us that cannot be mirrored is a bug upstream
// of us (supports_op declined it), so it is fatal like any other failed copy.
struct call_mirror {
    single_mirror m;
    explicit call_mirror(const ggml_tensor *t) {
        if (!m.fill(t)) {
            ggml_abort(__FILE__, __LINE__, "CANN_LLM: tensor '%s' of type %s has no cann-llm counterpart", t->name,
                       ggml_type_name(t->type));
        }
    }
    clm_tensor *get() { return &m.tensor; }
};

// ---- buffers -------------------------------------------------------------------------------------

void buffer_free(ggml_backend_buffer_t buffer) { clm_buffer_free(buffer_of(buffer)); }

void *buffer_get_base(ggml_backend_buffer_t buffer) { return clm_buffer_base(buffer_of(buffer)); }

ggml_status buffer_init_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor) {
    clm_buffer *b = buffer_of(buffer);
    if (b->iface.init_tensor == nullptr || tensor->view_src != nullptr) return GGML_STATUS_SUCCESS;
    single_mirror m;
    if (!m.fill(tensor)) return GGML_STATUS_SUCCESS;   // no layout of ours applies
    if (b->iface.init_tensor(b, &m.tensor) != CLM_OK) {
        report("init_tensor");
        return GGML_STATUS_FAILED;
    }
    return GGML_STATUS_SUCCESS;
}

void refuse_converted(const ggml_tensor *tensor, const char *what);

void buffer_memset_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, uint8_t value, size_t offset,
                          size_t size) {
    refuse_converted(tensor, "memset_tensor");
    call_mirror m(tensor);
    if (clm_tensor_memset(m.get(), value, offset, size) != CLM_OK) fail("memset_tensor");
}

// A K-quant (or other converted) tensor: whole ggml blocks in, converted to the stored type on the
// host, then written as that type (and its device layout).
void set_converted(ggml_tensor *tensor, clm_tensor *stored, const void *data, size_t offset, size_t size) {
    const size_t src_block = ggml_type_size(tensor->type);
    const int64_t block_elems = ggml_blck_size(tensor->type);
    if (offset % src_block != 0 || size % src_block != 0) {
        ggml_abort(__FILE__, __LINE__, "CANN_LLM: set_tensor: bytes [%zu, %zu) of %s tensor '%s' are not whole blocks "
                   "(it is converted to %s block by block)", offset, offset + size, ggml_type_name(tensor->type),
                   tensor->name, clm_type_name(stored->type));
    }
    const int64_t first = static_cast<int64_t>(offset / src_block) * block_elems;
    const int64_t n = static_cast<int64_t>(size / src_block) * block_elems;
    const size_t out_offset = clm_row_size(stored->type, first), out_size = clm_row_size(stored->type, n);
    std::vector<uint8_t> converted(out_size);
    if (clm_convert(tensor->type, data, stored->type, converted.data(), n) != CLM_OK ||
        clm_tensor_set(stored, converted.data(), out_offset, out_size) != CLM_OK) {
        fail("set_tensor (converting)");
    }
}

void buffer_set_tensor(ggml_backend_buffer_t buffer, ggml_tensor *tensor, const void *data, size_t offset,
                       size_t size) {
    call_mirror m(tensor);
    if (is_converted(tensor)) return set_converted(tensor, m.get(), data, offset, size);
    if (clm_tensor_set(m.get(), data, offset, size) != CLM_OK) fail("set_tensor");
}

// A converted tensor has no ggml-layout bytes to give back (Q4_K -> Q4_1 is exact one way only).
void refuse_converted(const ggml_tensor *tensor, const char *what) {
    if (!is_converted(tensor)) return;
    ggml_abort(__FILE__, __LINE__, "CANN_LLM: %s: '%s' was converted from %s to %s when it was loaded and cannot be "
               "read or written in %s's layout (CANN_LLM_GGML_KQUANTS=cpu keeps K-quants on the CPU backend)",
               what, tensor->name, ggml_type_name(tensor->type), clm_type_name(stored_type(tensor)),
               ggml_type_name(tensor->type));
}

void buffer_get_tensor(ggml_backend_buffer_t buffer, const ggml_tensor *tensor, void *data, size_t offset,
                       size_t size) {
    refuse_converted(tensor, "get_tensor");
    call_mirror m(tensor);
    if (clm_tensor_get(m.get(), data, offset, size) != CLM_OK) fail("get_tensor");
}

bool buffer_cpy_tensor(ggml_backend_buffer_t buffer, const ggml_tensor *src, ggml_tensor *dst) {
    if (clm_buffer_of(src->buffer) == nullptr) return false;   // ggml copies through the host
    call_mirror s(src), d(dst);
    if (clm_tensor_copy(s.get(), d.get()) != CLM_OK) fail("cpy_tensor");
    return true;
}

void buffer_clear(ggml_backend_buffer_t buffer, uint8_t value) {
    if (clm_buffer_clear(buffer_of(buffer), value) != CLM_OK) fail("clear");
}

const ggml_backend_buffer_i buffer_iface = {
    /* .free_buffer   = */ buffer_free,
    /* .get_base      = */ buffer_get_base,
    /* .init_tensor   = */ buffer_init_tensor,
    /* .memset_tensor = */ buffer_memset_tensor,
    /* .set_tensor    = */ buffer_set_tensor,
    /* .get_tensor    = */ buffer_get_tensor,
    /* .set_tensor_2d = */ nullptr,
    /* .get_tensor_2d = */ nullptr,
    /* .cpy_tensor    = */ buffer_cpy_tensor,
    /* .clear         = */ buffer_clear,
    /* .reset         = */ nullptr,
};

// ---- buffer type ---------------------------------------------------------------------------------

const char *buft_get_name(ggml_backend_buffer_type_t buft) { return device_of_buft(buft)->name.c_str(); }

ggml_backend_buffer_t buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size) {
    clm_buffer *b = nullptr;
    if (clm_buft_alloc_buffer(clm_buft_of(buft), size, &b) != CLM_OK) {
        report("alloc_buffer");
        return nullptr;
    }
    return ggml_backend_buffer_init(buft, buffer_iface, b, size);
}

size_t buft_get_alignment(ggml_backend_buffer_type_t buft) { return clm_buft_alignment(clm_buft_of(buft)); }

size_t buft_get_max_size(ggml_backend_buffer_type_t buft) { return clm_buft_max_size(clm_buft_of(buft)); }

size_t buft_get_alloc_size(ggml_backend_buffer_type_t buft, const ggml_tensor *tensor) {
    single_mirror m;
    if (!m.fill(tensor, buft)) return ggml_nbytes(tensor);
    return clm_buft_alloc_size(clm_buft_of(buft), &m.tensor);
}

bool buft_is_host(ggml_backend_buffer_type_t buft) { return false; }

const ggml_backend_buffer_type_i buft_iface = {
    /* .get_name       = */ buft_get_name,
    /* .alloc_buffer   = */ buft_alloc_buffer,
    /* .get_alignment  = */ buft_get_alignment,
    /* .get_max_size   = */ buft_get_max_size,
    /* .get_alloc_size = */ buft_get_alloc_size,
    /* .is_host        = */ buft_is_host,
};

// ---- backend -------------------------------------------------------------------------------------

ggml_guid_t backend_guid() {
    // "cann-llm ggml v1" in ASCII: fixed, and distinct from upstream's CANN backend.
    static ggml_guid guid = {0x63, 0x61, 0x6e, 0x6e, 0x2d, 0x6c, 0x6c, 0x6d,
                             0x20, 0x67, 0x67, 0x6d, 0x6c, 0x20, 0x76, 0x31};
    return &guid;
}

const char *backend_get_name(ggml_backend_t backend) { return backend_of(backend)->device->name.c_str(); }

void backend_free(ggml_backend_t backend) {
    plugin_backend *b = backend_of(backend);
    clm_backend_free(b->clm);
    delete b;
    delete backend;
}

void backend_set_tensor_async(ggml_backend_t backend, ggml_tensor *tensor, const void *data, size_t offset,
                              size_t size) {
    call_mirror m(tensor);
    if (is_converted(tensor)) {   // a K-quant weight copied in for an offloaded op: convert, in order
        if (clm_backend_synchronize(backend_of(backend)->clm) != CLM_OK) fail("set_tensor_async");
        return set_converted(tensor, m.get(), data, offset, size);
    }
    if (clm_backend_set_tensor_async(backend_of(backend)->clm, m.get(), data, offset, size) != CLM_OK) {
        fail("set_tensor_async");
    }
}

void backend_get_tensor_async(ggml_backend_t backend, const ggml_tensor *tensor, void *data, size_t offset,
                              size_t size) {
    refuse_converted(tensor, "get_tensor_async");
    call_mirror m(tensor);
    if (clm_backend_get_tensor_async(backend_of(backend)->clm, m.get(), data, offset, size) != CLM_OK) {
        fail("get_tensor_async");
    }
}

bool backend_is_ours(ggml_backend_t backend);

bool backend_cpy_tensor_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const ggml_tensor *src,
                              ggml_tensor *dst) {
    if (!backend_is_ours(backend_src) || !backend_is_ours(backend_dst)) return false;
    if (clm_buffer_of(src->buffer) == nullptr || clm_buffer_of(dst->buffer) == nullptr) return false;
    call_mirror s(src), d(dst);
    clm_status st = clm_backend_cpy_tensor_async(backend_of(backend_src)->clm, backend_of(backend_dst)->clm,
                                                 s.get(), d.get());
    if (st == CLM_ERR_UNSUPPORTED) return false;
    if (st != CLM_OK) fail("cpy_tensor_async");
    return true;
}

void backend_synchronize(ggml_backend_t backend) {
    if (clm_backend_synchronize(backend_of(backend)->clm) != CLM_OK) fail("synchronize");
}

ggml_status backend_graph_compute(ggml_backend_t backend, ggml_cgraph *cgraph) {
    plugin_backend *b = backend_of(backend);
    clm_graph *graph = nullptr;
    if (b->graphs.map(cgraph, &graph) != CLM_OK || clm_backend_graph_compute(b->clm, graph) != CLM_OK) {
        report("graph_compute");
        return GGML_STATUS_FAILED;
    }
    return GGML_STATUS_SUCCESS;
}

void backend_event_record(ggml_backend_t backend, ggml_backend_event_t event) {
    if (clm_backend_event_record(backend_of(backend)->clm, static_cast<clm_event *>(event->context)) != CLM_OK) {
        fail("event_record");
    }
}

void backend_event_wait(ggml_backend_t backend, ggml_backend_event_t event) {
    if (!backend_is_ours(backend)) fail("event_wait on a backend that is not CANN_LLM");
    if (clm_backend_event_wait(backend_of(backend)->clm, static_cast<clm_event *>(event->context)) != CLM_OK) {
        fail("event_wait");
    }
}

const ggml_backend_i backend_iface = {
    /* .get_name            = */ backend_get_name,
    /* .free                = */ backend_free,
    /* .set_tensor_async    = */ backend_set_tensor_async,
    /* .get_tensor_async    = */ backend_get_tensor_async,
    /* .set_tensor_2d_async = */ nullptr,
    /* .get_tensor_2d_async = */ nullptr,
    /* .cpy_tensor_async    = */ backend_cpy_tensor_async,
    /* .synchronize         = */ backend_synchronize,
    /* .graph_plan_create   = */ nullptr,
    /* .graph_plan_free     = */ nullptr,
    /* .graph_plan_update   = */ nullptr,
    /* .graph_plan_compute  = */ nullptr,
    /* .graph_compute       = */ backend_graph_compute,
    /* .event_record        = */ backend_event_record,
    /* .event_wait          = */ backend_event_wait,
    /* .graph_optimize      = */ nullptr,
};

bool backend_is_ours(ggml_backend_t backend) {
    return backend != nullptr && ggml_guid_matches(backend->guid, backend_guid());
}

// ---- device --------------------------------------------------------------------------------------

const char *dev_get_name(ggml_backend_dev_t dev) { return device_of(dev)->name.c_str(); }

const char *dev_get_description(ggml_backend_dev_t dev) { return device_of(dev)->description.c_str(); }

void dev_get_memory(ggml_backend_dev_t dev, size_t *free_bytes, size_t *total_bytes) {
    if (clm_device_memory(device_of(dev)->clm, free_bytes, total_bytes) != CLM_OK) {
        report("get_memory");
        *free_bytes = *total_bytes = 0;
    }
}

// GPU, as upstream's CANN device: llama.cpp offloads layers (-ngl) to GPU devices only.
enum ggml_backend_dev_type dev_get_type(ggml_backend_dev_t dev) { return GGML_BACKEND_DEVICE_TYPE_GPU; }

void dev_get_props(ggml_backend_dev_t dev, ggml_backend_dev_props *props) {
    plugin_device *d = device_of(dev);
    props->name = d->name.c_str();
    props->description = d->description.c_str();
    dev_get_memory(dev, &props->memory_free, &props->memory_total);
    props->type = GGML_BACKEND_DEVICE_TYPE_GPU;
    props->device_id = nullptr;
    props->caps = {
        /* .async                = */ clm_device_caps_async(d->clm),
        /* .host_buffer          = */ false,
        /* .buffer_from_host_ptr = */ false,
        /* .events               = */ clm_device_caps_events(d->clm),
        /* .mmap_support         = */ false,
    };
}

ggml_backend_t dev_init_backend(ggml_backend_dev_t dev, const char *params) {
    plugin_device *d = device_of(dev);
    clm_backend *clm = nullptr;
    if (clm_device_init_backend(d->clm, &clm) != CLM_OK) {
        report("init_backend");
        return nullptr;
    }
    plugin_backend *b = new plugin_backend;
    b->clm = clm;
    b->device = d;
    return new ggml_backend{backend_guid(), backend_iface, dev, b};
}

ggml_backend_buffer_type_t dev_get_buffer_type(ggml_backend_dev_t dev) { return &device_of(dev)->buft; }

bool dev_supports_op(ggml_backend_dev_t dev, const ggml_tensor *op) {
    op_mirror m;
    return m.fill(op) && clm_device_supports_op(device_of(dev)->clm, &m.node.tensor);
}

bool dev_supports_buft(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft) {
    return buft == &device_of(dev)->buft;
}

bool dev_offload_op(ggml_backend_dev_t dev, const ggml_tensor *op) {
    op_mirror m;
    return m.fill(op) && clm_device_offload_op(device_of(dev)->clm, &m.node.tensor);
}

ggml_backend_event_t dev_event_new(ggml_backend_dev_t dev) {
    clm_event *event = nullptr;
    if (clm_device_event_new(device_of(dev)->clm, &event) != CLM_OK) {
        report("event_new");
        return nullptr;
    }
    return new ggml_backend_event{dev, event};
}

void dev_event_free(ggml_backend_dev_t dev, ggml_backend_event_t event) {
    clm_event_free(static_cast<clm_event *>(event->context));
    delete event;
}

void dev_event_synchronize(ggml_backend_dev_t dev, ggml_backend_event_t event) {
    if (clm_event_synchronize(static_cast<clm_event *>(event->context)) != CLM_OK) fail("event_synchronize");
}

const ggml_backend_device_i device_iface = {
    /* .get_name             = */ dev_get_name,
    /* .get_description      = */ dev_get_description,
    /* .get_memory           = */ dev_get_memory,
    /* .get_type             = */ dev_get_type,
    /* .get_props            = */ dev_get_props,
    /* .init_backend         = */ dev_init_backend,
    /* .get_buffer_type      = */ dev_get_buffer_type,
    /* .get_host_buffer_type = */ nullptr,
    /* .buffer_from_host_ptr = */ nullptr,
    /* .supports_op          = */ dev_supports_op,
    /* .supports_buft        = */ dev_supports_buft,
    /* .offload_op           = */ dev_offload_op,
    /* .event_new            = */ dev_event_new,
    /* .event_free           = */ dev_event_free,
    /* .event_synchronize    = */ dev_event_synchronize,
};

// ---- registry ------------------------------------------------------------------------------------

struct plugin_reg {
    std::vector<plugin_device *> devices;
    ggml_backend_reg reg{};
};

const char *reg_get_name(ggml_backend_reg_t reg) { return "CANN_LLM"; }

size_t reg_get_device_count(ggml_backend_reg_t reg) {
    return static_cast<plugin_reg *>(reg->context)->devices.size();
}

ggml_backend_dev_t reg_get_device(ggml_backend_reg_t reg, size_t index) {
    auto *r = static_cast<plugin_reg *>(reg->context);
    return index < r->devices.size() ? &r->devices[index]->device : nullptr;
}

void *reg_get_proc_address(ggml_backend_reg_t reg, const char *name) { return nullptr; }

const ggml_backend_reg_i reg_iface = {
    /* .get_name         = */ reg_get_name,
    /* .get_device_count = */ reg_get_device_count,
    /* .get_device       = */ reg_get_device,
    /* .get_proc_address = */ reg_get_proc_address,
};

// The ggml this plugin was compiled against must be the one that loads it: ggml checks the backend
// API version, and this checks the ggml version, since the interface structs change between
// releases without a new API version.
bool same_ggml() {
    const char *running = ggml_version();
    if (std::strcmp(running, CLM_GGML_VERSION) == 0) return true;
    std::fprintf(stderr, "CANN_LLM: this plugin was built against ggml %s (backend API %d) but ggml %s loaded it; "
                 "rebuild it against that ggml (scripts/ggml_plugin.sh build)\n",
                 CLM_GGML_VERSION, GGML_BACKEND_API_VERSION, running);
    return false;
}

ggml_backend_reg_t make_reg() {
    if (!same_ggml()) return nullptr;
    clm_reg *clm = nullptr;
    if (clm_cann_reg(&clm) != CLM_OK) {
        report("CANN registry");
        return nullptr;
    }
    auto *r = new plugin_reg;
    r->reg = {GGML_BACKEND_API_VERSION, reg_iface, r};
    for (size_t i = 0; i < clm_reg_device_count(clm); i++) {
        clm_device *cdev = nullptr;
        if (clm_reg_device(clm, i, &cdev) != CLM_OK) {
            report("CANN device");
            continue;
        }
        auto *d = new plugin_device;
        d->clm = cdev;
        d->name = "CANN_LLM" + std::to_string(clm_device_id(cdev));
        d->description = clm_device_description(cdev);
        d->device = {device_iface, &r->reg, d};
        d->buft = {buft_iface, &d->device, d};
        r->devices.push_back(d);
    }
    return &r->reg;
}

}  // namespace

bool buft_is_ours(const ggml_backend_buffer_type *buft) {
    return buft != nullptr && buft->iface.get_name == buft_get_name;
}

clm_buffer *clm_buffer_of(const ggml_backend_buffer *buffer) {
    if (buffer == nullptr || buffer->iface.free_buffer != buffer_free) return nullptr;
    return static_cast<clm_buffer *>(buffer->context);
}

ggml_backend_reg_t registry() {
    static std::once_flag once;
    static ggml_backend_reg_t reg = nullptr;
    std::call_once(once, [] { reg = make_reg(); });
    return reg;
}

// Any positive score lets ggml load the plugin; the value only orders variants of one backend.
int plugin_score() { return 1; }

}  // namespace cann_llm_plugin

GGML_BACKEND_DL_IMPL(cann_llm_plugin::registry)
GGML_BACKEND_DL_SCORE_IMPL(cann_llm_plugin::plugin_score)
