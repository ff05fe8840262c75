/* cann_backend.c - a CANN backend is one stream on one device: async copies, synchronize,
 * events, graph_compute dispatching each node to its op family (after the ops' prepare hooks),
 * and the public statistics and pool test entry points. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cann/cann_common.h"

static cann_backend_ctx *backend_ctx(const clm_backend *backend) { return backend->context; }

static const char *backend_name(const clm_backend *backend) { return backend_ctx(backend)->name; }

bool cann_backend_is_cann(const clm_backend *backend) {
    return backend != NULL && backend->iface.get_name == backend_name;
}

static clm_status backend_synchronize(clm_backend *backend) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    aclError err = aclrtSynchronizeStream(ctx->stream);
    if (err != ACL_SUCCESS) return cann_acl_error(err, "aclrtSynchronizeStream");
    ctx->pool->iface.synchronized(ctx->pool);
    return CLM_OK;
}

static void backend_free(clm_backend *backend) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    if (cann_set_device(ctx->device) == CLM_OK) {
        aclrtSynchronizeStream(ctx->stream);
        cann_comm_free(ctx);
        cann_profile_free(ctx);
        cann_graph_cache_free(ctx);
        cann_consts_free(ctx);
        ctx->pool->iface.destroy(ctx->pool);
        aclrtDestroyStream(ctx->stream);
        aclGetRecentErrMsg();
    }
    free(ctx);
    free(backend);
}

static clm_status backend_set_tensor_async(clm_backend *backend, clm_tensor *tensor, const void *data,
                                           size_t offset, size_t size) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemcpyAsync((char *)tensor->data + offset, size, data, size, ACL_MEMCPY_HOST_TO_DEVICE,
                              ctx->stream));
    return CLM_OK;
}

static clm_status backend_get_tensor_async(clm_backend *backend, const clm_tensor *tensor, void *data,
                                           size_t offset, size_t size) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtMemcpyAsync(data, size, (const char *)tensor->data + offset, size, ACL_MEMCPY_DEVICE_TO_HOST,
                              ctx->stream));
    return CLM_OK;
}

/* Device-to-device copy ordered on the source stream; when the destination is another backend,
 * the source stream is synchronized so the destination's later work sees the data (as ggml's
 * CANN backend does). */
static clm_status backend_cpy_tensor_async(clm_backend *backend_src, clm_backend *backend_dst,
                                           const clm_tensor *src, clm_tensor *dst) {
    if (!cann_backend_is_cann(backend_src) || !cann_backend_is_cann(backend_dst) ||
        !cann_buffer_is_device(src->buffer) || !cann_buffer_is_device(dst->buffer)) {
        return CLM_ERR_UNSUPPORTED;
    }
    cann_backend_ctx *ctx_src = backend_ctx(backend_src), *ctx_dst = backend_ctx(backend_dst);
    /* An async copy within a device needs 64-byte aligned addresses; the caller falls back to a
     * synchronous copy (aclrtMemcpy has no such rule). */
    if (ctx_src->device == ctx_dst->device && !cann_d2d_async_aligned(dst->data, src->data)) {
        return CLM_ERR_UNSUPPORTED;
    }
    clm_status st;
    if (ctx_src->device != ctx_dst->device) {
        int32_t can_access = 0;
        CANN_ACL(aclrtDeviceCanAccessPeer(&can_access, ctx_src->device, ctx_dst->device));
        if (!can_access) return CLM_ERR_UNSUPPORTED;
        if ((st = cann_set_device(ctx_dst->device)) != CLM_OK) return st;
        if (aclrtDeviceEnablePeerAccess(ctx_src->device, 0) != ACL_SUCCESS) aclGetRecentErrMsg();
    }
    if ((st = cann_set_device(ctx_src->device)) != CLM_OK) return st;
    if (ctx_src->device != ctx_dst->device && aclrtDeviceEnablePeerAccess(ctx_dst->device, 0) != ACL_SUCCESS) {
        aclGetRecentErrMsg();
    }
    size_t size = clm_nbytes(src);
    CANN_ACL(aclrtMemcpyAsync(dst->data, size, src->data, size, ACL_MEMCPY_DEVICE_TO_DEVICE, ctx_src->stream));
    if (backend_src != backend_dst) return backend_synchronize(backend_src);
    return CLM_OK;
}

