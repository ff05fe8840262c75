/* capture.c - graph capture and replay: aclmdlRICapture*, aclmdlRIExecuteAsync, aclmdlRIDestroy.
 *
 * aclmdlRICaptureBegin attaches a model to the stream; from then on ah_stream_enqueue hands
 * each task {run, arg, release, ranges} to ah_capture_append instead of queueing it, so nothing
 * runs. The model owns the recorded tasks and releases them only at aclmdlRIDestroy, so an
 * aclnn task (which holds its executor snapshot) replays any number of times without phase 1.
 *
 * aclmdlRIExecuteAsync checks every recorded range against the live allocations (as a launch
 * would; skipped when no device memory was released since the model's last check), then queues
 * the tasks in order on the target stream: each run of tasks between two event records is one
 * stream task (a segment) that runs them in order, re-checking each task's ranges right before
 * it runs when device memory was released meanwhile. Items with a replay hook (event records)
 * are re-issued on the target stream between the segments. Each queued segment holds a
 * reference on the model, so destroying a model while a replay is still queued is safe: the
 * recorded tasks are released when the last reference goes.
 *
 * "Unsafe" calls during a capture (ah_capture_check_unsafe) fail with
 * ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT and invalidate the capture, following the capture mode
 * and the calling thread's exchange mode (the CUDA rules, which CANN's modes mirror):
 *   the thread's mode RELAXED: never restricted;
 *   otherwise restricted by its own captures begun in GLOBAL or THREAD_LOCAL mode, and, if the
 *   thread's mode is GLOBAL, by other threads' captures begun in GLOBAL mode.
 * Only captures on the device the call concerns count. An invalidated capture drops further
 * tasks (ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED) and aclmdlRICaptureEnd returns that error and
 * no model.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_rt.h"

typedef enum model_state { M_CAPTURING, M_INVALIDATED, M_READY } model_state;

typedef struct rec_item {
    struct ah_model *model;
    char name[64];
    ah_task_run_fn run;
    void *arg;
    ah_task_release_fn release;
    ah_replay_fn replay;
    size_t n_ranges;
    ah_range ranges[];
} rec_item;

struct ah_model {
    uint64_t id;
    pthread_mutex_t mutex; /* state, reason, items while capturing */
    model_state state;
    aclmdlRICaptureMode mode;
    pthread_t owner;
    int device;
    struct ah_stream *stream; /* the capturing stream; NULL once the capture ended */
    rec_item **items;
    size_t n_items, cap_items;
    /* made at capture end: the replay's steps in order, each an event record's item (end == 0)
     * or a run of plain tasks [begin, end) queued as one segment */
    struct replay_step { size_t begin, end; } *steps;
    size_t n_steps;
    char reason[160];
    atomic_uint refs; /* the handle + one per queued replay segment */
    _Atomic uint64_t checked_epoch; /* 1 + the release epoch of the last full range check */
    struct ah_model *next;
};

static pthread_mutex_t g_models_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct ah_model *g_models; /* every model not yet destroyed */
static atomic_int g_n_attached;   /* models attached to a stream (fast path of the checks) */
static atomic_uint_fast64_t g_next_id;
static _Thread_local aclmdlRICaptureMode tl_mode = ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;

static const char *mode_name(aclmdlRICaptureMode mode)
{
    return mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL         ? "GLOBAL"
           : mode == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL ? "THREAD_LOCAL"
                                                            : "RELAXED";
}

/* ---- model lifetime ------------------------------------------------------------------------- */

static void model_free(struct ah_model *m)
{
    for (size_t i = 0; i < m->n_items; i++) {
        if (m->items[i]->release)
            m->items[i]->release(m->items[i]->arg);
        free(m->items[i]);
    }
    free(m->items);
    free(m->steps);
    pthread_mutex_destroy(&m->mutex);
    free(m);
}

static void model_unref(struct ah_model *m)
{
    if (atomic_fetch_sub(&m->refs, 1) == 1)
        model_free(m);
}

/* Removes m from the list; g_models_mutex held. */
static bool unlist_locked(struct ah_model *m)
{
    for (struct ah_model **p = &g_models; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            return true;
        }
    }
    return false;
}

static bool listed_locked(const struct ah_model *m)
{
    for (const struct ah_model *it = g_models; it; it = it->next)
        if (it == m)
            return true;
    return false;
}

/* ---- hooks for the runtime -------------------------------------------------------------------- */

static void invalidate_locked(struct ah_model *m, const char *reason)
{
    if (m->state == M_CAPTURING) {
        m->state = M_INVALIDATED;
        snprintf(m->reason, sizeof m->reason, "%s", reason);
    }
}

