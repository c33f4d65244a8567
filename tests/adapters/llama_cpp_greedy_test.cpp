// Greedy decoding through the llama.cpp adapter equals llama.cpp's own greedy
// decoding: autoregressive, speculative (several draft lengths), token trees
// (tree passes on both models) and batched over several sequences, on stories260K (draft: its Q8_0 copy), on the
// committed architecture fixtures that llama.cpp loads (llama3, qwen2,
// mistral; F32 target, Q8_0 draft) and on the tiny
// synthetic pair exported as GGUF.
//
// The references of stories260K and of the fixtures are token ids recorded
// in tests/fixtures/llama_cpp_greedy.reference.json from llama.cpp's own
// llama-simple (the hidden test case at the end writes that file and says
// how); each test also checks that the recorded ids print as the bytes
// llama-simple printed. The synthetic pair's reference is computed in the
// test by the same loop written directly on llama.h (plain_greedy in
// llama_cpp_test_support.hpp), since its files are written by the test.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/batched_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "specdec/decoding/tree_decoder.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/skip.hpp"

namespace llama_cpp_greedy {

using specdec::DecodingOptions;
using specdec::LlamaCppModel;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

struct GreedyCase {
    std::filesystem::path target, draft;
    std::vector<Token> prompt;
    std::vector<Token> expected;  // the greedy continuation, an end-of-generation token included if reached
};

DecodingOptions greedy_options(const LlamaCppModel& target, std::size_t max_new, std::size_t k) {
    return {.draft_tokens = k, .sampling = {.temperature = 0.0}, .seed = 1, .max_new_tokens = max_new,
            .stop_tokens = target.stop_tokens()};
}

// Every decoder through the adapter must emit exactly `c.expected`.
void check_every_decoder(const GreedyCase& c) {
    LlamaCppModel target = LlamaCppModel::from_gguf(c.target.string(), support::small_options());
    LlamaCppModel draft = LlamaCppModel::from_gguf(c.draft.string(), support::small_options());
    specdec::check_same_vocabulary(target, draft);
    const std::size_t n = c.expected.size();
    {
        INFO("autoregressive");
        specdec::AutoregressiveDecoder<LlamaCppModel> decoder(target, greedy_options(target, n, 1));
        CHECK(decoder.generate(c.prompt).tokens == c.expected);
    }
    for (const std::size_t k : {1, 4, 8}) {
        INFO("speculative, k = " << k);
        specdec::SpeculativeDecoder<LlamaCppModel, LlamaCppModel> decoder(specdec::target(target), specdec::draft(draft),
                                                                          greedy_options(target, n, k));
        const specdec::GenerationResult result = decoder.generate(c.prompt);
        CHECK(result.tokens == c.expected);
        CHECK(result.stats.draft_tokens_proposed > 0);
    }
    {
        // Token trees: the target verifies each tree in one tree pass, the
        // draft drafts it level by level through its own tree passes.
        specdec::LlamaCppOptions tree_options = support::small_options();
        tree_options.tree_leaves = 8;
        LlamaCppModel tree_target = LlamaCppModel::from_gguf(c.target.string(), tree_options);
        LlamaCppModel tree_draft = LlamaCppModel::from_gguf(c.draft.string(), tree_options);
        for (const std::vector<std::size_t>& branching : {std::vector<std::size_t>{3, 2, 1}, std::vector<std::size_t>{2, 2, 2, 1}}) {
            const specdec::TreeShape shape = specdec::TreeShape::from_branching(branching);
            INFO("tree " << shape.describe());
            specdec::TreeSpeculativeDecoder<LlamaCppModel, LlamaCppModel> decoder(
                specdec::target(tree_target), specdec::draft(tree_draft), greedy_options(target, n, 1), shape);
            const specdec::GenerationResult result = decoder.generate(c.prompt);
            CHECK(result.tokens == c.expected);
            CHECK(result.stats.draft_tokens_proposed > 0);
        }
    }
    {
        // Three requests of the same prompt in three sequences, admitted one
        // step apart, with different draft lengths: each row of a pass must
        // not depend on its batch mates.
        INFO("batched over 3 sequences");
        LlamaCppModel targets = LlamaCppModel::from_gguf(c.target.string(), support::small_options(3));
        LlamaCppModel drafts = LlamaCppModel::from_gguf(c.draft.string(), support::small_options(3));
        specdec::BatchedDecoder<LlamaCppModel, LlamaCppModel> decoder(specdec::target(targets), specdec::draft(drafts));
        REQUIRE(decoder.slots() == 3);
        std::size_t submitted = 0, finished = 0, widest = 0;
        while (submitted < 3 || !decoder.idle()) {
            if (submitted < 3) {
                decoder.submit(c.prompt, greedy_options(target, n, 2 + 2 * submitted));
                ++submitted;
            }
            widest = std::max(widest, decoder.step().sequences);
            for (const specdec::RequestResult& result : decoder.take_finished()) {
                INFO("request " << result.id << ": " << result.error);
                REQUIRE(result.status == specdec::RequestStatus::finished);
                CHECK(result.generation.tokens == c.expected);
                ++finished;
            }
        }
        CHECK(finished == 3);
        CHECK(widest >= 2);
    }
}

// Bytes as hex: the random fixtures print byte tokens that are not UTF-8,
// which JSON strings cannot hold.
std::string hex(const std::string& bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    for (const char c : bytes) {
        const auto u = static_cast<unsigned char>(c);
        out += kDigits[u >> 4];
        out += kDigits[u & 15];
    }
    return out;
}

// The recorded case `entry` of the reference file, its models found in `folder`.
GreedyCase recorded_case(const nlohmann::json& entry, const std::filesystem::path& folder) {
    GreedyCase c{folder / entry.at("model").get<std::string>(), folder / entry.at("draft").get<std::string>(),
                 entry.at("prompt_ids").get<std::vector<Token>>(), entry.at("greedy_ids").get<std::vector<Token>>()};
    // The recorded ids are what llama-simple printed: same prompt tokens, same text.
    LlamaCppModel model = LlamaCppModel::from_gguf(c.target.string(), support::small_options());
    CHECK(model.tokenize(entry.at("prompt").get<std::string>(), model.add_bos()) == c.prompt);
    std::vector<Token> printed = c.expected;
    if (!printed.empty() && llama_vocab_is_eog(model.vocabulary(), printed.back())) printed.pop_back();
    CHECK(hex(support::printed_text(model, printed)) == entry.at("text_hex").get<std::string>());
    return c;
}

const nlohmann::json* find_case(const nlohmann::json& references, const std::string& model) {
    for (const nlohmann::json& entry : references.at("cases"))
        if (entry.at("model") == model) return &entry;
    return nullptr;
}

}  // namespace llama_cpp_greedy

