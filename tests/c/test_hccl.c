/* test_hccl.c - acl_host's HCCL across processes: 2 and 4 ranks, each a forked process with its
 * own acl runtime. Values of every call for the types HCCL documents (all-reduce: each op),
 * chunked transfers, stream order (async copies, back-to-back calls, events, deferred mode,
 * graph capture), and the sanitizer: buffer bounds and placement, ranks that disagree on the
 * call, count, type, op or root, an unsupported type or op, a buffer freed while queued, a rank
 * that never comes (the CANN_LLM_HCCL_TIMEOUT message), a rank that died or destroyed its
 * communicator (every other rank fails at once, not at the timeout).
 */
#include <math.h>

#include "hccl_util.h"

#define N_DTYPES 6
static const HcclDataType REDUCE_TYPES[N_DTYPES] = {
    HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_BFP16,
    HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_INT16, HCCL_DATA_TYPE_INT32};
static const HcclReduceOp OPS[4] = {HCCL_REDUCE_SUM, HCCL_REDUCE_PROD, HCCL_REDUCE_MAX,
                                    HCCL_REDUCE_MIN};

/* ---- element access -------------------------------------------------------------------------- */
static size_t esize(HcclDataType t)
{
    switch (t) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_FP16: case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT64: case HCCL_DATA_TYPE_FP64: return 8;
    default: return 4;
    }
}

static float bf16_to_f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f_to_bf16(float f) /* round to nearest even */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static float round_to(HcclDataType t, float x)
{
    if (t == HCCL_DATA_TYPE_FP16)
        return aclFloat16ToFloat(aclFloatToFloat16(x));
    if (t == HCCL_DATA_TYPE_BFP16)
        return bf16_to_f(f_to_bf16(x));
    return x;
}

