#pragma once
// Stop strings matched in a growing text. The text layer keeps back the
// text that might still start a stop string (held_suffix) and looks for a
// complete one in the newest bytes only (find), so each added token costs
// O(its text + the longest stop string) per stop string, whatever the
// length of the generation. Strings are matched as bytes.
//
// Which match ends generation: the one that completes first as the text
// grows (the smallest end); of those completing together, the one that
// starts first (the longest).
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec::text {

struct StopMatch {
    std::size_t begin = 0;  // byte offsets in the searched text
    std::size_t end = 0;
    std::size_t index = 0;  // which stop string
};

class StopStrings {
public:
    StopStrings() = default;
    // Throws specdec::Error for an empty stop string (it would match at once).
    explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
        for (std::size_t i = 0; i < stops_.size(); ++i) {
            if (stops_[i].empty()) throw Error("stop string " + std::to_string(i) + " is empty");
            longest_ = std::max(longest_, stops_[i].size());
        }
    }

    [[nodiscard]] bool empty() const { return stops_.empty(); }
    [[nodiscard]] const std::vector<std::string>& strings() const { return stops_; }
    [[nodiscard]] std::size_t longest() const { return longest_; }

    // The first match (see above) that ends after `text[0 .. fresh_from)`,
    // i.e. uses at least one byte from fresh_from on; none when every stop
    // string is absent. Matches inside the old part were found before.
    [[nodiscard]] std::optional<StopMatch> find(std::string_view text, std::size_t fresh_from) const {
        std::optional<StopMatch> best;
        for (std::size_t i = 0; i < stops_.size(); ++i) {
            const std::string& stop = stops_[i];
            if (stop.size() > text.size()) continue;
            const std::size_t from = fresh_from + 1 > stop.size() ? fresh_from + 1 - stop.size() : 0;
            const std::size_t at = text.find(stop, from);
            if (at == std::string_view::npos) continue;
            const StopMatch match{at, at + stop.size(), i};
            if (!best || match.end < best->end || (match.end == best->end && match.begin < best->begin)) best = match;
        }
        return best;
    }

    // The length of the longest suffix of `text` that is a proper prefix of
    // some stop string: the bytes that must not be shown yet.
    [[nodiscard]] std::size_t held_suffix(std::string_view text) const {
        const std::size_t most = std::min(text.size(), longest_ > 0 ? longest_ - 1 : 0);
        for (std::size_t length = most; length > 0; --length) {
            const std::string_view tail = text.substr(text.size() - length);
            for (const std::string& stop : stops_) {
                if (stop.size() > length && std::string_view(stop).substr(0, length) == tail) return length;
            }
        }
        return 0;
    }

private:
    std::vector<std::string> stops_;
    std::size_t longest_ = 0;
};

}  // namespace specdec::text
