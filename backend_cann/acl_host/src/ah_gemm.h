/* ah_gemm.h - the dot-product engine of the matmul ops (ops_matmul.c): F32 panels, quantized
 * weights dequantized once per (column, block) for all rows, fused multiply-add in 16 fixed
 * lanes, a fixed reduction tree.
 *
 * Every output element c[i][j] is computed by exactly one sequence, whatever the ISA path, the
 * number of rows computed together or the thread count:
 *     b[j][k] = (q[j][k] + offset[j][g]) * scale[j][g]   quantized b, g = k / group: an F32 add
 *                                           (only with offsets) and an F32 multiply, each rounded
 *     tot = 0 (16 lanes)
 *     for each 16-element step s of k: tot = fma(a[i][s], b[j][s], tot)  (per lane)
 *     c = ((tot[0..7] + tot[8..15]) pairwise halved down to one lane)
 * The dequantized b is the same F32 value wherever it is made (a lookup table of the 16 INT4
 * values per (column, group), a block decoded in registers, or an unpacked F32 panel), and scalar
 * code uses fmaf, which rounds like the hardware FMA, so all paths agree bit for bit. Kernels may
 * keep a lane vector in memory between k steps and reduce many accumulators at once (the AVX-512
 * panel kernel: 16 at a time, with the same pairings), which changes no bit.
 * K is padded with zeros to a multiple of 32 (kp) in both panels.
 */
#ifndef AH_GEMM_H
#define AH_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#define AH_GEMM_KALIGN 32
#ifndef AH_GEMM_PF_BYTES
#define AH_GEMM_PF_BYTES 16384 /* how far ahead the decode kernels prefetch the columns they stream */
#endif
/* The decode kernels' prefetch of the columns they stream, into L2 (prefetcht1): into L1 (t0) the
 * one-row F16 kernel streamed 22 GB/s on 2 threads of a Sapphire Rapids guest, into L2 27 GB/s, the
 * rate of a plain read there (and nta 11). A hint only, never faults. */
#define AH_GEMM_PREFETCH(p) __builtin_prefetch((p), 0, 2)

/* A tile product: m rows of a (row i at a + i*lda) times n columns of b (column j at b + j*ldb),
 * c[i*ldc + j]. ah_gemm_run_f16 reads the columns from b16 instead (F16, the same ldb). */
typedef struct ah_gemm_tile {
    int64_t m, n, kp;
    const float *a;
    int64_t lda;
    const float *b;
    const uint16_t *b16;
    int64_t ldb;
    float *c;
    int64_t ldc;
} ah_gemm_tile;

void ah_gemm_run_tile(const ah_gemm_tile *t);

/* The same product with the columns read straight from quantized rows (decode-sized m; the
 * columns are decoded once per few rows, so the weights are read from memory once for all m):
 * column j's kp values are the bytes at w + j*ldw: INT8 (kp bytes, natural order) or INT4 (kp/2
 * bytes; within each 32-block the 16 low nibbles are elements 0,2,..,30 and come first, then the
 * 16 high nibbles; a must be packed in that order). scales (or NULL: 1) and offsets (or NULL: 0)
 * of (column j, group g) at scales[j*lds + g], offsets[j*lds + g] dequantize the values. */
typedef struct ah_gemm_quant {
    int64_t m, n, kp, group;
    const float *a;
    int64_t lda;
    const int8_t *w;
    int64_t ldw;
    bool int4;
    const float *scales, *offsets;
    int64_t lds;
    float *c;
    int64_t ldc;
} ah_gemm_quant;

void ah_gemm_run_quant(const ah_gemm_quant *q);

/* Puts each 32-element block of a row (kp a multiple of 32) in the order the INT4 kernels read
 * it: elements 0, 2, .., 30, then 1, 3, .., 31. */
void ah_gemm_int4_order(float *row, int64_t kp);

/* Dequantizes columns [0, n) of a quantized panel into F32 ((q + offset) * scale, the values
 * ah_gemm_run_quant multiplies by), in the order it reads them: column j to dst + j*ldd (kp floats). */
void ah_gemm_unpack_quant(const ah_gemm_quant *q, float *dst, int64_t ldd);

/* The tile product with F16 columns read where they lie (decode-sized m: no F32 panel is
 * written and read back): column j's kp values at t->b16 + j*ldb, widened in registers (t->b is
 * not read). Widening is exact, so c holds the bits ah_gemm_run_tile gives on the widened panel.
 * Returns false, having done nothing, where the CPU has no such kernel (below AVX2): use the
 * panel path there. */
bool ah_gemm_run_f16(const ah_gemm_tile *t);

#endif /* AH_GEMM_H */
