// AutoBatchLength's choices against scripted costs (no clock, no model): it
// drafts where the target pass is memory-bound, plans no drafts where it is
// compute-bound, and stops drafting when the steps that drafted by plan were
// slower than the plain ones, whatever its cost model said.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include <catch2/catch.hpp>

#include "specdec/decoding/batch_lengths.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace {

using specdec::AutoBatchLength;
using specdec::BatchOutcome;
using specdec::SequenceDraftQuery;
using specdec::SequenceOutcome;

// splitmix64's finaliser: the scripted machine's seeded timing noise.
std::uint64_t scramble(std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A scripted machine: a target pass of n tokens costs base + per_token n, a
// draft round 0.002 s, a verified row nothing; a sequence's drafts are
// accepted up to the next position where step + sequence + position is
// period - 1 mod period (period 3: acceptance 2/3, 1/2, then 0, so drafts
// beyond the second never pay); a step that drafts at all before step
// hidden_until costs `hidden` seconds more that no timing of the outcome
// accounts for; and a sequence that drafts after steps without drafting
// catches its draft cache up in the first draft round, `catch_up` seconds for
// each token beyond the two a step commits (one per step it did not draft).
// `jitter` > 0 scales each target pass's time by a seeded factor in
// [1 - jitter, 1 + jitter], as a shared machine's timings wander.
// With split_by_length the pass runs as llama.cpp's per-sequence cache
// streams run a ragged batch: one physical pass per distinct feed length,
// each over the tokens of the sequences that reach that far (feeds of 3 and 1
// tokens: a pass of 2 tokens, then one of 2 more), each costing base +
// per_token x its tokens. `caps`, where given, are the sequences' caps
// (else every one has `cap`). With odd_sequences_reject, half the requests
// accept every draft and half none. From step reject_from to reject_until
// every draft is rejected (a request turned to text its draft cannot guess).
// With accept_probability >= 0, each draft is instead accepted with that
// probability, independently (seeded by step, slot and position). With
// request_steps > 0, each slot's request retires after that many steps and
// a new one (a new id) takes its place, as a server's do. With
// seconds_by_width given, a pass over n tokens costs seconds_by_width[n]
// (lumpy, as a CPU's tiles make it) instead of base + per_token n. From step
// change_at on, the pass costs base_after + per_token_after n instead (a
// shared host whose memory traffic from elsewhere stopped).
struct ScriptedBatch {
    double base = 0.010, per_token = 0.0, hidden = 0.0, catch_up = 0.0, jitter = 0.0;
    std::size_t sequences = 8, cap = 4;
    bool split_by_length = false;
    std::vector<std::size_t> caps{};
    bool odd_sequences_reject = false;  // even sequences then accept every draft, odd ones none
    bool even_sequences_reject = false;  // the other way round (the search, where estimates tie, starts with sequence 0)
    std::size_t period = 3;  // drafts are accepted up to the position where step + sequence + position is period - 1
    std::size_t hidden_until = static_cast<std::size_t>(-1);
    std::size_t reject_from = static_cast<std::size_t>(-1), reject_until = static_cast<std::size_t>(-1);
    double accept_probability = -1.0;
    std::size_t request_steps = 0;
    std::vector<double> seconds_by_width{};
    std::size_t change_at = static_cast<std::size_t>(-1);
    double base_after = 0.0, per_token_after = 0.0;

    struct Counts {
        std::size_t steps = 0, drafting_steps = 0, drafts = 0;
        std::size_t tokens = 0;         // emitted in the counted steps
        double seconds = 0.0;           // their time
        std::size_t unequal_plans = 0;  // plans not of the form min(K, cap_i) for one K (all steps)
        std::size_t rejecting_drafts = 0;  // drafts of the requests that accept none (odd or even_sequences_reject)
        std::size_t steps_all_drafting = 0;  // counted steps in which every sequence drafted
    };

    [[nodiscard]] bool accepts(std::size_t step, std::size_t i, std::size_t position) const {
        const std::uint64_t z = scramble(0x9E3779B97F4A7C15ull * (step + 1) + 0xD1B54A32D192ED03ull * (i + 1) + position);
        return static_cast<double>(z >> 11) * 0x1.0p-53 < accept_probability;
    }

    // The target pass over feeds of lengths[i] + 1 tokens.
    [[nodiscard]] double pass_seconds(const std::vector<std::size_t>& lengths, std::size_t step) const {
        std::size_t width = 0;
        for (const std::size_t k : lengths) width += k + 1;
        if (step >= change_at) return base_after + per_token_after * static_cast<double>(width);
        if (!seconds_by_width.empty()) return seconds_by_width.at(width);
        if (!split_by_length) return base + per_token * static_cast<double>(width);
        std::vector<std::size_t> levels;
        for (const std::size_t k : lengths) levels.push_back(k + 1);
        std::sort(levels.begin(), levels.end());
        levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
        double seconds = 0.0;
        std::size_t below = 0;
        for (const std::size_t level : levels) {
            const auto reaching = static_cast<std::size_t>(
                std::count_if(lengths.begin(), lengths.end(), [level](std::size_t k) { return k + 1 >= level; }));
            seconds += base + per_token * static_cast<double>(reaching * (level - below));
            below = level;
        }
        return seconds;
    }

    Counts run(AutoBatchLength& policy, std::size_t steps, std::size_t counted_from) const {
        Counts counts;
        std::vector<SequenceDraftQuery> queries;
        for (std::size_t i = 0; i < sequences; ++i) queries.push_back({i, caps.empty() ? cap : caps.at(i)});
        std::vector<std::size_t> lengths(sequences);
        std::vector<SequenceOutcome> outcomes;
        std::vector<std::size_t> round_widths;
        std::vector<double> round_seconds;
        std::vector<std::size_t> last_drafted(sequences, 0);
        for (std::size_t step = 0; step < steps; ++step) {
            if (request_steps > 0 && step > 0 && step % request_steps == 0)
                for (std::size_t i = 0; i < sequences; ++i) {
                    policy.forget(queries[i].id);
                    queries[i].id += sequences;
                }
            policy.plan(queries, lengths);
            const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
            for (std::size_t i = 0; i < sequences; ++i)
                if (lengths[i] != std::min(longest, queries[i].cap)) {
                    ++counts.unequal_plans;
                    break;
                }
            outcomes.clear();
            std::size_t width = 0, most = 0, drafts = 0, emitted = 0;
            for (std::size_t i = 0; i < sequences; ++i) {
                REQUIRE(lengths[i] <= queries[i].cap);
                const std::size_t k = lengths[i];
                std::size_t accepted = 0;
                if (step >= reject_from && step < reject_until) accepted = 0;
                else if (odd_sequences_reject) accepted = i % 2 == 0 ? k : 0;
                else if (even_sequences_reject) accepted = i % 2 == 1 ? k : 0;
                else if (accept_probability >= 0.0)
                    while (accepted < k && accepts(step, i, accepted)) ++accepted;
                else
                    while (accepted < k && (step + i + accepted) % period != period - 1) ++accepted;
                outcomes.push_back({queries[i].id, k, accepted});
                emitted += accepted + 1;
                width += k + 1;
                most = std::max(most, k);
                drafts += k;
            }
            round_widths.clear();
            round_seconds.clear();
            for (std::size_t r = 0; r < most; ++r) {
                round_widths.push_back(static_cast<std::size_t>(
                    std::count_if(lengths.begin(), lengths.end(), [r](std::size_t k) { return k > r; })));
                round_seconds.push_back(0.002);
            }
            std::size_t lagging = 0;  // tokens the first round catches up on
            for (std::size_t i = 0; i < sequences; ++i) {
                if (lengths[i] == 0) continue;
                lagging += step - last_drafted[i] > 1 ? step - last_drafted[i] - 1 : 0;
                last_drafted[i] = step;
            }
            if (most > 0) round_seconds[0] += catch_up * static_cast<double>(lagging);
            double target = pass_seconds(lengths, step);
            if (jitter > 0.0) {
                const std::uint64_t z = scramble(0x9E3779B97F4A7C15ull * (step + 1));
                target *= 1.0 + jitter * (2.0 * static_cast<double>(z >> 11) * 0x1.0p-53 - 1.0);
            }
            double total = target;
            for (const double seconds : round_seconds) total += seconds;
            if (drafts > 0 && step < hidden_until) total += hidden;
            specdec::StepTimings timings{.target_width = width, .target_seconds = target,
                                         .draft_passes = round_widths.size(), .draft_seconds = 0.0,
                                         .draft_round_widths = round_widths, .draft_round_seconds = round_seconds,
                                         .first_round_caught_up = lagging > 0, .acceptance_seconds = 0.0,
                                         .total_seconds = total};
            for (const double seconds : round_seconds) timings.draft_seconds += seconds;
            policy.observe(BatchOutcome{timings, outcomes});
            if (step >= counted_from) {
                ++counts.steps;
                counts.drafting_steps += drafts > 0 ? 1 : 0;
                counts.drafts += drafts;
                counts.tokens += emitted;
                counts.seconds += total;
                counts.steps_all_drafting += std::all_of(lengths.begin(), lengths.end(), [](std::size_t k) { return k > 0; });
                if (odd_sequences_reject || even_sequences_reject)
                    for (std::size_t i = odd_sequences_reject ? 1 : 0; i < sequences; i += 2) counts.rejecting_drafts += lengths[i];
            }
        }
        return counts;
    }
};

// Runs a fresh policy on `machine` and checks that from step `from` it drafts
// only at the exploring steps that probe a vetoed plan (one in 16 at most).
void check_stays_vetoed(const ScriptedBatch& machine, std::size_t steps, std::size_t from) {
    AutoBatchLength policy;
    const auto counts = machine.run(policy, steps, from);
    CHECK(counts.drafting_steps >= 1);  // the plan is still probed now and then
    CHECK(counts.drafting_steps <= counts.steps / 16 + 1);
}
}  // namespace

