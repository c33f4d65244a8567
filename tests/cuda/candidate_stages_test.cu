// The device's candidate stages (backends/cuda/sampling_kernels.cuh) against
// the processed distribution that core/sampling_options.hpp defines, written
// out here a second time, in double precision and step by step as the
// definition reads: rank by decreasing logit (ties by increasing id), run
// top_k / top_p / min_p / temperature in chain order, each filter measuring
// softmax over the candidates still kept at T = 1 before the temperature stage
// and at T after it, then softmax at 1 / T over what remains.
//
// A hand-computed row pins the reference itself (checked with or without a
// device) where the chain order and top-p's renormalisation decide which
// tokens remain; random rows then compare the device with the reference.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_support.hpp"
#include "specdec/cuda.cuh"

using specdec::SamplerStage;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::cuda::DeviceBuffer;
using specdec::cuda::detail::DeviceStatus;

namespace {

// The processed distribution of one row by the definition (candidate stages only).
std::vector<double> chain_reference(std::span<const float> logits, const SamplingOptions& options) {
    const std::size_t vocab = logits.size();
    std::vector<std::size_t> ranked(vocab);
    std::iota(ranked.begin(), ranked.end(), std::size_t{0});
    std::sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const double max_logit = logits[ranked[0]];
    // softmax over ranked[0 .. kept) of logits * scale
    const auto softmax_of_kept = [&](std::size_t kept, double scale) {
        std::vector<double> p(kept);
        double total = 0.0;
        for (std::size_t r = 0; r < kept; ++r) {
            const double logit = logits[ranked[r]];
            p[r] = logit == max_logit ? 1.0 : std::exp((logit - max_logit) * scale);
            total += p[r];
        }
        for (double& value : p) value /= total;
        return p;
    };
    std::size_t kept = vocab;
    double scale = 1.0;
    for (const SamplerStage stage : options.chain) {
        switch (stage) {
            case SamplerStage::top_k:
                if (options.top_k > 0) kept = std::min(kept, options.top_k);
                break;
            case SamplerStage::top_p:
                if (options.top_p < 1.0) {
                    const std::vector<double> p = softmax_of_kept(kept, scale);
                    double cumulative = 0.0;
                    std::size_t needed = 0;
                    while (needed < kept) {
                        cumulative += p[needed++];
                        if (cumulative >= options.top_p) break;
                    }
                    kept = needed;
                }
                break;
            case SamplerStage::min_p:
                if (options.min_p > 0.0) {
                    const std::vector<double> p = softmax_of_kept(kept, scale);
                    std::size_t needed = 1;
                    while (needed < kept && p[needed] >= options.min_p * p[0]) ++needed;
                    kept = needed;
                }
                break;
            case SamplerStage::temperature: scale = 1.0 / options.temperature; break;
            case SamplerStage::logit_bias:
            case SamplerStage::penalties: break;  // not candidate stages
        }
    }
    const std::vector<double> p = softmax_of_kept(kept, 1.0 / options.temperature);
    std::vector<double> distribution(vocab, 0.0);
    for (std::size_t r = 0; r < kept; ++r) distribution[ranked[r]] = p[r];
    return distribution;
}

// Runs the device transforms over `rows` rows of `vocab` logits laid out
// `row_stride` apart and returns the rows x vocab distributions.
std::vector<float> device_distributions(const std::vector<float>& logits, std::size_t rows, std::size_t row_stride,
                                        std::size_t vocab, const SamplingOptions& options,
                                        specdec::cuda::detail::SamplingWorkspace& workspace) {
    DeviceBuffer<float> device_logits(logits.size()), probabilities(rows * vocab);
    DeviceBuffer<DeviceStatus> status(1);
    SPECDEC_CUDA_CHECK(
        cudaMemcpy(device_logits.data(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemset(status.data(), 0, sizeof(DeviceStatus)));
    workspace.logits_to_distributions(device_logits.data(), row_stride, rows, vocab, options, probabilities.data(),
                                      status.data(), nullptr);
    SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());
    DeviceStatus host_status{};
    SPECDEC_CUDA_CHECK(cudaMemcpy(&host_status, status.data(), sizeof host_status, cudaMemcpyDeviceToHost));
    REQUIRE(host_status.error == 0);
    std::vector<float> out(rows * vocab);
    SPECDEC_CUDA_CHECK(cudaMemcpy(out.data(), probabilities.data(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return out;
}

// Compares one row: the same support, and probabilities within `tolerance`.
void check_row(std::span<const float> actual, const std::vector<double>& expected, double tolerance) {
    std::size_t support_actual = 0, support_expected = 0;
    double worst = 0.0;
    for (std::size_t x = 0; x < expected.size(); ++x) {
        support_actual += actual[x] > 0.0f;
        support_expected += expected[x] > 0.0;
        worst = std::max(worst, std::fabs(static_cast<double>(actual[x]) - expected[x]));
        if ((actual[x] > 0.0f) != (expected[x] > 0.0)) UNSCOPED_INFO("token " << x << " kept on one side only");
    }
    CHECK(support_actual == support_expected);
    CHECK(worst <= tolerance);
}

// distribution[token] proportional to weight, over the listed tokens only.
std::vector<double> proportional(std::size_t vocab, const std::vector<std::pair<Token, double>>& weights) {
    std::vector<double> distribution(vocab, 0.0);
    double total = 0.0;
    for (const auto& [token, weight] : weights) total += weight;
    for (const auto& [token, weight] : weights) distribution[static_cast<std::size_t>(token)] = weight / total;
    return distribution;
}

// The candidate-stage settings of one case (the rest of SamplingOptions at its defaults).
struct HandCase {
    std::string what;
    double temperature = 1.0;
    std::size_t top_k = 0;
    double top_p = 1.0;
    double min_p = 0.0;
    specdec::SamplerChain chain = specdec::kLlamaCppChain;
    std::vector<double> expected;

    [[nodiscard]] SamplingOptions options() const {
        return {.temperature = temperature, .top_k = top_k, .top_p = top_p, .min_p = min_p, .chain = chain};
    }
};

// Token:   0     1    2    3     4    5    6
// mass:  0.06  0.4  0.2  0.04  0.2  0.1  0 (masked)
// at T = 1; at T the masses go as mass^(1/T). Tokens 2 and 4 tie.
constexpr std::size_t kHandVocab = 7;
const std::vector<double> kHandMass{0.06, 0.4, 0.2, 0.04, 0.2, 0.1, 0.0};

std::vector<float> hand_logits() {
    std::vector<float> logits(kHandVocab);
    for (std::size_t x = 0; x < kHandVocab; ++x)
        logits[x] = kHandMass[x] > 0.0 ? std::log(static_cast<float>(kHandMass[x])) : -std::numeric_limits<float>::infinity();
    return logits;
}

std::vector<HandCase> hand_cases() {
    constexpr specdec::SamplerChain kTopPBeforeTopK{SamplerStage::logit_bias, SamplerStage::penalties,
                                                    SamplerStage::top_p,      SamplerStage::top_k,
                                                    SamplerStage::min_p,      SamplerStage::temperature};
    const auto mass_at = [](double temperature, Token token) {
        return std::pow(kHandMass[static_cast<std::size_t>(token)], 1.0 / temperature);
    };
    std::vector<HandCase> cases;
    // top-k keeps {1, 2, 4} (mass 0.8); renormalised 0.5, 0.25, 0.25 reach 0.7
    // at token 2. Measured on the unrenormalised softmax (0.4, 0.6, 0.8) the
    // prefix would have been {1, 2, 4}.
    cases.push_back({.what = "top-k then top-p renormalised", .top_k = 3, .top_p = 0.7,
                     .expected = proportional(kHandVocab, {{1, 0.4}, {2, 0.2}})});
    // The same options with top-p first: 0.4, 0.6, 0.8 reach 0.7 at token 4.
    cases.push_back({.what = "top-p before top-k", .top_k = 3, .top_p = 0.7, .chain = kTopPBeforeTopK,
                     .expected = proportional(kHandVocab, {{1, 0.4}, {2, 0.2}, {4, 0.2}})});
    // Ties by increasing id: of the tied 2 and 4, token 2 stays.
    cases.push_back({.what = "top-k tie to the lower id", .top_k = 2,
                     .expected = proportional(kHandVocab, {{1, 0.4}, {2, 0.2}})});
    // llama.cpp's order: min-p at T = 1 (0.1 / 0.4 = 0.25 < 0.4 drops token 5),
    // then the temperature reshapes what remains.
    cases.push_back({.what = "min-p before the temperature", .temperature = 2.0, .min_p = 0.4,
                     .expected = proportional(kHandVocab, {{1, mass_at(2.0, 1)}, {2, mass_at(2.0, 2)},
                                                           {4, mass_at(2.0, 4)}})});
    // Hugging Face's order: min-p at T = 2 (sqrt(0.25) = 0.5 keeps token 5,
    // sqrt(0.15) = 0.39 drops token 0).
    cases.push_back({.what = "min-p after the temperature", .temperature = 2.0, .min_p = 0.4,
                     .chain = specdec::kHuggingFaceChain,
                     .expected = proportional(kHandVocab, {{1, mass_at(2.0, 1)}, {2, mass_at(2.0, 2)},
                                                           {4, mass_at(2.0, 4)}, {5, mass_at(2.0, 5)}})});
    // top-p at T = 1: 0.4, 0.6, 0.8 reach 0.75 at token 4.
    cases.push_back({.what = "top-p before the temperature", .temperature = 0.5, .top_p = 0.75,
                     .expected = proportional(kHandVocab, {{1, mass_at(0.5, 1)}, {2, mass_at(0.5, 2)},
                                                           {4, mass_at(0.5, 4)}})});
    // top-p at T = 0.5 (masses 0.16, 0.04, 0.04, 0.01, ... of 0.2552): 0.627,
    // 0.784 reach 0.75 at token 2.
    cases.push_back({.what = "top-p after the temperature", .temperature = 0.5, .top_p = 0.75,
                     .chain = specdec::kHuggingFaceChain,
                     .expected = proportional(kHandVocab, {{1, mass_at(0.5, 1)}, {2, mass_at(0.5, 2)}})});
    // No filter: softmax at 1 / T over every unmasked token.
    std::vector<std::pair<Token, double>> all;
    for (Token x = 0; x < 6; ++x) all.emplace_back(x, mass_at(1.5, x));
    cases.push_back({.what = "no filter", .temperature = 1.5, .expected = proportional(kHandVocab, all)});
    return cases;
}

}  // namespace

TEST_CASE("device candidate stages follow the sampler chain on a hand-computed row", "[cuda][sampling]") {
    const std::vector<float> logits = hand_logits();
    const std::vector<HandCase> cases = hand_cases();
    // The reference first (on any machine): it must say what the comments say.
    for (const HandCase& c : cases) {
        INFO("reference, " << c.what);
        check_row(std::vector<float>(c.expected.begin(), c.expected.end()), chain_reference(logits, c.options()), 1e-6);
    }
    SPECDEC_REQUIRE_CUDA_DEVICE();
    // Two copies of the row, 9 floats apart with NaN between them: the device
    // must read each row's vocab entries only.
    constexpr std::size_t kStride = 9, kRows = 2;
    std::vector<float> padded(kRows * kStride, std::numeric_limits<float>::quiet_NaN());
    for (std::size_t row = 0; row < kRows; ++row) std::copy(logits.begin(), logits.end(), padded.begin() + row * kStride);
    specdec::cuda::detail::SamplingWorkspace workspace;
    for (const HandCase& c : cases) {
        INFO("device, " << c.what);
        const std::vector<float> device = device_distributions(padded, kRows, kStride, kHandVocab, c.options(), workspace);
        for (std::size_t row = 0; row < kRows; ++row) {
            INFO("row " << row);
            check_row(std::span<const float>(device).subspan(row * kHandVocab, kHandVocab), c.expected, 1e-6);
        }
    }
}

TEST_CASE("device candidate stages rank -0.0 and +0.0 logits as equal, ties to the lower id", "[cuda][sampling]") {
    // Tokens 1 (-0.0) and 3 (+0.0) share the largest logit: top-1 keeps token 1.
    const std::vector<float> logits{-1.0f, -0.0f, -2.0f, 0.0f, -1.5f};
    const SamplingOptions options{.temperature = 1.0, .top_k = 1};
    const std::vector<double> expected = proportional(logits.size(), {{1, 1.0}});
    check_row(std::vector<float>(expected.begin(), expected.end()), chain_reference(logits, options), 0.0);
    SPECDEC_REQUIRE_CUDA_DEVICE();
    specdec::cuda::detail::SamplingWorkspace workspace;
    check_row(device_distributions(logits, 1, logits.size(), logits.size(), options, workspace), expected, 0.0);
}

// Random logits have no ties and no filter boundary within rounding of a
// cut, so the kept sets are the reference's and the probabilities agree to
// float rounding.
TEST_CASE("device candidate stages produce the processed distribution of the sampler chain", "[cuda][sampling]") {
    SPECDEC_REQUIRE_CUDA_DEVICE();
    constexpr std::size_t kRows = 4, kVocab = 3000;
    std::vector<float> logits(kRows * kVocab);
    for (std::size_t i = 0; i < logits.size(); ++i)
        logits[i] = static_cast<float>(6.0 * specdec::counter_uniform(99, i, specdec::RandomPurpose::target_sample) - 3.0);
    logits[5] = -std::numeric_limits<float>::infinity();  // a masked token
    constexpr specdec::SamplerChain kMinPFirst{SamplerStage::logit_bias, SamplerStage::penalties,
                                               SamplerStage::min_p,      SamplerStage::temperature,
                                               SamplerStage::top_p,      SamplerStage::top_k};
    const std::vector<SamplingOptions> options{
        {.temperature = 1.0},
        {.temperature = 0.5, .top_k = 10},
        {.temperature = 1.0, .top_p = 0.5},
        {.temperature = 0.6, .top_p = 0.5},
        {.temperature = 2.0, .min_p = 0.3},
        {.temperature = 0.9, .top_k = 300, .top_p = 0.7, .min_p = 0.01},
        {.temperature = 0.6, .top_p = 0.5, .chain = specdec::kHuggingFaceChain},
        {.temperature = 2.0, .min_p = 0.3, .chain = specdec::kHuggingFaceChain},
        {.temperature = 0.7, .top_k = 200, .top_p = 0.8, .min_p = 0.02, .chain = specdec::kHuggingFaceChain},
        {.temperature = 1.5, .top_k = 50, .top_p = 0.9, .min_p = 0.05, .chain = kMinPFirst},
        // 1 / T overflows float: the device's scale is +inf, p a point mass on the argmax.
        {.temperature = 1e-45, .top_k = 5, .top_p = 0.9}};
    specdec::cuda::detail::SamplingWorkspace workspace;  // reused, as the verifier reuses it
    for (std::size_t o = 0; o < options.size(); ++o) {
        INFO("options " << o);
        const std::vector<float> device = device_distributions(logits, kRows, kVocab, kVocab, options[o], workspace);
        for (std::size_t row = 0; row < kRows; ++row) {
            INFO("row " << row);
            const std::span<const float> row_logits(logits.data() + row * kVocab, kVocab);
            check_row(std::span<const float>(device).subspan(row * kVocab, kVocab),
                      chain_reference(row_logits, options[o]), 1e-6);
        }
    }
}
