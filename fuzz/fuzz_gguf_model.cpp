// Bytes -> GGUF reader -> Llama model loader -> a 2-token forward, a rollback
// and a 1-token forward when the file loads. Properties: nothing but
// specdec::Error escapes, no sanitizer report (out-of-bounds reads of the
// mapping, float -> int conversions of NaN, integer overflow in sizes), and
// every logits row either picks a token inside the vocabulary or is rejected
// as non-finite with a specdec::Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "fuzz_support.hpp"
#include "specdec/cpu.hpp"
#include "specdec/specdec.hpp"

namespace {

void check_rows(const specdec::LogitsView& logits, std::size_t rows, std::size_t vocab) {
    SPECDEC_FUZZ_ASSERT(logits.rows == rows);
    SPECDEC_FUZZ_ASSERT(logits.vocab == vocab);
    for (std::size_t i = 0; i < rows; ++i) {
        try {
            const specdec::Token token = specdec::greedy_token(logits.row(i), "fuzzed model", i);
            SPECDEC_FUZZ_ASSERT(token >= 0 && static_cast<std::size_t>(token) < vocab);
        } catch (const specdec::Error&) {
            // Non-finite logits from a file whose weights overflow or hold NaN.
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static specdec::fuzz::MemoryFile memory;
    static const auto pool = std::make_shared<specdec::cpu::ThreadPool>(1);
    const auto& path = memory.write({reinterpret_cast<const std::byte*>(data), size});
    try {
        auto file = std::make_shared<const specdec::gguf::File>(specdec::gguf::File::open(path));
        // The file's last byte chooses whether the load-time tensor check runs,
        // so both paths see every shape of file.
        specdec::LlamaOptions options{.max_context = 4, .thread_pool = pool, .name = "fuzzed model",
                                      .check_tensors = size > 0 && (data[size - 1] & 1) != 0};
        specdec::LlamaModel model(specdec::llama_weights_from_gguf(std::move(file)), options);
        const std::size_t vocab = model.vocab_size();
        const specdec::Token tokens[2] = {0, static_cast<specdec::Token>(vocab - 1)};
        check_rows(model.forward(tokens), 2, vocab);
        SPECDEC_FUZZ_ASSERT(model.cached_tokens() == 2);
        model.truncate(1);
        check_rows(model.forward(std::span<const specdec::Token>(tokens + 1, 1)), 1, vocab);
        SPECDEC_FUZZ_ASSERT(model.cached_tokens() == 2);
    } catch (const specdec::Error&) {
        // Malformed files, shapes that disagree, non-finite weights: all must be Errors.
    }
    return 0;
}
