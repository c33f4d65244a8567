// The llama.cpp adapter as a TreeLM (LlamaCppOptions::tree_leaves): a token
// tree scored in one llama_decode whose tokens carry several sequence ids.
//
// - Rows: every node's row equals the row forward() gives its root-to-node
//   path as a chain (up to rounding: llama.cpp's kernels are not batch
//   invariant, see llama_cpp_multi_sequence_test.cpp), also for nodes added
//   by later forward_tree calls under earlier ones (tree drafting); after
//   commit_tree(path) the cache continues as if the path had been fed as a
//   chain, whether the path ends on slot 0's own sequence or on another.
// - Errors: a context without tree_leaves, a tree with more leaves than
//   allowed, a bad parent or path: clear errors, the cache unchanged.
// - Exactness: TreeSpeculativeDecoder with a draft that drafts its tree level
//   by level through the adapter, at T = 1, through the sequence chi-square
//   harness with every depth reached; the negative control is an adapter
//   whose tree pass forgets the tree mask (its nodes fed as one chain, each
//   seeing its siblings' branches), which the same test catches.
// Greedy trees on every fixture run in llama_cpp_greedy_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "adapters/llama_cpp_recurrent_models.hpp"
#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/tree_decoder.hpp"
#include "support/catch.hpp"
#include "support/exactness_harness.hpp"

namespace llama_cpp_tree {

using specdec::LlamaCppModel;
using specdec::LlamaCppOptions;
using specdec::LogitsView;
using specdec::SamplingOptions;
using specdec::Token;
using specdec::TreeShape;
namespace support = specdec::test::llama_cpp;
using Window = support::VocabularyWindow<LlamaCppModel>;

constexpr float kTolerance = 1e-4f;  // as llama_cpp_multi_sequence_test.cpp
// After a commit the cache's cells no longer run in position order (freed
// branch cells in between take the next tokens), and llama.cpp's attention
// sums over cells in cell order: the same happens without any tree when a
// unified cache frees another sequence's cells (1.8e-3 measured on this
// model), so rows read after a commit get this wider bound.
constexpr float kReorderedTolerance = 5e-3f;
constexpr Token kWindowStart = 300;
constexpr std::size_t kWindow = 3;
constexpr std::size_t kSamples = 4000;
// The mask bug shifts the windowed rows by ~0.3 in logits, which on some
// seeds and shapes needs thousands of runs to show (3x1x1 on another
// exported seed: p 6.8e-6 at 4,000 runs, 0.62 at 1,000).
constexpr std::size_t kControlSamples = 4000;

LlamaCppOptions tree_options(std::size_t leaves, std::size_t context = 64) {
    LlamaCppOptions options = support::small_options(1, context);
    options.tree_leaves = leaves;
    return options;
}

std::vector<float> copy_row(const LogitsView& view, std::size_t r) {
    const auto row = view.row(r);
    return {row.begin(), row.end()};
}

// The row after `tokens` from a fresh pass over all of them (no tree, no rollback).
std::vector<float> chain_row(LlamaCppModel& model, std::span<const Token> tokens) {
    model.truncate(0);
    const std::vector<float> row = copy_row(model.forward_last(tokens), 0);
    model.truncate(0);
    return row;
}

void check_close(const std::vector<float>& a, const std::vector<float>& b, float tolerance = kTolerance) {
    REQUIRE(a.size() == b.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    CHECK(worst <= tolerance);
    CHECK(std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin());
}

// A pending tree kept beside the model: tokens and parents of every node.
struct TreeNodes {
    std::vector<Token> tokens;
    std::vector<std::int32_t> parents;
    std::vector<Token> path_to(std::int32_t node, std::span<const Token> prefix) const {
        std::vector<Token> path;
        for (std::int32_t n = node; n >= 0; n = parents[static_cast<std::size_t>(n)]) path.push_back(tokens[static_cast<std::size_t>(n)]);
        std::reverse(path.begin(), path.end());
        path.insert(path.begin(), prefix.begin(), prefix.end());
        return path;
    }
};

// Scores `tokens` (parents in pending-tree numbering) with forward_tree and
// checks each new node's row against a fresh chain pass on `reference`.
void score_and_check(LlamaCppModel& model, LlamaCppModel& reference, TreeNodes& tree, std::span<const Token> prefix,
                     const std::vector<Token>& tokens, const std::vector<std::int32_t>& parents) {
    const std::size_t first = tree.tokens.size();
    tree.tokens.insert(tree.tokens.end(), tokens.begin(), tokens.end());
    tree.parents.insert(tree.parents.end(), parents.begin(), parents.end());
    const LogitsView rows = model.forward_tree(tokens, parents);
    REQUIRE(rows.rows == tokens.size());
    std::vector<std::vector<float>> got;
    for (std::size_t i = 0; i < tokens.size(); ++i) got.push_back(copy_row(rows, i));
    CHECK(model.cached_tokens() == prefix.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        INFO("node " << first + i);
        check_close(got[i], chain_row(reference, tree.path_to(static_cast<std::int32_t>(first + i), prefix)));
    }
}

// The negative control's adapter: a tree pass without the tree mask. Its
// nodes run as one chain after the cache (each sees every node before it,
// siblings' branches included) and are rolled back; commit_tree feeds the
// path again as a chain.
class TreeWithoutMask {
public:
    explicit TreeWithoutMask(Window& model) : model_(&model) {}
    std::size_t vocab_size() const { return model_->vocab_size(); }
    std::size_t context_length() const { return model_->context_length(); }
    std::size_t cached_tokens() const { return model_->cached_tokens(); }
    void truncate(std::size_t n) { model_->truncate(n); }
    LogitsView forward(std::span<const Token> tokens) { return model_->forward(tokens); }
    LogitsView forward_tree(std::span<const Token> tokens, std::span<const std::int32_t>) {
        const std::size_t cached = model_->cached_tokens();
        const LogitsView view = model_->forward(tokens);
        rows_.assign(view.rows * view.vocab, 0.0f);
        for (std::size_t r = 0; r < view.rows; ++r) std::ranges::copy(view.row(r), rows_.begin() + static_cast<std::ptrdiff_t>(r * view.vocab));
        model_->truncate(cached);
        nodes_.insert(nodes_.end(), tokens.begin(), tokens.end());
        return specdec::dense_logits(rows_, view.rows, view.vocab);
    }
    void commit_tree(std::span<const std::int32_t> path) {
        std::vector<Token> tokens;
        for (const std::int32_t n : path) tokens.push_back(nodes_[static_cast<std::size_t>(n)]);
        nodes_.clear();
        if (!tokens.empty()) (void)model_->forward(tokens);
    }

private:
    Window* model_;
    std::vector<Token> nodes_;
    std::vector<float> rows_;
};

struct WindowPair {
    support::TempFolder folder{"tree-exactness"};
    support::ExportedPair files = support::export_synthetic_pair(folder.path());
    LlamaCppModel target = LlamaCppModel::from_gguf(files.target.string(), tree_options(4));
    LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), tree_options(4));
    Window target_window{target, kWindowStart, kWindow};
    Window draft_window{draft, kWindowStart, kWindow};
};

