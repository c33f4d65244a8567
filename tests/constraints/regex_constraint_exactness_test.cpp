// Speculative decoding under a RegexConstraint emits exactly the constrained
// target distribution: whole sequences counted by the exactness harness
// against a reference whose masks come from std::regex_match, not from the
// constraint's automaton. With forced drafts (on by default) and without, and
// a broken forced-draft drafter the same test must catch.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/toy_models.hpp"

using specdec::RegexConstraint;
using specdec::Token;
using specdec::test::ToyLM;

namespace {

// Texts "a", "b", "ab" and an end token without text; the pattern "(ab|ba)*"
// allows different tokens at different states, and the end token only after
// a whole number of pairs.
const std::vector<std::string> kPairTexts{"a", "b", "ab", ""};
constexpr Token kPairEnd = 3;
const std::string kPairPattern = "(ab|ba)*";

// Whether the generated tokens can be followed by `token`: a text that some
// continuation of at most one byte completes (every prefix of a match of
// "(ab|ba)*" is), or the end token after a match or after an end token.
bool pair_token_allowed(const std::vector<Token>& generated, Token token) {
    static const std::regex pattern(kPairPattern);
    std::string text;
    for (const Token t : generated) {
        if (t == kPairEnd) return token == kPairEnd;  // finished: only end tokens
        text += kPairTexts[static_cast<std::size_t>(t)];
    }
    if (token == kPairEnd) return std::regex_match(text, pattern);
    text += kPairTexts[static_cast<std::size_t>(token)];
    for (const char* completion : {"", "a", "b"})
        if (std::regex_match(text + completion, pattern)) return true;
    return false;
}

specdec::test::Conditional pair_reference(ToyLM& target, const specdec::SamplingOptions& sampling,
                                          std::size_t prompt_size) {
    return specdec::test::reference_conditional(target, sampling, prompt_size, [](std::span<const Token> generated) {
        const std::vector<Token> tokens(generated.begin(), generated.end());
        std::vector<bool> allowed(kPairTexts.size());
        for (std::size_t x = 0; x < allowed.size(); ++x) allowed[x] = pair_token_allowed(tokens, static_cast<Token>(x));
        return allowed;
    });
}

// A broken forced-draft drafter. Exactness needs every proposed token to be
// drawn from the q reported with it; a forced token is (q = 1). This one
// breaks that where the constraint allows two tokens: it takes the first
// allowed token as if it were forced, but reports the model's q row for it
// (and ends the proposal there). Proposing a non-forced token with q = 1
// would NOT be a bug: a point-mass draft chosen independently of the
// verifier is exact, which is why the rule needs no trust in the forcing.
class FirstAllowedDrafter {
public:
    explicit FirstAllowedDrafter(ToyLM& model) : inner_(model) {}

    specdec::DraftProposal propose(const specdec::DraftRequest& request) {
        specdec::DraftProposal proposal = inner_.propose(request);
        if (proposal.point_mass() || request.sampling.constraint == nullptr) return proposal;
        std::vector<std::uint8_t> mask(proposal.vocab);
        for (std::size_t i = 0; i < proposal.size(); ++i) {
            const std::span<const Token> before = std::span<const Token>(proposal.tokens).first(i);
            if (!specdec::detail::constraint_mask_after(*request.sampling.constraint, before, mask, i)) break;
            if (std::count(mask.begin(), mask.end(), std::uint8_t{1}) != 2) continue;
            proposal.tokens[i] = static_cast<Token>(std::find(mask.begin(), mask.end(), std::uint8_t{1}) - mask.begin());
            proposal.tokens.resize(i + 1);
            proposal.probabilities.resize((i + 1) * proposal.vocab);
            break;
        }
        return proposal;
    }
    void reset() { inner_.reset(); }
    void prefill(std::span<const Token> history) { inner_.prefill(history); }

private:
    specdec::ModelDrafter<ToyLM> inner_;
};

}  // namespace

