#pragma once
// Verification alone, for an engine that drafts by itself (its own n-gram or
// prompt-lookup drafter, its own draft model) and wants only an exact
// verifier. It is the verification step of SpeculativeDecoder, reached
// without the decoder: the same processing of the target's rows, the same
// acceptance rule, the same random streams. Given the same rows, drafts and
// seed, verify_drafts returns what SpeculativeDecoder::step accepts and emits.
//
//   // the engine's own pass gave the target's rows for the last committed
//   // token and the k drafts (k + 1 rows, row i scores the token at position n + i):
//   const specdec::DraftProposal drafts = specdec::point_mass_drafts(ngram_tokens);
//   const specdec::VerifyResult verdict =
//       specdec::verify_drafts(rows, drafts, sampling, specdec::CounterRng{seed}, /*first_position=*/n);
//   commit(verdict.tokens);   // the kept drafts, then the target's next token
//
//   // or let the call run the target's pass (and roll its cache back):
//   const auto verdict = specdec::verify_drafts(target_model, pending, drafts, sampling, rng);
//
// What keeps it exact is the caller's part of the contract:
//  - q is what each draft was really drawn from: the processed distribution
//    (the same SamplingOptions applied to the draft's row: drafts_from_logits),
//    or a point mass for a drafter that proposes deterministically;
//  - the drafts' randomness is independent of the verifier's: draw them from
//    another stream (RandomPurpose::draft_sample, or a generator of the
//    engine's own), never from the accept_test / target_sample / block_test
//    numbers of the same CounterRng;
//  - first_position is the position of the first draft (the length of the
//    committed sequence), so that no two verifications share a uniform.
// At temperature 0 q is not read: drafts are kept while they equal the
// target's argmax, and the output is the target's greedy output.
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/verification.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

// What verification decided.
struct VerifyResult {
    std::size_t accepted = 0;   // drafts kept: the proposal's tokens[0 .. accepted)
    Token next_token = 0;       // the target's token after them: the correction at the first rejection, or the bonus
    std::vector<Token> tokens;  // what to commit, in order: the kept drafts, then next_token (accepted + 1 tokens)
};

// Drafts of a deterministic drafter (n-gram, prompt lookup, greedy drafting):
// q_i is a point mass on tokens[i].
[[nodiscard]] inline DraftProposal point_mass_drafts(std::span<const Token> tokens) {
    DraftProposal drafts;
    drafts.tokens.assign(tokens.begin(), tokens.end());
    return drafts;
}

// The same, for a caller that states each point mass's token: it must be the
// drafted token (a drafter proposes what its q is concentrated on).
[[nodiscard]] inline DraftProposal point_mass_drafts(std::span<const Token> tokens, std::span<const Token> mass_on) {
    if (mass_on.size() != tokens.size()) {
        throw Error("point_mass_drafts: " + std::to_string(mass_on.size()) + " point masses for " +
                    std::to_string(tokens.size()) + " drafts: expected one per draft");
    }
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (mass_on[i] != tokens[i]) {
            std::ostringstream message;
            message << "point_mass_drafts: draft " << i << " is token " << tokens[i] << " but its q is a point mass on "
                    << mass_on[i] << ": a deterministic drafter's q sits on the token it drafted";
            throw Error(message.str());
        }
    }
    return point_mass_drafts(tokens);
}

// Drafts sampled from full distributions: q_rows holds tokens.size() rows of
// `vocab` probabilities, row i the processed distribution tokens[i] was drawn from.
[[nodiscard]] inline DraftProposal drafts_with_q(std::span<const Token> tokens, std::span<const float> q_rows,
                                                 std::size_t vocab) {
    if (vocab == 0 || q_rows.size() != tokens.size() * vocab) {
        std::ostringstream message;
        message << "drafts_with_q: " << q_rows.size() << " q values for " << tokens.size() << " drafts of vocabulary "
                << vocab << ": expected one row of " << vocab << " per draft (" << tokens.size() * vocab << " values)";
        throw Error(message.str());
    }
    DraftProposal drafts;
    drafts.tokens.assign(tokens.begin(), tokens.end());
    drafts.probabilities.assign(q_rows.begin(), q_rows.end());
    drafts.vocab = vocab;
    return drafts;
}

