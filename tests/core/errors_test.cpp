// Bad input gets a clear specdec::Error, never a crash or a silent token.
#include <limits>
#include <vector>

#include "specdec/specdec.hpp"
#include "support/catch.hpp"
#include "support/toy_models.hpp"

using specdec::Token;
using specdec::test::ToyLM;

TEST_CASE("draft and target with different vocabularies are rejected at construction", "[errors]") {
    ToyLM target({.vocab = 10}), draft({.vocab = 12});
    CHECK_THROWS_WITH(specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft)), Catch::Contains("vocabulary mismatch: the draft has 12 tokens, the target has 10"));
}

TEST_CASE("a prompt longer than the target's context is an error", "[errors]") {
    ToyLM target({.vocab = 10, .context = 4}), draft({.vocab = 10, .context = 4});
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft));
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>{1, 2, 3, 4, 5}), Catch::Contains("prompt has 5 tokens but the target's context holds only 4"));
    specdec::AutoregressiveDecoder autoregressive(target);
    CHECK_THROWS_WITH(autoregressive.generate(std::vector<Token>{1, 2, 3, 4, 5}), Catch::Contains("context holds only 4"));
}

TEST_CASE("an empty prompt and out-of-vocabulary prompt tokens are errors", "[errors]") {
    ToyLM target({.vocab = 10}), draft({.vocab = 10});
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft));
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>{}), Catch::Contains("prompt is empty"));
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>{1, 10}), Catch::Contains("prompt token 1 has id 10"));
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>{-3}), Catch::Contains("id -3"));
}

TEST_CASE("NaN logits from the target or the draft are errors, at any temperature", "[errors]") {
    const std::vector<Token> prompt{1, 2};
    for (const double temperature : {0.0, 1.0}) {
        INFO("temperature " << temperature);
        ToyLM bad_target({.vocab = 10, .nan_at_position = 4}), draft({.vocab = 10});
        specdec::SpeculativeDecoder with_bad_target(specdec::target(bad_target), specdec::draft(draft), {.sampling = {.temperature = temperature}, .max_new_tokens = 20});
        CHECK_THROWS_WITH(with_bad_target.generate(prompt), Catch::Contains("target model logits at position") && Catch::Contains("contain NaN"));
        ToyLM target({.vocab = 10}), bad_draft({.vocab = 10, .nan_at_position = 3});
        specdec::SpeculativeDecoder with_bad_draft(specdec::target(target), specdec::draft(bad_draft), {.sampling = {.temperature = temperature}, .max_new_tokens = 20});
        CHECK_THROWS_WITH(with_bad_draft.generate(prompt), Catch::Contains("draft model logits at position") && Catch::Contains("contain NaN"));
        ToyLM bad_alone({.vocab = 10, .nan_at_position = 2});
        specdec::AutoregressiveDecoder autoregressive(bad_alone, {.sampling = {.temperature = temperature}});
        CHECK_THROWS_WITH(autoregressive.generate(prompt), Catch::Contains("NaN"));
    }
}

TEST_CASE("nonsensical decoding options are rejected when the decoder is made", "[errors]") {
    ToyLM target({.vocab = 10}), draft({.vocab = 10});
    CHECK_THROWS_WITH(specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), {.draft_tokens = 0}), Catch::Contains("draft_tokens = 0"));
    CHECK_THROWS_WITH(specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), {.max_new_tokens = 0}), Catch::Contains("max_new_tokens = 0"));
    CHECK_THROWS_WITH(specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), {.sampling = {.temperature = -1.0}}), Catch::Contains("temperature = -1"));
    CHECK_THROWS_WITH(specdec::AutoregressiveDecoder(target, {.sampling = {.top_p = 0.0}}), Catch::Contains("top_p"));
}

namespace {
// A drafter that breaks its contract in the ways a buggy adapter might.
struct MisbehavingDrafter {
    std::vector<Token> proposal;
    void reset() {}
    specdec::DraftProposal propose(const specdec::DraftRequest&) { return {.tokens = proposal, .probabilities = {}, .vocab = 0, .forward_passes = 0}; }
};
}  // namespace

TEST_CASE("a drafter that proposes too many tokens or unknown ids is reported", "[errors]") {
    ToyLM target({.vocab = 10});
    MisbehavingDrafter too_many{{1, 2, 3, 4, 5, 6}};
    specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(too_many), {.draft_tokens = 3});
    CHECK_THROWS_WITH(decoder.generate(std::vector<Token>{1}), Catch::Contains("proposed 6 tokens when at most 3"));
    MisbehavingDrafter out_of_range{{1, 42}};
    specdec::SpeculativeDecoder decoder2(specdec::target(target), specdec::draft(out_of_range), {.draft_tokens = 3});
    CHECK_THROWS_WITH(decoder2.generate(std::vector<Token>{1}), Catch::Contains("draft token 42"));
}
