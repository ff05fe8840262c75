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
 * results; larger blocks come straight from mmap (committed lazily) and read as zero. Zeroing
 * most of a large block (ah_mem_set) hands its pages back to the kernel instead of writing them.
 *
 * Freeing a block while any stream still has queued or running work only marks it freed
 * (quarantine): the memory stays mapped, a queued task that touches it fails its run-time
 * range check (use after free), and the block is unmapped once every task queued before
 * the free has finished. The capacity is credited back at once, as on the device.
 *
 * aclrtHostRegister maps a range of the caller's host memory for the device: it is registered
 * here as its own kind, which kernels accept as device memory (on the host the device's address
 * is the host's) but copies and memsets refuse, as the CANN docs say of the mapped address. Its
 * pages stay the caller's: unregistering never unmaps or frees them, and nothing is charged to
 * the device's capacity.
 *
 * VMM mappings (vmm.c) are registered here as device blocks tagged with their reservation: a
 * range may run from one mapping into the next when both are contiguous in one reservation,
 * as on the hardware, where the pool hands out blocks that cross chunk boundaries. Unmapping
 * follows the same quarantine as aclrtFree; a released mapping goes back to PROT_NONE.
 *
 * The last AH_FREED_RING user frees are remembered, so an access to a block that is already
 * gone is reported as a use after free rather than as "a host address".
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ah_rt.h"

#define AH_ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))
#define AH_MMAP_THRESHOLD ((size_t)1 << 20)
#define AH_HUGE_PAGE ((size_t)2 << 20)
#define AH_POISON_LIMIT ((size_t)16 << 20)
#define AH_POISON_BYTE 0xFF
#define AH_FREED_RING 1024

typedef struct block {
    uintptr_t base;
    size_t size;      /* what the caller asked for: the bound the sanitizer enforces */
    size_t span;      /* bytes actually reserved at base */
    size_t accounted; /* charged to the device: ALIGN_UP(size, 32) + 32; 0 for pinned */
    int device;       /* -1 for pinned host memory */
    ah_mem_kind kind;
    bool mapped;      /* mmap (else aligned_alloc) */
    bool freed;       /* quarantined: freed by the user, still mapped */
    bool vmm_orphan;  /* a VMM mapping whose reservation was released: munmap, not PROT_NONE */
    uint64_t vmm_res; /* VMM reservation id (aclrtMapMem), 0 for ordinary blocks */
    uint64_t freed_after_gseq;
} block;

typedef struct freed_entry {
    uintptr_t base;
    size_t size;
    ah_mem_kind kind;
    bool vmm;
} freed_entry;

static pthread_rwlock_t g_mem_lock = PTHREAD_RWLOCK_INITIALIZER;
static block *g_blocks;
static size_t g_n_blocks, g_blocks_cap;
static size_t g_used[AH_MAX_DEVICES];
static atomic_size_t g_n_quarantined;
/* +1 whenever a range stops being live device memory (a free, an unmap); a range found live at
 * epoch E is still live while the epoch is E (allocations never make a live range dead). */
static _Atomic uint64_t g_release_epoch;
/* Recently freed blocks (diagnostics only): its own lock, as lookups run under the read lock. */
static pthread_mutex_t g_ring_lock = PTHREAD_MUTEX_INITIALIZER;
static freed_entry g_ring[AH_FREED_RING];
static size_t g_ring_next, g_ring_count;

bool ah_mem_has_quarantine(void) { return atomic_load(&g_n_quarantined) > 0; }

uint64_t ah_mem_release_epoch(void) { return atomic_load(&g_release_epoch); }

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

/* huge: the caller's policy asks for huge pages first (aclrtMalloc's HUGE_* policies, as the
 * device's 2 MiB HBM pages): a large block is madvised for transparent huge pages. Weights and
 * the KV cache are streamed every token; with 4 KiB pages each pass over them walks ~25k page
 * table entries (two-level in a VM): decode measured 5-15% faster, resident memory the same;
 * a VM's first touch of fresh huge pages makes loading slower (docs/acl_host.md, Memory model). */
static void *raw_alloc(size_t span, bool *mapped, bool huge)
{
    if (span >= AH_MMAP_THRESHOLD) {
        void *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
        *mapped = true;
#ifdef MADV_HUGEPAGE
        if (p != MAP_FAILED && huge && span >= AH_HUGE_PAGE && ah_rt_hugepages())
            madvise(p, span, MADV_HUGEPAGE); /* advice only: without THP nothing changes */
#endif
        return p == MAP_FAILED ? NULL : p;
    }
    *mapped = false;
    return aligned_alloc(64, AH_ALIGN_UP(span, 64));
}

static void raw_free(const block *b)
{
    if (b->kind == AH_MEM_REGISTERED) /* the caller's memory */
        return;
    if (b->vmm_res && !b->vmm_orphan) /* back to reserved-but-unmapped */
        mmap((void *)b->base, b->span, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    else if (b->mapped)
        munmap((void *)b->base, b->span);
    else
        free((void *)b->base);
}

static const char *kind_name(ah_mem_kind kind)
{
    return kind == AH_MEM_DEVICE       ? "device allocation"
           : kind == AH_MEM_REGISTERED ? "aclrtHostRegister range"
                                       : "aclrtMallocHost block";
}

static const char *release_api(const block *b)
{
    return b->vmm_res                   ? "aclrtUnmapMem"
           : b->kind == AH_MEM_DEVICE     ? "aclrtFree"
           : b->kind == AH_MEM_REGISTERED ? "aclrtHostUnregister"
                                          : "aclrtFreeHost";
}

static const char *block_name(const block *b)
{
    return b->vmm_res ? "VMM mapping" : kind_name(b->kind);
}

/* Zeroing by discarding pages: MADV_DONTNEED on private anonymous memory makes the pages read
 * as zero (the kernel maps its zero page, or a fresh zeroed page on the next write); the edges
 * that are not whole pages are written. VMM mappings and aligned_alloc blocks are memset.
 * The discarded range then takes small pages (MADV_NOHUGEPAGE): a block cleared to zero is
 * filled as it is written, a KV cache one position per token, and with huge pages the first
 * write into each 2 MiB zeroed and committed all of it. On a VM whose host takes back freed
 * memory that cost 5-16 ms per SET_ROWS on the first token (22-82 ms against 21-27; decode at a
 * depth of 3,500 tokens the same within 2-3%: docs/acl_host.md, Memory model). */
#define AH_DISCARD_MIN ((size_t)256 << 10)

void ah_mem_set(void *p, int value, size_t count)
{
    uintptr_t a = (uintptr_t)p, e = a + count;
    const uintptr_t page = 4096;
    uintptr_t lo = AH_ALIGN_UP(a, page), hi = e / page * page;
    bool discard = false;
    if (value == 0 && count >= AH_DISCARD_MIN && hi > lo) {
        pthread_rwlock_rdlock(&g_mem_lock);
        long i = find_block(a, NULL);
        if (i >= 0) {
            const block *b = &g_blocks[i];
            discard = b->mapped && !b->vmm_res && !b->freed && e <= b->base + b->span &&
                      madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0;
#ifdef MADV_NOHUGEPAGE
            if (discard) /* see above: filled as it is written, in small pages */
                madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE);
#endif
        }
        pthread_rwlock_unlock(&g_mem_lock);
    }
    if (!discard) {
        memset(p, value, count);
        return;
    }
    memset(p, 0, lo - a);
    memset((void *)hi, 0, e - hi);
}

/* ---- recently freed blocks ------------------------------------------------------------------ */

static void ring_push(const block *b)
{
    pthread_mutex_lock(&g_ring_lock);
    g_ring[g_ring_next] = (freed_entry){b->base, b->size, b->kind, b->vmm_res != 0};
    g_ring_next = (g_ring_next + 1) % AH_FREED_RING;
    if (g_ring_count < AH_FREED_RING)
        g_ring_count++;
    pthread_mutex_unlock(&g_ring_lock);
}

bool ah_mem_recently_freed(const void *ptr, char *buf, size_t n)
{
    uintptr_t p = (uintptr_t)ptr;
    bool found = false;
    pthread_mutex_lock(&g_ring_lock);
    for (size_t k = 1; k <= g_ring_count && !found; k++) { /* newest first */
        const freed_entry *e = &g_ring[(g_ring_next + AH_FREED_RING - k) % AH_FREED_RING];
        if (p >= e->base && p < e->base + (e->size ? e->size : 1)) {
            found = true;
            if (e->vmm)
                snprintf(buf, n, "use after free of a %zu-byte VMM mapping %p unmapped earlier "
                         "(aclrtUnmapMem)", e->size, (void *)e->base);
            else
                snprintf(buf, n, "use after free of a %zu-byte %s %p freed earlier", e->size,
                         kind_name(e->kind), (void *)e->base);
        }
    }
    pthread_mutex_unlock(&g_ring_lock);
    return found;
}

/* Why an address outside every live block is not device memory. */
static void describe_non_device(const void *ptr, char *buf, size_t n)
{
    if (!ah_mem_recently_freed(ptr, buf, n) && !ah_vmm_describe(ptr, buf, n))
        snprintf(buf, n, "a host address");
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
                        "(use after free)", what, (void *)p, size, block_name(b),
                        (void *)b->base, b->size);
    /* A VMM range may continue into the next mapping if it is contiguous in one reservation. */
    const block *last = b;
    for (size_t j = (size_t)i + 1; p + size > last->base + last->size && j < g_n_blocks &&
                                   last->vmm_res && g_blocks[j].vmm_res == last->vmm_res &&
                                   g_blocks[j].base == last->base + last->size &&
                                   !g_blocks[j].freed; j++)
        last = &g_blocks[j];
    if (p + size > last->base + last->size)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "%s: range [%p, +%zu) at offset %zu runs %zu byte(s) past the end of %s %p "
                        "(size %zu)", what, (void *)p, size, (size_t)(p - b->base),
                        (size_t)(p + size - last->base - last->size), block_name(last),
                        (void *)last->base, last->size);
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
    if (rc == ACL_SUCCESS && kind != AH_MEM_DEVICE && kind != AH_MEM_REGISTERED) {
        char why[256] = "an aclrtMallocHost block";
        if (kind == AH_MEM_NONE)
            describe_non_device(ptr, why, sizeof why);
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: [%p, +%zu) is not device memory (%s)", what,
                      ptr, size, why);
    }
    return rc;
}

