// forward(n tokens) is one batched pass that must give the same logits as n
// single-token passes, for every storage type, and rollback (truncate) must
// leave the model as if the discarded tokens had never been fed.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/platform/x86.hpp"
#include "support/catch.hpp"
#include "support/skip.hpp"

namespace {

using specdec::LlamaModel;
using specdec::Token;
using specdec::WeightType;

std::vector<Token> test_tokens(std::size_t count, std::size_t vocab) {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < count; ++i) tokens.push_back(static_cast<Token>((i * 37 + 11) % vocab));
    return tokens;
}

LlamaModel tiny_target(WeightType storage) {
    return specdec::make_synthetic_target({.size = "tiny", .seed = 3, .target_storage = storage, .threads = 2});
}

// A rows x cols matrix of `type` holding seeded normal values (rounded to the type).
struct SeededMatrix {
    WeightType type;
    std::size_t rows, cols;
    std::vector<std::byte> data;
    [[nodiscard]] specdec::WeightMatrix matrix() const { return {type, rows, cols, data.data()}; }
};

SeededMatrix seeded_matrix(WeightType type, std::size_t rows, std::size_t cols, std::uint64_t seed) {
    SeededMatrix m{type, rows, cols, std::vector<std::byte>(rows * specdec::weight_row_bytes(type, cols))};
    std::vector<float> values(cols);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t k = 0; k < cols; ++k) values[k] = specdec::detail::synthetic_normal(seed, r * cols + k);
        specdec::cpu::quantize_row(type, values.data(), cols, m.data.data() + r * specdec::weight_row_bytes(type, cols));
    }
    return m;
}

}  // namespace

TEST_CASE("a batched forward of n tokens equals n single-token forwards for every storage type", "[model]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0);
    INFO("storage " << specdec::weight_type_name(storage));
    LlamaModel model = tiny_target(storage);
    const std::vector<Token> tokens = test_tokens(48, model.vocab_size());
    const auto reference = specdec::test::logits_one_by_one(model, tokens);
    // Batches of several sizes (below, at and above the kernels' 4-column groups), continuing a growing cache.
    model.truncate(0);
    std::size_t position = 0;
    for (const std::size_t n : {1, 2, 3, 4, 5, 8, 9, 16}) {
        INFO("batch of " << n << " at position " << position);
        const auto view = model.forward(std::span<const Token>(tokens.data() + position, n));
        REQUIRE(view.rows == n);
        for (std::size_t i = 0; i < n; ++i) {
            // Tolerance 1e-4 absolute on logits of magnitude ~10: only summation order may differ.
            CHECK(specdec::test::max_abs_difference(view.row(i), reference[position + i]) < 1e-4f);
        }
        position += n;
    }
    CHECK(model.cached_tokens() == 48);
}

TEST_CASE("truncate then re-forward gives the logits of a fresh model fed the same tokens", "[model]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::q4_0);
    LlamaModel model = tiny_target(storage);
    LlamaModel fresh = tiny_target(storage);
    const std::vector<Token> first = test_tokens(12, model.vocab_size());
    const std::vector<Token> replacement = {5, 6, 7, 8, 9};

    model.forward(first);
    model.truncate(7);
    CHECK(model.cached_tokens() == 7);
    const auto rolled_back = specdec::test::copy_rows(model.forward(replacement));

    std::vector<Token> expected_tokens(first.begin(), first.begin() + 7);
    expected_tokens.insert(expected_tokens.end(), replacement.begin(), replacement.end());
    const auto expected = specdec::test::copy_rows(fresh.forward(expected_tokens));
    for (std::size_t i = 0; i < replacement.size(); ++i) {
        CHECK(specdec::test::max_abs_difference(rolled_back[i], expected[7 + i]) < 1e-4f);
    }
    // Repeated truncations, including to zero.
    model.truncate(3);
    model.truncate(0);
    CHECK(model.cached_tokens() == 0);
    const auto restart = specdec::test::copy_rows(model.forward(std::span<const Token>(expected_tokens.data(), 4)));
    for (std::size_t i = 0; i < 4; ++i) CHECK(specdec::test::max_abs_difference(restart[i], expected[i]) < 1e-4f);
}

