/* ops_matmul.c - aclnnMm, aclnnBatchMatMul, aclnnMatmul and aclnnWeightQuantBatchMatmulV2.
 *
 * Float products: both operands (any strides) are converted to F32 panels and multiplied in F32
 * with fused multiply-adds (ah_gemm.h), one rounding to out's dtype at the end - what the cube
 * unit does for F16 / BF16 (F32 accumulation). cubeMathType is validated; FP32 inputs compute in
 * FP32 except USE_FP16 (2), which rounds them to F16 first as the hardware does.
 * WeightQuantBatchMatmulV2: y = x @ ((weight + offset) * scale) (+ bias), INT8 / INT4 weights
 * per-tensor, per-channel or per-group scales: each weight is dequantized to the F32 value
 * (q + offset) * scale, then multiplied like an F32 weight (ah_gemm.h). Decode-sized m (one
 * row or a batch of decoding sequences, up to WQ_MAX_DIRECT_M) streams the quantized weight once
 * and dequantizes in registers for all rows, larger m dequantizes a tile of columns once per
 * block of rows and reuses it for them.
 * Work is split over output columns and blocks of rows (never over K); every output element
 * follows one fixed sequence, so results do not depend on m, the other rows or the thread count.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ah_convert.h"
#include "ah_gemm.h"
#include "ah_load.h"
#include "ah_nd.h"


#define MM_MAX_BATCH 4
#define WQ_MIN_CHUNK_WEIGHTS 65536
#define WQ_MIN_PARALLEL (1 << 16)       /* one row: split once the pool's workers poll (threadpool.c) */
#define WQ_MIN_PARALLEL_ROWS (1 << 19)  /* several rows: compute-bound, worth splitting sooner */
#ifndef WQ_MAX_DIRECT_M
#define WQ_MAX_DIRECT_M 16 /* up to this many rows decode the weights in registers (batched decode) */
#endif
#ifndef MM_MAX_DIRECT_M
#define MM_MAX_DIRECT_M 16 /* up to this many rows read F16 weights in place (decode) */
#endif
#ifndef WQ_DIRECT_COLS
#define WQ_DIRECT_COLS 32 /* columns per tile of a decode-sized product (16: 3% slower one-row products) */
#endif
#ifndef WQ_PF_TILES
#define WQ_PF_TILES 3
#endif
#define FLOAT_DTYPES (AH_DTYPE_BIT(ACL_FLOAT) | AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16))

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static inline void store_one(aclDataType dt, char *base, int64_t i, float v) {
    switch (dt) {
    case ACL_FLOAT16: ((uint16_t *)(void *)base)[i] = ah_f32_to_f16(v); break;
    case ACL_BF16: ((uint16_t *)(void *)base)[i] = ah_f32_to_bf16(v); break;
    default: ((float *)(void *)base)[i] = v; break;
    }
}

static char *tensor_base(const aclTensor *t) {
    return (char *)t->data + t->offset * (int64_t)ah_dtype_size(t->dtype);
}

/* Columns per tile of an n-column product: a tile of F32 columns (a panel the rows are multiplied
 * by, kp floats each) stays within about 512 KiB, so it is read from L2 by every row, and the
 * tiles come in a multiple of the pool's size where there are several, so the threads get the same
 * share (n = 192 on 2 threads: 4 tiles of 48, not 84 + 84 + 24). A multiple of 6 (the AVX-512 panel
 * kernel's register tile). Tile boundaries change no result bit (every element has its own
 * sequence). */
static int64_t tile_cols(int64_t kp, int64_t n) {
    int64_t most = (int64_t)(131072 / kp) / 6 * 6;
    most = most < 6 ? 6 : most > 96 ? 96 : most;
    int64_t tiles = (n + most - 1) / most, threads = ah_n_threads();
    if (tiles > 1 && threads > 1)
        tiles = (tiles + threads - 1) / threads * threads;
    int64_t nt = round_up((n + tiles - 1) / tiles, 6);
    return nt < most ? nt : most;
}

/* Rows per row block of an m-row product whose tiles are unpacked to F32 (prefill): the block's
 * activation rows (kp floats each) stay within about 1 MiB, so that they are read from L2 by every
 * tile instead of from memory (for kp = 4864 and m = 512, 10 MiB per tile otherwise); a tile is
 * unpacked again for each row block, which costs little next to its products. A multiple of 4
 * (the AVX-512 panel kernel's rows), the blocks as even as possible. */
static int64_t panel_rows(int64_t kp, int64_t m) {
    int64_t most = (int64_t)(262144 / kp) / 4 * 4;
    most = most < 16 ? 16 : most;
    if (m <= most)
        return m;
    int64_t blocks = (m + most - 1) / most;
    return round_up((m + blocks - 1) / blocks, 4);
}

/* Row groups of a prefill product: its activation rows are packed to F32 (kp floats each) and
 * multiplied a group of whole row blocks at a time, so the packed rows stay within about
 * APACK_GROUP_BYTES (for kp = 4864 and m = 512: 3 MiB at a time instead of 10) and the buffer is
 * the kept scratch, not fresh pages per product. Each row block is computed as before (the same
 * bits); a group's end is one more wait for the workers. */
#define APACK_GROUP_BYTES ((int64_t)3 << 20)
static int64_t row_groups(int64_t kp, int64_t mb, int64_t nrb) {
    int64_t per = APACK_GROUP_BYTES / (mb * kp * (int64_t)sizeof(float));
    per = per < 1 ? 1 : per;
    return (nrb + per - 1) / per;
}

/* Scratch memory of the calling thread (pool workers and stream threads run the kernels): one
 * buffer per slot, kept between calls so that a product does not map and fault in fresh pages
 * (prefill's activation panel is over a MiB); a request over SCRATCH_KEEP bytes is served and then
 * released. Freed when the thread ends. NULL when out of memory. */
