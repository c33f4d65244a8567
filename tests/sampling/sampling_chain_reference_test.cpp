// The processed distribution (SamplingOptions' definition, computed by
// processed_distribution) against the engines' own sampler chains, on fixed
// logits rows, histories and settings:
//  - tests/fixtures/sampling_chain.llama_cpp.reference.json: llama.cpp's
//    samplers (llama.h: logit bias, penalties fed the history, top-k, top-p,
//    min-p, temperature, in common_sampler's order), chain kLlamaCppChain;
//  - tests/fixtures/sampling_chain.hugging_face.reference.json: transformers'
//    logits processors (sequence bias, repetition penalty, temperature,
//    top-k, top-p, min-p, in generate's order), chain kHuggingFaceChain.
// Both are written by scripts/sampling_references (its README says how);
// cases whose cuts fall between equal or nearly equal values have no
// reference there (listed under "left_out").
#include <cmath>
#include <cstddef>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/core/sampling_options.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "support/catch.hpp"

namespace sampling_chain_reference {

using nlohmann::json;
using specdec::SamplingOptions;
using specdec::Token;

// The tolerance of issue 33: float32 rows, references in float64.
constexpr double kTolerance = 1e-6;

json load_reference(const std::string& name) {
    std::ifstream in(std::string(SPECDEC_REPO_FIXTURES) + "/" + name);
    REQUIRE(in);
    return json::parse(in);
}

float bias_of(const json& value) {
    if (value.is_string()) {
        REQUIRE(value.get<std::string>() == "-inf");
        return -std::numeric_limits<float>::infinity();
    }
    return value.get<float>();
}

SamplingOptions options_of(const json& c) {
    const json& o = c.at("options");
    SamplingOptions options;
    options.chain = c.at("chain") == "llama_cpp" ? specdec::kLlamaCppChain : specdec::kHuggingFaceChain;
    options.temperature = o.at("temperature").get<double>();
    options.top_k = o.at("top_k").get<std::size_t>();
    options.top_p = o.at("top_p").get<double>();
    options.min_p = o.at("min_p").get<double>();
    options.repeat_penalty = o.at("repeat_penalty").get<double>();
    options.presence_penalty = o.at("presence_penalty").get<double>();
    options.frequency_penalty = o.at("frequency_penalty").get<double>();
    const auto last_n = o.at("penalty_last_n").get<long long>();
    options.penalty_last_n = last_n < 0 ? specdec::kWholeSequence : static_cast<std::size_t>(last_n);
    for (const json& entry : o.at("logit_bias"))
        options.logit_bias.push_back({entry.at(0).get<Token>(), bias_of(entry.at(1))});
    specdec::validate(options, c.at("logits").size());
    return options;
}

struct Comparison {
    double max_difference = 0.0;
    std::size_t worst_token = 0;
    std::size_t removed_but_weighted = 0;  // tokens the reference removed (p = 0) that keep mass here
};

Comparison compare_case(const json& c) {
    const std::vector<float> logits = c.at("logits").get<std::vector<float>>();
    const std::vector<Token> history = c.at("history").get<std::vector<Token>>();
    const std::vector<double> expected = c.at("probabilities").get<std::vector<double>>();
    REQUIRE(expected.size() == logits.size());
    std::vector<float> probabilities(logits.size());
    specdec::processed_distribution(logits, options_of(c), specdec::RowHistory{.committed = history}, probabilities);
    Comparison result;
    for (std::size_t x = 0; x < logits.size(); ++x) {
        const double difference = std::abs(double(probabilities[x]) - expected[x]);
        if (difference > result.max_difference) {
            result.max_difference = difference;
            result.worst_token = x;
        }
        if (expected[x] == 0.0 && probabilities[x] != 0.0f) ++result.removed_but_weighted;
    }
    return result;
}

// Every case of the reference within kTolerance, removed tokens exactly 0;
// returns the largest difference over the file.
double check_reference(const std::string& file, const std::string& chain) {
    const json reference = load_reference(file);
    const json& cases = reference.at("cases");
    // The generator's case list: a shrunken file would check little.
    REQUIRE(cases.size() >= 60);
    double worst = 0.0;
    for (const json& c : cases) {
        REQUIRE(c.at("chain") == chain);
        const Comparison result = compare_case(c);
        INFO(c.at("name").get<std::string>()
             << ": token " << result.worst_token << " differs by " << result.max_difference);
        CHECK(result.max_difference <= kTolerance);
        CHECK(result.removed_but_weighted == 0);
        worst = std::max(worst, result.max_difference);
    }
    return worst;
}

TEST_CASE("processed_distribution equals llama.cpp's sampler chain on the reference rows within 1e-6",
          "[sampling][reference]") {
    const double worst = check_reference("sampling_chain.llama_cpp.reference.json", "llama_cpp");
    INFO("largest difference " << worst);
    CHECK(worst <= kTolerance);
}

TEST_CASE("processed_distribution with kHuggingFaceChain equals transformers' logits processors within 1e-6",
          "[sampling][reference]") {
    const double worst = check_reference("sampling_chain.hugging_face.reference.json", "hugging_face");
    INFO("largest difference " << worst);
    CHECK(worst <= kTolerance);
}

// The references tell the two orders apart: a row whose mass top-p measures
// differently at T = 1 and at T = 0.7 gives different distributions, so the
// chain read from each file is the one that matches it.
TEST_CASE("the sampler chain order matters on the reference rows", "[sampling][reference]") {
    const json reference = load_reference("sampling_chain.llama_cpp.reference.json");
    std::size_t differing = 0;
    for (const json& c : reference.at("cases")) {
        json swapped = c;
        swapped["chain"] = "hugging_face";
        if (compare_case(swapped).max_difference > 1e-3) ++differing;
    }
    CHECK(differing >= 10);
}

}  // namespace sampling_chain_reference
