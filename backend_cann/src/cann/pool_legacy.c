/* pool_legacy.c - the slot pool (GGML_CANN_MEM_POOL=leg): a fixed table of device buffers, each
 * from its own aclrtMalloc, reused across requests.
 *
 * Policies (docs/memory_pools.md):
 * - Sizes are padded to CANN_BUFFER_ALIGNMENT (128 B); a 0-byte request takes 128 B.
 * - Reuse is BEST fit within a margin: the smallest cached free buffer with size >= request and
 *   size - request <= LEG_REUSE_MARGIN, the lowest slot index on ties. Best fit keeps large buffers
 *   for large requests, and the choice depends only on the table, so the same request sequence
 *   from the same table state gets the same addresses.
 * - A miss allocates exactly the padded size into an empty slot.
 * - Frees may come in any order: the buffer goes back to the table, cached.
 * - Release: free buffers are only returned to the device when nothing queued can use them, i.e.
 *   in `synchronized` (after aclrtSynchronizeStream) or after the pool synchronized the stream
 *   itself. At each synchronize, a free buffer idle for more than LEG_IDLE_SYNCS synchronizes is
 *   released, and free buffers are released (largest first) while the cached free bytes exceed
 *   LEG_CACHE_CAP.
 * - When no empty slot is left or aclrtMalloc fails, the pool synchronizes its stream, releases
 *   every cached free buffer and retries. A table whose 256 slots all hold live buffers is an
 *   error status (CLM_ERR_OUT_OF_MEMORY with a message); so is device memory exhaustion. Both are
 *   errors, never aborts. During graph capture nothing is allocated or released: a miss is an
 *   error there (the capture falls back to eager execution).
 */
#include <stdlib.h>
#include <string.h>

#include "cann/cann_pool.h"

#define LEG_SLOTS 256
#define LEG_REUSE_MARGIN ((size_t)4 << 20)   /* as upstream: reuse a buffer at most 4 MiB larger */
#define LEG_IDLE_SYNCS 8                     /* free buffers idle this many synchronizes are released */
#define LEG_CACHE_CAP ((size_t)1 << 30)      /* cached free bytes kept across a synchronize */

typedef struct leg_slot {
    void *ptr;            /* NULL: empty slot */
    size_t size;
    bool used;
    int idle_syncs;       /* synchronizes since it was freed */
} leg_slot;

typedef struct leg_pool {
    cann_pool base;
    leg_slot slots[LEG_SLOTS];
    int n_slots;          /* slots holding a buffer (used or cached) */
    size_t in_use, peak, held;
} leg_pool;

static void leg_release(leg_pool *p, leg_slot *s) {
    aclrtFree(s->ptr);
    p->held -= s->size;
    p->n_slots--;
    *s = (leg_slot){0};
}

/* Releases every free buffer after synchronizing the stream (nothing queued can use them then).
 * Not during capture. */
static clm_status leg_reclaim(leg_pool *p) {
    if (p->base.capturing) return CLM_ERR_STATE;
    if (p->base.stream != NULL) CANN_ACL(aclrtSynchronizeStream(p->base.stream));
    for (int i = 0; i < LEG_SLOTS; i++) {
        if (p->slots[i].ptr != NULL && !p->slots[i].used) leg_release(p, &p->slots[i]);
    }
    return CLM_OK;
}

static leg_slot *leg_empty_slot(leg_pool *p) {
    for (int i = 0; i < LEG_SLOTS; i++) {
        if (p->slots[i].ptr == NULL) return &p->slots[i];
    }
    return NULL;
}

