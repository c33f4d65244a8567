#pragma once
// An independent float64 reference of the Llama-family forward pass (llama,
// Llama 3 RoPE frequency factors, qwen2 attention biases, mistral, grouped-
// query attention, both RoPE layouts, partial and linearly scaled RoPE),
// written with Eigen in reference_transformer.cpp and kept plain on purpose:
// every position of a sequence is recomputed from the embeddings, with no KV
// cache, no blocking and none of the library's kernels. The weights are the
// model's own, dequantised row by row to double, so a quantised model is
// compared against its dequantised weights (docs/reference-model.md).
//
// The interface carries no Eigen type, so that CUDA translation units can
// link the reference without compiling Eigen under nvcc.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/types.hpp"
#include "specdec/models/llama_weights.hpp"

namespace specdec::test {

// Deliberate faults, for negative controls: a comparison that cannot tell a
// broken forward pass from a correct one proves nothing.
struct ReferenceOptions {
    // Rotate each query as if it were `query_rope_offset` positions later
    // than its keys. (Shifting queries and keys alike would change nothing
    // but rounding: attention scores under RoPE depend on relative positions.)
    int query_rope_offset = 0;
    bool attention_skips_own_key = false;  // each query attends to positions < its own only (position 0 keeps its key)
};

// Logits rows of one sequence: rows[i] predicts the token after tokens[i].
using ReferenceLogits = std::vector<std::vector<double>>;

class ReferenceTransformer {
public:
    // Copies the weights, dequantised to double; `weights` need not outlive it.
    explicit ReferenceTransformer(const LlamaWeights& weights, ReferenceOptions options = {});
    ~ReferenceTransformer();
    ReferenceTransformer(ReferenceTransformer&&) noexcept;
    ReferenceTransformer& operator=(ReferenceTransformer&&) noexcept;

    [[nodiscard]] std::size_t vocab_size() const noexcept;

    // One logits row per token of the sequence, from position 0.
    [[nodiscard]] ReferenceLogits logits(std::span<const Token> tokens) const;

    // Several independent sequences (of any lengths), each from position 0:
    // what a batched multi-sequence pass must reproduce row by row.
    [[nodiscard]] std::vector<ReferenceLogits> logits(const std::vector<std::vector<Token>>& sequences) const;

private:
    struct Weights;
    std::unique_ptr<const Weights> weights_;
    ReferenceOptions options_;
};

// How far a model's logits rows are from the reference's. A row's error is
// max_j |model_j - reference_j| / max_j |reference_j| (relative to the
// row's largest reference logit, so that it does not depend on a logit's
// scale and is not inflated by logits near zero); `worst` is the largest over
// the rows compared, found at row `worst_row`.
struct ReferenceAgreement {
    double worst = 0.0;
    std::size_t worst_row = 0;
    std::size_t rows = 0;
};

// Row error of one model row (floats) against one reference row.
[[nodiscard]] double relative_row_error(std::span<const float> model, std::span<const double> reference);

// Adds rows to a running comparison: model_rows[i] against reference_rows[first_reference_row + i].
void compare_rows(ReferenceAgreement& agreement, const std::vector<std::vector<float>>& model_rows,
                  const ReferenceLogits& reference_rows, std::size_t first_reference_row = 0);

}  // namespace specdec::test