static clm_status backend_event_record(clm_backend *backend, clm_event *event) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtRecordEvent(event->context, ctx->stream));
    return CLM_OK;
}

static clm_status backend_event_wait(clm_backend *backend, clm_event *event) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtStreamWaitEvent(ctx->stream, event->context));
    return CLM_OK;
}

/* ---- op dispatch ------------------------------------------------------------------------------ */
static bool node_is_allocated(const clm_tensor *t) { return t->data != NULL && t->buffer != NULL; }

/* Each compute op: whether this backend runs it exactly, what it needs built before the graph
 * runs (optional; see cann_common.h), and how it runs. One op family per file. */
typedef struct op_entry {
    bool (*supports)(const clm_tensor *op);
    clm_status (*prepare)(cann_backend_ctx *ctx, const clm_tensor *node, cann_prepare_plan *plan);
    clm_status (*compute)(cann_backend_ctx *ctx, clm_tensor *dst);
} op_entry;

static const op_entry op_table[CLM_OP_COUNT] = {
    [CLM_OP_ADD] = {cann_supports_binary, NULL, cann_op_binary},
    [CLM_OP_MUL] = {cann_supports_binary, NULL, cann_op_binary},
    [CLM_OP_CPY] = {cann_supports_cpy, NULL, cann_op_cpy},
    [CLM_OP_DUP] = {cann_supports_cpy, NULL, cann_op_cpy},
    [CLM_OP_CONT] = {cann_supports_cpy, NULL, cann_op_cpy},
    [CLM_OP_MUL_MAT] = {cann_supports_mul_mat, NULL, cann_op_mul_mat},
    [CLM_OP_MUL_MAT_ID] = {cann_supports_mul_mat_id, NULL, cann_op_mul_mat_id},
    [CLM_OP_GET_ROWS] = {cann_supports_get_rows, NULL, cann_op_get_rows},
    [CLM_OP_SET_ROWS] = {cann_supports_set_rows, NULL, cann_op_set_rows},
    [CLM_OP_RMS_NORM] = {cann_supports_rms_norm, cann_prepare_rms_norm, cann_op_rms_norm},
    [CLM_OP_ROPE] = {cann_supports_rope, cann_prepare_rope, cann_op_rope},
    [CLM_OP_SOFT_MAX] = {cann_supports_soft_max, cann_prepare_soft_max, cann_op_soft_max},
    [CLM_OP_FLASH_ATTN_EXT] = {cann_supports_flash_attn_ext, cann_prepare_flash_attn_ext, cann_op_flash_attn_ext},
    [CLM_OP_SCALE] = {cann_supports_scale, NULL, cann_op_scale},
    [CLM_OP_UNARY] = {cann_supports_unary, NULL, cann_op_unary},
    [CLM_OP_GLU] = {cann_supports_glu, NULL, cann_op_glu},
    [CLM_OP_ARGMAX] = {cann_supports_argmax, NULL, cann_op_argmax},
    [CLM_OP_ARGSORT] = {cann_supports_argsort, NULL, cann_op_argsort},
    [CLM_OP_SUM_ROWS] = {cann_supports_sum_rows, NULL, cann_op_sum_rows},
    [CLM_OP_CLAMP] = {cann_supports_clamp, NULL, cann_op_clamp},
    [CLM_OP_DIV] = {cann_supports_binary, NULL, cann_op_binary},
    [CLM_OP_ALL_REDUCE] = {cann_supports_comm, NULL, cann_op_comm},
    [CLM_OP_ALL_GATHER] = {cann_supports_comm, NULL, cann_op_comm},
};

bool cann_supports_op(clm_device *dev, const clm_tensor *op) {
    if (op->op == CLM_OP_NONE || clm_is_view_op(op->op)) return true;
    if (op->op < 0 || op->op >= CLM_OP_COUNT || op_table[op->op].supports == NULL) return false;
    return op_table[op->op].supports(op);
}

