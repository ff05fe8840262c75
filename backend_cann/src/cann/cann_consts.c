/* cann_consts.c - the backend's constant cache, as ggml's CANN backend context keeps its own: the
 * F32 ones (RMS_NORM gamma), small F32 tables cached by content (ROPE angle factors, ALiBi slopes)
 * and the ROPE sin/cos slots. The ops' prepare hooks create everything here before a graph runs
 * (so before any capture: inside a captured graph_compute no device allocation, host copy or
 * synchronization may happen); compute finds it. Releasing device memory that a captured graph
 * may address drops the capture cache first (docs/memory_pools.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

#define CONSTS_MAX_TABLES 16
#define CONSTS_MAX_SLOTS 4

typedef struct const_table {
    int64_t n;
    float *host;   /* the values, to compare */
    void *dev;
} const_table;

typedef struct const_slot {
    unsigned char key[CANN_CONST_KEY_MAX];
    size_t key_size;
    int64_t epoch;     /* graph in which the contents were built; stale otherwise */
    void *dev;
    size_t capacity;
} const_slot;

struct cann_consts {
    void *ones;
    int64_t n_ones;
    const_table tables[CONSTS_MAX_TABLES];
    int n_tables;
    const_slot slots[CONSTS_MAX_SLOTS];
    int next_slot;     /* round-robin replacement */
    int64_t epoch;
};

