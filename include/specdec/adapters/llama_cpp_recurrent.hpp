#pragma once
// Rolling back a llama.cpp model whose memory holds a recurrent state
// (Mamba, RWKV; hybrids such as Jamba, Granite-H, Nemotron-H, LFM2, Qwen3.5).
// Such a state is one value per sequence that every token overwrites, so
// llama_memory_seq_rm cannot drop the last positions: the state before them
// is gone. Speculative decoding rolls back after every rejected draft, so the
// adapter keeps, per slot, a second llama.cpp sequence as a checkpoint:
//
//   checkpoint: llama_memory_seq_cp(slot -> checkpoint sequence). llama.cpp
//     shares the state cell (and, in a unified cache, the attention cells)
//     and copies the state only when the slot's next pass writes it, so a
//     checkpoint costs a state copy inside that pass, no host transfer;
//   rollback to n: drop the slot's sequence, copy the checkpoint back into
//     it (the state at the checkpoint's position c <= n), then decode the
//     slot's tokens c .. n - 1 again without outputs (the replay). Below the
//     checkpoint the slot is cleared and all n tokens are replayed.
//
// The replay waits for the model's next pass: every slot rolled back since
// the last pass replays then, all in one llama_decode before that pass (a
// batched decoder rolls back many slots a step, one replay pass for all).
//
// Where checkpoints are taken decides only what a rollback replays, never its
// result: before a pass that feeds more than one token (a verification pass,
// a draft's catching up), before the first pass after a rollback, and when
// the slot has none. A verification pass then rolls back to a checkpoint
// just before it (replaying its last token and the accepted drafts), and a
// draft that drafted one token per pass rolls back to the checkpoint before
// its catching up (replaying that and its accepted drafts): one extra pass
// of a few tokens per rolled-back step (for all the slots it rolled back),
// not a replay of the whole text.
//
// So the slot's tokens must be known: they are kept here, per slot.
//
// Some architectures llama.cpp can also roll back itself, within a pass
// (n_rs_seq, "recurrent snapshots": the states after each of a pass's last N
// tokens are kept). Where the context has them, a rollback of at most N
// tokens, all from the slot's last pass and the first since a rollback,
// is llama_memory_seq_rm, with no replay; anything else falls back to the
// checkpoint. Until the next pass the rolled-back state lives in a
// snapshot, so no checkpoint is taken then: through a run of such
// rollbacks the checkpoint stays where it was, and a rollback past the
// snapshots replays from there.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <llama.h>

#include "specdec/adapters/llama_cpp_decode_status.hpp"
#include "specdec/adapters/llama_cpp_rollback_probe.hpp"
#include "specdec/adapters/llama_cpp_runtime.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec::llama_cpp {

namespace detail {

// `tokens` at positions first, first + 1, ... of sequence `seq` in one
// llama_decode; only the last token's row is an output, if last_output.
inline std::int32_t decode_sequence(llama_context* context, llama_batch& batch, std::span<const llama_token> tokens,
                                    llama_pos first, llama_seq_id seq, bool last_output) {
    batch.n_tokens = static_cast<std::int32_t>(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        batch.token[i] = tokens[i];
        batch.pos[i] = first + static_cast<llama_pos>(i);
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = seq;
        batch.logits[i] = last_output && i + 1 == tokens.size();
    }
    return llama_decode(context, batch);
}

// max |a - b| relative to 1 + max |a|: rows of the same state agree to rounding.
[[nodiscard]] inline float relative_difference(std::span<const float> a, const float* b) {
    float largest = 0.0f, difference = 0.0f;
    for (std::size_t i = 0; i < a.size(); ++i) {
        largest = std::max(largest, std::fabs(a[i]));
        difference = std::max(difference, std::fabs(a[i] - b[i]));
    }
    return difference / (1.0f + largest);
}
inline constexpr float kSameStateTolerance = 1e-3f;

}  // namespace detail

class RecurrentRollback {
public:
    RecurrentRollback() = default;
    explicit RecurrentRollback(std::size_t slots) : slots_(slots) {}

    // llama.cpp sequences a context needs: one per slot and one per checkpoint.
    [[nodiscard]] static std::size_t sequences_needed(std::size_t slots) { return 2 * slots; }