static void put(HcclDataType t, void *buf, size_t i, double v)
{
    switch (t) {
    case HCCL_DATA_TYPE_FP32: ((float *)buf)[i] = (float)v; break;
    case HCCL_DATA_TYPE_FP16: ((uint16_t *)buf)[i] = aclFloatToFloat16((float)v); break;
    case HCCL_DATA_TYPE_BFP16: ((uint16_t *)buf)[i] = f_to_bf16((float)v); break;
    case HCCL_DATA_TYPE_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case HCCL_DATA_TYPE_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case HCCL_DATA_TYPE_INT16: ((int16_t *)buf)[i] = (int16_t)v; break;
    case HCCL_DATA_TYPE_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case HCCL_DATA_TYPE_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case HCCL_DATA_TYPE_FP64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

static double get(HcclDataType t, const void *buf, size_t i)
{
    switch (t) {
    case HCCL_DATA_TYPE_FP32: return ((const float *)buf)[i];
    case HCCL_DATA_TYPE_FP16: return aclFloat16ToFloat(((const uint16_t *)buf)[i]);
    case HCCL_DATA_TYPE_BFP16: return bf16_to_f(((const uint16_t *)buf)[i]);
    case HCCL_DATA_TYPE_INT8: return ((const int8_t *)buf)[i];
    case HCCL_DATA_TYPE_UINT8: return ((const uint8_t *)buf)[i];
    case HCCL_DATA_TYPE_INT16: return ((const int16_t *)buf)[i];
    case HCCL_DATA_TYPE_INT32: return ((const int32_t *)buf)[i];
    case HCCL_DATA_TYPE_INT64: return (double)((const int64_t *)buf)[i];
    case HCCL_DATA_TYPE_FP64: return ((const double *)buf)[i];
    default: return NAN;
    }
}

/* Small integers in [-3, 3], different per rank and element: sums and products of up to 4 of
 * them are exact in every type, so the expected value does not depend on the order. */
static double small_value(int rank, size_t i, int salt)
{
    return (double)((int)((i * 7 + (size_t)rank * 13 + (size_t)salt * 5) % 7) - 3);
}

static double fold(HcclReduceOp op, double a, double b)
{
    switch (op) {
    case HCCL_REDUCE_SUM: return a + b;
    case HCCL_REDUCE_PROD: return a * b;
    case HCCL_REDUCE_MAX: return a > b ? a : b;
    default: return a < b ? a : b;
    }
}

/* An all-reduce of `count` elements from host values, result copied back to host `out`. */
static HcclResult all_reduce_host(HcclComm comm, aclrtStream stream, HcclDataType t,
                                  HcclReduceOp op, const void *in, void *out, size_t count)
{
    size_t bytes = count * esize(t);
    void *send = dev_alloc(bytes), *recv = dev_alloc(bytes);
    to_dev(send, in, bytes);
    HcclResult hr = HcclAllReduce(send, recv, count, t, op, comm, stream);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    from_dev(out, recv, bytes);
    aclrtFree(send);
    aclrtFree(recv);
    return hr;
}

/* ---- values ---------------------------------------------------------------------------------- */
static uint64_t g_digest; /* of every all-reduce result of this rank */

static void body_allreduce_values(int rank, int n, HcclComm comm, aclrtStream stream)
{
    uint32_t size = 0, id = 99;
    CHECK(HcclGetRankSize(comm, &size) == HCCL_SUCCESS && size == (uint32_t)n);
    CHECK(HcclGetRankId(comm, &id) == HCCL_SUCCESS && id == (uint32_t)rank);
    enum { COUNT = 1001 };
    unsigned char in[COUNT * 4], out[COUNT * 4];
    int salt = 0;
    for (int d = 0; d < N_DTYPES; d++)
        for (int o = 0; o < 4; o++, salt++) {
            HcclDataType t = REDUCE_TYPES[d];
            if (OPS[o] == HCCL_REDUCE_PROD && (t == HCCL_DATA_TYPE_INT16 || t == HCCL_DATA_TYPE_BFP16))
                continue; /* not on Atlas A2: BAD_PROD below */
            for (size_t i = 0; i < COUNT; i++)
                put(t, in, i, small_value(rank, i, salt));
            CHECK(all_reduce_host(comm, stream, t, OPS[o], in, out, COUNT) == HCCL_SUCCESS);
            int bad = 0;
            for (size_t i = 0; i < COUNT; i++) {
                double want = small_value(0, i, salt);
                for (int r = 1; r < n; r++)
                    want = fold(OPS[o], want, small_value(r, i, salt));
                if (get(t, out, i) != want && bad++ < 3)
                    fprintf(stderr, "rank %d: type %d op %d [%zu] = %g, expected %g\n", rank, t,
                            OPS[o], i, get(t, out, i), want);
            }
            CHECK(bad == 0);
            g_digest ^= fnv(out, COUNT * esize(t)) + (uint64_t)salt;
        }

    /* F16 and BF16 sums round to the type after every rank's addition, in rank order, and every
     * rank gets the same bits */
    for (int k = 0; k < 2; k++) {
        HcclDataType t = k ? HCCL_DATA_TYPE_BFP16 : HCCL_DATA_TYPE_FP16;
        for (size_t i = 0; i < COUNT; i++)
            put(t, in, i, 1.0 + (double)i * 0.00137 + rank * 0.3331);
        CHECK(all_reduce_host(comm, stream, t, HCCL_REDUCE_SUM, in, out, COUNT) == HCCL_SUCCESS);
        int bad = 0;
        for (size_t i = 0; i < COUNT; i++) {
            float acc = round_to(t, (float)(1.0 + (double)i * 0.00137));
            for (int r = 1; r < n; r++)
                acc = round_to(t, acc + round_to(t, (float)(1.0 + (double)i * 0.00137 + r * 0.3331)));
            bad += get(t, out, i) != acc;
        }
        CHECK(bad == 0);
        g_digest ^= fnv(out, COUNT * 2);
    }

    /* integers wrap around */
    int8_t big[4] = {100, 100, 100, 100}, wrapped[4];
    CHECK(all_reduce_host(comm, stream, HCCL_DATA_TYPE_INT8, HCCL_REDUCE_SUM, big, wrapped, 4) ==
          HCCL_SUCCESS);
    CHECK(wrapped[0] == (int8_t)(uint8_t)(100 * n));

    /* several chunks (1 MiB per rank and stage), in place (sendBuf == recvBuf) */
    size_t count = 700001, bytes = count * 4;
    float *host = malloc(bytes);
    for (size_t i = 0; i < count; i++)
        host[i] = (float)small_value(rank, i, 1) + (float)(i % 1000);
    float *buf = dev_alloc(bytes);
    to_dev(buf, host, bytes);
    CHECK(HcclAllReduce(buf, buf, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
          HCCL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    from_dev(host, buf, bytes);
    int bad = 0;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < n; r++)
            want += small_value(r, i, 1) + (double)(i % 1000);
        bad += host[i] != (float)want;
    }
    CHECK(bad == 0);
    g_digest ^= fnv(host, bytes);
    aclrtFree(buf);
    free(host);
    g_shared->hash[rank] = g_digest;
}

/* all-gather and broadcast of every type HCCL moves */
static const HcclDataType MOVE_TYPES[] = {HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_FP16,
                                          HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_INT8,
                                          HCCL_DATA_TYPE_INT32, HCCL_DATA_TYPE_UINT8,
                                          HCCL_DATA_TYPE_INT64, HCCL_DATA_TYPE_FP64};
#define N_MOVE (sizeof MOVE_TYPES / sizeof MOVE_TYPES[0])

static double move_value(int rank, size_t i) { return (double)(rank * 20 + (int)(i % 41)); }

static void body_gather_broadcast(int rank, int n, HcclComm comm, aclrtStream stream)
{
    for (size_t k = 0; k < N_MOVE; k++) {
        HcclDataType t = MOVE_TYPES[k];
        size_t es = esize(t), count = 777 + k, bytes = count * es;
        unsigned char *in = malloc(bytes), *out = malloc(bytes * (size_t)n);
        for (size_t i = 0; i < count; i++)
            put(t, in, i, move_value(rank, i));
        void *send = dev_alloc(bytes), *recv = dev_alloc(bytes * (size_t)n);
        to_dev(send, in, bytes);
        CHECK(HcclAllGather(send, recv, count, t, comm, stream) == HCCL_SUCCESS);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        from_dev(out, recv, bytes * (size_t)n);
        int bad = 0;
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                bad += get(t, out, (size_t)r * count + i) != move_value(r, i);
        CHECK(bad == 0);
        /* in place: sendBuf is this rank's block of recvBuf */
        void *mine = (unsigned char *)recv + (size_t)rank * bytes;
        CHECK(aclrtMemset(recv, bytes * (size_t)n, 0, bytes * (size_t)n) == ACL_SUCCESS);
        to_dev(mine, in, bytes);
        CHECK(HcclAllGather(mine, recv, count, t, comm, stream) == HCCL_SUCCESS);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        from_dev(out, recv, bytes * (size_t)n);
        bad = 0;
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                bad += get(t, out, (size_t)r * count + i) != move_value(r, i);
        CHECK(bad == 0);
        /* broadcast from every root */
        for (int root = 0; root < n; root++) {
            to_dev(send, in, bytes);
            CHECK(HcclBroadcast(send, count, t, (uint32_t)root, comm, stream) == HCCL_SUCCESS);
            CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
            from_dev(out, send, bytes);
            bad = 0;
            for (size_t i = 0; i < count; i++)
                bad += get(t, out, i) != move_value(root, i);
            CHECK(bad == 0);
        }
        aclrtFree(send);
        aclrtFree(recv);
        free(in);
        free(out);
    }
    /* several chunks: 2.5 MiB per rank */
    size_t count = (size_t)5 << 18, bytes = count * 2;
    uint16_t *in = malloc(bytes), *out = malloc(bytes * (size_t)n);
    for (size_t i = 0; i < count; i++)
        in[i] = (uint16_t)(i * 31 + (size_t)rank * 7);
    void *send = dev_alloc(bytes), *recv = dev_alloc(bytes * (size_t)n);
    to_dev(send, in, bytes);
    CHECK(HcclAllGather(send, recv, count, HCCL_DATA_TYPE_UINT16, comm, stream) == HCCL_SUCCESS);
    CHECK(HcclBroadcast(send, count, HCCL_DATA_TYPE_FP16, (uint32_t)n - 1, comm, stream) ==
          HCCL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    from_dev(out, recv, bytes * (size_t)n);
    int bad = 0;
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++)
            bad += out[(size_t)r * count + i] != (uint16_t)(i * 31 + (size_t)r * 7);
    from_dev(in, send, bytes);
    for (size_t i = 0; i < count; i++)
        bad += in[i] != (uint16_t)(i * 31 + (size_t)(n - 1) * 7);
    CHECK(bad == 0);
    /* count 0 succeeds before any other check (even a NULL buffer), as HCCL does */
    CHECK(HcclAllGather(NULL, recv, 0, HCCL_DATA_TYPE_FP32, comm, stream) == HCCL_SUCCESS);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
    aclrtFree(send);
    aclrtFree(recv);
    free(in);
    free(out);
}

/* Send/Recv around the ring (even ranks send first: a send completes when its receive took the
 * data), over several 256 KiB channel chunks, for three types. */
static void body_send_recv(int rank, int n, HcclComm comm, aclrtStream stream)
{
    const HcclDataType types[3] = {HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_INT8};
    for (int k = 0; k < 3; k++) {
        HcclDataType t = types[k];
        size_t count = k == 0 ? 200003 : 5000, bytes = count * esize(t);
        unsigned char *host = malloc(bytes);
        for (size_t i = 0; i < count; i++)
            put(t, host, i, move_value(rank, i) - 60);
        void *send = dev_alloc(bytes), *recv = dev_alloc(bytes);
        to_dev(send, host, bytes);
        uint32_t next = (uint32_t)((rank + 1) % n), prev = (uint32_t)((rank + n - 1) % n);
        if (rank % 2 == 0) {
            CHECK(HcclSend(send, count, t, next, comm, stream) == HCCL_SUCCESS);
            CHECK(HcclRecv(recv, count, t, prev, comm, stream) == HCCL_SUCCESS);
        } else {
            CHECK(HcclRecv(recv, count, t, prev, comm, stream) == HCCL_SUCCESS);
            CHECK(HcclSend(send, count, t, next, comm, stream) == HCCL_SUCCESS);
        }
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        from_dev(host, recv, bytes);
        int bad = 0;
        for (size_t i = 0; i < count; i++)
            bad += get(t, host, i) != move_value((int)prev, i) - 60;
        CHECK(bad == 0);
        aclrtFree(send);
        aclrtFree(recv);
        free(host);
    }
}

/* ---- stream order -------------------------------------------------------------------------- */
/* Async copies around the call, 20 dependent all-reduces queued without a sync, an event that
 * orders a second stream after the call, and a captured all-reduce replayed on new inputs. */
static void body_stream_order(int rank, int n, HcclComm comm, aclrtStream stream)
{
    enum { COUNT = 4096 };
    size_t bytes = COUNT * 4;
    float *pinned = NULL;
    CHECK(aclrtMallocHost((void **)&pinned, bytes) == ACL_SUCCESS);
    for (size_t i = 0; i < COUNT; i++)
        pinned[i] = (float)(rank + 1);
    float *x = dev_alloc(bytes);
    CHECK(aclrtMemcpyAsync(x, bytes, pinned, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream) ==
          ACL_SUCCESS);
    for (int k = 0; k < 20; k++) /* x <- n x, twenty times */
        CHECK(HcclAllReduce(x, x, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_SUCCESS);
    aclrtStream other = NULL;
    aclrtEvent done = NULL;
    CHECK(aclrtCreateStream(&other) == ACL_SUCCESS);
    CHECK(aclrtCreateEvent(&done) == ACL_SUCCESS);
    CHECK(aclrtRecordEvent(done, stream) == ACL_SUCCESS);
    CHECK(aclrtStreamWaitEvent(other, done) == ACL_SUCCESS);
    CHECK(aclrtMemcpyAsync(pinned, bytes, x, bytes, ACL_MEMCPY_DEVICE_TO_HOST, other) ==
          ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(other) == ACL_SUCCESS);
    double want = n * (n + 1) / 2.0 * pow(n, 19);
    int bad = 0;
    for (size_t i = 0; i < COUNT; i++)
        bad += pinned[i] != (float)want;
    CHECK(bad == 0);
    CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);

    /* captured once, replayed twice with other inputs */
    float *y = dev_alloc(bytes);
    aclmdlRI model = NULL;
    CHECK(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_RELAXED) == ACL_SUCCESS);
    CHECK(HcclAllReduce(x, y, COUNT, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_MAX, comm, stream) ==
          HCCL_SUCCESS);
    CHECK(aclmdlRICaptureEnd(stream, &model) == ACL_SUCCESS);
    for (int replay = 0; replay < 2; replay++) {
        for (size_t i = 0; i < COUNT; i++)
            pinned[i] = (float)(rank * 10 + replay + (int)i % 5);
        CHECK(aclrtMemcpyAsync(x, bytes, pinned, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream) ==
              ACL_SUCCESS);
        CHECK(aclmdlRIExecuteAsync(model, stream) == ACL_SUCCESS);
        CHECK(aclrtMemcpyAsync(pinned, bytes, y, bytes, ACL_MEMCPY_DEVICE_TO_HOST, stream) ==
              ACL_SUCCESS);
        CHECK(aclrtSynchronizeStream(stream) == ACL_SUCCESS);
        bad = 0;
        for (size_t i = 0; i < COUNT; i++)
            bad += pinned[i] != (float)((n - 1) * 10 + replay + (int)i % 5);
        CHECK(bad == 0);
    }
    CHECK(aclmdlRIDestroy(model) == ACL_SUCCESS);
    CHECK(aclrtDestroyEvent(done) == ACL_SUCCESS);
    CHECK(aclrtDestroyStream(other) == ACL_SUCCESS);
    aclrtFree(x);
    aclrtFree(y);
    aclrtFreeHost(pinned);
}

/* Deferred mode: nothing runs until each rank synchronizes. */
static void body_deferred(int rank, int n, HcclComm comm, aclrtStream stream)
{
    int32_t v[64], out[64];
    for (int i = 0; i < 64; i++)
        v[i] = rank * 100 + i;
    CHECK(all_reduce_host(comm, stream, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_MAX, v, out, 64) ==
          HCCL_SUCCESS);
    for (int i = 0; i < 64; i++)
        CHECK(out[i] == (n - 1) * 100 + i);
}

/* ---- the sanitizer ------------------------------------------------------------------------- */
/* The call on `stream` failed at its synchronize with `code`, and the message names `needle`. */
static void expect_sync_error(aclrtStream stream, aclError code, const char *needle)
{
    aclError rc = aclrtSynchronizeStream(stream);
    CHECK(rc == code);
    if (rc != code)
        fprintf(stderr, "  synchronize returned %d, expected %d (%s)\n", rc, code,
                aclGetRecentErrMsg());
    else
        CHECK(recent_mentions(needle));
}

/* rank 1 passes a count beyond its buffer: refused at launch there; rank 0, already waiting in
 * the call, fails at once with rank 1's reason */
static void body_bounds(int rank, int n, HcclComm comm, aclrtStream stream)
{
    float *a = dev_alloc(1024 * 4), *b = dev_alloc(1024 * 4);
    double t0 = now_seconds();
    if (rank == 1) {
        usleep(100000);
        CHECK(HcclAllReduce(a, b, 1025, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_E_PARA);
        CHECK(recent_mentions("HcclAllReduce: sendBuf"));
    } else {
        CHECK(HcclAllReduce(a, b, 1024, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_SUCCESS);
        expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
                          "rank 1 refused a call at launch");
    }
    CHECK(now_seconds() - t0 < 3.0); /* CANN_LLM_HCCL_TIMEOUT is 10 here */
    /* the communicator stays failed: later calls fail with the first reason */
    CHECK(HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
          HCCL_SUCCESS);
    expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "failed earlier");
    aclrtFree(a);
    aclrtFree(b);
}

/* launch-time refusals, each on a fresh communicator (a refusal fails the communicator) */
typedef enum { BAD_HOST_PTR, BAD_ALIGN, BAD_REDUCE_TYPE, BAD_TYPE, BAD_OP, BAD_PROD, BAD_ROOT,
               BAD_SELF, BAD_OVERLAP, BAD_GATHER_SIZE, BAD_STREAM, BAD_NULL, N_BAD } bad_kind;
static bad_kind g_bad;

static void body_refused(int rank, int n, HcclComm comm, aclrtStream stream)
{
    unsigned char *a = dev_alloc(4096), *b = dev_alloc(4096);
    static float host[1024];
    HcclResult want = HCCL_E_PARA, got = HCCL_SUCCESS;
    const char *needle = "";
    if (rank == 0) {
        switch (g_bad) {
        case BAD_HOST_PTR:
            got = HcclAllReduce(host, b, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
            needle = "sendBuf";
            break;
        case BAD_ALIGN:
            got = HcclAllReduce(a + 2, b, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
            needle = "not aligned";
            break;
        case BAD_REDUCE_TYPE:
            got = HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, comm, stream);
            want = HCCL_E_NOT_SUPPORT;
            needle = "int64";
            break;
        case BAD_TYPE:
            got = HcclBroadcast(a, 16, (HcclDataType)99, 0, comm, stream);
            want = HCCL_E_NOT_SUPPORT;
            needle = "not supported";
            break;
        case BAD_OP:
            got = HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_FP32, (HcclReduceOp)7, comm, stream);
            want = HCCL_E_NOT_SUPPORT;
            needle = "reduce op 7";
            break;
        case BAD_PROD: /* HCCL on 910B: no prod of int16 or bf16 */
            got = HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_PROD, comm, stream);
            want = HCCL_E_NOT_SUPPORT;
            needle = "prod of bf16";
            break;
        case BAD_ROOT:
            got = HcclBroadcast(a, 16, HCCL_DATA_TYPE_FP32, (uint32_t)n, comm, stream);
            needle = "root";
            break;
        case BAD_SELF:
            got = HcclSend(a, 16, HCCL_DATA_TYPE_FP32, 0, comm, stream);
            needle = "itself";
            break;
        case BAD_OVERLAP:
            got = HcclAllReduce(a, a + 8, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream);
            needle = "overlap";
            break;
        case BAD_GATHER_SIZE: /* recvBuf must hold sendCount * rank size elements */
            got = HcclAllGather(a, b, 1024 / n + 1, HCCL_DATA_TYPE_FP32, comm, stream);
            needle = "recvBuf";
            break;
        case BAD_STREAM:
            got = HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
            want = HCCL_E_PTR;
            needle = "stream is NULL";
            break;
        case BAD_NULL:
            got = HcclAllGather(NULL, b, 16, HCCL_DATA_TYPE_FP32, comm, stream);
            want = HCCL_E_PTR;
            needle = "sendBuf is NULL";
            break;
        default: break;
        }
        CHECK(got == want);
        if (got != want)
            fprintf(stderr, "  case %d: got %d, expected %d\n", g_bad, got, want);
        CHECK(recent_mentions(needle));
    } else { /* the others learn why at their synchronize, at once */
        CHECK(HcclAllReduce(a, b, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_SUCCESS);
        expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, needle);
    }
    aclrtFree(a);
    aclrtFree(b);
}

