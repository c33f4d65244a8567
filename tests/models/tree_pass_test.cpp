// The tree pass of LlamaModel (specdec::TreeLM): every node of a token tree
// scored in one pass must get the logits forward() gives the chain of its
// root-to-node path, computed independently on another model; committing a
// path must leave the cache a fresh model fed those tokens would have.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "models/model_test_support.hpp"
#include "specdec/models/synthetic.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"

namespace {

using specdec::LlamaModel;
using specdec::Token;
using specdec::WeightType;
using specdec::test::relative_difference;

struct Tree {
    std::vector<Token> tokens;
    std::vector<std::int32_t> parents;

    [[nodiscard]] std::size_t size() const { return tokens.size(); }
    [[nodiscard]] std::size_t depth_of(std::size_t node) const {
        std::size_t depth = 1;
        for (std::int32_t p = parents[node]; p >= 0; p = parents[static_cast<std::size_t>(p)]) ++depth;
        return depth;
    }
    // The nodes from the root to `node`, in order.
    [[nodiscard]] std::vector<std::int32_t> path_to(std::size_t node) const {
        std::vector<std::int32_t> path;
        for (auto n = static_cast<std::int32_t>(node); n >= 0; n = parents[static_cast<std::size_t>(n)]) path.push_back(n);
        std::reverse(path.begin(), path.end());
        return path;
    }
    [[nodiscard]] std::vector<Token> path_tokens(std::size_t node) const {
        std::vector<Token> out;
        for (const std::int32_t n : path_to(node)) out.push_back(tokens[static_cast<std::size_t>(n)]);
        return out;
    }
    [[nodiscard]] bool is_leaf(std::size_t node) const {
        return std::find(parents.begin(), parents.end(), static_cast<std::int32_t>(node)) == parents.end();
    }
};

enum class Shape { chain, star, random_deep, wide };

std::string shape_name(Shape shape) {
    switch (shape) {
        case Shape::chain: return "chain of 7";
        case Shape::star: return "star of 6";
        case Shape::random_deep: return "random tree of 14 nodes, depth 6";
        case Shape::wide: return "random tree of 33 nodes, depth <= 8";
    }
    return "?";
}

// A tree of the given shape with seeded random tokens (siblings may repeat a
// token) whose nodes are numbered parents-first, as the contract requires.
Tree make_tree(Shape shape, std::uint32_t seed, std::size_t vocab) {
    std::mt19937 rng(seed);
    Tree tree;
    auto add = [&](std::int32_t parent) {
        tree.tokens.push_back(static_cast<Token>(rng() % vocab));
        tree.parents.push_back(parent);
    };
    // A random parent among -1 and the nodes shallower than max_depth.
    auto random_parent = [&](std::size_t max_depth) {
        std::vector<std::int32_t> candidates = {-1};
        for (std::size_t j = 0; j < tree.size(); ++j) {
            if (tree.depth_of(j) < max_depth) candidates.push_back(static_cast<std::int32_t>(j));
        }
        return candidates[rng() % candidates.size()];
    };
    switch (shape) {
        case Shape::chain:
            for (std::int32_t i = 0; i < 7; ++i) add(i - 1);
            break;
        case Shape::star:
            for (int i = 0; i < 6; ++i) add(-1);
            break;
        case Shape::random_deep:
            // A root and a few siblings first, then a depth-6 branch that is not
            // numbered consecutively, then random nodes up to depth 6.
            add(-1);
            add(-1);
            add(0);
            add(1);
            add(2);
            add(-1);
            add(4);
            add(6);
            add(7);
            while (tree.size() < 14) add(random_parent(6));
            break;
        case Shape::wide:
            while (tree.size() < 33) add(random_parent(8));
            break;
    }
    return tree;
}

std::vector<Token> prompt_tokens(std::size_t count, std::size_t vocab, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Token> tokens;
    for (std::size_t i = 0; i < count; ++i) tokens.push_back(static_cast<Token>(rng() % vocab));
    return tokens;
}

LlamaModel tiny_model(WeightType storage, std::size_t max_context = 0) {
    return specdec::make_synthetic_target(
        {.size = "tiny", .seed = 5, .target_storage = storage, .threads = 2, .max_context = max_context});
}

// The last logits row of forward() over prompt + path on `reference`, a model
// that is not the one under test: the chain computation the tree must match.
std::vector<float> chain_row(LlamaModel& reference, std::span<const Token> prompt, std::span<const Token> path) {
    reference.truncate(0);
    std::vector<Token> all(prompt.begin(), prompt.end());
    all.insert(all.end(), path.begin(), path.end());
    const specdec::LogitsView view = reference.forward(all);
    return {view.last_row().begin(), view.last_row().end()};
}

// Checks every row of a tree pass against the chain of its path.
void check_rows_against_chains(const std::vector<std::vector<float>>& rows, const Tree& tree, LlamaModel& reference,
                               std::span<const Token> prompt) {
    REQUIRE(rows.size() == tree.size());
    for (std::size_t node = 0; node < tree.size(); ++node) {
        INFO("node " << node << " at depth " << tree.depth_of(node));
        CHECK(relative_difference(rows[node], chain_row(reference, prompt, tree.path_tokens(node))) < 1e-4f);
    }
}

// The next-token logits after `tokens` on a fresh cache of `reference`.
std::vector<float> next_row_after(LlamaModel& reference, std::span<const Token> tokens) {
    return chain_row(reference, {}, tokens);
}

const WeightType kStorages[] = {WeightType::f32, WeightType::f16, WeightType::bf16, WeightType::q8_0, WeightType::q4_0};

}  // namespace