aclError ah_mem_device_extent(const void *ptr, size_t size, const char *what, uintptr_t *begin,
                              uintptr_t *end)
{
    aclError rc = ah_mem_check_device(ptr, size, what);
    if (rc != ACL_SUCCESS)
        return rc;
    *begin = *end = (uintptr_t)ptr;
    pthread_rwlock_rdlock(&g_mem_lock);
    long i = find_block((uintptr_t)ptr, NULL);
    if (i >= 0) {
        *begin = g_blocks[i].base;
        *end = g_blocks[i].base + g_blocks[i].size;
    }
    pthread_rwlock_unlock(&g_mem_lock);
    return ACL_SUCCESS;
}

aclError ah_mem_check_live(const ah_range *range, const char *task)
{
    uintptr_t p = (uintptr_t)range->ptr, end = p + (range->size ? range->size : 1);
    const block *gone = NULL;
    bool missing = false;
    pthread_rwlock_rdlock(&g_mem_lock);
    long i = find_block(p, NULL);
    if (i < 0)
        missing = true;
    for (size_t j = (size_t)(i < 0 ? 0 : i); !missing && !gone; j++) {
        const block *b = &g_blocks[j];
        if (b->freed)
            gone = b;
        else if (end <= b->base + b->size)
            break;
        else if (j + 1 >= g_n_blocks || !b->vmm_res || g_blocks[j + 1].vmm_res != b->vmm_res ||
                 g_blocks[j + 1].base != b->base + b->size)
            missing = true; /* the next mapping of the range went away */
    }
    block copy = gone ? *gone : (block){0};
    pthread_rwlock_unlock(&g_mem_lock);
    if (gone)
        return ah_error(ACL_ERROR_RT_AICORE_EXCEPTION,
                        "%s: operand [%p, +%zu) lies in %s %p (size %zu) that was freed while the "
                        "task was queued (use after free)", task, range->ptr, range->size,
                        block_name(&copy), (void *)copy.base, copy.size);
    if (missing) {
        char why[256];
        describe_non_device(range->ptr, why, sizeof why);
        return ah_error(ACL_ERROR_RT_AICORE_EXCEPTION,
                        "%s: operand [%p, +%zu) is no longer device memory: it was freed while "
                        "the task was queued (%s)", task, range->ptr, range->size, why);
    }
    return ACL_SUCCESS;
}

