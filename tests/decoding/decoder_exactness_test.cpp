// Exactness of the whole decoder, through the exactness harness
// (support/exactness_harness.hpp): whole generated sequences at least k + 1
// tokens long, so that the first step drafts every position 0 .. k - 1, are
// compared by Pearson's chi-square with the processed target's sequence
// distribution from an independent reference of the sampling transforms.
// Exact configurations must give p >= 1e-3; the negative controls (one per
// family: deep-position residual, top-p boundary, a transform on one side,
// point-mass residual) must give p < 1e-6 with the same statistic.
// Set SPECDEC_EXACTNESS_REPORT=1 to print every configuration's chi-square
// and the per-position reached/accepted counts.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <functional>
#include <span>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_drafter.hpp"
#include "support/toy_models.hpp"

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessSetup;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::ReportedQ;
using specdec::test::sampled_run;
using specdec::test::TokenPick;
using specdec::test::ToyDrafter;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

namespace {

// Target and a draft correlated with it (the same logits plus seeded noise),
// so that deep draft positions are reached and accepted often.
ToyLMOptions exactness_target_options(std::size_t vocab) { return {.vocab = vocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions exactness_draft_options(std::size_t vocab, double noise = 0.5) {
    return {.vocab = vocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = noise};
}

// A model whose every logits row is rewritten by `transform` (given the row
// and the prefix it follows): how the negative controls put a wrong transform
// into one or both models without touching the library.
class TransformedLM {
public:
    using Transform = std::function<void(std::span<float>)>;
    TransformedLM(ToyLMOptions options, Transform transform) : model_(options), transform_(std::move(transform)) {}

    std::size_t vocab_size() const { return model_.vocab_size(); }
    std::size_t context_length() const { return model_.context_length(); }
    std::size_t cached_tokens() const { return model_.cached_tokens(); }
    void truncate(std::size_t n) { model_.truncate(n); }
    specdec::LogitsView forward(std::span<const Token> tokens) {
        const specdec::LogitsView view = model_.forward(tokens);
        logits_.assign(view.data, view.data + view.rows * view.vocab);
        for (std::size_t r = 0; r < view.rows; ++r) transform_({logits_.data() + r * view.vocab, view.vocab});
        return specdec::dense_logits(logits_, view.rows, view.vocab);
    }

private:
    ToyLM model_;
    Transform transform_;
    std::vector<float> logits_;
};

constexpr std::size_t kExactnessSamples = 20000;

// k drafts a step, `length` tokens, one decoder per seed.
template <class Rule = specdec::TokenwiseRejection, class Target, class Draft>
auto speculative_run(Target& target, Draft& draft, std::size_t k, SamplingOptions sampling, std::size_t length,
                     const std::vector<Token>& prompt) {
    return specdec::test::speculative_runner(target, draft, {.draft_tokens = k, .sampling = sampling, .max_new_tokens = length},
                                             prompt, Rule{});
}

// The correct rule except that from draft position 2 on a rejection resamples
// from p instead of the residual max(p - q, 0).
struct ResidualBugFromPosition2 {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t position) const {
        const specdec::AcceptanceResult correct = specdec::accept_rejection_sampling(d, p, rng, position);
        if (correct.accepted < 2 || correct.accepted == d.size()) return correct;
        const double v = rng.uniform(position + correct.accepted, specdec::RandomPurpose::target_sample);
        return {correct.accepted, specdec::sample_from_distribution(p.row(correct.accepted), v)};
    }
};

// The correct rule except that a point-mass draft's residual keeps the drafted
// token (draws from p instead of p without the rejected token).
struct PointMassResidualKeepsDraft {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t position) const {
        const specdec::AcceptanceResult correct = specdec::accept_rejection_sampling(d, p, rng, position);
        if (correct.accepted == d.size()) return correct;
        const double v = rng.uniform(position + correct.accepted, specdec::RandomPurpose::target_sample);
        return {correct.accepted, specdec::sample_from_distribution(p.row(correct.accepted), v)};
    }
};

// A period-9 pattern over 3 tokens, repeated: prompt lookup then proposes 8
// tokens (the continuation of the previous period) at the first step.
const std::vector<Token> kExactnessLookupPrompt{0, 1, 1, 2, 0, 2, 2, 1, 0, 0, 1, 1, 2, 0, 2, 2, 1, 0};

}  // namespace