TEST_CASE("each node of a tree pass gets the logits of forward() over its root-to-node path", "[model][tree]") {
    const WeightType storage = GENERATE(from_range(std::begin(kStorages), std::end(kStorages)));
    const Shape shape = GENERATE(Shape::chain, Shape::star, Shape::random_deep, Shape::wide);
    const std::size_t prompt_length = GENERATE(std::size_t{0}, std::size_t{11});
    INFO("storage " << specdec::weight_type_name(storage) << ", " << shape_name(shape) << ", " << prompt_length
                    << " cached positions");
    LlamaModel model = tiny_model(storage);
    LlamaModel reference = tiny_model(storage);
    const std::vector<Token> prompt = prompt_tokens(prompt_length, model.vocab_size(), 7);
    const Tree tree = make_tree(shape, 100 + static_cast<std::uint32_t>(shape), model.vocab_size());

    if (!prompt.empty()) model.forward(prompt);
    const auto rows = specdec::test::copy_rows(model.forward_tree(tree.tokens, tree.parents));
    CHECK(model.cached_tokens() == prompt_length);  // the cache does not grow before a commit
    CHECK(model.pending_tree_nodes() == tree.size());
    check_rows_against_chains(rows, tree, reference, prompt);
}

TEST_CASE("the chain comparison of the tree tests tells a causal mask over node order from the ancestor mask",
          "[model][tree]") {
    // Negative control: a model that let node i attend to every earlier node
    // (the chain mask over the node order) would compute the chain over all
    // nodes 0..i; for the star's later nodes that row is far from the right one.
    LlamaModel model = tiny_model(WeightType::f32);
    LlamaModel reference = tiny_model(WeightType::f32);
    const std::vector<Token> prompt = prompt_tokens(5, model.vocab_size(), 3);
    const Tree star = make_tree(Shape::star, 9, model.vocab_size());
    model.forward(prompt);
    const auto rows = specdec::test::copy_rows(model.forward_tree(star.tokens, star.parents));
    for (std::size_t node = 1; node < star.size(); ++node) {
        const std::vector<Token> all_earlier(star.tokens.begin(), star.tokens.begin() + static_cast<std::ptrdiff_t>(node) + 1);
        CHECK(relative_difference(rows[node], chain_row(reference, prompt, all_earlier)) > 1e-2f);
        CHECK(relative_difference(rows[node], chain_row(reference, prompt, star.path_tokens(node))) < 1e-4f);
    }
}

