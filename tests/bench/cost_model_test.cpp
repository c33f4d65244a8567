// The Leviathan cost model as the benchmark computes it, on hand-worked values.
#include <cmath>
#include <vector>

#include "support/catch.hpp"

#include "../../benchmarks/cost_model.hpp"

using namespace specdec::bench;

namespace {
bool near(double a, double b, double tolerance = 1e-12) { return std::abs(a - b) <= tolerance; }
}  // namespace

TEST_CASE("expected tokens per pass is the geometric series 1 + alpha + ... + alpha^k", "[bench][cost-model]") {
    CHECK(near(expected_tokens_per_pass(0.0, 4), 1.0));
    CHECK(near(expected_tokens_per_pass(0.5, 1), 1.5));
    CHECK(near(expected_tokens_per_pass(0.5, 3), 1.875));  // (1 - 0.5^4) / 0.5
    CHECK(near(expected_tokens_per_pass(0.8, 4), (1.0 - std::pow(0.8, 5)) / 0.2));
    CHECK(near(expected_tokens_per_pass(0.9, 0), 1.0));
}

TEST_CASE("as alpha tends to 1 every draft is accepted: k + 1 tokens per pass", "[bench][cost-model]") {
    CHECK(near(expected_tokens_per_pass(1.0, 4), 5.0));
    CHECK(near(expected_tokens_per_pass(1.0 - 1e-12, 7), 8.0, 1e-9));
    // The closed form's 0/0 at alpha = 1 must not leak into the result.
    CHECK(std::isfinite(predicted_speedup(1.0, 3, 0.1, 1.0)));
    CHECK(near(predicted_speedup(1.0, 3, 0.1, 1.0), 4.0 / 1.3));
}

TEST_CASE("predicted speedup is E / (k c + v_k)", "[bench][cost-model]") {
    // Leviathan's setting v_k = 1: alpha = 0.8, k = 4, c = 0.05 -> 3.3616 / 1.2.
    CHECK(near(predicted_speedup(0.8, 4, 0.05, 1.0), (1.0 - std::pow(0.8, 5)) / 0.2 / 1.2));
    // A free draft and free verification of extra tokens: speedup = E.
    CHECK(near(predicted_speedup(0.5, 2, 0.0, 1.0), 1.75));
    // Verification that costs k+1 single passes and a draft as costly as the target: never a win.
    CHECK(predicted_speedup(0.9, 4, 1.0, 5.0) < 1.0);
    // The notes' example: c = 0.693, alpha = 0.9 -> the best k is 2.
    std::size_t best_k = 0;
    double best = 0.0;
    for (std::size_t k = 1; k <= 10; ++k) {
        const double s = predicted_speedup(0.9, k, 0.693, 1.0);
        if (s > best) best = s, best_k = k;
    }
    CHECK(best_k == 2);
}

TEST_CASE("invalid cost model inputs are rejected", "[bench][cost-model]") {
    CHECK_THROWS(expected_tokens_per_pass(-0.1, 2));
    CHECK_THROWS(expected_tokens_per_pass(1.5, 2));
    CHECK_THROWS(expected_tokens_per_pass(std::nan(""), 2));
    CHECK_THROWS(predicted_speedup(0.5, 2, -1.0, 1.0));
    CHECK_THROWS(predicted_speedup(0.5, 2, 0.1, 0.0));
}

TEST_CASE("per-token acceptance counts only drafts that were tested", "[bench][cost-model]") {
    // 10 steps of k = 2: first draft accepted 8 times, second tested 8 times
    // and accepted 4 times. alpha = (8 + 4) / (10 + 8); accepted / proposed would be 12 / 20.
    const std::vector<std::size_t> tested{10, 8};
    const std::vector<std::size_t> accepted{8, 4};
    CHECK(near(per_token_acceptance(tested, accepted), 12.0 / 18.0));
    const std::vector<double> conditional = conditional_acceptance_at_position(tested, accepted);
    REQUIRE(conditional.size() == 2);
    CHECK(near(conditional[0], 0.8));
    CHECK(near(conditional[1], 0.5));
    CHECK(per_token_acceptance(std::vector<std::size_t>{}, std::vector<std::size_t>{}) == 0.0);
    CHECK(conditional_acceptance_at_position(std::vector<std::size_t>{0}, std::vector<std::size_t>{0}) ==
          std::vector<double>{0.0});
}

TEST_CASE("per-token acceptance recovers alpha when acceptances are independent", "[bench][cost-model]") {
    // Expected counters of 1000 steps, k = 3, alpha = 0.7: accepted_i = 1000 alpha^(i+1).
    const std::vector<std::size_t> tested{1000, 700, 490};
    const std::vector<std::size_t> accepted{700, 490, 343};
    CHECK(near(per_token_acceptance(tested, accepted), 0.7, 1e-12));
}
