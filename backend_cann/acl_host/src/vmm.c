/* vmm.c - virtual memory management with real pages: aclrtReserveMemAddress, aclrtMallocPhysical,
 * aclrtMapMem and their inverses.
 *
 * A reservation is an mmap(PROT_NONE) range aligned to the granularity. A physical allocation
 * is a memfd of its size, charged to the device capacity (so out of memory is a real error) and
 * poisoned like aclrtMalloc memory when small. aclrtMapMem maps the memfd MAP_SHARED|MAP_FIXED
 * at the address, so two mappings of one handle share their pages as on the device, and
 * registers the range with the sanitizer as device memory (memory.c). Unmapping goes through
 * the same quarantine as aclrtFree and puts the range back to PROT_NONE: reserved but unmapped
 * addresses are not device memory, and touching them is a sanitizer error, not a crash.
 *
 * Granularity: 2 MiB (the HBM huge page) for both MINIMUM and RECOMMENDED. Physical sizes must
 * be multiples of it, mapping addresses must be aligned to it, and a mapping's size must equal
 * its physical allocation's (offset 0), as CANN documents.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ah_rt.h"

#define VMM_GRANULARITY ((size_t)2 << 20)
#define VMM_POISON_LIMIT ((size_t)16 << 20)

typedef struct phys {
    int fd;
    size_t size;
    int device;
    unsigned n_maps;
    bool freed; /* aclrtFreePhysical while mapped: released at the last unmap */
} phys;

typedef struct reservation {
    uintptr_t base;
    size_t size;
    uint64_t id;
    int device; /* of its mappings; -1 while none */
    unsigned n_mapped;
} reservation;

typedef struct mapping {
    uintptr_t base;
    size_t size;
    phys *ph;
    uint64_t res_id;
} mapping;

static pthread_mutex_t g_vmm_mutex = PTHREAD_MUTEX_INITIALIZER;
static phys **g_phys;
static size_t g_n_phys, g_cap_phys;
static reservation *g_res;
static size_t g_n_res, g_cap_res;
static mapping *g_maps;
static size_t g_n_maps, g_cap_maps;
static uint64_t g_next_res_id;

/* Makes room for one more element of an array; false if the host is out of memory. */
static bool grow(void **array, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    size_t new_cap = *cap ? *cap * 2 : 16;
    void *p = realloc(*array, new_cap * elem);
    if (!p)
        return false;
    *array = p;
    *cap = new_cap;
    return true;
}

/* ---- lookups (g_vmm_mutex held) ------------------------------------------------------------- */

static long find_phys(const void *handle)
{
    for (size_t i = 0; i < g_n_phys; i++)
        if (g_phys[i] == handle)
            return (long)i;
    return -1;
}

static long find_res(uintptr_t p)
{
    for (size_t i = 0; i < g_n_res; i++)
        if (p >= g_res[i].base && p < g_res[i].base + g_res[i].size)
            return (long)i;
    return -1;
}

static long find_map(uintptr_t p)
{
    for (size_t i = 0; i < g_n_maps; i++)
        if (p >= g_maps[i].base && p < g_maps[i].base + g_maps[i].size)
            return (long)i;
    return -1;
}

static reservation *res_by_id(uint64_t id)
{
    for (size_t i = 0; i < g_n_res; i++)
        if (g_res[i].id == id)
            return &g_res[i];
    return NULL;
}

/* Closes a physical allocation and credits the device. */
static void destroy_phys(size_t i)
{
    phys *ph = g_phys[i];
    close(ph->fd);
    ah_mem_credit(ph->device, ph->size);
    free(ph);
    g_phys[i] = g_phys[--g_n_phys];
}

bool ah_vmm_describe(const void *ptr, char *buf, size_t n)
{
    pthread_mutex_lock(&g_vmm_mutex);
    long i = find_res((uintptr_t)ptr);
    if (i >= 0)
        snprintf(buf, n, "it lies at offset %zu of the VMM reservation %p (size %zu) but is not "
                 "mapped (aclrtMapMem)", (size_t)((uintptr_t)ptr - g_res[i].base),
                 (void *)g_res[i].base, g_res[i].size);
    pthread_mutex_unlock(&g_vmm_mutex);
    return i >= 0;
}

