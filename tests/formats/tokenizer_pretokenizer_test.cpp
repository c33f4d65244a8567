// Byte-level BPE with the pre-tokenizers tokenizer.ggml.pre selects (GPT-2,
// Llama 3's "llama-bpe", "qwen2"), checked id for id against Hugging Face
// `tokenizers` on multilingual, code, emoji and whitespace strings. The
// vocabularies are small BPE models trained with `tokenizers` on those regexes
// (scripts/fixtures/make_arch_fixtures.py), stored in the committed
// architecture fixtures with the expected ids in tokenizer_cases.json.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "specdec/formats/unicode_categories.hpp"
#include "support/catch.hpp"
#include "support/skip.hpp"

namespace {

using specdec::Token;
using specdec::Tokenizer;

std::filesystem::path repo_fixtures() { return std::filesystem::path(SPECDEC_REPO_FIXTURES); }

std::vector<std::string> words(std::string_view text, specdec::detail::BpePreTokenizer rule) {
    std::vector<std::string> out;
    for (const auto word : specdec::detail::bpe_pretokenize(text, rule)) out.emplace_back(word);
    return out;
}

}  // namespace

TEST_CASE("token ids equal Hugging Face tokenizers' for every pre-tokenizer on the whole string set", "[tokenizer][fixture]") {
    const std::filesystem::path cases_path = repo_fixtures() / "tokenizer_cases.json";
    if (!std::filesystem::exists(cases_path)) {
        SPECDEC_SKIP("fixture " << cases_path.string() << " not found");
    }
    const auto cases = nlohmann::json::parse(std::ifstream(cases_path));
    std::size_t compared = 0;
    for (const auto& [name, entry] : cases.items()) {
        const std::filesystem::path gguf_path = repo_fixtures() / (name + "-f32.gguf");
        if (!std::filesystem::exists(gguf_path)) SPECDEC_SKIP("fixture " << gguf_path.string() << " not found");
        const auto file = specdec::gguf::File::open(gguf_path);
        const Tokenizer tokenizer = Tokenizer::from_gguf(file);
        std::size_t agree = 0;
        for (const auto& c : entry.at("cases")) {
            const std::string text = c.at("text").get<std::string>();
            const std::vector<Token> expected = c.at("ids").get<std::vector<Token>>();
            const std::vector<Token> actual = tokenizer.encode(text, false);
            INFO(name << " (pre " << entry.at("pre").dump() << "): \"" << text << "\"");
            CHECK(actual == expected);
            CHECK(tokenizer.decode(actual) == text);
            agree += actual == expected;
            ++compared;
        }
        INFO(name << ": " << agree << " of " << entry.at("cases").size() << " strings agree");
        CHECK(agree == entry.at("cases").size());
    }
    CHECK(compared > 0);
}

TEST_CASE("BOS and EOS follow the file's add_bos_token and add_eos_token unless asked explicitly", "[tokenizer][fixture]") {
    const auto llama3 = repo_fixtures() / "llama3-f32.gguf";
    const auto qwen2 = repo_fixtures() / "qwen2-f32.gguf";
    if (!std::filesystem::exists(llama3) || !std::filesystem::exists(qwen2)) {
        SPECDEC_SKIP("fixtures not found under " << repo_fixtures().string());
    }
    const auto l3_file = specdec::gguf::File::open(llama3);
    const Tokenizer l3 = Tokenizer::from_gguf(l3_file);
    CHECK(l3.add_bos_by_default());
    CHECK(l3.pre_tokenizer() == specdec::detail::BpePreTokenizer::llama3);
    const auto text = l3.encode("Hello", false);
    std::vector<Token> with_bos = {l3.bos()};
    with_bos.insert(with_bos.end(), text.begin(), text.end());
    CHECK(l3.encode("Hello") == with_bos);
    std::vector<Token> with_eos = text;
    with_eos.push_back(l3.eos());
    CHECK(l3.encode("Hello", false, true) == with_eos);

    const auto q2_file = specdec::gguf::File::open(qwen2);
    const Tokenizer q2 = Tokenizer::from_gguf(q2_file);
    CHECK_FALSE(q2.add_bos_by_default());
    CHECK(q2.pre_tokenizer() == specdec::detail::BpePreTokenizer::qwen2);
    CHECK(q2.encode("Hello") == q2.encode("Hello", false));

    // A file that asks for EOS gets it from encode(text).
    specdec::gguf::Writer writer;
    const std::vector<std::string> tokens = {"a", "b", "ab", "<s>", "</s>"};
    const std::vector<std::string> merges = {"a b"};
    writer.add_string("tokenizer.ggml.model", "gpt2").add_string("tokenizer.ggml.pre", "qwen2");
    writer.add_string_array("tokenizer.ggml.tokens", tokens).add_string_array("tokenizer.ggml.merges", merges);
    writer.add_uint32("tokenizer.ggml.bos_token_id", 3).add_uint32("tokenizer.ggml.eos_token_id", 4);
    writer.add_bool("tokenizer.ggml.add_bos_token", false).add_bool("tokenizer.ggml.add_eos_token", true);
    const auto path = std::filesystem::temp_directory_path() / "specdec-tokenizer-add-eos.gguf";
    writer.write(path);
    const auto eos_file = specdec::gguf::File::open(path);
    const Tokenizer eos = Tokenizer::from_gguf(eos_file);
    CHECK(eos.encode("ab") == std::vector<Token>{2, 4});
    std::filesystem::remove(path);
}

