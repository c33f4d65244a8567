// Exactness of the batched decoder per request, through the exactness harness
// (support/exactness_harness.hpp): the measured request is decoded WITH batch
// mates, so that every sample runs the batch machinery as a server would:
//   - a mate with the measured prompt runs first and ends within two steps, so
//     that the measured request is admitted mid-flight into the slot it leaves
//     and reuses that slot's caches (target and draft) for the common prefix;
//   - another mate is running when it is admitted, one more arrives with it
//     and three more one step later (some of them wait for a free slot), each
//     with a prompt, length, temperature or transform, draft length, stop
//     token and seed of its own, drawn from a stream apart from the measured
//     request's seed;
//   - every step is one target pass over all of them (MultiSlot target), and
//     with a draft model, lockstep draft rounds over a multi-slot draft.
// The measured request's generated sequences (length >= k + 1, so that its
// first step drafts every position) must follow the processed target's
// distribution: p >= 1e-3 with every draft position reached. The negative
// control, a model whose batched pass returns the feeds' rows last feed first,
// must be caught by the same statistic (p < 1e-6).
// Set SPECDEC_EXACTNESS_REPORT=1 to print each configuration's chi-square and
// the per-position reached/accepted counts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/slot_models.hpp"
#include "support/toy_models.hpp"

namespace batched_exactness {

using specdec::BatchedDecoder;
using specdec::DecodingOptions;
using specdec::RandomPurpose;
using specdec::RequestId;
using specdec::RequestStatus;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessReport;
using specdec::test::ExactnessSetup;
using specdec::test::MultiSlot;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::SampledRun;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

constexpr std::size_t kSlots = 4;
constexpr std::size_t kSamples = 20000;
constexpr std::size_t kVocab = 3;

// The target, and a draft correlated with it (the same logits plus seeded
// noise) so that deep draft positions are reached and accepted often.
ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions draft_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5}; }

using ToySlots = MultiSlot<ToyLM>;
ToySlots toy_slots(ToyLMOptions options) {
    return ToySlots(kSlots, [options] { return ToyLM(options); });
}

// The batch mates of one sample, drawn from a stream of their own: never from
// the measured request's seed, whose uniforms decide its tokens.
class Mates {
public:
    explicit Mates(std::uint64_t sample_seed) : choices_{sample_seed * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull} {}

    std::size_t below(std::size_t n) {
        return std::min(n - 1, static_cast<std::size_t>(choices_.uniform(draws_++, RandomPurpose::draft_sample) * n));
    }

    std::vector<Token> prompt(std::size_t shortest, std::size_t longest) {
        std::vector<Token> tokens(shortest + below(longest - shortest + 1));
        for (Token& t : tokens) t = static_cast<Token>(below(kVocab));
        return tokens;
    }

    // Other temperatures and transforms (greedy included), draft lengths and
    // seeds; one in three stops at a token.
    DecodingOptions options(std::size_t max_new_tokens) {
        static const SamplingOptions kSamplings[] = {
            {.temperature = 0.0}, {.temperature = 0.7}, {.temperature = 1.3, .top_k = 2}, {.temperature = 1.0, .top_p = 0.8}};
        DecodingOptions options{.draft_tokens = 1 + below(6),
                                .sampling = kSamplings[below(4)],
                                .seed = 1000003 + draws_ * 7919 + choices_.seed % 104729,
                                .max_new_tokens = max_new_tokens};
        if (below(3) == 0) options.stop_tokens = {static_cast<Token>(below(kVocab))};
        return options;
    }

private:
    specdec::CounterRng choices_;
    std::uint64_t draws_ = 0;
};

// What the samples of one configuration did besides their tokens.
struct ScenarioCounts {
    std::size_t samples = 0;
    std::size_t reused_prefix = 0;     // the measured request's prompt came from its slot's cache
    std::size_t admitted_later = 0;    // steps that admitted a request while others ran
    std::size_t shared_passes = 0;     // target passes holding the measured request and at least one mate
    std::vector<std::size_t> lengths;  // the measured request's draft lengths (draft_length_counts)
};

// One sample: mates, the measured request (prompt, options with the sample's
// seed) admitted mid-flight, more mates, then every request to its end.
template <class Decoder>
SampledRun run_with_mates(Decoder& decoder, const std::vector<Token>& prompt, DecodingOptions measured,
                          std::uint64_t seed, ScenarioCounts& counts,
                          specdec::GenerationResult* measured_result = nullptr) {
    Mates mates(seed);
    measured.seed = seed;
    // Mate A has the measured prompt and ends within two steps: its slot holds
    // the prompt (and what A generated and drafted) when the measured request
    // arrives, and is the free slot sharing the longest prefix with it.
    decoder.submit(prompt, mates.options(2));
    // Mate B needs at least 4 steps (at most 7 tokens a step): it shares the
    // measured request's first passes.
    decoder.submit(mates.prompt(1, 6), mates.options(22 + mates.below(10)));
    decoder.step();
    decoder.step();
    const RequestId id = decoder.submit(prompt, measured);
    // Mate C arrives with it (after it, so that it does not take A's slot).
    decoder.submit(mates.prompt(1, 6), mates.options(2 + mates.below(10)));
    auto step = [&] {
        const bool others_running = decoder.running_requests() > 0;
        const RequestStatus before = decoder.status(id);
        const specdec::BatchStepReport report = decoder.step();
        if (others_running && report.admitted > 0) ++counts.admitted_later;
        // In the pass: running before the step, or admitted by it.
        const bool in_pass = before == RequestStatus::running ||
                             (before == RequestStatus::waiting && decoder.status(id) != RequestStatus::waiting);
        if (in_pass && report.sequences > 1) ++counts.shared_passes;
    };
    step();
    for (int i = 0; i < 3; ++i) decoder.submit(mates.prompt(1, 8), mates.options(2 + mates.below(12)));
    while (!decoder.idle()) step();
    const std::vector<specdec::RequestResult> results = decoder.take_finished();
    REQUIRE(results.size() == 7);
    const auto it = std::find_if(results.begin(), results.end(), [&](const auto& r) { return r.id == id; });
    REQUIRE(it != results.end());
    INFO(it->error);
    REQUIRE(it->status == RequestStatus::finished);
    for (const auto& r : results) REQUIRE(r.status == RequestStatus::finished);
    ++counts.samples;
    if (it->generation.stats.prefill_tokens == 0 && prompt.size() > 1) ++counts.reused_prefix;
    specdec::test::detail::add_counts(counts.lengths, it->generation.stats.draft_length_counts);
    if (measured_result != nullptr) *measured_result = it->generation;
    return specdec::test::sampled_run(it->generation);
}

