#pragma once
// The pass engine of the llama.cpp adapter: tokens with their sequence ids,
// positions and output rows in, logits rows out, through as few llama_decode
// calls as the context's batch allows. It owns the llama_batch and the rows
// it had to gather; the slots' bookkeeping and rollback stay with
// LlamaCppModel.
//
//  - A pass that fits one batch is one llama_decode; when llama.cpp stores
//    its rows contiguously in batch order they are returned in place (no
//    copy), otherwise they are gathered into the engine's own buffer.
//  - A longer pass is fed in chunks of the batch capacity.
//  - "No KV slot" (code 1) for a batch of several sequences is retried as
//    two smaller batches split between sequences, never inside one: a
//    sequence's tokens stay in one batch with their rows.
//  - Any other failure throws specdec::Error with the meaning of the code;
//    the caller rolls the fed slots back.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <llama.h>

#include "specdec/adapters/llama_cpp_decode_status.hpp"
#include "specdec/adapters/llama_cpp_runtime.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec::llama_cpp {

// One token of a pass: where it goes and where its row goes (row < 0: no output).
struct PassEntry {
    llama_seq_id seq;
    llama_pos position;
    Token token;
    std::ptrdiff_t row;
    std::span<const llama_seq_id> more_seqs{};  // a tree node's other sequences
};

class PassEngine {
public:
    // The batch holds at least this many tokens, for the rollback probes
    // (a context whose n_batch is smaller then fails them).
    static constexpr std::size_t kProbeTokens = 4;

    PassEngine() = default;
    // A batch of `capacity` tokens (the context's n_batch), each carrying up
    // to `seqs_per_token` sequence ids; rows of `vocab_size` logits.
    PassEngine(std::size_t capacity, std::size_t seqs_per_token, std::size_t vocab_size, std::string name)
        : batch_(new llama_batch(llama_batch_init(static_cast<std::int32_t>(std::max<std::size_t>(capacity, kProbeTokens)), 0,
                                                  static_cast<std::int32_t>(std::max<std::size_t>(seqs_per_token, 1))))),
          capacity_(capacity),
          vocab_size_(vocab_size),
          name_(std::move(name)) {}

    [[nodiscard]] std::size_t capacity() const { return capacity_; }
    // For the passes that fill the batch themselves (probes, replays).
    [[nodiscard]] llama_batch& batch() { return *batch_; }

    // All of `entries` (any number), `rows` output rows numbered 0 .. rows - 1
    // by PassEntry::row: returns rows x vocab_size logits, valid until the
    // next pass.
    const float* decode(llama_context* context, std::span<const PassEntry> entries, std::size_t rows) {
        if (entries.size() <= capacity_) {
            if (const float* direct = decode_direct(context, entries, rows)) return direct;
        }
        logits_.assign(rows * vocab_size_, 0.0f);
        for (std::size_t begin = 0; begin < entries.size(); begin += capacity_) {
            const std::size_t end = std::min(entries.size(), begin + capacity_);
            decode_gathering(context, entries.subspan(begin, end - begin));
        }
        return logits_.data();
    }

    // Entries (at most capacity()) in one llama_decode. Returns their rows,
    // or nullptr when llama.cpp found no KV slot for a batch of several
    // sequences (decode() then splits it).
    const float* decode_direct(llama_context* context, std::span<const PassEntry> entries, std::size_t rows) {
        fill_batch(entries);
        const std::int32_t code = llama_decode(context, *batch_);
        if (code == 1 && spans_several_sequences(entries)) return nullptr;
        if (code != 0) throw decode_error(code, entries);
        const float* first = nullptr;
        std::size_t seen = 0;
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (entries[i].row < 0) continue;
            const float* row = llama_get_logits_ith(context, static_cast<std::int32_t>(i));
            if (row == nullptr) throw missing_row(i);
            if (first == nullptr) first = row;
            if (row != first + seen * vocab_size_) {
                gather_rows(context, entries, rows);
                return logits_.data();
            }
            ++seen;
        }
        if (seen != rows) throw Error(name_ + ": internal error: " + std::to_string(seen) + " output rows for " + std::to_string(rows));
        return first;
    }

