#pragma once
// Pearson's chi-square goodness-of-fit test for the exactness tests.
// Cells whose expected count is below 5 are pooled into one cell, as the test's
// chi-square approximation requires.
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

namespace specdec::test {

// Significance levels of every exactness test: an exact configuration passes
// when p >= kExactSignificance; a negative control is caught when p < kControlSignificance.
inline constexpr double kExactSignificance = 1e-3;
inline constexpr double kControlSignificance = 1e-6;

// Regularised upper incomplete gamma function Q(a, x) = Gamma(a, x) / Gamma(a):
// power series for x < a + 1, Lentz's continued fraction otherwise.
inline double upper_regularized_gamma(double a, double x) {
    if (x <= 0.0) return 1.0;
    const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
    if (x < a + 1.0) {
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 10000; ++n) {
            term *= x / (a + n);
            sum += term;
            if (std::fabs(term) < std::fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * std::exp(log_prefactor);
    }
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 10000; ++i) {
        const double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (std::fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (std::fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double delta = d * c;
        h *= delta;
        if (std::fabs(delta - 1.0) < 1e-15) break;
    }
    return std::exp(log_prefactor) * h;
}

struct ChiSquareResult {
    double statistic = 0.0;
    std::size_t degrees_of_freedom = 0;
    double p_value = 1.0;
};

// observed[i] counts, expected_probability[i] the hypothesised distribution.
// An observation in a cell of probability 0 makes the p-value 0.
inline ChiSquareResult chi_square_test(std::span<const std::size_t> observed, std::span<const double> expected_probability) {
    if (observed.size() != expected_probability.size()) throw std::invalid_argument("chi_square_test: size mismatch");
    std::size_t total = 0;
    for (const std::size_t count : observed) total += count;
    ChiSquareResult result;
    double pooled_expected = 0.0, pooled_observed = 0.0;
    std::size_t cells = 0;
    for (std::size_t i = 0; i < observed.size(); ++i) {
        const double expected = expected_probability[i] * static_cast<double>(total);
        if (expected_probability[i] <= 0.0) {
            if (observed[i] > 0) return {std::numeric_limits<double>::infinity(), 0, 0.0};
            continue;
        }
        if (expected < 5.0) {
            pooled_expected += expected;
            pooled_observed += static_cast<double>(observed[i]);
            continue;
        }
        const double difference = static_cast<double>(observed[i]) - expected;
        result.statistic += difference * difference / expected;
        ++cells;
    }
    if (pooled_expected > 0.0) {
        const double difference = pooled_observed - pooled_expected;
        result.statistic += difference * difference / pooled_expected;
        ++cells;
    }
    result.degrees_of_freedom = cells > 1 ? cells - 1 : 1;
    result.p_value = upper_regularized_gamma(0.5 * static_cast<double>(result.degrees_of_freedom), 0.5 * result.statistic);
    return result;
}

}  // namespace specdec::test
