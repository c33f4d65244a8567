// The CausalLM contract on the device: one batched pass equals token-by-token
// passes, truncate() rolls back exactly, and forward_and_verify() returns what
// the host verification returns on the same logits.
#include <cstdint>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/decoding/verification.hpp"
#include "specdec/models/synthetic.hpp"

using specdec::LogitsView;
using specdec::Token;
using specdec::cuda::CudaLlamaModel;
using specdec::cuda::Precision;

namespace {

CudaLlamaModel tiny_model(Precision precision = Precision::f32, bool graphs = true) {
    return CudaLlamaModel::synthetic(specdec::synthetic_shape("tiny"), 4, 0,
                                     {.precision = precision, .cuda_graphs = graphs});
}

std::vector<std::vector<float>> copy_rows(const LogitsView& view) {
    std::vector<std::vector<float>> rows;
    for (std::size_t i = 0; i < view.rows; ++i) rows.emplace_back(view.row(i).begin(), view.row(i).end());
    return rows;
}

float max_difference(const std::vector<float>& a, std::span<const float> b) {
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

}  // namespace

// Batched and single-token passes use different GEMM shapes, so they agree to
// fp32 rounding (1e-4 on logits of magnitude ~10), not bit for bit.
TEST_CASE("one batched forward pass equals token-by-token passes on the GPU", "[cuda][model]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> tokens{1, 17, 200, 3, 3, 511, 42, 7, 99, 0, 5, 64};
    for (const bool graphs : {true, false}) {
        INFO("CUDA graphs " << graphs);
        CudaLlamaModel batched = tiny_model(Precision::f32, graphs);
        const auto expected = copy_rows(batched.forward(tokens));
        CudaLlamaModel stepwise = tiny_model(Precision::f32, graphs);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            const LogitsView row = stepwise.forward(std::span<const Token>(&tokens[i], 1));
            REQUIRE(row.rows == 1);
            INFO("position " << i);
            CHECK(max_difference(expected[i], row.row(0)) <= 1e-4f);
        }
        CHECK(stepwise.cached_tokens() == tokens.size());
    }
}

TEST_CASE("truncate rolls the GPU cache back: continuing equals a fresh model fed the same sequence", "[cuda][model]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> first{5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    const std::vector<Token> continuation{300, 301, 302, 303};
    CudaLlamaModel model = tiny_model();
    (void)model.forward(first);
    model.truncate(6);
    CHECK(model.cached_tokens() == 6);
    // Repeated truncation and single steps on the way, as the decoder does.
    (void)model.forward(std::vector<Token>{77});
    model.truncate(6);
    const auto rolled_back = copy_rows(model.forward(continuation));

    std::vector<Token> sequence(first.begin(), first.begin() + 6);
    sequence.insert(sequence.end(), continuation.begin(), continuation.end());
    CudaLlamaModel fresh = tiny_model();
    const LogitsView expected = fresh.forward(sequence);
    for (std::size_t i = 0; i < continuation.size(); ++i) {
        INFO("continuation row " << i);
        CHECK(max_difference(rolled_back[i], expected.row(6 + i)) <= 1e-4f);
    }
}