/* ---- allocation ------------------------------------------------------------------------------ */

aclError ah_mem_charge(const char *api, int device, size_t bytes)
{
    size_t capacity = ah_rt_device_capacity();
    pthread_rwlock_wrlock(&g_mem_lock);
    size_t used = g_used[device];
    bool fits = bytes <= capacity - used;
    if (fits)
        g_used[device] += bytes;
    pthread_rwlock_unlock(&g_mem_lock);
    if (!fits)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION,
                        "%s: out of memory on device %d: requested %zu bytes, free %zu of %zu "
                        "total (CANN_LLM_HOST_MEMORY)", api, device, bytes, capacity - used,
                        capacity);
    return ACL_SUCCESS;
}

void ah_mem_credit(int device, size_t bytes)
{
    pthread_rwlock_wrlock(&g_mem_lock);
    g_used[device] -= bytes <= g_used[device] ? bytes : g_used[device];
    pthread_rwlock_unlock(&g_mem_lock);
}

static aclError allocate(const char *api, void **out, size_t size, ah_mem_kind kind, int device,
                         bool huge)
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
        aclError rc = ah_capture_check_unsafe(api, device);
        if (rc == ACL_SUCCESS)
            rc = ah_mem_charge(api, device, accounted);
        if (rc != ACL_SUCCESS)
            return rc;
    }
    block b = {.size = size, .span = span, .accounted = accounted, .device = device, .kind = kind};
    void *p = raw_alloc(span, &b.mapped, huge);
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