#define SCRATCH_SLOTS 3
#define SCRATCH_KEEP ((size_t)8 << 20)
typedef struct scratch {
    void *p[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} scratch;

static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;

static void scratch_free(void *v) {
    scratch *s = v;
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        free(s->p[i]);
    free(s);
}

static void scratch_key_init(void) { (void)pthread_key_create(&g_scratch_key, scratch_free); }

static void *scratch_get(int slot, size_t bytes) {
    (void)pthread_once(&g_scratch_once, scratch_key_init);
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        s = calloc(1, sizeof *s);
        if (!s || pthread_setspecific(g_scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    bytes = (bytes + 63) / 64 * 64;
    if (s->cap[slot] < bytes) {
        free(s->p[slot]);
        s->p[slot] = aligned_alloc(64, bytes);
        s->cap[slot] = s->p[slot] ? bytes : 0;
    }
    return s->p[slot];
}

/* Gives a scratch_get buffer back: kept unless it is larger than SCRATCH_KEEP. */
static void scratch_done(int slot) {
    scratch *s = pthread_getspecific(g_scratch_key);
    if (s && s->cap[slot] > SCRATCH_KEEP) {
        free(s->p[slot]);
        s->p[slot] = NULL;
        s->cap[slot] = 0;
    }
}

/* ==== float products ================================================================================ */
/* self (..., m, k) @ mat2 (..., k, n) -> out (..., m, n), batch dims broadcast (element strides,
 * 0 where an operand is broadcast). */
typedef struct mm_geo {
    int64_t m, k, n;
    int nbatch_dims;
    int64_t batch[MM_MAX_BATCH];
    int64_t sa[MM_MAX_BATCH], sb[MM_MAX_BATCH], sc[MM_MAX_BATCH];
    int64_t a_rs, a_cs, b_rs, b_cs, c_rs, c_cs;
} mm_geo;

typedef struct mm_params {
    int slot_a, slot_b, slot_out;
    bool to_f16; /* USE_FP16 with FP32 inputs */
    mm_geo geo;
} mm_params;

typedef struct mm_ctx {
    const mm_params *p;
    const aclTensor *a, *b, *out;
    const float *apack; /* [nb][m][kp], or one batch's current row group [rows][kp] */
    int64_t kp, nt, ntiles, nb;
    int64_t mb, nrb; /* rows per row block, row blocks: a unit of work is (batch, row block, tile) */
    int64_t row0;    /* the current row group's first row (apack's row 0; 0 when nb > 1) */
    volatile int failed;
} mm_ctx;

static void batch_offsets(const mm_geo *g, int64_t bi, int64_t *oa, int64_t *ob, int64_t *oc) {
    *oa = *ob = *oc = 0;
    for (int d = g->nbatch_dims - 1; d >= 0; d--) {
        int64_t i = bi % g->batch[d];
        bi /= g->batch[d];
        *oa += i * g->sa[d];
        *ob += i * g->sb[d];
        *oc += i * g->sc[d];
    }
}

static void round_f16(float *v, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        v[i] = ah_f16_to_f32(ah_f32_to_f16(v[i]));
}

static void mm_pack_a(void *vctx, int64_t begin, int64_t end) {
    const mm_ctx *c = vctx;
    const mm_geo *g = &c->p->geo;
    size_t es = ah_dtype_size(c->a->dtype);
    for (int64_t r = begin; r < end; r++) {
        int64_t bi = (c->row0 + r) / g->m, i = (c->row0 + r) % g->m, oa, ob, oc;
        batch_offsets(g, bi, &oa, &ob, &oc);
        float *dst = (float *)c->apack + r * c->kp;
        ah_load_f32(c->a->dtype, tensor_base(c->a) + (oa + i * g->a_rs) * (int64_t)es, g->a_cs, g->k, dst);
        memset(dst + g->k, 0, (size_t)(c->kp - g->k) * sizeof(float));
        if (c->p->to_f16)
            round_f16(dst, g->k);
    }
}

static void mm_tiles(void *vctx, int64_t begin, int64_t end) {
    const mm_ctx *c = vctx;
    const mm_geo *g = &c->p->geo;
    float *bt = scratch_get(1, (size_t)(c->nt * c->kp + c->mb * c->nt) * sizeof(float));
    if (!bt) {
        ((mm_ctx *)vctx)->failed = 1; /* reported by mm_run */
        return;
    }
    float *ct = bt + c->nt * c->kp;
    size_t bes = ah_dtype_size(c->b->dtype), oes = ah_dtype_size(c->out->dtype);
    for (int64_t w = begin; w < end; w++) {
        int64_t bi = w / (c->nrb * c->ntiles), rest = w % (c->nrb * c->ntiles), oa, ob, oc;
        int64_t i0 = c->row0 + rest / c->ntiles * c->mb, j0 = (rest % c->ntiles) * c->nt;
        int64_t mm = g->m - i0 < c->mb ? g->m - i0 : c->mb, nn = g->n - j0 < c->nt ? g->n - j0 : c->nt;
        batch_offsets(g, bi, &oa, &ob, &oc);
        const char *bcols = tensor_base(c->b) + (ob + j0 * g->b_cs) * (int64_t)bes;
        /* decode-sized rows times F16 columns lying k-contiguous: read in place, no F32 panel */
        ah_gemm_tile t = {.m = mm, .n = nn, .kp = c->kp, .a = c->apack + (bi * g->m + i0 - c->row0) * c->kp, .lda = c->kp,
                          .b16 = (const uint16_t *)(const void *)bcols, .ldb = g->b_cs, .c = ct, .ldc = c->nt};
        bool direct = c->b->dtype == ACL_FLOAT16 && g->b_rs == 1 && g->k == c->kp && g->m <= MM_MAX_DIRECT_M;
        if (!direct || !ah_gemm_run_f16(&t)) {
            for (int64_t j = 0; j < nn; j++) {
                float *col = bt + j * c->kp;
                ah_load_f32(c->b->dtype, bcols + j * g->b_cs * (int64_t)bes, g->b_rs, g->k, col);
                memset(col + g->k, 0, (size_t)(c->kp - g->k) * sizeof(float));
                if (c->p->to_f16)
                    round_f16(col, g->k);
            }
            t.b = bt, t.ldb = c->kp;
            ah_gemm_run_tile(&t);
        }
        char *out = tensor_base(c->out) + oc * (int64_t)oes;
        for (int64_t i = i0; i < i0 + mm; i++) {
            const float *src = ct + (i - i0) * c->nt;
            if (c->out->dtype == ACL_FLOAT && g->c_cs == 1)
                memcpy(out + (i * g->c_rs + j0) * 4, src, (size_t)nn * sizeof(float));
            else
                for (int64_t j = 0; j < nn; j++)
                    store_one(c->out->dtype, out, i * g->c_rs + (j0 + j) * g->c_cs, src[j]);
        }
    }
    scratch_done(1);
}

static aclError mm_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const mm_params *p = AH_EXEC_PARAMS(ex, const mm_params);
    const mm_geo *g = &p->geo;
    mm_ctx c = {.p = p, .a = &ex->tensors[p->slot_a], .b = &ex->tensors[p->slot_b], .out = &ex->tensors[p->slot_out]};
    c.nb = 1;
    for (int d = 0; d < g->nbatch_dims; d++)
        c.nb *= g->batch[d];
    if (c.nb == 0 || g->m == 0 || g->n == 0)
        return ACL_SUCCESS;
    if (g->k == 0) { /* empty sum */
        char *out = tensor_base(c.out);
        for (int64_t bi = 0; bi < c.nb; bi++) {
            int64_t oa, ob, oc;
            batch_offsets(g, bi, &oa, &ob, &oc);
            for (int64_t i = 0; i < g->m; i++)
                for (int64_t j = 0; j < g->n; j++)
                    store_one(c.out->dtype, out, oc + i * g->c_rs + j * g->c_cs, 0.0f);
        }
        return ACL_SUCCESS;
    }
    c.kp = round_up(g->k, AH_GEMM_KALIGN);
    c.nt = tile_cols(c.kp, g->n);
    c.ntiles = (g->n + c.nt - 1) / c.nt;
    c.mb = g->m > MM_MAX_DIRECT_M ? panel_rows(c.kp, g->m) : g->m;
    c.nrb = (g->m + c.mb - 1) / c.mb;
    /* one batch: row groups (row_groups); several: all rows packed at once */
    const int64_t n_groups = c.nb == 1 ? row_groups(c.kp, c.mb, c.nrb) : 1;
    const int64_t group_rows = n_groups == 1 ? c.nb * g->m : (c.nrb + n_groups - 1) / n_groups * c.mb;
    float *apack = scratch_get(0, (size_t)(group_rows * c.kp) * sizeof(float));
    if (!apack)
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    c.apack = apack;
    for (int64_t gi = 0, rb0 = 0; gi < n_groups; gi++) {
        const int64_t rb1 = c.nrb * (gi + 1) / n_groups;
        const int64_t r1 = n_groups == 1 ? c.nb * g->m : (rb1 * c.mb < g->m ? rb1 * c.mb : g->m);
        c.row0 = rb0 * c.mb;
        ah_parallel_for(r1 - c.row0, 64, mm_pack_a, &c);
        ah_parallel_for(c.nb * (rb1 - rb0) * c.ntiles, 1, mm_tiles, &c);
        rb0 = rb1;
    }
    scratch_done(0);
    if (c.failed)
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    return ACL_SUCCESS;
}

/* Shared phase 1. kind: 0 Mm (2-D), 1 BatchMatMul (3-D), 2 Matmul (1..6-D, torch.matmul). */
static aclnnStatus mm_prepare(const char *op, int kind, const aclTensor *self, const aclTensor *mat2,
                              aclTensor *out, int8_t cubeMathType, uint64_t *workspaceSize,
                              aclOpExecutor **executor) {
    int lo = kind == 0 ? 2 : kind == 1 ? 3 : 1, hi = kind == 0 ? 2 : kind == 1 ? 3 : 6;
    AH_TRY(ah_check_tensor(op, "self", self, FLOAT_DTYPES, lo, hi));
    AH_TRY(ah_check_tensor(op, "mat2", mat2, FLOAT_DTYPES, lo, hi));
    AH_TRY(ah_check_tensor(op, "out", out, FLOAT_DTYPES, kind == 2 ? 0 : lo, hi));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (cubeMathType < 0 || cubeMathType > 3)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: cubeMathType %d is not one of 0..3", op, cubeMathType);
    bool a_bf = self->dtype == ACL_BF16, b_bf = mat2->dtype == ACL_BF16;
    if (a_bf != b_bf)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self (%s) and mat2 (%s) do not promote (BFLOAT16 only with BFLOAT16)",
                        op, ah_dtype_name(self->dtype), ah_dtype_name(mat2->dtype));
    aclDataType promoted = ah_promote_types(self->dtype, mat2->dtype);
    if (out->dtype != promoted)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out has dtype %s, expected the promoted dtype %s", op,
                        ah_dtype_name(out->dtype), ah_dtype_name(promoted));
    if (cubeMathType == 2 && a_bf)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: cubeMathType USE_FP16 (2) is not valid with BFLOAT16 inputs", op);
    if (cubeMathType == 3 && promoted != ACL_FLOAT)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: cubeMathType USE_HF32 (3) needs FLOAT inputs", op);
    if (!ah_tensor_is_contiguous(out))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: out must be contiguous", op);

    mm_geo g;
    memset(&g, 0, sizeof g);
    /* self as (batch..., m, k); a 1-D self is (1, k) with m dropped from out */
    int an = self->ndim, bn = mat2->ndim;
    const int64_t *ad = self->dims, *as = self->strides, *bd = mat2->dims, *bs = mat2->strides;
    int64_t k_a = ad[an - 1], k_b = bn == 1 ? bd[0] : bd[bn - 2];
    g.m = an == 1 ? 1 : ad[an - 2];
    g.k = k_a;
    g.n = bn == 1 ? 1 : bd[bn - 1];
    g.a_cs = as[an - 1];
    g.a_rs = an == 1 ? 0 : as[an - 2];
    g.b_rs = bn == 1 ? bs[0] : bs[bn - 2];
    g.b_cs = bn == 1 ? 0 : bs[bn - 1];
    char s1[256], s2[256];
    if (k_a != k_b)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: self %s and mat2 %s: inner dimensions differ", op,
                        ah_shape_str(s1, sizeof s1, ad, an), ah_shape_str(s2, sizeof s2, bd, bn));
    int a_bdims = an > 2 ? an - 2 : 0, b_bdims = bn > 2 ? bn - 2 : 0;
    int nbd = a_bdims > b_bdims ? a_bdims : b_bdims;
    if (nbd > MM_MAX_BATCH)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: more than %d batch dims", op, MM_MAX_BATCH);
    int64_t odims[8];
    int on = 0;
    for (int i = 0; i < nbd; i++) { /* aligned from the right */
        int ia = i - (nbd - a_bdims), ib = i - (nbd - b_bdims);
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: batch dims of self %s and mat2 %s do not broadcast", op,
                            ah_shape_str(s1, sizeof s1, ad, an), ah_shape_str(s2, sizeof s2, bd, bn));
        if (kind == 1 && da != db && da != 1 && db != 1)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: batch sizes differ", op);
        g.batch[i] = da == 1 ? db : da;
        g.sa[i] = ia >= 0 && da != 1 ? as[ia] : 0;
        g.sb[i] = ib >= 0 && db != 1 ? bs[ib] : 0;
        odims[on++] = g.batch[i];
    }
    g.nbatch_dims = nbd;
    if (an > 1 || kind != 2)
        odims[on++] = g.m;
    if (bn > 1 || kind != 2)
        odims[on++] = g.n;
    AH_TRY(ah_check_shape(op, "out", out, odims, on, "the product's shape"));
    /* out is contiguous: its strides follow from the product shape */
    int64_t step = 1;
    if (bn > 1 || kind != 2) {
        g.c_cs = 1;
        step = g.n;
    }
    if (an > 1 || kind != 2) {
        g.c_rs = step;
        step *= g.m;
    }
    for (int i = nbd - 1; i >= 0; i--) {
        g.sc[i] = step;
        step *= g.batch[i];
    }
    aclOpExecutor *ex = ah_executor_new(op, mm_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    mm_params *p = AH_EXEC_PARAMS(ex, mm_params);
    p->geo = g;
    p->to_f16 = cubeMathType == 2 && promoted == ACL_FLOAT;
    p->slot_a = ah_executor_add_tensor(ex, "self", self, AH_IN);
    p->slot_b = ah_executor_add_tensor(ex, "mat2", mat2, AH_IN);
    p->slot_out = ah_executor_add_tensor(ex, "out", out, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnMmGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                           int8_t cubeMathType, uint64_t *workspaceSize,
                                           aclOpExecutor **executor) {
    return mm_prepare("aclnnMm", 0, self, mat2, out, cubeMathType, workspaceSize, executor);
}

AH_API aclnnStatus aclnnMm(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnMm");
}

AH_API aclnnStatus aclnnBatchMatMulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                                    int8_t cubeMathType, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor) {
    return mm_prepare("aclnnBatchMatMul", 1, self, mat2, out, cubeMathType, workspaceSize, executor);
}

