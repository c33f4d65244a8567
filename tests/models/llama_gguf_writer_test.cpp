// llama_gguf_writer(): what it writes loads back as the same model, for the
// llama layout and for what only the qwen2 key and the optional tensors carry.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/models/llama_gguf_writer.hpp"
#include "specdec/models/synthetic.hpp"

namespace {

using specdec::LlamaModel;
using specdec::LlamaWeights;
using specdec::Token;

// Writes `weights`, loads the file back and returns every logits row of the
// loaded model for `tokens`, with the loaded weights for inspection.
struct Reloaded {
    std::vector<std::vector<float>> logits;
    LlamaWeights weights;
};

Reloaded write_and_reload(specdec::gguf::Writer writer, const std::vector<Token>& tokens) {
    specdec::test::TemporaryFile file("writer-round-trip.gguf");
    writer.write(file.path);
    auto opened = std::make_shared<const specdec::gguf::File>(specdec::gguf::File::open(file.path));
    LlamaWeights loaded = specdec::llama_weights_from_gguf(opened);
    Reloaded result{{}, loaded};
    LlamaModel model(std::move(loaded), {.threads = 1});
    result.logits = specdec::test::copy_rows(model.forward(tokens));
    return result;
}

std::vector<std::vector<float>> logits_of(const LlamaWeights& weights, const std::vector<Token>& tokens) {
    LlamaModel model(LlamaWeights(weights), {.threads = 1});
    return specdec::test::copy_rows(model.forward(tokens));
}

}  // namespace

TEST_CASE("a model written by llama_gguf_writer loads back with bitwise the same logits", "[model]") {
    const LlamaModel source = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    const LlamaWeights& weights = source.weights();
    const std::vector<Token> tokens{1, 17, 5, 300, 42, 9};
    const auto expected = logits_of(weights, tokens);

    SECTION("untied head: output.weight is written and read back") {
        REQUIRE_FALSE(weights.tied_output());
        const Reloaded reloaded = write_and_reload(specdec::llama_gguf_writer(weights, "round-trip"), tokens);
        CHECK_FALSE(reloaded.weights.tied_output());
        CHECK(reloaded.logits == expected);
    }
    SECTION("without output.weight the loaded head is the token embedding") {
        const Reloaded reloaded =
            write_and_reload(specdec::llama_gguf_writer(weights, "tied", /*include_output=*/false), tokens);
        CHECK(reloaded.weights.tied_output());
        LlamaWeights tied = weights;
        tied.output = tied.token_embedding;
        CHECK(reloaded.logits == logits_of(tied, tokens));
        CHECK(reloaded.logits != expected);
    }
    SECTION("qwen2 layout, attention biases, linear RoPE scaling and frequency factors survive the trip") {
        LlamaWeights edited = weights;
        specdec::LlamaConfig& c = edited.config;
        c.rope_style = specdec::RopeStyle::halves;
        c.rope_linear_scale = 2.0f;
        c.rope_frequency_factors.assign(c.rotary_dim() / 2, 1.0f);
        for (std::size_t i = 0; i < c.rope_frequency_factors.size(); ++i)
            c.rope_frequency_factors[i] = 1.0f + 0.25f * static_cast<float>(i % 3);
        std::size_t seed = 0;
        for (specdec::LlamaLayerWeights& layer : edited.layers) {
            for (std::vector<float>* bias : {&layer.query_bias, &layer.key_bias, &layer.value_bias}) {
                bias->resize(bias == &layer.query_bias ? c.embedding_dim : c.kv_dim());
                for (float& b : *bias) b = 0.05f * specdec::detail::synthetic_normal(99, seed++);
            }
        }
        const auto edited_logits = logits_of(edited, tokens);
        REQUIRE(edited_logits != expected);  // every edit changes the computation, so losing one would show
        const Reloaded reloaded = write_and_reload(specdec::llama_gguf_writer(edited, "qwen2-like"), tokens);
        CHECK(reloaded.weights.config.rope_style == specdec::RopeStyle::halves);
        CHECK(reloaded.weights.config.rope_linear_scale == 2.0f);
        CHECK(reloaded.weights.config.rope_frequency_factors == c.rope_frequency_factors);
        CHECK(reloaded.weights.layers.front().key_bias == edited.layers.front().key_bias);
        CHECK(reloaded.logits == edited_logits);
    }
}