void ah_vmm_release_all(void)
{
    pthread_mutex_lock(&g_vmm_mutex);
    for (size_t i = 0; i < g_n_res; i++)
        munmap((void *)g_res[i].base, g_res[i].size);
    for (size_t i = 0; i < g_n_phys; i++) {
        close(g_phys[i]->fd);
        free(g_phys[i]);
    }
    free(g_res);
    free(g_phys);
    free(g_maps);
    g_res = NULL;
    g_phys = NULL;
    g_maps = NULL;
    g_n_res = g_cap_res = g_n_phys = g_cap_phys = g_n_maps = g_cap_maps = 0;
    pthread_mutex_unlock(&g_vmm_mutex);
}

/* ---- granularity ----------------------------------------------------------------------------- */

static aclError check_prop(const char *api, const aclrtPhysicalMemProp *prop)
{
    if (!prop)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: prop is NULL", api);
    if (prop->location.type != ACL_MEM_LOCATION_TYPE_DEVICE)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: prop.location.type %d is not ACL_MEM_LOCATION_TYPE_DEVICE", api,
                        (int)prop->location.type);
    if (prop->location.id >= (uint32_t)ah_device_count())
        return ah_error(ACL_ERROR_RT_INVALID_DEVICEID,
                        "%s: prop.location.id %u is not a device (%d device(s))", api,
                        prop->location.id, ah_device_count());
    if (prop->handleType != ACL_MEM_HANDLE_TYPE_NONE)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: prop.handleType %d is not supported", api,
                        (int)prop->handleType);
    if (prop->allocationType != ACL_MEM_ALLOCATION_TYPE_PINNED)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: prop.allocationType %d is not ACL_MEM_ALLOCATION_TYPE_PINNED", api,
                        (int)prop->allocationType);
    if ((int)prop->memAttr < ACL_DDR_MEM || prop->memAttr > ACL_HBM_MEM_P2P_HUGE1G)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: prop.memAttr %d is unknown", api,
                        (int)prop->memAttr);
    return ACL_SUCCESS;
}

AH_API aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
                                                 aclrtMemGranularityOptions option,
                                                 size_t *granularity)
{
    const char *api = "aclrtMemGetAllocationGranularity";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!granularity)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: granularity is NULL", api);
    if (option != ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM &&
        option != ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: unknown option %d", api, (int)option);
    aclError rc = check_prop(api, prop);
    if (rc == ACL_SUCCESS)
        *granularity = VMM_GRANULARITY;
    return rc;
}

/* ---- reservations ------------------------------------------------------------------------------ */

AH_API aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment,
                                       void *expectPtr, uint64_t flags)
{
    const char *api = "aclrtReserveMemAddress";
    aclError rc = ah_rt_require_device(api, NULL);
    if (rc != ACL_SUCCESS)
        return rc;
    if (!virPtr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", api);
    *virPtr = NULL;
    if (size == 0 || size > ((size_t)1 << 46))
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: size %zu must be in 1..64 TiB", api, size);
    if (alignment != 0)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: alignment is reserved and must be 0 (got %zu)",
                        api, alignment);
    /* flags: CANN says "page type"; real users pass 1 (huge pages), which changes nothing here */
    if (flags > 1)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: flags must be 0 or 1 (got %llu)", api,
                        (unsigned long long)flags);
    size_t len = (size + VMM_GRANULARITY - 1) / VMM_GRANULARITY * VMM_GRANULARITY;
    uintptr_t base = 0;
    int prot_flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (expectPtr) {
        if ((uintptr_t)expectPtr % VMM_GRANULARITY)
            return ah_error(ACL_ERROR_RT_ADDR_UNALIGNED,
                            "%s: expectPtr %p is not aligned to the 2 MiB granularity", api,
                            expectPtr);
        void *p = mmap(expectPtr, len, PROT_NONE, prot_flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED || p != expectPtr) {
            if (p != MAP_FAILED)
                munmap(p, len); /* kernels without MAP_FIXED_NOREPLACE treat it as a hint */
            return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION,
                            "%s: cannot reserve %zu bytes at expectPtr %p", api, len, expectPtr);
        }
        base = (uintptr_t)p;
    } else {
        /* over-reserve by one granule, then trim to an aligned base */
        void *p = mmap(NULL, len + VMM_GRANULARITY, PROT_NONE, prot_flags, -1, 0);
        if (p == MAP_FAILED)
            return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION,
                            "%s: cannot reserve %zu bytes of address space (%s)", api, len,
                            strerror(errno));
        uintptr_t raw = (uintptr_t)p;
        base = (raw + VMM_GRANULARITY - 1) / VMM_GRANULARITY * VMM_GRANULARITY;
        if (base > raw)
            munmap(p, base - raw);
        if (raw + VMM_GRANULARITY > base)
            munmap((void *)(base + len), raw + VMM_GRANULARITY - base);
    }
    pthread_mutex_lock(&g_vmm_mutex);
    if (grow((void **)&g_res, &g_cap_res, g_n_res, sizeof *g_res)) {
        g_res[g_n_res++] = (reservation){base, len, ++g_next_res_id, -1, 0};
        *virPtr = (void *)base;
    } else {
        munmap((void *)base, len);
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    }
    pthread_mutex_unlock(&g_vmm_mutex);
    return rc;
}

