/* test_quant_layout.c - the Q8_0 / Q4_0 / Q4_1 device layout: transforms against a per-element
 * reference of the spec, round trips on random bytes (incl. d = 0 blocks), chunked conversion,
 * the fp16 helpers, and the device buffer path (chunked set/get, views, misaligned ranges,
 * memset, padding). CT_BENCH=1 also prints the transforms' GB/s on one core. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cann/quant_layout.h"
#include "cann_llm.h"
#include "ctest_util.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void) {  /* xorshift64* */
    rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static const int32_t types[] = {CLM_TYPE_Q8_0, CLM_TYPE_Q4_0, CLM_TYPE_Q4_1};

/* Random ggml blocks; every 5th has d = +-0 and every 7th uniform quants. */
static void random_blocks(const cann_qlayout *l, uint8_t *p, size_t n) {
    for (size_t i = 0; i < n * l->block_bytes; i++) p[i] = (uint8_t)rnd();
    for (size_t b = 0; b < n; b++) {
        uint8_t *blk = p + b * l->block_bytes;
        if (b % 5 == 0) blk[0] = 0, blk[1] &= 0x80;
        if (b % 7 == 0) {
            size_t q0 = l->type == CLM_TYPE_Q4_1 ? 4 : 2;
            memset(blk + q0, l->type == CLM_TYPE_Q8_0 ? blk[q0] : 0, l->block_bytes - q0);
        }
    }
}

static void *region_ptrs(const cann_qlayout *l, uint8_t *base, size_t n_blocks, size_t first, void *parts[]) {
    for (int r = 0; r < l->n_regions; r++) {
        parts[r] = base + cann_qlayout_region_offset(l, n_blocks, r) + first * l->region_bytes[r];
    }
    return parts;
}

/* The spec, element by element: the device quant of element e of block b and its fp16 fields. */
static int ref_quant(const cann_qlayout *l, const uint8_t *blk, int e) {
    if (l->type == CLM_TYPE_Q8_0) return (int8_t)blk[2 + e];
    const uint8_t *qs = blk + (l->type == CLM_TYPE_Q4_1 ? 4 : 2);
    int q = e < 16 ? qs[e] & 0xf : qs[e - 16] >> 4;
    return q - 8;
}

