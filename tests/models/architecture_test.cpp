// The architectures real GGUF files use: Llama with grouped-query attention,
// Llama 3 with its RoPE frequency factors, Qwen2 with attention biases and
// Mistral-style files (the llama key set). Each committed fixture is a tiny
// random-weight model built with Hugging Face transformers and converted to
// GGUF (scripts/fixtures/make_arch_fixtures.py); its reference logits at every
// position and its greedy continuation come from transformers in float64.
// Anything the model does not implement is refused with a message naming it.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model_test_support.hpp"
#include "specdec/models/llama_model.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"
#include "support/skip.hpp"
#include "support/fixtures.hpp"

namespace {

using specdec::LlamaModel;
using specdec::Token;

struct ArchReference {
    std::vector<Token> prompt_ids, greedy_ids, tokens;
    std::vector<std::vector<float>> logits;
};

std::optional<std::filesystem::path> repo_fixture(const std::string& name) {
    const std::filesystem::path path = std::filesystem::path(SPECDEC_REPO_FIXTURES) / name;
    if (!std::filesystem::exists(path)) return std::nullopt;
    return path;
}

ArchReference load_architecture_reference(const std::filesystem::path& path) {
    const auto json = nlohmann::json::parse(std::ifstream(path));
    ArchReference r;
    r.prompt_ids = json.at("prompt_ids").get<std::vector<Token>>();
    r.greedy_ids = json.at("greedy_ids").get<std::vector<Token>>();
    r.tokens = json.at("tokens").get<std::vector<Token>>();
    r.logits = json.at("logits").get<std::vector<std::vector<float>>>();
    return r;
}

double max_abs_difference(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
    double worst = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        for (std::size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, std::abs(double(a[i][j]) - double(b[i][j])));
    }
    return worst;
}

std::vector<Token> greedy(LlamaModel& model, const std::vector<Token>& prompt, std::size_t count) {
    model.truncate(0);
    std::vector<Token> out;
    auto view = model.forward(prompt);
    while (out.size() < count) {
        const Token next = specdec::test::argmax(view.last_row());
        out.push_back(next);
        view = model.forward(std::span<const Token>(&next, 1));
    }
    return out;
}

// Float32 arithmetic against the float64 reference on the same (float32)
// weights: the logits span about 10 per row, so 1e-4 is about 1e-5 relative.
constexpr double kF32Tolerance = 1e-4;
// Q8_0 against F32: every weight and every activation entering a product
// moves by up to half a step of 1/127 of its 32-value block's largest
// magnitude (the activations are quantised too, as in llama.cpp), and these random networks (weights drawn
// with a gain well above 1, so that the argmax is clear) amplify such changes:
// the logits move by up to 0.1 of a row's range.
constexpr double kQ8RelativeToRowRange = 0.1;

}  // namespace

TEST_CASE("architecture fixtures reproduce transformers' logits at every position and its greedy ids", "[model][fixture]") {
    const std::string name = GENERATE(as<std::string>{}, "llama-gqa", "llama3", "qwen2", "mistral");
    const auto gguf = repo_fixture(name + "-f32.gguf");
    const auto json = repo_fixture(name + ".reference.json");
    if (!gguf || !json) {
        SPECDEC_SKIP("fixture " << name << " not found under " << SPECDEC_REPO_FIXTURES);
    }
    INFO(name);
    const ArchReference ref = load_architecture_reference(*json);
    LlamaModel model = LlamaModel::from_gguf(*gguf, {.threads = 1});
    const auto rows = specdec::test::copy_rows(model.forward(ref.tokens));
    REQUIRE(rows.size() == ref.logits.size());
    const double difference = max_abs_difference(rows, ref.logits);
    INFO("max |logit - transformers| = " << difference);
    CHECK(difference < kF32Tolerance);
    CHECK(greedy(model, ref.prompt_ids, ref.greedy_ids.size()) == ref.greedy_ids);
}

