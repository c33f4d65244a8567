// The processed distribution against llama.cpp's own sampler chain on a real
// model's rows: the target's logits (through the adapter) at every position
// of a prompt and its greedy continuation, each row given to llama.cpp's
// samplers (llama.h, common_sampler's order: logit bias, penalties fed the
// row's history, top-k, top-p, min-p, temperature; then the softmax of the
// survivors) and to specdec's processed_distribution with kLlamaCppChain and
// the same settings and history. The fixed rows of
// tests/fixtures/sampling_chain.llama_cpp.reference.json cover the corner
// cases; here the rows are a model's.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <llama.h>

#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

namespace llama_cpp_sampler_chain {

using specdec::LlamaCppModel;
using specdec::SamplingOptions;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

struct SamplerDeleter {
    void operator()(llama_sampler* sampler) const { llama_sampler_free(sampler); }
};
using Sampler = std::unique_ptr<llama_sampler, SamplerDeleter>;

// llama.cpp's chain for `options` (min_keep 0, as common_sampler), without
// its final dist sampler, having accepted `history`.
Sampler llama_chain(const SamplingOptions& options, std::int32_t vocab, std::span<const Token> history) {
    Sampler chain(llama_sampler_chain_init(llama_sampler_chain_default_params()));
    std::vector<llama_logit_bias> biases;
    for (const specdec::LogitBias& entry : options.logit_bias) biases.push_back({entry.token, entry.bias});
    if (!biases.empty())
        llama_sampler_chain_add(
            chain.get(), llama_sampler_init_logit_bias(vocab, static_cast<std::int32_t>(biases.size()), biases.data()));
    // llama.cpp reads a negative window as "off": the whole sequence is a window as long as the history.
    const std::size_t window = std::min<std::size_t>(options.penalty_last_n, std::max<std::size_t>(history.size(), 1));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_penalties(vocab, static_cast<std::int32_t>(window),
                                                                      static_cast<float>(options.repeat_penalty),
                                                                      static_cast<float>(options.frequency_penalty),
                                                                      static_cast<float>(options.presence_penalty)));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_k(static_cast<std::int32_t>(options.top_k)));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_top_p(static_cast<float>(options.top_p), 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_min_p(static_cast<float>(options.min_p), 0));
    llama_sampler_chain_add(chain.get(), llama_sampler_init_temp(static_cast<float>(options.temperature)));
    for (const Token token : history) llama_sampler_accept(chain.get(), token);
    return chain;
}

// llama.cpp's processed distribution of one row: the chain, then the softmax
// of the surviving candidates' logits (in double).
std::vector<double> llama_distribution(std::span<const float> row, const SamplingOptions& options,
                                       std::span<const Token> history) {
    const auto vocab = static_cast<std::int32_t>(row.size());
    Sampler chain = llama_chain(options, vocab, history);
    std::vector<llama_token_data> candidates(row.size());
    for (std::int32_t t = 0; t < vocab; ++t)
        candidates[static_cast<std::size_t>(t)] = {t, row[static_cast<std::size_t>(t)], 0.0f};
    llama_token_data_array array{candidates.data(), candidates.size(), -1, false};
    llama_sampler_apply(chain.get(), &array);
    REQUIRE(array.size > 0);
    float largest = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < array.size; ++i) largest = std::max(largest, array.data[i].logit);
    double total = 0.0;
    for (std::size_t i = 0; i < array.size; ++i) total += std::exp(double(array.data[i].logit) - double(largest));
    std::vector<double> p(row.size(), 0.0);
    for (std::size_t i = 0; i < array.size; ++i)
        p[static_cast<std::size_t>(array.data[i].id)] = std::exp(double(array.data[i].logit) - double(largest)) / total;
    return p;
}

struct Setting {
    const char* name;
    SamplingOptions options;
};

