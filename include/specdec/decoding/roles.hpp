#pragma once
// Naming the two models of a speculative decoder by role. When target and
// draft have the same type, positional arguments could be swapped without a
// compiler error and the decoder would then sample from the *draft's*
// distribution. Requiring the roles at the call site makes that mistake
// impossible to write by accident:
//
//   specdec::SpeculativeDecoder decoder(specdec::target(big), specdec::draft(small), options);
//
// Swapping the arguments does not compile (the constructor takes a TargetRole
// first), and neither does passing a bare model.
#include "specdec/core/model_contract.hpp"
#include "specdec/decoding/drafter.hpp"

namespace specdec {

template <CausalLM Model>
struct TargetRole {
    Model& model;
};

// A draft model (any CausalLM, wrapped in a ModelDrafter) or a Drafter (a
// TreeDrafter for the tree decoder).
template <class Source>
    requires(Drafter<Source> || TreeDrafter<Source> || CausalLM<Source>)
struct DraftRole {
    Source& source;
};

// The decoder keeps references: the models must outlive it, so temporaries are refused.
template <CausalLM Model>
[[nodiscard]] TargetRole<Model> target(Model& model) {
    return {model};
}
template <CausalLM Model>
void target(const Model&&) = delete;

template <class Source>
    requires(Drafter<Source> || TreeDrafter<Source> || CausalLM<Source>)
[[nodiscard]] DraftRole<Source> draft(Source& source) {
    return {source};
}
template <class Source>
    requires(Drafter<Source> || TreeDrafter<Source> || CausalLM<Source>)
void draft(const Source&&) = delete;

}  // namespace specdec