// A fixed cost model in place of the clock for a shared AutoBatchLength, so
// that the lengths it chooses, and with them the test's statistic, are the
// same in every run (a test with fixed seeds must not pass or fail by the
// machine's load): a target pass of n tokens costs 1 + a n + b n^2 (by
// default memory-bound at first, then compute-bound), a draft round over s
// sequences c + d s (by default 0.05 + 0.01 s), 0.001 a verified row. The policy is shared by the
// decoders of every sample, so that it plans from what earlier samples measured.
// hidden_drafting_seconds is added to the total of every step that drafted
// and to none of its timings: the policy's model cannot see it, only the
// realized tokens per second can. In the first rejected_span of every
// rejected_period policy steps the outcome tells the policy that every draft
// was rejected (whatever the rule kept): stretches of rejected drafts, which
// veto the plan by its emitted tokens until that evidence expires.
struct ScriptedCosts {
    specdec::AutoBatchLength* policy;
    double per_token = 0.01, per_token_squared = 0.002;
    double round_base = 0.05, round_per_sequence = 0.01;
    double hidden_drafting_seconds = 0.0;
    std::size_t hidden_until_step = static_cast<std::size_t>(-1);  // the policy's steps the hidden cost lasts
    std::size_t rejected_period = 0, rejected_span = 0;
    std::vector<specdec::SequenceOutcome> sequences{};
    std::vector<double> round_seconds{};
    std::size_t* unequal_plans = nullptr;  // counts plans with mates not of the form min(K, cap_i) for one K

    void plan(std::span<const specdec::SequenceDraftQuery> queries, std::span<std::size_t> lengths) {
        policy->plan(queries, lengths);
        if (unequal_plans == nullptr || lengths.empty()) return;
        const std::size_t longest = *std::max_element(lengths.begin(), lengths.end());
        for (std::size_t i = 0; i < lengths.size(); ++i)
            if (lengths[i] != std::min(longest, queries[i].cap)) {
                ++*unequal_plans;
                return;
            }
    }
    void observe(const specdec::BatchOutcome& measured) {
        specdec::BatchOutcome outcome = measured;
        const double n = static_cast<double>(outcome.target_width);
        outcome.target_seconds = 1.0 + per_token * n + per_token_squared * n * n;
        round_seconds.clear();
        double drafting = 0.0;
        for (const std::size_t b : outcome.draft_round_widths) {
            round_seconds.push_back(round_base + round_per_sequence * static_cast<double>(b));
            drafting += round_seconds.back();
        }
        outcome.draft_round_seconds = round_seconds;
        outcome.acceptance_seconds = 0.001 * n;
        outcome.total_seconds = outcome.target_seconds + drafting + outcome.acceptance_seconds;
        if (!outcome.draft_round_widths.empty() && policy->steps_observed() < hidden_until_step)
            outcome.total_seconds += hidden_drafting_seconds;
        if (rejected_period > 0 && policy->steps_observed() % rejected_period < rejected_span) {
            sequences.assign(outcome.sequences.begin(), outcome.sequences.end());
            for (specdec::SequenceOutcome& sequence : sequences) sequence.accepted = 0;
            outcome.sequences = sequences;
        }
        policy->observe(outcome);
    }
    void forget(std::uint64_t id) { policy->forget(id); }
};

// An AutoBatchLength whose warm-up drafts the deepest position (its warm-up
// length is the measured request's k) and that explores often.
specdec::AutoBatchLength deep_auto_policy(std::size_t k) {
    return specdec::AutoBatchLength({.warmup_steps = 6, .warmup_length = k, .explore_every = 3});
}

const std::vector<Token> kPrompt{1, 2};

// A period-9 pattern over 3 tokens, repeated: prompt lookup proposes 8 tokens
// (the continuation of the previous period) at the first step.
const std::vector<Token> kLookupPrompt{0, 1, 1, 2, 0, 2, 2, 1, 0, 0, 1, 1, 2, 0, 2, 2, 1, 0};

ExactnessSetup setup_for(std::string name, const std::vector<Token>& prompt, std::size_t k, const ToyLM& reference,
                         const SamplingOptions& sampling) {
    return ExactnessSetup{.name = std::move(name),
                          .prompt = prompt,
                          .vocab = kVocab,
                          .length = k + 1,
                          .draft_tokens = k,
                          .samples = kSamples,
                          .first_seed = 41000,
                          .target = reference_conditional(reference, sampling)};
}

// The batch machinery ran in the samples: prefix reuse, admission while
// others ran, passes shared with mates.
void check_batched(const ScenarioCounts& counts) {
    INFO("samples " << counts.samples << ", prefix reused " << counts.reused_prefix << ", admissions mid-flight "
                    << counts.admitted_later << ", passes shared with mates " << counts.shared_passes);
    CHECK(counts.reused_prefix == counts.samples);
    CHECK(counts.admitted_later >= 2 * counts.samples);
    CHECK(counts.shared_passes >= counts.samples);
}