TEST_CASE("Q8_0 copies of the architecture fixtures stay close to the F32 logits", "[model][fixture]") {
    const std::string name = GENERATE(as<std::string>{}, "llama-gqa", "llama3", "qwen2", "mistral");
    const auto f32 = repo_fixture(name + "-f32.gguf");
    const auto q8 = repo_fixture(name + "-q8_0.gguf");
    const auto json = repo_fixture(name + ".reference.json");
    if (!f32 || !q8 || !json) {
        SPECDEC_SKIP("fixture " << name << " not found under " << SPECDEC_REPO_FIXTURES);
    }
    INFO(name);
    const ArchReference ref = load_architecture_reference(*json);
    LlamaModel full = LlamaModel::from_gguf(*f32, {.threads = 1});
    LlamaModel quantised = LlamaModel::from_gguf(*q8, {.threads = 1});
    CHECK(quantised.weights().layers[0].query.type == specdec::WeightType::q8_0);
    const auto a = specdec::test::copy_rows(full.forward(ref.tokens));
    const auto b = specdec::test::copy_rows(quantised.forward(ref.tokens));
    double row_range = 0.0;
    for (const auto& row : a) row_range = std::max(row_range, double(*std::max_element(row.begin(), row.end()) - *std::min_element(row.begin(), row.end())));
    const double difference = max_abs_difference(a, b);
    INFO("max |logit(Q8_0) - logit(F32)| = " << difference << ", largest row range " << row_range);
    CHECK(difference < kQ8RelativeToRowRange * row_range);
    CHECK(difference > 0.0);  // the copy is really quantised
}

