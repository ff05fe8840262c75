/* ah_rt.h - glue between the runtime's own files (runtime.c, memory.c, copy.c, stream.c,
 * threadpool.c, error.c). The aclnn ops use ah.h only.
 */
#ifndef AH_RT_H
#define AH_RT_H

#include "ah.h"

/* Streams per device, default streams included (Atlas A2). */
#define AH_MAX_STREAMS_PER_DEVICE 1984

struct ah_stream;
struct ah_model;

/* ---- error.c ---- */
/* Moves this thread's recent message into buf ("" when there is none) and clears it. */
void ah_error_take(char *buf, size_t size);

/* ---- runtime.c: configuration read at aclInit ---- */
bool ah_rt_deferred(void);
/* CANN_LLM_HOST_HUGEPAGES (default on): huge-page policies become transparent-huge-page advice. */
bool ah_rt_hugepages(void);
size_t ah_rt_device_capacity(void);
/* True if peer access was enabled from a to b or from b to a. */
bool ah_rt_peer_enabled(int a, int b);
/* ACL_SUCCESS with *device = the calling thread's device, else an error naming `api`. */
aclError ah_rt_require_device(const char *api, int *device);

/* ---- memory.c ---- */
/* ah_mem_classify with `what` naming the operand in the error message. */
aclError ah_mem_classify_named(const void *ptr, size_t size, const char *what, ah_mem_kind *kind,
                               int *device);
/* ah_mem_check_device, and on success [*begin, *end) = the live device block holding ptr (the
 * AscendC shim caches it for the accesses of one kernel block). */
aclError ah_mem_device_extent(const void *ptr, size_t size, const char *what, uintptr_t *begin,
                              uintptr_t *end);
/* Run-time recheck of a queued task's range: fails only if it now lies in a freed block. */
aclError ah_mem_check_live(const ah_range *range, const char *task);
/* Releases quarantined blocks that no pending task can still reach. */
void ah_mem_collect(void);
bool ah_mem_has_quarantine(void);
/* Counts the releases of device memory (frees, unmaps): a range checked live at epoch E (read
 * before the check) is still live while the epoch is E. Replays skip their re-checks then. */
uint64_t ah_mem_release_epoch(void);
/* aclFinalize: unmaps every block. */
void ah_mem_release_all(void);
/* memset(p, value, count) for aclrtMemset(Async): zeroing whole pages of a large mmap'd block
 * hands them back to the kernel instead (they read as zero and are committed again on first
 * touch), so clearing a fresh KV cache neither writes nor faults in its memory. */
void ah_mem_set(void *p, int value, size_t count);
/* Device capacity accounting (aclrtMalloc, aclrtMallocPhysical). */
aclError ah_mem_charge(const char *api, int device, size_t bytes);
void ah_mem_credit(int device, size_t bytes);
/* If ptr lies in one of the last blocks freed, writes "use after free of ..." to buf. */
bool ah_mem_recently_freed(const void *ptr, char *buf, size_t n);
/* VMM mappings in the registry: register fails on overlap with any block (live or
 * quarantined); unregister follows aclrtFree's quarantine and puts the range back to PROT_NONE
 * when released; release_range (aclrtReleaseMemAddress) munmaps the reservation except the
 * quarantined mappings still in it, which are munmapped when collected. */
aclError ah_mem_vmm_register(const char *api, void *base, size_t size, int device,
                             uint64_t reservation);
void ah_mem_vmm_forget(void *base);
aclError ah_mem_vmm_unregister(const char *api, void *base);
void ah_mem_vmm_release_range(void *base, size_t size);

/* ---- vmm.c ---- */
/* If ptr lies in a reservation but not in a mapping, describes it in buf. */
bool ah_vmm_describe(const void *ptr, char *buf, size_t n);
/* aclFinalize: unmaps every reservation and closes every physical allocation. */
void ah_vmm_release_all(void);

/* ---- capture.c ---- */
struct ah_model;
/* One recorded task; replay (NULL for plain tasks) stands in for enqueueing it at
 * aclmdlRIExecuteAsync: event records are re-issued on the target stream. With check_only it
 * only validates (every item is checked before any is queued). */
