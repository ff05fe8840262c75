/* graph_capture.c - ACL graph mode (GGML_CANN_ACL_GRAPH=1, the default): graph_compute replays a
 * captured aclmdlRI when the graph matches one seen before, else runs it eagerly and captures it.
 *
 * Key: per node, op, type, ne, nb, data address, op_params, and for each source slot its presence,
 * type, ne, nb and data address (a view's data is its view_src's data + view_offs, so views are
 * compared by where they point). The key is a flat array of 64-bit words; a 64-bit FNV-1a hash
 * screens candidates and a full comparison decides. First, the entries that last ran as the
 * same clm_graph are compared with the graph node by node without building its key (a kept
 * decode graph: ~40k words compared instead of built, hashed and compared).
 *
 * Cache: GGML_CANN_GRAPH_CACHE_CAPACITY entries (default 12, as upstream), least recently used
 * evicted (stream synchronized, then aclmdlRIDestroy).
 *
 * Miss: the graph runs eagerly first (this computes the results and warms the pool to the
 * graph's peak, so every pool request during capture is a reuse at the same address), then it is
 * captured without being executed (aclmdlRICaptureBegin in THREAD_LOCAL mode, the nodes, End).
 * The eager run is what computes this call's results, so each node still runs exactly once per
 * graph_compute (in-place ops stay correct). If the capture fails (an op allocated device memory,
 * copied from the host or synchronized during capture, or the runtime does not support capture),
 * the entry is remembered as eager-only and a line goes to stderr once per backend.
 *
 * Capture and replay happen only when the pool has nothing in use at the start of the graph, so
 * the pool addresses recorded in a graph are free whenever it replays. Graph mode needs the VMM
 * pool (deterministic addresses, never unmapped); with the slot pool it is off.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

#define GRAPH_CACHE_DEFAULT 12
#define GRAPH_CACHE_MAX 256

typedef struct graph_entry {
    uint64_t hash;
    uint64_t *words;
    size_t n_words;
    aclmdlRI ri;          /* NULL: this graph could not be captured; it runs eagerly */
    uint64_t last_used;
    const clm_graph *graph;   /* the clm_graph it last ran as (a hint for the fast comparison) */
} graph_entry;

struct cann_graph_cache {
    graph_entry *entries;
    int capacity, n;
    uint64_t tick;
    uint64_t *key;        /* scratch key of the graph being computed */
    size_t key_cap, key_len;
    bool warned;
    bool disabled;        /* the runtime refused capture */
};

static bool env_off(const char *value) {
    return value != NULL && (strcmp(value, "0") == 0 || strcmp(value, "off") == 0 || strcmp(value, "false") == 0 ||
                             strcmp(value, "no") == 0 || strcmp(value, "OFF") == 0);
}

clm_status cann_graph_cache_init(cann_backend_ctx *ctx) {
    ctx->graphs = NULL;
    if (env_off(getenv("GGML_CANN_ACL_GRAPH"))) return CLM_OK;
    int capacity = GRAPH_CACHE_DEFAULT;
    const char *cap = getenv("GGML_CANN_GRAPH_CACHE_CAPACITY");
    if (cap != NULL && *cap != '\0') {
        char *end = NULL;
        long v = strtol(cap, &end, 10);
        if (*end != '\0' || v < 1 || v > GRAPH_CACHE_MAX) {
            return clm_error(CLM_ERR_INVALID_ARG, "GGML_CANN_GRAPH_CACHE_CAPACITY='%s' must be an integer in 1..%d",
                             cap, GRAPH_CACHE_MAX);
        }
        capacity = (int)v;
    }
    clm_cann_stats stats = {0};
    ctx->pool->iface.stats(ctx->pool, &stats);
    if (stats.pool_kind != CLM_POOL_VMM) return CLM_OK;   /* the slot pool releases idle buffers */
    struct cann_graph_cache *c = calloc(1, sizeof(*c));
    graph_entry *entries = calloc((size_t)capacity, sizeof(*entries));
    if (c == NULL || entries == NULL) {
        free(c);
        free(entries);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "graph cache: out of host memory");
    }
    c->entries = entries;
    c->capacity = capacity;
    ctx->graphs = c;
    return CLM_OK;
}

static void entry_clear(graph_entry *e) {
    if (e->ri != NULL) aclmdlRIDestroy(e->ri);
    free(e->words);
    *e = (graph_entry){0};
}

void cann_graph_cache_free(cann_backend_ctx *ctx) {
    struct cann_graph_cache *c = ctx->graphs;
    if (c == NULL) return;
    for (int i = 0; i < c->n; i++) entry_clear(&c->entries[i]);
    free(c->entries);
    free(c->key);
    free(c);
    ctx->graphs = NULL;
}

