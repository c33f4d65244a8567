#include <cmath>
#include <limits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "support/catch.hpp"

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
