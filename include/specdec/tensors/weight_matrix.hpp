#pragma once
// A non-owning view of a row-major weight matrix in one of the storage types
// the CPU kernels read directly (they dequantise on the fly: the model is never
// inflated to F32). Row r starts at data + r * row_bytes().
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "specdec/tensors/half.hpp"
#include "specdec/tensors/quant_blocks.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

enum class WeightType : std::uint8_t { f32, f16, bf16, q8_0, q4_0 };

[[nodiscard]] inline const char* weight_type_name(WeightType type) noexcept {
    switch (type) {
        case WeightType::f32: return "F32";
        case WeightType::f16: return "F16";
        case WeightType::bf16: return "BF16";
        case WeightType::q8_0: return "Q8_0";
        case WeightType::q4_0: return "Q4_0";
    }
    return "unknown";
}

[[nodiscard]] constexpr bool is_block_quantized(WeightType type) noexcept {
    return type == WeightType::q8_0 || type == WeightType::q4_0;
}

// Bytes of one row of `cols` values; throws when a block type gets a row
// length that is not a multiple of its 32-value block.
[[nodiscard]] inline std::size_t weight_row_bytes(WeightType type, std::size_t cols) {
    switch (type) {
        case WeightType::f32: return cols * 4;
        case WeightType::f16:
        case WeightType::bf16: return cols * 2;
        case WeightType::q8_0:
        case WeightType::q4_0:
            if (cols % cpu::kQuantBlock != 0) {
                throw Error(std::string("a ") + weight_type_name(type) + " row needs a multiple of 32 values, got " +
                            std::to_string(cols));
            }
            return cols / cpu::kQuantBlock * (type == WeightType::q8_0 ? sizeof(cpu::BlockQ8_0) : sizeof(cpu::BlockQ4_0));
    }
    throw Error("unknown weight type");
}

struct WeightMatrix {
    WeightType type = WeightType::f32;
    std::size_t rows = 0;
    std::size_t cols = 0;
    const std::byte* data = nullptr;

    [[nodiscard]] std::size_t row_bytes() const { return weight_row_bytes(type, cols); }
    [[nodiscard]] std::size_t byte_size() const { return rows * row_bytes(); }
    [[nodiscard]] const std::byte* row(std::size_t r) const { return data + r * row_bytes(); }
};

namespace cpu {

// Decodes row r of w into cols floats (scalar; used for embeddings and tails).
inline void dequantize_row(const WeightMatrix& w, std::size_t r, float* out) {
    const std::byte* row = w.row(r);
    switch (w.type) {
        case WeightType::f32: std::memcpy(out, row, w.cols * sizeof(float)); return;
        case WeightType::f16:
            for (std::size_t k = 0; k < w.cols; ++k) {
                Half h;
                std::memcpy(&h, row + 2 * k, 2);
                out[k] = half_to_float(h);
            }
            return;
        case WeightType::bf16:
            for (std::size_t k = 0; k < w.cols; ++k) {
                BFloat16 b;
                std::memcpy(&b, row + 2 * k, 2);
                out[k] = bf16_to_float(b);
            }
            return;
        case WeightType::q8_0:
            for (std::size_t b = 0; b < w.cols / kQuantBlock; ++b) {
                BlockQ8_0 block;
                std::memcpy(&block, row + b * sizeof(BlockQ8_0), sizeof block);
                dequantize_block_q8_0(block, out + b * kQuantBlock);
            }
            return;
        case WeightType::q4_0:
            for (std::size_t b = 0; b < w.cols / kQuantBlock; ++b) {
                BlockQ4_0 block;
                std::memcpy(&block, row + b * sizeof(BlockQ4_0), sizeof block);
                dequantize_block_q4_0(block, out + b * kQuantBlock);
            }
            return;
    }
}

// Encodes cols floats as one row of the given type (synthetic weights, tests).
inline void quantize_row(WeightType type, const float* values, std::size_t cols, std::byte* out) {
    switch (type) {
        case WeightType::f32: std::memcpy(out, values, cols * sizeof(float)); return;
        case WeightType::f16:
            for (std::size_t k = 0; k < cols; ++k) {
                const Half h = float_to_half(values[k]);
                std::memcpy(out + 2 * k, &h, 2);
            }
            return;
        case WeightType::bf16:
            for (std::size_t k = 0; k < cols; ++k) {
                const BFloat16 b = float_to_bf16(values[k]);
                std::memcpy(out + 2 * k, &b, 2);
            }
            return;
        case WeightType::q8_0:
            for (std::size_t b = 0; b < cols / kQuantBlock; ++b) {
                BlockQ8_0 block;
                quantize_block_q8_0(values + b * kQuantBlock, block);
                std::memcpy(out + b * sizeof(BlockQ8_0), &block, sizeof block);
            }
            return;
        case WeightType::q4_0:
            for (std::size_t b = 0; b < cols / kQuantBlock; ++b) {
                BlockQ4_0 block;
                quantize_block_q4_0(values + b * kQuantBlock, block);
                std::memcpy(out + b * sizeof(BlockQ4_0), &block, sizeof block);
            }
            return;
    }
}

}  // namespace cpu
}  // namespace specdec