    // Before a pass that feeds `fed` tokens to `slot`: the checkpoint, where
    // one is due (see the file comment).
    void before_pass(llama_memory_t memory, std::size_t slot, std::size_t fed) {
        Slot& s = slots_.at(slot);
        // After llama.cpp's own rollback the state sits in a snapshot until
        // the next pass reads it: a copy now would checkpoint the state
        // before that rollback. The older checkpoint stays (at or below it).
        if (s.snapshot_pending) return;
        if (!s.checkpoint_due && fed <= 1 && s.checkpoint) return;
        if (s.checkpoint == s.tokens.size()) {
            s.checkpoint_due = false;  // it already holds this state
            return;
        }
        llama_memory_seq_rm(memory, checkpoint_seq(slot), -1, -1);
        llama_memory_seq_cp(memory, seq(slot), checkpoint_seq(slot), -1, -1);
        s.checkpoint = s.tokens.size();
        s.checkpoint_due = false;
    }

    // After a pass that stored `tokens` in `slot`; one_decode: all of them in
    // one llama_decode (llama.cpp's snapshots cover only a call's last tokens).
    void after_pass(std::size_t slot, std::span<const Token> tokens, bool one_decode) {
        Slot& s = slots_.at(slot);
        s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
        s.last_pass = one_decode ? tokens.size() : 0;
        s.snapshot_pending = false;
    }

    // Brings `slot` to its first n tokens (n <= what it holds; after a
    // failed pass, what it held before that pass, with snapshots = 0): by
    // llama.cpp's own rollback where the context keeps `snapshots` states a
    // pass and the tokens to drop all came from the slot's last pass; else
    // from the checkpoint where it is at or below n, else from nothing, the
    // rest left to replay_pending_slots. Throws specdec::Error if llama.cpp
    // refuses; the slot's state is then unknown.
    void truncate(llama_context* context, std::size_t slot, std::size_t n, std::size_t snapshots, const std::string& name) {
        Slot& s = slots_.at(slot);
        llama_memory_t memory = llama_get_memory(context);
        const std::size_t back = s.tokens.size() - n;
        const bool within_last_pass = back <= s.last_pass && back <= snapshots && n > 0;
        s.last_pass = 0;  // a second rollback before the next pass has no snapshots left
        // A refused removal leaves the memory as it was (llama.cpp checks before it changes anything).
        if (within_last_pass && llama_memory_seq_rm(memory, seq(slot), static_cast<llama_pos>(n), -1)) {
            s.tokens.resize(n);
            s.checkpoint_due = true;
            s.snapshot_pending = true;
            ++native_;
            return;
        }
        s.snapshot_pending = false;  // dropping the sequence below clears a pending one too
        if (!llama_memory_seq_rm(memory, seq(slot), -1, -1)) {
            throw Error(name + ": llama.cpp refused to clear slot " + std::to_string(slot) + recent_errors_suffix());
        }
        std::size_t from = 0;
        if (s.checkpoint && *s.checkpoint <= n) {
            llama_memory_seq_cp(memory, checkpoint_seq(slot), seq(slot), -1, -1);
            from = *s.checkpoint;
        } else {
            llama_memory_seq_rm(memory, checkpoint_seq(slot), -1, -1);
            s.checkpoint.reset();
        }
        s.tokens.resize(n);
        s.checkpoint_due = true;
        s.replay_from.reset();
        if (llama_memory_seq_pos_max(memory, seq(slot)) != static_cast<llama_pos>(from) - 1) {
            throw Error(name + ": restoring slot " + std::to_string(slot) + " from its checkpoint of " +
                        std::to_string(from) + " positions left it at position " +
                        std::to_string(llama_memory_seq_pos_max(memory, seq(slot))) + recent_errors_suffix());
        }
        if (from < n) {
            s.replay_from = from;
            ++replayed_rollbacks_;
        }
    }

    // Whether `slot` waits for its replay (llama.cpp's memory holds fewer
    // positions than the slot's tokens until replay_pending_slots runs).
    [[nodiscard]] bool replay_pending(std::size_t slot) const { return slots_.at(slot).replay_from.has_value(); }

