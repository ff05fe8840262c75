/* stream.c - streams: in-order task queues, their worker threads, deferred mode and sync.
 *
 * A task is {run, arg, release, ranges}. It is released exactly once, when it is discarded
 * after running (or when a stream is destroyed by force), so a later graph-capture mode can
 * keep tasks and replay them instead. Right before a task runs, its ranges are checked again:
 * one that now lies in a freed block fails the task instead of touching released memory.
 * A failing task's error sticks to its stream until the next synchronize reports it.
 *
 * Normal mode: each stream has a worker thread that runs tasks as they are queued. Deferred
 * mode (CANN_LLM_HOST_DEFERRED=1): no workers; queued work runs only when the host waits for
 * it (stream/device/event sync, or an async copy from pageable memory), on the waiting thread.
 * In normal mode too, a thread that waits for the stream without a deadline (a synchronize, an
 * event wait, an async copy from pageable memory) runs the tasks it waits for itself when the
 * stream is idle, instead of sleeping until the worker has woken, run them and woken it: the
 * same order and result without two thread wake-ups (~0.25 ms on a VM, paid by every input
 * upload and every logits download of a decode step), and the graph then runs on the waiting
 * thread while the worker sleeps. Either way, whoever runs a task marks the stream busy, and the
 * worker does not start a task while the stream is busy, so tasks of one stream never overlap.
 *
 * Graph capture (capture.c): while a stream captures, ah_stream_enqueue hands every task to the
 * capturing model instead of queueing it; nothing runs and n_submitted does not move.
 *
 * Stream objects are never returned to the allocator: a destroyed stream goes to a free list
 * with a dead magic number and a new generation, so a stale handle is an error, not a crash.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_rt.h"

#define STREAM_MAGIC 0x5354524du /* live */
#define STREAM_DEAD 0x44454144u

typedef struct ah_task {
    struct ah_task *next;
    uint64_t gseq; /* process-wide launch number, for the quarantine */
    ah_task_run_fn run;
    void *arg;
    ah_task_release_fn release;
    char name[64];
    size_t n_ranges;
    ah_range ranges[];
} ah_task;

struct ah_stream {
    _Atomic uint32_t magic;
    uint32_t generation; /* +1 at every destroy */
    int device;
    bool is_default;
    pthread_mutex_t mutex;
    pthread_cond_t work_cv; /* worker: a task was queued, or stop */
    pthread_cond_t done_cv; /* waiters: a task finished */
    ah_task *head, *tail;
    uint64_t n_submitted, n_completed;
    uint64_t wake_at; /* done_cv is broadcast when n_completed reaches this (a waiter's target) */
    bool busy; /* a task of this stream is running */
    uint64_t running_gseq;
    bool stop;
    bool has_worker;
    pthread_t worker;
    aclError sticky;
    char sticky_message[AH_ERRMSG_SIZE];
    struct ah_model *capture; /* capturing into this model (aclmdlRICaptureBegin) */
    struct ah_stream *next_free;
};

static pthread_mutex_t g_streams_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct ah_stream **g_streams; /* live streams */
static size_t g_n_streams, g_streams_cap;
static struct ah_stream *g_free_streams;
static struct ah_stream *g_default_stream[AH_MAX_DEVICES];
static int g_streams_per_device[AH_MAX_DEVICES];
static _Atomic uint64_t g_gseq;

uint64_t ah_stream_last_gseq(void) { return atomic_load(&g_gseq); }

uint64_t ah_stream_oldest_pending_gseq(void)
{
    uint64_t oldest = UINT64_MAX;
    pthread_mutex_lock(&g_streams_mutex);
    for (size_t i = 0; i < g_n_streams; i++) {
        struct ah_stream *s = g_streams[i];
        pthread_mutex_lock(&s->mutex);
        uint64_t g = s->busy ? s->running_gseq : s->head ? s->head->gseq : UINT64_MAX;
        pthread_mutex_unlock(&s->mutex);
        if (g < oldest)
            oldest = g;
    }
    pthread_mutex_unlock(&g_streams_mutex);
    return oldest;
}

static void task_discard(ah_task *t)
{
    if (t->release)
        t->release(t->arg);
    free(t);
}

