/* launch.cpp - the host build's aclrtlaunch_<kernel> entry points, the functions the toolkit's
 * ascendc_library() generates for each kernel: the same names and parameters (clm_ascendc.h), here
 * queueing the kernel's blocks on an acl_host stream. Exported from libacl_host. */
#include "clm_ascendc.h"
#include "kernel_operator.h"
#include "launch.h"

#define CLM_ASC_EXPORT __attribute__((visibility("default")))

extern "C" {
/* The kernels (ascendc_ops/kernels/). */
void clm_dup(GM_ADDR src, GM_ADDR dst, uint32_t src_type, uint32_t dst_type, uint64_t n, uint32_t tile);
void clm_quantize(GM_ADDR src, GM_ADDR dst_q, GM_ADDR dst_d, uint32_t src_type, uint32_t dst_type, uint64_t n_groups,
                  uint32_t tile_groups);
void clm_get_rows(GM_ADDR src_q, GM_ADDR src_d, GM_ADDR src_m, GM_ADDR ids, GM_ADDR dst, uint32_t src_type,
                  uint32_t dst_type, int64_t ne00, int64_t ne01, int64_t s1, int64_t s2, int64_t s3,
                  int64_t table_elems, int64_t n, int64_t ne11, int64_t ne12, int64_t t0, int64_t t1, int64_t t2,
                  uint32_t tile);

CLM_ASC_EXPORT uint32_t aclrtlaunch_clm_dup(uint32_t blockDim, aclrtStream stream, void *src, void *dst,
                                            uint32_t src_type, uint32_t dst_type, uint64_t n, uint32_t tile) {
    const ascendc_host::GmArg args[] = {{"src", src}, {"dst", dst}};
    return ascendc_host::Launch("aclrtlaunch_clm_dup", blockDim, stream, args, 2, [=]() {
        clm_dup((GM_ADDR)src, (GM_ADDR)dst, src_type, dst_type, n, tile);
    });
}

CLM_ASC_EXPORT uint32_t aclrtlaunch_clm_quantize(uint32_t blockDim, aclrtStream stream, void *src, void *dst_q,
                                                 void *dst_d, uint32_t src_type, uint32_t dst_type,
                                                 uint64_t n_groups, uint32_t tile_groups) {
    const ascendc_host::GmArg args[] = {{"src", src}, {"dst_q", dst_q}, {"dst_d", dst_d}};
    return ascendc_host::Launch("aclrtlaunch_clm_quantize", blockDim, stream, args, 3, [=]() {
        clm_quantize((GM_ADDR)src, (GM_ADDR)dst_q, (GM_ADDR)dst_d, src_type, dst_type, n_groups, tile_groups);
    });
}

CLM_ASC_EXPORT uint32_t aclrtlaunch_clm_get_rows(uint32_t blockDim, aclrtStream stream, void *src_q, void *src_d,
                                                 void *src_m, void *ids, void *dst, uint32_t src_type,
                                                 uint32_t dst_type, int64_t ne00, int64_t ne01, int64_t s1,
                                                 int64_t s2, int64_t s3, int64_t table_elems, int64_t n,
                                                 int64_t ne11, int64_t ne12, int64_t t0, int64_t t1, int64_t t2,
                                                 uint32_t tile) {
    const ascendc_host::GmArg args[] = {{"src_q", src_q},         {"src_d", src_d, true}, {"src_m", src_m, true},
                                        {"ids", ids},             {"dst", dst}};
    return ascendc_host::Launch("aclrtlaunch_clm_get_rows", blockDim, stream, args, 5, [=]() {
        clm_get_rows((GM_ADDR)src_q, (GM_ADDR)src_d, (GM_ADDR)src_m, (GM_ADDR)ids, (GM_ADDR)dst, src_type, dst_type,
                     ne00, ne01, s1, s2, s3, table_elems, n, ne11, ne12, t0, t1, t2, tile);
    });
}
}