static int dev_quant(const cann_qlayout *l, const uint8_t *dev, size_t b, int e) {
    if (l->type == CLM_TYPE_Q8_0) return (int8_t)dev[32 * b + e];
    int nib = (dev[16 * b + e / 2] >> (4 * (e % 2))) & 0xf;
    return nib >= 8 ? nib - 16 : nib;  /* two's-complement int4 */
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static void test_transforms(void) {
    for (size_t t = 0; t < 3; t++) {
        const cann_qlayout *l = cann_qlayout_get(types[t]);
        CHECK(l != NULL);
        if (l == NULL) continue;
        size_t n = 1000;
        uint8_t *src = malloc(n * l->block_bytes), *back = malloc(n * l->block_bytes);
        uint8_t *dev = malloc(n * l->device_block_bytes), *dev2 = malloc(n * l->device_block_bytes);
        random_blocks(l, src, n);
        void *parts[CANN_QL_MAX_REGIONS];
        cann_qlayout_pack(l, src, n, region_ptrs(l, dev, n, 0, parts));
        /* Against the spec. */
        int bad = 0;
        for (size_t b = 0; b < n; b++) {
            const uint8_t *blk = src + b * l->block_bytes;
            for (int e = 0; e < 32; e++) bad += ref_quant(l, blk, e) != dev_quant(l, dev, b, e);
            const uint8_t *scales = dev + n * l->region_bytes[0];
            uint16_t d = rd16(blk);
            if (l->type != CLM_TYPE_Q4_1) {
                bad += rd16(scales + 2 * b) != d;
                continue;
            }
            uint16_t m = rd16(blk + 2), scale = rd16(scales + 2 * b);
            uint16_t offset = rd16(scales + 2 * n + 2 * b), kept = rd16(scales + 4 * n + 2 * b);
            if ((d & 0x7fff) == 0) {
                bad += scale != m || offset != 0x4880 || kept != d;
            } else {
                float o = 8.0f + cann_fp16_to_f32(m) / cann_fp16_to_f32(d);
                bad += scale != d || kept != m || offset != cann_f32_to_fp16(o);
            }
        }
        CHECK(bad == 0);
        /* Round trip. */
        cann_qlayout_unpack(l, (const void *const *)region_ptrs(l, dev, n, 0, parts), n, back);
        CHECK(memcmp(src, back, n * l->block_bytes) == 0);
        /* Chunks at random block splits land in the same bytes. */
        memset(dev2, 0xa5, n * l->device_block_bytes);
        for (size_t b0 = 0; b0 < n;) {
            size_t k = 1 + rnd() % 97;
            if (k > n - b0) k = n - b0;
            cann_qlayout_pack(l, src + b0 * l->block_bytes, k, region_ptrs(l, dev2, n, b0, parts));
            b0 += k;
        }
        CHECK(memcmp(dev, dev2, n * l->device_block_bytes) == 0);
        memset(back, 0, n * l->block_bytes);
        for (size_t b0 = 0; b0 < n;) {
            size_t k = 1 + rnd() % 61;
            if (k > n - b0) k = n - b0;
            cann_qlayout_unpack(l, (const void *const *)region_ptrs(l, dev, n, b0, parts), k,
                                back + b0 * l->block_bytes);
            b0 += k;
        }
        CHECK(memcmp(src, back, n * l->block_bytes) == 0);
        free(src), free(back), free(dev), free(dev2);
    }
}

/* Q4_1 from real-looking data: (w + offset) * scale against q*d + m. */
static void test_q4_1_dequant(void) {
    const cann_qlayout *l = cann_qlayout_get(CLM_TYPE_Q4_1);
    uint8_t blk[20], dev[22];
    int bad = 0;
    for (int i = 0; i < 20000; i++) {
        float d = (rnd() % 1000 + 1) * 1e-4f, m = ((int)(rnd() % 2001) - 1000) * 1e-3f;
        uint16_t dh = cann_f32_to_fp16(d), mh = cann_f32_to_fp16(m);
        blk[0] = (uint8_t)dh, blk[1] = (uint8_t)(dh >> 8), blk[2] = (uint8_t)mh, blk[3] = (uint8_t)(mh >> 8);
        for (int j = 0; j < 16; j++) blk[4 + j] = (uint8_t)rnd();
        void *parts[4] = {dev, dev + 16, dev + 18, dev + 20};
        cann_qlayout_pack(l, blk, 1, parts);
        float df = cann_fp16_to_f32(dh), mf = cann_fp16_to_f32(mh);
        float scale = cann_fp16_to_f32(rd16(dev + 16)), offset = cann_fp16_to_f32(rd16(dev + 18));
        /* offset rounding: |d| * 2^-11 * |8 + m/d|; plus f32 rounding of both sides */
        float bound = fabsf(df) * 0x1p-11f * fabsf(8.0f + mf / df);
        for (int e = 0; e < 32; e++) {
            int q = e < 16 ? blk[4 + e] & 0xf : blk[4 + e - 16] >> 4;
            float want = q * df + mf, got = (float)(dev_quant(l, dev, 0, e) + offset) * scale;
            bad += fabsf(got - want) > bound + 0x1p-21f * (fabsf(want) + 16 * fabsf(df) + fabsf(mf));
        }
    }
    CHECK(bad == 0);
    /* d = 0 with all quants 0: exactly m. */
    memset(blk, 0, sizeof(blk));
    uint16_t mh = cann_f32_to_fp16(-1.375f);
    blk[2] = (uint8_t)mh, blk[3] = (uint8_t)(mh >> 8);
    void *parts[4] = {dev, dev + 16, dev + 18, dev + 20};
    cann_qlayout_pack(l, blk, 1, parts);
    for (int e = 0; e < 32; e++) {
        float got = (dev_quant(l, dev, 0, e) + cann_fp16_to_f32(rd16(dev + 18))) * cann_fp16_to_f32(rd16(dev + 16));
        CHECK(got == -1.375f);
    }
}

static void test_fp16(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (!nan) bad += cann_f32_to_fp16(cann_fp16_to_f32((uint16_t)h)) != h;
    }
    CHECK(bad == 0);
#ifdef __FLT16_MAX__
    bad = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rnd();
        if (i % 2) u = (u & 0x80000000u) | (0x30000000u + u % 0x18000000u);  /* around fp16's range */
        float f;
        memcpy(&f, &u, 4);
        if (isnan(f)) continue;
        _Float16 h = (_Float16)f;
        uint16_t want;
        memcpy(&want, &h, 2);
        bad += cann_f32_to_fp16(f) != want;
    }
    CHECK(bad == 0);
