// tensor_map.cpp - ggml tensors and graphs as cann-llm mirrors (see tensor_map.h).
#include "tensor_map.h"

#include "ggml-backend-impl.h"

#include <cstdlib>
#include <cstring>

extern "C" {
#include "core/clm_impl.h"   // the C core's internal tables (no C++ guards of its own)
}

namespace cann_llm_plugin {

namespace {

struct op_rule {
    int32_t op;     // ours
    int n_src;      // sources ggml may give that we read; any beyond them makes the op unsupported
};

// ggml op -> ours. Ops missing here (and sub-ops not listed in map_op) are declined.
bool rule_of(ggml_op op, op_rule *rule) {
    switch (op) {
        case GGML_OP_NONE: *rule = {CLM_OP_NONE, 0}; return true;
        case GGML_OP_DUP: *rule = {CLM_OP_DUP, 1}; return true;
        case GGML_OP_ADD: *rule = {CLM_OP_ADD, 2}; return true;
        case GGML_OP_MUL: *rule = {CLM_OP_MUL, 2}; return true;
        case GGML_OP_SCALE: *rule = {CLM_OP_SCALE, 1}; return true;
        case GGML_OP_CPY: *rule = {CLM_OP_CPY, 2}; return true;
        case GGML_OP_CONT: *rule = {CLM_OP_CONT, 1}; return true;
        case GGML_OP_RESHAPE: *rule = {CLM_OP_RESHAPE, 1}; return true;
        case GGML_OP_VIEW: *rule = {CLM_OP_VIEW, 1}; return true;
        case GGML_OP_PERMUTE: *rule = {CLM_OP_PERMUTE, 1}; return true;
        case GGML_OP_TRANSPOSE: *rule = {CLM_OP_TRANSPOSE, 1}; return true;
        case GGML_OP_GET_ROWS: *rule = {CLM_OP_GET_ROWS, 2}; return true;
        case GGML_OP_SET_ROWS: *rule = {CLM_OP_SET_ROWS, 3}; return true;   // src, rows, destination
        case GGML_OP_RMS_NORM: *rule = {CLM_OP_RMS_NORM, 1}; return true;
        case GGML_OP_MUL_MAT: *rule = {CLM_OP_MUL_MAT, 2}; return true;
        case GGML_OP_ROPE: *rule = {CLM_OP_ROPE, 3}; return true;        // a, positions, freq factors
        case GGML_OP_SOFT_MAX: *rule = {CLM_OP_SOFT_MAX, 2}; return true;  // no attention sinks
        case GGML_OP_FLASH_ATTN_EXT: *rule = {CLM_OP_FLASH_ATTN_EXT, 4}; return true;  // no sinks
        case GGML_OP_ARGMAX: *rule = {CLM_OP_ARGMAX, 1}; return true;
        case GGML_OP_UNARY: *rule = {CLM_OP_UNARY, 1}; return true;
        case GGML_OP_GLU: *rule = {CLM_OP_GLU, 2}; return true;
        case GGML_OP_DIV: *rule = {CLM_OP_DIV, 2}; return true;
        case GGML_OP_CLAMP: *rule = {CLM_OP_CLAMP, 1}; return true;        // op_params {min, max}: the same
        case GGML_OP_SUM_ROWS: *rule = {CLM_OP_SUM_ROWS, 1}; return true;
        case GGML_OP_ARGSORT: *rule = {CLM_OP_ARGSORT, 1}; return true;    // op_params[0]: ggml's sort order
        case GGML_OP_MUL_MAT_ID: *rule = {CLM_OP_MUL_MAT_ID, 3}; return true;  // experts, b, ids
        default: return false;
    }
}

bool fill_fields(const ggml_tensor *g, clm_tensor *c, bool as_node,
                 const ggml_backend_buffer_type *buft = nullptr) {
    const int type = static_cast<int>(g->type);
    if (type < 0 || type >= CLM_TYPE_COUNT || clm_type_name(type) == nullptr) return false;
    c->type = stored_type(g, buft);
    for (int d = 0; d < CLM_MAX_DIMS; d++) {
        c->ne[d] = g->ne[d];
        c->nb[d] = g->nb[d];
    }
    if (c->type != g->type) {   // a converted whole tensor: contiguous in its stored type
        c->nb[0] = clm_type_size(c->type);
        c->nb[1] = clm_row_size(c->type, c->ne[0]);
        for (int d = 2; d < CLM_MAX_DIMS; d++) c->nb[d] = c->nb[d - 1] * static_cast<size_t>(c->ne[d - 1]);
    }
    if (as_node) {
        if (!map_op(g, &c->op, c->op_params)) return false;
    } else {
        c->op = CLM_OP_NONE;
        std::memset(c->op_params, 0, sizeof(c->op_params));
    }
    c->flags = g->flags & (CLM_TENSOR_FLAG_INPUT | CLM_TENSOR_FLAG_OUTPUT | CLM_TENSOR_FLAG_PARAM);
    c->view_offs = g->view_offs;
    c->data = g->data;
    c->buffer = clm_buffer_of(g->buffer);
    static_assert(sizeof(c->name) == sizeof(g->name), "tensor names differ in length");
    std::memcpy(c->name, g->name, sizeof(c->name));
    return true;
}

bool device_holds(int32_t type) {
    switch (type) {
        case CLM_TYPE_F32: case CLM_TYPE_F16: case CLM_TYPE_BF16: case CLM_TYPE_Q8_0: case CLM_TYPE_Q4_0:
        case CLM_TYPE_Q4_1: case CLM_TYPE_I8: case CLM_TYPE_I16: case CLM_TYPE_I32: case CLM_TYPE_I64:
        case CLM_TYPE_F64:
            return true;
        default:
            return false;
    }
}

bool convert_kquants() {
    static const bool on = [] {
        const char *mode = std::getenv("CANN_LLM_GGML_KQUANTS");
        return mode == nullptr || std::strcmp(mode, "cpu") != 0;
    }();
    return on;
}

}  // namespace

int32_t stored_type(const ggml_tensor *g, const ggml_backend_buffer_type *buft) {
    const int32_t type = g->type;
    if (buft == nullptr && g->buffer != nullptr) buft = g->buffer->buft;
    if (device_holds(type) || !convert_kquants() || g->view_src != nullptr || buft == nullptr ||
        !buft_is_ours(buft) || g->ne[0] % 32 != 0) {
        return type;
    }
    const int32_t target = type == CLM_TYPE_Q4_K ? CLM_TYPE_Q4_1 : CLM_TYPE_Q8_0;
    return clm_convert_supported(type, target) ? target : type;
}

bool is_converted(const ggml_tensor *g) { return stored_type(g) != static_cast<int32_t>(g->type); }

bool map_op(const ggml_tensor *g, int32_t *op, int32_t op_params[CLM_MAX_OP_PARAMS]) {
    static_assert(sizeof(g->op_params) == CLM_MAX_OP_PARAMS * sizeof(int32_t), "op_params sizes differ");
    op_rule rule;
    if (!rule_of(g->op, &rule)) return false;
    for (int s = rule.n_src; s < GGML_MAX_SRC; s++) {
        if (g->src[s] != nullptr) return false;
    }
    std::memcpy(op_params, g->op_params, sizeof(g->op_params));
    if (rule.op == CLM_OP_UNARY) {
        switch (op_params[0]) {   // ggml's sub-op numbers -> ours (cann_llm.h)
            case GGML_UNARY_OP_SILU: op_params[0] = CLM_UNARY_OP_SILU; break;
            case GGML_UNARY_OP_GELU: op_params[0] = CLM_UNARY_OP_GELU; break;
            case GGML_UNARY_OP_GELU_ERF: op_params[0] = CLM_UNARY_OP_GELU_ERF; break;
            case GGML_UNARY_OP_TANH: op_params[0] = CLM_UNARY_OP_TANH; break;
            default: return false;
        }
    } else if (rule.op == CLM_OP_GLU) {
        switch (op_params[0]) {   // op_params[1] (swapped) means the same in both
            case GGML_GLU_OP_SWIGLU: op_params[0] = CLM_GLU_OP_SWIGLU; break;
            case GGML_GLU_OP_GEGLU: op_params[0] = CLM_GLU_OP_GEGLU; break;
            case GGML_GLU_OP_GEGLU_ERF: op_params[0] = CLM_GLU_OP_GEGLU_ERF; break;
            default: return false;
        }
    }
    if (rule.op == CLM_OP_MUL_MAT || rule.op == CLM_OP_MUL_MAT_ID) {
        // op_params[3]: the lowest precision src1 may be converted to (ggml_prec_set_src, 0 = any;
        // ranks F32 10 < BF16 15 < F16 20). The device casts the activations to F16 for quantized
        // weights and to BF16 for BF16 weights; F32 weights keep them F32, and so do F16 weights
        // in MUL_MAT (MUL_MAT_ID's grouped product takes F16 activations with F16 experts).
        const int32_t prec = g->op_params[3];
        const int32_t wtype = g->src[0] != nullptr ? stored_type(g->src[0]) : CLM_TYPE_F32;
        const bool f16_keeps_f32 = rule.op == CLM_OP_MUL_MAT;
        const int32_t needs = wtype == CLM_TYPE_F32 || (wtype == CLM_TYPE_F16 && f16_keeps_f32) ? 10
                              : wtype == CLM_TYPE_BF16                                          ? 15
                                                                                                : 20;
        if (prec != 0 && prec < needs) return false;
    }
    if (rule.op == CLM_OP_FLASH_ATTN_EXT) {
        op_params[CLM_FA_MASK_BINARY] = 0;   // ggml's masks may hold any finite bias
    }
    *op = rule.op;
    return true;
}

bool single_mirror::fill(const ggml_tensor *g, const ggml_backend_buffer_type *buft) {
    tensor = clm_tensor{};
    base = clm_tensor{};
    if (!fill_fields(g, &tensor, g->op != GGML_OP_NONE, buft)) return false;
    if (g->view_src != nullptr) {
        if (!fill_fields(g->view_src, &base, false)) return false;
        tensor.view_src = &base;
    }
    return true;
}

bool op_mirror::fill(const ggml_tensor *g) {
    if (!node.fill(g)) return false;
    for (int s = 0; s < GGML_MAX_SRC; s++) {
        if (g->src[s] == nullptr) continue;
        if (!src[s].fill(g->src[s])) return false;
        node.tensor.src[s] = &src[s].tensor;
    }
    return true;
}

// ---- graphs --------------------------------------------------------------------------------------

namespace {

bool is_computed(const ggml_tensor *node) { return (node->flags & GGML_TENSOR_FLAG_COMPUTE) != 0; }

// The pointers that decide a graph's structure: each computed node, its sources and view, and the
// views behind its sources.
void structure_key(const ggml_cgraph *cgraph, std::vector<const ggml_tensor *> *key) {
    key->clear();
    const int n = ggml_graph_n_nodes(const_cast<ggml_cgraph *>(cgraph));
    for (int i = 0; i < n; i++) {
        const ggml_tensor *node = ggml_graph_node(const_cast<ggml_cgraph *>(cgraph), i);
        if (!is_computed(node)) continue;
        key->push_back(node);
        key->push_back(node->view_src);
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            const ggml_tensor *src = node->src[s];
            key->push_back(src);
            key->push_back(src ? src->view_src : nullptr);
        }
    }
}

}  // namespace

