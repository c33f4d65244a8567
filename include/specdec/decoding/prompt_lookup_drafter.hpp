#pragma once
// A model-free drafter: find the most recent earlier occurrence of the last n
// tokens (n from max_ngram down to min_ngram) and propose what followed it.
// Costs no forward pass; pays off on repetitive text (code edits, summaries,
// extraction). Its drafts are point masses, which the exact rule handles.
// As a TreeDrafter it proposes several distinct continuations at once: those
// of every earlier occurrence, merged into a tree of point-mass children.
#include <algorithm>
#include <cstddef>
#include <cstdint>

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
        for_each_match(history, [&](std::size_t from) {
            const std::size_t count = std::min(request.max_tokens, history.size() - from);
            proposal.tokens.assign(history.begin() + static_cast<std::ptrdiff_t>(from),
                                   history.begin() + static_cast<std::ptrdiff_t>(from + count));
            return true;  // the first (longest, latest) match only
        });
        return proposal;
    }

    // The continuations of every earlier occurrence of the last n tokens
    // (longest n first, latest occurrence first), up to request.shape.depth()
    // tokens each, merged into one tree of at most request.shape.size() nodes;
    // the children of a node are distinct, ranked by the order found.
    TreeProposal propose_tree(const TreeDraftRequest& request) const {
        TreeProposal proposal;
        const auto& history = request.history;
        const std::size_t length = history.size();
        const std::size_t budget = request.shape.size(), max_depth = request.shape.depth();
        if (budget == 0 || max_depth == 0) return proposal;
        for_each_match(history, [&](std::size_t from) {
            const std::size_t count = std::min(max_depth, length - from);
            std::int32_t node = -1;
            for (std::size_t i = 0; i < count; ++i) {
                const Token token = history[from + i];
                std::int32_t child = -1;
                for (std::size_t c = static_cast<std::size_t>(node + 1); c < proposal.size(); ++c)
                    if (proposal.parents[c] == node && proposal.tokens[c] == token) child = static_cast<std::int32_t>(c);
                if (child < 0) {
                    if (proposal.size() == budget) return true;
                    child = static_cast<std::int32_t>(proposal.size());
                    proposal.tokens.push_back(token);
                    proposal.parents.push_back(node);
                }
                node = child;
            }
            return false;
        });
        return proposal;
    }

private:
    // Calls found(from) for every earlier occurrence of the last n tokens of
    // history, longest n first and, for each n, latest occurrence first
    // (recent context predicts the continuation best); `from` is the index
    // after the occurrence. Stops when found returns true.
    template <class Found>
    void for_each_match(std::span<const Token> history, Found&& found) const {
        const std::size_t length = history.size();
        for (std::size_t n = std::min(options_.max_ngram, length > 0 ? length - 1 : 0); n >= options_.min_ngram; --n) {
            const auto suffix = history.subspan(length - n);
            for (std::size_t start = length - n; start-- > 0;) {
                if (!std::equal(suffix.begin(), suffix.end(), history.begin() + static_cast<std::ptrdiff_t>(start)))
                    continue;
                if (found(start + n)) return;
            }
            if (n == 1) break;
        }
    }

    PromptLookupOptions options_;
};

}  // namespace specdec