TEST_CASE("the SIMD matrix kernels agree with the scalar kernels", "[model]") {
    // Row lengths with and without a tail beyond the 32-value chunks (dense types only).
    const WeightType type = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0,
                                     WeightType::q4_1, WeightType::q5_0, WeightType::q5_1, WeightType::q4_k, WeightType::q5_k,
                                     WeightType::q6_k);
    const std::size_t cols = GENERATE(std::size_t{64}, std::size_t{172}, std::size_t{256});
    if (cols % specdec::weight_block_elements(type) != 0) return;
    INFO(specdec::weight_type_name(type) << " with " << cols << " columns");
    const std::size_t rows = 23;
    const SeededMatrix seeded = seeded_matrix(type, rows, cols, 99);
    const specdec::WeightMatrix w = seeded.matrix();
    specdec::cpu::ThreadPool pool(2);
    for (const std::size_t n : {1, 2, 3, 4, 5, 7, 12}) {
        std::vector<float> x(n * cols);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(7, i);
        std::vector<float> fast(n * rows, 1.0f), scalar(n * rows, 1.0f);
        specdec::cpu::matmul(pool, w, x.data(), cols, n, fast.data(), rows, /*accumulate=*/true);
        if (specdec::is_block_quantized(type)) {
            // Both kernels round the activations to Q8 blocks and sum the same integers.
            specdec::cpu::Q8Activations qx;
            specdec::cpu::quantize_activations(x.data(), cols, n, cols, qx);
            specdec::cpu::detail::dispatch_quantized(type, [&]<WeightType T>() {
                specdec::cpu::detail::quant_matmul_rows_scalar<T>(w, 0, rows, qx, n, scalar.data(), rows, true);
            });
        } else {
            specdec::cpu::detail::matmul_rows_scalar(w, 0, rows, x.data(), cols, n, scalar.data(), rows, true);
        }
        // Dot products of ~256 unit-variance terms: 1e-3 absolute covers float reassociation.
        CHECK(specdec::test::max_abs_difference(fast, scalar) < 1e-3f);
        if (specdec::is_block_quantized(type)) {
            // Against float activations the 8-bit rounding of x shows: each x is off by at most
            // max|x| / 254 (~0.015), and the errors of sqrt(cols) ~ 16 terms add up to ~0.1-0.3.
            std::vector<float> float_activations(n * rows, 1.0f);
            specdec::cpu::detail::matmul_rows_scalar(w, 0, rows, x.data(), cols, n, float_activations.data(), rows, true);
            CHECK(specdec::test::max_abs_difference(fast, float_activations) < 0.6f);
        }
    }
}

TEST_CASE("each column of a matrix product is bitwise the same whatever the batch it is computed in", "[model]") {
    // The kernels pick row tiles and column groups by batch size; every
    // (row, column) sum must still be the same chain of operations, so that a
    // verify pass reproduces the single-token logits exactly (greedy
    // speculative decoding then equals greedy decoding even at near-ties).
    const WeightType type = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0,
                                     WeightType::q4_1, WeightType::q5_0, WeightType::q5_1, WeightType::q4_k, WeightType::q5_k,
                                     WeightType::q6_k);
    const std::size_t cols = specdec::is_block_quantized(type) ? 256 : 172;
    INFO(specdec::weight_type_name(type));
    const std::size_t rows = 37;
    const SeededMatrix seeded = seeded_matrix(type, rows, cols, 5);
    const specdec::WeightMatrix w = seeded.matrix();
    specdec::cpu::ThreadPool pool(2);
    // Every width the tiles take: one tile, and several column groups per row tile.
    constexpr std::size_t kMaxColumns = specdec::cpu::kWideColumns;
    std::vector<float> x(kMaxColumns * cols);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(8, i);
    std::vector<float> single(kMaxColumns * rows);
    for (std::size_t c = 0; c < kMaxColumns; ++c) specdec::cpu::matmul(pool, w, &x[c * cols], cols, 1, &single[c * rows], rows);
    for (std::size_t n = 2; n <= kMaxColumns; ++n) {
        INFO(n << " columns");
        std::vector<float> batched(n * rows);
        specdec::cpu::matmul(pool, w, x.data(), cols, n, batched.data(), rows);
        CHECK(std::equal(batched.begin(), batched.end(), single.begin()));
    }
}

