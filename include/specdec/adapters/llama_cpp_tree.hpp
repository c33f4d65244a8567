#pragma once
// The bookkeeping of a token tree in llama.cpp's cache (LlamaCppModel's
// TreeLM): which llama.cpp sequence ids each pending node carries, and the
// memory calls that make and drop them. It calls nothing itself; the adapter
// runs the plan.
//
// llama.cpp's attention mask lets a token see a cell when the cell belongs to
// the token's (first) sequence id and sits at a position not after the
// token's. So every leaf of the pending tree gets a sequence of its own, and
// a node carries the sequences of all leaves below it: through any of them it
// sees the cached prefix and its own ancestors, never a sibling's branch. The
// first child of a node (or the first node under the cache) continues its
// parent's sequence (slot 0's own for the chain under the cache); every other
// child opens a new sequence, which llama_memory_seq_cp first gives the cells
// of the prefix and of the path down to the nearest node already in the cache.
//
// llama.cpp's batch checks hold by construction: a sequence's new tokens
// continue right after its last stored position (a root-to-leaf path has one
// node per position), and the sequences that share a token end at the same
// stored position (all were copied up to the same node). All of this needs
// the sequences in one cache (kv_unified); between cache streams a copy would
// move whole buffers.
//
// commit_tree(path) gives slot 0 the path's cells: if the path's last node
// carries slot 0's own sequence, slot 0 already holds exactly the path and
// drops what lies beyond it; otherwise slot 0 drops its pending cells and
// takes the path's through a copy from the last node's sequence. Then every
// other tree sequence is removed, which frees the cells no one holds.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <llama.h>

#include "specdec/core/error.hpp"
#include "specdec/core/pending_tree.hpp"

namespace specdec::llama_cpp {

struct SequenceCopy {  // llama_memory_seq_cp(from, to, 0, end)
    llama_seq_id from, to;
    llama_pos end;
};

struct PlannedNode {
    llama_pos position;
    std::vector<llama_seq_id> seqs;  // its own sequence first, then those of the leaves below it in this pass
};

struct TreePlan {
    std::vector<std::int32_t> parents;  // pending-tree indices, -1: under the cache
    std::vector<PlannedNode> nodes;
    std::vector<SequenceCopy> copies;   // run before the pass: the new sequences' histories
    std::vector<bool> extended;         // per new node: a later node of this pass continues its sequence
    std::vector<std::size_t> newly_extended;  // earlier pending nodes this pass continues
    bool root_extended = false;
    std::size_t opened = 0;             // new sequences
};

struct SequenceRemoval {  // llama_memory_seq_rm(seq, from, -1)
    llama_seq_id seq;
    llama_pos from;
};

struct TreeCommit {
    std::vector<SequenceRemoval> removals;
    struct Copy {
        llama_seq_id from, to;
        llama_pos begin, end;
    };
    std::optional<Copy> copy;
    std::vector<llama_seq_id> released;  // emptied entirely (seq_rm over every position)
};

class PendingTree {
public:
    PendingTree() = default;
    // leaves: the most leaves a pending tree may have (0: no tree pass);
    // first_sequence: the first llama.cpp sequence id the tree may open.
    PendingTree(std::size_t leaves, llama_seq_id first_sequence) : leaves_(leaves), first_sequence_(first_sequence) {}

    [[nodiscard]] std::size_t leaf_limit() const { return leaves_; }
    [[nodiscard]] bool empty() const { return nodes_.empty(); }
    [[nodiscard]] std::size_t size() const { return nodes_.size(); }

    // Each parent an earlier node (of the tree or of this call) or -1; the
    // deepest node and the whole pending tree within `free` positions
    // (core/pending_tree.hpp).
    void check_parents(std::span<const std::int32_t> parents, std::size_t free, const std::string& name) const {
        std::vector<std::size_t> depths;
        depths.reserve(nodes_.size() + parents.size());
        for (const Node& node : nodes_) depths.push_back(node.depth);
        specdec::detail::extend_tree_depths(parents, depths, free, /*context_length=*/0, name);
    }

