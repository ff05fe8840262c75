/* pool_vmm.c - the VMM pool (GGML_CANN_MEM_POOL=vmm, the default when the device reports an
 * allocation granularity): one virtual address range, grown by mapping physical chunks at its
 * end, handed out by a bump pointer with LIFO frees.
 *
 * - The range is reserved at the first growth: min(free device memory measured when the pool is
 *   created, VMM_MAX_RANGE) rounded down to the granularity (aclrtReserveMemAddress, flags 1 as
 *   real users pass).
 * - Growth: when a request exceeds the mapped bytes left above the bump pointer, a physical chunk
 *   of (request - left) rounded up to the granularity is allocated (aclrtMallocPhysical, pinned
 *   HBM huge pages) and mapped at the current end (aclrtMapMem). The pool never shrinks; chunks
 *   are unmapped, freed and the range released at destruction.
 * - Allocation pads to 128 B and bumps; free must release the most recent live block (LIFO),
 *   an out-of-order free is an error status and changes nothing.
 * - Deterministic: the same alloc/free sequence from the same bump position gets the same
 *   addresses, and mapped memory stays put, which graph capture relies on.
 * - During graph capture a request that would need a new mapping is an error (no device
 *   allocation while capturing); graph_capture.c warms the pool with an eager run first.
 */
#include <stdlib.h>
#include <string.h>

#include "cann/cann_pool.h"

#define VMM_MAX_RANGE ((size_t)1 << 35)   /* 32 GiB, as upstream's first VMM pool */

typedef struct vmm_chunk {
    aclrtDrvMemHandle handle;
    void *addr;
    size_t size;
} vmm_chunk;

typedef struct vmm_pool {
    cann_pool base;
    aclrtPhysicalMemProp prop;
    size_t granularity;
    size_t max_size;      /* range to reserve */
    char *base_addr;      /* NULL until the first growth */
    size_t mapped, used, peak;
    vmm_chunk *chunks;
    size_t n_chunks, cap_chunks;
} vmm_pool;

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

static clm_status vmm_fail(aclError err, const char *call, size_t size) {
    const char *msg = aclGetRecentErrMsg();
    clm_status st = err == ACL_ERROR_RT_MEMORY_ALLOCATION ? CLM_ERR_OUT_OF_MEMORY : CLM_ERR_DEVICE;
    return clm_error(st, "VMM pool: %s (%zu bytes) failed with error %d: %s", call, size, (int)err, msg ? msg : "");
}

static clm_status vmm_grow(vmm_pool *p, size_t need) {
    if (p->base.capturing) {
        return clm_error(CLM_ERR_STATE, "VMM pool: %zu more bytes must be mapped during graph capture", need);
    }
    if (p->base_addr == NULL) {
        void *va = NULL;
        aclError err = aclrtReserveMemAddress(&va, p->max_size, 0, NULL, 1);
        if (err != ACL_SUCCESS) return vmm_fail(err, "aclrtReserveMemAddress", p->max_size);
        p->base_addr = va;
    }
    size_t chunk = round_up(need, p->granularity);
    if (chunk > p->max_size - p->mapped) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "VMM pool: cannot grow by %zu bytes: %zu of the %zu-byte range are "
                         "mapped", chunk, p->mapped, p->max_size);
    }
    if (p->n_chunks == p->cap_chunks) {
        size_t cap = p->cap_chunks ? 2 * p->cap_chunks : 16;
        vmm_chunk *chunks = realloc(p->chunks, cap * sizeof(*chunks));
        if (chunks == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "VMM pool: out of host memory");
        p->chunks = chunks;
        p->cap_chunks = cap;
    }
    aclrtDrvMemHandle handle = NULL;
    aclError err = aclrtMallocPhysical(&handle, chunk, &p->prop, 0);
    if (err != ACL_SUCCESS) return vmm_fail(err, "aclrtMallocPhysical", chunk);
    void *addr = p->base_addr + p->mapped;
    err = aclrtMapMem(addr, chunk, 0, handle, 0);
    if (err != ACL_SUCCESS) {
        clm_status st = vmm_fail(err, "aclrtMapMem", chunk);
        aclrtFreePhysical(handle);
        return st;
    }
    p->chunks[p->n_chunks++] = (vmm_chunk){handle, addr, chunk};
    p->mapped += chunk;
    return CLM_OK;
}