TEST_CASE("prompt lookup proposes all 8 positions on the exactness prompt", "[exactness][decoder]") {
    specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 3});
    const SamplingOptions sampling{};
    const specdec::CounterRng rng{1};
    const auto proposal = drafter.propose({kExactnessLookupPrompt, 8, sampling, rng});
    CHECK(proposal.size() == 8);
}

TEST_CASE("token-wise rejection sampling is exact at every draft position (k = 4 and k = 8)", "[exactness][decoder]") {
    struct Case {
        std::size_t vocab, k;
        std::vector<Token> prompt;
    };
    for (const Case& c : {Case{3, 4, {1, 2}}, Case{2, 8, {1, 0}}}) {
        ToyLM target(exactness_target_options(c.vocab)), draft(exactness_draft_options(c.vocab));
        const SamplingOptions sampling{.temperature = 1.0};
        const ExactnessSetup setup{.name = "token-wise, vocab " + std::to_string(c.vocab) + ", k " + std::to_string(c.k),
                                   .prompt = c.prompt,
                                   .vocab = c.vocab,
                                   .length = c.k + 1,
                                   .draft_tokens = c.k,
                                   .samples = kExactnessSamples,
                                   .target = reference_conditional(target, sampling)};
        const auto report = run_exactness(setup, speculative_run(target, draft, c.k, sampling, setup.length, setup.prompt));
        check_exact(report, c.k);
        CHECK(report.accepted[c.k - 1] > 0);  // the bonus row after a full block was used too
    }
}

TEST_CASE("a draft with forward_last (its catching up reads one row) is exact at every draft position, block too; a "
          "residual bug in the same setup is caught",
          "[exactness][decoder]") {
    // k = 3 and 7-token sequences: after a step that keeps all three drafts
    // another follows, whose catching up feeds two tokens through
    // forward_last (the last draft and the bonus token).
    constexpr std::size_t kVocab = 2, k = 3, kLength = 7;
    const std::vector<Token> prompt{1, 0};
    const SamplingOptions sampling{.temperature = 1.0};
    ToyLM target(exactness_target_options(kVocab));
    const auto setup = [&](std::string name) {
        return ExactnessSetup{.name = std::move(name),
                              .prompt = prompt,
                              .vocab = kVocab,
                              .length = kLength,
                              .draft_tokens = k,
                              .samples = kExactnessSamples,
                              .target = reference_conditional(target, sampling)};
    };
    specdec::test::LastRowToyLM tokenwise_draft(exactness_draft_options(kVocab)), block_draft(exactness_draft_options(kVocab));
    check_exact(run_exactness(setup("token-wise, forward_last draft"),
                              speculative_run(target, tokenwise_draft, k, sampling, kLength, prompt)),
                k);
    check_exact(run_exactness(setup("block, forward_last draft"),
                              speculative_run<specdec::BlockVerification>(target, block_draft, k, sampling, kLength, prompt)),
                k);
    for (const specdec::test::LastRowToyLM* draft : {&tokenwise_draft, &block_draft}) {
        CHECK(draft->multi_token_last_row_calls > kExactnessSamples / 10);  // two-token catch-ups were many
        CHECK(draft->forward_calls() > draft->last_row_calls);                // the later drafts still use forward
    }

    // Negative control, the same draft and sequences: a residual bug from draft position 2 on.
    specdec::test::LastRowToyLM control_draft(exactness_draft_options(kVocab));
    check_caught(run_exactness(setup("forward_last draft, residual bug from position 2"),
                               speculative_run<ResidualBugFromPosition2>(target, control_draft, k, sampling, kLength, prompt)),
                 k);
}