static aclError device_malloc(const char *api, void **devPtr, size_t size,
                              aclrtMemMallocPolicy policy)
{
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc != ACL_SUCCESS)
        return rc;
    bool huge = policy != ACL_MEM_MALLOC_NORMAL_ONLY && policy != ACL_MEM_MALLOC_NORMAL_ONLY_P2P;
    return allocate(api, devPtr, size, AH_MEM_DEVICE, device, huge);
}

/* The policy's page size becomes host huge-page advice (raw_alloc); P2P and bandwidth have no
 * meaning on the host. */
AH_API aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMalloc", devPtr, size, policy);
}

AH_API aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMallocAlign32", devPtr, size, policy);
}

AH_API aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
    return device_malloc("aclrtMallocCached", devPtr, size, policy);
}

AH_API aclError aclrtMallocHost(void **hostPtr, size_t size)
{
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "aclrtMallocHost: aclInit has not been called");
    return allocate("aclrtMallocHost", hostPtr, size, AH_MEM_HOST_PINNED, -1, false);
}

static aclError release(const char *api, void *ptr, ah_mem_kind kind, bool vmm)
{
    if (!ptr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: pointer is NULL", api);
    if (kind == AH_MEM_DEVICE && !vmm) {
        int device = ah_current_device();
        aclError unsafe = ah_capture_check_unsafe(api, device);
        if (unsafe != ACL_SUCCESS)
            return unsafe;
    }
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
    if (!b) {
        char why[256] = "unknown pointer";
        ah_mem_recently_freed(ptr, why, sizeof why);
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p was not allocated by acl (%s)", api, ptr,
                      why);
    }
    else if (b->base != p)
        rc = ah_error(ACL_ERROR_INVALID_PARAM,
                      "%s: %p points %zu byte(s) into %s %p; pass the start address", api, ptr,
                      (size_t)(p - b->base), kind_name(b->kind), (void *)b->base);
    else if (b->freed)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: double free of %s %p (size %zu)", api,
                      kind_name(b->kind), ptr, b->size);
    else if (b->kind != kind || (b->vmm_res != 0) != vmm)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: %p is a %s; release it with %s", api, ptr,
                      block_name(b), release_api(b));
    else {
        ring_push(b);
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
        atomic_fetch_add(&g_release_epoch, 1);
    }
    pthread_rwlock_unlock(&g_mem_lock);
    if (unmap)
        raw_free(&victim);
    return rc;
}

AH_API aclError aclrtFree(void *devPtr)
{
    return release("aclrtFree", devPtr, AH_MEM_DEVICE, false);
}

AH_API aclError aclrtFreeHost(void *hostPtr)
{
    return release("aclrtFreeHost", hostPtr, AH_MEM_HOST_PINNED, false);
}

/* ---- registered ranges (aclrtHostRegister, VMM mappings) -------------------------------------- */

/* Registers b unless its range overlaps a block already known (freed_hint is appended when that
 * block is quarantined: released, but queued work still uses it). */
static aclError insert_unshared(const char *api, const block *b, const char *freed_hint)
{
    aclError rc = ACL_SUCCESS;
    pthread_rwlock_wrlock(&g_mem_lock);
    size_t next = 0;
    long i = find_block(b->base, &next);
    const block *clash = i >= 0 ? &g_blocks[i]
                         : next < g_n_blocks && g_blocks[next].base < b->base + b->size
                             ? &g_blocks[next]
                             : NULL;
    if (clash)
        rc = ah_error(ACL_ERROR_INVALID_PARAM, "%s: [%p, +%zu) overlaps %s %p (size %zu)%s", api,
                      (void *)b->base, b->size, block_name(clash), (void *)clash->base,
                      clash->size, clash->freed ? freed_hint : "");
    else if (!insert_block(b))
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    pthread_rwlock_unlock(&g_mem_lock);
    return rc;
}