TEST_CASE("AutoBatchLength drafts while the target pass is memory-bound", "[batch_lengths]") {
    AutoBatchLength policy;
    const ScriptedBatch machine{.base = 0.010, .per_token = 0.0001};
    const auto counts = machine.run(policy, 200, 50);
    // Flat passes: every step but the plain exploring ones drafts, and for
    // most of the sequences.
    CHECK(counts.drafting_steps >= counts.steps * 9 / 10);
    CHECK(counts.drafts >= counts.steps * machine.sequences * 3 / 4);
}

TEST_CASE("AutoBatchLength plans no drafts while the target pass is compute-bound", "[batch_lengths]") {
    AutoBatchLength policy;
    const ScriptedBatch machine{.base = 0.0, .per_token = 0.004};
    const auto counts = machine.run(policy, 200, 50);
    // Each row costs as much as a token: only the exploring steps draft, one
    // token for one sequence.
    CHECK(counts.drafting_steps <= counts.steps / 16 + 1);
    CHECK(counts.drafts <= counts.drafting_steps * 2);
}

TEST_CASE("AutoBatchLength keeps a compute-bound batch plain when its pass timings are noisy", "[batch_lengths]") {
    // 32 sequences on a pass that costs its width (1.5 ms a token, a CPU at
    // B = 32), each pass timed within +-4%: drafting never pays. Two close
    // widths timed at noisy values (32 and 33, where the other widths' timings
    // have aged out) can look flat; widening from them drafts for the whole
    // batch, and a step that drafts k = 1-2 per request costs 2-3 plain ones.
    const ScriptedBatch noisy{.base = 0.0, .per_token = 0.0015, .jitter = 0.04, .sequences = 32};
    AutoBatchLength policy;
    const auto counts = noisy.run(policy, 600, 100);
    CHECK(policy.widened_steps() == 0);
    CHECK(counts.drafts <= counts.drafting_steps * 2);  // what drafts there are: the one-token explorations
    CHECK(counts.drafting_steps <= counts.steps / 16 + 1);

    // Negative control: the flat pass of a GPU, as noisy, still widens.
    const ScriptedBatch flat{.base = 0.016, .per_token = 0.00002, .jitter = 0.04, .sequences = 32, .cap = 6, .period = 8};
    AutoBatchLength gpu_policy;
    const auto climbed = flat.run(gpu_policy, 60, 20);
    CHECK(gpu_policy.widened_steps() > 0);
    CHECK(climbed.drafts >= climbed.steps * flat.sequences * 7 / 2);  // without widening: under 2 (the test below)
}

