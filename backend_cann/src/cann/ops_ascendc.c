/* ops_ascendc.c - launches of the AscendC kernels of ascendc_ops/ (clm_ascendc.h): which nodes each
 * kernel computes, the host tiling, and the mapping of a node's tensors to the kernel's
 * arguments. ops_cpy.c and ops_get_rows.c call these for the cases the kernels cover; the
 * entry points are the toolkit's generated aclrtlaunch_* functions on an NPU and libacl_host's
 * copies of the same kernels on the host. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cann/cann_common.h"
#include "cann/quant_layout.h"
#include "clm_ascendc.h"

/* CANN_LLM_ASCENDC=0 (or off, false, no) turns the kernels off, read once per process: DUP, CPY
 * and GET_ROWS then use the aclnn compositions alone, and quantizing copies are declined (for
 * A/B comparisons and for bisecting). */
static bool kernels_enabled(void) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *v = getenv("CANN_LLM_ASCENDC");
        enabled = !(v != NULL && (strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0 || strcasecmp(v, "false") == 0 ||
                                  strcasecmp(v, "no") == 0));
    }
    return enabled != 0;
}

static clm_status launch_status(uint32_t err, const char *kernel) {
    return err == ACL_SUCCESS ? CLM_OK : cann_acl_error((aclError)err, kernel);
}

static bool element_aligned(const clm_tensor *t) {
    return (uintptr_t)t->data % clm_type_size(t->type) == 0;
}

/* ---- clm_dup ---------------------------------------------------------------------------------- */
static bool is_dup_type(int32_t type) {
    return type == CLM_TYPE_F32 || type == CLM_TYPE_F16 || type == CLM_TYPE_BF16;
}

bool cann_asc_dup_supported(const clm_tensor *src, const clm_tensor *dst) {
    if (!kernels_enabled() || !is_dup_type(src->type) || !is_dup_type(dst->type)) return false;
    bool same = src->type == dst->type;
    bool f32_f16 = (src->type == CLM_TYPE_F32 && dst->type == CLM_TYPE_F16) ||
                   (src->type == CLM_TYPE_F16 && dst->type == CLM_TYPE_F32);
    return (same || f32_f16) && clm_is_contiguous(src) && clm_is_contiguous(dst) &&
           clm_nelements(src) == clm_nelements(dst);
}

/* A same-type copy moves the bits: BF16 goes as F16. */
static uint32_t dup_type_code(int32_t type) { return type == CLM_TYPE_F32 ? CLM_ASC_F32 : CLM_ASC_F16; }

clm_status cann_asc_dup(cann_backend_ctx *ctx, const clm_tensor *src, clm_tensor *dst) {
    if (!element_aligned(src) || !element_aligned(dst))
        return clm_error(CLM_ERR_UNSUPPORTED, "clm_dup: '%s' or '%s' does not start on an element", src->name,
                         dst->name);
    uint64_t n = (uint64_t)clm_nelements(dst);
    clm_asc_tiling t = clm_asc_dup_tiling(n);
    return launch_status(aclrtlaunch_clm_dup(t.block_dim, ctx->stream, src->data, dst->data, dup_type_code(src->type),
                                             dup_type_code(dst->type), n, t.tile),
                         "aclrtlaunch_clm_dup");
}

/* ---- clm_quantize ----------------------------------------------------------------------------- */
/* dst is a contiguous run of whole blocks of a Q8_0 / Q4_0 tensor: the tensor itself, or (CPY) a
 * view of it that starts on a block. */
bool cann_asc_quantize_supported(const clm_tensor *src, const clm_tensor *dst) {
    if (!kernels_enabled()) return false;
    if (src->type != CLM_TYPE_F32 && src->type != CLM_TYPE_F16) return false;
    if (dst->type != CLM_TYPE_Q8_0 && dst->type != CLM_TYPE_Q4_0) return false;
    const clm_tensor *storage = clm_tensor_storage(dst);
    const cann_qlayout *layout = cann_qlayout_get(dst->type);
    return layout != NULL && storage->type == dst->type && clm_is_contiguous(src) && clm_is_contiguous(dst) &&
           clm_is_contiguous(storage) && clm_nelements(src) == clm_nelements(dst) &&
           dst->ne[0] % CLM_ASC_GROUP == 0 && storage->ne[0] % CLM_ASC_GROUP == 0 &&
           (dst->view_src == NULL || dst->view_offs % layout->block_bytes == 0);
}