/* Runs the head task. Called and returns with s->mutex held; s->head != NULL, !s->busy. */
static void run_head_task(struct ah_stream *s)
{
    ah_task *t = s->head;
    s->head = t->next;
    if (!s->head)
        s->tail = NULL;
    s->busy = true;
    s->running_gseq = t->gseq;
    pthread_mutex_unlock(&s->mutex);

    aclError rc = ACL_SUCCESS;
    for (size_t i = 0; i < t->n_ranges && rc == ACL_SUCCESS; i++)
        rc = ah_mem_check_live(&t->ranges[i], t->name);
    if (rc == ACL_SUCCESS)
        rc = t->run(t->arg);
    char message[AH_ERRMSG_SIZE];
    if (rc != ACL_SUCCESS) {
        ah_error_take(message, sizeof message);
        if (message[0] == '\0')
            snprintf(message, sizeof message, "%s: failed on device %d with error %d", t->name,
                     s->device, rc);
    }
    task_discard(t);

    pthread_mutex_lock(&s->mutex);
    if (rc != ACL_SUCCESS && s->sticky == ACL_SUCCESS) {
        s->sticky = rc;
        memcpy(s->sticky_message, message, sizeof message);
    }
    s->busy = false;
    s->n_completed++;
    /* wake waiters only when one of them is satisfied, not once per task (deferred mode: a
     * waiter may be waiting for the stream to be idle so that it runs the next task itself) */
    if (s->n_completed >= s->wake_at || ah_rt_deferred()) {
        s->wake_at = UINT64_MAX;
        pthread_cond_broadcast(&s->done_cv);
    }
    if (ah_mem_has_quarantine()) {
        pthread_mutex_unlock(&s->mutex);
        ah_mem_collect();
        pthread_mutex_lock(&s->mutex);
    }
}

/* Waits until the stream completed `count` tasks of its life `generation` (a destroyed stream
 * completed all of them), running them itself in deferred mode. s->mutex held. False when the
 * deadline (may be NULL) passed first. */
static bool wait_completed_locked(struct ah_stream *s, uint32_t generation, uint64_t count,
                                  const struct timespec *deadline)
{
    bool deferred = ah_rt_deferred();
    bool helped = false;
    while (s->generation == generation && s->n_completed < count) {
        /* the next task is one we wait for and nobody runs it: run it here (in normal mode
         * only without a deadline), rather than sleep until the worker wakes, runs it and
         * wakes us */
        if (!s->busy && s->head && (deferred || !deadline)) {
            run_head_task(s);
            helped = !deferred;
            continue;
        }
        if (count < s->wake_at)
            s->wake_at = count;
        if (deadline) {
            if (pthread_cond_timedwait(&s->done_cv, &s->mutex, deadline) == ETIMEDOUT &&
                s->generation == generation && s->n_completed < count)
                return false;
        } else {
            pthread_cond_wait(&s->done_cv, &s->mutex);
        }
    }
    if (helped && (s->head || s->stop)) /* the worker may have seen us busy and gone to sleep */
        pthread_cond_signal(&s->work_cv);
    return true;
}

static void *stream_worker(void *arg)
{
    struct ah_stream *s = arg;
    ah_thread_as_device();
    pthread_mutex_lock(&s->mutex);
    for (;;) {
        while ((!s->head || s->busy) && !s->stop)
            pthread_cond_wait(&s->work_cv, &s->mutex);
        if (!s->head)
            break;
        if (s->busy) /* stopping while a waiter runs a task: it signals when done */
            pthread_cond_wait(&s->work_cv, &s->mutex);
        else
            run_head_task(s);
    }
    pthread_mutex_unlock(&s->mutex);
    return NULL;
}

/* ---- creation and destruction --------------------------------------------------------------- */

static struct ah_stream *stream_object(void)
{
    struct ah_stream *s = g_free_streams;
    if (s) {
        g_free_streams = s->next_free;
        return s;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&s->mutex, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, &attr);
    pthread_condattr_destroy(&attr);
    return s;
}

