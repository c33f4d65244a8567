// The SentencePiece-style tokenizer on the real stories260K vocabulary,
// against the llama.cpp reference outputs in stories260K.reference.json.
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format_test_support.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

using specdec::Token;
using specdec::Tokenizer;
using specdec::gguf::File;

namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
    std::ifstream stream(path);
    return nlohmann::json::parse(stream);
}

// Byte tokens <0x00>..<0xFF> follow <unk>, <s>, </s> in this vocabulary.
Token byte_token(unsigned char byte) { return 3 + byte; }

}  // namespace

TEST_CASE("The stories260K tokenizer reproduces llama.cpp's prompt ids and greedy text", "[tokenizer][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(reference_path, "stories260K.reference.json");
    const File file = File::open(model_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    const nlohmann::json reference = read_json(reference_path);

    CHECK(tokenizer.vocab_size() == 512);
    CHECK(tokenizer.bos() == 1);
    CHECK(tokenizer.eos() == 2);
    CHECK(tokenizer.model() == specdec::TokenizerModel::sentencepiece);
    CHECK(tokenizer.add_bos_by_default());

    const auto prompt = reference.at("prompt").get<std::string>();
    const auto prompt_ids = reference.at("prompt_ids").get<std::vector<Token>>();
    const auto greedy_ids = reference.at("greedy_ids").get<std::vector<Token>>();
    const auto greedy_text = reference.at("greedy_text").get<std::string>();
    REQUIRE(reference.at("add_bos").get<bool>());

    CHECK(tokenizer.encode(prompt, true) == prompt_ids);
    CHECK(tokenizer.encode(prompt, false) == std::vector<Token>(prompt_ids.begin() + 1, prompt_ids.end()));
    CHECK(tokenizer.token_piece(prompt_ids[1]) == "\xE2\x96\x81Once");

    // The continuation starts with ",": no space is added or lost at its start.
    REQUIRE(greedy_text.rfind(", there was", 0) == 0);
    CHECK(tokenizer.decode(greedy_ids) == greedy_text);
    // After BOS the space prefix of the first word is dropped: the prompt comes back exactly.
    CHECK(tokenizer.decode(prompt_ids) == prompt);
    std::vector<Token> all = prompt_ids;
    all.insert(all.end(), greedy_ids.begin(), greedy_ids.end());
    CHECK(tokenizer.decode(all) == prompt + greedy_text);

    Tokenizer::StreamDecoder stream(tokenizer);
    std::string streamed;
    for (const Token token : all) streamed += stream.push(token);
    streamed += stream.flush();
    CHECK(streamed == prompt + greedy_text);

    // Re-encoding the generated story gives ids that decode to it again.
    CHECK(tokenizer.decode(tokenizer.encode(prompt + greedy_text)) == prompt + greedy_text);
}

TEST_CASE("The stories260K tokenizer round-trips ASCII and multi-byte UTF-8 through byte fallback", "[tokenizer][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    const File file = File::open(model_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);

    const std::vector<std::string> texts{
        "",
        "Once upon a time",
        "The little dog ran to the park. It was happy!",
        "  two leading spaces, trailing too  ",
        "tabs\tand\nnew lines\n\n",
        "Caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x93 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82",  // Café naïve – 日本語 🙂
        "bytes that are not UTF-8: \xFF\xFE\xC3",
        "<s> and </s> in text are not control tokens",
    };
    for (const std::string& text : texts) {
        INFO("text: " << text);
        const std::vector<Token> tokens = tokenizer.encode(text, true);
        CHECK(tokenizer.decode(tokens) == text);
        for (std::size_t i = 1; i < tokens.size(); ++i) {
            CHECK(tokens[i] != tokenizer.bos());
            CHECK(tokens[i] != tokenizer.eos());
        }
    }

    // "é" is a piece of this vocabulary, "ç" is not: it falls back to its two UTF-8 bytes.
    const std::vector<Token> e_acute = tokenizer.encode("\xC3\xA9", false);
    REQUIRE(e_acute.size() == 2);
    CHECK(tokenizer.token_piece(e_acute[0]) == "\xE2\x96\x81");
    CHECK(tokenizer.token_piece(e_acute[1]) == "\xC3\xA9");
    const std::vector<Token> c_cedilla = tokenizer.encode("\xC3\xA7", false);
    REQUIRE(c_cedilla.size() == 3);
    CHECK(c_cedilla[1] == byte_token(0xC3));
    CHECK(c_cedilla[2] == byte_token(0xA7));
    CHECK(tokenizer.token_piece(byte_token(0x0A)) == "<0x0A>");
    CHECK(tokenizer.decode(std::vector<Token>{byte_token(0x0A)}) == "\n");
}

TEST_CASE("Control tokens decode to nothing and bad ids are errors", "[tokenizer][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    const File file = File::open(model_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);

    const std::vector<Token> once = tokenizer.encode("Once", false);
    REQUIRE(once.size() == 1);
    CHECK(tokenizer.decode(std::vector<Token>{1, once[0], 2}) == "Once");
    CHECK(tokenizer.decode(std::vector<Token>{once[0]}) == " Once");  // no BOS: the space is text
    CHECK(tokenizer.decode(std::vector<Token>{1, 1, once[0]}) == "Once");
    CHECK(tokenizer.decode(std::vector<Token>{2}).empty());
    CHECK(tokenizer.token_text(1).empty());
    CHECK(tokenizer.token_kind(1) == specdec::TokenKind::control);
    CHECK(tokenizer.token_kind(byte_token(0x41)) == specdec::TokenKind::byte);

    CHECK_THROWS_AS(tokenizer.decode(std::vector<Token>{512}), specdec::Error);
    CHECK_THROWS_AS(tokenizer.decode(std::vector<Token>{-1}), specdec::Error);
    CHECK_THROWS_AS(tokenizer.token_piece(100000), specdec::Error);
}

TEST_CASE("The stream decoder holds back a character split across byte tokens", "[tokenizer][fixture]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    const File file = File::open(model_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);

    const std::vector<Token> once = tokenizer.encode("Once", false);
    Tokenizer::StreamDecoder stream(tokenizer);
    CHECK(stream.push(1).empty());
    CHECK(stream.push(once[0]) == "Once");
    // 🙂 = F0 9F 99 82: nothing comes out until its fourth byte arrives.
    CHECK(stream.push(byte_token(0xF0)).empty());
    CHECK(stream.push(byte_token(0x9F)).empty());
    CHECK(stream.push(byte_token(0x99)).empty());
    CHECK(stream.push(byte_token(0x82)) == "\xF0\x9F\x99\x82");
    // ç = C3 A7.
    CHECK(stream.push(byte_token(0xC3)).empty());
    CHECK(stream.push(byte_token(0xA7)) == "\xC3\xA7");
    // A stray continuation byte can never become valid: it is not held.
    CHECK(stream.push(byte_token(0x80)) == "\x80");
    // An incomplete character at the end comes out of flush().
    CHECK(stream.push(byte_token(0xE6)).empty());
    CHECK(stream.push(byte_token(0x97)).empty());
    CHECK(stream.flush() == "\xE6\x97");
    CHECK(stream.flush().empty());
}

TEST_CASE("Random byte strings round-trip through the stories260K tokenizer", "[tokenizer][fixture][fuzz]") {
    SPECDEC_REQUIRE_FIXTURE(model_path, "stories260K.gguf");
    const File file = File::open(model_path);
    const Tokenizer tokenizer = Tokenizer::from_gguf(file);
    std::mt19937 rng(4242);
    // Mostly text-like characters with some raw bytes, so that merges and byte fallback mix.
    const std::string alphabet = "aeiou tnrsl.,!\n";
    for (int trial = 0; trial < 300; ++trial) {
        std::string text(rng() % 60, '\0');
        for (auto& c : text) {
            c = rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
        }
        INFO("trial " << trial);
        const auto tokens = tokenizer.encode(text, true);
        CHECK(tokenizer.decode(tokens) == text);
        Tokenizer::StreamDecoder stream(tokenizer);
        std::string streamed;
        for (const Token token : tokens) streamed += stream.push(token);
        CHECK(streamed + stream.flush() == text);
    }
}