// Every matrix of a fixture re-encoded in `type` (the embedding and output head too).
specdec::LlamaWeights requantised(specdec::LlamaWeights w, specdec::WeightType type) {
    std::vector<float> row;
    const auto convert = [&](specdec::WeightMatrix& m) {
        auto bytes = std::make_shared<std::vector<std::byte>>(m.rows * specdec::weight_row_bytes(type, m.cols));
        row.resize(m.cols);
        const std::size_t row_bytes = specdec::weight_row_bytes(type, m.cols);
        for (std::size_t r = 0; r < m.rows; ++r) {
            specdec::cpu::dequantize_row(m, r, row.data());
            specdec::cpu::quantize_row(type, row.data(), m.cols, bytes->data() + r * row_bytes);
        }
        m = specdec::WeightMatrix{type, m.rows, m.cols, bytes->data()};
        w.storage.push_back(bytes);
    };
    const bool tied = w.tied_output();
    convert(w.token_embedding);
    for (auto& l : w.layers) {
        for (specdec::WeightMatrix* m : {&l.query, &l.key, &l.value, &l.attention_output, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) convert(*m);
    }
    if (tied) {
        w.output = w.token_embedding;
    } else {
        convert(w.output);
    }
    return w;
}

TEST_CASE("every quantised type the rows allow stays within its stated tolerance of the F32 logits", "[model][fixture]") {
    // Tolerance per type as a fraction of the largest row range of the logits
    // (about 13 here); these random networks amplify rounding more than trained
    // ones, so the bounds grow with the type's step rather than being small.
    struct Case {
        specdec::WeightType type;
        double fraction;
    };
    const Case c = GENERATE(Case{specdec::WeightType::f16, 0.002}, Case{specdec::WeightType::bf16, 0.03},
                            Case{specdec::WeightType::q8_0, 0.1}, Case{specdec::WeightType::q6_k, 0.1},
                            Case{specdec::WeightType::q5_0, 0.25}, Case{specdec::WeightType::q5_1, 0.25},
                            Case{specdec::WeightType::q5_k, 0.25}, Case{specdec::WeightType::q4_0, 0.5},
                            Case{specdec::WeightType::q4_1, 0.5}, Case{specdec::WeightType::q4_k, 0.5});
    const std::string name = GENERATE(as<std::string>{}, "llama-gqa", "llama3", "qwen2", "mistral");
    const auto f32 = repo_fixture(name + "-f32.gguf");
    const auto json = repo_fixture(name + ".reference.json");
    if (!f32 || !json) {
        SPECDEC_SKIP("fixture " << name << " not found under " << SPECDEC_REPO_FIXTURES);
    }
    const ArchReference ref = load_architecture_reference(*json);
    auto file = std::make_shared<const specdec::gguf::File>(specdec::gguf::File::open(*f32));
    specdec::LlamaWeights weights = specdec::llama_weights_from_gguf(file);
    const bool rows_fit = [&] {
        try {
            (void)specdec::weight_row_bytes(c.type, weights.config.embedding_dim);
            (void)specdec::weight_row_bytes(c.type, weights.config.feed_forward_dim);
            return true;
        } catch (const specdec::Error&) {
            return false;
        }
    }();
    if (!rows_fit) return;  // e.g. K-quants need rows of whole 256-value super-blocks
    INFO(name << " in " << specdec::weight_type_name(c.type));
    LlamaModel full(weights, {.threads = 1});
    LlamaModel quantised(requantised(weights, c.type), {.threads = 1});
    const auto a = specdec::test::copy_rows(full.forward(ref.tokens));
    const auto b = specdec::test::copy_rows(quantised.forward(ref.tokens));
    double row_range = 0.0;
    for (const auto& row : a) row_range = std::max(row_range, double(*std::max_element(row.begin(), row.end()) - *std::min_element(row.begin(), row.end())));
    const double difference = max_abs_difference(a, b);
    INFO("max |logit - logit(F32)| = " << difference << " (" << difference / row_range << " of the row range " << row_range << ")");
    CHECK(difference < c.fraction * row_range);
    CHECK(difference > 0.0);
}

TEST_CASE("the fixtures exercise what they claim: biases, RoPE layout and frequency factors change the logits",
          "[model][fixture]") {
    const auto llama3 = repo_fixture("llama3-f32.gguf");
    const auto qwen2 = repo_fixture("qwen2-f32.gguf");
    const auto llama3_json = repo_fixture("llama3.reference.json");
    const auto qwen2_json = repo_fixture("qwen2.reference.json");
    if (!llama3 || !qwen2 || !llama3_json || !qwen2_json) {
        SPECDEC_SKIP("fixtures not found under " << SPECDEC_REPO_FIXTURES);
    }
    const auto logits_with = [](const std::filesystem::path& path, const std::vector<Token>& tokens, auto&& edit) {
        auto file = std::make_shared<const specdec::gguf::File>(specdec::gguf::File::open(path));
        specdec::LlamaWeights weights = specdec::llama_weights_from_gguf(file);
        edit(weights);
        LlamaModel model(std::move(weights), {.threads = 1});
        return specdec::test::copy_rows(model.forward(tokens));
    };
    const ArchReference l3 = load_architecture_reference(*llama3_json);
    const auto l3_reference = logits_with(*llama3, l3.tokens, [](specdec::LlamaWeights&) {});
    CHECK(max_abs_difference(l3_reference, l3.logits) < kF32Tolerance);
    const auto without_factors = logits_with(*llama3, l3.tokens, [](specdec::LlamaWeights& w) {
        REQUIRE(w.config.rope_frequency_factors.size() == w.config.rotary_dim() / 2);
        w.config.rope_frequency_factors.clear();
    });
    CHECK(max_abs_difference(without_factors, l3.logits) > 50 * kF32Tolerance);

    const ArchReference q2 = load_architecture_reference(*qwen2_json);
    const auto without_biases = logits_with(*qwen2, q2.tokens, [](specdec::LlamaWeights& w) {
        for (auto& layer : w.layers) {
            REQUIRE(!layer.query_bias.empty());
            layer.query_bias.clear();
            layer.key_bias.clear();
            layer.value_bias.clear();
        }
    });
    CHECK(max_abs_difference(without_biases, q2.logits) > 50 * kF32Tolerance);
    const auto adjacent_pairs = logits_with(*qwen2, q2.tokens, [](specdec::LlamaWeights& w) {
        REQUIRE(w.config.rope_style == specdec::RopeStyle::halves);
        w.config.rope_style = specdec::RopeStyle::adjacent_pairs;
    });
    CHECK(max_abs_difference(adjacent_pairs, q2.logits) > 50 * kF32Tolerance);
}

TEST_CASE("a GGUF file with a feature the model does not implement is refused with one line naming it", "[model]") {
    LlamaModel small = specdec::make_synthetic_target({.size = "tiny"});
    const specdec::LlamaWeights& weights = small.weights();
    specdec::test::TemporaryFile file("unsupported.gguf");
    const auto refusal = [&](specdec::gguf::Writer writer) -> std::string {
        writer.write(file.path);
        try {
            (void)LlamaModel::from_gguf(file.path);
        } catch (const specdec::Error& e) {
            return e.what();
        }
        return "(loaded without an error)";
    };
    const auto one_line_naming = [&](const std::string& message, const std::string& what) {
        INFO(message);
        CHECK(message.find(what) != std::string::npos);
        CHECK(message.find('\n') == std::string::npos);
        CHECK(message.rfind(file.path.string(), 0) == 0);  // starts with the path
    };

    SECTION("the plain file loads, also with the keys that do not change the computation") {
        CHECK(refusal(specdec::test::llama_gguf_writer(weights)) == "(loaded without an error)");
        const auto head_dim = static_cast<std::uint32_t>(weights.config.head_dim());
        auto writer = specdec::test::llama_gguf_writer(weights);
        writer.add_uint32("llama.attention.key_length", head_dim).add_uint32("llama.attention.value_length", head_dim);
        writer.add_uint32("llama.expert_count", 0).add_uint32("llama.vocab_size", static_cast<std::uint32_t>(weights.config.vocab_size));
        writer.add_string("llama.rope.scaling.type", "none").add_bool("llama.rope.scaling.finetuned", false);
        writer.add_string("llama.tensor_data_layout", "Meta AI original pth").add_uint16("split.count", 1);
        CHECK(refusal(std::move(writer)) == "(loaded without an error)");
    }
    SECTION("another architecture, naming it and listing the supported ones") {
        specdec::gguf::Writer writer;
        writer.add_string("general.architecture", "gemma2");
        const std::string message = refusal(writer);
        one_line_naming(message, "\"gemma2\"");
        CHECK(message.find("llama, qwen2") != std::string::npos);
    }
    SECTION("YaRN RoPE scaling") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_string("llama.rope.scaling.type", "yarn")),
                        "\"yarn\"");
    }
    SECTION("LongRoPE scaling") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_string("llama.rope.scaling.type", "longrope")),
                        "\"longrope\"");
    }
    SECTION("a sliding attention window") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_uint32("llama.attention.sliding_window", 4096)),
                        "llama.attention.sliding_window");
    }
    SECTION("logit soft-capping") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_float32("llama.final_logit_softcapping", 30.0f)),
                        "llama.final_logit_softcapping");
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_float32("llama.attn_logit_softcapping", 50.0f)),
                        "llama.attn_logit_softcapping");
    }
    SECTION("a mixture of experts") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_uint32("llama.expert_count", 8)),
                        "llama.expert_count is 8");
    }
    SECTION("a head size other than embedding / heads") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_uint32("llama.attention.key_length", 7)),
                        "llama.attention.key_length is 7");
    }
    SECTION("an attention factor on RoPE") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_float32("llama.rope.scaling.attn_factor", 0.5f)),
                        "llama.rope.scaling.attn_factor");
    }
    SECTION("a model split over several files") {
        one_line_naming(refusal(specdec::test::llama_gguf_writer(weights).add_uint16("split.count", 3)), "split.count is 3");
    }
    SECTION("a tensor the model would not use") {
        auto writer = specdec::test::llama_gguf_writer(weights);
        const std::vector<float> bias(weights.config.embedding_dim, 0.5f);
        writer.add_tensor_f32("blk.0.attn_output.bias", {bias.size()}, bias);
        one_line_naming(refusal(std::move(writer)), "tensor blk.0.attn_output.bias");
    }
    SECTION("RoPE frequency factors of the wrong length") {
        auto writer = specdec::test::llama_gguf_writer(weights);
        const std::vector<float> factors(weights.config.rotary_dim(), 1.0f);
        writer.add_tensor_f32("rope_freqs.weight", {factors.size()}, factors);
        one_line_naming(refusal(std::move(writer)), "rope_freqs.weight");
    }
}

