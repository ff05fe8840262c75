/* aclnn_util.h - helpers shared by the C tests of acl_host's aclnn ops: device buffers and
 * aclTensor descriptors (strides NULL = contiguous; a 1-D storage covering the view, as
 * llama.cpp's CANN backend passes it). Include after acl/acl.h, aclnn_api.h and ctest_util.h. */
#ifndef ACLNN_UTIL_H
#define ACLNN_UTIL_H

#include <string.h>

/* Device memory of `bytes` (at least 1) bytes. */
static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CHECK(aclrtMalloc(&p, bytes ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    return p;
}

/* Device memory holding a copy of host[0, bytes) (left uninitialised when host is NULL). */
static inline void *dev_from(const void *host, size_t bytes) {
    void *p = dev_alloc(bytes);
    if (host) CHECK(aclrtMemcpy(p, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    return p;
}

static inline void to_host(void *host, const void *dev, size_t bytes) {
    CHECK(aclrtMemcpy(host, bytes, dev, bytes, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
}

/* An aclTensor view: dims row-major, strides and offset in elements. */
static inline aclTensor *acl_view(const int64_t *dims, int nd, aclDataType dt, const int64_t *strides,
                                  int64_t offset, void *data) {
    int64_t contiguous[16], extent = offset + 1;
    if (!strides) {
        int64_t step = 1;
        for (int i = nd - 1; i >= 0; i--) {
            contiguous[i] = step;
            step *= dims[i];
        }
        strides = contiguous;
    }
    for (int i = 0; i < nd; i++) extent += (dims[i] - 1) * strides[i];
    return aclCreateTensor(dims, (uint64_t)nd, dt, strides, offset, ACL_FORMAT_ND, &extent, 1, data);
}

static inline uint16_t f16(float f) { return aclFloatToFloat16(f); }
static inline float from_f16(uint16_t h) { return aclFloat16ToFloat(h); }

#endif /* ACLNN_UTIL_H */
