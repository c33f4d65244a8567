// Exactness of block verification and of the draft-length policies inside the
// whole decoder: the empirical distribution of generated 5-token sequences
// over a 3-token vocabulary (243 cells), and of the first token alone (3
// cells), must match the processed target's, computed exactly by enumeration.
// Five tokens, so that the first step of a k = 4 configuration drafts every
// position (a step drafts at most max_new_tokens - 1).
// Pearson chi-square at fixed seeds: exact configurations must give
// p >= 1e-3; the negative controls (a block rule with the token-wise residual
// or resampling the target after a rejection, a length policy that peeks at the
// verifier's uniforms) must give p < 1e-6. The default decoder (block
// verification, AutoLength) is tested as a user constructs it.
// At temperature 0 every rule and policy must reproduce greedy decoding.
#include <algorithm>
#include <memory>
#include <sstream>
#include <type_traits>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/statistics.hpp"
#include "support/toy_models.hpp"

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

namespace {

using specdec::test::kControlSignificance;
using specdec::test::kExactSignificance;
constexpr std::size_t kVocab = 3;
constexpr std::size_t kLength = 5;
constexpr std::size_t kCells = kVocab * kVocab * kVocab * kVocab * kVocab;
constexpr std::size_t kPolicySamples = 30000;

ToyLMOptions policy_target_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions policy_draft_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 1.0}; }

const std::vector<Token> kPolicyPrompt{1, 2};

std::vector<double> exact_sequence_distribution(const SamplingOptions& sampling, const ToyLM& target) {
    std::vector<double> expected(kCells, 0.0);
    std::vector<float> p(kVocab);
    for (std::size_t cell = 0; cell < kCells; ++cell) {
        std::vector<Token> sequence = kPolicyPrompt;
        double probability = 1.0;
        std::size_t code = cell;
        for (std::size_t i = 0; i < kLength; ++i) {
            const Token next = static_cast<Token>(code % kVocab);
            code /= kVocab;
            specdec::logits_to_distribution(target.logits_after(sequence), sampling, p);
            probability *= p[static_cast<std::size_t>(next)];
            sequence.push_back(next);
        }
        expected[cell] = probability;
    }
    return expected;
}

struct SequenceResult {
    specdec::test::ChiSquareResult sequences, first_token;
    bool deepest_reached = false;  // the last draft position was drafted at least once
    std::string cells;             // the harness's description (cells, reached/accepted per position)
};

// Draws `samples` 5-token generations, one decoder per seed: the whole
// sequences through the exactness harness (cells merged along the prefix
// tree, compared with its independent reference of the processed target),
// the first tokens with the library's exact distribution.
template <class MakeDecoder>
SequenceResult sequence_test(const SamplingOptions& sampling, std::size_t samples, MakeDecoder make_decoder,
                             const ToyLM& reference = ToyLM(policy_target_options()), std::size_t draft_tokens = 4) {
    std::vector<std::size_t> first(kVocab, 0);
    const specdec::test::ExactnessSetup setup{.name = "sequences",
                                              .prompt = kPolicyPrompt,
                                              .vocab = kVocab,
                                              .length = kLength,
                                              .draft_tokens = draft_tokens,
                                              .samples = samples,
                                              .first_seed = 7000,
                                              .target = specdec::test::reference_conditional(reference, sampling)};
    const specdec::test::ExactnessReport report = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        auto decoder = make_decoder(DecodingOptions{.sampling = sampling, .seed = seed, .max_new_tokens = kLength});
        const auto result = decoder->generate(kPolicyPrompt);
        REQUIRE(result.tokens.size() == kLength);
        ++first[static_cast<std::size_t>(result.tokens[0])];
        return specdec::test::sampled_run(result);
    });
    const std::vector<double> expected = exact_sequence_distribution(sampling, reference);
    std::vector<double> expected_first(kVocab, 0.0);
    for (std::size_t cell = 0; cell < kCells; ++cell) expected_first[cell % kVocab] += expected[cell];
    return {report.chi_square, specdec::test::chi_square_test(first, expected_first), report.deepest_reached(draft_tokens),
            report.describe()};
}

