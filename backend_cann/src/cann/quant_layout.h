/* quant_layout.h - ggml's Q4_0 / Q4_1 / Q8_0 blocks <-> the CANN device layout, where a tensor of
 * n_blocks blocks is stored as consecutive regions (all quants, then all scales, ...), each
 * region holding region_bytes[r] bytes per block in block order. Pure host transforms, no ACL.
 * The byte-level spec is docs/quant_layouts.md.
 *
 *   Q8_0: [int8 quants 32 B/blk][fp16 d 2 B/blk]                         = 34 B/blk (as ggml)
 *   Q4_0: [int4 (q-8) 16 B/blk][fp16 d 2 B/blk]                          = 18 B/blk (as ggml)
 *   Q4_1: [int4 (q-8) 16 B/blk][fp16 scale][fp16 offset][fp16 m or d]    = 22 B/blk (ggml: 20)
 */
#ifndef CANN_QUANT_LAYOUT_H
#define CANN_QUANT_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CANN_QL_MAX_REGIONS 4
#define CANN_QL_BLOCK 32            /* elements per block for every repacked type */
#define CANN_QL_ROW_PADDING 512     /* MATRIX_ROW_PADDING: ne0 is padded to a multiple of this */

typedef struct cann_qlayout {
    int32_t type;                               /* clm_type */
    const char *name;
    int n_regions;
    size_t block_bytes;                         /* ggml bytes per block (34, 18, 20) */
    size_t region_bytes[CANN_QL_MAX_REGIONS];   /* device bytes per block in each region */
    size_t device_block_bytes;                  /* sum of region_bytes */
} cann_qlayout;

/* The device layout of `type`, or NULL if the type is stored as ggml stores it. */
const cann_qlayout *cann_qlayout_get(int32_t type);

/* Byte offset of region r in a tensor of n_blocks blocks. */
size_t cann_qlayout_region_offset(const cann_qlayout *layout, size_t n_blocks, int r);

/* Device bytes of a whole tensor of n_blocks blocks (without padding). */
static inline size_t cann_qlayout_device_bytes(const cann_qlayout *layout, size_t n_blocks) {
    return n_blocks * layout->device_block_bytes;
}

/* n ggml blocks at src -> region parts: dst[r] receives n * region_bytes[r] bytes. */
void cann_qlayout_pack(const cann_qlayout *layout, const void *src, size_t n, void *const dst[]);

/* cann_qlayout_pack without its vector forms (AVX-512 Q4_1 scales): the tests compare the two. */
void cann_qlayout_pack_portable(const cann_qlayout *layout, const void *src, size_t n, void *const dst[]);

/* The inverse: region parts of n blocks -> n ggml blocks at dst, bit for bit. */
void cann_qlayout_unpack(const cann_qlayout *layout, const void *const src[], size_t n, void *dst);

/* fp16 bits <-> f32, IEEE binary16, round to nearest even (exposed for the tests). */
float cann_fp16_to_f32(uint16_t h);
uint16_t cann_f32_to_fp16(float f);

#endif /* CANN_QUANT_LAYOUT_H */
