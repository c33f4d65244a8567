#pragma once
// The exactness harness: runs a decoder configuration for many seeds, counts
// the whole generated sequences of a fixed length, and compares the counts
// with the sequence distribution of the processed target, computed as a
// product of conditionals by an independent reference of the sampling
// transforms (written from their documented meaning in
// specdec/core/sampling_options.hpp, not by calling the library).
//
// Why whole sequences of length >= k + 1: a decoder drafts at most
// min(k, max_new_tokens - 1) tokens per step, so only sequences at least k + 1
// long make its first step draft every position 0 .. k - 1, and only then can a
// bug that shows at a deep draft position (a wrong residual at position 2, a
// wrong bonus row) change what is counted. The harness also reports how often
// each draft position was reached and accepted, and a run that never reaches
// its deepest position fails (it would test less than it claims).
//
// Use:
//   ExactnessSetup setup{.name = "...", .prompt = {...}, .vocab = 3, .length = 5, .draft_tokens = 4,
//                        .samples = 20000, .target = reference_conditional(target_model, sampling)};
//   ExactnessReport report = run_exactness(setup, [&](std::uint64_t seed) {
//       ... build a decoder with DecodingOptions{.draft_tokens = 4, .sampling = sampling, .seed = seed,
//                                                .max_new_tokens = 5} ...
//       return sampled_run(decoder.generate(setup.prompt));
//   });
//   // or, for a SpeculativeDecoder with any drafter and acceptance rule:
//   run_exactness(setup, speculative_runner(target, draft, {.draft_tokens = 4, .sampling = sampling,
//                                                           .max_new_tokens = 5}, setup.prompt, MyRule{}));
//   check_exact(report);      // or check_caught(report) for a negative control
//
// Cells: every one of the vocab^length sequences is a cell, except that
// sequences too rare for the chi-square approximation are merged: walking the
// prefix tree, the children of a prefix whose expected count is below
// min_expected are pooled into one cell under that prefix (still below it:
// into one overflow cell). Sequences of reference probability 0 stay separate
// cells, so a single such sequence observed fails the test (p = 0).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/generation_result.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/statistics.hpp"

namespace specdec::test {

// ---------------------------------------------------------------------------
// Independent reference of the processed distribution (double precision),
// written from SamplingOptions' documented meaning, stage by stage:
//   allowed (the constraint's mask at this history, if any): others -> -inf.
//   In chain order, the logit stages: logit_bias adds; penalties count each
//     token of the last penalty_last_n history tokens (c > 0): l / r if
//     l > 0 else l * r, then - c * frequency - presence.
//   temperature 0: a point mass on the argmax, ties to the lowest id.
//   Rank: decreasing logit, ties by increasing id.
//   In chain order, the candidate stages over the kept tokens, with masses
//   softmax(l * s) where s = 1 before the temperature stage and 1 / T after:
//   top_k keeps rank < top_k; top_p keeps a candidate iff the (renormalised)
//   mass of the kept candidates ranked before it is below top_p; min_p keeps
//   those with mass >= min_p * the largest; temperature sets s = 1 / T.
//   p = softmax(l / T) over the kept tokens.
inline std::vector<double> reference_distribution(std::span<const float> row, const SamplingOptions& options,
                                                  std::span<const Token> history = {},
                                                  const std::vector<bool>* allowed = nullptr) {
    const std::size_t vocab = row.size();
    const double minus_infinity = -std::numeric_limits<double>::infinity();
    std::vector<double> l(row.begin(), row.end());
    if (allowed != nullptr)
        for (std::size_t x = 0; x < vocab; ++x)
            if (!(*allowed)[x]) l[x] = minus_infinity;
    for (const SamplerStage stage : options.chain) {
        if (stage == SamplerStage::logit_bias) {
            for (const LogitBias& entry : options.logit_bias) l[static_cast<std::size_t>(entry.token)] += entry.bias;
        } else if (stage == SamplerStage::penalties) {
            const std::size_t window = std::min(options.penalty_last_n, history.size());
            std::vector<std::size_t> count(vocab, 0);
            for (std::size_t i = history.size() - window; i < history.size(); ++i)
                ++count[static_cast<std::size_t>(history[i])];
            for (std::size_t x = 0; x < vocab; ++x) {
                if (count[x] == 0) continue;
                l[x] = l[x] > 0.0 ? l[x] / options.repeat_penalty : l[x] * options.repeat_penalty;
                l[x] -= static_cast<double>(count[x]) * options.frequency_penalty + options.presence_penalty;
            }
        }
    }
    std::vector<std::size_t> rank(vocab, 0);
    for (std::size_t i = 0; i < vocab; ++i)
        for (std::size_t j = 0; j < vocab; ++j)
            if (l[j] > l[i] || (l[j] == l[i] && j < i)) ++rank[i];
    std::size_t best = 0;
    for (std::size_t i = 0; i < vocab; ++i)
        if (rank[i] == 0) best = i;
    std::vector<double> p(vocab, 0.0);
    if (options.temperature == 0.0) {
        p[best] = 1.0;
        return p;
    }
    const double max_logit = l[best];
    bool tempered = false;
    auto mass = [&](std::size_t x) {
        if (l[x] == minus_infinity) return 0.0;
        return std::exp(tempered ? (l[x] - max_logit) / options.temperature : l[x] - max_logit);
    };
    std::vector<bool> keep(vocab, true);
    for (const SamplerStage stage : options.chain) {
        if (stage == SamplerStage::top_k && options.top_k > 0 && options.top_k < vocab) {
            for (std::size_t i = 0; i < vocab; ++i) keep[i] = keep[i] && rank[i] < options.top_k;
        } else if (stage == SamplerStage::top_p && options.top_p < 1.0) {
            double total = 0.0;
            for (std::size_t j = 0; j < vocab; ++j) total += keep[j] ? mass(j) : 0.0;
            std::vector<bool> kept_by_p(vocab, false);
            for (std::size_t i = 0; i < vocab; ++i) {
                if (!keep[i]) continue;
                double before = 0.0;
                for (std::size_t j = 0; j < vocab; ++j)
                    if (keep[j] && rank[j] < rank[i]) before += mass(j);
                kept_by_p[i] = before / total < options.top_p;
            }
            keep = kept_by_p;
        } else if (stage == SamplerStage::min_p && options.min_p > 0.0) {
            for (std::size_t i = 0; i < vocab; ++i) keep[i] = keep[i] && mass(i) >= options.min_p * mass(best);
        } else if (stage == SamplerStage::temperature) {
            tempered = true;
        }
    }
    tempered = true;
    double kept_mass = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) kept_mass += keep[i] ? mass(i) : 0.0;
    for (std::size_t i = 0; i < vocab; ++i) p[i] = keep[i] ? mass(i) / kept_mass : 0.0;
    return p;
}

