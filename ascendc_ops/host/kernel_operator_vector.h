/* kernel_operator_vector.h (host shim) - the vector unit: Cast, the scalar forms Muls / Adds /
 * Mins / Maxs over a count of elements, and the level-0 forms the kernels use per 32-element group
 * (WholeReduceMax / WholeReduceMin, Brcb, Mul / Add with repeat parameters). Included by
 * kernel_operator.h.
 *
 * A level-0 operation runs `repeat` iterations of up to 256 bytes; element i of iteration r lies
 * r * repStride + (i / per_block) * blkStride blocks of 32 bytes, plus i % per_block elements,
 * from the operand's start ("mask count mode": the first `mask` elements of each iteration).
 */
#ifndef CLM_ASCENDC_HOST_KERNEL_OPERATOR_VECTOR_H
#define CLM_ASCENDC_HOST_KERNEL_OPERATOR_VECTOR_H

namespace AscendC {

struct UnaryRepeatParams {
    uint32_t blockNumber = 8;
    uint16_t dstBlkStride = 1;
    uint16_t srcBlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t srcRepStride = 8;
    UnaryRepeatParams() = default;
    UnaryRepeatParams(uint16_t dst_blk, uint16_t src_blk, uint8_t dst_rep, uint8_t src_rep)
        : dstBlkStride(dst_blk), srcBlkStride(src_blk), dstRepStride(dst_rep), srcRepStride(src_rep) {}
};

struct BinaryRepeatParams {
    uint32_t blockNumber = 8;
    uint8_t dstBlkStride = 1;
    uint8_t src0BlkStride = 1;
    uint8_t src1BlkStride = 1;
    uint8_t dstRepStride = 8;
    uint8_t src0RepStride = 8;
    uint8_t src1RepStride = 8;
    BinaryRepeatParams() = default;
    BinaryRepeatParams(uint8_t dst_blk, uint8_t src0_blk, uint8_t src1_blk, uint8_t dst_rep, uint8_t src0_rep,
                       uint8_t src1_rep)
        : dstBlkStride(dst_blk), src0BlkStride(src0_blk), src1BlkStride(src1_blk), dstRepStride(dst_rep),
          src0RepStride(src0_rep), src1RepStride(src1_rep) {}
};

struct BrcbRepeatParams {
    uint32_t blockNumber = 8;
    uint16_t dstRepStride = 8;
    uint16_t dstBlkStride = 1;
    BrcbRepeatParams() = default;
    BrcbRepeatParams(uint16_t dst_blk, uint16_t dst_rep) : dstRepStride(dst_rep), dstBlkStride(dst_blk) {}
};

namespace shim {
/* Elementwise operands of a count form: 32-byte aligned, count elements inside each. */
template <typename D, typename S>
void CountOperands(const LocalTensor<D> &dst, const LocalTensor<S> &src, int64_t count, const char *what) {
    if (count < 0) Fail("%s: count %lld is negative", what, (long long)count);
    dst.RequireAligned(what);
    src.RequireAligned(what);
    dst.Require((uint64_t)count, what);
    src.Require((uint64_t)count, what);
}

/* Values of the vector unit's arithmetic: float and half (computed in float, rounded once). */
template <typename T> inline float Load(const uint8_t *p) {
    if constexpr (std::is_same<T, half>::value) {
        uint16_t h;
        std::memcpy(&h, p, 2);
        return HalfBitsToFloat(h);
    } else {
        float f;
        std::memcpy(&f, p, 4);
        return f;
    }
}
template <typename T> inline void Store(uint8_t *p, float v) {
    if constexpr (std::is_same<T, half>::value) {
        uint16_t h = FloatToHalfBits(v);
        std::memcpy(p, &h, 2);
    } else {
        std::memcpy(p, &v, 4);
    }
}
template <typename T> constexpr void RequireArith() {
    static_assert(std::is_same<T, float>::value || std::is_same<T, half>::value,
                  "the 910B's vector arithmetic used here is for float and half");
}

template <typename T, typename F>
void ScalarOp(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count, const char *what, F f) {
    RequireArith<T>();
    CountOperands(dst, src, count, what);
    uint8_t *d = dst.Addr();
    const uint8_t *s = src.Addr();
    if constexpr (std::is_same<T, float>::value) {
        float *df = reinterpret_cast<float *>(d);
        const float *sf = reinterpret_cast<const float *>(s);
        for (int32_t i = 0; i < count; i++) df[i] = f(sf[i]);
    } else {
        for (int32_t i = 0; i < count; i++) Store<T>(d + 2 * i, f(Load<T>(s + 2 * i)));
    }
}

/* Byte offset of element i of iteration r (see the header comment). */
template <typename T> inline uint64_t RepeatOffset(uint32_t r, uint32_t i, uint32_t blk_stride, uint32_t rep_stride) {
    constexpr uint32_t per_block = kBlockBytes / sizeof(T);
    return ((uint64_t)r * rep_stride + (uint64_t)(i / per_block) * blk_stride) * kBlockBytes +
           (uint64_t)(i % per_block) * sizeof(T);
}
/* The last byte iteration `repeat` - 1 touches, plus one: the extent an operand needs. */
template <typename T>
inline uint64_t RepeatExtent(int32_t repeat, uint32_t mask, uint32_t blk_stride, uint32_t rep_stride) {
    if (repeat <= 0 || mask == 0) return 0;
    return RepeatOffset<T>((uint32_t)repeat - 1, mask - 1, blk_stride, rep_stride) + sizeof(T);
}
template <typename T> void CheckLevel0(uint64_t mask, int32_t repeat, const char *what) {
    constexpr uint64_t per_repeat = kRepeatBytes / sizeof(T);
    if (repeat < 0 || repeat > kMaxRepeat) Fail("%s: repeatTimes %d is outside [0, 255]", what, repeat);
    if (mask == 0 || mask > per_repeat)
        Fail("%s: mask %llu is outside [1, %llu] (elements of %s in one repeat)", what, (unsigned long long)mask,
             (unsigned long long)per_repeat, TypeName<T>());
}
}  // namespace shim

/* ---- Cast ---------------------------------------------------------------------------------- */
namespace shim {
/* The Cast pairs of the 910B (CANN 8.1.RC1 dav_c220 CheckCastDatatype) that the shim implements. */
template <typename D, typename S> constexpr bool kCastPair =
    (std::is_same<S, half>::value &&
     (std::is_same<D, float>::value || std::is_same<D, int32_t>::value || std::is_same<D, int16_t>::value ||
      std::is_same<D, int8_t>::value || std::is_same<D, uint8_t>::value || std::is_same<D, int4b_t>::value)) ||
    (std::is_same<S, float>::value &&
     (std::is_same<D, half>::value || std::is_same<D, int32_t>::value || std::is_same<D, int16_t>::value)) ||
    (std::is_same<D, half>::value &&
     (std::is_same<S, int16_t>::value || std::is_same<S, int8_t>::value || std::is_same<S, uint8_t>::value ||
      std::is_same<S, int4b_t>::value)) ||
    (std::is_same<D, float>::value && (std::is_same<S, int32_t>::value || std::is_same<S, int16_t>::value));

CLM_SHIM_API const char *RoundModeName(RoundMode mode);
/* The half bits of the 256 int8 values (index: the byte) and of the 16 int4 values. */
CLM_SHIM_API const uint16_t *Int8HalfTable();
CLM_SHIM_API const uint16_t *Int4HalfTable();

/* Element i of an integer operand. */
template <typename S> inline int32_t LoadInt(const uint8_t *p, uint32_t i) {
    if constexpr (std::is_same<S, int4b_t>::value) {
        int nibble = (p[i / 2] >> (4 * (i % 2))) & 0xF;
        return nibble >= 8 ? nibble - 16 : nibble;
    } else {
        S v;
        std::memcpy(&v, p + (uint64_t)i * sizeof(S), sizeof(S));
        return (int32_t)v;
    }
}

/* f rounded to an integer value with the mode (CAST_NONE: to nearest even, as a lossy NPU
 * conversion rounds). */
inline float RoundInteger(float f, RoundMode mode) {
    switch (mode) {
    case RoundMode::CAST_FLOOR: return __builtin_floorf(f);
    case RoundMode::CAST_CEIL: return __builtin_ceilf(f);
    case RoundMode::CAST_ROUND: return __builtin_roundf(f);
    case RoundMode::CAST_TRUNC: return __builtin_truncf(f);
    default: return __builtin_nearbyintf(f);
    }
}

/* float / half -> an integer type, rounded with the mode and saturated (NaN -> 0). */
template <typename D, typename S> void CastToInteger(uint8_t *dst, const uint8_t *src, RoundMode mode, uint32_t count) {
    constexpr bool is_unsigned = std::is_same<D, uint8_t>::value;
    constexpr int bits = (int)kBits<D>;
    constexpr float lo = is_unsigned ? 0.0f : -(float)(1ll << (bits - 1));
    constexpr float hi = is_unsigned ? 255.0f : (float)((1ll << (bits - 1)) - 1);
    for (uint32_t i = 0; i < count; i++) {
        float f = RoundInteger(Load<S>(src + (uint64_t)i * sizeof(S)), mode);
        int32_t q = f != f ? 0 : f < lo ? (int32_t)lo : f > hi ? (int32_t)hi : (int32_t)f;
        if constexpr (bits == 4) {
            uint8_t *byte = dst + i / 2;
            int shift = 4 * (i % 2);
            *byte = (uint8_t)((*byte & ~(0xF << shift)) | ((q & 0xF) << shift));
        } else {
            D v = (D)q;
            std::memcpy(dst + (uint64_t)i * sizeof(D), &v, sizeof(D));
        }
    }
}
}  // namespace shim

template <typename D, typename S>
void Cast(const LocalTensor<D> &dst, const LocalTensor<S> &src, const RoundMode &mode, uint32_t count) {
    static_assert(shim::kCastPair<D, S>, "Cast: not a type pair the 910B's vector unit converts");
    const char *what = "Cast";
    shim::CountOperands(dst, src, count, what);
    if ((shim::kBits<D> == 4 || shim::kBits<S> == 4) && count % 2 != 0)
        shim::Fail("Cast: an odd count (%u) of int4b_t elements", count);
    uint8_t *d = dst.Addr();
    const uint8_t *s = src.Addr();
    constexpr bool to_float = std::is_same<D, float>::value || std::is_same<D, half>::value;
    constexpr bool from_float = std::is_same<S, float>::value || std::is_same<S, half>::value;
    if constexpr (std::is_same<S, half>::value && std::is_same<D, float>::value) {
        if (mode != RoundMode::CAST_NONE) shim::Fail("Cast half -> float: only CAST_NONE on the 910B");
        shim::HalfToFloat(reinterpret_cast<const uint16_t *>(s), reinterpret_cast<float *>(d), count);
    } else if constexpr (std::is_same<S, float>::value && std::is_same<D, half>::value) {
        if (mode != RoundMode::CAST_NONE && mode != RoundMode::CAST_RINT)
            shim::Fail("Cast float -> half: the host shim implements CAST_NONE and CAST_RINT, not %s",
                       shim::RoundModeName(mode));
        shim::FloatToHalf(reinterpret_cast<const float *>(s), reinterpret_cast<uint16_t *>(d), count);
    } else if constexpr (to_float) {
        /* an integer type -> float (exact) or half (exact for int8 / uint8 / int4; int16 rounds to
         * nearest even) */
        if (mode != RoundMode::CAST_NONE)
            shim::Fail("Cast %s -> %s: the host shim implements CAST_NONE, not %s", shim::TypeName<S>(),
                       shim::TypeName<D>(), shim::RoundModeName(mode));
        if constexpr (std::is_same<D, float>::value) {
            float *df = reinterpret_cast<float *>(d);
            for (uint32_t i = 0; i < count; i++) df[i] = (float)shim::LoadInt<S>(s, i);
        } else {
            uint16_t *dh = reinterpret_cast<uint16_t *>(d);
            if constexpr (std::is_same<S, int8_t>::value || std::is_same<S, uint8_t>::value) {
                const uint16_t *table = shim::Int8HalfTable();
                for (uint32_t i = 0; i < count; i++) {
                    uint8_t byte = s[i];
                    dh[i] = std::is_same<S, int8_t>::value ? table[byte] : shim::FloatToHalfBits((float)byte);
                }
            } else if constexpr (std::is_same<S, int4b_t>::value) {
                const uint16_t *table = shim::Int4HalfTable();
                for (uint32_t i = 0; i < count; i += 2) {
                    dh[i] = table[s[i / 2] & 0xF];
                    dh[i + 1] = table[s[i / 2] >> 4];
                }
            } else {
                for (uint32_t i = 0; i < count; i++) dh[i] = shim::FloatToHalfBits((float)shim::LoadInt<S>(s, i));
            }
        }
    } else {
        static_assert(from_float, "Cast: integer -> integer pairs are not implemented by the host shim");
        /* float / half -> an integer type with the round mode; float -> integer has no CAST_NONE */
        if (mode == RoundMode::CAST_ODD || (std::is_same<S, float>::value && mode == RoundMode::CAST_NONE))
            shim::Fail("Cast %s -> %s: %s is not a mode the 910B has for this pair", shim::TypeName<S>(),
                       shim::TypeName<D>(), shim::RoundModeName(mode));
        shim::CastToInteger<D, S>(d, s, mode, count);
    }
}

/* ---- scalar forms ------------------------------------------------------------------------- */
template <typename T> void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, const int32_t &count) {
    float s = static_cast<float>(scalar);
    shim::ScalarOp(dst, src, count, "Muls", [s](float x) { return x * s; });
}
template <typename T> void Adds(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, const int32_t &count) {
    float s = static_cast<float>(scalar);
    shim::ScalarOp(dst, src, count, "Adds", [s](float x) { return x + s; });
}
template <typename T> void Mins(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, const int32_t &count) {
    float s = static_cast<float>(scalar);
    shim::ScalarOp(dst, src, count, "Mins", [s](float x) { return x < s ? x : s; });
}
template <typename T> void Maxs(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, const int32_t &count) {
    float s = static_cast<float>(scalar);
    shim::ScalarOp(dst, src, count, "Maxs", [s](float x) { return x > s ? x : s; });
}

