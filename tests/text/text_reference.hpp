#pragma once
// An independent reference of where a text generation ends, written from
// TextStream's documented contract with whole-prefix decoding (quadratic,
// for tests only): the first prefix of the generated tokens whose text holds
// a stop string ends it, at the match that ends first (then: starts first);
// an end-of-generation token before that ends it where it stands.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec::test {

struct ReferenceCut {
    std::string text;
    std::size_t tokens = 0;    // how many generated tokens the result keeps
    std::size_t consumed = 0;  // how many the generation had to commit to decide (the stopping token included)
    std::optional<std::size_t> stop_string;
    bool end_of_generation = false;
};

// decode_generated(n): the text of the first n generated tokens as the
// whole sequence (prompt + those tokens) decodes it, minus the prompt's text.
inline ReferenceCut reference_cut(std::span<const Token> generated,
                                  const std::function<std::string(std::size_t)>& decode_generated,
                                  const std::vector<std::string>& stops, bool include_stop,
                                  const std::vector<Token>& end_of_generation = {}) {
    ReferenceCut cut;
    for (std::size_t n = 1; n <= generated.size(); ++n) {
        if (std::find(end_of_generation.begin(), end_of_generation.end(), generated[n - 1]) != end_of_generation.end()) {
            cut.text = decode_generated(n - 1);
            cut.tokens = include_stop ? n : n - 1;
            cut.consumed = n;
            cut.end_of_generation = true;
            return cut;
        }
        const std::string text = decode_generated(n);
        std::optional<std::size_t> best_begin, best_end, best_index;
        for (std::size_t i = 0; i < stops.size(); ++i) {
            const std::size_t at = text.find(stops[i]);
            if (at == std::string::npos) continue;
            const std::size_t end = at + stops[i].size();
            if (!best_end || end < *best_end || (end == *best_end && at < *best_begin)) {
                best_begin = at;
                best_end = end;
                best_index = i;
            }
        }
        if (!best_index) continue;
        const std::size_t boundary = include_stop ? *best_end : *best_begin;
        cut.text = text.substr(0, boundary);
        cut.stop_string = best_index;
        cut.consumed = n;
        if (include_stop) {
            cut.tokens = n;
        } else {
            // Tokens whose text starts before the cut.
            cut.tokens = 0;
            while (cut.tokens < n && decode_generated(cut.tokens).size() < boundary) ++cut.tokens;
        }
        return cut;
    }
    cut.text = decode_generated(generated.size());
    cut.tokens = cut.consumed = generated.size();
    return cut;
}

}  // namespace specdec::test