static clm_status consts_of(cann_backend_ctx *ctx, struct cann_consts **out) {
    if (ctx->consts == NULL) {
        ctx->consts = calloc(1, sizeof(*ctx->consts));
        if (ctx->consts == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
        ctx->consts->epoch = 1;
    }
    *out = ctx->consts;
    return CLM_OK;
}

/* The stream is idle. Captured graphs may address these tables: drop them first. */
static void free_tables(cann_backend_ctx *ctx, struct cann_consts *c) {
    cann_graph_cache_invalidate(ctx);
    for (int i = 0; i < c->n_tables; i++) {
        aclrtFree(c->tables[i].dev);
        free(c->tables[i].host);
    }
    c->n_tables = 0;
}

void cann_consts_free(cann_backend_ctx *ctx) {
    struct cann_consts *c = ctx->consts;
    if (c == NULL) return;
    aclrtSynchronizeStream(ctx->stream);
    if (c->ones != NULL) aclrtFree(c->ones);
    free_tables(ctx, c);
    for (int i = 0; i < CONSTS_MAX_SLOTS; i++) {
        if (c->slots[i].dev != NULL) aclrtFree(c->slots[i].dev);
    }
    aclGetRecentErrMsg();
    free(c);
    ctx->consts = NULL;
}

/* Device memory for a cache (queued work may still read what it replaces: drain first; captured
 * graphs may address it: drop them). */
static clm_status replace_buffer(cann_backend_ctx *ctx, void **ptr, size_t size) {
    if (*ptr != NULL) {
        CANN_ACL(aclrtSynchronizeStream(ctx->stream));
        cann_graph_cache_invalidate(ctx);
        CANN_ACL(aclrtFree(*ptr));
        *ptr = NULL;
    }
    CANN_ACL(aclrtMalloc(ptr, size, ACL_MEM_MALLOC_HUGE_FIRST));
    return CLM_OK;
}

clm_status cann_consts_ones(cann_backend_ctx *ctx, int64_t n, void **out) {
    struct cann_consts *c = NULL;
    clm_status st = consts_of(ctx, &c);
    if (st != CLM_OK) return st;
    if (c->n_ones < n) {
        int64_t len = n < 1024 ? 1024 : n;
        float *host = malloc((size_t)len * sizeof(float));
        if (host == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
        for (int64_t i = 0; i < len; i++) host[i] = 1.0f;
        c->n_ones = 0;
        st = replace_buffer(ctx, &c->ones, (size_t)len * sizeof(float));
        if (st == CLM_OK) {
            aclError err = aclrtMemcpy(c->ones, (size_t)len * sizeof(float), host, (size_t)len * sizeof(float),
                                       ACL_MEMCPY_HOST_TO_DEVICE);
            if (err != ACL_SUCCESS) st = cann_acl_error(err, "aclrtMemcpy (ones)");
            else c->n_ones = len;
        }
        free(host);
        if (st != CLM_OK) return st;
    }
    *out = c->ones;
    return CLM_OK;
}

clm_status cann_consts_table(cann_backend_ctx *ctx, const float *values, int64_t n, void **out) {
    struct cann_consts *c = NULL;
    clm_status st = consts_of(ctx, &c);
    if (st != CLM_OK) return st;
    size_t bytes = (size_t)n * sizeof(float);
    for (int i = 0; i < c->n_tables; i++) {
        if (c->tables[i].n == n && memcmp(c->tables[i].host, values, bytes) == 0) {
            *out = c->tables[i].dev;
            return CLM_OK;
        }
    }
    if (c->n_tables == CONSTS_MAX_TABLES) {
        CANN_ACL(aclrtSynchronizeStream(ctx->stream));
        free_tables(ctx, c);
    }
    const_table *t = &c->tables[c->n_tables];
    *t = (const_table){.n = n, .host = malloc(bytes > 0 ? bytes : 1)};
    if (t->host == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    memcpy(t->host, values, bytes);
    aclError err = aclrtMalloc(&t->dev, bytes > 0 ? bytes : 1, ACL_MEM_MALLOC_HUGE_FIRST);
    if (err == ACL_SUCCESS) err = aclrtMemcpy(t->dev, bytes, values, bytes, ACL_MEMCPY_HOST_TO_DEVICE);
    if (err != ACL_SUCCESS) {
        if (t->dev != NULL) aclrtFree(t->dev);
        free(t->host);
        return cann_acl_error(err, "aclrtMalloc / aclrtMemcpy (constant table)");
    }
    c->n_tables++;
    *out = t->dev;
    return CLM_OK;
}

static float alibi_slope(float max_bias, int64_t n_head, int64_t h) {
    int64_t n_head_log2 = 1;
    while (n_head_log2 * 2 <= n_head) n_head_log2 *= 2;
    float m0 = powf(2.0f, -(max_bias) / (float)n_head_log2);
    float m1 = powf(2.0f, -(max_bias / 2.0f) / (float)n_head_log2);
    return h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

clm_status cann_consts_alibi_slopes(cann_backend_ctx *ctx, float max_bias, int64_t n_head, void **out) {
    float table[CANN_MAX_ALIBI_HEADS];
    if (n_head > CANN_MAX_ALIBI_HEADS) {
        return clm_error(CLM_ERR_UNSUPPORTED, "ALiBi with %lld heads (at most %d)", (long long)n_head,
                         CANN_MAX_ALIBI_HEADS);
    }
    for (int64_t h = 0; h < n_head; h++) table[h] = alibi_slope(max_bias, n_head, h);
    return cann_consts_table(ctx, table, n_head, out);
}

clm_status cann_consts_prepare_alibi(cann_backend_ctx *ctx, const clm_tensor *node, const clm_tensor *mask) {
    float max_bias = clm_get_op_param_f32(node, 1);
    if (mask == NULL || !(max_bias > 0.0f)) return CLM_OK;
    void *unused = NULL;
    return cann_consts_alibi_slopes(ctx, max_bias, node->src[0]->ne[2], &unused);
}

/* ---- per-graph slots (ROPE sin/cos) ----------------------------------------------------------- */
clm_status cann_consts_graph_prepare(cann_backend_ctx *ctx) {
    struct cann_consts *c = NULL;
    clm_status st = consts_of(ctx, &c);
    if (st == CLM_OK) c->epoch++;
    return st;
}

void cann_consts_graph_begin(cann_backend_ctx *ctx) {
    if (ctx->consts != NULL) ctx->consts->epoch++;
}

clm_status cann_consts_reserve_slots(cann_backend_ctx *ctx, size_t bytes) {
    struct cann_consts *c = NULL;
    clm_status st = consts_of(ctx, &c);
    for (int i = 0; i < CONSTS_MAX_SLOTS && st == CLM_OK && bytes > 0; i++) {
        const_slot *e = &c->slots[i];
        if (e->capacity < bytes) {
            e->capacity = 0;
            e->epoch = 0;
            if ((st = replace_buffer(ctx, &e->dev, bytes)) == CLM_OK) e->capacity = bytes;
        }
    }
    return st;
}

clm_status cann_consts_slot(cann_backend_ctx *ctx, const void *key, size_t key_size, size_t bytes, void **out,
                            bool *fresh) {
    struct cann_consts *c = NULL;
    clm_status st = consts_of(ctx, &c);
    if (st != CLM_OK) return st;
    if (key_size > CANN_CONST_KEY_MAX) return clm_error(CLM_ERR_INVALID_ARG, "constant slot key too long");
    for (int i = 0; i < CONSTS_MAX_SLOTS; i++) {
        const_slot *e = &c->slots[i];
        if (e->dev != NULL && e->epoch == c->epoch && e->key_size == key_size && memcmp(e->key, key, key_size) == 0) {
            *out = e->dev;
            *fresh = true;
            return CLM_OK;
        }
    }
    const_slot *e = &c->slots[c->next_slot];
    c->next_slot = (c->next_slot + 1) % CONSTS_MAX_SLOTS;
    e->epoch = 0;
    if (e->capacity < bytes) {
        e->capacity = 0;
        if ((st = replace_buffer(ctx, &e->dev, bytes)) != CLM_OK) return st;
        e->capacity = bytes;
    }
    *out = e->dev;
    *fresh = false;
    return CLM_OK;
}

void cann_consts_slot_built(cann_backend_ctx *ctx, void *dev, const void *key, size_t key_size) {
    struct cann_consts *c = ctx->consts;
    for (int i = 0; c != NULL && i < CONSTS_MAX_SLOTS; i++) {
        const_slot *e = &c->slots[i];
        if (e->dev != dev) continue;
        memcpy(e->key, key, key_size);
        e->key_size = key_size;
        e->epoch = c->epoch;
        return;
    }
}