TEST_CASE("AutoBatchLength stops drafting when its drafting steps were slower than its plain ones, and keeps probing",
          "[batch_lengths]") {
    // The timings it models say drafting is nearly free, but every drafting
    // step costs 30 ms more than they account for: tokens per second say
    // otherwise, and the plain steps win.
    const ScriptedBatch misled{.base = 0.010, .per_token = 0.0001, .hidden = 0.030};
    check_stays_vetoed(misled, 400, 100);

    // Negative control: the same machine with the hidden cost small enough
    // that drafting still pays keeps drafting.
    const ScriptedBatch worth_it{.base = 0.010, .per_token = 0.0001, .hidden = 0.002};
    AutoBatchLength other;
    const auto drafted = worth_it.run(other, 400, 100);
    CHECK(drafted.drafting_steps >= drafted.steps * 9 / 10);
}

TEST_CASE("AutoBatchLength probes plain decoding rarely while drafting clearly wins", "[batch_lengths]") {
    // One request on a memory-bound pass: drafting two tokens emits 2 per
    // 14.3 ms against 1 per 10.1 ms plain (1.4x). A plain probe every 32
    // steps gives up a drafting step's second token each time; while drafting
    // wins by more than clear_margin (1.25) the probes come every 128 steps.
    const ScriptedBatch single{.base = 0.010, .per_token = 0.0001, .sequences = 1, .cap = 4};
    AutoBatchLength policy;
    const auto counts = single.run(policy, 1200, 200);
    CHECK(policy.plain_probes_skipped() > 0);
    CHECK(counts.steps - counts.drafting_steps >= 1);  // the plain rate is still timed now and then
    CHECK(counts.steps - counts.drafting_steps <= counts.steps / 100);

    // Negative control: the same machine with a margin drafting does not
    // reach probes as often as before (one step in 32).
    AutoBatchLength::Options options;
    options.clear_margin = 2.0;
    AutoBatchLength strict(options);
    const auto probed = single.run(strict, 1200, 200);
    CHECK(strict.plain_probes_skipped() == 0);
    CHECK(probed.steps - probed.drafting_steps >= probed.steps / 40);
    CHECK(counts.tokens * probed.seconds > probed.tokens * counts.seconds);  // the rarer probes ran faster

    // A margin below 1 would skip probes where drafting loses: refused.
    AutoBatchLength::Options nonsense;
    nonsense.clear_margin = 0.9;
    CHECK_THROWS_WITH(AutoBatchLength(nonsense), Catch::Contains("clear_margin"));
}

