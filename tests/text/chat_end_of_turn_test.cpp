// Generation through each chat family's template ends at the end of the
// assistant's turn: the prompt's markers parse to their control tokens, the
// tokenizer's end-of-generation set holds the family's end-of-turn token, and
// speculative decoding stops there even when that token sits inside accepted
// drafts with more drafts after it. The committed fixtures' vocabularies hold
// no end-of-turn tokens, so each family gets a vocabulary of its own here (the
// byte-level characters and the family's special tokens) and a scripted model
// that answers "Ok", ends the turn, and would go on.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "formats/format_test_support.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/text/chat_template.hpp"
#include "specdec/text/generate_text.hpp"
#include "support/catch.hpp"
#include "text/chat_vocabulary.hpp"

// Named, not anonymous: the test binary compiles its files in unity batches.
namespace chat_end_of_turn_test {

using specdec::Token;

// A causal model whose next token depends only on the last one: `next` maps a
// token to the one it predicts (with a clear margin); any other token
// predicts `otherwise`. Its cache is a count: every prefix of the same length
// gives the same rows, so rollback is a truncate.
class NextTokenLM {
public:
    NextTokenLM(std::size_t vocab, std::map<Token, Token> next, Token otherwise)
        : vocab_(vocab), next_(std::move(next)), otherwise_(otherwise) {}

    [[nodiscard]] std::size_t vocab_size() const { return vocab_; }
    [[nodiscard]] std::size_t context_length() const { return 512; }
    [[nodiscard]] std::size_t cached_tokens() const { return cached_; }
    void truncate(std::size_t n) { cached_ = std::min(cached_, n); }

    specdec::LogitsView forward(std::span<const Token> tokens) {
        rows_.assign(tokens.size() * vocab_, 0.0f);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            const auto found = next_.find(tokens[i]);
            const Token predicted = found == next_.end() ? otherwise_ : found->second;
            rows_[i * vocab_ + static_cast<std::size_t>(predicted)] = 8.0f;
        }
        cached_ += tokens.size();
        return specdec::dense_logits(rows_, tokens.size(), vocab_);
    }

private:
    std::size_t vocab_;
    std::map<Token, Token> next_;
    Token otherwise_;
    std::size_t cached_ = 0;
    std::vector<float> rows_;
};

struct Family {
    std::string name;                   // ChatTemplate::from_name
    std::vector<std::string> specials;  // control tokens after the 256 byte characters
    std::string bos, eos, end_of_turn;  // pieces among them
    std::string prompt_end;             // the piece the formatted prompt ends with
};

specdec::gguf::Writer vocabulary_of(const Family& family) {
    std::vector<specdec::test::SpecialPiece> specials;
    std::uint32_t bos = 0, eos = 0;
    for (std::size_t i = 0; i < family.specials.size(); ++i) {
        specials.push_back({family.specials[i]});
        if (family.specials[i] == family.bos) bos = static_cast<std::uint32_t>(256 + i);
        if (family.specials[i] == family.eos) eos = static_cast<std::uint32_t>(256 + i);
    }
    return specdec::test::byte_level_vocabulary(specials, bos, eos);
}

// Greedy, every step drafting k = 6 (so that drafts run past the turn's end).
specdec::DecodingOptions fixed_greedy(std::size_t max_new_tokens) {
    return {.draft_tokens = 6, .sampling = {.temperature = 0.0}, .max_new_tokens = max_new_tokens,
            .drafting = specdec::Drafting::fixed};
}

}  // namespace chat_end_of_turn_test

TEST_CASE("Generation through the llama3, ChatML and Mistral templates stops at the end of the turn, inside accepted "
          "drafts",
          "[text][chat][eog]") {
    using namespace chat_end_of_turn_test;
    using specdec::test::byte_level_piece;
    using specdec::test::token_of;
    const std::vector<Family> families = {
        {"llama3",
         {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"},
         "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", byte_level_piece('\n')},
        {"chatml", {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}, "<|endoftext|>", "<|endoftext|>", "<|im_end|>",
         byte_level_piece('\n')},
        {"mistral-v3", {"<s>", "</s>", "[INST]", "[/INST]"}, "<s>", "</s>", "</s>", "[/INST]"},
    };
    for (const Family& family : families) {
        INFO(family.name);
        const specdec::test::LoadedTokenizer loaded(vocabulary_of(family));
        const specdec::Tokenizer& tokenizer = loaded.tokenizer;
        const Token end_of_turn = token_of(tokenizer, family.end_of_turn);
        CHECK(tokenizer.is_end_of_generation(end_of_turn));

        const std::string formatted = specdec::text::ChatTemplate::from_name(family.name)
                                          .apply({{"system", "Be brief."}, {"user", "Hi"}});
        const std::vector<Token> prompt = tokenizer.encode(formatted, false, false, specdec::SpecialTokens::parse);
        REQUIRE(prompt.back() == token_of(tokenizer, family.prompt_end));
        // The markers are single control tokens, not their spelling in bytes.
        const std::size_t controls = static_cast<std::size_t>(
            std::count_if(prompt.begin(), prompt.end(), [](Token t) { return t >= 256; }));
        CHECK(controls >= 2);

        // After the prompt: "Ok", the end of the turn, then "xx..." had it gone on.
        const Token o = token_of(tokenizer, byte_level_piece('O')), k = token_of(tokenizer, byte_level_piece('k')),
                    x = token_of(tokenizer, byte_level_piece('x'));
        const std::map<Token, Token> script = {{prompt.back(), o}, {o, k}, {k, end_of_turn}, {end_of_turn, x}};
        NextTokenLM target(tokenizer.vocab_size(), script, x), draft(tokenizer.vocab_size(), script, x);
        specdec::SpeculativeDecoder decoder(specdec::target(target), specdec::draft(draft), fixed_greedy(32));
        const specdec::text::TextResult answer = specdec::text::generate_text(
            decoder, tokenizer, prompt, {.end_of_generation = tokenizer.end_of_generation()});
        CHECK(answer.text == "Ok");
        CHECK(answer.stop_reason == specdec::text::TextStopReason::end_of_generation);
        CHECK(answer.tokens == std::vector<Token>{o, k});
        // The first step's drafts ran past the end of the turn and were all
        // accepted; the generation still ends at it.
        REQUIRE_FALSE(answer.generation.tokens.empty());
        CHECK(answer.generation.tokens.back() == end_of_turn);
        CHECK(answer.generation.stats.draft_tokens_accepted >= 3);

        // Negative control: without the end-of-generation set the same decoder
        // runs on past the end of the turn.
        specdec::SpeculativeDecoder unstopped(specdec::target(target), specdec::draft(draft), fixed_greedy(8));
        const specdec::text::TextResult runs_on = specdec::text::generate_text(unstopped, tokenizer, prompt, {});
        CHECK(runs_on.stop_reason == specdec::text::TextStopReason::max_new_tokens);
        CHECK(runs_on.text.rfind("Ok", 0) == 0);
        CHECK(runs_on.text.size() > 2);
    }
}
