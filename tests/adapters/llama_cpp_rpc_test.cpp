// The target served by llama.cpp's RPC backend, the draft local: llama.cpp's
// ggml-rpc-server runs as a child process on 127.0.0.1 (a free port), the
// target's layers are offloaded to it through LlamaCppOptions::rpc_servers,
// and greedy speculative decoding must emit exactly what the local target
// emits alone. The server is stopped at the end of the test, also when it
// fails (RpcServer in llama_cpp_test_support.hpp).
#include <filesystem>
#include <string>
#include <vector>

#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/skip.hpp"

// llama.cpp's RPC backend keeps the devices and buffer types of every server
// it was given for the life of the process (a registry that is never freed,
// by design); LeakSanitizer, in the sanitized test builds, would report them
// at exit as leaks of this program.
#if defined(__SANITIZE_ADDRESS__)
#define SPECDEC_LLAMA_CPP_TESTS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPECDEC_LLAMA_CPP_TESTS_ASAN 1
#endif
#endif
#ifdef SPECDEC_LLAMA_CPP_TESTS_ASAN
extern "C" const char* __lsan_default_suppressions() { return "leak:libggml-rpc.so\n"; }
#endif

namespace llama_cpp_rpc {

using specdec::DecodingOptions;
using specdec::LlamaCppModel;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

}  // namespace llama_cpp_rpc

using namespace llama_cpp_rpc;

TEST_CASE("llama.cpp adapter: a target on an RPC server with a local draft decodes as the local target",
          "[llama_cpp][rpc]") {
    const std::string binary = SPECDEC_LLAMA_RPC_SERVER;
    if (binary.empty() || !std::filesystem::exists(binary)) {
        SPECDEC_SKIP("llama.cpp's ggml-rpc-server was not found next to the llama.cpp package at configure time");
    }
    const support::TempFolder folder("rpc");
    const support::ExportedPair files = support::export_synthetic_pair(folder.path());

    LlamaCppModel local = LlamaCppModel::from_gguf(files.target.string(), support::small_options());
    const std::vector<Token> prompt = local.tokenize("once upon a time the model", local.add_bos());
    const DecodingOptions options{.draft_tokens = 4, .sampling = {.temperature = 0.0}, .seed = 1, .max_new_tokens = 32,
                                  .stop_tokens = local.stop_tokens()};
    specdec::AutoregressiveDecoder<LlamaCppModel> plain(local, options);
    const std::vector<Token> expected = plain.generate(prompt).tokens;
    REQUIRE(expected.size() >= 8);

    support::RpcServer server(binary);
    specdec::LlamaCppOptions remote_options = support::small_options();
    remote_options.rpc_servers = {server.endpoint()};
    LlamaCppModel remote = LlamaCppModel::from_gguf(files.target.string(), remote_options);
    LlamaCppModel draft = LlamaCppModel::from_gguf(files.draft.string(), support::small_options());
    specdec::check_same_vocabulary(remote, draft);

    specdec::SpeculativeDecoder<LlamaCppModel, LlamaCppModel> decoder(specdec::target(remote), specdec::draft(draft),
                                                                      options);
    const specdec::GenerationResult result = decoder.generate(prompt);
    CHECK(result.tokens == expected);
    CHECK(result.stats.draft_tokens_accepted > 0);
    CHECK(result.stats.target_forward_passes < expected.size());  // several tokens per remote pass

    // An endpoint where nothing listens is an error naming it (llama.cpp's
    // RPC client would abort the process; the adapter checks first).
    specdec::LlamaCppOptions nowhere = support::small_options();
    nowhere.rpc_servers = {"127.0.0.1:" + std::to_string(support::free_loopback_port())};
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(files.target.string(), nowhere),
                      Catch::Matchers::Contains(nowhere.rpc_servers[0]) && Catch::Matchers::Contains("cannot connect"));
}