clm_status cann_asc_quantize(cann_backend_ctx *ctx, const clm_tensor *src, clm_tensor *dst) {
    if (!element_aligned(src))
        return clm_error(CLM_ERR_UNSUPPORTED, "clm_quantize: '%s' does not start on an element", src->name);
    const clm_tensor *storage = clm_tensor_storage(dst);
    const cann_qlayout *layout = cann_qlayout_get(dst->type);
    size_t total_blocks = (size_t)(clm_nelements(storage) / CLM_ASC_GROUP);
    size_t first_block = dst->view_src ? dst->view_offs / layout->block_bytes : 0;
    uint64_t n_groups = (uint64_t)(clm_nelements(dst) / CLM_ASC_GROUP);
    char *base = storage->data;
    void *dst_q = base + cann_qlayout_region_offset(layout, total_blocks, 0) + first_block * layout->region_bytes[0];
    void *dst_d = base + cann_qlayout_region_offset(layout, total_blocks, 1) + first_block * layout->region_bytes[1];
    clm_asc_tiling t = clm_asc_quantize_tiling(n_groups);
    uint32_t dst_type = dst->type == CLM_TYPE_Q8_0 ? CLM_ASC_Q8_0 : CLM_ASC_Q4_0;
    uint32_t src_type = src->type == CLM_TYPE_F32 ? CLM_ASC_F32 : CLM_ASC_F16;
    return launch_status(aclrtlaunch_clm_quantize(t.block_dim, ctx->stream, src->data, dst_q, dst_d, src_type,
                                                  dst_type, n_groups, t.tile),
                         "aclrtlaunch_clm_quantize");
}

/* ---- clm_get_rows ----------------------------------------------------------------------------- */
static bool is_quant_table(int32_t type) {
    return type == CLM_TYPE_Q8_0 || type == CLM_TYPE_Q4_0 || type == CLM_TYPE_Q4_1;
}

bool cann_asc_get_rows_supported(const clm_tensor *op) {
    const clm_tensor *a = op->src[0], *ids = op->src[1];
    if (!kernels_enabled()) return false;
    if ((op->type != CLM_TYPE_F32 && op->type != CLM_TYPE_F16) || !clm_is_contiguous(op)) return false;
    if (ids->type != CLM_TYPE_I32) return false;
    for (int i = 0; i < CLM_MAX_DIMS; i++)
        if (ids->nb[i] % sizeof(int32_t) != 0) return false;
    if (a->type == CLM_TYPE_F32 || a->type == CLM_TYPE_F16) {
        size_t es = clm_type_size(a->type);
        if (a->nb[0] != es) return false;
        for (int i = 1; i < CLM_MAX_DIMS; i++)
            if (a->nb[i] % es != 0) return false;
        return true;
    }
    return is_quant_table(a->type) && a->view_src == NULL && clm_is_contiguous(a) &&
           a->ne[0] % CLM_ASC_GROUP == 0;
}

static uint32_t table_type_code(int32_t type) {
    switch (type) {
    case CLM_TYPE_F32: return CLM_ASC_F32;
    case CLM_TYPE_F16: return CLM_ASC_F16;
    case CLM_TYPE_Q8_0: return CLM_ASC_Q8_0;
    case CLM_TYPE_Q4_0: return CLM_ASC_Q4_0;
    default: return CLM_ASC_Q4_1;
    }
}

clm_status cann_asc_get_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *a = dst->src[0], *ids = dst->src[1];
    char *data = a->data;
    void *src_q = data, *src_d = NULL, *src_m = NULL;
    int64_t s1, s2, s3, table_elems;
    if (is_quant_table(a->type)) {
        const cann_qlayout *layout = cann_qlayout_get(a->type);
        size_t blocks = (size_t)(clm_nelements(a) / CLM_ASC_GROUP);
        src_d = data + cann_qlayout_region_offset(layout, blocks, 1);
        if (a->type == CLM_TYPE_Q4_1) src_m = data + cann_qlayout_region_offset(layout, blocks, 2);
        s1 = a->ne[0];
        s2 = s1 * a->ne[1];
        s3 = s2 * a->ne[2];
        table_elems = clm_nelements(a);
    } else {
        if (!element_aligned(a))
            return clm_error(CLM_ERR_UNSUPPORTED, "clm_get_rows: '%s' does not start on an element", a->name);
        int64_t es = (int64_t)clm_type_size(a->type);
        s1 = (int64_t)a->nb[1] / es;
        s2 = (int64_t)a->nb[2] / es;
        s3 = (int64_t)a->nb[3] / es;
        table_elems = a->ne[0] + (a->ne[1] - 1) * s1 + (a->ne[2] - 1) * s2 + (a->ne[3] - 1) * s3;
    }
    int64_t n = ids->ne[0], ne11 = ids->ne[1], ne12 = ids->ne[2];
    uint32_t src_type = table_type_code(a->type);
    clm_asc_tiling t = clm_asc_get_rows_tiling(src_type, a->ne[0], n * ne11 * ne12);
    uint32_t err = aclrtlaunch_clm_get_rows(
        t.block_dim, ctx->stream, src_q, src_d, src_m, ids->data, dst->data, src_type,
        dst->type == CLM_TYPE_F16 ? CLM_ASC_F16 : CLM_ASC_F32, a->ne[0], a->ne[1], s1, s2, s3, table_elems, n, ne11,
        ne12, (int64_t)(ids->nb[0] / 4), (int64_t)(ids->nb[1] / 4), (int64_t)(ids->nb[2] / 4), t.tile);
    return launch_status(err, "aclrtlaunch_clm_get_rows");
}