static clm_status leg_alloc(cann_pool *pool, size_t size, void **ptr, size_t *actual_size) {
    leg_pool *p = (leg_pool *)pool;
    size = cann_pool_pad(size);
    leg_slot *best = NULL;
    for (int i = 0; i < LEG_SLOTS; i++) {
        leg_slot *s = &p->slots[i];
        if (s->ptr == NULL || s->used || s->size < size || s->size - size > LEG_REUSE_MARGIN) continue;
        if (best == NULL || s->size < best->size) best = s;
        if (s->size == size) break;
    }
    if (best == NULL) {
        if (p->base.capturing) {
            return clm_error(CLM_ERR_STATE, "slot pool: a %zu-byte request needs a new device buffer during "
                             "graph capture", size);
        }
        leg_slot *slot = leg_empty_slot(p);
        if (slot == NULL) {
            clm_status st = leg_reclaim(p);
            if (st != CLM_OK) return st;
            slot = leg_empty_slot(p);
            if (slot == NULL) {
                return clm_error(CLM_ERR_OUT_OF_MEMORY, "slot pool: all %d slots hold live buffers (%zu bytes "
                                 "in use); cannot record a %zu-byte buffer", LEG_SLOTS, p->in_use, size);
            }
        }
        void *mem = NULL;
        aclError err = aclrtMalloc(&mem, size, ACL_MEM_MALLOC_HUGE_FIRST);
        if (err != ACL_SUCCESS && p->n_slots > 0) {
            const char *msg = aclGetRecentErrMsg();   /* drop it: retry after releasing the cache */
            (void)msg;
            clm_status st = leg_reclaim(p);
            if (st != CLM_OK) return st;
            err = aclrtMalloc(&mem, size, ACL_MEM_MALLOC_HUGE_FIRST);
        }
        if (err != ACL_SUCCESS) {
            const char *msg = aclGetRecentErrMsg();
            return clm_error(CLM_ERR_OUT_OF_MEMORY, "slot pool: aclrtMalloc of %zu bytes failed (error %d, %zu "
                             "bytes in use): %s", size, (int)err, p->in_use, msg ? msg : "");
        }
        *slot = (leg_slot){.ptr = mem, .size = size};
        p->n_slots++;
        p->held += size;
        best = slot;
    }
    best->used = true;
    best->idle_syncs = 0;
    p->in_use += best->size;
    if (p->in_use > p->peak) p->peak = p->in_use;
    *ptr = best->ptr;
    *actual_size = best->size;
    return CLM_OK;
}

static clm_status leg_free(cann_pool *pool, void *ptr, size_t size) {
    leg_pool *p = (leg_pool *)pool;
    (void)size;   /* the slot knows the size */
    for (int i = 0; i < LEG_SLOTS; i++) {
        leg_slot *s = &p->slots[i];
        if (s->ptr != ptr) continue;
        if (!s->used) return clm_error(CLM_ERR_INVALID_ARG, "slot pool: double free of %p", ptr);
        s->used = false;
        s->idle_syncs = 0;
        p->in_use -= s->size;
        return CLM_OK;
    }
    return clm_error(CLM_ERR_INVALID_ARG, "slot pool: %p was not allocated from this pool", ptr);
}

static void leg_synchronized(cann_pool *pool) {
    leg_pool *p = (leg_pool *)pool;
    size_t cached = 0;
    for (int i = 0; i < LEG_SLOTS; i++) {
        leg_slot *s = &p->slots[i];
        if (s->ptr == NULL || s->used) continue;
        if (++s->idle_syncs > LEG_IDLE_SYNCS) leg_release(p, s);
        else cached += s->size;
    }
    while (cached > LEG_CACHE_CAP) {
        leg_slot *largest = NULL;
        for (int i = 0; i < LEG_SLOTS; i++) {
            leg_slot *s = &p->slots[i];
            if (s->ptr != NULL && !s->used && (largest == NULL || s->size > largest->size)) largest = s;
        }
        cached -= largest->size;
        leg_release(p, largest);
    }
}

static void leg_stats(const cann_pool *pool, clm_cann_stats *out) {
    const leg_pool *p = (const leg_pool *)pool;
    out->pool_kind = CLM_POOL_LEGACY;
    out->pool_in_use = p->in_use;
    out->pool_peak = p->peak;
    out->pool_reserved = p->held;
    out->pool_mapped = p->held;
    out->pool_slots_used = p->n_slots;
    out->pool_slots_total = LEG_SLOTS;
}

static void leg_destroy(cann_pool *pool) {
    leg_pool *p = (leg_pool *)pool;
    for (int i = 0; i < LEG_SLOTS; i++) {
        if (p->slots[i].ptr != NULL) leg_release(p, &p->slots[i]);
    }
    free(p);
}

clm_status cann_pool_legacy_create(int device, aclrtStream stream, cann_pool **out) {
    leg_pool *p = calloc(1, sizeof(*p));
    if (p == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "slot pool: out of host memory");
    p->base.iface = (struct cann_pool_i){leg_alloc, leg_free, leg_synchronized, leg_stats, leg_destroy};
    p->base.device = device;
    p->base.stream = stream;
    *out = &p->base;
    return CLM_OK;
}
