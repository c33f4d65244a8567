#pragma once
// --auto-variant NAME:KEY=VALUE,...: one more AutoBatchLength in the --batch
// sweep, with some of its settings (AutoBatchOptions) changed, stepping in
// turn with the others. An A/B of a setting or a guard is then measured side
// by side in one process, as the other variants are (docs/design/batch-policy.md
// lists the settings; e.g. draft_margin=1 removes the draft margin).
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/batch_options.hpp"

#include "../tools/flag_table.hpp"

namespace specdec::bench {

struct AutoVariant {
    std::string name;
    AutoBatchOptions options;
};

// A variant flag's text, "NAME:KEY=VALUE,KEY=VALUE", split (shared with
// --tree-auto-variant, tree_auto_variants.hpp).
struct VariantText {
    std::string name;
    std::vector<std::pair<std::string_view, std::string_view>> settings;  // key, value
};
[[nodiscard]] inline VariantText split_variant(std::string_view flag, std::string_view text) {
    const std::size_t colon = text.find(':');
    if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size())
        throw cli::UsageError(std::string(flag) + ": expected NAME:KEY=VALUE[,KEY=VALUE...], got '" + std::string(text) + "'");
    VariantText split{std::string(text.substr(0, colon)), {}};
    for (const std::string_view item : cli::split_list(flag, text.substr(colon + 1))) {
        const std::size_t equals = item.find('=');
        if (equals == std::string_view::npos || equals == 0)
            throw cli::UsageError(std::string(flag) + ": expected KEY=VALUE, got '" + std::string(item) + "'");
        split.settings.emplace_back(item.substr(0, equals), item.substr(equals + 1));
    }
    return split;
}

// Appends a parsed variant to a flag's list; two of one name are an error.
template <class Variant>
void add_variant(std::string_view flag, std::vector<Variant>& variants, Variant variant) {
    for (const Variant& other : variants)
        if (other.name == variant.name) throw cli::UsageError(std::string(flag) + ": two variants named '" + variant.name + "'");
    variants.push_back(std::move(variant));
}

namespace detail {

struct AutoSetting {
    std::string_view key;
    std::variant<std::size_t AutoBatchOptions::*, double AutoBatchOptions::*> field;
};

// Every numeric setting, by its name in AutoBatchOptions.
inline constexpr AutoSetting kAutoSettings[] = {
    {"warmup_steps", &AutoBatchOptions::warmup_steps},
    {"warmup_length", &AutoBatchOptions::warmup_length},
    {"warmup_rows", &AutoBatchOptions::warmup_rows},
    {"explore_every", &AutoBatchOptions::explore_every},
    {"max_plain_probe_every", &AutoBatchOptions::max_plain_probe_every},
    {"clear_margin", &AutoBatchOptions::clear_margin},
    {"draft_margin", &AutoBatchOptions::draft_margin},
    {"widen_every", &AutoBatchOptions::widen_every},
    {"decay", &AutoBatchOptions::decay},
    {"prior_strength", &AutoBatchOptions::prior_strength},
    {"rate_window", &AutoBatchOptions::rate_window},
    {"emitted_horizon", &AutoBatchOptions::emitted_horizon},
    {"plain_horizon_explorations", &AutoBatchOptions::plain_horizon_explorations},
    {"min_planned_samples", &AutoBatchOptions::min_planned_samples},
    {"min_plain_samples", &AutoBatchOptions::min_plain_samples},
    {"fallback_plain_samples", &AutoBatchOptions::fallback_plain_samples},
    {"clear_plain_samples", &AutoBatchOptions::clear_plain_samples},
    {"widen_min_span", &AutoBatchOptions::widen_min_span},
    {"widen_reach", &AutoBatchOptions::widen_reach},
    {"widen_flatness", &AutoBatchOptions::widen_flatness},
    {"widen_factor", &AutoBatchOptions::widen_factor},
    {"max_look_drafts", &AutoBatchOptions::max_look_drafts},
    {"equal_look_every", &AutoBatchOptions::equal_look_every},
    {"untimed_seconds", &AutoBatchOptions::untimed_seconds},
    {"unmeasured_acceptance", &AutoBatchOptions::unmeasured_acceptance},
    {"spread_retired", &AutoBatchOptions::spread_retired},
    {"spread_min_requests", &AutoBatchOptions::spread_min_requests},
    {"spread_min_drafts", &AutoBatchOptions::spread_min_drafts},
    {"spread_fewest", &AutoBatchOptions::spread_fewest},
    {"spread_most", &AutoBatchOptions::spread_most},
};

inline std::string auto_setting_names() {
    std::string names;
    for (const AutoSetting& s : kAutoSettings) names += (names.empty() ? "" : ", ") + std::string(s.key);
    return names + ", request_prior_strength, equal_lengths";
}

inline void set_auto_setting(std::string_view flag, AutoBatchOptions& options, std::string_view key, std::string_view value) {
    if (key == "equal_lengths") {
        if (value != "0" && value != "1")
            throw cli::UsageError(std::string(flag) + ": equal_lengths=" + std::string(value) + ": expected 0 or 1");
        options.equal_lengths = value == "1";
        return;
    }
    if (key == "request_prior_strength") {
        options.request_prior_strength = cli::parse_non_negative(flag, value, "pseudo-samples");
        return;
    }
    for (const AutoSetting& s : kAutoSettings) {
        if (s.key != key) continue;
        if (const auto* count = std::get_if<std::size_t AutoBatchOptions::*>(&s.field))
            options.**count = static_cast<std::size_t>(cli::parse_count(flag, value));
        else
            options.*std::get<double AutoBatchOptions::*>(s.field) = cli::parse_non_negative(flag, value, key);
        return;
    }
    throw cli::UsageError(std::string(flag) + ": unknown AutoBatchLength setting '" + std::string(key) +
                     "', expected one of " + auto_setting_names());
}

}  // namespace detail

// "NAME:KEY=VALUE,KEY=VALUE": the default settings with those changed.
[[nodiscard]] inline AutoVariant parse_auto_variant(std::string_view flag, std::string_view text) {
    VariantText split = split_variant(flag, text);
    AutoVariant variant{std::move(split.name), {}};
    for (const auto& [key, value] : split.settings) detail::set_auto_setting(flag, variant.options, key, value);
    try {
        variant.options.check();
    } catch (const Error& e) {
        throw cli::UsageError(std::string(flag) + ": " + e.what());
    }
    return variant;
}

}  // namespace specdec::bench
