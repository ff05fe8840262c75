/* kernel_operator.h (host shim) - the AscendC primitives the kernels of ascendc_ops/kernels use,
 * in C++17, so the same kernel sources compile with g++ in the host build and their blocks run on
 * acl_host's thread pool (runtime.cpp), in the spirit of CANN's CPU debug mode (tikicpulib).
 *
 * Only what the kernels call is here, with the names and signatures of CANN 8.1.RC1's basic_api
 * (scripts/check_ascendc.sh compiles the kernels against the real headers too). The hardware
 * rules that break real kernels are checked on every call; a violation ends the block with a
 * fault that the launch's stream reports at its next synchronize (ACL_ERROR_RT_AICORE_EXCEPTION,
 * the message naming the primitive and the rule), never an abort:
 *   - DataCopy: a length that is not a multiple of 32 bytes (the NPU silently rounds it down), a
 *     unified-buffer (UB) address not 32-byte aligned, a global address not aligned to the
 *     element, more than 65535 blocks; DataCopyPad: blockCount / blockLen / padding ranges;
 *   - TPipe: more UB than the 910B's 192 KiB, more than 8 queue buffers at one TPosition, more
 *     than 64 buffers in all; TQue: EnQue beyond the queue's depth, DeQue of an empty queue,
 *     AllocTensor with every buffer in use, a tensor freed twice or freed while queued, tensors
 *     still held when the kernel ends;
 *   - vector operations: operands outside their LocalTensor or not 32-byte aligned, repeat
 *     counts above 255, masks wider than a repeat, Cast type pairs the 910B lacks (a compile
 *     error) and round modes it lacks for a pair (a fault);
 *   - global memory: every access inside the GlobalTensor's buffer (when it was given a size)
 *     and inside live device memory (acl_host's allocation registry).
 * A thread's unified buffer starts filled with 0xFF (a NaN in F32 / F16) and then holds what its
 * previous blocks left, as the NPU's does; the padding DataCopyPad leaves undefined is filled
 * with 0xFF on every copy, so reading it shows up in results. The pipes are not modelled: every primitive
 * runs when it is called, so SetFlag / WaitFlag / PipeBarrier are no-ops and a missing
 * synchronisation is not detected. docs/ascendc.md and docs/acl_host.md list the rules.
 */
#ifndef CLM_ASCENDC_HOST_KERNEL_OPERATOR_H
#define CLM_ASCENDC_HOST_KERNEL_OPERATOR_H

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define __global__
#define __aicore__
#define __gm__
#define GM_ADDR __gm__ uint8_t *

/* The shim's runtime functions, exported from libacl_host for the kernels of the C tests. */
#define CLM_SHIM_API __attribute__((visibility("default")))

/* A kernel's ASSERT fails its block, as in CPU debug mode (a no-op on the NPU). */
#define ASSERT(x) ((x) ? (void)0 : ::AscendC::shim::Fail("ASSERT(%s) failed at %s:%d", #x, __FILE__, __LINE__))

/* As in the real headers: vector-only kernels declare their task type (a no-op here). */
enum KernelMetaType : uint8_t { KERNEL_TYPE_AIV_ONLY, KERNEL_TYPE_AIC_ONLY, KERNEL_TYPE_MIX_AIC_1_2 };
#define KERNEL_TASK_TYPE_DEFAULT(value) ((void)(value))

typedef enum { PIPE_S = 0, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL } pipe_t;

