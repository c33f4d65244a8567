// Speculative decoding under a RegexConstraint emits exactly the constrained
// target distribution: whole sequences counted by the exactness harness
// against a reference whose masks come from std::regex_match, not from the
// constraint's automaton.
#include <cstddef>
#include <regex>
#include <string>
#include <vector>

#include "specdec/constraints/regex_constraint.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
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
            .target = specdec::test::reference_conditional(target, sampling, prompt.size(),
                                                           [](std::span<const Token> generated) {
                                                               const std::vector<Token> tokens(generated.begin(), generated.end());
                                                               std::vector<bool> allowed(kPairTexts.size());
                                                               for (std::size_t x = 0; x < allowed.size(); ++x)
                                                                   allowed[x] = pair_token_allowed(tokens, static_cast<Token>(x));
                                                               return allowed;
                                                           })};
        sampling.constraint = &constraint;
        const specdec::DecodingOptions options{.draft_tokens = k, .sampling = sampling, .max_new_tokens = k + 2};
        const auto speculative = specdec::test::run_exactness(setup, [&](std::uint64_t seed) {
            specdec::DecodingOptions seeded = options;
            seeded.seed = seed;
            specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), seeded);
            return specdec::test::sampled_run(decoder.generate(prompt));
        });
        specdec::test::check_exact(speculative, k);
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
