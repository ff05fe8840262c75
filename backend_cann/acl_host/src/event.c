/* event.c - events: snapshots of a stream's progress, waits between streams, timing.
 *
 * Recording an event on stream S queues a small task that stamps the time, and stores the
 * snapshot "the first k tasks of S" (k includes the stamp). Re-recording overwrites it.
 * aclrtStreamWaitEvent copies the current snapshot into a barrier task on the waiting stream,
 * so a later re-record does not affect waits already queued. An event never recorded is
 * complete. Event objects are recycled, never freed, so stale handles are reported as errors.
 *
 * Inside a graph capture, a record becomes a model item that records the event on the replay
 * stream at aclmdlRIExecuteAsync; the event's host-visible state is untouched until then. A
 * wait on a capturing stream becomes a recorded barrier on the event's snapshot as of capture
 * time (a record made before the capture), or nothing if the record was made earlier in the
 * same capture (same stream, in order). Waiting on another stream for an event recorded inside
 * an active capture would join that stream into the capture: acl_host does not support it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "ah_rt.h"

#define EVENT_MAGIC 0x45564e54u
#define EVENT_DEAD 0x44454144u
#define EVENT_KNOWN_FLAGS                                                                      \
    (ACL_EVENT_SYNC | ACL_EVENT_CAPTURE_STREAM_PROGRESS | ACL_EVENT_TIME_LINE | ACL_EVENT_EXTERNAL)

typedef struct ah_event {
    _Atomic uint32_t magic;
    pthread_mutex_t mutex;
    uint32_t generation; /* +1 at destroy, so stamps of an old life are dropped */
    uint32_t flags;
    bool recorded;
    struct ah_stream *stream;
    uint32_t stream_generation;
    uint64_t count;
    uint64_t record_id;
    uint64_t capture_id; /* last recorded inside this capture (0: a normal record) */
    bool stamped;
    struct timespec stamp;
    struct ah_event *next_free;
} ah_event;

static pthread_mutex_t g_events_mutex = PTHREAD_MUTEX_INITIALIZER;
static ah_event *g_free_events;

typedef struct snapshot {
    struct ah_stream *stream; /* NULL: never recorded */
    uint32_t stream_generation;
    uint64_t count;
} snapshot;

static aclError resolve_event(aclrtEvent handle, const char *api, ah_event **out)
{
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    ah_event *e = handle;
    if (!e || atomic_load(&e->magic) != EVENT_MAGIC)
        return ah_error(ACL_ERROR_RT_INVALID_HANDLE, "%s: event %p is not a live event", api,
                        handle);
    *out = e;
    return ACL_SUCCESS;
}

static snapshot take_snapshot(ah_event *e)
{
    pthread_mutex_lock(&e->mutex);
    snapshot snap = {e->recorded ? e->stream : NULL, e->stream_generation, e->count};
    pthread_mutex_unlock(&e->mutex);
    return snap;
}

/* ---- creation --------------------------------------------------------------------------------- */

static aclError create_event(aclrtEvent *event, uint32_t flags, const char *api)
{
    if (!event)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: event is NULL", api);
    aclError rc = ah_rt_require_device(api, NULL);
    if (rc != ACL_SUCCESS)
        return rc;
    if (flags & ~EVENT_KNOWN_FLAGS)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: unknown flag bits 0x%x", api, flags);
    pthread_mutex_lock(&g_events_mutex);
    ah_event *e = g_free_events;
    if (e) {
        g_free_events = e->next_free;
    } else if ((e = calloc(1, sizeof *e)) != NULL) {
        pthread_mutex_init(&e->mutex, NULL);
    }
    pthread_mutex_unlock(&g_events_mutex);
    if (!e)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    pthread_mutex_lock(&e->mutex);
    e->flags = flags;
    e->recorded = e->stamped = false;
    e->stream = NULL;
    e->capture_id = 0;
    pthread_mutex_unlock(&e->mutex);
    atomic_store(&e->magic, EVENT_MAGIC);
    *event = e;
    return ACL_SUCCESS;
}

AH_API aclError aclrtCreateEvent(aclrtEvent *event)
{
    return create_event(event, ACL_EVENT_SYNC, "aclrtCreateEvent");
}

AH_API aclError aclrtCreateEventWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event(event, flag, "aclrtCreateEventWithFlag");
}

AH_API aclError aclrtCreateEventExWithFlag(aclrtEvent *event, uint32_t flag)
{
    return create_event(event, flag, "aclrtCreateEventExWithFlag");
}