namespace AscendC {

/* ---- the shim's runtime (runtime.cpp) ---------------------------------------------------- */
namespace shim {
constexpr uint32_t kUbBytes = 192 * 1024;    /* unified buffer of one 910B vector core */
constexpr uint32_t kBlockBytes = 32;         /* DataCopy unit and UB operand alignment */
constexpr uint32_t kRepeatBytes = 256;       /* bytes one vector repeat processes */
constexpr int kMaxQueBuffersPerPosition = 8; /* Atlas A2: queue buffers at one TPosition */
constexpr int kMaxPipeBuffers = 64;          /* QBUF_MAX_LEN: buffers one TPipe manages */
constexpr int32_t kMaxRepeat = 255;
constexpr uint8_t kPoison = 0xFF;

/* Ends the block with a fault (thrown, caught by the block runner). */
[[noreturn]] CLM_SHIM_API void Fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records a fault found where nothing may throw (a destructor); reported like Fail's. */
CLM_SHIM_API void Defer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* [p, p + bytes) must lie in live device memory; `what` names the access. */
CLM_SHIM_API void CheckGm(const void *p, size_t bytes, const char *what);
/* This block's unified buffer (kUbBytes, 32-byte aligned). */
CLM_SHIM_API uint8_t *UbBase();
/* The block's one TPipe: registered by its constructor, released by its destructor. */
CLM_SHIM_API void PipeBegin();
CLM_SHIM_API void PipeEnd();
/* F16 <-> F32 rows, round to nearest even (acl_host's conversions). */
CLM_SHIM_API void HalfToFloat(const uint16_t *src, float *dst, size_t n);
CLM_SHIM_API void FloatToHalf(const float *src, uint16_t *dst, size_t n);
CLM_SHIM_API float HalfBitsToFloat(uint16_t h);
CLM_SHIM_API uint16_t FloatToHalfBits(float f);
}  // namespace shim

}  // namespace AscendC

/* ---- scalar types ------------------------------------------------------------------------ */
/* IEEE binary16, a global type as in the real headers (a builtin type on the NPU). */
struct half {
    uint16_t bits = 0;
    half() = default;
    half(float f) : bits(AscendC::shim::FloatToHalfBits(f)) {}
    half(double f) : bits(AscendC::shim::FloatToHalfBits(static_cast<float>(f))) {}
    half(int v) : bits(AscendC::shim::FloatToHalfBits(static_cast<float>(v))) {}
    operator float() const { return AscendC::shim::HalfBitsToFloat(bits); }
};