namespace detail {

// The verify-only entry points see rows, not the sequence: the logit stages
// (which read the history) are the caller's, through adjust_logits.
inline void refuse_logit_stages(const SamplingOptions& sampling, const char* function) {
    if (!sampling.adjusts_logits()) return;
    throw Error(std::string(function) +
                ": the sampling options set penalties, logit_bias or a constraint, which read the sequence; apply "
                "them to the rows you pass with specdec::adjust_logits (sampling/logit_adjustments.hpp), row i "
                "with the history plus drafts 0 .. i - 1, and leave them out of these options");
}

}  // namespace detail

// Drafts sampled from a draft model's logits: q_i is row i of draft_logits
// processed with `sampling` (exactly as the verifier processes the target's
// rows, and as ModelDrafter forms its q). One row per draft.
[[nodiscard]] inline DraftProposal drafts_from_logits(std::span<const Token> tokens, const LogitsView& draft_logits,
                                                      const SamplingOptions& sampling) {
    validate(sampling);
    detail::refuse_logit_stages(sampling, "drafts_from_logits");
    if (draft_logits.rows != tokens.size()) {
        throw Error("drafts_from_logits: " + std::to_string(draft_logits.rows) + " draft logits rows for " +
                    std::to_string(tokens.size()) + " drafts: expected one row per draft");
    }
    DraftProposal drafts;
    drafts.tokens.assign(tokens.begin(), tokens.end());
    drafts.vocab = draft_logits.vocab;
    drafts.probabilities.resize(tokens.size() * draft_logits.vocab);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        logits_to_distribution(draft_logits.row(i), sampling,
                               {drafts.probabilities.data() + i * drafts.vocab, drafts.vocab}, "draft model");
    }
    return drafts;
}

namespace detail {

// Everything about the drafts that can be checked without the target's rows.
inline void check_verify_drafts(const DraftProposal& drafts, std::size_t vocab, const SamplingOptions& sampling) {
    validate(sampling);
    refuse_logit_stages(sampling, "verify_drafts");
    check_draft_tokens(drafts, vocab);
    if (drafts.point_mass()) return;
    const std::size_t k = drafts.size();
    if (drafts.vocab != vocab) {
        std::ostringstream message;
        message << "verify_drafts: the q rows have " << drafts.vocab << " values but the target's rows have " << vocab
                << ": q must be over the target's vocabulary";
        throw Error(message.str());
    }
    if (drafts.probabilities.size() != k * vocab) {
        std::ostringstream message;
        message << "verify_drafts: " << drafts.probabilities.size() << " q values for " << k
                << " drafts: expected one row of " << vocab << " per draft";
        throw Error(message.str());
    }
    check_probabilities(drafts.probabilities, "draft distribution (q)", vocab);
    for (std::size_t i = 0; i < k; ++i) {
        if (!(drafts.q_of(i, drafts.tokens[i]) > 0.0f)) {
            std::ostringstream message;
            message << "verify_drafts: draft " << i << " is token " << drafts.tokens[i]
                    << " but its q gives that token probability 0: a draft must be drawn from its q (a point mass "
                       "must sit on the drafted token)";
            throw Error(message.str());
        }
    }
}

// k + 1 rows of the target's vocabulary, every one a usable logits row (no
// NaN or +inf, not all -inf): checked up front, although the rule may read
// only some of them, so that a bad row is an error whatever was drafted.
inline void check_verify_rows(const LogitsView& rows, std::size_t k, std::uint64_t first_position) {
    check_logits_shape(rows, k + 1, 0, "verify_drafts: the target's pass", std::to_string(k) + " drafts",
                       "k + 1 = " + std::to_string(k + 1) +
                           " (row i scores draft i, row k the token after the last draft)");
    for (std::size_t i = 0; i <= k; ++i) (void)checked_max_logit(rows.row(i), "target model", first_position + i);
}

// The model overloads' pending tokens: at least one (the last committed
// token, whose row scores `scored`), every id inside the vocabulary.
inline void check_pending(std::span<const Token> pending, std::size_t vocab, const char* function, const char* scored) {
    if (pending.empty()) {
        throw Error(std::string(function) + ": no pending token: the pass needs at least the last committed token, whose row "
                    "scores " + scored);
    }
    for (const Token token : pending) {
        if (token < 0 || static_cast<std::size_t>(token) >= vocab) {
            throw Error(std::string(function) + ": pending token " + std::to_string(token) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")");
        }
    }
}

}  // namespace detail

