#pragma once
// --tree-auto-variant NAME:KEY=VALUE,...: one more AutoTree row ("auto:NAME")
// among the --tree rows, with some of its settings (AutoTree::Options)
// changed: an A/B of a setting of the tree policy on the same prompts and
// seeds as the default auto row (docs/trees.md lists what was measured).
#include <cstddef>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoding/tree_policy.hpp"

#include "../tools/flag_table.hpp"
#include "auto_variants.hpp"

namespace specdec::bench {

struct TreeAutoVariant {
    std::string name;
    AutoTree::Options options;
    bool max_nodes_given = false;  // else the run's --tree-max-nodes
};

// A --tree row's label: "auto", "auto:NAME" (a variant) or a fixed shape.
[[nodiscard]] inline bool is_auto_tree(std::string_view label) { return label == "auto" || label.starts_with("auto:"); }

namespace detail {

struct TreeAutoSetting {
    std::string_view key;
    std::variant<std::size_t AutoTree::Options::*, double AutoTree::Options::*> field;
};

// Every numeric setting, by its name in AutoTree::Options.
inline constexpr TreeAutoSetting kTreeAutoSettings[] = {
    {"max_nodes", &AutoTree::Options::max_nodes},
    {"max_depth", &AutoTree::Options::max_depth},
    {"warmup_steps", &AutoTree::Options::warmup_steps},
    {"explore_every", &AutoTree::Options::explore_every},
    {"deeper_chain_every", &AutoTree::Options::deeper_chain_every},
    {"max_rival_every", &AutoTree::Options::max_rival_every},
    {"decay", &AutoTree::Options::decay},
    {"prior_strength", &AutoTree::Options::prior_strength},
    {"realised_decay", &AutoTree::Options::realised_decay},
};

inline std::string tree_auto_setting_names() {
    std::string names;
    for (const TreeAutoSetting& s : kTreeAutoSettings) names += (names.empty() ? "" : ", ") + std::string(s.key);
    return names;
}

}  // namespace detail

// "NAME:KEY=VALUE,KEY=VALUE": AutoTree's default settings with those changed.
[[nodiscard]] inline TreeAutoVariant parse_tree_auto_variant(std::string_view flag, std::string_view text) {
    VariantText split = split_variant(flag, text);
    TreeAutoVariant variant{std::move(split.name), {}};
    for (const auto& [key, value] : split.settings) {
        bool known = false;
        for (const detail::TreeAutoSetting& s : detail::kTreeAutoSettings) {
            if (s.key != key) continue;
            known = true;
            if (const auto* count = std::get_if<std::size_t AutoTree::Options::*>(&s.field))
                variant.options.**count = static_cast<std::size_t>(cli::parse_count(flag, value));
            else
                variant.options.*std::get<double AutoTree::Options::*>(s.field) = cli::parse_non_negative(flag, value, key);
        }
        if (!known)
            throw cli::UsageError(std::string(flag) + ": unknown AutoTree setting '" + std::string(key) +
                                  "', expected one of " + detail::tree_auto_setting_names());
        if (key == "max_nodes") variant.max_nodes_given = true;
    }
    try {
        (void)AutoTree(variant.options);  // its own checks, as a user's options get them
    } catch (const Error& e) {
        throw cli::UsageError(std::string(flag) + ": " + e.what());
    }
    return variant;
}

}  // namespace specdec::bench
