#pragma once
// Lockstep drafting for a batched decoder whose draft model is a
// MultiSequenceLM: draft round r is ONE pass of the draft model over every
// request still drafting an (r + 1)-th token. Round 0 feeds each request its
// uncached suffix (catching up on what the last verification committed),
// later rounds its last draft. Each row is turned into a draft exactly as
// ModelDrafter does (draft_from_row), so a request's drafts are those it
// would draft alone.
#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/decoding/batch_slot.hpp"
#include "specdec/decoding/cache_checks.hpp"
#include "specdec/decoding/drafter.hpp"
#include "specdec/decoding/model_drafter.hpp"
#include "specdec/decoding/step_record.hpp"

namespace specdec::detail {

// What the draft rounds of one step were, for the length policy: each
// round's width (requests in it) and time, and whether round 0 caught some
// request up on more than a step commits.
struct DraftRounds {
    std::vector<std::size_t> widths;
    std::vector<double> seconds;
    bool first_round_caught_up = false;

    void clear() {
        widths.clear();
        seconds.clear();
        first_round_caught_up = false;
    }
};

// Draft: a MultiSequenceLM draft model.
template <class Draft>
class LockstepDrafting {
public:
    // Drafts up to each request's k_max (lowered to what its draft cache has
    // room for) into its proposal, and sets its draft counters. An error of
    // the draft pass fails every request in it (the model validates before it
    // runs: no draft cache changed); an error reading one request's row fails
    // that request. Appends the rounds to `rounds`; returns the drafts proposed.
    template <class Slot>
        requires MultiSequenceLM<Draft>
    std::size_t draft(Draft& model, std::span<ActiveRequest<Slot>> active, DraftRounds& rounds) {
        const auto start = Clock::now();
        const std::size_t vocab = model.vocab_size(), context = model.context_length();
        requests_.clear();
        drafting_.clear();
        if (rngs_.size() < active.size()) rngs_.resize(active.size());  // kept alive for the DraftRequests
        for (std::size_t i = 0; i < active.size(); ++i) {
            ActiveRequest<Slot>& a = active[i];
            const std::span<const Token> history = a.slot->sequence();
            const std::size_t room = context + 1 > history.size() ? context + 1 - history.size() : 0;
            a.k_max = std::min(a.k_max, room);
            a.proposal.vocab = vocab;
            a.proposal.tokens.reserve(a.k_max);
            rngs_[i] = a.slot->rng();
            requests_.push_back(DraftRequest{history, a.k_max, a.slot->sampling(), rngs_[i], {}, 0, {}, a.slot->draws});
            if (a.k_max > 0) drafting_.push_back(i);
        }
        for (std::size_t round = 0; !drafting_.empty(); ++round) {
            const auto round_start = Clock::now();
            feeds_.clear();
            for (const std::size_t i : drafting_) {
                auto& sync = active[i].slot->drafter().kv_sync();
                const std::span<const Token> tokens =
                    round == 0 ? sync.uncached_suffix(requests_[i].history)
                               : std::span<const Token>(&active[i].proposal.tokens.back(), 1);
                // A step commits at most two tokens the draft has not seen
                // (its last accepted draft and the next token).
                if (round == 0 && tokens.size() > 2) rounds.first_round_caught_up = true;
                feeds_.push_back(SequenceFeed{sync.model().slot(), tokens, /*last_row_only=*/true});
            }
            LogitsView rows{};
            try {
                rows = model.forward_batch(feeds_);
            } catch (const Error& error) {
                for (const std::size_t i : drafting_) active[i].fail(error);
                break;
            }
            rounds.widths.push_back(drafting_.size());
            still_.clear();
            for (std::size_t f = 0; f < drafting_.size(); ++f) {
                ActiveRequest<Slot>& a = active[drafting_[f]];
                a.slot->drafter().kv_sync().record_fed(feeds_[f].tokens);
                ++a.proposal.forward_passes;
                try {
                    check_logits_shape(rows, drafting_.size(), vocab, "draft model forward_batch",
                                       std::to_string(drafting_.size()) + " sequences",
                                       "one row of vocab_size() values per sequence");
                    const bool kept = draft_from_row(rows.row(f), requests_[drafting_[f]], round, a.proposal);
                    if (kept && round + 1 < a.k_max && !stop_before_pass(requests_[drafting_[f]], round + 1)) {
                        still_.push_back(drafting_[f]);
                    }
                } catch (const Error& error) {
                    a.fail(error);
                }
            }
            rounds.seconds.push_back(seconds_since(round_start));
            drafting_.swap(still_);
        }
        const double seconds = seconds_since(start);
        std::size_t drafts = 0;
        for (ActiveRequest<Slot>& a : active) {
            GenerationStats& stats = a.record.stats();
            stats.draft_seconds = a.proposal.forward_passes > 0 ? seconds : 0.0;
            stats.draft_forward_passes = a.proposal.forward_passes;
            stats.draft_tokens_proposed = a.proposal.size();
            drafts += a.proposal.size();
        }
        return drafts;
    }

private:
    std::vector<DraftRequest> requests_;
    std::vector<CounterRng> rngs_;
    std::vector<std::size_t> drafting_, still_;
    std::vector<SequenceFeed> feeds_;
};

}  // namespace specdec::detail