/* Allowed while the event is pending: queued waits hold their own copy of the snapshot. */
AH_API aclError aclrtDestroyEvent(aclrtEvent event)
{
    ah_event *e = NULL;
    aclError rc = resolve_event(event, "aclrtDestroyEvent", &e);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&g_events_mutex);
    if (atomic_exchange(&e->magic, EVENT_DEAD) == EVENT_MAGIC) {
        pthread_mutex_lock(&e->mutex);
        e->generation++;
        pthread_mutex_unlock(&e->mutex);
        e->next_free = g_free_events;
        g_free_events = e;
    }
    pthread_mutex_unlock(&g_events_mutex);
    return ACL_SUCCESS;
}

/* Live events keep their objects (never freed); nothing else is held across aclFinalize. */
void ah_event_release_all(void) {}

/* ---- record and wait ------------------------------------------------------------------------ */

typedef struct stamp_task {
    ah_event *event;
    uint32_t generation;
    uint64_t record_id;
} stamp_task;

static aclError run_stamp(void *arg)
{
    stamp_task *st = arg;
    ah_event *e = st->event;
    pthread_mutex_lock(&e->mutex);
    if (e->generation == st->generation && e->record_id == st->record_id) {
        clock_gettime(CLOCK_MONOTONIC, &e->stamp);
        e->stamped = true;
    }
    pthread_mutex_unlock(&e->mutex);
    return ACL_SUCCESS;
}

/* A normal record of e on s. */
static aclError record_on(ah_event *e, struct ah_stream *s, const char *api)
{
    stamp_task *st = malloc(sizeof *st);
    if (!st)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    pthread_mutex_lock(&e->mutex);
    uint64_t record_id = ++e->record_id;
    *st = (stamp_task){e, e->generation, record_id};
    e->stamped = false;
    pthread_mutex_unlock(&e->mutex);

    uint32_t stream_generation = ah_stream_generation(s);
    uint64_t count = 0;
    aclError rc = ah_stream_enqueue(s, api, run_stamp, st, free, NULL, 0, &count);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&e->mutex);
    if (e->record_id == record_id) { /* not overtaken by a concurrent record */
        e->recorded = true;
        e->stream = s;
        e->stream_generation = stream_generation;
        e->count = count;
        e->capture_id = 0;
    }
    pthread_mutex_unlock(&e->mutex);
    return ACL_SUCCESS;
}

/* ---- records inside a capture ----------------------------------------------------------------- */

typedef struct captured_record {
    ah_event *event;
    uint32_t generation;
} captured_record;

static aclError replay_record(void *arg, struct ah_stream *target, bool check_only)
{
    captured_record *cr = arg;
    ah_event *e = cr->event;
    pthread_mutex_lock(&e->mutex);
    bool live = atomic_load(&e->magic) == EVENT_MAGIC && e->generation == cr->generation;
    pthread_mutex_unlock(&e->mutex);
    if (!live)
        return ah_error(ACL_ERROR_RT_INVALID_HANDLE,
                        "aclmdlRIExecuteAsync: an event recorded in the captured model (%p) was "
                        "destroyed", (void *)e);
    return check_only ? ACL_SUCCESS : record_on(e, target, "aclmdlRIExecuteAsync");
}

typedef struct capture_ctx {
    const ah_capture_item *item; /* NULL: only read the capture id */
    bool captured;
    uint64_t id;
} capture_ctx;

static aclError capture_slot(struct ah_model **slot, void *arg)
{
    capture_ctx *ctx = arg;
    ctx->captured = *slot != NULL;
    ctx->id = *slot ? ah_capture_id(*slot) : 0;
    return *slot && ctx->item ? ah_capture_append(*slot, ctx->item) : ACL_SUCCESS;
}

