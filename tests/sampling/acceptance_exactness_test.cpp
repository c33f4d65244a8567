// Exactness of the acceptance rule alone: whatever q the draft came from, the
// first emitted token is distributed as the target's p_1. Pearson chi-square
// at fixed seeds; a configuration passes when p-value >= 1e-3, and the
// negative controls (deliberately wrong rules) must be rejected at p < 1e-6.
#include <algorithm>
#include <cmath>
#include <vector>

#include "specdec/core/rng.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "support/catch.hpp"
#include "support/statistics.hpp"

using specdec::AcceptanceResult;
using specdec::CounterRng;
using specdec::DistributionRows;
using specdec::DraftProposal;
using specdec::RandomPurpose;
using specdec::Token;
using specdec::test::kControlSignificance;
using specdec::test::kExactSignificance;

namespace {

// Random distributions with a realistic spread: softmax of scaled Gaussians.
std::vector<float> random_rows(std::size_t rows, std::size_t vocab, std::uint64_t seed, double scale) {
    std::vector<float> out(rows * vocab);
    for (std::size_t r = 0; r < rows; ++r) {
        double total = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) {
            const double u1 = 1.0 - specdec::counter_uniform(seed, r, RandomPurpose::draft_sample, static_cast<std::uint32_t>(v));
            const double u2 = specdec::counter_uniform(seed, r, RandomPurpose::accept_test, static_cast<std::uint32_t>(v));
            const double g = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
            out[r * vocab + v] = static_cast<float>(std::exp(scale * g));
            total += out[r * vocab + v];
        }
        for (std::size_t v = 0; v < vocab; ++v) out[r * vocab + v] = static_cast<float>(out[r * vocab + v] / total);
    }
    return out;
}

using Rule = AcceptanceResult (*)(const DraftProposal&, DistributionRows, const CounterRng&, std::uint64_t);

AcceptanceResult correct_rule(const DraftProposal& d, DistributionRows p, const CounterRng& rng, std::uint64_t pos) {
    return specdec::accept_rejection_sampling(d, p, rng, pos);
}

// Negative control: accept everything (emits the draft's distribution).
AcceptanceResult always_accept(const DraftProposal& d, DistributionRows p, const CounterRng& rng, std::uint64_t pos) {
    return {d.size(), specdec::sample_from_distribution(p.row(d.size()), rng.uniform(pos + d.size(), RandomPurpose::target_sample))};
}

// Negative control: on rejection, resample from p instead of the residual.
AcceptanceResult forgets_residual(const DraftProposal& d, DistributionRows p, const CounterRng& rng, std::uint64_t pos) {
    for (std::size_t i = 0; i < d.size(); ++i) {
        const Token x = d.tokens[i];
        if (rng.uniform(pos + i, RandomPurpose::accept_test) * d.q_of(i, x) < p.row(i)[static_cast<std::size_t>(x)]) continue;
        return {i, specdec::sample_from_distribution(p.row(i), rng.uniform(pos + i, RandomPurpose::target_sample))};
    }
    return {d.size(), specdec::sample_from_distribution(p.row(d.size()), rng.uniform(pos + d.size(), RandomPurpose::target_sample))};
}

struct Experiment {
    std::size_t vocab;
    std::size_t draft_tokens;
    bool point_mass_draft = false;
};

// Draws the first emitted token `samples` times: drafts x_i ~ q_i, then the rule.
specdec::test::ChiSquareResult first_token_test(const Experiment& e, Rule rule, std::uint64_t seed, std::size_t samples) {
    const std::vector<float> p = random_rows(e.draft_tokens + 1, e.vocab, seed, 1.0);
    const std::vector<float> q = random_rows(e.draft_tokens, e.vocab, seed + 1000, 1.0);
    std::vector<std::size_t> counts(e.vocab, 0);
    const DistributionRows p_rows{p.data(), e.draft_tokens + 1, e.vocab};
    for (std::size_t s = 0; s < samples; ++s) {
        const CounterRng rng{seed * 1000003 + s};
        DraftProposal draft;
        draft.vocab = e.vocab;
        for (std::size_t i = 0; i < e.draft_tokens; ++i) {
            const std::span<const float> q_i{q.data() + i * e.vocab, e.vocab};
            draft.tokens.push_back(specdec::sample_from_distribution(q_i, rng.uniform(i, RandomPurpose::draft_sample)));
        }
        if (!e.point_mass_draft) draft.probabilities = q;
        const AcceptanceResult result = rule(draft, p_rows, rng, 0);
        const Token first = result.accepted > 0 ? draft.tokens[0] : result.next_token;
        ++counts[static_cast<std::size_t>(first)];
    }
    const std::vector<double> expected(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(e.vocab));
    return specdec::test::chi_square_test(counts, expected);
}

}  // namespace

