#pragma once
// Helpers of the model tests: logits comparison, and writing LlamaWeights to
// a GGUF file (to round-trip models and to craft files that disagree with
// their own hyperparameters).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "specdec/formats/gguf_writer.hpp"
#include "specdec/models/llama_gguf_writer.hpp"
#include "specdec/models/llama_model.hpp"

namespace specdec::test {

// Copies the rows of a LogitsView (valid only until the model's next call).
inline std::vector<std::vector<float>> copy_rows(const LogitsView& view) {
    std::vector<std::vector<float>> rows;
    for (std::size_t i = 0; i < view.rows; ++i) rows.emplace_back(view.row(i).begin(), view.row(i).end());
    return rows;
}

inline float max_abs_difference(std::span<const float> a, std::span<const float> b) {
    float worst = 0.0f;
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return a.size() == b.size() ? worst : INFINITY;
}

// max |a - b| relative to max |b|: for logits whose summation order may differ.
inline float relative_difference(std::span<const float> a, std::span<const float> b) {
    float scale = 0.0f;
    for (const float v : b) scale = std::max(scale, std::fabs(v));
    return max_abs_difference(a, b) / std::max(scale, 1e-30f);
}

// Logits of feeding `tokens` one at a time from an empty cache.
inline std::vector<std::vector<float>> logits_one_by_one(LlamaModel& model, std::span<const Token> tokens) {
    model.truncate(0);
    std::vector<std::vector<float>> rows;
    for (const Token t : tokens) {
        const LogitsView view = model.forward(std::span<const Token>(&t, 1));
        rows.emplace_back(view.row(0).begin(), view.row(0).end());
    }
    return rows;
}

inline Token argmax(std::span<const float> logits) {
    return static_cast<Token>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// A GGUF writer holding the weights as llama.cpp would name them (tests of
// bad files change its content before writing it).
inline gguf::Writer llama_gguf_writer(const LlamaWeights& w, bool include_output = true) {
    return specdec::llama_gguf_writer(w, "test-llama", include_output);
}

// A fresh file path under the system temp folder, removed at scope exit.
struct TemporaryFile {
    std::filesystem::path path;
    explicit TemporaryFile(const std::string& name)
        : path(std::filesystem::temp_directory_path() / ("specdec-model-test-" + std::to_string(::getpid()) + "-" + name)) {}
    ~TemporaryFile() {
        std::error_code ignored;
        std::filesystem::remove(path, ignored);
    }
};

}  // namespace specdec::test