static aclError create_stream(const char *api, int device, bool is_default, struct ah_stream **out)
{
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&g_streams_mutex);
    struct ah_stream *s = NULL;
    if (g_streams_per_device[device] >= AH_MAX_STREAMS_PER_DEVICE) {
        rc = ah_error(ACL_ERROR_RT_NO_STREAM_RESOURCE,
                      "%s: device %d already has %d streams (the limit, default stream included)",
                      api, device, AH_MAX_STREAMS_PER_DEVICE);
    } else if (g_n_streams == g_streams_cap) {
        size_t cap = g_streams_cap ? g_streams_cap * 2 : 16;
        struct ah_stream **grown = realloc(g_streams, cap * sizeof *grown);
        if (grown) {
            g_streams = grown;
            g_streams_cap = cap;
        } else {
            rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
        }
    }
    if (rc == ACL_SUCCESS && !(s = stream_object()))
        rc = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", api);
    if (rc == ACL_SUCCESS) {
        s->device = device;
        s->is_default = is_default;
        s->head = s->tail = NULL;
        s->n_submitted = s->n_completed = 0;
        s->wake_at = UINT64_MAX;
        s->busy = s->stop = s->has_worker = false;
        s->sticky = ACL_SUCCESS;
        s->capture = NULL;
        if (!ah_rt_deferred()) {
            if (pthread_create(&s->worker, NULL, stream_worker, s) == 0) {
                s->has_worker = true;
            } else {
                s->next_free = g_free_streams;
                g_free_streams = s;
                rc = ah_error(ACL_ERROR_RT_NO_STREAM_RESOURCE,
                              "%s: cannot start a worker thread for the stream", api);
            }
        }
    }
    if (rc == ACL_SUCCESS) {
        atomic_store(&s->magic, STREAM_MAGIC);
        g_streams[g_n_streams++] = s;
        g_streams_per_device[device]++;
        if (is_default)
            g_default_stream[device] = s;
        *out = s;
    }
    pthread_mutex_unlock(&g_streams_mutex);
    return rc;
}

/* Finishes (force: discards) the queued work, joins the worker, recycles the object. */
static void destroy_stream(struct ah_stream *s, bool force)
{
    pthread_mutex_lock(&s->mutex);
    if (s->capture) {
        ah_capture_abandon(s->capture);
        s->capture = NULL;
    }
    if (force) {
        while (s->head) {
            ah_task *t = s->head;
            s->head = t->next;
            task_discard(t);
            s->n_completed++;
        }
        s->tail = NULL;
    }
    wait_completed_locked(s, s->generation, s->n_submitted, NULL);
    s->stop = true;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mutex);
    if (s->has_worker && !pthread_equal(s->worker, pthread_self()))
        pthread_join(s->worker, NULL);

    pthread_mutex_lock(&g_streams_mutex);
    for (size_t i = 0; i < g_n_streams; i++) {
        if (g_streams[i] == s) {
            g_streams[i] = g_streams[--g_n_streams];
            g_streams_per_device[s->device]--;
            break;
        }
    }
    if (g_default_stream[s->device] == s)
        g_default_stream[s->device] = NULL;
    pthread_mutex_lock(&s->mutex);
    atomic_store(&s->magic, STREAM_DEAD);
    s->generation++;
    s->has_worker = false;
    pthread_cond_broadcast(&s->done_cv);
    pthread_mutex_unlock(&s->mutex);
    s->next_free = g_free_streams;
    g_free_streams = s;
    pthread_mutex_unlock(&g_streams_mutex);
}

aclError ah_stream_create_default(int device)
{
    struct ah_stream *s = NULL;
    return create_stream("aclrtSetDevice", device, true, &s);
}

void ah_stream_destroy_device(int device)
{
    for (;;) {
        struct ah_stream *victim = NULL;
        pthread_mutex_lock(&g_streams_mutex);
        for (size_t i = 0; i < g_n_streams && !victim; i++)
            if (device < 0 || g_streams[i]->device == device)
                victim = g_streams[i];
        pthread_mutex_unlock(&g_streams_mutex);
        if (!victim)
            return;
        destroy_stream(victim, false);
    }
}

/* ---- handles -------------------------------------------------------------------------------- */

aclError ah_stream_resolve_any(aclrtStream handle, const char *api, struct ah_stream **out)
{
    int device = 0;
    aclError rc = ACL_SUCCESS;
    if (!ah_initialized())
        return ah_error(ACL_ERROR_UNINITIALIZE, "%s: aclInit has not been called", api);
    if (handle == NULL) {
        if ((rc = ah_rt_require_device(api, &device)) != ACL_SUCCESS)
            return rc;
        pthread_mutex_lock(&g_streams_mutex);
        *out = g_default_stream[device];
        pthread_mutex_unlock(&g_streams_mutex);
        if (!*out)
            return ah_error(ACL_ERROR_RT_CONTEXT_NULL, "%s: device %d has no default stream", api,
                            device);
        return ACL_SUCCESS;
    }
    struct ah_stream *s = handle;
    if (atomic_load(&s->magic) != STREAM_MAGIC)
        return ah_error(ACL_ERROR_RT_INVALID_HANDLE,
                        "%s: stream %p is not a live stream (destroyed?)", api, handle);
    *out = s;
    return ACL_SUCCESS;
}

