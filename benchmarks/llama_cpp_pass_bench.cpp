// specdec-llama-cpp-pass-bench: what one llama.cpp pass over several
// sequences costs by the lengths the sequences feed, with a cache stream per
// sequence (the adapter's default) and with one unified cache, side by side
// in one process. Where a ragged pass costs more than its width says, a
// batch length policy must plan equal lengths (AutoBatchLength's
// equal_lengths; docs/llama_cpp.md).
//
//   specdec-llama-cpp-pass-bench TARGET.gguf [THREADS] [CACHED]
//
// Every sequence first holds CACHED positions (default 16); each shape is then
// fed 9 times in turn with the other shapes, rolled back after each pass, and
// the median is printed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "specdec/adapters/llama_cpp.hpp"

namespace {

using specdec::LlamaCppModel;
using specdec::SequenceFeed;
using specdec::Token;

struct Shape {
    std::vector<std::size_t> lengths;  // tokens each sequence feeds
    [[nodiscard]] std::string text() const {
        std::string s = "(";
        for (std::size_t i = 0; i < lengths.size(); ++i) {
            if (i > 0) s += ',';
            s += std::to_string(lengths[i]);
        }
        s += ')';
        return s;
    }
    [[nodiscard]] std::size_t width() const {
        std::size_t w = 0;
        for (const std::size_t n : lengths) w += n;
        return w;
    }
};

double pass_milliseconds(LlamaCppModel& model, const Shape& shape, std::size_t cached) {
    std::vector<std::vector<Token>> tokens;
    std::vector<SequenceFeed> feeds;
    for (std::size_t s = 0; s < shape.lengths.size(); ++s) tokens.emplace_back(shape.lengths[s], static_cast<Token>(7 + s));
    for (std::size_t s = 0; s < shape.lengths.size(); ++s)
        if (!tokens[s].empty()) feeds.push_back({.slot = s, .tokens = tokens[s]});
    const auto start = std::chrono::steady_clock::now();
    (void)model.forward_batch(feeds);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    for (std::size_t s = 0; s < shape.lengths.size(); ++s) model.truncate(s, cached);
    return ms;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || argc > 4) {
        std::fprintf(stderr, "usage: specdec-llama-cpp-pass-bench TARGET.gguf [THREADS] [CACHED]\n");
        return 2;
    }
    try {
        const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
        const std::size_t cached = argc > 3 ? static_cast<std::size_t>(std::atoll(argv[3])) : 16;
        const std::vector<Shape> shapes{{{1, 1}}, {{2, 2}}, {{3, 1}}, {{4, 0}}, {{5, 5}}, {{6, 4}}, {{9, 1}},
                                        {{2, 2, 2, 2}}, {{5, 1, 1, 1}}, {{3, 3, 1, 1}}};
        std::size_t most_sequences = 0, longest = 0;
        for (const Shape& s : shapes) {
            most_sequences = std::max(most_sequences, s.lengths.size());
            for (const std::size_t n : s.lengths) longest = std::max(longest, n);
        }
        std::vector<LlamaCppModel> models;
        for (const bool unified : {false, true}) {
            specdec::LlamaCppOptions options;
            options.max_context = cached + longest + 1;
            options.sequences = most_sequences;
            options.threads = options.threads_batch = threads;
            options.unified_cache = unified;
            models.push_back(models.empty() ? LlamaCppModel::from_gguf(argv[1], options) : models.front().new_context(options));
            std::vector<Token> prompt(cached);
            for (std::size_t i = 0; i < cached; ++i) prompt[i] = static_cast<Token>(11 + (i * 37) % 997);
            for (std::size_t s = 0; s < most_sequences; ++s) {
                const SequenceFeed feed{.slot = s, .tokens = prompt, .last_row_only = true};
                (void)models.back().forward_batch({&feed, 1});
            }
        }
        std::vector<std::vector<std::vector<double>>> times(shapes.size(), std::vector<std::vector<double>>(models.size()));
        for (int round = 0; round < 10; ++round)
            for (std::size_t s = 0; s < shapes.size(); ++s)
                for (std::size_t m = 0; m < models.size(); ++m) {
                    const double ms = pass_milliseconds(models[m], shapes[s], cached);
                    if (round > 0) times[s][m].push_back(ms);  // the first round warms every shape up
                }
        std::printf("%s, %d threads, %zu cached positions a sequence; median of 9 passes (ms)\n",
                    models.front().name().c_str(), threads, cached);
        std::printf("%-14s %6s %16s %14s\n", "feed lengths", "width", "stream per seq.", "unified cache");
        for (std::size_t s = 0; s < shapes.size(); ++s) {
            double median[2];
            for (std::size_t m = 0; m < 2; ++m) {
                std::vector<double>& t = times[s][m];
                std::sort(t.begin(), t.end());
                median[m] = t[t.size() / 2];
            }
            std::printf("%-14s %6zu %16.1f %14.1f\n", shapes[s].text().c_str(), shapes[s].width(), median[0], median[1]);
        }
        return 0;
    } catch (const std::exception& error) {
        std::fprintf(stderr, "specdec-llama-cpp-pass-bench: error: %s\n", error.what());
        return 1;
    }
}
