// The tokenizer's end-of-generation set (llama.cpp's rule: EOS, EOT, EOM, FIM
// and every end-of-turn spelling) and the parsing of special tokens in
// templated prompts.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/format_test_support.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "text/chat_vocabulary.hpp"

using specdec::SpecialTokens;
using specdec::Token;
using specdec::Tokenizer;
using specdec::gguf::Writer;
using specdec::test::token_of;

namespace {

using Special = specdec::test::SpecialPiece;

// Ids 0-255: the byte-level characters; then `specials` in order; BOS 256, EOS 257.
Writer chat_vocabulary(const std::vector<Special>& specials, bool with_eot_key = false, std::uint32_t eot_key = 0) {
    Writer writer = specdec::test::byte_level_vocabulary(specials, 256, 257);
    if (with_eot_key) writer.add_uint32("tokenizer.ggml.eot_token_id", eot_key);
    return writer;
}

const std::vector<Special> kLlama3Specials = {
    {"<|begin_of_text|>", 3}, {"<|end_of_text|>", 3}, {"<|start_header_id|>", 3}, {"<|end_header_id|>", 3},
    {"<|eot_id|>", 3},        {"<|eom_id|>", 3},      {"<|im_start|>", 3},        {"<|im_end|>", 1},
    {"<|user|>", 4},
};

}  // namespace

TEST_CASE("The end-of-generation set holds EOS, EOT, EOM and every end-of-turn marker", "[text][tokenizer][eog]") {
    const specdec::test::LoadedTokenizer loaded(chat_vocabulary(kLlama3Specials));
    const Tokenizer& tokenizer = loaded.tokenizer;
    const Token eos = 257, eot = token_of(tokenizer, "<|eot_id|>"), eom = token_of(tokenizer, "<|eom_id|>"),
                im_end = token_of(tokenizer, "<|im_end|>");
    CHECK(tokenizer.eos() == eos);
    CHECK(tokenizer.eot() == eot);  // <|eot_id|> ranks before <|im_end|> and <|end_of_text|>
    CHECK(tokenizer.eom() == eom);
    CHECK(tokenizer.end_of_generation() == std::vector<Token>{eos, eot, eom, im_end});
    CHECK(tokenizer.is_end_of_generation(im_end));
    CHECK_FALSE(tokenizer.is_end_of_generation(token_of(tokenizer, "<|im_start|>")));
    CHECK_FALSE(tokenizer.is_end_of_generation(256));
    // A marker typed as normal text is a control token, as in llama.cpp: it
    // decodes to nothing and plain text does not produce it.
    CHECK(tokenizer.token_kind(im_end) == specdec::TokenKind::control);
    CHECK(tokenizer.token_text(im_end).empty());
    const std::vector<Token> plain = tokenizer.encode("<|im_end|>", false);
    CHECK(std::find(plain.begin(), plain.end(), im_end) == plain.end());
    CHECK(tokenizer.decode(plain) == "<|im_end|>");
}

TEST_CASE("The metadata's EOT id wins over the spellings; <|end|> does not end a harmony turn", "[text][tokenizer][eog]") {
    SECTION("eot_token_id") {
        // Id 262 is <|im_start|> here: odd, but the metadata decides.
        const specdec::test::LoadedTokenizer loaded(chat_vocabulary(kLlama3Specials, true, 262));
        CHECK(loaded.tokenizer.eot() == 262);
        CHECK(loaded.tokenizer.is_end_of_generation(262));
    }
    SECTION("harmony") {
        const specdec::test::LoadedTokenizer loaded(
            chat_vocabulary({{"<|startoftext|>", 3}, {"<|endoftext|>", 3}, {"<|end|>", 3}, {"<|return|>", 3},
                             {"<|call|>", 3}}));
        const Tokenizer& tokenizer = loaded.tokenizer;
        CHECK_FALSE(tokenizer.is_end_of_generation(token_of(tokenizer, "<|end|>")));
        CHECK(tokenizer.is_end_of_generation(token_of(tokenizer, "<|return|>")));
        CHECK(tokenizer.is_end_of_generation(token_of(tokenizer, "<|call|>")));
    }
    SECTION("<|end|> alone ends a turn") {
        const specdec::test::LoadedTokenizer loaded(chat_vocabulary({{"<s>", 3}, {"</s>", 3}, {"<|end|>", 3}}));
        CHECK(loaded.tokenizer.is_end_of_generation(258));
        CHECK(loaded.tokenizer.eot() == 258);
    }
}

TEST_CASE("Special tokens are parsed in the text only when asked", "[text][tokenizer][special]") {
    const specdec::test::LoadedTokenizer loaded(chat_vocabulary(kLlama3Specials));
    const Tokenizer& tokenizer = loaded.tokenizer;
    const Token start = token_of(tokenizer, "<|start_header_id|>"), end = token_of(tokenizer, "<|end_header_id|>"),
                eot = token_of(tokenizer, "<|eot_id|>"), user = token_of(tokenizer, "<|user|>");
    const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|user|>";
    const std::vector<Token> parsed = tokenizer.encode(text, true, false, SpecialTokens::parse);
    REQUIRE(parsed.size() >= 6);
    CHECK(parsed.front() == 256);  // BOS
    CHECK(parsed[1] == start);
    CHECK(std::count(parsed.begin(), parsed.end(), end) == 1);
    CHECK(std::count(parsed.begin(), parsed.end(), eot) == 1);
    CHECK(parsed.back() == user);
    // The text between the markers is the plain encoding of it.
    const std::vector<Token> user_word = tokenizer.encode("user", false);
    CHECK(std::vector<Token>(parsed.begin() + 2, parsed.begin() + 2 + static_cast<std::ptrdiff_t>(user_word.size())) ==
          user_word);
    // Without parsing, control spellings stay text (user-defined tokens are still matched).
    const std::vector<Token> as_text = tokenizer.encode(text, true, false, SpecialTokens::as_text);
    CHECK(std::count(as_text.begin(), as_text.end(), start) == 0);
    CHECK(std::count(as_text.begin(), as_text.end(), eot) == 0);
    CHECK(as_text.back() == user);
    CHECK(tokenizer.encode(text, true) == as_text);
}

TEST_CASE("SentencePiece: parsed special tokens are followed by a space prefix, as in llama.cpp",
          "[text][tokenizer][special]") {
    SPECDEC_REQUIRE_FIXTURE(path, "stories260K.gguf");
    const Tokenizer tokenizer = Tokenizer::from_gguf(specdec::gguf::File::open(path));
    const std::vector<Token> parsed = tokenizer.encode("Once</s>upon", true, false, SpecialTokens::parse);
    std::vector<Token> expected = tokenizer.encode("Once", true);
    expected.push_back(tokenizer.eos());
    const std::vector<Token> upon = tokenizer.encode("upon", false);  // " upon": the prefix again
    expected.insert(expected.end(), upon.begin(), upon.end());
    CHECK(parsed == expected);
    CHECK(tokenizer.token_piece(upon.front()).rfind("\xE2\x96\x81", 0) == 0);
    CHECK(tokenizer.end_of_generation() == std::vector<Token>{tokenizer.eos()});
    // As text, "</s>" is characters.
    const std::vector<Token> as_text = tokenizer.encode("Once</s>upon", true);
    CHECK(std::count(as_text.begin(), as_text.end(), tokenizer.eos()) == 0);
}