AH_API aclnnStatus aclnnBatchMatMul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnBatchMatMul");
}

AH_API aclnnStatus aclnnMatmulGetWorkspaceSize(const aclTensor *self, const aclTensor *mat2, aclTensor *out,
                                               int8_t cubeMathType, uint64_t *workspaceSize,
                                               aclOpExecutor **executor) {
    return mm_prepare("aclnnMatmul", 2, self, mat2, out, cubeMathType, workspaceSize, executor);
}

AH_API aclnnStatus aclnnMatmul(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                               aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnMatmul");
}

/* ==== WeightQuantBatchMatmulV2 ======================================================================== */
typedef enum { SCALE_TENSOR, SCALE_CHANNEL, SCALE_GROUP } scale_mode;

typedef struct wq_params {
    int slot_x, slot_w, slot_scale, slot_offset, slot_bias, slot_y; /* -1: absent */
    int64_t m, k, n, group;   /* group: elements per scale group (k for per-tensor / channel) */
    scale_mode mode;
    bool int4, w_transposed, x_transposed;
} wq_params;

typedef struct wq_ctx {
    const wq_params *p;
    const aclTensor *x, *w, *scale, *offset, *bias, *y;
    const float *apack; /* [rows of the current row group][kp]; NULL: each thread packs its own */
    uint64_t seq;       /* this call's number: a thread's own packed rows are for one call */
    int64_t kp, ngroups, gsize, nt, ntiles;
    int64_t mb, nrb; /* rows per row block, row blocks: a unit of work is (row block, tile) */
    int64_t row0;    /* the current row group's first row (apack's row 0) */
    /* per-call facts the tiles use: the scales and offsets as F16 runs of whole columns (the
     * device layout: per tile one conversion each, and prefetches of plain address ranges), and
     * y's rows F16 and contiguous (one row conversion call per tile) */
    const uint16_t *scale_run, *offset_run;
    bool y_f16_rows;
    volatile int failed;
} wq_ctx;