/* ---- level 0: per-iteration reductions, broadcast, binary ops ----------------------------- */
namespace shim {
template <typename T, typename Better>
void WholeReduce(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t mask, int32_t repeat,
                 int32_t dst_rep_stride, int32_t src_blk_stride, int32_t src_rep_stride, ReduceOrder order,
                 const char *what, Better better) {
    RequireArith<T>();
    CheckLevel0<T>((uint64_t)(mask < 0 ? 0 : mask), repeat, what);
    if (order != ReduceOrder::ORDER_ONLY_VALUE)
        Fail("%s: the host shim implements ReduceOrder::ORDER_ONLY_VALUE only", what);
    if (dst_rep_stride < 0 || src_blk_stride < 0 || src_rep_stride < 0) Fail("%s: a negative stride", what);
    src.RequireAligned(what);
    dst.RequireAligned(what, sizeof(T));
    src.RequireBytes(0, RepeatExtent<T>(repeat, (uint32_t)mask, src_blk_stride, src_rep_stride), what);
    if (repeat > 0) dst.RequireBytes(0, ((uint64_t)(repeat - 1) * dst_rep_stride + 1) * sizeof(T), what);
    for (int32_t r = 0; r < repeat; r++) {
        float best = Load<T>(src.Addr() + RepeatOffset<T>(r, 0, src_blk_stride, src_rep_stride));
        for (int32_t i = 1; i < mask; i++) {
            float v = Load<T>(src.Addr() + RepeatOffset<T>(r, i, src_blk_stride, src_rep_stride));
            if (better(v, best)) best = v;
        }
        Store<T>(dst.Addr() + (uint64_t)r * dst_rep_stride * sizeof(T), best);
    }
}

template <typename T, typename F>
void BinaryLevel0(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask,
                  uint8_t repeat, const BinaryRepeatParams &p, const char *what, F f) {
    RequireArith<T>();
    CheckLevel0<T>(mask, repeat, what);
    dst.RequireAligned(what);
    src0.RequireAligned(what);
    src1.RequireAligned(what);
    dst.RequireBytes(0, RepeatExtent<T>(repeat, (uint32_t)mask, p.dstBlkStride, p.dstRepStride), what);
    src0.RequireBytes(0, RepeatExtent<T>(repeat, (uint32_t)mask, p.src0BlkStride, p.src0RepStride), what);
    src1.RequireBytes(0, RepeatExtent<T>(repeat, (uint32_t)mask, p.src1BlkStride, p.src1RepStride), what);
    constexpr uint32_t per_block = kBlockBytes / sizeof(T);
    for (uint32_t r = 0; r < repeat; r++) {
        for (uint32_t i = 0; i < mask; i += per_block) {   /* one 32-byte block of each operand */
            uint8_t *d = dst.Addr() + RepeatOffset<T>(r, i, p.dstBlkStride, p.dstRepStride);
            const uint8_t *a = src0.Addr() + RepeatOffset<T>(r, i, p.src0BlkStride, p.src0RepStride);
            const uint8_t *b = src1.Addr() + RepeatOffset<T>(r, i, p.src1BlkStride, p.src1RepStride);
            uint32_t n = mask - i < per_block ? (uint32_t)mask - i : per_block;
            for (uint32_t k = 0; k < n; k++)
                Store<T>(d + k * sizeof(T), f(Load<T>(a + k * sizeof(T)), Load<T>(b + k * sizeof(T))));
        }
    }
}
}  // namespace shim

