// The llama.cpp adapter as a drop-in for a program that already owns its
// llama.cpp objects: LlamaCppModel::borrow over the caller's model and
// context (greedy decoding equal to from_gguf's, the caller's objects used
// after the adapter is gone, bad input refused), llama.cpp's parameters
// passed through by from_gguf, tokenize's parse_special, and the names kept
// for one release (load, LlamaCppOptions::context).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <llama.h>

#include "adapters/llama_cpp_test_support.hpp"
#include "specdec/decoding/autoregressive_decoder.hpp"
#include "specdec/decoding/speculative_decoder.hpp"
#include "support/catch.hpp"
#include "support/fixtures.hpp"
#include "support/skip.hpp"

namespace llama_cpp_borrow {

using Catch::Contains;
using specdec::DecodingOptions;
using specdec::LlamaCppBorrowOptions;
using specdec::LlamaCppModel;
using specdec::Token;
namespace support = specdec::test::llama_cpp;

// A program's own llama.cpp objects, created and freed with llama.h alone.
struct CallerObjects {
    std::unique_ptr<llama_model, decltype(&llama_model_free)> model{nullptr, &llama_model_free};
    std::unique_ptr<llama_context, decltype(&llama_free)> context{nullptr, &llama_free};
};

llama_model* load_on_cpu(const std::filesystem::path& gguf) {
    specdec::llama_cpp::ensure_backend();
    llama_model_params params = llama_model_default_params();
    static ggml_backend_dev_t no_devices[] = {nullptr};
    params.devices = no_devices;
    params.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(gguf.c_str(), params);
    REQUIRE(model != nullptr);
    return model;
}

llama_context* new_context(llama_model* model, std::uint32_t sequences = 1, std::uint32_t n_ctx = 256,
                           bool unified = false) {
    llama_context_params params = llama_context_default_params();
    params.n_ctx = n_ctx * (unified ? 1 : sequences);
    params.n_batch = 64;
    params.n_seq_max = sequences;
    params.n_threads = params.n_threads_batch = 1;
    params.kv_unified = unified;
    llama_context* context = llama_init_from_model(model, params);
    REQUIRE(context != nullptr);
    return context;
}

CallerObjects caller_objects(const std::filesystem::path& gguf, std::uint32_t sequences = 1) {
    CallerObjects objects;
    objects.model.reset(load_on_cpu(gguf));
    objects.context.reset(new_context(objects.model.get(), sequences));
    return objects;
}

DecodingOptions greedy(const LlamaCppModel& target, std::size_t k) {
    return {.draft_tokens = k, .sampling = {.temperature = 0.0}, .seed = 1, .max_new_tokens = 40,
            .stop_tokens = target.stop_tokens()};
}

std::vector<Token> autoregressive(LlamaCppModel& target, const std::vector<Token>& prompt) {
    specdec::AutoregressiveDecoder<LlamaCppModel> decoder(target, greedy(target, 1));
    return decoder.generate(prompt).tokens;
}

std::vector<Token> speculative(LlamaCppModel& target, LlamaCppModel& draft, const std::vector<Token>& prompt) {
    specdec::SpeculativeDecoder<LlamaCppModel, LlamaCppModel> decoder(specdec::target(target), specdec::draft(draft), greedy(target, 4));
    return decoder.generate(prompt).tokens;
}

}  // namespace llama_cpp_borrow

using namespace llama_cpp_borrow;

