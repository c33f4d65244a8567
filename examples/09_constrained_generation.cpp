// 09: constrained generation. A RegexConstraint makes every output match a
// regular expression: the decoders mask each row they process (the draft's
// and, at every draft position, the target's) with the tokens the constraint
// allows after the row's history, so drafts stay valid and the output is
// exactly what constrained autoregressive sampling would produce.
//
// The synthetic models have no tokenizer: synthetic_token_texts gives each
// token id a short text (every printable character, and 2-4 character
// pieces), so the example runs without a model file. With a GGUF model, use
// vocabulary_token_texts(tokenizer) and the tokenizer's EOS instead.
//
// Every output (autoregressive and speculative, greedy and T = 1) is checked
// against std::regex_match, and the speculative speedup is measured with the
// constraint and without it, side by side, on the same pair and prompts.
// Constrained speculative decoding runs twice: with forced drafts (the
// default: a token the constraint forces costs no draft pass) and without
// (--forced-drafts off leaves out the run with them); both are checked, and
// their tokens per target pass and draft passes are printed.
//
//   09_constrained_generation [--size tiny|100m] [--seeds N] [--draft-tokens K] [--forced-drafts both|off]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <regex>
#include <string>
#include <vector>

#include <specdec/specdec.hpp>
#include <specdec/constraints/regex_constraint.hpp>
#include <specdec/constraints/token_texts.hpp>
#include <specdec/models/synthetic.hpp>

