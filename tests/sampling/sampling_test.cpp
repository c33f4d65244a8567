#include <cmath>
#include <limits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/specdec.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

using specdec::SamplingOptions;

namespace {

std::vector<float> distribution(const std::vector<float>& logits, const SamplingOptions& options) {
    std::vector<float> p(logits.size());
    specdec::logits_to_distribution(logits, options, p);
    return p;
}

std::vector<float> logits_of(const std::vector<double>& probabilities) {
    std::vector<float> logits;
    for (const double p : probabilities) logits.push_back(static_cast<float>(std::log(p)));
    return logits;
}

}  // namespace

TEST_CASE("temperature rescales logits before the softmax", "[sampling]") {
    const std::vector<float> logits{0.0f, static_cast<float>(std::log(2.0))};
    auto p = distribution(logits, {.temperature = 1.0});
    CHECK(p[0] == Approx(1.0 / 3.0).epsilon(1e-6));
    CHECK(p[1] == Approx(2.0 / 3.0).epsilon(1e-6));
    p = distribution(logits, {.temperature = 0.5});
    CHECK(p[0] == Approx(1.0 / 5.0).epsilon(1e-6));
    CHECK(p[1] == Approx(4.0 / 5.0).epsilon(1e-6));
}

TEST_CASE("temperature 0 is greedy: a point mass on the argmax, ties to the lowest id", "[sampling]") {
    const std::vector<float> logits{1.0f, 3.0f, 3.0f, -2.0f};
    const auto p = distribution(logits, {.temperature = 0.0});
    CHECK(p == std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
    CHECK(specdec::greedy_token(logits) == 1);
}

TEST_CASE("top-k keeps the k most probable tokens, renormalised", "[sampling]") {
    const auto p = distribution(logits_of({0.1, 0.4, 0.2, 0.3}), {.top_k = 2});
    CHECK(p[0] == 0.0f);
    CHECK(p[2] == 0.0f);
    CHECK(p[1] == Approx(0.4 / 0.7).epsilon(1e-5));
    CHECK(p[3] == Approx(0.3 / 0.7).epsilon(1e-5));
}

TEST_CASE("top-p keeps the smallest most-probable set reaching the mass", "[sampling]") {
    const auto p = distribution(logits_of({0.2, 0.5, 0.3}), {.top_p = 0.7});
    CHECK(p[0] == 0.0f);
    CHECK(p[1] == Approx(0.5 / 0.8).epsilon(1e-5));
    CHECK(p[2] == Approx(0.3 / 0.8).epsilon(1e-5));
}

TEST_CASE("min-p drops tokens below min_p times the top probability", "[sampling]") {
    const auto p = distribution(logits_of({0.2, 0.5, 0.3}), {.min_p = 0.5});
    CHECK(p[0] == 0.0f);
    CHECK(p[1] == Approx(0.5 / 0.8).epsilon(1e-5));
    CHECK(p[2] == Approx(0.3 / 0.8).epsilon(1e-5));
}

TEST_CASE("a masked logit (-inf) gets probability exactly 0", "[sampling]") {
    const float masked = -std::numeric_limits<float>::infinity();
    const auto p = distribution({0.0f, masked, 0.0f}, {});
    CHECK(p[1] == 0.0f);
    CHECK(p[0] == Approx(0.5));
}

TEST_CASE("the vectorisable exp matches std::exp to 1e-6 relative error", "[sampling]") {
    for (float x = -80.0f; x <= 0.0f; x += 0.013f) {
        const double exact = std::exp(static_cast<double>(x));
        REQUIRE(std::abs(specdec::detail::exp_nonpositive(x) - exact) <= 1e-6 * exact);
    }
    CHECK(specdec::detail::exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
    CHECK(specdec::detail::exp_nonpositive(-200.0f) == 0.0f);
}

TEST_CASE("NaN and +inf logits are errors that name the problem, not a token", "[sampling][errors]") {
    std::vector<float> logits{0.0f, 1.0f, std::nanf(""), 2.0f};
    CHECK_THROWS_WITH(distribution(logits, {}), Catch::Contains("NaN at token 2"));
    CHECK_THROWS_WITH(specdec::greedy_token(logits), Catch::Contains("NaN"));
    logits[2] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(distribution(logits, {}), Catch::Contains("+inf at token 2"));
    const float masked = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(distribution({masked, masked}, {}), Catch::Contains("-inf for every one"));
}

TEST_CASE("nonsensical sampling options are rejected with the option named", "[sampling][errors]") {
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.temperature = -0.5}), Catch::Contains("temperature = -0.5"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.temperature = std::nan("")}), Catch::Contains("temperature"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.top_p = 0.0}), Catch::Contains("top_p"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.top_p = 1.5}), Catch::Contains("top_p"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.min_p = -0.1}), Catch::Contains("min_p"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.min_p = 2.0}), Catch::Contains("min_p"));
    CHECK_NOTHROW(specdec::validate(SamplingOptions{.temperature = 0.0, .top_k = 3, .top_p = 1.0, .min_p = 1.0}));
}

