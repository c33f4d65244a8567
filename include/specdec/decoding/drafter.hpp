#pragma once
// The drafting side of speculative decoding. A Drafter proposes up to
// max_tokens continuations of the committed sequence together with the
// distributions it drew them from (or none, for point-mass drafters).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/draft_proposal.hpp"
#include "specdec/core/sampling_options.hpp"
#include "specdec/core/tree_proposal.hpp"
#include "specdec/decoding/tree_shape.hpp"

namespace specdec {

// What a stop rule may read before draft i: its index and the drafter's own
// distribution q_i, summarised by its largest probability (at temperature 0,
// where q is not formed, the largest probability of the draft's softmax at
// temperature 1). A drafter that spends a forward pass to form q_i asks twice:
// before that pass (formed = false, top_probability unknown: a stop there
// saves the pass) and after it, before sampling. Nothing of the verifier: a
// stop that depends only on earlier drafts and on q keeps verification exact.
struct DraftCandidate {
    std::size_t index = 0;          // drafts 0 .. index - 1 are already kept
    float top_probability = 1.0f;   // max_x q_index(x); 1 while not formed
    bool formed = true;             // false: asked before the pass that forms q_index
};

// An optional stop rule (a non-owning reference to a callable): asked before
// each draft (see DraftCandidate); true ends the proposal with `index` drafts.
class DraftStop {
public:
    DraftStop() = default;
    template <class F>
        requires(!std::same_as<std::remove_cvref_t<F>, DraftStop>)
    explicit DraftStop(F& rule)
        : rule_(&rule), call_([](void* r, const DraftCandidate& c) -> bool { return (*static_cast<F*>(r))(c); }) {}

    [[nodiscard]] explicit operator bool() const { return call_ != nullptr; }
    [[nodiscard]] bool operator()(const DraftCandidate& candidate) const { return call_ && call_(rule_, candidate); }

private:
    void* rule_ = nullptr;
    bool (*call_)(void*, const DraftCandidate&) = nullptr;
};

struct DraftRequest {
    std::span<const Token> history;   // every committed token: prompt + generated so far
    std::size_t max_tokens = 0;       // propose at most this many (fewer is fine, 0 too)
    const SamplingOptions& sampling;  // the processing q must carry (same as the target's)
    // Draw draft i with rng.uniform(history.size(), draft_sample, i): keyed by
    // the step, not by the draft's position, so that a later step starting
    // inside this block (after a rejection) draws afresh. Block verification's
    // outcome depends on every draft, rejected ones included.
    const CounterRng& rng;
    DraftStop stop{};                 // optional: a drafter that forms q_i consults it before that pass and before draft i
    // Forced drafts (forced_drafts.hpp), for a drafter that supports them: where
    // sampling.constraint allows exactly one token, propose it with q = 1;
    // such tokens do not count against max_tokens, and the proposal holds at
    // most max(max_tokens, forced_limit) tokens in all. 0: none beyond max_tokens.
    std::size_t forced_limit = 0;
    std::span<const Token> end_tokens{};  // the stop tokens: no forced tokens past max_tokens after one
    // How draft i is drawn (core/rng.hpp): `own` as above, or for
    // CoupledSampling the coupled draw at its position, history.size() + i.
    DraftDraws draws = DraftDraws::own;
};

// propose() must return tokens sampled from the q it reports, at most
// max_tokens of them (max(max_tokens, forced_limit) for one that proposes
// forced drafts). For exactness the choice of how many tokens to propose may
// depend only on the drafter's own state and earlier drafts, never on the
// verifier's randomness.
// reset() is called by the decoder's reset() (it may drop any cached state).
// A drafter may also provide prefill(std::span<const Token> history), called
// by the decoder's prefill() so that a draft model can process a prompt in one
// batched pass before the first step.
template <class D>
concept Drafter = requires(D& drafter, const DraftRequest& request) {
    { drafter.propose(request) } -> std::same_as<DraftProposal>;
    { drafter.reset() };
};

// A drafter that proposes nothing: a decoder over it is plain decoding
// (BatchedDecoder<Model, NoDrafts> is batched autoregressive decoding).
struct NoDrafts {
    DraftProposal propose(const DraftRequest&) const { return {}; }
    void reset() {}
};

struct TreeDraftRequest {
    std::span<const Token> history;   // every committed token: prompt + generated so far
    // The most to propose: at most shape.size() nodes, none deeper than
    // shape.depth(). A model drafter fills the shape's slots (node i of the
    // shape is the rank_of(i)-th child drawn from its parent's q); a
    // model-free drafter only keeps within the budget.
    const TreeShape& shape;
    const SamplingOptions& sampling;  // the processing q must carry (same as the target's)
    // Draw the token of shape node i with rng.uniform(history.size(), tree_draft, i):
    // a stream of its own, never one the verifier reads.
    const CounterRng& rng;
};

// A drafter of token trees. propose_tree() returns a TreeProposal whose
// sibling groups were drawn without replacement from the q rows it reports, or
// are point masses (fixed by the history); how much it proposes may depend on
// its own state and the history, never on the verifier's randomness.
template <class D>
concept TreeDrafter = requires(D& drafter, const TreeDraftRequest& request) {
    { drafter.propose_tree(request) } -> std::same_as<TreeProposal>;
    { drafter.reset() };
};

}  // namespace specdec
