// AutoLength's decisions against simulated pairs whose acceptance and costs
// are known, so that the best draft length is known too: after learning, the
// lengths it plans must be the argmax of expected tokens per second
// (Leviathan's E(k) / T(k)), also when some of its timings are corrupted by a
// slow moment of the machine. Exactness is tested elsewhere
// (length_policy_exactness_test.cpp); this is about choosing well.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"

namespace {

// A pair described by its numbers: each draft is kept with probability
// `acceptance` once the drafts before it were; seconds per draft pass, per
// verification pass over n tokens, per verified row.
struct SimulatedPair {
    double acceptance = 0.8;
    double draft_seconds = 1e-3;
    std::function<double(std::size_t)> verify_seconds;
    double row_seconds = 0.0;
    double decline = 0.0;  // draft i is kept with probability acceptance - i * decline
    double step_overhead = 0.0;  // seconds a step's drafting costs beyond its passes (when it drafts)

    [[nodiscard]] double acceptance_at(std::size_t i) const {
        return std::max(0.0, acceptance - static_cast<double>(i) * decline);
    }
};

// Expected tokens of a step that drafts k (the bonus or corrected token too).
double expected_tokens(const SimulatedPair& pair, std::size_t k) {
    double tokens = 1.0, survive = 1.0;
    for (std::size_t i = 0; i < k; ++i) tokens += (survive *= pair.acceptance_at(i));
    return tokens;
}

double step_seconds(const SimulatedPair& pair, std::size_t k) {
    return static_cast<double>(k) * pair.draft_seconds + (k > 0 ? pair.step_overhead : 0.0) + pair.verify_seconds(k + 1) +
           static_cast<double>(k + 1) * pair.row_seconds;
}

double expected_rate(const SimulatedPair& pair, std::size_t k) {
    const double tokens = expected_tokens(pair, k);
    return tokens / step_seconds(pair, k);
}

std::size_t best_length(const SimulatedPair& pair, std::size_t cap) {
    std::size_t best = 0;
    for (std::size_t k = 1; k <= cap; ++k)
        if (expected_rate(pair, k) > expected_rate(pair, best)) best = k;
    return best;
}

// Runs `steps` steps of the policy against the pair; `slow(step, n)` may
// multiply a verification timing (a disturbed measurement). Returns the
// number of drafts of every step.
std::vector<std::size_t> simulate(specdec::AutoLength& policy, const SimulatedPair& pair, std::size_t cap,
                                  std::size_t steps, std::uint64_t seed,
                                  const std::function<double(std::size_t, std::size_t)>& slow = {},
                                  std::vector<std::size_t>* plans = nullptr,
                                  const std::function<double(std::size_t)>& machine = {},
                                  bool model_free = false) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    std::vector<std::size_t> lengths;
    for (std::size_t step = 0; step < steps; ++step) {
        const specdec::DraftPlan plan = policy.plan(cap, 100 + step);
        if (plans) plans->push_back(plan.max_tokens);
        // The drafter, as ModelDrafter asks its stop: one pass forms each q
        // (the first one is the catch-up pass), which the stop hook sees as
        // uninformative; before each further pass it may end the draft.
        std::size_t proposed = 0, passes = plan.max_tokens > 0 ? 1 : 0;
        for (std::size_t i = 0; i < plan.max_tokens; ++i) {
            if (plan.stop && plan.stop(specdec::DraftCandidate{i, 0.5f})) break;
            ++proposed;
            if (i + 1 == plan.max_tokens) break;
            if (plan.stop && plan.stop(specdec::DraftCandidate{i + 1, 1.0f, false})) break;
            ++passes;
        }
        lengths.push_back(proposed);
        std::size_t accepted = 0;
        while (accepted < proposed && uniform(rng) < pair.acceptance_at(accepted)) ++accepted;
        specdec::StepOutcome outcome;
        outcome.proposed = proposed;
        outcome.accepted = accepted;
        outcome.draft_passes = model_free ? 0 : passes;  // a model-free drafter runs no passes
        outcome.target_width = proposed + 1;
        // machine(step): the whole machine's slowness at this step (both models).
        const double pace = machine ? machine(step) : 1.0;
        outcome.draft_seconds =
            (static_cast<double>(passes) * pair.draft_seconds + (passes > 0 ? pair.step_overhead : 0.0)) * pace;
        outcome.target_seconds = pair.verify_seconds(proposed + 1) * (slow ? slow(step, proposed + 1) : 1.0) * pace;
        outcome.acceptance_seconds = static_cast<double>(proposed + 1) * pair.row_seconds;
        outcome.total_seconds = outcome.draft_seconds + outcome.target_seconds + outcome.acceptance_seconds;
        policy.observe(outcome);
    }
    return lengths;
}

