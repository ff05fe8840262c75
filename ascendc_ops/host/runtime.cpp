/* runtime.cpp - the host shim's runtime: a kernel launch is one stream task (ordered with the
 * stream's other work, recorded and replayed by aclmdlRI graph capture like any task) whose blocks
 * run on acl_host's thread pool, each with its own unified buffer; and the checks behind
 * kernel_operator.h (faults, global memory against acl_host's live allocations, the unified
 * buffer's capacity, the Cast conversions). A fault ends its block; the launch's task then fails
 * with ACL_ERROR_RT_AICORE_EXCEPTION and the message of the lowest failing block.
 */
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>

#include "kernel_operator.h"
#include "launch.h"

extern "C" {
#include "ah_convert.h"
#include "ah_rt.h"
}

namespace {

struct KernelFault : std::exception {
    std::string message;
    explicit KernelFault(std::string m) : message(std::move(m)) {}
    const char *what() const noexcept override { return message.c_str(); }
};

thread_local int64_t tl_block_idx = 0;
thread_local int64_t tl_block_num = 1;
thread_local bool tl_pipe_active = false;
/* The block's unified buffer: one per thread, released when the thread exits. */
struct UnifiedBuffer {
    uint8_t *bytes = nullptr;
    ~UnifiedBuffer() { std::free(bytes); }
};
thread_local UnifiedBuffer tl_ub;
thread_local std::string *tl_deferred = nullptr;   /* a fault found in a destructor */

/* Device blocks this kernel block has checked: its global-memory accesses inside them skip
 * acl_host's registry (emptied when the next kernel block starts). */
struct GmCache {
    static constexpr int kSlots = 8;
    uintptr_t begin[kSlots], end[kSlots];
    int count = 0, next = 0;
};
thread_local GmCache tl_gm_cache;

std::string Format(const char *fmt, va_list ap) {
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

}  // namespace

namespace AscendC {

int64_t GetBlockIdx() { return tl_block_idx; }
int64_t GetBlockNum() { return tl_block_num; }

namespace shim {

void Fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string message = Format(fmt, ap);
    va_end(ap);
    throw KernelFault(std::move(message));
}

void Defer(const char *fmt, ...) {
    if (tl_deferred == nullptr || !tl_deferred->empty()) return;   /* keep the first */
    va_list ap;
    va_start(ap, fmt);
    *tl_deferred = Format(fmt, ap);
    va_end(ap);
}

void CheckGm(const void *p, size_t bytes, const char *what) {
    uintptr_t a = (uintptr_t)p, b = a + bytes;
    for (int i = 0; i < tl_gm_cache.count; i++)
        if (a >= tl_gm_cache.begin[i] && b <= tl_gm_cache.end[i] && b >= a) return;
    uintptr_t begin, end;
    if (ah_mem_device_extent(p, bytes, what, &begin, &end) != ACL_SUCCESS) {
        char msg[AH_ERRMSG_SIZE];
        ah_error_take(msg, sizeof msg);
        Fail("%s", msg);
    }
    int slot = tl_gm_cache.count < GmCache::kSlots ? tl_gm_cache.count++ : tl_gm_cache.next++ % GmCache::kSlots;
    tl_gm_cache.begin[slot] = begin;
    tl_gm_cache.end[slot] = end;
}

uint8_t *UbBase() {
    if (tl_ub.bytes == nullptr) {
        tl_ub.bytes = static_cast<uint8_t *>(std::aligned_alloc(64, kUbBytes));
        if (tl_ub.bytes == nullptr) Fail("out of host memory for a unified buffer");
        std::memset(tl_ub.bytes, kPoison, kUbBytes);
    }
    return tl_ub.bytes;
}

void PipeBegin() {
    if (tl_pipe_active) Fail("a second TPipe in one kernel block (a kernel has one TPipe)");
    UbBase();
    tl_pipe_active = true;
}

void PipeEnd() { tl_pipe_active = false; }

void HalfToFloat(const uint16_t *src, float *dst, size_t n) { ah_f16_to_f32_row(src, dst, (int64_t)n); }
void FloatToHalf(const float *src, uint16_t *dst, size_t n) { ah_f32_to_f16_row(src, dst, (int64_t)n); }
float HalfBitsToFloat(uint16_t h) { return ah_f16_to_f32(h); }
uint16_t FloatToHalfBits(float f) { return ah_f32_to_f16(f); }

const char *RoundModeName(RoundMode mode) {
    static const char *names[] = {"CAST_NONE", "CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC",
                                  "CAST_ODD"};
    int i = (int)mode;
    return i >= 0 && i < 7 ? names[i] : "?";
}

namespace {
struct HalfTables {
    uint16_t int8[256];
    uint16_t int4[16];
    HalfTables() {
        for (int b = 0; b < 256; b++) int8[b] = ah_f32_to_f16((float)(int8_t)b);
        for (int b = 0; b < 16; b++) int4[b] = ah_f32_to_f16((float)(b >= 8 ? b - 16 : b));
    }
};
const HalfTables kHalfTables;
}  // namespace

const uint16_t *Int8HalfTable() { return kHalfTables.int8; }
const uint16_t *Int4HalfTable() { return kHalfTables.int4; }

}  // namespace shim

bool TPipe::Place(shim::QueState &q, int num, uint32_t len, bool queue, const char *what) {
    if (q.initialized) shim::Fail("TPipe::%s: the queue or buffer was initialized before", what);
    if (num < 1 || num > 8) shim::Fail("TPipe::%s: %d buffers (a queue has 1 to 8)", what, num);
    if (len == 0) shim::Fail("TPipe::%s: a buffer of 0 bytes", what);
    uint64_t rounded = ((uint64_t)len + 31) / 32 * 32, total = rounded * (uint64_t)num;
    if (used_ + total > shim::kUbBytes)
        shim::Fail("TPipe::%s: %d x %u bytes would bring the unified buffer to %llu bytes, over the 910B's %u", what, num,
                   (unsigned)rounded, (unsigned long long)(used_ + total), shim::kUbBytes);
    if (buffers_ + num > shim::kMaxPipeBuffers)
        shim::Fail("TPipe::%s: more than %d buffers in one TPipe", what, shim::kMaxPipeBuffers);
    int p = (int)q.pos;
    if (queue && per_position_[p] + num > shim::kMaxQueBuffersPerPosition)
        shim::Fail("TPipe::%s: %d more queue buffers at one TPosition would make %d, over the 910B's %d", what, num,
                   per_position_[p] + num, shim::kMaxQueBuffersPerPosition);
    if (queue) per_position_[p] += num;
    buffers_ += num;
    q.num = num;
    q.len = (uint32_t)rounded;
    uint8_t *ub = shim::UbBase();
    for (int i = 0; i < num; i++) q.addr[i] = ub + used_ + rounded * i;
    used_ += (uint32_t)total;
    q.initialized = true;
    return true;
}

}  // namespace AscendC