TEST_CASE("a tree grown over several forward_tree calls gets the rows of one call", "[model][tree]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::q8_0);
    const Shape shape = GENERATE(Shape::random_deep, Shape::wide);
    const bool by_depth = GENERATE(true, false);
    INFO("storage " << specdec::weight_type_name(storage) << ", " << shape_name(shape)
                    << (by_depth ? ", one call per depth" : ", calls of seeded random sizes"));
    LlamaModel model = tiny_model(storage);
    LlamaModel reference = tiny_model(storage);
    const std::vector<Token> prompt = prompt_tokens(9, model.vocab_size(), 11);
    const Tree tree = make_tree(shape, 200 + static_cast<std::uint32_t>(shape), model.vocab_size());

    model.forward(prompt);
    const auto one_call = specdec::test::copy_rows(model.forward_tree(tree.tokens, tree.parents));
    model.commit_tree({});

    // The calls' nodes get the numbers that follow the earlier calls'; renumber
    // the tree so that each call's nodes are consecutive.
    std::vector<std::vector<std::size_t>> calls;
    if (by_depth) {
        std::size_t max_depth = 0;
        for (std::size_t n = 0; n < tree.size(); ++n) max_depth = std::max(max_depth, tree.depth_of(n));
        for (std::size_t d = 1; d <= max_depth; ++d) {
            calls.emplace_back();
            for (std::size_t n = 0; n < tree.size(); ++n) {
                if (tree.depth_of(n) == d) calls.back().push_back(n);
            }
        }
    } else {
        std::mt19937 rng(17);
        for (std::size_t n = 0; n < tree.size();) {
            const std::size_t count = std::min<std::size_t>(1 + rng() % 5, tree.size() - n);
            calls.emplace_back();
            for (std::size_t i = 0; i < count; ++i) calls.back().push_back(n++);
        }
    }
    std::vector<std::int32_t> new_index(tree.size(), -1);
    std::vector<std::vector<float>> incremental(tree.size());
    std::int32_t next = 0;
    for (const auto& call : calls) {
        std::vector<Token> tokens;
        std::vector<std::int32_t> parents;
        for (const std::size_t n : call) {
            tokens.push_back(tree.tokens[n]);
            const std::int32_t parent = tree.parents[n];
            parents.push_back(parent < 0 ? -1 : new_index[static_cast<std::size_t>(parent)]);
            REQUIRE((parent < 0 || parents.back() >= 0));
            new_index[n] = next++;
        }
        const auto rows = specdec::test::copy_rows(model.forward_tree(tokens, parents));
        REQUIRE(rows.size() == call.size());
        for (std::size_t i = 0; i < call.size(); ++i) incremental[call[i]] = rows[i];
    }
    CHECK(model.pending_tree_nodes() == tree.size());
    CHECK(model.cached_tokens() == prompt.size());
    for (std::size_t n = 0; n < tree.size(); ++n) {
        INFO("node " << n);
        CHECK(relative_difference(incremental[n], one_call[n]) < 1e-4f);
    }
    check_rows_against_chains(incremental, tree, reference, prompt);
}