TEST_CASE("inverse-CDF sampling never returns a token of probability 0", "[sampling]") {
    const std::vector<float> p{0.25f, 0.0f, 0.75f, 0.0f};
    CHECK(specdec::sample_from_distribution(p, 0.0) == 0);
    CHECK(specdec::sample_from_distribution(p, 0.2499) == 0);
    CHECK(specdec::sample_from_distribution(p, 0.25) == 2);
    CHECK(specdec::sample_from_distribution(p, 1.0 - 0x1.0p-53) == 2);
    CHECK_THROWS_AS(specdec::sample_from_distribution(std::vector<float>{0.0f, 0.0f}, 0.5), specdec::Error);
}

TEST_CASE("a tiny temperature gives the argmax, not the last token", "[sampling]") {
    // 1 / 1e-39 overflows a float: the maximum's (0 * inf) once made the whole row NaN.
    const std::vector<float> logits{0.1f, 2.0f, 0.5f, -1.0f};
    for (const double temperature : {1e-39, 1e-30, 1e-300, std::numeric_limits<double>::denorm_min()}) {
        INFO("temperature " << temperature);
        const auto p = distribution(logits, {.temperature = temperature});
        CHECK(p == std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
        for (const double u : {0.0, 0.5, 1.0 - 0x1.0p-53}) CHECK(specdec::sample_from_distribution(p, u) == 1);
    }
    // Tied maxima: the limit T -> 0 of softmax(l / T) is uniform over them.
    const auto tied = distribution({2.0f, -1.0f, 2.0f}, {.temperature = 1e-39});
    CHECK(tied == std::vector<float>{0.5f, 0.0f, 0.5f});
    // Masked tokens stay masked at any temperature, tiny or huge.
    const float masked = -std::numeric_limits<float>::infinity();
    CHECK(distribution({masked, 1.0f, 0.0f}, {.temperature = 1e-39}) == std::vector<float>{0.0f, 1.0f, 0.0f});
    const auto flat = distribution({masked, 1.0f, 0.0f}, {.temperature = 1e300});
    CHECK(flat[0] == 0.0f);
    CHECK(flat[1] == Approx(0.5));
}

TEST_CASE("a tiny temperature in the decoders gives the greedy output", "[sampling][decoder]") {
    specdec::test::ToyLM reference({.vocab = 30, .seed = 4});
    const std::vector<specdec::Token> prompt{1, 2, 3};
    const auto greedy = specdec::AutoregressiveDecoder(reference, {.sampling = {.temperature = 0.0}, .max_new_tokens = 24})
                            .generate(prompt)
                            .tokens;
    specdec::test::ToyLM target({.vocab = 30, .seed = 4}), draft({.vocab = 30, .seed = 4, .noise_seed = 7, .noise = 0.5});
    const specdec::DecodingOptions tiny{.draft_tokens = 4, .sampling = {.temperature = 1e-39}, .seed = 3, .max_new_tokens = 24};
    CHECK(specdec::AutoregressiveDecoder(reference, tiny).generate(prompt).tokens == greedy);
    CHECK(specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), tiny).generate(prompt).tokens == greedy);
}