namespace {

struct Throughput {
    std::size_t tokens = 0;
    double seconds = 0.0;
    void add(const specdec::GenerationResult& result) {
        tokens += result.stats.generated_tokens;
        seconds += result.stats.decode_seconds();
    }
    [[nodiscard]] double per_second() const { return seconds > 0.0 ? static_cast<double>(tokens) / seconds : 0.0; }
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string size = "100m";  // vocabulary of 32000 tokens, like Llama 2
    std::size_t seeds = 20;     // --seeds 1000 for the full check
    std::size_t draft_tokens = 3;
    std::string forced_runs = "both";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::strcmp(argv[i], "--size") == 0) size = argv[i + 1];
        else if (std::strcmp(argv[i], "--seeds") == 0) seeds = std::strtoul(argv[i + 1], nullptr, 10);
        else if (std::strcmp(argv[i], "--draft-tokens") == 0) draft_tokens = std::strtoul(argv[i + 1], nullptr, 10);
        else if (std::strcmp(argv[i], "--forced-drafts") == 0) forced_runs = argv[i + 1];
        else {
            std::fprintf(stderr, "usage: %s [--size tiny|100m] [--seeds N] [--draft-tokens K] [--forced-drafts both|off]\n",
                         argv[0]);
            return 2;
        }
    }
    if (forced_runs != "both" && forced_runs != "off") {
        std::fprintf(stderr, "--forced-drafts %s: expected both or off\n", forced_runs.c_str());
        return 2;
    }
    const bool with_forced = forced_runs == "both";
    const auto start = std::chrono::steady_clock::now();
    specdec::SyntheticPair pair = specdec::make_synthetic_pair({.size = size});
    const std::size_t vocab = pair.target.vocab_size();
    const std::vector<std::string> texts = specdec::synthetic_token_texts(vocab);
    const specdec::Token stop = 2;  // a control token (no text): the end of the constrained text

    // A small JSON object. It is at most 32 bytes long and every token spells
    // at least one byte, so 33 tokens (with the stop token) always complete it.
    const std::string pattern = R"(\{"id": [0-9]{1,4}, "name": "[a-z]{1,8}"\})";
    const std::size_t max_new_tokens = 40;
    specdec::RegexConstraint constraint(pattern, texts, {stop});
    const auto masks_start = std::chrono::steady_clock::now();
    constraint.precompute_masks();
    const double mask_seconds = seconds_since(masks_start);
    std::printf("%s pair, vocabulary of %zu tokens; regex %s\n", size.c_str(), vocab, pattern.c_str());
    std::printf("automaton: %zu states; all masks built in %.2f ms (%.1f us per state)\n",
                constraint.automaton().states(), 1e3 * mask_seconds,
                1e6 * mask_seconds / static_cast<double>(constraint.cached_masks()));

    const std::regex reference(pattern);
    std::size_t mismatches = 0, greedy_differences = 0, outputs = 0;
    for (const double temperature : {0.0, 1.0}) {
        Throughput plain_constrained, fast_constrained, plain_free, fast_free;
        // Constrained speculative decoding with forced drafts (on) and without (off).
        specdec::GenerationStats forced_on, forced_off;
        std::size_t accepted = 0, proposed = 0, accepted_free = 0, proposed_free = 0;
        const auto loop_start = std::chrono::steady_clock::now();
        for (std::uint64_t seed = 0; seed < seeds; ++seed) {
            // A different prompt per seed, so that greedy outputs differ too.
            const std::vector<specdec::Token> prompt{1, static_cast<specdec::Token>(100 + (seed * 7919) % (vocab - 100)),
                                                     static_cast<specdec::Token>(100 + (seed * 104729) % (vocab - 100)), 42};
            specdec::DecodingOptions options{.draft_tokens = draft_tokens, .seed = seed,
                                             .max_new_tokens = max_new_tokens, .stop_tokens = {stop}};
            options.sampling.temperature = temperature;
            options.sampling.constraint = &constraint;
            auto check = [&](const specdec::GenerationResult& result, const char* decoder) {
                ++outputs;
                std::string text;
                const bool stopped = !result.tokens.empty() && result.tokens.back() == stop;
                for (std::size_t i = 0; i + (stopped ? 1 : 0) < result.tokens.size(); ++i)
                    text += texts[static_cast<std::size_t>(result.tokens[i])];
                if (stopped && std::regex_match(text, reference)) return;
                if (++mismatches <= 5)
                    std::printf("MISMATCH (%s, T = %.0f, seed %llu): %s \"%s\"\n", decoder, temperature,
                                static_cast<unsigned long long>(seed), stopped ? "text" : "unfinished text", text.c_str());
            };
            const auto plain = specdec::AutoregressiveDecoder(pair.target, options).generate(prompt);
            check(plain, "autoregressive");
            options.forced_drafts.enabled = false;
            const auto fast =
                specdec::SpeculativeDecoder(specdec::target(pair.target), specdec::draft(pair.draft), options).generate(prompt);
            check(fast, "speculative");
            if (temperature == 0.0 && fast.tokens != plain.tokens) ++greedy_differences;
            forced_off += fast.stats;
            specdec::GenerationResult forced;
            if (with_forced) {
                options.forced_drafts.enabled = true;
                forced =
                    specdec::SpeculativeDecoder(specdec::target(pair.target), specdec::draft(pair.draft), options).generate(prompt);
                check(forced, "speculative, forced drafts");
                if (temperature == 0.0 && forced.tokens != plain.tokens) ++greedy_differences;
                forced_on += forced.stats;
            }
            // The speedup below is the default's: forced drafts on (unless --forced-drafts off).
            const specdec::GenerationResult& fast_default = with_forced ? forced : fast;
            plain_constrained.add(plain);
            fast_constrained.add(fast_default);
            accepted += fast_default.stats.draft_tokens_accepted;
            proposed += fast_default.stats.draft_tokens_proposed;
            if (seed == 0) {
                std::string text;
                for (const specdec::Token t : fast_default.tokens) text += t == stop ? "" : texts[static_cast<std::size_t>(t)];
                std::printf("T = %.0f, seed 0: %s (%zu tokens)\n", temperature, text.c_str(), fast_default.tokens.size());
            }
            // The same request unconstrained, as many tokens as the constrained one.
            options.sampling.constraint = nullptr;
            options.stop_tokens.clear();
            options.forced_drafts.enabled = true;  // no constraint: nothing is forced
            options.max_new_tokens = plain.tokens.size();
            const auto plain_unconstrained = specdec::AutoregressiveDecoder(pair.target, options).generate(prompt);
            const auto fast_unconstrained =
                specdec::SpeculativeDecoder(specdec::target(pair.target), specdec::draft(pair.draft), options).generate(prompt);
            plain_free.add(plain_unconstrained);
            fast_free.add(fast_unconstrained);
            accepted_free += fast_unconstrained.stats.draft_tokens_accepted;
            proposed_free += fast_unconstrained.stats.draft_tokens_proposed;
        }
        const double speedup = fast_constrained.per_second() / plain_constrained.per_second();
        const double speedup_free = fast_free.per_second() / plain_free.per_second();
        std::printf("T = %.0f, %zu seeds, k = %zu (%.1f s):\n", temperature, seeds, draft_tokens, seconds_since(loop_start));
        std::printf("  constrained:   autoregressive %7.1f tok/s, speculative %7.1f tok/s, speedup %.2fx, %.0f%% of drafts accepted\n",
                    plain_constrained.per_second(), fast_constrained.per_second(), speedup,
                    100.0 * static_cast<double>(accepted) / static_cast<double>(proposed));
        std::printf("  unconstrained: autoregressive %7.1f tok/s, speculative %7.1f tok/s, speedup %.2fx, %.0f%% of drafts accepted\n",
                    plain_free.per_second(), fast_free.per_second(), speedup_free,
                    100.0 * static_cast<double>(accepted_free) / static_cast<double>(proposed_free));
        std::printf("  constrained speedup / unconstrained speedup = %.2f\n", speedup / speedup_free);
        auto print_passes = [](const char* label, const specdec::GenerationStats& stats) {
            const double passes = static_cast<double>(stats.target_forward_passes);
            std::printf("  constrained, %s: %.2f tokens per target pass, %zu draft passes (%.2f per token), %.2f drafts "
                        "per target pass, %.1f ms decoding\n",
                        label, static_cast<double>(stats.generated_tokens) / passes, stats.draft_forward_passes,
                        static_cast<double>(stats.draft_forward_passes) / static_cast<double>(stats.generated_tokens),
                        static_cast<double>(stats.draft_tokens_proposed) / passes, 1e3 * stats.decode_seconds());
        };
        print_passes("forced drafts off", forced_off);
        if (with_forced) print_passes("forced drafts on ", forced_on);
    }
    std::printf("%zu outputs checked against std::regex_match: %s; greedy speculative == autoregressive: %s (%.1f s in all)\n",
                outputs, mismatches == 0 ? "all match" : "MISMATCH", greedy_differences == 0 ? "yes" : "DIFFERENT",
                seconds_since(start));
    return mismatches == 0 && greedy_differences == 0 ? 0 : 1;
}
