/* cann_llm.h - the public C API of cann-llm's ggml-style core and CANN backend.
 *
 * The only header Python sees: scripts/gen_cdef.py turns it into runner/_cdef.py.
 * Keep it FFI-clean: fixed-width ints, opaque handles, status + out-parameters,
 * no varargs, bitfields, unions or by-value structs. Shapes are in ggml order:
 * ne[0] is the fastest-varying dimension, nb[] are byte strides.
 */
#ifndef CANN_LLM_H
#define CANN_LLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CLM_ABI_VERSION 10
#define CLM_MAX_DIMS 4
#define CLM_MAX_SRC 10
#define CLM_MAX_OP_PARAMS 16
#define CLM_MAX_NAME 64

/* Every call Python can reach returns a status; clm_last_error() has the message (per thread). */
typedef enum clm_status {
    CLM_OK = 0,
    CLM_ERR_INVALID_ARG = 1,    /* a bad parameter, shape or type */
    CLM_ERR_OUT_OF_MEMORY = 2,  /* device or host memory exhausted */
    CLM_ERR_UNSUPPORTED = 3,    /* the device declines this op / type */
    CLM_ERR_DEVICE = 4,         /* the CANN runtime or an aclnn call failed */
    CLM_ERR_STATE = 5,          /* a call in the wrong state (e.g. a freed handle) */
} clm_status;

/* Tensor element types, numbered as ggml (and gguf.GGMLQuantizationType). */
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

/* The op vocabulary of an LLM forward pass (ggml names and semantics). */
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

/* Sub-ops of UNARY and GLU (op_params[0]). Our own numbers, not ggml's: the ggml plugin
 * translates (backend_cann/ggml_plugin/tensor_map.cpp). */
typedef enum clm_unary_op {
    CLM_UNARY_OP_SILU = 0,
    CLM_UNARY_OP_GELU = 1,      /* ggml_gelu: the tanh approximation */
    CLM_UNARY_OP_GELU_ERF = 2,  /* ggml_gelu_erf: the exact erf form */
    CLM_UNARY_OP_TANH = 3,
    CLM_UNARY_OP_COUNT,
} clm_unary_op;

typedef enum clm_glu_op {
    CLM_GLU_OP_SWIGLU = 0,
    CLM_GLU_OP_GEGLU = 1,      /* gelu (tanh approximation) of the gate times the linear part */
    CLM_GLU_OP_GEGLU_ERF = 2,  /* gelu_erf of the gate times the linear part */
    CLM_GLU_OP_COUNT,
} clm_glu_op;

/* The order of ARGSORT (op_params[0]); ggml's numbers (enum ggml_sort_order). */
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

/* A tensor in ggml's shape. Lives in a clm_context; data lives in a clm_buffer. */
typedef struct clm_tensor {
    int32_t type;                            /* clm_type */
    int32_t op;                              /* clm_op */
    int64_t ne[CLM_MAX_DIMS];                /* elements per dim, ggml order */
    size_t nb[CLM_MAX_DIMS];                 /* byte strides; nb[0] = type size */
    int32_t op_params[CLM_MAX_OP_PARAMS];    /* op-specific, ints or floats by bits */
    int32_t flags;                           /* clm_tensor_flag bits */
    struct clm_tensor *src[CLM_MAX_SRC];
    struct clm_tensor *view_src;             /* base tensor of a view, or NULL */
    size_t view_offs;                        /* byte offset of a view into view_src */
    void *data;                              /* device or host address, NULL until allocated */
    clm_buffer *buffer;
    void *extra;                             /* backend-private */
    char name[CLM_MAX_NAME];
} clm_tensor;

/* ---- library ------------------------------------------------------------------------- */
int32_t clm_abi_version(void);
const char *clm_version(void);
const char *clm_last_error(void);            /* this thread's last failure; "" if none */
void clm_clear_error(void);
const char *clm_runtime_name(void);          /* "acl_host" or "toolkit" */

