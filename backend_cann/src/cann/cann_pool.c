/* cann_pool.c - the backend's temporary-memory pool: choosing the kind, the temporaries API the
 * ops use, and the public statistics / test entry points. The pools themselves are in
 * pool_legacy.c (slot table) and pool_vmm.c (virtual range grown by mapping physical chunks);
 * docs/memory_pools.md describes both. */
#include <stdlib.h>
#include <string.h>

#include "cann/cann_pool.h"

/* GGML_CANN_MEM_POOL: "leg" picks the slot pool; anything else (or unset) the VMM pool when the
 * device reports an allocation granularity, else the slot pool. */
clm_status cann_pool_create(int device, aclrtStream stream, cann_pool **out) {
    const char *kind = getenv("GGML_CANN_MEM_POOL");
    if (kind == NULL || strcmp(kind, "leg") != 0) {
        clm_status st = cann_pool_vmm_create(device, stream, out);
        if (st != CLM_ERR_UNSUPPORTED) return st;
        clm_clear_error();
    }
    return cann_pool_legacy_create(device, stream, out);
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
    out->graph_cached = cann_graph_cache_size(ctx);
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
