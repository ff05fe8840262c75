/* clm_ascendc.h - what the backend and the AscendC kernels of ascendc_ops/ share: the type codes
 * and tile limits the kernels and the host tiling agree on, the launch entry points, and the
 * host tiling itself.
 *
 * The entry points are the ones the toolkit's ascendc_library() generates for each kernel
 * (aclrtlaunch_<kernel>: blockDim, stream, then the kernel's parameters with GM_ADDR as void *;
 * 0 on success, else an ACL error code). The toolkit build links the generated library; the host
 * build links libacl_host, whose copy of the same kernels runs on the host (ascendc_ops/host/).
 * The backend calls them the same way in both builds. Plain C: included by the kernels (C++,
 * with CLM_ASC_KERNEL_SOURCE defined: constants only) and by the backend (C11).
 * docs/ascendc.md describes the kernels and their tiling.
 */
#ifndef CLM_ASCENDC_H
#define CLM_ASCENDC_H

#include <stdint.h>

/* Type codes of the kernels' type parameters (ggml's numbering, as clm_type). */
#define CLM_ASC_F32 0
#define CLM_ASC_F16 1
#define CLM_ASC_Q4_0 2
#define CLM_ASC_Q4_1 3
#define CLM_ASC_Q8_0 8

#define CLM_ASC_GROUP 32   /* elements per quantization group (Q8_0, Q4_0, Q4_1) */

/* Blocks a launch uses at most: the AI vector cores of the smallest 910B (910B4: 20 AI cores of
 * 2 vector cores each). A launch never uses more blocks than it has units of work, and a block
 * handles any number of units, so blockDim does not depend on the size of the tensor. */
#define CLM_ASC_MAX_BLOCKS 40

/* Tile limits, chosen so a kernel's double-buffered queues fit the 910B's 192 KiB unified buffer
 * (docs/ascendc.md has each kernel's budget). A tile of elements is a multiple of 16 (32 bytes of
 * F16); a tile of groups a multiple of 8 (one Brcb repeat) and at most 248 (vector repeats <= 255). */
#define CLM_ASC_DUP_TILE_MAX 8192          /* clm_dup: elements per tile */
#define CLM_ASC_QUANT_TILE_GROUPS_MAX 128  /* clm_quantize: groups of 32 per tile */
#define CLM_ASC_ROWS_TILE_MAX 8192         /* clm_get_rows, F32 / F16 tables: elements of a row per tile */
#define CLM_ASC_ROWS_TILE_GROUPS_MAX 128   /* clm_get_rows, quantized tables: groups of a row per tile */

#ifndef CLM_ASC_KERNEL_SOURCE
#include "acl/acl.h"
#ifdef __cplusplus
extern "C" {
#endif

/* clm_dup: dst[i] = src[i] for i < n, both contiguous, converted from src_type to dst_type
 * (F32 <-> F16; a same-type copy moves the bits, so a BF16 copy is an F16 one), in tiles of `tile`
 * elements (a multiple of 16, at most CLM_ASC_DUP_TILE_MAX). */
uint32_t aclrtlaunch_clm_dup(uint32_t blockDim, aclrtStream stream, void *src, void *dst, uint32_t src_type,
                             uint32_t dst_type, uint64_t n, uint32_t tile);

/* clm_quantize: n_groups groups of 32 contiguous F32 / F16 values (src_type) quantized as ggml's
 * reference quantizer does (quantize_row_q8_0_ref / quantize_row_q4_0_ref) into the device layout
 * of dst_type (Q8_0 / Q4_0, docs/quant_layouts.md): the quants of group g at dst_q + 32 g (Q8_0) or
 * dst_q + 16 g (Q4_0, int4 q - 8 in natural order), its fp16 scale at dst_d + 2 g; in tiles of
 * `tile_groups` groups (a multiple of 8, at most CLM_ASC_QUANT_TILE_GROUPS_MAX). */
uint32_t aclrtlaunch_clm_quantize(uint32_t blockDim, aclrtStream stream, void *src, void *dst_q, void *dst_d,
                                  uint32_t src_type, uint32_t dst_type, uint64_t n_groups, uint32_t tile_groups);

/* clm_get_rows: for each of the n x ne11 x ne12 ids (r = i10 + n (i11 + ne11 i12), read at
 * ids[i10 t0 + i11 t1 + i12 t2], I32, strides in elements), row id of the table's slice (i11, i12),
 * whose element k is at table element e = id s1 + i11 s2 + i12 s3 + k (strides in elements,
 * 0 <= id < ne01; the table spans table_elems elements), written as ne00 values of dst_type
 * (F32 / F16) to dst + r ne00.
 * Tables: F32 / F16 rows at src_q (src_d, src_m NULL); tile = elements per tile (a multiple of 16,
 * at most CLM_ASC_ROWS_TILE_MAX). Q8_0 / Q4_0 / Q4_1 in the device layout (ne00 a multiple of 32,
 * e a multiple of 32 at every row start): src_q the quants of the table's first group, src_d its
 * fp16 scales and, for Q4_1, src_m its fp16 offsets (element e's group is e / 32); tile = groups
 * per tile (a multiple of 8, at most CLM_ASC_ROWS_TILE_GROUPS_MAX). */
uint32_t aclrtlaunch_clm_get_rows(uint32_t blockDim, aclrtStream stream, void *src_q, void *src_d, void *src_m,
                                  void *ids, void *dst, uint32_t src_type, uint32_t dst_type, int64_t ne00,
                                  int64_t ne01, int64_t s1, int64_t s2, int64_t s3, int64_t table_elems, int64_t n,
                                  int64_t ne11, int64_t ne12, int64_t t0, int64_t t1, int64_t t2, uint32_t tile);

#ifdef __cplusplus
}
#endif