#endif
    CHECK(cann_f32_to_fp16(65519.0f) == 0x7bff && cann_f32_to_fp16(65520.0f) == 0x7c00);
    CHECK(cann_f32_to_fp16(9.0f) == 0x4880);
}

/* ---- the device buffer path ------------------------------------------------------------------ */
static void test_device(void) {
    clm_reg *reg;
    clm_device *dev;
    if (clm_cann_reg(&reg) != CLM_OK || clm_reg_device(reg, 0, &dev) != CLM_OK) {
        CHECK(!"no CANN device");
        return;
    }
    clm_buffer_type *buft = clm_device_buffer_type(dev);
    for (size_t t = 0; t < 3; t++) {
        const cann_qlayout *l = cann_qlayout_get(types[t]);
        clm_context *ctx;
        CHECK(clm_context_new(8, &ctx) == CLM_OK);
        int64_t ne[3] = {96, 5, 3};  /* 45 blocks; ne0 % 512 != 0: padded */
        clm_tensor *x, *raw, *view;
        CHECK(clm_new_tensor(ctx, types[t], 3, ne, &x) == CLM_OK);
        clm_tensor_set_name(x, "w");
        size_t n_blocks = 45, nbytes = n_blocks * l->block_bytes;
        size_t pad = (512 - 96) / 32 * l->device_block_bytes, alloc = n_blocks * l->device_block_bytes + pad;
        CHECK(clm_buft_alloc_size(buft, x) == alloc);
        clm_buffer *buf;
        CHECK(clm_buft_alloc_buffer(buft, alloc, &buf) == CLM_OK);
        CHECK(clm_buffer_clear(buf, 0x5a) == CLM_OK);
        CHECK(clm_tensor_alloc(buf, x, 0) == CLM_OK);
        uint8_t *src = malloc(nbytes), *back = malloc(nbytes), *dev_bytes = malloc(alloc), *want = malloc(alloc);
        random_blocks(l, src, n_blocks);
        /* Chunked upload at block splits, whole download. */
        for (size_t b0 = 0; b0 < n_blocks;) {
            size_t k = 1 + rnd() % 11;
            if (k > n_blocks - b0) k = n_blocks - b0;
            CHECK(clm_tensor_set(x, src + b0 * l->block_bytes, b0 * l->block_bytes, k * l->block_bytes) == CLM_OK);
            b0 += k;
        }
        CHECK(clm_tensor_get(x, back, 0, nbytes) == CLM_OK);
        CHECK(memcmp(src, back, nbytes) == 0);
        /* The raw device bytes (an I8 alias at the same address): layout plus zeroed padding. */
        int64_t ne_raw = (int64_t)alloc;
        CHECK(clm_new_tensor(ctx, CLM_TYPE_I8, 1, &ne_raw, &raw) == CLM_OK);
        raw->buffer = buf, raw->data = x->data;
        CHECK(clm_tensor_get(raw, dev_bytes, 0, alloc) == CLM_OK);
        void *parts[CANN_QL_MAX_REGIONS];
        memset(want, 0, alloc);
        cann_qlayout_pack(l, src, n_blocks, region_ptrs(l, want, n_blocks, 0, parts));
        CHECK(memcmp(dev_bytes, want, alloc) == 0);
        /* Misaligned ranges are errors and change nothing. */
        CHECK(clm_tensor_set(x, src, 1, l->block_bytes) == CLM_ERR_INVALID_ARG);
        CHECK(strstr(clm_last_error(), "'w'") != NULL);
        CHECK(clm_tensor_get(x, back, 0, l->block_bytes + 1) == CLM_ERR_INVALID_ARG);
        CHECK(clm_tensor_memset(x, 0, 3, l->block_bytes) == CLM_ERR_INVALID_ARG);
        clm_clear_error();
        /* A view of rows 2..4 of plane 1: block index = view_offs / block bytes. */
        size_t row = 3 * l->block_bytes, offs = (5 + 2) * row;
        CHECK(clm_view_4d(ctx, x, 96, 3, 1, 1, row, 3 * row, 3 * row, offs, &view) == CLM_OK);
        CHECK(clm_tensor_view_init(view) == CLM_OK);
        CHECK(clm_tensor_get(view, back, 0, 3 * row) == CLM_OK);
        CHECK(memcmp(back, src + offs, 3 * row) == 0);
        random_blocks(l, back, 9);
        CHECK(clm_tensor_set(view, back + row, row, row) == CLM_OK);  /* the view's second row */
        memcpy(src + offs + row, back + row, row);
        /* memset of the ggml bytes: blocks [2, 4) become 0x11 in ggml form. */
        CHECK(clm_tensor_memset(x, 0x11, 2 * l->block_bytes, 2 * l->block_bytes) == CLM_OK);
        memset(src + 2 * l->block_bytes, 0x11, 2 * l->block_bytes);
        CHECK(clm_tensor_get(x, back, 0, nbytes) == CLM_OK);
        CHECK(memcmp(src, back, nbytes) == 0);
        free(src), free(back), free(dev_bytes), free(want);
        clm_buffer_free(buf);
        clm_context_free(ctx);
    }
}