/* ---- host memory mapped for the device ------------------------------------------------------ */

/* acl_rt.h (8.1.RC1): ptr must be 4 KiB aligned, only ACL_HOST_REGISTER_MAPPED exists, and the
 * returned device address "cannot be used for memory operations such as memory copy". A range
 * may not overlap any other acl allocation or registration. */
AH_API aclError aclrtHostRegister(void *ptr, uint64_t size, aclrtHostRegisterType type,
                                  void **devPtr)
{
    const char *api = "aclrtHostRegister";
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc != ACL_SUCCESS)
        return rc;
    if (!devPtr || !ptr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: %s is NULL", api, ptr ? "devPtr" : "ptr");
    *devPtr = NULL;
    if (type != ACL_HOST_REGISTER_MAPPED)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: type %d is not ACL_HOST_REGISTER_MAPPED", api,
                        (int)type);
    if ((uintptr_t)ptr % 4096)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: ptr %p is not 4 KiB page aligned", api, ptr);
    if (size == 0 || size > UINTPTR_MAX - (uintptr_t)ptr)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: size %" PRIu64 " is %s", api, size,
                        size ? "past the end of the address space" : "0");
    if ((rc = ah_capture_check_unsafe(api, device)) != ACL_SUCCESS)
        return rc;
    block b = {.base = (uintptr_t)ptr, .size = (size_t)size, .span = (size_t)size,
               .device = device, .kind = AH_MEM_REGISTERED};
    rc = insert_unshared(api, &b, ", released but still used by queued work (synchronize first)");
    if (rc == ACL_SUCCESS)
        *devPtr = ptr; /* the device's view of host memory is the host's address */
    return rc;
}

AH_API aclError aclrtHostUnregister(void *ptr)
{
    return release("aclrtHostUnregister", ptr, AH_MEM_REGISTERED, false);
}

/* ---- VMM mappings (vmm.c) ---------------------------------------------------------------------- */

aclError ah_mem_vmm_register(const char *api, void *base, size_t size, int device,
                             uint64_t reservation)
{
    block b = {.base = (uintptr_t)base, .size = size, .span = size, .device = device,
               .kind = AH_MEM_DEVICE, .mapped = true, .vmm_res = reservation};
    return insert_unshared(api, &b, ", unmapped but still used by queued work (synchronize first)");
}

/* Removes a mapping that was never used (aclrtMapMem failed after registering it). */
void ah_mem_vmm_forget(void *base)
{
    pthread_rwlock_wrlock(&g_mem_lock);
    long i = find_block((uintptr_t)base, NULL);
    if (i >= 0 && g_blocks[i].base == (uintptr_t)base && g_blocks[i].vmm_res) {
        remove_block((size_t)i);
        atomic_fetch_add(&g_release_epoch, 1);
    }
    pthread_rwlock_unlock(&g_mem_lock);
}

aclError ah_mem_vmm_unregister(const char *api, void *base)
{
    return release(api, base, AH_MEM_DEVICE, true);
}

void ah_mem_vmm_release_range(void *base, size_t size)
{
    ah_mem_collect();
    uintptr_t p = (uintptr_t)base, end = p + size;
    pthread_rwlock_wrlock(&g_mem_lock);
    size_t at = 0;
    find_block(p, &at);
    if (at > 0 && g_blocks[at - 1].base + g_blocks[at - 1].span > p)
        at--;
    uintptr_t cursor = p;
    for (size_t j = at; j < g_n_blocks && g_blocks[j].base < end; j++) {
        block *b = &g_blocks[j];
        if (!b->vmm_res)
            continue;
        b->vmm_orphan = true; /* still quarantined: munmap it when it is collected */
        if (b->base > cursor)
            munmap((void *)cursor, b->base - cursor);
        cursor = b->base + b->span;
    }
    if (cursor < end)
        munmap((void *)cursor, end - cursor);
    atomic_fetch_add(&g_release_epoch, 1);
    pthread_rwlock_unlock(&g_mem_lock);
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
    atomic_fetch_add(&g_release_epoch, 1);
    pthread_rwlock_unlock(&g_mem_lock);
    pthread_mutex_lock(&g_ring_lock);
    g_ring_next = g_ring_count = 0;
    pthread_mutex_unlock(&g_ring_lock);
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
