#pragma once
// How often drafts are accepted, learned from the steps verified so far, for
// the adaptive policies (AutoLength: a chain, position by position; AutoTree:
// a tree, by depth and sibling rank) and the expected tokens they promise.
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace specdec {

// Expected tokens of a step that drafts a chain of k: the bonus or corrected
// token, plus draft i whenever drafts 0..i (each accepted with acceptance(j)
// given the ones before it were) are all kept:
//   E(k) = 1 + sum_{i<k} prod_{j<=i} a_j.
// With one a for every position this is Leviathan et al.'s (1 - a^(k+1)) / (1 - a),
// summed rather than closed so that a = 1 gives k + 1.
template <class Acceptance>
[[nodiscard]] double chain_expected_tokens(std::size_t k, const Acceptance& acceptance) {
    double total = 1.0, survive = 1.0;
    for (std::size_t i = 0; i < k; ++i) {
        survive *= acceptance(i);
        total += survive;
    }
    return total;
}

// Acceptance of the draft in slot (depth d, rank r) — for a tree, the sibling
// of rank r at depth d + 1, tested when its parent was accepted and its
// earlier siblings rejected; for a chain, position d with r = 0 — from
// decayed counts, shrunk towards a neighbour where a slot has few samples:
//   a(d, r) = (accepted + s * prior) / (tested + s),
//   prior   = a(d - 1, 0) for r = 0 (0.5 at the first position), else
//             sibling_prior * a(d, r - 1).
// Acceptance rarely grows with depth or rank, so an unmeasured slot is not
// promised more than its neighbour; an optimistic read (sibling_prior 1)
// values unmeasured ranks at their neighbour's full acceptance, for exploring.
class AcceptanceEstimate {
public:
    AcceptanceEstimate(double decay, double prior_strength) : decay_(decay), prior_strength_(prior_strength) {}

    // Once per observed step, before its counts: older samples weigh less.
    void age() {
        for (auto& row : tested_)
            for (double& t : row) t *= decay_;
        for (auto& row : accepted_)
            for (double& a : row) a *= decay_;
    }
    void count(std::size_t d, std::size_t r, double tested, double accepted) {
        cell(tested_, d, r) += tested;
        cell(accepted_, d, r) += accepted;
    }
    // Makes positions 0..depths - 1 exist (rank 0), unmeasured.
    void reserve(std::size_t depths) {
        for (std::size_t d = 0; d < depths; ++d) (void)cell(tested_, d, 0), (void)cell(accepted_, d, 0);
    }
    [[nodiscard]] std::size_t depths() const { return tested_.size(); }

    [[nodiscard]] double at(std::size_t d, std::size_t r, double sibling_prior = 0.5) const {
        double prior;
        if (r > 0)
            prior = sibling_prior * at(d, r - 1, sibling_prior);
        else
            prior = d > 0 ? at(d - 1, 0, sibling_prior) : kFirstPrior;
        return shrunk(d, r, prior);
    }
    // a(d, 0) for every depth that exists, in one pass down the chain.
    [[nodiscard]] std::vector<double> chain() const {
        std::vector<double> estimates(tested_.size());
        double estimate = kFirstPrior;
        for (std::size_t d = 0; d < tested_.size(); ++d) estimates[d] = estimate = shrunk(d, 0, estimate);
        return estimates;
    }

private:
    static constexpr double kFirstPrior = 0.5;  // before anything was measured

    [[nodiscard]] double shrunk(std::size_t d, std::size_t r, double prior) const {
        return (read(accepted_, d, r) + prior_strength_ * prior) / (read(tested_, d, r) + prior_strength_);
    }
    static double& cell(std::vector<std::vector<double>>& table, std::size_t d, std::size_t r) {
        if (table.size() <= d) table.resize(d + 1);
        if (table[d].size() <= r) table[d].resize(r + 1, 0.0);
        return table[d][r];
    }
    static double read(const std::vector<std::vector<double>>& table, std::size_t d, std::size_t r) {
        return d < table.size() && r < table[d].size() ? table[d][r] : 0.0;
    }

    double decay_, prior_strength_;
    std::vector<std::vector<double>> tested_, accepted_;  // [depth][rank], decayed
};

// Acceptance by the draft's own confidence: A(t), the acceptance of a draft
// whose q has top probability t, and P(t), how often q has it (10 bins).
// The bins pool every position, and most of their samples are shallow drafts
// (tested most often): read directly, they would value a deep draft at the
// acceptance of the first ones. So at position i, A(t) is a_i times the bin's
// acceptance relative to all bins'.
class ConfidenceBins {
public:
    static constexpr std::size_t kBins = 10;

    ConfidenceBins(double decay, double prior_strength) : decay_(decay), prior_strength_(prior_strength) {}

    static std::size_t bin_of(float top) {
        return std::min(kBins - 1, static_cast<std::size_t>(std::max(0.0f, top) * static_cast<float>(kBins)));
    }
    // A q was formed with top probability `top`.
    void formed(float top) { formed_[bin_of(top)] += 1.0; }
    // Once per observed step: older formed counts weigh less.
    void age_formed() {
        for (double& seen : formed_) seen *= decay_;
    }
    // A draft of confidence `top` was tested (each bin decays per sample).
    void tested(float top, bool accepted) {
        const std::size_t bin = bin_of(top);
        tested_[bin] = tested_[bin] * decay_ + 1.0;
        accepted_[bin] = accepted_[bin] * decay_ + (accepted ? 1.0 : 0.0);
    }
    // Recomputes the acceptance pooled over every bin (once per observed step).
    void refresh() {
        double tested = 0.0, accepted = 0.0;
        for (std::size_t b = 0; b < kBins; ++b) {
            tested += tested_[b];
            accepted += accepted_[b];
        }
        pooled_ = accepted > 0.0 ? accepted / tested : 0.0;
    }
    // A(t) for bin `bin` at a position whose acceptance is `position`.
    [[nodiscard]] double acceptance(std::size_t bin, double position) const {
        if (!(pooled_ > 0.0)) return position;
        const double pooled = pooled_;
        const double bin_rate = (accepted_[bin] + prior_strength_ * pooled) / (tested_[bin] + prior_strength_);
        return std::min(1.0, position * bin_rate / pooled);
    }
    // Decayed count of formed q in bin `bin`, and over every bin.
    [[nodiscard]] double formed_in(std::size_t bin) const { return formed_[bin]; }
    [[nodiscard]] double formed_total() const {
        double seen = 0.0;
        for (const double count : formed_) seen += count;
        return seen;
    }
    // The acceptance of a draft whose q is not formed yet, at a position of
    // acceptance `position`: A(t) averaged over P(t) (`position` before any q).
    [[nodiscard]] double unformed(double position) const {
        const double seen = formed_total();
        double sum = 0.0;
        for (std::size_t bin = 0; bin < kBins; ++bin) sum += formed_[bin] * acceptance(bin, position);
        return seen > 0.0 ? sum / seen : position;
    }

private:
    double decay_, prior_strength_;
    double pooled_ = 0.0;  // accepted / tested over every bin; 0 before any acceptance
    std::array<double, kBins> tested_{}, accepted_{}, formed_{};
};

}  // namespace specdec
