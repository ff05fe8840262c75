/* cann_pool.c - the backend's temporary-memory pool: choosing the kind and the temporaries API
 * the ops use (the public statistics / pool test entry points are in cann_backend.c, which owns
 * the backend context and its counters). The pools themselves are in
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
