// Stop strings under speculative decoding, through generate_text over the
// decoders' public API:
//  - on the seeded synthetic pair, 500 generations whose stop string
//    straddles tokens (and mostly completes inside a step's accepted
//    drafts) end exactly where the reference cut of the unstopped output
//    ends them (greedy: the autoregressive output; T = 1: the same seed's
//    unstopped speculative output), nothing after the stop is streamed,
//    and the decoder is left at prompt + returned tokens;
//  - at T = 1 on a toy pair, the streamed text's distribution equals the
//    exact distribution of the target's text cut at the stop (chi-square),
//    and a negative control that checks stop strings only at step ends
//    (streaming each step whole) is caught by the same statistic.
// Set SPECDEC_EXACTNESS_REPORT=1 to print the chi-square results.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/models/synthetic.hpp"
#include "specdec/text/detokenizer.hpp"
#include "specdec/text/generate_text.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"
#include "support/statistics.hpp"
#include "support/test_random.hpp"
#include "support/toy_models.hpp"
#include "text/text_reference.hpp"
#include "text/text_test_support.hpp"

using specdec::DecodingOptions;
using specdec::Token;
using specdec::test::ListVocabulary;
using specdec::test::TestRandom;
using specdec::text::TextOptions;
using specdec::text::TextPiece;

