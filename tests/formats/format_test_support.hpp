#pragma once
// Helpers shared by the file-format tests: a scratch directory, the message of
// the specdec::Error a malformed file or vocabulary must raise, and GGUF
// values that more than one test writes.
#include <atomic>
#include <cstddef>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "specdec/core/error.hpp"
#include "specdec/formats/gguf.hpp"
#include "specdec/formats/gguf_writer.hpp"
#include "specdec/formats/tokenizer.hpp"
#include "support/catch.hpp"

namespace specdec::test {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
public:
    TempDir() {
        static std::atomic<int> counter{0};
        path_ = std::filesystem::temp_directory_path() /
                ("specdec-formats-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
                 std::to_string(std::random_device{}()));
        std::filesystem::create_directories(path_);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }

    [[nodiscard]] std::filesystem::path file(const std::string& name) const { return path_ / name; }

    std::filesystem::path write(const std::string& name, std::span<const std::byte> bytes) const {
        const auto target = file(name);
        gguf::Writer::write_bytes(target, bytes);
        return target;
    }

private:
    std::filesystem::path path_;
};

// The message of the specdec::Error that opening `path` raises; "" when the
// file opens. Any other exception type fails the test.
inline std::string open_error(const std::filesystem::path& path) {
    try {
        (void)gguf::File::open(path);
    } catch (const Error& error) {
        return error.what();
    }
    return "";
}

// Opening must fail with a message naming both the file and the problem.
inline void require_open_error(const std::filesystem::path& path, const std::string& problem) {
    const std::string message = open_error(path);
    INFO("expected a problem containing: " << problem);
    INFO("got: " << (message.empty() ? std::string("<opened without error>") : message));
    CHECK(message.find(problem) != std::string::npos);
    CHECK(message.find(path.string()) != std::string::npos);
}

// The message of the specdec::Error that `action` raises; "<no error>" when it
// returns. Any other exception type fails the test.
inline std::string error_message(auto&& action) {
    try {
        action();
    } catch (const Error& error) {
        return error.what();
    }
    return "<no error>";
}

// The message of the specdec::Error that reading a tokenizer from the file
// `writer` describes raises (the file is written to `dir` as `name`).
inline std::string tokenizer_error(const gguf::Writer& writer, const TempDir& dir = TempDir{},
                                   const std::string& name = "vocab.gguf") {
    const auto path = dir.file(name);
    writer.write(path);
    const gguf::File file = gguf::File::open(path);
    return error_message([&] { (void)Tokenizer::from_gguf(file); });
}

// An array of arrays, [[1, 2], ["x"]], with 16-bit integers of `integer_type`.
inline gguf::ValueBytes nested_array(gguf::ValueType integer_type) {
    gguf::ValueBytes nested;
    nested.array_header(gguf::ValueType::array, 2);
    nested.array_header(integer_type, 2).u16(1).u16(2);
    nested.array_header(gguf::ValueType::string, 1).string("x");
    return nested;
}

inline std::vector<std::byte> as_bytes(const std::vector<float>& values) {
    gguf::ValueBytes bytes;
    for (const float v : values) bytes.f32(v);
    return bytes.bytes;
}

// A tokenizer read back from the GGUF file `writer` describes (kept in a
// scratch directory for as long as the tokenizer lives).
struct LoadedTokenizer {
    TempDir dir;
    gguf::File file;
    Tokenizer tokenizer;

    explicit LoadedTokenizer(const gguf::Writer& writer) : file(open(dir, writer)), tokenizer(Tokenizer::from_gguf(file)) {}

    static gguf::File open(const TempDir& dir, const gguf::Writer& writer) {
        const auto path = dir.file("vocab.gguf");
        writer.write(path);
        return gguf::File::open(path);
    }

    // The pieces `text` encodes to.
    [[nodiscard]] std::vector<std::string> pieces(std::string_view text, bool add_bos = false) const {
        std::vector<std::string> out;
        for (const Token token : tokenizer.encode(text, add_bos)) out.push_back(tokenizer.token_piece(token));
        return out;
    }
};

}  // namespace specdec::test