static clm_status compute_node(cann_backend_ctx *ctx, clm_tensor *node) {
    const op_entry *entry = (node->op > 0 && node->op < CLM_OP_COUNT) ? &op_table[node->op] : NULL;
    if (entry == NULL || entry->compute == NULL) {
        return clm_error(CLM_ERR_UNSUPPORTED, "op %s is not implemented on CANN", clm_op_desc(node));
    }
    return entry->compute(ctx, node);
}

/* ---- shared activation casts ------------------------------------------------------------------ */
#define ACT_SHARE_WINDOW 64   /* nodes looked ahead for another product of the same activations */

static bool writes_into(const clm_tensor *node, const clm_tensor *t) {
    if (node->op == CLM_OP_NONE || clm_is_view_op(node->op) || node->data == NULL || t->data == NULL) return false;
    const char *a = node->data, *b = t->data;
    return a < b + clm_nbytes(t) && b < a + clm_nbytes(node);
}

/* Before node i (a product that casts its activations x to `type`): the last later node within
 * the window that casts the same x to the same type, with no node in between writing into x
 * (memory reuse, an in-place op); 0 when there is none. */
static size_t last_sharer(const clm_graph *graph, size_t i, const clm_tensor *x, int32_t type) {
    size_t n = clm_graph_n_nodes(graph), last = 0;
    for (size_t k = i; k < n && k <= i + ACT_SHARE_WINDOW; k++) {
        const clm_tensor *node = clm_graph_node(graph, k);
        int32_t t;
        if (k > i && node->src[1] == x && cann_mul_mat_casts_src1(node, &t) && t == type) last = k;
        if (writes_into(node, x)) break;   /* after it reads x: later products see other values */
    }
    return last;
}

static void act_release(cann_backend_ctx *ctx) {
    cann_temp_free(&ctx->act.copy);
    ctx->act = (cann_activation_copy){0};
}

/* Before computing node i: drop the kept copy once its last user has run, and ask for this
 * node's cast to be kept when a later product shares it. The kept copy is the newest pool block
 * between nodes (each op frees its own temporaries), so the pool's LIFO order holds. */
static void act_before(cann_backend_ctx *ctx, const clm_graph *graph, size_t i, const clm_tensor *node) {
    cann_activation_copy *act = &ctx->act;
    if ((act->copy.ptr != NULL || act->keep) && i > act->until) act_release(ctx);
    int32_t type;
    if (!cann_mul_mat_casts_src1(node, &type)) return;
    const clm_tensor *x = node->src[1];
    if ((act->copy.ptr != NULL || act->keep) && act->src == x && act->type == type) return;
    size_t until = last_sharer(graph, i, x, type);
    if (until == 0) return;
    act_release(ctx);
    *act = (cann_activation_copy){.src = x, .type = type, .keep = true, .until = until};
}

static clm_status run_nodes_in_order(cann_backend_ctx *ctx, clm_graph *graph);

/* Every node in order (run_nodes_in_order); the shared cast is released at the end, also when a
 * node fails. */
static clm_status run_nodes(cann_backend_ctx *ctx, clm_graph *graph) {
    act_release(ctx);
    clm_status st = run_nodes_in_order(ctx, graph);
    act_release(ctx);
    return st;
}

/* Every node in order, each dispatched to its op family. Empty nodes have nothing to compute and
 * are skipped, as ggml does (some aclnn ops, e.g. SwiGlu, refuse empty tensors). */