// Expected tokens per second of the lengths drafted from step `first` on.
double drafted_rate(const SimulatedPair& pair, const std::vector<std::size_t>& lengths, std::size_t first) {
    double tokens = 0.0, seconds = 0.0;
    for (std::size_t step = first; step < lengths.size(); ++step) {
        tokens += expected_tokens(pair, lengths[step]);
        seconds += step_seconds(pair, lengths[step]);
    }
    return tokens / seconds;
}

// The most frequent length over the last `window` steps.
std::size_t settled_length(const std::vector<std::size_t>& planned, std::size_t window) {
    std::map<std::size_t, std::size_t> counts;
    for (std::size_t i = planned.size() - window; i < planned.size(); ++i) ++counts[planned[i]];
    return std::max_element(counts.begin(), counts.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
}

// A fresh AutoLength run for `steps` steps against the pair: the length it
// settled on (the most frequent over the last `window` steps) against the
// best fixed length, by their expected rates.
struct Settling {
    std::size_t best = 0, settled = 0;
    double share = 0.0;  // the settled length's rate over the best one's
};
Settling settle(const SimulatedPair& pair, std::size_t cap, std::size_t steps, std::size_t window, std::uint64_t seed,
                const std::function<double(std::size_t, std::size_t)>& slow = {}, bool model_free = false) {
    specdec::AutoLength policy;
    const std::vector<std::size_t> planned = simulate(policy, pair, cap, steps, seed, slow, nullptr, {}, model_free);
    Settling result;
    result.best = best_length(pair, cap);
    result.settled = settled_length(planned, window);
    result.share = expected_rate(pair, result.settled) / expected_rate(pair, result.best);
    return result;
}

// A memory-bound target: nearly flat up to 5 tokens, then compute-bound.
double cpu_like_verify(std::size_t n) {
    const double base = 10e-3;
    return n <= 5 ? base * (1.0 + 0.04 * static_cast<double>(n - 1)) : base * (1.16 + 0.15 * static_cast<double>(n - 5));
}

}  // namespace

TEST_CASE("AutoLength settles on the length that maximises expected tokens per second", "[length-policy][auto]") {
    struct Case {
        double acceptance;
        double draft_seconds;
    };
    // Each case's best length is computed from the model, not assumed.
    for (const Case c : {Case{0.6, 1.3e-3}, Case{0.8, 1.3e-3}, Case{0.9, 0.5e-3}, Case{0.95, 0.2e-3}}) {
        const SimulatedPair pair{.acceptance = c.acceptance, .draft_seconds = c.draft_seconds,
                                 .verify_seconds = cpu_like_verify, .row_seconds = 0.05e-3};
        const Settling run = settle(pair, 8, 600, 200, 7);
        INFO("acceptance " << c.acceptance << ", draft " << c.draft_seconds * 1e3 << " ms: best k = " << run.best
                           << ", settled on " << run.settled);
        // Two lengths whose rates differ by under 2% are equally good choices
        // for a learner that sees sampled acceptance.
        CHECK(run.share >= 0.98);
    }
}

TEST_CASE("AutoLength stops drafting when speculation does not pay", "[length-policy][auto]") {
    // A draft as dear as the target and rarely accepted: k = 0 is best.
    const SimulatedPair pair{.acceptance = 0.1, .draft_seconds = 8e-3, .verify_seconds = cpu_like_verify};
    REQUIRE(best_length(pair, 8) == 0);
    specdec::AutoLength policy;
    const std::vector<std::size_t> planned = simulate(policy, pair, 8, 300, 3);
    const std::size_t zero = static_cast<std::size_t>(std::count(planned.end() - 100, planned.end(), 0u));
    CHECK(zero >= 90);  // the rest: exploration steps, one in explore_every
}

