#pragma once
// What llama_decode's return code means for the caller's cache, from the
// contract in llama.h: which codes leave the memory as it was before the call
// (retry or report), and which leave the ubatches already processed in it (the
// adapter must then roll the sequences back itself).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace specdec::llama_cpp {

enum class DecodeOutcome {
    ok,              // 0
    no_slot,         // 1: no KV slot for the batch; memory restored; a smaller batch may fit
    aborted,         // 2: the abort callback stopped it; processed ubatches stay in memory
    invalid_batch,   // -1: the batch was rejected; memory restored
    fatal,           // < -1: processed ubatches stay in memory
    warning,         // any other positive code: llama.h calls positive codes warnings, memory restored
};

[[nodiscard]] inline DecodeOutcome decode_outcome(std::int32_t code) {
    if (code == 0) return DecodeOutcome::ok;
    if (code == 1) return DecodeOutcome::no_slot;
    if (code == 2) return DecodeOutcome::aborted;
    if (code == -1) return DecodeOutcome::invalid_batch;
    if (code < -1) return DecodeOutcome::fatal;
    return DecodeOutcome::warning;
}

// Whether llama.cpp may have left part of the batch in the memory.
[[nodiscard]] inline bool leaves_partial_batch(DecodeOutcome outcome) {
    return outcome == DecodeOutcome::aborted || outcome == DecodeOutcome::fatal;
}

[[nodiscard]] inline std::string describe_decode_code(std::int32_t code) {
    const std::string prefix = "llama_decode returned " + std::to_string(code) + ": ";
    switch (decode_outcome(code)) {
        case DecodeOutcome::ok: return prefix + "success";
        case DecodeOutcome::no_slot: return prefix + "no KV cache slot for the batch (the cache is full)";
        case DecodeOutcome::aborted: return prefix + "aborted by the abort callback";
        case DecodeOutcome::invalid_batch: return prefix + "invalid input batch";
        case DecodeOutcome::fatal: return prefix + "fatal error in the computation";
        case DecodeOutcome::warning: return prefix + "unknown warning code";
    }
    return prefix + "unknown code";
}

// Where to split a batch that found no KV slot: at the change of sequence id
// closest to its middle, never inside a sequence's run of tokens (a split
// there separates drafts from the rows that verify them: llama.cpp#24840).
// `seq_ids` holds each token's sequence, every sequence's tokens contiguous;
// returns 0 when the batch holds a single sequence (nothing to split).
[[nodiscard]] inline std::size_t sequence_boundary_near_middle(std::span<const std::int32_t> seq_ids) {
    std::size_t best = 0;
    const std::size_t middle = seq_ids.size() / 2;
    const auto distance = [middle](std::size_t x) { return x > middle ? x - middle : middle - x; };
    for (std::size_t i = 1; i < seq_ids.size(); ++i) {
        if (seq_ids[i] == seq_ids[i - 1]) continue;
        if (best == 0 || distance(i) < distance(best)) best = i;
    }
    return best;
}

}  // namespace specdec::llama_cpp