/* ---- launches ------------------------------------------------------------------------------ */
namespace ascendc_host {
namespace {

struct LaunchTask {
    std::string name;
    uint32_t block_dim;
    std::function<void()> body;
    /* per run */
    std::mutex mutex;
    int64_t failed_block;
    std::string message;
};

void RunBlocks(void *ctx, int64_t begin, int64_t end) {
    LaunchTask *t = static_cast<LaunchTask *>(ctx);
    std::string deferred;
    for (int64_t b = begin; b < end; b++) {
        tl_block_idx = b;
        tl_block_num = t->block_dim;
        deferred.clear();
        tl_deferred = &deferred;
        tl_gm_cache.count = 0;
        std::string fault;
        try {
            t->body();
        } catch (const KernelFault &f) {
            fault = f.message;
        } catch (const std::bad_alloc &) {
            fault = "out of host memory";
        } catch (const std::exception &e) {
            fault = e.what();
        } catch (...) {
            fault = "unknown fault";
        }
        tl_deferred = nullptr;
        tl_pipe_active = false;
        if (fault.empty()) fault = deferred;
        if (!fault.empty()) {
            std::lock_guard<std::mutex> lock(t->mutex);
            if (t->failed_block < 0 || b < t->failed_block) {
                t->failed_block = b;
                t->message = fault;
            }
        }
    }
    tl_block_idx = 0;
    tl_block_num = 1;
}

aclError RunTask(void *arg) {
    LaunchTask *t = static_cast<LaunchTask *>(arg);
    t->failed_block = -1;
    t->message.clear();
    ah_parallel_for(t->block_dim, 1, RunBlocks, t);
    if (t->failed_block >= 0)
        return ah_error(ACL_ERROR_RT_AICORE_EXCEPTION, "%s: block %lld of %u: %s", t->name.c_str(),
                        (long long)t->failed_block, t->block_dim, t->message.c_str());
    return ACL_SUCCESS;
}

void ReleaseTask(void *arg) { delete static_cast<LaunchTask *>(arg); }

}  // namespace

uint32_t Launch(const char *name, uint32_t block_dim, aclrtStream stream, const GmArg *args, int n_args,
                std::function<void()> body) {
    if (block_dim == 0 || block_dim > 65535)
        return ah_error(ACL_ERROR_RT_PARAM_INVALID, "%s: blockDim %u is outside [1, 65535]", name, block_dim);
    struct ah_stream *s = nullptr;
    aclError rc = ah_stream_resolve(stream, name, &s);
    if (rc != ACL_SUCCESS) return rc;
    int device = ah_stream_device(s);
    ah_range ranges[8];
    if (n_args > 8) return ah_error(ACL_ERROR_RT_PARAM_INVALID, "%s: too many global-memory arguments", name);
    int n_ranges = 0;
    for (int i = 0; i < n_args; i++) {
        if (args[i].ptr == nullptr) {
            if (args[i].optional) continue;
            return ah_error(ACL_ERROR_INVALID_PARAM, "%s: argument %s is NULL", name, args[i].name);
        }
        char what[160];
        snprintf(what, sizeof what, "%s: argument %s", name, args[i].name);
        ah_mem_kind kind = AH_MEM_NONE;
        int arg_device = -1;
        rc = ah_mem_classify_named(args[i].ptr, 1, what, &kind, &arg_device);
        if (rc != ACL_SUCCESS) return rc;
        if (kind != AH_MEM_DEVICE && kind != AH_MEM_REGISTERED)   /* registered: the device's view of host memory */
            return ah_error(ACL_ERROR_INVALID_PARAM, "%s (%p) is not device memory", what, args[i].ptr);
        if (arg_device != device && !ah_rt_peer_enabled(arg_device, device))
            return ah_error(ACL_ERROR_INVALID_PARAM, "%s is memory of device %d, the stream is on device %d (no peer access)",
                            what, arg_device, device);
        ranges[n_ranges++] = ah_range{args[i].ptr, 1};
    }
    LaunchTask *t = new (std::nothrow) LaunchTask();
    if (t == nullptr) return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", name);
    try {
        t->name = name;
        t->body = std::move(body);
    } catch (...) {
        delete t;
        return ah_error(ACL_ERROR_RT_MEMORY_ALLOCATION, "%s: out of host memory", name);
    }
    t->block_dim = block_dim;
    return ah_stream_submit(stream, name, RunTask, t, ReleaseTask, ranges, (size_t)n_ranges);
}

}  // namespace ascendc_host