TEST_CASE("after commit_tree of a root-to-leaf path the model continues like a fresh model fed those tokens",
          "[model][tree]") {
    const WeightType storage = GENERATE(from_range(std::begin(kStorages), std::end(kStorages)));
    const Shape shape = GENERATE(Shape::chain, Shape::star, Shape::random_deep, Shape::wide);
    INFO("storage " << specdec::weight_type_name(storage) << ", " << shape_name(shape));
    LlamaModel model = tiny_model(storage);
    LlamaModel reference = tiny_model(storage);
    const std::vector<Token> prompt = prompt_tokens(6, model.vocab_size(), 21);
    const std::vector<Token> continuation = {3, 141, 59};
    const Tree tree = make_tree(shape, 300 + static_cast<std::uint32_t>(shape), model.vocab_size());

    for (std::size_t leaf = 0; leaf < tree.size(); ++leaf) {
        if (!tree.is_leaf(leaf)) continue;
        INFO("path to leaf " << leaf << " at depth " << tree.depth_of(leaf));
        model.truncate(0);
        model.forward(prompt);
        model.forward_tree(tree.tokens, tree.parents);
        const std::vector<std::int32_t> path = tree.path_to(leaf);
        model.commit_tree(path);
        CHECK(model.cached_tokens() == prompt.size() + path.size());
        CHECK(model.pending_tree_nodes() == 0);

        std::vector<Token> expected_tokens = prompt;
        const std::vector<Token> path_tokens = tree.path_tokens(leaf);
        expected_tokens.insert(expected_tokens.end(), path_tokens.begin(), path_tokens.end());
        const auto rows = specdec::test::copy_rows(model.forward(continuation));
        for (std::size_t i = 0; i < continuation.size(); ++i) {
            expected_tokens.push_back(continuation[i]);
            CHECK(relative_difference(rows[i], next_row_after(reference, expected_tokens)) < 1e-4f);
        }
    }
}

TEST_CASE("commit_tree of an inner node's path, then a second tree on the grown cache, stays exact", "[model][tree]") {
    const WeightType storage = GENERATE(WeightType::f32, WeightType::q4_0);
    INFO("storage " << specdec::weight_type_name(storage));
    LlamaModel model = tiny_model(storage);
    LlamaModel reference = tiny_model(storage);
    std::vector<Token> committed = prompt_tokens(4, model.vocab_size(), 31);
    model.forward(committed);
    for (std::uint32_t round = 0; round < 3; ++round) {
        INFO("round " << round);
        const Tree tree = make_tree(Shape::random_deep, 400 + round, model.vocab_size());
        const auto rows = specdec::test::copy_rows(model.forward_tree(tree.tokens, tree.parents));
        check_rows_against_chains(rows, tree, reference, committed);
        // The deepest node's parent: a path that ends inside the tree.
        std::size_t deepest = 0;
        for (std::size_t n = 0; n < tree.size(); ++n) deepest = tree.depth_of(n) > tree.depth_of(deepest) ? n : deepest;
        const std::size_t inner = static_cast<std::size_t>(tree.parents[deepest]);
        model.commit_tree(tree.path_to(inner));
        const std::vector<Token> path_tokens = tree.path_tokens(inner);
        committed.insert(committed.end(), path_tokens.begin(), path_tokens.end());
        CHECK(model.cached_tokens() == committed.size());
    }
    const Token next = 77;
    const auto rows = specdec::test::copy_rows(model.forward(std::span<const Token>(&next, 1)));
    committed.push_back(next);
    CHECK(relative_difference(rows[0], next_row_after(reference, committed)) < 1e-4f);
}

