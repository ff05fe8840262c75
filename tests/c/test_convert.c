/* test_convert.c - host type conversion: fp16 rounding edges, Q8_0 / Q4_0 / Q4_1 round trips,
 * Q4_K -> Q4_1 sub-block mapping on a hand-made block, the load-time conversions on buffers of
 * exactly their size (the vector forms' loads and stores under the sanitizers), and error
 * statuses. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cann_llm.h"
#include "ctest_util.h"

static uint16_t f16_bits(float v) {
    uint8_t out[2];
    CHECK(clm_quantize_f32(CLM_TYPE_F16, &v, out, 1) == CLM_OK);
    return (uint16_t)(out[0] | out[1] << 8);
}

static void test_f16(void) {
    CHECK(f16_bits(1.0f) == 0x3c00);
    CHECK(f16_bits(-2.0f) == 0xc000);
    CHECK(f16_bits(65504.0f) == 0x7bff);
    CHECK(f16_bits(65520.0f) == 0x7c00);                 /* rounds to inf */
    CHECK(f16_bits(0x1p-24f) == 0x0001);                 /* smallest subnormal */
    CHECK(f16_bits(0x1p-25f) == 0x0000);                 /* tie -> even (zero) */
    CHECK(f16_bits(0x1.8p-24f) == 0x0002);               /* tie -> even (2) */
    CHECK(f16_bits(1.0f + 0x1p-11f) == 0x3c00);          /* tie -> even */
    CHECK(f16_bits(1.0f + 0x1.8p-11f) == 0x3c01);
    CHECK(f16_bits(1.0f + 0x1.8p-10f) == 0x3c02);        /* tie -> even */
    CHECK(f16_bits(INFINITY) == 0x7c00 && (f16_bits(NAN) & 0x7e00) == 0x7e00);
    /* every f16 value survives f16 -> f32 -> f16 */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  /* NaNs */
        uint8_t in[2] = {(uint8_t)h, (uint8_t)(h >> 8)};
        float v;
        if (clm_dequantize_f32(CLM_TYPE_F16, in, &v, 1) != CLM_OK || f16_bits(v) != h) bad++;
    }
    CHECK(bad == 0);
}

static void test_round_trips(void) {
    float x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = (float)(i - 20) * 0.25f;
    uint8_t q8[68], q4[36], q41[40];
    CHECK(clm_quantize_f32(CLM_TYPE_Q8_0, x, q8, 64) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q8_0, q8, y, 64) == CLM_OK);
    for (int i = 0; i < 64; i++) CHECK(fabsf(x[i] - y[i]) <= 0.05f);
    CHECK(clm_quantize_f32(CLM_TYPE_Q4_1, x, q41, 64) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_1, q41, y, 64) == CLM_OK);
    for (int i = 0; i < 32; i++) CHECK(fabsf(x[i] - y[i]) <= 0.26f);
    CHECK(clm_convert(CLM_TYPE_Q8_0, q8, CLM_TYPE_Q4_0, q4, 64) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_0, q4, y, 64) == CLM_OK);
    for (int i = 0; i < 64; i++) CHECK(fabsf(x[i] - y[i]) <= 0.7f);
    float zero[32] = {0};
    CHECK(clm_quantize_f32(CLM_TYPE_Q8_0, zero, q8, 32) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q8_0, q8, y, 32) == CLM_OK);
    for (int i = 0; i < 32; i++) CHECK(y[i] == 0.0f);
}

static void test_q4_k_to_q4_1(void) {
    uint8_t k[144] = {0}, o[8 * 20];
    k[0] = 0x00; k[1] = 0x3c;     /* d = 1 */
    k[2] = 0x00; k[3] = 0x38;     /* dmin = 0.5 */
    for (int j = 0; j < 4; j++) {
        k[4 + j] = (uint8_t)(j + 1);        /* scales of sub-blocks 0..3 */
        k[8 + j] = (uint8_t)(2 * j);        /* mins of sub-blocks 0..3 */
    }
    for (int j = 0; j < 4; j++) k[12 + j] = 0x11;  /* sub-blocks 4..7: scale 1, min 1 */
    for (int l = 0; l < 128; l++) k[16 + l] = (uint8_t)((l % 16) | ((15 - l % 16) << 4));
    CHECK(clm_convert(CLM_TYPE_Q4_K, k, CLM_TYPE_Q4_1, o, 256) == CLM_OK);
    float a[256], b[256];
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_K, k, a, 256) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_1, o, b, 256) == CLM_OK);
    for (int i = 0; i < 256; i++) CHECK(a[i] == b[i]);   /* exact: constants fit fp16 */
    CHECK(o[0] == 0x00 && o[1] == 0x3c);                 /* sub-block 0: d = 1 * 1 */
    CHECK(o[20 + 0] == 0x00 && o[20 + 1] == 0x40);       /* sub-block 1: d = 2 */
}