aclError ah_stream_resolve(aclrtStream handle, const char *api, struct ah_stream **out)
{
    int device = 0;
    aclError rc = ah_stream_resolve_any(handle, api, out);
    if (rc == ACL_SUCCESS)
        rc = ah_rt_require_device(api, &device);
    if (rc == ACL_SUCCESS && (*out)->device != device)
        rc = ah_error(ACL_ERROR_RT_STREAM_CONTEXT,
                      "%s: stream %p belongs to device %d but this thread's device is %d", api,
                      handle, (*out)->device, device);
    return rc;
}

/* ---- queueing and waiting ------------------------------------------------------------------ */

static aclError enqueue(struct ah_stream *s, const char *name, ah_task_run_fn run, void *arg,
                       ah_task_release_fn release, const ah_range *ranges, size_t n_ranges,
                       uint64_t *seq, bool wake);

aclError ah_stream_enqueue(struct ah_stream *s, const char *name, ah_task_run_fn run, void *arg,
                           ah_task_release_fn release, const ah_range *ranges, size_t n_ranges,
                           uint64_t *seq)
{
    return enqueue(s, name, run, arg, release, ranges, n_ranges, seq, true);
}

aclError ah_stream_enqueue_and_wait(struct ah_stream *s, const char *name, ah_task_run_fn run,
                                    void *arg, ah_task_release_fn release,
                                    const ah_range *ranges, size_t n_ranges)
{
    uint64_t seq = 0;
    aclError rc = enqueue(s, name, run, arg, release, ranges, n_ranges, &seq, false);
    if (rc == ACL_SUCCESS && seq)
        ah_stream_wait_seq(s, seq);
    return rc;
}

/* Queues the task; `wake`: signal the worker (not when the caller waits for the task at once:
 * it runs it itself when the stream is idle, and a worker that is running an earlier task takes
 * the next one without a signal). */
static aclError enqueue(struct ah_stream *s, const char *name, ah_task_run_fn run, void *arg,
                       ah_task_release_fn release, const ah_range *ranges, size_t n_ranges,
                       uint64_t *seq, bool wake)
{
    ah_task *t = malloc(sizeof *t + n_ranges * sizeof(ah_range));
    if (!t) {
        if (release)
            release(arg);
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", name);
    }
    t->next = NULL;
    t->run = run;
    t->arg = arg;
    t->release = release;
    if (!name)
        name = "task";
    size_t len = strnlen(name, sizeof t->name - 1);
    memcpy(t->name, name, len);
    t->name[len] = '\0';
    t->n_ranges = n_ranges;
    if (n_ranges)
        memcpy(t->ranges, ranges, n_ranges * sizeof(ah_range));

    pthread_mutex_lock(&s->mutex);
    if (s->stop || atomic_load(&s->magic) != STREAM_MAGIC) {
        pthread_mutex_unlock(&s->mutex);
        task_discard(t);
        return ah_error(ACL_ERROR_RT_INVALID_HANDLE, "%s: the stream is being destroyed", name);
    }
    if (s->capture) { /* recorded, not run */
        ah_capture_item item = {t->name, run, arg, release, NULL, ranges, n_ranges};
        aclError rc = ah_capture_append(s->capture, &item);
        pthread_mutex_unlock(&s->mutex);
        free(t);
        if (seq)
            *seq = 0;
        return rc;
    }
    t->gseq = atomic_fetch_add(&g_gseq, 1) + 1;
    if (s->tail)
        s->tail->next = t;
    else
        s->head = t;
    s->tail = t;
    s->n_submitted++;
    if (seq)
        *seq = s->n_submitted;
    if (s->has_worker && wake)
        pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->mutex);
    return ACL_SUCCESS;
}

aclError ah_stream_capture_slot(struct ah_stream *s, ah_capture_slot_fn fn, void *ctx)
{
    pthread_mutex_lock(&s->mutex);
    aclError rc = fn(&s->capture, ctx);
    pthread_mutex_unlock(&s->mutex);
    return rc;
}

int ah_stream_device(const struct ah_stream *s) { return s->device; }