TEST_CASE("token-wise rejection sampling emits the target distribution p_1 for any draft q", "[exactness][acceptance]") {
    std::uint64_t seed = 11;
    for (const std::size_t vocab : {2, 5, 50}) {
        for (const std::size_t k : {1, 3, 8}) {
            for (const bool point_mass : {false, true}) {
                const auto result = first_token_test({vocab, k, point_mass}, correct_rule, ++seed, 40000);
                INFO("vocab " << vocab << ", k " << k << ", point-mass draft " << point_mass << ": chi2 "
                              << result.statistic << " df " << result.degrees_of_freedom << " p " << result.p_value);
                CHECK(result.p_value >= kExactSignificance);
            }
        }
    }
}

TEST_CASE("the same chi-square test rejects an always-accept rule and a rule that forgets the residual", "[exactness][acceptance][negative-control]") {
    for (const std::size_t k : {1, 3}) {
        const auto accept_all = first_token_test({5, k}, always_accept, 7, 40000);
        INFO("always accept, k " << k << ": p " << accept_all.p_value);
        CHECK(accept_all.p_value < kControlSignificance);
        const auto no_residual = first_token_test({5, k}, forgets_residual, 7, 40000);
        INFO("forgets residual, k " << k << ": p " << no_residual.p_value);
        CHECK(no_residual.p_value < kControlSignificance);
    }
}

TEST_CASE("a draft token the drafter gave probability 0 is never accepted", "[acceptance]") {
    const std::vector<float> p{0.5f, 0.5f, 0.5f, 0.5f};  // two rows over vocab 2
    DraftProposal draft{.tokens = {1}, .probabilities = {1.0f, 0.0f}, .vocab = 2};
    for (std::uint64_t seed = 0; seed < 1000; ++seed) {
        const auto result = specdec::accept_rejection_sampling(draft, {p.data(), 2, 2}, CounterRng{seed}, 0);
        REQUIRE(result.accepted == 0);
    }
}

TEST_CASE("a draft token the target gives probability 0 is never accepted nor emitted", "[acceptance]") {
    const std::vector<float> p{0.0f, 0.6f, 0.4f, 1.0f / 3, 1.0f / 3, 1.0f / 3};
    DraftProposal point{.tokens = {0}, .vocab = 3};
    DraftProposal dense{.tokens = {0}, .probabilities = {0.9f, 0.05f, 0.05f}, .vocab = 3};
    for (std::uint64_t seed = 0; seed < 2000; ++seed) {
        for (const DraftProposal* draft : {&point, &dense}) {
            const auto result = specdec::accept_rejection_sampling(*draft, {p.data(), 2, 3}, CounterRng{seed}, 0);
            REQUIRE(result.accepted == 0);
            REQUIRE(result.next_token != 0);
        }
    }
}

TEST_CASE("when q equals p every draft is accepted and the bonus comes from the last row", "[acceptance]") {
    const std::vector<float> p = random_rows(4, 6, 3, 1.0);
    const std::vector<float> q(p.begin(), p.begin() + 18);
    std::vector<std::size_t> bonus_counts(6, 0);
    for (std::uint64_t seed = 0; seed < 20000; ++seed) {
        const CounterRng rng{seed};
        DraftProposal draft{.probabilities = q, .vocab = 6};
        for (std::size_t i = 0; i < 3; ++i)
            draft.tokens.push_back(specdec::sample_from_distribution(draft.q(i), rng.uniform(i, RandomPurpose::draft_sample)));
        const auto result = specdec::accept_rejection_sampling(draft, {p.data(), 4, 6}, rng, 0);
        REQUIRE(result.accepted == 3);
        ++bonus_counts[static_cast<std::size_t>(result.next_token)];
    }
    const std::vector<double> last_row(p.begin() + 18, p.end());
    CHECK(specdec::test::chi_square_test(bonus_counts, last_row).p_value >= kExactSignificance);
}

TEST_CASE("a point-mass draft on a token of target probability 1 is always accepted", "[acceptance]") {
    const std::vector<float> p{0.0f, 1.0f, 0.0f, 0.2f, 0.3f, 0.5f};
    DraftProposal draft{.tokens = {1}, .vocab = 3};
    for (std::uint64_t seed = 0; seed < 1000; ++seed)
        REQUIRE(specdec::accept_rejection_sampling(draft, {p.data(), 2, 3}, CounterRng{seed}, 0).accepted == 1);
}

