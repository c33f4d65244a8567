// Availability and errors: every failure of the CUDA backend is a
// specdec::Error with a message that says what went wrong; nothing aborts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/models/synthetic.hpp"
#include "specdec/sampling/token_constraint.hpp"

using specdec::Token;
using specdec::cuda::CudaLlamaModel;

namespace {

// A constraint that allows everything: the device path must refuse any
// constraint before asking it anything.
class AllowEveryToken final : public specdec::TokenConstraint {
public:
    [[nodiscard]] std::string name() const override { return "allow-every-token"; }
    void reset() override {}
    void allowed(std::span<std::uint8_t> allowed) override { std::fill(allowed.begin(), allowed.end(), 1); }
    bool advance(Token) override { return true; }
    void rollback(std::size_t) override {}
};

// The message of require_candidate_stages_only, or "" if it accepts the options.
std::string device_refusal(const specdec::SamplingOptions& options) {
    try {
        specdec::cuda::detail::require_candidate_stages_only(options, "device verification");
    } catch (const specdec::Error& error) {
        return error.what();
    }
    return "";
}

// Options with a logit stage, each with the words its refusal must contain.
std::vector<std::pair<specdec::SamplingOptions, std::string>> logit_stage_options(AllowEveryToken& constraint) {
    return {{{.temperature = 1.0, .repeat_penalty = 1.1}, "repeat_penalty = 1.1"},
            {{.temperature = 0.7, .top_k = 40, .presence_penalty = 0.5}, "presence_penalty = 0.5"},
            {{.temperature = 1.0, .frequency_penalty = -0.25, .penalty_last_n = specdec::kWholeSequence},
             "frequency_penalty = -0.25"},
            {{.temperature = 1.0, .logit_bias = {{7, 2.0f}, {9, -1.0f}}}, "logit_bias (2 entries)"},
            {{.temperature = 0.0, .logit_bias = {{7, 2.0f}}}, "logit_bias"},
            {{.temperature = 1.0, .constraint = &constraint}, "constraint"},
            {{.temperature = 0.0, .constraint = &constraint}, "constraint"}};
}

}  // namespace

TEST_CASE("the device sampling path names the logit-stage option it cannot apply", "[cuda][errors]") {
    AllowEveryToken constraint;
    for (const auto& [options, name] : logit_stage_options(constraint)) {
        INFO(name);
        const std::string message = device_refusal(options);
        CHECK(message.find("device verification cannot apply the sampling option " + name) != std::string::npos);
        CHECK(message.find("on the host") != std::string::npos);
    }
    // The candidate stages in either order run on the device, and penalty
    // settings over an empty window penalise nothing.
    CHECK(device_refusal({.temperature = 0.7, .top_k = 40, .top_p = 0.9, .min_p = 0.05}).empty());
    CHECK(device_refusal({.temperature = 0.7, .top_p = 0.9, .chain = specdec::kHuggingFaceChain}).empty());
    CHECK(device_refusal({.temperature = 1.0, .repeat_penalty = 1.3, .penalty_last_n = 0}).empty());
}

TEST_CASE("device verification refuses logit-stage options before the pass, leaving the cache", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 1);
    const std::size_t vocab = model.vocab_size();
    specdec::DraftProposal draft;
    draft.tokens = {3, 4};
    const std::vector<Token> feed{1, 3, 4};
    specdec::cuda::DeviceBuffer<float> logits(3 * vocab);
    SPECDEC_CUDA_CHECK(cudaMemset(logits.data(), 0, 3 * vocab * sizeof(float)));
    specdec::cuda::Stream stream;
    specdec::cuda::DeviceVerifier verifier;
    AllowEveryToken constraint;
    for (const auto& [options, name] : logit_stage_options(constraint)) {
        INFO(name);
        REQUIRE_THROWS_WITH(model.forward_and_verify(feed, draft, options, specdec::CounterRng{1}, 1),
                            Catch::Contains("forward_and_verify cannot apply the sampling option " + name));
        CHECK(model.cached_tokens() == 0);
        REQUIRE_THROWS_WITH(
            verifier.verify(logits.data(), 3, vocab, vocab, draft, options, specdec::CounterRng{1}, 1, stream.get()),
            Catch::Contains("device verification cannot apply the sampling option " + name));
    }
    // A bias for a token the vocabulary lacks is named as such.
    REQUIRE_THROWS_WITH(model.forward_and_verify(feed, draft, {.temperature = 1.0, .logit_bias = {{600, 1.0f}}},
                                                 specdec::CounterRng{1}, 1),
                        Catch::Contains("outside the vocabulary"));
    CHECK(model.cached_tokens() == 0);
}

