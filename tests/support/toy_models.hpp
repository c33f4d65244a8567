#pragma once
// Small deterministic causal models for the core tests. They are real models
// in the sense the decoder cares about: the logits after a prefix are a fixed
// function of that prefix (the last two tokens and the position), computed from
// the KV cache they keep, so caching, batching and rollback mistakes change the
// output. A draft is made by adding seeded noise to the target's logits.
// ToyLM has the tree pass too (specdec::TreeLM): a node's logits are those
// after the cache plus the node's ancestors.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <optional>
#include <span>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"

namespace specdec::test {

struct ToyLMOptions {
    std::size_t vocab = 5;
    std::uint64_t seed = 1;
    double sharpness = 1.5;       // scale of the target's logits: larger = more peaked
    std::uint64_t noise_seed = 0;  // a draft: logits + noise * (independent Gaussian field)
    double noise = 0.0;
    std::size_t context = 512;
    std::optional<std::size_t> nan_at_position{};  // the row after this position gets a NaN
};

class ToyLM {
public:
    explicit ToyLM(ToyLMOptions options) : options_(options) {}

    std::size_t vocab_size() const { return options_.vocab; }
    std::size_t context_length() const { return options_.context; }
    std::size_t cached_tokens() const { return cache_.size(); }
    const std::vector<Token>& cache() const { return cache_; }
    std::size_t forward_calls() const { return forward_calls_; }
    std::size_t tokens_fed() const { return tokens_fed_; }  // over all forward() and forward_tree() calls

    LogitsView forward(std::span<const Token> tokens) {
        pending_tokens_.clear();
        pending_parents_.clear();
        if (cache_.size() + tokens.size() > options_.context) {
            std::ostringstream message;
            message << "ToyLM context overflow: " << cache_.size() << " + " << tokens.size() << " > "
                    << options_.context;
            throw Error(message.str());
        }
        ++forward_calls_;
        tokens_fed_ += tokens.size();
        logits_.resize(tokens.size() * options_.vocab);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= options_.vocab)
                throw Error("ToyLM: token id out of range");
            cache_.push_back(tokens[i]);
            fill_row_kept(cache_, {logits_.data() + i * options_.vocab, options_.vocab});
        }
        return dense_logits(logits_, tokens.size(), options_.vocab);
    }

    void truncate(std::size_t n) {
        pending_tokens_.clear();
        pending_parents_.clear();
        if (n > cache_.size()) throw Error("ToyLM: truncate beyond the cache");
        cache_.resize(n);
    }

    std::size_t tree_calls() const { return tree_calls_; }

    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t> parents) {
        if (parents.size() != tokens.size()) throw Error("ToyLM forward_tree: one parent per token expected");
        const std::size_t before = pending_tokens_.size();
        if (before + tokens.size() > options_.context - cache_.size())
            throw Error("ToyLM forward_tree: the pending tree would hold more nodes than the free context");
        std::vector<Token> history;
        std::vector<float> rows(tokens.size() * options_.vocab);
        for (std::size_t i = 0; i < tokens.size(); ++i) {
            const std::int32_t parent = parents[i];
            if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= options_.vocab ||
                parent < -1 || parent >= static_cast<std::int32_t>(before + i)) {
                pending_tokens_.resize(before);
                pending_parents_.resize(before);
                throw Error("ToyLM forward_tree: token id or parent out of range");
            }
            pending_tokens_.push_back(tokens[i]);
            pending_parents_.push_back(parent);
            history = path_to(static_cast<std::int32_t>(before + i));
            if (history.size() > options_.context) {
                pending_tokens_.resize(before);
                pending_parents_.resize(before);
                throw Error("ToyLM forward_tree: tree deeper than the free context");
            }
            fill_row_kept(history, {rows.data() + i * options_.vocab, options_.vocab});
        }
        ++tree_calls_;
        tokens_fed_ += tokens.size();
        logits_ = std::move(rows);
        return dense_logits(logits_, tokens.size(), options_.vocab);
    }

    void commit_tree(std::span<const std::int32_t> path) {
        std::int32_t previous = -1;
        for (const std::int32_t node : path) {
            if (node < 0 || static_cast<std::size_t>(node) >= pending_tokens_.size() ||
                pending_parents_[static_cast<std::size_t>(node)] != previous)
                throw Error("ToyLM commit_tree: the path is not a root-to-node path of the pending tree");
            previous = node;
        }
        for (const std::int32_t node : path) cache_.push_back(pending_tokens_[static_cast<std::size_t>(node)]);
        pending_tokens_.clear();
        pending_parents_.clear();
    }

    // Stateless: the logits row after `prefix` (what forward() returns for its last token).
    std::vector<float> logits_after(std::span<const Token> prefix) const {
        std::vector<float> row(options_.vocab);
        fill_row(prefix, row);
        return row;
    }

