#pragma once
// Whether a llama.cpp context can roll a sequence back to any earlier
// position, decided once when the adapter is constructed. Speculative
// decoding truncates the cache after every rejected draft; a memory that
// cannot drop its last positions (a sliding window that has already
// forgotten what a rollback would need) would leave a silently wrong cache,
// so such a model is refused instead. (A recurrent or hybrid model is rolled
// back by checkpoint and replay and probed by llama_cpp_recurrent.hpp.)
//
// The probe is the experiment itself, as llama.cpp's own speculative tools
// run it: decode two tokens into sequence 0, ask the memory to remove
// position 1, and check that exactly position 0 is left. It is written
// against a small interface so that it can be tested with a memory that
// refuses (no model file is needed for that test):
//
//   struct Memory {
//       bool decode_two_tokens();          // positions 0 and 1 of sequence 0; false if the decode failed
//       bool remove_from(int position);    // llama_memory_seq_rm(mem, 0, position, -1)
//       int last_position();               // llama_memory_seq_pos_max(mem, 0)
//       void clear();                      // llama_memory_clear(mem, true)
//   };
#include <string>

namespace specdec::llama_cpp {

struct RollbackProbe {
    bool partial_rollback = false;  // any suffix of a sequence can be removed
    std::string reason;             // why not, when it cannot
};

template <class Memory>
RollbackProbe probe_partial_rollback(Memory& memory) {
    RollbackProbe result;
    if (!memory.decode_two_tokens()) {
        memory.clear();
        result.reason = "decoding two probe tokens failed";
        return result;
    }
    if (!memory.remove_from(1)) {
        result.reason = "its memory refused to remove the last of two positions (llama_memory_seq_rm returned false)";
    } else if (const int last = memory.last_position(); last != 0) {
        result.reason = "after removing the last of two positions its memory ends at position " + std::to_string(last) +
                        " instead of 0";
    } else {
        result.partial_rollback = true;
    }
    memory.clear();
    return result;
}

}  // namespace specdec::llama_cpp