TEST_CASE("AutoLength explores ever more rarely while speculation does not pay, and as often as before once it does",
          "[length-policy][auto]") {
    // Each exploring step costs a draft pass, the draft's catching up and a
    // wider target pass; where k = 0 is best, probing every 16 steps made
    // the run slower than plain decoding. The interval doubles up to 256.
    const SimulatedPair dear{.acceptance = 0.1, .draft_seconds = 8e-3, .verify_seconds = cpu_like_verify};
    REQUIRE(best_length(dear, 8) == 0);
    specdec::AutoLength policy;
    const std::vector<std::size_t> planned = simulate(policy, dear, 8, 1000, 3);
    const auto drafting = [](auto begin, auto end) { return std::count_if(begin, end, [](std::size_t k) { return k > 0; }); };
    // Steps 600-999: intervals of 256 (16, 32, 64, 128 before them) leave one
    // or two probes; one in 16 would be 25.
    CHECK(drafting(planned.begin() + 600, planned.end()) <= 2);
    // The same policy at a fixed 16-step interval: the control this check
    // would not pass.
    specdec::AutoLength every_16({.max_explore_every = 16});
    const std::vector<std::size_t> fixed = simulate(every_16, dear, 8, 1000, 3);
    CHECK(drafting(fixed.begin() + 600, fixed.end()) >= 20);

    // Where drafting pays, the policy plans step for step what the fixed
    // 16-step interval plans (the simulation is deterministic).
    const SimulatedPair cheap{.acceptance = 0.9, .draft_seconds = 0.5e-3, .verify_seconds = cpu_like_verify,
                              .row_seconds = 0.05e-3};
    REQUIRE(best_length(cheap, 8) >= 4);
    specdec::AutoLength paying, paying_every_16({.max_explore_every = 16});
    std::vector<std::size_t> plans, plans_every_16;
    (void)simulate(paying, cheap, 8, 400, 5, {}, &plans);
    (void)simulate(paying_every_16, cheap, 8, 400, 5, {}, &plans_every_16);
    CHECK(plans == plans_every_16);
}

TEST_CASE("AutoLength's choice survives verification timings disturbed by a slow machine", "[length-policy][auto]") {
    // Acceptance high and drafts cheap: the best length is long. Then one in
    // five timings of each width comes out three times too slow, and the
    // widths are timed at different moments, so that their raw averages are
    // no longer in order; the fitted costs must keep the choice near the best.
    const SimulatedPair pair{.acceptance = 0.9, .draft_seconds = 0.5e-3, .verify_seconds = cpu_like_verify,
                             .row_seconds = 0.05e-3};
    REQUIRE(best_length(pair, 8) >= 4);
    auto slow = [](std::size_t step, std::size_t n) { return (step + 3 * n) % 5 == 0 ? 3.0 : 1.0; };
    const Settling run = settle(pair, 8, 800, 300, 11, slow);
    INFO("best k = " << run.best << ", settled on " << run.settled);
    CHECK(run.share >= 0.95);
}

