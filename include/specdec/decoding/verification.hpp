#pragma once
// The verification step on the host: process the target's k + 1 logits rows
// exactly like the drafter processed its own, then apply the acceptance rule
// (the rules and their concept live with their math in sampling/acceptance.hpp).
// A target may instead verify on its own device (DeviceVerifyingLM in
// core/model_contract.hpp); the decoder then never copies logits back.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/acceptance.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/sampling/logit_adjustments.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "specdec/core/sampling_options.hpp"

namespace specdec {

namespace detail {

// The last `count` rows of a pass (the rows that score the drafts and the
// token after them).
[[nodiscard]] inline LogitsView last_rows(const LogitsView& all, std::size_t count) {
    return LogitsView{all.data + (all.rows - count) * all.row_stride, count, all.vocab, all.row_stride};
}

// A rule's verdict over k drafts keeps at most all k of them.
inline void check_verdict(const AcceptanceResult& verdict, std::size_t k) {
    if (verdict.accepted > k) throw Error("acceptance rule accepted more drafts than were proposed");
}

// `logits` holds at least draft.size() + 1 rows; the last k + 1 are used.
// They have been through the logit stages (DecoderSession::target_rows).
// `rows` is reused between calls; it processes each row only as far as the
// rule reads it (see LazyDistributions).
template <AcceptanceRule Rule>
AcceptanceResult verify_on_host(const LogitsView& logits, const DraftProposal& draft, const SamplingOptions& sampling,
                                const CounterRng& rng, std::uint64_t first_position, LazyDistributions& rows,
                                const Rule& rule) {
    const std::size_t k = draft.size();
    const std::size_t first_row = logits.rows - (k + 1);
    if (sampling.greedy()) {
        std::vector<Token> argmax(k + 1);
        for (std::size_t i = 0; i <= k; ++i)
            argmax[i] = greedy_token(logits.row(first_row + i), "target model", first_position + i);
        return accept_greedy(draft.tokens, argmax);
    }
    rows.reset(logits, first_row, k + 1, sampling, "target model", first_position);
    return rule(draft, DistributionRows{nullptr, k + 1, logits.vocab, &rows}, rng, first_position);
}

// One token from the last row, as plain autoregressive sampling does it. The
// row has been through the logit stages (DecoderSession::target_rows).
inline Token sample_next_on_host(std::span<const float> logits_row, const SamplingOptions& sampling,
                                 const CounterRng& rng, std::uint64_t position, std::vector<float>& scratch) {
    if (sampling.greedy()) return greedy_token(logits_row, "target model", position);
    scratch.resize(logits_row.size());
    logits_to_distribution(logits_row, sampling, scratch, "target model", position);
    return sample_from_distribution(scratch, rng.uniform(position, RandomPurpose::target_sample));
}

}  // namespace detail
}  // namespace specdec
