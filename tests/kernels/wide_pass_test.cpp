// Wide passes (prompt prefill, wide verification) run as blocked matrix
// products instead of the matrix-vector tiles; their logits must match the
// one-token passes for every storage type, and the two matmul paths must agree
// on the same inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/backends/cpu/attention.hpp"
#include "specdec/backends/cpu/gemm.hpp"
#include "specdec/backends/cpu/matmul.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/platform/x86.hpp"
#include "support/catch.hpp"

namespace {

using specdec::LlamaModel;
using specdec::Token;
using specdec::WeightType;
using specdec::test::relative_difference;

std::vector<Token> prompt_tokens(std::size_t count, std::size_t vocab) {
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < count; ++i) tokens.push_back(static_cast<Token>((i * 97 + 5) % vocab));
    return tokens;
}

specdec::WeightMatrix random_matrix(WeightType type, std::size_t rows, std::size_t cols, std::uint64_t seed,
                                    std::vector<std::byte>& storage) {
    const std::size_t row_bytes = specdec::weight_row_bytes(type, cols);
    storage.resize(rows * row_bytes);
    std::vector<float> values(cols);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t k = 0; k < cols; ++k) values[k] = specdec::detail::synthetic_normal(seed, r * cols + k);
        specdec::cpu::quantize_row(type, values.data(), cols, storage.data() + r * row_bytes);
    }
    return specdec::WeightMatrix{type, rows, cols, storage.data()};
}

}  // namespace

TEST_CASE("passes of up to 512 tokens give the logits of one-token passes for every storage type", "[model][wide]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0);
    INFO("storage " << specdec::weight_type_name(storage));
    // The tiny shape: grouped-query attention (4 heads over 2 KV heads), a 512-position context.
    LlamaModel model = specdec::make_synthetic_target({.size = "tiny", .seed = 5, .target_storage = storage, .threads = 2});
    const std::size_t context = model.context_length();
    REQUIRE(context == 512);
    const std::vector<Token> tokens = prompt_tokens(context, model.vocab_size());
    const auto reference = specdec::test::logits_one_by_one(model, tokens);
    for (const std::size_t n : {1, 7, 8, 9, 17, 33, 128, 512}) {
        // From an empty cache, and (when it fits) after a prefix fed in one pass.
        for (const int placement : {0, 1}) {
            const std::size_t prefix = placement == 0 ? 0 : context - n;
            if (placement == 1 && prefix == 0) continue;
            INFO(n << " tokens after " << prefix << " cached positions");
            model.truncate(0);
            if (prefix > 0) model.forward(std::span<const Token>(tokens.data(), prefix));
            const auto view = model.forward(std::span<const Token>(tokens.data() + prefix, n));
            REQUIRE(view.rows == n);
            float worst = 0.0f;
            for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, relative_difference(view.row(i), reference[prefix + i]));
            CHECK(worst < 1e-4f);
        }
    }
}

TEST_CASE("a model mixing dense and block-quantised matrices gives wide passes bitwise equal to one-token passes",
          "[model][wide]") {
    // Q8_0 matrices with an F16 ffn_down, as llama.cpp writes when a row length
    // is not a multiple of the 32-value block. The F16 products feed the 8-bit
    // activations of the next layer's Q8_0 products, so a blocked product,
    // equal only up to float rounding, would now and then move a value by a
    // whole quantisation step.
    const LlamaModel quantized =
        specdec::make_synthetic_target({.size = "tiny", .seed = 5, .target_storage = WeightType::q8_0, .threads = 2});
    specdec::LlamaWeights weights = quantized.weights();
    // Each layer's ffn_down re-encoded in F16.
    std::vector<std::vector<std::byte>> dense_storage(weights.layers.size());
    for (std::size_t l = 0; l < weights.layers.size(); ++l) {
        specdec::WeightMatrix& down = weights.layers[l].ffn_down;
        const std::size_t row_bytes = specdec::weight_row_bytes(WeightType::f16, down.cols);
        dense_storage[l].resize(down.rows * row_bytes);
        std::vector<float> values(down.cols);
        for (std::size_t r = 0; r < down.rows; ++r) {
            specdec::cpu::dequantize_row(down, r, values.data());
            specdec::cpu::quantize_row(WeightType::f16, values.data(), down.cols, dense_storage[l].data() + r * row_bytes);
        }
        down = specdec::WeightMatrix{WeightType::f16, down.rows, down.cols, dense_storage[l].data()};
    }
    LlamaModel model(std::move(weights), {.threads = 2});
    const std::vector<Token> tokens = prompt_tokens(64, model.vocab_size());
    const auto reference = specdec::test::logits_one_by_one(model, tokens);
    model.truncate(0);
    const auto view = model.forward(tokens);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        INFO("row " << i);
        CHECK(specdec::test::max_abs_difference(view.row(i), reference[i]) == 0.0f);
    }
}

