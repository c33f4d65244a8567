#pragma once
// A read-only POSIX memory mapping of a whole file. The GGUF reader keeps one
// per open file so that tensor data is used in place and never copied.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "specdec/core/error.hpp"

namespace specdec::detail {

class MappedFile {
public:
    MappedFile() = default;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    MappedFile(MappedFile&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    MappedFile& operator=(MappedFile&& other) noexcept {
        if (this != &other) {
            unmap();
            data_ = std::exchange(other.data_, nullptr);
            size_ = std::exchange(other.size_, 0);
        }
        return *this;
    }
    ~MappedFile() { unmap(); }

    // Maps the whole file. An empty file is valid and maps to nothing (mmap
    // rejects length 0), so callers see size() == 0 and report it themselves.
    static MappedFile open(const std::filesystem::path& path) {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) fail(path, "cannot open");
        struct stat info {};
        if (::fstat(fd, &info) != 0) {
            const int error = errno;
            ::close(fd);
            fail(path, "cannot stat", error);
        }
        if (!S_ISREG(info.st_mode)) {
            ::close(fd);
            throw Error("cannot map '" + path.string() + "': not a regular file");
        }
        MappedFile mapped;
        mapped.size_ = static_cast<std::size_t>(info.st_size);
        if (mapped.size_ > 0) {
            void* address = ::mmap(nullptr, mapped.size_, PROT_READ, MAP_PRIVATE, fd, 0);
            if (address == MAP_FAILED) {
                const int error = errno;
                ::close(fd);
                fail(path, "cannot memory-map", error);
            }
            mapped.data_ = static_cast<const std::byte*>(address);
        }
        ::close(fd);  // the mapping keeps its own reference to the file
        return mapped;
    }

    [[nodiscard]] const std::byte* data() const { return data_; }
    [[nodiscard]] std::size_t size() const { return size_; }

private:
    [[noreturn]] static void fail(const std::filesystem::path& path, const char* what, int error = errno) {
        throw Error(std::string(what) + " '" + path.string() + "': " + std::strerror(error));
    }

    void unmap() {
        if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
        data_ = nullptr;
        size_ = 0;
    }

    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace specdec::detail
