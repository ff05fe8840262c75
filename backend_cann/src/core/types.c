/* types.c - type traits (block size, block bytes) numbered as ggml, and op names. */
#include "clm_impl.h"

struct type_traits {
    const char *name;
    int64_t block_size;  /* elements per block */
    size_t type_size;    /* bytes per block */
    bool quantized;
};

/* Sizes as ggml's: e.g. Q4_0 = fp16 scale + 16 bytes of nibbles per 32 elements. */
static const struct type_traits traits[CLM_TYPE_COUNT] = {
    [CLM_TYPE_F32] = {"f32", 1, 4, false},
    [CLM_TYPE_F16] = {"f16", 1, 2, false},
    [CLM_TYPE_Q4_0] = {"q4_0", 32, 18, true},
    [CLM_TYPE_Q4_1] = {"q4_1", 32, 20, true},
    [CLM_TYPE_Q5_0] = {"q5_0", 32, 22, true},
    [CLM_TYPE_Q5_1] = {"q5_1", 32, 24, true},
    [CLM_TYPE_Q8_0] = {"q8_0", 32, 34, true},
    [CLM_TYPE_Q8_1] = {"q8_1", 32, 40, true},
    [CLM_TYPE_Q2_K] = {"q2_K", 256, 84, true},
    [CLM_TYPE_Q3_K] = {"q3_K", 256, 110, true},
    [CLM_TYPE_Q4_K] = {"q4_K", 256, 144, true},
    [CLM_TYPE_Q5_K] = {"q5_K", 256, 176, true},
    [CLM_TYPE_Q6_K] = {"q6_K", 256, 210, true},
    [CLM_TYPE_Q8_K] = {"q8_K", 256, 292, true},
    [CLM_TYPE_I8] = {"i8", 1, 1, false},
    [CLM_TYPE_I16] = {"i16", 1, 2, false},
    [CLM_TYPE_I32] = {"i32", 1, 4, false},
    [CLM_TYPE_I64] = {"i64", 1, 8, false},
    [CLM_TYPE_F64] = {"f64", 1, 8, false},
    [CLM_TYPE_BF16] = {"bf16", 1, 2, false},
};

static const struct type_traits *get_traits(int32_t type) {
    if (type < 0 || type >= CLM_TYPE_COUNT || traits[type].name == NULL) return NULL;
    return &traits[type];
}

const char *clm_type_name(int32_t type) {
    const struct type_traits *t = get_traits(type);
    return t ? t->name : NULL;
}

int64_t clm_type_block_size(int32_t type) {
    const struct type_traits *t = get_traits(type);
    return t ? t->block_size : 0;
}

size_t clm_type_size(int32_t type) {
    const struct type_traits *t = get_traits(type);
    return t ? t->type_size : 0;
}

bool clm_type_is_quantized(int32_t type) {
    const struct type_traits *t = get_traits(type);
    return t ? t->quantized : false;
}

size_t clm_row_size(int32_t type, int64_t ne0) {
    const struct type_traits *t = get_traits(type);
    if (t == NULL || ne0 < 0) return 0;
    return t->type_size * (size_t)(ne0 / t->block_size);
}

static const char *const op_names[CLM_OP_COUNT] = {
    [CLM_OP_NONE] = "NONE",
    [CLM_OP_DUP] = "DUP",
    [CLM_OP_ADD] = "ADD",
    [CLM_OP_MUL] = "MUL",
    [CLM_OP_SCALE] = "SCALE",
    [CLM_OP_CPY] = "CPY",
    [CLM_OP_CONT] = "CONT",
    [CLM_OP_RESHAPE] = "RESHAPE",
    [CLM_OP_VIEW] = "VIEW",
    [CLM_OP_PERMUTE] = "PERMUTE",
    [CLM_OP_TRANSPOSE] = "TRANSPOSE",
    [CLM_OP_GET_ROWS] = "GET_ROWS",
    [CLM_OP_SET_ROWS] = "SET_ROWS",
    [CLM_OP_RMS_NORM] = "RMS_NORM",
    [CLM_OP_MUL_MAT] = "MUL_MAT",
    [CLM_OP_ROPE] = "ROPE",
    [CLM_OP_SOFT_MAX] = "SOFT_MAX",
    [CLM_OP_FLASH_ATTN_EXT] = "FLASH_ATTN_EXT",
    [CLM_OP_ARGMAX] = "ARGMAX",
    [CLM_OP_UNARY] = "UNARY",
    [CLM_OP_GLU] = "GLU",
    [CLM_OP_ARGSORT] = "ARGSORT",
    [CLM_OP_SUM_ROWS] = "SUM_ROWS",
    [CLM_OP_CLAMP] = "CLAMP",
    [CLM_OP_DIV] = "DIV",
    [CLM_OP_MUL_MAT_ID] = "MUL_MAT_ID",
    [CLM_OP_ALL_REDUCE] = "ALL_REDUCE",
    [CLM_OP_ALL_GATHER] = "ALL_GATHER",
};

static const char *const unary_names[CLM_UNARY_OP_COUNT] = {
    [CLM_UNARY_OP_SILU] = "SILU",
    [CLM_UNARY_OP_GELU] = "GELU",
    [CLM_UNARY_OP_GELU_ERF] = "GELU_ERF",
    [CLM_UNARY_OP_TANH] = "TANH",
};

static const char *const glu_names[CLM_GLU_OP_COUNT] = {
    [CLM_GLU_OP_SWIGLU] = "SWIGLU",
    [CLM_GLU_OP_GEGLU] = "GEGLU",
    [CLM_GLU_OP_GEGLU_ERF] = "GEGLU_ERF",
};

const char *clm_op_name(int32_t op) {
    if (op < 0 || op >= CLM_OP_COUNT) return NULL;
    return op_names[op];
}

const char *clm_op_desc(const clm_tensor *tensor) {
    int32_t sub = tensor->op_params[0];
    if (tensor->op == CLM_OP_UNARY && sub >= 0 && sub < CLM_UNARY_OP_COUNT) return unary_names[sub];
    if (tensor->op == CLM_OP_GLU && sub >= 0 && sub < CLM_GLU_OP_COUNT) return glu_names[sub];
    return clm_op_name(tensor->op);
}