TEST_CASE("the sampling transforms and their combinations are exact against the independent reference", "[exactness][decoder][sampling]") {
    const std::vector<SamplingOptions> transforms{
        {.temperature = 0.6},
        {.temperature = 1.4, .top_k = 3},
        {.temperature = 1.0, .top_p = 0.8},
        {.temperature = 1.0, .min_p = 0.15},
        {.temperature = 0.8, .top_k = 4, .top_p = 0.9},
        {.temperature = 1.3, .top_k = 4, .top_p = 0.85, .min_p = 0.1},
        {.temperature = 1.0, .top_p = 0.7, .min_p = 0.2},
    };
    constexpr std::size_t kVocab = 5, k = 3;
    for (const SamplingOptions& sampling : transforms) {
        ToyLM target(exactness_target_options(kVocab)), draft(exactness_draft_options(kVocab));
        std::ostringstream name;
        name << "vocab 5, k 3, T " << sampling.temperature << " top_k " << sampling.top_k << " top_p " << sampling.top_p
             << " min_p " << sampling.min_p;
        const ExactnessSetup setup{.name = name.str(),
                                   .prompt = {1, 3},
                                   .vocab = kVocab,
                                   .length = k + 1,
                                   .draft_tokens = k,
                                   .samples = kExactnessSamples,
                                   .target = reference_conditional(target, sampling)};
        check_exact(run_exactness(setup, speculative_run(target, draft, k, sampling, setup.length, setup.prompt)), k);
    }
}

TEST_CASE("autoregressive sampling passes the same harness (the baseline is exact too)", "[exactness][decoder]") {
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 1.3, .top_k = 4, .top_p = 0.85, .min_p = 0.1}}) {
        ToyLM target(exactness_target_options(5));
        const ExactnessSetup setup{.name = "autoregressive",
                                   .prompt = {1, 3},
                                   .vocab = 5,
                                   .length = 4,
                                   .samples = kExactnessSamples,
                                   .target = reference_conditional(target, sampling)};
        check_exact(run_exactness(setup,
                                  [&](std::uint64_t seed) {
                                      specdec::AutoregressiveDecoder decoder(
                                          target, {.sampling = sampling, .seed = seed, .max_new_tokens = 4});
                                      return sampled_run(decoder.generate(setup.prompt));
                                  }),
                    0);
    }
}

TEST_CASE("prompt lookup (point-mass drafts) is exact with all 8 draft positions reached", "[exactness][decoder]") {
    for (const SamplingOptions& sampling : {SamplingOptions{.temperature = 1.0}, SamplingOptions{.temperature = 0.7, .top_k = 2}}) {
        ToyLM target(exactness_target_options(3));
        specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 3});
        const ExactnessSetup setup{.name = "prompt lookup, vocab 3, k 8",
                                   .prompt = kExactnessLookupPrompt,
                                   .vocab = 3,
                                   .length = 9,
                                   .draft_tokens = 8,
                                   .samples = kExactnessSamples,
                                   .target = reference_conditional(target, sampling)};
        const auto report = run_exactness(setup, speculative_run(target, drafter, 8, sampling, 9, setup.prompt));
        check_exact(report, 8);
        CHECK(report.accepted[2] > 0);
    }
}

namespace {

// A rule of the wrong kind through the harness at T = 1, vocabulary 3, k = 4:
// 5-token sequences, so that the first step drafts every position.
template <class Rule>
specdec::test::ExactnessReport deep_rule_report(const std::string& name) {
    ToyLM target(exactness_target_options(3)), draft(exactness_draft_options(3));
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup{.name = name,
                               .prompt = {1, 2},
                               .vocab = 3,
                               .length = 5,
                               .draft_tokens = 4,
                               .samples = kExactnessSamples,
                               .target = reference_conditional(target, sampling)};
    return run_exactness(setup, speculative_run<Rule>(target, draft, 4, sampling, 5, setup.prompt));
}

}  // namespace

TEST_CASE("negative control: a residual bug only at draft positions >= 2 is caught", "[exactness][decoder][negative-control]") {
    check_caught(deep_rule_report<ResidualBugFromPosition2>("residual from p at positions >= 2"), 4);
}