void ah_capture_invalidate(struct ah_model *m, const char *reason)
{
    pthread_mutex_lock(&m->mutex);
    invalidate_locked(m, reason);
    pthread_mutex_unlock(&m->mutex);
}

aclError ah_capture_append(struct ah_model *m, const ah_capture_item *item)
{
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&m->mutex);
    if (m->state != M_CAPTURING) {
        rc = ah_error(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                      "%s: the capture on stream %p was invalidated (by %s); the task is dropped",
                      item->name, (void *)m->stream, m->reason);
    } else {
        rec_item *r = malloc(sizeof *r + item->n_ranges * sizeof(ah_range));
        if (r && m->n_items == m->cap_items) {
            size_t cap = m->cap_items ? m->cap_items * 2 : 64;
            rec_item **grown = realloc(m->items, cap * sizeof *grown);
            if (grown) {
                m->items = grown;
                m->cap_items = cap;
            } else {
                free(r);
                r = NULL;
            }
        }
        if (!r) {
            invalidate_locked(m, "out of host memory while recording");
            rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION,
                          "%s: out of host memory while recording; the capture is invalidated",
                          item->name);
        } else {
            r->model = m;
            snprintf(r->name, sizeof r->name, "%s", item->name ? item->name : "task");
            r->run = item->run;
            r->arg = item->arg;
            r->release = item->release;
            r->replay = item->replay;
            r->n_ranges = item->n_ranges;
            if (item->n_ranges)
                memcpy(r->ranges, item->ranges, item->n_ranges * sizeof(ah_range));
            m->items[m->n_items++] = r;
        }
    }
    pthread_mutex_unlock(&m->mutex);
    if (rc != ACL_SUCCESS && item->release)
        item->release(item->arg);
    return rc;
}

void ah_capture_abandon(struct ah_model *m)
{
    pthread_mutex_lock(&m->mutex);
    invalidate_locked(m, "the capturing stream was destroyed");
    m->stream = NULL;
    pthread_mutex_unlock(&m->mutex);
    atomic_fetch_sub(&g_n_attached, 1);
}

uint64_t ah_capture_id(const struct ah_model *m) { return m->id; }

bool ah_capture_id_active(uint64_t id)
{
    bool active = false;
    pthread_mutex_lock(&g_models_mutex);
    for (struct ah_model *m = g_models; m && !active; m = m->next) {
        pthread_mutex_lock(&m->mutex);
        active = m->id == id && m->stream && m->state == M_CAPTURING;
        pthread_mutex_unlock(&m->mutex);
    }
    pthread_mutex_unlock(&g_models_mutex);
    return active;
}

