/* test_core.c - the ggml-style core and the CANN backend through the public C API: the tokenizer's
 * tables, type traits, tensors and views, graphs, buffers, and ADD / CPY computed on CANN0
 * compared with plain C. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cann_llm.h"
#include "ctest_util.h"

static void test_types(void) {
    CHECK(clm_type_size(CLM_TYPE_Q4_0) == 18 && clm_type_block_size(CLM_TYPE_Q4_0) == 32);
    CHECK(clm_type_size(CLM_TYPE_Q6_K) == 210 && clm_type_block_size(CLM_TYPE_Q6_K) == 256);
    CHECK(clm_type_name(4) == NULL && clm_type_size(4) == 0);
    CHECK(clm_row_size(CLM_TYPE_Q8_0, 64) == 68);
    CHECK(strcmp(clm_op_name(CLM_OP_FLASH_ATTN_EXT), "FLASH_ATTN_EXT") == 0);
}

static void test_tensors_and_views(void) {
    clm_context *ctx;
    CHECK(clm_context_new(16, &ctx) == CLM_OK);
    clm_tensor *a, *v, *p, *r;
    int64_t ne[3] = {4, 3, 2};
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, ne, &a) == CLM_OK);
    CHECK(a->nb[0] == 4 && a->nb[1] == 16 && a->nb[2] == 48 && a->ne[3] == 1);
    CHECK(clm_nbytes(a) == 96 && clm_is_contiguous(a));
    CHECK(clm_permute(ctx, a, 1, 0, 2, 3, &p) == CLM_OK);
    CHECK(p->ne[0] == 3 && p->ne[1] == 4 && p->nb[0] == 16 && !clm_is_contiguous(p) && p->view_src == a);
    CHECK(clm_reshape_4d(ctx, p, 12, 2, 1, 1, &r) == CLM_ERR_INVALID_ARG);  /* not contiguous */
    CHECK(strstr(clm_last_error(), "not contiguous") != NULL);
    CHECK(clm_view_4d(ctx, a, 4, 1, 1, 1, 16, 16, 16, 80, &v) == CLM_OK);
    CHECK(clm_view_4d(ctx, a, 4, 2, 1, 1, 16, 32, 32, 80, &v) == CLM_ERR_INVALID_ARG);  /* past the end */
    int64_t bad = 33;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_Q4_0, 1, &bad, &r) == CLM_ERR_INVALID_ARG);
    clm_context_free(ctx);
}

