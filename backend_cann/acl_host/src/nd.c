/* nd.c - dtype promotion, element conversion and the strided broadcast iterator (see ah_nd.h). */
#include <string.h>

#include "ah_convert.h"
#include "ah_nd.h"

/* ---- dtype algebra ------------------------------------------------------------------------------ */
bool ah_dtype_is_float(aclDataType t) {
    return t == ACL_FLOAT || t == ACL_FLOAT16 || t == ACL_BF16 || t == ACL_DOUBLE;
}

bool ah_dtype_is_integer(aclDataType t) {
    switch (t) {
    case ACL_INT8: case ACL_INT16: case ACL_INT32: case ACL_INT64:
    case ACL_UINT8: case ACL_UINT16: case ACL_UINT32: case ACL_UINT64: return true;
    default: return false;
    }
}

static bool is_real(aclDataType t) {
    return t == ACL_BOOL || ah_dtype_is_float(t) || ah_dtype_is_integer(t);
}

static int int_bits(aclDataType t) {
    switch (t) {
    case ACL_INT8: case ACL_UINT8: return 8;
    case ACL_INT16: case ACL_UINT16: return 16;
    case ACL_INT32: case ACL_UINT32: return 32;
    default: return 64;
    }
}

static bool is_wide_unsigned(aclDataType t) {
    return t == ACL_UINT16 || t == ACL_UINT32 || t == ACL_UINT64;
}

static aclDataType signed_int_of_bits(int bits) {
    return bits <= 8 ? ACL_INT8 : bits <= 16 ? ACL_INT16 : bits <= 32 ? ACL_INT32 : ACL_INT64;
}

aclDataType ah_promote_types(aclDataType a, aclDataType b) {
    if (!is_real(a) || !is_real(b))
        return ACL_DT_UNDEFINED;
    if (a == b)
        return a;
    if (a == ACL_BOOL)
        return b;
    if (b == ACL_BOOL)
        return a;
    if (is_wide_unsigned(a) || is_wide_unsigned(b)) /* promote only with themselves */
        return ACL_DT_UNDEFINED;
    bool fa = ah_dtype_is_float(a), fb = ah_dtype_is_float(b);
    if (fa && fb) {
        if (a == ACL_DOUBLE || b == ACL_DOUBLE)
            return ACL_DOUBLE;
        return ACL_FLOAT; /* f16+f32, bf16+f32, f16+bf16 */
    }
    if (fa)
        return a;
    if (fb)
        return b;
    /* two different integers: UINT8 with a signed type needs a wider signed type */
    if (a == ACL_UINT8 || b == ACL_UINT8) {
        int other = int_bits(a == ACL_UINT8 ? b : a);
        return signed_int_of_bits(other > 8 ? other : 16);
    }
    return int_bits(a) >= int_bits(b) ? a : b;
}

aclDataType ah_promote_tensor_scalar(aclDataType tensor, aclDataType scalar) {
    if (!is_real(tensor) || !is_real(scalar))
        return ACL_DT_UNDEFINED;
    if (ah_dtype_is_float(tensor))
        return tensor;
    if (ah_dtype_is_float(scalar))
        return scalar;
    if (tensor == ACL_BOOL && scalar != ACL_BOOL)
        return scalar;
    return tensor;
}

bool ah_can_cast(aclDataType from, aclDataType to) {
    if (!is_real(from) || !is_real(to))
        return false;
    return to != ACL_BOOL || from == ACL_BOOL;
}

/* ---- element conversion ------------------------------------------------------------------------- */
#define LOAD_LOOP(ctype, expr)                                                                \
    for (int64_t i = 0; i < n; i++) {                                                         \
        ctype v;                                                                              \
        memcpy(&v, p + i * stride, sizeof v);                                                 \
        dst[i] = (expr);                                                                      \
    }                                                                                         \
    break

