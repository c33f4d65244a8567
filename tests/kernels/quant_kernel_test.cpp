// The integer matrix kernels of every block-quantised type (AVX2 and scalar)
// against dequantise-then-dot, and the library's own quantisers.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/platform/x86.hpp"
#include "support/catch.hpp"

namespace {

using specdec::WeightType;

// Random bytes in the block layout of `type` with finite F16 scales/mins of
// magnitude up to 2^-3, either sign: every code, scale and min bit pattern
// the decoders can meet, not only those a quantiser emits.
std::vector<std::byte> random_rows(WeightType type, std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::size_t row_bytes = specdec::weight_row_bytes(type, cols);
    std::vector<std::byte> data(rows * row_bytes);
    std::uint64_t state = seed;
    auto next = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<std::uint32_t>(state >> 33);
    };
    for (auto& byte : data) byte = static_cast<std::byte>(next() & 0xFF);
    std::vector<std::size_t> half_offsets;
    using namespace specdec::cpu;
    switch (type) {
        case WeightType::q8_0: half_offsets = {offsetof(BlockQ8_0, d)}; break;
        case WeightType::q4_0: half_offsets = {offsetof(BlockQ4_0, d)}; break;
        case WeightType::q4_1: half_offsets = {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}; break;
        case WeightType::q5_0: half_offsets = {offsetof(BlockQ5_0, d)}; break;
        case WeightType::q5_1: half_offsets = {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}; break;
        case WeightType::q4_k: half_offsets = {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}; break;
        case WeightType::q5_k: half_offsets = {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}; break;
        case WeightType::q6_k: half_offsets = {offsetof(BlockQ6_K, d)}; break;
        default: FAIL("not a block type");
    }
    const std::size_t block_bytes = specdec::weight_block_bytes(type);
    for (std::size_t block = 0; block < data.size() / block_bytes; ++block) {
        for (const std::size_t offset : half_offsets) {
            const float magnitude = std::ldexp(1.0f, -3 - static_cast<int>(next() % 8)) * (1.0f + (next() % 1024) / 1024.0f);
            const Half h = float_to_half((next() & 1) ? magnitude : -magnitude);
            std::memcpy(data.data() + block * block_bytes + offset, &h, 2);
        }
    }
    return data;
}

}  // namespace

TEST_CASE("the quantised matrix kernels agree with dequantise-then-dot for 1 to 8 columns", "[model][quant]") {
    const WeightType type = GENERATE(WeightType::q8_0, WeightType::q4_0, WeightType::q4_1, WeightType::q5_0, WeightType::q5_1,
                                     WeightType::q4_k, WeightType::q5_k, WeightType::q6_k);
    INFO(specdec::weight_type_name(type));
    // 13 rows: the 4- and 2-row tiles and a remainder; 512 values: two K super-blocks, 16 activation blocks.
    const std::size_t rows = 13, cols = 512;
    const std::vector<std::byte> data = random_rows(type, rows, cols, 17 + static_cast<std::uint64_t>(type));
    const specdec::WeightMatrix w{type, rows, cols, data.data()};
    std::vector<float> dequantized(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) specdec::cpu::dequantize_row(w, r, &dequantized[r * cols]);
    specdec::cpu::ThreadPool pool(2);
    for (std::size_t n = 1; n <= 8; ++n) {
        INFO(n << " columns");
        std::vector<float> x(n * cols);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(31 + n, i);
        specdec::cpu::Q8Activations qx;
        specdec::cpu::quantize_activations(x.data(), cols, n, cols, qx);
        std::vector<float> scalar(n * rows), simd(n * rows), dispatched(n * rows);
        specdec::cpu::detail::dispatch_quantized(type, [&]<WeightType T>() {
            specdec::cpu::detail::quant_matmul_rows_scalar<T>(w, 0, rows, qx, n, scalar.data(), rows, false);
#if SPECDEC_X86
            if (specdec::platform::avx2_available()) {
                specdec::cpu::detail::quant_matmul_rows_avx2<T>(w, 0, rows, qx, n, simd.data(), rows, false);
            }
#endif
        });
        specdec::cpu::matmul(pool, w, x.data(), cols, n, dispatched.data(), rows);
        for (std::size_t c = 0; c < n; ++c) {
            for (std::size_t r = 0; r < rows; ++r) {
                // The kernels see x rounded to 8-bit blocks: each x_k is off by at most half a step,
                // max|x| over its block / 254, so the sum is off by at most sum_k |w_k| * that (plus
                // 1e-5 of sum |w_k x_k| for float rounding in the scales and sums).
                // And against the dequantised weights times the 8-bit activations the kernels
                // see, they differ by float rounding only (1e-5 of sum |w_k x_k|).
                double exact = 0.0, bound = 0.0, magnitude = 0.0, on_q8 = 0.0;
                for (std::size_t b = 0; b < cols / 32; ++b) {
                    float amax = 0.0f;
                    for (std::size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[c * cols + 32 * b + i]));
                    for (std::size_t i = 0; i < 32; ++i) {
                        const double wk = dequantized[r * cols + 32 * b + i], xk = x[c * cols + 32 * b + i];
                        exact += wk * xk;
                        on_q8 += wk * static_cast<double>(qx.scale(c, b)) * qx.block(c, b)[i];
                        bound += std::fabs(wk) * amax / 254.0;
                        magnitude += std::fabs(wk * xk);
                    }
                }
                const double rounding = 1e-5 * magnitude + 1e-6;
                bound = 1.01 * bound + rounding;
                INFO("row " << r << " column " << c << ": exact " << exact << ", bound " << bound);
                CHECK(std::fabs(scalar[c * rows + r] - exact) <= bound);
                CHECK(std::fabs(dispatched[c * rows + r] - exact) <= bound);
                CHECK(std::fabs(scalar[c * rows + r] - on_q8) <= rounding);
                CHECK(std::fabs(dispatched[c * rows + r] - on_q8) <= rounding);
#if SPECDEC_X86
                if (specdec::platform::avx2_available()) {
                    CHECK(std::fabs(simd[c * rows + r] - exact) <= bound);
                    CHECK(std::fabs(simd[c * rows + r] - on_q8) <= rounding);
                    // Same integer sums: only the float accumulation order differs.
                    CHECK(std::fabs(simd[c * rows + r] - scalar[c * rows + r]) <= 1e-5 * magnitude + 1e-6);
                }
#endif
            }
        }
    }
}