// A draft model (multi-slot, drafting in lockstep) with rule Rule and policy
// Policy, on `target` (the toy target's slots, or an edited pass over them).
template <class Rule, class Policy, class Target>
ExactnessReport draft_model_report_on(Target& target, const std::string& name, const SamplingOptions& sampling,
                                      std::size_t k, const std::function<Policy()>& make_policy, ScenarioCounts& counts) {
    ToySlots draft = toy_slots(draft_options());
    const ToyLM reference(target_options());
    const ExactnessSetup setup = setup_for(name, kPrompt, k, reference, sampling);
    return run_exactness(setup, [&](std::uint64_t seed) {
        BatchedDecoder<Target, ToySlots, Rule, Policy> decoder(specdec::target(target), specdec::draft(draft), {}, Rule{},
                                                               make_policy());
        return run_with_mates(decoder, kPrompt,
                              {.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length}, seed, counts);
    });
}

template <class Rule, class Policy>
ExactnessReport draft_model_report(const std::string& name, const SamplingOptions& sampling, std::size_t k,
                                   const std::function<Policy()>& make_policy, ScenarioCounts& counts) {
    ToySlots target = toy_slots(target_options());
    return draft_model_report_on<Rule>(target, name, sampling, k, make_policy, counts);
}

// The measured request with token-wise rejection and k drafts a step (fixed
// lengths) on `target` and a multi-slot draft, among batch mates.
template <class Target>
ExactnessReport fixed_length_report(const ExactnessSetup& setup, Target& target, ToySlots& draft,
                                    const SamplingOptions& sampling, std::size_t k, ScenarioCounts& counts) {
    return run_exactness(setup, [&](std::uint64_t seed) {
        BatchedDecoder<Target, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
            specdec::target(target), specdec::draft(draft));
        return run_with_mates(decoder, kPrompt, {.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length},
                              seed, counts);
    });
}

// A multi-sequence model with a batching bug: forward_batch returns the
// feeds' rows last feed first (as if it walked its output buffer backwards),
// so every request of a pass with mates is verified against rows computed for
// other sequences. One feed alone is right.
struct LastFeedFirst {
    specdec::LogitsView operator()(std::span<const specdec::SequenceFeed> feeds, const specdec::LogitsView& all,
                                   std::vector<float>& buffer) const {
        std::vector<std::size_t> first{0};
        for (const specdec::SequenceFeed& f : feeds) first.push_back(first.back() + (f.last_row_only ? 1 : f.tokens.size()));
        buffer.clear();
        for (std::size_t f = feeds.size(); f-- > 0;) {
            buffer.insert(buffer.end(), all.data + first[f] * all.row_stride, all.data + first[f + 1] * all.row_stride);
        }
        return specdec::dense_logits(buffer, all.rows, all.vocab);
    }
};
using RowsLastFeedFirst = specdec::test::EditedBatchPass<ToyLM, LastFeedFirst>;
static_assert(specdec::MultiSequenceLM<RowsLastFeedFirst>);


TEST_CASE("batched decoding with a draft model is exact per request among batch mates: token-wise and block, fixed k",
          "[exactness][decoder][batched]") {
    constexpr std::size_t k = 4;
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.8, .top_k = 2}}) {
        const std::string t = "T " + std::to_string(sampling.temperature) + " top_k " + std::to_string(sampling.top_k);
        ScenarioCounts tokenwise, block;
        const std::function<specdec::FixedBatchLength()> fixed = [] { return specdec::FixedBatchLength{}; };
        const auto tokenwise_report = draft_model_report<specdec::TokenwiseRejection>(
            "batched, token-wise, fixed k 4, " + t, sampling, k, fixed, tokenwise);
        check_exact(tokenwise_report, k);
        CHECK(tokenwise_report.accepted[k - 1] > 0);  // the bonus row after a full block was used too
        check_batched(tokenwise);
        const auto block_report = draft_model_report<specdec::BlockVerification>(
            "batched, block, fixed k 4, " + t, sampling, k, fixed, block);
        check_exact(block_report, k);
        check_batched(block);
    }
}

TEST_CASE("batched decoding with penalties and logit bias is exact per request among batch mates (lockstep drafts "
          "carry each request's own history)",
          "[exactness][decoder][batched][penalties]") {
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.3, .top_k = 2, .repeat_penalty = 1.7, .frequency_penalty = 0.4,
                                   .penalty_last_n = 4, .logit_bias = {{1, 0.6f}}};
    ScenarioCounts counts;
    const std::function<specdec::FixedBatchLength()> fixed = [] { return specdec::FixedBatchLength{}; };
    const auto report = draft_model_report<specdec::TokenwiseRejection>("batched, token-wise, penalties and bias", sampling,
                                                                        k, fixed, counts);
    check_exact(report, k);
    CHECK(report.accepted[k - 1] > 0);
    check_batched(counts);
}

// The measured request's draft lengths, as " length:steps" pairs.
std::string draft_lengths_text(const ScenarioCounts& counts) {
    std::ostringstream lengths;
    for (std::size_t n = 0; n < counts.lengths.size(); ++n) lengths << ' ' << n << ':' << counts.lengths[n];
    return lengths.str();
}

// The measured request with token-wise rejection at T = 1 and k drafts among
// batch mates, an AutoBatchLength planning under `costs`: checked exact and
// batched; returns what the samples counted.
ScenarioCounts exact_under_scripted_auto(const std::string& name, std::size_t k,
                                         const std::function<ScriptedCosts()>& costs) {
    ScenarioCounts counts;
    check_exact(draft_model_report<specdec::TokenwiseRejection>(name, SamplingOptions{.temperature = 1.0}, k, costs, counts),
                k);
    check_batched(counts);
    return counts;
}