/* UNARY and GLU constructors: shape, type, sub-op and swapped in op_params, refusals */
static void test_unary_and_glu_constructors(void) {
    clm_context *ctx;
    CHECK(clm_context_new(32, &ctx) == CLM_OK);
    clm_tensor *a, *b, *c, *q, *odd, *out;
    int64_t ne[3] = {10, 3, 2}, ne_c[3] = {10, 3, 1}, ne_odd[2] = {9, 2};
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 3, ne, &a) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 3, ne, &b) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 3, ne_c, &c) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_Q8_0, 1, (int64_t[]){32}, &q) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, ne_odd, &odd) == CLM_OK);

    clm_status (*unary[3])(clm_context *, clm_tensor *, clm_tensor **) = {clm_gelu, clm_gelu_erf, clm_tanh};
    int32_t unary_op[3] = {CLM_UNARY_OP_GELU, CLM_UNARY_OP_GELU_ERF, CLM_UNARY_OP_TANH};
    const char *unary_name[3] = {"GELU", "GELU_ERF", "TANH"};
    for (int i = 0; i < 3; i++) {
        CHECK(unary[i](ctx, a, &out) == CLM_OK);
        CHECK(out->op == CLM_OP_UNARY && out->op_params[0] == unary_op[i] && out->type == CLM_TYPE_F16);
        CHECK(out->ne[0] == 10 && out->ne[1] == 3 && out->ne[2] == 2 && out->src[0] == a);
        CHECK(strcmp(clm_op_desc(out), unary_name[i]) == 0);
        CHECK(unary[i](ctx, odd, &out) == CLM_OK);                        /* any shape */
        CHECK(unary[i](ctx, q, &out) == CLM_ERR_INVALID_ARG);             /* not a float type */
    }

    clm_status (*fused[2])(clm_context *, clm_tensor *, bool, clm_tensor **) = {clm_geglu, clm_geglu_erf};
    clm_status (*split[2])(clm_context *, clm_tensor *, clm_tensor *, clm_tensor **) = {clm_geglu_split,
                                                                                        clm_geglu_erf_split};
    int32_t glu_op[2] = {CLM_GLU_OP_GEGLU, CLM_GLU_OP_GEGLU_ERF};
    const char *glu_name[2] = {"GEGLU", "GEGLU_ERF"};
    for (int i = 0; i < 2; i++) {
        for (int swapped = 0; swapped < 2; swapped++) {
            CHECK(fused[i](ctx, a, swapped, &out) == CLM_OK);
            CHECK(out->op == CLM_OP_GLU && out->op_params[0] == glu_op[i] && out->op_params[1] == swapped);
            CHECK(out->ne[0] == 5 && out->ne[1] == 3 && out->ne[2] == 2 && out->type == CLM_TYPE_F16);
            CHECK(out->src[0] == a && out->src[1] == NULL && strcmp(clm_op_desc(out), glu_name[i]) == 0);
        }
        CHECK(fused[i](ctx, odd, false, &out) == CLM_ERR_INVALID_ARG);   /* ne0 odd */
        CHECK(strstr(clm_last_error(), "odd") != NULL);
        CHECK(split[i](ctx, a, b, &out) == CLM_OK);
        CHECK(out->op == CLM_OP_GLU && out->op_params[0] == glu_op[i] && out->op_params[1] == 0);
        CHECK(out->ne[0] == 10 && out->src[0] == a && out->src[1] == b);
        CHECK(split[i](ctx, a, c, &out) == CLM_ERR_INVALID_ARG);        /* shapes differ */
        CHECK(split[i](ctx, odd, odd, &out) == CLM_OK);                  /* split: any ne0 */
        CHECK(split[i](ctx, a, NULL, &out) == CLM_ERR_INVALID_ARG);
    }
    /* the gate and the linear part of a split GLU have one type (ggml_glu_impl asserts it) */
    clm_tensor *f32;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, ne, &f32) == CLM_OK);
    CHECK(clm_geglu_split(ctx, a, f32, &out) == CLM_ERR_INVALID_ARG);
    CHECK(clm_swiglu_split(ctx, a, f32, &out) == CLM_ERR_INVALID_ARG);
    clm_context_free(ctx);
}

/* The MoE FFN's ops: ARGSORT, SUM_ROWS, CLAMP, DIV and MUL_MAT_ID (shapes, types, params and the
 * refusals of ggml's asserts) */
