/* quantize.cpp - clm_quantize: F32 / F16 groups of 32 -> Q8_0 or Q4_0 in the device layout
 * (docs/quant_layouts.md: all quants, then all fp16 scales), bit for bit what ggml's reference
 * quantizer writes for finite inputs:
 *   Q8_0  amax = max |x|, d = amax / 127, id = d ? 1 / d : 0, q = roundf(x id)      (int8)
 *   Q4_0  m = the first x of largest |x|, d = m / -8, id = d ? 1 / d : 0,
 *         q = min(15, (int)(x id + 8.5)), stored as the int4 q - 8                     (natural order)
 * F16 inputs are converted to F32 first, as ggml does.
 *
 * The units of work are tiles of `tile_groups` groups; each block takes a balanced share. Per
 * tile: CopyIn (GM -> UB), Compute, CopyOut (quants and scales, UB -> GM), with double-buffered
 * queues. Compute works on all the tile's groups at once: WholeReduceMax / WholeReduceMin give
 * each group's largest and smallest value (one vector repeat of 32 elements per group); the
 * scalar unit derives each group's d and 1/d (and, for Q4_0 groups whose largest and smallest
 * have the same magnitude, finds the first of them, as ggml's loop does); Brcb spreads 1/d over a
 * 32-byte block per group and one Mul with a zero block stride scales every group; the rounding
 * is a Cast to int16 with the mode of ggml's C code (CAST_ROUND: half away from zero, as roundf;
 * CAST_TRUNC after + 8.5, as the (int) conversion), exact from there to half and to int8 / int4.
 * The scales are rounded to fp16 by one Cast (round to nearest even, as GGML_FP32_TO_FP16).
 */
#define CLM_ASC_KERNEL_SOURCE
#include "clm_ascendc.h"
#include "kernel_common.h"

