// Block verification against token-wise rejection by exact enumeration: every
// draft of a small vocabulary (V <= 4, k <= 3) is enumerated with its
// probability, and each rule's randomness is integrated analytically (the
// distribution of the kept prefix tau and of the next token). Exactness means
// that the emitted block, continued by sampling from p, has exactly the joint
// distribution of sampling from p alone; the test demands total variation
// < 1e-9 (rounding), and the gain demands E[tau] block >= token-wise - 1e-12.
// The block rule's w_i and h_i come from the library (detail::block_weights).
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"

using specdec::DraftProposal;
using specdec::DistributionRows;
using specdec::Token;

namespace {

using Distribution = std::vector<double>;
using Context = std::vector<Token>;

// A context-dependent distribution: softmax of seeded Gaussians keyed by the whole context.
struct RandomModel {
    std::size_t vocab;
    std::uint64_t seed;
    double scale;

    Distribution operator()(const Context& context) const {
        std::uint64_t key = 1469598103934665603ull;
        for (const Token t : context) key = (key ^ static_cast<std::uint64_t>(t + 1)) * 1099511628211ull;
        Distribution d(vocab);
        double total = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) {
            const double u1 = 1.0 - specdec::counter_uniform(seed, key, specdec::RandomPurpose::draft_sample, static_cast<std::uint32_t>(v));
            const double u2 = specdec::counter_uniform(seed, key, specdec::RandomPurpose::accept_test, static_cast<std::uint32_t>(v));
            d[v] = std::exp(scale * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
            total += d[v];
        }
        for (double& x : d) x /= total;
        return d;
    }
};

using Model = std::function<Distribution(const Context&)>;
// Stop rule: (index i, q_i) -> true ends the draft before draft i.
using StopRule = std::function<bool(std::size_t, const Distribution&)>;

// block_tokenwise_residual: the negative control, block verification's tau
// with the token-wise residual norm(max(p - q, 0)) instead of w_tau's.
enum class RuleKind { tokenwise, block, block_tokenwise_residual };

struct Outcome {
    std::size_t tau;
    Distribution next;  // distribution of the token emitted after x_1..x_tau
    double probability;
};

Distribution normalised(Distribution d) {
    double total = 0.0;
    for (const double x : d) total += x;
    for (double& x : d) x = total > 0.0 ? x / total : 0.0;
    return d;
}

// The rule's outcomes for one draft, its randomness integrated analytically.
std::vector<Outcome> outcomes(RuleKind kind, const std::vector<Token>& x, const std::vector<Distribution>& q,
                              const std::vector<Distribution>& p, bool point_mass) {
    const std::size_t k = x.size(), vocab = p[0].size();
    std::vector<Outcome> result;
    auto q_of = [&](std::size_t i, std::size_t v) { return point_mass ? (static_cast<Token>(v) == x[i] ? 1.0 : 0.0) : q[i][v]; };
    if (kind == RuleKind::tokenwise) {
        double reach = 1.0;
        for (std::size_t i = 0; i < k; ++i) {
            const std::size_t xi = static_cast<std::size_t>(x[i]);
            const double accept = std::min(1.0, p[i][xi] / q_of(i, xi));
            Distribution residual(vocab);
            for (std::size_t v = 0; v < vocab; ++v) residual[v] = std::max(p[i][v] - q_of(i, v), 0.0);
            result.push_back({i, normalised(residual), reach * (1.0 - accept)});
            reach *= accept;
        }
        result.push_back({k, p[k], reach});
        return result;
    }
    // Block verification with the library's weights.
    std::vector<float> p_rows, q_rows;
    for (const auto& row : p) p_rows.insert(p_rows.end(), row.begin(), row.end());
    DraftProposal draft{.tokens = x, .vocab = vocab};
    if (!point_mass)
        for (const auto& row : q) draft.probabilities.insert(draft.probabilities.end(), row.begin(), row.end());
    std::vector<double> w, h;
    specdec::detail::block_weights(draft, DistributionRows{p_rows.data(), k + 1, vocab}, w, h);
    for (std::size_t tau = 0; tau <= k; ++tau) {
        double probability = tau == 0 ? 1.0 : h[tau - 1];
        for (std::size_t j = tau; j < k; ++j) probability *= 1.0 - h[j];
        if (tau == k) {
            result.push_back({k, p[k], probability});
            continue;
        }
        const double weight = tau == 0 || kind == RuleKind::block_tokenwise_residual ? 1.0 : w[tau - 1];
        Distribution residual(vocab);
        // The library computes with float rows: use the same values.
        for (std::size_t v = 0; v < vocab; ++v)
            residual[v] = std::max(weight * p_rows[tau * vocab + v] - static_cast<double>(draft.q_of(tau, static_cast<Token>(v))), 0.0);
        result.push_back({tau, normalised(residual), probability});
    }
    return result;
}

struct Enumeration {
    double total_variation = 0.0;
    double expected_accepted = 0.0;
};

// Enumerates drafts (sampled from q, or q's argmax for point-mass drafts),
// stopped by `stop`, at most k long; returns the TV between the emitted block
// continued by p and p's own joint distribution of k + 1 tokens.
Enumeration enumerate(RuleKind kind, const Model& p_model, const Model& q_model, std::size_t vocab, std::size_t k,
                      bool point_mass, const StopRule& stop) {
    const Context prompt{0};
    std::size_t cells = 1;
    for (std::size_t i = 0; i <= k; ++i) cells *= vocab;
    std::vector<double> emitted(cells, 0.0), exact(cells, 0.0);
    auto cell_of = [&](const Context& sequence) {
        std::size_t cell = 0;
        for (std::size_t i = 0; i <= k; ++i) cell = cell * vocab + static_cast<std::size_t>(sequence[prompt.size() + i]);
        return cell;
    };
    // Adds `probability` x P_p(continuation of `sequence` to k + 1 tokens) to `into`.
    std::function<void(Context&, double, std::vector<double>&)> extend = [&](Context& sequence, double probability,
                                                                             std::vector<double>& into) {
        if (sequence.size() == prompt.size() + k + 1) {
            into[cell_of(sequence)] += probability;
            return;
        }
        const Distribution p = p_model(sequence);
        for (std::size_t v = 0; v < vocab; ++v) {
            if (p[v] == 0.0) continue;
            sequence.push_back(static_cast<Token>(v));
            extend(sequence, probability * p[v], into);
            sequence.pop_back();
        }
    };
    Context start = prompt;
    extend(start, 1.0, exact);

    Enumeration result;
    std::function<void(Context&, std::vector<Token>&, std::vector<Distribution>&, double)> draft_from =
        [&](Context& context, std::vector<Token>& x, std::vector<Distribution>& q, double probability) {
            const Distribution q_next = q_model(context);
            const bool stopped = x.size() == k || stop(x.size(), q_next);
            if (stopped) {
                std::vector<Distribution> p;
                Context walk = prompt;
                for (std::size_t i = 0; i <= x.size(); ++i) {
                    p.push_back(p_model(walk));
                    if (i < x.size()) walk.push_back(x[i]);
                }
                for (const Outcome& o : outcomes(kind, x, q, p, point_mass)) {
                    if (o.probability == 0.0) continue;
                    result.expected_accepted += probability * o.probability * static_cast<double>(o.tau);
                    for (std::size_t v = 0; v < vocab; ++v) {
                        if (o.next[v] == 0.0) continue;
                        Context sequence(prompt);
                        sequence.insert(sequence.end(), x.begin(), x.begin() + static_cast<std::ptrdiff_t>(o.tau));
                        sequence.push_back(static_cast<Token>(v));
                        extend(sequence, probability * o.probability * o.next[v], emitted);
                    }
                }
                return;
            }
            q.push_back(q_next);
            if (point_mass) {
                const Token best = static_cast<Token>(std::max_element(q_next.begin(), q_next.end()) - q_next.begin());
                x.push_back(best);
                context.push_back(best);
                draft_from(context, x, q, probability);
                context.pop_back();
                x.pop_back();
            } else {
                for (std::size_t v = 0; v < vocab; ++v) {
                    if (q_next[v] == 0.0) continue;
                    x.push_back(static_cast<Token>(v));
                    context.push_back(static_cast<Token>(v));
                    draft_from(context, x, q, probability * q_next[v]);
                    context.pop_back();
                    x.pop_back();
                }
            }
            q.pop_back();
        };
    Context context = prompt;
    std::vector<Token> x;
    std::vector<Distribution> q;
    draft_from(context, x, q, 1.0);
    for (std::size_t c = 0; c < cells; ++c) result.total_variation += 0.5 * std::abs(emitted[c] - exact[c]);
    return result;
}

const StopRule kNeverStop = [](std::size_t, const Distribution&) { return false; };

}  // namespace