/* Scale / offset value of (group g, column j) as F32. */
static float wq_param_at(const wq_ctx *c, const aclTensor *t, int64_t g, int64_t j) {
    const char *base = tensor_base(t);
    int64_t idx;
    if (c->p->mode == SCALE_TENSOR)
        idx = 0;
    else if (c->p->mode == SCALE_CHANNEL)
        idx = j * t->strides[t->ndim - 1];
    else
        idx = g * t->strides[0] + j * t->strides[1];
    return ah_load_one(t->dtype, base, idx);
}

/* Scales or offsets of columns [j0, j0 + nn) as F32 [nn][ngroups]. */
static void wq_gather_params(const wq_ctx *c, const aclTensor *t, int64_t j0, int64_t nn, float *dst) {
    const uint16_t *run = t == c->scale ? c->scale_run : c->offset_run;
    if (run) {
        ah_f16_to_f32_row(run + j0 * c->ngroups, dst, nn * c->ngroups);
        return;
    }
    if (c->p->mode == SCALE_GROUP) {
        size_t es = ah_dtype_size(t->dtype);
        if (t->strides[0] == 1 && t->strides[1] == c->ngroups) { /* columns back to back: one run */
            ah_load_f32(t->dtype, tensor_base(t) + j0 * c->ngroups * (int64_t)es, 1, nn * c->ngroups, dst);
            return;
        }
        for (int64_t j = 0; j < nn; j++)
            ah_load_f32(t->dtype, tensor_base(t) + (j0 + j) * t->strides[1] * (int64_t)es, t->strides[0], c->ngroups,
                     dst + j * c->ngroups);
    } else {
        for (int64_t j = 0; j < nn; j++)
            dst[j] = wq_param_at(c, t, 0, j0 + j);
    }
}

