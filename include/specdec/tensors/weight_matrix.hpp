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

enum class WeightType : std::uint8_t { f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k };

// Every type, in the order above (for listing the supported ones in messages and tests).
inline constexpr WeightType kAllWeightTypes[] = {WeightType::f32,  WeightType::f16,  WeightType::bf16, WeightType::q8_0,
                                                 WeightType::q4_0, WeightType::q4_1, WeightType::q5_0, WeightType::q5_1,
                                                 WeightType::q4_k, WeightType::q5_k, WeightType::q6_k};

[[nodiscard]] inline const char* weight_type_name(WeightType type) noexcept {
    switch (type) {
        case WeightType::f32: return "F32";
        case WeightType::f16: return "F16";
        case WeightType::bf16: return "BF16";
        case WeightType::q8_0: return "Q8_0";
        case WeightType::q4_0: return "Q4_0";
        case WeightType::q4_1: return "Q4_1";
        case WeightType::q5_0: return "Q5_0";
        case WeightType::q5_1: return "Q5_1";
        case WeightType::q4_k: return "Q4_K";
        case WeightType::q5_k: return "Q5_K";
        case WeightType::q6_k: return "Q6_K";
    }
    return "unknown";
}

[[nodiscard]] constexpr bool is_block_quantized(WeightType type) noexcept {
    return type != WeightType::f32 && type != WeightType::f16 && type != WeightType::bf16;
}

// Values per block: 1 for the float types, 32 or 256 (the K types) for the quantised ones.
[[nodiscard]] constexpr std::size_t weight_block_elements(WeightType type) noexcept {
    switch (type) {
        case WeightType::q4_k:
        case WeightType::q5_k:
        case WeightType::q6_k: return cpu::kSuperBlock;
        default: return is_block_quantized(type) ? cpu::kQuantBlock : 1;
    }
}

// Bytes per block (per value for the float types).
[[nodiscard]] constexpr std::size_t weight_block_bytes(WeightType type) noexcept {
    switch (type) {
        case WeightType::f32: return 4;
        case WeightType::f16:
        case WeightType::bf16: return 2;
        case WeightType::q8_0: return sizeof(cpu::BlockQ8_0);
        case WeightType::q4_0: return sizeof(cpu::BlockQ4_0);
        case WeightType::q4_1: return sizeof(cpu::BlockQ4_1);
        case WeightType::q5_0: return sizeof(cpu::BlockQ5_0);
        case WeightType::q5_1: return sizeof(cpu::BlockQ5_1);
        case WeightType::q4_k: return sizeof(cpu::BlockQ4_K);
        case WeightType::q5_k: return sizeof(cpu::BlockQ5_K);
        case WeightType::q6_k: return sizeof(cpu::BlockQ6_K);
    }
    return 0;
}

// Bytes of one row of `cols` values; throws when a block type gets a row
// length that is not a multiple of its block.
[[nodiscard]] inline std::size_t weight_row_bytes(WeightType type, std::size_t cols) {
    const std::size_t block = weight_block_elements(type);
    if (cols % block != 0) {
        throw Error(std::string("a ") + weight_type_name(type) + " row has " + std::to_string(cols) +
                    " values; expected a multiple of its block of " + std::to_string(block));
    }
    return cols / block * weight_block_bytes(type);
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

namespace detail {

template <class Block, std::size_t elements, void (*Decode)(const Block&, float*)>
inline void dequantize_blocks(const std::byte* row, std::size_t cols, float* out) {
    for (std::size_t b = 0; b < cols / elements; ++b) {
        Block block;
        std::memcpy(&block, row + b * sizeof(Block), sizeof block);
        Decode(block, out + b * elements);
    }
}

template <class Block, std::size_t elements, void (*Encode)(const float*, Block&)>
inline void quantize_blocks(const float* values, std::size_t cols, std::byte* out) {
    for (std::size_t b = 0; b < cols / elements; ++b) {
        Block block;
        Encode(values + b * elements, block);
        std::memcpy(out + b * sizeof(Block), &block, sizeof block);
    }
}

}  // namespace detail

// Decodes row r of w into cols floats (scalar): the one row decoder of every
// type, used for embeddings, wide products, the GPU upload and the tests.
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
        case WeightType::q8_0: return detail::dequantize_blocks<BlockQ8_0, kQuantBlock, dequantize_block_q8_0>(row, w.cols, out);
        case WeightType::q4_0: return detail::dequantize_blocks<BlockQ4_0, kQuantBlock, dequantize_block_q4_0>(row, w.cols, out);
        case WeightType::q4_1: return detail::dequantize_blocks<BlockQ4_1, kQuantBlock, dequantize_block_q4_1>(row, w.cols, out);
        case WeightType::q5_0: return detail::dequantize_blocks<BlockQ5_0, kQuantBlock, dequantize_block_q5_0>(row, w.cols, out);
        case WeightType::q5_1: return detail::dequantize_blocks<BlockQ5_1, kQuantBlock, dequantize_block_q5_1>(row, w.cols, out);
        case WeightType::q4_k: return detail::dequantize_blocks<BlockQ4_K, kSuperBlock, dequantize_block_q4_k>(row, w.cols, out);
        case WeightType::q5_k: return detail::dequantize_blocks<BlockQ5_K, kSuperBlock, dequantize_block_q5_k>(row, w.cols, out);
        case WeightType::q6_k: return detail::dequantize_blocks<BlockQ6_K, kSuperBlock, dequantize_block_q6_k>(row, w.cols, out);
    }
}

// Encodes cols floats as one row of the given type (synthetic weights, tests);
// cols must be a multiple of the type's block (see weight_row_bytes).
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
        case WeightType::q8_0: return detail::quantize_blocks<BlockQ8_0, kQuantBlock, quantize_block_q8_0>(values, cols, out);
        case WeightType::q4_0: return detail::quantize_blocks<BlockQ4_0, kQuantBlock, quantize_block_q4_0>(values, cols, out);
        case WeightType::q4_1: return detail::quantize_blocks<BlockQ4_1, kQuantBlock, quantize_block_q4_1>(values, cols, out);
        case WeightType::q5_0: return detail::quantize_blocks<BlockQ5_0, kQuantBlock, quantize_block_q5_0>(values, cols, out);
        case WeightType::q5_1: return detail::quantize_blocks<BlockQ5_1, kQuantBlock, quantize_block_q5_1>(values, cols, out);
        case WeightType::q4_k: return detail::quantize_blocks<BlockQ4_K, kSuperBlock, quantize_block_q4_k>(values, cols, out);
        case WeightType::q5_k: return detail::quantize_blocks<BlockQ5_K, kSuperBlock, quantize_block_q5_k>(values, cols, out);
        case WeightType::q6_k: return detail::quantize_blocks<BlockQ6_K, kSuperBlock, quantize_block_q6_k>(values, cols, out);
    }
}

}  // namespace cpu
}  // namespace specdec