TEST_CASE("top-k ties go to the lowest ids, and top-p measures the mass renormalised after top-k", "[sampling]") {
    // Ranking ties: equal logits are ranked by increasing id.
    const auto tied = distribution({1.0f, 2.0f, 2.0f, 2.0f}, {.top_k = 2});
    CHECK(tied[0] == 0.0f);
    CHECK(tied[1] == Approx(0.5));
    CHECK(tied[2] == Approx(0.5));
    CHECK(tied[3] == 0.0f);
    // p = {0.4, 0.3, 0.3}, top_k = 2, top_p = 0.55: renormalised over the two
    // candidates the first holds 0.4 / 0.7 = 0.57 >= 0.55, so it alone is kept
    // (measuring the mass before renormalising, 0.4 < 0.55, would keep two).
    const auto p = distribution(logits_of({0.4, 0.3, 0.3}), {.top_k = 2, .top_p = 0.55});
    CHECK(p[0] == 1.0f);
    CHECK(p[1] == 0.0f);
    CHECK(p[2] == 0.0f);
    // top_p = 0.6 > 0.57: both candidates stay.
    const auto both = distribution(logits_of({0.4, 0.3, 0.3}), {.top_k = 2, .top_p = 0.6});
    CHECK(both[0] == Approx(0.4 / 0.7).epsilon(1e-5));
    CHECK(both[1] == Approx(0.3 / 0.7).epsilon(1e-5));
}

TEST_CASE("the chain order decides at which temperature the filters measure mass", "[sampling]") {
    // logits {0, -1}: at T = 1 the first holds 0.73; at T = 0.5, 0.88.
    // top_p = 0.8: llama.cpp's order (filters before the temperature) keeps
    // both and then sharpens; Hugging Face's (temperature first) keeps one.
    const std::vector<float> logits{0.0f, -1.0f};
    const auto llama = distribution(logits, {.temperature = 0.5, .top_p = 0.8, .chain = specdec::kLlamaCppChain});
    CHECK(llama[0] == Approx(1.0 / (1.0 + std::exp(-2.0))).epsilon(1e-5));
    const auto hf = distribution(logits, {.temperature = 0.5, .top_p = 0.8, .chain = specdec::kHuggingFaceChain});
    CHECK(hf[0] == 1.0f);
    CHECK(hf[1] == 0.0f);
}

TEST_CASE("penalties and logit bias follow the history: the library equals the independent reference", "[sampling][exactness]") {
    // Random rows of 40 tokens, random histories of 0 .. 80 tokens over the
    // first 12 ids (so repeats inside and outside the window), every stage
    // order the two presets give, biases including a ban.
    const std::size_t vocab = 40;
    const std::vector<SamplingOptions> options{
        {.repeat_penalty = 1.3},
        {.temperature = 0.8, .repeat_penalty = 0.7, .penalty_last_n = 5},
        {.temperature = 1.2, .top_k = 8, .top_p = 0.9, .presence_penalty = 0.5, .frequency_penalty = 0.25},
        {.temperature = 0.0, .repeat_penalty = 1.5, .frequency_penalty = 1.0, .penalty_last_n = specdec::kWholeSequence},
        {.temperature = 0.9, .min_p = 0.1, .chain = specdec::kHuggingFaceChain, .repeat_penalty = 1.2,
         .presence_penalty = -0.3, .logit_bias = {{3, 2.0f}, {7, -std::numeric_limits<float>::infinity()}, {3, -0.5f}}},
        {.top_p = 0.7, .logit_bias = {{0, 1.5f}, {39, 3.0f}}},
    };
    for (std::uint64_t row_seed = 0; row_seed < 30; ++row_seed) {
        std::vector<float> logits(vocab);
        for (std::size_t v = 0; v < vocab; ++v)
            logits[v] = static_cast<float>(6.0 * specdec::counter_uniform(row_seed, v, specdec::RandomPurpose::draft_sample) - 3.0);
        std::vector<specdec::Token> history(static_cast<std::size_t>(
            80.0 * specdec::counter_uniform(row_seed, 0, specdec::RandomPurpose::accept_test)));
        for (std::size_t i = 0; i < history.size(); ++i)
            history[i] = static_cast<specdec::Token>(12.0 * specdec::counter_uniform(row_seed, i, specdec::RandomPurpose::target_sample));
        // Split the history between committed tokens and drafts: the row must not care.
        const std::size_t split = history.size() / 2;
        const specdec::RowHistory row_history{std::span<const specdec::Token>(history).first(split),
                                              std::span<const specdec::Token>(history).subspan(split)};
        for (const SamplingOptions& o : options) {
            std::vector<float> library(vocab);
            specdec::processed_distribution(logits, o, row_history, library);
            const auto reference = specdec::test::reference_distribution(logits, o, history);
            INFO("row " << row_seed << " history " << history.size() << " T " << o.temperature << " repeat "
                        << o.repeat_penalty << " presence " << o.presence_penalty << " frequency " << o.frequency_penalty);
            for (std::size_t v = 0; v < vocab; ++v) {
                INFO("token " << v << ": library " << library[v] << ", reference " << reference[v]);
                REQUIRE((library[v] == 0.0f) == (reference[v] == 0.0));
                REQUIRE(std::abs(library[v] - reference[v]) <= 2e-6);
            }
        }
    }
}

