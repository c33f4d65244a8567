// The SentencePiece-style tokenizer on tiny hand-made vocabularies, written
// to GGUF with gguf::Writer, so each rule is visible in a few tokens.
#include <cstdint>
#include <string>
#include <vector>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"

using specdec::Token;
using specdec::TokenKind;
using specdec::Tokenizer;
using specdec::gguf::Writer;
using specdec::test::tokenizer_error;

namespace {

constexpr const char* space = "\xE2\x96\x81";  // ▁

struct Entry {
    std::string piece;
    float score;
    TokenKind kind = TokenKind::normal;
};

// <unk> <s> </s>, then `entries`, then (optionally) the 256 byte tokens.
Writer spm_vocabulary(const std::vector<Entry>& entries, bool byte_tokens) {
    std::vector<std::string> pieces{"<unk>", "<s>", "</s>"};
    std::vector<float> scores{0, 0, 0};
    std::vector<std::int32_t> types{2, 3, 3};
    for (const Entry& entry : entries) {
        pieces.push_back(entry.piece);
        scores.push_back(entry.score);
        types.push_back(static_cast<std::int32_t>(entry.kind));
    }
    if (byte_tokens) {
        static constexpr char hex[] = "0123456789ABCDEF";
        for (int byte = 0; byte < 256; ++byte) {
            pieces.push_back(std::string("<0x") + hex[byte >> 4] + hex[byte & 15] + ">");
            scores.push_back(0);
            types.push_back(6);
        }
    }
    Writer writer;
    writer.add_string("tokenizer.ggml.model", "llama");
    writer.add_string_array("tokenizer.ggml.tokens", pieces);
    writer.add_float32_array("tokenizer.ggml.scores", scores);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1);
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2);
    writer.add_uint32("tokenizer.ggml.unknown_token_id", 0);
    return writer;
}


}  // namespace

TEST_CASE("SentencePiece merges the best-scoring adjacent pair first", "[tokenizer][spm]") {
    SECTION("bc outscores ab") {
        Writer writer = spm_vocabulary({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}}, false);
        writer.add_bool("tokenizer.ggml.add_space_prefix", false);
        const specdec::test::LoadedTokenizer loaded(writer);
        CHECK(loaded.pieces("abc") == std::vector<std::string>{"a", "bc"});
    }
    SECTION("ab outscores bc") {
        Writer writer = spm_vocabulary({{"a", -10}, {"b", -10}, {"c", -10}, {"ab", -1}, {"bc", -2}}, false);
        writer.add_bool("tokenizer.ggml.add_space_prefix", false);
        const specdec::test::LoadedTokenizer loaded(writer);
        CHECK(loaded.pieces("abc") == std::vector<std::string>{"ab", "c"});
    }
    SECTION("equal scores merge leftmost first, and merges continue on merged pieces") {
        Writer writer = spm_vocabulary({{"a", -10}, {"aa", -1}, {"aaaa", -0.5f}}, false);
        writer.add_bool("tokenizer.ggml.add_space_prefix", false);
        const specdec::test::LoadedTokenizer loaded(writer);
        CHECK(loaded.pieces("aaa") == std::vector<std::string>{"aa", "a"});
        CHECK(loaded.pieces("aaaaa") == std::vector<std::string>{"aaaa", "a"});
    }
}