/* ---- benchmark (CT_BENCH=1) ---------------------------------------------------------------- */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(void) {
    size_t n = 4u << 20;  /* 4M blocks = 128M elements */
    for (size_t t = 0; t < 3; t++) {
        const cann_qlayout *l = cann_qlayout_get(types[t]);
        uint8_t *src = malloc(n * l->block_bytes), *dev = malloc(n * l->device_block_bytes);
        if (src == NULL || dev == NULL) {
            free(src), free(dev);
            continue;
        }
        random_blocks(l, src, n);
        void *parts[CANN_QL_MAX_REGIONS];
        region_ptrs(l, dev, n, 0, parts);
        double best_pack = 1e9, best_unpack = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            cann_qlayout_pack(l, src, n, parts);
            double t1 = now();
            cann_qlayout_unpack(l, (const void *const *)parts, n, src);
            double t2 = now();
            if (t1 - t0 < best_pack) best_pack = t1 - t0;
            if (t2 - t1 < best_unpack) best_unpack = t2 - t1;
        }
        double gb = n * l->block_bytes / 1e9;
        printf("bench %s: pack %.2f GB/s, unpack %.2f GB/s (ggml bytes, one core, %.0f MB)\n", l->name,
               gb / best_pack, gb / best_unpack, gb * 1e3);
        free(src), free(dev);
    }
}

/* The Q4_1 scale/offset encode's vector form (AVX-512, where the CPU has it) against the portable
 * loop: every fp16 d (NaN, inf, subnormal, +-0 included) with a set of m values, and random
 * blocks, region bytes compared; block counts that are not multiples of 16 exercise the tails. */
static void test_q4_1_vector_form(void) {
    const cann_qlayout *l = cann_qlayout_get(CLM_TYPE_Q4_1);
    static const uint16_t ms[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x7bff,
                                  0xfbff, 0x7c00, 0xfc00, 0x7c01, 0x7e00, 0xfe55, 0x4880, 0x3555, 0xc123,
                                  0x0200, 0x2e66, 0xb3ff, 0x5640, 0x1c00, 0x9c01};
    const size_t n = 65536 + 13;
    uint8_t *src = malloc(n * 20), *a = malloc(n * 22), *b = malloc(n * 22);
    CHECK(src && a && b);
    if (!src || !a || !b) return;
    void *pa[4], *pb[4];
    for (size_t k = 0; k <= sizeof(ms) / sizeof(ms[0]); k++) {
        for (size_t i = 0; i < n * 20; i++) src[i] = (uint8_t)rnd();   /* random m, nibbles */
        for (size_t j = 0; j < n; j++) {
            uint16_t d = (uint16_t)(j & 0xffff);
            src[20 * j] = (uint8_t)d, src[20 * j + 1] = (uint8_t)(d >> 8);
            if (k < sizeof(ms) / sizeof(ms[0])) src[20 * j + 2] = (uint8_t)ms[k], src[20 * j + 3] = (uint8_t)(ms[k] >> 8);
        }
        size_t count = n - k;   /* tails of every length mod 16 */
        cann_qlayout_pack(l, src, count, region_ptrs(l, a, count, 0, pa));
        cann_qlayout_pack_portable(l, src, count, region_ptrs(l, b, count, 0, pb));
        CHECK(memcmp(a, b, count * 22) == 0);
    }
    free(src), free(a), free(b);
}

int main(void) {
    test_fp16();
    test_transforms();
    test_q4_1_dequant();
    test_q4_1_vector_form();
    test_device();
    const char *b = getenv("CT_BENCH");
    if (b != NULL && strcmp(b, "1") == 0) bench();
    return CT_RESULT();
}