/* Prefetches the scales or offsets of columns [j0, j0 + nn) when they are one run (hint only). */
static void wq_prefetch_params(const wq_ctx *c, const uint16_t *run, int64_t j0, int64_t nn) {
    if (!run)
        return;
    const char *base = (const char *)(run + j0 * c->ngroups);
    for (int64_t off = 0; off < nn * c->ngroups * 2; off += 64)
        __builtin_prefetch(base + off);
}

/* The F16 run of t's (group, column) values when it is one (SCALE_GROUP, columns back to back),
 * else NULL. */
static const uint16_t *wq_param_run(const wq_ctx *c, const aclTensor *t) {
    if (!t || c->p->mode != SCALE_GROUP || t->dtype != ACL_FLOAT16 || t->strides[0] != 1 ||
        t->strides[1] != c->ngroups)
        return NULL;
    return (const uint16_t *)(const void *)tensor_base(t);
}

/* int4 element e of the weight at element index idx (two per byte, low nibble first). */
static inline int8_t int4_at(const char *base, int64_t idx) {
    uint8_t b = (uint8_t)base[idx >> 1];
    return (int8_t)((idx & 1) ? (int8_t)b >> 4 : (int8_t)(uint8_t)(b << 4) >> 4);
}

static const float *wq_own_rows(const wq_ctx *c);

static void wq_tiles(void *vctx, int64_t begin, int64_t end) {
    wq_ctx *c = vctx;
    const wq_params *p = c->p;
    int64_t nt = c->nt, kp = c->kp;
    /* per tile: scales and offsets [nt][ngroups], a packed copy of the quants when the columns are
     * not directly usable, and the F32 tile / outputs for the blocked path */
    size_t qbytes = (size_t)(p->int4 ? kp / 2 : kp);
    bool direct_cols = p->w_transposed && p->k % AH_GEMM_KALIGN == 0;
    bool blocked = p->m > WQ_MAX_DIRECT_M;
    size_t need = (size_t)(2 * nt * c->ngroups) * sizeof(float) + (direct_cols ? 0 : nt * qbytes) +
                  (blocked ? (size_t)(nt * kp) * sizeof(float) : 0) + (size_t)(c->mb * nt) * sizeof(float);
    char *mem = scratch_get(1, need);
    if (!mem) {
        c->failed = 1;
        return;
    }
    float *sc = (float *)(void *)mem, *of = sc + nt * c->ngroups;
    float *ct = of + nt * c->ngroups;
    float *ft = ct + c->mb * nt;
    int8_t *qt = (int8_t *)(void *)(ft + (blocked ? nt * kp : 0));
    const char *wbase = (const char *)c->w->data; /* int4 offsets count nibbles */
    int64_t w_off = c->w->offset;
    int64_t ws0 = c->w->strides[0], ws1 = c->w->strides[1]; /* along k, along n */
    const float *apack = c->apack ? c->apack : wq_own_rows(c);
    if (!apack) {
        c->failed = 1;
        scratch_done(1);
        return;
    }
    for (int64_t unit = begin; unit < end; unit++) {
        int64_t tile = unit % c->ntiles, i0 = c->row0 + unit / c->ntiles * c->mb;
        int64_t mm = p->m - i0 < c->mb ? p->m - i0 : c->mb;
        int64_t j0 = tile * nt, nn = p->n - j0 < nt ? p->n - j0 : nt;
        wq_gather_params(c, c->scale, j0, nn, sc);
        if (c->offset)
            wq_gather_params(c, c->offset, j0, nn, of);
        /* parameters WQ_PF_TILES tiles ahead arrive while these run (the first tile starts the run) */
        for (int64_t t1 = unit == begin ? tile + 1 : tile + WQ_PF_TILES;
             t1 <= tile + WQ_PF_TILES && t1 < c->ntiles; t1++) {
            int64_t nn1 = p->n - t1 * nt < nt ? p->n - t1 * nt : nt;
            wq_prefetch_params(c, c->scale_run, t1 * nt, nn1);
            wq_prefetch_params(c, c->offset_run, t1 * nt, nn1);
        }
        const int8_t *wq;
        int64_t ldw;
        if (direct_cols) {
            int64_t e = w_off + j0 * ws1; /* element index of column j0, row 0 */
            wq = (const int8_t *)(const void *)(wbase + (p->int4 ? e / 2 : e));
            ldw = p->int4 ? ws1 / 2 : ws1;
        } else { /* gather column j into natural order, zero padded */
            memset(qt, 0, (size_t)nn * qbytes);
            for (int64_t j = 0; j < nn; j++) {
                int8_t *dst = qt + j * (int64_t)qbytes;
                for (int64_t kk = 0; kk < p->k; kk++) {
                    int64_t e = w_off + kk * ws0 + (j0 + j) * ws1;
                    if (p->int4) {
                        uint8_t v = (uint8_t)int4_at(wbase, e) & 0xf;
                        dst[kk / 2] = (int8_t)((uint8_t)dst[kk / 2] | (kk & 1 ? v << 4 : v));
                    } else {
                        dst[kk] = ((const int8_t *)(const void *)wbase)[e];
                    }
                }
            }
            wq = qt;
            ldw = (int64_t)qbytes;
        }
        const float *a = apack + (i0 - c->row0) * kp;
        ah_gemm_quant q = {.m = mm, .n = nn, .kp = kp, .group = c->gsize, .a = a, .lda = kp,
                           .w = wq, .ldw = ldw, .int4 = p->int4, .scales = sc,
                           .offsets = c->offset ? of : NULL, .lds = c->ngroups, .c = ct, .ldc = nt};
        if (!blocked) {
            ah_gemm_run_quant(&q);
        } else {
            ah_gemm_unpack_quant(&q, ft, kp);
            ah_gemm_tile t = {.m = mm, .n = nn, .kp = kp, .a = a, .lda = kp, .b = ft, .ldb = kp, .c = ct, .ldc = nt};
            ah_gemm_run_tile(&t);
        }
        if (c->bias)
            for (int64_t j = 0; j < nn; j++) {
                float bias = ah_load_one(c->bias->dtype, tensor_base(c->bias),
                                      (j0 + j) * c->bias->strides[c->bias->ndim - 1]);
                for (int64_t i = 0; i < mm; i++)
                    ct[i * nt + j] += bias;
            }
        char *y = tensor_base(c->y);
        int64_t ys0 = c->y->strides[0], ys1 = c->y->strides[1];
        if (c->y_f16_rows)
            ah_f32_to_f16_rows(ct, nt, (uint16_t *)(void *)y + i0 * ys0 + j0, ys0, mm, nn);
        else
            for (int64_t i = 0; i < mm; i++)
                for (int64_t j = 0; j < nn; j++)
                    store_one(c->y->dtype, y, (i0 + i) * ys0 + (j0 + j) * ys1, ct[i * nt + j]);
    }
    scratch_done(1);
}

