// Dequantisation of every quantised tensor type against an independent
// reference: tests/formats/data/quant_types.gguf holds, per type, quantised
// tensors (from random values, and random bytes in the block layout with
// random finite F16 scales) and their values as dequantised by the `gguf`
// Python package (gguf.quants). scripts/fixtures/make_quant_types_fixture.py
// regenerates it.
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "specdec/formats/gguf.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/tensors/weight_matrix.hpp"
#include "support/catch.hpp"

namespace {

using specdec::WeightType;
using specdec::gguf::File;

// Committed with the tests (tests/formats/data), not among the downloaded fixtures.
const std::filesystem::path kFixture = std::filesystem::path(SPECDEC_TEST_SOURCE_DIR) / "formats" / "data" / "quant_types.gguf";

std::string quant_error_of(auto&& action) {
    try {
        action();
    } catch (const specdec::Error& error) {
        return error.what();
    }
    return "";
}

bool ends_with(const std::string& text, const std::string& suffix) {
    return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TEST_CASE("every quantised type dequantises bit for bit like the gguf package's reference", "[gguf][quant]") {
    const File file = File::open(kFixture);
    std::set<WeightType> covered;
    std::size_t tensors = 0;
    for (const auto& tensor : file.tensors()) {
        if (ends_with(tensor.name, ".reference")) continue;
        INFO("tensor " << tensor.name);
        const auto& reference = file.tensor(tensor.name + ".reference");
        REQUIRE(reference.type == specdec::gguf::TensorType::f32);
        REQUIRE(tensor.shape.size() == 2);
        REQUIRE(reference.shape == tensor.shape);
        const std::size_t cols = tensor.shape[0], rows = tensor.shape[1];
        const WeightType type = specdec::detail::weight_type_of(file, tensor);
        covered.insert(type);
        const specdec::WeightMatrix w{type, rows, cols, tensor.data};
        REQUIRE(w.byte_size() == tensor.byte_size);
        std::vector<float> decoded(cols);
        std::size_t mismatches = 0;
        for (std::size_t r = 0; r < rows; ++r) {
            specdec::cpu::dequantize_row(w, r, decoded.data());
            for (std::size_t k = 0; k < cols; ++k) {
                float expected;
                std::memcpy(&expected, reference.data + 4 * (r * cols + k), 4);
                // Bit patterns: the same float operations in the same order give the same bits, signed zeros included.
                if (std::bit_cast<std::uint32_t>(decoded[k]) != std::bit_cast<std::uint32_t>(expected)) {
                    if (mismatches++ < 3) UNSCOPED_INFO("row " << r << " value " << k << ": " << decoded[k] << " != " << expected);
                }
            }
        }
        CHECK(mismatches == 0);
        ++tensors;
    }
    // Every block-quantised type of the library is in the fixture.
    std::set<WeightType> quantized;
    for (const WeightType type : specdec::kAllWeightTypes) {
        if (specdec::is_block_quantized(type)) quantized.insert(type);
    }
    CHECK(covered == quantized);
    CHECK(tensors == 13);
}

TEST_CASE("a row that is not a whole number of blocks is refused with the type and its block size", "[gguf][quant]") {
    CHECK(specdec::weight_row_bytes(WeightType::q4_k, 512) == 2 * 144);
    CHECK(specdec::weight_row_bytes(WeightType::q6_k, 256) == 210);
    CHECK(specdec::weight_row_bytes(WeightType::q5_1, 64) == 2 * 24);
    CHECK(quant_error_of([] { (void)specdec::weight_row_bytes(WeightType::q5_k, 288); }) ==
          "a Q5_K row has 288 values; expected a multiple of its block of 256");
    CHECK(quant_error_of([] { (void)specdec::weight_row_bytes(WeightType::q4_1, 48); }) ==
          "a Q4_1 row has 48 values; expected a multiple of its block of 32");
}