/* ---- type and op traits ---------------------------------------------------------------- */
const char *clm_type_name(int32_t type);     /* NULL for an unknown type */
int64_t clm_type_block_size(int32_t type);   /* elements per block; 0 for an unknown type */
size_t clm_type_size(int32_t type);          /* bytes per block; 0 for an unknown type */
bool clm_type_is_quantized(int32_t type);
size_t clm_row_size(int32_t type, int64_t ne0);
const char *clm_op_name(int32_t op);
const char *clm_op_desc(const clm_tensor *tensor);  /* op name, or the unary/glu op's name */

/* ---- host type conversion (src/core/convert.c): ggml block formats, n_elements a whole number
 * of blocks of both types. Dequantizers for F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q8_1 and the
 * K-quants Q2_K..Q8_K; quantizers (ggml's reference rounding) to F32/F16/BF16/Q8_0/Q4_0/Q4_1.
 * Q4_K -> Q4_1 maps each 32-element sub-block onto one Q4_1 block (no requantization), and
 * Q5_0 -> Q8_0 keeps the values exactly. */
bool clm_convert_supported(int32_t src_type, int32_t dst_type);
clm_status clm_convert(int32_t src_type, const void *src, int32_t dst_type, void *dst,
                       int64_t n_elements);
/* A GGUF string array (u64 length + bytes each) of `count` strings at data[offset..]: *end gets
 * the offset just past it, and spans (2 * count values, or NULL) each string's (start, length).
 * CLM_ERR_INVALID_ARG when it runs past data[size]. */
clm_status clm_gguf_string_spans(const void *data, size_t size, size_t offset, uint64_t count,
                                 uint64_t *spans, size_t *end);
/* The same array's strings back to back in text (text_size bytes: the array's bytes less 8 per
 * string, at most 4 GiB) and offsets[0..count] (string i is text[offsets[i] .. offsets[i + 1])). */
clm_status clm_gguf_string_blob(const void *data, size_t size, size_t offset, uint64_t count, char *text,
                                size_t text_size, uint32_t *offsets, size_t *end);
clm_status clm_quantize_f32(int32_t dst_type, const float *src, void *dst, int64_t n_elements);
clm_status clm_dequantize_f32(int32_t src_type, const void *src, float *dst, int64_t n_elements);
/* The first non-finite value of ggml-format data (src/core/finite.c): *first_bad is the element
 * index for F32/F16/BF16, the block index of the first block whose scale / min / sum is NaN or
 * inf for the quantized types, or -1 when every value is finite. */
clm_status clm_find_nonfinite(int32_t type, const void *data, int64_t n_elements, int64_t *first_bad);
/* One pass over an F32 logits row of n values (src/core/logits.c): *first_bad is the index of the
 * first NaN or inf (-1: none); when there is none, *best is the lowest index of the largest value
 * among the indices not in banned[0..n_banned) (ascending; ids outside 0..n-1 are ignored), -1
 * when every index is banned. *best is -1 when a value is not finite. */
clm_status clm_logits_scan(const float *x, int64_t n, const int64_t *banned, int64_t n_banned, int64_t *first_bad,
                           int64_t *best);
/* The runner's KV cells (src/core/kv_cells.c). clm_kv_mask: the F16 attention mask [n_tokens][n_kv]
 * of a micro-batch, 0 where token t may see cell j (the cell holds a position <= the token's, of a
 * sequence set containing token_seq[t], and, with n_swa > 0, fewer than n_swa positions behind
 * it), -inf elsewhere; cell_pos -1 marks an empty cell, cell_seq holds bit s for sequence s, and
 * token_seq ids must be in 0..63. clm_kv_cells_used: how many cells hold a position, the index of
 * the last one and that of the first empty cell (-1 when there is none). */
clm_status clm_kv_mask(const int64_t *cell_pos, const uint64_t *cell_seq, int64_t n_kv,
                       const int64_t *token_pos, const int64_t *token_seq, int64_t n_tokens,
                       int64_t n_swa, uint16_t *out);
clm_status clm_kv_cells_used(const int64_t *cell_pos, int64_t n_cells, int64_t *n_used, int64_t *last_used,
                             int64_t *first_free);
