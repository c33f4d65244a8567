#pragma once
// Drives a model through every kind of pass the decoders use and records its
// logits rows with the sequence each row belongs to, so that the rows can be
// held against a ReferenceTransformer (a correct one, or a deliberately
// broken one for the negative control) without running the model again.
//
// The kinds ("widths"): one-token passes; passes of 2..9 tokens in a row;
// a wide pass from an empty cache (more than cpu::kWideColumns tokens, the
// blocked-GEMM path); a rollback (truncate) followed by a wide pass over a
// different continuation; and, for a TreeLM, a token tree whose every node is
// compared with the reference over its root-to-node path, then a commit of
// one path and a pass after it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/model_contract.hpp"
#include "specdec/core/types.hpp"
#include "support/reference_transformer.hpp"

namespace specdec::test {

// Rows of one model call: rows[i] is the model's row for position
// first_position + i of `sequence` (tokens from position 0; the sequence may
// run past the last row, whose logits causality leaves unchanged).
struct ModelPass {
    std::string width;
    std::vector<Token> sequence;
    std::size_t first_position = 0;
    std::vector<std::vector<float>> rows;
};

// Tokens spread over the vocabulary, different for each salt.
inline std::vector<Token> reference_test_tokens(std::size_t count, std::size_t vocab, std::uint64_t salt) {
    std::vector<Token> tokens(count);
    for (std::size_t i = 0; i < count; ++i) tokens[i] = static_cast<Token>((i * 7919 + salt * 104729 + 17) % vocab);
    return tokens;
}

template <CausalLM Model>
std::vector<ModelPass> passes_at_every_width(Model& model, std::uint64_t salt = 1) {
    constexpr std::size_t kWide = 40;  // above cpu::kWideColumns (28): the blocked path
    const std::size_t vocab = model.vocab_size();
    const std::vector<Token> a = reference_test_tokens(kWide + 4, vocab, salt);
    std::vector<Token> b(a.begin(), a.begin() + 20);  // shares a's first 20 tokens, then differs
    for (const Token t : reference_test_tokens(32, vocab, salt + 1000)) b.push_back(t);

    std::vector<ModelPass> passes;
    auto run = [&](const std::string& width, const std::vector<Token>& sequence, std::size_t first, std::size_t count) {
        const LogitsView view = model.forward(std::span<const Token>(sequence).subspan(first, count));
        ModelPass pass{width, sequence, first, {}};
        for (std::size_t i = 0; i < view.rows; ++i) pass.rows.emplace_back(view.row(i).begin(), view.row(i).end());
        passes.push_back(std::move(pass));
    };

    model.truncate(0);
    for (std::size_t p = 0; p < 12; ++p) run("one token", a, p, 1);
    model.truncate(0);
    for (std::size_t count = 2, p = 0; count <= 9; p += count, ++count) run("2..9 tokens", a, p, count);
    model.truncate(0);
    run("wide", a, 0, kWide);
    model.truncate(20);  // roll back into the wide pass, continue differently
    run("after truncate", b, 20, b.size() - 20);

    if constexpr (TreeLM<Model>) {
        // Two roots after 10 cached tokens; node i's parent is parents[i].
        const std::vector<Token> tree_tokens = reference_test_tokens(8, vocab, salt + 2000);
        const std::vector<std::int32_t> parents = {-1, 0, 0, 1, 1, 2, -1, 6};
        model.truncate(10);
        const LogitsView view = model.forward_tree(tree_tokens, parents);
        for (std::size_t node = 0; node < tree_tokens.size(); ++node) {
            std::vector<Token> path;
            for (std::int32_t n = static_cast<std::int32_t>(node); n >= 0; n = parents[static_cast<std::size_t>(n)]) {
                path.insert(path.begin(), tree_tokens[static_cast<std::size_t>(n)]);
            }
            ModelPass pass{"tree", std::vector<Token>(b.begin(), b.begin() + 10), 0, {}};
            pass.sequence.insert(pass.sequence.end(), path.begin(), path.end());
            pass.first_position = pass.sequence.size() - 1;
            pass.rows.emplace_back(view.row(node).begin(), view.row(node).end());
            passes.push_back(std::move(pass));
        }
        // Keep the path 0 -> 1 -> 3, then one more token on top of it.
        const std::vector<std::int32_t> kept = {0, 1, 3};
        model.commit_tree(kept);
        std::vector<Token> committed(b.begin(), b.begin() + 10);
        for (const std::int32_t n : kept) committed.push_back(tree_tokens[static_cast<std::size_t>(n)]);
        committed.push_back(a[5]);
        run("after tree commit", committed, committed.size() - 1, 1);
    }
    return passes;
}

// The agreement of every pass with `reference`, per width and over all
// ("all"); each distinct sequence is run through the reference once.
inline std::map<std::string, ReferenceAgreement> agreement_by_width(const std::vector<ModelPass>& passes,
                                                                    const ReferenceTransformer& reference) {
    std::map<std::vector<Token>, ReferenceLogits> reference_rows;
    std::map<std::string, ReferenceAgreement> by_width;
    for (const ModelPass& pass : passes) {
        auto it = reference_rows.find(pass.sequence);
        if (it == reference_rows.end()) it = reference_rows.emplace(pass.sequence, reference.logits(pass.sequence)).first;
        compare_rows(by_width[pass.width], pass.rows, it->second, pass.first_position);
        compare_rows(by_width["all"], pass.rows, it->second, pass.first_position);
    }
    return by_width;
}

}  // namespace specdec::test