namespace {


// 512 short texts over a few letters, spaces, newlines and two multi-byte
// characters; token 511 is an end-of-generation marker with no text.
ListVocabulary synthetic_vocabulary() {
    static const char* const parts[] = {"a", "b", "c", "d", " ", "\n", "\xC3\xA9", "\xE2\x82\xAC"};
    TestRandom random{2026};
    std::vector<std::string> texts;
    for (int i = 0; i < 511; ++i) {
        std::string text;
        const std::size_t length = 1 + random.below(3);
        for (std::size_t j = 0; j < length; ++j) text += parts[random.below(std::size(parts))];
        texts.push_back(text);
    }
    texts.emplace_back();
    return ListVocabulary(texts);
}

// A step-by-step run without stop strings: the tokens, and for each whether
// more tokens of its step followed it (it was an accepted draft that a stop
// there must cut mid-step).
struct SteppedRun {
    std::vector<Token> tokens;
    std::vector<bool> inside_step;
};

template <class Decoder>
SteppedRun stepped_run(Decoder& decoder, const std::vector<Token>& prompt, std::size_t most) {
    SteppedRun run;
    (void)decoder.prefill(prompt);
    while (run.tokens.size() < most) {
        const specdec::StepResult step = decoder.step(most - run.tokens.size());
        for (std::size_t i = 0; i < step.tokens.size(); ++i) {
            run.tokens.push_back(step.tokens[i]);
            run.inside_step.push_back(i + 1 < step.tokens.size());
        }
        if (step.stop) break;
    }
    return run;
}

std::size_t utf8_char_start(const std::string& text, std::size_t at) {
    while (at > 0 && at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) --at;
    return at;
}

// A stop string across the boundary before generated token j: the end of
// the text before it and the start of token j's text (whole characters).
std::optional<std::string> straddling_stop(const std::string& before, const std::string& token_text, TestRandom& random) {
    if (before.empty() || token_text.empty()) return std::nullopt;
    const std::size_t tail = utf8_char_start(before, before.size() - std::min<std::size_t>(before.size(), 1 + random.below(3)));
    std::size_t head = std::min<std::size_t>(token_text.size(), 1 + random.below(3));
    while (head < token_text.size() && (static_cast<unsigned char>(token_text[head]) & 0xC0) == 0x80) ++head;
    std::string stop = before.substr(tail) + token_text.substr(0, head);
    if (!specdec::test::valid_utf8(stop) || stop.size() < 2) return std::nullopt;
    return stop;
}

template <class Vocabulary, class Decode>
void run_synthetic_cases(const Vocabulary& vocab, Decode decode_sequence, std::size_t cases, std::uint64_t first_seed,
                         const std::vector<Token>& end_of_generation, std::size_t& inside_drafts, std::size_t& ran) {
    const specdec::SyntheticOptions shape{.size = "tiny", .seed = 7, .threads = 1};
    static specdec::SyntheticPair pair = specdec::make_synthetic_pair(shape);
    constexpr std::size_t kMost = 32;
    TestRandom random{first_seed};
    for (std::size_t c = 0; c < cases; ++c) {
        const bool greedy = c % 2 == 0;
        const bool include = c % 4 >= 2;
        const std::uint64_t seed = first_seed + c;
        std::vector<Token> prompt = {1};
        for (int i = 0; i < 4; ++i) prompt.push_back(static_cast<Token>(2 + random.below(500)));
        const DecodingOptions options{.draft_tokens = 4,
                                      .sampling = {.temperature = greedy ? 0.0 : 1.0},
                                      .seed = seed,
                                      .max_new_tokens = kMost};
        // FixedLength: the reference is the same seeded run, which AutoLength's
        // timing-chosen lengths would not repeat at T = 1.
        specdec::SpeculativeDecoder plain(specdec::target(pair.target), specdec::draft(pair.draft), options,
                                          specdec::FixedLength{});
        const SteppedRun unstopped = stepped_run(plain, prompt, kMost);
        std::vector<Token> reference_tokens = unstopped.tokens;
        if (greedy) {
            specdec::AutoregressiveDecoder autoregressive(pair.target, options);
            reference_tokens = autoregressive.generate(prompt).tokens;
            REQUIRE(reference_tokens == unstopped.tokens);  // greedy speculation is the target's argmax
        }
        const auto decode_generated = [&](std::size_t n) {
            std::vector<Token> all = prompt;
            all.insert(all.end(), reference_tokens.begin(), reference_tokens.begin() + static_cast<std::ptrdiff_t>(n));
            return decode_sequence(all).substr(decode_sequence(prompt).size());
        };
        // A boundary inside a step's accepted drafts where possible.
        std::vector<std::size_t> boundaries, inner;
        for (std::size_t j = 1; j < reference_tokens.size(); ++j) {
            boundaries.push_back(j);
            if (unstopped.inside_step[j]) inner.push_back(j);
        }
        std::optional<std::string> stop;
        for (int attempt = 0; attempt < 20 && !stop; ++attempt) {
            const auto& from = !inner.empty() && attempt < 15 ? inner : boundaries;
            if (from.empty()) break;
            const std::size_t j = from[random.below(from.size())];
            const std::string before = decode_generated(j);
            stop = straddling_stop(before, decode_generated(j + 1).substr(before.size()), random);
        }
        if (!stop) continue;
        ++ran;
        const std::vector<std::string> stops = {*stop, "\x01never"};
        const specdec::test::ReferenceCut expected =
            specdec::test::reference_cut(reference_tokens, decode_generated, stops, include, end_of_generation);
        const TextOptions text_options{.stop_strings = stops, .include_stop = include,
                                       .end_of_generation = end_of_generation};
        INFO("case " << c << (greedy ? " greedy" : " T = 1") << " stop '" << *stop << "'");

        specdec::test::PieceRecorder seen;
        specdec::SpeculativeDecoder speculative(specdec::target(pair.target), specdec::draft(pair.draft), options,
                                                specdec::FixedLength{});
        const specdec::text::TextResult result = specdec::text::generate_text(speculative, vocab, prompt, text_options, seen);
        REQUIRE(result.text == expected.text);
        REQUIRE(result.tokens ==
                std::vector<Token>(reference_tokens.begin(), reference_tokens.begin() + static_cast<std::ptrdiff_t>(expected.tokens)));
        REQUIRE(result.stop_string == expected.stop_string);
        REQUIRE(result.generation.tokens.size() == expected.consumed);
        // Nothing after the stop was streamed; the decoder holds prompt + the returned tokens.
        REQUIRE(seen.text == result.text);
        REQUIRE(seen.tokens == result.tokens);
        std::vector<Token> conversation = prompt;
        conversation.insert(conversation.end(), result.tokens.begin(), result.tokens.end());
        REQUIRE(std::vector<Token>(speculative.sequence().begin(), speculative.sequence().end()) == conversation);
        if (expected.stop_string && unstopped.inside_step[expected.consumed - 1]) ++inside_drafts;

        if (greedy) {  // the autoregressive decoder through the same layer
            specdec::AutoregressiveDecoder autoregressive(pair.target, options);
            const specdec::text::TextResult alone = specdec::text::generate_text(autoregressive, vocab, prompt, text_options);
            REQUIRE(alone.text == result.text);
            REQUIRE(alone.tokens == result.tokens);
        }
        // The next turn continues from the decoder's state: a longer prompt
        // after a stop gives what a fresh decoder gives.
        if (c % 25 == 1 && result.stop_reason == specdec::text::TextStopReason::stop_string) {
            std::vector<Token> next = conversation;
            next.push_back(static_cast<Token>(2 + random.below(500)));
            const specdec::GenerationResult continued = speculative.generate(next);
            specdec::SpeculativeDecoder fresh(specdec::target(pair.target), specdec::draft(pair.draft), options,
                                              specdec::FixedLength{});
            pair.target.truncate(0);
            pair.draft.truncate(0);
            REQUIRE(fresh.generate(next).tokens == continued.tokens);
        }
    }
}

void report_cases(const char* name, std::size_t ran, std::size_t inside_drafts) {
    if (const char* verbose = std::getenv("SPECDEC_EXACTNESS_REPORT"); verbose != nullptr && *verbose != '\0')
        std::cout << "stop strings, " << name << ": " << ran << " cases, " << inside_drafts
                  << " decided inside a step's accepted drafts\n";
}

}  // namespace