TEST_CASE("an empty commit_tree, forward and truncate discard the pending tree and leave the cache as it was",
          "[model][tree]") {
    LlamaModel model = tiny_model(WeightType::f32);
    LlamaModel reference = tiny_model(WeightType::f32);
    const std::vector<Token> prompt = prompt_tokens(8, model.vocab_size(), 41);
    const Tree tree = make_tree(Shape::random_deep, 500, model.vocab_size());
    const std::vector<Token> next = {12, 34};
    auto expect_continues_prompt = [&](std::size_t kept) {
        CHECK(model.pending_tree_nodes() == 0);
        CHECK(model.cached_tokens() == kept);
        std::vector<Token> expected(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(kept));
        const auto rows = specdec::test::copy_rows(model.forward(next));
        for (std::size_t i = 0; i < next.size(); ++i) {
            expected.push_back(next[i]);
            CHECK(relative_difference(rows[i], next_row_after(reference, expected)) < 1e-4f);
        }
    };

    SECTION("empty commit") {
        model.forward(prompt);
        model.forward_tree(tree.tokens, tree.parents);
        model.commit_tree({});
        expect_continues_prompt(prompt.size());
    }
    SECTION("forward") {
        model.forward(std::span<const Token>(prompt.data(), 5));
        model.forward_tree(tree.tokens, tree.parents);
        const auto rows = specdec::test::copy_rows(model.forward(std::span<const Token>(prompt.data() + 5, 3)));
        CHECK(relative_difference(rows.back(), next_row_after(reference, prompt)) < 1e-4f);
        const std::int32_t root = 0;
        CHECK_THROWS_AS(model.commit_tree(std::span<const std::int32_t>(&root, 1)), specdec::Error);
        expect_continues_prompt(prompt.size());
    }
    SECTION("forward_last") {
        model.forward(std::span<const Token>(prompt.data(), 5));
        model.forward_tree(tree.tokens, tree.parents);
        model.forward_last(std::span<const Token>(prompt.data() + 5, 3));
        expect_continues_prompt(prompt.size());
    }
    SECTION("truncate") {
        model.forward(prompt);
        model.forward_tree(tree.tokens, tree.parents);
        model.truncate(prompt.size() - 2);
        expect_continues_prompt(prompt.size() - 2);
    }
    SECTION("a new tree after a discard is numbered from 0") {
        model.forward(prompt);
        model.forward_tree(tree.tokens, tree.parents);
        model.truncate(prompt.size());
        const Tree chain = make_tree(Shape::chain, 501, model.vocab_size());
        const auto rows = specdec::test::copy_rows(model.forward_tree(chain.tokens, chain.parents));
        check_rows_against_chains(rows, chain, reference, prompt);
        CHECK(model.pending_tree_nodes() == chain.size());
    }
}

TEST_CASE("forward_tree rejects bad trees with an Error naming the value and leaves cache and pending tree unchanged",
          "[model][tree]") {
    // The model's context holds 16 positions; 10 are cached, so 6 slots are free.
    LlamaModel model = tiny_model(WeightType::f32, /*max_context=*/16);
    LlamaModel reference = tiny_model(WeightType::f32);
    const std::vector<Token> prompt = prompt_tokens(10, model.vocab_size(), 51);
    model.forward(prompt);
    // A pending tree of 3 nodes: 0 and 1 children of the cache, 2 a child of 0.
    const Tree first{{5, 6, 7}, {-1, -1, 0}};
    model.forward_tree(first.tokens, first.parents);

    using Parents = std::vector<std::int32_t>;
    using Tokens = std::vector<Token>;
    SECTION("a parent that is the node itself") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1, 2}, Parents{2, 4}),
                          Catch::Contains("parent 4 of node 4") && Catch::Contains("[0, 4)"));
    }
    SECTION("a parent that is a later node of the same call") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1, 2}, Parents{4, -1}), Catch::Contains("parent 4 of node 3"));
    }
    SECTION("a parent below -1") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1}, Parents{-2}), Catch::Contains("parent -2 of node 3"));
    }
    SECTION("a token id outside the vocabulary") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1, 512}, Parents{2, 2}), Catch::Contains("token id 512"));
        CHECK_THROWS_WITH(model.forward_tree(Tokens{-1}, Parents{-1}), Catch::Contains("token id -1"));
    }
    SECTION("more parents than tokens") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1}, Parents{-1, 0}), Catch::Contains("1 tokens with 2 parents"));
    }
    SECTION("a node deeper than the free context") {
        // Node 2 has depth 2; a chain of 5 below it reaches depth 7 > 6.
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1, 2, 3, 4, 5}, Parents{2, 3, 4, 5, 6}),
                          Catch::Contains("depth 7") && Catch::Contains("context length 16"));
    }
    SECTION("more pending nodes than free cache slots") {
        CHECK_THROWS_WITH(model.forward_tree(Tokens{1, 2, 3, 4}, Parents{-1, -1, -1, -1}),
                          Catch::Contains("needs 7 free cache slots") && Catch::Contains("at most 6"));
    }
    SECTION("commit of a path that skips a node") {
        CHECK_THROWS_WITH(model.commit_tree(Parents{2}), Catch::Contains("node 2 at path index 0 has parent 0"));
    }
    SECTION("commit of nodes that are not parent and child") {
        CHECK_THROWS_WITH(model.commit_tree(Parents{1, 2}), Catch::Contains("node 2 at path index 1 has parent 0"));
    }
    SECTION("commit of a node outside the pending tree") {
        CHECK_THROWS_WITH(model.commit_tree(Parents{0, 3}), Catch::Contains("node 3 at path index 1") && Catch::Contains("[0, 3)"));
        CHECK_THROWS_WITH(model.commit_tree(Parents{-1}), Catch::Contains("node -1 at path index 0"));
    }
    CHECK(model.cached_tokens() == prompt.size());
    REQUIRE(model.pending_tree_nodes() == first.size());
    // The pending tree is intact: grow it below node 2 (exactly filling the
    // free slots), check the new rows, then commit a path through both calls.
    const auto rows = specdec::test::copy_rows(model.forward_tree(Tokens{8, 9, 10}, Parents{2, 3, -1}));
    const Tree whole{{5, 6, 7, 8, 9, 10}, {-1, -1, 0, 2, 3, -1}};
    for (std::size_t i = 0; i < rows.size(); ++i) {
        CHECK(relative_difference(rows[i], chain_row(reference, prompt, whole.path_tokens(3 + i))) < 1e-4f);
    }
    model.commit_tree(Parents{0, 2, 3, 4});
    CHECK(model.cached_tokens() == 14);
    std::vector<Token> expected = prompt;
    for (const Token t : {5, 7, 8, 9}) expected.push_back(t);
    const Token next = 42;
    const auto next_rows = specdec::test::copy_rows(model.forward(std::span<const Token>(&next, 1)));
    expected.push_back(next);
    CHECK(relative_difference(next_rows[0], next_row_after(reference, expected)) < 1e-4f);
}

