/* gemm_kernel_bench.c - acl_host's decode product kernels (backend_cann/acl_host/src/gemm.c) on
 * one thread, against this CPU's F32 multiply-add peak, both in time-stamp-counter cycles.
 * scripts/bench_gemm_kernel.py builds it with gemm.c and f16.c and runs it; see there.
 *
 *     gemm_kernel_bench K N ROWS STREAM_MB [BATCH_MS]
 *
 * Prints the ISA, the F32 FMA peak (a loop of independent 16-lane, or 8-lane below AVX-512,
 * fused multiply-adds) and the TSC rate, then a line per weight type: its kernel with the weights
 * in cache ("hot": one copy, reused) and streamed (copies cycled through STREAM_MB megabytes), as
 * multiply-adds per TSC cycle. The TSC ticks at a fixed rate while the core clock moves with
 * turbo and the ISA licence, so only the ratio to the peak measured here, in the same run, says
 * how close a kernel is. BATCH_MS (default 20): the length of each timed batch. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ah_convert.h"
#include "ah_gemm.h"

#if defined(__x86_64__)
#include <time.h>
#include <x86intrin.h>
static uint64_t ticks(void) { return __rdtsc(); }

/* TSC ticks per nanosecond, over ~50 ms of the monotonic clock. */
static double tsc_ghz(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    uint64_t t0 = ticks();
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec) < 5e7);
    return (double)(ticks() - t0) / ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec));
}

/* Twelve independent accumulators R0..R11 (R: zmm or ymm), so the loop is bound by the FMA ports,
 * not by their latency; 12 FMAs per iteration. */
#define ZERO3(R, a, b, c) "vxorps %%" R #a ",%%" R #a ",%%" R #a "\n vxorps %%" R #b ",%%" R #b ",%%" R #b "\n" \
                          "vxorps %%" R #c ",%%" R #c ",%%" R #c "\n"
#define FMA3(R, a, b, c) "vfmadd231ps %%" R "14,%%" R "15,%%" R #a "\n vfmadd231ps %%" R "14,%%" R "15,%%" R #b "\n" \
                         "vfmadd231ps %%" R "14,%%" R "15,%%" R #c "\n"
#define FMA_LOOP(R)                                                                                                  \
    ZERO3(R, 0, 1, 2) ZERO3(R, 3, 4, 5) ZERO3(R, 6, 7, 8) ZERO3(R, 9, 10, 11)                                        \
    "1:\n" FMA3(R, 0, 1, 2) FMA3(R, 3, 4, 5) FMA3(R, 6, 7, 8) FMA3(R, 9, 10, 11) "dec %0\n jnz 1b\n"
#define FMA_CLOBBERS                                                                                       \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "cc"

__attribute__((target("avx512f"))) static double fma_peak_avx512(long iters) {
    uint64_t t0 = ticks();
    __asm__ volatile(FMA_LOOP("zmm") : "+r"(iters) : : FMA_CLOBBERS);
    return (double)(ticks() - t0);
}

__attribute__((target("avx2,fma"))) static double fma_peak_avx2(long iters) {
    uint64_t t0 = ticks();
    __asm__ volatile(FMA_LOOP("ymm") : "+r"(iters) : : FMA_CLOBBERS);
    return (double)(ticks() - t0);
}
#endif

/* aligned_alloc wants a size that is a multiple of the alignment */
static void *alloc64(size_t bytes) { return aligned_alloc(64, (bytes + 63) / 64 * 64); }

typedef enum { W_Q4_1, W_Q4_0, W_Q8_0, W_F16 } weight_kind;
static const char *const kind_names[] = {"Q4_1", "Q4_0", "Q8_0", "F16"};

/* One product of `rows` rows, each call on the next of n_copies copies of the weights (in turn,
 * across batches: all of them are read before any is read again); the parameters (scales,
 * offsets) are shared by the copies (a tile's worth, as wq_tiles converts them). */
typedef struct bench_case {
    weight_kind kind;
    int64_t k, n, rows;
    float *a, *c, *scales, *offsets;
    char *weights;
    size_t copy_bytes;
    int n_copies, next;
} bench_case;

static void run_once(bench_case *b) {
    const char *w = b->weights + (size_t)b->next * b->copy_bytes;
    b->next = (b->next + 1) % b->n_copies;
    if (b->kind == W_F16) {
        ah_gemm_tile t = {.m = b->rows, .n = b->n, .kp = b->k, .a = b->a, .lda = b->k, .b16 = (const uint16_t *)w,
                          .ldb = b->k, .c = b->c, .ldc = b->n};
        ah_gemm_run_f16(&t);
        return;
    }
    bool int4 = b->kind != W_Q8_0;
    ah_gemm_quant q = {.m = b->rows, .n = b->n, .kp = b->k, .group = 32, .a = b->a, .lda = b->k,
                       .w = (const int8_t *)w, .ldw = int4 ? b->k / 2 : b->k, .int4 = int4, .scales = b->scales,
                       .offsets = b->kind == W_Q4_1 ? b->offsets : NULL, .lds = b->k / 32, .c = b->c, .ldc = b->n};
    ah_gemm_run_quant(&q);
}

