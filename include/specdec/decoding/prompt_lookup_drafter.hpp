#pragma once
// A model-free drafter: find the most recent earlier occurrence of the last n
// tokens (n from max_ngram down to min_ngram) and propose what followed it.
// Costs no forward pass; pays off on repetitive text (code edits, summaries,
// extraction). Its drafts are point masses, which the exact rule handles.
#include <algorithm>
#include <cstddef>

#include "specdec/core/error.hpp"
#include "specdec/decoding/drafter.hpp"

namespace specdec {

struct PromptLookupOptions {
    std::size_t min_ngram = 1;
    std::size_t max_ngram = 3;
};

class PromptLookupDrafter {
public:
    explicit PromptLookupDrafter(PromptLookupOptions options = {}) : options_(options) {
        if (options_.min_ngram == 0 || options_.max_ngram < options_.min_ngram)
            throw Error("invalid prompt lookup n-gram range: expected 1 <= min_ngram <= max_ngram");
    }

    void reset() {}

    DraftProposal propose(const DraftRequest& request) const {
        DraftProposal proposal;
        const auto& history = request.history;
        const std::size_t length = history.size();
        for (std::size_t n = std::min(options_.max_ngram, length > 0 ? length - 1 : 0); n >= options_.min_ngram; --n) {
            const auto suffix = history.subspan(length - n);
            // Latest match first: recent context predicts the continuation best.
            for (std::size_t start = length - n; start-- > 0;) {
                if (!std::equal(suffix.begin(), suffix.end(), history.begin() + static_cast<std::ptrdiff_t>(start)))
                    continue;
                const std::size_t from = start + n;
                const std::size_t count = std::min(request.max_tokens, length - from);
                proposal.tokens.assign(history.begin() + static_cast<std::ptrdiff_t>(from),
                                       history.begin() + static_cast<std::ptrdiff_t>(from + count));
                return proposal;
            }
            if (n == 1) break;
        }
        return proposal;
    }

private:
    PromptLookupOptions options_;
};

}  // namespace specdec