TEST_CASE("an empty forward_tree returns no rows and changes nothing", "[model][tree]") {
    LlamaModel model = tiny_model(WeightType::f32);
    model.forward(std::vector<Token>{1, 2, 3});
    CHECK(model.forward_tree({}, {}).rows == 0);
    CHECK(model.cached_tokens() == 3);
    CHECK(model.pending_tree_nodes() == 0);
}

TEST_CASE("attention over runs of rows equals attention over the same rows gathered contiguously", "[model][tree]") {
    const std::size_t head_dim = GENERATE(std::size_t{8}, std::size_t{24}, std::size_t{64}, std::size_t{128});
    INFO("head_dim " << head_dim);
    const std::size_t rows = 40, stride = head_dim * 2;
    std::vector<float> q(head_dim), keys(rows * stride), values(rows * stride);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = specdec::detail::synthetic_normal(4, i);
    for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = specdec::detail::synthetic_normal(5, i);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = specdec::detail::synthetic_normal(6, i);
    const std::vector<specdec::cpu::RowRun> runs = {{0, 17}, {19, 1}, {22, 3}, {39, 1}};
    std::vector<float> gathered_keys, gathered_values;
    for (const auto& run : runs) {
        for (std::size_t j = run.first; j < run.first + run.count; ++j) {
            gathered_keys.insert(gathered_keys.end(), &keys[j * stride], &keys[j * stride] + head_dim);
            gathered_values.insert(gathered_values.end(), &values[j * stride], &values[j * stride] + head_dim);
        }
    }
    const std::size_t visible = gathered_keys.size() / head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    std::vector<float> scores(rows), from_runs(head_dim), from_gathered(head_dim), scalar(head_dim);
    specdec::cpu::attend_runs(q.data(), keys.data(), values.data(), stride, runs.data(), runs.size(), head_dim, scale,
                              scores.data(), from_runs.data());
    specdec::cpu::attend(q.data(), gathered_keys.data(), gathered_values.data(), head_dim, visible, head_dim, scale,
                         scores.data(), from_gathered.data());
    specdec::cpu::detail::attend_runs_scalar(q.data(), keys.data(), values.data(), stride, runs.data(), runs.size(), head_dim,
                                             scale, scores.data(), scalar.data());
    // The same rows in the same order: equal up to the vector exp (~2e-7 relative).
    CHECK(specdec::test::max_abs_difference(from_runs, from_gathered) < 1e-6f);
    CHECK(specdec::test::max_abs_difference(from_runs, scalar) < 1e-5f);
    // And not the attention over all rows (the runs leave some out).
    std::vector<float> all(head_dim);
    specdec::cpu::attend(q.data(), keys.data(), values.data(), stride, rows, head_dim, scale, scores.data(), all.data());
    CHECK(specdec::test::max_abs_difference(from_runs, all) > 1e-3f);
}

