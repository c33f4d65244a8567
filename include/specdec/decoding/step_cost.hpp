#pragma once
// The one step-cost model of every adaptive policy (docs/design/cost-model.md):
// what a step's timings are recorded in (StepTimings, the base of StepOutcome,
// TreeStepOutcome and BatchOutcome) and the one price of a step
// (step_seconds), from the widths of its draft rounds and of its target pass:
//   T = [drafts] (e + sum_r D(b_r)) + V(n) + r n + o
// D(b) a draft round over b sequences (one sequence: the draft pass d), e what
// a step's drafting costs beyond its rounds, V(n) the target pass over n
// tokens, r the acceptance work per verified row, o the rest of a step.
// Each policy learns these parts its own way (PassCosts for one sequence,
// BatchStepCosts for a batch) and prices every candidate through step_seconds.
#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

namespace specdec {

// What one step timed.
struct StepTimings {
    std::size_t target_width = 0;  // tokens in the target pass (0: no pass)
    double target_seconds = 0.0;
    std::size_t draft_passes = 0;  // draft rounds (forward passes of the draft model)
    double draft_seconds = 0.0;    // every round together
    // Sequences in each draft round and its seconds, where the decoder times
    // rounds one by one (a batch); empty otherwise (one sequence: every
    // round has width 1 and only draft_seconds is known).
    std::span<const std::size_t> draft_round_widths{};
    std::span<const double> draft_round_seconds{};
    // Round 0 fed some sequence more than its last step committed (a draft
    // cache lagging after steps without drafts): a one-off catch-up, not what
    // a round of that width costs.
    bool first_round_caught_up = false;
    double acceptance_seconds = 0.0;  // the acceptance rule and emission
    double total_seconds = 0.0;       // the whole step (a batch's admission prefill left out)
};

// The learned parts of a step's price, in seconds.
template <class C>
concept StepPrices = requires(const C& costs, std::size_t n) {
    { costs.pass_seconds(n) } -> std::convertible_to<double>;   // V(n), n >= 1
    { costs.round_seconds(n) } -> std::convertible_to<double>;  // D(b), b >= 1
    { costs.drafting_overhead_seconds() } -> std::convertible_to<double>;  // e, once per step that drafts
    { costs.row_seconds() } -> std::convertible_to<double>;    // r
    { costs.other_seconds() } -> std::convertible_to<double>;  // o
};

// The predicted seconds of a step whose draft rounds run over round_widths[r]
// sequences (a width of 0 is no round) and whose target pass verifies
// pass_width tokens.
template <StepPrices C>
[[nodiscard]] double step_seconds(const C& costs, std::span<const std::size_t> round_widths, std::size_t pass_width) {
    double drafting = 0.0;
    bool drafts = false;
    for (const std::size_t b : round_widths) {
        if (b == 0) continue;
        drafting += costs.round_seconds(b);
        drafts = true;
    }
    if (drafts) drafting += costs.drafting_overhead_seconds();
    return drafting + costs.pass_seconds(pass_width) + costs.row_seconds() * static_cast<double>(pass_width) +
           costs.other_seconds();
}

// Round widths of one sequence drafting k tokens (k rounds of width 1).
class SingleSequenceRounds {
public:
    [[nodiscard]] std::span<const std::size_t> of(std::size_t k) const {
        if (ones_.size() < k) ones_.assign(k, 1);
        return std::span<const std::size_t>(ones_.data(), k);
    }

private:
    mutable std::vector<std::size_t> ones_;  // grown on demand, all 1
};

}  // namespace specdec