AH_API aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream)
{
    const char *api = "aclrtRecordEvent";
    ah_event *e = NULL;
    struct ah_stream *s = NULL;
    aclError rc = resolve_event(event, api, &e);
    if (rc == ACL_SUCCESS)
        rc = ah_stream_resolve(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    captured_record *cr = malloc(sizeof *cr);
    if (!cr)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    pthread_mutex_lock(&e->mutex);
    *cr = (captured_record){e, e->generation};
    pthread_mutex_unlock(&e->mutex);
    ah_capture_item item = {api, NULL, cr, free, replay_record, NULL, 0};
    capture_ctx ctx = {&item, false, 0};
    rc = ah_stream_capture_slot(s, capture_slot, &ctx);
    if (!ctx.captured) {
        free(cr);
        return record_on(e, s, api);
    }
    if (rc == ACL_SUCCESS) {
        pthread_mutex_lock(&e->mutex);
        e->capture_id = ctx.id;
        pthread_mutex_unlock(&e->mutex);
    }
    return rc;
}

static aclError run_barrier(void *arg)
{
    snapshot *snap = arg;
    ah_stream_wait_prefix(snap->stream, snap->stream_generation, snap->count);
    return ACL_SUCCESS;
}

AH_API aclError aclrtStreamWaitEvent(aclrtStream stream, aclrtEvent event)
{
    const char *api = "aclrtStreamWaitEvent";
    ah_event *e = NULL;
    struct ah_stream *s = NULL;
    aclError rc = resolve_event(event, api, &e);
    if (rc == ACL_SUCCESS)
        rc = ah_stream_resolve(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&e->mutex);
    uint64_t recorded_in = e->capture_id;
    pthread_mutex_unlock(&e->mutex);
    if (recorded_in) {
        capture_ctx ctx = {NULL, false, 0};
        ah_stream_capture_slot(s, capture_slot, &ctx);
        if (ctx.id == recorded_in) /* recorded earlier in this capture: already in order */
            return ACL_SUCCESS;
        if (ah_capture_id_active(recorded_in))
            return ah_error(ACL_ERROR_RT_EVENT_CAPTURED,
                            "%s: event %p was recorded inside a capture on another stream; "
                            "acl_host captures one stream at a time (no cross-stream capture)",
                            api, event);
    }
    snapshot snap = take_snapshot(e);
    if (!snap.stream || snap.stream == s) /* nothing to wait for, or already in order */
        return ACL_SUCCESS;
    snapshot *arg = malloc(sizeof *arg);
    if (!arg)
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    *arg = snap;
    return ah_stream_enqueue(s, api, run_barrier, arg, free, NULL, 0, NULL);
}

/* ---- host-side queries ------------------------------------------------------------------------ */

static aclError synchronize_event(aclrtEvent event, int32_t timeout_ms, const char *api)
{
    ah_event *e = NULL;
    aclError rc = resolve_event(event, api, &e);
    if (rc != ACL_SUCCESS)
        return rc;
    snapshot snap = take_snapshot(e);
    if (!snap.stream)
        return ACL_SUCCESS;
    return ah_stream_sync_prefix(snap.stream, snap.stream_generation, snap.count, timeout_ms, api);
}

AH_API aclError aclrtSynchronizeEvent(aclrtEvent event)
{
    return synchronize_event(event, -1, "aclrtSynchronizeEvent");
}

AH_API aclError aclrtSynchronizeEventWithTimeout(aclrtEvent event, int32_t timeout)
{
    if (timeout == 0 || timeout < -1)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclrtSynchronizeEventWithTimeout: timeout %d must be -1 or > 0",
                        (int)timeout);
    return synchronize_event(event, timeout, "aclrtSynchronizeEventWithTimeout");
}

/* Never runs work: in deferred mode a recorded event stays NOT_READY until someone syncs. */
AH_API aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status)
{
    if (!status)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtQueryEventStatus: status is NULL");
    ah_event *e = NULL;
    aclError rc = resolve_event(event, "aclrtQueryEventStatus", &e);
    if (rc != ACL_SUCCESS)
        return rc;
    snapshot snap = take_snapshot(e);
    bool done = !snap.stream || ah_stream_prefix_done(snap.stream, snap.stream_generation, snap.count);
    *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return ACL_SUCCESS;
}

AH_API aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent)
{
    const char *api = "aclrtEventElapsedTime";
    if (!ms)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: ms is NULL", api);
    ah_event *start = NULL, *end = NULL;
    aclError rc = resolve_event(startEvent, api, &start);
    if (rc == ACL_SUCCESS)
        rc = resolve_event(endEvent, api, &end);
    if (rc != ACL_SUCCESS)
        return rc;
    struct timespec t[2];
    bool stamped[2];
    ah_event *pair[2] = {start, end};
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&pair[i]->mutex);
        stamped[i] = pair[i]->stamped;
        t[i] = pair[i]->stamp;
        pthread_mutex_unlock(&pair[i]->mutex);
    }
    if (!stamped[0] || !stamped[1])
        return ah_error(ACL_ERROR_RT_EVENT_NOT_COMPLETE,
                        "%s: both events must be recorded and complete", api);
    *ms = (float)((double)(t[1].tv_sec - t[0].tv_sec) * 1e3 +
                  (double)(t[1].tv_nsec - t[0].tv_nsec) / 1e6);
    return ACL_SUCCESS;
}