/* ---- host tiling: blockDim and the tile of each launch --------------------------------------- */
typedef struct clm_asc_tiling {
    uint32_t block_dim;
    uint32_t tile;
} clm_asc_tiling;

static inline uint64_t clm_asc_ceil_div(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

/* Units of work over at most CLM_ASC_MAX_BLOCKS blocks, never more blocks than units. */
static inline uint32_t clm_asc_blocks(uint64_t units) {
    if (units == 0) return 1;
    return units < CLM_ASC_MAX_BLOCKS ? (uint32_t)units : CLM_ASC_MAX_BLOCKS;
}

/* A tile of `want` items rounded up to `multiple`, capped at `max` (a multiple of `multiple`). */
static inline uint32_t clm_asc_tile(uint64_t want, uint32_t multiple, uint32_t max) {
    uint64_t t = clm_asc_ceil_div(want ? want : 1, multiple) * multiple;
    return t < max ? (uint32_t)t : max;
}

/* clm_dup over n elements: tiles of up to CLM_ASC_DUP_TILE_MAX elements, one block per tile up to
 * the limit. */
static inline clm_asc_tiling clm_asc_dup_tiling(uint64_t n) {
    clm_asc_tiling t;
    t.tile = clm_asc_tile(n, 16, CLM_ASC_DUP_TILE_MAX);
    t.block_dim = clm_asc_blocks(clm_asc_ceil_div(n, t.tile));
    return t;
}

/* clm_quantize over n_groups groups. */
static inline clm_asc_tiling clm_asc_quantize_tiling(uint64_t n_groups) {
    clm_asc_tiling t;
    t.tile = clm_asc_tile(n_groups, 8, CLM_ASC_QUANT_TILE_GROUPS_MAX);
    t.block_dim = clm_asc_blocks(clm_asc_ceil_div(n_groups, t.tile));
    return t;
}

/* clm_get_rows of n_rows rows of ne00 elements from a table of src_type: a row is split into
 * tiles (elements, or groups for quantized tables); the units are (row, tile) pairs. Float rows
 * of whole 32-byte blocks, more rows than blocks: a tile of k >= 2 whole rows (the kernel packs
 * k = tile / ne00 rows per unit when the tile holds two rows or more). */
static inline clm_asc_tiling clm_asc_get_rows_tiling(uint32_t src_type, int64_t ne00, int64_t n_rows) {
    clm_asc_tiling t;
    uint64_t per_row;
    if (src_type == CLM_ASC_F32 || src_type == CLM_ASC_F16) {
        uint64_t pack = CLM_ASC_ROWS_TILE_MAX / (ne00 > 0 ? (uint64_t)ne00 : 1);
        if (ne00 % 16 == 0 && pack >= 2 && n_rows > CLM_ASC_MAX_BLOCKS) {
            /* short rows of whole blocks: k rows per unit, enough units for every block */
            uint64_t k = clm_asc_ceil_div((uint64_t)n_rows, CLM_ASC_MAX_BLOCKS);
            if (k > pack) k = pack;
            if (k >= 2) {
                t.tile = (uint32_t)(k * (uint64_t)ne00);
                t.block_dim = clm_asc_blocks(clm_asc_ceil_div((uint64_t)n_rows, k));
                return t;
            }
        }
        t.tile = clm_asc_tile((uint64_t)ne00, 16, CLM_ASC_ROWS_TILE_MAX);
        per_row = clm_asc_ceil_div((uint64_t)ne00, t.tile);
    } else {
        uint64_t groups = (uint64_t)ne00 / CLM_ASC_GROUP;
        t.tile = clm_asc_tile(groups, 8, CLM_ASC_ROWS_TILE_GROUPS_MAX);
        per_row = clm_asc_ceil_div(groups, t.tile);
    }
    t.block_dim = clm_asc_blocks((uint64_t)n_rows * per_row);
    return t;
}

#endif /* CLM_ASC_KERNEL_SOURCE */

#endif /* CLM_ASCENDC_H */