// p(. | prefix) of a processed target. `logits_after(prefix)` returns the
// model's raw logits row after the prefix (e.g. ToyLM::logits_after).
using Conditional = std::function<std::vector<double>(std::span<const Token> prefix)>;

// The history the logit stages read is the whole prefix (prompt included).
template <class Model>
Conditional reference_conditional(const Model& model, SamplingOptions sampling) {
    sampling.constraint = nullptr;
    return [&model, sampling](std::span<const Token> prefix) {
        const std::vector<float> logits = model.logits_after(prefix);
        return reference_distribution(logits, sampling, prefix);
    };
}

// The same under a constraint: `allowed(generated)` is the set of tokens the
// constraint allows after the generated tokens (the prefix past the first
// `prompt_tokens`), computed independently of the decoder's constraint object.
using AllowedAfter = std::function<std::vector<bool>(std::span<const Token> generated)>;

template <class Model>
Conditional reference_conditional(const Model& model, SamplingOptions sampling, std::size_t prompt_tokens,
                                  AllowedAfter allowed) {
    sampling.constraint = nullptr;
    return [&model, sampling, prompt_tokens, allowed](std::span<const Token> prefix) {
        const std::vector<float> logits = model.logits_after(prefix);
        const std::vector<bool> mask = allowed(prefix.subspan(prompt_tokens));
        return reference_distribution(logits, sampling, prefix, &mask);
    };
}

// ---------------------------------------------------------------------------
// One run of a configuration: its emitted tokens (at least `length`; only the
// first `length` are counted) and the per-draft-position counts of the run.
struct SampledRun {
    std::vector<Token> tokens;
    std::vector<std::size_t> proposed_at_position;  // drafts made at draft position i (reached)
    std::vector<std::size_t> accepted_at_position;  // drafts accepted at draft position i
};

inline SampledRun sampled_run(const GenerationResult& result) {
    return {result.tokens, result.stats.proposed_at_position, result.stats.accepted_at_position};
}

// The common case: a fresh SpeculativeDecoder<Target, Draft, Rule> per seed
// with `options` (its seed replaced), generating from `prompt`. The models
// (and the prompt) must outlive the returned callable.
template <class Target, class Draft, class Rule = TokenwiseRejection>
auto speculative_runner(Target& target, Draft& draft, DecodingOptions options, const std::vector<Token>& prompt,
                        Rule rule = {}) {
    return [&target, &draft, options, &prompt, rule](std::uint64_t seed) {
        DecodingOptions seeded = options;
        seeded.seed = seed;
        SpeculativeDecoder<Target, Draft, Rule, specdec::FixedLength> decoder(specdec::target(target), specdec::draft(draft), seeded, rule);
        return sampled_run(decoder.generate(prompt));
    };
}