TEST_CASE("AutoLength keeps its choice when the machine's speed changes in phases", "[length-policy][auto]") {
    // The machine alternates between full speed and 1.6x slower every 16
    // steps, the exploring steps' period: the widths next to the choice are
    // then timed always in the same phase (one always slow, one always fast),
    // and a cost model that lets the recent timings of the usual width set
    // the scale of the rarely timed ones can drift far (one such model ended
    // at k = 0 or 1 here). Also one long slow phase in the middle of a run.
    const SimulatedPair pair{.acceptance = 0.8, .draft_seconds = 1.3e-3, .verify_seconds = cpu_like_verify,
                             .row_seconds = 0.05e-3};
    const std::size_t cap = 8, best = best_length(pair, cap);
    const std::function<double(std::size_t, std::size_t)> alternating = [](std::size_t step, std::size_t) {
        return (step / 16) % 2 == 1 ? 1.6 : 1.0;
    };
    const std::function<double(std::size_t, std::size_t)> one_slow_phase = [](std::size_t step, std::size_t) {
        return step >= 200 && step < 500 ? 1.6 : 1.0;
    };
    for (const auto& [name, phases] : {std::pair{"alternating", alternating}, std::pair{"one slow phase", one_slow_phase}}) {
        specdec::AutoLength policy;
        const std::vector<std::size_t> planned = simulate(policy, pair, cap, 700, 5, phases);
        for (const std::size_t end : {500u, 700u}) {
            const std::vector<std::size_t> window(planned.begin() + static_cast<std::ptrdiff_t>(end - 150),
                                                  planned.begin() + static_cast<std::ptrdiff_t>(end));
            const std::size_t settled = settled_length(window, 150);
            INFO(name << ": best k = " << best << ", settled on " << settled << " in the 150 steps before step " << end);
            CHECK(expected_rate(pair, settled) >= 0.97 * expected_rate(pair, best));
        }
    }
}

TEST_CASE("AutoLength keeps its choice when phases of the machine slow both models", "[length-policy][auto]") {
    // On a shared machine both models slow down together (measured here: the
    // per-step draft and target timings correlate at 0.54, and phases of 1.3-
    // 1.6x last from a few steps to minutes). Widths timed in different
    // phases must not read as different costs: phases of 1-1.8x of random
    // lengths (3-40 steps), and phases locked to the exploring steps (the
    // widths above the choice always timed slow, those below always fast).
    const SimulatedPair pair{.acceptance = 0.8, .draft_seconds = 1.3e-3, .verify_seconds = cpu_like_verify,
                             .row_seconds = 0.05e-3};
    const std::size_t cap = 8, best = best_length(pair, cap);
    std::vector<double> random_phases;
    std::mt19937_64 rng(23);
    while (random_phases.size() < 900) {
        const double pace = std::uniform_real_distribution<double>(1.0, 1.8)(rng);
        const std::size_t length = std::uniform_int_distribution<std::size_t>(3, 40)(rng);
        random_phases.insert(random_phases.end(), length, pace);
    }
    const std::function<double(std::size_t)> random = [&](std::size_t step) { return random_phases[step]; };
    const std::function<double(std::size_t)> locked = [](std::size_t step) { return (step / 16) % 2 == 1 ? 1.6 : 1.0; };
    for (const auto& [name, machine] : {std::pair{"random phases", random}, std::pair{"locked to exploration", locked}}) {
        specdec::AutoLength policy;
        std::vector<std::size_t> plans;
        const std::vector<std::size_t> planned = simulate(policy, pair, cap, 800, 5, {}, &plans, machine);
        std::size_t good = 0;
        std::map<std::size_t, std::size_t> off;  // steps more than 3% off, by their length
        for (std::size_t step = 200; step < planned.size(); ++step) {
            if (expected_rate(pair, planned[step]) >= 0.97 * expected_rate(pair, best))
                ++good;
            else
                ++off[planned[step]];
        }
        std::ostringstream off_text;
        for (const auto& [length, count] : off) off_text << " " << length << ":" << count;
        INFO(name << ": best k = " << best << "; steps after 200 within 3% of its rate: " << good << " of 600; off (length:steps):" << off_text.str());
        // Exploration takes 1 step in 16 to k* +- 1, about half of them more
        // than 3% off (19 steps here; 26-27 off in all, most at k* + 1); with
        // the widths kept in seconds, these random phases left 138 steps off
        // (22-138 over six seeds of the phases and the acceptance draws).
        CHECK(good >= 570);
    }
}

TEST_CASE("AutoLength learns the verification costs behind a drafter without forward passes", "[length-policy][auto]") {
    // Prompt lookup runs no draft passes: its target widths are kept in
    // seconds (there is no draft pass to count them in).
    const SimulatedPair pair{.acceptance = 0.7, .draft_seconds = 0.01e-3, .verify_seconds = cpu_like_verify,
                             .row_seconds = 0.05e-3};
    const Settling run = settle(pair, 8, 600, 200, 4, {}, /*model_free=*/true);
    INFO("best k = " << run.best << ", settled on " << run.settled);
    CHECK(run.share >= 0.98);
}

