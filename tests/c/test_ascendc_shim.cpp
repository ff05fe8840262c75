/* test_ascendc_shim.cpp - the AscendC host shim (ascendc_ops/host) as a device sanitizer: small
 * kernels of this file that break one hardware rule each (a DataCopy that is not whole 32-byte
 * blocks, a DataCopyPad of part of an element, a misaligned UB operand, more UB than the 910B has, too many queue buffers at one
 * position, EnQue past the queue's depth, DeQue of an empty queue, a tensor not freed, a global
 * access out of bounds, a Cast mode the 910B lacks, a repeat count above 255) fail at synchronize
 * with ACL_ERROR_RT_AICORE_EXCEPTION and a message naming the rule, and the stream works after;
 * launches with a bad blockDim or a host pointer are refused. The project's kernels are launched
 * through their aclrtlaunch_* entry points with correct tilings (checked results) and with
 * deliberately wrong arguments: a source that does not start on an element and a tile larger
 * than the unified buffer are rejected the same way. */
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "acl/acl.h"
#include "clm_ascendc.h"
#include "ctest_util.h"
#include "kernel_operator.h"
#include "launch.h"

using namespace AscendC;

namespace {

aclrtStream g_stream;

/* Launches body with blockDim blocks over the GM argument gm; returns the launch's code, and
 * the stream's code at synchronize in *sync_rc (with the recent message in msg). */
uint32_t Run(const char *name, uint32_t block_dim, void *gm, std::function<void()> body, aclError *sync_rc,
             std::string *msg) {
    ascendc_host::GmArg args[] = {{"gm", gm}};
    uint32_t rc = ascendc_host::Launch(name, block_dim, g_stream, args, 1, std::move(body));
    *sync_rc = aclrtSynchronizeStream(g_stream);
    const char *m = aclGetRecentErrMsg();
    *msg = m ? m : "";
    return rc;
}

/* The kernel faults: the launch is accepted, synchronize reports an AI-core exception whose
 * message contains `needle`, and a correct launch on the same stream then succeeds. */
void ExpectFault(const char *name, void *gm, std::function<void()> body, const char *needle) {
    aclError sync_rc = ACL_SUCCESS;
    std::string msg;
    uint32_t rc = Run(name, 2, gm, std::move(body), &sync_rc, &msg);
    CHECK(rc == ACL_SUCCESS);
    CHECK(sync_rc == ACL_ERROR_RT_AICORE_EXCEPTION);
    if (msg.find(needle) == std::string::npos || msg.find(name) == std::string::npos) {
        fprintf(stderr, "%s: expected '%s' in the message, got: %s\n", name, needle, msg.c_str());
        CHECK(false);
    }
    uint32_t again = Run("after_fault", 2, gm, [] {}, &sync_rc, &msg);
    CHECK(again == ACL_SUCCESS && sync_rc == ACL_SUCCESS);
}

constexpr uint32_t kFloats = 1024;

void test_rules(float *gm) {
    auto global = [gm] {
        GlobalTensor<float> g;
        g.SetGlobalBuffer((__gm__ float *)gm, kFloats);
        return g;
    };
    /* a correct kernel: each block copies its half through a double-buffered queue */
    aclError sync_rc;
    std::string msg;
    uint32_t rc = Run("good", 2, gm, [&] {
        TPipe pipe;
        TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 2, 256 * sizeof(float));
        GlobalTensor<float> g = global();
        uint64_t half_len = kFloats / 2, first = (uint64_t)GetBlockIdx() * half_len;
        for (uint64_t off = first; off < first + half_len; off += 256) {
            LocalTensor<float> t = q.AllocTensor<float>();
            DataCopy(t, g[off], 256);
            Muls(t, t, 2.0f, 256);
            q.EnQue(t);
            t = q.DeQue<float>();
            DataCopy(g[off], t, 256);
            q.FreeTensor(t);
        }
    }, &sync_rc, &msg);
    CHECK(rc == ACL_SUCCESS && sync_rc == ACL_SUCCESS);

