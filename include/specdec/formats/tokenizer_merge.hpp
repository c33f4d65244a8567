#pragma once
// The merge loop both tokenizer models run on a piece of text: start from
// single characters, repeatedly merge the adjacent pair with the highest
// priority (the leftmost pair on ties) until no adjacent pair may merge.
// SentencePiece ranks a pair by the score of the merged piece, byte-level
// BPE by the rank of the merge rule. A priority queue with lazy invalidation
// keeps it O(n log n) even on long inputs.
#include <cstddef>
#include <optional>
#include <queue>
#include <string_view>
#include <vector>

namespace specdec::detail {

struct SymbolSpan {
    std::size_t begin;
    std::size_t length;
};

// `pair_priority(left, right)` returns the priority of merging the two adjacent
// symbols' texts, or nullopt when they may not merge.
template <class PairPriority>
std::vector<SymbolSpan> merge_symbols(std::string_view text, const std::vector<SymbolSpan>& characters,
                                      PairPriority&& pair_priority) {
    constexpr std::size_t none = static_cast<std::size_t>(-1);
    struct Node {
        std::size_t begin, length, prev, next;
    };
    struct Candidate {
        double priority;
        std::size_t left, right, merged_length;
    };
    const auto lower = [](const Candidate& a, const Candidate& b) {
        return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    };

    std::vector<Node> nodes;
    nodes.reserve(characters.size());
    for (std::size_t i = 0; i < characters.size(); ++i) {
        nodes.push_back({characters[i].begin, characters[i].length, i == 0 ? none : i - 1,
                         i + 1 == characters.size() ? none : i + 1});
    }
    std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> agenda(lower);
    const auto consider = [&](std::size_t left, std::size_t right) {
        if (left == none || right == none) return;
        const std::string_view left_text = text.substr(nodes[left].begin, nodes[left].length);
        const std::string_view right_text = text.substr(nodes[right].begin, nodes[right].length);
        if (const std::optional<double> priority = pair_priority(left_text, right_text)) {
            agenda.push({*priority, left, right, nodes[left].length + nodes[right].length});
        }
    };
    for (std::size_t i = 1; i < nodes.size(); ++i) consider(i - 1, i);

    while (!agenda.empty()) {
        const Candidate best = agenda.top();
        agenda.pop();
        Node& left = nodes[best.left];
        Node& right = nodes[best.right];
        // Skip candidates made stale by an earlier merge of either side.
        if (left.length == 0 || right.length == 0 || left.next != best.right ||
            left.length + right.length != best.merged_length) {
            continue;
        }
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (right.next != none) nodes[right.next].prev = best.left;
        consider(left.prev, best.left);
        consider(best.left, left.next);
    }

    std::vector<SymbolSpan> symbols;
    for (std::size_t i = nodes.empty() ? none : 0; i != none; i = nodes[i].next) {
        symbols.push_back({nodes[i].begin, nodes[i].length});
    }
    return symbols;
}

}  // namespace specdec::detail