TEST_CASE("AutoLength's stop drafts at most max_extension beyond the best fixed length", "[length-policy][auto]") {
    // Confident drafts (the stop hook sees top probability 0.5, whose bin
    // learns the pair's acceptance) would let the stop run on; the plan must
    // still end max_extension drafts after k*, where the measured widths end.
    const SimulatedPair pair{.acceptance = 0.8, .draft_seconds = 1.3e-3, .verify_seconds = cpu_like_verify,
                             .row_seconds = 0.05e-3};
    const std::size_t cap = 12, best = best_length(pair, cap);
    REQUIRE(best + 3 < cap);
    for (const std::size_t extension : {0u, 2u}) {
        specdec::AutoLength::Options options;
        options.max_extension = extension;
        specdec::AutoLength policy(options);
        std::vector<std::size_t> plans;
        const std::vector<std::size_t> lengths = simulate(policy, pair, cap, 400, 9, {}, &plans);
        const std::size_t most = *std::max_element(plans.begin() + 100, plans.end());
        INFO("best k = " << best << ", extension " << extension << ": most drafts planned " << most);
        // k* itself may be one off the best length (sampled acceptance).
        CHECK(most <= best + extension + 1);
        CHECK(most >= best);
        CHECK(*std::max_element(lengths.begin() + 100, lengths.end()) <= most);
    }
}

TEST_CASE("AutoLength's stop values deep drafts at the acceptance of their position", "[length-policy][auto]") {
    // Acceptance falls with depth (0.95, 0.85, 0.75, ...; on the 100m pair
    // 0.91, 0.79, 0.69) and q says nothing about it (every draft's top
    // probability falls in one bin, whose samples are mostly shallow drafts).
    // Valued at the bin's pooled acceptance, deep drafts look better than they
    // are and the stop drafts beyond the best length; valued at their
    // position's acceptance, it drafts about as the best fixed length would.
    // A target whose passes cost little more for more tokens (a GPU's up to
    // a few dozen tokens): the draft passes and the falling acceptance alone
    // set the best length.
    auto flat_verify = [](std::size_t n) { return 10e-3 * (1.0 + 0.01 * static_cast<double>(n - 1)); };
    const SimulatedPair pair{.acceptance = 0.95, .draft_seconds = 1.3e-3, .verify_seconds = flat_verify,
                             .row_seconds = 0.05e-3, .decline = 0.1};
    const std::size_t cap = 8, best = best_length(pair, cap);
    specdec::AutoLength policy;
    const std::vector<std::size_t> lengths = simulate(policy, pair, cap, 800, 13);
    double drafts = 0.0;
    for (std::size_t step = 200; step < lengths.size(); ++step) drafts += static_cast<double>(lengths[step]);
    const double rate = drafted_rate(pair, lengths, 200);
    const double mean_length = drafts / static_cast<double>(lengths.size() - 200);
    INFO("best k = " << best << ": the drafted lengths (" << mean_length << " a step) have "
                     << rate / expected_rate(pair, best) << " of its rate");
    // With A(t) pooled over positions the stop drafted 4.3 a step here (k* =
    // 4, so it ran on to 5 and 6 in a third of the steps) and kept 0.984 of
    // the best rate; valued by position, 3.7 a step and 0.993.
    CHECK(rate >= 0.99 * expected_rate(pair, best));
}