static void test_moe_constructors(void) {
    clm_context *ctx;
    CHECK(clm_context_new(64, &ctx) == CLM_OK);
    clm_tensor *logits, *h, *q, *out;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, (int64_t[]){8, 5}, &logits) == CLM_OK);  /* [n_expert, n_tokens] */
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 3, (int64_t[]){6, 3, 2}, &h) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_Q8_0, 1, (int64_t[]){32}, &q) == CLM_OK);

    /* argsort: I32 of a's shape, the order in op_params[0] */
    for (int32_t order = CLM_SORT_ORDER_ASC; order <= CLM_SORT_ORDER_DESC; order++) {
        CHECK(clm_argsort(ctx, h, order, &out) == CLM_OK);
        CHECK(out->op == CLM_OP_ARGSORT && out->type == CLM_TYPE_I32 && out->op_params[0] == order);
        CHECK(out->ne[0] == 6 && out->ne[1] == 3 && out->ne[2] == 2 && out->ne[3] == 1 && out->src[0] == h);
        CHECK(strcmp(clm_op_desc(out), "ARGSORT") == 0);
    }
    CHECK(clm_argsort(ctx, h, 2, &out) == CLM_ERR_INVALID_ARG);                 /* no such order */
    CHECK(strstr(clm_last_error(), "order") != NULL);
    CHECK(clm_argsort(ctx, q, CLM_SORT_ORDER_ASC, &out) == CLM_ERR_INVALID_ARG); /* not a float type */

    /* sum_rows: ne0 -> 1, a's type */
    CHECK(clm_sum_rows(ctx, h, &out) == CLM_OK);
    CHECK(out->op == CLM_OP_SUM_ROWS && out->type == CLM_TYPE_F16 && out->src[0] == h);
    CHECK(out->ne[0] == 1 && out->ne[1] == 3 && out->ne[2] == 2 && out->ne[3] == 1);
    CHECK(strcmp(clm_op_desc(out), "SUM_ROWS") == 0);
    CHECK(clm_sum_rows(ctx, q, &out) == CLM_ERR_INVALID_ARG);

    /* clamp: a's shape and type, {min, max} as floats */
    CHECK(clm_clamp(ctx, h, 6.103515625e-5f, INFINITY, &out) == CLM_OK);
    float fp[2];
    memcpy(fp, out->op_params, sizeof(fp));
    CHECK(out->op == CLM_OP_CLAMP && out->type == CLM_TYPE_F16 && fp[0] == 6.103515625e-5f && isinf(fp[1]));
    CHECK(out->ne[0] == 6 && out->ne[1] == 3 && out->ne[2] == 2 && strcmp(clm_op_desc(out), "CLAMP") == 0);
    CHECK(clm_clamp(ctx, q, 0.0f, 1.0f, &out) == CLM_ERR_INVALID_ARG);

    /* div: b repeats to a (ggml_can_repeat), the result is a's type and shape */
    clm_tensor *sum, *odd;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, (int64_t[]){1, 5}, &sum) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, (int64_t[]){3, 5}, &odd) == CLM_OK);
    CHECK(clm_div(ctx, logits, sum, &out) == CLM_OK);
    CHECK(out->op == CLM_OP_DIV && out->type == CLM_TYPE_F32 && out->src[0] == logits && out->src[1] == sum);
    CHECK(out->ne[0] == 8 && out->ne[1] == 5 && strcmp(clm_op_desc(out), "DIV") == 0);
    CHECK(clm_div(ctx, logits, odd, &out) == CLM_ERR_INVALID_ARG);     /* 3 does not divide 8 */
    CHECK(clm_div(ctx, sum, logits, &out) == CLM_ERR_INVALID_ARG);     /* a never broadcasts */
    CHECK(clm_div(ctx, logits, NULL, &out) == CLM_ERR_INVALID_ARG);

    /* mul_mat_id: as [K=64, N=16, n_as=8], b [64, 1 or 2, 5], ids I32 [2, 5] -> F32 [16, 2, 5] */
    clm_tensor *as, *b1, *b2, *ids, *ids_f, *ids_3d, *b_bad, *as_4d, *as_t;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_Q4_0, 3, (int64_t[]){64, 16, 8}, &as) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, (int64_t[]){64, 1, 5}, &b1) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, (int64_t[]){64, 2, 5}, &b2) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_I32, 2, (int64_t[]){2, 5}, &ids) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 2, (int64_t[]){2, 5}, &ids_f) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_I32, 3, (int64_t[]){2, 5, 2}, &ids_3d) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, (int64_t[]){32, 2, 5}, &b_bad) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 4, (int64_t[]){64, 16, 4, 2}, &as_4d) == CLM_OK);
    for (int i = 0; i < 2; i++) {
        CHECK(clm_mul_mat_id(ctx, as, i ? b2 : b1, ids, &out) == CLM_OK);
        CHECK(out->op == CLM_OP_MUL_MAT_ID && out->type == CLM_TYPE_F32);
        CHECK(out->ne[0] == 16 && out->ne[1] == 2 && out->ne[2] == 5 && out->ne[3] == 1);
        CHECK(out->src[0] == as && out->src[1] == (i ? b2 : b1) && out->src[2] == ids);
        CHECK(strcmp(clm_op_desc(out), "MUL_MAT_ID") == 0);
    }
    /* a view selecting the first experts of an argsort, as ggml_argsort_top_k (nb1 of the full row) */
    clm_tensor *sorted, *top;
    CHECK(clm_argsort(ctx, logits, CLM_SORT_ORDER_DESC, &sorted) == CLM_OK);
    CHECK(clm_view_4d(ctx, sorted, 2, 5, 1, 1, sorted->nb[1], sorted->nb[2], sorted->nb[3], 0, &top) == CLM_OK);
    CHECK(clm_mul_mat_id(ctx, as, b1, top, &out) == CLM_OK && out->ne[1] == 2 && out->ne[2] == 5);
    CHECK(clm_mul_mat_id(ctx, as, b1, ids_f, &out) == CLM_ERR_INVALID_ARG);   /* ids not i32 */
    CHECK(clm_mul_mat_id(ctx, as, b1, ids_3d, &out) == CLM_ERR_INVALID_ARG);  /* ids not 2-d */
    CHECK(clm_mul_mat_id(ctx, as, b_bad, ids, &out) == CLM_ERR_INVALID_ARG);  /* K differs */
    CHECK(clm_mul_mat_id(ctx, as_4d, b1, ids, &out) == CLM_ERR_INVALID_ARG);  /* as is 4-d */
    CHECK(clm_mul_mat_id(ctx, as, logits, ids, &out) == CLM_ERR_INVALID_ARG); /* K 8 != 64 */
    clm_tensor *ids3, *ids_n;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_I32, 2, (int64_t[]){3, 5}, &ids3) == CLM_OK);
    CHECK(clm_mul_mat_id(ctx, as, b2, ids3, &out) == CLM_ERR_INVALID_ARG);    /* 2 rows do not broadcast to 3 */
    CHECK(strstr(clm_last_error(), "broadcast") != NULL);
    CHECK(clm_mul_mat_id(ctx, as, b1, ids3, &out) == CLM_OK);                 /* 1 row does */
    CHECK(clm_new_tensor(ctx, CLM_TYPE_I32, 2, (int64_t[]){2, 4}, &ids_n) == CLM_OK);
    CHECK(clm_mul_mat_id(ctx, as, b1, ids_n, &out) == CLM_ERR_INVALID_ARG);   /* 4 lists for 5 tokens */
    CHECK(clm_transpose(ctx, as_4d, &as_t) == CLM_OK);
    CHECK(clm_mul_mat_id(ctx, as_t, b1, ids, &out) == CLM_ERR_INVALID_ARG);   /* transposed */
    CHECK(clm_mul_mat_id(ctx, as, b1, NULL, &out) == CLM_ERR_INVALID_ARG);
    clm_context_free(ctx);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, mant = h & 1023;
    if (exp == 0) return (sign ? -1.0f : 1.0f) * ldexpf((float)mant, -24);
    if (exp == 31) return mant ? NAN : (sign ? -INFINITY : INFINITY);
    uint32_t bits = sign | ((exp + 112) << 23) | (mant << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static void test_add_and_cpy_on_cann(void) {
    clm_reg *reg;
    if (clm_cann_reg(&reg) != CLM_OK) {
        fprintf(stderr, "registry: %s\n", clm_last_error());
        CHECK(0);
        return;
    }
    CHECK(clm_reg_device_count(reg) >= 1);
    clm_device *dev;
    CHECK(clm_reg_device(reg, 0, &dev) == CLM_OK);
    CHECK(strcmp(clm_device_name(dev), "CANN0") == 0);
    size_t free_b = 0, total_b = 0;
    CHECK(clm_device_memory(dev, &free_b, &total_b) == CLM_OK && total_b > 0 && free_b <= total_b);

    clm_backend *backend;
    CHECK(clm_device_init_backend(dev, &backend) == CLM_OK);
    clm_context *ctx;
    CHECK(clm_context_new(32, &ctx) == CLM_OK);
    /* a: [5, 4, 3] f32; b: [5, 1, 3] broadcasts over dim 1; c: [10] repeats twice along dim 0 */
    int64_t ne_a[3] = {10, 4, 3}, ne_b[3] = {10, 1, 3}, ne_c[1] = {5};
    clm_tensor *a, *b, *c, *sum, *sum2, *h, *cpy;
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, ne_a, &a) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 3, ne_b, &b) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F32, 1, ne_c, &c) == CLM_OK);
    CHECK(clm_add(ctx, a, b, &sum) == CLM_OK);
    CHECK(clm_add(ctx, sum, c, &sum2) == CLM_OK);
    CHECK(clm_new_tensor(ctx, CLM_TYPE_F16, 3, ne_a, &h) == CLM_OK);
    CHECK(clm_cpy(ctx, sum2, h, &cpy) == CLM_OK);
    CHECK(clm_device_supports_op(dev, sum) && clm_device_supports_op(dev, sum2) && clm_device_supports_op(dev, cpy));

    clm_buffer *buf;
    CHECK(clm_buft_alloc_buffer(clm_device_buffer_type(dev), 4096, &buf) == CLM_OK);
    size_t offset = 0;
    clm_tensor *all[] = {a, b, c, sum, sum2, h};
    for (int i = 0; i < 6; i++) {
        CHECK(clm_tensor_alloc(buf, all[i], offset) == CLM_OK);
        offset += (clm_nbytes(all[i]) + 127) / 128 * 128;
    }
    CHECK(clm_tensor_view_init(cpy) == CLM_OK);

    float va[120], vb[30], vc[5], out[120];
    uint16_t outh[120];
    for (int i = 0; i < 120; i++) va[i] = (float)i * 0.25f - 7.0f;
    for (int i = 0; i < 30; i++) vb[i] = (float)(i % 7) - 3.5f;
    for (int i = 0; i < 5; i++) vc[i] = 100.0f * (float)i;
    CHECK(clm_tensor_set(a, va, 0, sizeof(va)) == CLM_OK);
    CHECK(clm_tensor_set(b, vb, 0, sizeof(vb)) == CLM_OK);
    CHECK(clm_tensor_set(c, vc, 0, sizeof(vc)) == CLM_OK);

    clm_graph *graph;
    CHECK(clm_graph_new(ctx, 16, &graph) == CLM_OK);
    CHECK(clm_graph_build_forward(graph, cpy) == CLM_OK);
    CHECK(clm_graph_n_nodes(graph) == 3 && clm_graph_n_leafs(graph) == 4);
    CHECK(clm_backend_graph_compute(backend, graph) == CLM_OK);
    CHECK(clm_backend_synchronize(backend) == CLM_OK);
    CHECK(clm_tensor_get(sum2, out, 0, sizeof(out)) == CLM_OK);
    CHECK(clm_tensor_get(h, outh, 0, sizeof(outh)) == CLM_OK);
    int bad_sum = 0, bad_h = 0;
    for (int k = 0; k < 3; k++) {
        for (int j = 0; j < 4; j++) {
            for (int i = 0; i < 10; i++) {
                int idx = (k * 4 + j) * 10 + i;
                float want = va[idx] + vb[k * 10 + i] + vc[i % 5];
                if (out[idx] != want) bad_sum++;
                if (fabsf(f16_to_f32(outh[idx]) - want) > fabsf(want) * 1e-3f) bad_h++;
            }
        }
    }
    CHECK(bad_sum == 0);
    CHECK(bad_h == 0);

    /* A tensor whose data lies past its buffer: the device sanitizer reports it, nothing crashes. */
    a->data = (char *)clm_buffer_base(buf) + 8192;
    clm_status st = clm_backend_graph_compute(backend, graph);
    if (st == CLM_OK) st = clm_backend_synchronize(backend);
    CHECK(st != CLM_OK);
    CHECK(strlen(clm_last_error()) > 0);
    a->data = clm_buffer_base(buf);
    CHECK(clm_backend_synchronize(backend) == CLM_OK);

    clm_buffer_free(buf);
    clm_context_free(ctx);
    clm_backend_free(backend);
}