TEST_CASE("the 32-register tiles compute bitwise what the AVX2 tiles compute for every dense type and width", "[model]") {
    // On CPUs with AVX-512 the dense products run the AVX2 tile code
    // EVEX-encoded, with larger tiles; the width test above then checks that
    // path alone. Both must give the same bits, or a model's logits would
    // depend on the CPU it runs on.
#if SPECDEC_X86
    if (!specdec::platform::evex_available())
        SPECDEC_SKIP("this CPU has no AVX-512 F + VL (or SPECDEC_DISABLE_AVX512 is set): only the AVX2 tiles run");
    const WeightType type = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16);
    INFO(specdec::weight_type_name(type));
    // 37 rows leave a remainder after 4- and 3-row tiles; 172 values a tail after the 32-value chunks.
    const std::size_t rows = 37, cols = 172;
    const SeededMatrix seeded = seeded_matrix(type, rows, cols, 11);
    const specdec::WeightMatrix w = seeded.matrix();
    // Up to the widest pass the tiles take (kWideColumns), one-column groups to several.
    constexpr std::size_t kMaxColumns = specdec::cpu::kWideColumns;
    std::vector<float> x(kMaxColumns * cols);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(12, i);
    auto run = [&](auto kernel, std::size_t n, bool accumulate) {
        std::vector<float> y(n * rows);
        for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.25f * static_cast<float>(i % 7);
        kernel(w, 0, rows, x.data(), cols, n, y.data(), rows, accumulate);
        return y;
    };
    using specdec::cpu::detail::matmul_rows_avx2_any;
    using specdec::cpu::detail::matmul_rows_evex_any;
    for (std::size_t n = 1; n <= kMaxColumns; ++n) {
        for (const bool accumulate : {false, true}) {
            INFO(n << " columns, accumulate " << accumulate);
            std::vector<float> avx2, evex;
            REQUIRE(specdec::cpu::detail::dispatch_dense(type, [&]<WeightType T>() {
                avx2 = run(matmul_rows_avx2_any<T>, n, accumulate);
                evex = run(matmul_rows_evex_any<T>, n, accumulate);
            }));
            CHECK(std::memcmp(avx2.data(), evex.data(), avx2.size() * sizeof(float)) == 0);
        }
    }
#else
    SPECDEC_SKIP("not an x86 CPU: no vector tiles");
#endif
}

TEST_CASE("F16, BF16, Q8_0 and Q4_0 encodings round-trip within their precision", "[model]") {
    using namespace specdec::cpu;
    CHECK(half_to_float(float_to_half(1.0f)) == 1.0f);
    CHECK(half_to_float(float_to_half(-2.5f)) == -2.5f);
    CHECK(half_to_float(float_to_half(65504.0f)) == 65504.0f);
    CHECK(std::isinf(half_to_float(float_to_half(1e6f))));
    CHECK(half_to_float(float_to_half(0x1p-24f)) == 0x1p-24f);  // smallest subnormal
    CHECK(half_to_float(float_to_half(1.0f + 0x1p-11f)) == 1.0f);  // ties to even
    CHECK(bf16_to_float(float_to_bf16(1.0f)) == 1.0f);
    CHECK(bf16_to_float(float_to_bf16(3.0f)) == 3.0f);
    std::vector<float> values(64);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = specdec::detail::synthetic_normal(5, i);
    for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        std::vector<std::byte> row(specdec::weight_row_bytes(type, values.size()));
        quantize_row(type, values.data(), values.size(), row.data());
        std::vector<float> decoded(values.size());
        dequantize_row(specdec::WeightMatrix{type, 1, values.size(), row.data()}, 0, decoded.data());
        // Half a quantisation step of a block whose largest value is ~3.5: 3.5/127/2 resp. 3.5/8/2.
        const float bound = type == WeightType::q8_0 ? 0.02f : 0.25f;
        CHECK(specdec::test::max_abs_difference(values, decoded) < bound);
    }
}

TEST_CASE("the SIMD attention kernel agrees with the scalar one", "[model]") {
    const std::size_t head_dim = GENERATE(std::size_t{8}, std::size_t{24}, std::size_t{64}, std::size_t{128});
    const std::size_t positions = GENERATE(std::size_t{1}, std::size_t{7}, std::size_t{9}, std::size_t{300});
    INFO("head_dim " << head_dim << ", positions " << positions);
    const std::size_t stride = head_dim * 3;  // rows of several KV heads, like the cache
    std::vector<float> q(head_dim), keys(positions * stride), values(positions * stride);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = specdec::detail::synthetic_normal(1, i);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = specdec::detail::synthetic_normal(2, i);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = specdec::detail::synthetic_normal(3, i);
    std::vector<float> scores(positions), fast(head_dim), scalar(head_dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    specdec::cpu::attend(q.data(), keys.data(), values.data(), stride, positions, head_dim, scale, scores.data(), fast.data());
    specdec::cpu::detail::attend_scalar(q.data(), keys.data(), values.data(), stride, positions, head_dim, scale, scores.data(),
                                        scalar.data());
    // Outputs are convex combinations of N(0, 1) values; the vector exp is within ~2e-7 relative.
    CHECK(specdec::test::max_abs_difference(fast, scalar) < 1e-5f);
}