private:
    // The cache followed by the ancestors of pending node `node` and the node itself.
    std::vector<Token> path_to(std::int32_t node) const {
        std::vector<Token> tail;
        for (std::int32_t n = node; n >= 0; n = pending_parents_[static_cast<std::size_t>(n)])
            tail.push_back(pending_tokens_[static_cast<std::size_t>(n)]);
        std::vector<Token> history(cache_);
        history.insert(history.end(), tail.rbegin(), tail.rend());
        return history;
    }

    static double gaussian(std::uint64_t seed, std::uint64_t key, std::uint32_t lane) {
        const double u1 = 1.0 - counter_uniform(seed, key, RandomPurpose::draft_sample, lane);
        const double u2 = counter_uniform(seed, key, RandomPurpose::accept_test, lane);
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    }

    // A row is a function of the last token, the one before it (or none) and
    // the position modulo 8, but for the NaN of nan_at_position.
    struct RowKey {
        std::size_t position;  // of the last token
        std::uint64_t current;
        std::uint64_t previous;  // the token before it + 1, or 0 at position 0
        std::size_t phase;       // position % 8
    };

    static RowKey row_key(std::span<const Token> prefix) {
        const std::size_t position = prefix.size() - 1;
        return {position, static_cast<std::uint64_t>(prefix[position]),
                position > 0 ? static_cast<std::uint64_t>(prefix[position - 1]) + 1 : 0, position % 8};
    }

    void fill_values(const RowKey& at, std::span<float> row) const {
        const std::uint64_t key = (at.current * 1000003u + at.previous) * 8u + at.phase;
        for (std::size_t v = 0; v < options_.vocab; ++v) {
            double value = options_.sharpness * gaussian(options_.seed, key, static_cast<std::uint32_t>(v));
            if (options_.noise != 0.0)
                value += options_.noise * gaussian(options_.noise_seed, key, static_cast<std::uint32_t>(v));
            row[v] = static_cast<float>(value);
        }
    }

    void mark_nan(std::size_t position, std::span<float> row) const {
        if (options_.nan_at_position && *options_.nan_at_position == position) row[0] = std::nanf("");
    }

    void fill_row(std::span<const Token> prefix, std::span<float> row) const {
        const RowKey at = row_key(prefix);
        fill_values(at, row);
        mark_nan(at.position, row);
    }

    // fill_row for the passes: with a small vocabulary the same few rows recur
    // in every sample of a statistical test, so each one computed is kept.
    void fill_row_kept(std::span<const Token> prefix, std::span<float> row) {
        const std::size_t vocab = options_.vocab;
        if (vocab > kKeptRowsVocab) return fill_row(prefix, row);
        const RowKey at = row_key(prefix);
        const std::size_t index = (static_cast<std::size_t>(at.current) * (vocab + 1) + at.previous) * 8 + at.phase;
        if (kept_.empty()) {
            kept_.resize(vocab * (vocab + 1) * 8 * vocab);
            kept_filled_.resize(vocab * (vocab + 1) * 8);
        }
        const std::span<float> kept(kept_.data() + index * vocab, vocab);
        if (!kept_filled_[index]) {
            fill_values(at, kept);
            kept_filled_[index] = 1;
        }
        std::copy(kept.begin(), kept.end(), row.begin());
        mark_nan(at.position, row);
    }

    static constexpr std::size_t kKeptRowsVocab = 8;

    ToyLMOptions options_;
    std::vector<Token> cache_;
    std::vector<float> logits_;
    std::size_t forward_calls_ = 0;
    std::size_t tree_calls_ = 0;
    std::size_t tokens_fed_ = 0;
    std::vector<Token> pending_tokens_;
    std::vector<std::int32_t> pending_parents_;
    std::vector<float> kept_;                // fill_row_kept's rows, vocab floats each
    std::vector<std::uint8_t> kept_filled_;  // which of them are computed
};

// A ToyLM that also offers forward_last (the LastRowLM extension): the
// prompt's prefill and the draft's catching up go through it. It counts its
// calls, and those that fed several tokens (where the last row differs from
// the first).
class LastRowToyLM : public ToyLM {
public:
    using ToyLM::ToyLM;
    LogitsView forward_last(std::span<const Token> tokens) {
        ++last_row_calls;
        if (tokens.size() > 1) ++multi_token_last_row_calls;
        const LogitsView all = forward(tokens);
        return {all.data + (all.rows - 1) * all.row_stride, 1, all.vocab, all.row_stride};
    }
    std::size_t last_row_calls = 0;
    std::size_t multi_token_last_row_calls = 0;
};

}  // namespace specdec::test