static clm_status run_nodes_in_order(cann_backend_ctx *ctx, clm_graph *graph) {
    clm_status st;
    for (size_t i = 0; i < clm_graph_n_nodes(graph); i++) {
        clm_tensor *node = clm_graph_node(graph, i);
        if (node->op == CLM_OP_NONE || clm_is_view_op(node->op) || clm_nelements(node) == 0) continue;
        if (!node_is_allocated(node)) {
            return clm_error(CLM_ERR_INVALID_ARG, "%s: node %zu '%s' (%s) has no memory", ctx->name, i, node->name,
                             clm_op_desc(node));
        }
        for (int s = 0; s < CLM_MAX_SRC; s++) {
            if (node->src[s] != NULL && !node_is_allocated(node->src[s])) {
                return clm_error(CLM_ERR_INVALID_ARG, "%s: source %d '%s' of node '%s' (%s) has no memory", ctx->name,
                                 s, node->src[s]->name, node->name, clm_op_desc(node));
            }
        }
        clm_clear_error();
        /* Fusions only while not profiling per node (the profiler times each node); with an eval
         * callback the scheduler computes one node per graph, so nothing matches then. */
        if (ctx->fusion && ctx->profile == NULL && cann_match_add_rms_norm(graph, i)) {
            clm_tensor *norm = clm_graph_node(graph, i + 1), *mul = clm_graph_node(graph, i + 2);
            bool ready = node_is_allocated(mul);
            for (int s = 0; s < CLM_MAX_SRC; s++) {
                if (mul->src[s] != NULL && mul->src[s] != norm && !node_is_allocated(mul->src[s])) ready = false;
            }
            if (ready) {
                st = cann_op_add_rms_norm(ctx, node, norm, mul);
                if (st != CLM_OK) {
                    char cause[1024];
                    snprintf(cause, sizeof(cause), "%s", clm_last_error());
                    return clm_error(st, "%s: nodes %zu-%zu '%s' (ADD+RMS_NORM+MUL) failed: %s", ctx->name, i, i + 2,
                                     mul->name, cause);
                }
                i += 2;
                continue;
            }
        }
        act_before(ctx, graph, i, node);
        st = compute_node(ctx, node);
        if (st == CLM_OK) st = cann_profile_node_end(ctx, node);
        if (st != CLM_OK) {
            char cause[1024];
            snprintf(cause, sizeof(cause), "%s", clm_last_error());
            return clm_error(st, "%s: node %zu '%s' (%s) failed: %s", ctx->name, i, node->name, clm_op_desc(node),
                             cause);
        }
    }
    return CLM_OK;
}

/* The pre-pass of a graph that runs eagerly: each supported node's prepare hook, then the slots
 * the plan asks for. Nothing here may run inside a capture (allocations, host copies). */
static clm_status prepare_nodes(cann_backend_ctx *ctx, clm_graph *graph) {
    clm_status st = cann_consts_graph_prepare(ctx);
    cann_prepare_plan plan = {0};
    for (size_t i = 0; i < clm_graph_n_nodes(graph) && st == CLM_OK; i++) {
        const clm_tensor *node = clm_graph_node(graph, i);
        if (node->op <= 0 || node->op >= CLM_OP_COUNT) continue;
        const op_entry *entry = &op_table[node->op];
        if (entry->prepare != NULL && entry->supports(node)) st = entry->prepare(ctx, node, &plan);
    }
    return st != CLM_OK ? st : cann_consts_reserve_slots(ctx, plan.slot_bytes);
}

/* Replays of a captured graph skip the pre-pass: its constants exist (releasing one drops the
 * captures) and the replay contains the per-graph rebuilds. */
static clm_status backend_graph_compute(clm_backend *backend, clm_graph *graph) {
    cann_backend_ctx *ctx = backend_ctx(backend);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    if (ctx->graphs != NULL && ctx->profile == NULL) {   /* graph_capture.c; profiling runs eagerly */
        return cann_graph_compute_captured(ctx, graph, prepare_nodes, run_nodes);
    }
    if ((st = prepare_nodes(ctx, graph)) != CLM_OK) return st;
    if ((st = cann_profile_graph_begin(ctx)) != CLM_OK) return st;
    return run_nodes(ctx, graph);
}

static const struct clm_backend_i cann_backend_iface = {
    .get_name = backend_name,
    .free = backend_free,
    .set_tensor_async = backend_set_tensor_async,
    .get_tensor_async = backend_get_tensor_async,
    .cpy_tensor_async = backend_cpy_tensor_async,
    .synchronize = backend_synchronize,
    .graph_compute = backend_graph_compute,
    .event_record = backend_event_record,
    .event_wait = backend_event_wait,
};