template <class Target, class Draft>
auto tree_runner(Target& target, Draft& draft, const TreeShape& shape, const SamplingOptions& sampling, std::size_t length,
                 const std::vector<Token>& prompt, specdec::GenerationStats& stats) {
    return [&target, &draft, shape, sampling, length, &prompt, &stats](std::uint64_t seed) {
        specdec::TreeSpeculativeDecoder<Target, Draft> decoder(
            specdec::target(target), specdec::draft(draft),
            specdec::DecodingOptions{.sampling = sampling, .seed = seed, .max_new_tokens = length}, shape);
        const specdec::GenerationResult result = decoder.generate(prompt);
        stats += result.stats;
        return specdec::test::sampled_run(result);
    };
}

// The test cases stay inside the namespace: the adapter's test files are
// compiled as one unit.
TEST_CASE("llama.cpp adapter: a tree pass scores every root-to-node path as a chain, also under nodes of earlier passes, "
          "and commit_tree continues the cache from the chosen path",
          "[llama_cpp][tree]") {
    support::TempFolder folder{"tree-rows"};
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    LlamaCppModel model = LlamaCppModel::from_gguf(files.target.string(), tree_options(6));
    LlamaCppModel reference = LlamaCppModel::from_gguf(files.target.string(), support::small_options(1, 64));
    CHECK(model.tree_leaves() == 6);
    const std::vector<Token> prefix{5, 300, 301, 17, 42};

    for (const bool commit_on_own_sequence : {true, false}) {
        INFO((commit_on_own_sequence ? "path on slot 0's own sequence" : "path on an opened sequence"));
        model.truncate(0);
        (void)model.forward(prefix);
        TreeNodes tree;
        // Two roots; node 0 has children 1 and 2, node 1 a child 3 (four leaves: 3, 2, 4 and later ones).
        score_and_check(model, reference, tree, prefix, {300, 301, 302, 303, 304}, {-1, 0, 0, 1, -1});
        // A later pass under earlier nodes: a second child of node 3 (opens a
        // sequence from an earlier node), the first child of leaf 2 (continues
        // it), and a child of the new node 5.
        score_and_check(model, reference, tree, prefix, {305, 306, 307}, {3, 2, 5});
        const std::vector<std::int32_t> path =
            commit_on_own_sequence ? std::vector<std::int32_t>{0, 1, 3} : std::vector<std::int32_t>{0, 1, 3, 5, 7};
        model.commit_tree(path);
        std::vector<Token> committed = prefix;
        for (const std::int32_t n : path) committed.push_back(tree.tokens[static_cast<std::size_t>(n)]);
        REQUIRE(model.cached_tokens() == committed.size());
        // The cache continues from the path: the next pass's rows are a fresh chain's.
        const std::vector<Token> next{310, 311};
        const LogitsView rows = model.forward(next);
        std::vector<Token> full = committed;
        full.push_back(next[0]);
        check_close(copy_row(rows, 0), chain_row(reference, full), kReorderedTolerance);
        full.push_back(next[1]);
        check_close(copy_row(rows, 1), chain_row(reference, full), kReorderedTolerance);
    }

    // Any other call drops a pending tree: forward() continues from the cache.
    model.truncate(0);
    (void)model.forward(prefix);
    (void)model.forward_tree(std::vector<Token>{300, 301}, std::vector<std::int32_t>{-1, -1});
    CHECK(model.cached_tokens() == prefix.size());
    std::vector<Token> full = prefix;
    full.push_back(320);
    check_close(copy_row(model.forward(std::vector<Token>{320}), 0), chain_row(reference, full), kReorderedTolerance);

    // With several slots the tree's sequences come after the slots': a tree
    // on slot 0 leaves slot 1 as it was.
    LlamaCppOptions two_slots = tree_options(3);
    two_slots.sequences = 2;
    LlamaCppModel slots = LlamaCppModel::from_gguf(files.target.string(), two_slots);
    const std::vector<Token> other{7, 302, 300, 11};
    const specdec::SequenceFeed feeds[] = {{.slot = 0, .tokens = prefix}, {.slot = 1, .tokens = other}};
    (void)slots.forward_batch(feeds);
    const LogitsView tree_rows = slots.forward_tree(std::vector<Token>{300, 301, 302}, std::vector<std::int32_t>{-1, -1, 1});
    std::vector<Token> path = prefix;
    path.push_back(301);
    path.push_back(302);
    check_close(copy_row(tree_rows, 2), chain_row(reference, path));
    slots.commit_tree(std::vector<std::int32_t>{1, 2});
    CHECK(slots.cached_tokens(0) == prefix.size() + 2);
    CHECK(slots.cached_tokens(1) == other.size());
    const std::vector<Token> next{321};
    const specdec::SequenceFeed again[] = {{.slot = 1, .tokens = next}};
    std::vector<Token> other_next = other;
    other_next.push_back(321);
    check_close(copy_row(slots.forward_batch(again), 0), chain_row(reference, other_next), kReorderedTolerance);
}