using namespace llama_cpp_greedy;

TEST_CASE("llama.cpp adapter: greedy decoders on stories260K equal llama-simple's tokens", "[llama_cpp][greedy]") {
    SPECDEC_REQUIRE_FIXTURE(model, "stories260K.gguf");
    const nlohmann::json references = support::greedy_references();
    const nlohmann::json* entry = find_case(references, "stories260K.gguf");
    REQUIRE(entry != nullptr);
    check_every_decoder(recorded_case(*entry, model.parent_path()));
}

TEST_CASE("llama.cpp adapter: greedy decoders on the architecture fixtures equal llama-simple's tokens",
          "[llama_cpp][greedy]") {
    const nlohmann::json references = support::greedy_references();
    // llama-gqa-f32.gguf is left out: this llama.cpp does not load its
    // tokenizer (pre-tokenizer "gpt2"; see the refusal tests).
    for (const std::string architecture : {"llama3", "qwen2", "mistral"}) {
        INFO(architecture);
        const nlohmann::json* entry = find_case(references, architecture + "-f32.gguf");
        REQUIRE(entry != nullptr);
        check_every_decoder(recorded_case(*entry, std::filesystem::path(SPECDEC_REPO_FIXTURES)));
    }
}

TEST_CASE("llama.cpp adapter: greedy decoders on the exported synthetic pair equal a plain llama.h greedy loop",
          "[llama_cpp][greedy]") {
    const support::TempFolder folder("greedy");
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    LlamaCppModel target = LlamaCppModel::from_gguf(files.target.string(), support::small_options());
    const std::vector<Token> prompt = target.tokenize("once upon a time the model", target.add_bos());
    const std::vector<Token> expected = support::plain_greedy(files.target, prompt, 40);
    REQUIRE(expected.size() >= 8);  // the synthetic vocabulary has an end token; the reference must be long enough to test
    check_every_decoder({files.target, files.draft, prompt, expected});
}

