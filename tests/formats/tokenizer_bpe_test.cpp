// GPT-2 byte-level BPE on a hand-made vocabulary with merge rules, written to
// GGUF with gguf::Writer; and the hand-written GPT-2 pre-tokenizer.
#include <cstdint>
#include <random>
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

constexpr const char* G = "\xC4\xA0";  // Ġ, the byte-level stand-in for a space

std::string byte_char(unsigned char byte) {
    std::string out;
    specdec::detail::append_utf8(out, specdec::detail::byte_to_unicode()[byte]);
    return out;
}

// Ids 0-255: the 256 byte-level characters in byte order; then merged pieces;
// then <|endoftext|> (control) and <|user|> (user-defined).
Writer gpt2_vocabulary(const std::vector<std::string>& merges, const std::vector<std::string>& merged_pieces) {
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (int byte = 0; byte < 256; ++byte) {
        tokens.push_back(byte_char(static_cast<unsigned char>(byte)));
        types.push_back(1);
    }
    for (const auto& piece : merged_pieces) {
        tokens.push_back(piece);
        types.push_back(1);
    }
    tokens.push_back("<|endoftext|>");
    types.push_back(3);
    tokens.push_back("<|user|>");
    types.push_back(4);
    Writer writer;
    writer.add_string("tokenizer.ggml.model", "gpt2");
    writer.add_string_array("tokenizer.ggml.tokens", tokens);
    writer.add_int32_array("tokenizer.ggml.token_type", types);
    writer.add_string_array("tokenizer.ggml.merges", merges);
    const auto end_of_text = static_cast<std::uint32_t>(tokens.size() - 2);
    writer.add_uint32("tokenizer.ggml.bos_token_id", end_of_text);
    writer.add_uint32("tokenizer.ggml.eos_token_id", end_of_text);
    return writer;
}

Writer hello_world_vocabulary() {
    const std::string Gw = std::string(G) + "w";
    const std::string Gwor = Gw + "or";
    return gpt2_vocabulary({"h e", "l l", "he ll", "hell o", std::string(G) + " w", "o r", Gw + " or", "l d",
                            Gwor + " ld", "l o", "x y"},
                           {"he", "ll", "hell", "hello", Gw, "or", Gwor, "ld", Gwor + "ld", "lo"});
}


std::vector<std::string> words(std::string_view text) {
    std::vector<std::string> out;
    for (const auto word : specdec::detail::gpt2_pretokenize(text)) out.emplace_back(word);
    return out;
}

}  // namespace

TEST_CASE("The GPT-2 pre-tokenizer splits like GPT-2's regular expression", "[tokenizer][bpe]") {
    using V = std::vector<std::string>;
    CHECK(words("Hello world, it's 2024!  ok\n\nyes") ==
          V{"Hello", " world", ",", " it", "'s", " 2024", "!", " ", " ok", "\n", "\n", "yes"});
    CHECK(words("don't we'll they're I've I'm he'd") ==
          V{"don", "'t", " we", "'ll", " they", "'re", " I", "'ve", " I", "'m", " he", "'d"});
    CHECK(words("IT'S") == V{"IT", "'", "S"});  // contractions are lower case only
    CHECK(words("abc123def") == V{"abc", "123", "def"});
    CHECK(words("a...b !?c") == V{"a", "...", "b", " !?", "c"});
    CHECK(words("trailing  ") == V{"trailing", "  "});
    CHECK(words("   ") == V{"   "});
    CHECK(words(" ") == V{" "});
    CHECK(words("a \tb") == V{"a", " ", "\t", "b"});
    CHECK(words("") == V{});
    CHECK(words("na\xC3\xAFve caf\xC3\xA9") == V{"na\xC3\xAFve", " caf\xC3\xA9"});             // naïve café
    CHECK(words("\xE6\x97\xA5\xE6\x9C\xAC 42\xE2\x82\xAC") == V{"\xE6\x97\xA5\xE6\x9C\xAC", " 42", "\xE2\x82\xAC"});  // 日本 42€
    CHECK(words("x\xFF\xFEy") == V{"x", "\xFF\xFE", "y"});  // invalid bytes count as punctuation
}

TEST_CASE("Byte-level BPE merges by rule rank and maps bytes to printable characters", "[tokenizer][bpe]") {
    const specdec::test::LoadedTokenizer loaded(hello_world_vocabulary());
    const Tokenizer& tokenizer = loaded.tokenizer;
    const std::string Gworld = std::string(G) + "world";

    CHECK(tokenizer.model() == specdec::TokenizerModel::byte_level_bpe);
    CHECK_FALSE(tokenizer.add_bos_by_default());
    CHECK_FALSE(tokenizer.add_space_prefix());
    CHECK(loaded.pieces("hello world") == std::vector<std::string>{"hello", Gworld});
    CHECK(loaded.pieces("llo") == std::vector<std::string>{"ll", "o"});  // "l l" ranks before "l o"
    CHECK(loaded.pieces("lol") == std::vector<std::string>{"lo", "l"});
    // "x y" is a rule but "xy" no token: the symbols fall back to their characters.
    CHECK(loaded.pieces("xy") == std::vector<std::string>{"x", "y"});
    CHECK(loaded.pieces("hello\n") == std::vector<std::string>{"hello", byte_char('\n')});
    CHECK(tokenizer.decode(tokenizer.encode("hello world", false)) == "hello world");
    CHECK(tokenizer.token_text(*tokenizer.find_token(Gworld)) == " world");
}

