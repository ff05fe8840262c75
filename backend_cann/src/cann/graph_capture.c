/* graph_capture.c - ACL graph mode (GGML_CANN_ACL_GRAPH=1, the default): graph_compute replays a
 * captured aclmdlRI when the graph matches one seen before, else runs it eagerly and captures it.
 *
 * Key: per node, op, flags, type, ne, nb, data address, op_params, and for each source slot its
 * presence, type, ne, nb and data address (a view's data is its view_src's data + view_offs, so
 * views are compared by where they point). The key is a flat array of 64-bit words; a 64-bit
 * FNV-1a hash screens candidates and a full comparison decides.
 *
 * First, the entries that last ran as the same clm_graph are compared with the graph through a
 * snapshot (a kept decode graph's steady state): per node, its address and its leading bytes
 * (every field the key reads, and its sources' addresses), then each source that is not a node
 * (once): one memcmp per tensor, the tensors prefetched ahead. A match implies equal full keys
 * (fast_matches); a miss falls back to the full key, and a hit there renews the snapshot.
 *
 * Cache: GGML_CANN_GRAPH_CACHE_CAPACITY entries (default 24; upstream's 12 before greedy steps
 * had a graph variant of their own, memory_pools.md), least recently used
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann/cann_common.h"

#define GRAPH_CACHE_DEFAULT 24
#define GRAPH_CACHE_MAX 256

typedef struct graph_entry {
    uint64_t hash;
    uint64_t *words;
    size_t n_words;
    aclmdlRI ri;          /* NULL: this graph could not be captured; it runs eagerly */
    uint64_t last_used;
    const clm_graph *graph;   /* the clm_graph it last ran as: what `fast` was made from */
    uint64_t *fast;           /* graph's snapshot records (fast_key); NULL: none yet */
    size_t n_fast;            /* records: the nodes', then the outside sources' */
    size_t n_snap_nodes;
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
    free(e->fast);
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

/* One node's words: op and flags, the node as a tensor, op_params, the source mask, each source.
 * Returns the count (at most KEY_NODE_MAX). */