namespace clm_asc {

constexpr uint32_t kGroup = CLM_ASC_GROUP;
constexpr uint32_t kGroupBlocks = kGroup * sizeof(float) / kBlockBytes;   /* 4: one group of F32 */

template <typename S, bool kQ4> class QuantizeKernel {
public:
    __aicore__ inline void Init(TPipe *pipe, GM_ADDR src, GM_ADDR dst_q, GM_ADDR dst_d, uint64_t n_groups,
                                uint32_t tile_groups) {
        pipe_ = pipe;
        n_groups_ = n_groups;
        tile_ = tile_groups;
        src_.SetGlobalBuffer((__gm__ S *)src, n_groups * kGroup);
        quants_.SetGlobalBuffer((__gm__ int8_t *)dst_q, n_groups * kQuantBytes);
        scales_.SetGlobalBuffer((__gm__ half *)dst_d, n_groups);
        uint32_t values = tile_groups * kGroup;
        pipe->InitBuffer(inQueue_, kBufferNum, values * sizeof(S));
        pipe->InitBuffer(quantQueue_, kBufferNum, tile_groups * kQuantBytes);
        pipe->InitBuffer(scaleQueue_, kBufferNum, tile_groups * sizeof(half));
        if constexpr (sizeof(S) == sizeof(half)) pipe->InitBuffer(floatBuf_, values * sizeof(float));
        pipe->InitBuffer(maxBuf_, tile_groups * sizeof(float));
        pipe->InitBuffer(minBuf_, tile_groups * sizeof(float));
        pipe->InitBuffer(dBuf_, tile_groups * sizeof(float));
        pipe->InitBuffer(invBuf_, tile_groups * sizeof(float));
        pipe->InitBuffer(invBlockBuf_, tile_groups * kBlockBytes);
        pipe->InitBuffer(int16Buf_, values * sizeof(int16_t));
        pipe->InitBuffer(halfBuf_, values * sizeof(half));
    }

    __aicore__ inline void Process() {
        uint64_t begin, end;
        BlockShare(CeilDiv(n_groups_, tile_), begin, end);
        for (uint64_t t = begin; t < end; t++) {
            uint64_t first = t * tile_;
            uint32_t groups = (uint32_t)Min(tile_, n_groups_ - first);
            CopyIn(first, groups);
            Compute(groups);
            CopyOut(first, groups);
        }
    }

private:
    static constexpr uint32_t kQuantBytes = kQ4 ? kGroup / 2 : kGroup;   /* quant bytes per group */

    __aicore__ inline void CopyIn(uint64_t first, uint32_t groups) {
        LocalTensor<S> x = inQueue_.template AllocTensor<S>();
        DataCopy(x, src_[first * kGroup], groups * kGroup);   /* 32 values: 64 or 128 bytes */
        inQueue_.EnQue(x);
    }

    __aicore__ inline void Compute(uint32_t groups) {
        uint32_t count = groups * kGroup;
        LocalTensor<S> in = inQueue_.template DeQue<S>();
        LocalTensor<float> x;
        if constexpr (sizeof(S) == sizeof(half)) {
            x = floatBuf_.template Get<float>();
            Cast(x, in, RoundMode::CAST_NONE, count);
            PipeBarrier<PIPE_V>();
        } else {
            x = in;
        }
        LocalTensor<float> maxima = maxBuf_.template Get<float>(), minima = minBuf_.template Get<float>();
        WholeReduceMax(maxima, x, (int32_t)kGroup, (int32_t)groups, 1, 1, (int32_t)kGroupBlocks,
                       ReduceOrder::ORDER_ONLY_VALUE);
        WholeReduceMin(minima, x, (int32_t)kGroup, (int32_t)groups, 1, 1, (int32_t)kGroupBlocks,
                       ReduceOrder::ORDER_ONLY_VALUE);
        VectorToScalar(pipe_);
        LocalTensor<float> d = dBuf_.template Get<float>(), inv = invBuf_.template Get<float>();
        for (uint32_t g = 0; g < groups; g++) {
            float scale = GroupScale(x, g, maxima.GetValue(g), minima.GetValue(g));
            d.SetValue(g, scale);
            inv.SetValue(g, scale != 0.0f ? 1.0f / scale : 0.0f);
        }
        ScalarToVector(pipe_);
        LocalTensor<float> invBlocks = invBlockBuf_.template Get<float>();
        Brcb(invBlocks, inv, (uint8_t)CeilDiv(groups, 8), BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        /* x *= 1/d of its group: 32 elements per repeat, the group's block read 4 times */
        Mul(x, x, invBlocks, (uint64_t)kGroup, (uint8_t)groups,
            BinaryRepeatParams(1, 1, 0, (uint8_t)kGroupBlocks, (uint8_t)kGroupBlocks, 1));
        PipeBarrier<PIPE_V>();
        LocalTensor<int16_t> rounded = int16Buf_.template Get<int16_t>();
        LocalTensor<half> values = halfBuf_.template Get<half>();
        LocalTensor<int8_t> quants = quantQueue_.template AllocTensor<int8_t>();
        if constexpr (kQ4) {
            Adds(x, x, 8.5f, (int32_t)count);
            PipeBarrier<PIPE_V>();
            Cast(rounded, x, RoundMode::CAST_TRUNC, count);
            PipeBarrier<PIPE_V>();
            Cast(values, rounded, RoundMode::CAST_NONE, count);
            PipeBarrier<PIPE_V>();
            Mins(values, values, static_cast<half>(15.0f), (int32_t)count);
            PipeBarrier<PIPE_V>();
            Adds(values, values, static_cast<half>(-8.0f), (int32_t)count);
            PipeBarrier<PIPE_V>();
            Cast(quants.template ReinterpretCast<int4b_t>(), values, RoundMode::CAST_NONE, count);
        } else {
            Cast(rounded, x, RoundMode::CAST_ROUND, count);
            PipeBarrier<PIPE_V>();
            Cast(values, rounded, RoundMode::CAST_NONE, count);
            PipeBarrier<PIPE_V>();
            Cast(quants, values, RoundMode::CAST_NONE, count);
        }
        LocalTensor<half> scales = scaleQueue_.template AllocTensor<half>();
        Cast(scales, d, RoundMode::CAST_RINT, groups);
        quantQueue_.EnQue(quants);
        scaleQueue_.EnQue(scales);
        inQueue_.FreeTensor(in);
    }

    /* The group's d from its largest and smallest value, as ggml's reference quantizer. */
    __aicore__ inline float GroupScale(const LocalTensor<float> &x, uint32_t g, float largest, float smallest) {
        if constexpr (!kQ4) {
            float amax = 0.0f;   /* ggml: MAX(amax, fabsf(v)) from 0, so -0 groups give +0 */
            if (largest > amax) amax = largest;
            if (-smallest > amax) amax = -smallest;
            return amax / 127.0f;
        } else {
            /* the first value of largest magnitude, 0 if there is none above 0 */
            float m;
            if (largest > -smallest) {
                m = largest;
            } else if (-smallest > largest) {
                m = smallest;
            } else if (largest == 0.0f) {
                m = 0.0f;
            } else {
                m = largest;
                for (uint32_t j = 0; j < kGroup; j++) {
                    float v = x.GetValue(g * kGroup + j);
                    if (v == largest || v == smallest) {
                        m = v;
                        break;
                    }
                }
            }
            return m / -8.0f;
        }
    }

    __aicore__ inline void CopyOut(uint64_t first, uint32_t groups) {
        LocalTensor<int8_t> quants = quantQueue_.template DeQue<int8_t>();
        CopyUbToGm(quants_[first * kQuantBytes], quants, groups * kQuantBytes);
        quantQueue_.FreeTensor(quants);
        LocalTensor<half> scales = scaleQueue_.template DeQue<half>();
        CopyUbToGm(scales_[first], scales, groups);
        scaleQueue_.FreeTensor(scales);
    }

    TPipe *pipe_ = nullptr;
    TQue<TPosition::VECIN, 1> inQueue_;
    TQue<TPosition::VECOUT, 1> quantQueue_, scaleQueue_;
    TBuf<TPosition::VECCALC> floatBuf_, maxBuf_, minBuf_, dBuf_, invBuf_, invBlockBuf_, int16Buf_, halfBuf_;
    GlobalTensor<S> src_;
    GlobalTensor<int8_t> quants_;
    GlobalTensor<half> scales_;
    uint64_t n_groups_ = 0;
    uint32_t tile_ = 0;
};

template <typename S, bool kQ4>
__aicore__ inline void RunQuantize(GM_ADDR src, GM_ADDR dst_q, GM_ADDR dst_d, uint64_t n_groups, uint32_t tile_groups) {
    TPipe pipe;
    QuantizeKernel<S, kQ4> kernel;
    kernel.Init(&pipe, src, dst_q, dst_d, n_groups, tile_groups);
    kernel.Process();
}

}  // namespace clm_asc

extern "C" __global__ __aicore__ void clm_quantize(GM_ADDR src, GM_ADDR dst_q, GM_ADDR dst_d, uint32_t src_type,
                                                   uint32_t dst_type, uint64_t n_groups, uint32_t tile_groups) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    bool q4 = dst_type == CLM_ASC_Q4_0;
    if (src_type == CLM_ASC_F32) {
        if (q4) clm_asc::RunQuantize<float, true>(src, dst_q, dst_d, n_groups, tile_groups);
        else clm_asc::RunQuantize<float, false>(src, dst_q, dst_d, n_groups, tile_groups);
    } else {
        if (q4) clm_asc::RunQuantize<half, true>(src, dst_q, dst_d, n_groups, tile_groups);
        else clm_asc::RunQuantize<half, false>(src, dst_q, dst_d, n_groups, tile_groups);
    }
}