/* Strings back to back and their offsets, from a NULL-terminated list. */
static void make_strings(const char *const *list, char *text, uint32_t *offsets, int64_t *n) {
    uint32_t at = 0;
    int64_t i = 0;
    offsets[0] = 0;
    for (; list[i] != NULL; i++) {
        memcpy(text + at, list[i], strlen(list[i]));
        at += (uint32_t)strlen(list[i]);
        offsets[i + 1] = at;
    }
    *n = i;
}

static void test_vocab(void) {
    static const char *const tokens[] = {"a", "b", "ab", "abc", "c", "<0x41>", "\xc3\xa9", "xy", "x y", NULL};
    static const char *const merges[] = {"a b", "ab c", "nospace", "a b", "x y", NULL};
    char text[64], mtext[64];
    uint32_t off[16], moff[16];
    int64_t n, n_merges, dup[2], n_ids;
    int32_t id, ids[64];
    clm_vocab *v = NULL;
    make_strings(tokens, text, off, &n);
    make_strings(merges, mtext, moff, &n_merges);
    CHECK(clm_vocab_new(text, off, n, &v, dup) == CLM_OK && dup[0] == -1);
    CHECK(clm_vocab_find(v, "abc", 3, &id) == CLM_OK && id == 3);
    CHECK(clm_vocab_find(v, "abd", 3, &id) == CLM_OK && id == -1);
    CHECK(clm_vocab_set_merges(v, mtext, moff, n_merges) == CLM_OK);
    CHECK(clm_vocab_merge_rank(v, "ab", 2, "c", 1, &id) == CLM_OK && id == 1);
    CHECK(clm_vocab_merge_rank(v, "a", 1, "b", 1, &id) == CLM_OK && id == 0);  /* first occurrence */
    CHECK(clm_vocab_merge_rank(v, "no", 2, "space", 5, &id) == CLM_OK && id == -1);
    /* characters: "abc" merges whole; "A" is no token: its <0x41> byte token */
    CHECK(clm_vocab_bpe(v, "abcA", 4, 0, ids, 64, &n_ids) == CLM_OK && n_ids == 2 && ids[0] == 3 && ids[1] == 5);
    /* byte-level: "A" becomes the one-byte token "A", which there is none of: dropped */
    CHECK(clm_vocab_bpe(v, "abcA", 4, CLM_BPE_BYTE_LEVEL, ids, 64, &n_ids) == CLM_OK && n_ids == 1 && ids[0] == 3);
    /* the merge "x y" joins the symbols x and y */
    CHECK(clm_vocab_bpe(v, "xy", 2, CLM_BPE_BYTE_LEVEL, ids, 64, &n_ids) == CLM_OK && n_ids == 1 && ids[0] == 7);
    CHECK(clm_vocab_bpe(v, "abcabc", 6, 0, ids, 1, &n_ids) == CLM_ERR_INVALID_ARG);  /* no room */
    /* SPM: the best-scoring pair first; an invalid byte with no token becomes unk (4: "c") */
    const double scores[] = {0, 0, -1, -5, 0, 0, 0, 0, 0};
    CHECK(clm_vocab_set_scores(v, scores) == CLM_OK);
    CHECK(clm_vocab_spm(v, "abc\xff\xc3\xa9", 6, 4, ids, 64, &n_ids) == CLM_OK && n_ids == 3 && ids[0] == 3 &&
          ids[1] == 4 && ids[2] == 6);
    CHECK(clm_vocab_spm(v, "\xff", 1, -1, ids, 64, &n_ids) == CLM_ERR_INVALID_ARG &&
          strstr(clm_last_error(), "0xFF") != NULL);
    static char long_word[20000];
    memset(long_word, 'a', sizeof(long_word));
    CHECK(clm_vocab_bpe(v, long_word, sizeof(long_word), 0, NULL, 0, &n_ids) == CLM_ERR_INVALID_ARG);
    int32_t *many = malloc(sizeof(long_word) * sizeof(int32_t));
    CHECK(many != NULL && clm_vocab_spm(v, long_word, sizeof(long_word), -1, many, sizeof(long_word), &n_ids) == CLM_OK &&
          n_ids == (int64_t)sizeof(long_word) && many[0] == 0);
    free(many);
    clm_vocab_free(v);
    /* two equal texts */
    static const char *const dups[] = {"a", "b", "a", NULL};
    make_strings(dups, text, off, &n);
    CHECK(clm_vocab_new(text, off, n, &v, dup) == CLM_ERR_INVALID_ARG && v == NULL && dup[0] == 0 && dup[1] == 2);
    off[1] = 5; /* offsets that decrease */
    CHECK(clm_vocab_new(text, off, n, &v, dup) == CLM_ERR_INVALID_ARG && strstr(clm_last_error(), "decrease") != NULL);
}