static clm_status vmm_alloc(cann_pool *pool, size_t size, void **ptr, size_t *actual_size) {
    vmm_pool *p = (vmm_pool *)pool;
    size = cann_pool_pad(size);
    if (size > p->max_size - p->used) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "VMM pool: a %zu-byte request exceeds the %zu-byte range (%zu in use)",
                         size, p->max_size, p->used);
    }
    if (size > p->mapped - p->used) {
        clm_status st = vmm_grow(p, size - (p->mapped - p->used));
        if (st != CLM_OK) return st;
    }
    *ptr = p->base_addr + p->used;
    *actual_size = size;
    p->used += size;
    if (p->used > p->peak) p->peak = p->used;
    return CLM_OK;
}

static clm_status vmm_free(cann_pool *pool, void *ptr, size_t size) {
    vmm_pool *p = (vmm_pool *)pool;
    size = cann_pool_pad(size);
    char *c = ptr;
    if (p->base_addr == NULL || c < p->base_addr || c >= p->base_addr + p->used) {
        return clm_error(CLM_ERR_INVALID_ARG, "VMM pool: %p is not a live block of this pool", ptr);
    }
    if (size > p->used || c != p->base_addr + (p->used - size)) {
        return clm_error(CLM_ERR_INVALID_ARG, "VMM pool: out-of-order free of %p (%zu bytes): frees must be LIFO, the "
                         "most recent block ends at %p", ptr, size, (void *)(p->base_addr + p->used));
    }
    p->used -= size;
    return CLM_OK;
}

static void vmm_synchronized(cann_pool *pool) { (void)pool; }

static void vmm_stats(const cann_pool *pool, clm_cann_stats *out) {
    const vmm_pool *p = (const vmm_pool *)pool;
    out->pool_kind = CLM_POOL_VMM;
    out->pool_in_use = p->used;
    out->pool_peak = p->peak;
    out->pool_reserved = p->base_addr != NULL ? p->max_size : 0;
    out->pool_mapped = p->mapped;
}

static void vmm_destroy(cann_pool *pool) {
    vmm_pool *p = (vmm_pool *)pool;
    for (size_t i = p->n_chunks; i-- > 0;) {
        aclrtUnmapMem(p->chunks[i].addr);
        aclrtFreePhysical(p->chunks[i].handle);
    }
    if (p->base_addr != NULL) aclrtReleaseMemAddress(p->base_addr);
    aclGetRecentErrMsg();
    free(p->chunks);
    free(p);
}

clm_status cann_pool_vmm_create(int device, aclrtStream stream, cann_pool **out) {
    aclrtPhysicalMemProp prop = {
        .handleType = ACL_MEM_HANDLE_TYPE_NONE,
        .allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED,
        .memAttr = ACL_HBM_MEM_HUGE,
        .location = {.id = (uint32_t)device, .type = ACL_MEM_LOCATION_TYPE_DEVICE},
        .reserve = 0,
    };
    size_t granularity = 0;
    if (aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &granularity) !=
            ACL_SUCCESS || granularity == 0) {
        aclGetRecentErrMsg();
        return CLM_ERR_UNSUPPORTED;
    }
    size_t free_mem = 0, total = 0;
    CANN_ACL(aclrtGetMemInfo(ACL_HBM_MEM, &free_mem, &total));
    size_t max_size = free_mem < VMM_MAX_RANGE ? free_mem : VMM_MAX_RANGE;
    max_size = max_size / granularity * granularity;
    if (max_size == 0) {
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "VMM pool: device %d reports %zu free bytes, less than one %zu-byte "
                         "granule", device, free_mem, granularity);
    }
    vmm_pool *p = calloc(1, sizeof(*p));
    if (p == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "VMM pool: out of host memory");
    p->base.iface = (struct cann_pool_i){vmm_alloc, vmm_free, vmm_synchronized, vmm_stats, vmm_destroy};
    p->base.device = device;
    p->base.stream = stream;
    p->prop = prop;
    p->granularity = granularity;
    p->max_size = max_size;
    *out = &p->base;
    return CLM_OK;
}
