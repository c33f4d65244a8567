#pragma once
// A draft *model* as a Drafter: k sequential single-token forwards of the draft
// model, each token sampled from the processed draft distribution q that is
// handed to the verifier with it; under a constraint, the tokens it forces
// come with q = 1 and no pass of their own (forced_drafts.hpp).
#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <sstream>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/draft_model_cache.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/forced_drafts.hpp"
#include "specdec/sampling/coupled_draw.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

namespace detail {

// Draft i of `request` from the draft model's logits row for it: forms q_i
// (unless drafting greedily), consults the request's stop rule, and appends
// the token sampled from q_i (and q_i) to `proposal`. Returns false when the
// stop rule ended the draft (nothing appended). Shared by ModelDrafter and
// the batched decoder's lockstep drafting, so that both draw the same tokens.
// Rows are added as q_i is formed: a step that stops early never zero-fills
// rows it does not use.
inline bool draft_from_row(std::span<const float> row, const DraftRequest& request, std::size_t i,
                           DraftProposal& proposal) {
    const std::size_t vocab = proposal.vocab;
    thread_local std::vector<float> adjusted;
    if (request.sampling.adjusts_logits()) {
        // q_i carries the logit stages with the history the target's row i
        // will have: the committed tokens and drafts 0 .. i - 1.
        adjusted.resize(row.size());
        adjust_logits(row, request.sampling, RowHistory{request.history, std::span<const Token>(proposal.tokens).first(i)},
                      adjusted);
        row = adjusted;
    }
    const std::uint64_t step_key = request.history.size();
    Token token;
    if (!request.sampling.greedy()) {
        proposal.probabilities.resize((i + 1) * vocab);
        std::span<float> q{proposal.probabilities.data() + i * vocab, vocab};
        logits_to_distribution(row, request.sampling, q, "draft model", step_key + i);
        if (request.stop && request.stop(DraftCandidate{i, detail::row_max(q).max})) {
            proposal.probabilities.resize(i * vocab);
            return false;
        }
        token = request.draws == DraftDraws::coupled
                    ? coupled_draw(q, request.rng, step_key + i)
                    : sample_from_distribution(q, request.rng.uniform(step_key, RandomPurpose::draft_sample,
                                                                      static_cast<std::uint32_t>(i)));
    } else {
        if (request.stop) {
            const float top = detail::softmax_normaliser(row, 1.0, "draft model", nullptr, step_key + i).scale;
            if (request.stop(DraftCandidate{i, top})) return false;
        }
        token = greedy_token(row, "draft model", step_key + i);
    }
    proposal.tokens.push_back(token);
    return true;
}

// Asked before the pass that would form q_i: true ends the draft there.
inline bool stop_before_pass(const DraftRequest& request, std::size_t i) {
    return request.stop && request.stop(DraftCandidate{i, 1.0f, false});
}

}  // namespace detail

template <CausalLM Model>
class ModelDrafter : public detail::DraftModelCache<Model> {
    using Cache = detail::DraftModelCache<Model>;
    using Cache::cache_;
    using Cache::check_vocab;

public:
    explicit ModelDrafter(Model& model) : Cache(model) {}

    using Cache::vocab_size;

    // Proposes at most request.max_tokens drafts sampled from the draft model
    // and, with request.forced_limit, the constraint's forced tokens between
    // and after them (forced_drafts.hpp), at most max(max_tokens, forced_limit)
    // in all. A pass runs only to form the q of a sampled draft; it feeds every
    // token since the last pass (the catch-up, the last draft, a run of forced
    // tokens) at once and reads its last row.
    DraftProposal propose(const DraftRequest& request) {
        DraftProposal proposal;
        const std::size_t vocab = vocab_size();
        proposal.vocab = vocab;
        detail::ForcedTokenScan forced(request, vocab);
        // The cache ends up holding history + (n - 1) tokens of a proposal of
        // n: cap n by the draft's context.
        const std::size_t context = cache_.model().context_length();
        const std::size_t room = context + 1 > request.history.size() ? context + 1 - request.history.size() : 0;
        const std::size_t k = std::min(request.max_tokens, room);
        const std::size_t most = forced.active() ? std::min(std::max(k, request.forced_limit), room) : k;
        if (most == 0) return proposal;

        const bool keep_q = !request.sampling.greedy();
        proposal.tokens.reserve(most);
        if (keep_q) proposal.probabilities.reserve(most * vocab);

        // The first pass catches up on whatever the last verification committed
        // (the last accepted draft, the corrected or bonus token).
        const std::span<const Token> catch_up = cache_.uncached_suffix(request.history);
        unfed_.assign(catch_up.begin(), catch_up.end());
        std::size_t sampled = 0;  // drafts the model chose: at most k
        bool ended = false;       // a stop token was proposed
        for (std::size_t i = 0; i < most; ++i) {
            if (const std::optional<Token> only = forced.after(proposal.tokens)) {
                if (i >= k && ended) break;
                proposal.tokens.push_back(*only);
                if (keep_q) {
                    proposal.probabilities.resize((i + 1) * vocab, 0.0f);
                    proposal.probabilities[i * vocab + static_cast<std::size_t>(*only)] = 1.0f;
                }
                unfed_.push_back(*only);
                ended = ended || forced.ends(*only);
                continue;
            }
            if (sampled == k) break;
            // The pass that forms q_i costs as much as any draft: a stop may
            // end the draft before spending it (not before the catch-up).
            if (proposal.forward_passes > 0 && detail::stop_before_pass(request, i)) break;
            const LogitsView logits = unfed_.size() == 1 && proposal.forward_passes > 0
                                          ? cache_.forward(std::span<const Token>(unfed_))
                                          : cache_.forward_last(std::span<const Token>(unfed_));
            ++proposal.forward_passes;
            check_vocab(logits);
            if (!detail::draft_from_row(logits.last_row(), request, i, proposal)) break;
            ++sampled;
            unfed_.assign(1, proposal.tokens.back());
            ended = ended || forced.ends(proposal.tokens.back());
        }
        if (keep_q) proposal.probabilities.resize(proposal.tokens.size() * vocab);
        return proposal;
    }

private:
    std::vector<Token> unfed_;  // tokens of this proposal the draft model has not seen yet
};

}  // namespace specdec