std::vector<Setting> settings(const std::vector<Token>& sequence) {
    // Biases on tokens the sequence uses, one of them banned.
    const std::vector<specdec::LogitBias> biases{
        {sequence[sequence.size() / 2], -std::numeric_limits<float>::infinity()},
        {sequence[sequence.size() / 3], 1.5f},
        {sequence.back(), -0.75f}};
    return {
        {"llama.cpp's defaults (top-k 40, top-p 0.95, min-p 0.05, T 0.8)",
         {.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05}},
        {"top-p 0.9 alone", {.top_p = 0.9}},
        {"min-p 0.1, T 1.3", {.temperature = 1.3, .min_p = 0.1}},
        {"penalties over the last 16 tokens, top-k 20, top-p 0.9, T 0.7",
         {.temperature = 0.7,
          .top_k = 20,
          .top_p = 0.9,
          .repeat_penalty = 1.3,
          .presence_penalty = 0.2,
          .frequency_penalty = 0.4,
          .penalty_last_n = 16}},
        {"repeat penalty 0.85 over the whole sequence, min-p 0.05",
         {.min_p = 0.05, .repeat_penalty = 0.85, .penalty_last_n = specdec::kWholeSequence}},
        {"logit bias (a ban), penalties, every filter, T 1.3",
         {.temperature = 1.3,
          .top_k = 30,
          .top_p = 0.92,
          .min_p = 0.02,
          .repeat_penalty = 1.1,
          .presence_penalty = 0.1,
          .frequency_penalty = 0.2,
          .penalty_last_n = 24,
          .logit_bias = biases}},
    };
}

// Every row of `sequence` (the row at position i predicts token i + 1 from
// tokens 0 .. i) under every setting; returns the largest difference.
double check_model(const std::filesystem::path& gguf, const std::string& prompt_text, std::size_t continuation) {
    LlamaCppModel model = LlamaCppModel::from_gguf(gguf.string(), support::small_options());
    std::vector<Token> sequence = model.tokenize(prompt_text, model.add_bos());
    const std::vector<Token> greedy = support::plain_greedy(gguf, sequence, continuation);
    sequence.insert(sequence.end(), greedy.begin(), greedy.end());
    REQUIRE(sequence.size() >= 24);  // enough rows, and histories longer than the 16-token window
    const specdec::LogitsView rows = model.forward(sequence);
    REQUIRE(rows.rows == sequence.size());
    double worst = 0.0;
    std::size_t compared = 0;
    for (const Setting& setting : settings(sequence)) {
        for (std::size_t i = 1; i < rows.rows; ++i) {
            const std::span<const float> row = rows.row(i);
            const std::span<const Token> history = std::span<const Token>(sequence).first(i + 1);
            const std::vector<double> expected = llama_distribution(row, setting.options, history);
            std::vector<float> p(row.size());
            specdec::processed_distribution(row, setting.options, specdec::RowHistory{.committed = history}, p);
            double difference = 0.0;
            std::size_t token = 0, removed_but_weighted = 0;
            for (std::size_t x = 0; x < p.size(); ++x) {
                if (std::abs(double(p[x]) - expected[x]) > difference) {
                    difference = std::abs(double(p[x]) - expected[x]);
                    token = x;
                }
                if (expected[x] == 0.0 && p[x] != 0.0f) ++removed_but_weighted;
            }
            INFO(gguf.filename().string()
                 << ", " << setting.name << ", position " << i << ": token " << token << " differs by " << difference);
            CHECK(difference <= 1e-6);
            CHECK(removed_but_weighted == 0);
            worst = std::max(worst, difference);
            ++compared;
        }
    }
    CHECK(compared == settings(sequence).size() * (sequence.size() - 1));
    return worst;
}

}  // namespace llama_cpp_sampler_chain

TEST_CASE("llama.cpp adapter: processed_distribution equals llama.cpp's sampler chain on stories260K's rows",
          "[llama_cpp][sampling]") {
    SPECDEC_REQUIRE_FIXTURE(model, "stories260K.gguf");
    const double worst = llama_cpp_sampler_chain::check_model(model, "Once upon a time, there was", 40);
    INFO("largest difference " << worst);
    CHECK(worst <= 1e-6);
}

TEST_CASE("llama.cpp adapter: processed_distribution equals llama.cpp's sampler chain on the qwen2 fixture's rows",
          "[llama_cpp][sampling]") {
    // A prompt with repeats: this fixture's greedy continuation soon ends.
    const double worst = llama_cpp_sampler_chain::check_model(
        specdec::test::llama_cpp::repo_fixture("qwen2-f32.gguf"),
        "Once upon a time, there was a little girl. The little girl had a little dog, "
        "and the dog had a ball. The girl and the dog played with the ball every day.",
        24);
    INFO("largest difference " << worst);
    CHECK(worst <= 1e-6);
}