namespace AscendC {

/* 4-bit signed integer, two per byte: element 2k in the low nibble of byte k (ACL_INT4). */
struct int4b_t {
    uint8_t packed;
};

using TEventID = int8_t;
using event_t = int32_t;

namespace shim {
template <typename T> constexpr uint32_t kBits = sizeof(T) * 8;
template <> constexpr uint32_t kBits<int4b_t> = 4;
template <typename T> constexpr uint64_t Bytes(uint64_t count) { return (count * kBits<T> + 7) / 8; }
template <typename T> constexpr const char *TypeName() {
    if constexpr (std::is_same<T, float>::value) return "float";
    else if constexpr (std::is_same<T, half>::value) return "half";
    else if constexpr (std::is_same<T, int32_t>::value) return "int32_t";
    else if constexpr (std::is_same<T, int16_t>::value) return "int16_t";
    else if constexpr (std::is_same<T, int8_t>::value) return "int8_t";
    else if constexpr (std::is_same<T, uint8_t>::value) return "uint8_t";
    else if constexpr (std::is_same<T, int4b_t>::value) return "int4b_t";
    else return "?";
}
}  // namespace shim

CLM_SHIM_API int64_t GetBlockIdx();
CLM_SHIM_API int64_t GetBlockNum();

/* ---- positions, events, modes ------------------------------------------------------------ */
enum class TPosition : int32_t { GM, A1, A2, B1, B2, C1, C2, CO1, CO2, VECIN, VECOUT, VECCALC, LCM = VECCALC, MAX };
enum class HardEvent : uint8_t { MTE2_V, V_MTE2, MTE3_V, V_MTE3, V_V, MTE3_MTE2, MTE2_MTE3, S_V, V_S, S_MTE2, MTE2_S,
                                 S_MTE3, MTE3_S };
enum class RoundMode : uint8_t { CAST_NONE = 0, CAST_RINT, CAST_FLOOR, CAST_CEIL, CAST_ROUND, CAST_TRUNC, CAST_ODD };
enum class ReduceOrder : uint8_t { ORDER_VALUE_INDEX = 0, ORDER_INDEX_VALUE, ORDER_ONLY_VALUE, ORDER_ONLY_INDEX };

/* Pipe synchronisation: the shim runs every primitive when it is called. */
template <HardEvent E> inline void SetFlag(int32_t) {}
template <HardEvent E> inline void WaitFlag(int32_t) {}
template <pipe_t P> inline void PipeBarrier() {}

/* ---- tensors ----------------------------------------------------------------------------- */
template <typename T> class LocalTensor {
public:
    LocalTensor() = default;
    LocalTensor(uint8_t *addr, uint64_t bytes) : addr_(addr), bytes_(bytes) {}
    LocalTensor operator[](uint32_t offset) const {
        uint64_t bits = (uint64_t)offset * shim::kBits<T>;
        if (bits % 8 != 0) shim::Fail("LocalTensor<%s>[%u] does not start on a byte", shim::TypeName<T>(), offset);
        if (bits / 8 > bytes_)
            shim::Fail("LocalTensor<%s>[%u] is past the tensor's %llu bytes", shim::TypeName<T>(), offset,
                       (unsigned long long)bytes_);
        return LocalTensor(addr_ + bits / 8, bytes_ - bits / 8);
    }
    T GetValue(uint32_t i) const {
        static_assert(shim::kBits<T> % 8 == 0, "GetValue on a sub-byte type");
        Require(i + 1ull, "LocalTensor::GetValue");
        T v;
        std::memcpy(&v, addr_ + (uint64_t)i * sizeof(T), sizeof(T));
        return v;
    }
    template <typename U> void SetValue(uint32_t i, U value) const {
        static_assert(shim::kBits<T> % 8 == 0, "SetValue on a sub-byte type");
        Require(i + 1ull, "LocalTensor::SetValue");
        T v = static_cast<T>(value);
        std::memcpy(addr_ + (uint64_t)i * sizeof(T), &v, sizeof(T));
    }
    uint32_t GetSize() const { return (uint32_t)(bytes_ * 8 / shim::kBits<T>); }
    template <typename U> LocalTensor<U> ReinterpretCast() const { return LocalTensor<U>(addr_, bytes_); }

    /* shim internals */
    uint8_t *Addr() const { return addr_; }
    /* `count` elements fit in the tensor. */
    void Require(uint64_t count, const char *what) const {
        if (addr_ == nullptr) shim::Fail("%s: LocalTensor<%s> is not allocated", what, shim::TypeName<T>());
        if (shim::Bytes<T>(count) > bytes_)
            shim::Fail("%s: %llu elements of %s do not fit in the LocalTensor (%llu bytes)", what,
                       (unsigned long long)count, shim::TypeName<T>(), (unsigned long long)bytes_);
    }
    /* [offset, offset + bytes) of the tensor's bytes lie inside it. */
    void RequireBytes(uint64_t offset, uint64_t bytes, const char *what) const {
        if (addr_ == nullptr) shim::Fail("%s: LocalTensor<%s> is not allocated", what, shim::TypeName<T>());
        if (offset + bytes > bytes_)
            shim::Fail("%s: bytes [%llu, %llu) are outside the LocalTensor<%s> (%llu bytes)", what,
                       (unsigned long long)offset, (unsigned long long)(offset + bytes), shim::TypeName<T>(),
                       (unsigned long long)bytes_);
    }
    /* The tensor starts `align` bytes aligned in the unified buffer (whose base is 64-byte
     * aligned, so the address tells). */
    void RequireAligned(const char *what, uint32_t align = shim::kBlockBytes) const {
        if (addr_ == nullptr) shim::Fail("%s: LocalTensor<%s> is not allocated", what, shim::TypeName<T>());
        if ((uintptr_t)addr_ % align != 0)
            shim::Fail("%s: unified-buffer operand at UB offset %lld is not %u-byte aligned", what,
                       (long long)(addr_ - shim::UbBase()), align);
    }

private:
    uint8_t *addr_ = nullptr;
    uint64_t bytes_ = 0;
};

template <typename T> class GlobalTensor {
public:
    void SetGlobalBuffer(__gm__ T *buffer, uint64_t size) {
        base_ = ptr_ = reinterpret_cast<uint8_t *>(buffer);
        size_ = size;
        sized_ = true;
    }
    void SetGlobalBuffer(__gm__ T *buffer) {
        base_ = ptr_ = reinterpret_cast<uint8_t *>(buffer);
        size_ = 0;
        sized_ = false;
    }
    GlobalTensor operator[](uint64_t offset) const {
        if ((offset * shim::kBits<T>) % 8 != 0)
            shim::Fail("GlobalTensor<%s>[%llu] does not start on a byte", shim::TypeName<T>(), (unsigned long long)offset);
        GlobalTensor g = *this;
        g.ptr_ += shim::Bytes<T>(offset);
        return g;
    }
    T GetValue(uint64_t i) const {
        static_assert(shim::kBits<T> % 8 == 0, "GetValue on a sub-byte type");
        const uint8_t *p = ptr_ + i * sizeof(T);
        Check(p, sizeof(T), "GlobalTensor::GetValue");
        T v;
        std::memcpy(&v, p, sizeof(T));
        return v;
    }
    uint64_t GetSize() const { return size_; }
    const __gm__ T *GetPhyAddr() const { return reinterpret_cast<const T *>(ptr_); }

    /* shim internals */
    uint8_t *Addr() const { return ptr_; }
    /* [p, p + bytes) inside the buffer given to SetGlobalBuffer (when sized) and in live device
     * memory. */
    void Check(const void *p, uint64_t bytes, const char *what) const {
        const uint8_t *q = static_cast<const uint8_t *>(p);
        if (base_ == nullptr) shim::Fail("%s: GlobalTensor<%s> has no buffer (SetGlobalBuffer)", what, shim::TypeName<T>());
        if (sized_ && (q < base_ || q + bytes > base_ + shim::Bytes<T>(size_)))
            shim::Fail("%s: bytes [%lld, %lld) of a GlobalTensor<%s> of %llu elements (out of bounds)", what,
                       (long long)(q - base_), (long long)(q + bytes - base_), shim::TypeName<T>(),
                       (unsigned long long)size_);
        shim::CheckGm(q, bytes, what);
    }

private:
    uint8_t *base_ = nullptr;
    uint8_t *ptr_ = nullptr;
    uint64_t size_ = 0;
    bool sized_ = false;
};

/* ---- TPipe, TQueBind / TQue, TBuf --------------------------------------------------------- */
namespace shim {
/* The buffers of one queue (or TBuf) in the unified buffer. */
struct QueState {
    enum Buffer : uint8_t { FREE, ALLOCATED, QUEUED, DEQUEUED };
    TPosition pos = TPosition::VECCALC;
    int depth = 0;
    int num = 0;
    uint32_t len = 0;
    uint8_t *addr[8] = {};   /* the buffers in this block's unified buffer */
    Buffer state[8] = {};
    int fifo[8] = {};
    int head = 0, count = 0, next_alloc = 0;
    bool initialized = false;
};
}  // namespace shim

class TPipe;

template <TPosition src, TPosition dst, int32_t depth, auto mask = 0> class TQueBind {
public:
    TQueBind() = default;
    TQueBind(const TQueBind &) = delete;
    TQueBind &operator=(const TQueBind &) = delete;
    ~TQueBind() {
        if (!q_.initialized || depth == 0) return;
        int held = 0;
        for (int i = 0; i < q_.num; i++) held += q_.state[i] != shim::QueState::FREE;
        if (held > 0) shim::Defer("TQue: the kernel ended with %d of the queue's tensors not freed (FreeTensor missing)", held);
    }
    template <typename T> LocalTensor<T> AllocTensor() {
        Init("AllocTensor");
        for (int k = 0; k < q_.num; k++) {
            int i = (q_.next_alloc + k) % q_.num;
            if (q_.state[i] == shim::QueState::FREE) {
                q_.state[i] = shim::QueState::ALLOCATED;
                q_.next_alloc = (i + 1) % q_.num;
                return LocalTensor<T>(q_.addr[i], q_.len);
            }
        }
        shim::Fail("TQue::AllocTensor: all %d buffers of the queue are in use (the NPU would wait forever)", q_.num);
    }
    template <typename T> bool EnQue(const LocalTensor<T> &t) {
        Init("EnQue");
        int i = Buffer(t.Addr(), "EnQue");
        if (q_.state[i] != shim::QueState::ALLOCATED)
            shim::Fail("TQue::EnQue: the tensor is not one allocated from this queue (already queued, or freed)");
        if (q_.count >= depth) shim::Fail("TQue::EnQue: the queue already holds %d tensor(s), its depth", depth);
        q_.fifo[(q_.head + q_.count) % 8] = i;
        q_.count++;
        q_.state[i] = shim::QueState::QUEUED;
        return true;
    }
    template <typename T> LocalTensor<T> DeQue() {
        Init("DeQue");
        if (q_.count == 0) shim::Fail("TQue::DeQue on an empty queue (the NPU would wait forever)");
        int i = q_.fifo[q_.head];
        q_.head = (q_.head + 1) % 8;
        q_.count--;
        q_.state[i] = shim::QueState::DEQUEUED;
        return LocalTensor<T>(q_.addr[i], q_.len);
    }
    template <typename T> void FreeTensor(LocalTensor<T> &t) {
        Init("FreeTensor");
        int i = Buffer(t.Addr(), "FreeTensor");
        if (q_.state[i] == shim::QueState::FREE) shim::Fail("TQue::FreeTensor: the tensor was freed already");
        if (q_.state[i] == shim::QueState::QUEUED) shim::Fail("TQue::FreeTensor: the tensor is still in the queue");
        q_.state[i] = shim::QueState::FREE;
    }
    shim::QueState &State() { return q_; }

private:
    static_assert(depth >= 0 && depth <= 8, "TQue depth");
    void Init(const char *what) const {
        if (!q_.initialized) shim::Fail("TQue::%s before TPipe::InitBuffer", what);
    }
    int Buffer(const uint8_t *addr, const char *what) const {
        for (int i = 0; i < q_.num; i++)
            if (q_.addr[i] == addr) return i;
        shim::Fail("TQue::%s: the tensor is not a buffer of this queue", what);
    }
    shim::QueState q_{src, depth};
};

template <TPosition pos, int32_t depth, auto mask = 0> class TQue : public TQueBind<pos, pos, depth, mask> {};

template <TPosition pos = TPosition::LCM> class TBuf {
public:
    template <typename T> LocalTensor<T> Get() {
        if (!q_.initialized) shim::Fail("TBuf::Get before TPipe::InitBuffer");
        return LocalTensor<T>(q_.addr[0], q_.len);
    }
    template <typename T> LocalTensor<T> Get(uint32_t count) {
        LocalTensor<T> t = Get<T>();
        t.Require(count, "TBuf::Get");
        return LocalTensor<T>(t.Addr(), shim::Bytes<T>(count));
    }
    shim::QueState &State() { return q_; }

private:
    shim::QueState q_{pos, 0};
};

class CLM_SHIM_API TPipe {
public:
    TPipe() { shim::PipeBegin(); }
    ~TPipe() { shim::PipeEnd(); }
    TPipe(const TPipe &) = delete;
    TPipe &operator=(const TPipe &) = delete;
    template <TPosition src, TPosition dst, int32_t depth, auto mask>
    bool InitBuffer(TQueBind<src, dst, depth, mask> &que, uint8_t num, uint32_t len) {
        return Place(que.State(), num, len, true, "InitBuffer(TQue)");
    }
    template <TPosition pos> bool InitBuffer(TBuf<pos> &buf, uint32_t len) {
        return Place(buf.State(), 1, len, false, "InitBuffer(TBuf)");
    }
    TEventID FetchEventID(HardEvent) { return 0; }
    template <HardEvent E> TEventID FetchEventID() { return 0; }

private:
    bool Place(shim::QueState &q, int num, uint32_t len, bool queue, const char *what);
    uint32_t used_ = 0;
    int buffers_ = 0;
    int per_position_[16] = {};
};

}  // namespace AscendC

#include "kernel_operator_data.h"
#include "kernel_operator_vector.h"

#endif /* CLM_ASCENDC_HOST_KERNEL_OPERATOR_H */
