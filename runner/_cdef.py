"""GENERATED - do not edit. Made by scripts/gen_cdef.py from backend_cann/include/cann_llm.h.

The cffi declarations of the public C API; runner/_ffi_build.py compiles them in API mode against
the real header, so a declaration that disagrees with it fails the build.
"""

CLM_ABI_VERSION = 10

CDEF = r"""
#define CLM_ABI_VERSION 10
#define CLM_MAX_DIMS 4
#define CLM_MAX_SRC 10
#define CLM_MAX_OP_PARAMS 16
#define CLM_MAX_NAME 64

typedef enum clm_status {
    CLM_OK = 0,
    CLM_ERR_INVALID_ARG = 1,
    CLM_ERR_OUT_OF_MEMORY = 2,
    CLM_ERR_UNSUPPORTED = 3,
    CLM_ERR_DEVICE = 4,
    CLM_ERR_STATE = 5,
} clm_status;

typedef enum clm_type {
    CLM_TYPE_F32 = 0,
    CLM_TYPE_F16 = 1,
    CLM_TYPE_Q4_0 = 2,
    CLM_TYPE_Q4_1 = 3,
    CLM_TYPE_Q5_0 = 6,
    CLM_TYPE_Q5_1 = 7,
    CLM_TYPE_Q8_0 = 8,
    CLM_TYPE_Q8_1 = 9,
    CLM_TYPE_Q2_K = 10,
    CLM_TYPE_Q3_K = 11,
    CLM_TYPE_Q4_K = 12,
    CLM_TYPE_Q5_K = 13,
    CLM_TYPE_Q6_K = 14,
    CLM_TYPE_Q8_K = 15,
    CLM_TYPE_I8 = 24,
    CLM_TYPE_I16 = 25,
    CLM_TYPE_I32 = 26,
    CLM_TYPE_I64 = 27,
    CLM_TYPE_F64 = 28,
    CLM_TYPE_BF16 = 30,
    CLM_TYPE_COUNT = 31,
} clm_type;

typedef enum clm_op {
    CLM_OP_NONE = 0,
    CLM_OP_DUP,
    CLM_OP_ADD,
    CLM_OP_MUL,
    CLM_OP_SCALE,
    CLM_OP_CPY,
    CLM_OP_CONT,
    CLM_OP_RESHAPE,
    CLM_OP_VIEW,
    CLM_OP_PERMUTE,
    CLM_OP_TRANSPOSE,
    CLM_OP_GET_ROWS,
    CLM_OP_SET_ROWS,
    CLM_OP_RMS_NORM,
    CLM_OP_MUL_MAT,
    CLM_OP_ROPE,
    CLM_OP_SOFT_MAX,
    CLM_OP_FLASH_ATTN_EXT,
    CLM_OP_ARGMAX,
    CLM_OP_UNARY,
    CLM_OP_GLU,
    CLM_OP_ARGSORT,
    CLM_OP_SUM_ROWS,
    CLM_OP_CLAMP,
    CLM_OP_DIV,
    CLM_OP_MUL_MAT_ID,
    CLM_OP_ALL_REDUCE,
    CLM_OP_ALL_GATHER,
    CLM_OP_COUNT,
} clm_op;

typedef enum clm_unary_op {
    CLM_UNARY_OP_SILU = 0,
    CLM_UNARY_OP_GELU = 1,
    CLM_UNARY_OP_GELU_ERF = 2,
    CLM_UNARY_OP_TANH = 3,
    CLM_UNARY_OP_COUNT,
} clm_unary_op;

typedef enum clm_glu_op {
    CLM_GLU_OP_SWIGLU = 0,
    CLM_GLU_OP_GEGLU = 1,
    CLM_GLU_OP_GEGLU_ERF = 2,
    CLM_GLU_OP_COUNT,
} clm_glu_op;

typedef enum clm_sort_order {
    CLM_SORT_ORDER_ASC = 0,
    CLM_SORT_ORDER_DESC = 1,
} clm_sort_order;

typedef enum clm_tensor_flag {
    CLM_TENSOR_FLAG_INPUT = 1,
    CLM_TENSOR_FLAG_OUTPUT = 2,
    CLM_TENSOR_FLAG_PARAM = 4,
} clm_tensor_flag;

typedef enum clm_buffer_usage {
    CLM_BUFFER_USAGE_ANY = 0,
    CLM_BUFFER_USAGE_WEIGHTS = 1,
    CLM_BUFFER_USAGE_COMPUTE = 2,
} clm_buffer_usage;

typedef enum clm_device_type {
    CLM_DEVICE_TYPE_CPU = 0,
    CLM_DEVICE_TYPE_GPU = 1,
    CLM_DEVICE_TYPE_ACCEL = 2,
} clm_device_type;

typedef struct clm_context clm_context;
typedef struct clm_graph clm_graph;
typedef struct clm_buffer_type clm_buffer_type;
typedef struct clm_buffer clm_buffer;
typedef struct clm_backend clm_backend;
typedef struct clm_device clm_device;
typedef struct clm_reg clm_reg;
typedef struct clm_event clm_event;

typedef struct clm_tensor {
    int32_t type;
    int32_t op;
    int64_t ne[CLM_MAX_DIMS];
    size_t nb[CLM_MAX_DIMS];
    int32_t op_params[CLM_MAX_OP_PARAMS];
    int32_t flags;
    struct clm_tensor *src[CLM_MAX_SRC];
    struct clm_tensor *view_src;
    size_t view_offs;
    void *data;
    clm_buffer *buffer;
    void *extra;
    char name[CLM_MAX_NAME];
} clm_tensor;

int32_t clm_abi_version(void);
const char *clm_version(void);
const char *clm_last_error(void);
void clm_clear_error(void);
const char *clm_runtime_name(void);

const char *clm_type_name(int32_t type);
int64_t clm_type_block_size(int32_t type);
size_t clm_type_size(int32_t type);
bool clm_type_is_quantized(int32_t type);
size_t clm_row_size(int32_t type, int64_t ne0);
const char *clm_op_name(int32_t op);
const char *clm_op_desc(const clm_tensor *tensor);

bool clm_convert_supported(int32_t src_type, int32_t dst_type);
clm_status clm_convert(int32_t src_type, const void *src, int32_t dst_type, void *dst,
                       int64_t n_elements);

clm_status clm_gguf_string_spans(const void *data, size_t size, size_t offset, uint64_t count,
                                 uint64_t *spans, size_t *end);

clm_status clm_gguf_string_blob(const void *data, size_t size, size_t offset, uint64_t count, char *text,
                                size_t text_size, uint32_t *offsets, size_t *end);
clm_status clm_quantize_f32(int32_t dst_type, const float *src, void *dst, int64_t n_elements);
clm_status clm_dequantize_f32(int32_t src_type, const void *src, float *dst, int64_t n_elements);

clm_status clm_find_nonfinite(int32_t type, const void *data, int64_t n_elements, int64_t *first_bad);

clm_status clm_logits_scan(const float *x, int64_t n, const int64_t *banned, int64_t n_banned, int64_t *first_bad,
                           int64_t *best);

clm_status clm_kv_mask(const int64_t *cell_pos, const uint64_t *cell_seq, int64_t n_kv,
                       const int64_t *token_pos, const int64_t *token_seq, int64_t n_tokens,
                       int64_t n_swa, uint16_t *out);
clm_status clm_kv_cells_used(const int64_t *cell_pos, int64_t n_cells, int64_t *n_used, int64_t *last_used,
                             int64_t *first_free);

clm_status clm_kv_decode_step(int64_t *cell_pos, uint64_t *cell_seq, int64_t n_cells, const int64_t *token_pos,
                              const int64_t *token_seq, int64_t n_tokens, int64_t n_pad, int64_t *cells,
                              int64_t *n_used, int64_t *n_kv, uint16_t *mask);

typedef struct clm_vocab clm_vocab;
#define CLM_BPE_BYTE_LEVEL 1
#define CLM_BPE_IGNORE_MERGES 2
#define CLM_BPE_NEWLINE_TOKENS 4
clm_status clm_vocab_new(const char *text, const uint32_t *offsets, int64_t n_tokens, clm_vocab **out,
                         int64_t *duplicate);
clm_status clm_vocab_set_merges(clm_vocab *v, const char *text, const uint32_t *offsets, int64_t n_merges);
clm_status clm_vocab_set_scores(clm_vocab *v, const double *scores);
void clm_vocab_free(clm_vocab *v);
clm_status clm_vocab_find(const clm_vocab *v, const char *text, size_t len, int32_t *id);
clm_status clm_vocab_merge_rank(const clm_vocab *v, const char *left, size_t left_len, const char *right,
                                size_t right_len, int32_t *rank);
clm_status clm_vocab_bpe(const clm_vocab *v, const char *word, size_t len, uint32_t flags, int32_t *ids,
                         int64_t cap, int64_t *n_ids);
clm_status clm_vocab_spm(const clm_vocab *v, const char *text, size_t len, int32_t unk_id, int32_t *ids,
                         int64_t cap, int64_t *n_ids);

clm_status clm_context_new(size_t max_tensors, clm_context **out);
void clm_context_free(clm_context *ctx);
size_t clm_context_n_tensors(const clm_context *ctx);
clm_tensor *clm_context_tensor(const clm_context *ctx, size_t i);

clm_status clm_new_tensor(clm_context *ctx, int32_t type, int32_t n_dims, const int64_t *ne,
                          clm_tensor **out);
clm_status clm_tensor_set_name(clm_tensor *tensor, const char *name);
size_t clm_nbytes(const clm_tensor *tensor);
int64_t clm_nelements(const clm_tensor *tensor);
int64_t clm_nrows(const clm_tensor *tensor);
bool clm_is_contiguous(const clm_tensor *tensor);
bool clm_is_view_op(int32_t op);

clm_status clm_view_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                       int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset,
                       clm_tensor **out);
clm_status clm_reshape_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3, clm_tensor **out);
clm_status clm_permute(clm_context *ctx, clm_tensor *a, int32_t axis0, int32_t axis1, int32_t axis2,
                       int32_t axis3, clm_tensor **out);
clm_status clm_transpose(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_add(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
clm_status clm_mul(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_div(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_cpy(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
clm_status clm_cont(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_new_op(clm_context *ctx, int32_t op, int32_t type, int32_t n_dims, const int64_t *ne,
                      clm_tensor *const *srcs, int32_t n_src, const void *params,
                      size_t params_size, clm_tensor **out);

clm_status clm_mul_mat(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_get_rows(clm_context *ctx, clm_tensor *a, clm_tensor *rows, clm_tensor **out);

clm_status clm_set_rows(clm_context *ctx, clm_tensor *dst, clm_tensor *src, clm_tensor *rows,
                        clm_tensor **out);

clm_status clm_rms_norm(clm_context *ctx, clm_tensor *a, float eps, clm_tensor **out);

clm_status clm_scale(clm_context *ctx, clm_tensor *a, float s, float b, clm_tensor **out);

#define CLM_ROPE_TYPE_NEOX 2
clm_status clm_rope_ext(clm_context *ctx, clm_tensor *a, clm_tensor *pos, clm_tensor *freq_factors,
                        int32_t n_dims, int32_t mode, int32_t n_ctx_orig, float freq_base,
                        float freq_scale, float ext_factor, float attn_factor, float beta_fast,
                        float beta_slow, clm_tensor **out);

clm_status clm_soft_max_ext(clm_context *ctx, clm_tensor *a, clm_tensor *mask, float scale,
                            float max_bias, clm_tensor **out);

clm_status clm_flash_attn_ext(clm_context *ctx, clm_tensor *q, clm_tensor *k, clm_tensor *v,
                              clm_tensor *mask, float scale, float max_bias, float logit_softcap,
                              clm_tensor **out);

#define CLM_FA_MASK_BINARY 15

clm_status clm_argmax(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_silu(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_swiglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);

clm_status clm_swiglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_gelu(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_gelu_erf(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_tanh(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_geglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);

clm_status clm_geglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_geglu_erf(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);
clm_status clm_geglu_erf_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);

clm_status clm_argsort(clm_context *ctx, clm_tensor *a, int32_t order, clm_tensor **out);

clm_status clm_sum_rows(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_clamp(clm_context *ctx, clm_tensor *a, float min, float max, clm_tensor **out);

clm_status clm_mul_mat_id(clm_context *ctx, clm_tensor *as, clm_tensor *b, clm_tensor *ids,
                          clm_tensor **out);

clm_status clm_all_reduce(clm_context *ctx, clm_tensor *a, clm_tensor **out);

clm_status clm_all_gather(clm_context *ctx, clm_tensor *a, int32_t n_ranks, clm_tensor **out);

clm_status clm_graph_new(clm_context *ctx, size_t max_nodes, clm_graph **out);

clm_status clm_graph_build_forward(clm_graph *graph, clm_tensor *tensor);
size_t clm_graph_n_nodes(const clm_graph *graph);
clm_tensor *clm_graph_node(const clm_graph *graph, size_t i);
size_t clm_graph_n_leafs(const clm_graph *graph);
clm_tensor *clm_graph_leaf(const clm_graph *graph, size_t i);
void clm_graph_reset(clm_graph *graph);

typedef enum clm_scan_word {
    CLM_SCAN_NODE = 0,
    CLM_SCAN_OP = 1,
    CLM_SCAN_FLAGS = 2,
    CLM_SCAN_ROOT = 3,
    CLM_SCAN_ROOT_BUFT = 4,
    CLM_SCAN_N_SRC = 5,
    CLM_SCAN_WORDS = 6,
} clm_scan_word;
typedef enum clm_scan_flag {
    CLM_SCAN_VIEW = 1,
    CLM_SCAN_HAS_DATA = 2,
    CLM_SCAN_ROOT_HAS_DATA = 4,
} clm_scan_flag;
clm_status clm_graph_scan(const clm_graph *graph, uintptr_t *words, size_t n_words, uintptr_t *src_words,
                          size_t n_src_words, size_t *n_src_used);

clm_status clm_cann_reg(clm_reg **out);
const char *clm_reg_name(const clm_reg *reg);
size_t clm_reg_device_count(const clm_reg *reg);
clm_status clm_reg_device(const clm_reg *reg, size_t index, clm_device **out);

const char *clm_device_name(const clm_device *dev);
const char *clm_device_description(const clm_device *dev);
clm_status clm_device_memory(clm_device *dev, size_t *free_bytes, size_t *total_bytes);
int32_t clm_device_get_type(const clm_device *dev);
int32_t clm_device_id(const clm_device *dev);
bool clm_device_caps_async(const clm_device *dev);
bool clm_device_caps_events(const clm_device *dev);
bool clm_device_caps_host_buffer(const clm_device *dev);
clm_status clm_device_init_backend(clm_device *dev, clm_backend **out);
clm_buffer_type *clm_device_buffer_type(clm_device *dev);
clm_buffer_type *clm_device_host_buffer_type(clm_device *dev);

bool clm_device_caps_buffer_from_host_ptr(const clm_device *dev);
bool clm_device_maps_host_type(const clm_device *dev, int32_t type);
clm_status clm_device_buffer_from_host_ptr(clm_device *dev, void *ptr, size_t size, clm_buffer **out);

clm_status clm_device_buffer_from_image(clm_device *dev, void *ptr, size_t size, clm_buffer **out);
bool clm_device_supports_op(clm_device *dev, const clm_tensor *op);

clm_status clm_device_supports_graph(clm_device *dev, const clm_graph *graph, uint8_t *out, size_t n);
bool clm_device_supports_buft(clm_device *dev, const clm_buffer_type *buft);
bool clm_device_offload_op(clm_device *dev, const clm_tensor *op);
clm_status clm_device_event_new(clm_device *dev, clm_event **out);
void clm_event_free(clm_event *event);
clm_status clm_event_synchronize(clm_event *event);

const char *clm_buft_name(const clm_buffer_type *buft);
clm_status clm_buft_alloc_buffer(clm_buffer_type *buft, size_t size, clm_buffer **out);
size_t clm_buft_alignment(const clm_buffer_type *buft);
size_t clm_buft_max_size(const clm_buffer_type *buft);
size_t clm_buft_alloc_size(const clm_buffer_type *buft, const clm_tensor *tensor);
bool clm_buft_is_host(const clm_buffer_type *buft);
clm_device *clm_buft_device(const clm_buffer_type *buft);

void clm_buffer_free(clm_buffer *buffer);
void *clm_buffer_base(const clm_buffer *buffer);
size_t clm_buffer_size(const clm_buffer *buffer);
clm_buffer_type *clm_buffer_buft(const clm_buffer *buffer);
void clm_buffer_set_usage(clm_buffer *buffer, int32_t usage);
int32_t clm_buffer_get_usage(const clm_buffer *buffer);
bool clm_buffer_is_host(const clm_buffer *buffer);

clm_status clm_buffer_get_raw(clm_buffer *buffer, size_t offset, void *dst, size_t size);
clm_status clm_buffer_clear(clm_buffer *buffer, uint8_t value);

clm_status clm_tensor_alloc(clm_buffer *buffer, clm_tensor *tensor, size_t offset);

clm_status clm_tensor_view_init(clm_tensor *tensor);

clm_status clm_tensor_set(clm_tensor *tensor, const void *data, size_t offset, size_t size);
clm_status clm_tensor_get(const clm_tensor *tensor, void *data, size_t offset, size_t size);
clm_status clm_tensor_memset(clm_tensor *tensor, uint8_t value, size_t offset, size_t size);

clm_status clm_tensor_copy(const clm_tensor *src, clm_tensor *dst);

void clm_backend_free(clm_backend *backend);
const char *clm_backend_name(const clm_backend *backend);
clm_device *clm_backend_device(const clm_backend *backend);
clm_status clm_backend_set_tensor_async(clm_backend *backend, clm_tensor *tensor, const void *data,
                                        size_t offset, size_t size);
clm_status clm_backend_get_tensor_async(clm_backend *backend, const clm_tensor *tensor, void *data,
                                        size_t offset, size_t size);

clm_status clm_backend_cpy_tensor_async(clm_backend *backend_src, clm_backend *backend_dst,
                                        const clm_tensor *src, clm_tensor *dst);
clm_status clm_backend_synchronize(clm_backend *backend);

clm_status clm_backend_graph_compute(clm_backend *backend, clm_graph *graph);
clm_status clm_backend_event_record(clm_backend *backend, clm_event *event);
clm_status clm_backend_event_wait(clm_backend *backend, clm_event *event);

typedef enum clm_pool_kind {
    CLM_POOL_LEGACY = 0,
    CLM_POOL_VMM = 1,
} clm_pool_kind;

typedef struct clm_cann_stats {
    int32_t pool_kind;
    size_t pool_in_use;
    size_t pool_peak;
    size_t pool_reserved;
    size_t pool_mapped;
    int32_t pool_slots_used;
    int32_t pool_slots_total;
    int64_t graph_captures;
    int64_t graph_replays;
    int32_t graph_cached;
    int64_t fused_add_rms_norm;

    int64_t mul_mat_id_routed;
    int64_t mul_mat_id_gathered;
    int64_t casts_shared;

    int64_t rope_fused;

} clm_cann_stats;

clm_status clm_cann_backend_stats(clm_backend *backend, clm_cann_stats *out);

typedef struct clm_cann_node_time {
    char name[CLM_MAX_NAME];
    int32_t op;
    int32_t type;
    int64_t ne[CLM_MAX_DIMS];
    int32_t graph;
    float start_ms;
    float ms;
} clm_cann_node_time;

clm_status clm_cann_profile(clm_backend *backend, bool on);
clm_status clm_cann_profile_take(clm_backend *backend, clm_cann_node_time *out, size_t cap, size_t *n);

#define CLM_COMM_ROOT_INFO_BYTES 4108
clm_status clm_cann_comm_root_info(clm_backend *backend, void *out, size_t size);
clm_status clm_cann_comm_init(clm_backend *backend, int32_t n_ranks, int32_t rank, const void *root_info,
                              size_t size);

clm_status clm_cann_pool_alloc(clm_backend *backend, size_t size, void **ptr, size_t *actual_size);
clm_status clm_cann_pool_free(clm_backend *backend, void *ptr, size_t size);
"""
