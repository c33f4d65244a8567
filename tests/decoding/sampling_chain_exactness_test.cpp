// The sampler chain's logit stages under speculation, through the sequence
// chi-square harness: penalties and logit bias combined with top-k, top-p and
// min-p at T = 0.7, 1.0 and 1.3, in both preset orders, and a constraint,
// each deep enough that the first step drafts every position. Negative
// controls, caught by the same statistic: a target whose rows carry the
// penalties of the committed tokens only (stale history at deeper draft
// positions), and one whose mask is applied at the first draft position only.
// Also: logprobs under speculation equal autoregressive ones, seeds, errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

namespace sampling_chain_exactness {

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessSetup;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::sampled_run;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

constexpr std::size_t kVocab = 5, kDrafts = 3, kSamples = 20000;
const std::vector<Token> kPrompt{1, 3, 1};

ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions draft_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5}; }

// The test's constraint, independent of the library: no token twice in a row,
// and token 0 only once two tokens were generated. allowed_after() is the
// reference's view; ToyConstraint is the decoder's (a state stack).
std::vector<bool> allowed_after(std::span<const Token> generated) {
    std::vector<bool> allowed(kVocab, true);
    if (!generated.empty()) allowed[static_cast<std::size_t>(generated.back())] = false;
    if (generated.size() < 2) allowed[0] = false;
    return allowed;
}

class ToyConstraint final : public specdec::TokenConstraint {
public:
    [[nodiscard]] std::string name() const override { return "toy constraint"; }
    void reset() override { generated_.clear(); }
    void allowed(std::span<std::uint8_t> mask) override {
        const std::vector<bool> allowed = allowed_after(generated_);
        for (std::size_t x = 0; x < mask.size(); ++x) mask[x] = allowed[x] ? 1 : 0;
    }
    bool advance(Token token) override {
        if (!allowed_after(generated_)[static_cast<std::size_t>(token)]) return false;
        generated_.push_back(token);
        return true;
    }
    void rollback(std::size_t tokens) override { generated_.resize(generated_.size() - tokens); }

private:
    std::vector<Token> generated_;
};

// A model whose rows are rewritten with the history each row follows as the
// model sees it: (cache before the pass) + the pass's tokens up to the row.
// `committed_only` gives every row of a pass the history of its first row
// (the committed sequence): what a verifier with stale history would use.
class HistoryTransformedLM {
public:
    using Transform = std::function<void(std::span<float> row, std::span<const Token> history, std::size_t row_in_pass)>;
    HistoryTransformedLM(ToyLMOptions options, Transform transform) : model_(options), transform_(std::move(transform)) {}

    std::size_t vocab_size() const { return model_.vocab_size(); }
    std::size_t context_length() const { return model_.context_length(); }
    std::size_t cached_tokens() const { return model_.cached_tokens(); }
    void truncate(std::size_t n) { model_.truncate(n); }
    std::vector<float> logits_after(std::span<const Token> prefix) const { return model_.logits_after(prefix); }
    specdec::LogitsView forward(std::span<const Token> tokens) {
        std::vector<Token> history = model_.cache();
        const specdec::LogitsView view = model_.forward(tokens);
        logits_.assign(view.data, view.data + view.rows * view.vocab);
        for (std::size_t r = 0; r < view.rows; ++r) {
            history.push_back(tokens[r]);
            transform_({logits_.data() + r * view.vocab, view.vocab}, history, r);
        }
        return specdec::dense_logits(logits_, view.rows, view.vocab);
    }

private:
    ToyLM model_;
    Transform transform_;
    std::vector<float> logits_;
};

template <class Rule = specdec::TokenwiseRejection, class Target, class Draft>
specdec::test::SampledRun speculative_sample(Target& target, Draft& draft, DecodingOptions options, std::uint64_t seed) {
    options.seed = seed;
    specdec::SpeculativeDecoder<Target, Draft, Rule, specdec::FixedLength> decoder(specdec::target(target), specdec::draft(draft), options);
    return sampled_run(decoder.generate(kPrompt));
}

