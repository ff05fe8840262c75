/* cann_pool.c - the backend's temporary-memory pool: creation, the temporaries API the ops use,
 * and the public statistics / test entry points.
 *
 * The pool here is the simplest correct one: each request is an aclrtMalloc, and freed blocks
 * are released once the stream has been synchronized. The slot and VMM pools replace it. */
#include <stdlib.h>

#include "cann/cann_common.h"

typedef struct simple_pool {
    cann_pool base;
    void **retired;       /* freed by the ops, still possibly used by queued work */
    size_t n_retired, cap_retired;
    size_t in_use, peak, allocated;
} simple_pool;

static clm_status simple_alloc(cann_pool *pool, size_t size, void **ptr, size_t *actual_size) {
    simple_pool *p = (simple_pool *)pool;
    size = (size + CANN_BUFFER_ALIGNMENT - 1) / CANN_BUFFER_ALIGNMENT * CANN_BUFFER_ALIGNMENT;
    CANN_ACL(aclrtMalloc(ptr, size, ACL_MEM_MALLOC_HUGE_FIRST));
    *actual_size = size;
    p->in_use += size;
    p->allocated += size;
    if (p->in_use > p->peak) p->peak = p->in_use;
    return CLM_OK;
}

static clm_status simple_free(cann_pool *pool, void *ptr, size_t size) {
    simple_pool *p = (simple_pool *)pool;
    if (p->n_retired == p->cap_retired) {
        size_t cap = p->cap_retired ? 2 * p->cap_retired : 16;
        void **retired = realloc(p->retired, cap * sizeof(*retired));
        if (retired == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
        p->retired = retired;
        p->cap_retired = cap;
    }
    p->retired[p->n_retired++] = ptr;
    p->in_use -= size < p->in_use ? size : p->in_use;
    return CLM_OK;
}

static void simple_synchronized(cann_pool *pool) {
    simple_pool *p = (simple_pool *)pool;
    for (size_t i = 0; i < p->n_retired; i++) aclrtFree(p->retired[i]);
    p->n_retired = 0;
    p->allocated = p->in_use;
}

static void simple_stats(const cann_pool *pool, clm_cann_stats *out) {
    const simple_pool *p = (const simple_pool *)pool;
    out->pool_kind = CLM_POOL_LEGACY;
    out->pool_in_use = p->in_use;
    out->pool_peak = p->peak;
    out->pool_mapped = p->allocated;
}

static void simple_destroy(cann_pool *pool) {
    simple_synchronized(pool);
    free(((simple_pool *)pool)->retired);
    free(pool);
}

clm_status cann_pool_create(int device, cann_pool **out) {
    simple_pool *p = calloc(1, sizeof(*p));
    if (p == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    p->base.iface = (struct cann_pool_i){simple_alloc, simple_free, simple_synchronized, simple_stats,
                                         simple_destroy};
    p->base.device = device;
    *out = &p->base;
    return CLM_OK;
}

/* ---- temporaries for the ops ---------------------------------------------------------------- */
clm_status cann_temp_alloc(cann_backend_ctx *ctx, size_t size, cann_temp *out) {
    *out = (cann_temp){.pool = ctx->pool, .ptr = NULL, .size = 0};
    if (size == 0) return CLM_OK;
    return ctx->pool->iface.alloc(ctx->pool, size, &out->ptr, &out->size);
}

void cann_temp_free(cann_temp *temp) {
    if (temp->ptr != NULL) temp->pool->iface.free(temp->pool, temp->ptr, temp->size);
    temp->ptr = NULL;
}

/* ---- public entry points ---------------------------------------------------------------------- */
static cann_backend_ctx *cann_ctx_of(clm_backend *backend) {
    return cann_backend_is_cann(backend) ? backend->context : NULL;
}

clm_status clm_cann_backend_stats(clm_backend *backend, clm_cann_stats *out) {
    CLM_CHECK_ARG(out != NULL, "clm_cann_backend_stats: out is NULL");
    cann_backend_ctx *ctx = cann_ctx_of(backend);
    CLM_CHECK_ARG(ctx != NULL, "clm_cann_backend_stats: not a CANN backend");
    *out = (clm_cann_stats){0};
    ctx->pool->iface.stats(ctx->pool, out);
    out->graph_captures = ctx->graph_captures;
    out->graph_replays = ctx->graph_replays;
    return CLM_OK;
}

clm_status clm_cann_pool_alloc(clm_backend *backend, size_t size, void **ptr, size_t *actual_size) {
    CLM_CHECK_ARG(ptr != NULL && actual_size != NULL, "clm_cann_pool_alloc: NULL out pointer");
    cann_backend_ctx *ctx = cann_ctx_of(backend);
    CLM_CHECK_ARG(ctx != NULL, "clm_cann_pool_alloc: not a CANN backend");
    CLM_CHECK_ARG(size > 0, "clm_cann_pool_alloc: size must be > 0");
    clm_status st = cann_set_device(ctx->device);
    return st != CLM_OK ? st : ctx->pool->iface.alloc(ctx->pool, size, ptr, actual_size);
}

clm_status clm_cann_pool_free(clm_backend *backend, void *ptr, size_t size) {
    cann_backend_ctx *ctx = cann_ctx_of(backend);
    CLM_CHECK_ARG(ctx != NULL, "clm_cann_pool_free: not a CANN backend");
    CLM_CHECK_ARG(ptr != NULL, "clm_cann_pool_free: NULL pointer");
    clm_status st = cann_set_device(ctx->device);
    return st != CLM_OK ? st : ctx->pool->iface.free(ctx->pool, ptr, size);
}