/* A decode step's cells in one call: *n_used, the cells in use before it; the first n_tokens empty
 * cells (ascending) to cells[], given the tokens' positions and sequences (0..63); *n_kv, the cells
 * past the last used one rounded up to n_pad (at least n_pad, at most n_cells); and the step's
 * clm_kv_mask [n_tokens][n_kv] (no window) to mask (room for n_tokens * n_kv values, at most
 * n_tokens * n_cells). When fewer than n_tokens cells are empty, nothing is written and *n_kv is
 * -1 (the context is full). */
clm_status clm_kv_decode_step(int64_t *cell_pos, uint64_t *cell_seq, int64_t n_cells, const int64_t *token_pos,
                              const int64_t *token_seq, int64_t n_tokens, int64_t n_pad, int64_t *cells,
                              int64_t *n_used, int64_t *n_kv, uint16_t *mask);
/* The tokenizer's tables and merge loop (src/core/vocab.c). Strings are one blob and n + 1 uint32
 * offsets (string i is text[offsets[i] .. offsets[i + 1])); the blobs, offsets and scores stay the
 * caller's and must outlive the vocab. clm_vocab_new indexes the token texts (two equal texts:
 * CLM_ERR_INVALID_ARG with their ids in duplicate[0..1]). clm_vocab_set_merges indexes BPE merge
 * lines ("left right", split at the first space after the first byte, the first occurrence's index
 * the rank); clm_vocab_set_scores gives the per-token scores SPM merges by (NULL: all equal).
 * clm_vocab_find: the id of a text, or -1; clm_vocab_merge_rank: the rank of a pair, or -1.
 * clm_vocab_bpe: the ids of one pre-tokenized word, merged lowest rank first (CLM_BPE_BYTE_LEVEL:
 * the word's bytes are mapped to GPT-2's printable characters first and a symbol that is no token
 * becomes the tokens of its bytes' one-byte texts; otherwise the <0xXX> tokens; IGNORE_MERGES: a word
 * that is a token is taken whole; NEWLINE_TOKENS: the same for a word of newlines only).
 * clm_vocab_spm: the ids of a text merged SentencePiece-style, highest score first, a character no
 * token covers as <0xXX> (or one-byte) tokens, else unk_id (-1: none, an error). Both write at most
 * cap ids (2 * len + 1 always suffices) and the count to *n_ids. */
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

/* ---- contexts and tensors (metadata only; data is placed by clm_tensor_alloc) ------------- */
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

/* Views: no compute, share the source's data (ggml_view_4d / reshape / permute / transpose). */
clm_status clm_view_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                       int64_t ne3, size_t nb1, size_t nb2, size_t nb3, size_t offset,
                       clm_tensor **out);
clm_status clm_reshape_4d(clm_context *ctx, clm_tensor *a, int64_t ne0, int64_t ne1, int64_t ne2,
                          int64_t ne3, clm_tensor **out);
clm_status clm_permute(clm_context *ctx, clm_tensor *a, int32_t axis0, int32_t axis1, int32_t axis2,
                       int32_t axis3, clm_tensor **out);
clm_status clm_transpose(clm_context *ctx, clm_tensor *a, clm_tensor **out);