TEST_CASE("batched decoding with a draft model is exact per request among batch mates: AutoBatchLength drafting to the "
          "deepest position",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.0};
    specdec::AutoBatchLength tokenwise_policy = deep_auto_policy(k), block_policy = deep_auto_policy(k);
    ScenarioCounts tokenwise, block;
    const std::function<ScriptedCosts()> tokenwise_auto = [&] { return ScriptedCosts{&tokenwise_policy}; };
    const std::function<ScriptedCosts()> block_auto = [&] { return ScriptedCosts{&block_policy}; };
    check_exact(draft_model_report<specdec::TokenwiseRejection>("batched, token-wise, auto", sampling, k, tokenwise_auto, tokenwise),
                k);
    check_batched(tokenwise);
    check_exact(draft_model_report<specdec::BlockVerification>("batched, block, auto", sampling, k, block_auto, block), k);
    check_batched(block);
    // The policy chose the measured request's lengths, not only its cap: the
    // first step (cap 4) drafted 4 in some samples and fewer in others.
    for (const ScenarioCounts* counts : {&tokenwise, &block}) {
        const std::string lengths = draft_lengths_text(*counts);
        INFO("measured request's draft lengths (length:steps):" << lengths);
        if (const char* verbose = std::getenv("SPECDEC_EXACTNESS_REPORT"); verbose != nullptr && *verbose != '\0')
            std::cout << "exactness: measured request's draft lengths (length:steps):" << lengths << '\n';
        REQUIRE(counts->lengths.size() == k + 1);
        CHECK(counts->lengths[k] > 0);
        CHECK(counts->lengths[k] < counts->samples);
    }
    CHECK(tokenwise_policy.steps_observed() > kSamples);
    // Plain steps that refresh a stale plain rate ran among the sampled steps.
    CHECK(tokenwise_policy.plain_refreshes() > 0);
    CHECK(block_policy.plain_refreshes() > 0);
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength gives every request of a step one length "
          "(equal_lengths), drafting to the deepest position",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    specdec::AutoBatchLength policy({.warmup_steps = 6, .warmup_length = k, .explore_every = 3, .equal_lengths = true});
    std::size_t unequal = 0;
    const ScenarioCounts counts = exact_under_scripted_auto("batched, token-wise, auto equal lengths", k, [&] {
        return ScriptedCosts{.policy = &policy, .unequal_plans = &unequal};
    });
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts));
    CHECK(unequal == 0);
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[k] > 0);                // the deepest position was reached
    CHECK(counts.lengths[k] < counts.samples);  // and the policy chose, not only the cap

    // Negative control, the same scenario and policy: a pass that hands each
    // feed another feed's rows is caught.
    specdec::AutoBatchLength crossed_policy({.warmup_steps = 6, .warmup_length = k, .explore_every = 3, .equal_lengths = true});
    RowsLastFeedFirst crossed(toy_slots(target_options()));
    ScenarioCounts crossed_counts;
    const std::function<ScriptedCosts()> crossed_auto = [&] { return ScriptedCosts{.policy = &crossed_policy}; };
    check_caught(draft_model_report_on<specdec::TokenwiseRejection>(crossed, "batched, auto equal lengths, rows last feed first",
                                                                     SamplingOptions{.temperature = 1.0}, k, crossed_auto,
                                                                     crossed_counts),
                 k);
    check_batched(crossed_counts);
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength leaves out plain probes while drafting clearly "
          "wins, drafting to the deepest position",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    // Exploring every third step, a plain probe every sixth: drafting wins
    // by far under the scripted costs (a nearly flat pass), so every other
    // probe may run the plan instead (one in 12 steps), and most do.
    const specdec::AutoBatchLength::Options options{
        .warmup_steps = 6, .warmup_length = k, .explore_every = 3, .max_plain_probe_every = 12};
    specdec::AutoBatchLength policy(options);
    const ScenarioCounts counts =
        exact_under_scripted_auto("batched, token-wise, auto, rare plain probes", k, [&] { return ScriptedCosts{&policy}; });
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts) << "; plain probes left out "
                                                            << policy.plain_probes_skipped() << " of "
                                                            << policy.steps_observed() << " steps");
    CHECK(policy.plain_probes_skipped() * 16 > policy.steps_observed());  // over 3/4 of the one in 12 it may
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[k] > 0);  // the deepest position was reached

    // Negative control, the same scenario and policy: a pass that hands each
    // feed another feed's rows is caught.
    specdec::AutoBatchLength crossed_policy(options);
    RowsLastFeedFirst crossed(toy_slots(target_options()));
    ScenarioCounts crossed_counts;
    const std::function<ScriptedCosts()> crossed_auto = [&] { return ScriptedCosts{&crossed_policy}; };
    check_caught(draft_model_report_on<specdec::TokenwiseRejection>(crossed, "batched, auto rare plain probes, rows last feed first",
                                                                     SamplingOptions{.temperature = 1.0}, k, crossed_auto,
                                                                     crossed_counts),
                 k);
    check_batched(crossed_counts);
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength's check against realized tokens per second runs "
          "plain steps, its probes drafting to the deepest position",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    specdec::AutoBatchLength policy = deep_auto_policy(k);
    // Drafting steps cost 5 s more than their timings say: after warm-up the
    // plans that draft are vetoed but for the exploring steps that probe them.
    const ScenarioCounts counts = exact_under_scripted_auto("batched, token-wise, auto vetoed", k, [&] {
        return ScriptedCosts{.policy = &policy, .hidden_drafting_seconds = 5.0};
    });
    std::size_t steps = 0;
    for (const std::size_t n : counts.lengths) steps += n;
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts));
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[0] * 2 > steps);  // mostly plain steps: the check vetoed the plans
    CHECK(counts.lengths[k] > 0);          // and the probes still drafted to the deepest position
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength's veto lifts again once a probe beats the "
          "plain steps",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    specdec::AutoBatchLength policy = deep_auto_policy(k);
    // Drafting steps cost 5 s more than their timings say for the policy's
    // first 60 steps, then nothing: the plan is vetoed, and lifted by a probe.
    const ScenarioCounts counts = exact_under_scripted_auto("batched, token-wise, auto veto lifted", k, [&] {
        return ScriptedCosts{.policy = &policy, .hidden_drafting_seconds = 5.0, .hidden_until_step = 60};
    });
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts) << "; veto lifts "
                                                            << policy.veto_lifts());
    CHECK(policy.veto_lifts() > 0);
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[k] > 0);  // the deepest position was reached
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength's veto on emitted tokens comes with stretches "
          "of rejected drafts and expires",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    const auto rejected_stretches = [](specdec::AutoBatchLength& policy) {
        return [&policy] { return ScriptedCosts{.policy = &policy, .rejected_period = 96, .rejected_span = 12}; };
    };
    specdec::AutoBatchLength policy = deep_auto_policy(k);
    const ScenarioCounts counts =
        exact_under_scripted_auto("batched, token-wise, auto with rejected stretches", k, rejected_stretches(policy));
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts));
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[0] > 0);  // plain steps (vetoed, or after rejections)
    CHECK(counts.lengths[k] > 0);  // and the deepest position reached

    // Negative control, the same scenario and policy: a pass that hands each
    // feed another feed's rows is caught.
    specdec::AutoBatchLength crossed_policy = deep_auto_policy(k);
    RowsLastFeedFirst crossed(toy_slots(target_options()));
    ScenarioCounts crossed_counts;
    check_caught(draft_model_report_on<specdec::TokenwiseRejection>(
                     crossed, "batched, auto with rejected stretches, rows last feed first", SamplingOptions{.temperature = 1.0},
                     k, std::function<ScriptedCosts()>(rejected_stretches(crossed_policy)), crossed_counts),
                 k);
    check_batched(crossed_counts);
}

