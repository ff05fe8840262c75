/* memory.c - device and pinned host allocations, and the sanitizer's allocation registry.
 *
 * Every aclrtMalloc / aclrtMallocHost block is kept in an array sorted by address, so the
 * block holding a pointer is a binary search under a read lock (ops check every tensor at
 * launch). Bounds are checked against the size the caller asked for, which is stricter than
 * the hardware (whose blocks are padded to ALIGN_UP(size, 32) + 32 bytes): a kernel that
 * strays into the padding works on the NPU by luck and fails here.
 *
 * Fresh memory is not zeroed on CANN. Blocks up to AH_POISON_LIMIT are filled with 0xFF, a
 * NaN in F32/F16/BF16 and -1 as an integer, so reading memory nobody wrote shows up in
 * results; larger blocks come straight from mmap (committed lazily) and read as zero.
 *
 * Freeing a block while any stream still has queued or running work only marks it freed
 * (quarantine): the memory stays mapped, a queued task that touches it fails its run-time
 * range check (use after free), and the block is unmapped once every task queued before
 * the free has finished. The capacity is credited back at once, as on the device.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ah_rt.h"

#define AH_ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
#define AH_MMAP_THRESHOLD ((size_t)1 << 20)
#define AH_POISON_LIMIT ((size_t)16 << 20)
#define AH_POISON_BYTE 0xFF

typedef struct block {
    uintptr_t base;
    size_t size;      /* what the caller asked for: the bound the sanitizer enforces */
    size_t span;      /* bytes actually reserved at base */
    size_t accounted; /* charged to the device: ALIGN_UP(size, 32) + 32; 0 for pinned */
    int device;       /* -1 for pinned host memory */
    ah_mem_kind kind;
    bool mapped;      /* mmap (else aligned_alloc) */
    bool freed;       /* quarantined: freed by the user, still mapped */
    uint64_t freed_after_gseq;
} block;

static pthread_rwlock_t g_mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static block *g_blocks;
static size_t g_n_blocks, g_blocks_cap;
static size_t g_used[AH_MAX_DEVICES];
static atomic_size_t g_n_quarantined;

bool ah_mem_has_quarantine(void) { return atomic_load(&g_n_quarantined) > 0; }

/* ---- registry (callers hold g_mem_lock) -------------------------------------------------------- */

/* Index of the block whose reserved span holds p, or -1; *next gets the index of the first
 * block starting above p. */
static long find_block(uintptr_t p, size_t *next)
{
    size_t lo = 0, hi = g_n_blocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_blocks[mid].base <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (next)
        *next = lo;
    if (lo > 0 && p < g_blocks[lo - 1].base + g_blocks[lo - 1].span)
        return (long)lo - 1;
    return -1;
}

static bool insert_block(const block *b)
{
    if (g_n_blocks == g_blocks_cap) {
        size_t cap = g_blocks_cap ? g_blocks_cap * 2 : 256;
        block *grown = realloc(g_blocks, cap * sizeof *grown);
        if (!grown)
            return false;
        g_blocks = grown;
        g_blocks_cap = cap;
    }
    size_t at = 0;
    find_block(b->base, &at);
    memmove(&g_blocks[at + 1], &g_blocks[at], (g_n_blocks - at) * sizeof *g_blocks);
    g_blocks[at] = *b;
    g_n_blocks++;
    return true;
}

static void remove_block(size_t i)
{
    memmove(&g_blocks[i], &g_blocks[i + 1], (g_n_blocks - i - 1) * sizeof *g_blocks);
    g_n_blocks--;
}

static void *raw_alloc(size_t span, bool *mapped)
{
    if (span >= AH_MMAP_THRESHOLD) {
        void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        *mapped = true;
        return p == MAP_FAILED ? NULL : p;
    }
    *mapped = false;
    return aligned_alloc(64, AH_ALIGN_UP(span, 64));
}

static void raw_free(const block *b)
{
    if (b->mapped)
        munmap((void *)b->base, b->span);
    else
        free((void *)b->base);
}

static const char *kind_name(ah_mem_kind kind)
{
    return kind == AH_MEM_DEVICE ? "device allocation" : "aclrtMallocHost block";
}

/* ---- checks ---------------------------------------------------------------------------------- */