TEST_CASE("SentencePiece turns spaces into U+2581 and adds a space prefix unless told not to", "[tokenizer][spm]") {
    const std::string word = std::string(space) + "hi";
    const std::vector<Entry> entries{{space, -5}, {"h", -5}, {"i", -5}, {"hi", -2}, {word, -1}};

    const specdec::test::LoadedTokenizer with_prefix(spm_vocabulary(entries, true));
    CHECK(with_prefix.tokenizer.add_space_prefix());
    CHECK(with_prefix.pieces("hi hi") == std::vector<std::string>{word, word});
    CHECK(with_prefix.pieces("hi", true) == std::vector<std::string>{"<s>", word});
    CHECK(with_prefix.tokenizer.decode(with_prefix.tokenizer.encode("hi hi", true)) == "hi hi");
    CHECK(with_prefix.tokenizer.decode(with_prefix.tokenizer.encode("hi hi", false)) == " hi hi");
    CHECK(with_prefix.pieces("").empty());
    CHECK(with_prefix.pieces("", true) == std::vector<std::string>{"<s>"});

    Writer writer = spm_vocabulary(entries, true);
    writer.add_bool("tokenizer.ggml.add_space_prefix", false);
    const specdec::test::LoadedTokenizer without_prefix(writer);
    CHECK_FALSE(without_prefix.tokenizer.add_space_prefix());
    CHECK(without_prefix.pieces("hi hi") == std::vector<std::string>{"hi", word});
    // Without a prefix nothing is dropped after BOS either.
    CHECK(without_prefix.tokenizer.decode(without_prefix.tokenizer.encode(" hi", true)) == " hi");
    CHECK(without_prefix.tokenizer.decode(without_prefix.tokenizer.encode("hi hi", true)) == "hi hi");
}

TEST_CASE("SentencePiece falls back to byte tokens and decodes them to the original bytes", "[tokenizer][spm]") {
    const specdec::test::LoadedTokenizer loaded(spm_vocabulary({{space, -1}, {"a", -1}}, true));
    // ž (C5 BE) is no piece: two byte tokens.
    CHECK(loaded.pieces("a\xC5\xBE") == std::vector<std::string>{space, "a", "<0xC5>", "<0xBE>"});
    const std::vector<std::string> texts{"a", "\xC5\xBE\xC5\xBE", "\xF0\x9F\x98\x80 a \xE2\x82\xAC", "\t\n\r",
                                         std::string("nul\0byte", 8), "\xC0\xAF overlong", "\xED\xA0\x80 surrogate"};
    for (const std::string& text : texts) {
        INFO("text: " << text);
        CHECK(loaded.tokenizer.decode(loaded.tokenizer.encode(text, true)) == text);
    }

    Tokenizer::StreamDecoder stream(loaded.tokenizer);
    std::string streamed;
    const std::string text = "a \xE2\x82\xAC\xF0\x9F\x98\x80 a";  // € 😀
    const auto tokens = loaded.tokenizer.encode(text, true);
    for (const Token token : tokens) {
        const std::string piece = stream.push(token);
        // Every chunk the stream returns is complete UTF-8 on its own.
        for (std::size_t i = 0; i < piece.size();) {
            const auto c = specdec::detail::next_utf8_char(piece, i);
            CHECK(c.valid);
            i += c.length;
        }
        streamed += piece;
    }
    streamed += stream.flush();
    CHECK(streamed == text);
}

TEST_CASE("SentencePiece without byte tokens uses the unknown token", "[tokenizer][spm]") {
    const specdec::test::LoadedTokenizer loaded(spm_vocabulary({{space, -1}, {"a", -1}}, false));
    const auto tokens = loaded.tokenizer.encode("a\xC5\xBE", false);
    CHECK(tokens == std::vector<Token>{3, 4, 0});
    CHECK(loaded.tokenizer.unknown() == 0);
    CHECK(loaded.tokenizer.decode(tokens) == " a\xE2\x96\x85");  // llama.cpp shows <unk> as U+2585
}

TEST_CASE("User-defined tokens are matched literally before SentencePiece runs", "[tokenizer][spm]") {
    const specdec::test::LoadedTokenizer loaded(spm_vocabulary(
        {{space, -1}, {"a", -1}, {"<tool>", 0, TokenKind::user_defined}, {"<to", 0, TokenKind::user_defined}}, true));
    CHECK(loaded.pieces("a<tool>a") == std::vector<std::string>{space, "a", "<tool>", "a"});
    CHECK(loaded.pieces("<tool>") == std::vector<std::string>{"<tool>"});
    CHECK(loaded.pieces("<toa") == std::vector<std::string>{"<to", "a"});
    CHECK(loaded.tokenizer.decode(loaded.tokenizer.encode("<tool>a <tool>", true)) == "<tool>a <tool>");
    // Control pieces are not matched in text.
    CHECK(loaded.pieces("<s>").size() > 1);
}