/* ranks that disagree: every rank's synchronize fails with a message quoting every call */
typedef enum { MIS_COUNT, MIS_TYPE, MIS_OP, MIS_KIND, MIS_ROOT, MIS_P2P_COUNT, N_MIS } mis_kind;
static mis_kind g_mis;

static void body_mismatch(int rank, int n, HcclComm comm, aclrtStream stream)
{
    void *a = dev_alloc(1 << 16), *b = dev_alloc(1 << 16);
    const char *needle = "do not match";
    bool odd = rank == n - 1;
    switch (g_mis) {
    case MIS_COUNT:
        CHECK(HcclAllReduce(a, b, odd ? 200 : 100, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm,
                            stream) == HCCL_SUCCESS);
        needle = "(count 200, fp32, sum)";
        break;
    case MIS_TYPE:
        CHECK(HcclAllReduce(a, b, 100, odd ? HCCL_DATA_TYPE_FP16 : HCCL_DATA_TYPE_FP32,
                            HCCL_REDUCE_SUM, comm, stream) == HCCL_SUCCESS);
        needle = "(count 100, fp16, sum)";
        break;
    case MIS_OP:
        CHECK(HcclAllReduce(a, b, 100, HCCL_DATA_TYPE_FP32,
                            odd ? HCCL_REDUCE_MAX : HCCL_REDUCE_SUM, comm, stream) == HCCL_SUCCESS);
        needle = "(count 100, fp32, max)";
        break;
    case MIS_KIND:
        if (odd)
            CHECK(HcclAllGather(a, b, 100, HCCL_DATA_TYPE_FP32, comm, stream) == HCCL_SUCCESS);
        else
            CHECK(HcclAllReduce(a, b, 100, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
                  HCCL_SUCCESS);
        needle = "HcclAllGather #1 (count 100, fp32)";
        break;
    case MIS_ROOT:
        CHECK(HcclBroadcast(a, 100, HCCL_DATA_TYPE_INT32, odd ? 1 : 0, comm, stream) ==
              HCCL_SUCCESS);
        needle = "root 1";
        break;
    case MIS_P2P_COUNT:
        if (rank == 0)
            CHECK(HcclSend(a, 300, HCCL_DATA_TYPE_FP32, 1, comm, stream) == HCCL_SUCCESS);
        else if (rank == 1)
            CHECK(HcclRecv(b, 200, HCCL_DATA_TYPE_FP32, 0, comm, stream) == HCCL_SUCCESS);
        needle = "send and receive do not match";
        break;
    default: break;
    }
    if (g_mis != MIS_P2P_COUNT || rank < 2) {
        double t0 = now_seconds();
        expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, needle);
        CHECK(now_seconds() - t0 < 3.0);
    }
    aclrtFree(a);
    aclrtFree(b);
}