/* Classifies [ptr, ptr + size); g_mem_lock held for reading. */
static aclError classify_locked(const char *what, uintptr_t p, size_t size, ah_mem_kind *kind,
                                int *device)
{
    if (p + size < p)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: range [%p, +%zu) wraps around the address space",
                        what, (void *)p, size);
    size_t next = 0;
    long i = find_block(p, &next);
    if (i < 0) {
        if (next < g_n_blocks && size > 0 && g_blocks[next].base < p + size)
            return ah_error(ACL_ERROR_INVALID_PARAM,
                            "%s: range [%p, +%zu) starts outside any allocation but runs into %s %p",
                            what, (void *)p, size, kind_name(g_blocks[next].kind),
                            (void *)g_blocks[next].base);
        *kind = AH_MEM_NONE;
        *device = -1;
        return ACL_SUCCESS;
    }
    const block *b = &g_blocks[i];
    if (b->freed)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: range [%p, +%zu) lies in %s %p (size %zu) that was already freed "
                        "(use after free)", what, (void *)p, size, kind_name(b->kind),
                        (void *)b->base, b->size);
    if (p + size > b->base + b->size)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: range [%p, +%zu) at offset %zu runs %zu byte(s) past the end of %s %p "
                        "(size %zu)", what, (void *)p, size, (size_t)(p - b->base),
                        (size_t)(p + size - b->base - b->size), kind_name(b->kind),
                        (void *)b->base, b->size);
    *kind = b->kind;
    *device = b->device;
    return ACL_SUCCESS;
}

aclError ah_mem_classify(const void *ptr, size_t size, ah_mem_kind *kind, int *device)
{
    return ah_mem_classify_named(ptr, size, "memory check", kind, device);
}

aclError ah_mem_classify_named(const void *ptr, size_t size, const char *what, ah_mem_kind *kind,
                               int *device)
{
    ah_mem_kind k = AH_MEM_NONE;
    int d = -1;
    pthread_rwlock_rdlock(&g_mem_lock);
    aclError rc = classify_locked(what, (uintptr_t)ptr, size, &k, &d);
    pthread_rwlock_unlock(&g_mem_lock);
    if (kind)
        *kind = k;
    if (device)
        *device = d;
    return rc;
}

aclError ah_mem_check_device(const void *ptr, size_t size, const char *what)
{
    if (!what)
        what = "device memory check";
    if (!ptr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: device pointer is NULL", what);
    ah_mem_kind kind = AH_MEM_NONE;
    int device = -1;
    pthread_rwlock_rdlock(&g_mem_lock);
    aclError rc = classify_locked(what, (uintptr_t)ptr, size, &kind, &device);
    pthread_rwlock_unlock(&g_mem_lock);
    if (rc == ACL_SUCCESS && kind != AH_MEM_DEVICE)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: [%p, +%zu) is not device memory (%s)", what,
                      ptr, size, kind == AH_MEM_HOST_PINNED ? "an aclrtMallocHost block"
                                                            : "a host address");
    return rc;
}

aclError ah_mem_check_live(const ah_range *range, const char *task)
{
    uintptr_t p = (uintptr_t)range->ptr;
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_rdlock(&g_mem_lock);
    long i = find_block(p, NULL);
    if (i < 0)
        rc = ah_error(ACL_ERROR_RT_AICORE_EXCEPTION,
                      "%s: operand [%p, +%zu) is no longer in any allocation: it was freed "
                      "while the task was queued (use after free)", task, range->ptr, range->size);
    else if (g_blocks[i].freed)
        rc = ah_error(ACL_ERROR_RT_AICORE_EXCEPTION,
                      "%s: operand [%p, +%zu) lies in %s %p (size %zu) that was freed while the "
                      "task was queued (use after free)", task, range->ptr, range->size,
                      kind_name(g_blocks[i].kind), (void *)g_blocks[i].base, g_blocks[i].size);
    pthread_rwlock_unlock(&g_mem_lock);
    return rc;
}

/* ---- allocation ------------------------------------------------------------------------------ */

static aclError allocate(const char *api, void **out, size_t size, ah_mem_kind kind, int device)
{
    if (!out)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: output pointer is NULL", api);
    *out = NULL;
    if (size == 0)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: size must not be 0", api);
    if (size > SIZE_MAX / 2)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: size %zu is impossibly large", api, size);
    size_t accounted = kind == AH_MEM_DEVICE ? AH_ALIGN_UP(size, 32) + 32 : 0;
    size_t span = kind == AH_MEM_DEVICE ? accounted : size;

    if (kind == AH_MEM_DEVICE) {
        size_t capacity = ah_rt_device_capacity();
        pthread_rwlock_wrlock(&g_mem_lock);
        size_t used = g_used[device];
        bool fits = accounted <= capacity - used;
        if (fits)
            g_used[device] += accounted;
        pthread_rwlock_unlock(&g_mem_lock);
        if (!fits)
            return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION,
                            "%s: out of memory on device %d: requested %zu bytes (%zu after "
                            "alignment), free %zu of %zu total (CANN_LLM_HOST_MEMORY)",
                            api, device, size, accounted, capacity - used, capacity);
    }
    block b = {.size = size, .span = span, .accounted = accounted, .device = device, .kind = kind};
    void *p = raw_alloc(span, &b.mapped);
    b.base = (uintptr_t)p;
    pthread_rwlock_wrlock(&g_mem_lock);
    if (p && !insert_block(&b)) {
        raw_free(&b);
        p = NULL;
    }
    if (!p && kind == AH_MEM_DEVICE)
        g_used[device] -= accounted;
    pthread_rwlock_unlock(&g_mem_lock);
    if (!p)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: the host could not provide %zu bytes",
                        api, span);
    if (span <= AH_POISON_LIMIT)
        memset(p, AH_POISON_BYTE, span);
    *out = p;
    return ACL_SUCCESS;
}