    ExpectFault("datacopy_length", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopy(t, global(), 100);   /* 400 bytes */
        q.FreeTensor(t);
    }, "not a multiple of 32");
    ExpectFault("ub_unaligned", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopy(t[1], global(), 64);   /* UB offset 4 */
        q.FreeTensor(t);
    }, "not 32-byte aligned");
    ExpectFault("datacopypad_length", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 256 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopyPad(t, global(), DataCopyExtParams{1, 6, 0, 0, 0}, DataCopyPadExtParams<float>{false, 0, 0, 0});
        q.FreeTensor(t);
    }, "not a multiple of the element size");
    ExpectFault("ub_capacity", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> in;
        TQue<TPosition::VECOUT, 1> out;
        pipe.InitBuffer(in, 2, 64 * 1024);
        pipe.InitBuffer(out, 2, 32 * 1024 + 32);   /* 128 KiB + 64 KiB + 64 bytes */
    }, "over the 910B's 196608");
    ExpectFault("queue_buffers", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> a, b;
        pipe.InitBuffer(a, 6, 32);
        pipe.InitBuffer(b, 3, 32);
    }, "over the 910B's 8");
    ExpectFault("enque_depth", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 2, 64);
        LocalTensor<float> x = q.AllocTensor<float>(), y = q.AllocTensor<float>();
        q.EnQue(x);
        q.EnQue(y);
    }, "its depth");
    ExpectFault("deque_empty", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECOUT, 1> q;
        pipe.InitBuffer(q, 2, 64);
        LocalTensor<float> x = q.DeQue<float>();
        (void)x;
    }, "empty queue");
    ExpectFault("alloc_exhausted", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 64);
        LocalTensor<float> x = q.AllocTensor<float>(), y = q.AllocTensor<float>();
        (void)x, (void)y;
    }, "wait forever");
    ExpectFault("not_freed", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 2, 64);
        LocalTensor<float> x = q.AllocTensor<float>();
        (void)x;
    }, "not freed");
    ExpectFault("gm_bounds", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 64 * sizeof(float));
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopy(t, global()[kFloats - 8], 64);   /* 56 elements past the buffer */
        q.FreeTensor(t);
    }, "out of bounds");
    ExpectFault("gm_device", gm, [&] {
        TPipe pipe;
        TQue<TPosition::VECIN, 1> q;
        pipe.InitBuffer(q, 1, 64 * sizeof(float));
        static float host[64];
        GlobalTensor<float> h;
        h.SetGlobalBuffer((__gm__ float *)host, 64);
        LocalTensor<float> t = q.AllocTensor<float>();
        DataCopy(t, h, 64);
        q.FreeTensor(t);
    }, "not device memory");
    ExpectFault("cast_mode", gm, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, 256);
        pipe.InitBuffer(b, 256);
        Cast(b.Get<int16_t>(), a.Get<float>(), RoundMode::CAST_NONE, 64);
    }, "not a mode the 910B has");
    ExpectFault("repeat_limit", gm, [&] {
        TPipe pipe;
        TBuf<TPosition::VECCALC> a, b;
        pipe.InitBuffer(a, 256 * 128);
        pipe.InitBuffer(b, 256 * 4);
        WholeReduceMax(b.Get<float>(), a.Get<float>(), 32, 256, 1, 1, 4, ReduceOrder::ORDER_ONLY_VALUE);
    }, "outside [0, 255]");
    ExpectFault("two_pipes", gm, [&] {
        TPipe pipe, second;
    }, "second TPipe");

    /* launches the runtime refuses before anything runs */
    CHECK(Run("block_dim_0", 0, gm, [] {}, &sync_rc, &msg) == ACL_ERROR_RT_PARAM_INVALID);
    CHECK(Run("block_dim_65536", 65536, gm, [] {}, &sync_rc, &msg) == ACL_ERROR_RT_PARAM_INVALID);
    static float host_arg[16];
    CHECK(Run("host_pointer", 1, host_arg, [] {}, &sync_rc, &msg) == ACL_ERROR_INVALID_PARAM);
    CHECK(sync_rc == ACL_SUCCESS);
}

