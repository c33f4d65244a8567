// The incremental detokenizer: streamed pieces add up to the full
// detokenization on every fixture tokenizer, no piece ends inside a UTF-8
// character, and each token costs a bounded amount of work.
#include <cstddef>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/text/detokenizer.hpp"
#include "support/catch.hpp"
#include "support/skip.hpp"
#include "support/test_random.hpp"
#include "text/text_test_support.hpp"

using specdec::Token;
using specdec::Tokenizer;
using specdec::text::Detokenizer;
using specdec::test::TestRandom;

static_assert(specdec::text::TextVocabulary<Tokenizer>);
static_assert(specdec::text::TextVocabulary<specdec::test::ListVocabulary>);

namespace {

// Random text with ASCII, spaces, newlines and 2-, 3- and 4-byte characters,
// so that SentencePiece vocabularies fall back to <0xNN> byte tokens.
std::string random_text(TestRandom& random) {
    static const char* const pieces[] = {"a", "b", "e", "t", " ", " the", "\n", "Once", ".", ",", "\xC3\xA9",
                                         "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xE4\xB8\xAD", "  "};
    std::string text;
    const std::size_t count = 1 + random.below(12);
    for (std::size_t i = 0; i < count; ++i) text += pieces[random.below(std::size(pieces))];
    return text;
}

// A test sequence: random ids (any token, BOS and control tokens included),
// an encoded random text, or a mix with byte tokens inserted mid-character.
std::vector<Token> random_sequence(const Tokenizer& tokenizer, TestRandom& random) {
    std::vector<Token> tokens;
    const std::size_t kind = random.below(3);
    if (kind == 0) {
        const std::size_t count = random.below(40);
        for (std::size_t i = 0; i < count; ++i) tokens.push_back(static_cast<Token>(random.below(tokenizer.vocab_size())));
    } else {
        tokens = tokenizer.encode(random_text(random), random.below(2) == 0);
        if (kind == 2 && !tokens.empty()) {
            const std::size_t at = random.below(tokens.size());
            tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                          static_cast<Token>(random.below(tokenizer.vocab_size())));
        }
    }
    return tokens;
}

}  // namespace

TEST_CASE("Streamed pieces concatenate to the full detokenization on every fixture tokenizer", "[text][detokenizer]") {
    std::vector<std::string> missing;
    const auto tokenizers = specdec::test::fixture_tokenizers(missing);
    for (const std::string& name : missing) WARN("fixture " << name << " not found: not tested");
    if (tokenizers.empty()) SPECDEC_SKIP("no fixture tokenizer found");
    for (const auto& [name, tokenizer] : tokenizers) {
        INFO(name);
        TestRandom random{0x5EED0000u + tokenizer.vocab_size()};
        std::size_t split_characters = 0, byte_tokens = 0;
        for (int c = 0; c < 1000; ++c) {
            const std::vector<Token> tokens = random_sequence(tokenizer, random);
            const std::string expected = tokenizer.decode(tokens);
            Detokenizer<Tokenizer> stream(tokenizer);
            std::string streamed;
            const bool whole_valid = specdec::test::valid_utf8(expected);
            for (const Token token : tokens) {
                const std::size_t before = stream.bytes_copied();
                const std::string piece(stream.push(token));
                // The work of one token: its text and the held bytes (< 4).
                CHECK(stream.bytes_copied() - before <= tokenizer.token_text(token).size() + 3);
                CHECK(stream.held_bytes() <= 3);
                if (stream.held_bytes() > 0) ++split_characters;
                if (tokenizer.token_kind(token) == specdec::TokenKind::byte) ++byte_tokens;
                if (whole_valid) CHECK(specdec::test::valid_utf8(piece));
                streamed += piece;
            }
            streamed += stream.flush();
            REQUIRE(streamed == expected);
        }
        // The cases exercised what they claim: characters split across tokens
        // (and, for SentencePiece, byte-fallback tokens).
        CHECK(split_characters > 50);
        if (tokenizer.model() == specdec::TokenizerModel::sentencepiece) CHECK(byte_tokens > 100);
    }
}

TEST_CASE("A generated continuation streams as decode() of the whole sequence prints it", "[text][detokenizer]") {
    const specdec::test::ListVocabulary vocab({"<s>", " Once", " upon", "\xC3", "\xA9", ""}, 0, true);
    Detokenizer<specdec::test::ListVocabulary> stream(vocab);
    // After a prompt of BOS and a control token, the first word loses its space.
    const std::vector<Token> prompt = {0, 5};
    stream.continue_after(prompt);
    CHECK(stream.push(1) == "Once");
    CHECK(stream.push(2) == " upon");
    CHECK(stream.push(3).empty());  // the first byte of "é" is held
    CHECK(stream.held_bytes() == 1);
    CHECK(stream.push(4) == "\xC3\xA9");
    // A prompt ending in text keeps the space.
    stream.continue_after(std::vector<Token>{0, 1});
    CHECK(stream.push(2) == " upon");
    // A held byte that is never completed comes out at flush.
    CHECK(stream.push(3).empty());
    CHECK(stream.flush() == "\xC3");
    CHECK_THROWS_AS(stream.push(99), specdec::Error);
}

TEST_CASE("Each token's detokenization costs the same at the end of a long stream as at its start",
          "[text][detokenizer]") {
    // Work is counted in bytes copied: over a 100,000-token stream the work of
    // the last 1,000 tokens equals that of the first 1,000 of the same tokens.
    std::vector<std::string> texts;
    for (int i = 0; i < 64; ++i) texts.push_back(std::string(1 + i % 5, static_cast<char>('a' + i % 26)));
    texts.push_back("\xE2");
    texts.push_back("\x82");
    texts.push_back("\xAC");
    const specdec::test::ListVocabulary vocab(texts);
    TestRandom random{7};
    std::vector<Token> block;
    for (int i = 0; i < 1000; ++i) block.push_back(static_cast<Token>(random.below(texts.size())));
    Detokenizer<specdec::test::ListVocabulary> stream(vocab);
    for (const Token t : block) (void)stream.push(t);
    const std::size_t first = stream.bytes_copied();
    for (int repeat = 0; repeat < 98; ++repeat)
        for (const Token t : block) (void)stream.push(t);
    (void)stream.flush();
    const std::size_t before_last = stream.bytes_copied();
    for (const Token t : block) (void)stream.push(t);
    const std::size_t last = stream.bytes_copied() - before_last;
    CHECK(last <= first + 3);
    CHECK(last + 3 >= first);
}
