#pragma once
// One sequence of a model that holds several (MultiSequenceLM), seen as a
// plain CausalLM: the cache slot a batched decoder gives one request. Passes
// through it run that slot alone (a prompt's prefill, a draft model's catch
// up); the batched decoder's shared pass calls forward_batch on the model and
// tells each sequence's KvSync what was fed (KvSync::record_fed).
//
// A model without the extension has one sequence: slot 0 is the model itself.
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/cache_checks.hpp"

namespace specdec::detail {

// How many sequences a model holds at once.
template <CausalLM Model>
[[nodiscard]] std::size_t sequence_slots_of(const Model& model) {
    if constexpr (MultiSequenceLM<Model>) {
        return model.sequence_slots();
    } else {
        (void)model;
        return 1;
    }
}

template <CausalLM Model>
class SlotModel {
public:
    SlotModel(Model& model, std::size_t slot) : model_(&model), slot_(slot) {
        if (slot >= sequence_slots_of(model)) {
            throw Error("sequence slot " + std::to_string(slot) + " is outside the model's " +
                        std::to_string(sequence_slots_of(model)) + " slots");
        }
    }

    [[nodiscard]] Model& model() { return *model_; }
    [[nodiscard]] const Model& model() const { return *model_; }
    [[nodiscard]] std::size_t slot() const { return slot_; }

    [[nodiscard]] std::size_t vocab_size() const { return model_->vocab_size(); }
    [[nodiscard]] std::size_t context_length() const { return model_->context_length(); }
    [[nodiscard]] std::size_t cached_tokens() const {
        if constexpr (MultiSequenceLM<Model>) {
            return model_->cached_tokens(slot_);
        } else {
            return model_->cached_tokens();
        }
    }

    LogitsView forward(std::span<const Token> tokens) { return run(tokens, false); }
    LogitsView forward_last(std::span<const Token> tokens) { return run(tokens, true); }

    void truncate(std::size_t n) {
        if constexpr (MultiSequenceLM<Model>) {
            model_->truncate(slot_, n);
        } else {
            model_->truncate(n);
        }
    }

private:
    LogitsView run(std::span<const Token> tokens, bool last_row_only) {
        if constexpr (MultiSequenceLM<Model>) {
            if (tokens.empty()) return LogitsView{nullptr, 0, vocab_size(), vocab_size()};  // a feed is never empty
            const SequenceFeed feed{.slot = slot_, .tokens = tokens, .last_row_only = last_row_only};
            return model_->forward_batch(std::span<const SequenceFeed>(&feed, 1));
        } else if constexpr (LastRowLM<Model>) {
            return last_row_only ? model_->forward_last(tokens) : model_->forward(tokens);
        } else {
            const LogitsView all = model_->forward(tokens);
            if (!last_row_only || all.rows == 0) return all;
            return LogitsView{all.data + (all.rows - 1) * all.row_stride, 1, all.vocab, all.row_stride};
        }
    }

    Model* model_;
    std::size_t slot_;
};

// The model's label and the slot: errors about one sequence's cache say which.
template <CausalLM Model>
[[nodiscard]] std::string model_label(const SlotModel<Model>& slot, std::string_view role) {
    return model_label(slot.model(), role) + " (sequence slot " + std::to_string(slot.slot()) + ")";
}

}  // namespace specdec::detail
