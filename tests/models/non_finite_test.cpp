// Non-finite weights and activations have defined behaviour: the quantisers
// turn a block holding NaN or inf into one that dequantises to NaN (a float ->
// int8 conversion of NaN would be undefined), NaN flows through every kernel
// into the logits, and decoding reports it as a specdec::Error naming the model
// and the position. LlamaOptions::check_tensors finds it at load time instead,
// naming the tensor. Under the sanitizer build (scripts/test.sh) UBSan checks
// every float -> int conversion on these paths.
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/backends/cpu/quant_matmul.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"

namespace {

using specdec::LlamaModel;
using specdec::LlamaWeights;
using specdec::Token;
using specdec::WeightType;
using specdec::cpu::kQuantBlock;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> block_with(float special, std::size_t at) {
    std::vector<float> values(kQuantBlock);
    for (std::size_t i = 0; i < kQuantBlock; ++i) values[i] = 0.1f * static_cast<float>(i) - 1.0f;
    values[at] = special;
    return values;
}

std::vector<float> round_trip(WeightType type, const std::vector<float>& values) {
    std::vector<std::byte> bytes(specdec::weight_row_bytes(type, values.size()));
    specdec::cpu::quantize_row(type, values.data(), values.size(), bytes.data());
    const specdec::WeightMatrix w{type, 1, values.size(), bytes.data()};
    std::vector<float> out(values.size());
    specdec::cpu::dequantize_row(w, 0, out.data());
    return out;
}

// The tiny synthetic model with every matrix in `type` and one value of the
// first layer's attention norm replaced: activations become `special` from
// the first layer on.
LlamaModel model_with_bad_norm(WeightType type, float special, bool check_tensors) {
    const LlamaModel clean = specdec::make_synthetic_draft(
        {.size = "tiny", .threads = 1}, type == WeightType::q8_0 ? specdec::SyntheticDraftKind::quantized_q8 : specdec::SyntheticDraftKind::quantized_q4);
    LlamaWeights weights = clean.weights();
    weights.layers[0].attention_norm[3] = special;
    return LlamaModel(std::move(weights), {.threads = 1, .name = "bad-norm", .check_tensors = check_tensors});
}

}  // namespace

TEST_CASE("the Q8 activation quantiser stores a block holding NaN or inf as zeros with a NaN scale", "[model][non-finite]") {
    for (const float special : {kNaN, kInf, -kInf}) {
        std::vector<float> x = block_with(0.5f, 0);
        const std::vector<float> bad = block_with(special, 7);
        x.insert(x.end(), bad.begin(), bad.end());
        specdec::cpu::Q8Activations q;
        specdec::cpu::quantize_activations(x.data(), 2 * kQuantBlock, 1, 2 * kQuantBlock, q);
        CHECK(std::isfinite(q.scale(0, 0)));
        CHECK(std::isnan(q.scale(0, 1)));
        for (std::size_t i = 0; i < kQuantBlock; ++i) CHECK(q.block(0, 1)[i] == 0);
    }
    // Subnormal magnitudes would make 1 / scale overflow: the block is zeros.
    std::vector<float> tiny(kQuantBlock, 0.0f);
    tiny[5] = std::numeric_limits<float>::denorm_min();
    tiny[6] = -1e-38f;
    specdec::cpu::Q8Activations q;
    specdec::cpu::quantize_activations(tiny.data(), kQuantBlock, 1, kQuantBlock, q);
    CHECK(q.scale(0, 0) == 0.0f);
    for (std::size_t i = 0; i < kQuantBlock; ++i) CHECK(q.block(0, 0)[i] == 0);
}

TEST_CASE("Q8_0 and Q4_0 weight blocks holding NaN or inf dequantise to NaN; tiny blocks to zeros", "[model][non-finite]") {
    for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        for (const float special : {kNaN, kInf, -kInf}) {
            const std::vector<float> out = round_trip(type, block_with(special, 11));
            for (const float v : out) CHECK(std::isnan(v));
        }
        std::vector<float> tiny(kQuantBlock, 1e-39f);
        for (const float v : round_trip(type, tiny)) CHECK(v == 0.0f);
        // Ordinary blocks are unchanged by the guard: the value of largest magnitude round-trips exactly.
        const std::vector<float> ordinary = block_with(-3.0f, 0);
        CHECK(round_trip(type, ordinary)[0] == Approx(-3.0f).epsilon(1e-3));
    }
}

TEST_CASE("a quantised model whose activations turn NaN or inf computes NaN logits, and decoding names model and position",
          "[model][non-finite]") {
    const std::vector<Token> prompt{1, 17, 230};
    for (const WeightType type : {WeightType::q8_0, WeightType::q4_0}) {
        for (const float special : {kNaN, kInf}) {
            INFO(specdec::weight_type_name(type) << ", norm value " << special);
            LlamaModel bad = model_with_bad_norm(type, special, /*check_tensors=*/false);
            const specdec::LogitsView logits = bad.forward(prompt);
            for (std::size_t r = 0; r < logits.rows; ++r)
                for (const float v : logits.row(r)) REQUIRE(std::isnan(v));
            bad.truncate(0);

            LlamaModel target = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
            for (const double temperature : {0.0, 1.0}) {
                const specdec::DecodingOptions options{.draft_tokens = 3, .sampling = {.temperature = temperature}, .max_new_tokens = 8};
                specdec::SpeculativeDecoder as_draft(specdec::target(target), specdec::draft(bad), options);
                CHECK_THROWS_WITH(as_draft.generate(prompt), Catch::Contains("draft model logits at position 3 contain NaN"));
                specdec::AutoregressiveDecoder as_target(bad, options);
                CHECK_THROWS_WITH(as_target.generate(prompt), Catch::Contains("target model logits at position 3 contain NaN"));
            }
        }
    }
}

TEST_CASE("check_tensors rejects a model holding NaN or inf at load time, naming the model, tensor, row and column",
          "[model][non-finite]") {
    CHECK_THROWS_WITH(model_with_bad_norm(WeightType::q8_0, kNaN, /*check_tensors=*/true),
                      Catch::Contains("bad-norm: tensor blk.0.attn_norm holds nan at row 0, column 3: expected finite weights"));

    // An infinity inside a Q8_0 matrix: its block dequantises to NaN, and the check says where.
    const LlamaModel clean = specdec::make_synthetic_draft({.size = "tiny", .threads = 1}, specdec::SyntheticDraftKind::quantized_q8);
    LlamaWeights weights = clean.weights();
    const specdec::WeightMatrix& query = weights.layers[1].query;
    auto bytes = std::make_shared<std::vector<std::byte>>(query.data, query.data + query.byte_size());
    std::vector<float> row(query.cols);
    specdec::cpu::dequantize_row(query, 5, row.data());
    row[40] = kInf;
    specdec::cpu::quantize_row(WeightType::q8_0, row.data(), row.size(), bytes->data() + 5 * query.row_bytes());
    weights.layers[1].query.data = bytes->data();
    weights.storage.push_back(bytes);
    CHECK_THROWS_WITH(LlamaModel(weights, {.threads = 1, .name = "bad-query", .check_tensors = true}),
                      Catch::Contains("bad-query: tensor blk.1.attn_q holds nan at row 5, column 32"));
    // Without the check the model loads; a clean model passes the check.
    CHECK_NOTHROW(LlamaModel(weights, {.threads = 1}));
    CHECK_NOTHROW(LlamaModel(clean.weights(), {.threads = 1, .check_tensors = true}));
}
