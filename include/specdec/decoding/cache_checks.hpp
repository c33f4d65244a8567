#pragma once
// What the decoders check after every call that changes a model's KV cache:
// truncate(n) must leave exactly n positions, a pass over t tokens must add
// exactly t. A user's adapter that gets this wrong (a truncate that does
// nothing, or rolls back too far) would otherwise go unnoticed: the next
// pass appends at the wrong positions and the output is silently wrong, at
// temperature 0 as well as above. Every rollback of the decoders goes
// through truncate_checked, and the errors name the model: its name() when
// it has one, else its role ("target", "draft") and its type, and the
// sequence slot of a multi-sequence model (SlotModel adds it).
#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <typeinfo>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#endif

#include "specdec/core/error.hpp"
#include "specdec/core/model_contract.hpp"

namespace specdec {

// Optional: a model that names itself (a file name, an engine and its
// model) is named so in the decoders' errors.
template <class Model>
concept NamedModel = requires(const Model& model) {
    { model.name() } -> std::convertible_to<std::string_view>;
};

namespace detail {

// The C++ name of T, demangled where the ABI offers it.
template <class T>
[[nodiscard]] std::string type_name() {
    const char* mangled = typeid(T).name();
#if __has_include(<cxxabi.h>)
    int status = 0;
    const std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                           std::free);
    if (status == 0 && demangled) return demangled.get();
#endif
    return mangled;
}

// "target model \"<name>\"" or "draft model (type <T>)". Found by argument-
// dependent lookup, so that a wrapper (SlotModel) can add what it knows.
template <class Model>
[[nodiscard]] std::string model_label(const Model& model, std::string_view role) {
    std::string label(role);
    label += " model ";
    if constexpr (NamedModel<Model>) {
        label += '"';
        label += std::string_view(model.name());
        label += '"';
    } else {
        (void)model;
        label += "(type " + type_name<Model>() + ")";
    }
    return label;
}

// model.truncate(n), then the check that the cache holds exactly n positions.
template <CausalLM Model>
void truncate_checked(Model& model, std::size_t n, std::string_view role) {
    model.truncate(n);
    const std::size_t held = model.cached_tokens();
    if (held != n) {
        std::ostringstream message;
        message << model_label(model, role) << ": truncate(" << n << ") left " << held
                << " positions in its cache, expected " << n << " ("
                << (held > n ? "the cache was not rolled back" : "the cache was rolled back too far")
                << "); a CausalLM's truncate(n) must keep exactly its first n positions";
        throw Error(message.str());
    }
}

// After a call that appends `fed` tokens to a cache of `before` positions.
template <CausalLM Model>
void check_cache_grew(const Model& model, std::size_t before, std::size_t fed, std::string_view role,
                      std::string_view call) {
    const std::size_t held = model.cached_tokens();
    if (held != before + fed) {
        std::ostringstream message;
        message << model_label(model, role) << ": " << call << " of " << fed << " tokens on a cache of " << before
                << " positions left " << held << ", expected " << before + fed
                << "; each token fed must add exactly one position";
        throw Error(message.str());
    }
}

// The one check of a pass's logits rows, before any row is read: `rows`
// rows (a pass that returned fewer would hand its callers memory the model
// never wrote), each of `vocab` values (0: any width above zero), with data
// and a row stride of at least the width. `source` says who returned them
// ("model forward", "verify_tree: the caller"), `fed` what they were for ("3
// tokens"), `expected` how many rows that calls for ("one row per token").
inline void check_logits_shape(const LogitsView& logits, std::size_t rows, std::size_t vocab, std::string_view source,
                               std::string_view fed, std::string_view expected) {
    if (logits.rows != rows) {
        std::ostringstream message;
        message << source << " returned " << logits.rows << " logits rows for " << fed << ": expected " << expected;
        throw Error(message.str());
    }
    if (logits.rows == 0) return;
    const bool width_ok = vocab == 0 ? logits.vocab > 0 : logits.vocab == vocab;
    if (!width_ok || logits.data == nullptr || (logits.rows > 1 && logits.row_stride < logits.vocab)) {
        std::ostringstream message;
        message << source << " returned logits rows of " << logits.vocab << " values (row stride " << logits.row_stride
                << (logits.data == nullptr ? ", no data" : "") << ") for " << fed << ": expected ";
        if (vocab == 0) {
            message << "rows of at least one value";
        } else {
            message << "vocab_size() = " << vocab << " values per row";
        }
        throw Error(message.str());
    }
}

}  // namespace detail
}  // namespace specdec
