#pragma once
// Tree verification: exact acceptance over a tree of candidates scored in one
// target pass (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024). From
// the root, each node's children are tested in rank order by recursive
// rejection sampling without replacement; the first accepted child becomes the
// next node, and where every child is rejected (or at a leaf) the target
// supplies the next token.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/core/types.hpp"
#include "specdec/sampling/logits_processing.hpp"

namespace specdec {

namespace detail {

// Children lists and depths of a proposal's nodes; node -1 is the root.
class TreeIndex {
public:
    void build(const TreeProposal& tree) {
        const std::size_t n = tree.size();
        max_depth_ = 0;
        first_child_.assign(n + 2, 0);
        depth_.assign(n, 0);
        for (std::size_t i = 0; i < n; ++i) {
            const std::int32_t parent = tree.parents[i];
            ++first_child_[static_cast<std::size_t>(parent + 1) + 1];
            depth_[i] = parent < 0 ? 1 : depth_[static_cast<std::size_t>(parent)] + 1;
            max_depth_ = std::max(max_depth_, depth_[i]);
        }
        for (std::size_t i = 1; i < first_child_.size(); ++i) first_child_[i] += first_child_[i - 1];
        children_.assign(n, 0);
        std::vector<std::size_t> fill(first_child_.begin(), first_child_.end() - 1);
        for (std::size_t i = 0; i < n; ++i)
            children_[fill[static_cast<std::size_t>(tree.parents[i] + 1)]++] = static_cast<std::int32_t>(i);
    }

    // Children of `node` (-1: the root), in rank order.
    [[nodiscard]] std::span<const std::int32_t> children(std::int32_t node) const {
        const std::size_t slot = static_cast<std::size_t>(node + 1);
        return {children_.data() + first_child_[slot], first_child_[slot + 1] - first_child_[slot]};
    }
    // 0 for the root, 1 for its children.
    [[nodiscard]] std::size_t depth(std::int32_t node) const {
        return node < 0 ? 0 : depth_[static_cast<std::size_t>(node)];
    }
    [[nodiscard]] std::size_t max_depth() const { return max_depth_; }
    // Rank of `node` among its siblings.
    [[nodiscard]] std::size_t rank(std::int32_t node, const TreeProposal& tree) const {
        const auto siblings = children(tree.parents[static_cast<std::size_t>(node)]);
        return static_cast<std::size_t>(std::find(siblings.begin(), siblings.end(), node) - siblings.begin());
    }

private:
    std::vector<std::size_t> first_child_;
    std::vector<std::int32_t> children_;
    std::vector<std::size_t> depth_;
    std::size_t max_depth_ = 0;
};

// Throws for a proposal that is not a tree over `vocab`: a token out of range,
// a parent that is not an earlier node, a distribution row out of range, or a
// sibling group whose nodes name different distributions.
inline void check_tree(const TreeProposal& tree, std::size_t vocab) {
    const std::size_t n = tree.size();
    auto fail = [](const std::string& text) { throw Error(text); };
    if (tree.parents.size() != n) {
        std::ostringstream message;
        message << "tree proposal has " << n << " tokens but " << tree.parents.size() << " parents; expected one per token";
        fail(message.str());
    }
    if (!tree.distribution_of.empty() && tree.distribution_of.size() != n) {
        std::ostringstream message;
        message << "tree proposal has " << n << " tokens but " << tree.distribution_of.size()
                << " distribution indices; expected one per token (or none for point-mass drafts)";
        fail(message.str());
    }
    const bool has_rows = !tree.probabilities.empty();
    if (has_rows && (tree.vocab != vocab || tree.probabilities.size() % vocab != 0)) {
        std::ostringstream message;
        message << "tree draft distributions have vocabulary " << tree.vocab << " (" << tree.probabilities.size()
                << " values) but the target has " << vocab;
        fail(message.str());
    }
    const std::size_t rows = has_rows ? tree.probabilities.size() / vocab : 0;
    std::vector<std::int32_t> group_row(n + 1, -2);
    for (std::size_t i = 0; i < n; ++i) {
        const Token token = tree.tokens[i];
        if (token < 0 || static_cast<std::size_t>(token) >= vocab) {
            std::ostringstream message;
            message << "tree draft token " << token << " (node " << i << ") is outside the target vocabulary [0, "
                    << vocab << ")";
            fail(message.str());
        }
        const std::int32_t parent = tree.parents[i];
        if (parent < -1 || parent >= static_cast<std::int32_t>(i)) {
            std::ostringstream message;
            message << "tree draft node " << i << " has parent " << parent
                    << "; expected -1 (a child of the committed sequence) or an earlier node";
            fail(message.str());
        }
        const std::int32_t row = tree.distribution_of.empty() ? -1 : std::max<std::int32_t>(-1, tree.distribution_of[i]);
        if (row >= 0 && static_cast<std::size_t>(row) >= rows) {
            std::ostringstream message;
            message << "tree draft node " << i << " names distribution row " << row << " of " << rows;
            fail(message.str());
        }
        std::int32_t& group = group_row[static_cast<std::size_t>(parent + 1)];
        if (group == -2) {
            group = row;
        } else if (group != row) {
            std::ostringstream message;
            message << "tree draft node " << i << " names distribution row " << row << " but its earlier siblings name "
                    << group << "; expected one distribution per sibling group";
            fail(message.str());
        }
    }
    for (const float value : tree.probabilities) {
        if (!(value >= 0.0f && value <= 1.0f)) {
            std::ostringstream message;
            message << "tree draft distributions hold " << value << ": expected probabilities in [0, 1]";
            fail(message.str());
        }
    }
}

}  // namespace detail

// The processed target distribution at every node of a tree pass, computed on
// first use. Row r of `logits` + 1 + node holds node's logits, `root_row` the
// logits after the committed sequence; node at depth d predicts the token at
// first_position + d (named in errors).
class TreeDistributions {
public:
    void reset(const LogitsView& logits, std::size_t root_row, const detail::TreeIndex& index,
               const SamplingOptions& sampling, std::uint64_t first_position, std::string_view who = "target model") {
        logits_ = logits;
        root_row_ = root_row;
        index_ = &index;
        sampling_ = sampling;
        first_position_ = first_position;
        who_ = who;
        const std::size_t rows = logits.rows - root_row;
        storage_.resize(rows * logits.vocab);
        ready_.assign(rows, false);
    }