/* x rows [row0 + begin, row0 + end) as F32 rows of kp at dst, zero padded; for INT4 weights each
 * 32-block is reordered even elements first, then odd ones (the order the INT4 kernels read nibbles
 * in). */
static void wq_pack_rows(const wq_ctx *c, float *dst, int64_t begin, int64_t end) {
    const wq_params *p = c->p;
    const char *base = tensor_base(c->x);
    int64_t rs = c->x->strides[0], cs = c->x->strides[1];
    size_t es = ah_dtype_size(c->x->dtype);
    for (int64_t i = begin; i < end; i++, dst += c->kp) {
        ah_load_f32(c->x->dtype, base + (c->row0 + i) * rs * (int64_t)es, cs, p->k, dst);
        memset(dst + p->k, 0, (size_t)(c->kp - p->k) * sizeof(float));
        if (p->int4)
            ah_gemm_int4_order(dst, c->kp);
    }
}

static void wq_pack_x(void *vctx, int64_t begin, int64_t end) {
    const wq_ctx *c = vctx;
    wq_pack_rows(c, (float *)c->apack + begin * c->kp, begin, end);
}

/* A decode-sized call's x rows, packed by the calling thread for itself (once per call, in its own
 * scratch): each thread reads x and writes rows no other core reads. One shared panel, packed by
 * the caller before the job, cost two transfers of every line between the cores per product (the
 * caller's writes invalidating the copy the worker had read, then the worker's reads): 3-5 us of
 * an 8-row product's 11-75 on a 2-vCPU VM. NULL when out of memory. */
static const float *wq_own_rows(const wq_ctx *c) {
    static _Thread_local uint64_t packed_seq;
    float *rows = scratch_get(2, (size_t)(c->p->m * c->kp) * sizeof(float));
    if (rows && packed_seq != c->seq) {
        wq_pack_rows(c, rows, 0, c->p->m);
        packed_seq = c->seq;
    }
    return rows;
}

