// Whole generations on the GPU through the library's decoders.
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/synthetic.hpp"
#include "specdec/specdec.hpp"

using specdec::Token;
using specdec::cuda::CudaLlamaModel;
using specdec::cuda::Precision;

namespace {
const specdec::SyntheticShape kTiny = specdec::synthetic_shape("tiny");
}

// f32 keeps batched (verification) and single-token (autoregressive) logits
// within ~1e-5 of each other, far below the gap between the two best logits
// of these rows, so the argmaxes agree and the outputs must be identical.
TEST_CASE("greedy speculative decoding on the GPU equals greedy autoregressive decoding on the GPU", "[cuda][decoding][greedy]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> prompt{1, 20, 300, 4};
    CudaLlamaModel reference = CudaLlamaModel::synthetic(kTiny, 6, 0, {.precision = Precision::f32});
    specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 64});
    const std::vector<Token> expected = autoregressive.generate(prompt).tokens;
    REQUIRE(expected.size() == 64);

    for (const std::size_t k : {1, 3, 6}) {
        INFO("k = " << k);
        CudaLlamaModel target = CudaLlamaModel::synthetic(kTiny, 6, 0, {.precision = Precision::f32});
        CudaLlamaModel draft = CudaLlamaModel::synthetic(kTiny, 6, kTiny.early_exit_layers, {.precision = Precision::f32});
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                            {.draft_tokens = k, .sampling = {.temperature = 0.0}, .max_new_tokens = 64});
        const auto result = decoder.generate(prompt);
        INFO("acceptance " << result.stats.acceptance_rate());
        CHECK(result.tokens == expected);
    }

    // A point-mass drafter verified on the device.
    CudaLlamaModel target = CudaLlamaModel::synthetic(kTiny, 6, 0, {.precision = Precision::f32});
    specdec::PromptLookupDrafter lookup;
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(lookup), {.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 64});
    CHECK(decoder.generate(prompt).tokens == expected);
}

TEST_CASE("a CPU draft model can drive a GPU target", "[cuda][decoding][greedy]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> prompt{2, 4, 8};
    CudaLlamaModel reference = CudaLlamaModel::synthetic(kTiny, 8, 0, {.precision = Precision::f32});
    specdec::AutoregressiveDecoder autoregressive(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 40});
    const std::vector<Token> expected = autoregressive.generate(prompt).tokens;

    specdec::LlamaModel cpu_draft = specdec::make_synthetic_draft({.size = "tiny", .seed = 8, .threads = 2});
    CudaLlamaModel target = CudaLlamaModel::synthetic(kTiny, 8, 0, {.precision = Precision::f32});
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(cpu_draft),
                                        {.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 40});
    CHECK(decoder.generate(prompt).tokens == expected);
}

TEST_CASE("sampled speculative decoding on the GPU runs to the requested length with draft acceptance", "[cuda][decoding]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> prompt{1, 2, 3};
    for (const specdec::SamplingOptions& sampling :
         {specdec::SamplingOptions{.temperature = 1.0}, specdec::SamplingOptions{.temperature = 0.8, .top_k = 40, .top_p = 0.95}}) {
        CudaLlamaModel target = CudaLlamaModel::synthetic(kTiny, 3, 0, {.precision = Precision::f16});
        CudaLlamaModel draft = CudaLlamaModel::synthetic(kTiny, 3, kTiny.early_exit_layers, {.precision = Precision::f16});
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                            {.draft_tokens = 4, .sampling = sampling, .seed = 5, .max_new_tokens = 100});
        const auto result = decoder.generate(prompt);
        CHECK(result.tokens.size() == 100);
        for (const Token t : result.tokens) CHECK((t >= 0 && static_cast<std::size_t>(t) < target.vocab_size()));
        CHECK(result.stats.draft_tokens_accepted > 0);
        // Same seed, same output: the device path is deterministic.
        CudaLlamaModel target_again = CudaLlamaModel::synthetic(kTiny, 3, 0, {.precision = Precision::f16});
        CudaLlamaModel draft_again = CudaLlamaModel::synthetic(kTiny, 3, kTiny.early_exit_layers, {.precision = Precision::f16});
        specdec::SpeculativeDecoder again(specdec::target(target_again), specdec::draft(draft_again),
                                          {.draft_tokens = 4, .sampling = sampling, .seed = 5, .max_new_tokens = 100});
        CHECK(again.generate(prompt).tokens == result.tokens);
    }
}
