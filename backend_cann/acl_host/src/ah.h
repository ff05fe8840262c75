/* ah.h - acl_host internals shared by the runtime (memory, streams, thread pool) and the aclnn
 * ops. Nothing here is exported: the library's public surface is exactly the CANN API in
 * include/acl/ and include/aclnn_c/aclnn_api.h.
 */
#ifndef AH_H
#define AH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl/acl.h"

/* acl_host is built with -fvisibility=hidden: mark every CANN API definition AH_API. */
#define AH_API __attribute__((visibility("default")))

#define AH_MAX_DEVICES 16
#define AH_ERRMSG_SIZE 1024

/* ---- error messages (aclGetRecentErrMsg) ---------------------------------------------------- */
/* Sets this thread's recent error message (printf-style) and returns code, so a failing path
 * reads `return ah_error(ACL_ERROR_INVALID_PARAM, "aclrtFree: %p is not ...", p);`. */
aclError ah_error(aclError code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ah_error_set_message(const char *msg);

/* ---- init and devices --------------------------------------------------------------------- */
bool ah_initialized(void);
int ah_device_count(void);
/* The calling thread's device (aclrtSetDevice); -1 if none was set. */
int ah_current_device(void);

/* ---- device memory and the sanitizer ------------------------------------------------------- */
/* A byte range a task reads or writes; checked against live device allocations at launch and
 * again when the task runs (a block freed in between is a use after free). */
typedef struct ah_range {
    const void *ptr;
    size_t size;
} ah_range;

typedef enum ah_mem_kind {
    AH_MEM_NONE = 0,       /* not an acl allocation: ordinary host memory */
    AH_MEM_DEVICE = 1,     /* aclrtMalloc (or a mapped VMM range) */
    AH_MEM_HOST_PINNED = 2, /* aclrtMallocHost */
    AH_MEM_REGISTERED = 3   /* host memory mapped for the device by aclrtHostRegister: kernel
                               operands only, never a copy or memset address */
} ah_mem_kind;

/* Where [ptr, ptr + size) lives. For device memory *device gets the device id. A range that starts
 * in an allocation but runs past its end, or lies in a freed (quarantined) block, is reported
 * through the return code (ACL_ERROR_INVALID_PARAM with a message naming the allocation). */
aclError ah_mem_classify(const void *ptr, size_t size, ah_mem_kind *kind, int *device);
/* ACL_SUCCESS iff [ptr, ptr + size) lies inside one live device allocation; `what` names the
 * operand in the error message ("aclnnAdd: tensor self"). size 0 checks only ptr. */
aclError ah_mem_check_device(const void *ptr, size_t size, const char *what);

/* ---- streams ------------------------------------------------------------------------------- */
/* A unit of queued work. run returns ACL_SUCCESS or an error that sticks to the stream and is
 * reported by the next synchronize. release (may be NULL) frees arg when the task is discarded. */
typedef aclError (*ah_task_run_fn)(void *arg);
typedef void (*ah_task_release_fn)(void *arg);

/* Queues a task on stream after checking every range (ranges are copied). In deferred mode
 * (CANN_LLM_HOST_DEFERRED=1) it runs only when the stream is synchronized or waited on. On error
 * the task is released and not queued. `name` appears in error messages. */
aclError ah_stream_submit(aclrtStream stream, const char *name, ah_task_run_fn run, void *arg,
                          ah_task_release_fn release, const ah_range *ranges, size_t n_ranges);

/* ---- the process-wide thread pool ------------------------------------------------------------ */
/* Number of threads kernels may use (CANN_LLM_THREADS, default: the cores). */
int ah_n_threads(void);
/* Marks the calling thread as one of the device's (a stream's worker, the pool's): SCHED_BATCH on
 * Linux, so that when it wakes it does not preempt the thread running on its core (the host's
 * caller, which a launch has just woken it from). */
void ah_thread_as_device(void);
/* Calls fn(ctx, begin, end) over [0, n) split into contiguous chunks of at least `grain` items,
 * spread over the pool; the caller takes part and returns when all chunks are done. Chunk
 * boundaries depend only on n, grain and the pool size (deterministic). Safe to call from several
 * stream workers at once (jobs run one after another). */
typedef void (*ah_parallel_fn)(void *ctx, int64_t begin, int64_t end);
void ah_parallel_for(int64_t n, int64_t grain, ah_parallel_fn fn, void *ctx);
/* The same for work whose result does not depend on how [0, n) is cut (independent items):
 * chunks of decreasing size, each about 1/(2 * pool size) of what is left and at least `grain`
 * items, so the last ones are small and the threads finish together even when one starts late.
 * Runs as one call fn(ctx, 0, n) on the calling thread when it is not worth splitting (under two
 * grains, one thread, or inside a job). */
void ah_parallel_for_tapered(int64_t n, int64_t grain, ah_parallel_fn fn, void *ctx);

#endif /* AH_H */