TEST_CASE("AutoBatchLength compares drafting with plain steps of its own time", "[batch_lengths]") {
    // 32 requests. For 60 steps the pass is slow and flat (80 ms + 0.2 ms a
    // token: traffic from elsewhere holds the memory bus) and drafting pays;
    // then it turns fast and compute-bound (4 ms + 1.8 ms a token), where
    // drafting loses about 5%. The plan's drafting steps re-time the wide
    // passes at once, but the batch's own width and the plain rate are timed
    // only by plain probes: read over their last 16 samples, both stay those
    // of the slow host for hundreds of steps, and the plan kept drafting in
    // 145 of the 300 steps from step 80 at 494 tokens/s against 519 plain.
    const ScriptedBatch changed{.base = 0.080, .per_token = 0.0002, .sequences = 32, .cap = 4, .change_at = 60,
                                .base_after = 0.004, .per_token_after = 0.0018};
    AutoBatchLength policy;
    const auto counts = changed.run(policy, 380, 80);
    CHECK(policy.plain_refreshes() > 0);
    CHECK(counts.drafting_steps <= counts.steps / 16);
    const double plain_rate = 32.0 / (0.004 + 0.0018 * 32);
    CHECK(static_cast<double>(counts.tokens) / counts.seconds >= 0.98 * plain_rate);

    // Negative control: a host that only turns faster, its pass still flat,
    // keeps drafting, the fresher plain rate notwithstanding.
    ScriptedBatch faster = changed;
    faster.base_after = 0.060;
    faster.per_token_after = 0.0002;
    AutoBatchLength other;
    const auto drafted = faster.run(other, 380, 80);
    CHECK(drafted.drafting_steps >= drafted.steps * 9 / 10);
}