aclError ah_capture_check_unsafe(const char *api, int device)
{
    if (atomic_load(&g_n_attached) == 0 || tl_mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        return ACL_SUCCESS;
    pthread_t self = pthread_self();
    struct ah_stream *stream = NULL;
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
    bool own = false, hit = false;
    pthread_mutex_lock(&g_models_mutex);
    for (struct ah_model *m = g_models; m; m = m->next) {
        pthread_mutex_lock(&m->mutex);
        if (m->stream && m->state == M_CAPTURING && (device < 0 || m->device == device)) {
            bool mine = pthread_equal(m->owner, self);
            bool forbid = mine ? m->mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED
                               : m->mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL &&
                                     tl_mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
            if (forbid) {
                char reason[160];
                snprintf(reason, sizeof reason, "%s during the capture", api);
                invalidate_locked(m, reason);
                if (!hit) {
                    hit = true;
                    stream = m->stream;
                    mode = m->mode;
                    own = mine;
                }
            }
        }
        pthread_mutex_unlock(&m->mutex);
    }
    pthread_mutex_unlock(&g_models_mutex);
    if (!hit)
        return ACL_SUCCESS;
    return ah_error(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
                    "%s: not allowed while stream %p is capturing (mode %s, begun on %s thread): "
                    "no synchronous copies, memsets, device allocation/free, VMM changes or "
                    "pageable async copies during capture; the capture is invalidated",
                    api, (void *)stream, mode_name(mode), own ? "this" : "another");
}

void ah_capture_release_all(void)
{
    pthread_mutex_lock(&g_models_mutex);
    struct ah_model *list = g_models;
    g_models = NULL;
    pthread_mutex_unlock(&g_models_mutex);
    while (list) {
        struct ah_model *next = list->next;
        model_unref(list);
        list = next;
    }
    atomic_store(&g_n_attached, 0);
}

/* ---- capture ---------------------------------------------------------------------------------- */

static aclError attach(struct ah_model **slot, void *ctx)
{
    if (*slot)
        return ah_error(ACL_ERROR_RT_STREAM_CAPTURED,
                        "aclmdlRICaptureBegin: the stream is already capturing");
    *slot = ctx;
    return ACL_SUCCESS;
}

AH_API aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode)
{
    const char *api = "aclmdlRICaptureBegin";
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    if ((int)mode < ACL_MODEL_RI_CAPTURE_MODE_GLOBAL || mode > ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: unknown capture mode %d", api, (int)mode);
    struct ah_model *m = calloc(1, sizeof *m);
    if (!m)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    pthread_mutex_init(&m->mutex, NULL);
    m->id = atomic_fetch_add(&g_next_id, 1) + 1;
    m->state = M_CAPTURING;
    m->mode = mode;
    m->owner = pthread_self();
    m->device = ah_stream_device(s);
    m->stream = s;
    atomic_store(&m->refs, 1);
    pthread_mutex_lock(&g_models_mutex);
    m->next = g_models;
    g_models = m;
    pthread_mutex_unlock(&g_models_mutex);
    atomic_fetch_add(&g_n_attached, 1);
    rc = ah_stream_capture_slot(s, attach, m);
    if (rc != ACL_SUCCESS) {
        atomic_fetch_sub(&g_n_attached, 1);
        pthread_mutex_lock(&g_models_mutex);
        unlist_locked(m);
        pthread_mutex_unlock(&g_models_mutex);
        model_unref(m);
    }
    return rc;
}

/* The replay's steps: each event record alone, each run of other tasks between them as one. */
static bool make_steps(struct ah_model *m)
{
    m->steps = malloc((m->n_items ? m->n_items : 1) * sizeof *m->steps);
    if (!m->steps)
        return false;
    m->n_steps = 0;
    for (size_t i = 0; i < m->n_items;) {
        size_t end = i + 1;
        if (m->items[i]->replay) {
            m->steps[m->n_steps++] = (struct replay_step){i, 0};
        } else {
            while (end < m->n_items && !m->items[end]->replay)
                end++;
            m->steps[m->n_steps++] = (struct replay_step){i, end};
        }
        i = end;
    }
    return true;
}

typedef struct end_ctx {
    struct ah_model *model;
} end_ctx;

static aclError detach(struct ah_model **slot, void *arg)
{
    end_ctx *ctx = arg;
    struct ah_model *m = *slot;
    if (!m)
        return ah_error(ACL_ERROR_RT_STREAM_NOT_CAPTURED,
                        "aclmdlRICaptureEnd: the stream is not capturing");
    if (m->mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED && !pthread_equal(m->owner, pthread_self()))
        return ah_error(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
                        "aclmdlRICaptureEnd: a capture in mode %s must end on the thread that "
                        "began it", mode_name(m->mode));
    *slot = NULL;
    ctx->model = m;
    return ACL_SUCCESS;
}

AH_API aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI)
{
    const char *api = "aclmdlRICaptureEnd";
    if (!modelRI)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: modelRI is NULL", api);
    *modelRI = NULL;
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve_any(stream, api, &s);
    end_ctx ctx = {NULL};
    if (rc == ACL_SUCCESS)
        rc = ah_stream_capture_slot(s, detach, &ctx);
    if (rc != ACL_SUCCESS)
        return rc;
    struct ah_model *m = ctx.model;
    atomic_fetch_sub(&g_n_attached, 1);
    char reason[sizeof m->reason] = "";
    pthread_mutex_lock(&m->mutex);
    m->stream = NULL;
    if (m->state == M_CAPTURING && !make_steps(m))
        invalidate_locked(m, "out of host memory at the end of the capture");
    bool invalid = m->state != M_CAPTURING;
    if (invalid)
        memcpy(reason, m->reason, sizeof reason);
    else
        m->state = M_READY;
    pthread_mutex_unlock(&m->mutex);
    if (invalid) {
        pthread_mutex_lock(&g_models_mutex);
        bool owned = unlist_locked(m);
        pthread_mutex_unlock(&g_models_mutex);
        if (owned)
            model_unref(m);
        return ah_error(ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED,
                        "%s: the capture was invalidated (%s); no model is returned", api, reason);
    }
    *modelRI = m;
    return ACL_SUCCESS;
}

typedef struct info_ctx {
    aclmdlRICaptureStatus status;
    struct ah_model *model;
} info_ctx;

