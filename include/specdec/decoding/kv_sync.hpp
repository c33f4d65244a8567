#pragma once
// Keeps a model's KV cache in step with a token sequence. The decoder knows
// which token ids it has fed; "rollback" is a truncate() to the longest common
// prefix with the sequence we want, then feeding what is missing. This one
// mechanism covers prompt prefill, rejected drafts, and the draft catching up
// on the last accepted draft token plus the corrected/bonus token.
// Every call that changes the model's cache is checked right after it
// (cache_checks.hpp): a model whose truncate() or forward() leaves the cache
// at another length than asked is reported, by role and name, at once.
#include <algorithm>
#include <cstdint>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/error.hpp"
#include "specdec/decoding/cache_checks.hpp"

namespace specdec::detail {

template <CausalLM Model>
class KvSync {
public:
    // `role` ("target", "draft") names the model in errors; it must outlive
    // the KvSync (a string literal).
    KvSync(Model& model, std::string_view role) : model_(&model), role_(role) {}

    Model& model() { return *model_; }
    const Model& model() const { return *model_; }
    [[nodiscard]] const std::vector<Token>& cached() const { return cached_; }

    [[nodiscard]] std::string_view role() const { return role_; }

    void reset() {
        cached_.clear();
        truncate_checked(*model_, 0, role_);
    }

    // Rolls the cache back to its first n tokens.
    void truncate(std::size_t n) {
        if (n < cached_.size()) {
            cached_.resize(n);
            truncate_checked(*model_, n, role_);
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
        const std::size_t before = model_->cached_tokens();
        LogitsView logits = model_->forward(tokens);
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        check_cache_grew(*model_, before, tokens.size(), role_, "forward");
        check_rows(logits, tokens.size(), tokens.size(), "forward", "one row per token");
        return logits;
    }

    // Appends tokens in one batched pass and returns the last one's logits
    // row only: through forward_last() when the model has it, so the output
    // head runs once (a prompt's prefill, the draft catching up on the tokens
    // the last verification committed, of which only the last row is read).
    LogitsView forward_last(std::span<const Token> tokens) {
        if constexpr (LastRowLM<Model>) {
            const std::size_t before = model_->cached_tokens();
            const LogitsView logits = model_->forward_last(tokens);
            cached_.insert(cached_.end(), tokens.begin(), tokens.end());
            check_cache_grew(*model_, before, tokens.size(), role_, "forward_last");
            check_rows(logits, 1, tokens.size(), "forward_last", "the last row only");
            return logits;
        } else {
            return forward(tokens);
        }
    }

    // Records `tokens` as appended to the cache by a pass the caller ran on
    // the model directly (a batched pass over several sequences' slots).
    void record_fed(std::span<const Token> tokens) {
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        check_cache_grew(*model_, cached_.size() - tokens.size(), tokens.size(), role_, "a batched pass (forward_batch)");
    }

    // A tree pass (TreeLM): scores nodes given as tokens with parent indices
    // without growing the cache; commit_tree() then appends one path of them.
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents)
        requires TreeLM<Model>
    {
        const std::size_t before = model_->cached_tokens();
        LogitsView logits = model_->forward_tree(tokens, parents);
        check_cache_grew(*model_, before, 0, role_, "forward_tree (which must not grow the cache)");
        check_rows(logits, tokens.size(), tokens.size(), "forward_tree", "one row per node");
        return logits;
    }

    // Appends the nodes `path` of the pending tree (whose tokens are
    // node_tokens) to the cache; an empty path discards the pending tree.
    void commit_tree(std::span<const std::int32_t> path, std::span<const Token> node_tokens)
        requires TreeLM<Model>
    {
        const std::size_t before = model_->cached_tokens();
        model_->commit_tree(path);
        for (const std::int32_t node : path) cached_.push_back(node_tokens[static_cast<std::size_t>(node)]);
        check_cache_grew(*model_, before, path.size(), role_, "commit_tree");
    }

    // Appends tokens whose logits nobody reads (a prompt's prefill).
    void prefill(std::span<const Token> tokens) { (void)forward_last(tokens); }

    // The device-verification path of targets that provide forward_and_verify().
    template <class... Args>
    auto forward_and_verify(std::span<const Token> tokens, Args&&... args) {
        const std::size_t before = model_->cached_tokens();
        auto verdict = model_->forward_and_verify(tokens, std::forward<Args>(args)...);
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
        check_cache_grew(*model_, before, tokens.size(), role_, "forward_and_verify");
        return verdict;
    }

private:
    // A pass over `tokens` tokens returned `rows` rows of vocab_size()
    // values each (`expected` says what the call promises, for the message).
    void check_rows(const LogitsView& logits, std::size_t rows, std::size_t tokens, const char* call,
                    const char* expected) const {
        check_logits_shape(logits, rows, model_->vocab_size(), std::string("model ") + call,
                           std::to_string(tokens) + " tokens", expected);
    }

    Model* model_;
    std::string_view role_;
    std::vector<Token> cached_;
};

}  // namespace specdec::detail