TEST_CASE("bad penalty, bias and chain settings are refused by name", "[sampling][errors]") {
    using Catch::Contains;
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.repeat_penalty = 0.0}), Contains("repeat_penalty = 0"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.repeat_penalty = -1.1}), Contains("repeat_penalty = -1.1"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.presence_penalty = std::nan("")}), Contains("presence_penalty"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.frequency_penalty = std::numeric_limits<double>::infinity()}),
                      Contains("frequency_penalty"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.logit_bias = {{-2, 1.0f}}}), Contains("logit_bias[0]: token id -2"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.logit_bias = {{1, 0.0f}, {2, std::nanf("")}}}),
                      Contains("logit_bias[1]"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.logit_bias = {{5, 1.0f}, {50, 1.0f}}}, 50),
                      Contains("logit_bias[1]: token id 50 is outside the vocabulary [0, 50)"));
    using specdec::SamplerStage;
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.chain = {SamplerStage::top_k, SamplerStage::top_k, SamplerStage::penalties,
                                                                  SamplerStage::logit_bias, SamplerStage::min_p, SamplerStage::temperature}}),
                      Contains("top_k appears twice"));
    CHECK_THROWS_WITH(specdec::validate(SamplingOptions{.chain = {SamplerStage::top_k, SamplerStage::top_p, SamplerStage::penalties,
                                                                  SamplerStage::logit_bias, SamplerStage::min_p, SamplerStage::temperature}}),
                      Contains("penalties comes after a candidate stage"));
    // A ban of every token leaves nothing to sample: the row's error says so.
    std::vector<specdec::LogitBias> ban_all;
    for (specdec::Token t = 0; t < 3; ++t) ban_all.push_back({t, -std::numeric_limits<float>::infinity()});
    std::vector<float> out(3);
    CHECK_THROWS_WITH(specdec::processed_distribution(std::vector<float>{0.f, 1.f, 2.f}, {.logit_bias = ban_all}, {}, out),
                      Contains("-inf for every one of the 3 tokens"));
}