std::string describe(const SamplingOptions& s) {
    std::ostringstream out;
    out << "T=" << s.temperature << " top_k=" << s.top_k << " top_p=" << s.top_p << " min_p=" << s.min_p;
    return out.str();
}

const std::vector<SamplingOptions> kTransforms{
    {.temperature = 1.0},
    {.temperature = 0.6},
    {.temperature = 1.4, .top_k = 2},
    {.temperature = 1.0, .top_p = 0.8},
};

// One AutoLength shared by the decoders of every sample, so that the lengths
// it chooses follow what it learned from earlier samples. It sees a fixed cost
// model instead of wall-clock times (draft pass 0.1, a pass of n tokens
// 1 + 0.02 n^2, 0.01 a row), so that its choices, and with them the test's
// statistic, are the same in every run: a test with fixed seeds must not pass
// or fail by the machine's load.
// It also counts the stops of each kind, so that the test can require both
// to have happened: before a draft pass (formed = false) and after one.
struct StopCounts {
    std::size_t before_pass = 0, after_pass = 0;
};

struct SharedAutoLength {
    specdec::AutoLength* policy;
    StopCounts* stops = nullptr;
    specdec::DraftStop inner{};
    double draft_pass_seconds = 0.1;  // 3.0: drafting never pays, k* = 0
    specdec::DraftPlan plan(std::size_t cap, std::uint64_t position) {
        const specdec::DraftPlan planned = policy->plan(cap, position);
        inner = planned.stop;
        return {planned.max_tokens, specdec::DraftStop(*this)};
    }
    bool operator()(const specdec::DraftCandidate& candidate) {
        const bool stop = inner(candidate);
        if (stop && stops) ++(candidate.formed ? stops->after_pass : stops->before_pass);
        return stop;
    }
    void observe(specdec::StepOutcome outcome) {
        const double n = static_cast<double>(outcome.target_width);
        outcome.draft_seconds = draft_pass_seconds * static_cast<double>(outcome.draft_passes);
        outcome.target_seconds = 1.0 + 0.02 * n * n;
        outcome.acceptance_seconds = 0.01 * static_cast<double>(outcome.proposed + 1);
        outcome.total_seconds = outcome.draft_seconds + outcome.target_seconds + outcome.acceptance_seconds;
        policy->observe(outcome);
    }
};

// SharedAutoLength that also counts the steps and those that drafted.
struct Counting : SharedAutoLength {
    std::size_t* steps_out;
    std::size_t* drafting_out;
    void observe(const specdec::StepOutcome& outcome) {
        ++*steps_out;
        *drafting_out += outcome.proposed > 0 ? 1 : 0;
        SharedAutoLength::observe(outcome);
    }
};

template <class Rule, class Policy>
SequenceResult decoder_test(const SamplingOptions& sampling, std::size_t k, Policy policy) {
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    return sequence_test(
        sampling, kPolicySamples,
        [&](DecodingOptions options) {
        options.draft_tokens = k;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, Rule, Policy>>(
            specdec::target(target), specdec::draft(draft), options, Rule{}, policy);
        },
        target, k);
}

void check_exact(const SequenceResult& result, const std::string& what) {
    INFO(what << ": sequences chi2 " << result.sequences.statistic << " df " << result.sequences.degrees_of_freedom
              << " p " << result.sequences.p_value << "; first token chi2 " << result.first_token.statistic << " df "
              << result.first_token.degrees_of_freedom << " p " << result.first_token.p_value);
    INFO(result.cells);
    CHECK(result.deepest_reached);
    CHECK(result.sequences.p_value >= kExactSignificance);
    CHECK(result.first_token.p_value >= kExactSignificance);
}

