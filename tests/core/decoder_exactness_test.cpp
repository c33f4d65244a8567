// Exactness of the whole decoder: the empirical distribution of generated
// 3-token sequences over a 5-token vocabulary (125 cells) must match the
// processed target's sequence distribution, computed exactly by enumeration.
// Pearson chi-square at fixed seeds: exact configurations must give p >= 1e-3;
// the negative controls (wrong rules, biased drafters) must give p < 1e-6.
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/statistics.hpp"
#include "support/toy_models.hpp"

using specdec::DecodingOptions;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

namespace {

constexpr double kExactSignificance = 1e-3;
constexpr double kControlSignificance = 1e-6;
constexpr std::size_t kVocab = 5;
constexpr std::size_t kLength = 3;
constexpr std::size_t kCells = kVocab * kVocab * kVocab;

ToyLMOptions target_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2}; }
// A draft that is related to the target but clearly different (acceptance ~0.7).
ToyLMOptions draft_options() { return {.vocab = kVocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 1.0}; }

const std::vector<Token> kPrompt{1, 3};

// P(x1 x2 x3 | prompt) under the processed target distributions.
std::vector<double> exact_sequence_distribution(const SamplingOptions& sampling) {
    const ToyLM target(target_options());
    std::vector<double> expected(kCells, 0.0);
    std::vector<float> p(kVocab);
    for (std::size_t cell = 0; cell < kCells; ++cell) {
        std::vector<Token> sequence = kPrompt;
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

std::size_t cell_of(const std::vector<Token>& tokens) {
    std::size_t cell = 0, scale = 1;
    for (std::size_t i = 0; i < kLength; ++i, scale *= kVocab) cell += static_cast<std::size_t>(tokens[i]) * scale;
    return cell;
}

template <class MakeDecoder>
specdec::test::ChiSquareResult sequence_test(const SamplingOptions& sampling, std::size_t samples, MakeDecoder make_decoder) {
    std::vector<std::size_t> counts(kCells, 0);
    for (std::size_t s = 0; s < samples; ++s) {
        auto decoder = make_decoder(DecodingOptions{.sampling = sampling, .seed = 1000 + s, .max_new_tokens = kLength});
        const auto result = decoder->generate(kPrompt);
        REQUIRE(result.tokens.size() == kLength);
        ++counts[cell_of(result.tokens)];
    }
    return specdec::test::chi_square_test(counts, exact_sequence_distribution(sampling));
}

const std::vector<SamplingOptions> kTransforms{
    {.temperature = 1.0},
    {.temperature = 0.6},
    {.temperature = 1.4, .top_k = 3},
    {.temperature = 1.0, .top_p = 0.8},
    {.temperature = 1.0, .min_p = 0.15},
};

std::string describe(const SamplingOptions& s) {
    std::ostringstream out;
    out << "T=" << s.temperature << " top_k=" << s.top_k << " top_p=" << s.top_p << " min_p=" << s.min_p;
    return out.str();
}

// Proposes the draft model's argmax but reports the full sampled-from-nowhere q:
// the biased pattern of drafting greedily and then applying the p/q test.
class ArgmaxDrafterReportingQ {
public:
    explicit ArgmaxDrafterReportingQ(ToyLM& model) : model_(model) {}
    void reset() {}
    specdec::DraftProposal propose(const specdec::DraftRequest& request) {
        specdec::DraftProposal proposal{.vocab = kVocab};
        std::vector<Token> context(request.history.begin(), request.history.end());
        for (std::size_t i = 0; i < request.max_tokens; ++i) {
            std::vector<float> q(kVocab);
            specdec::logits_to_distribution(model_.logits_after(context), request.sampling, q);
            const Token token = static_cast<Token>(std::max_element(q.begin(), q.end()) - q.begin());
            proposal.tokens.push_back(token);
            proposal.probabilities.insert(proposal.probabilities.end(), q.begin(), q.end());
            context.push_back(token);
        }
        return proposal;
    }

private:
    ToyLM& model_;
};

// Samples from the top-2-filtered draft distribution but reports the unfiltered q.
class WarpedSampleUnwarpedQ {
public:
    explicit WarpedSampleUnwarpedQ(ToyLM& model) : model_(model) {}
    void reset() {}
    specdec::DraftProposal propose(const specdec::DraftRequest& request) {
        specdec::DraftProposal proposal{.vocab = kVocab};
        std::vector<Token> context(request.history.begin(), request.history.end());
        for (std::size_t i = 0; i < request.max_tokens; ++i) {
            std::vector<float> warped(kVocab), plain(kVocab);
            const auto logits = model_.logits_after(context);
            SamplingOptions filtered = request.sampling;
            filtered.top_k = 2;
            specdec::logits_to_distribution(logits, filtered, warped);
            specdec::logits_to_distribution(logits, request.sampling, plain);
            const std::uint64_t position = request.history.size() + i;
            const Token token = specdec::sample_from_distribution(
                warped, request.rng.uniform(position, specdec::RandomPurpose::draft_sample));
            proposal.tokens.push_back(token);
            proposal.probabilities.insert(proposal.probabilities.end(), plain.begin(), plain.end());
            context.push_back(token);
        }
        return proposal;
    }

private:
    ToyLM& model_;
};

struct ForgetsResidual {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t pos) const {
        for (std::size_t i = 0; i < d.size(); ++i) {
            const Token x = d.tokens[i];
            if (rng.uniform(pos + i, specdec::RandomPurpose::accept_test) * d.q_of(i, x) < p.row(i)[static_cast<std::size_t>(x)])
                continue;
            return {i, specdec::sample_from_distribution(p.row(i), rng.uniform(pos + i, specdec::RandomPurpose::target_sample))};
        }
        return {d.size(), specdec::sample_from_distribution(p.row(d.size()), rng.uniform(pos + d.size(), specdec::RandomPurpose::target_sample))};
    }
};

struct AlwaysAccept {
    specdec::AcceptanceResult operator()(const specdec::DraftProposal& d, specdec::DistributionRows p,
                                         const specdec::CounterRng& rng, std::uint64_t pos) const {
        return {d.size(), specdec::sample_from_distribution(p.row(d.size()), rng.uniform(pos + d.size(), specdec::RandomPurpose::target_sample))};
    }
};

constexpr std::size_t kSamples = 40000;

}  // namespace

