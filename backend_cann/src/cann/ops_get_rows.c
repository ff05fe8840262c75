/* ops_get_rows.c - GET_ROWS: dst [ne00, n, ne02, ne03] F32 / F16 = rows of src0 [ne00, ne01, ne02,
 * ne03] picked by I32 ids [n, ne02, ne03].
 *
 * The AscendC kernel clm_get_rows (ops_ascendc.c) computes the cases it covers: F32 / F16 tables
 * with contiguous rows, Q8_0 / Q4_0 / Q4_1 tables in the device layout, into a contiguous F32 or
 * F16 dst, in one launch; on acl_host it is 2.5x to 28x faster than the composition below,
 * except an F16 table's conversion into many F32 values (docs/ascendc.md), which stays on the
 * composition (use_kernel). The rest (BF16 tables, strided dst) composes aclnn calls, F32 dst
 * only: per (i2, i3) slice one aclnnIndexSelect along the row dim.
 *
 * F32 tables gather straight into dst; F16 / BF16 gather into a temporary and Cast. Quantized
 * tables (device layout of quant_layout.h) gather only the requested rows of each region, then
 * dequantize those rows with elementwise ops:
 *   Q8_0        Cast(int8 quants) * scale
 *   Q4_0 / Q4_1 the gathered bytes b (as int8) are split without bit ops: lo_u = b mod 16,
 *               high nibble = (b - lo_u) / 16, low nibble = ((lo_u + 8) mod 16) - 8
 *               (aclnnRemainderTensorScalar), written to the odd / even elements of dst;
 *               then * scale (Q4_0) or (+ offset) * scale (Q4_1, as the matmul reads it).
 */
#include "cann/cann_common.h"
#include "cann/quant_layout.h"

static aclTensor *acl_view(void *data, aclDataType dt, int nd, const int64_t *dims, const int64_t *strides,
                           int64_t offset) {
    int64_t extent = offset + 1;
    for (int i = 0; i < nd; i++) extent += (dims[i] - 1) * strides[i];
    return aclCreateTensor(dims, (uint64_t)nd, dt, strides, offset, ACL_FORMAT_ND, &extent, 1, data);
}

static bool is_float(int32_t t) { return t == CLM_TYPE_F32 || t == CLM_TYPE_F16 || t == CLM_TYPE_BF16; }

/* The IndexSelect composition's cases. */
static bool index_select_supported(const clm_tensor *op) {
    const clm_tensor *a = op->src[0], *ids = op->src[1];
    if (op->type != CLM_TYPE_F32 || ids->type != CLM_TYPE_I32 || op->nb[0] != sizeof(float)) return false;
    if (ids->nb[0] % sizeof(int32_t) != 0) return false;
    if (is_float(a->type)) {
        for (int i = 0; i < CLM_MAX_DIMS; i++)
            if (a->nb[i] % clm_type_size(a->type) != 0) return false;
        return true;
    }
    bool q = a->type == CLM_TYPE_Q8_0 || a->type == CLM_TYPE_Q4_0 || a->type == CLM_TYPE_Q4_1;
    return q && a->view_src == NULL && clm_is_contiguous(a) && a->ne[0] % CANN_QL_BLOCK == 0;
}

bool cann_supports_get_rows(const clm_tensor *op) {
    return cann_asc_get_rows_supported(op) || index_select_supported(op);
}

/* The kernel, unless the composition computes the case and was measured faster: a conversion of
 * a float table (F16 -> F32) into more than CANN_ASC_CONVERT_KERNEL_MAX values. */
static bool use_kernel(const clm_tensor *op) {
    if (!cann_asc_get_rows_supported(op)) return false;
    const clm_tensor *a = op->src[0];
    bool converts = (a->type == CLM_TYPE_F32 || a->type == CLM_TYPE_F16) && a->type != op->type;
    return !(converts && clm_nelements(op) > CANN_ASC_CONVERT_KERNEL_MAX && index_select_supported(op));
}

