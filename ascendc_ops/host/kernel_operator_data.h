/* kernel_operator_data.h (host shim) - data movement between global memory and the unified
 * buffer: DataCopy (whole 32-byte blocks) and DataCopyPad (any length, the tail path), with the
 * 910B's rules checked. Included by kernel_operator.h. */
#ifndef CLM_ASCENDC_HOST_KERNEL_OPERATOR_DATA_H
#define CLM_ASCENDC_HOST_KERNEL_OPERATOR_DATA_H

namespace AscendC {

struct DataCopyExtParams {
    uint16_t blockCount = 1;
    uint32_t blockLen = 0;   /* bytes */
    uint32_t srcStride = 0;  /* GM -> UB: bytes; UB -> GM: 32-byte blocks */
    uint32_t dstStride = 0;  /* GM -> UB: 32-byte blocks; UB -> GM: bytes */
    uint32_t rsv = 0;
    DataCopyExtParams() = default;
    DataCopyExtParams(uint16_t count, uint32_t len, uint32_t src_stride, uint32_t dst_stride, uint32_t reserved)
        : blockCount(count), blockLen(len), srcStride(src_stride), dstStride(dst_stride), rsv(reserved) {}
};

template <typename T> struct DataCopyPadExtParams {
    bool isPad = false;
    uint8_t leftPadding = 0;
    uint8_t rightPadding = 0;
    T paddingValue = T();
    DataCopyPadExtParams() = default;
    DataCopyPadExtParams(bool pad, uint8_t left, uint8_t right, T value)
        : isPad(pad), leftPadding(left), rightPadding(right), paddingValue(value) {}
};

namespace shim {
constexpr uint32_t kMaxCopyBlocks = 65535;      /* DataCopyParams::blockLen is a uint16_t of 32-byte blocks */
constexpr uint32_t kMaxPadBlockCount = 4095;
constexpr uint32_t kMaxPadBlockLen = 2097151;

template <typename T> void CheckCopyCount(uint32_t count, const char *what) {
    uint64_t bytes = Bytes<T>(count);
    if (bytes % kBlockBytes != 0)
        Fail("%s: %u elements of %s are %llu bytes, not a multiple of 32 (the NPU would copy %llu); "
             "copy a tail with DataCopyPad", what, count, TypeName<T>(), (unsigned long long)bytes,
             (unsigned long long)(bytes / kBlockBytes * kBlockBytes));
    if (bytes / kBlockBytes > kMaxCopyBlocks)
        Fail("%s: %llu bytes are more than 65535 blocks of 32 bytes", what, (unsigned long long)bytes);
}
template <typename T> void CheckGmAligned(const uint8_t *p, const char *what) {
    size_t align = kBits<T> >= 8 ? sizeof(T) : 1;
    if ((uintptr_t)p % align != 0)
        Fail("%s: global address %p is not aligned to its element size (%zu)", what, (const void *)p, align);
}
template <typename T> void CheckPadParams(const DataCopyExtParams &p, const char *what) {
    size_t unit = kBits<T> >= 8 ? sizeof(T) : 1;
    if (p.blockCount == 0 || p.blockCount > kMaxPadBlockCount)
        Fail("%s: blockCount %u is outside [1, 4095]", what, p.blockCount);
    if (p.blockLen == 0 || p.blockLen > kMaxPadBlockLen)
        Fail("%s: blockLen %u bytes is outside [1, 2097151]", what, p.blockLen);
    if (p.blockLen % unit != 0)
        Fail("%s: blockLen %u is not a multiple of the element size %zu", what, p.blockLen, unit);
}
inline uint64_t RoundBlock(uint64_t bytes) { return (bytes + kBlockBytes - 1) / kBlockBytes * kBlockBytes; }
}  // namespace shim

/* GM -> UB: count elements, a multiple of 32 bytes. */
template <typename T> void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
    const char *what = "DataCopy(GM -> UB)";
    shim::CheckCopyCount<T>(count, what);
    dst.RequireAligned(what);
    dst.Require(count, what);
    shim::CheckGmAligned<T>(src.Addr(), what);
    src.Check(src.Addr(), shim::Bytes<T>(count), what);
    std::memcpy(dst.Addr(), src.Addr(), shim::Bytes<T>(count));
}

