#pragma once
// What a drafter hands to the verifier (the proposed tokens and the
// distributions q they were drawn from) and what verification hands back.
// Notation, once for the whole library: p is the target's distribution, q is
// the draft's.
#include <cstddef>
#include <span>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

struct DraftProposal {
    std::vector<Token> tokens;

    // Row i (vocab floats) is the processed distribution q_i that tokens[i] was
    // sampled from. Empty for point-mass drafters (prompt lookup, n-gram,
    // greedy drafting): then q_i = delta(tokens[i]).
    std::vector<float> probabilities;
    std::size_t vocab = 0;

    // Forward passes the drafter spent to produce this proposal (for statistics).
    std::size_t forward_passes = 0;

    [[nodiscard]] std::size_t size() const { return tokens.size(); }
    [[nodiscard]] bool point_mass() const { return probabilities.empty(); }
    [[nodiscard]] std::span<const float> q(std::size_t i) const { return {probabilities.data() + i * vocab, vocab}; }
    // q_i(x): the probability the drafter gave to token x at position i.
    [[nodiscard]] float q_of(std::size_t i, Token x) const {
        if (point_mass()) return x == tokens[i] ? 1.0f : 0.0f;
        return probabilities[i * vocab + static_cast<std::size_t>(x)];
    }
};

// The verdict of an acceptance rule.
struct AcceptanceResult {
    std::size_t accepted = 0;  // drafts kept: tokens[0 .. accepted)
    Token next_token = 0;      // the corrected token (at the first rejection) or the bonus token
};

namespace detail {

// Every draft id inside the target's vocabulary [0, vocab). The decoder checks
// a drafter's proposal with it before the target is fed; the acceptance rules
// check their inputs with it (through check_rows). Here, beside the proposal,
// because both floors need it and neither owns the other.
inline void check_draft_tokens(const DraftProposal& draft, std::size_t vocab) {
    for (const Token token : draft.tokens) {
        if (token < 0 || static_cast<std::size_t>(token) >= vocab) {
            std::ostringstream message;
            message << "draft token " << token << " is outside the target vocabulary [0, " << vocab << ")";
            throw Error(message.str());
        }
    }
}

}  // namespace detail
}  // namespace specdec