std::string describe(const SamplingOptions& s) {
    std::ostringstream out;
    out << "T " << s.temperature << " top_k " << s.top_k << " top_p " << s.top_p << " min_p " << s.min_p << " repeat "
        << s.repeat_penalty << " presence " << s.presence_penalty << " frequency " << s.frequency_penalty << " window "
        << s.penalty_last_n << " bias " << s.logit_bias.size() << (s.chain == specdec::kHuggingFaceChain ? " (HF order)" : "");
    return out.str();
}

const std::vector<SamplingOptions>& penalty_settings() {
    static const std::vector<SamplingOptions> settings{
        {.temperature = 0.7, .top_k = 4, .repeat_penalty = 1.8, .penalty_last_n = 3},
        {.temperature = 1.0, .top_p = 0.85, .presence_penalty = 0.8, .frequency_penalty = 0.5, .penalty_last_n = 4},
        {.temperature = 1.3, .top_k = 4, .top_p = 0.9, .min_p = 0.05, .repeat_penalty = 1.5, .frequency_penalty = 0.6,
         .penalty_last_n = 5, .logit_bias = {{2, 0.7f}}},
        {.temperature = 1.3, .top_p = 0.8, .min_p = 0.1, .chain = specdec::kHuggingFaceChain, .repeat_penalty = 2.0,
         .presence_penalty = 0.3, .penalty_last_n = specdec::kWholeSequence, .logit_bias = {{4, -1.0f}}},
        {.temperature = 1.0, .logit_bias = {{0, 1.5f}, {3, -std::numeric_limits<float>::infinity()}}},
    };
    return settings;
}


// The harness over kDrafts + 1 tokens after kPrompt (one whole step, every
// draft position), against a reference target's conditionals.
ExactnessSetup one_step_setup(std::string name, specdec::test::Conditional target) {
    return ExactnessSetup{.name = std::move(name),
                          .prompt = kPrompt,
                          .vocab = kVocab,
                          .length = kDrafts + 1,
                          .draft_tokens = kDrafts,
                          .samples = kSamples,
                          .target = std::move(target)};
}

TEST_CASE("penalties and logit bias with top-k, top-p and min-p are exact under speculation at every draft position",
          "[exactness][decoder][sampling][penalties]") {
    for (const SamplingOptions& sampling : penalty_settings()) {
        ToyLM target(target_options()), draft(draft_options());
        const ExactnessSetup setup = one_step_setup("penalties, k 3: " + describe(sampling), reference_conditional(target, sampling));
        const DecodingOptions options{.draft_tokens = kDrafts, .sampling = sampling, .max_new_tokens = kDrafts + 1};
        const auto report = run_exactness(setup, [&](std::uint64_t seed) { return speculative_sample(target, draft, options, seed); });
        check_exact(report, kDrafts);
        CHECK(report.accepted[kDrafts - 1] > 0);
    }
    // Block verification reads every row's p_i(x_i): the same rows, adjusted.
    const SamplingOptions sampling = penalty_settings()[2];
    ToyLM target(target_options()), draft(draft_options());
    const ExactnessSetup setup =
        one_step_setup("penalties, block verification: " + describe(sampling), reference_conditional(target, sampling));
    const DecodingOptions options{.draft_tokens = kDrafts, .sampling = sampling, .max_new_tokens = kDrafts + 1};
    check_exact(run_exactness(setup, [&](std::uint64_t seed) {
                    return speculative_sample<specdec::BlockVerification>(target, draft, options, seed);
                }),
                kDrafts);
}

TEST_CASE("autoregressive decoding with penalties and bias passes the same harness", "[exactness][decoder][sampling][penalties]") {
    const SamplingOptions sampling = penalty_settings()[2];
    ToyLM target(target_options());
    const ExactnessSetup setup{.name = "autoregressive, " + describe(sampling),
                               .prompt = kPrompt,
                               .vocab = kVocab,
                               .length = 4,
                               .samples = kSamples,
                               .target = reference_conditional(target, sampling)};
    check_exact(run_exactness(setup,
                              [&](std::uint64_t seed) {
                                  specdec::AutoregressiveDecoder decoder(target, {.sampling = sampling, .seed = seed, .max_new_tokens = 4});
                                  return sampled_run(decoder.generate(kPrompt));
                              }),
                0);
}

