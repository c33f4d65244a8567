// The device acceptance rule is exact: the tokens it emits are distributed as
// the target distributions p, whatever the draft distributions q. Thousands of
// independent verifications run in one launch (one block each) through the
// library's accept_rejection_block; Pearson's chi-square test compares the
// emitted tokens with p at significance level 1e-4 per test. A deliberately
// wrong rule (on rejection, draw from p instead of the residual) must fail the
// same test: the negative control shows the test has the power to see a bias.
// (The device sampling transforms are tested in candidate_stages_test.cu.)
#include <cstdint>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"
#include "specdec/sampling/logits_processing.hpp"
#include "support/statistics.hpp"

using specdec::Token;
using specdec::cuda::DeviceBuffer;
using specdec::cuda::detail::DeviceDraft;
using specdec::cuda::detail::DeviceStatus;

namespace {

constexpr int kThreads = 128;
constexpr double kSignificance = 1e-4;

// Trial b verifies drafts tokens[b * k ..] at positions b * kPositionStride ...
constexpr std::uint64_t kPositionStride = 64;

__global__ void exact_rule_trials(const float* p, const Token* tokens, const float* q, int k, int vocab, std::uint64_t seed,
                                  DeviceStatus* results) {
    const DeviceDraft draft{tokens + static_cast<std::size_t>(blockIdx.x) * k, q, k, vocab};
    specdec::cuda::detail::accept_rejection_block<kThreads>(p, draft, seed, blockIdx.x * kPositionStride,
                                                            results + blockIdx.x);
}

// The negative control: the right acceptance test, the wrong correction.
__global__ void wrong_rule_trials(const float* p, const Token* tokens, const float* q, int k, int vocab, std::uint64_t seed,
                                  DeviceStatus* results) {
    const DeviceDraft draft{tokens + static_cast<std::size_t>(blockIdx.x) * k, q, k, vocab};
    const std::uint64_t first = blockIdx.x * kPositionStride;
    for (int i = 0; i < k; ++i) {
        const Token x = draft.tokens[i];
        const double u = specdec::counter_uniform(seed, first + i, specdec::RandomPurpose::accept_test);
        if (draft.q_of(i, x) > 0.0 && u * draft.q_of(i, x) < p[i * vocab + x]) continue;
        const double v = specdec::counter_uniform(seed, first + i, specdec::RandomPurpose::target_sample);
        const int y = specdec::cuda::detail::sample_block<kThreads>(p + i * vocab, vocab, v);  // wrong: not the residual
        if (threadIdx.x == 0) results[blockIdx.x] = DeviceStatus{i, y, 0, 0};
        return;
    }
    const double v = specdec::counter_uniform(seed, first + k, specdec::RandomPurpose::target_sample);
    const int y = specdec::cuda::detail::sample_block<kThreads>(p + k * vocab, vocab, v);
    if (threadIdx.x == 0) results[blockIdx.x] = DeviceStatus{k, y, 0, 0};
}

struct Setup {
    int k = 3;
    int vocab = 5;
    std::vector<float> p;  // (k + 1) x vocab
    std::vector<float> q;  // k x vocab, empty = point masses
};

// Draws every trial's drafts from q on the host (purpose draft_sample, as a
// drafter would), runs the trials on the device, and returns the emitted
// sequences (accepted drafts, then the next token).
std::vector<std::vector<Token>> run_trials(const Setup& setup, std::size_t trials, std::uint64_t seed, bool wrong_rule,
                                           const std::vector<Token>& fixed_drafts = {}) {
    const int k = setup.k, vocab = setup.vocab;
    std::vector<Token> tokens(trials * k);
    for (std::size_t b = 0; b < trials; ++b) {
        for (int i = 0; i < k; ++i) {
            if (setup.q.empty()) {
                tokens[b * k + i] = fixed_drafts[i];
            } else {
                const double u = specdec::counter_uniform(seed, b * kPositionStride + i, specdec::RandomPurpose::draft_sample);
                tokens[b * k + i] = specdec::sample_from_distribution({setup.q.data() + i * vocab, static_cast<std::size_t>(vocab)}, u);
            }
        }
    }
    DeviceBuffer<float> p(setup.p.size()), q(std::max<std::size_t>(setup.q.size(), 1));
    DeviceBuffer<Token> device_tokens(tokens.size());
    DeviceBuffer<DeviceStatus> results(trials);
    SPECDEC_CUDA_CHECK(cudaMemcpy(p.data(), setup.p.data(), setup.p.size() * sizeof(float), cudaMemcpyHostToDevice));
    if (!setup.q.empty())
        SPECDEC_CUDA_CHECK(cudaMemcpy(q.data(), setup.q.data(), setup.q.size() * sizeof(float), cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemcpy(device_tokens.data(), tokens.data(), tokens.size() * sizeof(Token), cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemset(results.data(), 0, trials * sizeof(DeviceStatus)));
    const float* q_pointer = setup.q.empty() ? nullptr : q.data();
    if (wrong_rule) {
        wrong_rule_trials<<<static_cast<unsigned>(trials), kThreads>>>(p.data(), device_tokens.data(), q_pointer, k, vocab,
                                                                      seed, results.data());
    } else {
        exact_rule_trials<<<static_cast<unsigned>(trials), kThreads>>>(p.data(), device_tokens.data(), q_pointer, k, vocab,
                                                                      seed, results.data());
    }
    SPECDEC_CUDA_CHECK_LAUNCH();
    SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<DeviceStatus> host(trials);
    SPECDEC_CUDA_CHECK(cudaMemcpy(host.data(), results.data(), trials * sizeof(DeviceStatus), cudaMemcpyDeviceToHost));
    std::vector<std::vector<Token>> emitted(trials);
    for (std::size_t b = 0; b < trials; ++b) {
        REQUIRE(host[b].error == 0);
        REQUIRE(host[b].accepted >= 0);
        REQUIRE(host[b].accepted <= k);
        for (int i = 0; i < host[b].accepted; ++i) emitted[b].push_back(tokens[b * k + i]);
        emitted[b].push_back(host[b].next_token);
    }
    return emitted;
}

// p-value of "the position-th emitted token ~ p_position", over the trials
// that emitted at least position + 1 tokens. (The p rows do not depend on the
// context here, so given that position is reached, its token must follow
// p_position exactly.)
double p_value_at(const std::vector<std::vector<Token>>& emitted, const Setup& setup, int position) {
    std::vector<std::size_t> counts(setup.vocab, 0);
    for (const auto& sequence : emitted)
        if (static_cast<int>(sequence.size()) > position) ++counts[sequence[position]];
    std::vector<double> expected(setup.p.begin() + position * setup.vocab, setup.p.begin() + (position + 1) * setup.vocab);
    const auto result = specdec::test::chi_square_test(counts, expected);
    UNSCOPED_INFO("position " << position << ": chi-square " << result.statistic << " with " << result.degrees_of_freedom
                              << " degrees of freedom, p-value " << result.p_value);
    return result.p_value;
}

Setup distinct_p_and_q() {
    Setup s;
    s.k = 3;
    s.vocab = 5;
    // Draft and target disagree a lot (and q has zeros where p has mass and vice versa).
    s.p = {0.40f, 0.30f, 0.15f, 0.10f, 0.05f,  //
           0.05f, 0.05f, 0.20f, 0.30f, 0.40f,  //
           0.25f, 0.00f, 0.25f, 0.25f, 0.25f,  //
           0.10f, 0.20f, 0.30f, 0.20f, 0.20f};
    s.q = {0.10f, 0.10f, 0.20f, 0.30f, 0.30f,  //
           0.50f, 0.30f, 0.10f, 0.10f, 0.00f,  //
           0.20f, 0.40f, 0.00f, 0.20f, 0.20f};
    return s;
}

}  // namespace

TEST_CASE("device token-wise rejection sampling emits tokens distributed exactly as p (chi-square)", "[cuda][exactness]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const Setup setup = distinct_p_and_q();
    const auto emitted = run_trials(setup, 200000, 2024, /*wrong_rule=*/false);
    for (int position = 0; position <= setup.k; ++position) CHECK(p_value_at(emitted, setup, position) > kSignificance);
}

TEST_CASE("device rejection sampling is exact for point-mass drafts (chi-square)", "[cuda][exactness]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    Setup setup = distinct_p_and_q();
    setup.q.clear();
    const auto emitted = run_trials(setup, 200000, 77, /*wrong_rule=*/false, {0, 4, 3});
    for (int position = 0; position <= setup.k; ++position) CHECK(p_value_at(emitted, setup, position) > kSignificance);
}

TEST_CASE("negative control: a wrong correction rule on the device is detected by the same chi-square test", "[cuda][exactness]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    const Setup setup = distinct_p_and_q();
    const auto emitted = run_trials(setup, 200000, 2024, /*wrong_rule=*/true);
    CHECK(p_value_at(emitted, setup, 0) < kSignificance);
}

TEST_CASE("device verification reports NaN logits as specdec::Error", "[cuda][errors]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    constexpr std::size_t kVocab = 64;
    std::vector<float> logits(2 * kVocab, 0.5f);
    logits[kVocab + 7] = NAN;
    DeviceBuffer<float> device_logits(logits.size());
    SPECDEC_CUDA_CHECK(cudaMemcpy(device_logits.data(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    specdec::cuda::Stream stream;
    specdec::cuda::DeviceVerifier verifier;
    specdec::DraftProposal draft;
    draft.tokens = {3};
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        REQUIRE_THROWS_WITH(verifier.verify(device_logits.data(), 2, kVocab, kVocab, draft, {.temperature = temperature},
                                            specdec::CounterRng{1}, 0, stream.get()),
                            Catch::Contains("NaN"));
    }
}
