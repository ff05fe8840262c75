/* test_acl_vmm_capture.c - acl_host's VMM (reserve / physical / map with real pages), the
 * recently-freed diagnostics, and graph capture / replay (aclmdlRI), in normal and deferred mode.
 * CT_BENCH=1 also prints the host cost of a launch: eager and replayed chains of tiny Adds
 * (the size of a decode step's element-wise ops), in microseconds per op.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acl/acl.h"
#include "aclnn_api.h"
#include "ctest_util.h"

#define MiB ((size_t)1 << 20)
#define N 1024

static bool message_mentions(const char *needle)
{
    const char *msg = aclGetRecentErrMsg();
    bool ok = msg && strstr(msg, needle);
    if (!ok)
        fprintf(stderr, "  recent message '%s' lacks '%s'\n", msg ? msg : "(null)", needle);
    return ok;
}

static void start(const char *memory, const char *deferred)
{
    setenv("CANN_LLM_HOST_DEVICES", "1", 1);
    setenv("CANN_LLM_HOST_MEMORY", memory, 1);
    setenv("CANN_LLM_HOST_DEFERRED", deferred, 1);
    CHECK(aclInit(NULL) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
}

static void stop(void)
{
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
}

static size_t free_bytes(void)
{
    size_t free = 0, total = 0;
    CHECK(aclrtGetMemInfo(ACL_HBM_MEM, &free, &total) == ACL_SUCCESS);
    return free;
}

static aclTensor *vec(void *data, int64_t n)
{
    int64_t dims[1] = {n}, strides[1] = {1};
    return aclCreateTensor(dims, 1, ACL_FLOAT, strides, 0, ACL_FORMAT_ND, dims, 1, data);
}

/* out = a + b on stream s (phase 1 and 2); returns phase 2's status. */
static aclnnStatus add(void *out, void *a, void *b, int64_t n, aclrtStream s)
{
    float one = 1.0f;
    aclTensor *ta = vec(a, n), *tb = vec(b, n), *to = vec(out, n);
    aclScalar *alpha = aclCreateScalar(&one, ACL_FLOAT);
    uint64_t ws = 1;
    aclOpExecutor *ex = NULL;
    aclnnStatus st = aclnnAddGetWorkspaceSize(ta, tb, alpha, to, &ws, &ex);
    CHECK(st == ACLNN_SUCCESS && ws == 0);
    if (st == ACLNN_SUCCESS)
        st = aclnnAdd(NULL, 0, ex, s);
    aclDestroyTensor(ta);
    aclDestroyTensor(tb);
    aclDestroyTensor(to);
    aclDestroyScalar(alpha);
    return st;
}

static aclrtPhysicalMemProp device_prop(uint32_t id)
{
    aclrtPhysicalMemProp prop = {ACL_MEM_HANDLE_TYPE_NONE, ACL_MEM_ALLOCATION_TYPE_PINNED,
                                 ACL_HBM_MEM_HUGE, {id, ACL_MEM_LOCATION_TYPE_DEVICE}, 0};
    return prop;
}

/* ---- VMM ---------------------------------------------------------------------------------------- */

static void test_granularity(void)
{
    aclrtPhysicalMemProp prop = device_prop(0);
    size_t g = 0;
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g) ==
              ACL_SUCCESS && g == 2 * MiB);
    g = 0;
    CHECK(aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED, &g) ==
              ACL_SUCCESS && g == 2 * MiB);
    aclrtPhysicalMemProp bad = device_prop(7);
    CHECK(aclrtMemGetAllocationGranularity(&bad, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g) !=
          ACL_SUCCESS);
    bad = device_prop(0);
    bad.location.type = ACL_MEM_LOCATION_TYPE_HOST;
    CHECK(aclrtMemGetAllocationGranularity(&bad, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g) !=
          ACL_SUCCESS);
}