TEST_CASE("block verification keeps 11/9 drafts on p = (1/3, 2/3), q = (2/3, 1/3), k = 2, token-wise 10/9", "[acceptance][block]") {
    const Model p = [](const Context&) { return Distribution{1.0 / 3.0, 2.0 / 3.0}; };
    const Model q = [](const Context&) { return Distribution{2.0 / 3.0, 1.0 / 3.0}; };
    const Enumeration block = enumerate(RuleKind::block, p, q, 2, 2, false, kNeverStop);
    const Enumeration tokenwise = enumerate(RuleKind::tokenwise, p, q, 2, 2, false, kNeverStop);
    INFO("block " << block.expected_accepted << " (TV " << block.total_variation << "), token-wise "
                  << tokenwise.expected_accepted << " (TV " << tokenwise.total_variation << ")");
    CHECK(block.expected_accepted == Approx(11.0 / 9.0).epsilon(1e-6));
    CHECK(tokenwise.expected_accepted == Approx(10.0 / 9.0).epsilon(1e-6));
    CHECK(block.total_variation < 1e-7);
    CHECK(tokenwise.total_variation < 1e-7);
}

TEST_CASE("block verification is exact and keeps at least as many drafts as token-wise on random context-dependent p and q", "[exactness][acceptance][block]") {
    std::uint64_t seed = 100;
    double largest_gain = 0.0;
    for (const std::size_t vocab : {2, 3, 4}) {
        for (const std::size_t k : {1, 2, 3}) {
            for (const bool point_mass : {false, true}) {
                for (int trial = 0; trial < 3; ++trial) {
                    ++seed;
                    const RandomModel p{vocab, seed, 1.0 + 0.5 * trial};
                    const RandomModel q{vocab, seed + 7919, 1.0};
                    const Enumeration block = enumerate(RuleKind::block, p, q, vocab, k, point_mass, kNeverStop);
                    const Enumeration tokenwise = enumerate(RuleKind::tokenwise, p, q, vocab, k, point_mass, kNeverStop);
                    INFO("V " << vocab << " k " << k << " point mass " << point_mass << " trial " << trial << ": block E "
                              << block.expected_accepted << " TV " << block.total_variation << ", token-wise E "
                              << tokenwise.expected_accepted << " TV " << tokenwise.total_variation);
                    CHECK(block.total_variation < 1e-6);
                    CHECK(tokenwise.total_variation < 1e-6);
                    CHECK(block.expected_accepted >= tokenwise.expected_accepted - 1e-6);  // rows are floats in the library
                    if (point_mass) CHECK(block.expected_accepted == Approx(tokenwise.expected_accepted).margin(1e-6));
                    if (k == 1) CHECK(block.expected_accepted == Approx(tokenwise.expected_accepted).margin(1e-6));
                    largest_gain = std::max(largest_gain, block.expected_accepted - tokenwise.expected_accepted);
                }
            }
        }
    }
    INFO("largest gain " << largest_gain);
    CHECK(largest_gain > 0.01);
}

