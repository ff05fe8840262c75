/* profile.c - per-node device time (clm_cann_profile): while on, graphs run eagerly and a timing
 * event is recorded on the stream before each graph and after each node it computes. Taking the
 * records synchronizes the stream and reads aclrtEventElapsedTime between consecutive events, so
 * a node's time is what the device spent from the end of the previous node to the end of this one
 * (its kernels, and on acl_host the host work of launching them); nothing is synchronized per node.
 * Events are created once and reused after every take. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cann_common.h"

typedef struct prof_rec {
    size_t graph_ev, start_ev, end_ev; /* indices into events */
    int32_t graph;                     /* graph_compute calls since the last take */
    clm_cann_node_time info;           /* name, op, type, ne; times filled at take */
} prof_rec;

struct cann_profile {
    aclrtEvent *events;
    size_t n_events, cap_events, graph_ev;
    prof_rec *recs;
    size_t n_recs, cap_recs;
    int32_t n_graphs;
};

static clm_status next_event(cann_backend_ctx *ctx, size_t *index) {
    struct cann_profile *p = ctx->profile;
    if (p->n_events == p->cap_events) {
        size_t cap = p->cap_events ? 2 * p->cap_events : 1024;
        aclrtEvent *grown = realloc(p->events, cap * sizeof(*grown));
        if (grown == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "profile: out of host memory");
        memset(grown + p->cap_events, 0, (cap - p->cap_events) * sizeof(*grown));
        p->events = grown, p->cap_events = cap;
    }
    aclrtEvent *e = &p->events[p->n_events];
    if (*e == NULL) CANN_ACL(aclrtCreateEventWithFlag(e, ACL_EVENT_TIME_LINE));
    CANN_ACL(aclrtRecordEvent(*e, ctx->stream));
    *index = p->n_events++;
    return CLM_OK;
}

clm_status cann_profile_graph_begin(cann_backend_ctx *ctx) {
    if (ctx->profile == NULL) return CLM_OK;
    clm_status st = next_event(ctx, &ctx->profile->graph_ev);
    if (st == CLM_OK) ctx->profile->n_graphs++;
    return st;
}

clm_status cann_profile_node_end(cann_backend_ctx *ctx, const clm_tensor *node) {
    struct cann_profile *p = ctx->profile;
    if (p == NULL) return CLM_OK;
    if (p->n_recs == p->cap_recs) {
        size_t cap = p->cap_recs ? 2 * p->cap_recs : 1024;
        prof_rec *grown = realloc(p->recs, cap * sizeof(*grown));
        if (grown == NULL) return clm_error(CLM_ERR_OUT_OF_MEMORY, "profile: out of host memory");
        p->recs = grown, p->cap_recs = cap;
    }
    size_t end_ev = 0;
    clm_status st = next_event(ctx, &end_ev);
    if (st != CLM_OK) return st;
    prof_rec *r = &p->recs[p->n_recs++];
    memset(r, 0, sizeof(*r));
    r->graph_ev = p->graph_ev;
    r->start_ev = end_ev - 1; /* the graph's start or the previous node's end */
    r->end_ev = end_ev;
    r->graph = p->n_graphs - 1;
    snprintf(r->info.name, sizeof(r->info.name), "%s", node->name);
    r->info.op = node->op;
    r->info.type = node->type;
    memcpy(r->info.ne, node->ne, sizeof(r->info.ne));
    return CLM_OK;
}

void cann_profile_free(cann_backend_ctx *ctx) {
    struct cann_profile *p = ctx->profile;
    if (p == NULL) return;
    for (size_t i = 0; i < p->cap_events; i++)
        if (p->events[i] != NULL) aclrtDestroyEvent(p->events[i]);
    free(p->events);
    free(p->recs);
    free(p);
    ctx->profile = NULL;
}

static cann_backend_ctx *profile_ctx(clm_backend *backend) {
    return cann_backend_is_cann(backend) ? (cann_backend_ctx *)backend->context : NULL;
}

clm_status clm_cann_profile(clm_backend *backend, bool on) {
    cann_backend_ctx *ctx = profile_ctx(backend);
    CLM_CHECK_ARG(ctx != NULL, "clm_cann_profile: not a CANN backend");
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    if (!on) {
        if (ctx->profile != NULL) CANN_ACL(aclrtSynchronizeStream(ctx->stream)); /* events in flight */
        cann_profile_free(ctx);
        return CLM_OK;
    }
    if (ctx->profile == NULL && (ctx->profile = calloc(1, sizeof(*ctx->profile))) == NULL)
        return clm_error(CLM_ERR_OUT_OF_MEMORY, "clm_cann_profile: out of host memory");
    return CLM_OK;
}

clm_status clm_cann_profile_take(clm_backend *backend, clm_cann_node_time *out, size_t cap, size_t *n) {
    cann_backend_ctx *ctx = profile_ctx(backend);
    CLM_CHECK_ARG(ctx != NULL, "clm_cann_profile_take: not a CANN backend");
    CLM_CHECK_ARG(n != NULL, "clm_cann_profile_take: n is NULL");
    struct cann_profile *p = ctx->profile;
    if (p == NULL) return clm_error(CLM_ERR_STATE, "clm_cann_profile_take: profiling is off (clm_cann_profile)");
    *n = p->n_recs;
    if (out == NULL) return CLM_OK; /* the count only */
    CLM_CHECK_ARG(cap >= p->n_recs, "clm_cann_profile_take: %zu records pending, room for %zu", p->n_recs, cap);
    clm_status st = cann_set_device(ctx->device);
    if (st != CLM_OK) return st;
    CANN_ACL(aclrtSynchronizeStream(ctx->stream));
    for (size_t i = 0; i < p->n_recs; i++) {
        const prof_rec *r = &p->recs[i];
        float start = 0, ms = 0;
        if (r->start_ev != r->graph_ev)
            CANN_ACL(aclrtEventElapsedTime(&start, p->events[r->graph_ev], p->events[r->start_ev]));
        CANN_ACL(aclrtEventElapsedTime(&ms, p->events[r->start_ev], p->events[r->end_ev]));
        out[i] = r->info;
        out[i].graph = r->graph;
        out[i].start_ms = start;
        out[i].ms = ms;
    }
    p->n_recs = p->n_events = 0;
    p->n_graphs = 0;
    return CLM_OK;
}
