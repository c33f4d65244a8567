// A borrowed context whose sliding-window cache is not full size
// (swa_full off) forgets positions outside the window; a rollback that needs
// one of them is refused, and the same rollback on a full-size cache (what
// from_gguf always creates) goes through. The model is a tiny llama.cpp
// "granite_swa" (one sliding-window layer of 16 positions, one dense layer)
// written by the test.
#include <cmath>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <llama.h>

#include "../../benchmarks/gguf_export.hpp"
#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "support/catch.hpp"

namespace llama_cpp_sliding_window {

using Catch::Contains;
using specdec::LlamaCppModel;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

constexpr std::uint32_t kSlidingWindow = 16;

void write_tiny_sliding_window_gguf(const std::filesystem::path& path) {
    const std::string arch = "granite_swa";
    const std::size_t embd = 32, heads = 4, kv_heads = 2, head_dim = embd / heads, ff = 64, layers = 2, vocab = 320;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::deque<std::vector<float>> values;  // the writer keeps spans into these until write()
    specdec::gguf::Writer writer;
    writer.add_string("general.architecture", arch).add_string("general.name", "tiny-" + arch);
    writer.add_uint32(arch + ".context_length", 2048);
    writer.add_uint32(arch + ".embedding_length", embd);
    writer.add_uint32(arch + ".block_count", layers);
    writer.add_uint32(arch + ".feed_forward_length", ff);
    writer.add_uint32(arch + ".attention.head_count", heads);
    writer.add_uint32(arch + ".attention.head_count_kv", kv_heads);
    writer.add_uint32(arch + ".vocab_size", vocab);
    writer.add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    writer.add_float32(arch + ".rope.freq_base", 10000.0f);
    writer.add_float32(arch + ".logit_scale", 1.0f);
    writer.add_uint32(arch + ".attention.sliding_window", kSlidingWindow);
    const std::vector<std::int32_t> pattern{1, 0};  // layer 0 slides, layer 1 sees everything
    writer.add_int32_array(arch + ".attention.sliding_window_pattern", pattern);
    specdec::bench::add_synthetic_vocabulary(writer, vocab);

    const auto tensor = [&](const std::string& name, std::vector<std::uint64_t> shape, std::vector<float> v) {
        values.push_back(std::move(v));
        writer.add_tensor_f32(name, std::move(shape), values.back());
    };
    const auto random = [&](const std::string& name, std::size_t cols, std::size_t rows, float scale) {
        std::vector<float> v(cols * rows);
        for (float& x : v) x = scale * normal(rng);
        tensor(name, {cols, rows}, std::move(v));
    };
    const auto ones = [&](const std::string& name, std::size_t n) { tensor(name, {n}, std::vector<float>(n, 1.0f)); };
    const auto over_sqrt = [](std::size_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    random("token_embd.weight", embd, vocab, 1.0f);
    for (std::size_t i = 0; i < layers; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        ones(p + "attn_norm.weight", embd);
        random(p + "attn_q.weight", embd, embd, over_sqrt(embd));
        random(p + "attn_k.weight", embd, kv_heads * head_dim, over_sqrt(embd));
        random(p + "attn_v.weight", embd, kv_heads * head_dim, over_sqrt(embd));
        random(p + "attn_output.weight", embd, embd, over_sqrt(embd));
        tensor(p + "attn_sinks.weight", {heads}, std::vector<float>(heads, 0.0f));
        ones(p + "ffn_norm.weight", embd);
        random(p + "ffn_gate.weight", embd, ff, over_sqrt(embd));
        random(p + "ffn_up.weight", embd, ff, over_sqrt(embd));
        random(p + "ffn_down.weight", ff, embd, over_sqrt(ff));
    }
    ones("output_norm.weight", embd);
    random("output.weight", embd, vocab, 2.0f * over_sqrt(embd));
    writer.write(path);
}

}  // namespace llama_cpp_sliding_window

using namespace llama_cpp_sliding_window;

TEST_CASE("llama.cpp adapter: a rollback past what a borrowed sliding-window cache kept is refused",
          "[llama_cpp][borrow][sliding_window]") {
    const support::TempFolder folder("sliding-window");
    const std::filesystem::path file = folder.path() / "tiny-granite-swa.gguf";
    write_tiny_sliding_window_gguf(file);
    specdec::llama_cpp::ensure_backend();
    llama_model_params model_params = llama_model_default_params();
    ggml_backend_dev_t no_devices[] = {nullptr};
    model_params.devices = no_devices;
    std::unique_ptr<llama_model, decltype(&llama_model_free)> model(llama_model_load_from_file(file.c_str(), model_params),
                                                                    &llama_model_free);
    REQUIRE(model != nullptr);
    REQUIRE(llama_model_n_swa(model.get()) == static_cast<std::int32_t>(kSlidingWindow));

    // 700 tokens, then back to 100: the sliding-window cache of a context
    // without swa_full holds a few hundred cells (llama.cpp pads it to 256),
    // so positions before ~440 are gone by then.
    std::vector<Token> text(700);
    for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<Token>(3 + (i * 37) % 300);
    for (const bool swa_full : {false, true}) {
        INFO("swa_full = " << swa_full);
        llama_context_params params = llama_context_default_params();
        params.n_ctx = 1024;
        params.n_batch = params.n_ubatch = 64;
        params.n_threads = params.n_threads_batch = 1;
        params.swa_full = swa_full;
        std::unique_ptr<llama_context, decltype(&llama_free)> context(llama_init_from_model(model.get(), params), &llama_free);
        REQUIRE(context != nullptr);
        LlamaCppModel adapter = LlamaCppModel::borrow(model.get(), context.get());
        (void)adapter.forward_last(text);
        // A short rollback stays inside what the window kept.
        adapter.truncate(text.size() - 4);
        (void)adapter.forward_last(std::span<const Token>(text).subspan(text.size() - 4));
        const llama_pos first = llama_memory_seq_pos_min(llama_get_memory(context.get()), 0);
        if (swa_full) {
            CHECK(first == 0);
            adapter.truncate(100);
            CHECK(adapter.cached_tokens() == 100);
            CHECK(adapter.forward_last(std::span<const Token>(text).subspan(100, 1)).rows == 1);
        } else {
            // Back to a position the cache still holds (its last position
            // checks out) whose window reaches before the first one it kept.
            REQUIRE(first > static_cast<llama_pos>(kSlidingWindow));
            const std::size_t back = static_cast<std::size_t>(first) + kSlidingWindow / 2;
            CHECK_THROWS_WITH(adapter.truncate(back), Contains("sliding-window cache dropped") && Contains("swa_full = true"));
            CHECK_THROWS_WITH(adapter.forward_last(text), Contains("unusable"));
            // A rollback past everything the window kept is refused the same way.
            std::unique_ptr<llama_context, decltype(&llama_free)> other(llama_init_from_model(model.get(), params), &llama_free);
            REQUIRE(other != nullptr);
            LlamaCppModel deep = LlamaCppModel::borrow(model.get(), other.get());
            (void)deep.forward_last(text);
            CHECK_THROWS_WITH(deep.truncate(100), Contains("sliding-window cache dropped"));
        }
    }
}