TEST_CASE("available() and device_description() answer without throwing, with or without a GPU", "[cuda][errors]") {
    bool available = false;
    std::string description;
    REQUIRE_NOTHROW(available = specdec::cuda::available());
    REQUIRE_NOTHROW(description = specdec::cuda::device_description());
    INFO("device: " << description);
    CHECK(!description.empty());
    // Without a device the description says so; with one it names the device.
    CHECK((description.rfind("no CUDA device", 0) == 0) == !available);
}

TEST_CASE("without a CUDA device, creating a model throws specdec::Error saying there is no device", "[cuda][errors]") {
    if (specdec::cuda::available()) {
        WARN("skipped: needs a machine without a CUDA device (found " << specdec::cuda::device_description() << ")");
        return;
    }
    const specdec::SyntheticShape tiny = specdec::synthetic_shape("tiny");
    REQUIRE_THROWS_AS(CudaLlamaModel::synthetic(tiny, 1), specdec::Error);
    REQUIRE_THROWS_WITH(CudaLlamaModel::synthetic(tiny, 1), Catch::Contains("no CUDA device"));
    const specdec::LlamaModel cpu = specdec::make_synthetic_target({.size = "tiny", .threads = 1});
    REQUIRE_THROWS_WITH(CudaLlamaModel(cpu.weights()), Catch::Contains("no CUDA device"));
    // The building blocks fail the same way, as errors rather than aborts.
    REQUIRE_THROWS_AS(specdec::cuda::DeviceBuffer<float>(16), specdec::Error);
    REQUIRE_THROWS_AS(specdec::cuda::Stream(), specdec::Error);
    REQUIRE_THROWS_AS(specdec::cuda::make_cuda_synthetic_target({.size = "tiny"}), specdec::Error);
}

TEST_CASE("an allocation larger than the device throws specdec::Error naming out-of-memory", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    constexpr std::size_t kOnePebibyte = std::size_t{1} << 50;
    REQUIRE_THROWS_WITH(specdec::cuda::DeviceBuffer<std::byte>(kOnePebibyte), Catch::Contains("out of memory"));
    // The failed allocation leaves the device usable.
    specdec::cuda::DeviceBuffer<float> small(1024);
    CHECK(small.size() == 1024);
}

TEST_CASE("a CUDA model rejects bad token ids, context overflow and truncation beyond the cache", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 1, 0, {.max_context = 8});
    const std::vector<Token> out_of_range{1, 512};
    REQUIRE_THROWS_WITH(model.forward(out_of_range), Catch::Contains("outside the vocabulary"));
    const std::vector<Token> negative{-1};
    REQUIRE_THROWS_WITH(model.forward(negative), Catch::Contains("outside the vocabulary"));
    CHECK(model.cached_tokens() == 0);
    const std::vector<Token> six{1, 2, 3, 4, 5, 6};
    (void)model.forward(six);
    REQUIRE_THROWS_WITH(model.forward(std::vector<Token>{1, 2, 3}), Catch::Contains("overflows the context length 8"));
    CHECK(model.cached_tokens() == 6);
    REQUIRE_THROWS_WITH(model.truncate(7), Catch::Contains("beyond the 6 cached positions"));
}

TEST_CASE("device verification rejects a draft whose distributions do not match the vocabulary", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 1);
    specdec::DraftProposal draft;
    draft.tokens = {3, 4};
    draft.vocab = 100;  // the model has 512
    draft.probabilities.assign(2 * 100, 0.01f);
    const std::vector<Token> feed{1, 3, 4};
    REQUIRE_THROWS_WITH(model.forward_and_verify(feed, draft, {.temperature = 1.0}, specdec::CounterRng{1}, 1),
                        Catch::Contains("vocabulary"));
    CHECK(model.cached_tokens() == 0);
}