    // Replays every slot that waits, in one llama_decode where the batch
    // holds them all (else slot by slot, in passes of at most batch_capacity
    // tokens); returns the slots replayed. Throws specdec::Error if llama.cpp
    // refuses; those slots' states are then unknown.
    std::vector<std::size_t> replay_pending_slots(llama_context* context, llama_batch& batch, std::size_t batch_capacity,
                                                  const std::string& name) {
        std::vector<std::size_t> waiting;
        std::size_t tokens = 0;
        for (std::size_t slot = 0; slot < slots_.size(); ++slot) {
            if (!slots_[slot].replay_from) continue;
            waiting.push_back(slot);
            tokens += slots_[slot].tokens.size() - *slots_[slot].replay_from;
        }
        if (waiting.empty()) return waiting;
        std::int32_t code = 1;
        if (tokens <= batch_capacity) {
            batch.n_tokens = 0;
            for (const std::size_t slot : waiting) {
                const Slot& s = slots_[slot];
                for (std::size_t p = *s.replay_from; p < s.tokens.size(); ++p) {
                    const auto i = batch.n_tokens++;
                    batch.token[i] = s.tokens[p];
                    batch.pos[i] = static_cast<llama_pos>(p);
                    batch.n_seq_id[i] = 1;
                    batch.seq_id[i][0] = seq(slot);
                    batch.logits[i] = false;
                }
            }
            code = llama_decode(context, batch);
            if (code != 0 && !(code == 1 && waiting.size() > 1)) throw replay_error(code, tokens, waiting, name);
            if (code == 0) {
                replayed_ += tokens;
                ++replay_passes_;
            }
        }
        if (code != 0) {  // too many tokens for one pass, or no cache slot for all of them at once
            for (const std::size_t slot : waiting) replay(context, batch, batch_capacity, slot, *slots_[slot].replay_from, name);
        }
        for (const std::size_t slot : waiting) slots_[slot].replay_from.reset();
        return waiting;
    }

    [[nodiscard]] std::size_t held(std::size_t slot) const { return slots_.at(slot).tokens.size(); }
    // Tokens decoded again by rollbacks so far (every slot), and the
    // rollbacks llama.cpp did itself (snapshots).
    [[nodiscard]] std::size_t replayed_tokens() const { return replayed_; }
    [[nodiscard]] std::size_t snapshot_rollbacks() const { return native_; }
    // Rollbacks that needed a replay, and the llama_decode calls their replays took.
    [[nodiscard]] std::size_t replayed_rollbacks() const { return replayed_rollbacks_; }
    [[nodiscard]] std::size_t replay_passes() const { return replay_passes_; }

    [[nodiscard]] llama_seq_id checkpoint_seq(std::size_t slot) const {
        return static_cast<llama_seq_id>(slots_.size() + slot);
    }

private:
    struct Slot {
        std::vector<Token> tokens;              // the slot's cache, in order
        std::optional<std::size_t> checkpoint;  // positions its checkpoint sequence holds (a prefix of tokens)
        bool checkpoint_due = true;
        std::size_t last_pass = 0;      // tokens of the slot's last pass, 0 once rolled back since
        bool snapshot_pending = false;  // rolled back by llama.cpp, no pass since
        std::optional<std::size_t> replay_from;  // memory holds only tokens [0, replay_from) until the replay
    };

    [[nodiscard]] static llama_seq_id seq(std::size_t slot) { return static_cast<llama_seq_id>(slot); }

    static Error replay_error(std::int32_t code, std::size_t tokens, std::span<const std::size_t> slots, const std::string& name) {
        std::string which;
        for (const std::size_t slot : slots) which += (which.empty() ? "" : ", ") + std::to_string(slot);
        return Error(name + ": replaying " + std::to_string(tokens) + " tokens of slot(s) " + which +
                     " after a rollback failed: " + describe_decode_code(code) + recent_errors_suffix());
    }

    // Decodes the slot's tokens from `from` on, without outputs.
    void replay(llama_context* context, llama_batch& batch, std::size_t batch_capacity, std::size_t slot,
                std::size_t from, const std::string& name) {
        const std::vector<Token>& tokens = slots_[slot].tokens;
        for (std::size_t begin = from; begin < tokens.size(); begin += batch_capacity) {
            const std::size_t end = std::min(tokens.size(), begin + batch_capacity);
            const std::span<const llama_token> chunk(tokens.data() + begin, end - begin);
            if (const std::int32_t code =
                    detail::decode_sequence(context, batch, chunk, static_cast<llama_pos>(begin), seq(slot), false);
                code != 0) {
                throw Error(name + ": replaying " + std::to_string(end - begin) + " tokens of slot " +
                            std::to_string(slot) + " after a rollback failed: " + describe_decode_code(code) +
                            recent_errors_suffix());
            }
            replayed_ += end - begin;
            ++replay_passes_;
        }
    }

    std::vector<Slot> slots_;
    std::size_t replayed_ = 0, native_ = 0, replayed_rollbacks_ = 0, replay_passes_ = 0;
};

