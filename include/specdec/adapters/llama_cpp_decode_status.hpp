#pragma once
// What llama_decode's return code means for the caller's cache, from the
// contract in llama.h: which codes leave the memory as it was before the call
// (retry or report), and which leave the ubatches already processed in it (the
// adapter must then roll the sequences back itself).
#include <cstdint>
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

}  // namespace specdec::llama_cpp