TEST_CASE("without residual mass the residual draw falls back to p and never emits a zero-probability token", "[acceptance]") {
    // q == p: max(p - q, 0) is 0 everywhere, so the draw must follow p itself
    // (chi-square at 1e-3), and token 0 (p = 0) must never come out.
    const std::vector<float> p{0.0f, 0.7f, 0.3f};
    DraftProposal draft{.tokens = {1}, .probabilities = {0.0f, 0.7f, 0.3f}, .vocab = 3};
    std::vector<std::size_t> counts(3, 0);
    for (std::uint64_t seed = 0; seed < 20000; ++seed) {
        const double u = CounterRng{seed}.uniform(0, RandomPurpose::target_sample);
        ++counts[static_cast<std::size_t>(specdec::detail::sample_residual(p, draft, 0, u))];
    }
    CHECK(counts[0] == 0);
    const auto result = specdec::test::chi_square_test(counts, std::vector<double>{0.0, 0.7, 0.3});
    INFO("counts " << counts[1] << " / " << counts[2] << ": p " << result.p_value);
    CHECK(result.p_value >= kExactSignificance);
    // A fallback that drew uniformly over the positive tokens would be caught.
    const auto uniform = specdec::test::chi_square_test(counts, std::vector<double>{0.0, 0.5, 0.5});
    CHECK(uniform.p_value < kControlSignificance);
}

TEST_CASE("greedy verification keeps drafts up to the first mismatch and emits the target's argmax", "[acceptance]") {
    const std::vector<Token> drafts{4, 2, 7};
    CHECK(specdec::accept_greedy(drafts, std::vector<Token>{4, 2, 7, 9}).accepted == 3);
    CHECK(specdec::accept_greedy(drafts, std::vector<Token>{4, 2, 7, 9}).next_token == 9);
    CHECK(specdec::accept_greedy(drafts, std::vector<Token>{4, 3, 7, 9}).accepted == 1);
    CHECK(specdec::accept_greedy(drafts, std::vector<Token>{4, 3, 7, 9}).next_token == 3);
    CHECK(specdec::accept_greedy(drafts, std::vector<Token>{0, 2, 7, 9}).accepted == 0);
}

TEST_CASE("acceptance rejects mismatched shapes and out-of-vocabulary drafts", "[acceptance][errors]") {
    const std::vector<float> p(3 * 4, 0.25f);
    DraftProposal draft{.tokens = {1, 2}, .vocab = 4};
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(draft, {p.data(), 2, 4}, CounterRng{1}, 0), Catch::Contains("k + 1 = 3"));
    DraftProposal bad_token{.tokens = {1, 9}, .vocab = 4};
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(bad_token, {p.data(), 3, 4}, CounterRng{1}, 0), Catch::Contains("draft token 9"));
    DraftProposal bad_vocab{.tokens = {1, 2}, .probabilities = std::vector<float>(10, 0.2f), .vocab = 5};
    CHECK_THROWS_WITH(specdec::accept_rejection_sampling(bad_vocab, {p.data(), 3, 4}, CounterRng{1}, 0), Catch::Contains("vocabulary 5"));
}

TEST_CASE("the residual draw over many blocks follows norm(max(w p - q, 0)) for full and point-mass drafts", "[exactness][acceptance]") {
    // 300 tokens span five 64-token blocks (the last one partial), so the
    // draw goes through the block sums and a scan of one block. Chi-square at
    // 1e-3 against the exact residual, computed here in double; tokens of zero
    // residual mass must never come out.
    const std::size_t vocab = 300;
    const std::vector<float> p = random_rows(1, vocab, 11, 1.5), q = random_rows(1, vocab, 12, 1.5);
    DraftProposal full{.tokens = {7}, .probabilities = q, .vocab = vocab};
    DraftProposal point{.tokens = {static_cast<Token>(std::max_element(p.begin(), p.end()) - p.begin())}};
    for (const double w : {1.0, 0.6}) {
        for (const DraftProposal* draft : {&full, &point}) {
            std::vector<double> expected(vocab);
            double mass = 0.0;
            for (std::size_t x = 0; x < vocab; ++x) {
                const double q_x = draft->q_of(0, static_cast<Token>(x));
                expected[x] = std::max(w * p[x] - q_x, 0.0);
                mass += expected[x];
            }
            for (double& e : expected) e /= mass;
            std::vector<std::size_t> counts(vocab, 0);
            for (std::uint64_t seed = 0; seed < 60000; ++seed) {
                const double u = CounterRng{seed}.uniform(3, RandomPurpose::target_sample);
                ++counts[static_cast<std::size_t>(specdec::detail::sample_residual(p, *draft, 0, u, w))];
            }
            std::size_t impossible = 0;
            for (std::size_t x = 0; x < vocab; ++x) impossible += expected[x] == 0.0 ? counts[x] : 0;
            const auto result = specdec::test::chi_square_test(counts, expected);
            INFO("w " << w << (draft->point_mass() ? ", point mass" : ", full q") << ": p " << result.p_value);
            CHECK(impossible == 0);
            CHECK(result.p_value >= kExactSignificance);
            // The same test catches a draw from p instead of the residual.
            std::vector<double> plain(p.begin(), p.end());
            CHECK(specdec::test::chi_square_test(counts, plain).p_value < kControlSignificance);
        }
    }
}
