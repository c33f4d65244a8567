#pragma once
// The shape of a draft tree: a fixed topology whose node i is the sibling of
// rank r (the r-th child drawn) of its parent. A model drafter fills every
// slot it can; the chain of k drafts is the shape with one child per node.
//
//   specdec::TreeShape::chain(4)                   // 4 nodes, depth 4
//   specdec::TreeShape::from_branching({3, 2, 1})  // 3 children of the root, 2 of each, 1 of each: 15 nodes
//   specdec::TreeShape({-1, -1, 0, 0, 2})          // explicit parents, breadth first
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec {

class TreeShape {
public:
    // The empty shape: no drafting (the step is one autoregressive token).
    TreeShape() = default;

    // parents[i]: -1 for a child of the committed sequence, else an earlier
    // node; nodes breadth first (depth never decreases with the index), so a
    // drafter can evaluate one depth per pass.
    explicit TreeShape(std::vector<std::int32_t> parents) : parents_(std::move(parents)) {
        depths_.resize(parents_.size());
        ranks_.resize(parents_.size());
        std::vector<std::size_t> children(parents_.size() + 1, 0);
        for (std::size_t i = 0; i < parents_.size(); ++i) {
            const std::int32_t parent = parents_[i];
            if (parent < -1 || parent >= static_cast<std::int32_t>(i)) {
                std::ostringstream message;
                message << "invalid tree shape: node " << i << " has parent " << parent
                        << "; expected -1 (a child of the committed sequence) or an earlier node";
                throw Error(message.str());
            }
            depths_[i] = parent < 0 ? 1 : depths_[static_cast<std::size_t>(parent)] + 1;
            if (i > 0 && depths_[i] < depths_[i - 1]) {
                std::ostringstream message;
                message << "invalid tree shape: node " << i << " at depth " << depths_[i] << " follows a node at depth "
                        << depths_[i - 1] << "; expected the nodes breadth first";
                throw Error(message.str());
            }
            ranks_[i] = children[static_cast<std::size_t>(parent + 1)]++;
            depth_ = std::max(depth_, depths_[i]);
        }
    }

    // k nodes, one per depth.
    [[nodiscard]] static TreeShape chain(std::size_t k) {
        std::vector<std::int32_t> parents(k);
        for (std::size_t i = 0; i < k; ++i) parents[i] = static_cast<std::int32_t>(i) - 1;
        return TreeShape(std::move(parents));
    }

    // branching[d]: children of every node at depth d (the root has depth 0).
    [[nodiscard]] static TreeShape from_branching(const std::vector<std::size_t>& branching) {
        std::vector<std::int32_t> parents;
        std::vector<std::int32_t> level{-1};
        for (std::size_t d = 0; d < branching.size(); ++d) {
            if (branching[d] == 0) {
                std::ostringstream message;
                message << "invalid tree branching: 0 children at depth " << d << "; expected at least 1";
                throw Error(message.str());
            }
            std::vector<std::int32_t> next;
            for (const std::int32_t parent : level) {
                for (std::size_t c = 0; c < branching[d]; ++c) {
                    next.push_back(static_cast<std::int32_t>(parents.size()));
                    parents.push_back(parent);
                }
            }
            level = std::move(next);
        }
        return TreeShape(std::move(parents));
    }

    // Parses "3x2x1" (from_branching) or "chain4"/"4" (a chain).
    [[nodiscard]] static TreeShape parse(const std::string& text) {
        auto fail = [&]() {
            std::ostringstream message;
            message << "invalid tree shape \"" << text
                    << "\": expected children per depth such as 3x2x1, or a chain length such as 4";
            throw Error(message.str());
        };
        std::vector<std::size_t> branching;
        std::size_t value = 0;
        bool digits = false;
        for (const char c : text) {
            if (c >= '0' && c <= '9') {
                value = value * 10 + static_cast<std::size_t>(c - '0');
                if (value > 64) fail();
                digits = true;
            } else if (c == 'x' && digits) {
                branching.push_back(value);
                value = 0;
                digits = false;
            } else {
                fail();
            }
        }
        if (!digits) fail();
        branching.push_back(value);
        if (branching.size() == 1) return chain(branching[0]);
        for (const std::size_t b : branching)
            if (b == 0) fail();
        return from_branching(branching);
    }

    [[nodiscard]] std::size_t size() const { return parents_.size(); }
    [[nodiscard]] bool empty() const { return parents_.empty(); }
    [[nodiscard]] std::size_t depth() const { return depth_; }
    [[nodiscard]] const std::vector<std::int32_t>& parents() const { return parents_; }
    [[nodiscard]] std::int32_t parent(std::size_t i) const { return parents_[i]; }
    [[nodiscard]] std::size_t depth_of(std::size_t i) const { return depths_[i]; }  // 1 for a child of the root
    [[nodiscard]] std::size_t rank_of(std::size_t i) const { return ranks_[i]; }    // 0 for the first child
    [[nodiscard]] bool is_chain() const { return size() == depth(); }

    // Nodes per depth (index d: depth d + 1).
    [[nodiscard]] std::vector<std::size_t> widths() const {
        std::vector<std::size_t> result(depth_, 0);
        for (const std::size_t d : depths_) ++result[d - 1];
        return result;
    }

    // The nodes of depth <= max_depth (still breadth first).
    [[nodiscard]] TreeShape truncated(std::size_t max_depth) const {
        if (max_depth >= depth_) return *this;
        std::vector<std::int32_t> kept;
        for (std::size_t i = 0; i < parents_.size() && depths_[i] <= max_depth; ++i) kept.push_back(parents_[i]);
        return TreeShape(std::move(kept));
    }

    // The first max_nodes nodes (breadth first, so still a tree of this shape's slots).
    [[nodiscard]] TreeShape first_nodes(std::size_t max_nodes) const {
        if (max_nodes >= size()) return *this;
        return TreeShape(std::vector<std::int32_t>(parents_.begin(), parents_.begin() + static_cast<std::ptrdiff_t>(max_nodes)));
    }

    // "chain 4", "3x2x1" for a uniform branching, else "15 nodes 3+6+6".
    [[nodiscard]] std::string describe() const {
        std::ostringstream out;
        if (empty()) return "none";
        if (is_chain()) {
            out << "chain " << depth_;
            return out.str();
        }
        std::vector<std::size_t> branching;
        // (One level of n siblings is written "n nodes n": "n" alone reads as a chain.)
        if (depth_ > 1 && uniform_branching(branching)) {
            for (std::size_t d = 0; d < branching.size(); ++d) out << (d ? "x" : "") << branching[d];
            return out.str();
        }
        out << size() << " nodes ";
        const std::vector<std::size_t> w = widths();
        for (std::size_t d = 0; d < w.size(); ++d) out << (d ? "+" : "") << w[d];
        return out.str();
    }

    friend bool operator==(const TreeShape& a, const TreeShape& b) { return a.parents_ == b.parents_; }

private:
    // Whether every node at depth d (the root: d = 0) has the same number of
    // children, for d < depth; branching receives those numbers.
    bool uniform_branching(std::vector<std::size_t>& branching) const {
        std::vector<std::size_t> children(parents_.size() + 1, 0);
        for (const std::int32_t p : parents_) ++children[static_cast<std::size_t>(p + 1)];
        branching.assign(depth_, 0);
        std::vector<bool> seen(depth_, false);
        for (std::size_t node = 0; node <= parents_.size(); ++node) {
            const std::size_t d = node == 0 ? 0 : depths_[node - 1];
            if (d >= depth_) {
                if (children[node] != 0) return false;
                continue;
            }
            if (!seen[d]) {
                seen[d] = true;
                branching[d] = children[node];
            } else if (branching[d] != children[node]) {
                return false;
            }
        }
        return true;
    }

    std::vector<std::int32_t> parents_;
    std::vector<std::size_t> depths_;
    std::vector<std::size_t> ranks_;
    std::size_t depth_ = 0;
};

}  // namespace specdec
