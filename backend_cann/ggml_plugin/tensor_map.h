// tensor_map.h - ggml tensors and graphs seen as cann-llm's (clm_tensor, clm_graph), with no data
// copies: a mirror carries the ggml tensor's type, shape, strides, op, op_params, sources, view and
// data address, with ggml's op numbers translated to ours.
#pragma once

#include <deque>
#include <unordered_map>
#include <vector>

#include "cann_llm.h"
#include "ggml.h"

struct ggml_backend_buffer_type;

namespace cann_llm_plugin {

// The clm_buffer behind a ggml buffer of our buffer type, or NULL for any other buffer.
clm_buffer *clm_buffer_of(const ggml_backend_buffer *buffer);

// Whether a buffer type is the plugin's device buffer type.
bool buft_is_ours(const ggml_backend_buffer_type *buft);

// The type a tensor is stored as in our buffers. Types the device holds stay; with K-quant
// conversion on (CANN_LLM_GGML_KQUANTS=convert), a whole (non-view) tensor of another type the
// core can convert is stored as cann-llm's loader stores it: Q4_K as Q4_1 (sub-block for
// sub-block), the rest as Q8_0. ggml sees its own type; the mirrors show the stored one.
// buft: where the tensor lives or will live (default: its buffer's type).
int32_t stored_type(const ggml_tensor *g, const ggml_backend_buffer_type *buft = nullptr);
bool is_converted(const ggml_tensor *g);

// Our op for a ggml node, with op_params rewritten where the numbering differs (the UNARY and GLU
// sub-ops). False when the op, sub-op or one of its sources has no counterpart here.
bool map_op(const ggml_tensor *g, int32_t *op, int32_t op_params[CLM_MAX_OP_PARAMS]);

// A tensor and the base it views, filled for one call that does not keep them (set_tensor,
// get_alloc_size, supports_op): sources stay NULL.
struct single_mirror {
    clm_tensor tensor;
    clm_tensor base;
    // False when the tensor's type or op cannot be expressed as ours. buft: as stored_type's.
    bool fill(const ggml_tensor *g, const ggml_backend_buffer_type *buft = nullptr);
};

// supports_op's mirror: the node plus its sources (and their bases), on the stack.
struct op_mirror {
    single_mirror node;
    single_mirror src[GGML_MAX_SRC];
    bool fill(const ggml_tensor *g);
};

// The mirror of one ggml graph, kept while ggml hands us the same graph: same nodes with the same
// sources and views. A repeated graph only refreshes the fields that may change (data addresses,
// shapes, op_params); a different one is mapped again.
class graph_map {
public:
    ~graph_map();
    // The clm_graph of cgraph's computed nodes, in ggml's order. On failure, clm_last_error() says why.
    clm_status map(const ggml_cgraph *cgraph, clm_graph **out);

private:
    clm_status rebuild(const ggml_cgraph *cgraph);
    clm_tensor *mirror(const ggml_tensor *g);
    clm_status refresh();

    std::vector<const ggml_tensor *> key_;                  // nodes, their sources and views, in walk order
    std::vector<const ggml_tensor *> next_key_;             // this call's key; becomes key_ when it is rebuilt
    std::vector<const ggml_tensor *> sources_;             // ggml tensor of mirrors_[i]
    std::deque<clm_tensor> mirrors_;                       // a deque: addresses stay put as it grows
    size_t n_nodes_ = 0;                                   // mirrors_[0, n_nodes_) are computed nodes
    std::unordered_map<const ggml_tensor *, clm_tensor *> index_;
    clm_context *ctx_ = nullptr;                           // owns graph_
    clm_graph *graph_ = nullptr;
};

}  // namespace cann_llm_plugin