// Writes tests/fixtures/llama_cpp_greedy.reference.json from llama.cpp's own
// llama-simple. Run by hand when llama.cpp's pinned version changes:
//   SPECDEC_FIXTURES=/path/to/fixtures
//   SPECDEC_LLAMA_CPP_REFERENCE_OUT=tests/fixtures/llama_cpp_greedy.reference.json
//   ./build/tests/specdec_llama_cpp_tests "[.write-llama-cpp-reference]"
// (the two variables in the environment of the third command).
// For each model it runs `llama-simple -m <model> -n <n> "<prompt>"`, takes
// the text it printed after the prompt (as hex bytes, and as text when it is
// UTF-8), and records the ids of llama.h's
// plain greedy loop, checked to print exactly that text.
TEST_CASE("write the llama-simple greedy references", "[.write-llama-cpp-reference]") {
    const char* out = std::getenv("SPECDEC_LLAMA_CPP_REFERENCE_OUT");
    if (out == nullptr) SPECDEC_SKIP("set SPECDEC_LLAMA_CPP_REFERENCE_OUT to the file to write");
    const std::string simple = std::string(SPECDEC_LLAMA_BIN_DIR) + "/llama-simple";
    REQUIRE(std::filesystem::exists(simple));
    struct Source {
        std::filesystem::path model;
        std::string draft;
        std::size_t n;
        std::string prompt = "Once upon a time, there was";
    };
    std::vector<Source> sources;
    if (const auto stories = specdec::test::fixture_path("stories260K.gguf"))
        sources.push_back({*stories, "stories260K-q8_0.gguf", 40});
    for (const std::string architecture : {"llama3", "mistral"})
        sources.push_back({support::repo_fixture(architecture + "-f32.gguf"), architecture + "-q8_0.gguf", 24});
    // After the story prompt the random qwen2 fixture's first greedy token
    // is an end-of-generation token: a prompt that lets it talk.
    sources.push_back({support::repo_fixture("qwen2-f32.gguf"), "qwen2-q8_0.gguf", 24, "The quick brown fox"});
    nlohmann::json cases = nlohmann::json::array();
    for (const Source& source : sources) {
        INFO(source.model);
        const std::string& prompt = source.prompt;
        const std::string command = "llama-simple -m " + source.model.filename().string() + " -n " +
                                    std::to_string(source.n) + " \"" + prompt + "\"";
        const std::string run = simple + " -m " + source.model.string() + " -n " + std::to_string(source.n) + " \"" +
                                prompt + "\" 2>/dev/null";
        std::string printed;
        FILE* pipe = ::popen(run.c_str(), "r");
        REQUIRE(pipe != nullptr);
        char buffer[4096];
        for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) printed.append(buffer, got);
        REQUIRE(::pclose(pipe) == 0);
        LlamaCppModel model = LlamaCppModel::from_gguf(source.model.string(), support::small_options());
        const std::vector<Token> prompt_ids = model.tokenize(prompt, model.add_bos());
        const std::string printed_prompt = support::printed_text(model, prompt_ids);
        REQUIRE(printed.rfind(printed_prompt, 0) == 0);
        REQUIRE(!printed.empty());
        printed.pop_back();  // llama-simple ends with a newline
        const std::string text = printed.substr(printed_prompt.size());
        const std::vector<Token> ids = support::plain_greedy(source.model, prompt_ids, source.n);
        std::vector<Token> shown = ids;
        if (llama_vocab_is_eog(model.vocabulary(), shown.back())) shown.pop_back();
        REQUIRE(support::printed_text(model, shown) == text);
        nlohmann::json entry{{"model", source.model.filename().string()}, {"draft", source.draft}, {"prompt", prompt},
                             {"n_predict", source.n}, {"command", command}, {"prompt_ids", prompt_ids},
                             {"greedy_ids", ids}, {"text_hex", hex(text)}};
        try {  // the text itself too when it is valid UTF-8, for the reader
            (void)nlohmann::json(text).dump();
            entry["text"] = text;
        } catch (const nlohmann::json::exception&) {
        }
        cases.push_back(entry);
    }
    const nlohmann::json file{
        {"what", "greedy continuations printed by llama.cpp's llama-simple (llama-cpp-python 0.3.36, CPU build of "
                 "scripts/build-llama-cpp.sh), as token ids; regenerate with the hidden test case "
                 "[.write-llama-cpp-reference] of specdec_llama_cpp_tests"},
        {"cases", cases}};
    std::ofstream(out) << file.dump(1) << '\n';
}