TEST_CASE("batched decoding is exact per request when AutoBatchLength widens past the widths it has timed (a flat "
          "pass)",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    // Without exploring steps, so that every drafting step past warm-up is
    // the plan or a widening step; a pass nearly flat in its width, as on a
    // GPU: widening steps then draft out to twice the widest timed width.
    specdec::AutoBatchLength policy({.warmup_steps = 6, .warmup_length = 1, .explore_every = 0});
    const ScenarioCounts counts = exact_under_scripted_auto("batched, token-wise, auto widening", k, [&] {
        return ScriptedCosts{.policy = &policy, .per_token = 0.0005, .per_token_squared = 0.0};
    });
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts) << "; widened steps "
                                                            << policy.widened_steps());
    CHECK(policy.widened_steps() > 0);
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[k] > 0);  // the deepest position was reached
}

// The measured request (the third run_with_mates submits) verifies with its
// own rule (block verification by default), every mate with token-wise
// rejection, in the same passes.
template <class Policy = specdec::FixedBatchLength>
class MixedRules {
public:
    using Kind = specdec::ChosenRule::Kind;
    using Decoder = BatchedDecoder<ToySlots, ToySlots, specdec::ChosenRule, Policy>;
    MixedRules(ToySlots& target, ToySlots& draft, Kind measured = Kind::block, Policy policy = {})
        : decoder_(specdec::target(target), specdec::draft(draft), {}, {}, std::move(policy)), measured_(measured) {}

    RequestId submit(std::span<const Token> prompt, DecodingOptions options) {
        const bool measured = submitted_++ == 2;
        return decoder_.submit(prompt, std::move(options), {}, specdec::ChosenRule{measured ? measured_ : Kind::tokenwise});
    }
    specdec::BatchStepReport step() { return decoder_.step(); }
    RequestStatus status(RequestId id) const { return decoder_.status(id); }
    std::size_t running_requests() const { return decoder_.running_requests(); }
    bool idle() const { return decoder_.idle(); }
    std::vector<specdec::RequestResult> take_finished() { return decoder_.take_finished(); }

private:
    Decoder decoder_;
    Kind measured_;
    std::size_t submitted_ = 0;
};

TEST_CASE("requests with their own rules share a batch: block verification among token-wise mates is exact and is "
          "block verification",
          "[exactness][decoder][batched]") {
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.0};
    ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
    ToyLM alone_target(target_options()), alone_draft(draft_options());
    const ToyLM reference(target_options());
    const ExactnessSetup setup = setup_for("batched, block among token-wise mates, fixed k 4", kPrompt, k, reference, sampling);
    ScenarioCounts counts;
    std::size_t same_as_block = 0, same_as_tokenwise = 0;
    const DecodingOptions measured{.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length};
    const auto report = run_exactness(setup, [&](std::uint64_t seed) {
        MixedRules<> decoder(target, draft);
        SampledRun run = run_with_mates(decoder, kPrompt, measured, seed, counts);
        // The same request alone, under each rule: with fixed lengths and the
        // same seed, the batched tokens are those of the rule it asked for.
        DecodingOptions alone = measured;
        alone.seed = seed;
        specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::BlockVerification, specdec::FixedLength> block(
            specdec::target(alone_target), specdec::draft(alone_draft), alone);
        specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedLength> tokenwise(
            specdec::target(alone_target), specdec::draft(alone_draft), alone);
        same_as_block += block.generate(kPrompt).tokens == run.tokens ? 1 : 0;
        same_as_tokenwise += tokenwise.generate(kPrompt).tokens == run.tokens ? 1 : 0;
        return run;
    });
    check_exact(report, k);
    check_batched(counts);
    CHECK(same_as_block == counts.samples);
    // The two rules decide differently often enough that the check above
    // would catch a request verified with its mates' rule.
    CHECK(same_as_tokenwise < counts.samples * 9 / 10);
}