namespace {

// On a model loaded from a file: a tree pass checked against the chains, then
// a commit of the deepest path checked against a fresh model, per shape.
void check_tree_and_commit(LlamaModel& model, LlamaModel& reference, std::span<const Token> prompt) {
    for (const Shape shape : {Shape::random_deep, Shape::wide}) {
        INFO(shape_name(shape));
        const Tree tree = make_tree(shape, 600 + static_cast<std::uint32_t>(shape), model.vocab_size());
        if (prompt.size() + tree.size() + 1 > model.context_length()) continue;
        model.truncate(0);
        model.forward(prompt);
        const auto rows = specdec::test::copy_rows(model.forward_tree(tree.tokens, tree.parents));
        check_rows_against_chains(rows, tree, reference, prompt);
        std::size_t deepest = 0;
        for (std::size_t n = 0; n < tree.size(); ++n) deepest = tree.depth_of(n) > tree.depth_of(deepest) ? n : deepest;
        model.commit_tree(tree.path_to(deepest));
        std::vector<Token> expected(prompt.begin(), prompt.end());
        const std::vector<Token> path_tokens = tree.path_tokens(deepest);
        expected.insert(expected.end(), path_tokens.begin(), path_tokens.end());
        const Token next = 3;
        const auto next_rows = specdec::test::copy_rows(model.forward(std::span<const Token>(&next, 1)));
        expected.push_back(next);
        CHECK(relative_difference(next_rows[0], next_row_after(reference, expected)) < 1e-4f);
    }
}

}  // namespace

TEST_CASE("stories260K: each node of a tree pass gets the logits of forward() over its path, and a commit continues exactly",
          "[model][tree][fixture]") {
    const std::string file = GENERATE(std::string("stories260K.gguf"), std::string("stories260K-q8_0.gguf"),
                                      std::string("stories260K-q4_0.gguf"));
    INFO(file);
    const auto path = specdec::test::fixture_path(file);
    if (!path) SPECDEC_SKIP("fixture " + file + " not found (set SPECDEC_FIXTURES or provide ../shared/fixtures)");
    LlamaModel model = LlamaModel::from_gguf(*path, {.threads = 2});
    LlamaModel reference = LlamaModel::from_gguf(*path, {.threads = 2});
    check_tree_and_commit(model, reference, prompt_tokens(7, model.vocab_size(), 61));
}

TEST_CASE("the architecture fixtures (biases, RoPE layouts, frequency factors) score trees like chains",
          "[model][tree][fixture]") {
    const std::string name = GENERATE(as<std::string>{}, "llama-gqa", "llama3", "qwen2", "mistral");
    const std::string type = GENERATE(as<std::string>{}, "f32", "q8_0");
    const std::filesystem::path path = std::filesystem::path(SPECDEC_REPO_FIXTURES) / (name + "-" + type + ".gguf");
    INFO(path.filename().string());
    if (!std::filesystem::exists(path)) SPECDEC_SKIP("fixture " << path.string() << " not found");
    LlamaModel model = LlamaModel::from_gguf(path, {.threads = 2});
    LlamaModel reference = LlamaModel::from_gguf(path, {.threads = 2});
    check_tree_and_commit(model, reference, prompt_tokens(5, model.vocab_size(), 71));
}
