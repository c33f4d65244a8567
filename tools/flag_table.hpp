#pragma once
// One table of command-line flags per tool, from which the parser, its errors
// and the --help text all come, so that a flag cannot be parsed without being
// documented or documented under a name the parser does not know. Shared by
// specdec-bench and specdec-generate.
//
// A mistake in the command line is a UsageError: the tool prints its message
// on one line and exits with code 2 (a failure of the library exits with 1).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::cli {

class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// One flag: its names (e.g. {"-m", "--model"}), the placeholder of its value
// (empty: a switch, which takes none), its help (flag_help wraps it) and what
// it does to the options. `section` opens a new group of flags in --help.
template <class Options>
struct FlagSpec {
    std::vector<std::string_view> names;
    std::string_view value;
    std::string_view help;
    std::function<void(Options&, std::string_view flag, std::string_view value)> set;
    std::string_view section = {};

    [[nodiscard]] bool is_switch() const { return value.empty(); }
    [[nodiscard]] bool named(std::string_view name) const {
        return std::find(names.begin(), names.end(), name) != names.end();
    }
};

// Applies argv[1..] to `options`. Accepts "--flag value" and "--flag=value";
// a switch given a value, a missing value and an unknown flag are UsageErrors.
template <class Options>
void parse_flags(std::span<const FlagSpec<Options>> flags, std::span<const std::string_view> arguments, Options& options) {
    for (std::size_t i = 0; i < arguments.size(); ++i) {
        std::string_view flag = arguments[i];
        std::optional<std::string_view> inline_value;
        if (const std::size_t equals = flag.find('='); flag.starts_with("--") && equals != std::string_view::npos) {
            inline_value = flag.substr(equals + 1);
            flag = flag.substr(0, equals);
        }
        const auto spec = std::find_if(flags.begin(), flags.end(), [&](const FlagSpec<Options>& f) { return f.named(flag); });
        if (spec == flags.end()) throw UsageError("unknown option '" + std::string(arguments[i]) + "' (see --help)");
        if (spec->is_switch()) {
            if (inline_value) throw UsageError(std::string(flag) + " takes no value");
            spec->set(options, flag, {});
            continue;
        }
        if (!inline_value && i + 1 >= arguments.size()) throw UsageError(std::string(flag) + ": missing value");
        spec->set(options, flag, inline_value ? *inline_value : arguments[++i]);
    }
}

// The flags' part of --help: "  NAMES VALUE" padded to `column`, then the
// help, wrapped at spaces (or '\n', read as a space) to `width` columns and
// continued under itself.
template <class Options>
[[nodiscard]] std::string flag_help(std::span<const FlagSpec<Options>> flags, std::size_t column = 28,
                                    std::size_t width = 100) {
    std::string text;
    for (const FlagSpec<Options>& f : flags) {
        if (!f.section.empty()) text.append(text.empty() ? "" : "\n").append(f.section).append("\n");
        std::string line = "  ";
        for (std::size_t n = 0; n < f.names.size(); ++n) line.append(n ? ", " : "").append(f.names[n]);
        if (!f.is_switch()) line.append(" ").append(f.value);
        if (line.size() + 1 > column) {
            text += line + "\n";
            line.clear();
        }
        line.resize(column, ' ');
        bool fresh = true;  // nothing written after the padding yet
        std::size_t start = 0;
        while (start <= f.help.size()) {
            std::size_t end = f.help.find_first_of(" \n", start);
            if (end == std::string_view::npos) end = f.help.size();
            const std::string_view word = f.help.substr(start, end - start);
            if (!fresh && line.size() + 1 + word.size() > width) {
                text += line + "\n";
                line.assign(column, ' ');
                fresh = true;
            }
            if (!fresh) line += ' ';
            line += word;
            fresh = false;
            start = end + 1;
        }
        text += line + "\n";
    }
    return text;
}

// Values, each a UsageError naming the flag when the text is not one.

[[nodiscard]] inline std::uint64_t parse_count(std::string_view flag, std::string_view text, std::uint64_t minimum = 0) {
    std::uint64_t value = 0;
    const char* end = text.data() + text.size();
    const auto [ptr, error] = std::from_chars(text.data(), end, value);
    if (text.empty() || error != std::errc{} || ptr != end)
        throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not a non-negative integer");
    if (value < minimum)
        throw UsageError(std::string(flag) + ": " + std::to_string(value) + " is too small, expected at least " +
                         std::to_string(minimum));
    return value;
}

// A finite number >= 0; `what` names it in the error ("temperature", "seconds").
[[nodiscard]] inline double parse_non_negative(std::string_view flag, std::string_view text, std::string_view meaning) {
    const std::string copy(text);
    char* end = nullptr;
    const double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size()) throw UsageError(std::string(flag) + ": '" + copy + "' is not a number");
    if (!std::isfinite(value) || value < 0.0)
        throw UsageError(std::string(flag) + ": " + copy + " is invalid, expected a finite value >= 0" +
                         (meaning.empty() ? "" : " (" + std::string(meaning) + ")"));
    return value;
}

[[nodiscard]] inline std::vector<std::string_view> split_list(std::string_view flag, std::string_view text) {
    std::vector<std::string_view> items;
    std::size_t start = 0;
    while (true) {
        const std::size_t comma = text.find(',', start);
        const std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
        if (item.empty()) throw UsageError(std::string(flag) + ": empty item in list '" + std::string(text) + "'");
        items.push_back(item);
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    return items;
}

// A comma-separated list of counts, each at least `minimum`.
[[nodiscard]] inline std::vector<std::size_t> parse_count_list(std::string_view flag, std::string_view text,
                                                               std::uint64_t minimum = 0) {
    std::vector<std::size_t> values;
    for (const std::string_view item : split_list(flag, text)) values.push_back(static_cast<std::size_t>(parse_count(flag, item, minimum)));
    return values;
}

// The one-line form of an error message (main prints it after the tool's name).
[[nodiscard]] inline std::string one_line(std::string text) {
    for (char& c : text)
        if (c == '\n' || c == '\r') c = ' ';
    return text;
}

}  // namespace specdec::cli