void cann_graph_cache_invalidate(cann_backend_ctx *ctx) {
    struct cann_graph_cache *c = ctx->graphs;
    if (c == NULL) return;
    for (int i = 0; i < c->n; i++) entry_clear(&c->entries[i]);
}

int32_t cann_graph_cache_size(const cann_backend_ctx *ctx) {
    const struct cann_graph_cache *c = ctx->graphs;
    int32_t n = 0;
    for (int i = 0; c != NULL && i < c->n; i++) n += c->entries[i].ri != NULL;
    return n;
}

/* ---- keys ------------------------------------------------------------------------------------ */
static bool key_reserve(struct cann_graph_cache *c, size_t more) {
    if (c->key_len + more <= c->key_cap) return true;
    size_t cap = c->key_cap ? c->key_cap : 1024;
    while (cap < c->key_len + more) cap *= 2;
    uint64_t *key = realloc(c->key, cap * sizeof(*key));
    if (key == NULL) return false;
    c->key = key;
    c->key_cap = cap;
    return true;
}

/* type, ne[4], nb[4], data: 10 words. */
static void key_tensor(uint64_t *w, const clm_tensor *t) {
    w[0] = (uint64_t)(uint32_t)t->type;
    for (int d = 0; d < CLM_MAX_DIMS; d++) {
        w[1 + d] = (uint64_t)t->ne[d];
        w[1 + CLM_MAX_DIMS + d] = (uint64_t)t->nb[d];
    }
    w[1 + 2 * CLM_MAX_DIMS] = (uint64_t)(uintptr_t)t->data;
}

#define KEY_TENSOR_WORDS (2 + 2 * CLM_MAX_DIMS)
#define KEY_NODE_MAX (2 + KEY_TENSOR_WORDS + CLM_MAX_OP_PARAMS / 2 + CLM_MAX_SRC * KEY_TENSOR_WORDS)

/* One node's words: op, the node as a tensor, op_params, the source mask, each source. Returns
 * the count (at most KEY_NODE_MAX). */
static size_t node_words(uint64_t *w, const clm_tensor *t) {
    size_t k = 0;
    w[k++] = (uint64_t)(uint32_t)t->op;
    key_tensor(w + k, t);
    k += KEY_TENSOR_WORDS;
    for (int p = 0; p < CLM_MAX_OP_PARAMS; p += 2) {
        w[k++] = (uint64_t)(uint32_t)t->op_params[p] | (uint64_t)(uint32_t)t->op_params[p + 1] << 32;
    }
    uint64_t present = 0;
    size_t mask_at = k++;
    for (int s = 0; s < CLM_MAX_SRC; s++) {
        if (t->src[s] == NULL) continue;
        present |= 1u << s;
        key_tensor(w + k, t->src[s]);
        k += KEY_TENSOR_WORDS;
    }
    w[mask_at] = present;
    return k;
}

static clm_status build_key(struct cann_graph_cache *c, const clm_graph *graph, uint64_t *hash) {
    size_t n_nodes = clm_graph_n_nodes(graph);
    c->key_len = 0;
    if (!key_reserve(c, 1)) return clm_error(CLM_ERR_OUT_OF_MEMORY, "graph cache: out of host memory");
    c->key[c->key_len++] = n_nodes;
    for (size_t i = 0; i < n_nodes; i++) {
        if (!key_reserve(c, KEY_NODE_MAX)) return clm_error(CLM_ERR_OUT_OF_MEMORY, "graph cache: out of host memory");
        c->key_len += node_words(c->key + c->key_len, clm_graph_node(graph, i));
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < c->key_len; i++) {
        h ^= c->key[i];
        h *= 1099511628211ull;
    }
    *hash = h;
    return CLM_OK;
}

/* Whether graph's key equals e's, compared node by node as it is made (no key is built): the
 * fast path for the graph that ran last at this clm_graph (decode's steady state). */
static bool entry_matches(const graph_entry *e, const clm_graph *graph) {
    size_t n_nodes = clm_graph_n_nodes(graph), pos = 1;
    uint64_t w[KEY_NODE_MAX];
    if (e->n_words == 0 || e->words[0] != n_nodes) return false;
    for (size_t i = 0; i < n_nodes; i++) {
        size_t k = node_words(w, clm_graph_node(graph, i));
        if (pos + k > e->n_words || memcmp(w, e->words + pos, k * sizeof(*w)) != 0) return false;
        pos += k;
    }
    return pos == e->n_words;
}

/* ---- compute --------------------------------------------------------------------------------- */
static graph_entry *cache_find(struct cann_graph_cache *c, uint64_t hash) {
    for (int i = 0; i < c->n; i++) {
        graph_entry *e = &c->entries[i];
        if (e->hash == hash && e->n_words == c->key_len && memcmp(e->words, c->key, c->key_len * sizeof(uint64_t)) == 0)
            return e;
    }
    return NULL;
}

/* A slot for a new entry: a free one, else the least recently used one, destroyed once the
 * stream has drained (a replay of it may still be queued). */