TEST_CASE("AutoBatchLength leaves plain decoding only for a plan that expects draft_margin more", "[batch_lengths]") {
    // 16 requests on a pass of 70 ms that a 17th row leaves as it is (each
    // row past it costs 4.5 ms), one draft per request accepted 9 times in
    // 10, a draft round 2 ms: one request drafting one token expects 2.7%
    // more tokens per second than plain decoding, a near tie that a cost the
    // timings do not show (a draft cache catching up) or the plan's own
    // optimism turns into a loss. Below the default margin (3%) the plan
    // stays plain, but for its looks.
    std::vector<double> widths(40, 0.0);
    for (std::size_t w = 0; w < widths.size(); ++w) widths[w] = 0.070 + (w > 17 ? 0.0045 * double(w - 17) : 0.0);
    const ScriptedBatch tie{.sequences = 16, .cap = 1, .accept_probability = 0.9, .seconds_by_width = widths};
    AutoBatchLength policy;
    const auto counts = tie.run(policy, 400, 100);
    CHECK(counts.drafting_steps <= counts.steps / 16 + 1);

    // Negative control: with no margin the same plan drafts in most steps.
    AutoBatchLength::Options options;
    options.draft_margin = 1.0;
    AutoBatchLength eager(options);
    const auto drafted = tie.run(eager, 400, 100);
    CHECK(drafted.drafting_steps >= drafted.steps * 3 / 4);

    // A plan that expects far more than the margin drafts as before: the
    // 17th row and its neighbours free.
    std::vector<double> flat(40, 0.070);
    const ScriptedBatch gain{.sequences = 16, .cap = 1, .accept_probability = 0.9, .seconds_by_width = flat};
    AutoBatchLength default_policy;
    const auto paid = gain.run(default_policy, 400, 100);
    CHECK(paid.drafting_steps >= paid.steps * 3 / 4);

    // A margin below 1 would draft where the plan expects a loss: refused.
    AutoBatchLength::Options nonsense;
    nonsense.draft_margin = 0.97;
    CHECK_THROWS_WITH(AutoBatchLength(nonsense), Catch::Contains("draft_margin"));
}

TEST_CASE("AutoBatchLength drafts again soon after a stretch of rejected drafts, and keeps a veto on costs",
          "[batch_lengths]") {
    // One request on a memory-bound pass (drafting two tokens: about 2 tokens
    // per 14 ms against 1 per 10 ms plain), whose drafts are all rejected for
    // 12 steps. The drafting steps then emit fewer tokens per second than the
    // plain ones and the plan is vetoed; but its costs were as modelled (the
    // expected-token count holds), and the emitted count's evidence expires,
    // so it drafts again within kEmittedHorizon steps instead of waiting for
    // a lucky probe.
    const ScriptedBatch unlucky{.base = 0.010, .per_token = 0.0001, .sequences = 1, .cap = 4, .reject_from = 40,
                                .reject_until = 52};
    AutoBatchLength policy;
    const auto counts = unlucky.run(policy, 200, 70);
    // Of the 130 steps from step 70, 114 draft; with the emitted count kept
    // until a probe beat the plain steps, 86 did.
    CHECK(counts.drafting_steps >= counts.steps * 4 / 5);

    // Negative control: the same stretch with drafting steps that really cost
    // 30 ms more than modelled (as long as the run) stays vetoed: the
    // expected-token count does not expire.
    ScriptedBatch dear = unlucky;
    dear.hidden = 0.030;
    check_stays_vetoed(dear, 200, 70);
}