/* the last rank never calls (but lives, and keeps its communicator): the others time out */
static void body_timeout(int rank, int n, HcclComm comm, aclrtStream stream)
{
    void *a = dev_alloc(4096);
    if (rank == n - 1) {
        usleep(1500000);
    } else {
        double t0 = now_seconds();
        CHECK(HcclAllReduce(a, a, 64, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_SUCCESS);
        expect_sync_error(stream, ACL_ERROR_RT_TASK_TIMEOUT, "timed out after 0.3 s");
        CHECK(mentions("CANN_LLM_HCCL_TIMEOUT"));
        char who[64];
        snprintf(who, sizeof who, "rank %d: no call yet", n - 1);
        CHECK(mentions(who));
        CHECK(now_seconds() - t0 >= 0.25); /* it waited for the deadline */
    }
    aclrtFree(a);
}

/* the last rank dies (or destroys its communicator) instead of calling: the others fail at once */
static bool g_destroy_instead;

static void body_dead_peer(int rank, int n, HcclComm comm, aclrtStream stream)
{
    void *a = dev_alloc(4096);
    if (rank == n - 1) {
        if (!g_destroy_instead)
            _exit(0);
        CHECK(HcclCommDestroy(comm) == HCCL_SUCCESS);
        usleep(1500000); /* alive, without a communicator */
        CHECK(HcclAllReduce(a, a, 64, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_E_PARA); /* a destroyed handle */
        CHECK(recent_mentions("not a live communicator"));
        aclrtFree(a);
        CHECK(aclrtDestroyStream(stream) == ACL_SUCCESS);
        CHECK(aclFinalize() == ACL_SUCCESS);
        _exit(ct_failures ? 1 : 0);
    }
    double t0 = now_seconds();
    CHECK(HcclAllReduce(a, a, 64, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
          HCCL_SUCCESS);
    expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
                      g_destroy_instead ? "destroyed its communicator" : "exited");
    CHECK(now_seconds() - t0 < 3.0); /* CANN_LLM_HCCL_TIMEOUT is 10 here */
    aclrtFree(a);
}

/* a buffer freed while the call was queued (deferred mode): a use after free on that rank, and
 * the others fail at once */
static void body_freed_while_queued(int rank, int n, HcclComm comm, aclrtStream stream)
{
    void *a = dev_alloc(4096);
    CHECK(HcclAllReduce(a, a, 64, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
          HCCL_SUCCESS);
    if (rank == 0) {
        CHECK(aclrtFree(a) == ACL_SUCCESS);
        expect_sync_error(stream, ACL_ERROR_RT_AICORE_EXCEPTION, "freed while the task was queued");
    } else {
        expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "rank 0: HcclAllReduce");
        aclrtFree(a);
    }
}

/* a communicator on device 0 called from a thread whose device is 1 */
static void body_wrong_device(int rank, int n, HcclComm comm, aclrtStream stream)
{
    if (rank == 0) {
        CHECK(aclrtSetDevice(1) == ACL_SUCCESS);
        void *a = dev_alloc(256);
        aclrtStream s1 = NULL;
        CHECK(aclrtCreateStream(&s1) == ACL_SUCCESS);
        CHECK(HcclAllReduce(a, a, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s1) ==
              HCCL_E_PARA);
        CHECK(recent_mentions("belongs to device 0"));
        CHECK(aclrtDestroyStream(s1) == ACL_SUCCESS);
        aclrtFree(a);
        CHECK(aclrtResetDevice(1) == ACL_SUCCESS);
        CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    } else {
        void *a = dev_alloc(256);
        CHECK(HcclAllReduce(a, a, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, stream) ==
              HCCL_SUCCESS);
        expect_sync_error(stream, ACL_ERROR_RT_SUSPECT_REMOTE_ERROR, "belongs to device 0");
        aclrtFree(a);
    }
}

/* ---- creating communicators ---------------------------------------------------------------- */
static int g_init_case;

static void body_init_errors(int rank, int n, HcclComm comm_unused, aclrtStream stream)
{
    HcclComm comm = NULL;
    HcclRootInfo zeros;
    memset(&zeros, 0, sizeof zeros);
    switch (g_init_case) {
    case 0: /* ranks disagree on nRanks: both fail, the one that joined first at once */
        CHECK(HcclCommInitRootInfo(rank ? 3 : 2, &g_shared->root, (uint32_t)rank, &comm) !=
              HCCL_SUCCESS);
        if (rank == 1)
            CHECK(recent_mentions("nRanks 3"));
        break;
    case 1: /* argument checks, then a malformed CANN_LLM_HCCL_TIMEOUT */
        CHECK(HcclCommInitRootInfo(2, &zeros, 0, &comm) == HCCL_E_PARA);
        CHECK(recent_mentions("not made by HcclGetRootInfo"));
        CHECK(HcclCommInitRootInfo(2, &g_shared->root, 2, &comm) == HCCL_E_PARA);
        CHECK(HcclCommInitRootInfo(0, &g_shared->root, 0, &comm) == HCCL_E_PARA);
        CHECK(HcclCommInitRootInfo(2, NULL, 0, &comm) == HCCL_E_PTR);
        CHECK(HcclGetRootInfo(NULL) == HCCL_E_PTR);
        setenv("CANN_LLM_HCCL_TIMEOUT", "soon", 1);
        CHECK(HcclCommInitRootInfo(2, &g_shared->root, (uint32_t)rank, &comm) == HCCL_E_PARA);
        CHECK(recent_mentions("CANN_LLM_HCCL_TIMEOUT='soon'"));
        unsetenv("CANN_LLM_HCCL_TIMEOUT");
        CHECK(HcclCommDestroy(NULL) == HCCL_E_PARA);
        break;
    default: /* rank 1 never joins: rank 0 times out naming the rank count */
        if (rank == 0) {
            CHECK(HcclCommInitRootInfo(2, &g_shared->root, 0, &comm) == HCCL_E_TIMEOUT);
            CHECK(recent_mentions("timed out"));
        }
        break;
    }
    CHECK(comm == NULL);
    (void)stream;
    (void)n;
}

static bool all_digests_equal(int n)
{
    for (int r = 1; r < n; r++)
        if (g_shared->hash[r] != g_shared->hash[0])
            return false;
    return true;
}

int main(int argc, char **argv)
{
    g_only = argc > 1 ? argv[1] : NULL;
    setenv("CANN_LLM_HCCL_TIMEOUT", "10", 1);
    for (int n = 2; n <= 4; n += 2) {
        run_ranks("all-reduce values", n, body_allreduce_values);
        CHECK(all_digests_equal(n));
        run_ranks("all-gather and broadcast values", n, body_gather_broadcast);
        run_ranks("send/recv ring", n, body_send_recv);
        run_ranks("stream order and capture", n, body_stream_order);
    }
    setenv("CANN_LLM_HOST_DEFERRED", "1", 1);
    run_ranks("deferred mode", 2, body_deferred);
    run_ranks("buffer freed while queued", 2, body_freed_while_queued);
    unsetenv("CANN_LLM_HOST_DEFERRED");

    run_ranks("bounds: count beyond the buffer", 2, body_bounds);
    for (g_bad = 0; g_bad < N_BAD; g_bad++)
        run_ranks("refused at launch", 2, body_refused);
    for (g_mis = 0; g_mis < N_MIS; g_mis++)
        run_ranks("ranks disagree", g_mis == MIS_KIND ? 4 : 2, body_mismatch);
    run_ranks("dead peer", 4, body_dead_peer);
    g_destroy_instead = true;
    run_ranks("destroyed peer", 2, body_dead_peer);
    setenv("CANN_LLM_HOST_DEVICES", "2", 1);
    run_ranks("wrong device", 2, body_wrong_device);
    unsetenv("CANN_LLM_HOST_DEVICES");

    setenv("CANN_LLM_HCCL_TIMEOUT", "0.3", 1);
    run_ranks("timeout", 2, body_timeout);
    for (g_init_case = 0; g_init_case < 3; g_init_case++)
        run_ranks_ex("communicator creation errors", 2, body_init_errors, false);
    return CT_RESULT();
}
