// Whole generations on the GPU through the library's decoders.
#include <algorithm>
#include <cstddef>
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
                                            {.draft_tokens = 4, .sampling = sampling, .seed = 5, .max_new_tokens = 100},
                                            specdec::TokenwiseRejection{}, specdec::FixedLength{});
        const auto result = decoder.generate(prompt);
        CHECK(result.tokens.size() == 100);
        for (const Token t : result.tokens) CHECK((t >= 0 && static_cast<std::size_t>(t) < target.vocab_size()));
        CHECK(result.stats.draft_tokens_accepted > 0);
        // Same seed, same output: the device path is deterministic.
        CudaLlamaModel target_again = CudaLlamaModel::synthetic(kTiny, 3, 0, {.precision = Precision::f16});
        CudaLlamaModel draft_again = CudaLlamaModel::synthetic(kTiny, 3, kTiny.early_exit_layers, {.precision = Precision::f16});
        specdec::SpeculativeDecoder again(specdec::target(target_again), specdec::draft(draft_again),
                                          {.draft_tokens = 4, .sampling = sampling, .seed = 5, .max_new_tokens = 100},
                                          specdec::TokenwiseRejection{}, specdec::FixedLength{});
        CHECK(again.generate(prompt).tokens == result.tokens);
    }
}

// The batched decoder over multi-sequence CUDA models: requests of different
// prompts, lengths and draft lengths, more of them than slots (so that some
// are admitted as others retire), each decoded greedily with batch mates in
// one forward_batch per step. f32, as above: a request's rows in a pass of
// another width differ from its single-sequence rows by fp32 rounding
// (multi_sequence_test.cu), far below the gap between the two best logits,
// so every request must emit its own autoregressive tokens. The models share
// one copy of the device weights (sharing_weights).
TEST_CASE("greedy batched decoding on the GPU gives each request its own autoregressive tokens", "[cuda][decoding][greedy][multi_sequence]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    constexpr std::size_t kSlots = 4, kRequests = 10;
    CudaLlamaModel reference = CudaLlamaModel::synthetic(kTiny, 6, 0, {.precision = Precision::f32});
    CudaLlamaModel draft_weights = CudaLlamaModel::synthetic(kTiny, 6, kTiny.early_exit_layers, {.precision = Precision::f32});

    std::vector<std::vector<Token>> prompts;
    std::vector<specdec::DecodingOptions> options;
    std::vector<std::vector<Token>> expected;
    for (std::size_t i = 0; i < kRequests; ++i) {
        std::vector<Token> prompt;
        for (std::size_t t = 0; t < 2 + (i * 5) % 11; ++t) prompt.push_back(static_cast<Token>((i * 131 + t * 17 + 3) % kTiny.config.vocab_size));
        prompts.push_back(prompt);
        options.push_back({.draft_tokens = 1 + i % 5, .sampling = {.temperature = 0.0}, .seed = i, .max_new_tokens = 12 + (i * 7) % 29});
        specdec::AutoregressiveDecoder<CudaLlamaModel> alone(reference, options.back());
        expected.push_back(alone.generate(prompt).tokens);
        REQUIRE(expected.back().size() == options.back().max_new_tokens);
    }

    auto check_batched = [&](auto& decoder, bool drafts) {
        std::vector<specdec::RequestId> ids;
        for (std::size_t i = 0; i < kRequests; ++i) ids.push_back(decoder.submit(prompts[i], options[i]));
        std::size_t widest = 0, drafted = 0;
        while (!decoder.idle()) {
            const specdec::BatchStepReport report = decoder.step();
            widest = std::max(widest, report.sequences);
            drafted += report.drafts;
        }
        CHECK(widest == kSlots);
        CHECK((drafted > 0) == drafts);
        std::size_t finished = 0;
        for (const specdec::RequestResult& result : decoder.take_finished()) {
            const std::size_t i = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), result.id) - ids.begin());
            REQUIRE(i < kRequests);
            INFO("request " << i << ": " << result.error);
            REQUIRE(result.status == specdec::RequestStatus::finished);
            CHECK(result.generation.tokens == expected[i]);
            ++finished;
        }
        CHECK(finished == kRequests);
    };
    CudaLlamaModel targets = reference.sharing_weights({.precision = Precision::f32, .max_context = 128, .sequences = kSlots});
    CudaLlamaModel drafts = draft_weights.sharing_weights({.precision = Precision::f32, .max_context = 128, .sequences = kSlots});
    {
        INFO("draft model, AutoBatchLength");
        specdec::BatchedDecoder<CudaLlamaModel, CudaLlamaModel> decoder(specdec::target(targets), specdec::draft(drafts));
        check_batched(decoder, true);
    }
    {
        INFO("no drafts");
        specdec::NoDrafts none;
        specdec::BatchedDecoder<CudaLlamaModel, specdec::NoDrafts> decoder(specdec::target(targets), specdec::draft(none));
        check_batched(decoder, false);
    }
}