/* Multiply-adds per TSC cycle: the median of 5 batches of at least batch_ticks each. */
static double measure(bench_case *b, uint64_t batch_ticks) {
    double macs = (double)b->rows * (double)b->n * (double)b->k, best[5];
    int calls = 1;
    for (;;) { /* calibrate */
        uint64_t t0 = ticks();
        for (int i = 0; i < calls; i++)
            run_once(b);
        if (ticks() - t0 > batch_ticks || calls > (1 << 20))
            break;
        calls *= 2;
    }
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = ticks();
        for (int i = 0; i < calls; i++)
            run_once(b);
        best[r] = macs * calls / (double)(ticks() - t0);
    }
    for (int i = 0; i < 5; i++) /* sort, take the median */
        for (int j = i + 1; j < 5; j++)
            if (best[j] < best[i]) {
                double x = best[i];
                best[i] = best[j];
                best[j] = x;
            }
    return best[2];
}

int main(int argc, char **argv) {
#if !defined(__x86_64__)
    (void)argc, (void)argv;
    fprintf(stderr, "gemm_kernel_bench: x86-64 only (it counts TSC cycles)\n");
    return 2;
#else
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: gemm_kernel_bench K N ROWS STREAM_MB [BATCH_MS]\n");
        return 2;
    }
    int64_t k = atoll(argv[1]), n = atoll(argv[2]), rows = atoll(argv[3]);
    double stream_mb = atof(argv[4]), batch_ms = argc == 6 ? atof(argv[5]) : 20.0;
    if (k <= 0 || k % 32 != 0 || n <= 0 || rows <= 0 || rows > 16 || stream_mb <= 0 || batch_ms <= 0) {
        fprintf(stderr, "gemm_kernel_bench: K a positive multiple of 32, N > 0, ROWS in 1..16, STREAM_MB > 0, "
                        "BATCH_MS > 0\n");
        return 2;
    }
    ah_isa_level isa = ah_isa();
    const char *isa_name = isa == AH_ISA_AVX512 ? "avx512" : isa == AH_ISA_AVX2 ? "avx2" : "scalar";
    if (isa == AH_ISA_SCALAR) {
        fprintf(stderr, "gemm_kernel_bench: this CPU has no AVX2 + FMA: nothing to compare\n");
        return 2;
    }
    double ghz = tsc_ghz();
    uint64_t batch_ticks = (uint64_t)(batch_ms * 1e6 * ghz);
    long iters = (long)(20e6 * ghz / 4) + 1; /* ~3 FMAs a tick: ~20 ms, so the clock has ramped up */
    double (*fma_peak)(long) = isa == AH_ISA_AVX512 ? fma_peak_avx512 : fma_peak_avx2;
    (void)fma_peak(iters); /* a first run while the clock ramps up */
    double peak_ticks = fma_peak(iters);
    int lanes = isa == AH_ISA_AVX512 ? 16 : 8;
    double peak = 12.0 * (double)iters * lanes / peak_ticks;
    printf("isa %s\npeak %.2f\ntsc_ghz %.3f\n", isa_name, peak, ghz);

    float *a = alloc64(sizeof(float) * (size_t)(rows * k)), *c = alloc64(sizeof(float) * (size_t)(rows * n));
    float *scales = alloc64(sizeof(float) * (size_t)(n * k / 32));
    float *offsets = alloc64(sizeof(float) * (size_t)(n * k / 32));
    if (!a || !c || !scales || !offsets)
        return 3;
    for (int64_t i = 0; i < rows * k; i++) /* F16-exact activations, as the ops pack them */
        a[i] = (float)((i * 7919) % 2001 - 1000) / 1024.0f;
    for (int64_t i = 0; i < n * k / 32; i++)
        scales[i] = 0.0078125f, offsets[i] = -8.0f;
    for (weight_kind kind = W_Q4_1; kind <= W_F16; kind++) {
        if (kind == W_F16 && isa != AH_ISA_AVX512)
            continue; /* below AVX-512 F16 weights take the panel path (ah_gemm_run_f16 declines) */
        size_t weights_per_copy = (size_t)(n * k);
        size_t copy_bytes = kind == W_F16 ? weights_per_copy * 2 : kind == W_Q8_0 ? weights_per_copy : weights_per_copy / 2;
        copy_bytes = (copy_bytes + 63) / 64 * 64;
        int n_copies = (int)(stream_mb * 1e6 / (double)copy_bytes) + 1;
        char *weights = alloc64(copy_bytes * (size_t)n_copies);
        if (!weights)
            return 3;
        for (size_t i = 0; i < copy_bytes * (size_t)n_copies; i++) /* F16 weights: finite halves */
            weights[i] = (char)(kind == W_F16 && i % 2 ? 0x3c : (int)(i * 31 % 251));
        bench_case b = {kind, k, n, rows, a, c, scales, offsets, weights, copy_bytes, 1, 0};
        double hot = measure(&b, batch_ticks);
        b.n_copies = n_copies;
        double streamed = measure(&b, batch_ticks);
        printf("%s hot %.2f streamed %.2f\n", kind_names[kind], hot, streamed);
        free(weights);
    }
    free(a), free(c), free(scales), free(offsets);
    return 0;
#endif
}
