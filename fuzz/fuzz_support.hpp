#pragma once
// Shared by the fuzz targets: an in-memory file that the GGUF reader can open
// by path (the reader maps files; a memfd gives it one without touching the
// disk), and a reader of the fuzzer's bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>

namespace specdec::fuzz {

// Aborts with a message: what a violated property looks like to libFuzzer.
[[noreturn]] inline void property_failed(const char* what) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
}

#define SPECDEC_FUZZ_ASSERT(condition) \
    do {                               \
        if (!(condition)) ::specdec::fuzz::property_failed(#condition); \
    } while (0)

class MemoryFile {
public:
    MemoryFile() {
        fd_ = ::memfd_create("specdec-fuzz", 0);
        if (fd_ < 0) property_failed("memfd_create failed");
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    MemoryFile(const MemoryFile&) = delete;
    MemoryFile& operator=(const MemoryFile&) = delete;
    ~MemoryFile() { ::close(fd_); }

    // Replaces the contents; returns a path that opens them.
    const std::filesystem::path& write(std::span<const std::byte> bytes) {
        if (::ftruncate(fd_, 0) != 0) property_failed("ftruncate failed");
        std::size_t done = 0;
        while (done < bytes.size()) {
            const ssize_t n = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
            if (n <= 0) property_failed("pwrite failed");
            done += static_cast<std::size_t>(n);
        }
        return path_;
    }

private:
    int fd_ = -1;
    std::filesystem::path path_;
};

// Consumes the fuzzer's bytes front to back; past the end it yields zeros.
class ByteReader {
public:
    ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

    [[nodiscard]] std::size_t remaining() const { return size_ - position_; }
    std::uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
    std::uint32_t u32() {
        std::uint32_t value = 0;
        for (int i = 0; i < 4; ++i) value |= static_cast<std::uint32_t>(byte()) << (8 * i);
        return value;
    }
    // The next n bytes (fewer at the end) as a string.
    std::string string(std::size_t n) {
        n = std::min(n, remaining());
        std::string out(reinterpret_cast<const char*>(data_ + position_), n);
        position_ += n;
        return out;
    }
    std::string rest() { return string(remaining()); }

private:
    const std::uint8_t* data_;
    std::size_t size_;
    std::size_t position_ = 0;
};

}  // namespace specdec::fuzz