TEST_CASE("the library's processed distribution equals the independent reference on random rows", "[sampling][exactness]") {
    // Every combination of the transforms, vocabularies 2, 5 and 50, rows of
    // Gaussian logits: the same support (tokens of probability 0) and
    // probabilities within 2e-6.
    const std::vector<SamplingOptions> options{
        {.temperature = 0.0},
        {.temperature = 1.0},
        {.temperature = 0.3},
        {.temperature = 2.5},
        {.temperature = 1e-39},
        {.top_k = 1},
        {.top_k = 3},
        {.top_p = 0.5},
        {.top_p = 0.9},
        {.min_p = 0.05},
        {.min_p = 0.5},
        {.temperature = 0.7, .top_k = 3, .top_p = 0.8},
        {.temperature = 1.5, .top_k = 10, .min_p = 0.1},
        {.temperature = 0.9, .top_p = 0.6, .min_p = 0.3},
        {.temperature = 1.2, .top_k = 20, .top_p = 0.95, .min_p = 0.02},
        {.temperature = 0.7, .top_k = 3, .top_p = 0.8, .chain = specdec::kHuggingFaceChain},
        {.temperature = 1.3, .top_p = 0.7, .min_p = 0.2, .chain = specdec::kHuggingFaceChain},
        {.temperature = 0.8, .top_k = 4, .min_p = 0.1,
         .chain = {specdec::SamplerStage::penalties, specdec::SamplerStage::logit_bias, specdec::SamplerStage::min_p,
                   specdec::SamplerStage::temperature, specdec::SamplerStage::top_p, specdec::SamplerStage::top_k}},
    };
    for (const std::size_t vocab : {2, 5, 50}) {
        for (std::uint64_t row_seed = 0; row_seed < 40; ++row_seed) {
            std::vector<float> logits(vocab);
            for (std::size_t v = 0; v < vocab; ++v) {
                const double u1 = 1.0 - specdec::counter_uniform(row_seed, vocab, specdec::RandomPurpose::draft_sample, static_cast<std::uint32_t>(v));
                const double u2 = specdec::counter_uniform(row_seed, vocab, specdec::RandomPurpose::accept_test, static_cast<std::uint32_t>(v));
                logits[v] = static_cast<float>(2.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
            }
            for (const SamplingOptions& o : options) {
                const auto library = distribution(logits, o);
                const auto reference = specdec::test::reference_distribution(logits, o);
                INFO("vocab " << vocab << " row " << row_seed << " T " << o.temperature << " top_k " << o.top_k
                              << " top_p " << o.top_p << " min_p " << o.min_p);
                for (std::size_t v = 0; v < vocab; ++v) {
                    INFO("token " << v << ": library " << library[v] << ", reference " << reference[v]);
                    REQUIRE((library[v] == 0.0f) == (reference[v] == 0.0));
                    REQUIRE(std::abs(library[v] - reference[v]) <= 2e-6);
                }
            }
        }
    }
}

TEST_CASE("the vectorised row passes agree with their scalar twins", "[sampling]") {
    // Lengths around the 8-lane vectors and the 64-token blocks, values at
    // every lane position; the scalar twins are what SPECDEC_DISABLE_SIMD runs.
    namespace d = specdec::detail;
    if (!specdec::platform::avx2_available()) SUCCEED("no AVX2 on this CPU: only the scalar twins run");
    for (const std::size_t n : {1, 7, 8, 9, 63, 64, 65, 200, 32000}) {
        std::vector<float> p(n), q(n);
        for (std::size_t i = 0; i < n; ++i) {
            p[i] = static_cast<float>(specdec::counter_uniform(n, i, specdec::RandomPurpose::draft_sample));
            q[i] = static_cast<float>(specdec::counter_uniform(n, i, specdec::RandomPurpose::accept_test));
        }
        INFO("n = " << n);
        for (const double w : {1.0, 0.37}) {
            std::vector<double> sums_scalar((n + d::kSampleBlock - 1) / d::kSampleBlock), sums(sums_scalar.size());
            const double total_scalar = d::residual_sums_scalar(p.data(), q.data(), n, w, sums_scalar.data());
            const double total = d::residual_sums(p, q.data(), w, sums.data());
            CHECK(std::abs(total - total_scalar) <= 1e-12 * std::max(1.0, total_scalar));
            for (std::size_t b = 0; b < sums.size(); ++b) CHECK(std::abs(sums[b] - sums_scalar[b]) <= 1e-12);
            CHECK(std::abs(d::residual_sums(p, nullptr, w) - d::residual_sums_scalar(p.data(), nullptr, n, w, nullptr)) <= 1e-9);
        }
        for (const std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
            std::vector<float> row = p;
            const float value = 2.0f;
            row[at] = value;
            CHECK(d::first_equal(row, value) == at);
            CHECK(d::first_equal_scalar(row.data(), n, value) == at);
            CHECK(d::all_probabilities(row));
            for (const float bad : {-1e-30f, std::nanf(""), std::numeric_limits<float>::infinity()}) {
                row[at] = bad;
                CHECK_FALSE(d::all_probabilities(row));
                CHECK_FALSE(d::all_probabilities_scalar(row.data(), n));
            }
        }
        CHECK(d::first_equal(p, 5.0f) == n);
    }
    // Greedy ties go to the lowest id wherever the tied maxima sit.
    std::vector<float> logits(100, 0.0f);
    logits[77] = logits[13] = logits[90] = 3.0f;
    CHECK(specdec::greedy_token(logits) == 13);
}