// Verifies k drafts against the target's k + 1 rows (`target_rows`: row i
// holds the target's logits for the token at first_position + i, so row 0 is
// the row after the last committed token and row k the row after the last
// draft), with `rule` at temperature > 0 (greedy verification at 0). The
// drafts are point masses or carry their q (point_mass_drafts, drafts_with_q,
// drafts_from_logits, or any Drafter's proposal). Throws specdec::Error for
// rows other than k + 1, a q over another vocabulary or of the wrong size, a
// draft id outside the vocabulary, a q that is not a distribution or gives
// its own draft probability 0, a NaN or +inf logit, or invalid options.
template <AcceptanceRule Rule = TokenwiseRejection>
[[nodiscard]] VerifyResult verify_drafts(const LogitsView& target_rows, const DraftProposal& drafts,
                                         const SamplingOptions& sampling, const CounterRng& rng,
                                         std::uint64_t first_position, const Rule& rule = {}) {
    const std::size_t k = drafts.size();
    detail::check_verify_rows(target_rows, k, first_position);
    detail::check_verify_drafts(drafts, target_rows.vocab, sampling);
    // The rows' processing buffer is reused between calls of a thread.
    thread_local detail::LazyDistributions rows;
    const AcceptanceResult verdict =
        detail::verify_on_host(target_rows, drafts, sampling, rng, first_position, rows, rule);
    detail::check_verdict(verdict, k);
    VerifyResult result;
    result.accepted = verdict.accepted;
    result.next_token = verdict.next_token;
    result.tokens.assign(drafts.tokens.begin(), drafts.tokens.begin() + static_cast<std::ptrdiff_t>(verdict.accepted));
    result.tokens.push_back(verdict.next_token);
    return result;
}

// The same with the rows as one dense row-major buffer of (k + 1) * vocab floats.
template <AcceptanceRule Rule = TokenwiseRejection>
[[nodiscard]] VerifyResult verify_drafts(std::span<const float> target_rows, std::size_t vocab,
                                         const DraftProposal& drafts, const SamplingOptions& sampling,
                                         const CounterRng& rng, std::uint64_t first_position, const Rule& rule = {}) {
    if (vocab == 0 || target_rows.size() != (drafts.size() + 1) * vocab) {
        std::ostringstream message;
        message << "verify_drafts: " << target_rows.size() << " target values for " << drafts.size()
                << " drafts of vocabulary " << vocab << ": expected k + 1 = " << drafts.size() + 1 << " rows of "
                << vocab << " (" << (drafts.size() + 1) * vocab << " values)";
        throw Error(message.str());
    }
    return verify_drafts(dense_logits(target_rows, drafts.size() + 1, vocab), drafts, sampling, rng, first_position,
                         rule);
}

// Runs the target's pass itself: feeds `pending` (the committed tokens its
// cache does not hold yet, at least the last one, whose row scores the first
// draft) and the drafts in ONE forward(), verifies them as above with
// first_position = the cache's length before the call + pending.size(), and
// rolls the cache back to the committed tokens plus the kept drafts:
// next_token is not fed (feed it first in the next call, as the decoders
// do). The drafts are checked before the pass; if verification fails after
// it, the cache is rolled back to where it was. The model's forward() and
// truncate() are checked as the decoders check them (cache_checks.hpp).
template <CausalLM Model, AcceptanceRule Rule = TokenwiseRejection>
[[nodiscard]] VerifyResult verify_drafts(Model& target, std::span<const Token> pending, const DraftProposal& drafts,
                                         const SamplingOptions& sampling, const CounterRng& rng, const Rule& rule = {}) {
    const std::size_t vocab = target.vocab_size();
    detail::check_pending(pending, vocab, "verify_drafts", "the first draft");
    detail::check_verify_drafts(drafts, vocab, sampling);
    const std::size_t k = drafts.size();
    const std::size_t before = target.cached_tokens();
    const std::uint64_t first_position = before + pending.size();
    std::vector<Token> feed(pending.begin(), pending.end());
    feed.insert(feed.end(), drafts.tokens.begin(), drafts.tokens.end());
    const LogitsView all = target.forward(std::span<const Token>(feed));
    detail::check_cache_grew(target, before, feed.size(), "target", "forward");
    VerifyResult result;
    try {
        detail::check_logits_shape(all, feed.size(), vocab, "verify_drafts: the target's forward",
                           std::to_string(feed.size()) + " tokens", "one row per token");
        result = verify_drafts(detail::last_rows(all, k + 1), drafts, sampling, rng, first_position, rule);
    } catch (const Error&) {
        detail::truncate_checked(target, before, "target");
        throw;
    }
    detail::truncate_checked(target, first_position + result.accepted, "target");
    return result;
}

}  // namespace specdec