struct ExactnessSetup {
    std::string name;
    std::vector<Token> prompt;
    std::size_t vocab = 0;
    std::size_t length = 0;        // tokens per counted sequence; >= draft_tokens + 1
    std::size_t draft_tokens = 0;  // k: draft positions 0 .. k - 1 must all be reached
    std::size_t samples = 20000;
    std::uint64_t first_seed = 1;  // run i uses seed first_seed + i
    Conditional target;            // reference p(. | prefix) of the processed target
    double min_expected = 5.0;     // cells with a smaller expected count are merged
};

struct ExactnessReport {
    std::string name;
    ChiSquareResult chi_square;
    std::size_t samples = 0;
    std::size_t cells = 0;                  // after merging, including probability-0 cells
    std::vector<std::size_t> reached;   // drafts made at draft position i, summed over all runs and steps
    std::vector<std::size_t> accepted;  // drafts accepted (and emitted) at draft position i, likewise

    [[nodiscard]] bool deepest_reached(std::size_t draft_tokens) const {
        if (draft_tokens == 0) return true;  // autoregressive: nothing to reach
        return reached.size() >= draft_tokens && reached[draft_tokens - 1] > 0;
    }

    [[nodiscard]] std::string describe() const {
        std::ostringstream out;
        out << name << ": chi2 " << chi_square.statistic << " dof " << chi_square.degrees_of_freedom << " p "
            << chi_square.p_value << " (" << samples << " runs, " << cells << " cells); reached/accepted per draft position:";
        for (std::size_t i = 0; i < reached.size(); ++i)
            out << ' ' << i << ':' << reached[i] << '/' << (i < accepted.size() ? accepted[i] : 0);
        return out.str();
    }
};

namespace detail {

// Probabilities of every sequence of `length` tokens after `prompt`, indexed
// with the first token as the most significant digit.
inline std::vector<double> sequence_probabilities(const ExactnessSetup& setup) {
    std::size_t total = 1;
    for (std::size_t i = 0; i < setup.length; ++i) total *= setup.vocab;
    std::vector<double> probability(total, 0.0);
    std::vector<Token> prefix = setup.prompt;
    auto visit = [&](auto&& self, std::size_t depth, std::size_t index, double mass) -> void {
        if (depth == setup.length) {
            probability[index] = mass;
            return;
        }
        if (mass == 0.0) return;  // every continuation has probability 0
        const std::vector<double> p = setup.target(prefix);
        if (p.size() != setup.vocab) throw std::invalid_argument("exactness harness: conditional of the wrong size");
        for (std::size_t x = 0; x < setup.vocab; ++x) {
            prefix.push_back(static_cast<Token>(x));
            self(self, depth + 1, index * setup.vocab + x, mass * p[x]);
            prefix.pop_back();
        }
    };
    visit(visit, 0, 0, 1.0);
    return probability;
}

struct Cells {
    std::vector<double> probability;       // per cell
    std::vector<std::size_t> cell_of;      // per sequence index
};

inline Cells merge_cells(const std::vector<double>& sequence_probability, std::size_t vocab, std::size_t length,
                         double min_probability) {
    Cells cells;
    cells.cell_of.assign(sequence_probability.size(), 0);
    const std::size_t overflow = 0;  // cell 0 collects what is too rare even when pooled
    cells.probability.push_back(0.0);
    // Subtree of `prefix_index` at `depth` covers indices [prefix_index * span, (prefix_index + 1) * span).
    auto span_at = [&](std::size_t depth) {
        std::size_t s = 1;
        for (std::size_t i = depth; i < length; ++i) s *= vocab;
        return s;
    };
    auto assign = [&](std::size_t first, std::size_t count, std::size_t cell) {
        for (std::size_t i = first; i < first + count; ++i) {
            cells.cell_of[i] = cell;
            cells.probability[cell] += sequence_probability[i];
        }
    };
    auto mass_of = [&](std::size_t first, std::size_t count) {
        double m = 0.0;
        for (std::size_t i = first; i < first + count; ++i) m += sequence_probability[i];
        return m;
    };
    auto visit = [&](auto&& self, std::size_t depth, std::size_t prefix_index) -> void {
        const std::size_t span = span_at(depth);
        const std::size_t first = prefix_index * span;
        if (depth == length) {
            cells.probability.push_back(0.0);
            assign(first, 1, cells.probability.size() - 1);
            return;
        }
        const std::size_t child_span = span / vocab;
        std::vector<std::size_t> rare;
        for (std::size_t x = 0; x < vocab; ++x) {
            const std::size_t child = prefix_index * vocab + x;
            const double mass = mass_of(child * child_span, child_span);
            if (mass == 0.0) {  // impossible under the reference: its own cell
                cells.probability.push_back(0.0);
                assign(child * child_span, child_span, cells.probability.size() - 1);
            } else if (mass < min_probability) {
                rare.push_back(child);
            } else {
                self(self, depth + 1, child);
            }
        }
        double pooled = 0.0;
        for (const std::size_t child : rare) pooled += mass_of(child * child_span, child_span);
        std::size_t cell = overflow;
        if (!rare.empty() && pooled >= min_probability) {
            cells.probability.push_back(0.0);
            cell = cells.probability.size() - 1;
        }
        for (const std::size_t child : rare) assign(child * child_span, child_span, cell);
    };
    visit(visit, 0, 0);
    return cells;
}

inline void add_counts(std::vector<std::size_t>& into, const std::vector<std::size_t>& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (std::size_t i = 0; i < from.size(); ++i) into[i] += from[i];
}

}  // namespace detail