TEST_CASE("a constraint is exact under speculation: draft and target rows masked along the drafted path",
          "[exactness][decoder][sampling][constraint]") {
    for (const double temperature : {0.7, 1.0, 1.3}) {
        ToyConstraint constraint;
        const SamplingOptions sampling{.temperature = temperature, .top_k = 4, .repeat_penalty = 1.3, .constraint = &constraint};
        ToyLM target(target_options()), draft(draft_options());
        const ExactnessSetup setup = one_step_setup("constraint, k 3, " + describe(sampling),
                                                    reference_conditional(target, sampling, kPrompt.size(), allowed_after));
        const DecodingOptions options{.draft_tokens = kDrafts, .sampling = sampling, .max_new_tokens = kDrafts + 1};
        const auto report = run_exactness(setup, [&](std::uint64_t seed) { return speculative_sample(target, draft, options, seed); });
        check_exact(report, kDrafts);
        CHECK(report.accepted[kDrafts - 1] > 0);
    }
}

TEST_CASE("prompt lookup drafts the constraint forbids are rejected, and the output stays exact",
          "[exactness][decoder][sampling][constraint]") {
    // The prompt repeats 1 2 1 2: lookup proposes 1 2 1 ..., which the
    // constraint allows, and after a repeat it proposes what it forbids.
    const std::vector<Token> prompt{1, 2, 1, 2, 2, 1, 2, 1, 2};
    ToyConstraint constraint;
    const SamplingOptions sampling{.temperature = 1.0, .constraint = &constraint};
    ToyLM target(target_options());
    specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 2});
    const ExactnessSetup setup{.name = "constraint, prompt lookup",
                               .prompt = prompt,
                               .vocab = kVocab,
                               .length = 5,
                               .draft_tokens = 3,
                               .samples = kSamples,
                               .target = reference_conditional(target, sampling, prompt.size(), allowed_after)};
    check_exact(run_exactness(setup,
                              [&](std::uint64_t seed) {
                                  specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(drafter),
                                                                      {.draft_tokens = 3, .sampling = sampling, .seed = seed, .max_new_tokens = 5},
                                                                      specdec::TokenwiseRejection{}, specdec::FixedLength{});
                                  return sampled_run(decoder.generate(prompt));
                              }),
                3);
}

TEST_CASE("negative control: penalties from the committed tokens only (stale at deeper positions) are caught",
          "[exactness][decoder][sampling][penalties][control]") {
    SamplingOptions penalised{.temperature = 1.0, .repeat_penalty = 2.5, .frequency_penalty = 1.0, .penalty_last_n = 4};
    auto penalise = [penalised](std::span<float> row, std::span<const Token> history) {
        specdec::adjust_logits(row, penalised, specdec::RowHistory{history}, row);
    };
    // The draft's rows carry the right penalties; the target's rows the
    // penalties of the committed sequence (the history of the pass's first row).
    HistoryTransformedLM draft(draft_options(), [&](std::span<float> row, std::span<const Token> history, std::size_t) {
        penalise(row, history);
    });
    HistoryTransformedLM stale(target_options(), [&](std::span<float> row, std::span<const Token> history, std::size_t r) {
        penalise(row, history.first(history.size() - r));
    });
    const ExactnessSetup setup = one_step_setup("control: stale penalties", reference_conditional(stale, penalised));
    const DecodingOptions options{.draft_tokens = kDrafts, .sampling = {.temperature = 1.0}, .max_new_tokens = kDrafts + 1};
    check_caught(run_exactness(setup, [&](std::uint64_t seed) { return speculative_sample(stale, draft, options, seed); }), kDrafts);
    // The same wrapper with the right history passes: the control's failure is the staleness.
    HistoryTransformedLM fresh(target_options(), [&](std::span<float> row, std::span<const Token> history, std::size_t) {
        penalise(row, history);
    });
    check_exact(run_exactness(setup, [&](std::uint64_t seed) { return speculative_sample(fresh, draft, options, seed); }), kDrafts);
}