TEST_CASE("an unsupported tokenizer.ggml.pre is an error naming it, not a silent fallback", "[tokenizer]") {
    specdec::gguf::Writer writer;
    const std::vector<std::string> tokens = {"a", "b", "ab"};
    const std::vector<std::string> merges = {"a b"};
    writer.add_string("tokenizer.ggml.model", "gpt2").add_string("tokenizer.ggml.pre", "deepseek-llm");
    writer.add_string_array("tokenizer.ggml.tokens", tokens).add_string_array("tokenizer.ggml.merges", merges);
    const auto path = std::filesystem::temp_directory_path() / "specdec-tokenizer-bad-pre.gguf";
    writer.write(path);
    const auto file = specdec::gguf::File::open(path);
    CHECK_THROWS_WITH(Tokenizer::from_gguf(file), Catch::Contains("'deepseek-llm'") && Catch::Contains("llama-bpe") &&
                                                      Catch::Contains("qwen2"));
    std::filesystem::remove(path);
}

TEST_CASE("Llama 3 splits digits in threes, Qwen2 one by one, GPT-2 keeps the run", "[tokenizer]") {
    using Rule = specdec::detail::BpePreTokenizer;
    CHECK(words("1234567", Rule::llama3) == std::vector<std::string>{"123", "456", "7"});
    CHECK(words("1234", Rule::qwen2) == std::vector<std::string>{"1", "2", "3", "4"});
    CHECK(words(" 1234", Rule::gpt2) == std::vector<std::string>{" 1234"});
    // Case-insensitive contractions, a leading non-letter glued to a word, line breaks.
    CHECK(words("WE'RE (here)\n\n  x", Rule::llama3) ==
          std::vector<std::string>{"WE", "'RE", " (", "here", ")\n\n", " ", " x"});
    CHECK(words("a  \n  b", Rule::llama3) == std::vector<std::string>{"a", "  \n", " ", " b"});
}

TEST_CASE("the Unicode category tables classify letters, numbers and the rest", "[tokenizer]") {
    using namespace specdec::detail;
    for (const char32_t letter : {U'a', U'Z', U'é', U'ß', U'Ж', U'日', U'ㅎ', U'ا', U'ก', U'ª'}) CHECK(is_unicode_letter(letter));
    for (const char32_t number : {U'0', U'9', U'٣', U'½', U'²', U'Ⅻ', U'①', U'१'}) CHECK(is_unicode_number(number));
    for (const char32_t other : {U' ', U'!', U'€', U'\u0301', U'😀', U'\u200D', U'。'}) {
        CHECK_FALSE(is_unicode_letter(other));
        CHECK_FALSE(is_unicode_number(other));
    }
    CHECK(is_unicode_space(U'\u3000'));
    CHECK_FALSE(is_unicode_space(U'\u200B'));
}
