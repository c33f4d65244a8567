#pragma once
// Constrained decoding: which tokens may come next. A TokenConstraint is a
// state machine over the generated tokens (the prompt is not fed to it). The
// decoders mask every row they process with the tokens allowed at the state
// the row's history leads to: the draft's rows (so drafts stay valid) and the
// target's, at every draft position, exactly as autoregressive decoding masks
// its one row. After a step the constraint is advanced by the emitted tokens
// only; the drafted path is walked with advance() and undone with rollback().
//
// To plug in a grammar engine (xgrammar, llguidance, an Outlines index),
// implement these five calls over its matcher: fill_next_token_bitmask ->
// allowed(), accept_token -> advance(), rollback -> rollback(), reset -> reset().
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

class TokenConstraint {
public:
    virtual ~TokenConstraint() = default;

    // Named in errors ("regex constraint \"[0-9]+\"").
    [[nodiscard]] virtual std::string name() const = 0;
    // Back to the start: nothing generated yet.
    virtual void reset() = 0;
    // allowed[x] = 1 if token x may come next at the current state, else 0;
    // `allowed` has one entry per vocabulary token.
    virtual void allowed(std::span<std::uint8_t> allowed) = 0;
    // Moves past `token` and returns true if it is allowed; returns false and
    // stays put otherwise.
    virtual bool advance(Token token) = 0;
    // Undoes the last `tokens` successful advance() calls.
    virtual void rollback(std::size_t tokens) = 0;
};

namespace detail {

// The mask at the state `path` leads to from the current one (the drafts
// before a row), leaving the constraint where it was. Returns false, mask
// untouched, when the path itself leaves the constraint (a draft it does not
// allow: the rule rejects that draft before reading any row after it).
// Throws when the state allows no token at all (`position`: the row's, for
// the message).
inline bool constraint_mask_after(TokenConstraint& constraint, std::span<const Token> path,
                                  std::span<std::uint8_t> mask, std::size_t position) {
    std::size_t walked = 0;
    while (walked < path.size() && constraint.advance(path[walked])) ++walked;
    const bool reached = walked == path.size();
    if (reached) constraint.allowed(mask);
    constraint.rollback(walked);
    if (!reached) return false;
    for (const std::uint8_t allowed : mask)
        if (allowed) return true;
    std::ostringstream message;
    message << "invalid sampling option constraint: " << constraint.name() << " allows no token at position "
            << position;
    throw Error(message.str());
}

}  // namespace detail
}  // namespace specdec