TEST_CASE("a coupled request among token-wise mates under AutoBatchLength is exact, drafting to the deepest "
          "position, and emits for its seed the tokens of its run alone without drafts, whatever its lengths",
          "[exactness][decoder][batched][length-policy]") {
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.3, .top_k = 2, .repeat_penalty = 1.2};
    ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
    ToyLM alone_target(target_options()), alone_draft(draft_options());
    const ToyLM reference(target_options());
    const ExactnessSetup setup =
        setup_for("batched, coupled among token-wise mates, AutoBatchLength", kPrompt, k, reference, sampling);
    ScenarioCounts counts;
    std::size_t same_without_drafts = 0;
    const DecodingOptions measured{.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length};
    // One policy over every sample, on the fixed cost model (ScriptedCosts):
    // the same lengths in every run.
    specdec::AutoBatchLength policy = deep_auto_policy(k);
    const auto report = run_exactness(setup, [&](std::uint64_t seed) {
        MixedRules<ScriptedCosts> decoder(target, draft, specdec::ChosenRule::Kind::coupled, ScriptedCosts{&policy});
        SampledRun run = run_with_mates(decoder, kPrompt, measured, seed, counts);
        DecodingOptions no_drafts = measured;
        no_drafts.seed = seed;
        no_drafts.drafting = specdec::Drafting::off;
        specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::CoupledSampling, specdec::FixedLength> plain(
            specdec::target(alone_target), specdec::draft(alone_draft), no_drafts);
        same_without_drafts += plain.generate(kPrompt).tokens == run.tokens ? 1 : 0;
        return run;
    });
    check_exact(report, k);
    check_batched(counts);
    CHECK(same_without_drafts == counts.samples);
    INFO("measured request's draft lengths (length:steps):" << draft_lengths_text(counts));
    // Its lengths varied (the policy chose them), so the equality above is
    // independence of the draft length, not one length's run.
    std::size_t lengths_used = 0;
    for (const std::size_t steps : counts.lengths) lengths_used += steps > 0 ? 1 : 0;
    CHECK(lengths_used >= 3);
    REQUIRE(counts.lengths.size() == k + 1);
    CHECK(counts.lengths[k] > 0);
}

TEST_CASE("batched prompt lookup is exact per request among batch mates, all 8 draft positions reached",
          "[exactness][decoder][batched]") {
    constexpr std::size_t k = 8;
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.7, .top_k = 2}}) {
        ToySlots target = toy_slots(target_options());
        const ToyLM reference(target_options());
        specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 3});
        ScenarioCounts counts;
        const ExactnessSetup setup = setup_for("batched prompt lookup, k 8", kLookupPrompt, k, reference, sampling);
        const auto report = run_exactness(setup, [&](std::uint64_t seed) {
            BatchedDecoder<ToySlots, specdec::PromptLookupDrafter, specdec::TokenwiseRejection, specdec::FixedBatchLength>
                decoder(specdec::target(target), specdec::draft(drafter));
            return run_with_mates(decoder, kLookupPrompt,
                                  {.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length}, seed, counts);
        });
        check_exact(report, k);
        CHECK(report.accepted[2] > 0);
        check_batched(counts);
    }
}

TEST_CASE("batched prompt lookup with block verification and AutoBatchLength is exact per request among batch mates",
          "[exactness][decoder][batched][length-policy]") {
    // Lookup's drafts past the third are rarely kept here, so that a policy
    // that prices them would stop drafting before them: k = 3, a target pass
    // priced as memory-bound (1 + 0.0005 n) and lookup as nearly free, where
    // drafting pays.
    constexpr std::size_t k = 3;
    const SamplingOptions sampling{.temperature = 1.0};
    ToySlots target = toy_slots(target_options());
    const ToyLM reference(target_options());
    specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 3});
    specdec::AutoBatchLength policy = deep_auto_policy(k);
    ScenarioCounts counts;
    const ExactnessSetup setup = setup_for("batched prompt lookup, block, auto", kLookupPrompt, k, reference, sampling);
    const auto report = run_exactness(setup, [&](std::uint64_t seed) {
        BatchedDecoder<ToySlots, specdec::PromptLookupDrafter, specdec::BlockVerification, ScriptedCosts> decoder(
            specdec::target(target), specdec::draft(drafter), {}, specdec::BlockVerification{},
            ScriptedCosts{.policy = &policy, .per_token = 0.0005, .per_token_squared = 0.0, .round_base = 0.0001,
                          .round_per_sequence = 0.00001});
        return run_with_mates(decoder, kLookupPrompt, {.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length},
                              seed, counts);
    });
    check_exact(report, k);
    // The deepest position was drafted at many first steps, not only in the warm-up.
    CHECK(report.reached[k - 1] > kSamples / 2);
    check_batched(counts);
}

// Texts "a" and "b" and an end token without text; "(ab|ba)*" allows
// different tokens at different states, and the end token only after a whole
// number of pairs (then only end tokens).
const std::vector<std::string> kPairTexts{"a", "b", ""};
constexpr Token kPairEnd = 2;

// What "(ab|ba)*" allows after `generated`, worked out by hand rather than by
// the constraint's automaton: an unpaired letter must be followed by the
// other one; after whole pairs, any letter or the end.
std::vector<bool> pairs_allowed_after(std::span<const Token> generated) {
    std::size_t letters = 0;
    Token last = 0;
    for (const Token t : generated) {
        if (t == kPairEnd) return {false, false, true};
        ++letters;
        last = t;
    }
    if (letters % 2 == 1) return {last == 1, last == 0, false};
    return {true, true, true};
}

