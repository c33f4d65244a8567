// specdec-bench --export-gguf writes the synthetic models as GGUF files that
// other engines load: read back, they must be the same models (same logits)
// and carry a tokenizer of the model's vocabulary size.
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/catch.hpp"

#include "../../benchmarks/gguf_export.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"

using namespace specdec;

TEST_CASE("a synthetic model exported as GGUF loads back with the same logits and a tokenizer of its vocabulary",
          "[bench][gguf]") {
    const SyntheticDraftKind kind = GENERATE(SyntheticDraftKind::early_exit_q8, SyntheticDraftKind::quantized_q4);
    SyntheticPair pair = make_synthetic_pair({.size = "tiny", .seed = 4, .threads = 2}, kind);
    const std::filesystem::path folder =
        std::filesystem::temp_directory_path() / ("specdec-export-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(folder);
    const std::vector<Token> tokens = {1, 17, 300, 5, 42, 511, 260, 9, 33, 128, 77, 2, 64, 400, 3, 8, 250, 12};
    for (LlamaModel* model : {&pair.target, &pair.draft}) {
        INFO(model->name());
        const std::filesystem::path path = folder / (model->name() + ".gguf");
        bench::write_llama_gguf(model->weights(), model->name(), path);
        LlamaModel loaded = LlamaModel::from_gguf(path, {.threads = 2});
        CHECK(loaded.name() == model->name());
        REQUIRE(loaded.vocab_size() == model->vocab_size());
        const LogitsView expected = model->forward(tokens);
        const std::vector<float> expected_values(expected.data, expected.data + expected.rows * expected.row_stride);
        const LogitsView actual = loaded.forward(tokens);
        REQUIRE(actual.rows == tokens.size());
        // The same bytes through the same kernels: the same floats.
        CHECK(std::equal(expected_values.begin(), expected_values.end(), actual.data));

        const Tokenizer tokenizer = Tokenizer::from_gguf(gguf::File::open(path));
        CHECK(tokenizer.vocab_size() == model->vocab_size());
        const std::vector<Token> encoded = tokenizer.encode("any text, even \xC3\xA9", /*add_bos=*/true);
        CHECK(encoded.front() == 1);
        CHECK(tokenizer.decode(encoded) == "any text, even \xC3\xA9");
    }
    std::filesystem::remove_all(folder);
}

TEST_CASE("exporting a vocabulary too small for the byte tokens is an error naming the size", "[bench][gguf]") {
    gguf::Writer writer;
    CHECK_THROWS_WITH(bench::add_synthetic_vocabulary(writer, 100), Catch::Contains("vocabulary of 100 tokens"));
}
