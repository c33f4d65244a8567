#pragma once
// The target's tree pass of a tree step, shared by TreeSpeculativeDecoder and
// verify_tree: the uncached chain (the committed tokens the cache lacks, at
// least the last one) as nodes 0 .. chain - 1, then the tree under the
// chain's last node; after verification the chain and the accepted path are
// committed. Also the check that a rule's path is a root-to-node path.
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/tree_proposal.hpp"

namespace specdec::detail {

// Whether every node of `tree` is the child of the one before it (a chain:
// the pass can be causal).
inline bool is_chain(const TreeProposal& tree) {
    for (std::size_t i = 0; i < tree.parents.size(); ++i)
        if (tree.parents[i] != static_cast<std::int32_t>(i) - 1) return false;
    return true;
}

// forward_tree's parents for the chain followed by the tree (into `out`).
inline std::span<const std::int32_t> tree_pass_parents(std::size_t chain, const TreeProposal& tree,
                                                       std::vector<std::int32_t>& out) {
    out.clear();
    for (std::size_t i = 0; i < chain; ++i) out.push_back(static_cast<std::int32_t>(i) - 1);
    for (const std::int32_t parent : tree.parents)
        out.push_back(parent < 0 ? static_cast<std::int32_t>(chain) - 1 : parent + static_cast<std::int32_t>(chain));
    return out;
}

// commit_tree's path for the chain followed by the accepted path (into `out`).
inline std::span<const std::int32_t> tree_pass_commit(std::size_t chain, std::span<const std::int32_t> path,
                                                      std::vector<std::int32_t>& out) {
    out.clear();
    for (std::size_t i = 0; i < chain; ++i) out.push_back(static_cast<std::int32_t>(i));
    for (const std::int32_t node : path) out.push_back(node + static_cast<std::int32_t>(chain));
    return out;
}

// Throws unless `path` runs from a child of the committed sequence down the tree.
inline void check_tree_path(std::span<const std::int32_t> path, const TreeProposal& tree) {
    std::int32_t parent = -1;
    for (const std::int32_t node : path) {
        if (node < 0 || static_cast<std::size_t>(node) >= tree.size() || tree.parents[static_cast<std::size_t>(node)] != parent) {
            std::ostringstream message;
            message << "tree acceptance rule returned node " << node
                    << " in its path; expected a child of the path's previous node (" << parent << ")";
            throw Error(message.str());
        }
        parent = node;
    }
}

}  // namespace specdec::detail
