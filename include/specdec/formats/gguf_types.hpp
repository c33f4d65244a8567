#pragma once
// The vocabulary of the GGUF format (the llama.cpp model file): metadata value
// types and the tensor types this library can compute with, with their block
// layouts. Shared by the reader (gguf.hpp) and the writer (gguf_writer.hpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "specdec/core/error.hpp"
#include "specdec/tensors/quant_blocks.hpp"

namespace specdec::gguf {

// Metadata value types, with the ids the file stores.
enum class ValueType : std::uint32_t {
    uint8 = 0,
    int8 = 1,
    uint16 = 2,
    int16 = 3,
    uint32 = 4,
    int32 = 5,
    float32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    uint64 = 10,
    int64 = 11,
    float64 = 12,
};

// Tensor element types the reference models can use, with their ggml ids.
// Any other ggml type id in a file is reported as unsupported.
enum class TensorType : std::uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q4_K = 12,
    q5_K = 13,
    q6_K = 14,
    bf16 = 30,
};

inline constexpr TensorType kSupportedTensorTypes[] = {TensorType::f32,  TensorType::f16,  TensorType::bf16, TensorType::q8_0,
                                                       TensorType::q4_0, TensorType::q4_1, TensorType::q5_0, TensorType::q5_1,
                                                       TensorType::q4_K, TensorType::q5_K, TensorType::q6_K};

// Quantised types pack `block_elements` values into `block_bytes` bytes;
// plain float types are blocks of one element.
struct TypeTraits {
    std::size_t block_elements;
    std::size_t block_bytes;
    const char* name;
};

namespace detail {

inline bool is_known_value_type(std::uint32_t id) { return id <= static_cast<std::uint32_t>(ValueType::float64); }

inline bool is_supported_tensor_type(std::uint32_t id) {
    for (const TensorType type : kSupportedTensorTypes) {
        if (static_cast<std::uint32_t>(type) == id) return true;
    }
    return false;
}

// ggml's names for every type id it has had, so that an unsupported type is
// reported by a name the user recognises ("q4_K"), not only by a number.
inline const char* ggml_type_name(std::uint32_t id) {
    static constexpr const char* names[] = {
        "f32",  "f16",   "q4_0",    "q4_1",   "q4_2",  "q4_3",  "q5_0",  "q5_1",  "q8_0", "q8_1",
        "q2_K", "q3_K",  "q4_K",    "q5_K",   "q6_K",  "q8_K",  "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
        "iq4_nl", "iq3_s", "iq2_s", "iq4_xs", "i8",    "i16",   "i32",   "i64",   "f64",  "iq1_m",
        "bf16", "q4_0_4_4", "q4_0_4_8", "q4_0_8_8", "tq1_0", "tq2_0",
    };
    return id < std::size(names) ? names[id] : "unknown";
}

// "f32, f16, ..." for error messages.
inline std::string supported_tensor_type_list() {
    std::string list;
    for (const TensorType type : kSupportedTensorTypes) {
        list += (list.empty() ? "" : ", ") + std::string(ggml_type_name(static_cast<std::uint32_t>(type)));
    }
    return list;
}

}  // namespace detail

inline const char* value_type_name(ValueType type) {
    switch (type) {
        case ValueType::uint8: return "uint8";
        case ValueType::int8: return "int8";
        case ValueType::uint16: return "uint16";
        case ValueType::int16: return "int16";
        case ValueType::uint32: return "uint32";
        case ValueType::int32: return "int32";
        case ValueType::float32: return "float32";
        case ValueType::boolean: return "bool";
        case ValueType::string: return "string";
        case ValueType::array: return "array";
        case ValueType::uint64: return "uint64";
        case ValueType::int64: return "int64";
        case ValueType::float64: return "float64";
    }
    return "unknown";
}

inline TypeTraits type_traits(TensorType type) {
    switch (type) {
        case TensorType::f32: return {1, 4, "f32"};
        case TensorType::f16: return {1, 2, "f16"};
        case TensorType::bf16: return {1, 2, "bf16"};
        // The block layouts are defined once, in tensors/quant_blocks.hpp.
        case TensorType::q8_0: return {cpu::kQuantBlock, sizeof(cpu::BlockQ8_0), "q8_0"};
        case TensorType::q4_0: return {cpu::kQuantBlock, sizeof(cpu::BlockQ4_0), "q4_0"};
        case TensorType::q4_1: return {cpu::kQuantBlock, sizeof(cpu::BlockQ4_1), "q4_1"};
        case TensorType::q5_0: return {cpu::kQuantBlock, sizeof(cpu::BlockQ5_0), "q5_0"};
        case TensorType::q5_1: return {cpu::kQuantBlock, sizeof(cpu::BlockQ5_1), "q5_1"};
        case TensorType::q4_K: return {cpu::kSuperBlock, sizeof(cpu::BlockQ4_K), "q4_K"};
        case TensorType::q5_K: return {cpu::kSuperBlock, sizeof(cpu::BlockQ5_K), "q5_K"};
        case TensorType::q6_K: return {cpu::kSuperBlock, sizeof(cpu::BlockQ6_K), "q6_K"};
    }
    throw Error("unsupported tensor type " + std::to_string(static_cast<std::uint32_t>(type)) + " (" +
                detail::ggml_type_name(static_cast<std::uint32_t>(type)) + "); supported: " +
                detail::supported_tensor_type_list());
}

}  // namespace specdec::gguf
