#pragma once
// --engine of specdec-generate and specdec-bench: which implementation runs
// the models' forward passes. The decoding around them (drafting, acceptance,
// the random stream) is specdec's either way; only the engine differs.
//
//   specdec    the library's own CPU models (the default)
//   llama.cpp  llama.cpp through specdec/adapters/llama_cpp.hpp: every model
//              and quantisation llama.cpp loads
//
// The flag is parsed the same in every build, so that a command line means the
// same everywhere; a build without llama.cpp refuses --engine llama.cpp when it
// runs, saying how to get one (llama_cpp_missing).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flag_table.hpp"

namespace specdec::cli {

enum class Engine { specdec, llama_cpp };

[[nodiscard]] inline std::string_view to_string(Engine engine) {
    return engine == Engine::specdec ? "specdec" : "llama.cpp";
}

[[nodiscard]] inline Engine parse_engine(std::string_view flag, std::string_view name) {
    if (name == "specdec") return Engine::specdec;
    if (name == "llama.cpp") return Engine::llama_cpp;
    throw UsageError(std::string(flag) + ": '" + std::string(name) + "' is not an engine, expected specdec or llama.cpp");
}

// -ngl N|all: llama.cpp's layers on its devices (-1 = all, as LlamaCppOptions::gpu_layers).
[[nodiscard]] inline int parse_gpu_layers(std::string_view flag, std::string_view text) {
    if (text == "all") return -1;
    const std::uint64_t layers = parse_count(flag, text);
    if (layers > INT_MAX) throw UsageError(std::string(flag) + ": " + std::string(text) + " layers is more than any model has");
    return static_cast<int>(layers);
}

// --rpc HOST:PORT,...: the ggml-rpc-server processes (LlamaCppOptions::rpc_servers).
[[nodiscard]] inline std::vector<std::string> parse_rpc_servers(std::string_view flag, std::string_view text) {
    std::vector<std::string> servers;
    for (std::size_t begin = 0; begin <= text.size();) {
        const std::size_t comma = std::min(text.find(',', begin), text.size());
        const std::string_view server = text.substr(begin, comma - begin);
        if (server.find(':') == std::string_view::npos)
            throw UsageError(std::string(flag) + ": '" + std::string(server) + "' is not HOST:PORT");
        servers.emplace_back(server);
        begin = comma + 1;
    }
    return servers;
}

// Whether this program was compiled with the llama.cpp adapter (CMake found
// llama.cpp and defined SPECDEC_WITH_LLAMA_CPP).
inline constexpr bool kBuiltWithLlamaCpp =
#ifdef SPECDEC_WITH_LLAMA_CPP
    true;
#else
    false;
#endif

// The refusal of --engine llama.cpp in a build without it: what to do instead.
[[nodiscard]] inline UsageError llama_cpp_missing(std::string_view program) {
    return UsageError("--engine llama.cpp: this " + std::string(program) +
                      " was built without llama.cpp; build llama.cpp with scripts/build-llama-cpp.sh [PREFIX] "
                      "(default build-llama/prefix), then configure specdec with -DCMAKE_PREFIX_PATH=PREFIX "
                      "(CMake finds it with find_package(llama)) and rebuild " + std::string(program));
}

}  // namespace specdec::cli