TEST_CASE("Missing tokenizer keys fall back to llama.cpp defaults and broken tokenizer metadata is an Error", "[tokenizer][spm][errors]") {
    SECTION("defaults without scores, types or special ids") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        const std::vector<std::string> pieces{"<unk>", "<s>", "</s>", "<0x41>", space, "b"};
        writer.add_string_array("tokenizer.ggml.tokens", pieces);
        const specdec::test::LoadedTokenizer loaded(writer);
        CHECK(loaded.tokenizer.bos() == 1);
        CHECK(loaded.tokenizer.eos() == 2);
        CHECK(loaded.tokenizer.unknown() == 0);
        CHECK(loaded.tokenizer.token_kind(3) == TokenKind::byte);  // recognised by its spelling
        CHECK(loaded.tokenizer.encode("bA") == std::vector<Token>{1, 4, 5, 3});
        CHECK(loaded.tokenizer.decode(loaded.tokenizer.encode("bA")) == "bA");
    }
    SECTION("a missing model key") {
        Writer writer;
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"a"});
        CHECK(tokenizer_error(writer).find("missing tokenizer.ggml.model") != std::string::npos);
    }
    SECTION("an unsupported model") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "bert");
        CHECK(tokenizer_error(writer).find("unsupported tokenizer model 'bert'") != std::string::npos);
    }
    SECTION("missing tokens") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        CHECK(tokenizer_error(writer).find("missing metadata key 'tokenizer.ggml.tokens'") != std::string::npos);
    }
    SECTION("scores of the wrong length") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>"});
        writer.add_float32_array("tokenizer.ggml.scores", std::vector<float>{0, 0});
        CHECK(tokenizer_error(writer).find("tokenizer.ggml.scores has 2 entries for 3 tokens") != std::string::npos);
    }
    SECTION("an invalid token type") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>"});
        writer.add_int32_array("tokenizer.ggml.token_type", std::vector<std::int32_t>{2, 3, 9});
        CHECK(tokenizer_error(writer).find("invalid token type 9 of token 2") != std::string::npos);
    }
    SECTION("a byte token not spelled <0xXX>") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>", "<0xZZ>"});
        writer.add_int32_array("tokenizer.ggml.token_type", std::vector<std::int32_t>{2, 3, 3, 6});
        CHECK(tokenizer_error(writer).find("byte token 3 is not spelled <0xXX>") != std::string::npos);
    }
    SECTION("a special token id out of range") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "llama");
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "<s>", "</s>"});
        writer.add_uint32("tokenizer.ggml.eos_token_id", 3);
        const std::string message = tokenizer_error(writer);
        CHECK(message.find("tokenizer.ggml.eos_token_id = 3 is out of range") != std::string::npos);
        CHECK(message.find("vocab.gguf") != std::string::npos);
    }
}

TEST_CASE("A vocabulary without BOS refuses add_bos but encodes without it", "[tokenizer][spm]") {
    Writer writer;
    writer.add_string("tokenizer.ggml.model", "llama");
    writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"<unk>", "a", space});
    writer.add_uint32("tokenizer.ggml.bos_token_id", 0xFFFFFFFFu);  // llama.cpp's "none"
    writer.add_uint32("tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
    const specdec::test::LoadedTokenizer loaded(writer);
    CHECK_FALSE(loaded.tokenizer.has_bos());
    CHECK_FALSE(loaded.tokenizer.has_eos());
    CHECK(loaded.tokenizer.bos() == -1);
    CHECK_THROWS_AS(loaded.tokenizer.encode("a", true), specdec::Error);
    CHECK(loaded.tokenizer.encode("a", false) == std::vector<Token>{2, 1});
}
