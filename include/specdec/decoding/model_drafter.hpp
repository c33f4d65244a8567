#pragma once
// A draft *model* as a Drafter: k sequential single-token forwards of the draft
// model, each token sampled from the processed draft distribution q that is
// handed to the verifier with it.
#include <algorithm>
#include <cstddef>
#include <sstream>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/draft_model_cache.hpp"
#include "specdec/decoding/drafter.hpp"
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
        token = sample_from_distribution(
            q, request.rng.uniform(step_key, RandomPurpose::draft_sample, static_cast<std::uint32_t>(i)));
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

    DraftProposal propose(const DraftRequest& request) {
        DraftProposal proposal;
        const std::size_t vocab = vocab_size();
        proposal.vocab = vocab;
        // The cache ends up holding history + (k - 1) drafts: cap k by the draft's context.
        const std::size_t context = cache_.model().context_length();
        const std::size_t room = context + 1 > request.history.size() ? context + 1 - request.history.size() : 0;
        const std::size_t k = std::min(request.max_tokens, room);
        if (k == 0) return proposal;

        const bool keep_q = !request.sampling.greedy();
        proposal.tokens.reserve(k);
        if (keep_q) proposal.probabilities.reserve(k * vocab);

        // Catch up on whatever the last verification committed (the last accepted
        // draft, the corrected or bonus token) in one batched pass, of which
        // only the last row is read.
        LogitsView logits = cache_.forward_last(cache_.uncached_suffix(request.history));
        ++proposal.forward_passes;
        for (std::size_t i = 0; i < k; ++i) {
            check_vocab(logits);
            if (!detail::draft_from_row(logits.last_row(), request, i, proposal)) break;
            if (i + 1 < k) {
                // The pass that forms q_{i+1} costs as much as any draft: a
                // stop may end the draft before spending it.
                if (detail::stop_before_pass(request, i + 1)) break;
                logits = cache_.forward(std::span<const Token>(&proposal.tokens.back(), 1));
                ++proposal.forward_passes;
            }
        }
        if (keep_q) proposal.probabilities.resize(proposal.tokens.size() * vocab);
        return proposal;
    }
};

}  // namespace specdec