/* Remainder(self, 16) into out. */
static clm_status mod16(cann_backend_ctx *ctx, aclTensor *self, aclTensor *out) {
    float v = 16.0f;
    aclScalar *s = aclCreateScalar(&v, ACL_FLOAT);
    clm_status st = CANN_ACLNN(ctx, RemainderTensorScalar, self, s, out);
    aclDestroyScalar(s);
    return st;
}

static clm_status adds(cann_backend_ctx *ctx, aclTensor *self, float value, aclTensor *out) {
    float one = 1.0f;
    aclScalar *v = aclCreateScalar(&value, ACL_FLOAT), *alpha = aclCreateScalar(&one, ACL_FLOAT);
    clm_status st = CANN_ACLNN(ctx, Adds, self, v, alpha, out);
    aclDestroyScalar(v);
    aclDestroyScalar(alpha);
    return st;
}

/* Packed int4 rows (n, ne0/2 bytes at q) -> signed values into out (n, ne0) F32 (row stride ld). */
static clm_status unpack_int4(cann_backend_ctx *ctx, void *q, int64_t n, int64_t ne0, void *out, int64_t ld) {
    int64_t half = ne0 / 2;
    cann_temp tt, ut;
    clm_status st = cann_temp_alloc(ctx, (size_t)(n * half) * sizeof(float), &tt);
    if (st != CLM_OK) return st;
    st = cann_temp_alloc(ctx, (size_t)(n * half) * sizeof(float), &ut);
    if (st != CLM_OK) {
        cann_temp_free(&tt);
        return st;
    }
    int64_t d[2] = {n, half}, s[2] = {half, 1}, os[2] = {ld, 2};
    aclTensor *bytes = acl_view(q, ACL_INT8, 2, d, s, 0);
    aclTensor *t = acl_view(tt.ptr, ACL_FLOAT, 2, d, s, 0), *u = acl_view(ut.ptr, ACL_FLOAT, 2, d, s, 0);
    aclTensor *even = acl_view(out, ACL_FLOAT, 2, d, os, 0), *odd = acl_view(out, ACL_FLOAT, 2, d, os, 1);
    if (!bytes || !t || !u || !even || !odd) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: cannot describe the int4 unpacking views");
    } else {
        float m_one = -1.0f, sixteenth = 1.0f / 16.0f;
        aclScalar *alpha = aclCreateScalar(&m_one, ACL_FLOAT), *inv16 = aclCreateScalar(&sixteenth, ACL_FLOAT);
        st = CANN_ACLNN(ctx, Cast, bytes, ACL_FLOAT, t);                         /* t = b */
        if (st == CLM_OK) st = mod16(ctx, t, u);                                  /* u = b mod 16 */
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Add, t, u, alpha, t);              /* t = b - u */
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Muls, t, inv16, odd);              /* high nibble */
        if (st == CLM_OK) st = adds(ctx, u, 8.0f, u);                             /* u + 8 */
        if (st == CLM_OK) st = mod16(ctx, u, u);                                  /* (u + 8) mod 16 */
        if (st == CLM_OK) st = adds(ctx, u, -8.0f, even);                         /* low nibble */
        aclDestroyScalar(alpha);
        aclDestroyScalar(inv16);
    }
    cann_destroy_tensors(5, bytes, t, u, even, odd);
    cann_temp_free(&ut);
    cann_temp_free(&tt);
    return st;
}

/* Gathers n rows of `row_bytes`-byte rows (viewed as int8 / F16 units of `es` bytes) of a region
 * slice into tmp. */
static clm_status gather_region(cann_backend_ctx *ctx, void *region, aclDataType dt, int64_t row_elems,
                                int64_t first_row, int64_t n_rows, aclTensor *ids, int64_t n, void *tmp) {
    int64_t sd[2] = {n_rows, row_elems}, ss[2] = {row_elems, 1}, od[2] = {n, row_elems};
    aclTensor *self = acl_view(region, dt, 2, sd, ss, first_row * row_elems);
    aclTensor *out = acl_view(tmp, dt, 2, od, ss, 0);
    clm_status st = self && out ? CANN_ACLNN(ctx, IndexSelect, self, 0, ids, out)
                                : clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: cannot describe a region view");
    cann_destroy_tensors(2, self, out);
    return st;
}