TEST_CASE("both rules stay exact when a confidence stop reading only q ends the draft early", "[exactness][acceptance][block]") {
    std::uint64_t seed = 500;
    for (const std::size_t vocab : {2, 3, 4}) {
        for (const std::size_t k : {2, 3}) {
            for (const double threshold : {0.4, 0.6}) {
                ++seed;
                const RandomModel p{vocab, seed, 1.5};
                const RandomModel q{vocab, seed + 31, 1.5};
                const StopRule stop = [threshold](std::size_t i, const Distribution& q_i) {
                    return i >= 1 && *std::max_element(q_i.begin(), q_i.end()) < threshold;
                };
                for (const RuleKind kind : {RuleKind::tokenwise, RuleKind::block}) {
                    const Enumeration e = enumerate(kind, p, q, vocab, k, false, stop);
                    INFO("V " << vocab << " k " << k << " threshold " << threshold << " block " << (kind == RuleKind::block)
                              << ": TV " << e.total_variation << " E " << e.expected_accepted);
                    CHECK(e.total_variation < 1e-6);
                }
            }
        }
    }
}

TEST_CASE("negative control: a block rule with the token-wise residual is caught by the enumeration", "[exactness][acceptance][block][negative-control]") {
    // The two residuals differ only where w_tau < 1 leaves residual mass, so
    // the error depends on the pair: every configuration must show it far
    // above rounding (the exact rule's TV), and some must show it plainly.
    double largest = 0.0;
    std::uint64_t seed = 900;
    // (At V = 3 one token often carries all residual mass, and then both
    // residuals are the same point mass.)
    for (const std::size_t vocab : {4}) {
        for (const std::size_t k : {2, 3}) {
            for (const double scale : {1.5, 3.0}) {
                ++seed;
                const RandomModel p{vocab, seed, scale};
                const RandomModel q{vocab, seed + 17, scale};
                const Enumeration right = enumerate(RuleKind::block, p, q, vocab, k, false, kNeverStop);
                const Enumeration wrong = enumerate(RuleKind::block_tokenwise_residual, p, q, vocab, k, false, kNeverStop);
                INFO("V " << vocab << " k " << k << " scale " << scale << ": TV with the block residual "
                          << right.total_variation << ", with the token-wise residual " << wrong.total_variation);
                CHECK(right.total_variation < 1e-6);
                CHECK(wrong.total_variation > 100.0 * right.total_variation);
                largest = std::max(largest, wrong.total_variation);
            }
        }
    }
    INFO("largest TV of the control " << largest);
    CHECK(largest > 3e-3);
}