TEST_CASE("Stop strings under speculation end where the reference cut ends the unstopped output (500 cases)",
          "[text][stop][decoding][exactness]") {
    const ListVocabulary vocab = synthetic_vocabulary();
    std::size_t inside_drafts = 0, ran = 0;
    run_synthetic_cases(vocab, [&](const std::vector<Token>& all) { return vocab.decode(all); }, 500, 1000, {511},
                        inside_drafts, ran);
    report_cases("synthetic vocabulary", ran, inside_drafts);
    CHECK(ran >= 480);
    // Most stops were decided inside a step, where its later drafts had to be dropped.
    CHECK(inside_drafts >= 150);
}

TEST_CASE("Stop strings under speculation with the stories260K tokenizer", "[text][stop][decoding][fixture][exactness]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    const specdec::Tokenizer tokenizer = specdec::Tokenizer::from_gguf(specdec::gguf::File::open(path));
    REQUIRE(tokenizer.vocab_size() == 512);  // the synthetic tiny models' vocabulary size
    std::size_t inside_drafts = 0, ran = 0;
    run_synthetic_cases(tokenizer, [&](const std::vector<Token>& all) { return tokenizer.decode(all); }, 100, 5000,
                        tokenizer.end_of_generation(), inside_drafts, ran);
    report_cases("stories260K tokenizer", ran, inside_drafts);
    CHECK(ran >= 90);
    CHECK(inside_drafts >= 20);
}