private:
    struct BatchFree {
        void operator()(llama_batch* b) const {
            llama_batch_free(*b);
            delete b;
        }
    };

    void fill_batch(std::span<const PassEntry> entries) {
        llama_batch& b = *batch_;
        b.n_tokens = static_cast<std::int32_t>(entries.size());
        for (std::size_t i = 0; i < entries.size(); ++i) {
            b.token[i] = entries[i].token;
            b.pos[i] = entries[i].position;
            b.n_seq_id[i] = static_cast<std::int32_t>(1 + entries[i].more_seqs.size());
            b.seq_id[i][0] = entries[i].seq;
            std::copy(entries[i].more_seqs.begin(), entries[i].more_seqs.end(), b.seq_id[i] + 1);
            b.logits[i] = entries[i].row >= 0;
        }
    }

    // The rows of the batch just decoded, into logits_ (its rows in row order).
    void gather_rows(llama_context* context, std::span<const PassEntry> entries, std::size_t rows) {
        logits_.assign(rows * vocab_size_, 0.0f);
        copy_rows(context, entries);
    }
    void copy_rows(llama_context* context, std::span<const PassEntry> entries) {
        for (std::size_t i = 0; i < entries.size(); ++i) {
            if (entries[i].row < 0) continue;
            const float* row = llama_get_logits_ith(context, static_cast<std::int32_t>(i));
            if (row == nullptr) throw missing_row(i);
            std::copy(row, row + vocab_size_, logits_.begin() + entries[i].row * static_cast<std::ptrdiff_t>(vocab_size_));
        }
    }

    // Entries (at most capacity_) decoded with their rows copied into logits_.
    void decode_gathering(llama_context* context, std::span<const PassEntry> entries) {
        fill_batch(entries);
        const std::int32_t code = llama_decode(context, *batch_);
        if (code == 1 && spans_several_sequences(entries)) {
            const std::size_t cut = sequence_boundary_near_middle(entries);
            decode_gathering(context, entries.first(cut));
            decode_gathering(context, entries.subspan(cut));
            return;
        }
        if (code != 0) throw decode_error(code, entries);
        copy_rows(context, entries);
    }

    [[nodiscard]] static bool spans_several_sequences(std::span<const PassEntry> entries) {
        return !entries.empty() && entries.front().seq != entries.back().seq;
    }
    [[nodiscard]] static std::size_t sequence_boundary_near_middle(std::span<const PassEntry> entries) {
        std::vector<std::int32_t> seq_ids;
        for (const PassEntry& e : entries) seq_ids.push_back(e.seq);
        return llama_cpp::sequence_boundary_near_middle(seq_ids);
    }

    [[nodiscard]] Error decode_error(std::int32_t code, std::span<const PassEntry> entries) const {
        return Error(name_ + ": a pass of " + std::to_string(entries.size()) + " tokens failed: " + describe_decode_code(code) +
                     (leaves_partial_batch(decode_outcome(code)) ? " (the positions it had already stored are removed again)"
                                                                 : "") +
                     recent_errors_suffix());
    }
    [[nodiscard]] Error missing_row(std::size_t index) const {
        return Error(name_ + ": llama.cpp returned no logits for batch index " + std::to_string(index) +
                     " although it was marked as an output" + recent_errors_suffix());
    }

    std::unique_ptr<llama_batch, BatchFree> batch_;
    std::size_t capacity_ = 0;
    std::size_t vocab_size_ = 0;
    std::string name_;             // the model's, for messages
    std::vector<float> logits_;    // rows gathered from several decodes or out of order
};

}  // namespace specdec::llama_cpp
