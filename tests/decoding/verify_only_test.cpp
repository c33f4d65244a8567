// The verify-only entry point (decoding/verify_only.hpp), driven the way an
// engine that drafts by itself drives it: its own drafter (a draft model's
// rows sampled by the engine, or the draft model's argmax as point masses),
// the target's rows from its own pass or from the model overload, and
// nothing of specdec but verify_drafts. Exactness through the sequence
// chi-square harness with the deepest draft position reached, a negative
// control the same statistic catches, greedy equality with autoregressive
// decoding, equality with SpeculativeDecoder seed for seed, and bad input.
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

namespace verify_only_test {

using specdec::CounterRng;
using specdec::DraftProposal;
using specdec::RandomPurpose;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::VerifyResult;
using specdec::test::check_caught;
using specdec::test::check_exact;
using specdec::test::ExactnessSetup;
using specdec::test::reference_conditional;
using specdec::test::run_exactness;
using specdec::test::SampledRun;
using specdec::test::ToyLM;
using specdec::test::ToyLMOptions;

ToyLMOptions target_options(std::size_t vocab) { return {.vocab = vocab, .seed = 5, .sharpness = 1.2}; }
ToyLMOptions draft_options(std::size_t vocab) {
    return {.vocab = vocab, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.5};
}

// How the engine drafts, and what it tells the verifier.
enum class EngineDraft {
    sampled,          // samples each draft from the draft model's processed row; passes that row as q
    argmax,           // drafts the draft model's argmax; passes point masses (honest: it is deterministic)
    argmax_with_q,    // drafts the argmax but passes the draft model's full row as q: the negative control's lie
};

// Where the target's rows come from.
enum class EngineTarget {
    own_rows,  // the engine's own stateless pass (ToyLM::logits_after per prefix): the LogitsView overload
    model,     // the model overload, which feeds the target and rolls its cache back
};

// The engine: an autoregressive loop of its own around verify_drafts. It
// drafts with the draft model's logits (never through a specdec drafter),
// with the draft stream of the same CounterRng (RandomPurpose::draft_sample,
// keyed by the committed length and the draft's index, as ModelDrafter does),
// so that the drafts are independent of the verifier's uniforms.
template <class Rule = specdec::TokenwiseRejection>
SampledRun engine_generate(ToyLM& target, const ToyLM& draft_model, EngineDraft mode, EngineTarget source,
                           std::size_t k_max, const SamplingOptions& sampling, std::uint64_t seed,
                           const std::vector<Token>& prompt, std::size_t length) {
    const CounterRng rng{seed};
    const std::size_t vocab = target.vocab_size();
    std::vector<Token> sequence = prompt;
    SampledRun run;
    run.proposed_at_position.assign(k_max, 0);
    run.accepted_at_position.assign(k_max, 0);
    target.truncate(0);
    std::vector<Token> pending(prompt.begin(), prompt.end());  // the tokens the target's cache lacks
    std::vector<float> q(vocab);
    while (run.tokens.size() < length) {
        const std::size_t committed = sequence.size();
        // No more drafts than the tokens still wanted allow (the decoder's cap).
        const std::size_t k = std::min(k_max, length - run.tokens.size() - 1);
        std::vector<Token> drafted;
        std::vector<float> q_rows;
        std::vector<Token> history = sequence;
        for (std::size_t i = 0; i < k; ++i) {
            const std::vector<float> row = draft_model.logits_after(history);
            Token token;
            if (mode == EngineDraft::argmax) {
                token = specdec::greedy_token(row);
            } else {
                specdec::logits_to_distribution(row, sampling, q);
                token = mode == EngineDraft::argmax_with_q
                            ? specdec::greedy_token(row)
                            : specdec::sample_from_distribution(q, rng.uniform(committed, RandomPurpose::draft_sample,
                                                                               static_cast<std::uint32_t>(i)));
                q_rows.insert(q_rows.end(), q.begin(), q.end());
            }
            drafted.push_back(token);
            history.push_back(token);
        }
        const DraftProposal drafts = mode == EngineDraft::argmax ? specdec::point_mass_drafts(drafted)
                                                                 : specdec::drafts_with_q(drafted, q_rows, vocab);
        VerifyResult verdict;
        if (source == EngineTarget::model) {
            verdict = specdec::verify_drafts(target, pending, drafts, sampling, rng, Rule{});
        } else {
            std::vector<float> rows;
            std::vector<Token> prefix = sequence;
            for (std::size_t i = 0; i <= k; ++i) {
                const std::vector<float> row = target.logits_after(prefix);
                rows.insert(rows.end(), row.begin(), row.end());
                if (i < k) prefix.push_back(drafted[i]);
            }
            verdict = specdec::verify_drafts(std::span<const float>(rows), vocab, drafts, sampling, rng, committed, Rule{});
        }
        for (std::size_t i = 0; i < k; ++i) ++run.proposed_at_position[i];
        for (std::size_t i = 0; i < verdict.accepted; ++i) ++run.accepted_at_position[i];
        sequence.insert(sequence.end(), verdict.tokens.begin(), verdict.tokens.end());
        run.tokens.insert(run.tokens.end(), verdict.tokens.begin(), verdict.tokens.end());
        pending.assign(1, verdict.next_token);  // the model overload kept the drafts it accepted
    }
    return run;
}

constexpr std::size_t kSamples = 20000;

ExactnessSetup setup_for(const std::string& name, const ToyLM& target, const SamplingOptions& sampling,
                         std::size_t vocab, std::size_t k) {
    return ExactnessSetup{.name = name,
                          .prompt = {1, 2},
                          .vocab = vocab,
                          .length = k + 1,
                          .draft_tokens = k,
                          .samples = kSamples,
                          .target = reference_conditional(target, sampling)};
}


TEST_CASE("verify-only: an engine drafting by itself is exact through verify_drafts (full q and point masses)",
          "[exactness][verify-only]") {
    struct Case {
        std::string name;
        EngineDraft mode;
        EngineTarget source;
        SamplingOptions sampling;
        std::size_t vocab, k;
    };
    const std::vector<Case> cases{
        {"verify-only, sampled drafts with their q, own rows", EngineDraft::sampled, EngineTarget::own_rows,
         {.temperature = 1.0}, 3, 4},
        {"verify-only, sampled drafts with their q, model pass, top-k/top-p", EngineDraft::sampled, EngineTarget::model,
         {.temperature = 0.9, .top_k = 4, .top_p = 0.9}, 5, 3},
        {"verify-only, argmax drafts as point masses, own rows", EngineDraft::argmax, EngineTarget::own_rows,
         {.temperature = 1.0}, 3, 4},
        {"verify-only, argmax drafts as point masses, model pass", EngineDraft::argmax, EngineTarget::model,
         {.temperature = 0.8, .min_p = 0.1}, 4, 3},
    };
    for (const Case& c : cases) {
        ToyLM target(target_options(c.vocab));
        const ToyLM draft(draft_options(c.vocab));
        const ExactnessSetup setup = setup_for(c.name, target, c.sampling, c.vocab, c.k);
        const auto report = run_exactness(setup, [&](std::uint64_t seed) {
            return engine_generate(target, draft, c.mode, c.source, c.k, c.sampling, seed, setup.prompt, setup.length);
        });
        check_exact(report, c.k);
        CHECK(report.accepted[c.k - 1] > 0);  // a full block was kept: the bonus row was used
    }
}

TEST_CASE("verify-only: block verification through verify_drafts is exact", "[exactness][verify-only]") {
    ToyLM target(target_options(3));
    const ToyLM draft(draft_options(3));
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup = setup_for("verify-only, block verification", target, sampling, 3, 4);
    const auto report = run_exactness(setup, [&](std::uint64_t seed) {
        return engine_generate<specdec::BlockVerification>(target, draft, EngineDraft::sampled, EngineTarget::model, 4,
                                                           sampling, seed, setup.prompt, setup.length);
    });
    check_exact(report, 4);
}

// Point masses are exact whatever chose the token (the test of p(x) alone and
// the residual p without x give p for any x independent of the uniforms); a q
// row is exact only if the draft was drawn from it. The engine's bug here:
// it drafts greedily but reports the draft model's distribution.
TEST_CASE("verify-only negative control: argmax drafts reported with the draft model's q are caught",
          "[exactness][verify-only][negative-control]") {
    ToyLM target(target_options(3));
    const ToyLM draft(draft_options(3));
    const SamplingOptions sampling{.temperature = 1.0};
    const ExactnessSetup setup = setup_for("verify-only, argmax drafts reported with q", target, sampling, 3, 4);
    check_caught(run_exactness(setup,
                               [&](std::uint64_t seed) {
                                   return engine_generate(target, draft, EngineDraft::argmax_with_q,
                                                          EngineTarget::own_rows, 4, sampling, seed, setup.prompt,
                                                          setup.length);
                               }),
                 4);
}

TEST_CASE("verify-only: at temperature 0 the engine's output is the target's greedy output", "[verify-only]") {
    const SamplingOptions greedy{.temperature = 0.0};
    std::size_t full_blocks = 0;
    for (const std::vector<Token>& prompt : {std::vector<Token>{1, 2}, std::vector<Token>{0, 7, 3}, std::vector<Token>{5}}) {
        for (const EngineDraft mode : {EngineDraft::argmax, EngineDraft::sampled}) {
            for (const EngineTarget source : {EngineTarget::own_rows, EngineTarget::model}) {
                ToyLM target(target_options(8)), reference(target_options(8));
                const ToyLM draft(draft_options(8));
                specdec::AutoregressiveDecoder plain(reference, {.sampling = greedy, .max_new_tokens = 40});
                const std::vector<Token> expected = plain.generate(prompt).tokens;
                const SampledRun run = engine_generate(target, draft, mode, source, 4, greedy, 3, prompt, 40);
                CHECK(run.tokens == expected);
                full_blocks += run.accepted_at_position[3];
            }
        }
    }
    CHECK(full_blocks > 0);  // every draft position was kept somewhere
}

TEST_CASE("verify-only: the same rows and seed give SpeculativeDecoder's tokens, token-wise and block",
          "[verify-only]") {
    // The engine's drafts are ModelDrafter's (same rows, same draft stream),
    // so every step sees the decoder's rows, drafts and uniforms.
    const std::vector<SamplingOptions> samplings{{.temperature = 1.0}, {.temperature = 0.7, .top_k = 5, .top_p = 0.9}};
    const std::vector<Token> prompt{3, 1, 4};
    for (const SamplingOptions& sampling : samplings) {
        for (std::uint64_t seed = 1; seed <= 60; ++seed) {
            ToyLM target(target_options(9)), decoder_target(target_options(9)), decoder_draft(draft_options(9));
            const ToyLM draft(draft_options(9));
            const specdec::DecodingOptions options{.draft_tokens = 4, .sampling = sampling, .seed = seed,
                                                   .max_new_tokens = 30};
            specdec::SpeculativeDecoder tokenwise(specdec::target(decoder_target), specdec::draft(decoder_draft), options,
                                                  specdec::TokenwiseRejection{}, specdec::FixedLength{});
            const std::vector<Token> expected = tokenwise.generate(prompt).tokens;
            for (const EngineTarget source : {EngineTarget::own_rows, EngineTarget::model}) {
                CHECK(engine_generate(target, draft, EngineDraft::sampled, source, 4, sampling, seed, prompt, 30).tokens ==
                      expected);
            }

            ToyLM block_target(target_options(9)), block_draft(draft_options(9));
            specdec::SpeculativeDecoder<ToyLM, ToyLM, specdec::BlockVerification, specdec::FixedLength> block(
                specdec::target(block_target), specdec::draft(block_draft), options);
            CHECK(engine_generate<specdec::BlockVerification>(target, draft, EngineDraft::sampled, EngineTarget::model, 4,
                                                              sampling, seed, prompt, 30)
                      .tokens == block.generate(prompt).tokens);
        }
    }
}

TEST_CASE("verify-only: a drafter's own proposal and rows give the decoder's verdict", "[verify-only]") {
    // A specdec drafter's DraftProposal goes in unchanged; the model overload
    // leaves the cache at the committed tokens plus the kept drafts.
    ToyLM target(target_options(6));
    ToyLM draft_model(draft_options(6));
    specdec::ModelDrafter drafter(draft_model);
    const std::vector<Token> sequence{2, 4, 1};
    const SamplingOptions sampling{.temperature = 1.0};
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
        const CounterRng rng{seed};
        const DraftProposal drafts = drafter.propose({sequence, 3, sampling, rng});
        REQUIRE(drafts.size() == 3);
        target.truncate(0);
        (void)target.forward(std::span<const Token>(sequence).first(2));
        const VerifyResult verdict =
            specdec::verify_drafts(target, std::span<const Token>(sequence).last(1), drafts, sampling, rng);
        CHECK(verdict.tokens.size() == verdict.accepted + 1);
        CHECK(target.cached_tokens() == sequence.size() + verdict.accepted);
        for (std::size_t i = 0; i < verdict.accepted; ++i) CHECK(target.cache()[sequence.size() + i] == drafts.tokens[i]);
    }
}