TEST_CASE("speculative sampling generates 3-token sequences with exactly the target's distribution", "[exactness][decoder]") {
    for (const std::size_t k : {1, 3, 8}) {
        for (const SamplingOptions& sampling : kTransforms) {
            ToyLM target(target_options()), draft(draft_options());
            const auto result = sequence_test(sampling, kSamples, [&](DecodingOptions options) {
                options.draft_tokens = k;
                return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM>>(specdec::target(target), specdec::draft(draft), options);
            });
            INFO("k " << k << ", " << describe(sampling) << ": chi2 " << result.statistic << " df "
                      << result.degrees_of_freedom << " p " << result.p_value);
            CHECK(result.p_value >= kExactSignificance);
        }
    }
}

TEST_CASE("autoregressive sampling passes the same sequence test (the baseline is exact too)", "[exactness][decoder]") {
    for (const SamplingOptions& sampling : kTransforms) {
        ToyLM target(target_options());
        const auto result = sequence_test(sampling, kSamples, [&](DecodingOptions options) {
            return std::make_unique<specdec::AutoregressiveDecoder<ToyLM>>(target, options);
        });
        INFO(describe(sampling) << ": p " << result.p_value);
        CHECK(result.p_value >= kExactSignificance);
    }
}

TEST_CASE("point-mass drafters (prompt lookup) keep the target distribution exact", "[exactness][decoder]") {
    for (const std::size_t k : {1, 3}) {
        ToyLM target(target_options());
        specdec::PromptLookupDrafter drafter({.min_ngram = 1, .max_ngram = 2});
        const auto result = sequence_test({.temperature = 1.0}, kSamples, [&](DecodingOptions options) {
            options.draft_tokens = k;
            return std::make_unique<specdec::SpeculativeDecoder<ToyLM, specdec::PromptLookupDrafter>>(specdec::target(target), specdec::draft(drafter), options);
        });
        INFO("k " << k << ": p " << result.p_value);
        CHECK(result.p_value >= kExactSignificance);
    }
}

TEST_CASE("negative controls: wrong acceptance rules are rejected by the same sequence test", "[exactness][decoder][negative-control]") {
    ToyLM target(target_options()), draft(draft_options());
    const auto always = sequence_test({.temperature = 1.0}, kSamples, [&](DecodingOptions options) {
        options.draft_tokens = 3;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, AlwaysAccept>>(specdec::target(target), specdec::draft(draft), options);
    });
    INFO("always accept: p " << always.p_value);
    CHECK(always.p_value < kControlSignificance);
    const auto forgets = sequence_test({.temperature = 1.0}, kSamples, [&](DecodingOptions options) {
        options.draft_tokens = 3;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ToyLM, ForgetsResidual>>(specdec::target(target), specdec::draft(draft), options);
    });
    INFO("forgets residual: p " << forgets.p_value);
    CHECK(forgets.p_value < kControlSignificance);
}

TEST_CASE("negative controls: drafting the argmax, or sampling a warped q while reporting the unwarped one, is caught", "[exactness][decoder][negative-control]") {
    ToyLM target(target_options()), draft(draft_options());
    ArgmaxDrafterReportingQ argmax_drafter(draft);
    const auto argmax = sequence_test({.temperature = 1.0}, kSamples, [&](DecodingOptions options) {
        options.draft_tokens = 3;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, ArgmaxDrafterReportingQ>>(specdec::target(target), specdec::draft(argmax_drafter), options);
    });
    INFO("argmax drafter: p " << argmax.p_value);
    CHECK(argmax.p_value < kControlSignificance);
    WarpedSampleUnwarpedQ warped_drafter(draft);
    const auto warped = sequence_test({.temperature = 1.0}, kSamples, [&](DecodingOptions options) {
        options.draft_tokens = 3;
        return std::make_unique<specdec::SpeculativeDecoder<ToyLM, WarpedSampleUnwarpedQ>>(specdec::target(target), specdec::draft(warped_drafter), options);
    });
    INFO("warped sample, unwarped q: p " << warped.p_value);
    CHECK(warped.p_value < kControlSignificance);
}