TEST_CASE("batched decoding under a regex constraint is exact per request among batch mates, and is the "
          "single-sequence decoder's constrained decoding token for token",
          "[exactness][decoder][batched][constraints]") {
    constexpr std::size_t k = 4;
    for (const SamplingOptions& base : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.8, .top_p = 0.9}}) {
        ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
        ToyLM alone_target(target_options()), alone_draft(draft_options());
        const ToyLM reference(target_options());
        specdec::RegexConstraint measured_constraint("(ab|ba)*", kPairTexts, {kPairEnd});
        specdec::RegexConstraint alone_constraint("(ab|ba)*", kPairTexts, {kPairEnd});
        ExactnessSetup setup = setup_for("batched, regex (ab|ba)*, T " + std::to_string(base.temperature), kPrompt, k,
                                         reference, base);
        setup.target = reference_conditional(reference, base, kPrompt.size(), pairs_allowed_after);
        SamplingOptions sampling = base;
        sampling.constraint = &measured_constraint;
        const DecodingOptions measured{.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length};
        ScenarioCounts counts;
        std::size_t same_as_alone = 0, allowed = 0;
        const auto report = run_exactness(setup, [&](std::uint64_t seed) {
            BatchedDecoder<ToySlots, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
                specdec::target(target), specdec::draft(draft));
            SampledRun run = run_with_mates(decoder, kPrompt, measured, seed, counts);
            // Every emitted token is one the pattern allows.
            bool valid = true;
            for (std::size_t i = 0; i < run.tokens.size(); ++i) {
                const std::vector<bool> ok = pairs_allowed_after(std::span<const Token>(run.tokens).first(i));
                valid = valid && ok[static_cast<std::size_t>(run.tokens[i])];
            }
            allowed += valid ? 1 : 0;
            // The same request alone, with the same seed and lengths.
            DecodingOptions alone = measured;
            alone.seed = seed;
            alone.sampling.constraint = &alone_constraint;
            specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedLength> single(specdec::target(alone_target), specdec::draft(alone_draft),
                                                             alone);
            same_as_alone += single.generate(kPrompt).tokens == run.tokens ? 1 : 0;
            return run;
        });
        check_exact(report, k);
        check_batched(counts);
        CHECK(allowed == counts.samples);
        CHECK(same_as_alone == counts.samples);
    }
}

// A grammar adapter with a bug: it reports the pattern's tokens at its start
// state and never moves (advance() accepts what the start state allows and
// stays put; rollback() has nothing to undo).
class FrozenConstraint final : public specdec::TokenConstraint {
public:
    explicit FrozenConstraint(specdec::RegexConstraint& inner) : inner_(&inner) {}
    [[nodiscard]] std::string name() const override { return "frozen " + inner_->name(); }
    void reset() override { inner_->reset(); }
    void allowed(std::span<std::uint8_t> allowed) override { inner_->allowed(allowed); }
    bool advance(Token token) override {
        std::vector<std::uint8_t> mask(kPairTexts.size());
        inner_->allowed(mask);
        return mask[static_cast<std::size_t>(token)] != 0;
    }
    void rollback(std::size_t) override {}

private:
    specdec::RegexConstraint* inner_;
};

TEST_CASE("negative control: a batched request under a constraint that never leaves its start state is caught",
          "[exactness][decoder][batched][constraints][negative-control]") {
    constexpr std::size_t k = 4;
    const SamplingOptions base{.temperature = 1.0};
    ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
    const ToyLM reference(target_options());
    specdec::RegexConstraint pattern("(ab|ba)*", kPairTexts, {kPairEnd});
    FrozenConstraint frozen(pattern);
    ExactnessSetup setup = setup_for("batched, frozen regex constraint", kPrompt, k, reference, base);
    setup.target = reference_conditional(reference, base, kPrompt.size(), pairs_allowed_after);
    SamplingOptions sampling = base;
    sampling.constraint = &frozen;
    ScenarioCounts counts;
    check_caught(fixed_length_report(setup, target, draft, sampling, k, counts), k);
    check_batched(counts);
}

TEST_CASE("a batched request's logprobs are those the single-sequence decoder reports for it, whatever its mates",
          "[decoder][batched][logprobs]") {
    constexpr std::size_t k = 4;
    ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
    ToyLM alone_target(target_options()), alone_draft(draft_options());
    for (const specdec::LogprobSource source : {specdec::LogprobSource::processed, specdec::LogprobSource::raw}) {
        for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 0.0}, SamplingOptions{.temperature = 0.9, .top_k = 2}}) {
            const DecodingOptions measured{.draft_tokens = k, .sampling = sampling, .max_new_tokens = 12,
                                           .logprobs = {.enabled = true, .top_n = 2, .source = source}};
            ScenarioCounts counts;
            for (std::uint64_t seed = 500; seed < 700; ++seed) {
                BatchedDecoder<ToySlots, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
                    specdec::target(target), specdec::draft(draft));
                specdec::GenerationResult batched;
                run_with_mates(decoder, kPrompt, measured, seed, counts, &batched);
                DecodingOptions alone = measured;
                alone.seed = seed;
                specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, specdec::FixedLength> single(specdec::target(alone_target),
                                                                 specdec::draft(alone_draft), alone);
                const specdec::GenerationResult expected = single.generate(kPrompt);
                // Same seed and lengths: the same tokens, and the logprobs read
                // from the same rows, bitwise.
                REQUIRE(batched.tokens == expected.tokens);
                REQUIRE(batched.logprobs.size() == batched.tokens.size());
                REQUIRE(expected.logprobs.size() == expected.tokens.size());
                for (std::size_t i = 0; i < batched.logprobs.size(); ++i) {
                    INFO("seed " << seed << ", token " << i);
                    CHECK(batched.logprobs[i].token == expected.logprobs[i].token);
                    CHECK(batched.logprobs[i].logprob == expected.logprobs[i].logprob);
                    REQUIRE(batched.logprobs[i].top.size() == 2);
                    REQUIRE(expected.logprobs[i].top.size() == 2);
                    for (std::size_t j = 0; j < 2; ++j) {
                        CHECK(batched.logprobs[i].top[j].token == expected.logprobs[i].top[j].token);
                        CHECK(batched.logprobs[i].top[j].logprob == expected.logprobs[i].top[j].logprob);
                    }
                }
            }
            check_batched(counts);
        }
    }
}