TEST_CASE("AutoBatchLength climbs to long drafts where the pass stays flat far past the widths it timed", "[batch_lengths]") {
    // A GPU's pass: 32 sequences, 16 ms for the pass whatever its width (up to
    // +4.5 ms at 224 tokens), acceptance 7/8, 6/7, ... per position: the best
    // plans draft 5-6 per sequence (about 4400 tokens/s against 1900 plain).
    // Warm-up times widths up to 40 only, and past the widest timed width V
    // is extrapolated as compute-bound, so the plan must widen its own range.
    const ScriptedBatch gpu{.base = 0.016, .per_token = 0.00002, .sequences = 32, .cap = 6, .period = 8};
    // From step 20 of 60 (a few requests' worth of steps):
    AutoBatchLength policy;
    const auto counts = gpu.run(policy, 60, 20);
    CHECK(counts.drafts >= counts.steps * gpu.sequences * 4);  // a mean of 4 drafts or more per sequence

    // Negative control: without the widening steps the same machine leaves
    // the plan near the widths warm-up timed (the exploring steps' one more
    // draft every 32 steps climbs there in hundreds of steps).
    AutoBatchLength::Options options;
    options.widen_every = 0;
    AutoBatchLength timid(options);
    const auto stuck = gpu.run(timid, 60, 20);
    CHECK(stuck.drafts < stuck.steps * gpu.sequences * 2);
}

TEST_CASE("AutoBatchLength resumes drafting once what vetoed it has passed, its probes not charged for the catch-up "
          "the veto caused",
          "[batch_lengths]") {
    // Four requests on a CPU-like pass where drafting one token each pays
    // (about +20%), but every drafting step of the first 40 costs 30 ms more
    // than its timings say: the check against realized rates vetoes the plan.
    // A request that drafts after plain steps catches its draft cache up on
    // every token they committed (0.5 ms a token), so each probe of the
    // vetoed plan pays for the stretch of plain steps before it.
    const ScriptedBatch transient{.base = 0.012, .per_token = 0.0009, .hidden = 0.030, .catch_up = 0.0005, .sequences = 4,
                                  .cap = 4, .hidden_until = 40};
    AutoBatchLength policy;
    const auto counts = transient.run(policy, 240, 80);
    CHECK(counts.drafting_steps >= counts.steps * 9 / 10);

    // Negative control: the same machine with the extra cost lasting to the end
    // keeps the veto, drafting at its probes only.
    ScriptedBatch lasting = transient;
    lasting.hidden_until = 240;
    check_stays_vetoed(lasting, 240, 80);
}