AH_API aclError aclrtReleaseMemAddress(void *virPtr)
{
    const char *api = "aclrtReleaseMemAddress";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!virPtr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", api);
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_vmm_mutex);
    long i = find_res((uintptr_t)virPtr);
    if (i < 0)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is not a reserved address", api, virPtr);
    else if (g_res[i].base != (uintptr_t)virPtr)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is %zu byte(s) into the reservation %p; "
                      "pass its start", api, virPtr, (size_t)((uintptr_t)virPtr - g_res[i].base),
                      (void *)g_res[i].base);
    else if (g_res[i].n_mapped)
        rc = ah_error(ACL_ERROR_INVALID_PARAM,
                      "%s: the reservation %p still has %u mapping(s); aclrtUnmapMem them first",
                      api, virPtr, g_res[i].n_mapped);
    if (rc == ACL_SUCCESS) {
        reservation r = g_res[i];
        g_res[i] = g_res[--g_n_res];
        ah_mem_vmm_release_range((void *)r.base, r.size);
    }
    pthread_mutex_unlock(&g_vmm_mutex);
    return rc;
}

/* ---- physical memory ------------------------------------------------------------------------------ */

AH_API aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
                                    const aclrtPhysicalMemProp *prop, uint64_t flags)
{
    const char *api = "aclrtMallocPhysical";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!handle)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: handle is NULL", api);
    *handle = NULL;
    aclError rc = check_prop(api, prop);
    if (rc != ACL_SUCCESS)
        return rc;
    if (size == 0 || size % VMM_GRANULARITY)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: size %zu is not a non-zero multiple of the granularity (%zu)", api,
                        size, VMM_GRANULARITY);
    if (flags != 0)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: flags must be 0 (got %llu)", api,
                        (unsigned long long)flags);
    int device = (int)prop->location.id;
    if ((rc = ah_capture_check_unsafe(api, device)) != ACL_SUCCESS ||
        (rc = ah_mem_charge(api, device, size)) != ACL_SUCCESS)
        return rc;
    phys *ph = calloc(1, sizeof *ph);
    int fd = memfd_create("acl_host_physical", MFD_CLOEXEC);
    if (!ph || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: the host could not provide %zu bytes (%s)",
                      api, size, strerror(errno));
    } else if (size <= VMM_POISON_LIMIT) { /* fresh device memory is not zeroed */
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            memset(p, 0xFF, size);
            munmap(p, size);
        }
    }
    if (rc == ACL_SUCCESS) {
        *ph = (phys){fd, size, device, 0, false};
        pthread_mutex_lock(&g_vmm_mutex);
        if (grow((void **)&g_phys, &g_cap_phys, g_n_phys, sizeof *g_phys))
            g_phys[g_n_phys++] = ph;
        else
            rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
        pthread_mutex_unlock(&g_vmm_mutex);
    }
    if (rc != ACL_SUCCESS) {
        if (fd >= 0)
            close(fd);
        free(ph);
        ah_mem_credit(device, size);
        return rc;
    }
    *handle = ph;
    return ACL_SUCCESS;
}

AH_API aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
{
    const char *api = "aclrtFreePhysical";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_vmm_mutex);
    long i = find_phys(handle);
    if (i < 0 || g_phys[i]->freed)
        rc = ah_error(ACL_ERROR_INVALID_PARAM,
                      "%s: %p is not a live physical allocation (double free?)", api, handle);
    else if ((rc = ah_capture_check_unsafe(api, g_phys[i]->device)) != ACL_SUCCESS)
        ;
    else if (g_phys[i]->n_maps) /* released at the last aclrtUnmapMem, as CANN documents */
        g_phys[i]->freed = true;
    else
        destroy_phys((size_t)i);
    pthread_mutex_unlock(&g_vmm_mutex);
    return rc;
}

