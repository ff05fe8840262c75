/* kernel_common.h - what the kernels of ascendc_ops/kernels share: this block's share of a
 * launch's units of work, and copies of any length between global memory and the unified buffer
 * (DataCopy for whole 32-byte blocks, DataCopyPad for a length that is not). */
#ifndef CLM_ASC_KERNEL_COMMON_H
#define CLM_ASC_KERNEL_COMMON_H

#include "kernel_operator.h"

namespace clm_asc {

using namespace AscendC;

constexpr int32_t kBufferNum = 2;      /* double buffering: every queue has two buffers */
constexpr uint32_t kBlockBytes = 32;   /* DataCopy moves whole blocks of 32 bytes */

__aicore__ inline uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
__aicore__ inline uint64_t Min(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* [begin, end) of `units` for this block: a contiguous, balanced share (the first units % blocks
 * blocks take one more), so any blockDim works for any number of units. */
__aicore__ inline void BlockShare(uint64_t units, uint64_t &begin, uint64_t &end) {
    uint64_t blocks = (uint64_t)GetBlockNum(), idx = (uint64_t)GetBlockIdx();
    uint64_t base = units / blocks, extra = units % blocks;
    begin = idx * base + (idx < extra ? idx : extra);
    end = begin + base + (idx < extra ? 1 : 0);
}

/* count elements GM -> UB: DataCopy when they are whole 32-byte blocks, else DataCopyPad (the
 * tail path; the UB copy is padded to 32 bytes). */
template <typename T>
__aicore__ inline void CopyGmToUb(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
    uint32_t bytes = count * (uint32_t)sizeof(T);
    if (bytes % kBlockBytes == 0) {
        DataCopy(dst, src, count);
    } else {
        DataCopyExtParams params{1, bytes, 0, 0, 0};
        DataCopyPadExtParams<T> pad{false, 0, 0, 0};
        DataCopyPad(dst, src, params, pad);
    }
}

/* count elements UB -> GM: exactly count elements are written. */
template <typename T>
__aicore__ inline void CopyUbToGm(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
    uint32_t bytes = count * (uint32_t)sizeof(T);
    if (bytes % kBlockBytes == 0) {
        DataCopy(dst, src, count);
    } else {
        DataCopyExtParams params{1, bytes, 0, 0, 0};
        DataCopyPad(dst, src, params);
    }
}

/* Orders the scalar unit after the vector unit (before GetValue of a vector result), and the
 * vector unit after the scalar unit (before a vector operation reads SetValue results). */
__aicore__ inline void VectorToScalar(TPipe *pipe) {
    int32_t event = static_cast<int32_t>(pipe->FetchEventID(HardEvent::V_S));
    SetFlag<HardEvent::V_S>(event);
    WaitFlag<HardEvent::V_S>(event);
}
__aicore__ inline void ScalarToVector(TPipe *pipe) {
    int32_t event = static_cast<int32_t>(pipe->FetchEventID(HardEvent::S_V));
    SetFlag<HardEvent::S_V>(event);
    WaitFlag<HardEvent::S_V>(event);
}

}  // namespace clm_asc

#endif /* CLM_ASC_KERNEL_COMMON_H */
