#pragma once
// The logit stages of the sampler chain: the constraint mask, logit bias and
// penalties. Unlike the candidate stages they read the row's history (the
// sequence before the token the row predicts), so a row that scores draft i
// is adjusted with the committed tokens AND drafts 0 .. i - 1, exactly as
// autoregressive decoding would adjust it once those drafts were emitted.
// Every decoder, drafter and the verify-only API adjust rows here.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/sampling_options.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "specdec/sampling/token_constraint.hpp"

namespace specdec {

// What a row is conditioned on: the committed sequence (prompt included),
// then the drafts before the row's own token. A constraint in the options is
// at the state `committed` leads to; `drafted` is walked from there.
struct RowHistory {
    std::span<const Token> committed;
    std::span<const Token> drafted{};

    [[nodiscard]] std::size_t size() const { return committed.size() + drafted.size(); }
    [[nodiscard]] Token operator[](std::size_t i) const {
        return i < committed.size() ? committed[i] : drafted[i - committed.size()];
    }
};

namespace detail {

// The penalties over the window: each distinct token of the last
// penalty_last_n tokens with its count.
inline void apply_penalties(std::span<float> logits, const SamplingOptions& options, const RowHistory& history,
                            std::vector<std::pair<Token, std::uint32_t>>& counts) {
    const std::size_t window = std::min(options.penalty_last_n, history.size());
    counts.clear();
    for (std::size_t i = history.size() - window; i < history.size(); ++i) counts.emplace_back(history[i], 1u);
    std::sort(counts.begin(), counts.end());
    std::size_t distinct = 0;
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (distinct > 0 && counts[distinct - 1].first == counts[i].first) {
            ++counts[distinct - 1].second;
        } else {
            counts[distinct++] = counts[i];
        }
    }
    counts.resize(distinct);
    const auto repeat = static_cast<float>(options.repeat_penalty);
    const auto frequency = static_cast<float>(options.frequency_penalty);
    const auto presence = static_cast<float>(options.presence_penalty);
    for (const auto& [token, count] : counts) {
        const auto x = static_cast<std::size_t>(token);
        if (x >= logits.size()) continue;  // an id the vocabulary lacks cannot be penalised
        float& logit = logits[x];
        logit = logit <= 0.0f ? logit * repeat : logit / repeat;
        logit -= static_cast<float>(count) * frequency + presence;
    }
}

}  // namespace detail

// `out` = `logits` after the constraint mask and the logit stages in chain
// order (see SamplingOptions). `out` may be `logits` itself. A constraint is
// left at the state it was in. If the drafts leave the constraint (a draft
// it forbids), the row is not masked: the acceptance rule rejects that draft
// before it reads any row after it.
inline void adjust_logits(std::span<const float> logits, const SamplingOptions& options, const RowHistory& history,
                          std::span<float> out) {
    if (out.data() != logits.data()) std::copy(logits.begin(), logits.end(), out.begin());
    if (options.constraint != nullptr) {
        thread_local std::vector<std::uint8_t> mask;
        mask.assign(logits.size(), 0);
        if (detail::constraint_mask_after(*options.constraint, history.drafted, mask, history.size())) {
            for (std::size_t x = 0; x < out.size(); ++x)
                if (!mask[x]) out[x] = -std::numeric_limits<float>::infinity();
        }
    }
    thread_local std::vector<std::pair<Token, std::uint32_t>> counts;
    for (const SamplerStage stage : options.chain) {
        if (stage == SamplerStage::logit_bias) {
            for (const LogitBias& entry : options.logit_bias) {
                const auto x = static_cast<std::size_t>(entry.token);
                if (x < out.size()) out[x] += entry.bias;
            }
        } else if (stage == SamplerStage::penalties && options.penalises()) {
            detail::apply_penalties(out, options, history, counts);
        }
    }
}

// The processed distribution of a row: adjust_logits, then the candidate
// stages (logits_to_distribution). `probabilities` has the row's size.
inline void processed_distribution(std::span<const float> logits, const SamplingOptions& options,
                                   const RowHistory& history, std::span<float> probabilities,
                                   std::string_view who = "model", std::optional<std::uint64_t> position = std::nullopt) {
    if (!options.adjusts_logits()) {
        logits_to_distribution(logits, options, probabilities, who, position);
        return;
    }
    thread_local std::vector<float> adjusted;
    adjusted.resize(logits.size());
    adjust_logits(logits, options, history, adjusted);
    logits_to_distribution(adjusted, options, probabilities, who, position);
}

namespace detail {

// A pass's rows made ready for the rule: rows [first_row, first_row + count)
// of `logits` adjusted, row i with the history committed + drafts[0 .. i).
// Without logit stages the pass's own rows are returned untouched.
class AdjustedRows {
public:
    LogitsView adjust(const LogitsView& logits, std::size_t first_row, std::size_t count,
                      const SamplingOptions& options, std::span<const Token> committed, std::span<const Token> drafts) {
        if (!options.adjusts_logits()) return logits;
        const std::size_t vocab = logits.vocab;
        storage_.resize(count * vocab);
        for (std::size_t i = 0; i < count; ++i) {
            const RowHistory history{committed, drafts.first(std::min(i, drafts.size()))};
            adjust_logits(logits.row(first_row + i), options, history, {storage_.data() + i * vocab, vocab});
        }
        return LogitsView{storage_.data(), count, vocab, vocab};
    }

private:
    std::vector<float> storage_;
};

}  // namespace detail
}  // namespace specdec
