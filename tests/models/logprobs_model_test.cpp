// Logprobs under speculation on a real transformer: the verification pass
// scores k + 1 rows at once, autoregressive decoding one row a pass; the
// logprobs read from them must agree within 1e-5 (the bound), greedy
// and sampled, with penalties on.
#include <cmath>
#include <span>
#include <vector>

#include "specdec/cpu.hpp"
#include "specdec/specdec.hpp"
#include "support/catch.hpp"

namespace logprobs_model {

using specdec::Token;

TEST_CASE("logprobs under speculation equal autoregressive logprobs on the synthetic pair (1e-5), greedy and sampled",
          "[model][logprobs]") {
    const specdec::SyntheticOptions shape{.size = "tiny", .seed = 11, .threads = 2};
    specdec::SyntheticPair pair = specdec::make_synthetic_pair(shape);
    specdec::LlamaModel alone = specdec::make_synthetic_target(shape);
    const std::vector<Token> prompt{1, 17, 42, 99, 5};
    for (const double temperature : {0.0, 1.0}) {
        for (const specdec::LogprobSource source : {specdec::LogprobSource::processed, specdec::LogprobSource::raw}) {
            const specdec::DecodingOptions options{
                .draft_tokens = 4,
                .sampling = {.temperature = temperature, .top_k = 40, .top_p = 0.95, .repeat_penalty = 1.2},
                .seed = 5,
                .max_new_tokens = 48,
                .logprobs = {.enabled = true, .top_n = 4, .source = source}};
            pair.target.truncate(0);
            pair.draft.truncate(0);
            specdec::SpeculativeDecoder decoder(specdec::target(pair.target), specdec::draft(pair.draft), options);
            const specdec::GenerationResult speculative = decoder.generate(prompt);
            REQUIRE(speculative.logprobs.size() == speculative.tokens.size());
            REQUIRE(speculative.stats.draft_tokens_accepted > 0);
            // Autoregressive: one token per pass through a model of its own.
            alone.truncate(0);
            std::vector<Token> sequence = prompt;
            (void)alone.forward(std::span<const Token>(prompt).first(prompt.size() - 1));
            for (std::size_t j = 0; j < speculative.tokens.size(); ++j) {
                const specdec::LogitsView row = alone.forward(std::span<const Token>(&sequence.back(), 1));
                const std::span<const float> raw = row.last_row();
                std::vector<float> adjusted(raw.size()), scratch;
                specdec::adjust_logits(raw, options.sampling, specdec::RowHistory{sequence}, adjusted);
                const specdec::TokenLogprob expected = specdec::detail::token_logprob(
                    raw, adjusted, options.sampling, options.logprobs, speculative.tokens[j], scratch);
                const specdec::TokenLogprob& got = speculative.logprobs[j];
                INFO("T " << temperature << " token " << j);
                REQUIRE(std::isfinite(got.logprob));
                CHECK(std::abs(got.logprob - expected.logprob) <= 1e-5);
                for (std::size_t t = 0; t < got.top.size(); ++t) {
                    CHECK(got.top[t].token == expected.top[t].token);
                    if (std::isfinite(expected.top[t].logprob)) CHECK(std::abs(got.top[t].logprob - expected.top[t].logprob) <= 1e-5);
                }
                sequence.push_back(speculative.tokens[j]);
            }
            if (temperature == 0.0) {
                alone.truncate(0);
                specdec::AutoregressiveDecoder plain(alone, options);
                CHECK(plain.generate(prompt).tokens == speculative.tokens);
            }
        }
    }
}

}  // namespace logprobs_model