static aclError wq_run(const aclOpExecutor *ex, void *workspace) {
    (void)workspace;
    const wq_params *p = AH_EXEC_PARAMS(ex, const wq_params);
    wq_ctx c = {.p = p, .x = &ex->tensors[p->slot_x], .w = &ex->tensors[p->slot_w],
                .scale = &ex->tensors[p->slot_scale],
                .offset = p->slot_offset >= 0 ? &ex->tensors[p->slot_offset] : NULL,
                .bias = p->slot_bias >= 0 ? &ex->tensors[p->slot_bias] : NULL, .y = &ex->tensors[p->slot_y]};
    if (p->m == 0 || p->n == 0)
        return ACL_SUCCESS;
    c.kp = round_up(p->k, AH_GEMM_KALIGN);
    c.gsize = p->mode == SCALE_GROUP ? p->group : c.kp;
    c.ngroups = p->mode == SCALE_GROUP ? (p->k + p->group - 1) / p->group : 1;
    c.scale_run = wq_param_run(&c, c.scale);
    c.offset_run = wq_param_run(&c, c.offset);
    c.y_f16_rows = c.y->dtype == ACL_FLOAT16 && c.y->strides[1] == 1;
    c.nt = p->m > WQ_MAX_DIRECT_M ? tile_cols(c.kp, p->n) : WQ_DIRECT_COLS;
    c.ntiles = (p->n + c.nt - 1) / c.nt;
    c.mb = p->m > WQ_MAX_DIRECT_M ? panel_rows(c.kp, p->m) : p->m;
    c.nrb = (p->m + c.mb - 1) / c.mb;
    const bool direct = p->m <= WQ_MAX_DIRECT_M;
    const int64_t n_groups = direct ? 1 : row_groups(c.kp, c.mb, c.nrb);
    const int64_t group_rows = (c.nrb + n_groups - 1) / n_groups * c.mb;
    if (direct) { /* each thread packs the rows for itself (wq_own_rows) */
        static _Atomic uint64_t calls;
        c.seq = atomic_fetch_add(&calls, 1) + 1;
    } else {
        float *apack = scratch_get(0, (size_t)((group_rows < p->m ? group_rows : p->m) * c.kp) * sizeof(float));
        if (!apack)
            return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
        c.apack = apack;
    }
    /* Waking a sleeping worker costs tens of microseconds on a virtual machine, a polling one
     * about a microsecond: a one-row product of fewer than WQ_MIN_PARALLEL multiply-adds runs on
     * the calling thread, and so does a several-row one (batched decode, compute-bound) under
     * WQ_MIN_PARALLEL_ROWS; otherwise a chunk does at least WQ_MIN_CHUNK_WEIGHTS weight x row
     * products (rows counted up to 4). */
    int64_t tile_weights = c.kp * c.nt * (p->m < 4 ? p->m : 4);
    int64_t grain = (WQ_MIN_CHUNK_WEIGHTS + tile_weights - 1) / tile_weights;
    if (c.kp * p->n * p->m < (p->m > 1 ? WQ_MIN_PARALLEL_ROWS : WQ_MIN_PARALLEL))
        grain = c.nrb * c.ntiles;
    for (int64_t gi = 0, rb0 = 0; gi < n_groups; gi++) {
        const int64_t rb1 = c.nrb * (gi + 1) / n_groups;
        const int64_t r1 = rb1 * c.mb < p->m ? rb1 * c.mb : p->m;
        c.row0 = rb0 * c.mb;
        if (!direct)
            ah_parallel_for(r1 - c.row0, 64, wq_pack_x, &c);
        /* several rows (compute-bound): tapered chunks, so the threads finish together; one row
         * streams the weights, and every chunk start restarts the prefetch: a few even chunks */
        if (p->m > 1)
            ah_parallel_for_tapered((rb1 - rb0) * c.ntiles, grain, wq_tiles, &c);
        else
            ah_parallel_for((rb1 - rb0) * c.ntiles, grain, wq_tiles, &c);
        rb0 = rb1;
    }
    scratch_done(0);
    if (c.failed)
        return ah_error(ACLNN_ERR_INNER, "%s: out of host memory", ex->op);
    return ACL_SUCCESS;
}

static bool is_transposed_2d(const aclTensor *t) {
    return t->ndim == 2 && (t->dims[0] == 1 || t->strides[0] == 1) && (t->dims[1] == 1 || t->strides[1] == t->dims[0]);
}

/* The scale / offset shape for the mode (per-tensor (1,) (1,1), per-channel (n,) (1,n),
 * per-group (ceil(k/G), n)). */
static aclnnStatus wq_check_param(const char *op, const char *name, const aclTensor *t, int64_t k, int64_t n,
                                  int group, scale_mode *mode) {
    char s[256];
    int64_t d0 = t->ndim == 2 ? t->dims[0] : 1, d1 = t->dims[t->ndim - 1];
    if (group == 0) {
        if (d0 == 1 && d1 == 1) {
            *mode = SCALE_TENSOR;
            return ACLNN_SUCCESS;
        }
        if (d0 == 1 && d1 == n) {
            *mode = SCALE_CHANNEL;
            return ACLNN_SUCCESS;
        }
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: %s has shape %s; with antiquantGroupSize 0 it must be (1,), (1,1), (n,) or (1,n) with n = %lld",
                        op, name, ah_shape_str(s, sizeof s, t->dims, t->ndim), (long long)n);
    }
    int64_t ng = (k + group - 1) / group;
    if (t->ndim == 2 && d0 == ng && d1 == n) {
        *mode = SCALE_GROUP;
        return ACLNN_SUCCESS;
    }
    return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: %s has shape %s, expected (%lld, %lld) for group size %d", op,
                    name, ah_shape_str(s, sizeof s, t->dims, t->ndim), (long long)ng, (long long)n, group);
}