TEST_CASE("forward_last returns the last row of forward and leaves the same cache", "[model][wide]") {
    LlamaModel model = specdec::make_synthetic_target({.size = "tiny", .seed = 2, .threads = 2});
    const std::vector<Token> tokens = prompt_tokens(100, model.vocab_size());
    const auto all = specdec::test::copy_rows(model.forward(tokens));
    const std::vector<Token> next = {3, 4};
    const auto continued = specdec::test::copy_rows(model.forward(next));
    model.truncate(0);
    const auto last = model.forward_last(tokens);
    REQUIRE(last.rows == 1);
    CHECK(relative_difference(last.row(0), all.back()) < 1e-5f);
    CHECK(model.cached_tokens() == tokens.size());
    const auto after = model.forward(next);
    CHECK(relative_difference(after.row(1), continued[1]) < 1e-5f);
}

TEST_CASE("the blocked matrix product and the tile path agree on the same inputs for every dense type", "[model][wide]") {
    const WeightType type = GENERATE(WeightType::f32, WeightType::f16, WeightType::bf16);
    // Depths below and above one k-slice, with a tail beyond the 32-value chunks;
    // row counts that are not multiples of the register tile or of a task.
    const std::size_t cols = GENERATE(std::size_t{96}, std::size_t{300}, std::size_t{544});
    INFO(specdec::weight_type_name(type) << ", " << cols << " values per row");
    std::vector<std::byte> storage_a, storage_b;
    const specdec::WeightMatrix a = random_matrix(type, 101, cols, 11, storage_a);
    const specdec::WeightMatrix b = random_matrix(type, 7, cols, 12, storage_b);
    specdec::cpu::ThreadPool pool(2);
    for (const std::size_t n : {1, 5, 9, 16, 17, 40}) {
        INFO(n << " columns");
        std::vector<float> x(n * cols + 3);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(13, i);
        const std::size_t x_stride = cols + 3 * (n > 1);  // columns need not be contiguous
        if (n > 1) x.resize((n - 1) * x_stride + cols);
        // One target overwritten, one accumulated, in one group (as Q, K, V are).
        std::vector<float> tiles_a(n * a.rows), wide_a(n * a.rows), tiles_b(n * b.rows, 0.5f), wide_b(n * b.rows, 0.5f);
        const specdec::cpu::MatmulTarget tile_targets[] = {{&a, tiles_a.data(), a.rows, false}, {&b, tiles_b.data(), b.rows, true}};
        const specdec::cpu::MatmulTarget wide_targets[] = {{&a, wide_a.data(), a.rows, false}, {&b, wide_b.data(), b.rows, true}};
        specdec::cpu::detail::matmul_tiles(pool, tile_targets, x.data(), x_stride, n);
        specdec::cpu::detail::matmul_wide(pool, wide_targets, x.data(), x_stride, n);
        CHECK(relative_difference(wide_a, tiles_a) < 1e-5f);
        CHECK(relative_difference(wide_b, tiles_b) < 1e-5f);
    }
}