typedef aclError (*ah_replay_fn)(void *arg, struct ah_stream *target, bool check_only);
typedef struct ah_capture_item {
    const char *name;
    ah_task_run_fn run;
    void *arg;
    ah_task_release_fn release;
    ah_replay_fn replay;
    const ah_range *ranges;
    size_t n_ranges;
} ah_capture_item;
/* Appends to a capturing model (takes ownership of arg: released on failure). Called with the
 * stream's mutex held. */
aclError ah_capture_append(struct ah_model *m, const ah_capture_item *item);
/* The stream is being destroyed while capturing: the capture is invalidated and detached. */
void ah_capture_abandon(struct ah_model *m);
/* Marks a capture invalidated, keeping the first reason. */
void ah_capture_invalidate(struct ah_model *m, const char *reason);
/* The id of a model (unique for the process life), for events recorded inside a capture. */
uint64_t ah_capture_id(const struct ah_model *m);
bool ah_capture_id_active(uint64_t id);
/* An "unsafe" call (sync copy/memset, device malloc/free, VMM changes, pageable async copy,
 * device sync) on `device` (-1: any): an error, and the captures that forbid it are
 * invalidated, per the capture modes and this thread's exchange mode. */
aclError ah_capture_check_unsafe(const char *api, int device);
void ah_capture_release_all(void);

/* ---- stream.c ---- */
struct ah_stream;
/* Resolves a handle (NULL: the current device's default stream) for a launch. */
aclError ah_stream_resolve(aclrtStream handle, const char *api, struct ah_stream **out);
/* Queues a task whose ranges were already checked; *seq gets its index on the stream. */
aclError ah_stream_enqueue(struct ah_stream *s, const char *name, ah_task_run_fn run, void *arg,
                           ah_task_release_fn release, const ah_range *ranges, size_t n_ranges,
                           uint64_t *seq);
/* Queues a task and waits until it has run (an async copy with a pageable host side): the
 * worker is not woken for it, the caller runs it when the stream is idle. While capturing, the
 * task is recorded and nothing waits. */
aclError ah_stream_enqueue_and_wait(struct ah_stream *s, const char *name, ah_task_run_fn run,
                                    void *arg, ah_task_release_fn release,
                                    const ah_range *ranges, size_t n_ranges);
/* Blocks until the stream has finished its first `seq` tasks (runs them in deferred mode). */
void ah_stream_wait_seq(struct ah_stream *s, uint64_t seq);
/* Global task numbering for the quarantine: the last number handed out, and the smallest
 * number of any task still queued or running (UINT64_MAX when all streams are idle). */
uint64_t ah_stream_last_gseq(void);
uint64_t ah_stream_oldest_pending_gseq(void);
aclError ah_stream_create_default(int device);
aclError ah_stream_sync_device(int device, int32_t timeout_ms);
/* Drains and destroys every stream of a device (device reset), or of all devices (-1). */
void ah_stream_destroy_device(int device);
/* A stream handle accepted by synchronize/query: any live stream (NULL: the default one). */
aclError ah_stream_resolve_any(aclrtStream handle, const char *api, struct ah_stream **out);

/* Prefix snapshots for events: "the first `count` tasks of stream s in its life `generation`".
 * A destroyed stream drained its queue, so its old snapshots are complete. */
uint32_t ah_stream_generation(struct ah_stream *s);
bool ah_stream_prefix_done(struct ah_stream *s, uint32_t generation, uint64_t count);
/* Waits for (in deferred mode: runs) the prefix; errors stay with the stream. */
void ah_stream_wait_prefix(struct ah_stream *s, uint32_t generation, uint64_t count);
/* Waits for (in deferred mode: runs) the prefix, then reports and clears the stream's sticky
 * error. timeout_ms -1: no limit; on expiry ACL_ERROR_RT_STREAM_SYNC_TIMEOUT. */
aclError ah_stream_sync_prefix(struct ah_stream *s, uint32_t generation, uint64_t count,
                               int32_t timeout_ms, const char *api);

/* The stream's capture slot (NULL when not capturing), used under the stream's mutex. */
typedef aclError (*ah_capture_slot_fn)(struct ah_model **slot, void *ctx);
aclError ah_stream_capture_slot(struct ah_stream *s, ah_capture_slot_fn fn, void *ctx);
int ah_stream_device(const struct ah_stream *s);

/* ---- event.c ---- */
void ah_event_release_all(void);

/* ---- threadpool.c ---- */
void ah_pool_shutdown(void);

#endif /* AH_RT_H */
