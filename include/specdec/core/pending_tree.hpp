#pragma once
// The rules a TreeLM's pending tree keeps (core/model_contract.hpp:
// forward_tree grows it, commit_tree keeps one root-to-node path of it),
// checked in one place for every model that holds one (the CPU model, the
// llama.cpp adapter). Each check throws specdec::Error naming the model and
// leaves the model's state as it was.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec::detail {

// forward_tree(tokens, parents) on a pending tree whose node depths are
// `depths` (1: a child of the cache; node j of the tree is depths[j]): each
// parent is -1 or an earlier node (of the tree or of this call), no node lies
// deeper than the `free` positions after the cache, and the whole tree fits
// in them. On success the new nodes' depths are appended to `depths`; on an
// error `depths` is unchanged. `context_length` (0: not known) is named in
// the errors.
inline void extend_tree_depths(std::span<const std::int32_t> parents, std::vector<std::size_t>& depths,
                               std::size_t free, std::size_t context_length, std::string_view model) {
    const std::size_t pending = depths.size();
    const auto context = [&] {
        if (context_length == 0) return std::string();
        return " (context length " + std::to_string(context_length) + ", " + std::to_string(context_length - free) +
               " cached positions)";
    };
    const auto refuse = [&](const std::string& message) {
        depths.resize(pending);
        throw Error(std::string(model) + ": " + message);
    };
    for (std::size_t i = 0; i < parents.size(); ++i) {
        const std::int32_t parent = parents[i];
        const std::size_t node = pending + i;
        if (parent < -1 || (parent >= 0 && static_cast<std::size_t>(parent) >= node)) {
            refuse("forward_tree parent " + std::to_string(parent) + " of node " + std::to_string(node) + " (index " +
                   std::to_string(i) + " of this call) is not an earlier node; expected -1 or a node in [0, " +
                   std::to_string(node) + ")");
        }
        const std::size_t depth = parent < 0 ? 1 : depths[static_cast<std::size_t>(parent)] + 1;
        if (depth > free) {
            refuse("forward_tree node " + std::to_string(node) + " at depth " + std::to_string(depth) +
                   " overflows the " + std::to_string(free) + " free positions after the cache" + context());
        }
        depths.push_back(depth);
    }
    if (pending + parents.size() > free) {
        refuse("forward_tree of " + std::to_string(parents.size()) + " nodes after " + std::to_string(pending) +
               " pending nodes needs " + std::to_string(pending + parents.size()) +
               " free cache slots; expected at most " + std::to_string(free) + context());
    }
}

// commit_tree(path) on a pending tree of `pending` nodes whose parents
// parent_of(j) gives: path[0] a child of the cache, each later node a child
// of the one before.
template <class ParentOf>
void check_commit_path(std::span<const std::int32_t> path, std::size_t pending, ParentOf parent_of,
                       std::string_view model) {
    for (std::size_t k = 0; k < path.size(); ++k) {
        const std::int32_t node = path[k];
        const std::string at =
            std::string(model) + ": commit_tree node " + std::to_string(node) + " at path index " + std::to_string(k);
        if (node < 0 || static_cast<std::size_t>(node) >= pending) {
            throw Error(at + " is not in the pending tree; expected a node in [0, " + std::to_string(pending) + ")");
        }
        const std::int32_t expected = k == 0 ? -1 : path[k - 1];
        const std::int32_t parent = parent_of(static_cast<std::size_t>(node));
        if (parent != expected) {
            throw Error(at + " has parent " + std::to_string(parent) + ": it is not a child of " +
                        (k == 0 ? std::string("the cache") : "node " + std::to_string(expected)) +
                        ", as in a root-to-node path");
        }
    }
}

}  // namespace specdec::detail