TEST_CASE("AutoLength charges the overhead of a step's drafting once a step, not as dearer passes", "[length-policy][auto]") {
    // The first draft pass of a step runs cold and catches up: a step's
    // drafting costs passes * d + a fixed part. Read as seconds per pass, the
    // fixed part makes the passes of short steps look dear, and a target pass
    // expressed in them cheap: the widths of one-draft steps would come out
    // below the others and the plan would settle on short drafts.
    for (const double overhead : {0.3e-3, 0.6e-3}) {
        const SimulatedPair pair{.acceptance = 0.8, .draft_seconds = 1.0e-3, .verify_seconds = cpu_like_verify,
                                 .row_seconds = 0.02e-3, .step_overhead = overhead};
        const std::size_t cap = 8, best = best_length(pair, cap);
        REQUIRE(best >= 3);
        specdec::AutoLength policy;
        const std::vector<std::size_t> drafted = simulate(policy, pair, cap, 800, 5);
        std::size_t total = 0;
        for (std::size_t i = drafted.size() - 400; i < drafted.size(); ++i) total += drafted[i];
        const double mean = static_cast<double>(total) / 400.0;
        INFO("overhead " << overhead * 1e3 << " ms: best k = " << best << ", mean drafted " << mean);
        CHECK(mean >= static_cast<double>(best) - 0.5);
        CHECK(expected_rate(pair, settled_length(drafted, 400)) >= 0.98 * expected_rate(pair, best));
    }
}

TEST_CASE("AutoLength values a pass wider than any it has timed as compute-bound, not as free", "[length-policy][auto]") {
    // Passes of 2 to 6 tokens all timed at 10 ms (a plateau, or the widest
    // widths pooled by the monotone fit), every draft accepted, 2 ms a draft
    // pass. Extending the flat line, widths 7 to 9 would cost 10 ms too and
    // the plan would draft the cap, 8; on the 100m pair that reading drafted
    // 6 to 8 tokens a step where width 7 cost 22.5 ms against 19.1 ms for 6.
    // Valued at the steepest a pass can grow past the widest timed width,
    // V(n) = V(6) n / 6, the best length is 5.
    specdec::AutoLength::Options options;
    options.confidence_stop = false;  // plan() returns k* itself
    specdec::AutoLength policy(options);
    for (std::size_t step = 0; step < 61; ++step) {
        (void)policy.plan(8, 100 + step);
        specdec::StepOutcome outcome;
        outcome.proposed = outcome.accepted = outcome.draft_passes = 1 + step % 5;
        outcome.target_width = outcome.proposed + 1;
        outcome.draft_seconds = 2e-3 * static_cast<double>(outcome.draft_passes);
        outcome.target_seconds = 10e-3;
        outcome.total_seconds = outcome.draft_seconds + outcome.target_seconds;
        policy.observe(outcome);
    }
    // Expected tokens k + 1 (acceptance near 1), seconds 2 ms * k + V(k + 1).
    auto bounded_rate = [](std::size_t k) {
        const double width = static_cast<double>(k + 1);
        return width / (2e-3 * static_cast<double>(k) + 10e-3 * std::max(1.0, width / 6.0));
    };
    std::size_t expected = 1;
    for (std::size_t k = 2; k <= 8; ++k)
        if (bounded_rate(k) > bounded_rate(expected)) expected = k;
    REQUIRE(expected == 5);
    CHECK(policy.plan(8, 200).max_tokens == expected);
}

TEST_CASE("AutoLength climbs to long drafts where wider passes really cost little", "[length-policy][auto]") {
    // A GPU-like target (1% more a token) with confident cheap drafts: the
    // best length is the cap. Widths beyond the widest timed one look dear
    // until timed, so the plan gets there by exploring one width at a time.
    auto flat_verify = [](std::size_t n) { return 10e-3 * (1.0 + 0.01 * static_cast<double>(n - 1)); };
    const SimulatedPair pair{.acceptance = 0.95, .draft_seconds = 0.3e-3, .verify_seconds = flat_verify,
                             .row_seconds = 0.02e-3};
    const std::size_t cap = 8, best = best_length(pair, cap);
    REQUIRE(best == cap);
    specdec::AutoLength policy;
    const std::vector<std::size_t> lengths = simulate(policy, pair, cap, 600, 17);
    const double kept = drafted_rate(pair, lengths, 300) / expected_rate(pair, best);
    INFO("best k = " << best << ": steps 300-600 kept " << kept << " of its rate");
    CHECK(kept >= 0.98);
}