/* Random bytes with the fp16 at each block's offset `scale` set to a small positive value. */
static uint8_t *random_blocks(size_t n_blocks, size_t size, size_t scale, uint32_t *state) {
    uint8_t *b = malloc(n_blocks * size);
    if (!b) return NULL;
    for (size_t i = 0; i < n_blocks * size; i++) {
        *state = *state * 1664525u + 1013904223u;
        b[i] = (uint8_t)(*state >> 24);
    }
    for (size_t i = 0; i < n_blocks; i++) {
        b[i * size + scale] = b[i * size + scale] & 0x7f;   /* fp16 in [0, 2^-8): finite */
        b[i * size + scale + 1] = (uint8_t)(b[i * size + scale + 1] & 0x1b);
    }
    return b;
}

/* Each conversion from a buffer of exactly n elements into one of exactly the output's size,
 * checked by value: Q5_0 -> Q8_0 exact, Q4_K -> Q4_1 within the fp16 rounding of its block
 * constants (dmin = 0 here), Q6_K -> Q8_0 within one step, and the Q8_0 quantizer on the same
 * values (19 blocks: 16 at a time, then a tail) giving the conversion's bytes. */
static void test_load_conversions_in_bounds(void) {
    uint32_t st = 12345;
    enum { NQ5 = 19, NK = 3 };
    uint8_t *q5 = random_blocks(NQ5, 22, 0, &st), *q8 = malloc(NQ5 * 34);
    uint8_t *k4 = random_blocks(NK, 144, 0, &st), *q41 = malloc(NK * 8 * 20);
    uint8_t *k6 = random_blocks(NK, 210, 208, &st), *k8 = malloc(NK * 8 * 34);
    float *a = malloc(NK * 256 * sizeof(float)), *b = malloc(NK * 256 * sizeof(float));
    CHECK(q5 && q8 && k4 && q41 && k6 && k8 && a && b);
    if (!(q5 && q8 && k4 && q41 && k6 && k8 && a && b)) goto done;
    for (int i = 0; i < NK; i++) k4[144 * i + 2] = k4[144 * i + 3] = 0;   /* dmin = 0: mins exact */
    CHECK(clm_convert(CLM_TYPE_Q5_0, q5, CLM_TYPE_Q8_0, q8, NQ5 * 32) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q5_0, q5, a, NQ5 * 32) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q8_0, q8, b, NQ5 * 32) == CLM_OK);
    for (int i = 0; i < NQ5 * 32; i++) CHECK(a[i] == b[i]);
    CHECK(clm_convert(CLM_TYPE_Q4_K, k4, CLM_TYPE_Q4_1, q41, NK * 256) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_K, k4, a, NK * 256) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q4_1, q41, b, NK * 256) == CLM_OK);
    for (int i = 0; i < NK * 256; i++)
        CHECK(fabsf(a[i] - b[i]) <= fabsf(a[i]) * 0x1p-11f + 0x1p-24f * 15);
    CHECK(clm_convert(CLM_TYPE_Q6_K, k6, CLM_TYPE_Q8_0, k8, NK * 256) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q6_K, k6, a, NK * 256) == CLM_OK);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q8_0, k8, b, NK * 256) == CLM_OK);
    for (int blk = 0; blk < NK * 8; blk++) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(a[32 * blk + j]));
        for (int j = 0; j < 32; j++)
            CHECK(fabsf(a[32 * blk + j] - b[32 * blk + j]) <= amax / 127 + 0x1p-17f);
    }
    uint8_t *q8b = malloc(NQ5 * 34);   /* the quantizer alone, on 19 blocks */
    CHECK(q8b != NULL);
    if (q8b) {
        CHECK(clm_quantize_f32(CLM_TYPE_Q8_0, a, q8b, NQ5 * 32) == CLM_OK);
        CHECK(memcmp(q8b, k8, NQ5 * 34) == 0);   /* the same blocks as the conversion's */
        free(q8b);
    }
done:
    free(q5), free(q8), free(k4), free(q41), free(k6), free(k8), free(a), free(b);
}

static void test_errors(void) {
    float x[40] = {0};
    uint8_t out[256];
    CHECK(clm_quantize_f32(CLM_TYPE_Q8_0, x, out, 40) == CLM_ERR_INVALID_ARG);
    CHECK(strstr(clm_last_error(), "q8_0") != NULL);
    CHECK(clm_quantize_f32(CLM_TYPE_Q6_K, x, out, 256) == CLM_ERR_UNSUPPORTED);
    CHECK(clm_convert(CLM_TYPE_Q8_0, out, CLM_TYPE_Q5_0, out, 32) == CLM_ERR_UNSUPPORTED);
    CHECK(clm_convert(99, out, CLM_TYPE_Q8_0, out, 32) == CLM_ERR_UNSUPPORTED);
    CHECK(clm_dequantize_f32(CLM_TYPE_Q8_0, NULL, x, 32) == CLM_ERR_INVALID_ARG);
    CHECK(!clm_convert_supported(CLM_TYPE_I32, CLM_TYPE_Q8_0));
    clm_clear_error();
}

int main(void) {
    test_f16();
    test_round_trips();
    test_q4_k_to_q4_1();
    test_load_conversions_in_bounds();
    test_errors();
    return CT_RESULT();
}
