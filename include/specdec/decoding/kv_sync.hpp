#pragma once
// Keeps a model's KV cache in step with a token sequence. The decoder knows
// which token ids it has fed; "rollback" is a truncate() to the longest common
// prefix with the sequence we want, then feeding what is missing. This one
// mechanism covers prompt prefill, rejected drafts, and the draft catching up
// on the last accepted draft token plus the corrected/bonus token.
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <span>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"

namespace specdec::detail {

template <CausalLM Model>
class KvSync {
public:
    explicit KvSync(Model& model) : model_(&model) {}

    Model& model() { return *model_; }
    const Model& model() const { return *model_; }
    [[nodiscard]] const std::vector<Token>& cached() const { return cached_; }

    void reset() {
        model_->truncate(0);
        cached_.clear();
    }

    // Rolls the cache back to its first n tokens.
    void truncate(std::size_t n) {
        if (n < cached_.size()) {
            model_->truncate(n);
            cached_.resize(n);
        }
    }

    // Tokens of `sequence` that are not in the cache, after rolling the cache
    // back to the longest common prefix; at most `keep_unfed` trailing tokens
    // are left out of the cache so that the caller can feed them.
    std::span<const Token> uncached_suffix(std::span<const Token> sequence, std::size_t keep_unfed = 1) {
        if (model_->cached_tokens() != cached_.size()) reset();  // someone else used the model
        const std::size_t limit = sequence.size() >= keep_unfed ? sequence.size() - keep_unfed : 0;
        std::size_t common = 0;
        const std::size_t bound = std::min(limit, cached_.size());
        while (common < bound && cached_[common] == sequence[common]) ++common;
        truncate(common);
        return sequence.subspan(common);
    }

    // Appends tokens to the cache in one batched forward pass.
    LogitsView forward(std::span<const Token> tokens) {
        LogitsView logits = model_->forward(tokens);
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        if (logits.rows != tokens.size()) {
            std::ostringstream message;
            message << "model forward returned " << logits.rows << " logits rows for " << tokens.size()
                    << " tokens: expected one row per token";
            throw Error(message.str());
        }
        if (logits.rows > 0 && (logits.vocab != model_->vocab_size() || (logits.rows > 1 && logits.row_stride < logits.vocab) ||
                                logits.data == nullptr)) {
            std::ostringstream message;
            message << "model forward returned logits rows of " << logits.vocab << " values (row stride "
                    << logits.row_stride << (logits.data == nullptr ? ", no data" : "")
                    << "): expected vocab_size() = " << model_->vocab_size() << " values per row";
            throw Error(message.str());
        }
        return logits;
    }

    // Records `tokens` as appended to the cache by a pass the caller ran on
    // the model directly (a batched pass over several sequences' slots).
    void record_fed(std::span<const Token> tokens) {
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        if (model_->cached_tokens() != cached_.size()) {
            std::ostringstream message;
            message << "after a batched pass the model holds " << model_->cached_tokens()
                    << " cached positions for a sequence of " << cached_.size() << ": expected them equal";
            throw Error(message.str());
        }
    }

    // A tree pass (TreeLM): scores nodes given as tokens with parent indices
    // without growing the cache; commit_tree() then appends one path of them.
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents)
        requires TreeLM<Model>
    {
        LogitsView logits = model_->forward_tree(tokens, parents);
        if (logits.rows != tokens.size() || (logits.rows > 0 && (logits.vocab != model_->vocab_size() ||
                                                                 logits.data == nullptr ||
                                                                 (logits.rows > 1 && logits.row_stride < logits.vocab)))) {
            std::ostringstream message;
            message << "model forward_tree returned " << logits.rows << " logits rows of " << logits.vocab
                    << " values for " << tokens.size() << " nodes: expected one row of vocab_size() = "
                    << model_->vocab_size() << " values per node";
            throw Error(message.str());
        }
        return logits;
    }

    // Appends the nodes `path` of the pending tree (whose tokens are
    // node_tokens) to the cache; an empty path discards the pending tree.
    void commit_tree(std::span<const std::int32_t> path, std::span<const Token> node_tokens)
        requires TreeLM<Model>
    {
        model_->commit_tree(path);
        for (const std::int32_t node : path) cached_.push_back(node_tokens[static_cast<std::size_t>(node)]);
        if (model_->cached_tokens() != cached_.size()) {
            std::ostringstream message;
            message << "model commit_tree of a " << path.size() << "-node path left " << model_->cached_tokens()
                    << " cached positions: expected " << cached_.size();
            throw Error(message.str());
        }
    }

    // Appends tokens whose logits nobody reads (a prompt's prefill): through
    // forward_last() when the model has it, so the output head runs once.
    void prefill(std::span<const Token> tokens) {
        if constexpr (LastRowLM<Model>) {
            const LogitsView logits = model_->forward_last(tokens);
            cached_.insert(cached_.end(), tokens.begin(), tokens.end());
            if (logits.rows != 1) {
                std::ostringstream message;
                message << "model forward_last returned " << logits.rows << " logits rows for " << tokens.size()
                        << " tokens: expected the last row only";
                throw Error(message.str());
            }
        } else {
            (void)forward(tokens);
        }
    }

    // The device-verification path of targets that provide forward_and_verify().
    template <class... Args>
    auto forward_and_verify(std::span<const Token> tokens, Args&&... args) {
        auto verdict = model_->forward_and_verify(tokens, std::forward<Args>(args)...);
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        return verdict;
    }

private:
    Model* model_;
    std::vector<Token> cached_;
};

}  // namespace specdec::detail
