#pragma once
// What a tree drafter hands to tree verification: several candidate tokens per
// position, as a tree whose root is the committed sequence, together with the
// distributions q that each group of siblings was drawn from; and the verdict,
// one root-to-node path plus the next token.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/types.hpp"

namespace specdec {

struct TreeProposal {
    // Node i: token tokens[i], child of node parents[i], or of the committed
    // sequence when parents[i] == -1. A parent comes before its children.
    std::vector<Token> tokens{};
    std::vector<std::int32_t> parents{};

    // The children of one node form a sibling group, ranked by node index. A
    // group drawn from a distribution q was drawn WITHOUT replacement in rank
    // order: sibling j from q with siblings 0 .. j-1 removed, renormalised.
    // distribution_of[i] is the row of `probabilities` (vocab floats) that
    // node i's group was drawn from; every node of a group names the same row.
    // -1, or an empty distribution_of, marks point-mass nodes: deterministic
    // given the context (prompt lookup, greedy drafting).
    std::vector<float> probabilities{};
    std::vector<std::int32_t> distribution_of{};
    std::size_t vocab = 0;

    // Forward passes the drafter spent to produce this proposal (for statistics).
    std::size_t forward_passes = 0;

    [[nodiscard]] std::size_t size() const { return tokens.size(); }
    [[nodiscard]] bool empty() const { return tokens.empty(); }
    [[nodiscard]] bool point_mass(std::size_t i) const {
        return distribution_of.empty() || distribution_of[i] < 0;
    }
    // The distribution node i was drawn from (only when !point_mass(i)).
    [[nodiscard]] std::span<const float> q(std::size_t i) const {
        return {probabilities.data() + static_cast<std::size_t>(distribution_of[i]) * vocab, vocab};
    }
};

// The verdict of a tree acceptance rule: the accepted root-to-node path (node
// indices, path[0] a child of the committed sequence) and the token the target
// supplies after it (drawn from the residual when every child of the last
// node was rejected, from the target's row when that node is a leaf).
struct TreeVerdict {
    std::vector<std::int32_t> path{};
    Token next_token = 0;
};

}  // namespace specdec