// Runs `run(seed)` for setup.samples seeds and tests the counted sequences.
// `run` returns a SampledRun (see sampled_run()); it must emit at least
// setup.length tokens.
template <class Run>
ExactnessReport run_exactness(const ExactnessSetup& setup, Run&& run) {
    if (setup.vocab < 2 || setup.length == 0 || setup.length < setup.draft_tokens + 1)
        throw std::invalid_argument("exactness harness: need vocab >= 2 and length >= draft_tokens + 1");
    const std::vector<double> sequence_probability = detail::sequence_probabilities(setup);
    const detail::Cells cells = detail::merge_cells(sequence_probability, setup.vocab, setup.length,
                                                    setup.min_expected / static_cast<double>(setup.samples));
    std::vector<std::size_t> counts(cells.probability.size(), 0);
    ExactnessReport report;
    report.name = setup.name;
    report.samples = setup.samples;
    report.cells = cells.probability.size();
    for (std::size_t s = 0; s < setup.samples; ++s) {
        const SampledRun sample = run(setup.first_seed + s);
        if (sample.tokens.size() < setup.length) {
            std::ostringstream message;
            message << "exactness harness: run " << s << " emitted " << sample.tokens.size() << " tokens, expected at least "
                    << setup.length;
            throw std::runtime_error(message.str());
        }
        std::size_t index = 0;
        for (std::size_t i = 0; i < setup.length; ++i) {
            const Token t = sample.tokens[i];
            if (t < 0 || static_cast<std::size_t>(t) >= setup.vocab)
                throw std::runtime_error("exactness harness: a run emitted a token outside the vocabulary");
            index = index * setup.vocab + static_cast<std::size_t>(t);
        }
        ++counts[cells.cell_of[index]];
        detail::add_counts(report.reached, sample.proposed_at_position);
        detail::add_counts(report.accepted, sample.accepted_at_position);
    }
    if (report.reached.size() < setup.draft_tokens) report.reached.resize(setup.draft_tokens, 0);
    if (report.accepted.size() < setup.draft_tokens) report.accepted.resize(setup.draft_tokens, 0);
    // Cell 0 (overflow) may be empty and of probability 0 when nothing was pooled: drop it then.
    if (cells.probability[0] == 0.0 && counts[0] == 0) {
        std::vector<std::size_t> observed(counts.begin() + 1, counts.end());
        std::vector<double> expected(cells.probability.begin() + 1, cells.probability.end());
        report.chi_square = chi_square_test(observed, expected);
        report.cells -= 1;
    } else {
        report.chi_square = chi_square_test(counts, cells.probability);
    }
    if (const char* verbose = std::getenv("SPECDEC_EXACTNESS_REPORT"); verbose != nullptr && *verbose != '\0')
        std::cout << "exactness: " << report.describe() << '\n';
    return report;
}

// An exact configuration: p >= kExactSignificance and every draft position
// up to k - 1 reached at least once.
inline void check_exact(const ExactnessReport& report, std::size_t draft_tokens) {
    INFO(report.describe());
    CHECK(report.deepest_reached(draft_tokens));
    CHECK(report.chi_square.p_value >= kExactSignificance);
}

// A negative control: the same statistic must reject it (p < kControlSignificance),
// and it must have reached the draft position its bug lives at.
inline void check_caught(const ExactnessReport& report, std::size_t draft_tokens) {
    INFO(report.describe());
    CHECK(report.deepest_reached(draft_tokens));
    CHECK(report.chi_square.p_value < kControlSignificance);
}

}  // namespace specdec::test