TEST_CASE("the quantisers of every block type round-trip within their precision", "[model][quant]") {
    // Unit-normal values over 4 super-blocks; the bound is about half a quantisation step of the
    // block's range (largest |value| ~3.5), with room for the K types' 6-bit scale rounding.
    const std::size_t cols = 1024;
    std::vector<float> values(cols);
    for (std::size_t i = 0; i < cols; ++i) values[i] = specdec::detail::synthetic_normal(12, i);
    struct Case {
        WeightType type;
        float max_error;
    };
    for (const Case& t : {Case{WeightType::q8_0, 0.02f}, Case{WeightType::q4_0, 0.35f}, Case{WeightType::q4_1, 0.3f},
                          Case{WeightType::q5_0, 0.2f}, Case{WeightType::q5_1, 0.15f}, Case{WeightType::q4_k, 0.35f},
                          Case{WeightType::q5_k, 0.2f}, Case{WeightType::q6_k, 0.1f}}) {
        INFO(specdec::weight_type_name(t.type));
        std::vector<std::byte> row(specdec::weight_row_bytes(t.type, cols));
        specdec::cpu::quantize_row(t.type, values.data(), cols, row.data());
        std::vector<float> decoded(cols);
        specdec::cpu::dequantize_row(specdec::WeightMatrix{t.type, 1, cols, row.data()}, 0, decoded.data());
        const float error = specdec::test::max_abs_difference(values, decoded);
        INFO("max error " << error);
        CHECK(error < t.max_error);
    }
}

TEST_CASE("a model in each K-quant and 32-value type loads back from GGUF with identical logits", "[model][quant]") {
    const WeightType type = GENERATE(WeightType::q4_1, WeightType::q5_0, WeightType::q5_1, WeightType::q4_k, WeightType::q5_k,
                                     WeightType::q6_k);
    INFO(specdec::weight_type_name(type));
    // The tiny shape widened to rows of 256 values (one super-block); the embedding in the same type.
    specdec::SyntheticShape shape = specdec::synthetic_shape("tiny");
    shape.config.embedding_dim = 256;
    shape.config.feed_forward_dim = 512;
    specdec::cpu::ThreadPool pool(2);
    specdec::LlamaModel original(specdec::detail::synthetic_weights(pool, shape, 4, 2, type, type), {.threads = 2});
    CHECK(original.weights().layers[0].ffn_down.type == type);
    specdec::test::TemporaryFile file("quantized.gguf");
    specdec::test::llama_gguf_writer(original.weights()).write(file.path);
    specdec::LlamaModel loaded = specdec::LlamaModel::from_gguf(file.path);
    CHECK(loaded.weights().layers[1].query.type == type);
    CHECK(loaded.weights().token_embedding.type == type);
    const std::vector<specdec::Token> tokens = {1, 2, 3, 4, 100};
    const auto expected = specdec::test::copy_rows(original.forward(tokens));
    const auto actual = specdec::test::copy_rows(loaded.forward(tokens));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        CHECK(expected[i] == actual[i]);
        CHECK(std::all_of(actual[i].begin(), actual[i].end(), [](float v) { return std::isfinite(v); }));
    }
}
