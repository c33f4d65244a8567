#pragma once
// What MultiSequenceLM::forward_batch must reject before it runs, in one
// place for every model that implements it (the CPU and CUDA models).
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"

namespace specdec::detail {

// Throws specdec::Error naming the feed, its slot and the bad value for a
// slot out of [0, slots), a slot fed twice, an empty feed, a token id outside
// [0, vocab), or a feed that overflows its slot (cached(slot) positions of
// `capacity`). `who` names the model in the message.
template <class CachedOf>
void check_sequence_feeds(std::span<const SequenceFeed> feeds, std::size_t slots, std::size_t vocab,
                          std::size_t capacity, CachedOf&& cached, const std::string& who) {
    std::vector<std::size_t> feed_of_slot(slots, feeds.size());  // feeds.size(): not fed yet
    for (std::size_t f = 0; f < feeds.size(); ++f) {
        const SequenceFeed& feed = feeds[f];
        const std::string where = who + ": forward_batch feed " + std::to_string(f);
        if (feed.slot >= slots) {
            throw Error(where + ": slot " + std::to_string(feed.slot) + " is out of range [0, " + std::to_string(slots) +
                        ")");
        }
        if (feed_of_slot[feed.slot] != feeds.size()) {
            throw Error(where + " repeats slot " + std::to_string(feed.slot) + " of feed " +
                        std::to_string(feed_of_slot[feed.slot]) + "; expected each slot at most once per pass");
        }
        feed_of_slot[feed.slot] = f;
        if (feed.tokens.empty()) {
            throw Error(where + " (slot " + std::to_string(feed.slot) + ") has no tokens; expected at least one");
        }
        for (std::size_t i = 0; i < feed.tokens.size(); ++i) {
            const Token token = feed.tokens[i];
            if (token < 0 || static_cast<std::size_t>(token) >= vocab) {
                throw Error(where + " (slot " + std::to_string(feed.slot) + "): token id " + std::to_string(token) +
                            " at index " + std::to_string(i) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
            }
        }
        const std::size_t held = cached(feed.slot);
        if (feed.tokens.size() > capacity - held) {
            throw Error(where + " of " + std::to_string(feed.tokens.size()) + " tokens after " + std::to_string(held) +
                        " cached positions in slot " + std::to_string(feed.slot) + " overflows its context length " +
                        std::to_string(capacity) + "; expected at most " + std::to_string(capacity - held) + " tokens");
        }
    }
}

}  // namespace specdec::detail