// The construction-time experiment for a recurrent memory, as
// probe_partial_rollback is for an attention cache: decode a token into
// sequence 0, checkpoint it into `checkpoint`, decode a second token (its
// row: x), restore the checkpoint and decode the second token again (its
// row: y). The memory rolls back iff the restore leaves exactly position 0
// and y equals x (up to rounding: the same computation on the same state).
inline RollbackProbe probe_checkpoint_rollback(llama_context* context, llama_batch& batch, llama_seq_id checkpoint,
                                               std::size_t vocab_size, llama_token token) {
    llama_memory_t memory = llama_get_memory(context);
    RollbackProbe result;
    const auto decode_one = [&](llama_pos position, bool output) {
        return detail::decode_sequence(context, batch, std::span<const llama_token>(&token, 1), position, 0, output) == 0;
    };
    const auto finish = [&](std::string reason) {
        llama_memory_clear(memory, true);
        result.reason = std::move(reason);
        return result;
    };
    if (!decode_one(0, false)) return finish("decoding a probe token failed");
    llama_memory_seq_cp(memory, 0, checkpoint, -1, -1);
    if (!decode_one(1, true)) return finish("decoding a probe token after a checkpoint failed");
    const float* row = llama_get_logits_ith(context, 0);
    if (row == nullptr) return finish("llama.cpp returned no logits for the probe token");
    const std::vector<float> first(row, row + vocab_size);
    if (!llama_memory_seq_rm(memory, 0, -1, -1)) return finish("its memory refused to clear a sequence");
    llama_memory_seq_cp(memory, checkpoint, 0, -1, -1);
    if (const llama_pos last = llama_memory_seq_pos_max(memory, 0); last != 0) {
        return finish("copying a checkpoint back left the sequence at position " + std::to_string(last) +
                      " instead of 0");
    }
    if (!decode_one(1, true)) return finish("decoding after restoring a checkpoint failed");
    row = llama_get_logits_ith(context, 0);
    if (row == nullptr) return finish("llama.cpp returned no logits after restoring a checkpoint");
    if (const float d = detail::relative_difference(first, row); !(d <= detail::kSameStateTolerance)) {
        return finish("after restoring a checkpoint the same token gave other logits (relative difference " +
                      std::to_string(d) + "): the state was not restored");
    }
    result.partial_rollback = true;
    llama_memory_clear(memory, true);
    return result;
}

// The experiment for llama.cpp's own rollback (snapshots): decode three
// tokens in one pass, roll back to one, decode another token (its row: x);
// then, fresh, the first token and that other one (row: y). It works iff the
// removal is accepted, leaves exactly position 0 and y equals x.
inline RollbackProbe probe_snapshot_rollback(llama_context* context, llama_batch& batch, std::size_t vocab_size,
                                             llama_token token, llama_token other) {
    llama_memory_t memory = llama_get_memory(context);
    RollbackProbe result;
    const auto decode = [&](std::span<const llama_token> tokens, llama_pos first) {
        return detail::decode_sequence(context, batch, tokens, first, 0, true) == 0;
    };
    const auto finish = [&](std::string reason) {
        llama_memory_clear(memory, true);
        result.reason = std::move(reason);
        return result;
    };
    const llama_token three[] = {token, token, token};
    if (!decode(three, 0)) return finish("decoding three probe tokens failed");
    if (!llama_memory_seq_rm(memory, 0, 1, -1)) return finish("its memory refused to drop the last two of three positions");
    if (const llama_pos last = llama_memory_seq_pos_max(memory, 0); last != 0) {
        return finish("dropping the last two of three positions left position " + std::to_string(last));
    }
    if (!decode(std::span<const llama_token>(&other, 1), 1)) return finish("decoding after the rollback failed");
    const float* row = llama_get_logits_ith(context, -1);
    if (row == nullptr) return finish("llama.cpp returned no logits after the rollback");
    const std::vector<float> rolled_back(row, row + vocab_size);
    llama_memory_clear(memory, true);
    const llama_token fresh[] = {token, other};
    if (!decode(fresh, 0)) return finish("decoding two probe tokens failed");
    row = llama_get_logits_ith(context, -1);
    if (row == nullptr) return finish("llama.cpp returned no logits for the probe tokens");
    if (const float d = detail::relative_difference(rolled_back, row); !(d <= detail::kSameStateTolerance)) {
        return finish("after its rollback the next token gave other logits than a fresh pass (relative difference " +
                      std::to_string(d) + ")");
    }
    result.partial_rollback = true;
    llama_memory_clear(memory, true);
    return result;
}

}  // namespace specdec::llama_cpp