AH_API aclnnStatus aclnnWeightQuantBatchMatmulV2GetWorkspaceSize(
    const aclTensor *x, const aclTensor *weight, const aclTensor *antiquantScale,
    const aclTensor *antiquantOffsetOptional, const aclTensor *quantScaleOptional, const aclTensor *quantOffsetOptional,
    const aclTensor *biasOptional, int antiquantGroupSize, const aclTensor *y, uint64_t *workspaceSize,
    aclOpExecutor **executor) {
    const char *op = "aclnnWeightQuantBatchMatmulV2";
    uint64_t half = AH_DTYPE_BIT(ACL_FLOAT16) | AH_DTYPE_BIT(ACL_BF16);
    AH_TRY(ah_check_tensor(op, "x", x, half, 2, 2));
    AH_TRY(ah_check_tensor(op, "weight", weight, AH_DTYPE_BIT(ACL_INT8) | AH_DTYPE_BIT(ACL_INT4) | AH_DTYPE_BIT(ACL_INT32), 2, 2));
    AH_TRY(ah_check_tensor(op, "antiquantScale", antiquantScale, AH_DTYPES_REAL, 1, 2));
    AH_TRY(ah_check_tensor(op, "y", y, AH_DTYPES_REAL, 2, 2));
    AH_TRY(ah_check_out_ptrs(op, workspaceSize, executor));
    if (weight->dtype == ACL_INT32)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: weight: INT32-packed int4 is not implemented by acl_host", op);
    if (quantScaleOptional || quantOffsetOptional)
        return ah_error(ACLNN_ERR_PARAM_INVALID,
                        "%s: quantScaleOptional / quantOffsetOptional (int8 output) are not implemented by acl_host", op);
    int64_t m = x->dims[0], k = x->dims[1], n = weight->dims[1];
    char s1[256], s2[256];
    if (m < 1 || m > INT32_MAX)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x: m = %lld is outside [1, 2^31-1] (empty tensors are not supported)",
                        op, (long long)m);
    if (k < 1 || k > 65535 || n < 1 || n > 65535)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: weight: k = %lld and n = %lld must lie in [1, 65535]", op,
                        (long long)k, (long long)n);
    if (!ah_tensor_is_contiguous(y))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: y must be contiguous (a (%lld, %lld) view with strides (%lld, %lld))",
                        op, (long long)m, (long long)n, (long long)y->strides[0], (long long)y->strides[1]);
    if (weight->dims[0] != k)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x %s and weight %s: k differs", op,
                        ah_shape_str(s1, sizeof s1, x->dims, 2), ah_shape_str(s2, sizeof s2, weight->dims, 2));
    bool x_t = !ah_tensor_is_contiguous(x);
    if (x_t && !is_transposed_2d(x))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: x is non-contiguous and not a transposed view", op);
    if (x_t && m > 65535)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: a transposed x allows m <= 65535, got %lld", op, (long long)m);
    bool w_t = !ah_tensor_is_contiguous(weight);
    if (w_t && !is_transposed_2d(weight))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: weight is non-contiguous and not a transposed view (k, n) with strides (1, k)", op);
    bool int4 = weight->dtype == ACL_INT4;
    if (int4 && ((w_t ? k : n) % 2 != 0 || weight->offset % 2 != 0))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: an INT4 weight needs an even innermost dimension and offset", op);
    if (antiquantScale->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquantScale has dtype %s, expected x's %s (UINT64/INT64 scales are not implemented by acl_host)",
                        op, ah_dtype_name(antiquantScale->dtype), ah_dtype_name(x->dtype));
    if (antiquantGroupSize != 0 && (antiquantGroupSize % 32 != 0 || antiquantGroupSize < 32 || antiquantGroupSize > k - 1))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquantGroupSize %d must be 0 or a multiple of 32 in [32, k-1] (k = %lld)",
                        op, antiquantGroupSize, (long long)k);
    if (!ah_tensor_is_contiguous(antiquantScale) && !is_transposed_2d(antiquantScale))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquantScale is non-contiguous and not a transposed view", op);
    if (antiquantOffsetOptional && !ah_tensor_is_contiguous(antiquantOffsetOptional) &&
        !is_transposed_2d(antiquantOffsetOptional))
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquantOffsetOptional is non-contiguous and not a transposed view", op);
    scale_mode mode = SCALE_TENSOR;
    AH_TRY(wq_check_param(op, "antiquantScale", antiquantScale, k, n, antiquantGroupSize, &mode));
    if (antiquantOffsetOptional) {
        AH_TRY(ah_check_tensor(op, "antiquantOffsetOptional", antiquantOffsetOptional, half, 1, 2));
        if (antiquantOffsetOptional->dtype != antiquantScale->dtype)
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: antiquantOffsetOptional dtype %s differs from antiquantScale's", op,
                            ah_dtype_name(antiquantOffsetOptional->dtype));
        AH_TRY(ah_check_shape(op, "antiquantOffsetOptional", antiquantOffsetOptional, antiquantScale->dims,
                           antiquantScale->ndim, "antiquantScale's shape"));
    }
    if (biasOptional) {
        aclDataType bt = x->dtype == ACL_FLOAT16 ? ACL_FLOAT16 : ACL_FLOAT;
        AH_TRY(ah_check_tensor(op, "biasOptional", biasOptional, AH_DTYPE_BIT(bt), 1, 2));
        if (biasOptional->dims[biasOptional->ndim - 1] != n || (biasOptional->ndim == 2 && biasOptional->dims[0] != 1))
            return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: biasOptional must have shape (n,) or (1, n) with n = %lld", op,
                            (long long)n);
    }
    if (y->dtype != x->dtype)
        return ah_error(ACLNN_ERR_PARAM_INVALID, "%s: y has dtype %s, expected x's %s", op, ah_dtype_name(y->dtype),
                        ah_dtype_name(x->dtype));
    int64_t ydims[2] = {m, n};
    AH_TRY(ah_check_shape(op, "y", y, ydims, 2, "(m, n)"));
    aclOpExecutor *ex = ah_executor_new(op, wq_run);
    if (!ex)
        return ACLNN_ERR_INNER;
    wq_params *p = AH_EXEC_PARAMS(ex, wq_params);
    p->m = m, p->k = k, p->n = n, p->group = antiquantGroupSize, p->mode = mode;
    p->int4 = int4, p->w_transposed = w_t || n == 1, p->x_transposed = x_t;
    p->slot_x = ah_executor_add_tensor(ex, "x", x, AH_IN);
    p->slot_w = ah_executor_add_tensor(ex, "weight", weight, AH_IN);
    p->slot_scale = ah_executor_add_tensor(ex, "antiquantScale", antiquantScale, AH_IN);
    p->slot_offset = antiquantOffsetOptional
                         ? ah_executor_add_tensor(ex, "antiquantOffsetOptional", antiquantOffsetOptional, AH_IN)
                         : -1;
    p->slot_bias = biasOptional ? ah_executor_add_tensor(ex, "biasOptional", biasOptional, AH_IN) : -1;
    p->slot_y = ah_executor_add_tensor(ex, "y", y, AH_OUT);
    return ah_executor_finish(ex, 0, workspaceSize, executor);
}

AH_API aclnnStatus aclnnWeightQuantBatchMatmulV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                 aclrtStream stream) {
    return ah_executor_launch(executor, workspace, workspaceSize, stream, "aclnnWeightQuantBatchMatmulV2");
}