static size_t node_words(uint64_t *w, const clm_tensor *t) {
    size_t k = 0;
    w[k++] = (uint64_t)(uint32_t)t->op | (uint64_t)(uint32_t)t->flags << 32;
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

/* ---- snapshots (fast_key / fast_matches) ---------------------------------------------------
 * A snapshot record is a tensor's address and a copy of its leading SNAP_BYTES bytes: type, op,
 * ne, nb, op_params, flags, src, view_src, view_offs and data, so one memcmp covers every field
 * the full key reads of a node, the addresses of its sources included. An entry's snapshot of a
 * graph is a record per node, in order, then a record per source that is not a node (once). */
#define SNAP_BYTES (offsetof(clm_tensor, data) + sizeof(void *))
#define SNAP_WORDS (1 + (SNAP_BYTES + 7) / 8)

/* An open-addressing set of tensor addresses (power-of-two size, never full). */
typedef struct ptr_set {
    const clm_tensor **slots;
    size_t mask;
} ptr_set;

/* Inserts t; false if it was there already. */
static bool ptr_set_insert(ptr_set *set, const clm_tensor *t) {
    size_t i = (size_t)(((uintptr_t)t >> 4) * 0x9E3779B97F4A7C15ull) & set->mask;
    while (set->slots[i] != NULL) {
        if (set->slots[i] == t) return false;
        i = (i + 1) & set->mask;
    }
    set->slots[i] = t;
    return true;
}

static void snap_record(uint64_t *w, const clm_tensor *t) {
    w[0] = (uint64_t)(uintptr_t)t;
    w[SNAP_WORDS - 1] = 0;
    memcpy(w + 1, t, SNAP_BYTES);
}

/* e's snapshot of graph (replacing any it had); false when out of host memory (the entry then
 * has none and is found through the full key). */
static bool fast_key(graph_entry *e, const clm_graph *graph) {
    free(e->fast);
    e->fast = NULL;
    e->n_fast = e->n_snap_nodes = 0;
    size_t n_nodes = clm_graph_n_nodes(graph), size = 1, n = 0;
    while (size < 2 * n_nodes * (1 + CLM_MAX_SRC) + 2) size *= 2;
    ptr_set seen = {calloc(size, sizeof(*seen.slots)), size - 1};
    /* at most n_nodes * (1 + CLM_MAX_SRC) records; grown as sources come */
    size_t cap = 2 * n_nodes + 16;
    uint64_t *w = malloc(cap * SNAP_WORDS * sizeof(*w));
    if (seen.slots == NULL || w == NULL) goto fail;
    for (size_t i = 0; i < n_nodes; i++) {
        const clm_tensor *t = clm_graph_node(graph, i);
        ptr_set_insert(&seen, t);
        snap_record(w + n++ * SNAP_WORDS, t);
    }
    for (size_t i = 0; i < n_nodes; i++) {
        const clm_tensor *t = clm_graph_node(graph, i);
        for (int s = 0; s < CLM_MAX_SRC; s++) {
            if (t->src[s] == NULL || !ptr_set_insert(&seen, t->src[s])) continue;
            if (n == cap) {
                uint64_t *grown = realloc(w, 2 * cap * SNAP_WORDS * sizeof(*w));
                if (grown == NULL) goto fail;
                w = grown;
                cap *= 2;
            }
            snap_record(w + n++ * SNAP_WORDS, t->src[s]);
        }
    }
    free(seen.slots);
    /* shrunk to fit; an empty graph keeps its buffer (realloc to 0 bytes would free it) */
    uint64_t *fit = n > 0 ? realloc(w, n * SNAP_WORDS * sizeof(*w)) : NULL;
    e->fast = fit != NULL ? fit : w;
    e->n_fast = n;
    e->n_snap_nodes = n_nodes;
    return true;
fail:
    free(seen.slots);
    free(w);
    return false;
}

/* A decode graph's tensors are cold when it is launched (the weights have streamed through the
 * caches since the last token): the tensors PREFETCH_AHEAD records ahead are fetched while the
 * current one is compared. */
#define PREFETCH_AHEAD 8

static inline void prefetch_snap(const clm_tensor *t) {
    const char *p = (const char *)t;
    for (size_t at = 0; at < SNAP_BYTES; at += 64) __builtin_prefetch(p + at);
    __builtin_prefetch(p + SNAP_BYTES - 1);
}

/* Whether graph matches e's snapshot. A match implies that the full keys are equal: each node is
 * the recorded tensor with the recorded fields, so its sources are the recorded addresses; each
 * of those is a node (compared) or a recorded outside tensor, compared after the nodes, through
 * the address the graph holds now (only addresses read from the graph being computed are
 * dereferenced). */
static bool fast_matches(const graph_entry *e, const clm_graph *graph) {
    size_t n_nodes = clm_graph_n_nodes(graph);
    if (e->fast == NULL || e->n_snap_nodes != n_nodes) return false;
    const uint64_t *w = e->fast;
    for (size_t i = 0; i < n_nodes && i < PREFETCH_AHEAD; i++) prefetch_snap(clm_graph_node(graph, i));
    for (size_t i = 0; i < n_nodes; i++, w += SNAP_WORDS) {
        const clm_tensor *t = clm_graph_node(graph, i);
        if (i + PREFETCH_AHEAD < n_nodes) prefetch_snap(clm_graph_node(graph, i + PREFETCH_AHEAD));
        if (w[0] != (uint64_t)(uintptr_t)t || memcmp(t, w + 1, SNAP_BYTES) != 0) return false;
    }
    const uint64_t *end = e->fast + e->n_fast * SNAP_WORDS;
    for (const uint64_t *ahead = w; ahead < end && ahead < w + PREFETCH_AHEAD * SNAP_WORDS; ahead += SNAP_WORDS) {
        prefetch_snap((const clm_tensor *)(uintptr_t)ahead[0]);
    }
    for (; w < end; w += SNAP_WORDS) {
        if (w + PREFETCH_AHEAD * SNAP_WORDS < end) prefetch_snap((const clm_tensor *)(uintptr_t)w[PREFETCH_AHEAD * SNAP_WORDS]);
        if (memcmp((const clm_tensor *)(uintptr_t)w[0], w + 1, SNAP_BYTES) != 0) return false;
    }
    return true;
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
        if (c->entries[i].graph == graph && fast_matches(&c->entries[i], graph)) hit = &c->entries[i];
    }
    uint64_t hash = 0;
    clm_status st = CLM_OK;
    if (hit == NULL) {
        if ((st = build_key(c, graph, &hash)) != CLM_OK) return st;
        hit = cache_find(c, hash);
        if (hit != NULL) hit->graph = fast_key(hit, graph) ? graph : NULL;   /* its snapshot was stale */
    }
    if (hit != NULL) {
        hit->last_used = ++c->tick;
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
    if (!fast_key(e, graph)) e->graph = NULL;   /* out of memory: found through the full key */

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