TEST_CASE("AutoBatchLength with equal_lengths gives every request one length, and outruns mixed plans where a "
          "ragged pass splits by feed length",
          "[batch_lengths]") {
    // A memory-bound pass that splits by feed length, as llama.cpp's per-
    // sequence cache streams do: a plan of mixed lengths pays one pass per
    // distinct length.
    // Half the requests accept every draft, half none: the default search
    // drafts for the first half only, a mixed plan.
    const ScriptedBatch machine{
        .base = 0.010, .per_token = 0.0002, .sequences = 6, .split_by_length = true, .odd_sequences_reject = true};
    AutoBatchLength equal({.equal_lengths = true}), mixed;
    const auto equal_counts = machine.run(equal, 300, 50);
    const auto mixed_counts = machine.run(mixed, 300, 50);
    // Warm-up, exploration, vetoes and the plans alike: never two lengths.
    CHECK(equal_counts.unequal_plans == 0);
    CHECK(equal_counts.drafting_steps >= equal_counts.steps * 3 / 4);
    // The default search mixes lengths (its per-request estimates differ)
    // and pays for the passes it does not see.
    CHECK(mixed_counts.unequal_plans > 0);
    const double equal_rate = static_cast<double>(equal_counts.tokens) / equal_counts.seconds;
    const double mixed_rate = static_cast<double>(mixed_counts.tokens) / mixed_counts.seconds;
    INFO("tokens/s with equal lengths " << equal_rate << ", mixed " << mixed_rate);
    CHECK(equal_rate > 1.05 * mixed_rate);

    // Caps below the common length are kept: lengths are min(K, cap_i).
    ScriptedBatch capped = machine;
    capped.caps = {4, 1, 0, 3, 4, 2};
    AutoBatchLength capped_policy({.equal_lengths = true});
    const auto capped_counts = capped.run(capped_policy, 200, 50);
    CHECK(capped_counts.unequal_plans == 0);
    CHECK(capped_counts.drafts > 0);

    // Where drafting never pays (a compute-bound pass), the equal plans stay
    // plain but for their exploring looks.
    const ScriptedBatch compute_bound{.base = 0.0, .per_token = 0.004, .sequences = 6, .split_by_length = true};
    AutoBatchLength plain_policy({.equal_lengths = true});
    const auto plain_counts = compute_bound.run(plain_policy, 256, 64);
    CHECK(plain_counts.unequal_plans == 0);
    CHECK(plain_counts.drafting_steps <= plain_counts.steps / 16 + 1);
}

namespace {

// A multi-slot toy target that says its ragged passes split (as LlamaCppModel
// with cache streams does), or not.
struct SplittingSlots : specdec::test::MultiSlot<specdec::test::ToyLM> {
    bool splits = true;
    explicit SplittingSlots(bool s)
        : specdec::test::MultiSlot<specdec::test::ToyLM>(3, [] { return specdec::test::ToyLM({.vocab = 8, .seed = 2}); }),
          splits(s) {}
    [[nodiscard]] bool ragged_passes_split() const { return splits; }
};

}  // namespace

TEST_CASE("AutoBatchLength plans equal lengths when the batched decoder's target says its ragged passes split, unless "
          "told otherwise",
          "[batch_lengths]") {
    using Toy = specdec::test::MultiSlot<specdec::test::ToyLM>;
    using Decoder = specdec::BatchedDecoder<SplittingSlots, Toy>;
    Toy draft(3, [] { return specdec::test::ToyLM({.vocab = 8, .seed = 2, .noise_seed = 1, .noise = 0.3}); });
    SplittingSlots splitting(true), whole(false);
    CHECK(Decoder(specdec::target(splitting), specdec::draft(draft)).policy().plans_equal_lengths());
    CHECK_FALSE(Decoder(specdec::target(whole), specdec::draft(draft)).policy().plans_equal_lengths());
    // An explicit option wins over what the target says.
    const Decoder mixed(specdec::target(splitting), specdec::draft(draft), {}, {}, AutoBatchLength({.equal_lengths = false}));
    CHECK_FALSE(mixed.policy().plans_equal_lengths());
    const Decoder equal(specdec::target(whole), specdec::draft(draft), {}, {}, AutoBatchLength({.equal_lengths = true}));
    CHECK(equal.policy().plans_equal_lengths());
    // A target without the query leaves the default.
    Toy plain_target(3, [] { return specdec::test::ToyLM({.vocab = 8, .seed = 2}); });
    CHECK_FALSE(specdec::BatchedDecoder<Toy, Toy>(specdec::target(plain_target), specdec::draft(draft)).policy().plans_equal_lengths());

    // The hook alone, on the scripted splitting machine: no mixed plan.
    const ScriptedBatch machine{
        .base = 0.010, .per_token = 0.0002, .sequences = 6, .split_by_length = true, .odd_sequences_reject = true};
    AutoBatchLength told;
    told.target_splits_ragged_passes(true);
    CHECK(machine.run(told, 200, 50).unequal_plans == 0);
}

