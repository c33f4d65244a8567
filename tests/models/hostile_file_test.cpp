// Regression tests for model files found by the gguf_model fuzz target
// (fuzz/fuzz_gguf_model.cpp): hyperparameters that would make the loader
// allocate absurd amounts are Errors naming the value, before any allocation.
#include <cstddef>
#include <limits>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/models/kv_cache.hpp"
#include "specdec/models/llama_gguf.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"

using specdec::LlamaModel;

TEST_CASE("a GGUF block count beyond the file's tensors is an Error, not a huge allocation", "[model][fuzz-regression]") {
    // The fuzzer's file claimed 2^34 layers; the loader resized its layer list first.
    const LlamaModel tiny = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    specdec::LlamaWeights weights = tiny.weights();
    weights.config.layer_count = 4'000'000'000u;
    specdec::test::TemporaryFile file("many-layers.gguf");
    specdec::test::llama_gguf_writer(weights).write(file.path);
    CHECK_THROWS_WITH(LlamaModel::from_gguf(file.path),
                      Catch::Contains("llama.block_count = 4000000000 but the file holds only 39 tensors"));
}

TEST_CASE("a KV cache whose size overflows is an Error naming its dimensions", "[model][fuzz-regression]") {
    const std::size_t huge = std::numeric_limits<std::size_t>::max() / 16;
    CHECK_THROWS_WITH(specdec::KvCache(4, huge, 2, 24), Catch::Contains("KV cache of " + std::to_string(huge) + " positions") &&
                                                             Catch::Contains("the size overflows"));
    CHECK_NOTHROW(specdec::KvCache(4, 16, 2, 24));
}