/* clm_logits_scan: ties to the lower id, bans skipped (unsorted ones refused), the first NaN/inf
 * wins over the pick; rows around the 16-value lanes and 256-value blocks, read within bounds. */
static void test_logits_scan(void) {
    int64_t first = 0, best = 0;
    for (int64_t n = 1; n <= 600; n += 37) {
        float *x = malloc((size_t)n * sizeof(float)); /* exactly n: ASan sees a read past it */
        for (int64_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 101) - 50.0f;
        int64_t want = 0;
        for (int64_t i = 1; i < n; i++) want = x[i] > x[want] ? i : want;
        CHECK(clm_logits_scan(x, n, NULL, 0, &first, &best) == CLM_OK && first == -1 && best == want);
        int64_t bans[3] = {-1, want, n + 5};
        CHECK(clm_logits_scan(x, n, bans, 3, &first, &best) == CLM_OK && first == -1 && best != want &&
              (n == 1 ? best == -1 : x[best] <= x[want]));
        x[n - 1] = NAN;
        CHECK(clm_logits_scan(x, n, NULL, 0, &first, &best) == CLM_OK && first == n - 1 && best == -1);
        free(x);
    }
    float tie[3] = {1.0f, 2.0f, 2.0f};
    int64_t unsorted[2] = {2, 1};
    CHECK(clm_logits_scan(tie, 3, NULL, 0, &first, &best) == CLM_OK && best == 1);
    CHECK(clm_logits_scan(tie, 3, unsorted, 2, &first, &best) == CLM_ERR_INVALID_ARG);
    CHECK(strstr(clm_last_error(), "not sorted") != NULL);
}

