#pragma once
// Every setting of AutoBatchLength (its Options), each with why it has its
// value. docs/design/batch-policy.md explains the parts they tune and the
// measurements behind them.
#include <cstddef>
#include <optional>
#include <sstream>

#include "specdec/core/error.hpp"

namespace specdec {

struct AutoBatchOptions {
    // --- Probes: what gets timed and measured besides the plan.
    // Steps that alternate plain steps with drafting ones of warmup_length,
    // 1, 2, ... drafts, so that V, D and acceptance start from several points.
    std::size_t warmup_steps = 6;
    std::size_t warmup_length = 4;  // deep enough to measure acceptance at every usual depth
    // Draft rows a warm-up or exploring step adds at most: a large batch, whose
    // pass is compute-bound, does not pay a full draft for every sequence.
    std::size_t warmup_rows = 8;
    // One step in this many explores: one more draft per drafting sequence,
    // or (in turn) a plain step that keeps V at the batch's width current.
    std::size_t explore_every = 16;
    // While drafting clearly wins, a plain probe runs only this rarely: a
    // plain step gives up most of a drafting step's tokens.
    std::size_t max_plain_probe_every = 128;

    // --- Guard: realised rates against the plan.
    double clear_margin = 1.25;  // drafting's tokens per second over plain's that counts as "clearly"
    // A plan that drafts must expect this much over plain decoding: a near tie
    // loses to costs the timings do not show and to the plan's own optimism.
    double draft_margin = 1.03;
    // A step in this many may draft past the widest timed width, so that a
    // flat (GPU) pass is timed out to the widths worth drafting in few steps.
    std::size_t widen_every = 4;

    // --- Model: acceptance and timings.
    double decay = 0.98;          // per-step weight of older samples: follows a drifting machine within ~50 steps
    double prior_strength = 4.0;  // pseudo-samples pulling the pooled a_m to a_{m-1}: few samples of deep drafts
    // Pseudo-samples pulling a request's a_m to the pooled one. Unset: learned
    // from the spread of the requests' acceptance (RequestSpread),
    // prior_strength until enough requests were measured.
    std::optional<double> request_prior_strength{};
    // Every request of a step drafts the same number of tokens (or its cap):
    // for a target that runs one physical pass per distinct feed length
    // (llama.cpp with a cache stream per sequence), which V(width) cannot see.
    // Unset: what the target says (target_splits_ragged_passes), else false.
    std::optional<bool> equal_lengths{};

    // --- Guard details.
    std::size_t rate_window = 16;      // steps per realised rate: the sum of tokens over the sum of seconds
    std::size_t emitted_horizon = 32;  // steps an emitted-token sample counts against a plan: rejected drafts age out
    // The plain rate that may veto a plan is read over this many exploring
    // intervals: two or three plain probes of a drafting plan.
    std::size_t plain_horizon_explorations = 5;
    std::size_t min_planned_samples = 4;   // planned steps before their rate may veto (or call the plain rate stale)
    std::size_t min_plain_samples = 2;     // plain steps within the horizon for a current plain rate
    std::size_t fallback_plain_samples = 3;  // plain steps of any age that still answer a plan losing by far
    std::size_t clear_plain_samples = 1;   // plain steps since the last rare probe for "clearly wins"

    // --- Widening (a flat pass) details.
    std::size_t widen_min_span = 5;  // the timed widths span 1/this of the widest at least: noise over close widths reads flat
    double widen_reach = 0.75;       // the plan reaches this share of the widest timed width
    double widen_flatness = 0.5;     // V rose less than this share of a compute-bound pass's rise
    std::size_t widen_factor = 2;    // a widening step drafts out to this many times the widest timed width
    std::size_t max_look_drafts = 2;   // a look of a plan drafting nothing: 1, 2, 1, ... drafts (a lumpy pass's next tile)
    std::size_t equal_look_every = 2;  // equal lengths: one look in this many drafts one token for every sequence

    // --- Model details.
    double untimed_seconds = 1.0;          // a pass never timed: dear, so that nothing untimed looks free
    double unmeasured_acceptance = 0.5;    // the pooled a_m before any step
    std::size_t spread_retired = 64;       // retired requests whose first drafts RequestSpread still counts
    double spread_min_requests = 16.0;     // requests before the spread is read (the fallback before)
    double spread_min_drafts = 128.0;      // first drafts in all before the spread is read
    double spread_fewest = 1.0;            // the learned pseudo-samples' bounds: a request never trusts
    double spread_most = 256.0;            // one sample alone, nor ignores a thousand of its own

    // Throws Error where a value makes no sense.
    void check() const {
        const auto fail = [](const char* name, double value, const char* expected) {
            std::ostringstream message;
            message << "invalid AutoBatchLength " << name << " = " << value << ": expected " << expected;
            throw Error(message.str());
        };
        if (!(decay > 0.0 && decay <= 1.0)) fail("decay", decay, "a value in (0, 1]");
        if (!(clear_margin >= 1.0 && clear_margin <= kLargest))
            fail("clear_margin", clear_margin,
                 "a finite ratio of at least 1 (drafting's tokens per second over plain decoding's)");
        if (!(draft_margin >= 1.0 && draft_margin <= kLargest))
            fail("draft_margin", draft_margin,
                 "a finite ratio of at least 1 (a plan's expected tokens per second over plain decoding's)");
        if (request_prior_strength && !(*request_prior_strength > 0.0 && *request_prior_strength <= kLargest))
            fail("request_prior_strength", *request_prior_strength,
                 "a positive, finite number of pseudo-samples (or none: learned)");
        if (!(prior_strength > 0.0)) fail("prior_strength", prior_strength, "a positive number of pseudo-samples");
        if (rate_window == 0) fail("rate_window", 0.0, "at least 1 step");
        if (max_look_drafts == 0) fail("max_look_drafts", 0.0, "at least 1 draft");
        if (widen_factor < 2) fail("widen_factor", static_cast<double>(widen_factor), "at least 2");
        if (!(spread_fewest > 0.0 && spread_fewest <= spread_most))
            fail("spread_fewest", spread_fewest, "a positive number of pseudo-samples, at most spread_most");
    }

private:
    static constexpr double kLargest = 1.7976931348623157e308;  // the largest finite double
};

}  // namespace specdec