void ah_load_f64(aclDataType t, const char *p, int64_t stride, int64_t n, double *dst) {
    switch (t) {
    case ACL_FLOAT: LOAD_LOOP(float, v);
    case ACL_FLOAT16: LOAD_LOOP(uint16_t, ah_f16_to_f32(v));
    case ACL_BF16: LOAD_LOOP(uint16_t, ah_bf16_to_f32(v));
    case ACL_DOUBLE: LOAD_LOOP(double, v);
    case ACL_INT8: LOAD_LOOP(int8_t, v);
    case ACL_INT16: LOAD_LOOP(int16_t, v);
    case ACL_INT32: LOAD_LOOP(int32_t, v);
    case ACL_INT64: LOAD_LOOP(int64_t, (double)v);
    case ACL_UINT8: LOAD_LOOP(uint8_t, v);
    case ACL_UINT16: LOAD_LOOP(uint16_t, v);
    case ACL_UINT32: LOAD_LOOP(uint32_t, v);
    case ACL_UINT64: LOAD_LOOP(uint64_t, (double)v);
    case ACL_BOOL: LOAD_LOOP(uint8_t, v != 0);
    default: memset(dst, 0, (size_t)n * sizeof *dst); break;
    }
}

/* Floats truncate toward zero here (NaN -> 0, saturating). */
static int64_t f64_to_i64(double v) {
    if (v != v)
        return 0;
    if (v >= 9223372036854775808.0)
        return INT64_MAX;
    if (v < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

void ah_load_i64(aclDataType t, const char *p, int64_t stride, int64_t n, int64_t *dst) {
    switch (t) {
    case ACL_FLOAT: LOAD_LOOP(float, f64_to_i64(v));
    case ACL_FLOAT16: LOAD_LOOP(uint16_t, f64_to_i64(ah_f16_to_f32(v)));
    case ACL_BF16: LOAD_LOOP(uint16_t, f64_to_i64(ah_bf16_to_f32(v)));
    case ACL_DOUBLE: LOAD_LOOP(double, f64_to_i64(v));
    case ACL_INT8: LOAD_LOOP(int8_t, v);
    case ACL_INT16: LOAD_LOOP(int16_t, v);
    case ACL_INT32: LOAD_LOOP(int32_t, v);
    case ACL_INT64: LOAD_LOOP(int64_t, v);
    case ACL_UINT8: LOAD_LOOP(uint8_t, v);
    case ACL_UINT16: LOAD_LOOP(uint16_t, v);
    case ACL_UINT32: LOAD_LOOP(uint32_t, v);
    case ACL_UINT64: LOAD_LOOP(uint64_t, (int64_t)v); /* bit pattern; stores back exactly */
    case ACL_BOOL: LOAD_LOOP(uint8_t, v != 0);
    default: memset(dst, 0, (size_t)n * sizeof *dst); break;
    }
}
#undef LOAD_LOOP

#define STORE_LOOP(ctype, expr)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                         \
        double x = src[i];                                                                    \
        ctype v = (expr);                                                                     \
        memcpy(p + i * stride, &v, sizeof v);                                                 \
    }                                                                                         \
    break

/* Truncate toward zero, NaN -> 0, saturate to [lo, hi] (hi + 1 and lo exact in double). */
#define SAT(ctype, lo, hi)                                                                    \
    (ctype)(x != x ? 0 : x >= (double)(hi) + 1.0 ? (hi) : x < (double)(lo) ? (lo) : (ctype)x)

void ah_store_f64(aclDataType t, char *p, int64_t stride, int64_t n, const double *src) {
    switch (t) {
    case ACL_FLOAT: STORE_LOOP(float, (float)x);
    case ACL_FLOAT16: STORE_LOOP(uint16_t, ah_f32_to_f16((float)x));
    case ACL_BF16: STORE_LOOP(uint16_t, ah_f32_to_bf16((float)x));
    case ACL_DOUBLE: STORE_LOOP(double, x);
    case ACL_INT8: STORE_LOOP(int8_t, SAT(int8_t, INT8_MIN, INT8_MAX));
    case ACL_INT16: STORE_LOOP(int16_t, SAT(int16_t, INT16_MIN, INT16_MAX));
    case ACL_INT32: STORE_LOOP(int32_t, SAT(int32_t, INT32_MIN, INT32_MAX));
    case ACL_INT64: STORE_LOOP(int64_t, f64_to_i64(x));
    case ACL_UINT8: STORE_LOOP(uint8_t, SAT(uint8_t, 0, UINT8_MAX));
    case ACL_UINT16: STORE_LOOP(uint16_t, SAT(uint16_t, 0, UINT16_MAX));
    case ACL_UINT32: STORE_LOOP(uint32_t, SAT(uint32_t, 0, UINT32_MAX));
    case ACL_UINT64:
        STORE_LOOP(uint64_t, x != x || x < 0 ? 0 : x >= 18446744073709551616.0 ? UINT64_MAX
                                                                              : (uint64_t)x);
    case ACL_BOOL: STORE_LOOP(uint8_t, x != 0);
    default: break;
    }
}
#undef SAT
#undef STORE_LOOP

#define STORE_LOOP(ctype, expr)                                                               \
    for (int64_t i = 0; i < n; i++) {                                                         \
        int64_t x = src[i];                                                                   \
        ctype v = (ctype)(expr);                                                              \
        memcpy(p + i * stride, &v, sizeof v);                                                 \
    }                                                                                         \
    break

void ah_store_i64(aclDataType t, char *p, int64_t stride, int64_t n, const int64_t *src) {
    switch (t) {
    case ACL_FLOAT: STORE_LOOP(float, x);
    case ACL_FLOAT16: STORE_LOOP(uint16_t, ah_f32_to_f16((float)x));
    case ACL_BF16: STORE_LOOP(uint16_t, ah_f32_to_bf16((float)x));
    case ACL_DOUBLE: STORE_LOOP(double, x);
    case ACL_INT8: STORE_LOOP(int8_t, (uint64_t)x);
    case ACL_INT16: STORE_LOOP(int16_t, (uint64_t)x);
    case ACL_INT32: STORE_LOOP(int32_t, (uint64_t)x);
    case ACL_INT64: STORE_LOOP(int64_t, x);
    case ACL_UINT8: STORE_LOOP(uint8_t, (uint64_t)x);
    case ACL_UINT16: STORE_LOOP(uint16_t, (uint64_t)x);
    case ACL_UINT32: STORE_LOOP(uint32_t, (uint64_t)x);
    case ACL_UINT64: STORE_LOOP(uint64_t, (uint64_t)x);
    case ACL_BOOL: STORE_LOOP(uint8_t, x != 0);
    default: break;
    }
}
#undef STORE_LOOP

/* Integer domain unless a float is involved (UINT64 -> float also goes through double). */
static bool convert_via_i64(aclDataType from, aclDataType to) {
    if (ah_dtype_is_float(from))
        return false;
    return !(from == ACL_UINT64 && ah_dtype_is_float(to));
}

void ah_convert_value(aclDataType from, const void *src, aclDataType to, void *dst) {
    if (convert_via_i64(from, to)) {
        int64_t v;
        ah_load_i64(from, src, 0, 1, &v);
        ah_store_i64(to, dst, 0, 1, &v);
    } else {
        double v;
        ah_load_f64(from, src, 0, 1, &v);
        ah_store_f64(to, dst, 0, 1, &v);
    }
}

/* Same dtype: bits, element by element (memmove when both sides are contiguous). */
static void copy_bits(int64_t n, char *dst, int64_t ds, const char *src, int64_t ss,
                      size_t size) {
    if (ds == (int64_t)size && ss == (int64_t)size) {
        memmove(dst, src, (size_t)n * size);
        return;
    }
#define COPY_AS(ctype)                                                                        \
    for (int64_t i = 0; i < n; i++) {                                                         \
        ctype v;                                                                              \
        memcpy(&v, src + i * ss, sizeof v);                                                   \
        memcpy(dst + i * ds, &v, sizeof v);                                                   \
    }                                                                                         \
    return
    switch (size) {
    case 1: COPY_AS(uint8_t);
    case 2: COPY_AS(uint16_t);
    case 4: COPY_AS(uint32_t);
    case 8: COPY_AS(uint64_t);
    default:
        for (int64_t i = 0; i < n; i++)
            memmove(dst + i * ds, src + i * ss, size);
        return;
    }
#undef COPY_AS
}

#define CONVERT_BLOCK 256

void ah_convert_run(int64_t n, char *dst, aclDataType dt, int64_t ds, const char *src,
                    aclDataType st, int64_t ss) {
    if (n <= 0)
        return;
    if (dt == st) {
        copy_bits(n, dst, ds, src, ss, ah_dtype_size(dt));
        return;
    }
    bool dst_contig = ds == (int64_t)ah_dtype_size(dt), src_contig = ss == (int64_t)ah_dtype_size(st);
    if (dst_contig && src_contig && ((uintptr_t)dst % 4 == 0) && ((uintptr_t)src % 4 == 0)) {
        if (st == ACL_FLOAT && dt == ACL_FLOAT16) {
            ah_f32_to_f16_row((const float *)(const void *)src, (uint16_t *)(void *)dst, n);
            return;
        }
        if (st == ACL_FLOAT16 && dt == ACL_FLOAT) {
            ah_f16_to_f32_row((const uint16_t *)(const void *)src, (float *)(void *)dst, n);
            return;
        }
        if (st == ACL_FLOAT && dt == ACL_BF16) {
            ah_f32_to_bf16_row((const float *)(const void *)src, (uint16_t *)(void *)dst, n);
            return;
        }
        if (st == ACL_BF16 && dt == ACL_FLOAT) {
            ah_bf16_to_f32_row((const uint16_t *)(const void *)src, (float *)(void *)dst, n);
            return;
        }
    }
    bool via_i64 = convert_via_i64(st, dt);
    union {
        double f[CONVERT_BLOCK];
        int64_t i[CONVERT_BLOCK];
    } buf;
    if (ss == 0) { /* broadcast source: convert once, then copy bits */
        unsigned char value[16];
        ah_convert_value(st, src, dt, value);
        copy_bits(n, dst, ds, (const char *)value, 0, ah_dtype_size(dt));
        return;
    }
    for (int64_t done = 0; done < n; done += CONVERT_BLOCK) {
        int64_t m = n - done < CONVERT_BLOCK ? n - done : CONVERT_BLOCK;
        if (via_i64) {
            ah_load_i64(st, src + done * ss, ss, m, buf.i);
            ah_store_i64(dt, dst + done * ds, ds, m, buf.i);
        } else {
            ah_load_f64(st, src + done * ss, ss, m, buf.f);
            ah_store_f64(dt, dst + done * ds, ds, m, buf.f);
        }
    }
}

/* ---- the iterator -------------------------------------------------------------------------------- */
bool ah_nd_plan_init(ah_nd_plan *plan, int n_operands, const ah_nd_operand *operands) {
    const ah_nd_operand *out = &operands[0];
    if (n_operands < 1 || n_operands > AH_ND_MAX_OPERANDS || out->ndim > AH_OP_MAX_RANK)
        return false;
    memset(plan, 0, sizeof *plan);
    plan->n_operands = n_operands;
    plan->numel = 1;
    for (int k = 0; k < n_operands; k++) {
        plan->base[k] = operands[k].data;
        plan->dtype[k] = operands[k].dtype;
        if (operands[k].ndim > out->ndim)
            return false;
    }
    int nd = 0;
    for (int d = 0; d < out->ndim; d++) {
        int64_t size = out->dims[d];
        plan->numel *= size;
        if (size == 1)
            continue; /* contributes nothing to addressing */
        for (int k = 0; k < n_operands; k++) {
            const ah_nd_operand *o = &operands[k];
            int j = d - (out->ndim - o->ndim);
            int64_t stride = 0;
            if (j >= 0) {
                if (o->dims[j] == size)
                    stride = o->strides[j] * (int64_t)ah_dtype_size(o->dtype);
                else if (o->dims[j] != 1)
                    return false;
            }
            plan->stride[k][nd] = stride;
        }
        plan->shape[nd++] = size;
    }
    /* order dims by the output's stride, largest outermost (stable), so writes run forward */
    for (int i = 1; i < nd; i++) {
        for (int j = i; j > 0; j--) {
            int64_t outer = plan->stride[0][j - 1], inner = plan->stride[0][j];
            if ((outer < 0 ? -outer : outer) >= (inner < 0 ? -inner : inner))
                break;
            int64_t ts = plan->shape[j];
            plan->shape[j] = plan->shape[j - 1];
            plan->shape[j - 1] = ts;
            for (int k = 0; k < n_operands; k++) {
                int64_t t = plan->stride[k][j];
                plan->stride[k][j] = plan->stride[k][j - 1];
                plan->stride[k][j - 1] = t;
            }
        }
    }
    /* merge dim d into d + 1 when every operand steps uniformly across them */
    int merged = 0;
    for (int d = 0; d < nd; d++) {
        if (merged > 0) {
            int prev = merged - 1;
            bool uniform = true;
            for (int k = 0; k < n_operands && uniform; k++)
                uniform = plan->stride[k][prev] == plan->stride[k][d] * plan->shape[d];
            if (uniform) {
                plan->shape[prev] *= plan->shape[d];
                for (int k = 0; k < n_operands; k++)
                    plan->stride[k][prev] = plan->stride[k][d];
                continue;
            }
        }
        plan->shape[merged] = plan->shape[d];
        for (int k = 0; k < n_operands; k++)
            plan->stride[k][merged] = plan->stride[k][d];
        merged++;
    }
    if (merged == 0) { /* a single element */
        plan->shape[0] = 1;
        merged = 1;
    }
    plan->ndim = merged;
    return true;
}

typedef struct nd_job {
    const ah_nd_plan *plan;
    ah_nd_kernel kernel;
    void *ctx;
} nd_job;

static void nd_chunk(void *arg, int64_t begin, int64_t end) {
    const nd_job *job = arg;
    const ah_nd_plan *p = job->plan;
    int last = p->ndim - 1, nk = p->n_operands;
    int64_t coord[AH_OP_MAX_RANK], rest = begin;
    for (int d = last; d >= 0; d--) {
        coord[d] = rest % p->shape[d];
        rest /= p->shape[d];
    }
    int64_t inner_stride[AH_ND_MAX_OPERANDS];
    for (int k = 0; k < nk; k++)
        inner_stride[k] = p->stride[k][last];
    int64_t pos = begin;
    while (pos < end) {
        char *ptrs[AH_ND_MAX_OPERANDS];
        for (int k = 0; k < nk; k++) {
            int64_t off = 0;
            for (int d = 0; d <= last; d++)
                off += coord[d] * p->stride[k][d];
            ptrs[k] = p->base[k] + off;
        }
        int64_t run = p->shape[last] - coord[last];
        if (run > end - pos)
            run = end - pos;
        job->kernel(job->ctx, run, ptrs, inner_stride);
        pos += run;
        coord[last] += run;
        for (int d = last; d > 0 && coord[d] == p->shape[d]; d--) {
            coord[d] = 0;
            coord[d - 1]++;
        }
    }
}

void ah_nd_run(const ah_nd_plan *plan, int64_t grain, ah_nd_kernel kernel, void *ctx) {
    if (plan->numel <= 0)
        return;
    nd_job job = {plan, kernel, ctx};
    if (plan->numel <= grain)
        nd_chunk(&job, 0, plan->numel);
    else
        ah_parallel_for(plan->numel, grain, nd_chunk, &job);
}