TEST_CASE("llama.cpp adapter: tree passes refuse a context without tree_leaves, too many leaves, bad parents and paths, "
          "and recurrent models, leaving the cache as it was",
          "[llama_cpp][tree][errors]") {
    support::TempFolder folder{"tree-errors"};
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());
    const std::vector<Token> prefix{5, 300, 301};
    const std::vector<Token> next{310};

    LlamaCppModel plain = LlamaCppModel::from_gguf(files.target.string(), support::small_options(1, 64));
    (void)plain.forward(prefix);
    CHECK_THROWS_WITH(plain.forward_tree(std::vector<Token>{1}, std::vector<std::int32_t>{-1}),
                      Catch::Contains("tree_leaves") && Catch::Contains("no tree pass"));

    LlamaCppModel model = LlamaCppModel::from_gguf(files.target.string(), tree_options(2));
    LlamaCppModel reference = LlamaCppModel::from_gguf(files.target.string(), support::small_options(1, 64));
    (void)model.forward(prefix);
    std::vector<Token> full = prefix;
    full.push_back(next[0]);
    const std::vector<float> expected = chain_row(reference, full);
    // Three leaves where two are allowed: refused before anything is stored.
    CHECK_THROWS_WITH(model.forward_tree(std::vector<Token>{1, 2, 3}, std::vector<std::int32_t>{-1, -1, -1}),
                      Catch::Contains("more than 2 leaves"));
    CHECK_THROWS_WITH(model.forward_tree(std::vector<Token>{1, 2}, std::vector<std::int32_t>{-1, 1}),
                      Catch::Contains("is not an earlier node; expected -1 or a node in"));
    CHECK_THROWS_WITH(model.forward_tree(std::vector<Token>{1}, std::vector<std::int32_t>{-1, -1}),
                      Catch::Contains("one parent per token"));
    CHECK_THROWS_WITH(model.forward_tree(std::vector<Token>{-1}, std::vector<std::int32_t>{-1}), Catch::Contains("outside the vocabulary"));
    CHECK(model.cached_tokens() == prefix.size());
    // Two leaves are fine; a path that skips a level or starts below the cache is refused.
    (void)model.forward_tree(std::vector<Token>{1, 2, 3}, std::vector<std::int32_t>{-1, 0, -1});
    CHECK_THROWS_WITH(model.commit_tree(std::vector<std::int32_t>{1}), Catch::Contains("not a child of the cache"));
    CHECK_THROWS_WITH(model.commit_tree(std::vector<std::int32_t>{2, 1}), Catch::Contains("not a child of node 2"));
    CHECK_THROWS_WITH(model.commit_tree(std::vector<std::int32_t>{7}), Catch::Contains("not in the pending tree"));
    model.commit_tree({});
    CHECK(model.cached_tokens() == prefix.size());
    check_close(copy_row(model.forward(next), 0), expected, kReorderedTolerance);

    support::TempFolder recurrent_folder{"tree-recurrent"};
    const std::filesystem::path mamba = recurrent_folder.path() / "mamba.gguf";
    support::write_tiny_recurrent_gguf({.architecture = support::RecurrentArchitecture::mamba, .seed = 11}, mamba);
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(mamba.string(), tree_options(4)), Catch::Contains("no tree pass"));
}

