/* get_rows.cpp - clm_get_rows: rows of a table picked by I32 ids, written as F32 or F16; tables
 * F32 / F16 (rows contiguous, any row and batch strides) or Q8_0 / Q4_0 / Q4_1 in the device
 * layout (docs/quant_layouts.md), dequantized on the fly.
 *
 * The units of work are (row, tile) pairs: a row of the result is split into tiles (`tile`
 * elements of a float table, `tile` groups of 32 of a quantized one), and each block takes a
 * balanced share of all rows' tiles, so blockDim depends neither on the number of ids nor on the
 * row length. A block reads the id of each row it starts (a scalar read of global memory) and
 * then streams the row's tiles: CopyIn (GM -> UB), Compute, CopyOut (UB -> GM), with
 * double-buffered queues.
 *   float tables: a same-type row is copied through one queue bound VECIN -> VECOUT; otherwise
 *     Cast (F16 -> F32 exact, F32 -> F16 to nearest even). A row's last tile can be any length:
 *     it moves with DataCopyPad. Rows of whole 32-byte blocks that fit twice in a tile are packed
 *     instead: a unit is then tile / ne00 consecutive rows of the result, copied in one by one
 *     and converted and copied out as one.
 *   quantized tables: per tile, the quants (int8, or int4 two to a byte) Cast to half and then
 *     to F32, the fp16 scales (and Q4_1's offsets) Cast to F32 and spread by Brcb over one
 *     32-byte block per group; one level-0 Add (Q4_1: + offset) and one Mul (* scale) with a
 *     zero block stride apply each group's values to its 32 elements: y = (w [+ offset]) * d,
 *     as the quantized matmul reads the layout. Quants and scales of a tile that are not whole
 *     32-byte blocks (an odd group count, a row's last tile) move with DataCopyPad; the output,
 *     32 values per group, is always whole blocks.
 */
#define CLM_ASC_KERNEL_SOURCE
#include "clm_ascendc.h"
#include "kernel_common.h"