TEST_CASE("negative control: a constraint mask applied at the first draft position only is caught",
          "[exactness][decoder][sampling][constraint][control]") {
    const std::size_t prompt_tokens = kPrompt.size();
    auto mask = [prompt_tokens](std::span<float> row, std::span<const Token> history) {
        const std::vector<bool> allowed = allowed_after(history.subspan(prompt_tokens));
        for (std::size_t x = 0; x < row.size(); ++x)
            if (!allowed[x]) row[x] = -std::numeric_limits<float>::infinity();
    };
    // Rows are masked by the models themselves (the library sees no constraint).
    // The draft masks every row; the faulty target only the first row of a pass.
    HistoryTransformedLM draft(draft_options(), [&](std::span<float> row, std::span<const Token> history, std::size_t) {
        if (history.size() >= prompt_tokens) mask(row, history);
    });
    HistoryTransformedLM first_only(target_options(), [&](std::span<float> row, std::span<const Token> history, std::size_t r) {
        if (r == 0 && history.size() >= prompt_tokens) mask(row, history);
    });
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup = one_step_setup("control: mask at the first draft position only",
                                                reference_conditional(first_only, sampling, prompt_tokens, allowed_after));
    const DecodingOptions options{.draft_tokens = kDrafts, .sampling = sampling, .max_new_tokens = kDrafts + 1};
    check_caught(run_exactness(setup, [&](std::uint64_t seed) { return speculative_sample(first_only, draft, options, seed); }),
                 kDrafts);
}

TEST_CASE("logprobs under speculation equal autoregressive logprobs, greedy and sampled", "[decoder][sampling][logprobs]") {
    ToyConstraint constraint;
    for (const double temperature : {0.0, 1.0}) {
        for (const specdec::LogprobSource source : {specdec::LogprobSource::processed, specdec::LogprobSource::raw}) {
            const SamplingOptions sampling{.temperature = temperature, .top_k = 4, .repeat_penalty = 1.4,
                                           .logit_bias = {{2, 0.5f}}, .constraint = &constraint};
            const DecodingOptions options{.draft_tokens = 4, .sampling = sampling, .seed = 11, .max_new_tokens = 40,
                                          .logprobs = {.enabled = true, .top_n = 3, .source = source}};
            ToyLM target(target_options()), draft(draft_options()), alone(target_options());
            specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options,
                                                specdec::TokenwiseRejection{}, specdec::FixedLength{});
            const specdec::GenerationResult speculative = decoder.generate(kPrompt);
            REQUIRE(speculative.logprobs.size() == speculative.tokens.size());
            REQUIRE(speculative.stats.draft_tokens_accepted > 0);
            // Autoregressive logprobs of the same tokens: each read from the
            // row the token follows, as AutoregressiveDecoder reports them.
            std::vector<Token> sequence = kPrompt;
            constraint.reset();
            for (std::size_t j = 0; j < speculative.tokens.size(); ++j) {
                const std::vector<float> raw = alone.logits_after(sequence);
                std::vector<float> adjusted(raw.size());
                specdec::adjust_logits(raw, sampling, specdec::RowHistory{sequence}, adjusted);
                std::vector<float> scratch;
                const specdec::TokenLogprob expected = specdec::detail::token_logprob(
                    raw, adjusted, sampling, options.logprobs, speculative.tokens[j], scratch);
                const specdec::TokenLogprob& got = speculative.logprobs[j];
                INFO("T " << temperature << " token " << j);
                CHECK(got.token == speculative.tokens[j]);
                CHECK(std::abs(got.logprob - expected.logprob) <= 1e-5);
                REQUIRE(got.top.size() == 3);
                for (std::size_t t = 0; t < 3; ++t) {
                    CHECK(got.top[t].token == expected.top[t].token);
                    if (std::isfinite(expected.top[t].logprob)) CHECK(std::abs(got.top[t].logprob - expected.top[t].logprob) <= 1e-5);
                }
                REQUIRE(constraint.advance(speculative.tokens[j]));
                sequence.push_back(speculative.tokens[j]);
            }
            if (temperature == 0.0) {
                // Greedy: the autoregressive decoder emits the same tokens with the same logprobs.
                specdec::AutoregressiveDecoder reference(alone, options);
                const specdec::GenerationResult plain = reference.generate(kPrompt);
                REQUIRE(plain.tokens == speculative.tokens);
                for (std::size_t j = 0; j < plain.tokens.size(); ++j)
                    CHECK(std::abs(plain.logprobs[j].logprob - speculative.logprobs[j].logprob) <= 1e-5);
            }
        }
    }
}