static clm_status get_rows_quant(cann_backend_ctx *ctx, const clm_tensor *a, aclTensor *ids, int64_t n, int64_t slice,
                                 void *out, int64_t ld) {
    const cann_qlayout *layout = cann_qlayout_get(a->type);
    if (layout == NULL) return clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: '%s' has no device layout", a->name);
    int64_t ne0 = a->ne[0], rows = a->ne[1], kg = ne0 / CANN_QL_BLOCK;
    size_t n_blocks = (size_t)(clm_nelements(a) / CANN_QL_BLOCK);
    bool int4 = a->type != CLM_TYPE_Q8_0;
    int64_t qrow = int4 ? ne0 / 2 : ne0; /* bytes per row of quants */
    char *base = a->data;
    cann_temp qt, sct, ot = {0};
    clm_status st = cann_temp_alloc(ctx, (size_t)(n * qrow), &qt);
    if (st != CLM_OK) return st;
    st = cann_temp_alloc(ctx, (size_t)(n * kg) * 2, &sct);
    if (st != CLM_OK) {
        cann_temp_free(&qt);
        return st;
    }
    if (a->type == CLM_TYPE_Q4_1) st = cann_temp_alloc(ctx, (size_t)(n * kg) * 2, &ot);
    int64_t first = slice * rows;
    if (st == CLM_OK) st = gather_region(ctx, base, ACL_INT8, qrow, first, rows, ids, n, qt.ptr);
    if (st == CLM_OK)
        st = gather_region(ctx, base + cann_qlayout_region_offset(layout, n_blocks, 1), ACL_FLOAT16, kg, first,
                           rows, ids, n, sct.ptr);
    if (st == CLM_OK && ot.ptr)
        st = gather_region(ctx, base + cann_qlayout_region_offset(layout, n_blocks, 2), ACL_FLOAT16, kg, first,
                           rows, ids, n, ot.ptr);
    /* quants -> F32 values in out */
    if (st == CLM_OK) {
        if (int4) {
            st = unpack_int4(ctx, qt.ptr, n, ne0, out, ld);
        } else {
            int64_t d[2] = {n, ne0}, s[2] = {ne0, 1}, os[2] = {ld, 1};
            aclTensor *q = acl_view(qt.ptr, ACL_INT8, 2, d, s, 0), *o = acl_view(out, ACL_FLOAT, 2, d, os, 0);
            st = q && o ? CANN_ACLNN(ctx, Cast, q, ACL_FLOAT, o) : clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: bad view");
            cann_destroy_tensors(2, q, o);
        }
    }
    /* (+ offset) * scale, broadcast over each 32-block */
    if (st == CLM_OK) {
        int64_t vd[3] = {n, kg, CANN_QL_BLOCK}, vs[3] = {ld, CANN_QL_BLOCK, 1};
        int64_t pd[3] = {n, kg, 1}, ps[3] = {kg, 1, 1};
        aclTensor *v = acl_view(out, ACL_FLOAT, 3, vd, vs, 0);
        aclTensor *sc = acl_view(sct.ptr, ACL_FLOAT16, 3, pd, ps, 0);
        aclTensor *of = ot.ptr ? acl_view(ot.ptr, ACL_FLOAT16, 3, pd, ps, 0) : NULL;
        if (!v || !sc || (ot.ptr && !of)) {
            st = clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: bad view");
        } else {
            if (of) {
                float one = 1.0f;
                aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
                st = CANN_ACLNN(ctx, Add, v, of, alpha, v);
                aclDestroyScalar(alpha);
            }
            if (st == CLM_OK) st = CANN_ACLNN(ctx, Mul, v, sc, v);
        }
        cann_destroy_tensors(3, v, sc, of);
    }
    cann_temp_free(&ot);
    cann_temp_free(&sct);
    cann_temp_free(&qt);
    return st;
}