namespace {

// The toy pair: 4 tokens whose texts make the stop "ab" straddle tokens often.
const ListVocabulary kToyVocab({"a", "b", "ba", "\n"});
const std::vector<std::string> kToyStops = {"ab"};
constexpr std::size_t kToyLength = 6;
const std::vector<Token> kToyPrompt = {3, 0};

std::string outcome(const std::string& text, bool stopped) { return text + (stopped ? "|stop" : "|end"); }

// Exact probabilities of each outcome (text cut at the stop, stopped or not)
// from the target's sequence distribution over kToyLength tokens.
std::map<std::string, double> reference_outcomes(const specdec::test::ToyLM& target, const specdec::SamplingOptions& sampling) {
    const specdec::test::Conditional conditional = specdec::test::reference_conditional(target, sampling);
    std::map<std::string, double> outcomes;
    std::vector<Token> prefix = kToyPrompt;
    auto visit = [&](auto&& self, double mass) -> void {
        if (prefix.size() == kToyPrompt.size() + kToyLength) {
            const std::vector<Token> generated(prefix.begin() + static_cast<std::ptrdiff_t>(kToyPrompt.size()), prefix.end());
            const auto decode = [&](std::size_t n) { return kToyVocab.decode(std::span<const Token>(generated).first(n)); };
            const specdec::test::ReferenceCut cut = specdec::test::reference_cut(generated, decode, kToyStops, false);
            outcomes[outcome(cut.text, cut.stop_string.has_value())] += mass;
            return;
        }
        const std::vector<double> p = conditional(prefix);
        for (std::size_t x = 0; x < p.size(); ++x) {
            if (p[x] == 0.0) continue;
            prefix.push_back(static_cast<Token>(x));
            self(self, mass * p[x]);
            prefix.pop_back();
        }
    };
    visit(visit, 1.0);
    return outcomes;
}

template <class Run>
specdec::test::ChiSquareResult outcome_chi_square(const std::map<std::string, double>& reference, std::size_t samples,
                                                  Run run, const char* name) {
    std::map<std::string, std::size_t> index;
    std::vector<double> expected;
    for (const auto& [key, p] : reference) {
        index[key] = expected.size();
        expected.push_back(p);
    }
    std::vector<std::size_t> observed(expected.size(), 0);
    for (std::size_t s = 0; s < samples; ++s) {
        const std::string key = run(1 + s);
        const auto found = index.find(key);
        if (found == index.end()) {  // an outcome the target never produces
            index[key] = expected.size();
            expected.push_back(0.0);
            observed.push_back(1);
        } else {
            ++observed[found->second];
        }
    }
    const specdec::test::ChiSquareResult result = specdec::test::chi_square_test(observed, expected);
    if (const char* verbose = std::getenv("SPECDEC_EXACTNESS_REPORT"); verbose != nullptr && *verbose != '\0')
        std::cout << "exactness: " << name << ": chi2 " << result.statistic << " dof " << result.degrees_of_freedom
                  << " p " << result.p_value << " (" << samples << " runs, " << expected.size() << " outcomes)\n";
    return result;
}

}  // namespace

TEST_CASE("The streamed text before a stop string has the target's distribution under speculation (chi-square)",
          "[text][stop][decoding][exactness]") {
    specdec::test::ToyLM target({.vocab = 4, .seed = 5, .sharpness = 1.2});
    specdec::test::ToyLM draft({.vocab = 4, .seed = 5, .sharpness = 1.2, .noise_seed = 99, .noise = 0.4});
    const specdec::SamplingOptions sampling{.temperature = 1.0};
    const std::map<std::string, double> reference = reference_outcomes(target, sampling);
    const auto options = [&](std::uint64_t seed) {
        return DecodingOptions{.draft_tokens = 4, .sampling = sampling, .seed = seed, .max_new_tokens = kToyLength};
    };
    std::size_t cut_inside_step = 0;

    // generate_text: the stop is checked after every committed token.
    const auto exact = outcome_chi_square(reference, 20000, [&](std::uint64_t seed) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options(seed));
        specdec::test::PieceRecorder seen;
        const auto result = specdec::text::generate_text(decoder, kToyVocab, kToyPrompt, {.stop_strings = kToyStops}, seen);
        REQUIRE(seen.text == result.text);
        if (result.generation.stats.draft_tokens_accepted > 0 && result.stop_string) ++cut_inside_step;
        return outcome(seen.text, result.stop_string.has_value());
    }, "stop strings per token (speculative, k = 4)");
    CHECK(exact.p_value >= specdec::test::kExactSignificance);
    CHECK(cut_inside_step > 1000);

    // Negative control: each step's text is streamed whole, then the stop is
    // looked for; the stop and what followed it in the step reach the caller.
    const auto control = outcome_chi_square(reference, 5000, [&](std::uint64_t seed) {
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), options(seed));
        specdec::text::Detokenizer<ListVocabulary> detokenizer(kToyVocab);
        std::string streamed;
        (void)decoder.prefill(kToyPrompt);
        std::size_t emitted = 0;
        while (emitted < kToyLength) {
            const specdec::StepResult step = decoder.step(kToyLength - emitted);
            emitted += step.tokens.size();
            for (const Token t : step.tokens) streamed += detokenizer.push(t);
            if (streamed.find(kToyStops[0]) != std::string::npos) return outcome(streamed, true);
            if (step.stop) break;
        }
        return outcome(streamed, false);
    }, "control: stop checked at step ends");
    CHECK(control.p_value < specdec::test::kControlSignificance);
}
