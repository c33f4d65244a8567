#pragma once
// A MultiSequenceLM made of several copies of a single-sequence model, one
// per slot: forward_batch runs each feed through its own copy in turn. Rows
// are then independent of the batch by construction, which makes it the
// reference for the batched decoder's bookkeeping (which rows belong to whom,
// rollback per slot, admission and retirement) on any CausalLM, such as the
// small exact models of the chi-square tests.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"

namespace specdec::test {

template <CausalLM Model>
class MultiSlot {
public:
    MultiSlot(std::size_t slots, const std::function<Model()>& make) {
        for (std::size_t s = 0; s < slots; ++s) models_.push_back(make());
    }

    [[nodiscard]] std::size_t sequence_slots() const { return models_.size(); }
    [[nodiscard]] std::size_t vocab_size() const { return models_[0].vocab_size(); }
    [[nodiscard]] std::size_t context_length() const { return models_[0].context_length(); }
    [[nodiscard]] std::size_t cached_tokens() const { return models_[0].cached_tokens(); }
    [[nodiscard]] std::size_t cached_tokens(std::size_t slot) const { return at(slot).cached_tokens(); }
    [[nodiscard]] Model& slot_model(std::size_t slot) { return models_.at(slot); }
    [[nodiscard]] std::size_t batched_passes() const { return passes_; }

    LogitsView forward(std::span<const Token> tokens) { return models_[0].forward(tokens); }
    void truncate(std::size_t n) { models_[0].truncate(n); }
    void truncate(std::size_t slot, std::size_t n) { at(slot).truncate(n); }

    LogitsView forward_batch(std::span<const SequenceFeed> feeds) {
        std::vector<bool> seen(models_.size(), false);
        for (const SequenceFeed& feed : feeds) {
            if (feed.slot >= models_.size() || seen[feed.slot] || feed.tokens.empty()) {
                throw Error("MultiSlot forward_batch: slot " + std::to_string(feed.slot) +
                            " is out of range, repeated, or fed no tokens");
            }
            seen[feed.slot] = true;
        }
        ++passes_;
        const std::size_t vocab = vocab_size();
        rows_.clear();
        for (const SequenceFeed& feed : feeds) {
            const LogitsView view = at(feed.slot).forward(feed.tokens);
            for (std::size_t r = feed.last_row_only ? view.rows - 1 : 0; r < view.rows; ++r) {
                const std::span<const float> row = view.row(r);
                rows_.insert(rows_.end(), row.begin(), row.end());
            }
        }
        return LogitsView{rows_.data(), rows_.size() / vocab, vocab, vocab};
    }

private:
    Model& at(std::size_t slot) {
        if (slot >= models_.size()) throw Error("MultiSlot: slot " + std::to_string(slot) + " out of range");
        return models_[slot];
    }
    const Model& at(std::size_t slot) const {
        if (slot >= models_.size()) throw Error("MultiSlot: slot " + std::to_string(slot) + " out of range");
        return models_[slot];
    }

    std::vector<Model> models_;
    std::vector<float> rows_;
    std::size_t passes_ = 0;
};

// A MultiSlot whose batched pass is handed back through `Edit`, a callable
// (feeds, the pass's rows, a buffer it may fill) -> the rows to return: the
// multi-sequence adapters with a batching bug of the negative controls and
// misuse tests. Single-sequence calls are the MultiSlot's, unchanged.
template <CausalLM Model, class Edit>
class EditedBatchPass {
public:
    EditedBatchPass(MultiSlot<Model> slots, Edit edit = {}) : slots_(std::move(slots)), edit_(std::move(edit)) {}

    [[nodiscard]] std::size_t sequence_slots() const { return slots_.sequence_slots(); }
    [[nodiscard]] std::size_t vocab_size() const { return slots_.vocab_size(); }
    [[nodiscard]] std::size_t context_length() const { return slots_.context_length(); }
    [[nodiscard]] std::size_t cached_tokens() const { return slots_.cached_tokens(); }
    [[nodiscard]] std::size_t cached_tokens(std::size_t slot) const { return slots_.cached_tokens(slot); }

    LogitsView forward(std::span<const Token> tokens) { return slots_.forward(tokens); }
    void truncate(std::size_t n) { slots_.truncate(n); }
    void truncate(std::size_t slot, std::size_t n) { slots_.truncate(slot, n); }
    LogitsView forward_batch(std::span<const SequenceFeed> feeds) { return edit_(feeds, slots_.forward_batch(feeds), rows_); }

private:
    MultiSlot<Model> slots_;
    Edit edit_;
    std::vector<float> rows_;
};

}  // namespace specdec::test