static clm_status cache_slot(cann_backend_ctx *ctx, graph_entry **out) {
    struct cann_graph_cache *c = ctx->graphs;
    if (c->n < c->capacity) {
        *out = &c->entries[c->n++];
        return CLM_OK;
    }
    graph_entry *lru = &c->entries[0];
    for (int i = 1; i < c->n; i++) {
        if (c->entries[i].last_used < lru->last_used) lru = &c->entries[i];
    }
    if (lru->ri != NULL) CANN_ACL(aclrtSynchronizeStream(ctx->stream));
    entry_clear(lru);
    *out = lru;
    return CLM_OK;
}

static void capture_failed(cann_backend_ctx *ctx, const char *why) {
    if (!ctx->graphs->warned) {
        fprintf(stderr, "%s: graph capture failed, this graph runs eagerly: %s\n", ctx->name, why);
        ctx->graphs->warned = true;
    }
}

/* An eager run: the pre-pass, then the nodes. */
static clm_status run_eager(cann_backend_ctx *ctx, clm_graph *graph, cann_graph_fn prepare,
                            cann_graph_fn run_nodes) {
    clm_status st = prepare(ctx, graph);
    return st != CLM_OK ? st : run_nodes(ctx, graph);
}

clm_status cann_graph_compute_captured(cann_backend_ctx *ctx, clm_graph *graph, cann_graph_fn prepare,
                                       cann_graph_fn run_nodes) {
    struct cann_graph_cache *c = ctx->graphs;
    clm_cann_stats stats = {0};
    ctx->pool->iface.stats(ctx->pool, &stats);
    if (c == NULL || c->disabled || stats.pool_in_use != 0) return run_eager(ctx, graph, prepare, run_nodes);

    graph_entry *hit = NULL;
    for (int i = 0; i < c->n && hit == NULL; i++) {
        if (c->entries[i].graph == graph && entry_matches(&c->entries[i], graph)) hit = &c->entries[i];
    }
    uint64_t hash = 0;
    clm_status st = CLM_OK;
    if (hit == NULL) {
        if ((st = build_key(c, graph, &hash)) != CLM_OK) return st;
        hit = cache_find(c, hash);
    }
    if (hit != NULL) {
        hit->last_used = ++c->tick;
        hit->graph = graph;
        if (hit->ri == NULL) return run_eager(ctx, graph, prepare, run_nodes);
        CANN_ACL(aclmdlRIExecuteAsync(hit->ri, ctx->stream));
        ctx->graph_replays++;
        return CLM_OK;
    }

    /* Miss: compute eagerly (warming the pool), then record the same launches. */
    if ((st = run_eager(ctx, graph, prepare, run_nodes)) != CLM_OK) return st;
    uint64_t *words = malloc(c->key_len * sizeof(*words));
    if (words == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "graph cache: out of host memory");
    memcpy(words, c->key, c->key_len * sizeof(*words));
    graph_entry *e = NULL;
    if ((st = cache_slot(ctx, &e)) != CLM_OK) {
        free(words);
        return st;
    }
    *e = (graph_entry){.hash = hash, .words = words, .n_words = c->key_len, .ri = NULL, .last_used = ++c->tick,
                       .graph = graph};

    cann_consts_graph_begin(ctx);   /* per-graph slots recompute, so the capture records that work */
    aclError err = aclmdlRICaptureBegin(ctx->stream, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL);
    if (err != ACL_SUCCESS) {
        const char *msg = aclGetRecentErrMsg();
        char why[512];
        snprintf(why, sizeof(why), "aclmdlRICaptureBegin failed with error %d: %s", (int)err, msg ? msg : "");
        capture_failed(ctx, why);
        c->disabled = true;   /* the runtime cannot capture on this stream: stop trying */
        return CLM_OK;
    }
    ctx->pool->capturing = true;
    clm_clear_error();
    st = run_nodes(ctx, graph);
    ctx->pool->capturing = false;
    char why[1024] = "";
    if (st != CLM_OK) snprintf(why, sizeof(why), "%s", clm_last_error());
    aclmdlRI ri = NULL;
    err = aclmdlRICaptureEnd(ctx->stream, &ri);
    if (st == CLM_OK && err != ACL_SUCCESS) {
        const char *msg = aclGetRecentErrMsg();
        snprintf(why, sizeof(why), "aclmdlRICaptureEnd failed with error %d: %s", (int)err, msg ? msg : "");
    }
    if (st != CLM_OK || err != ACL_SUCCESS) {
        if (ri != NULL) aclmdlRIDestroy(ri);
        aclGetRecentErrMsg();
        clm_clear_error();
        capture_failed(ctx, why);
        return CLM_OK;   /* the eager run computed the results */
    }
    e->ri = ri;
    ctx->graph_captures++;
    return CLM_OK;
}