/* clm_dup through its entry point: correct tilings (any blockDim) give the right values; a
 * misaligned source and a tile whose queues need more than 192 KiB fail. */
void test_dup_entry(void) {
    const uint64_t n = 40000 + 7;
    void *src = nullptr, *dst = nullptr;
    CHECK(aclrtMalloc(&src, n * 4, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtMalloc(&dst, n * 2, ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    std::vector<float> host(n);
    for (uint64_t i = 0; i < n; i++) host[i] = (float)i * 0.25f - 1000.0f;
    CHECK(aclrtMemcpy(src, n * 4, host.data(), n * 4, ACL_MEMCPY_HOST_TO_DEVICE) == ACL_SUCCESS);
    clm_asc_tiling t = clm_asc_dup_tiling(n);
    CHECK(t.block_dim == 5 && t.tile == CLM_ASC_DUP_TILE_MAX);
    for (uint32_t block_dim : {t.block_dim, 1u, 3u, 40u}) {
        CHECK(aclrtlaunch_clm_dup(block_dim, g_stream, src, dst, CLM_ASC_F32, CLM_ASC_F16, n, t.tile) == ACL_SUCCESS);
        CHECK(aclrtSynchronizeStream(g_stream) == ACL_SUCCESS);
        std::vector<uint16_t> half_bits(n);
        CHECK(aclrtMemcpy(half_bits.data(), n * 2, dst, n * 2, ACL_MEMCPY_DEVICE_TO_HOST) == ACL_SUCCESS);
        int wrong = 0;
        for (uint64_t i = 0; i < n; i++) wrong += half_bits[i] != AscendC::shim::FloatToHalfBits(host[i]);
        CHECK(wrong == 0);
    }
    /* a tile that is not whole 32-byte blocks is fine: every such tile takes the tail path */
    CHECK(aclrtlaunch_clm_dup(2, g_stream, src, dst, CLM_ASC_F32, CLM_ASC_F16, n, 100) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(g_stream) == ACL_SUCCESS);
    /* a source that does not start on an F32 element */
    CHECK(aclrtlaunch_clm_dup(2, g_stream, (char *)src + 2, dst, CLM_ASC_F32, CLM_ASC_F16, n - 1, t.tile) ==
          ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(g_stream) == ACL_ERROR_RT_AICORE_EXCEPTION);
    const char *msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "aclrtlaunch_clm_dup") && strstr(msg, "DataCopy") && strstr(msg, "not aligned"));
    CHECK(aclrtlaunch_clm_dup(2, g_stream, src, dst, CLM_ASC_F32, CLM_ASC_F16, n, 32768) == ACL_SUCCESS);
    CHECK(aclrtSynchronizeStream(g_stream) == ACL_ERROR_RT_AICORE_EXCEPTION);
    msg = aclGetRecentErrMsg();
    CHECK(msg && strstr(msg, "unified buffer"));
    CHECK(aclrtFree(src) == ACL_SUCCESS);
    CHECK(aclrtFree(dst) == ACL_SUCCESS);
}

}  // namespace

int main(void) {
    CHECK(aclInit(nullptr) == ACL_SUCCESS);
    CHECK(aclrtSetDevice(0) == ACL_SUCCESS);
    CHECK(aclrtCreateStream(&g_stream) == ACL_SUCCESS);
    void *gm = nullptr;
    CHECK(aclrtMalloc(&gm, kFloats * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST) == ACL_SUCCESS);
    CHECK(aclrtMemset(gm, kFloats * sizeof(float), 0, kFloats * sizeof(float)) == ACL_SUCCESS);
    test_rules(static_cast<float *>(gm));
    test_dup_entry();
    CHECK(aclrtFree(gm) == ACL_SUCCESS);
    CHECK(aclrtDestroyStream(g_stream) == ACL_SUCCESS);
    CHECK(aclrtResetDevice(0) == ACL_SUCCESS);
    CHECK(aclFinalize() == ACL_SUCCESS);
    return CT_RESULT();
}
