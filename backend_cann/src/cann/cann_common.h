/* cann_common.h - shared pieces of the CANN backend: device/backend contexts, error mapping from
 * ACL and aclnn status codes to clm_status, the aclTensor helper and the two-phase op call. */
#ifndef CANN_COMMON_H
#define CANN_COMMON_H

#include "acl/acl.h"
#include "aclnn_api.h"   /* backend_cann/acl_host/include/aclnn_c */
#include "hccl_api.h"    /* idem: the HCCL subset (tensor parallelism) */
#include "core/clm_impl.h"

#define CANN_MAX_DEVICES 16
#define CANN_BUFFER_ALIGNMENT 128
#define CANN_MALLOC_ALIGNMENT 64   /* what aclrtMalloc guarantees of an address */
/* aclrtMemcpyAsync within a device needs both addresses 64-byte aligned (acl_rt.h, 8.1.RC1). */
#define CANN_D2D_ASYNC_ALIGNMENT 64
static inline bool cann_d2d_async_aligned(const void *dst, const void *src) {
    return ((uintptr_t)dst | (uintptr_t)src) % CANN_D2D_ASYNC_ALIGNMENT == 0;
}
#define CANN_MAX_ACL_DIMS 8

/* One per device: identity and its buffer types. */
typedef struct cann_device_ctx {
    int device;
    char name[16];          /* "CANN0" */
    char mapped_name[24];   /* "CANN0_Mapped" */
    char image_name[24];    /* "CANN0_Image" */
    char description[64];   /* aclrtGetSocName(): "Ascend910B4", or "acl_host" */
    clm_buffer_type buft;   /* device memory */
    clm_buffer_type host_buft;
    clm_buffer_type mapped_buft;  /* host memory mapped for the device (aclrtHostRegister) */
    clm_buffer_type image_buft;   /* a device buffer's image in host memory, mapped the same way */
} cann_device_ctx;

/* A pool of temporary device memory for op workspaces and intermediates, used in stream order:
 * a block freed after the launches that use it may be handed to the next launch on the same
 * stream. Frees come in LIFO order. Implementations: cann_pool.c (and the slot / VMM pools). */
typedef struct cann_pool cann_pool;
struct cann_pool_i {
    clm_status (*alloc)(cann_pool *pool, size_t size, void **ptr, size_t *actual_size);
    clm_status (*free)(cann_pool *pool, void *ptr, size_t size);
    /* Called after the stream has been synchronized: nothing queued uses pool memory. */
    void (*synchronized)(cann_pool *pool);
    void (*stats)(const cann_pool *pool, clm_cann_stats *out);
    void (*destroy)(cann_pool *pool);
};
struct cann_pool {
    struct cann_pool_i iface;
    int device;
    aclrtStream stream;   /* the stream the pool's memory is ordered on */
    bool capturing;       /* set during graph capture: no device allocation or release then */
};

/* The pool for a new backend on `device` and its stream (GGML_CANN_MEM_POOL picks the kind:
 * "vmm", the default when the device reports an allocation granularity, or "leg").
 *
 * RULE for ops when graph capture is on (GGML_CANN_ACL_GRAPH, docs/memory_pools.md): inside
 * graph_compute, ops must not allocate device memory outside this pool, must not copy from the
 * host (aclrtMemcpy*, H2D) and must not synchronize: all of that fails during capture. Build
 * constant tables / caches in the op's prepare hook (cann_consts.c) or at buffer set_tensor
 * time. Temporaries come from cann_temp_alloc, freed in LIFO order after the launches that use
 * them. */
clm_status cann_pool_create(int device, aclrtStream stream, cann_pool **out);

/* One temporary: alloc, use in launches, free (LIFO). */
typedef struct cann_temp {
    cann_pool *pool;
    void *ptr;
    size_t size;
} cann_temp;

/* MUL_MAT_ID's composition (CANN_LLM_MUL_MAT_ID): chosen per node, or forced. */
typedef enum cann_mmid_path { CANN_MMID_AUTO = 0, CANN_MMID_GATHER = 1, CANN_MMID_ROUTED = 2 } cann_mmid_path;

/* A contiguous copy of a product's activations (src1) in its compute dtype, made by the first of
 * a graph's products of that source and shared by the later ones (Q/K/V, gate/up all cast the
 * same normed hidden state to F16): run_nodes decides which copy to keep (keep, src, type) and
 * frees it after its last user `until`; activations_as (ops_matmul.c) fills and uses it. */
typedef struct cann_activation_copy {
    const clm_tensor *src;
    int32_t type;
    bool keep;          /* the next cast of (src, type) is to be kept */
    size_t until;       /* index of the last node that uses it */
    cann_temp copy;     /* ptr NULL: nothing kept */
} cann_activation_copy;