    [[nodiscard]] std::size_t vocab() const { return logits_.vocab; }
    // Sequence position of the token that `node`'s row predicts.
    [[nodiscard]] std::uint64_t position(std::int32_t node) const { return first_position_ + index_->depth(node); }
    [[nodiscard]] std::span<const float> logits(std::int32_t node) const {
        return logits_.row(root_row_ + static_cast<std::size_t>(node + 1));
    }

    std::span<const float> row(std::int32_t node) {
        const std::size_t slot = static_cast<std::size_t>(node + 1);
        std::span<float> out{storage_.data() + slot * vocab(), vocab()};
        if (!ready_[slot]) {
            logits_to_distribution(logits(node), sampling_, out, who_, position(node));
            ready_[slot] = true;
        }
        return out;
    }

private:
    LogitsView logits_{};
    std::size_t root_row_ = 0;
    const detail::TreeIndex* index_ = nullptr;
    SamplingOptions sampling_{};
    std::uint64_t first_position_ = 0;
    std::string_view who_;
    std::vector<float> storage_;
    std::vector<bool> ready_;
};

namespace detail {

// t <- norm(max(t - d, 0)); keeps t when rounding leaves no mass (then t = d up
// to rounding and the test just made had acceptance probability ~1).
inline void subtract_and_normalise(std::vector<double>& t, const std::vector<double>& d) {
    double mass = 0.0;
    for (std::size_t x = 0; x < t.size(); ++x) mass += std::max(t[x] - d[x], 0.0);
    if (!(mass > 0.0)) return;
    for (std::size_t x = 0; x < t.size(); ++x) t[x] = std::max(t[x] - d[x], 0.0) / mass;
}

// Inverse CDF over unnormalised non-negative doubles with u in [0, 1); never
// returns a token of weight 0.
inline Token sample_weights(const std::vector<double>& weights, double u) {
    double total = 0.0;
    for (const double w : weights) total += w;
    const double threshold = u * total;
    double cumulative = 0.0;
    std::size_t last_positive = weights.size();
    for (std::size_t x = 0; x < weights.size(); ++x) {
        if (weights[x] <= 0.0) continue;
        cumulative += weights[x];
        last_positive = x;
        if (threshold < cumulative) return static_cast<Token>(x);
    }
    if (last_positive == weights.size()) throw Error("cannot sample from a distribution with no positive mass");
    return static_cast<Token>(last_positive);
}

}  // namespace detail

// Recursive rejection sampling without replacement over a tree (Sequoia, Chen
// et al. 2024, with SpecInfer's multi-step rule). At a node with target
// distribution p and children x_1..x_n of one sibling group:
//   t <- p
//   for j = 1..n:
//       d_j <- q with x_1..x_{j-1} removed, renormalised   (delta(x_j) for a point-mass node)
//       accept x_j (descend into it) iff u_j d_j(x_j) < t(x_j)
//       else t <- norm(max(t - d_j, 0))
//   no child accepted: emit y ~ t;  a leaf: emit y ~ p.
// The emitted tokens follow the processed target exactly when each sibling
// group was drawn without replacement from the q it names (point-mass nodes:
// fixed by the context), whatever the tree's shape, and the uniforms are
// independent of the drafts: u_j is keyed (position of x_j, tree_test, node
// index), the residual or bonus draw (its position, target_sample); the
// drafter draws from other streams. The residual is updated after every
// rejected sibling, and a sibling equal to an earlier one (which a draw
// without replacement never yields) has d_j(x_j) = 0 and is rejected.
[[nodiscard]] inline TreeVerdict accept_tree_rejection_sampling(const TreeProposal& tree, TreeDistributions& p,
                                                                const detail::TreeIndex& index, const CounterRng& rng) {
    const std::size_t vocab = p.vocab();
    thread_local std::vector<double> t, d, q_left;
    t.resize(vocab);
    d.resize(vocab);
    TreeVerdict verdict;
    std::int32_t node = -1;
    while (true) {
        const std::span<const float> row = p.row(node);
        const std::uint64_t position = p.position(node);
        const auto children = index.children(node);
        const double v = rng.uniform(position, RandomPurpose::target_sample);
        if (children.empty()) {
            verdict.next_token = sample_from_distribution(row, v);
            return verdict;
        }
        for (std::size_t x = 0; x < vocab; ++x) t[x] = row[x];
        const bool point_mass = tree.point_mass(static_cast<std::size_t>(children[0]));
        double q_mass = 1.0;  // mass of q not yet removed
        if (!point_mass) {
            const std::span<const float> q = tree.q(static_cast<std::size_t>(children[0]));
            q_left.assign(q.begin(), q.end());
            q_mass = 0.0;
            for (const float value : q) q_mass += value;
        }
        std::int32_t accepted = -1;
        for (const std::int32_t child : children) {
            const std::size_t x = static_cast<std::size_t>(tree.tokens[static_cast<std::size_t>(child)]);
            const double u = rng.uniform(position, RandomPurpose::tree_test, static_cast<std::uint32_t>(child));
            if (point_mass) {
                if (u < t[x]) {  // d = delta(x): u * 1 < t(x)
                    accepted = child;
                    break;
                }
                std::fill(d.begin(), d.end(), 0.0);
                d[x] = 1.0;
            } else {
                const double d_x = q_mass > 0.0 ? q_left[x] / q_mass : 0.0;
                if (d_x > 0.0 && u * d_x < t[x]) {
                    accepted = child;
                    break;
                }
                for (std::size_t y = 0; y < vocab; ++y) d[y] = q_mass > 0.0 ? q_left[y] / q_mass : 0.0;
                q_mass -= q_left[x];
                q_left[x] = 0.0;
            }
            detail::subtract_and_normalise(t, d);
        }
        if (accepted < 0) {
            verdict.next_token = detail::sample_weights(t, v);
            return verdict;
        }
        verdict.path.push_back(accepted);
        node = accepted;
    }
}

// Greedy tree verification (temperature 0): from the root, follow the child
// whose token is the target's argmax (ties to the lowest id); emit the argmax
// where no child has it.
[[nodiscard]] inline TreeVerdict accept_tree_greedy(const TreeProposal& tree, const TreeDistributions& p,
                                                    const detail::TreeIndex& index, std::string_view who = "target model") {
    TreeVerdict verdict;
    std::int32_t node = -1;
    while (true) {
        const Token best = greedy_token(p.logits(node), who, p.position(node));
        std::int32_t next = -1;
        for (const std::int32_t child : index.children(node)) {
            if (tree.tokens[static_cast<std::size_t>(child)] == best) {
                next = child;
                break;
            }
        }
        if (next < 0) {
            verdict.next_token = best;
            return verdict;
        }
        verdict.path.push_back(next);
        node = next;
    }
}

// The default tree rule at temperature > 0. A tree rule is any callable
// (tree, target distributions, index, rng) -> TreeVerdict; the decoder is
// parameterised on it so that tests can plug in wrong rules and show that the
// exactness tests catch them.
struct RecursiveRejection {
    TreeVerdict operator()(const TreeProposal& tree, TreeDistributions& p, const detail::TreeIndex& index,
                           const CounterRng& rng) const {
        return accept_tree_rejection_sampling(tree, p, index, rng);
    }
};

template <class Rule>
concept TreeAcceptanceRule = requires(const Rule& rule, const TreeProposal& tree, TreeDistributions& p,
                                      const detail::TreeIndex& index, const CounterRng& rng) {
    { rule(tree, p, index, rng) } -> std::same_as<TreeVerdict>;
};

}  // namespace specdec