// Negative control: block verification's kept length (the library's own,
// detail::block_kept_length) with the token-wise residual.
struct BlockWithTokenwiseResidual {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t pos) const {
        std::vector<double> w;
        specdec::detail::block_acceptance_weights(d, p, w);
        const std::size_t tau = specdec::detail::block_kept_length(d, p, w, rng, pos);
        const double v = rng.uniform(pos + tau, specdec::RandomPurpose::target_sample);
        if (tau == d.size()) return {tau, specdec::sample_from_distribution(p.row(tau), v)};
        return {tau, specdec::detail::sample_residual(p.row(tau), d, tau, v)};
    }
};

// Negative control: block verification's kept length, then a token from the
// target's row where the residual belongs.
struct BlockResamplingTheTarget {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t pos) const {
        std::vector<double> w;
        specdec::detail::block_acceptance_weights(d, p, w);
        const std::size_t tau = specdec::detail::block_kept_length(d, p, w, rng, pos);
        const double v = rng.uniform(pos + tau, specdec::RandomPurpose::target_sample);
        return {tau, specdec::sample_from_distribution(p.row(tau), v)};
    }
};

// Negative control: ends the draft before a position whose acceptance uniform
// (the verifier's, drawn later) is large, i.e. where a rejection is likely.
struct PeeksAtAcceptanceUniform {
    std::uint64_t seed = 0;
    std::uint64_t first_position = 0;
    specdec::DraftPlan plan(std::size_t cap, std::uint64_t position) {
        first_position = position;
        return {cap, specdec::DraftStop(*this)};
    }
    void observe(const specdec::StepOutcome&) {}
    bool operator()(const specdec::DraftCandidate& c) const {
        return c.index >= 1 &&
               specdec::CounterRng{seed}.uniform(first_position + c.index, specdec::RandomPurpose::accept_test) > 0.5;
    }
};

}  // namespace

TEST_CASE("block verification generates exactly the target's sequences and first tokens", "[exactness][decoder][block]") {
    for (const std::size_t k : {2, 4}) {
        for (const SamplingOptions& sampling : kTransforms) {
            const auto result = decoder_test<specdec::BlockVerification>(sampling, k, specdec::FixedLength{});
            check_exact(result, "block, k " + std::to_string(k) + ", " + describe(sampling));
        }
    }
}

TEST_CASE("the confidence stop and the auto length keep both rules exact", "[exactness][decoder][length-policy]") {
    specdec::AutoLength tokenwise_auto({.warmup_steps = 2, .explore_every = 3});
    specdec::AutoLength block_auto({.warmup_steps = 2, .explore_every = 3});
    StopCounts tokenwise_stops, block_stops;
    for (const SamplingOptions& sampling : {kTransforms[0], kTransforms[2], kTransforms[3]}) {
        const std::string t = describe(sampling);
        check_exact(decoder_test<specdec::TokenwiseRejection>(sampling, 4, specdec::ConfidenceStop{.min_top_probability = 0.45}),
                    "token-wise + confidence stop, " + t);
        check_exact(decoder_test<specdec::BlockVerification>(sampling, 4, specdec::ConfidenceStop{.min_top_probability = 0.45}),
                    "block + confidence stop, " + t);
        check_exact(decoder_test<specdec::TokenwiseRejection>(sampling, 4, SharedAutoLength{&tokenwise_auto, &tokenwise_stops}),
                    "token-wise + auto, " + t);
        check_exact(decoder_test<specdec::BlockVerification>(sampling, 4, SharedAutoLength{&block_auto, &block_stops}),
                    "block + auto, " + t);
    }
    CHECK(tokenwise_auto.steps_observed() > 0);
    // Both of AutoLength's decisions ended drafts in the samples tested above.
    INFO("token-wise stops before / after a pass: " << tokenwise_stops.before_pass << " / " << tokenwise_stops.after_pass
         << "; block: " << block_stops.before_pass << " / " << block_stops.after_pass);
    CHECK(tokenwise_stops.before_pass > 0);
    CHECK(tokenwise_stops.after_pass > 0);
    CHECK(block_stops.before_pass > 0);
    CHECK(block_stops.after_pass > 0);
}