namespace clm_asc {

constexpr uint32_t kGroup = CLM_ASC_GROUP;
constexpr uint32_t kGroupBlocks = kGroup * sizeof(float) / kBlockBytes;   /* 4: one group of F32 */

/* The launch's shape: ids [n, ne11, ne12] (strides t0..t2), table rows of ne00 elements. */
struct RowsShape {
    int64_t ne00, ne01, s1, s2, s3, table_elems, n, ne11, ne12, t0, t1, t2;
    __aicore__ inline uint64_t Rows() const { return (uint64_t)(n * ne11 * ne12); }
    __aicore__ inline uint64_t IdsExtent() const { return (uint64_t)((n - 1) * t0 + (ne11 - 1) * t1 + (ne12 - 1) * t2 + 1); }
};

/* Row r of the result -> the table element where its source row starts. */
class RowSource {
public:
    __aicore__ inline void Init(GM_ADDR ids, const RowsShape &shape) {
        shape_ = shape;
        ids_.SetGlobalBuffer((__gm__ int32_t *)ids, shape.IdsExtent());
    }
    __aicore__ inline int64_t Start(uint64_t r) {
        int64_t i10 = (int64_t)r % shape_.n, rest = (int64_t)r / shape_.n;
        int64_t i11 = rest % shape_.ne11, i12 = rest / shape_.ne11;
        int64_t id = ids_.GetValue((uint64_t)(i10 * shape_.t0 + i11 * shape_.t1 + i12 * shape_.t2));
        ASSERT(id >= 0 && id < shape_.ne01);
        return id * shape_.s1 + i11 * shape_.s2 + i12 * shape_.s3;
    }

private:
    GlobalTensor<int32_t> ids_;
    RowsShape shape_;
};

/* ---- F32 / F16 tables ------------------------------------------------------------------------ */
template <typename S, typename D> class FloatRowsKernel {
public:
    __aicore__ inline void Init(TPipe *pipe, GM_ADDR table, GM_ADDR ids, GM_ADDR dst, const RowsShape &shape,
                                uint32_t tile) {
        shape_ = shape;
        tile_ = tile;
        rows_.Init(ids, shape);
        table_.SetGlobalBuffer((__gm__ S *)table, (uint64_t)shape.table_elems);
        dst_.SetGlobalBuffer((__gm__ D *)dst, shape.Rows() * (uint64_t)shape.ne00);
        if constexpr (kCopy) {
            pipe->InitBuffer(copyQueue_, kBufferNum, tile * sizeof(S));
        } else {
            pipe->InitBuffer(inQueue_, kBufferNum, tile * sizeof(S));
            pipe->InitBuffer(outQueue_, kBufferNum, tile * sizeof(D));
        }
    }

    __aicore__ inline void Process() {
        uint64_t ne00 = (uint64_t)shape_.ne00;
        if (tile_ >= 2 * ne00 && (ne00 * sizeof(S)) % kBlockBytes == 0 && (ne00 * sizeof(D)) % kBlockBytes == 0) {
            ProcessPacked(tile_ / ne00);
            return;
        }
        uint64_t per_row = CeilDiv(ne00, tile_), begin, end;
        BlockShare(shape_.Rows() * per_row, begin, end);
        uint64_t row = ~0ull;
        int64_t start = 0;
        for (uint64_t u = begin; u < end; u++) {
            uint64_t r = u / per_row, first = (u % per_row) * tile_;
            if (r != row) {
                row = r;
                start = rows_.Start(r);
            }
            uint32_t count = (uint32_t)Min(tile_, ne00 - first);
            LocalTensor<S> x = AllocIn();
            CopyGmToUb(x, table_[(uint64_t)start + first], count);
            Convert(x, dst_[r * ne00 + first], count);
        }
    }

private:
    /* Short rows of whole 32-byte blocks: a unit is `rows` consecutive rows of the result, each
     * copied in at its place in one tile, converted and copied out together. */
    __aicore__ inline void ProcessPacked(uint64_t rows) {
        uint64_t ne00 = (uint64_t)shape_.ne00, total = shape_.Rows(), begin, end;
        BlockShare(CeilDiv(total, rows), begin, end);
        for (uint64_t u = begin; u < end; u++) {
            uint64_t first = u * rows, n = Min(rows, total - first);
            LocalTensor<S> x = AllocIn();
            for (uint64_t j = 0; j < n; j++)
                DataCopy(x[(uint32_t)(j * ne00)], table_[(uint64_t)rows_.Start(first + j)], (uint32_t)ne00);
            Convert(x, dst_[first * ne00], (uint32_t)(n * ne00));
        }
    }

    __aicore__ inline LocalTensor<S> AllocIn() {
        if constexpr (kCopy) {
            return copyQueue_.template AllocTensor<S>();
        } else {
            return inQueue_.template AllocTensor<S>();
        }
    }

    /* x (count values, copied in) -> dst: through the bound queue, or Cast into the output queue. */
    __aicore__ inline void Convert(LocalTensor<S> &x, const GlobalTensor<D> &dst, uint32_t count) {
        if constexpr (kCopy) {
            copyQueue_.EnQue(x);
            x = copyQueue_.template DeQue<S>();
            CopyUbToGm(dst, x, count);
            copyQueue_.FreeTensor(x);
        } else {
            inQueue_.EnQue(x);
            x = inQueue_.template DeQue<S>();
            LocalTensor<D> y = outQueue_.template AllocTensor<D>();
            Cast(y, x, kMode, count);
            outQueue_.EnQue(y);
            inQueue_.FreeTensor(x);
            y = outQueue_.template DeQue<D>();
            CopyUbToGm(dst, y, count);
            outQueue_.FreeTensor(y);
        }
    }

    static constexpr bool kCopy = sizeof(S) == sizeof(D);
    static constexpr RoundMode kMode = sizeof(D) > sizeof(S) ? RoundMode::CAST_NONE : RoundMode::CAST_RINT;

    RowSource rows_;
    RowsShape shape_;
    uint32_t tile_ = 0;
    TQueBind<TPosition::VECIN, TPosition::VECOUT, 1> copyQueue_;
    TQue<TPosition::VECIN, 1> inQueue_;
    TQue<TPosition::VECOUT, 1> outQueue_;
    GlobalTensor<S> table_;
    GlobalTensor<D> dst_;
};

/* ---- Q8_0 / Q4_0 / Q4_1 tables ---------------------------------------------------------------- */
template <uint32_t kType, typename D> class QuantRowsKernel {
public:
    __aicore__ inline void Init(TPipe *pipe, GM_ADDR quants, GM_ADDR scales, GM_ADDR offsets, GM_ADDR ids,
                                GM_ADDR dst, const RowsShape &shape, uint32_t tile_groups) {
        shape_ = shape;
        tile_ = tile_groups;
        rows_.Init(ids, shape);
        uint64_t groups = (uint64_t)shape.table_elems / kGroup;
        quants_.SetGlobalBuffer((__gm__ int8_t *)quants, groups * kQuantBytes);
        scales_.SetGlobalBuffer((__gm__ half *)scales, groups);
        if constexpr (kOffsets) offsets_.SetGlobalBuffer((__gm__ half *)offsets, groups);
        dst_.SetGlobalBuffer((__gm__ D *)dst, shape.Rows() * (uint64_t)shape.ne00);
        uint32_t values = tile_groups * kGroup;
        pipe->InitBuffer(quantQueue_, kBufferNum, tile_groups * kQuantBytes);
        pipe->InitBuffer(scaleQueue_, kBufferNum, tile_groups * sizeof(half));
        if constexpr (kOffsets) pipe->InitBuffer(offsetQueue_, kBufferNum, tile_groups * sizeof(half));
        pipe->InitBuffer(outQueue_, kBufferNum, values * sizeof(D));
        pipe->InitBuffer(halfBuf_, values * sizeof(half));
        if constexpr (sizeof(D) == sizeof(half)) pipe->InitBuffer(floatBuf_, values * sizeof(float));
        pipe->InitBuffer(groupBuf_, tile_groups * sizeof(float));
        pipe->InitBuffer(scaleBlockBuf_, tile_groups * kBlockBytes);
        if constexpr (kOffsets) pipe->InitBuffer(offsetBlockBuf_, tile_groups * kBlockBytes);
    }

    __aicore__ inline void Process() {
        uint64_t row_groups = (uint64_t)shape_.ne00 / kGroup, per_row = CeilDiv(row_groups, tile_), begin, end;
        BlockShare(shape_.Rows() * per_row, begin, end);
        uint64_t row = ~0ull;
        int64_t start_group = 0;
        for (uint64_t u = begin; u < end; u++) {
            uint64_t r = u / per_row, first = (u % per_row) * tile_;
            if (r != row) {
                row = r;
                start_group = rows_.Start(r) / (int64_t)kGroup;
            }
            uint32_t groups = (uint32_t)Min(tile_, row_groups - first);
            CopyIn((uint64_t)start_group + first, groups);
            Compute(groups);
            CopyOut(r * (uint64_t)shape_.ne00 + first * kGroup, groups);
        }
    }

private:
    static constexpr bool kInt4 = kType != CLM_ASC_Q8_0;
    static constexpr bool kOffsets = kType == CLM_ASC_Q4_1;
    static constexpr uint32_t kQuantBytes = kInt4 ? kGroup / 2 : kGroup;

    __aicore__ inline void CopyIn(uint64_t group, uint32_t groups) {
        LocalTensor<int8_t> q = quantQueue_.template AllocTensor<int8_t>();
        CopyGmToUb(q, quants_[group * kQuantBytes], groups * kQuantBytes);
        quantQueue_.EnQue(q);
        LocalTensor<half> d = scaleQueue_.template AllocTensor<half>();
        CopyGmToUb(d, scales_[group], groups);
        scaleQueue_.EnQue(d);
        if constexpr (kOffsets) {
            LocalTensor<half> m = offsetQueue_.template AllocTensor<half>();
            CopyGmToUb(m, offsets_[group], groups);
            offsetQueue_.EnQue(m);
        }
    }

    __aicore__ inline void Compute(uint32_t groups) {
        uint32_t count = groups * kGroup;
        uint8_t repeat8 = (uint8_t)CeilDiv(groups, 8);
        BinaryRepeatParams perGroup(1, 1, 0, (uint8_t)kGroupBlocks, (uint8_t)kGroupBlocks, 1);
        LocalTensor<int8_t> q = quantQueue_.template DeQue<int8_t>();
        LocalTensor<half> values = halfBuf_.template Get<half>();
        if constexpr (kInt4) {
            Cast(values, q.template ReinterpretCast<int4b_t>(), RoundMode::CAST_NONE, count);
        } else {
            Cast(values, q, RoundMode::CAST_NONE, count);
        }
        LocalTensor<D> out = outQueue_.template AllocTensor<D>();
        LocalTensor<float> x;
        if constexpr (sizeof(D) == sizeof(float)) {
            x = out.template ReinterpretCast<float>();
        } else {
            x = floatBuf_.template Get<float>();
        }
        PipeBarrier<PIPE_V>();
        Cast(x, values, RoundMode::CAST_NONE, count);
        quantQueue_.FreeTensor(q);
        LocalTensor<float> perGroupValue = groupBuf_.template Get<float>();
        if constexpr (kOffsets) {
            LocalTensor<half> m = offsetQueue_.template DeQue<half>();
            LocalTensor<float> offsetBlocks = offsetBlockBuf_.template Get<float>();
            Cast(perGroupValue, m, RoundMode::CAST_NONE, groups);
            PipeBarrier<PIPE_V>();
            Brcb(offsetBlocks, perGroupValue, repeat8, BrcbRepeatParams(1, 8));
            PipeBarrier<PIPE_V>();
            Add(x, x, offsetBlocks, (uint64_t)kGroup, (uint8_t)groups, perGroup);
            PipeBarrier<PIPE_V>();
            offsetQueue_.FreeTensor(m);
        }
        LocalTensor<half> d = scaleQueue_.template DeQue<half>();
        LocalTensor<float> scaleBlocks = scaleBlockBuf_.template Get<float>();
        Cast(perGroupValue, d, RoundMode::CAST_NONE, groups);
        PipeBarrier<PIPE_V>();
        Brcb(scaleBlocks, perGroupValue, repeat8, BrcbRepeatParams(1, 8));
        PipeBarrier<PIPE_V>();
        Mul(x, x, scaleBlocks, (uint64_t)kGroup, (uint8_t)groups, perGroup);
        scaleQueue_.FreeTensor(d);
        if constexpr (sizeof(D) == sizeof(half)) {
            PipeBarrier<PIPE_V>();
            Cast(out, x, RoundMode::CAST_RINT, count);
        }
        outQueue_.EnQue(out);
    }

    __aicore__ inline void CopyOut(uint64_t first, uint32_t groups) {
        LocalTensor<D> out = outQueue_.template DeQue<D>();
        DataCopy(dst_[first], out, groups * kGroup);   /* 32 values: 64 or 128 bytes */
        outQueue_.FreeTensor(out);
    }

    RowSource rows_;
    RowsShape shape_;
    uint32_t tile_ = 0;
    TQue<TPosition::VECIN, 1> quantQueue_, scaleQueue_, offsetQueue_;
    TQue<TPosition::VECOUT, 1> outQueue_;
    TBuf<TPosition::VECCALC> halfBuf_, floatBuf_, groupBuf_, scaleBlockBuf_, offsetBlockBuf_;
    GlobalTensor<int8_t> quants_;
    GlobalTensor<half> scales_, offsets_;
    GlobalTensor<D> dst_;
};

template <typename S, typename D>
__aicore__ inline void RunFloatRows(GM_ADDR table, GM_ADDR ids, GM_ADDR dst, const RowsShape &shape, uint32_t tile) {
    TPipe pipe;
    FloatRowsKernel<S, D> kernel;
    kernel.Init(&pipe, table, ids, dst, shape, tile);
    kernel.Process();
}

template <uint32_t kType, typename D>
__aicore__ inline void RunQuantRows(GM_ADDR quants, GM_ADDR scales, GM_ADDR offsets, GM_ADDR ids, GM_ADDR dst,
                                    const RowsShape &shape, uint32_t tile) {
    TPipe pipe;
    QuantRowsKernel<kType, D> kernel;
    kernel.Init(&pipe, quants, scales, offsets, ids, dst, shape, tile);
    kernel.Process();
}

template <typename D>
__aicore__ inline void RunRows(GM_ADDR src_q, GM_ADDR src_d, GM_ADDR src_m, GM_ADDR ids, GM_ADDR dst,
                               uint32_t src_type, const RowsShape &shape, uint32_t tile) {
    switch (src_type) {
    case CLM_ASC_F32: RunFloatRows<float, D>(src_q, ids, dst, shape, tile); break;
    case CLM_ASC_F16: RunFloatRows<half, D>(src_q, ids, dst, shape, tile); break;
    case CLM_ASC_Q8_0: RunQuantRows<CLM_ASC_Q8_0, D>(src_q, src_d, src_m, ids, dst, shape, tile); break;
    case CLM_ASC_Q4_0: RunQuantRows<CLM_ASC_Q4_0, D>(src_q, src_d, src_m, ids, dst, shape, tile); break;
    default: RunQuantRows<CLM_ASC_Q4_1, D>(src_q, src_d, src_m, ids, dst, shape, tile); break;
    }
}

}  // namespace clm_asc

extern "C" __global__ __aicore__ void clm_get_rows(GM_ADDR src_q, GM_ADDR src_d, GM_ADDR src_m, GM_ADDR ids,
                                                   GM_ADDR dst, uint32_t src_type, uint32_t dst_type, int64_t ne00,
                                                   int64_t ne01, int64_t s1, int64_t s2, int64_t s3,
                                                   int64_t table_elems, int64_t n, int64_t ne11, int64_t ne12,
                                                   int64_t t0, int64_t t1, int64_t t2, uint32_t tile) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    clm_asc::RowsShape shape{ne00, ne01, s1, s2, s3, table_elems, n, ne11, ne12, t0, t1, t2};
    if (dst_type == CLM_ASC_F16) {
        clm_asc::RunRows<half>(src_q, src_d, src_m, ids, dst, src_type, shape, tile);
    } else {
        clm_asc::RunRows<float>(src_q, src_d, src_m, ids, dst, src_type, shape, tile);
    }
}