static void test_vmm_round_trip(void)
{
    aclrtPhysicalMemProp prop = device_prop(0);
    size_t free0 = free_bytes();
    void *base = NULL;
    CHECK(aclrtReserveMemAddress(&base, 0, 0, NULL, 1) != ACL_SUCCESS);
    CHECK(aclrtReserveMemAddress(&base, 16 * MiB, 4096, NULL, 1) != ACL_SUCCESS);
    CHECK(aclrtReserveMemAddress(&base, 16 * MiB, 0, NULL, 2) != ACL_SUCCESS);
    CHECK(aclrtReserveMemAddress(&base, 16 * MiB, 0, NULL, 1) == ACL_SUCCESS);
    CHECK(base && (uintptr_t)base % (2 * MiB) == 0);
    char *b = base;
    CHECK(free_bytes() == free0); /* address space only */

    aclrtDrvMemHandle h1 = NULL, h2 = NULL, h3 = NULL;
    CHECK(aclrtMallocPhysical(&h1, 3 * MiB, &prop, 0) != ACL_SUCCESS); /* not a granule multiple */
    CHECK(aclrtMallocPhysical(&h1, 2 * MiB, &prop, 1) != ACL_SUCCESS); /* flags */
    CHECK(aclrtMallocPhysical(&h1, 2 * MiB, &prop, 0) == ACL_SUCCESS);
    CHECK(aclrtMallocPhysical(&h2, 2 * MiB, &prop, 0) == ACL_SUCCESS);
    CHECK(aclrtMallocPhysical(&h3, 4 * MiB, &prop, 0) == ACL_SUCCESS);
    CHECK(free_bytes() == free0 - 8 * MiB);

    CHECK(aclrtMapMem(b, 2 * MiB, 0, h1, 0) == ACL_SUCCESS);
    CHECK(aclrtMapMem(b + 2 * MiB, 2 * MiB, 0, h2, 0) == ACL_SUCCESS);
    CHECK(aclrtMapMem(b + 4 * MiB, 2 * MiB, 0, h3, 0) != ACL_SUCCESS); /* size != physical */
    CHECK(aclrtMapMem(b + 2 * MiB, 4 * MiB, 0, h3, 0) != ACL_SUCCESS); /* overlaps h2 */
    CHECK(aclrtMapMem(b + 5 * MiB, 4 * MiB, 0, h3, 0) != ACL_SUCCESS); /* unaligned */
    CHECK(aclrtMapMem(b + 6 * MiB, 4 * MiB, 1, h3, 0) != ACL_SUCCESS); /* offset */
    CHECK(aclrtMapMem(b + 14 * MiB, 4 * MiB, 0, h3, 0) != ACL_SUCCESS); /* past the end */
    CHECK(aclGetRecentErrMsg() != NULL);

    /* fresh physical memory is poisoned, not zero */
    unsigned char probe = 0;
    CHECK(aclrtMemcpy(&probe, 1, b + 100, 1, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS &&
          probe == 0xFF);

    /* a range across the boundary of two contiguous mappings: copies and a kernel */
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    float *x = (float *)(b + 2 * MiB - 2048); /* 4 KiB: half in h1, half in h2 */
    float *y = (float *)(b + 3 * MiB);
    CHECK(aclrtMemcpy(x, sizeof host, host, sizeof host, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(back, sizeof back, x, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(host, back, sizeof host) == 0);
    CHECK(add(y, x, x, N, NULL) == ACLNN_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(back, sizeof back, y, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(back[0] == 0.0f && back[N - 1] == 2.0f * (N - 1));

    /* one handle mapped twice shares its pages */
    CHECK(aclrtMapMem(b + 8 * MiB, 2 * MiB, 0, h1, 0) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(back, 64, b + 8 * MiB + 2 * MiB - 2048, 64, ACL_MEMCPY_DEVICE_TO_HOST) ==
          ACL_SUCCESS);
    CHECK(memcmp(back, host, 64) == 0);

    /* reserved but unmapped is not device memory; a range running into it fails too */
    CHECK(add(b + 4 * MiB, x, x, N, NULL) != ACLNN_SUCCESS);
    CHECK(message_mentions("not mapped"));
    CHECK(aclrtMemsetAsync(b + 4 * MiB, 64, 0, 64, NULL) != ACL_SUCCESS);
    CHECK(message_mentions("not mapped"));
    CHECK(aclrtMemcpy(b + 4 * MiB - 2048, 4096, host, 4096, ACL_MEMCPY_HOST_TO_DEVICE) !=
          ACL_SUCCESS);
    CHECK(message_mentions("past the end"));

    CHECK(aclrtReleaseMemAddress(base) != ACL_SUCCESS); /* still mapped */
    CHECK(message_mentions("aclrtUnmapMem"));
    CHECK(aclrtUnmapMem(b + 8 * MiB + 4096) != ACL_SUCCESS); /* not the start */
    CHECK(aclrtUnmapMem(b + 8 * MiB) == ACL_SUCCESS);
    CHECK(aclrtFree(b) != ACL_SUCCESS); /* a mapping, not an aclrtMalloc block */

    /* FreePhysical while mapped: the memory lives until the unmap */
    CHECK(aclrtFreePhysical(h1) == ACL_SUCCESS);
    CHECK(aclrtFreePhysical(h1) != ACL_SUCCESS);
    CHECK(free_bytes() == free0 - 8 * MiB);
    CHECK(aclrtMemcpy(back, sizeof back, x, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(memcmp(host, back, sizeof host) == 0);
    CHECK(aclrtUnmapMem(b) == ACL_SUCCESS);
    CHECK(free_bytes() == free0 - 6 * MiB);

    /* use after unmap */
    CHECK(add(y, b + 4096, b + 4096, 16, NULL) != ACLNN_SUCCESS);
    CHECK(message_mentions("use after free"));
    CHECK(aclrtMemcpy(back, 64, b + 4096, 64, ACL_MEMCPY_DEVICE_TO_HOST) != ACL_SUCCESS);
    CHECK(message_mentions("use after free"));

    CHECK(aclrtUnmapMem(b + 2 * MiB) == ACL_SUCCESS);
    CHECK(aclrtUnmapMem(b + 2 * MiB) != ACL_SUCCESS);
    CHECK(aclrtFreePhysical(h2) == ACL_SUCCESS);
    CHECK(aclrtFreePhysical(h3) == ACL_SUCCESS);
    CHECK(free_bytes() == free0);
    CHECK(aclrtReleaseMemAddress(b + 2 * MiB) != ACL_SUCCESS);
    CHECK(aclrtReleaseMemAddress(base) == ACL_SUCCESS);
    CHECK(aclrtReleaseMemAddress(base) != ACL_SUCCESS);
}

/* The pool's pattern: one big reservation, chunks mapped at its growing end; unmapping a chunk
 * that queued work still uses is quarantined, and the work reports a use after free. */
static void test_vmm_pool_pattern(void)
{
    aclrtPhysicalMemProp prop = device_prop(0);
    void *base = NULL;
    CHECK(aclrtReserveMemAddress(&base, 1ull << 34, 0, NULL, 1) == ACL_SUCCESS); /* 16 GiB VA */
    aclrtDrvMemHandle h[4] = {0};
    for (int i = 0; i < 4; i++) {
        CHECK(aclrtMallocPhysical(&h[i], 2 * MiB, &prop, 0) == ACL_SUCCESS);
        CHECK(aclrtMapMem((char *)base + (size_t)i * 2 * MiB, 2 * MiB, 0, h[i], 0) == ACL_SUCCESS);
    }
    /* a block spanning all four chunks */
    CHECK(aclrtMemsetAsync(base, 8 * MiB, 0, 8 * MiB, NULL) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL) == ACL_SUCCESS);
    for (int i = 3; i >= 0; i--) {
        CHECK(aclrtUnmapMem((char *)base + (size_t)i * 2 * MiB) == ACL_SUCCESS);
        CHECK(aclrtFreePhysical(h[i]) == ACL_SUCCESS);
    }
    CHECK(aclrtReleaseMemAddress(base) == ACL_SUCCESS);
}

static void test_capacity(void)
{
    aclrtPhysicalMemProp prop = device_prop(0);
    aclrtDrvMemHandle h = NULL;
    CHECK(aclrtMallocPhysical(&h, 128 * MiB, &prop, 0) == ACL_ERROR_RT_MEMORY_ALLOCATION);
    CHECK(message_mentions("out of memory"));
    CHECK(h == NULL);
    CHECK(aclrtMallocPhysical(&h, 2 * MiB, &prop, 0) == ACL_SUCCESS);
    void *p = NULL; /* aclrtMalloc and physical memory share the capacity */
    CHECK(aclrtMalloc(&p, 63 * MiB, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_ERROR_RT_MEMORY_ALLOCATION);
    CHECK(aclrtFreePhysical(h) == ACL_SUCCESS);
    CHECK(aclrtMalloc(&p, 63 * MiB, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtFree(p) == ACL_SUCCESS);
}

static void test_recently_freed(void)
{
    void *p = NULL, *q = NULL;
    CHECK(aclrtMalloc(&p, 4096, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtMalloc(&q, 4096, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(NULL) == ACL_SUCCESS);
    CHECK(aclrtFree(p) == ACL_SUCCESS);
    CHECK(add(q, p, q, 16, NULL) != ACLNN_SUCCESS);
    CHECK(message_mentions("use after free of a 4096-byte device allocation"));
    CHECK(aclrtFree(p) != ACL_SUCCESS);
    CHECK(message_mentions("use after free"));
    CHECK(aclrtFree(q) == ACL_SUCCESS);
}

/* ---- capture ------------------------------------------------------------------------------------ */

typedef struct bufs {
    float *x, *y, *t1, *t2, *out, *cpy;
} bufs;

static void reset(const bufs *d)
{
    float *outs[4] = {d->t1, d->t2, d->out, d->cpy};
    for (int i = 0; i < 4; i++)
        CHECK(aclrtMemset(outs[i], N * sizeof(float), 0, N * sizeof(float)) == ACL_SUCCESS);
}

static bool result_is(const float *dev, float (*expect)(int))
{
    float h[N];
    CHECK(aclrtMemcpy(h, sizeof h, dev, sizeof h, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    for (int i = 0; i < N; i++)
        if (h[i] != expect(i)) {
            fprintf(stderr, "  [%d] = %g, expected %g\n", i, h[i], expect(i));
            return false;
        }
    return true;
}

static float zero(int i) { return 0.0f; }
/* x = i, y = 2: t1 = x + y, t2 = t1 + x, out = t2 + t1 */
static float expected(int i) { return (2.0f * i + 2.0f) + (i + 2.0f); }

static void record_graph(const bufs *d, aclrtStream s)
{
    CHECK(add(d->t1, d->x, d->y, N, s) == ACLNN_SUCCESS);
    CHECK(add(d->t2, d->t1, d->x, N, s) == ACLNN_SUCCESS);
    CHECK(add(d->out, d->t2, d->t1, N, s) == ACLNN_SUCCESS);
    CHECK(aclrtMemcpyAsync(d->cpy, N * sizeof(float), d->out, N * sizeof(float),
                           ACL_MEMCPY_DEVICE_TO_DEVICE, s) == ACL_SUCCESS);
}

typedef struct thread_call {
    float *dst;
    aclError rc;
} thread_call;

static void *other_thread_memcpy(void *arg)
{
    thread_call *c = arg;
    float v = 1.0f;
    aclrtSetDevice(0);
    c->rc = aclrtMemcpy(c->dst, sizeof v, &v, sizeof v, ACL_MEMCPY_HOST_TO_DEVICE);
    aclrtResetDevice(0);
    return NULL;
}

static aclError memcpy_from_other_thread(float *dst)
{
    thread_call c = {dst, -1};
    pthread_t t;
    pthread_create(&t, NULL, other_thread_memcpy, &c);
    pthread_join(t, NULL);
    return c.rc;
}

static void test_capture(bool deferred)
{
    bufs d;
    float **all[6] = {&d.x, &d.y, &d.t1, &d.t2, &d.out, &d.cpy};
    for (int i = 0; i < 6; i++)
        CHECK(aclrtMalloc((void **)all[i], N * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST) ==
              ACL_SUCCESS);
    float hx[N], hy[N];
    for (int i = 0; i < N; i++) {
        hx[i] = (float)i;
        hy[i] = 2.0f;
    }
    CHECK(aclrtMemcpy(d.x, sizeof hx, hx, sizeof hx, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(d.y, sizeof hy, hy, sizeof hy, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    reset(&d);
    aclrtStream s = NULL, s2 = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&s2) == ACL_SUCCESS);
    aclrtEvent before = NULL, inside = NULL;
    CHECK(aclrtCreateEvent(&before) == ACL_SUCCESS);
    CHECK(aclrtCreateEvent(&inside) == ACL_SUCCESS);

    /* eager reference */
    record_graph(&d, s);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    CHECK(result_is(d.cpy, expected));
    reset(&d);

    /* capture: nothing runs */
    aclmdlRI ri = NULL, probe = NULL;
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_NOT_CAPTURED);
    CHECK(aclmdlRICaptureGetInfo(s, &status, &probe) == ACL_SUCCESS &&
          status == ACL_MODEL_RI_CAPTURE_STATUS_NONE && probe == NULL);
    CHECK(aclrtRecordEvent(before, s2) == ACL_SUCCESS);
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) ==
          ACL_ERROR_RT_STREAM_CAPTURED);
    CHECK(aclmdlRICaptureGetInfo(s, &status, &probe) == ACL_SUCCESS &&
          status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE && probe != NULL);
    CHECK(aclrtStreamWaitEvent(s, before) == ACL_SUCCESS); /* a recorded barrier */
    record_graph(&d, s);
    CHECK(aclrtRecordEvent(inside, s) == ACL_SUCCESS);
    CHECK(aclrtStreamWaitEvent(s, inside) == ACL_SUCCESS); /* same capture, in order */
    CHECK(aclrtStreamWaitEvent(s2, inside) == ACL_ERROR_RT_EVENT_CAPTURED);
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
    /* a RELAXED thread may copy during a GLOBAL capture: nothing has run */
    aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_RELAXED;
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode) == ACL_SUCCESS &&
          mode == ACL_MODEL_RI_CAPTURE_MODE_GLOBAL);
    CHECK(result_is(d.t1, zero) && result_is(d.cpy, zero));
    CHECK(aclmdlRICaptureThreadExchangeMode(&mode) == ACL_SUCCESS &&
          mode == ACL_MODEL_RI_CAPTURE_MODE_RELAXED);
    CHECK(aclmdlRICaptureGetInfo(s, &status, NULL) == ACL_SUCCESS &&
          status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_SUCCESS && ri == probe);
    CHECK(aclmdlRICaptureGetInfo(s, &status, &probe) == ACL_SUCCESS &&
          status == ACL_MODEL_RI_CAPTURE_STATUS_NONE);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    CHECK(result_is(d.cpy, zero));

    /* replay three times, on the capturing stream and another one */
    for (int r = 0; r < 3; r++) {
        aclrtStream target = r == 1 ? s2 : s;
        CHECK(aclmdlRIExecuteAsync(ri, target) == ACL_SUCCESS);
        CHECK(aclrtSynchronizeEvent(inside) == ACL_SUCCESS);
        aclrtEventRecordedStatus es = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        CHECK(aclrtQueryEventStatus(inside, &es) == ACL_SUCCESS &&
              es == ACL_EVENT_RECORDED_STATUS_COMPLETE);
        CHECK(aclrtSynchronizeStream(target) == ACL_SUCCESS);
        CHECK(result_is(d.cpy, expected));
        reset(&d);
    }
    /* destroy with a replay still queued: the replay completes */
    CHECK(aclmdlRIExecuteAsync(ri, s) == ACL_SUCCESS);
    CHECK(aclmdlRIDestroy(ri) == ACL_SUCCESS);
    CHECK(aclmdlRIDestroy(ri) == ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclmdlRIExecuteAsync(ri, s) == ACL_ERROR_RT_INVALID_HANDLE);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    CHECK(result_is(d.cpy, expected));
    reset(&d);

    /* a synchronous memcpy during capture is an error and invalidates the capture */
    float one = 1.0f;
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(add(d.t1, d.x, d.y, N, s) == ACLNN_SUCCESS);
    CHECK(aclrtMemcpy(d.x, 4, &one, 4, ACL_MEMCPY_HOST_TO_DEVICE) ==
          ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    CHECK(message_mentions("capturing"));
    CHECK(aclmdlRICaptureGetInfo(s, &status, &probe) == ACL_SUCCESS &&
          status == ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED && probe == NULL);
    CHECK(add(d.t1, d.x, d.y, N, s) != ACLNN_SUCCESS); /* dropped */
    ri = (aclmdlRI)&one;
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED && ri == NULL);
    CHECK(message_mentions("aclrtMemcpy"));

    /* device allocation, physical allocation, pageable async copies, stream sync */
    void *p = NULL;
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL) == ACL_SUCCESS);
    CHECK(memcpy_from_other_thread(d.x) == ACL_SUCCESS); /* other threads are free */
    CHECK(aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    CHECK(p == NULL);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);

    aclrtPhysicalMemProp prop = device_prop(0);
    aclrtDrvMemHandle h = NULL;
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(memcpy_from_other_thread(d.x) == ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(aclrtMallocPhysical(&h, 2 * MiB, &prop, 0) == ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(aclrtMemcpyAsync(d.x, 4, &one, 4, ACL_MEMCPY_HOST_TO_DEVICE, s) ==
          ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(s) == ACL_ERROR_RT_STREAM_CAPTURED);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED);

    /* RELAXED: the synchronous copy runs at once and the capture stays valid */
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(d.x, sizeof hx, hx, sizeof hx, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    CHECK(add(d.t1, d.x, d.y, N, s) == ACLNN_SUCCESS);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_SUCCESS && ri != NULL);
    CHECK(aclmdlRIExecuteAsync(ri, s) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    float h1[N]; /* t1 = x + y */
    CHECK(aclrtMemcpy(h1, sizeof h1, d.t1, sizeof h1, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(h1[5] == 7.0f);

    /* a replay is re-checked: a freed operand fails the launch and queues nothing */
    CHECK(aclrtFree(d.y) == ACL_SUCCESS);
    CHECK(aclmdlRIExecuteAsync(ri, s) != ACL_SUCCESS);
    CHECK(message_mentions("free"));
    CHECK(aclmdlRIDestroy(ri) == ACL_SUCCESS);

    /* the stream works eagerly again; destroying a capturing stream drops its capture */
    CHECK(aclmdlRICaptureBegin(s2, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(add(d.t1, d.x, d.x, N, s2) == ACLNN_SUCCESS);
    CHECK(aclrtDestroyStream(s2) == ACL_SUCCESS);
    CHECK(add(d.t2, d.x, d.x, N, s) == ACLNN_SUCCESS);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    CHECK(aclrtMemcpy(h1, sizeof h1, d.t2, sizeof h1, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(h1[3] == 6.0f);

    CHECK(aclrtDestroyEvent(before) == ACL_SUCCESS);
    CHECK(aclrtDestroyEvent(inside) == ACL_SUCCESS);
    CHECK(aclrtDestroyStream(s) == ACL_SUCCESS);
    for (int i = 0; i < 6; i++)
        if (*all[i] != d.y)
            CHECK(aclrtFree(*all[i]) == ACL_SUCCESS);
    (void)deferred;
}

/* A model captured on VMM memory (the backend's pool) replays on it; a capture left open at
 * aclFinalize is cleaned up. */
static void test_capture_on_vmm(void)
{
    aclrtPhysicalMemProp prop = device_prop(0);
    void *base = NULL;
    aclrtDrvMemHandle h[2];
    CHECK(aclrtReserveMemAddress(&base, 64 * MiB, 0, NULL, 1) == ACL_SUCCESS);
    for (int i = 0; i < 2; i++) {
        CHECK(aclrtMallocPhysical(&h[i], 2 * MiB, &prop, 0) == ACL_SUCCESS);
        CHECK(aclrtMapMem((char *)base + (size_t)i * 2 * MiB, 2 * MiB, 0, h[i], 0) == ACL_SUCCESS);
    }
    float *x = (float *)((char *)base + 2 * MiB - 2048), *y = (float *)((char *)base + 3 * MiB);
    float hx[N];
    for (int i = 0; i < N; i++)
        hx[i] = (float)i;
    CHECK(aclrtMemcpy(x, sizeof hx, hx, sizeof hx, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    aclmdlRI ri = NULL;
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(add(y, x, x, N, s) == ACLNN_SUCCESS);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_SUCCESS);
    CHECK(aclmdlRIExecuteAsync(ri, s) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
    float back[N];
    CHECK(aclrtMemcpy(back, sizeof back, y, sizeof back, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
    CHECK(back[N - 1] == 2.0f * (N - 1));
    /* left for aclFinalize: the model, an open capture, the mappings and the reservation */
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL) == ACL_SUCCESS);
    CHECK(add(y, x, x, N, s) == ACLNN_SUCCESS);
}

/* ---- benchmark (CT_BENCH=1) ---------------------------------------------------------------- */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

/* A chain of n_ops Adds of n elements (y = y + x), eager and captured; per op, the time to
 * queue and run them all (the median of 15 rounds), and for the replay also the time
 * aclmdlRIExecuteAsync holds the caller. */
static void bench_launch(int n_ops, int64_t n)
{
    aclrtStream s = NULL;
    CHECK(aclrtCreateStream(&s) == ACL_SUCCESS);
    void *x = NULL, *y = NULL;
    CHECK(aclrtMalloc(&x, (size_t)n * 4, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtMalloc(&y, (size_t)n * 4, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtMemset(x, (size_t)n * 4, 0, (size_t)n * 4) == ACL_SUCCESS);
    CHECK(aclrtMemset(y, (size_t)n * 4, 0, (size_t)n * 4) == ACL_SUCCESS);
    aclmdlRI ri = NULL;
    CHECK(aclmdlRICaptureBegin(s, ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL) == ACL_SUCCESS);
    for (int i = 0; i < n_ops; i++)
        add(y, y, x, n, s);
    CHECK(aclmdlRICaptureEnd(s, &ri) == ACL_SUCCESS);
    enum { ROUNDS = 15 };
    double eager[ROUNDS], replay[ROUNDS], execute[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_us();
        for (int i = 0; i < n_ops; i++)
            add(y, y, x, n, s);
        CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
        double t1 = now_us();
        CHECK(aclmdlRIExecuteAsync(ri, s) == ACL_SUCCESS);
        double t2 = now_us();
        CHECK(aclrtSynchronizeStream(s) == ACL_SUCCESS);
        double t3 = now_us();
        eager[r] = (t1 - t0) / n_ops, replay[r] = (t3 - t1) / n_ops, execute[r] = t2 - t1;
    }
    for (int r = 1; r < ROUNDS; r++) /* insertion sorts, for the medians */
        for (int k = r; k > 0; k--) {
            double *v[3] = {eager, replay, execute};
            for (int j = 0; j < 3; j++)
                if (v[j][k] < v[j][k - 1]) {
                    double t = v[j][k];
                    v[j][k] = v[j][k - 1];
                    v[j][k - 1] = t;
                }
        }
    printf("bench: %d Adds of %lld floats: eager %.2f us/op, replay %.2f us/op "
           "(aclmdlRIExecuteAsync %.1f us)\n", n_ops, (long long)n, eager[ROUNDS / 2],
           replay[ROUNDS / 2], execute[ROUNDS / 2]);
    CHECK(aclmdlRIDestroy(ri) == ACL_SUCCESS);
    CHECK(aclrtFree(x) == ACL_SUCCESS);
    CHECK(aclrtFree(y) == ACL_SUCCESS);
    CHECK(aclrtDestroyStream(s) == ACL_SUCCESS);
}

int main(void)
{
    if (getenv("CT_BENCH")) {
        start("1G", "0");
        bench_launch(1000, 576);
        bench_launch(1000, 64 * 1024);
        stop();
    }
    const char *modes[2] = {"0", "1"};
    for (int m = 0; m < 2; m++) {
        fprintf(stderr, "mode CANN_LLM_HOST_DEFERRED=%s\n", modes[m]);
        start("64M", modes[m]);
        test_granularity();
        test_vmm_round_trip();
        test_vmm_pool_pattern();
        test_capacity();
        test_recently_freed();
        stop();
        start("1G", modes[m]);
        test_capture(m == 1);
        test_capture_on_vmm();
        CHECK(aclFinalize() == ACL_SUCCESS);
    }
    return CT_RESULT();
}