TEST_CASE("progress() shows a running request's tokens and logprobs after every step, as streamed",
          "[decoder][batched][logprobs]") {
    ToySlots target = toy_slots(target_options()), draft = toy_slots(draft_options());
    BatchedDecoder<ToySlots, ToySlots, specdec::TokenwiseRejection, specdec::FixedBatchLength> decoder(
        specdec::target(target), specdec::draft(draft));
    const DecodingOptions options{.draft_tokens = 3, .sampling = {.temperature = 0.9}, .seed = 9, .max_new_tokens = 20,
                                  .logprobs = {.enabled = true, .top_n = 1}};
    std::vector<Token> streamed;
    const specdec::RequestId id = decoder.submit(kPrompt, options, [&](Token t) {
        streamed.push_back(t);
        return true;
    });
    const specdec::RequestId mate = decoder.submit(kPrompt, {.draft_tokens = 3, .max_new_tokens = 40});
    CHECK(decoder.progress(id) == nullptr);  // waiting until the first step
    std::vector<specdec::TokenLogprob> seen;
    std::size_t steps = 0;
    while (decoder.status(id) == specdec::RequestStatus::running || decoder.status(id) == specdec::RequestStatus::waiting) {
        decoder.step();
        ++steps;
        if (const specdec::GenerationResult* so_far = decoder.progress(id)) {
            CHECK(so_far->tokens == streamed);
            REQUIRE(so_far->logprobs.size() == so_far->tokens.size());
            seen = so_far->logprobs;
        }
    }
    CHECK(decoder.progress(id) == nullptr);
    CHECK(decoder.progress(mate) != nullptr);
    std::vector<specdec::RequestResult> finished = decoder.take_finished();
    const auto it = std::find_if(finished.begin(), finished.end(), [&](const auto& r) { return r.id == id; });
    REQUIRE(it != finished.end());
    CHECK(it->generation.tokens == streamed);
    REQUIRE(it->generation.logprobs.size() == 20);
    REQUIRE(seen.size() < 20);  // the last step's logprobs arrive with the result
    CHECK(steps > 1);
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i].logprob == it->generation.logprobs[i].logprob);
}

TEST_CASE("a batched request that fixes its length (Drafting::fixed) or drafts nothing (off) under AutoBatchLength is "
          "exact among batch mates",
          "[exactness][decoder][batched][length-policy]") {
    // The policy plans the mates that leave their length to it; the measured
    // request drafts its cap every step (reaching the deepest position in every
    // sample) or nothing at all.
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.0};
    ToySlots target = toy_slots(target_options());
    ToySlots draft = toy_slots(draft_options());
    const ToyLM reference(target_options());
    for (const specdec::Drafting drafting : {specdec::Drafting::fixed, specdec::Drafting::off}) {
        const bool fixed = drafting == specdec::Drafting::fixed;
        ScenarioCounts counts;
        ExactnessSetup setup =
            setup_for(fixed ? "batched, Drafting::fixed under AutoBatchLength" : "batched, Drafting::off under AutoBatchLength",
                      kPrompt, k, reference, sampling);
        if (!fixed) setup.draft_tokens = 0;  // sequences of k + 1 tokens all the same, no draft position to reach
        const auto report = run_exactness(setup, [&](std::uint64_t seed) {
            BatchedDecoder<ToySlots, ToySlots, specdec::TokenwiseRejection, specdec::AutoBatchLength> decoder(
                specdec::target(target), specdec::draft(draft), {}, {}, deep_auto_policy(1));
            return run_with_mates(
                decoder, kPrompt,
                {.draft_tokens = k, .sampling = sampling, .max_new_tokens = setup.length, .drafting = drafting}, seed, counts);
        });
        check_exact(report, fixed ? k : 0);
        check_batched(counts);
        // Its first step drafted the cap in every sample (fixed), or nothing (off).
        const std::string lengths = draft_lengths_text(counts);
        INFO("measured request's draft lengths (length:steps):" << lengths);
        if (fixed) {
            REQUIRE(counts.lengths.size() == k + 1);
            CHECK(counts.lengths[k] >= counts.samples);
        } else {
            for (std::size_t n = 1; n < counts.lengths.size(); ++n) CHECK(counts.lengths[n] == 0);
        }
    }
}

TEST_CASE("batched plain decoding (NoDrafts) is exact per request among batch mates", "[exactness][decoder][batched]") {
    const SamplingOptions sampling{.temperature = 1.3, .top_k = 2};
    ToySlots target = toy_slots(target_options());
    const ToyLM reference(target_options());
    specdec::NoDrafts none;
    ScenarioCounts counts;
    const ExactnessSetup setup = setup_for("batched autoregressive", kPrompt, 3, reference, sampling);
    const auto report = run_exactness(setup, [&](std::uint64_t seed) {
        BatchedDecoder<ToySlots, specdec::NoDrafts> decoder(specdec::target(target), specdec::draft(none));
        return run_with_mates(decoder, kPrompt, {.sampling = sampling, .max_new_tokens = setup.length}, seed, counts);
    });
    check_exact(report, 0);
    check_batched(counts);
}

TEST_CASE("negative control: a batched pass that returns the feeds' rows last feed first is caught",
          "[exactness][decoder][batched][negative-control]") {
    constexpr std::size_t k = 4;
    const SamplingOptions sampling{.temperature = 1.0};
    RowsLastFeedFirst target(toy_slots(target_options()));
    ToySlots draft = toy_slots(draft_options());
    const ToyLM reference(target_options());
    ScenarioCounts counts;
    const ExactnessSetup setup = setup_for("batched, rows last feed first", kPrompt, k, reference, sampling);
    check_caught(fixed_length_report(setup, target, draft, sampling, k, counts), k);
    check_batched(counts);
}

}  // namespace batched_exactness