/* Per iteration: the largest / smallest of its first `mask` elements (ORDER_ONLY_VALUE: one value
 * per iteration, dstRepStride in elements). */
template <typename T, bool isSetMask = true>
void WholeReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t mask, const int32_t repeatTimes,
                    const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,
                    ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX) {
    shim::WholeReduce(dst, src, mask, repeatTimes, dstRepStride, srcBlkStride, srcRepStride, order, "WholeReduceMax",
                      [](float v, float best) { return v > best; });
}
template <typename T, bool isSetMask = true>
void WholeReduceMin(const LocalTensor<T> &dst, const LocalTensor<T> &src, const int32_t mask, const int32_t repeatTimes,
                    const int32_t dstRepStride, const int32_t srcBlkStride, const int32_t srcRepStride,
                    ReduceOrder order = ReduceOrder::ORDER_VALUE_INDEX) {
    shim::WholeReduce(dst, src, mask, repeatTimes, dstRepStride, srcBlkStride, srcRepStride, order, "WholeReduceMin",
                      [](float v, float best) { return v < best; });
}

/* Each iteration takes 8 elements of src and fills one 32-byte block of dst with each. */
template <typename T>
void Brcb(const LocalTensor<T> &dst, const LocalTensor<T> &src, const uint8_t repeatTimes, const BrcbRepeatParams &p) {
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "Brcb: 16- and 32-bit types on the 910B");
    const char *what = "Brcb";
    dst.RequireAligned(what);
    src.RequireAligned(what);
    if (dst.Addr() == src.Addr()) shim::Fail("%s: src and dst are the same memory", what);
    uint32_t blk = p.dstBlkStride == 0 ? 1 : p.dstBlkStride;
    src.Require((uint64_t)repeatTimes * 8, what);
    if (repeatTimes > 0)
        dst.RequireBytes(0, ((uint64_t)(repeatTimes - 1) * p.dstRepStride + 7ull * blk + 1) * shim::kBlockBytes, what);
    constexpr uint32_t per_block = shim::kBlockBytes / sizeof(T);
    for (uint32_t r = 0; r < repeatTimes; r++) {
        for (uint32_t j = 0; j < 8; j++) {
            T v;
            std::memcpy(&v, src.Addr() + (uint64_t)(8 * r + j) * sizeof(T), sizeof(T));
            uint8_t *block = dst.Addr() + ((uint64_t)r * p.dstRepStride + (uint64_t)j * blk) * shim::kBlockBytes;
            for (uint32_t k = 0; k < per_block; k++) std::memcpy(block + k * sizeof(T), &v, sizeof(T));
        }
    }
}

template <typename T>
void Mul(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask,
         const uint8_t repeatTimes, const BinaryRepeatParams &p) {
    shim::BinaryLevel0(dst, src0, src1, mask, repeatTimes, p, "Mul", [](float a, float b) { return a * b; });
}
template <typename T>
void Add(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, uint64_t mask,
         const uint8_t repeatTimes, const BinaryRepeatParams &p) {
    shim::BinaryLevel0(dst, src0, src1, mask, repeatTimes, p, "Add", [](float a, float b) { return a + b; });
}

}  // namespace AscendC

#endif /* CLM_ASCENDC_HOST_KERNEL_OPERATOR_VECTOR_H */