TEST_CASE("regex constraint: speculative and autoregressive sampling are exact under the constraint",
          "[constraints][regex][exactness]") {
    ToyLM target({.vocab = 4, .seed = 31});
    ToyLM draft({.vocab = 4, .seed = 31, .noise_seed = 8, .noise = 0.8});
    const std::vector<Token> prompt{1, 0};
    RegexConstraint constraint(kPairPattern, kPairTexts, {kPairEnd});
    for (const char* temperature_text : {"0.7", "1.0", "1.3"}) {
        const double temperature = std::stod(temperature_text);
        specdec::SamplingOptions sampling{.temperature = temperature};
        const std::size_t k = 3;
        specdec::test::ExactnessSetup setup{
            .name = std::string("regex (ab|ba)* at T = ") + temperature_text, .prompt = prompt, .vocab = 4,
            .length = k + 2, .draft_tokens = k, .samples = 20000,
            .target = pair_reference(target, sampling, prompt.size())};
        sampling.constraint = &constraint;
        const specdec::DecodingOptions options{.draft_tokens = k, .sampling = sampling, .max_new_tokens = k + 2};
        for (const bool forced : {true, false}) {
            setup.name = std::string("regex (ab|ba)* at T = ") + temperature_text +
                         (forced ? ", forced drafts" : ", no forced drafts");
            const auto speculative = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
                specdec::DecodingOptions seeded = options;
                seeded.seed = seed;
                seeded.forced_drafts.enabled = forced;
                specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), seeded);
                return specdec::test::sampled_run(decoder.generate(prompt));
            });
            specdec::test::check_exact(speculative, k);
        }
        setup.name = std::string("regex (ab|ba)* at T = ") + temperature_text + ", autoregressive";
        setup.samples = 8000;
        setup.draft_tokens = 0;
        const auto autoregressive = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
            specdec::DecodingOptions seeded = options;
            seeded.seed = seed;
            return specdec::test::sampled_run(specdec::AutoregressiveDecoder(target, seeded).generate(prompt));
        });
        specdec::test::check_exact(autoregressive, 0);
    }
}

// Forced drafts lengthen a step beyond draft_tokens: with k = 2 and 5 tokens
// the first step may propose 4 (2 sampled, 2 forced), so the count reaches
// draft position 3. The broken drafter above is caught by the same count.
TEST_CASE("regex constraint: forced drafts past draft_tokens are exact, and a drafter whose token was not drawn from "
          "its q is caught",
          "[constraints][regex][exactness][forced_drafts]") {
    ToyLM target({.vocab = 4, .seed = 31});
    ToyLM draft({.vocab = 4, .seed = 31, .noise_seed = 8, .noise = 0.8});
    const std::vector<Token> prompt{1, 0};
    RegexConstraint constraint(kPairPattern, kPairTexts, {kPairEnd});
    const std::size_t k = 2, length = 5;
    specdec::SamplingOptions sampling{.temperature = 1.0};
    specdec::test::ExactnessSetup setup{.name = "regex (ab|ba)*, k = 2, forced drafts to position 3",
                                        .prompt = prompt, .vocab = 4, .length = length, .draft_tokens = k,
                                        .samples = 20000, .target = pair_reference(target, sampling, prompt.size())};
    sampling.constraint = &constraint;
    const specdec::DecodingOptions options{.draft_tokens = k, .sampling = sampling, .max_new_tokens = length};
    const auto forced = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        specdec::DecodingOptions seeded = options;
        seeded.seed = seed;
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), seeded);
        return specdec::test::sampled_run(decoder.generate(prompt));
    });
    specdec::test::check_exact(forced, length - 1);

    setup.name = "control: the first of two allowed tokens proposed with the model's q";
    const auto control = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
        specdec::DecodingOptions seeded = options;
        seeded.seed = seed;
        FirstAllowedDrafter broken(draft);
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(broken), seeded);
        return specdec::test::sampled_run(decoder.generate(prompt));
    });
    specdec::test::check_caught(control, length - 1);
}