TEST_CASE("verify-only: bad input is refused with a clear error", "[verify-only][errors]") {
    constexpr std::size_t vocab = 4;
    const SamplingOptions sampling{.temperature = 1.0};
    const CounterRng rng{1};
    const std::vector<Token> tokens{1, 2};
    std::vector<float> rows(3 * vocab, 0.5f);
    const std::vector<float> q{0.1f, 0.6f, 0.2f, 0.1f, 0.25f, 0.25f, 0.25f, 0.25f};
    const DraftProposal with_q = specdec::drafts_with_q(tokens, q, vocab);
    const DraftProposal masses = specdec::point_mass_drafts(tokens);
    auto verify = [&](std::span<const float> r, std::size_t width, const DraftProposal& d) {
        return specdec::verify_drafts(r, width, d, sampling, rng, 7);
    };
    CHECK_NOTHROW(verify(rows, vocab, with_q));
    CHECK_NOTHROW(verify(rows, vocab, masses));

    // Rows: k + 1 of them, of the vocabulary's width.
    CHECK_THROWS_WITH(verify(std::span<const float>(rows).first(2 * vocab), vocab, masses),
                      Catch::Contains("expected k + 1 = 3 rows of 4"));
    CHECK_THROWS_WITH(specdec::verify_drafts(specdec::dense_logits(rows, 2, vocab), masses, sampling, rng, 7),
                      Catch::Contains("2 logits rows for 2 drafts: expected k + 1 = 3"));
    CHECK_THROWS_WITH(verify(rows, 3, masses), Catch::Contains("drafts of vocabulary 3"));
    // q of another width than the target's rows.
    const std::vector<float> wide_rows(3 * 5, 0.5f);
    CHECK_THROWS_WITH(verify(wide_rows, 5, with_q), Catch::Contains("q rows have 4 values but the target's rows have 5"));
    CHECK_THROWS_WITH(specdec::drafts_with_q(tokens, std::span<const float>(q).first(7), vocab),
                      Catch::Contains("7 q values for 2 drafts"));
    // Draft ids outside the vocabulary.
    const std::vector<Token> outside{1, 4};
    CHECK_THROWS_WITH(verify(rows, vocab, specdec::point_mass_drafts(outside)),
                      Catch::Contains("draft token 4 is outside the target vocabulary [0, 4)"));
    const std::vector<Token> negative{-1, 0};
    CHECK_THROWS_WITH(verify(rows, vocab, specdec::point_mass_drafts(negative)), Catch::Contains("draft token -1"));
    // NaN or +inf in any row, also one the rule would not read.
    rows[2 * vocab + 3] = std::nanf("");
    CHECK_THROWS_WITH(verify(rows, vocab, masses), Catch::Contains("target model logits at position 9"));
    rows[2 * vocab + 3] = std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH(verify(rows, vocab, masses), Catch::Contains("target model logits"));
    rows[2 * vocab + 3] = 0.5f;
    // q that is not a distribution, or gives its draft probability 0.
    std::vector<float> bad_q = q;
    bad_q[5] = std::nanf("");
    CHECK_THROWS_WITH(verify(rows, vocab, specdec::drafts_with_q(tokens, bad_q, vocab)),
                      Catch::Contains("draft distribution (q) row 1"));
    const std::vector<float> mass_elsewhere{0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f};
    CHECK_THROWS_WITH(verify(rows, vocab, specdec::drafts_with_q(tokens, mass_elsewhere, vocab)),
                      Catch::Contains("draft 1 is token 2 but its q gives that token probability 0"));
    // A point mass stated on another token than the drafted one.
    const std::vector<Token> on{1, 3};
    CHECK_THROWS_WITH(specdec::point_mass_drafts(tokens, on),
                      Catch::Contains("draft 1 is token 2 but its q is a point mass on 3"));
    CHECK_NOTHROW(specdec::point_mass_drafts(tokens, tokens));
    // Invalid options.
    CHECK_THROWS_WITH(specdec::verify_drafts(std::span<const float>(rows), vocab, masses, SamplingOptions{.top_p = 0.0},
                                             rng, 7),
                      Catch::Contains("invalid sampling option top_p"));

    // The model overload: nothing pending, a bad draft before the pass (the
    // cache untouched), a NaN row after it (the cache rolled back).
    ToyLM target({.vocab = vocab, .seed = 2, .nan_at_position = 4});
    (void)target.forward(std::vector<Token>{0, 1});
    CHECK_THROWS_WITH(specdec::verify_drafts(target, std::span<const Token>{}, masses, sampling, rng),
                      Catch::Contains("no pending token"));
    CHECK_THROWS_WITH(specdec::verify_drafts(target, std::vector<Token>{2}, specdec::point_mass_drafts(outside), sampling, rng),
                      Catch::Contains("outside the target vocabulary"));
    CHECK(target.cached_tokens() == 2);
    CHECK_THROWS_WITH(specdec::verify_drafts(target, std::vector<Token>{2}, masses, sampling, rng),
                      Catch::Contains("target model logits at position 5"));
    CHECK(target.cached_tokens() == 2);
}

}  // namespace verify_only_test