TEST_CASE("llama.cpp adapter: a borrowed model and context decode greedily as from_gguf", "[llama_cpp][borrow]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(draft_file, "stories260K-q8_0.gguf");
    LlamaCppModel loaded = LlamaCppModel::from_gguf(target_file.string(), support::small_options());
    LlamaCppModel loaded_draft = LlamaCppModel::from_gguf(draft_file.string(), support::small_options());
    const std::vector<Token> prompt = loaded.tokenize("Once upon a time", loaded.add_bos());
    const std::vector<Token> expected = autoregressive(loaded, prompt);
    REQUIRE(expected.size() >= 20);
    CHECK(speculative(loaded, loaded_draft, prompt) == expected);

    CallerObjects target_objects = caller_objects(target_file);
    CallerObjects draft_objects = caller_objects(draft_file);
    {
        LlamaCppModel target = LlamaCppModel::borrow(target_objects.model.get(), target_objects.context.get());
        LlamaCppModel draft = LlamaCppModel::borrow(draft_objects.model.get(), draft_objects.context.get());
        CHECK(target.borrowed());
        CHECK_FALSE(loaded.borrowed());
        CHECK(target.context() == target_objects.context.get());
        CHECK(target.context_length() == 256);
        CHECK(target.batch_capacity() == 64);
        specdec::check_same_vocabulary(target, draft);
        CHECK(target.tokenize("Once upon a time", target.add_bos()) == prompt);
        CHECK(autoregressive(target, prompt) == expected);
        target.truncate(0);
        CHECK(speculative(target, draft, prompt) == expected);
        // Moving keeps one owner of nothing: the objects stay the caller's.
        LlamaCppModel moved = std::move(target);
        target = std::move(moved);
        target.truncate(0);
        draft.truncate(0);
    }
    // The adapter is gone and freed nothing: the caller's context still
    // decodes, the prompt's last row as llama.cpp's plain loop expects.
    llama_context* context = target_objects.context.get();
    CHECK(llama_memory_seq_pos_max(llama_get_memory(context), 0) == -1);
    std::vector<Token> feed = prompt;
    REQUIRE(llama_decode(context, llama_batch_get_one(feed.data(), static_cast<std::int32_t>(feed.size()))) == 0);
    const float* row = llama_get_logits_ith(context, -1);
    REQUIRE(row != nullptr);
    const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(target_objects.model.get()));
    CHECK(static_cast<Token>(std::max_element(row, row + vocab) - row) == expected.front());
    // The caller frees its objects itself (CallerObjects), once: an ASan
    // build of this test reports a double free or a use after free.
}

TEST_CASE("llama.cpp adapter: a borrowed context serves several slots and a new_context over borrowed weights",
          "[llama_cpp][borrow]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
    CallerObjects objects = caller_objects(target_file, 3);
    LlamaCppModel model =
        LlamaCppModel::borrow(objects.model.get(), objects.context.get(), LlamaCppBorrowOptions{.sequences = 3, .max_context = 100});
    CHECK(model.sequence_slots() == 3);
    CHECK(model.context_length() == 100);
    LlamaCppModel single = LlamaCppModel::from_gguf(target_file.string(), support::small_options(1, 100));
    const std::vector<Token> prompt = single.tokenize("Lily saw a", single.add_bos());
    const std::span<const float> last_row = single.forward(prompt).last_row();
    const std::vector<float> last(last_row.begin(), last_row.end());
    const specdec::SequenceFeed feed{.slot = 2, .tokens = prompt, .last_row_only = true};
    const specdec::LogitsView rows = model.forward_batch({&feed, 1});
    REQUIRE(rows.rows == 1);
    float difference = 0.0f;
    for (std::size_t v = 0; v < last.size(); ++v) difference = std::max(difference, std::abs(rows.row(0)[v] - last[v]));
    CHECK(difference < 1e-4f);
    CHECK(model.cached_tokens(2) == prompt.size());
    CHECK(model.cached_tokens(0) == 0);

    // A context of the adapter's own over the caller's weights: freed by the
    // adapter, the weights left to the caller.
    LlamaCppModel own = model.new_context(support::small_options(1, 64));
    CHECK_FALSE(own.borrowed());
    CHECK(own.model() == objects.model.get());
    CHECK(own.forward(prompt).rows == prompt.size());
}

TEST_CASE("llama.cpp adapter: borrow refuses what it cannot use", "[llama_cpp][borrow][refusal]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
    SPECDEC_REQUIRE_FIXTURE(draft_file, "stories260K-q8_0.gguf");
    CallerObjects objects = caller_objects(target_file);
    CallerObjects other = caller_objects(draft_file);
    CHECK_THROWS_WITH(LlamaCppModel::borrow(nullptr, objects.context.get()), Contains("model is null"));
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), nullptr), Contains("context is null"));
    CHECK_THROWS_WITH(LlamaCppModel::borrow(nullptr, nullptr), Contains("model and context are null"));
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), other.context.get()), Contains("not one of this model"));
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), objects.context.get(), {.sequences = 0}),
                      Contains("sequences is 0"));
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), objects.context.get(), {.sequences = 2}),
                      Contains("holds 1 sequences (n_seq_max)") && Contains("n_seq_max >= 2"));
    // A tree needs a sequence per extra leaf and one cache for all of them.
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), objects.context.get(), {.tree_leaves = 3}),
                      Contains("n_seq_max >= 3"));
    {
        std::unique_ptr<llama_context, decltype(&llama_free)> streams(new_context(objects.model.get(), 3), &llama_free);
        CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), streams.get(), {.tree_leaves = 3}),
                          Contains("kv_unified = true"));
        std::unique_ptr<llama_context, decltype(&llama_free)> unified(new_context(objects.model.get(), 3, 64, true),
                                                                      &llama_free);
        CHECK(LlamaCppModel::borrow(objects.model.get(), unified.get(), {.tree_leaves = 3}).tree_leaves() == 3);
    }
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), objects.context.get(), {.max_context = 257}),
                      Contains("do not fit"));
    // A context that already holds tokens: the adapter would not know them.
    std::vector<Token> two{1, 2};
    REQUIRE(llama_decode(objects.context.get(), llama_batch_get_one(two.data(), 2)) == 0);
    CHECK_THROWS_WITH(LlamaCppModel::borrow(objects.model.get(), objects.context.get()),
                      Contains("already holds positions of sequence 0"));
    // Refusals leave the caller's objects alone: cleared, it is accepted.
    llama_memory_clear(llama_get_memory(objects.context.get()), true);
    CHECK(LlamaCppModel::borrow(objects.model.get(), objects.context.get()).context_length() == 256);
}