/* clm_kv_decode_step: the first empty cells, committed, n_kv rounded up, the mask; a full cache
 * is reported and left alone. */
static void test_kv_decode_step(void) {
    int64_t pos[6] = {0, -1, 1, -1, 2, -1};
    uint64_t seq[6] = {1, 0, 1, 0, 1, 0};
    const int64_t tpos[2] = {3, 0}, tseq[2] = {0, 1};
    int64_t cells[2], used = 0, n_kv = 0;
    uint16_t mask[12];
    CHECK(clm_kv_decode_step(pos, seq, 6, tpos, tseq, 2, 4, cells, &used, &n_kv, mask) == CLM_OK);
    /* the last used cell is 4: n_kv 8, clamped to the 6 cells */
    CHECK(used == 3 && cells[0] == 1 && cells[1] == 3 && n_kv == 6);
    CHECK(pos[1] == 3 && seq[1] == 1 && pos[3] == 0 && seq[3] == 2);
    /* token 0 (seq 0, pos 3) sees cells 0, 1, 2, 4; token 1 (seq 1, pos 0) only cell 3 */
    const uint16_t want[12] = {0, 0, 0, 0xFC00, 0, 0xFC00, 0xFC00, 0xFC00, 0xFC00, 0, 0xFC00, 0xFC00};
    CHECK(memcmp(mask, want, sizeof want) == 0);
    pos[4] = -1, seq[4] = 0;
    int64_t more_pos[1] = {4}, more_seq[1] = {0};
    CHECK(clm_kv_decode_step(pos, seq, 6, more_pos, more_seq, 1, 4, cells, &used, &n_kv, mask) == CLM_OK);
    CHECK(used == 4 && cells[0] == 4 && n_kv == 6);
    pos[4] = -1, seq[4] = 0, pos[1] = -1, seq[1] = 0;     /* cells 0, 2, 3 in use: n_kv 4 */
    CHECK(clm_kv_decode_step(pos, seq, 6, more_pos, more_seq, 1, 4, cells, &used, &n_kv, mask) == CLM_OK);
    CHECK(used == 3 && cells[0] == 1 && n_kv == 4 && pos[1] == 4);
    pos[4] = pos[5] = 7;
    CHECK(clm_kv_decode_step(pos, seq, 6, more_pos, more_seq, 1, 4, cells, &used, &n_kv, mask) == CLM_OK);
    CHECK(used == 6 && n_kv == -1 && pos[5] == 7);
    int64_t bad_seq[1] = {64};
    CHECK(clm_kv_decode_step(pos, seq, 6, more_pos, bad_seq, 1, 4, cells, &used, &n_kv, mask) == CLM_ERR_INVALID_ARG);
}

int main(void) {
    test_logits_scan();
    test_kv_decode_step();
    test_vocab();
    test_types();
    test_tensors_and_views();
    test_unary_and_glu_constructors();
    test_moe_constructors();
    test_add_and_cpy_on_cann();
    return CT_RESULT();
}