TEST_CASE("AutoBatchLength learns how far requests' acceptance differs: alike requests are read by the batch's "
          "acceptance, unlike ones by their own",
          "[batch_lengths]") {
    // Two requests at a time, each accepting every draft with probability
    // 0.8, retiring every 12 steps, on a pass whose cost jumps from 3 tokens
    // to 4 (as the CPU's did at two sequences): one draft for each request
    // beats one for a single request, but only by a little (a second
    // request's first draft pays if it is accepted with 0.7 or more). A
    // request judged by its own few samples reads as poor after a couple of
    // unlucky rejections, drafts nothing and so is never measured again.
    const std::vector<double> lumpy{0.0, 0.0, 0.0074, 0.0076, 0.0100, 0.0104, 0.0124, 0.0128, 0.0148, 0.0152, 0.0172};
    const ScriptedBatch alike{.sequences = 2, .cap = 4, .accept_probability = 0.8, .request_steps = 12, .seconds_by_width = lumpy};
    AutoBatchLength learned;
    const auto alike_counts = alike.run(learned, 1500, 300);
    INFO("learned s " << learned.request_prior_strength());
    CHECK(learned.request_prior_strength() >= 64.0);  // 256 when all requests accept alike
    // Negative control: each request read by its own counts (s = 4).
    AutoBatchLength own_counts({.request_prior_strength = 4.0});
    const auto own = alike.run(own_counts, 1500, 300);
    const double learned_rate = static_cast<double>(alike_counts.tokens) / alike_counts.seconds;
    const double own_rate = static_cast<double>(own.tokens) / own.seconds;
    INFO("both drafting: learned " << alike_counts.steps_all_drafting << " of " << alike_counts.steps << ", own "
                                   << own.steps_all_drafting << "; tokens/s learned " << learned_rate << ", own " << own_rate);
    CHECK(alike_counts.steps_all_drafting > own.steps_all_drafting + own.steps / 10);
    CHECK(learned_rate > 1.01 * own_rate);

    // One request of the two accepts every draft and the other none, also
    // retiring every 12 steps, on a pass where a draft row costs a twentieth
    // of a plain pass: each request's own counts are the truth, and the
    // learned strength falls to its floor. The accepting request drafts its
    // cap; the other stops once a few rejections outweigh a row's cost.
    const ScriptedBatch unlike{.base = 0.0074, .per_token = 0.0004, .sequences = 2, .cap = 4, .even_sequences_reject = true,
                               .request_steps = 12};
    AutoBatchLength learned_unlike;
    const auto unlike_counts = unlike.run(learned_unlike, 1500, 300);
    CHECK(learned_unlike.request_prior_strength() <= 2.0);
    // Negative control: requests read by the batch's acceptance (s = 256)
    // look alike, half good, and the accepting request drafts far less than
    // it should.
    AutoBatchLength pooled({.request_prior_strength = 256.0});
    const auto pooled_counts = unlike.run(pooled, 1500, 300);
    const double unlike_rate = static_cast<double>(unlike_counts.tokens) / unlike_counts.seconds;
    const double pooled_rate = static_cast<double>(pooled_counts.tokens) / pooled_counts.seconds;
    INFO("tokens/s learned " << unlike_rate << ", pooled " << pooled_rate);
    CHECK(unlike_rate > 1.1 * pooled_rate);

    AutoBatchLength::Options nonsense;
    nonsense.request_prior_strength = 0.0;
    CHECK_THROWS_WITH(AutoBatchLength(nonsense), Catch::Contains("request_prior_strength"));
    nonsense.request_prior_strength = std::numeric_limits<double>::infinity();
    CHECK_THROWS_WITH(AutoBatchLength(nonsense), Catch::Contains("request_prior_strength"));
}