TEST_CASE("llama.cpp adapter: tree speculative sampling at T = 1 with the draft drafting its tree through the adapter "
          "passes the sequence chi-square down to the last depth, and a tree pass without the tree mask is caught",
          "[llama_cpp][tree][exactness]") {
    WindowPair pair;
    const SamplingOptions sampling{.temperature = 1.0};
    // 2x2x1: siblings at two depths; 3x1x1: the first depth drafts the whole window.
    for (const TreeShape& shape : {TreeShape::from_branching({2, 2, 1}), TreeShape::from_branching({3, 1, 1})}) {
        INFO("tree " << shape.describe());
        const std::size_t depth = shape.depth();
        const auto setup = [&](const std::string& name, std::size_t samples) {
            return support::window_exactness_setup(pair.target_window, kWindow, depth, sampling, name, samples);
        };
        {
            specdec::GenerationStats stats;
            const auto s = setup("llama.cpp adapter, tree " + shape.describe(), kSamples);
            const auto report = specdec::test::run_exactness(
                s, tree_runner(pair.target_window, pair.draft_window, shape, sampling, depth + 1, s.prompt, stats));
            specdec::test::check_exact(report, depth);
            // Every depth was accepted, and second siblings too (the residual path).
            REQUIRE(stats.accepted_at_depth_rank.size() >= depth);
            for (std::size_t d = 0; d < depth; ++d) CHECK(stats.accepted_at_depth_rank[d][0] > 0);
            REQUIRE(stats.accepted_at_depth_rank[0].size() > 1);
            CHECK(stats.accepted_at_depth_rank[0][1] > 0);
        }
        {
            specdec::GenerationStats stats;
            TreeWithoutMask buggy(pair.target_window);
            const auto s = setup("negative control: tree " + shape.describe() + " without the tree mask", kControlSamples);
            const auto report =
                specdec::test::run_exactness(s, tree_runner(buggy, pair.draft_window, shape, sampling, depth + 1, s.prompt, stats));
            specdec::test::check_caught(report, depth);
        }
    }
}

}  // namespace llama_cpp_tree
