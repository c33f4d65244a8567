#pragma once
// Forced drafts: where the constraint allows exactly one token after the
// committed sequence and the drafts before it (a JSON key, a closing bracket,
// a fixed literal of a pattern), that token is proposed with q = 1 and no
// draft-model pass. It is exact by construction: the draft's masked q at that
// position is the same point mass, so the draft is still distributed as q
// says, and the target's masked p is 1 there, so every rule accepts it.
// The draft model still has to see the forced tokens: a ModelDrafter feeds a
// run of them together with the next pass it needs (one batched forward), so
// a run costs no pass of its own, and a run at the end of the proposal none.
//
// How the draft-length cap applies: the drafter proposes at most
// DraftRequest::max_tokens tokens the draft model chose (the cap bounds the
// draft model's work) and at most DraftRequest::forced_limit tokens in all;
// the decoder sets forced_limit to the cap plus ForcedDraftOptions::max_tokens,
// within the target's free context and the tokens the step may emit.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "specdec/core/types.hpp"
#include "specdec/decoding/decoding_options.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/sampling/token_constraint.hpp"

namespace specdec::detail {

// The most tokens a chain step may propose with forced drafts: `k_max` chosen
// ones (the policy's and draft_cap's bound) plus options.forced_drafts.max_tokens
// forced ones, within `room` (the target's free context) and max_tokens - 1
// (a step emits at most its drafts plus one). 0 when forced drafts are off or
// no constraint is set: then the proposal holds at most k_max tokens.
[[nodiscard]] inline std::size_t forced_draft_limit(const DecodingOptions& options, std::size_t room,
                                                    std::size_t max_tokens, std::size_t k_max) {
    if (!options.forced_drafts.enabled || options.sampling.constraint == nullptr || k_max == 0) return 0;
    const std::size_t extended = k_max + std::min(options.forced_drafts.max_tokens, room);
    return std::max(k_max, std::min({extended, room, max_tokens - 1}));
}

// Finds the forced token of each draft position of one proposal.
class ForcedTokenScan {
public:
    // Active when the request allows forced drafts and carries a constraint.
    ForcedTokenScan(const DraftRequest& request, std::size_t vocab)
        : constraint_(request.forced_limit > 0 && vocab > 0 ? request.sampling.constraint : nullptr),
          end_tokens_(request.end_tokens), history_size_(request.history.size()), mask_(vocab) {}

    [[nodiscard]] bool active() const { return constraint_ != nullptr; }

    // The one token the constraint allows after `drafts` (from its current
    // state, the committed sequence's), or nothing when it allows more than
    // one or `drafts` leaves it. Throws specdec::Error when it allows none.
    std::optional<Token> after(std::span<const Token> drafts) {
        if (constraint_ == nullptr) return std::nullopt;
        if (!constraint_mask_after(*constraint_, drafts, mask_, history_size_ + drafts.size())) return std::nullopt;
        std::optional<Token> only;
        for (std::size_t x = 0; x < mask_.size(); ++x) {
            if (!mask_[x]) continue;
            if (only) return std::nullopt;
            only = static_cast<Token>(x);
        }
        return only;
    }

    // Whether `token` ends the text (a stop token): forced tokens after it
    // would never be emitted, so they do not lengthen a proposal past it.
    [[nodiscard]] bool ends(Token token) const {
        return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
    }

private:
    TokenConstraint* constraint_;
    std::span<const Token> end_tokens_;
    std::size_t history_size_;
    std::vector<std::uint8_t> mask_;
};

}  // namespace specdec::detail
