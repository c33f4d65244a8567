// Invalid input is reported with specdec::Error naming the bad value, and a
// rejected forward leaves the model unchanged.
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"

namespace {

using specdec::LlamaModel;
using specdec::Token;

LlamaModel tiny(std::size_t max_context = 0) {
    return specdec::make_synthetic_target({.size = "tiny", .max_context = max_context});
}

}  // namespace

TEST_CASE("forward rejects a token id outside the vocabulary and changes nothing", "[model]") {
    LlamaModel model = tiny();
    model.forward(std::vector<Token>{1, 2, 3});
    const std::vector<Token> too_large = {4, 512};
    const std::vector<Token> negative = {-1};
    CHECK_THROWS_WITH(model.forward(too_large), Catch::Contains("token id 512") && Catch::Contains("[0, 512)"));
    CHECK_THROWS_WITH(model.forward(negative), Catch::Contains("token id -1"));
    CHECK(model.cached_tokens() == 3);
}

TEST_CASE("forward rejects tokens that would overflow the context", "[model]") {
    LlamaModel model = tiny(/*max_context=*/8);
    CHECK(model.context_length() == 8);
    model.forward(std::vector<Token>(6, 1));
    CHECK_THROWS_WITH(model.forward(std::vector<Token>(3, 1)), Catch::Contains("overflows the context length 8"));
    CHECK(model.cached_tokens() == 6);
    CHECK(model.forward(std::vector<Token>(2, 1)).rows == 2);  // exactly full is fine
    CHECK(model.cached_tokens() == 8);
}

TEST_CASE("truncate beyond the cached positions is an error", "[model]") {
    LlamaModel model = tiny();
    model.forward(std::vector<Token>{1, 2});
    CHECK_THROWS_AS(model.truncate(3), specdec::Error);
    CHECK(model.cached_tokens() == 2);
}

TEST_CASE("an empty forward returns no rows and changes nothing", "[model]") {
    LlamaModel model = tiny();
    CHECK(model.forward(std::span<const Token>{}).rows == 0);
    CHECK(model.cached_tokens() == 0);
}

TEST_CASE("a model written to GGUF loads back with identical logits, tied head included", "[model]") {
    const specdec::WeightType storage = GENERATE(specdec::WeightType::f32, specdec::WeightType::f16, specdec::WeightType::bf16,
                                                 specdec::WeightType::q8_0, specdec::WeightType::q4_0);
    INFO(specdec::weight_type_name(storage));
    LlamaModel original = specdec::make_synthetic_target({.size = "tiny", .target_storage = storage});
    specdec::test::TemporaryFile file("roundtrip.gguf");
    specdec::test::llama_gguf_writer(original.weights()).write(file.path);
    LlamaModel loaded = LlamaModel::from_gguf(file.path);
    CHECK(loaded.name() == "test-llama");
    const std::vector<Token> tokens = {1, 2, 3, 4, 100};
    const auto expected = specdec::test::copy_rows(original.forward(tokens));
    const auto actual = specdec::test::copy_rows(loaded.forward(tokens));
    for (std::size_t i = 0; i < tokens.size(); ++i) CHECK(expected[i] == actual[i]);

    specdec::test::TemporaryFile tied("tied.gguf");
    specdec::test::llama_gguf_writer(original.weights(), /*include_output=*/false).write(tied.path);
    LlamaModel tied_model = LlamaModel::from_gguf(tied.path);
    CHECK(tied_model.weights().tied_output());
    CHECK(tied_model.weight_bytes() < loaded.weight_bytes());
}

TEST_CASE("a GGUF file whose tensors disagree with its hyperparameters is rejected naming file and tensor", "[model]") {
    LlamaModel small = specdec::make_synthetic_target({.size = "tiny"});
    specdec::LlamaWeights weights = small.weights();
    specdec::test::TemporaryFile file("bad-shape.gguf");

    SECTION("a tensor of the wrong shape") {
        // attn_k of layer 2 with the full head count instead of the 2 KV heads.
        specdec::LlamaWeights bad = weights;
        bad.layers[2].key = bad.layers[2].query;
        specdec::test::llama_gguf_writer(bad).write(file.path);
        CHECK_THROWS_WITH(LlamaModel::from_gguf(file.path),
                          Catch::Contains("blk.2.attn_k.weight") && Catch::Contains(file.path.filename().string()));
    }
    SECTION("a missing tensor") {
        specdec::LlamaWeights bad = weights;
        bad.layers.pop_back();  // block_count still says 4: layer 3's tensors are absent
        specdec::test::llama_gguf_writer(bad).write(file.path);
        CHECK_THROWS_WITH(LlamaModel::from_gguf(file.path), Catch::Contains("missing tensor blk.3.attn_norm.weight"));
    }
    SECTION("a header that is not a llama model") {
        specdec::gguf::Writer writer;
        writer.add_string("general.architecture", "gpt2");
        writer.write(file.path);
        CHECK_THROWS_WITH(LlamaModel::from_gguf(file.path), Catch::Contains("\"gpt2\""));
    }
}