static aclError device_malloc(const char *api, void **devPtr, size_t size)
{
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc != ACL_SUCCESS)
        return rc;
    return allocate(api, devPtr, size, AH_MEM_DEVICE, device);
}

/* The policy (huge pages, bandwidth) has no meaning on the host. */
AH_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMalloc", devPtr, size);
}

AH_API aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMallocAlign32", devPtr, size);
}

AH_API aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMallocCached", devPtr, size);
}

AH_API aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "aclrtMallocHost: aclInit has not been called");
    return allocate("aclrtMallocHost", hostPtr, size, AH_MEM_HOST_PINNED, -1);
}

static aclError release(const char *api, void *ptr, ah_mem_kind kind)
{
    if (!ptr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: pointer is NULL", api);
    /* Read before the lock: a task queued after this point cannot be using the block. */
    uint64_t last = ah_stream_last_gseq();
    bool idle = ah_stream_oldest_pending_gseq() > last;
    uintptr_t p = (uintptr_t)ptr;
    aclError rc = ACL_SUCCESS;
    block victim = {0};
    bool unmap = false;

    pthread_rwlock_wrlock(&g_mem_lock);
    long i = find_block(p, NULL);
    block *b = i >= 0 ? &g_blocks[i] : NULL;
    if (!b)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p was not allocated by acl (unknown pointer)",
                      api, ptr);
    else if (b->base != p)
        rc = ah_error(ACL_ERROR_INVALID_PARAM,
                      "%s: %p points %zu byte(s) into %s %p; pass the start address", api, ptr,
                      (size_t)(p - b->base), kind_name(b->kind), (void *)b->base);
    else if (b->freed)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: double free of %s %p (size %zu)", api,
                      kind_name(b->kind), ptr, b->size);
    else if (b->kind != kind)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is an %s; free it with %s", api, ptr,
                      kind_name(b->kind), b->kind == AH_MEM_DEVICE ? "aclrtFree" : "aclrtFreeHost");
    else {
        if (b->kind == AH_MEM_DEVICE)
            g_used[b->device] -= b->accounted;
        if (idle) {
            victim = *b;
            unmap = true;
            remove_block((size_t)i);
        } else {
            b->freed = true;
            b->freed_after_gseq = last;
            atomic_fetch_add(&g_n_quarantined, 1);
        }
    }
    pthread_rwlock_unlock(&g_mem_lock);
    if (unmap)
        raw_free(&victim);
    return rc;
}

AH_API aclError aclrtFree(void *devPtr) { return release("aclrtFree", devPtr, AH_MEM_DEVICE); }

AH_API aclError aclrtFreeHost(void *hostPtr)
{
    return release("aclrtFreeHost", hostPtr, AH_MEM_HOST_PINNED);
}

void ah_mem_collect(void)
{
    if (!ah_mem_has_quarantine())
        return;
    uint64_t oldest = ah_stream_oldest_pending_gseq();
    pthread_rwlock_wrlock(&g_mem_lock);
    size_t kept = 0;
    for (size_t i = 0; i < g_n_blocks; i++) {
        block *b = &g_blocks[i];
        if (b->freed && b->freed_after_gseq < oldest) {
            raw_free(b);
            atomic_fetch_sub(&g_n_quarantined, 1);
        } else {
            g_blocks[kept++] = *b;
        }
    }
    g_n_blocks = kept;
    pthread_rwlock_unlock(&g_mem_lock);
}

void ah_mem_release_all(void)
{
    pthread_rwlock_wrlock(&g_mem_lock);
    for (size_t i = 0; i < g_n_blocks; i++)
        raw_free(&g_blocks[i]);
    free(g_blocks);
    g_blocks = NULL;
    g_n_blocks = g_blocks_cap = 0;
    memset(g_used, 0, sizeof g_used);
    atomic_store(&g_n_quarantined, 0);
    pthread_rwlock_unlock(&g_mem_lock);
}

/* All 8.1 attributes (HBM and DDR, any page size) describe the device's one pool; attributes
 * added after 8.1 report 0/0. */
AH_API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total)
{
    if (!free || !total)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: free or total is NULL");
    int device = 0;
    aclError rc = ah_rt_require_device("aclrtGetMemInfo", &device);
    if (rc != ACL_SUCCESS)
        return rc;
    if ((int)attr < 0 || (int)attr > 17)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtGetMemInfo: unknown attribute %d", (int)attr);
    if ((int)attr > ACL_HBM_MEM_P2P_HUGE1G) {
        *free = *total = 0;
        return ACL_SUCCESS;
    }
    size_t capacity = ah_rt_device_capacity();
    pthread_rwlock_rdlock(&g_mem_lock);
    size_t used = g_used[device];
    pthread_rwlock_unlock(&g_mem_lock);
    *total = capacity;
    *free = capacity - used;
    return ACL_SUCCESS;
}