TEST_CASE("Byte-level BPE round-trips any bytes, ASCII or multi-byte UTF-8", "[tokenizer][bpe]") {
    const specdec::test::LoadedTokenizer loaded(hello_world_vocabulary());
    const Tokenizer& tokenizer = loaded.tokenizer;
    const std::vector<std::string> texts{
        "hello world",
        "  hello   world  \n\n\tend",
        "Caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82 ok",
        "it's 3.14159, isn't it?",
        "invalid \xFF\xC3 bytes \x80",
        std::string("\0\x01\x7F", 3),
    };
    for (const std::string& text : texts) {
        INFO("text: " << text);
        CHECK(tokenizer.decode(tokenizer.encode(text, false)) == text);
        CHECK(tokenizer.decode(tokenizer.encode(text, true)) == text);  // BOS decodes to nothing, no space is dropped
    }
    std::mt19937 rng(12345);
    for (int trial = 0; trial < 200; ++trial) {
        std::string text(rng() % 40, '\0');
        for (auto& c : text) c = static_cast<char>(rng() % 256);
        CHECK(tokenizer.decode(tokenizer.encode(text, false)) == text);
    }
}

TEST_CASE("Byte-level BPE control tokens decode to nothing and user-defined tokens are literal", "[tokenizer][bpe]") {
    const specdec::test::LoadedTokenizer loaded(hello_world_vocabulary());
    const Tokenizer& tokenizer = loaded.tokenizer;
    const Token end_of_text = tokenizer.eos();
    CHECK(tokenizer.bos() == end_of_text);
    CHECK(tokenizer.token_piece(end_of_text) == "<|endoftext|>");
    const auto hello = tokenizer.encode("hello", false);
    std::vector<Token> with_control{end_of_text};
    with_control.insert(with_control.end(), hello.begin(), hello.end());
    with_control.push_back(end_of_text);
    CHECK(tokenizer.decode(with_control) == "hello");
    // Control text typed by a user stays text.
    CHECK(tokenizer.encode("<|endoftext|>", false).size() > 1);

    const Token user = *tokenizer.find_token("<|user|>");
    CHECK(tokenizer.token_kind(user) == TokenKind::user_defined);
    const auto tokens = tokenizer.encode("hello<|user|>hello", false);
    CHECK(tokens == std::vector<Token>{hello[0], user, hello[0]});
    CHECK(tokenizer.decode(tokens) == "hello<|user|>hello");
}

TEST_CASE("The stream decoder joins a character split across byte-level tokens", "[tokenizer][bpe]") {
    const specdec::test::LoadedTokenizer loaded(hello_world_vocabulary());
    const Tokenizer& tokenizer = loaded.tokenizer;
    // é = C3 A9: two byte-level characters, Ã and ©, two tokens.
    const auto tokens = tokenizer.encode("\xC3\xA9!", false);
    REQUIRE(tokens == std::vector<Token>{0xC3, 0xA9, '!'});
    Tokenizer::StreamDecoder stream(tokenizer);
    CHECK(stream.push(tokens[0]).empty());
    CHECK(stream.push(tokens[1]) == "\xC3\xA9");
    CHECK(stream.push(tokens[2]) == "!");
    CHECK(stream.flush().empty());

    // Streaming any tokenization gives back decode() of it.
    const std::string text = "hello \xF0\x9F\x99\x82 world \xE6\x97\xA5 \xFF";
    const auto all = tokenizer.encode(text, true);
    Tokenizer::StreamDecoder again(tokenizer);
    std::string streamed;
    for (const Token token : all) streamed += again.push(token);
    streamed += again.flush();
    CHECK(streamed == tokenizer.decode(all));
    CHECK(streamed == text);
}

TEST_CASE("Byte-level BPE needs well-formed merge rules", "[tokenizer][bpe][errors]") {
    const specdec::test::TempDir dir;
    const auto path = dir.file("bad.gguf");
    SECTION("missing merges") {
        Writer writer;
        writer.add_string("tokenizer.ggml.model", "gpt2");
        writer.add_string_array("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
        CHECK(tokenizer_error(writer, dir, "bad.gguf") ==
              "missing metadata key 'tokenizer.ggml.merges' in GGUF file '" + path.string() + "'");
    }
    SECTION("a rule without a space") {
        CHECK(tokenizer_error(gpt2_vocabulary({"ab"}, {}), dir, "bad.gguf") ==
              "tokenizer: merge rule 0 'ab' is not 'left right' in GGUF file '" + path.string() + "'");
    }
}