TEST_CASE("negative control: a top-p boundary that drops the token crossing top_p is caught", "[exactness][decoder][negative-control][sampling]") {
    // Both models keep only the most probable tokens whose mass stays *below*
    // top_p (at least one) instead of the smallest set that reaches it.
    constexpr double kTopP = 0.8;
    auto wrong_top_p = [](std::span<float> row) {
        const auto reference = specdec::test::reference_distribution(row, {.temperature = 1.0});
        std::vector<std::size_t> order(row.size());
        std::iota(order.begin(), order.end(), std::size_t{0});
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return reference[a] > reference[b]; });
        double mass = 0.0;
        for (std::size_t r = 0; r < order.size(); ++r) {
            mass += reference[order[r]];
            if (r > 0 && mass >= kTopP) row[order[r]] = -std::numeric_limits<float>::infinity();
        }
    };
    TransformedLM target(exactness_target_options(5), wrong_top_p), draft(exactness_draft_options(5), wrong_top_p);
    const ToyLM reference_model(exactness_target_options(5));
    const ExactnessSetup setup{.name = "top-p boundary off by one",
                               .prompt = {1, 3},
                               .vocab = 5,
                               .length = 4,
                               .draft_tokens = 3,
                               .samples = kExactnessSamples,
                               .target = reference_conditional(reference_model, {.temperature = 1.0, .top_p = kTopP})};
    check_caught(run_exactness(setup, speculative_run(target, draft, 3, {.temperature = 1.0}, 4, setup.prompt)), 3);
}

TEST_CASE("negative control: a temperature applied to the draft only is caught", "[exactness][decoder][negative-control][sampling]") {
    // The user asks for T = 0.6; the drafter applies it, the verifier does not.
    auto scale = [](std::span<float> row) {
        for (float& x : row) x = static_cast<float>(x / 0.6);
    };
    ToyLM target(exactness_target_options(5));
    TransformedLM draft(exactness_draft_options(5), scale);
    const ExactnessSetup setup{.name = "temperature on the draft only",
                               .prompt = {1, 3},
                               .vocab = 5,
                               .length = 4,
                               .draft_tokens = 3,
                               .samples = kExactnessSamples,
                               .target = reference_conditional(target, {.temperature = 0.6})};
    check_caught(run_exactness(setup, speculative_run(target, draft, 3, {.temperature = 1.0}, 4, setup.prompt)), 3);
}

TEST_CASE("negative control: a point-mass residual that keeps the drafted token is caught", "[exactness][decoder][negative-control]") {
    ToyLM target(exactness_target_options(3));
    specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 3});
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup{.name = "point-mass residual keeps the draft",
                               .prompt = kExactnessLookupPrompt,
                               .vocab = 3,
                               .length = 9,
                               .draft_tokens = 8,
                               .samples = kExactnessSamples,
                               .target = reference_conditional(target, sampling)};
    check_caught(run_exactness(setup, speculative_run<PointMassResidualKeepsDraft>(
                                          target, drafter, 8, sampling, 9, setup.prompt)),
                 8);
}

// One drafter, ToyDrafter (support/toy_drafter.hpp), in three honest
// configurations and the two lies they turn into with one knob: drafting the
// argmax, or sampling a top-2-warped q, and reporting the draft model's full q
// either way. The same statistic must pass the first three and catch the last
// two. Vocabulary 5, k = 3, T = 1, 4-token sequences.
namespace {
specdec::test::ExactnessReport toy_drafter_report(const std::string& name, specdec::test::ToyDrafterKnobs knobs) {
    ToyLM target(exactness_target_options(5));
    const ToyLM draft_model(exactness_draft_options(5));
    ToyDrafter drafter(draft_model, knobs);
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup{.name = name,
                               .prompt = {1, 3},
                               .vocab = 5,
                               .length = 4,
                               .draft_tokens = 3,
                               .samples = kExactnessSamples,
                               .target = reference_conditional(target, sampling)};
    return run_exactness(setup, speculative_run(target, drafter, 3, sampling, 4, setup.prompt));
}
}  // namespace

TEST_CASE("a toy drafter reporting the q it drew from is exact: sampled, argmax (point mass) or top-2 warped", "[exactness][decoder]") {
    check_exact(toy_drafter_report("toy drafter, sampled", {}), 3);
    check_exact(toy_drafter_report("toy drafter, argmax reported as a point mass", {.pick = TokenPick::argmax}), 3);
    check_exact(toy_drafter_report("toy drafter, top-2 sample, top-2 q", {.draft_top_k = 2}), 3);
}