/* One per backend: a stream on a device. */
typedef struct cann_backend_ctx {
    int device;
    char name[16];
    aclrtStream stream;
    cann_pool *pool;
    int64_t graph_captures;
    int64_t graph_replays;
    struct cann_graph_cache *graphs;   /* GGML_CANN_ACL_GRAPH: captured graphs (graph_capture.c) */
    struct cann_consts *consts;        /* constant cache: ones gamma, tables, ROPE sin/cos (cann_consts.c) */
    struct cann_profile *profile;      /* per-node timing events while profiling (profile.c), else NULL */
    bool fusion;                       /* CANN_LLM_FUSION (default on): fused node sequences (run_nodes) */
    int mul_mat_id_path;               /* CANN_LLM_MUL_MAT_ID: cann_mmid_path */
    int64_t mul_mat_id_routed;         /* MUL_MAT_IDs issued as routed grouped products ... */
    int64_t mul_mat_id_gathered;       /* ... and as per-token gathers (ops_mul_mat_id.c) */
    int64_t fused_add_rms_norm;        /* ADD+RMS_NORM+MUL sequences launched as one aclnnAddRmsNorm */
    HcclComm comm;                     /* tensor parallelism (ops_comm.c), NULL without */
    int32_t comm_ranks, comm_rank;
    cann_activation_copy act;          /* within run_nodes: the shared cast of a product's activations */
    int64_t casts_shared;              /* products that used it instead of casting again */
    bool rope_fused;                   /* CANN_LLM_ROPE (auto, the default): one aclnnRotaryPositionEmbedding
                                        * per ROPE node when the runtime has it; composed: the composition */
    int64_t rope_fused_nodes;          /* ROPE nodes launched as one aclnnRotaryPositionEmbedding */
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

/* Temporary device memory from ctx's pool (ptr NULL when size is 0); free in LIFO order. */
clm_status cann_temp_alloc(cann_backend_ctx *ctx, size_t size, cann_temp *out);
void cann_temp_free(cann_temp *temp);

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

/* Two-phase aclnn call on ctx's stream: phase 1 with the given arguments, a workspace from the
 * pool (returned right after the launch: the pool is stream ordered), phase 2. Evaluates to a
 * clm_status. */
#define CANN_ACLNN(ctx, op, ...)                                                              \
    ({                                                                                        \
        uint64_t ws_size_ = 0;                                                                \
        aclOpExecutor *executor_ = NULL;                                                      \
        clm_status st_ = CLM_OK;                                                              \
        aclnnStatus ret_ = aclnn##op##GetWorkspaceSize(__VA_ARGS__, &ws_size_, &executor_);    \
        if (ret_ != ACLNN_SUCCESS) {                                                          \
            st_ = cann_aclnn_error(ret_, "aclnn" #op "GetWorkspaceSize");                     \
        } else {                                                                              \
            cann_temp ws_;                                                                    \
            st_ = cann_temp_alloc((ctx), ws_size_, &ws_);                                     \
            if (st_ == CLM_OK) {                                                              \
                ret_ = aclnn##op(ws_.ptr, ws_size_, executor_, (ctx)->stream);               \
                if (ret_ != ACLNN_SUCCESS) st_ = cann_aclnn_error(ret_, "aclnn" #op);         \
                cann_temp_free(&ws_);                                                         \
            }                                                                                 \
        }                                                                                     \
        st_;                                                                                  \
    })

/* An aclTensor over data from row-major dims and element strides (offset in elements; the storage
 * is the 1-D extent the view reaches). NULL if it cannot. */
aclTensor *cann_acl_view(void *data, aclDataType dt, int nd, const int64_t *dims, const int64_t *strides,
                         int64_t offset);

/* Destroys descriptors (NULL-safe) in one call. */
void cann_destroy_tensors(int n, ...);

/* ---- shared by MUL_MAT and MUL_MAT_ID (ops_matmul.c) ------------------------------------------- */
#define CANN_WQ_MAX_N 65535 /* WeightQuantBatchMatmulV2's largest n (and k) */
static inline bool cann_is_float_type(int32_t t) {
    return t == CLM_TYPE_F32 || t == CLM_TYPE_F16 || t == CLM_TYPE_BF16;
}
static inline bool cann_is_wq_type(int32_t t) {
    return t == CLM_TYPE_Q8_0 || t == CLM_TYPE_Q4_0 || t == CLM_TYPE_Q4_1;
}
/* x in dtype `type`, contiguous: x's own data, the graph's shared cast of x (ctx->act), or a pool
 * temporary (cast / copy) in *tmp. */
clm_status cann_matmul_activations(cann_backend_ctx *ctx, const clm_tensor *x, int32_t type, cann_temp *tmp,
                                   void **data);
/* dst (F32, contiguous) <- the contiguous result at data in `type`. */
clm_status cann_matmul_cast_result(cann_backend_ctx *ctx, void *data, int32_t type, clm_tensor *dst);

/* ---- op families ------------------------------------------------------------------------------ */
bool cann_supports_binary(const clm_tensor *op);
clm_status cann_op_binary(cann_backend_ctx *ctx, clm_tensor *dst);  /* ADD, MUL, DIV */
bool cann_supports_cpy(const clm_tensor *op);
clm_status cann_op_cpy(cann_backend_ctx *ctx, clm_tensor *dst);     /* CPY, DUP, CONT */
bool cann_supports_mul_mat(const clm_tensor *op);
clm_status cann_op_mul_mat(cann_backend_ctx *ctx, clm_tensor *dst);
/* Whether a MUL_MAT node casts (or copies) its src1 into a contiguous temporary of
 * *type before multiplying: the products whose casts a graph can share. */
bool cann_mul_mat_casts_src1(const clm_tensor *node, int32_t *type);
bool cann_supports_mul_mat_id(const clm_tensor *op);
clm_status cann_op_mul_mat_id(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_get_rows(const clm_tensor *op);
clm_status cann_op_get_rows(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_set_rows(const clm_tensor *op);
clm_status cann_op_set_rows(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_rms_norm(const clm_tensor *op);
clm_status cann_op_rms_norm(cann_backend_ctx *ctx, clm_tensor *dst);
/* ADD + RMS_NORM + MUL(weight) at nodes i, i+1, i+2 as one aclnnAddRmsNorm (ops_norm.c) */
bool cann_match_add_rms_norm(const clm_graph *graph, size_t i);
clm_status cann_op_add_rms_norm(cann_backend_ctx *ctx, clm_tensor *add, clm_tensor *norm, clm_tensor *mul);
bool cann_supports_rope(const clm_tensor *op);
clm_status cann_op_rope(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_soft_max(const clm_tensor *op);
clm_status cann_op_soft_max(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_flash_attn_ext(const clm_tensor *op);
clm_status cann_op_flash_attn_ext(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_scale(const clm_tensor *op);
clm_status cann_op_scale(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_unary(const clm_tensor *op);
clm_status cann_op_unary(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_glu(const clm_tensor *op);
clm_status cann_op_glu(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_argmax(const clm_tensor *op);
clm_status cann_op_argmax(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_sum_rows(const clm_tensor *op);
clm_status cann_op_sum_rows(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_argsort(const clm_tensor *op);
clm_status cann_op_argsort(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_clamp(const clm_tensor *op);
clm_status cann_op_clamp(cann_backend_ctx *ctx, clm_tensor *dst);
bool cann_supports_comm(const clm_tensor *op);
clm_status cann_op_comm(cann_backend_ctx *ctx, clm_tensor *dst);   /* ALL_REDUCE, ALL_GATHER */
/* Destroys the backend's communicator (its stream synchronized first). */
void cann_comm_free(cann_backend_ctx *ctx);
/* AscendC kernels (ops_ascendc.c): the cases each computes, and its launch. Converting or
 * copying more values than this, the aclnn path (or aclrtMemcpyAsync) was measured faster on
 * acl_host, memory-bound (docs/ascendc.md, "Speed"), and takes the case when it can. */
#define CANN_ASC_CONVERT_KERNEL_MAX 65536
bool cann_asc_dup_supported(const clm_tensor *src, const clm_tensor *dst);
clm_status cann_asc_dup(cann_backend_ctx *ctx, const clm_tensor *src, clm_tensor *dst);
bool cann_asc_quantize_supported(const clm_tensor *src, const clm_tensor *dst);
clm_status cann_asc_quantize(cann_backend_ctx *ctx, const clm_tensor *src, clm_tensor *dst);
bool cann_asc_get_rows_supported(const clm_tensor *op);
clm_status cann_asc_get_rows(cann_backend_ctx *ctx, clm_tensor *dst);
/* ---- prepare hooks: the per-graph pre-pass ---------------------------------------------------
 * graph_compute calls an op's prepare for each supported node of a graph that runs eagerly (an
 * eager run, or a capture miss before it is recorded), never on a replay: it creates the
 * constants the node's compute will ask for (device allocations and host copies happen here,
 * never inside a capture) and adds what must be reserved for the whole graph to the plan. */
typedef struct cann_prepare_plan {
    size_t slot_bytes;   /* the largest per-graph slot (ROPE sin/cos) any node needs */
} cann_prepare_plan;
clm_status cann_prepare_rms_norm(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan);
clm_status cann_prepare_rope(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan);
clm_status cann_prepare_soft_max(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan);
clm_status cann_prepare_flash_attn_ext(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan);

/* ---- the constant cache (cann_consts.c) -------------------------------------------------------
 * graph_prepare starts a pre-pass: it marks the per-graph slots stale (the first ROPE of each graph
 * rebuilds its sin/cos); reserve_slots then grows every slot to the plan's size. graph_begin only
 * marks the slots stale (called again right before a capture, so the captured graph contains the
 * rebuild). free releases all (the capture cache is dropped before any device memory is). */
clm_status cann_consts_graph_prepare(cann_backend_ctx *ctx);
clm_status cann_consts_reserve_slots(cann_backend_ctx *ctx, size_t bytes);
void cann_consts_graph_begin(cann_backend_ctx *ctx);
void cann_consts_free(cann_backend_ctx *ctx);
/* A persistent F32 device array of n ones (the RMS_NORM gamma), grown on demand. */
clm_status cann_consts_ones(cann_backend_ctx *ctx, int64_t n, void **out);
/* A persistent device copy of a small F32 host table (ROPE angle factors, ALiBi slopes), cached
 * by its contents. */
#define CANN_MAX_ALIBI_HEADS 1024
clm_status cann_consts_table(cann_backend_ctx *ctx, const float *values, int64_t n, void **out);
/* ggml's ALiBi slopes for n_head heads, as such a table. */
clm_status cann_consts_alibi_slopes(cann_backend_ctx *ctx, float max_bias, int64_t n_head, void **out);
/* The prepare step of SOFT_MAX and FLASH_ATTN_EXT: builds the slopes `node` will use when it has
 * a mask (`mask`) and max_bias (op_params[1]) > 0, so the graph itself allocates nothing. */
clm_status cann_consts_prepare_alibi(cann_backend_ctx *ctx, const clm_tensor *node, const clm_tensor *mask);
/* A per-graph slot of at least `bytes` for a key (compared bytewise: zero the padding). *fresh:
 * it already holds this graph's contents for key; else the caller fills it and calls
 * slot_built. */
#define CANN_CONST_KEY_MAX 64
clm_status cann_consts_slot(cann_backend_ctx *ctx, const void *key, size_t key_size, size_t bytes, void **out,
                            bool *fresh);
void cann_consts_slot_built(cann_backend_ctx *ctx, void *dev, const void *key, size_t key_size);

/* ---- buffers (cann_buffer.c) ------------------------------------------------------------------ */
void cann_buffer_types_init(cann_device_ctx *dev_ctx, clm_device *dev);
bool cann_buffer_is_device(const clm_buffer *buffer);
/* A buffer over host memory mapped with aclrtHostRegister (see clm_device_buffer_from_host_ptr). */
clm_status cann_buffer_from_host_ptr(cann_device_ctx *dev_ctx, void *ptr, size_t size, clm_buffer **out);
/* A buffer over a device buffer's image in host memory (see clm_device_buffer_from_image). */
clm_status cann_buffer_from_image(cann_device_ctx *dev_ctx, void *ptr, size_t size, clm_buffer **out);
/* Whether tensors of `type` keep ggml's bytes on the device (so they can lie in mapped memory). */
bool cann_type_keeps_ggml_layout(int32_t type);
int cann_buffer_device(const clm_buffer *buffer);

/* ---- graph capture (graph_capture.c) ------------------------------------------------------------ */
/* Reads GGML_CANN_ACL_GRAPH / GGML_CANN_GRAPH_CACHE_CAPACITY; leaves ctx->graphs NULL when off. */
clm_status cann_graph_cache_init(cann_backend_ctx *ctx);
void cann_graph_cache_free(cann_backend_ctx *ctx);   /* stream idle */
/* Drops every captured graph (stream idle): call it before releasing device memory that a
 * captured graph may address outside the pool (op constant caches). */
void cann_graph_cache_invalidate(cann_backend_ctx *ctx);
int32_t cann_graph_cache_size(const cann_backend_ctx *ctx);
/* Runs graph through the cache: replay on a hit (no pre-pass); on a miss or an eager fallback,
 * prepare (the ops' prepare hooks) then run_nodes; a miss then records run_nodes alone. */
typedef clm_status (*cann_graph_fn)(cann_backend_ctx *ctx, clm_graph *graph);
clm_status cann_graph_compute_captured(cann_backend_ctx *ctx, clm_graph *graph, cann_graph_fn prepare,
                                       cann_graph_fn run_nodes);

/* ---- backend (cann_backend.c) ------------------------------------------------------------------ */
clm_status cann_backend_init(clm_device *dev, clm_backend **out);
bool cann_backend_is_cann(const clm_backend *backend);

/* ---- profiling (profile.c): no-ops unless ctx->profile is set ---------------------------------- */
clm_status cann_profile_graph_begin(cann_backend_ctx *ctx);
clm_status cann_profile_node_end(cann_backend_ctx *ctx, const clm_tensor *node);
void cann_profile_free(cann_backend_ctx *ctx);
bool cann_supports_op(clm_device *dev, const clm_tensor *op);

#endif /* CANN_COMMON_H */