// Always keeps the draft: the sequences then follow the draft where it drafted.
struct AcceptsEveryDraft {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t pos) const {
        return {d.size(), specdec::sample_from_distribution(p.row(d.size()),
                                                            rng.uniform(pos + d.size(), specdec::RandomPurpose::target_sample))};
    }
};

TEST_CASE("an auto length whose drafts never pay explores ever more rarely and stays exact",
          "[exactness][decoder][length-policy]") {
    // Drafting costs 3 target passes: k* = 0, and the exploring steps (one
    // draft each, the policy's deepest position here) come at intervals
    // doubling from 3 to 12 steps (AutoLength's backoff).
    const specdec::AutoLength::Options options{.warmup_steps = 2, .explore_every = 3, .max_explore_every = 12};
    const SamplingOptions sampling{.temperature = 1.0};
    for (const bool block : {false, true}) {
        specdec::AutoLength policy(options);
        std::size_t steps = 0, drafting = 0;
        const Counting counting{{.policy = &policy, .draft_pass_seconds = 3.0}, &steps, &drafting};
        const SequenceResult result = block ? decoder_test<specdec::BlockVerification>(sampling, 1, counting)
                                            : decoder_test<specdec::TokenwiseRejection>(sampling, 1, counting);
        check_exact(result, block ? "block, auto, drafts never pay" : "token-wise, auto, drafts never pay");
        // Between the 1 in 12 of the longest interval and the 1 in 3 it
        // would keep without the backoff.
        const double share = static_cast<double>(drafting) / static_cast<double>(steps);
        INFO("drafting steps " << drafting << " of " << steps);
        CHECK(share > 0.04);
        CHECK(share < 0.15);
    }
    // Negative control: the same policy with a rule that keeps every draft.
    specdec::AutoLength control_policy(options);
    const SequenceResult control = decoder_test<AcceptsEveryDraft>(
        sampling, 1, SharedAutoLength{.policy = &control_policy, .draft_pass_seconds = 3.0});
    INFO("every draft kept: sequences p " << control.sequences.p_value << " (" << control.cells << ")");
    CHECK(control.sequences.p_value < kControlSignificance);
}

TEST_CASE("negative controls: a block rule with the token-wise residual and a policy that peeks at the verifier's uniform are caught", "[exactness][decoder][negative-control]") {
    const SamplingOptions sampling{.temperature = 1.0};
    // The two residuals differ only where w_tau < 1 leaves mass on several
    // tokens; a flatter target and a noisier draft make that common, and the
    // difference is small, hence more samples.
    ToyLM flat_target({.vocab = kVocab, .seed = 5, .sharpness = 0.8});
    ToyLM noisy_draft({.vocab = kVocab, .seed = 5, .sharpness = 0.8, .noise_seed = 99, .noise = 2.0});
    const auto residual = sequence_test(sampling, 8 * kPolicySamples, [&](DecodingOptions options) {
        options.draft_tokens = 4;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, BlockWithTokenwiseResidual, specdec::FixedLength>>(
            specdec::target(flat_target), specdec::draft(noisy_draft), options);
    }, flat_target);
    INFO("block with the token-wise residual: sequences p " << residual.sequences.p_value << ", first token p "
                                                             << residual.first_token.p_value);
    CHECK(residual.sequences.p_value < kControlSignificance);
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    const auto peeking = sequence_test(sampling, kPolicySamples, [&](DecodingOptions options) {
        options.draft_tokens = 4;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::TokenwiseRejection, PeeksAtAcceptanceUniform>>(
            specdec::target(target), specdec::draft(draft), options, specdec::TokenwiseRejection{},
            PeeksAtAcceptanceUniform{.seed = options.seed.value()});
    });
    INFO("peeking policy: sequences p " << peeking.sequences.p_value << ", first token p " << peeking.first_token.p_value);
    CHECK(peeking.sequences.p_value < kControlSignificance);
}

