/* graph.c - compute graphs: the nodes a result depends on, in topological order. */
#include <stdint.h>
#include <stdlib.h>

#include "clm_impl.h"

static size_t hash_ptr(const void *p, size_t size) { return ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull % size; }

/* Inserts t into the visited set; false if it was already there. */
static bool visit_insert(clm_graph *g, clm_tensor *t) {
    size_t i = hash_ptr(t, g->visited_size);
    while (g->visited[i] != NULL) {
        if (g->visited[i] == t) return false;
        i = (i + 1) % g->visited_size;
    }
    g->visited[i] = t;
    return true;
}

clm_status clm_graph_new(clm_context *ctx, size_t max_nodes, clm_graph **out) {
    CLM_CHECK_ARG(ctx != NULL && out != NULL, "clm_graph_new: NULL argument");
    CLM_CHECK_ARG(max_nodes > 0, "clm_graph_new: max_nodes must be > 0");
    *out = NULL;
    clm_graph **graphs = realloc(ctx->graphs, (ctx->n_graphs + 1) * sizeof(*graphs));
    if (graphs == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_graph_new: out of host memory");
    ctx->graphs = graphs;
    clm_graph *g = calloc(1, sizeof(*g));
    if (g != NULL) {
        g->ctx = ctx;
        g->max_nodes = max_nodes;
        g->visited_size = 2 * max_nodes + 1;
        g->nodes = calloc(max_nodes, sizeof(*g->nodes));
        g->leafs = calloc(max_nodes, sizeof(*g->leafs));
        g->visited = calloc(g->visited_size, sizeof(*g->visited));
    }
    if (g == NULL || g->nodes == NULL || g->leafs == NULL || g->visited == NULL) {
        if (g) free(g->nodes), free(g->leafs), free(g->visited);
        free(g);
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_graph_new: cannot allocate %zu nodes", max_nodes);
    }
    ctx->graphs[ctx->n_graphs++] = g;
    *out = g;
    return CLM_OK;
}

void clm_graph_free_internal(clm_graph *g) {
    if (g == NULL) return;
    free(g->nodes);
    free(g->leafs);
    free(g->visited);
    free(g);
}

static clm_status visit(clm_graph *g, clm_tensor *t) {
    if (!visit_insert(g, t)) return CLM_OK;
    for (int i = 0; i < CLM_MAX_SRC; i++) {
        if (t->src[i] == NULL) continue;
        clm_status st = visit(g, t->src[i]);
        if (st != CLM_OK) return st;
    }
    if (t->op == CLM_OP_NONE) {
        if (g->n_leafs >= g->max_nodes) goto full;
        g->leafs[g->n_leafs++] = t;
    } else {
        if (g->n_nodes >= g->max_nodes) goto full;
        g->nodes[g->n_nodes++] = t;
    }
    return CLM_OK;
full:
    return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_graph_build_forward: graph is full (%zu nodes)", g->max_nodes);
}

clm_status clm_graph_build_forward(clm_graph *graph, clm_tensor *tensor) {
    CLM_CHECK_ARG(graph != NULL && tensor != NULL, "clm_graph_build_forward: NULL argument");
    return visit(graph, tensor);
}

size_t clm_graph_n_nodes(const clm_graph *g) { return g ? g->n_nodes : 0; }

clm_tensor *clm_graph_node(const clm_graph *g, size_t i) { return (g && i < g->n_nodes) ? g->nodes[i] : NULL; }

size_t clm_graph_n_leafs(const clm_graph *g) { return g ? g->n_leafs : 0; }

clm_tensor *clm_graph_leaf(const clm_graph *g, size_t i) { return (g && i < g->n_leafs) ? g->leafs[i] : NULL; }

void clm_graph_reset(clm_graph *g) {
    if (g == NULL) return;
    g->n_nodes = 0;
    g->n_leafs = 0;
    for (size_t i = 0; i < g->visited_size; i++) g->visited[i] = NULL;
}

/* Where a tensor's memory lies, as the scheduler asks it: its buffer type once it is placed. */
static uintptr_t placed_buft(const clm_tensor *t) {
    return t->buffer != NULL && t->data != NULL ? (uintptr_t)t->buffer->buft : 0;
}

clm_status clm_graph_scan(const clm_graph *graph, uintptr_t *words, size_t n_words, uintptr_t *src_words,
                          size_t n_src_words, size_t *n_src_used) {
    CLM_CHECK_ARG(graph != NULL && n_src_used != NULL, "clm_graph_scan: NULL argument");
    CLM_CHECK_ARG(n_words >= graph->n_nodes * CLM_SCAN_WORDS && (words != NULL || n_words == 0),
                  "clm_graph_scan: %zu words for %zu nodes (%d each)", n_words, graph->n_nodes, CLM_SCAN_WORDS);
    size_t used = 0;
    for (size_t i = 0; i < graph->n_nodes; i++) {
        const clm_tensor *t = graph->nodes[i];
        const clm_tensor *root = t->view_src != NULL ? t->view_src : t;
        uintptr_t *w = words + i * CLM_SCAN_WORDS;
        int n_src = CLM_MAX_SRC;
        while (n_src > 0 && t->src[n_src - 1] == NULL) n_src--;
        CLM_CHECK_ARG(src_words != NULL && used + 4 * (size_t)n_src <= n_src_words,
                      "clm_graph_scan: %zu source words are too few", n_src_words);
        w[CLM_SCAN_NODE] = (uintptr_t)t;
        w[CLM_SCAN_OP] = (uintptr_t)t->op;
        w[CLM_SCAN_FLAGS] = (t->view_src != NULL ? CLM_SCAN_VIEW : 0) | (t->data != NULL ? CLM_SCAN_HAS_DATA : 0) |
                            (root->data != NULL ? CLM_SCAN_ROOT_HAS_DATA : 0);
        w[CLM_SCAN_ROOT] = (uintptr_t)root;
        w[CLM_SCAN_ROOT_BUFT] = placed_buft(root);
        w[CLM_SCAN_N_SRC] = (uintptr_t)n_src;
        for (int s = 0; s < n_src; s++, used += 4) {
            uintptr_t *ws = src_words + used;
            const clm_tensor *src = t->src[s];
            if (src == NULL) {
                ws[0] = ws[1] = ws[2] = ws[3] = 0;
                continue;
            }
            const clm_tensor *src_root = src->view_src != NULL ? src->view_src : src;
            ws[0] = (uintptr_t)src;
            ws[1] = (uintptr_t)src_root;
            ws[2] = placed_buft(src_root);
            ws[3] = src_root->buffer != NULL ? (uintptr_t)src_root->buffer->usage + 1 : 0;
        }
    }
    *n_src_used = used;
    return CLM_OK;
}