/* *out = the index of environment variable `name`'s value among choices (case-insensitive; unset
 * or empty: 0, the default), or CLM_ERR_INVALID_ARG naming the accepted values. */
static clm_status env_choice(const char *name, const char *const *choices, int n, int *out) {
    const char *v = getenv(name);
    *out = 0;
    if (v == NULL || v[0] == '\0') return CLM_OK;
    for (int i = 0; i < n; i++)
        if (strcasecmp(v, choices[i]) == 0) {
            *out = i;
            return CLM_OK;
        }
    char expected[128] = "";
    for (int i = 0; i < n; i++)
        snprintf(expected + strlen(expected), sizeof(expected) - strlen(expected), "%s%s",
                 i == 0 ? "" : i == n - 1 ? " or " : ", ", choices[i]);
    return clm_error(CLM_ERR_INVALID_ARG, "%s=%.32s: expected %s", name, v, expected);
}

clm_status cann_backend_init(clm_device *dev, clm_backend **out) {
    int device = dev->id;
    clm_status st = cann_set_device(device);
    if (st != CLM_OK) return st;
    cann_backend_ctx *ctx = calloc(1, sizeof(*ctx));
    clm_backend *backend = calloc(1, sizeof(*backend));
    if (ctx == NULL || backend == NULL) {
        free(ctx);
        free(backend);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    ctx->device = device;
    const char *fusion = getenv("CANN_LLM_FUSION");
    ctx->fusion = !(fusion != NULL && (strcmp(fusion, "0") == 0 || strcasecmp(fusion, "off") == 0 ||
                                       strcasecmp(fusion, "false") == 0 || strcasecmp(fusion, "no") == 0));
    static const char *const mmid_paths[] = {"auto", "gather", "routed"}; /* cann_mmid_path order */
    static const char *const rope_paths[] = {"auto", "composed"};
    int mmid = 0, rope = 0;
    if ((st = env_choice("CANN_LLM_MUL_MAT_ID", mmid_paths, 3, &mmid)) != CLM_OK ||
        (st = env_choice("CANN_LLM_ROPE", rope_paths, 2, &rope)) != CLM_OK) {
        free(ctx);
        free(backend);
        return st;
    }
    ctx->mul_mat_id_path = (cann_mmid_path)mmid;
    ctx->rope_fused = rope == 0;
    snprintf(ctx->name, sizeof(ctx->name), "CANN%d", device);
    aclError err = aclrtCreateStream(&ctx->stream);
    if (err != ACL_SUCCESS) {
        free(ctx);
        free(backend);
        return cann_acl_error(err, "aclrtCreateStream");
    }
    if ((st = cann_pool_create(device, ctx->stream, &ctx->pool)) != CLM_OK) {
        aclrtDestroyStream(ctx->stream);
        free(ctx);
        free(backend);
        return st;
    }
    if ((st = cann_graph_cache_init(ctx)) != CLM_OK) {
        ctx->pool->iface.destroy(ctx->pool);
        aclrtDestroyStream(ctx->stream);
        free(ctx);
        free(backend);
        return st;
    }
    *backend = (clm_backend){.iface = cann_backend_iface, .device = dev, .context = ctx};
    *out = backend;
    return CLM_OK;
}

/* ---- public entry points: statistics, pool test hooks ---------------------------------------- */
static cann_backend_ctx *cann_ctx_of(clm_backend *backend) {
    return cann_backend_is_cann(backend) ? backend_ctx(backend) : NULL;
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
    out->fused_add_rms_norm = ctx->fused_add_rms_norm;
    out->mul_mat_id_routed = ctx->mul_mat_id_routed;
    out->mul_mat_id_gathered = ctx->mul_mat_id_gathered;
    out->casts_shared = ctx->casts_shared;
    out->rope_fused = ctx->rope_fused_nodes;
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