aclError ah_stream_submit(aclrtStream stream, const char *name, ah_task_run_fn run, void *arg,
                          ah_task_release_fn release, const ah_range *ranges, size_t n_ranges)
{
    if (!name)
        name = "task";
    struct ah_stream *s = NULL;
    aclError rc = run ? ACL_SUCCESS
                      : ah_error(ACL_ERROR_INVALID_PARAM, "%s: task has no run function", name);
    if (rc == ACL_SUCCESS)
        rc = ah_stream_resolve(stream, name, &s);
    for (size_t i = 0; i < n_ranges && rc == ACL_SUCCESS; i++)
        rc = ah_mem_check_device(ranges[i].ptr, ranges[i].size, name);
    if (rc != ACL_SUCCESS) {
        if (release)
            release(arg);
        return rc;
    }
    return ah_stream_enqueue(s, name, run, arg, release, ranges, n_ranges, NULL);
}

void ah_stream_wait_seq(struct ah_stream *s, uint64_t seq)
{
    pthread_mutex_lock(&s->mutex);
    wait_completed_locked(s, s->generation, seq, NULL);
    pthread_mutex_unlock(&s->mutex);
}

void ah_stream_wait_prefix(struct ah_stream *s, uint32_t generation, uint64_t count)
{
    pthread_mutex_lock(&s->mutex);
    wait_completed_locked(s, generation, count, NULL);
    pthread_mutex_unlock(&s->mutex);
}

uint32_t ah_stream_generation(struct ah_stream *s)
{
    pthread_mutex_lock(&s->mutex);
    uint32_t generation = s->generation;
    pthread_mutex_unlock(&s->mutex);
    return generation;
}

bool ah_stream_prefix_done(struct ah_stream *s, uint32_t generation, uint64_t count)
{
    pthread_mutex_lock(&s->mutex);
    bool done = s->generation != generation || s->n_completed >= count;
    pthread_mutex_unlock(&s->mutex);
    return done;
}

static void deadline_after(int32_t timeout_ms, struct timespec *deadline)
{
    clock_gettime(CLOCK_MONOTONIC, deadline);
    deadline->tv_sec += timeout_ms / 1000;
    deadline->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (deadline->tv_nsec >= 1000000000L) {
        deadline->tv_sec++;
        deadline->tv_nsec -= 1000000000L;
    }
}

/* Reports and clears the sticky error; s->mutex held. */
static aclError take_sticky_locked(struct ah_stream *s)
{
    aclError rc = s->sticky;
    if (rc != ACL_SUCCESS) {
        ah_error_set_message(s->sticky_message);
        s->sticky = ACL_SUCCESS;
    }
    return rc;
}

static aclError sync_prefix_until(struct ah_stream *s, uint32_t generation, uint64_t count,
                                  const struct timespec *deadline, const char *api)
{
    aclError rc = ACL_SUCCESS;
    pthread_mutex_lock(&s->mutex);
    if (s->generation == generation) {
        if (!wait_completed_locked(s, generation, count, deadline))
            rc = ah_error(ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
                          "%s: timed out with %llu task(s) of the stream still pending", api,
                          (unsigned long long)(count - s->n_completed));
        else
            rc = take_sticky_locked(s);
    }
    pthread_mutex_unlock(&s->mutex);
    return rc;
}

aclError ah_stream_sync_prefix(struct ah_stream *s, uint32_t generation, uint64_t count,
                               int32_t timeout_ms, const char *api)
{
    struct timespec deadline;
    if (timeout_ms > 0)
        deadline_after(timeout_ms, &deadline);
    return sync_prefix_until(s, generation, count, timeout_ms > 0 ? &deadline : NULL, api);
}

aclError ah_stream_sync_device(int device, int32_t timeout_ms)
{
    struct timespec deadline;
    if (timeout_ms > 0)
        deadline_after(timeout_ms, &deadline);
    /* Snapshot the device's streams; one destroyed meanwhile has drained (generation check). */
    pthread_mutex_lock(&g_streams_mutex);
    size_t n = 0;
    struct ah_stream **list = malloc((g_n_streams + 1) * sizeof *list);
    uint32_t *generations = malloc((g_n_streams + 1) * sizeof *generations);
    for (size_t i = 0; list && generations && i < g_n_streams; i++) {
        if (g_streams[i]->device == device) {
            list[n] = g_streams[i];
            generations[n++] = ah_stream_generation(g_streams[i]);
        }
    }
    pthread_mutex_unlock(&g_streams_mutex);
    aclError first = ACL_SUCCESS;
    char message[AH_ERRMSG_SIZE] = "";
    if (!list || !generations)
        first = ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "aclrtSynchronizeDevice: out of host memory");
    for (size_t i = 0; i < n; i++) {
        struct ah_stream *s = list[i];
        pthread_mutex_lock(&s->mutex);
        uint64_t count = s->n_submitted;
        pthread_mutex_unlock(&s->mutex);
        aclError rc = sync_prefix_until(s, generations[i], count, timeout_ms > 0 ? &deadline : NULL,
                                        "aclrtSynchronizeDevice");
        if (rc != ACL_SUCCESS && first == ACL_SUCCESS) {
            first = rc;
            ah_error_take(message, sizeof message);
        }
    }
    free(list);
    free(generations);
    if (first != ACL_SUCCESS && message[0])
        ah_error_set_message(message);
    return first;
}