static aclError read_info(struct ah_model **slot, void *arg)
{
    info_ctx *ctx = arg;
    struct ah_model *m = *slot;
    ctx->status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    ctx->model = NULL;
    if (m) {
        pthread_mutex_lock(&m->mutex);
        bool active = m->state == M_CAPTURING;
        pthread_mutex_unlock(&m->mutex);
        ctx->status = active ? ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE
                             : ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED;
        ctx->model = active ? m : NULL;
    }
    return ACL_SUCCESS;
}

AH_API aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus *status,
                                       aclmdlRI *modelRI)
{
    const char *api = "aclmdlRICaptureGetInfo";
    if (!status)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: status is NULL", api);
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve_any(stream, api, &s);
    info_ctx ctx = {ACL_MODEL_RI_CAPTURE_STATUS_NONE, NULL};
    if (rc == ACL_SUCCESS)
        rc = ah_stream_capture_slot(s, read_info, &ctx);
    if (rc != ACL_SUCCESS)
        return rc;
    *status = ctx.status;
    if (modelRI)
        *modelRI = ctx.model;
    return ACL_SUCCESS;
}

AH_API aclError aclmdlRICaptureThreadExchangeMode(aclmdlRICaptureMode *mode)
{
    if (!mode)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclmdlRICaptureThreadExchangeMode: mode is NULL");
    if ((int)*mode < ACL_MODEL_RI_CAPTURE_MODE_GLOBAL || *mode > ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclmdlRICaptureThreadExchangeMode: unknown mode %d", (int)*mode);
    aclmdlRICaptureMode old = tl_mode;
    tl_mode = *mode;
    *mode = old;
    return ACL_SUCCESS;
}

/* ---- replay and destroy ------------------------------------------------------------------------ */

/* A run of consecutive recorded tasks (no event record among them), queued as one stream task:
 * a replay costs the host one enqueue per segment, not one per recorded launch. */
typedef struct replay_segment {
    struct ah_model *model; /* one reference, dropped by segment_release */
    size_t begin, end;
    uint64_t epoch; /* ah_mem_release_epoch at which every range was found live */
} replay_segment;

/* Runs the segment's tasks in order, as the stream runs queued tasks: each one's ranges are
 * re-checked right before it runs (unless no device memory was released since they were
 * checked), a failing task does not stop the later ones, and the first error (with its
 * message) is what the segment reports, so it sticks to the stream. */
static aclError segment_run(void *arg)
{
    replay_segment *seg = arg;
    rec_item **items = seg->model->items;
    aclError first = ACL_SUCCESS;
    char message[AH_ERRMSG_SIZE] = "";
    bool recheck = false;
    for (size_t i = seg->begin; i < seg->end; i++) {
        rec_item *r = items[i];
        aclError rc = ACL_SUCCESS;
        if (!recheck && ah_mem_release_epoch() != seg->epoch)
            recheck = true;
        for (size_t k = 0; recheck && k < r->n_ranges && rc == ACL_SUCCESS; k++)
            rc = ah_mem_check_live(&r->ranges[k], r->name);
        if (rc == ACL_SUCCESS)
            rc = r->run(r->arg);
        if (rc == ACL_SUCCESS)
            continue;
        if (first == ACL_SUCCESS) {
            first = rc;
            ah_error_take(message, sizeof message);
            if (message[0] == '\0')
                snprintf(message, sizeof message, "%s: failed on device %d with error %d",
                         r->name, seg->model->device, rc);
        } else {
            char ignored[AH_ERRMSG_SIZE];
            ah_error_take(ignored, sizeof ignored);
        }
    }
    if (first != ACL_SUCCESS)
        ah_error_set_message(message);
    return first;
}

static void segment_release(void *arg)
{
    replay_segment *seg = arg;
    model_unref(seg->model);
    free(seg);
}

static aclError not_capturing(struct ah_model **slot, void *ctx)
{
    if (*slot)
        return ah_error(ACL_ERROR_RT_STREAM_CAPTURED,
                        "aclmdlRIExecuteAsync: the target stream is capturing; acl_host does not "
                        "replay a model into another capture");
    return ACL_SUCCESS;
}

/* Takes a reference on a ready model; NULL (with the error in *rc) otherwise. */
static struct ah_model *acquire_ready(aclmdlRI handle, const char *api, aclError *rc)
{
    struct ah_model *m = handle;
    pthread_mutex_lock(&g_models_mutex);
    bool live = m && listed_locked(m);
    model_state state = M_READY;
    if (live) {
        pthread_mutex_lock(&m->mutex);
        state = m->state;
        pthread_mutex_unlock(&m->mutex);
        if (state == M_READY)
            atomic_fetch_add(&m->refs, 1);
    }
    pthread_mutex_unlock(&g_models_mutex);
    if (!live) {
        *rc = ah_error(ACL_ERROR_RT_INVALID_HANDLE,
                       "%s: %p is not a live model (destroyed, or not from aclmdlRICaptureEnd)",
                       api, handle);
        return NULL;
    }
    if (state != M_READY) {
        *rc = ah_error(ACL_ERROR_RT_MODEL_CAPTURED, "%s: model %p is still being captured", api,
                       handle);
        return NULL;
    }
    return m;
}

/* Every recorded range lies in live device memory; the check is skipped when it passed before
 * and no device memory was released since (the epoch is read before checking). */
static aclError check_ranges(struct ah_model *m, const char *api, uint64_t *epoch)
{
    *epoch = ah_mem_release_epoch();
    if (atomic_load(&m->checked_epoch) == *epoch + 1)
        return ACL_SUCCESS;
    aclError rc = ACL_SUCCESS;
    for (size_t i = 0; i < m->n_items && rc == ACL_SUCCESS; i++) {
        rec_item *r = m->items[i];
        for (size_t k = 0; k < r->n_ranges && rc == ACL_SUCCESS; k++) {
            rc = ah_mem_check_device(r->ranges[k].ptr, r->ranges[k].size, r->name);
            if (rc != ACL_SUCCESS) { /* again, for the message naming the API (rare path) */
                char what[96];
                snprintf(what, sizeof what, "%s: %s", api, r->name);
                rc = ah_mem_check_device(r->ranges[k].ptr, r->ranges[k].size, what);
            }
        }
    }
    if (rc == ACL_SUCCESS)
        atomic_store(&m->checked_epoch, *epoch + 1);
    return rc;
}

AH_API aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream)
{
    const char *api = "aclmdlRIExecuteAsync";
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    struct ah_model *m = acquire_ready(modelRI, api, &rc);
    if (!m)
        return rc;
    if (m->device != ah_stream_device(s))
        rc = ah_error(ACL_ERROR_RT_STREAM_CONTEXT,
                      "%s: the model was captured on device %d, the stream is on device %d", api,
                      m->device, ah_stream_device(s));
    if (rc == ACL_SUCCESS)
        rc = ah_stream_capture_slot(s, not_capturing, NULL);
    /* Check everything first, so a failing replay queues nothing. */
    uint64_t epoch = 0;
    for (size_t i = 0; i < m->n_steps && rc == ACL_SUCCESS; i++) {
        if (m->steps[i].end == 0) {
            rec_item *r = m->items[m->steps[i].begin];
            rc = r->replay(r->arg, s, true);
        }
    }
    if (rc == ACL_SUCCESS)
        rc = check_ranges(m, api, &epoch);
    /* Event records are re-issued on the stream; the runs of tasks between them are queued as
     * one task each. */
    for (size_t i = 0; i < m->n_steps && rc == ACL_SUCCESS; i++) {
        const struct replay_step *step = &m->steps[i];
        if (step->end == 0) {
            rec_item *r = m->items[step->begin];
            rc = r->replay(r->arg, s, false);
            continue;
        }
        replay_segment *seg = malloc(sizeof *seg);
        if (!seg) {
            rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
            break;
        }
        atomic_fetch_add(&m->refs, 1); /* dropped by segment_release, even on failure */
        *seg = (replay_segment){m, step->begin, step->end, epoch};
        rc = ah_stream_enqueue(s, api, segment_run, seg, segment_release, NULL, 0, NULL);
    }
    model_unref(m);
    return rc;
}

AH_API aclError aclmdlRIDestroy(aclmdlRI modelRI)
{
    const char *api = "aclmdlRIDestroy";
    struct ah_model *m = modelRI;
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_models_mutex);
    if (!m || !listed_locked(m)) {
        rc = ah_error(ACL_ERROR_RT_INVALID_HANDLE, "%s: %p is not a live model (double destroy?)",
                      api, modelRI);
    } else {
        pthread_mutex_lock(&m->mutex);
        bool attached = m->stream != NULL;
        pthread_mutex_unlock(&m->mutex);
        if (attached)
            rc = ah_error(ACL_ERROR_RT_MODEL_CAPTURED,
                          "%s: model %p is still being captured; end the capture first", api,
                          modelRI);
        else
            unlist_locked(m);
    }
    pthread_mutex_unlock(&g_models_mutex);
    if (rc == ACL_SUCCESS)
        model_unref(m); /* queued replays keep it alive until they finish */
    return rc;
}