TEST_CASE("RoPE frequency factors divide each pair's frequency; all-ones factors change nothing", "[model]") {
    LlamaModel original = specdec::make_synthetic_target({.size = "tiny"});
    const specdec::LlamaConfig& c = original.config();
    specdec::test::TemporaryFile file("rope-factors.gguf");
    auto writer = specdec::test::llama_gguf_writer(original.weights());
    const std::vector<float> ones(c.rotary_dim() / 2, 1.0f);
    writer.add_tensor_f32("rope_freqs.weight", {ones.size()}, ones);
    writer.write(file.path);
    LlamaModel loaded = LlamaModel::from_gguf(file.path);
    REQUIRE(loaded.config().rope_frequency_factors == ones);
    const std::vector<Token> tokens = {1, 5, 9, 200, 17, 3};
    CHECK(specdec::test::copy_rows(loaded.forward(tokens)) == specdec::test::copy_rows(original.forward(tokens)));

    specdec::LlamaConfig scaled = c;
    scaled.rope_frequency_factors.assign(c.rotary_dim() / 2, 4.0f);
    const auto plain = c.rope_inverse_frequencies();
    const auto divided = scaled.rope_inverse_frequencies();
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(divided[i] == Approx(plain[i] / 4.0f).epsilon(1e-6));
}