/* ---- mapping ------------------------------------------------------------------------------------- */

/* Validates a MapMem request; g_vmm_mutex held. */
static aclError check_map(const char *api, uintptr_t p, size_t size, size_t offset, phys *ph,
                          uint64_t flags, long *res)
{
    long pi = find_phys(ph);
    if (pi < 0 || ph->freed)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: handle %p is not a live physical allocation",
                        api, (void *)ph);
    if (offset != 0 || flags != 0)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: offset (%zu) and flags (%llu) must be 0",
                        api, offset, (unsigned long long)flags);
    if (size != ph->size)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: size %zu must equal the physical allocation's size %zu", api, size,
                        ph->size);
    if (p % VMM_GRANULARITY)
        return ah_error(ACL_ERROR_RT_ADDR_UNALIGNED,
                        "%s: %p is not aligned to the granularity (%zu)", api, (void *)p,
                        VMM_GRANULARITY);
    *res = find_res(p);
    if (*res < 0)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is not in a reservation "
                        "(aclrtReserveMemAddress)", api, (void *)p);
    const reservation *r = &g_res[*res];
    if (size > r->base + r->size - p)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: [%p, +%zu) runs past the end of the reservation %p (size %zu)", api,
                        (void *)p, size, (void *)r->base, r->size);
    if (r->device >= 0 && r->device != ph->device)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: the reservation %p holds device %d memory; this handle is device %d's",
                        api, (void *)r->base, r->device, ph->device);
    for (size_t i = 0; i < g_n_maps; i++)
        if (g_maps[i].base < p + size && p < g_maps[i].base + g_maps[i].size)
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "%s: [%p, +%zu) overlaps the mapping %p (size %zu)", api, (void *)p,
                            size, (void *)g_maps[i].base, g_maps[i].size);
    return ACL_SUCCESS;
}

AH_API aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
                            uint64_t flags)
{
    const char *api = "aclrtMapMem";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!virPtr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", api);
    uintptr_t p = (uintptr_t)virPtr;
    phys *ph = handle;
    long ri = -1;
    pthread_mutex_lock(&g_vmm_mutex);
    aclError rc = check_map(api, p, size, offset, ph, flags, &ri);
    if (rc == ACL_SUCCESS)
        rc = ah_capture_check_unsafe(api, ph->device);
    if (rc == ACL_SUCCESS && !grow((void **)&g_maps, &g_cap_maps, g_n_maps, sizeof *g_maps))
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    if (rc == ACL_SUCCESS)
        rc = ah_mem_vmm_register(api, virPtr, size, ph->device, g_res[ri].id);
    if (rc == ACL_SUCCESS &&
        mmap(virPtr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->fd, 0) == MAP_FAILED) {
        ah_mem_vmm_forget(virPtr);
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: mapping %zu bytes at %p failed (%s)",
                      api, size, virPtr, strerror(errno));
    }
    if (rc == ACL_SUCCESS) {
        g_maps[g_n_maps++] = (mapping){p, size, ph, g_res[ri].id};
        g_res[ri].n_mapped++;
        g_res[ri].device = ph->device;
        ph->n_maps++;
    }
    pthread_mutex_unlock(&g_vmm_mutex);
    return rc;
}

AH_API aclError aclrtUnmapMem(void *virPtr)
{
    const char *api = "aclrtUnmapMem";
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (!virPtr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: virPtr is NULL", api);
    uintptr_t p = (uintptr_t)virPtr;
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_vmm_mutex);
    long i = find_map(p);
    if (i < 0)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is not mapped", api, virPtr);
    else if (g_maps[i].base != p)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is %zu byte(s) into the mapping %p; pass "
                      "its start", api, virPtr, (size_t)(p - g_maps[i].base),
                      (void *)g_maps[i].base);
    if (rc == ACL_SUCCESS)
        rc = ah_capture_check_unsafe(api, g_maps[i].ph->device);
    if (rc == ACL_SUCCESS)
        rc = ah_mem_vmm_unregister(api, virPtr);
    if (rc == ACL_SUCCESS) {
        mapping m = g_maps[i];
        g_maps[i] = g_maps[--g_n_maps];
        reservation *r = res_by_id(m.res_id);
        if (r && --r->n_mapped == 0)
            r->device = -1;
        if (--m.ph->n_maps == 0 && m.ph->freed)
            destroy_phys((size_t)find_phys(m.ph));
    }
    pthread_mutex_unlock(&g_vmm_mutex);
    return rc;
}