/* ---- the stream API ------------------------------------------------------------------------- */

AH_API aclError aclrtCreateStream(aclrtStream *stream)
{
    return aclrtCreateStreamWithConfig(stream, 0, 0);
}

/* Priority and the fast-launch/fast-sync flags change nothing on the host. */
AH_API aclError aclrtCreateStreamWithConfig(aclrtStream *stream, uint32_t priority, uint32_t flag)
{
    const char *api = "aclrtCreateStream";
    if (!stream)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: stream is NULL", api);
    int device = 0;
    aclError rc = ah_rt_require_device(api, &device);
    if (rc != ACL_SUCCESS)
        return rc;
    if (flag & ~(ACL_STREAM_FAST_LAUNCH | ACL_STREAM_FAST_SYNC))
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: unknown flag bits 0x%x", api, flag);
    struct ah_stream *s = NULL;
    rc = create_stream(api, device, false, &s);
    *stream = rc == ACL_SUCCESS ? s : NULL;
    return rc;
}

static aclError destroy_user_stream(aclrtStream stream, bool force, const char *api)
{
    if (!stream)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: the default stream cannot be destroyed", api);
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve_any(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    if (s->is_default)
        return ah_error(ACL_ERROR_INVALID_PARAM, "%s: the default stream cannot be destroyed", api);
    destroy_stream(s, force);
    return ACL_SUCCESS;
}

AH_API aclError aclrtDestroyStream(aclrtStream stream)
{
    return destroy_user_stream(stream, false, "aclrtDestroyStream");
}

AH_API aclError aclrtDestroyStreamForce(aclrtStream stream)
{
    return destroy_user_stream(stream, true, "aclrtDestroyStreamForce");
}

static aclError synchronize_stream(aclrtStream stream, int32_t timeout_ms, const char *api)
{
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve_any(stream, api, &s);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&s->mutex);
    uint32_t generation = s->generation;
    uint64_t count = s->n_submitted;
    bool capturing = s->capture != NULL;
    if (capturing)
        ah_capture_invalidate(s->capture, api);
    pthread_mutex_unlock(&s->mutex);
    if (capturing)
        return ah_error(ACL_ERROR_RT_STREAM_CAPTURED,
                        "%s: stream %p is capturing (aclmdlRICaptureBegin); synchronizing it is "
                        "not allowed and invalidated the capture", api, stream);
    return ah_stream_sync_prefix(s, generation, count, timeout_ms, api);
}

AH_API aclError aclrtSynchronizeStream(aclrtStream stream)
{
    return synchronize_stream(stream, -1, "aclrtSynchronizeStream");
}

AH_API aclError aclrtSynchronizeStreamWithTimeout(aclrtStream stream, int32_t timeout)
{
    if (timeout == 0 || timeout < -1)
        return ah_error(ACL_ERROR_INVALID_PARAM,
                        "aclrtSynchronizeStreamWithTimeout: timeout %d must be -1 or > 0",
                        (int)timeout);
    return synchronize_stream(stream, timeout, "aclrtSynchronizeStreamWithTimeout");
}

/* Never runs work, so in deferred mode a stream with queued tasks stays NOT_READY. */
AH_API aclError aclrtStreamQuery(aclrtStream stream, aclrtStreamStatus *status)
{
    if (!status)
        return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtStreamQuery: status is NULL");
    struct ah_stream *s = NULL;
    aclError rc = ah_stream_resolve_any(stream, "aclrtStreamQuery", &s);
    if (rc != ACL_SUCCESS)
        return rc;
    pthread_mutex_lock(&s->mutex);
    *status = s->n_completed == s->n_submitted ? ACL_STREAM_STATUS_COMPLETE
                                               : ACL_STREAM_STATUS_NOT_READY;
    pthread_mutex_unlock(&s->mutex);
    return ACL_SUCCESS;
}