static clm_status get_rows_float(cann_backend_ctx *ctx, const clm_tensor *a, aclTensor *ids, int64_t n, int64_t i2,
                                 int64_t i3, void *out, int64_t ld) {
    size_t es = clm_type_size(a->type);
    aclDataType dt = cann_acl_type(a->type);
    int64_t sd[2] = {a->ne[1], a->ne[0]}, ss[2] = {(int64_t)(a->nb[1] / es), (int64_t)(a->nb[0] / es)};
    int64_t off = (int64_t)((i2 * a->nb[2] + i3 * a->nb[3]) / es);
    aclTensor *self = acl_view(a->data, dt, 2, sd, ss, off);
    int64_t od[2] = {n, a->ne[0]}, os[2] = {ld, 1}, ts[2] = {a->ne[0], 1};
    clm_status st;
    if (a->type == CLM_TYPE_F32) {
        aclTensor *o = acl_view(out, ACL_FLOAT, 2, od, os, 0);
        st = self && o ? CANN_ACLNN(ctx, IndexSelect, self, 0, ids, o) : clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: bad view");
        cann_destroy_tensors(2, self, o);
        return st;
    }
    cann_temp tmp;
    st = cann_temp_alloc(ctx, (size_t)(n * a->ne[0]) * es, &tmp);
    if (st != CLM_OK) {
        aclDestroyTensor(self);
        return st;
    }
    aclTensor *t = acl_view(tmp.ptr, dt, 2, od, ts, 0), *o = acl_view(out, ACL_FLOAT, 2, od, os, 0);
    if (!self || !t || !o) {
        st = clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: bad view");
    } else {
        st = CANN_ACLNN(ctx, IndexSelect, self, 0, ids, t);
        if (st == CLM_OK) st = CANN_ACLNN(ctx, Cast, t, ACL_FLOAT, o);
    }
    cann_destroy_tensors(3, self, t, o);
    cann_temp_free(&tmp);
    return st;
}

clm_status cann_op_get_rows(cann_backend_ctx *ctx, clm_tensor *dst) {
    const clm_tensor *a = dst->src[0], *ids = dst->src[1];
    if (!cann_supports_get_rows(dst))
        return clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: table '%s' (%s) with ids '%s' is not supported on CANN", a->name,
                         clm_type_name(a->type), ids->name);
    int64_t n = ids->ne[0];
    if (n == 0 || a->ne[0] == 0) return CLM_OK;
    if (use_kernel(dst)) return cann_asc_get_rows(ctx, dst);
    clm_status st = CLM_OK;
    for (int64_t i3 = 0; i3 < ids->ne[2] && st == CLM_OK; i3++) {
        for (int64_t i2 = 0; i2 < ids->ne[1] && st == CLM_OK; i2++) {
            int64_t id_d[1] = {n}, id_s[1] = {(int64_t)(ids->nb[0] / 4)};
            aclTensor *ix = acl_view(ids->data, ACL_INT32, 1, id_d, id_s, (int64_t)((i2 * ids->nb[1] + i3 * ids->nb[2]) / 4));
            char *out = (char *)dst->data + i2 * dst->nb[2] + i3 * dst->nb[3];
            int64_t ld = (int64_t)(dst->nb[1] / sizeof(float));
            if (ix == NULL) {
                st = clm_error(CLM_ERR_UNSUPPORTED, "GET_ROWS: cannot describe ids '%s'", ids->name);
            } else if (is_float(a->type)) {
                st = get_rows_float(ctx, a, ix, n, i2, i3, out, ld);
            } else {
                st = get_rows_quant(ctx, a, ix, n, i3 * a->ne[2] + i2, out, ld);
            }
            aclDestroyTensor(ix);
        }
    }
    return st;
}
