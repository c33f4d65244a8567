// 06: a model written with Eigen as a target and a draft. The adapter keeps
// its own KV cache (Eigen matrices, one row per position), returns one logits
// row per token from forward(), and rolls the cache back in truncate(): that
// is all specdec::CausalLM asks. Here the target is a one-layer causal
// attention model and the draft is the same model without its attention
// layer (a bigram model over the same embeddings: smaller, often right).
// Built when Eigen is found (libeigen3-dev); needs only specdec::specdec.
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Dense>
#include <specdec/specdec.hpp>

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Random weights shared by the target and its draft (the same seed).
struct EigenWeights {
    RowMatrix embedding, unembedding, query, key, value, output;  // [vocab x d], [vocab x d], [d x d] x 4

    EigenWeights(Eigen::Index vocab, Eigen::Index dim, unsigned seed) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        auto random = [&](Eigen::Index rows, Eigen::Index cols, float scale) {
            RowMatrix m(rows, cols);
            for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = scale * normal(rng);
            return m;
        };
        const float inverse_sqrt_dim = 1.0f / std::sqrt(static_cast<float>(dim));
        embedding = random(vocab, dim, 1.0f);
        unembedding = random(vocab, dim, 3.0f * inverse_sqrt_dim);
        query = random(dim, dim, inverse_sqrt_dim);
        key = random(dim, dim, inverse_sqrt_dim);
        value = random(dim, dim, inverse_sqrt_dim);
        output = random(dim, dim, 0.5f * inverse_sqrt_dim);
    }
};

class EigenLM {
public:
    EigenLM(const EigenWeights& weights, bool attention, Eigen::Index context = 256)
        : w_(weights), attention_(attention), keys_(context, weights.query.rows()), values_(context, weights.query.rows()) {}

    std::size_t vocab_size() const { return static_cast<std::size_t>(w_.embedding.rows()); }
    std::size_t context_length() const { return static_cast<std::size_t>(keys_.rows()); }
    std::size_t cached_tokens() const { return cached_; }

    // Appends the tokens at positions cached_tokens().. and returns their logits rows.
    specdec::LogitsView forward(std::span<const specdec::Token> tokens) {
        const auto n = static_cast<Eigen::Index>(tokens.size()), past = static_cast<Eigen::Index>(cached_);
        if (cached_ + tokens.size() > context_length()) throw specdec::Error("EigenLM: the context is full");
        RowMatrix x(n, w_.embedding.cols());
        for (Eigen::Index i = 0; i < n; ++i) {
            const specdec::Token t = tokens[static_cast<std::size_t>(i)];
            if (t < 0 || static_cast<std::size_t>(t) >= vocab_size()) throw specdec::Error("EigenLM: token id " + std::to_string(t) + " is out of range");
            x.row(i) = w_.embedding.row(t);
        }
        if (attention_) {
            // Write this pass's keys and values into the cache, then attend causally.
            keys_.middleRows(past, n) = x * w_.key.transpose();
            values_.middleRows(past, n) = x * w_.value.transpose();
            const RowMatrix q = x * w_.query.transpose();
            const float scale = 1.0f / std::sqrt(static_cast<float>(q.cols()));
            RowMatrix attended(n, x.cols());
            for (Eigen::Index i = 0; i < n; ++i) {
                const Eigen::Index visible = past + i + 1;
                Eigen::RowVectorXf scores = q.row(i) * keys_.topRows(visible).transpose() * scale;
                scores = (scores.array() - scores.maxCoeff()).exp().matrix();
                attended.row(i) = scores / scores.sum() * values_.topRows(visible);
            }
            x += attended * w_.output.transpose();
        }
        logits_ = x * w_.unembedding.transpose();
        cached_ += tokens.size();
        return specdec::dense_logits(std::span<const float>(logits_.data(), static_cast<std::size_t>(logits_.size())),
                                     tokens.size(), vocab_size());
    }

    // Rows past n are overwritten by the next forward.
    void truncate(std::size_t n) {
        if (n > cached_) throw specdec::Error("EigenLM: truncate beyond the cache");
        cached_ = n;
    }

private:
    const EigenWeights& w_;
    bool attention_;
    RowMatrix keys_, values_, logits_;
    std::size_t cached_ = 0;
};
static_assert(specdec::CausalLM<EigenLM>);

int main() {
    const EigenWeights weights(/*vocab=*/128, /*dim=*/64, /*seed=*/3);
    EigenLM target(weights, /*attention=*/true);
    EigenLM draft(weights, /*attention=*/false);
    const std::vector<specdec::Token> prompt{5, 17, 42};
    const specdec::DecodingOptions greedy{.draft_tokens = 4, .sampling = {.temperature = 0.0}, .max_new_tokens = 48};

    const auto plain = specdec::AutoregressiveDecoder(target, greedy).generate(prompt);
    const auto fast = specdec::SpeculativeDecoder(specdec::target(target), specdec::draft(draft), greedy).generate(prompt);
    std::printf("greedy speculative %s autoregressive: %zu tokens in %zu target passes (%.2f per pass), %.0f%% of drafts accepted\n",
                plain.tokens == fast.tokens ? "==" : "DIFFERENT FROM", fast.tokens.size(), fast.stats.target_forward_passes,
                fast.stats.mean_tokens_per_target_pass(), 100.0 * fast.stats.acceptance_rate());
    return plain.tokens == fast.tokens ? 0 : 1;
}