TEST_CASE("the defaults are block verification and the auto length; a rule or a policy alone keeps the other default",
          "[decoder][defaults]") {
    using specdec::AutoLength, specdec::BlockVerification, specdec::FixedLength, specdec::TokenwiseRejection;
    ToyLM model(policy_target_options());
    const DecodingOptions options{};
    static_assert(std::is_same_v<specdec::SpeculativeDecoder<ToyLM, ToyLM>,
                                 specdec::SpeculativeDecoder<ToyLM, ToyLM, BlockVerification, AutoLength>>);
    static_assert(std::is_same_v<decltype(specdec::SpeculativeDecoder(specdec::target(model), specdec::draft(model))),
                                 specdec::SpeculativeDecoder<ToyLM, ToyLM, BlockVerification, AutoLength>>);
    static_assert(std::is_same_v<decltype(specdec::SpeculativeDecoder(specdec::target(model), specdec::draft(model),
                                                                      options, FixedLength{})),
                                 specdec::SpeculativeDecoder<ToyLM, ToyLM, BlockVerification, FixedLength>>);
    static_assert(std::is_same_v<decltype(specdec::SpeculativeDecoder(specdec::target(model), specdec::draft(model),
                                                                      options, TokenwiseRejection{})),
                                 specdec::SpeculativeDecoder<ToyLM, ToyLM, TokenwiseRejection, AutoLength>>);
    static_assert(std::is_same_v<decltype(specdec::SpeculativeDecoder(specdec::target(model), specdec::draft(model),
                                                                      options, TokenwiseRejection{}, FixedLength{})),
                                 specdec::SpeculativeDecoder<ToyLM, ToyLM, TokenwiseRejection, FixedLength>>);
    // The policy passed alone is the one the decoder runs.
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    specdec::SpeculativeDecoder stopping(specdec::target(target), specdec::draft(draft),
                                         {.draft_tokens = 4, .seed = 1, .max_new_tokens = 60},
                                         specdec::ConfidenceStop{.min_top_probability = 1.0});
    const auto stats = stopping.generate(kPolicyPrompt).stats;
    REQUIRE(stats.draft_length_counts.size() == 5);
    CHECK(stats.draft_length_counts[2] + stats.draft_length_counts[3] + stats.draft_length_counts[4] == 0);
}

TEST_CASE("the default decoder, as constructed, generates exactly the target's sequences", "[exactness][decoder][defaults]") {
    // One fresh decoder per seed, as a user constructs it: its AutoLength's
    // warm-up drafts the whole cap in the first step, the last position.
    const std::size_t cap = std::min(DecodingOptions{}.draft_tokens, kLength - 1);
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    for (const SamplingOptions& sampling : {kTransforms[0], kTransforms[3]}) {
        const auto result = sequence_test(
            sampling, kPolicySamples,
            [&](const DecodingOptions& options) {
                return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM>>(specdec::target(target),
                                                                                   specdec::draft(draft), options);
            },
            target, cap);
        check_exact(result, "default decoder, " + describe(sampling));
    }
    // Negative control: the default policy with block verification's kept
    // length and, after a rejection, a token from the target's row instead of
    // the residual (drafted tokens come out too often).
    const auto resampled = sequence_test(
        kTransforms[0], kPolicySamples,
        [&](const DecodingOptions& options) {
            return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, BlockResamplingTheTarget>>(
                specdec::target(target), specdec::draft(draft), options);
        },
        target, cap);
    INFO("default policy, block resampling the target after a rejection: sequences p " << resampled.sequences.p_value);
    CHECK(resampled.deepest_reached);
    CHECK(resampled.sequences.p_value < kControlSignificance);
}