TEST_CASE("llama.cpp adapter: from_gguf passes llama.cpp's parameters through", "[llama_cpp][params]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
    // A model parameter: the progress callback runs while loading.
    int progress_calls = 0;
    specdec::LlamaCppParams params;
    params.model.progress_callback = [](float, void* calls) {
        ++*static_cast<int*>(calls);
        return true;
    };
    params.model.progress_callback_user_data = &progress_calls;
    // A context parameter: the abort callback stops llama_decode once armed.
    std::atomic<bool> abort{false};
    params.context.abort_callback = [](void* flag) { return static_cast<std::atomic<bool>*>(flag)->load(); };
    params.context.abort_callback_data = &abort;
    params.context.type_k = GGML_TYPE_F16;
    params.context.type_v = GGML_TYPE_F16;
    LlamaCppModel model = LlamaCppModel::from_gguf(target_file.string(), support::small_options(), params);
    CHECK(progress_calls > 0);
    const std::vector<Token> prompt = model.tokenize("Once upon a time", model.add_bos());
    CHECK(model.forward(prompt).rows == prompt.size());
    abort = true;
    CHECK_THROWS_WITH(model.forward(prompt), Contains("aborted"));
    CHECK(model.cached_tokens() == prompt.size());
    abort = false;
    // new_context takes them too; the ones specdec sets are refused by name.
    CHECK(model.new_context(support::small_options(), params).forward(prompt).rows == prompt.size());
    specdec::LlamaCppParams owned;
    owned.context.n_ctx = 1024;
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(target_file.string(), support::small_options(), owned),
                      Contains("LlamaCppParams::context.n_ctx") && Contains("max_context"));
    owned = {};
    owned.model.n_gpu_layers = 5;
    CHECK_THROWS_WITH(model.new_context(support::small_options(), owned), Contains("LlamaCppOptions::gpu_layers"));
    owned = {};
    owned.context.swa_full = false;
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(target_file.string(), support::small_options(), owned),
                      Contains("context.swa_full"));
}

TEST_CASE("llama.cpp adapter: tokenize parses special tokens only when asked", "[llama_cpp][tokenize]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
    LlamaCppModel model = LlamaCppModel::from_gguf(target_file.string(), support::small_options());
    const Token bos = model.bos_token().value();
    const std::vector<Token> parsed = model.tokenize("<s>Once", false, true);
    REQUIRE_FALSE(parsed.empty());
    CHECK(parsed.front() == bos);
    const std::vector<Token> plain = model.tokenize("<s>Once", false);
    CHECK(std::find(plain.begin(), plain.end(), bos) == plain.end());
    CHECK(plain.size() > parsed.size());
    CHECK(model.tokenize("Once") == model.tokenize("Once", model.add_bos()));
}

TEST_CASE("llama.cpp adapter: the names kept for one release still work", "[llama_cpp][deprecated]") {
    SPECDEC_REQUIRE_FIXTURE(target_file, "stories260K.gguf");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    specdec::LlamaCppOptions old_options = support::small_options();
    old_options.max_context = 0;
    old_options.context = 100;
    LlamaCppModel old = LlamaCppModel::load(target_file.string(), old_options);
    CHECK(old.context_length() == 100);
    old_options.max_context = 200;
    CHECK_THROWS_WITH(LlamaCppModel::from_gguf(target_file.string(), old_options), Contains("differ; set max_context only"));
#pragma GCC diagnostic pop
    // max_context = 0: the model's training context, as LlamaOptions::max_context.
    specdec::LlamaCppOptions whole = support::small_options();
    whole.max_context = 0;
    const LlamaCppModel full = LlamaCppModel::from_gguf(target_file.string(), whole);
    CHECK(full.context_length() == static_cast<std::size_t>(llama_model_n_ctx_train(full.model())));
}
