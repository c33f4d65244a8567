#pragma once
// What every drafter built on a draft *model* (ModelDrafter, ModelTreeDrafter)
// keeps between steps: the model's KV cache in step with the committed
// sequence, its prefill, and the check of the logits rows it returns.
#include <cstddef>
#include <span>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/kv_sync.hpp"

namespace specdec::detail {

template <CausalLM Model>
class DraftModelCache {
public:
    explicit DraftModelCache(Model& model) : cache_(model, "draft") {}

    [[nodiscard]] std::size_t vocab_size() const { return cache_.model().vocab_size(); }
    Model& model() { return cache_.model(); }

    void reset() { cache_.reset(); }
    // The cache's bookkeeping, for a batched decoder that runs the draft
    // passes of several sequences itself (one pass over all of them).
    KvSync<Model>& kv_sync() { return cache_; }

    // Runs the draft model over history except its last token, reusing the
    // longest common prefix already in its cache (see SpeculativeDecoder::prefill).
    void prefill(std::span<const Token> history) {
        // A history longer than the draft's context leaves no room to draft
        // (nothing is proposed), and feeding it would overflow the cache.
        if (history.size() > cache_.model().context_length()) return;
        const std::span<const Token> uncached = cache_.uncached_suffix(history);
        if (uncached.size() > 1) cache_.prefill(uncached.first(uncached.size() - 1));
    }

protected:
    // Every row the drafter reads is vocab_size() values wide (the rows' count
    // is the pass's to check).
    void check_vocab(const LogitsView& logits) const {
        check_logits_shape(logits, logits.rows, vocab_size(), "draft model", "a draft", "its vocabulary's width");
    }

    KvSync<Model> cache_;
};

}  // namespace specdec::detail
