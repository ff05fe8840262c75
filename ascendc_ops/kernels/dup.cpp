/* dup.cpp - clm_dup: a contiguous copy of n elements, F32 <-> F16 converted, or bit for bit.
 *
 * The units of work are tiles of `tile` elements; each block takes a balanced share of them
 * (kernel_common.h), so the launch's blockDim is independent of n. Per tile: CopyIn (GM -> UB
 * into an input queue), Compute (Cast into an output queue; a same-type copy has no compute and
 * one queue bound from VECIN to VECOUT), CopyOut (UB -> GM). Each queue has two buffers, so the
 * copy engines move one tile while the vector unit converts the other. Every tile is a whole
 * number of 32-byte blocks except the tensor's last one, which moves with DataCopyPad.
 */
#define CLM_ASC_KERNEL_SOURCE
#include "clm_ascendc.h"
#include "kernel_common.h"

namespace clm_asc {

template <typename T> class CopyKernel {
public:
    __aicore__ inline void Init(TPipe *pipe, GM_ADDR src, GM_ADDR dst, uint64_t n, uint32_t tile) {
        n_ = n;
        tile_ = tile;
        src_.SetGlobalBuffer((__gm__ T *)src, n);
        dst_.SetGlobalBuffer((__gm__ T *)dst, n);
        pipe->InitBuffer(queue_, kBufferNum, tile * sizeof(T));
    }

    __aicore__ inline void Process() {
        uint64_t begin, end;
        BlockShare(CeilDiv(n_, tile_), begin, end);
        for (uint64_t t = begin; t < end; t++) {
            uint64_t first = t * tile_;
            uint32_t count = (uint32_t)Min(tile_, n_ - first);
            LocalTensor<T> x = queue_.template AllocTensor<T>();
            CopyGmToUb(x, src_[first], count);
            queue_.EnQue(x);
            x = queue_.template DeQue<T>();
            CopyUbToGm(dst_[first], x, count);
            queue_.FreeTensor(x);
        }
    }

private:
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> queue_;
    GlobalTensor<T> src_, dst_;
    uint64_t n_ = 0;
    uint32_t tile_ = 0;
};

template <typename S, typename D> class CastKernel {
public:
    __aicore__ inline void Init(TPipe *pipe, GM_ADDR src, GM_ADDR dst, uint64_t n, uint32_t tile) {
        n_ = n;
        tile_ = tile;
        src_.SetGlobalBuffer((__gm__ S *)src, n);
        dst_.SetGlobalBuffer((__gm__ D *)dst, n);
        pipe->InitBuffer(inQueue_, kBufferNum, tile * sizeof(S));
        pipe->InitBuffer(outQueue_, kBufferNum, tile * sizeof(D));
    }

    __aicore__ inline void Process() {
        uint64_t begin, end;
        BlockShare(CeilDiv(n_, tile_), begin, end);
        for (uint64_t t = begin; t < end; t++) {
            uint64_t first = t * tile_;
            uint32_t count = (uint32_t)Min(tile_, n_ - first);
            CopyIn(first, count);
            Compute(count);
            CopyOut(first, count);
        }
    }

private:
    /* widening (half -> float) is exact; narrowing rounds to nearest even */
    static constexpr RoundMode kMode = sizeof(D) > sizeof(S) ? RoundMode::CAST_NONE : RoundMode::CAST_RINT;

    __aicore__ inline void CopyIn(uint64_t first, uint32_t count) {
        LocalTensor<S> x = inQueue_.template AllocTensor<S>();
        CopyGmToUb(x, src_[first], count);
        inQueue_.EnQue(x);
    }
    __aicore__ inline void Compute(uint32_t count) {
        LocalTensor<S> x = inQueue_.template DeQue<S>();
        LocalTensor<D> y = outQueue_.template AllocTensor<D>();
        Cast(y, x, kMode, count);
        outQueue_.EnQue(y);
        inQueue_.FreeTensor(x);
    }
    __aicore__ inline void CopyOut(uint64_t first, uint32_t count) {
        LocalTensor<D> y = outQueue_.template DeQue<D>();
        CopyUbToGm(dst_[first], y, count);
        outQueue_.FreeTensor(y);
    }

    TQue<TPosition::VECIN, 1> inQueue_;
    TQue<TPosition::VECOUT, 1> outQueue_;
    GlobalTensor<S> src_;
    GlobalTensor<D> dst_;
    uint64_t n_ = 0;
    uint32_t tile_ = 0;
};

}  // namespace clm_asc

extern "C" __global__ __aicore__ void clm_dup(GM_ADDR src, GM_ADDR dst, uint32_t src_type, uint32_t dst_type,
                                              uint64_t n, uint32_t tile) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    AscendC::TPipe pipe;
    if (src_type == dst_type && src_type == CLM_ASC_F32) {
        clm_asc::CopyKernel<float> kernel;
        kernel.Init(&pipe, src, dst, n, tile);
        kernel.Process();
    } else if (src_type == dst_type) {
        clm_asc::CopyKernel<half> kernel;
        kernel.Init(&pipe, src, dst, n, tile);
        kernel.Process();
    } else if (src_type == CLM_ASC_F32) {
        clm_asc::CastKernel<float, half> kernel;
        kernel.Init(&pipe, src, dst, n, tile);
        kernel.Process();
    } else {
        clm_asc::CastKernel<half, float> kernel;
        kernel.Init(&pipe, src, dst, n, tile);
        kernel.Process();
    }
}