TEST_CASE("a generation depends only on its own seed; unseeded generations get fresh seeds", "[decoder][sampling][seeds]") {
    ToyLM target(target_options()), draft(draft_options());
    const DecodingOptions unseeded{.draft_tokens = 3, .sampling = {.temperature = 1.0}, .max_new_tokens = 30};
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), unseeded,
                                        specdec::TokenwiseRejection{}, specdec::FixedLength{});
    const specdec::GenerationResult first = decoder.generate(kPrompt);
    const specdec::GenerationResult second = decoder.generate(kPrompt);
    CHECK(first.seed != second.seed);
    CHECK(first.tokens != second.tokens);  // 30 tokens over 5 ids: equal by chance with negligible probability
    DecodingOptions replay = unseeded;
    replay.seed = second.seed;
    specdec::SpeculativeDecoder again(specdec::target(target), specdec::draft(draft), replay,
                                      specdec::TokenwiseRejection{}, specdec::FixedLength{});
    CHECK(again.generate(kPrompt).tokens == second.tokens);
    CHECK(again.seed() == second.seed);
}

TEST_CASE("bad sampling settings end with an error naming the setting", "[decoder][sampling][errors]") {
    using Catch::Contains;
    ToyLM target(target_options()), draft(draft_options());
    const auto build = [&](SamplingOptions sampling) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), {.sampling = sampling},
                                            specdec::TokenwiseRejection{}, specdec::FixedLength{});
    };
    CHECK_THROWS_WITH(build({.logit_bias = {{7, 1.0f}}}), Contains("logit_bias[0]: token id 7 is outside the vocabulary [0, 5)"));
    CHECK_THROWS_WITH(build({.repeat_penalty = -1.0}), Contains("repeat_penalty = -1"));
    // A constraint with no way forward: the error names it and the position.
    class DeadEnd final : public specdec::TokenConstraint {
    public:
        std::string name() const override { return "dead-end constraint"; }
        void reset() override {}
        void allowed(std::span<std::uint8_t> mask) override { std::fill(mask.begin(), mask.end(), 0); }
        bool advance(Token) override { return false; }
        void rollback(std::size_t) override {}
    } dead_end;
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft),
                                        {.sampling = {.constraint = &dead_end}, .seed = 1, .max_new_tokens = 4},
                                        specdec::TokenwiseRejection{}, specdec::FixedLength{});
    CHECK_THROWS_WITH(decoder.generate(kPrompt), Contains("dead-end constraint allows no token at position 3"));
    specdec::AutoregressiveDecoder plain(target, {.sampling = {.temperature = 0.0, .constraint = &dead_end}, .max_new_tokens = 4});
    CHECK_THROWS_WITH(plain.generate(kPrompt), Contains("invalid sampling option constraint: dead-end constraint"));
    // The decoders that cannot apply an option say so.
    CHECK_THROWS_WITH(specdec::verify_drafts(std::vector<float>(2 * kVocab, 0.0f), kVocab, specdec::point_mass_drafts(std::vector<Token>{1}),
                                             SamplingOptions{.repeat_penalty = 1.2}, specdec::CounterRng{1}, 0),
                      Contains("apply them to the rows you pass with specdec::adjust_logits"));
}

}  // namespace sampling_chain_exactness