// The device rule draws the same counter-based uniforms as the host rule, so
// on the same logits the verdicts are the same except where float rounding
// of the softmax (device expf vs the host's polynomial exp, different
// summation order) moves a decision boundary: about 1e-7 of the time. We allow
// 1% of the cases to differ and expect none.
TEST_CASE("forward_and_verify returns the host verification's verdict on the same logits", "[cuda][model][acceptance]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    CudaLlamaModel model = tiny_model(Precision::f16);
    const std::size_t vocab = model.vocab_size();
    const std::vector<Token> prompt{1, 2, 3, 4, 5};
    const std::vector<specdec::SamplingOptions> options{
        {.temperature = 0.0}, {.temperature = 1.0}, {.temperature = 0.7, .top_k = 20},
        {.temperature = 1.0, .top_p = 0.9}, {.temperature = 1.3, .min_p = 0.05},
        {.temperature = 0.8, .top_k = 50, .top_p = 0.8, .min_p = 0.02},
        {.temperature = 1.3, .min_p = 0.05, .chain = specdec::kHuggingFaceChain},
        {.temperature = 0.8, .top_k = 50, .top_p = 0.8, .min_p = 0.02, .chain = specdec::kHuggingFaceChain}};
    std::size_t cases = 0, disagreements = 0;
    specdec::detail::LazyDistributions rows;  // reused across cases, as the decoder reuses it
    for (std::size_t o = 0; o < options.size(); ++o) {
        for (std::uint64_t seed = 0; seed < 40; ++seed) {
            const std::size_t k = 1 + seed % 5;
            const specdec::CounterRng rng{seed * 7919 + o};
            // A draft with a real q (seeds alternate with point masses).
            specdec::DraftProposal draft;
            draft.vocab = vocab;
            for (std::size_t i = 0; i < k; ++i) draft.tokens.push_back(static_cast<Token>((seed * 31 + i * 17) % vocab));
            if (seed % 2 == 0) {
                draft.probabilities.assign(k * vocab, 0.0f);
                for (std::size_t i = 0; i < k; ++i) {
                    // q_i: half the mass on the drafted token, the rest spread evenly.
                    for (std::size_t x = 0; x < vocab; ++x) draft.probabilities[i * vocab + x] = 0.5f / vocab;
                    draft.probabilities[i * vocab + draft.tokens[i]] += 0.5f;
                }
            }
            std::vector<Token> feed{prompt.back()};
            feed.insert(feed.end(), draft.tokens.begin(), draft.tokens.end());
            const std::uint64_t first_position = prompt.size();

            model.truncate(0);
            (void)model.forward(std::span<const Token>(prompt.data(), prompt.size() - 1));
            const std::size_t cached = model.cached_tokens();
            const LogitsView logits = model.forward(feed);
            const specdec::AcceptanceResult host =
                specdec::detail::verify_on_host(logits, draft, options[o], rng, first_position, rows,
                                                specdec::TokenwiseRejection{});
            model.truncate(cached);
            const specdec::AcceptanceResult device = model.forward_and_verify(feed, draft, options[o], rng, first_position);
            CHECK(model.cached_tokens() == cached + feed.size());
            ++cases;
            if (host.accepted != device.accepted || host.next_token != device.next_token) {
                ++disagreements;
                UNSCOPED_INFO("options " << o << ", seed " << seed << ": host (" << host.accepted << ", "
                                         << host.next_token << ") device (" << device.accepted << ", "
                                         << device.next_token << ")");
            }
        }
    }
    INFO(disagreements << " of " << cases << " verdicts differ");
    CHECK(disagreements * 100 <= cases);
}

TEST_CASE("warm_up_widths leaves the cache and the next pass's logits as they were", "[cuda][model]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const std::vector<Token> prompt{3, 1, 4, 1, 5, 9};
    const std::vector<Token> next{2, 6, 5};
    CudaLlamaModel reference = tiny_model();
    (void)reference.forward(prompt);
    const auto expected = copy_rows(reference.forward(next));

    CudaLlamaModel model = tiny_model();
    (void)model.forward(prompt);
    model.warm_up_widths(48);  // wider than any pass so far: the activations grow too
    CHECK(model.cached_tokens() == prompt.size());
    const LogitsView rows = model.forward(next);
    REQUIRE(rows.rows == expected.size());
    // The same shapes on the same weights: equal to fp32 rounding at most.
    for (std::size_t r = 0; r < expected.size(); ++r) CHECK(max_difference(expected[r], rows.row(r)) <= 1e-4f);
    CHECK(model.cached_tokens() == prompt.size() + next.size());
}