/* Compute nodes. b broadcasts to a in add/mul/div (ggml rules: a->ne[i] % b->ne[i] == 0). */
clm_status clm_add(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
clm_status clm_mul(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* div: a / b (ggml_div); the result has a's type and shape. */
clm_status clm_div(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* cpy: a's elements into b (same element count; types may differ); the result views b. */
clm_status clm_cpy(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
clm_status clm_cont(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* A generic node for ops whose shape the Python graph builder computes: type/ne of the result,
 * the sources (n_src <= CLM_MAX_SRC) and the op_params bytes (<= 4 * CLM_MAX_OP_PARAMS). */
clm_status clm_new_op(clm_context *ctx, int32_t op, int32_t type, int32_t n_dims, const int64_t *ne,
                      clm_tensor *const *srcs, int32_t n_src, const void *params,
                      size_t params_size, clm_tensor **out);

/* LLM ops with ggml's shapes and op_params layouts (ggml.h). Results are F32 unless noted. */
/* mul_mat: a [K, N, ne2, ne3] (weights), b [K, M, ne12, ne13] -> [N, M, ne12, ne13];
 * ne12 % ne2 == 0 and ne13 % ne3 == 0 (a broadcasts over b's batches). */
clm_status clm_mul_mat(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* get_rows: a [ne0, n_rows, ne2, ne3], rows I32 [n, ne2, ne3] -> [ne0, n, ne2, ne3]. */
clm_status clm_get_rows(clm_context *ctx, clm_tensor *a, clm_tensor *rows, clm_tensor **out);
/* set_rows: dst [ne0, n_rows, ...] gets src [ne0, n, ...] at rows (I32/I64 [n, ...]);
 * the result is a view of dst (src[0] = src, src[1] = rows, src[2] = dst). */
clm_status clm_set_rows(clm_context *ctx, clm_tensor *dst, clm_tensor *src, clm_tensor *rows,
                        clm_tensor **out);
/* rms_norm over ne0: op_params[0] = eps (float). */
clm_status clm_rms_norm(clm_context *ctx, clm_tensor *a, float eps, clm_tensor **out);
/* scale: a * s + b; op_params = {s, b} (floats). */
clm_status clm_scale(clm_context *ctx, clm_tensor *a, float s, float b, clm_tensor **out);
/* rope_ext: a [head_dim, n_head, n_tokens, 1], pos I32 [n_tokens], freq_factors F32
 * [n_dims/2] or NULL. op_params: {0, n_dims, mode, 0, n_ctx_orig, freq_base, freq_scale,
 * ext_factor, attn_factor, beta_fast, beta_slow} (the last six floats). mode 0 = normal,
 * CLM_ROPE_TYPE_NEOX = neox. */
#define CLM_ROPE_TYPE_NEOX 2
clm_status clm_rope_ext(clm_context *ctx, clm_tensor *a, clm_tensor *pos, clm_tensor *freq_factors,
                        int32_t n_dims, int32_t mode, int32_t n_ctx_orig, float freq_base,
                        float freq_scale, float ext_factor, float attn_factor, float beta_fast,
                        float beta_slow, clm_tensor **out);
/* soft_max_ext over ne0 of a * scale + mask (+ ALiBi slope * mask when max_bias > 0);
 * mask F16/F32 [ne0, >= ne1, ...] or NULL. op_params = {scale, max_bias}. */
clm_status clm_soft_max_ext(clm_context *ctx, clm_tensor *a, clm_tensor *mask, float scale,
                            float max_bias, clm_tensor **out);
/* flash_attn_ext: q [D, n_q, n_head, n_seq], k [D, n_kv, n_head_kv, n_seq], v [Dv, n_kv,
 * n_head_kv, n_seq], mask F16 [n_kv, >= n_q, ...] or NULL -> [Dv, n_head, n_q, n_seq] (note the
 * permuted result, as ggml). op_params = {scale, max_bias, logit_softcap, prec}. */
clm_status clm_flash_attn_ext(clm_context *ctx, clm_tensor *q, clm_tensor *k, clm_tensor *v,
                              clm_tensor *mask, float scale, float max_bias, float logit_softcap,
                              clm_tensor **out);
/* op_params[CLM_FA_MASK_BINARY] = 1 on a flash_attn_ext node promises that its mask holds only 0 and
 * -inf (causal and sequence masks), so the backend need not add it as a bias where a boolean mask
 * does (prefill). ggml never sets it: there a mask may hold any finite bias. */
#define CLM_FA_MASK_BINARY 15
/* argmax over ne0: a [ne0, ne1] -> I32 [ne1]. */
clm_status clm_argmax(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* unary silu: x * sigmoid(x). op_params[0] = CLM_UNARY_OP_SILU. */
clm_status clm_silu(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* swiglu fused: a [2n, ...] -> silu(a[:n]) * a[n:] (swapped: silu(a[n:]) * a[:n]).
 * op_params = {CLM_GLU_OP_SWIGLU, swapped}. */
clm_status clm_swiglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);
/* swiglu split: silu(a) * b, same shapes. */
clm_status clm_swiglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* unary gelu (ggml_gelu), the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
 * op_params[0] = CLM_UNARY_OP_GELU. */
clm_status clm_gelu(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* unary gelu_erf (ggml_gelu_erf), exact: 0.5 x (1 + erf(x / sqrt(2))). op_params[0] =
 * CLM_UNARY_OP_GELU_ERF. */
clm_status clm_gelu_erf(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* unary tanh. op_params[0] = CLM_UNARY_OP_TANH. */
clm_status clm_tanh(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* geglu fused: a [2n, ...] -> gelu(a[:n]) * a[n:] (swapped: gelu(a[n:]) * a[:n]), gelu the tanh
 * approximation. op_params = {CLM_GLU_OP_GEGLU, swapped}. */
clm_status clm_geglu(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);
/* geglu split: gelu(a) * b, same shapes. op_params = {CLM_GLU_OP_GEGLU, 0}. */
clm_status clm_geglu_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* geglu_erf fused / split: as geglu with gelu_erf. op_params = {CLM_GLU_OP_GEGLU_ERF, swapped}. */
clm_status clm_geglu_erf(clm_context *ctx, clm_tensor *a, bool swapped, clm_tensor **out);
clm_status clm_geglu_erf_split(clm_context *ctx, clm_tensor *a, clm_tensor *b, clm_tensor **out);
/* argsort along ne0 (ggml_argsort): a float [ne0, ne1, ne2, ne3] -> I32 of the same shape, each row
 * the indices 0..ne0-1 ordered by a's values, ascending or descending. op_params[0] = order
 * (clm_sort_order). Ties come out in the order of ggml's CPU kernel (libstdc++ std::sort, not
 * stable); a top-k is a view of the first k columns of the descending order (ggml_argsort_top_k). */
clm_status clm_argsort(clm_context *ctx, clm_tensor *a, int32_t order, clm_tensor **out);
/* sum_rows (ggml_sum_rows): a float [ne0, ne1, ne2, ne3] -> [1, ne1, ne2, ne3] of a's type, the sum
 * of each row. */
clm_status clm_sum_rows(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* clamp (ggml_clamp): MAX(MIN(x, max), min) element by element (a NaN becomes max, and min wins
 * when min > max, as ggml's CPU kernel); a float tensor -> the same shape and type.
 * op_params = {min, max} (floats). */
clm_status clm_clamp(clm_context *ctx, clm_tensor *a, float min, float max, clm_tensor **out);
/* mul_mat_id (ggml_mul_mat_id), the experts' matmul of a mixture of experts:
 * as [K, N, n_as] (one weight matrix per expert, any MUL_MAT weight type, not transposed),
 * b [K, n_b1, n_tokens] with ids->ne[0] % n_b1 == 0 (n_b1 = 1 broadcasts one row to every
 * selected expert), ids I32 [n_ids, n_tokens] (the experts of each token, each in 0..n_as-1)
 * -> F32 [N, n_ids, n_tokens]: out[:, e, t] = as[:, :, ids[e, t]] x b[:, e % n_b1, t].
 * src = {as, b, ids}. */
clm_status clm_mul_mat_id(clm_context *ctx, clm_tensor *as, clm_tensor *b, clm_tensor *ids,
                          clm_tensor **out);

/* Tensor parallelism: collectives over the ranks of the communicator of the backend that runs the
 * graph (clm_cann_comm_init). Every rank's graph holds the same collective nodes, in the same
 * order, with the same shapes. No CPU fallback: only a device with a communicator runs them. */
/* all_reduce (sum): a contiguous F32/F16/BF16 tensor -> the same shape and type, the elementwise
 * sum of every rank's a (Megatron's row-parallel output). */
clm_status clm_all_reduce(clm_context *ctx, clm_tensor *a, clm_tensor **out);
/* all_gather: a contiguous F32/F16/BF16 tensor [ne0, ne1, ne2, 1] -> [ne0, ne1, ne2, n_ranks],
 * rank r's a at index r of ne3 (the order of HcclAllGather). op_params[0] = n_ranks. */
clm_status clm_all_gather(clm_context *ctx, clm_tensor *a, int32_t n_ranks, clm_tensor **out);

/* ---- graphs ------------------------------------------------------------------------------ */
clm_status clm_graph_new(clm_context *ctx, size_t max_nodes, clm_graph **out);
/* Adds tensor and everything it depends on, in topological order (ggml_build_forward_expand). */
clm_status clm_graph_build_forward(clm_graph *graph, clm_tensor *tensor);
size_t clm_graph_n_nodes(const clm_graph *graph);
clm_tensor *clm_graph_node(const clm_graph *graph, size_t i);
size_t clm_graph_n_leafs(const clm_graph *graph);
clm_tensor *clm_graph_leaf(const clm_graph *graph, size_t i);
void clm_graph_reset(clm_graph *graph);
/* What a scheduler reads of every node, in one call (each read from Python crosses the FFI):
 * node i's CLM_SCAN_WORDS words from words[i * CLM_SCAN_WORDS] are indexed by clm_scan_word, and
 * its sources (up to the last present one, CLM_SCAN_N_SRC of them) follow those of the nodes
 * before it in src_words, 4 words each: the source, its root, the root's buffer type and the
 * root's buffer usage + 1 (0: no buffer), all 0 for an absent source. A tensor's "root" is its
 * view source, else itself; a buffer type is given only for a placed tensor (buffer and data
 * set), else 0. n_words must cover the nodes and n_src_words their sources (at most
 * 4 * CLM_MAX_SRC per node); *n_src_used gets the source words written. */
typedef enum clm_scan_word {
    CLM_SCAN_NODE = 0,          /* the node (clm_tensor *) */
    CLM_SCAN_OP = 1,
    CLM_SCAN_FLAGS = 2,         /* clm_scan_flag bits */
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

/* ---- registry and devices ------------------------------------------------------------------ */
/* The CANN registry: aclInit once, one device per aclrtGetDeviceCount(). */
clm_status clm_cann_reg(clm_reg **out);
const char *clm_reg_name(const clm_reg *reg);
size_t clm_reg_device_count(const clm_reg *reg);
clm_status clm_reg_device(const clm_reg *reg, size_t index, clm_device **out);

const char *clm_device_name(const clm_device *dev);         /* "CANN0" */
const char *clm_device_description(const clm_device *dev);  /* "Ascend910B4" or "acl_host" */
clm_status clm_device_memory(clm_device *dev, size_t *free_bytes, size_t *total_bytes);
int32_t clm_device_get_type(const clm_device *dev);  /* clm_device_type */
int32_t clm_device_id(const clm_device *dev);
bool clm_device_caps_async(const clm_device *dev);
bool clm_device_caps_events(const clm_device *dev);
bool clm_device_caps_host_buffer(const clm_device *dev);
clm_status clm_device_init_backend(clm_device *dev, clm_backend **out);
clm_buffer_type *clm_device_buffer_type(clm_device *dev);
clm_buffer_type *clm_device_host_buffer_type(clm_device *dev);  /* NULL if none */
/* Buffers over host memory the caller owns (ggml's buffer_from_host_ptr): only where the
 * device's memory is the host's (acl_host), through aclrtHostRegister. Tensors are placed in them
 * with clm_tensor_alloc and read by kernels where they lie, never written through the backend;
 * types the device keeps in another layout (Q8_0, Q4_0, Q4_1) cannot be placed there. ptr must be
 * 4 KiB aligned; the memory must outlive the buffer. */
bool clm_device_caps_buffer_from_host_ptr(const clm_device *dev);
bool clm_device_maps_host_type(const clm_device *dev, int32_t type);   /* placeable in such buffers */
clm_status clm_device_buffer_from_host_ptr(clm_device *dev, void *ptr, size_t size, clm_buffer **out);
/* A buffer over a device image in host memory: the raw bytes of a device buffer of this device's
 * buffer type (clm_buffer_get_raw), e.g. a cache file of converted weights mapped by the caller.
 * Tensors are placed as in that buffer type (same alignment, sizes and device layouts, Q8_0 / Q4_0
 * / Q4_1 included) and read by kernels where they lie; nothing writes them. Same conditions as
 * clm_device_buffer_from_host_ptr (acl_host, ptr 4 KiB aligned, memory outlives the buffer). */
clm_status clm_device_buffer_from_image(clm_device *dev, void *ptr, size_t size, clm_buffer **out);
bool clm_device_supports_op(clm_device *dev, const clm_tensor *op);
/* supports_op of every node of graph into out[0 .. n_nodes) (1 or 0), in one call; n >= n_nodes. */
clm_status clm_device_supports_graph(clm_device *dev, const clm_graph *graph, uint8_t *out, size_t n);
bool clm_device_supports_buft(clm_device *dev, const clm_buffer_type *buft);
bool clm_device_offload_op(clm_device *dev, const clm_tensor *op);
clm_status clm_device_event_new(clm_device *dev, clm_event **out);
void clm_event_free(clm_event *event);
clm_status clm_event_synchronize(clm_event *event);

/* ---- buffer types and buffers -------------------------------------------------------------- */
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
/* The buffer's raw bytes [offset, offset + size) as the device holds them (device layouts and
 * padding included), synchronously: what clm_device_buffer_from_image takes back. */
clm_status clm_buffer_get_raw(clm_buffer *buffer, size_t offset, void *dst, size_t size);
clm_status clm_buffer_clear(clm_buffer *buffer, uint8_t value);

/* Places tensor at base + offset in buffer (ggml_backend_tensor_alloc); checks it fits. */
clm_status clm_tensor_alloc(clm_buffer *buffer, clm_tensor *tensor, size_t offset);
/* Gives a view the data address of its view_src (ggml_backend_view_init). */
clm_status clm_tensor_view_init(clm_tensor *tensor);
/* Synchronous host <-> tensor copies of a byte range (ggml_backend_tensor_set / get / memset). */
clm_status clm_tensor_set(clm_tensor *tensor, const void *data, size_t offset, size_t size);
clm_status clm_tensor_get(const clm_tensor *tensor, void *data, size_t offset, size_t size);
clm_status clm_tensor_memset(clm_tensor *tensor, uint8_t value, size_t offset, size_t size);
/* Whole-tensor copy between any two buffers (ggml_backend_tensor_copy). */
clm_status clm_tensor_copy(const clm_tensor *src, clm_tensor *dst);

/* ---- backends (a stream on a device) ------------------------------------------------------- */
void clm_backend_free(clm_backend *backend);
const char *clm_backend_name(const clm_backend *backend);
clm_device *clm_backend_device(const clm_backend *backend);
clm_status clm_backend_set_tensor_async(clm_backend *backend, clm_tensor *tensor, const void *data,
                                        size_t offset, size_t size);
clm_status clm_backend_get_tensor_async(clm_backend *backend, const clm_tensor *tensor, void *data,
                                        size_t offset, size_t size);
/* Copies src (on backend_src) into dst (on backend_dst), ordered on the streams. */
clm_status clm_backend_cpy_tensor_async(clm_backend *backend_src, clm_backend *backend_dst,
                                        const clm_tensor *src, clm_tensor *dst);
clm_status clm_backend_synchronize(clm_backend *backend);
/* Runs every node of graph on this backend; asynchronous: synchronize before reading. */
clm_status clm_backend_graph_compute(clm_backend *backend, clm_graph *graph);
clm_status clm_backend_event_record(clm_backend *backend, clm_event *event);
clm_status clm_backend_event_wait(clm_backend *backend, clm_event *event);

/* ---- CANN backend statistics and scratch pool (exposed for tests and tools) ---------------- */
typedef enum clm_pool_kind {
    CLM_POOL_LEGACY = 0,  /* fixed slot table (GGML_CANN_MEM_POOL=leg) */
    CLM_POOL_VMM = 1,     /* virtual range grown by mapping physical chunks (default) */
} clm_pool_kind;

typedef struct clm_cann_stats {
    int32_t pool_kind;          /* clm_pool_kind */
    size_t pool_in_use;         /* bytes handed out now */
    size_t pool_peak;           /* most bytes ever handed out at once */
    size_t pool_reserved;       /* legacy: bytes held by the slot table; VMM: reserved address range */
    size_t pool_mapped;         /* VMM: physical bytes mapped; legacy: bytes allocated from the device */
    int32_t pool_slots_used;    /* legacy: occupied slots */
    int32_t pool_slots_total;   /* legacy: table size */
    int64_t graph_captures;     /* GGML_CANN_ACL_GRAPH: graphs captured */
    int64_t graph_replays;      /* ... and replayed */
    int32_t graph_cached;       /* captured graphs held in the LRU */
    int64_t fused_add_rms_norm; /* CANN_LLM_FUSION: ADD+RMS_NORM+MUL launched as one aclnnAddRmsNorm
                                 * (counted when issued: eagerly or while capturing, not per replay) */
    int64_t mul_mat_id_routed;  /* MUL_MAT_IDs issued as a routed grouped product (CANN_LLM_MUL_MAT_ID) */
    int64_t mul_mat_id_gathered; /* ... and as per-token gathers; counted as fused_add_rms_norm */
    int64_t casts_shared;       /* products that used another product's cast of the same activations
                                 * (the F16 x of Q/K/V, gate/up; counted when issued, as above) */
    int64_t rope_fused;         /* ROPE nodes launched as one aclnnRotaryPositionEmbedding (CANN_LLM_ROPE;
                                 * counted when issued, as above) */
} clm_cann_stats;

clm_status clm_cann_backend_stats(clm_backend *backend, clm_cann_stats *out);

/* Per-node device time (the profiler). While on, graphs run eagerly (not captured) and a timing
 * event is recorded on the stream before each graph and after each node; off drops what was not
 * taken. take synchronizes the stream and returns every node computed since the last take, in
 * order, then forgets them: with out NULL it only sets *n to their count. */
typedef struct clm_cann_node_time {
    char name[CLM_MAX_NAME];
    int32_t op;                 /* clm_op */
    int32_t type;               /* clm_type of the result */
    int64_t ne[CLM_MAX_DIMS];
    int32_t graph;              /* which graph_compute since the last take (0, 1, ...) */
    float start_ms;             /* from that graph's start event to the end of the previous node */
    float ms;                   /* device time: the previous node's end (or the graph's start) to this end */
} clm_cann_node_time;

clm_status clm_cann_profile(clm_backend *backend, bool on);
clm_status clm_cann_profile_take(clm_backend *backend, clm_cann_node_time *out, size_t cap, size_t *n);
/* A tensor-parallel group: rank 0 makes the RootInfo (HcclGetRootInfo on its backend's device),
 * the application hands the bytes to every rank, and each rank joins with clm_cann_comm_init
 * (HcclCommInitRootInfo: blocks until all n_ranks have joined). The communicator belongs to the
 * backend: its ALL_REDUCE / ALL_GATHER nodes run over it on the backend's stream; it is destroyed
 * with the backend. One communicator per backend. */
#define CLM_COMM_ROOT_INFO_BYTES 4108
clm_status clm_cann_comm_root_info(clm_backend *backend, void *out, size_t size);
clm_status clm_cann_comm_init(clm_backend *backend, int32_t n_ranks, int32_t rank, const void *root_info,
                              size_t size);

/* Temporary device memory from the backend's pool, valid in stream order; free in LIFO order. */
clm_status clm_cann_pool_alloc(clm_backend *backend, size_t size, void **ptr, size_t *actual_size);
clm_status clm_cann_pool_free(clm_backend *backend, void *ptr, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* CANN_LLM_H */