TEST_CASE("negative controls: drafting the argmax, or sampling a warped q while reporting the unwarped one, is caught", "[exactness][decoder][negative-control]") {
    check_caught(toy_drafter_report("argmax drafter reporting q", {.pick = TokenPick::argmax, .reports = ReportedQ::model_q}), 3);
    check_caught(toy_drafter_report("top-2 sample, unfiltered q", {.draft_top_k = 2, .reports = ReportedQ::model_q}), 3);
}

// Coupled sampling (CoupledSampling): the emitted token at each position is
// the target's own coupled draw there, so a run's tokens are those of the
// same seed without drafts, whatever the drafts; the harness checks the
// distribution, and every sample is compared with the run without drafts.
namespace {

// The coupled rule with the noise of the step's first position for every
// position of the step: the tokens a step settles are correlated.
struct CoupledKeyedByStep {
    static constexpr specdec::DraftDraws draft_draws() { return specdec::DraftDraws::coupled; }
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t position) const {
        for (std::size_t i = 0;; ++i) {
            const Token y = specdec::coupled_draw(p.row(i), rng, position);
            if (i == d.size() || y != d.tokens[i]) return {i, y};
        }
    }
};

}  // namespace

TEST_CASE("coupled sampling is exact at every draft position, with the transforms and draft lengths that change "
          "from run to run, and emits for each seed the tokens of its run without drafts",
          "[exactness][decoder]") {
    struct Case {
        std::string name;
        std::size_t vocab, k;
        SamplingOptions sampling;
        bool vary_length;  // k for the run of seed s: 1 + s % k
    };
    const Case cases[] = {
        {"coupled, vocab 3, k 4", 3, 4, {.temperature = 1.0}, false},
        {"coupled, vocab 5, T 1.3 top-k 4 top-p 0.85 min-p 0.1 repeat penalty 1.3, k 1..3 by seed", 5, 3,
         {.temperature = 1.3, .top_k = 4, .top_p = 0.85, .min_p = 0.1, .repeat_penalty = 1.3}, true},
    };
    for (const Case& c : cases) {
        ToyLM target(exactness_target_options(c.vocab)), draft(exactness_draft_options(c.vocab));
        ToyLM alone_target(exactness_target_options(c.vocab)), alone_draft(exactness_draft_options(c.vocab));
        const ExactnessSetup setup{.name = c.name,
                                   .prompt = {1, 2},
                                   .vocab = c.vocab,
                                   .length = c.k + 1,
                                   .draft_tokens = c.k,
                                   .samples = kExactnessSamples,
                                   .target = reference_conditional(target, c.sampling)};
        std::size_t samples = 0, same_without_drafts = 0;
        const auto report = run_exactness(setup, [&](std::uint64_t seed) {
            const DecodingOptions options{.draft_tokens = c.vary_length ? 1 + seed % c.k : c.k,
                                          .sampling = c.sampling,
                                          .seed = seed,
                                          .max_new_tokens = setup.length};
            specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::CoupledSampling, specdec::FixedLength> decoder(
                specdec::target(target), specdec::draft(draft), options);
            const specdec::GenerationResult result = decoder.generate(setup.prompt);
            DecodingOptions no_drafts = options;
            no_drafts.drafting = specdec::Drafting::off;
            specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::CoupledSampling, specdec::FixedLength> plain(
                specdec::target(alone_target), specdec::draft(alone_draft), no_drafts);
            ++samples;
            same_without_drafts += plain.generate(setup.prompt).tokens == result.tokens ? 1 : 0;
            return sampled_run(result);
        });
        check_exact(report, c.k);
        CHECK(same_without_drafts == samples);
    }
}

TEST_CASE("negative control: coupled sampling with one position's noise for a whole step is caught",
          "[exactness][decoder][negative-control]") {
    check_caught(deep_rule_report<CoupledKeyedByStep>("coupled, one position's noise per step"), 4);
}
