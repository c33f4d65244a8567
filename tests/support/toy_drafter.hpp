#pragma once
// One drafter over a ToyLM for the exactness tests, with knobs for the ways a
// drafter can lie about what it drew: how it picks each token, from which
// distribution, and which q it reports with it. With the default knobs it is
// a correct drafter (the q it reports is the distribution each token was drawn
// from), so a negative control differs from a passing configuration by one
// knob, never by a second copy of the drafting loop.
//
//   ToyDrafter correct(model);                                   exact
//   ToyDrafter argmax(model, {.pick = TokenPick::argmax,
//                             .reports = ReportedQ::model_q});   caught: greedy token, full q
//
// Chains: every position conditions on the tokens drafted before it. Trees
// (propose_tree): each sibling group is sampled from its parent's drafting
// row, in rank order, without replacement unless siblings_with_replacement is
// set (`pick` is not used: a tree's siblings are always drawn); a group may
// not have more siblings than its drafting row has tokens of positive mass.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/tree_shape.hpp"
#include "specdec/sampling/logits_processing.hpp"
#include "support/toy_models.hpp"

namespace specdec::test {

// How a drafted token is taken from the drafting distribution.
enum class TokenPick {
    sample,  // an inverse-CDF draw with the drafter's uniform for that position
    argmax,  // the most probable token (ties to the lowest id): deterministic
};

// The q reported with each drafted token.
enum class ReportedQ {
    drawn_from,  // the distribution the token was drawn from (a point mass for argmax): correct
    model_q,     // the draft model's row under the request's options, whatever was drawn: wrong
                 // as soon as the pick or the drafting distribution differs from it
};

struct ToyDrafterKnobs {
    TokenPick pick = TokenPick::sample;
    // > 0: the drafting distribution keeps only its top `draft_top_k` tokens on
    // top of the request's options (a warped draft).
    std::size_t draft_top_k = 0;
    ReportedQ reports = ReportedQ::drawn_from;
    // Trees only: each sibling drawn independently from the full row while the
    // group is reported as drawn without replacement: wrong.
    bool siblings_with_replacement = false;
};

class ToyDrafter {
public:
    explicit ToyDrafter(const ToyLM& model, ToyDrafterKnobs knobs = {}) : model_(model), knobs_(knobs) {}

    void reset() {}

    DraftProposal propose(const DraftRequest& request) {
        const std::size_t vocab = model_.vocab_size();
        DraftProposal proposal{.vocab = vocab};
        std::vector<Token> context(request.history.begin(), request.history.end());
        for (std::size_t i = 0; i < request.max_tokens; ++i) {
            const Row row = drafting_row(context, request.sampling);
            const std::uint64_t position = request.history.size() + i;
            const Token token = knobs_.pick == TokenPick::argmax
                                    ? greedy_token(row.drafting)
                                    : sample_from_distribution(
                                          row.drafting, request.rng.uniform(position, RandomPurpose::draft_sample));
            const std::vector<float> q = reported(row, token);
            proposal.tokens.push_back(token);
            proposal.probabilities.insert(proposal.probabilities.end(), q.begin(), q.end());
            context.push_back(token);
        }
        return proposal;
    }

    TreeProposal propose_tree(const TreeDraftRequest& request) {
        const std::size_t vocab = model_.vocab_size();
        TreeProposal proposal{.vocab = vocab};
        std::vector<std::vector<Token>> contexts;          // per proposal node: history + its path
        std::vector<std::int32_t> row_of_parent(request.shape.size() + 1, -1);
        std::vector<std::vector<float>> remaining;           // per row: q without the siblings drawn so far
        std::vector<std::int32_t> node_of_slot(request.shape.size(), -1);
        for (std::size_t s = 0; s < request.shape.size(); ++s) {
            const std::int32_t shape_parent = request.shape.parent(s);
            const std::int32_t parent = shape_parent < 0 ? -1 : node_of_slot[static_cast<std::size_t>(shape_parent)];
            std::vector<Token> context(request.history.begin(), request.history.end());
            if (parent >= 0) context = contexts[static_cast<std::size_t>(parent)];
            std::int32_t& row_index = row_of_parent[static_cast<std::size_t>(parent + 1)];
            if (row_index < 0) {
                row_index = static_cast<std::int32_t>(remaining.size());
                const Row row = drafting_row(context, request.sampling);
                const std::vector<float> q = reported(row, -1);
                proposal.probabilities.insert(proposal.probabilities.end(), q.begin(), q.end());
                remaining.push_back(row.drafting);
            }
            const auto r = static_cast<std::size_t>(row_index);
            const std::span<const float> full{proposal.probabilities.data() + r * vocab, vocab};
            const double u = request.rng.uniform(request.history.size(), RandomPurpose::tree_draft,
                                                 static_cast<std::uint32_t>(s));
            const Token token = sample_from_distribution(knobs_.siblings_with_replacement ? full : remaining[r], u);
            remaining[r][static_cast<std::size_t>(token)] = 0.0f;  // the next sibling is drawn without it
            node_of_slot[s] = static_cast<std::int32_t>(proposal.size());
            proposal.tokens.push_back(token);
            proposal.parents.push_back(parent);
            proposal.distribution_of.push_back(row_index);
            context.push_back(token);
            contexts.push_back(std::move(context));
        }
        return proposal;
    }

private:
    struct Row {
        std::vector<float> model_q;   // the request's options
        std::vector<float> drafting;  // model_q further cut to draft_top_k when set
    };

    Row drafting_row(std::span<const Token> context, const SamplingOptions& sampling) const {
        const std::vector<float> logits = model_.logits_after(context);
        Row row{std::vector<float>(logits.size()), std::vector<float>(logits.size())};
        logits_to_distribution(logits, sampling, row.model_q);
        SamplingOptions drafting = sampling;
        if (knobs_.draft_top_k > 0)
            drafting.top_k = sampling.top_k == 0 ? knobs_.draft_top_k : std::min(sampling.top_k, knobs_.draft_top_k);
        logits_to_distribution(logits, drafting, row.drafting);
        return row;
    }

    // The q reported with `token` (-1: a tree row, reported before its draws).
    std::vector<float> reported(const Row& row, Token token) const {
        if (knobs_.reports == ReportedQ::model_q) return row.model_q;
        if (knobs_.pick == TokenPick::argmax && token >= 0) {
            std::vector<float> point_mass(row.drafting.size(), 0.0f);
            point_mass[static_cast<std::size_t>(token)] = 1.0f;
            return point_mass;
        }
        return row.drafting;
    }

    const ToyLM& model_;
    ToyDrafterKnobs knobs_;
};

}  // namespace specdec::test