/* UB -> GM: count elements, a multiple of 32 bytes. */
template <typename T> void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
    const char *what = "DataCopy(UB -> GM)";
    shim::CheckCopyCount<T>(count, what);
    src.RequireAligned(what);
    src.Require(count, what);
    shim::CheckGmAligned<T>(dst.Addr(), what);
    dst.Check(dst.Addr(), shim::Bytes<T>(count), what);
    std::memcpy(dst.Addr(), src.Addr(), shim::Bytes<T>(count));
}

/* GM -> UB: blockCount blocks of blockLen bytes, each padded to 32 bytes in UB (the padding is
 * paddingValue with isPad, else undefined: the shim fills it with 0xFF). */
template <typename T>
void DataCopyPad(const LocalTensor<T> &dst, const GlobalTensor<T> &src, const DataCopyExtParams &p,
                 const DataCopyPadExtParams<T> &pad) {
    const char *what = "DataCopyPad(GM -> UB)";
    shim::CheckPadParams<T>(p, what);
    dst.RequireAligned(what);
    shim::CheckGmAligned<T>(src.Addr(), what);
    constexpr uint32_t elem = shim::kBits<T> >= 8 ? sizeof(T) : 1;
    if (pad.isPad && ((uint32_t)pad.leftPadding * elem > shim::kBlockBytes ||
                      (uint32_t)pad.rightPadding * elem > shim::kBlockBytes))
        shim::Fail("%s: a padding of more than 32 bytes", what);
    if (pad.isPad && pad.leftPadding != 0) shim::Fail("%s: left padding is not implemented by the host shim", what);
    uint64_t ub_block = shim::RoundBlock(p.blockLen), ub_stride = ub_block + (uint64_t)p.dstStride * shim::kBlockBytes;
    for (uint32_t b = 0; b < p.blockCount; b++) {
        const uint8_t *g = src.Addr() + (uint64_t)b * ((uint64_t)p.blockLen + p.srcStride);
        uint64_t u = (uint64_t)b * ub_stride;
        dst.RequireBytes(u, ub_block, what);
        src.Check(g, p.blockLen, what);
        uint8_t *out = dst.Addr() + u;
        std::memcpy(out, g, p.blockLen);
        std::memset(out + p.blockLen, shim::kPoison, ub_block - p.blockLen);
        if (pad.isPad && shim::kBits<T> % 8 == 0)
            for (uint32_t k = 0; k < pad.rightPadding && p.blockLen + (k + 1) * elem <= ub_block; k++)
                std::memcpy(out + p.blockLen + k * elem, &pad.paddingValue, elem);
    }
}

/* UB -> GM: exactly blockLen bytes per block. */
template <typename T>
void DataCopyPad(const GlobalTensor<T> &dst, const LocalTensor<T> &src, const DataCopyExtParams &p) {
    const char *what = "DataCopyPad(UB -> GM)";
    shim::CheckPadParams<T>(p, what);
    src.RequireAligned(what);
    shim::CheckGmAligned<T>(dst.Addr(), what);
    uint64_t ub_stride = shim::RoundBlock(p.blockLen) + (uint64_t)p.srcStride * shim::kBlockBytes;
    for (uint32_t b = 0; b < p.blockCount; b++) {
        uint8_t *g = dst.Addr() + (uint64_t)b * ((uint64_t)p.blockLen + p.dstStride);
        uint64_t u = (uint64_t)b * ub_stride;
        src.RequireBytes(u, p.blockLen, what);
        dst.Check(g, p.blockLen, what);
        std::memcpy(g, src.Addr() + u, p.blockLen);
    }
}

}  // namespace AscendC

#endif /* CLM_ASCENDC_HOST_KERNEL_OPERATOR_DATA_H */