    // The sequences of the new nodes (parents checked by check_parents) and
    // the copies that give new sequences their history. Throws Error, with
    // nothing changed, when the tree would have more leaves than allowed.
    [[nodiscard]] TreePlan plan(std::span<const std::int32_t> parents, llama_pos cached, const std::string& name) const {
        TreePlan plan;
        plan.parents.assign(parents.begin(), parents.end());
        plan.root_extended = root_extended_;
        std::vector<bool> old_extended(nodes_.size());
        for (std::size_t i = 0; i < nodes_.size(); ++i) old_extended[i] = nodes_[i].extended;
        const std::size_t old = nodes_.size();
        for (std::size_t i = 0; i < parents.size(); ++i) {
            const std::int32_t parent = parents[i];
            const bool parent_is_new = parent >= 0 && static_cast<std::size_t>(parent) >= old;
            const std::size_t new_parent = parent_is_new ? static_cast<std::size_t>(parent) - old : 0;
            PlannedNode node;
            node.position = parent < 0 ? cached
                            : parent_is_new ? plan.nodes[new_parent].position + 1
                                            : nodes_[static_cast<std::size_t>(parent)].position + 1;
            // Continue the parent's sequence if no child has yet.
            bool continues = false;
            llama_seq_id seq = 0;
            if (parent < 0) {
                continues = !plan.root_extended;
                plan.root_extended = true;
            } else if (parent_is_new) {
                continues = !plan.extended[new_parent];
                plan.extended[new_parent] = true;
                seq = plan.nodes[new_parent].seqs.front();
            } else {
                const auto p = static_cast<std::size_t>(parent);
                continues = !old_extended[p];
                if (continues) plan.newly_extended.push_back(p);
                old_extended[p] = true;
                seq = nodes_[p].seq;
            }
            if (!continues) {
                if (opened_ + plan.opened + 1 >= leaves_) {
                    throw Error(name + ": forward_tree: the pending tree would have more than " + std::to_string(leaves_) +
                                " leaves (LlamaCppOptions::tree_leaves)");
                }
                const llama_seq_id opened = first_sequence_ + static_cast<llama_seq_id>(opened_ + plan.opened++);
                // Its history: the prefix and the path down to the nearest
                // node already in the cache (new ancestors carry it below).
                std::int32_t anchor = parent;
                while (anchor >= 0 && static_cast<std::size_t>(anchor) >= old) anchor = plan.parents[static_cast<std::size_t>(anchor) - old];
                plan.copies.push_back(anchor < 0 ? SequenceCopy{0, opened, cached}
                                                 : SequenceCopy{nodes_[static_cast<std::size_t>(anchor)].seq, opened,
                                                                nodes_[static_cast<std::size_t>(anchor)].position + 1});
                seq = opened;
                for (std::int32_t a = parent; a >= 0 && static_cast<std::size_t>(a) >= old; a = plan.parents[static_cast<std::size_t>(a) - old])
                    plan.nodes[static_cast<std::size_t>(a) - old].seqs.push_back(opened);
            }
            node.seqs.push_back(seq);
            plan.nodes.push_back(std::move(node));
            plan.extended.push_back(false);
        }
        return plan;
    }

    // After a successful pass (or before discarding a failed one): the plan's nodes join the tree.
    void add(const TreePlan& plan) {
        for (const std::size_t p : plan.newly_extended) nodes_[p].extended = true;
        root_extended_ = plan.root_extended;
        opened_ += plan.opened;
        for (std::size_t i = 0; i < plan.nodes.size(); ++i) {
            const std::int32_t parent = plan.parents[i];
            nodes_.push_back(Node{parent, plan.nodes[i].position, plan.nodes[i].seqs.front(), plan.extended[i],
                                  parent < 0 ? 1 : nodes_[static_cast<std::size_t>(parent)].depth + 1});
        }
    }

    // path[0] under the cache, each later node a child of the one before
    // (core/pending_tree.hpp).
    void check_path(std::span<const std::int32_t> path, const std::string& name) const {
        specdec::detail::check_commit_path(path, nodes_.size(), [&](std::size_t node) { return nodes_[node].parent; }, name);
    }

    // The memory calls that keep `path` (checked) as slot 0's next positions
    // and drop the rest of the tree; slot 0's own sequence is 0.
    [[nodiscard]] TreeCommit commit(std::span<const std::int32_t> path, llama_pos cached) const {
        TreeCommit commit;
        if (nodes_.empty()) return commit;
        const llama_pos end = cached + static_cast<llama_pos>(path.size());
        const llama_seq_id last = path.empty() ? 0 : nodes_[static_cast<std::size_t>(path.back())].seq;
        if (last == 0) {
            commit.removals.push_back({0, end});
        } else {
            commit.removals.push_back({0, cached});
            commit.copy = TreeCommit::Copy{last, 0, cached, end};
        }
        for (std::size_t i = 0; i < opened_; ++i) commit.released.push_back(first_sequence_ + static_cast<llama_seq_id>(i));
        return commit;
    }

    void clear() {
        nodes_.clear();
        root_extended_ = false;
        opened_ = 0;
    }

private:
    struct Node {
        std::int32_t parent;
        llama_pos position;
        llama_seq_id seq;   // its own: the sequence of the first leaf below it
        bool extended;      // a child continues its sequence
        std::size_t depth;  // 1: under the cache
    };
    std::size_t leaves_ = 0;
    llama_seq_id first_sequence_ = 0;
    std::vector<Node> nodes_;
    bool root_extended_ = false;  // a node under the cache continues sequence 0
    std::size_t opened_ = 0;      // sequences opened since the last commit
};

}  // namespace specdec::llama_cpp