TEST_CASE("the blocked product gives the same bits on its AVX-512 and AVX2 tiles and agrees with the scalar ones", "[model][wide]") {
    // With AVX-512 a pair of strips meets a pair of whole panels in 512-bit
    // registers; leftovers take the AVX2 tiles. Every element must be the same
    // FMA chain whichever tile computed it, or a model's logits would depend
    // on the CPU and on the pass width. Rows and columns cover whole pairs,
    // an odd panel, a partial panel, an odd strip and a partial strip.
    using specdec::cpu::detail::GemmTiles;
    const std::size_t depth = 37;
    for (const std::size_t rows : {1, 16, 31, 32, 48, 64, 77}) {
        for (const std::size_t columns : {1, 6, 7, 12, 13, 17, 18, 30}) {
            specdec::cpu::detail::PackedRows a;
            specdec::cpu::detail::pack_rows_scalar(rows, 0, depth, a, [](std::size_t r, std::size_t k) {
                return specdec::detail::synthetic_normal(21, r * 1000 + k);
            });
            std::vector<float> x(columns * depth);
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::detail::synthetic_normal(22, i);
            specdec::cpu::detail::PackedColumns packed;
            specdec::cpu::detail::pack_columns(x.data(), depth, columns, depth, packed);
            for (const bool add : {false, true}) {
                auto run = [&](GemmTiles tiles) {
                    std::vector<float> y(columns * rows);
                    for (std::size_t i = 0; i < y.size(); ++i) y[i] = 0.125f * static_cast<float>(i % 5);
                    specdec::cpu::detail::gemm_packed(a, packed, 0, y.data(), rows, add, tiles);
                    return y;
                };
                INFO(rows << " rows, " << columns << " columns, add " << add);
                const std::vector<float> scalar = run(GemmTiles::scalar);
                float largest = 0.0f;
                for (const float v : scalar) largest = std::max(largest, std::abs(v));
                REQUIRE(largest > 0.5f);  // the product is not trivially zero
#if SPECDEC_X86
                if (specdec::platform::avx2_available()) {
                    const std::vector<float> avx2 = run(GemmTiles::avx2);
                    CHECK(std::equal(avx2.begin(), avx2.end(), scalar.begin(), [](float p, float q) {
                        return std::abs(p - q) <= 1e-5f * (1.0f + std::abs(q));  // FMA against separate rounding
                    }));
                    if (specdec::platform::evex_available()) {
                        const std::vector<float> evex = run(GemmTiles::evex);
                        CHECK(std::memcmp(evex.data(), avx2.data(), evex.size() * sizeof(float)) == 0);
                    }
                }
#endif
            }
        }
    }
}

TEST_CASE("the blocked matrix product refuses block-quantised weights, which need the integer kernels", "[model][wide]") {
    const WeightType type = GENERATE(WeightType::q8_0, WeightType::q4_0);
    std::vector<std::byte> storage;
    const specdec::WeightMatrix w = random_matrix(type, 8, 64, 3, storage);
    std::vector<float> x(20 * 64, 1.0f), y(20 * 8);
    const specdec::cpu::MatmulTarget target{&w, y.data(), 8, false};
    specdec::cpu::ThreadPool pool(1);
    CHECK_THROWS_AS(specdec::cpu::detail::matmul_wide(pool, std::span(&target, 1), x.data(), 64, 20), specdec::Error);
}

TEST_CASE("attention of a block of queries as matrix products equals the per-query kernel", "[model][wide]") {
    const std::size_t head_dim = GENERATE(std::size_t{24}, std::size_t{64});
    // 300: the value product runs over more positions than one depth slice.
    const std::size_t first_position = GENERATE(std::size_t{0}, std::size_t{45}, std::size_t{300});
    const std::size_t queries = 19, positions = first_position + queries, stride = head_dim + 8;
    INFO("head_dim " << head_dim << ", first position " << first_position);
    std::vector<float> q(queries * head_dim * 2), keys(positions * stride), values(positions * stride);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = specdec::detail::synthetic_normal(21, i);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = specdec::detail::synthetic_normal(22, i);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = specdec::detail::synthetic_normal(23, i);
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> block(queries * head_dim), single(queries * head_dim), scores(positions);
    specdec::cpu::attend_block(q.data(), 2 * head_dim, queries, first_position, keys.data(), values.data(), stride, head_dim,
                               scale, block.data(), head_dim);
    for (std::size_t i = 0; i < queries; ++i) {
        specdec::cpu::attend(&q[i * 2 * head_dim], keys.data(), values.data(), stride, first_position + i + 1, head_dim, scale,
                             scores.data(), &single[i * head_dim]);
    }
    CHECK(relative_difference(block, single) < 1e-5f);
}
