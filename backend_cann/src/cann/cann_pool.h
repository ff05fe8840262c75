/* cann_pool.h - internals shared by the pool implementations (cann_pool.c, pool_legacy.c,
 * pool_vmm.c). The interface the backend and the ops see is in cann_common.h. */
#ifndef CANN_POOL_H
#define CANN_POOL_H

#include "cann/cann_common.h"

/* Request sizes are padded to the buffer alignment; 0 takes one unit. */
static inline size_t cann_pool_pad(size_t size) {
    if (size == 0) size = 1;
    return (size + CANN_BUFFER_ALIGNMENT - 1) / CANN_BUFFER_ALIGNMENT * CANN_BUFFER_ALIGNMENT;
}

/* The fixed slot table (GGML_CANN_MEM_POOL=leg). */
clm_status cann_pool_legacy_create(int device, aclrtStream stream, cann_pool **out);
/* The VMM pool; CLM_ERR_UNSUPPORTED (no message) when the device reports no allocation
 * granularity. */
clm_status cann_pool_vmm_create(int device, aclrtStream stream, cann_pool **out);

#endif /* CANN_POOL_H */