TEST_CASE("at temperature 0 every rule and length policy reproduces greedy decoding exactly", "[decoder][greedy][length-policy]") {
    const DecodingOptions options{.draft_tokens = 5, .sampling = {.temperature = 0.0}, .seed = 3, .max_new_tokens = 60};
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    const auto reference = specdec::AutoregressiveDecoder<ToyLM>(target, options).generate(kPolicyPrompt).tokens;
    auto check = [&](auto rule, auto policy, const char* what) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options, rule, policy);
        for (int run = 0; run < 3; ++run) {  // later runs use what AutoLength learned
            INFO(what << ", run " << run);
            CHECK(decoder.generate(kPolicyPrompt).tokens == reference);
        }
    };
    check(specdec::TokenwiseRejection{}, specdec::FixedLength{}, "token-wise, fixed");
    check(specdec::TokenwiseRejection{}, specdec::ConfidenceStop{.min_top_probability = 0.6}, "token-wise, confidence");
    check(specdec::TokenwiseRejection{}, specdec::AutoLength{}, "token-wise, auto");
    check(specdec::BlockVerification{}, specdec::FixedLength{}, "block, fixed");
    check(specdec::BlockVerification{}, specdec::ConfidenceStop{.min_top_probability = 0.6}, "block, confidence");
    check(specdec::BlockVerification{}, specdec::AutoLength{}, "block, auto");
}

TEST_CASE("the confidence stop shortens drafts and the statistics count the chosen lengths", "[decoder][length-policy]") {
    ToyLM target(policy_target_options()), draft(policy_draft_options());
    const DecodingOptions options{.draft_tokens = 4, .sampling = {.temperature = 1.0}, .seed = 9, .max_new_tokens = 200};
    specdec::SpeculativeDecoder fixed(specdec::target(target), specdec::draft(draft), options, specdec::TokenwiseRejection{},
                                      specdec::FixedLength{});
    const auto all = fixed.generate(kPolicyPrompt).stats;
    specdec::SpeculativeDecoder stopping(specdec::target(target), specdec::draft(draft), options,
                                         specdec::TokenwiseRejection{}, specdec::ConfidenceStop{.min_top_probability = 1.0});
    const auto one = stopping.generate(kPolicyPrompt).stats;
    std::size_t steps = 0;
    for (const std::size_t count : one.draft_length_counts) steps += count;
    CHECK(steps == one.target_forward_passes);
    CHECK(one.draft_length_counts.size() == 5);
    // min_top_probability = 1: nothing is confident enough, every draft ends after its first token.
    CHECK(one.draft_length_counts[1] + one.draft_length_counts[0] == steps);
    CHECK(all.draft_length_counts[4] > 0);
    CHECK_THROWS_WITH(
        specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), options, specdec::TokenwiseRejection{},
                                    specdec::ConfidenceStop{.min_top_probability = 1.5})
            .generate(kPolicyPrompt),
        Catch::Contains("min_top_probability = 1.5"));
}

TEST_CASE("target probabilities read alone are bitwise those of the full row", "[sampling]") {
    std::vector<float> logits(3 * 1003);
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.37 * double(i)) * 4.0);
    const specdec::LogitsView view = specdec::dense_logits(logits, 3, 1003);
    for (const double temperature : {0.5, 1.0, 1.7}) {
        const SamplingOptions sampling{.temperature = temperature};
        specdec::detail::LazyDistributions lazy, full;
        lazy.reset(view, 0, 3, sampling, "test");
        full.reset(view, 0, 3, sampling, "test");
        std::vector<float> expected(1003);
        for (std::size_t r = 0; r < 3; ++r) {
            specdec::logits_to_distribution(view.row(r), sampling, expected);
            for (Token x = 0; x < 1003; x += 97) {
                INFO("T " << temperature << " row " << r << " token " << x);
                CHECK(lazy.probability(r, x) == expected[static_cast<std::size_t>(x)]);
                CHECK(full.row(r)[static_cast<std::size_t>(x)] == expected[static_cast<std::size_t>(x)]);
            }
        }
        CHECK(lazy.full_rows() == 0);
    }
}