graph_map::~graph_map() { clm_context_free(ctx_); }

// A mirror for a tensor the graph reads but does not compute (weights, inputs, KV cache, views
// computed elsewhere): data only, and the base it views.
clm_tensor *graph_map::mirror(const ggml_tensor *g) {
    auto it = index_.find(g);
    if (it != index_.end()) return it->second;
    mirrors_.push_back(clm_tensor{});
    clm_tensor *c = &mirrors_.back();
    sources_.push_back(g);
    index_.emplace(g, c);
    if (g->view_src != nullptr) c->view_src = mirror(g->view_src);
    return c;
}

clm_status graph_map::rebuild(const ggml_cgraph *cgraph) {
    clm_context_free(ctx_);
    ctx_ = nullptr;
    graph_ = nullptr;
    mirrors_.clear();
    sources_.clear();
    index_.clear();
    key_.clear();

    ggml_cgraph *cg = const_cast<ggml_cgraph *>(cgraph);
    const int n = ggml_graph_n_nodes(cg);
    // Computed nodes first, so a source that is also a node maps to the node's mirror.
    std::vector<const ggml_tensor *> computed;
    for (int i = 0; i < n; i++) {
        const ggml_tensor *node = ggml_graph_node(cg, i);
        if (!is_computed(node)) continue;
        computed.push_back(node);
        if (index_.count(node)) continue;   // repeated
        mirrors_.push_back(clm_tensor{});
        sources_.push_back(node);
        index_.emplace(node, &mirrors_.back());
    }
    n_nodes_ = mirrors_.size();
    for (const ggml_tensor *node : computed) {
        clm_tensor *c = index_[node];
        for (int s = 0; s < GGML_MAX_SRC; s++) {
            if (node->src[s] != nullptr) c->src[s] = mirror(node->src[s]);
        }
        if (node->view_src != nullptr) c->view_src = mirror(node->view_src);
    }
    clm_status st = refresh();
    if (st != CLM_OK) return st;

    // The node list is ggml's, as it is: a node may appear more than once (test-backend-ops' perf
    // mode repeats one), which clm_graph_build_forward would fold into one.
    if ((st = clm_context_new(1, &ctx_)) != CLM_OK) return st;
    if ((st = clm_graph_new(ctx_, computed.size() + 1, &graph_)) != CLM_OK) return st;
    for (const ggml_tensor *node : computed) graph_->nodes[graph_->n_nodes++] = index_[node];
    key_.swap(next_key_);
    return CLM_OK;
}

// Copies every field that may change between two computes of the same graph.
clm_status graph_map::refresh() {
    for (size_t i = 0; i < mirrors_.size(); i++) {
        const ggml_tensor *g = sources_[i];
        if (!fill_fields(g, &mirrors_[i], i < n_nodes_)) {
            return clm_error(CLM_ERR_UNSUPPORTED, "CANN_LLM: tensor '%s' (%s, %s) has no counterpart in cann-llm",
                             g->name, ggml_op_desc(g), ggml_type_name(g->type));
        }
    }
    return CLM_OK;
}

clm_status graph_map::map(const ggml_cgraph *cgraph, clm_graph **out) {
    structure_key(cgraph, &next_key_);
    clm_status st = graph_ != nullptr && next_key_ == key_ ? refresh() : rebuild(cgraph);
    if (st != CLM_OK) {
        graph_ = nullptr;   // map again next time
        key_.clear();
        return st;
    }
    *out = graph_;
    return CLM_OK;
}

}  // namespace cann_llm_plugin