TEST_CASE("block verification on lazy rows decides as on dense rows and materialises only the rows its test reaches", "[acceptance][block]") {
    // k = 4 drafts over 1003 tokens; p close to q so that every kept length
    // 0..4 occurs. The reference decides with every h_i computed up front
    // (detail::block_weights) and the same uniforms.
    constexpr std::size_t k = 4, vocab = 1003;
    const specdec::SamplingOptions sampling{.temperature = 1.0};
    std::vector<std::size_t> kept_counts(k + 1, 0);
    for (std::uint64_t trial = 0; trial < 300; ++trial) {
        std::vector<float> target_logits((k + 1) * vocab), draft_logits(k * vocab);
        for (std::size_t i = 0; i < target_logits.size(); ++i) {
            const double base = 3.0 * std::sin(0.37 * double(i % vocab) + 0.9 * double(i / vocab));
            target_logits[i] = static_cast<float>(
                base + 0.8 * specdec::counter_uniform(trial, i, specdec::RandomPurpose::draft_sample));
            if (i < draft_logits.size()) draft_logits[i] = static_cast<float>(base);
        }
        DraftProposal draft;
        draft.vocab = vocab;
        draft.probabilities.resize(k * vocab);
        for (std::size_t i = 0; i < k; ++i) {
            const std::span<float> q_row(draft.probabilities.data() + i * vocab, vocab);
            specdec::logits_to_distribution(std::span<const float>(draft_logits.data() + i * vocab, vocab), sampling, q_row);
            draft.tokens.push_back(specdec::sample_from_distribution(
                q_row, specdec::counter_uniform(trial + 1000, i, specdec::RandomPurpose::draft_sample)));
        }
        std::vector<float> p_rows((k + 1) * vocab);
        for (std::size_t i = 0; i <= k; ++i) {
            specdec::logits_to_distribution(std::span<const float>(target_logits.data() + i * vocab, vocab), sampling,
                                            std::span<float>(p_rows.data() + i * vocab, vocab));
        }
        const specdec::CounterRng rng{trial + 77};
        const std::uint64_t first_position = 40 + trial;
        const DistributionRows dense{p_rows.data(), k + 1, vocab};
        std::vector<double> w, h;
        specdec::detail::block_weights(draft, dense, w, h);
        std::size_t expected_tau = 0;
        for (std::size_t i = k; i > 0 && expected_tau == 0; --i) {
            if (rng.uniform(first_position, specdec::RandomPurpose::block_test, static_cast<std::uint32_t>(i)) <= h[i - 1])
                expected_tau = i;
        }
        specdec::detail::LazyDistributions lazy;
        lazy.reset(specdec::dense_logits(target_logits, k + 1, vocab), 0, k + 1, sampling, "test");
        const auto on_lazy = specdec::accept_block_verification(draft, DistributionRows{.rows = k + 1, .vocab = vocab, .lazy = &lazy},
                                                                rng, first_position);
        const auto on_dense = specdec::accept_block_verification(draft, dense, rng, first_position);
        INFO("trial " << trial << " expected tau " << expected_tau);
        CHECK(on_lazy.accepted == expected_tau);
        CHECK(on_dense.accepted == expected_tau);
        CHECK(on_lazy.next_token == on_dense.next_token);
        // Rows tau..k-1 for the failed tests and the successful one, then
        // the row the next token is drawn from (row k, or row 0 when tau = 0).
        const std::size_t expected_rows = expected_tau == k ? 1 : expected_tau == 0 ? k : k - expected_tau;
        CHECK(lazy.full_rows() == expected_rows);
        ++kept_counts[expected_tau];
    }
    for (std::size_t tau = 0; tau <= k; ++tau) {
        INFO("steps keeping " << tau << " drafts: " << kept_counts[tau]);
        CHECK(kept_counts[tau] > 0);
    }
}
