#pragma once
// Owners of CUDA resources: device memory, pinned host memory, a stream and a
// cuBLAS handle. Each frees its resource in the destructor and is move-only;
// allocation failures (out of memory, no device) throw specdec::Error.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "specdec/backends/cuda/check.cuh"
#include "specdec/backends/cuda/device.hpp"
#include "specdec/core/error.hpp"

namespace specdec::cuda {

namespace detail {

// Throws a clear Error before the first CUDA call of a model when there is no device.
inline void require_device(const char* who) {
    const cudaError_t status = device_status();
    if (status != cudaSuccess)
        throw Error(std::string("cuda backend: ") + who + " needs a GPU: no CUDA device: " + cudaGetErrorString(status));
}

[[noreturn]] inline void throw_allocation_error(const char* kind, std::size_t bytes, cudaError_t status) {
    (void)cudaGetLastError();
    throw Error("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes of " + kind + ": " +
                cudaGetErrorString(status) +
                (status == cudaErrorMemoryAllocation ? " (the device is out of memory)" : ""));
}

}  // namespace detail

// count elements of T in device memory (uninitialised).
template <class T>
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(std::size_t count) { resize(count); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    DeviceBuffer(DeviceBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    ~DeviceBuffer() { release(); }

    // Reallocates (discarding the contents) only when growing.
    void resize(std::size_t count) {
        if (count <= count_ && data_ != nullptr) return;
        release();
        if (count == 0) return;
        void* pointer = nullptr;
        const cudaError_t status = cudaMalloc(&pointer, count * sizeof(T));
        if (status != cudaSuccess) detail::throw_allocation_error("device memory", count * sizeof(T), status);
        data_ = static_cast<T*>(pointer);
        count_ = count;
    }

    [[nodiscard]] T* data() noexcept { return data_; }
    [[nodiscard]] const T* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return count_; }
    [[nodiscard]] std::size_t bytes() const noexcept { return count_ * sizeof(T); }

private:
    void release() noexcept {
        if (data_ != nullptr) (void)cudaFree(data_);
        data_ = nullptr;
        count_ = 0;
    }

    T* data_ = nullptr;
    std::size_t count_ = 0;
};

// Page-locked host memory: the fast target of device-to-host copies (logits).
template <class T>
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    PinnedBuffer(PinnedBuffer&& other) noexcept
        : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
        if (this != &other) {
            release();
            data_ = std::exchange(other.data_, nullptr);
            count_ = std::exchange(other.count_, 0);
        }
        return *this;
    }
    ~PinnedBuffer() { release(); }

    void resize(std::size_t count) {
        if (count <= count_ && data_ != nullptr) return;
        release();
        if (count == 0) return;
        void* pointer = nullptr;
        const cudaError_t status = cudaMallocHost(&pointer, count * sizeof(T));
        if (status != cudaSuccess) detail::throw_allocation_error("pinned host memory", count * sizeof(T), status);
        data_ = static_cast<T*>(pointer);
        count_ = count;
    }

    [[nodiscard]] T* data() noexcept { return data_; }
    [[nodiscard]] const T* data() const noexcept { return data_; }
    [[nodiscard]] std::size_t size() const noexcept { return count_; }

private:
    void release() noexcept {
        if (data_ != nullptr) (void)cudaFreeHost(data_);
        data_ = nullptr;
        count_ = 0;
    }

    T* data_ = nullptr;
    std::size_t count_ = 0;
};

class Stream {
public:
    Stream() { SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    ~Stream() {
        if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    }
    [[nodiscard]] cudaStream_t get() const noexcept { return stream_; }
    void synchronize() const { SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

private:
    cudaStream_t stream_ = nullptr;
};

class CublasHandle {
public:
    explicit CublasHandle(cudaStream_t stream) {
        SPECDEC_CUBLAS_CHECK(cublasCreate(&handle_));
        try {
            SPECDEC_CUBLAS_CHECK(cublasSetStream(handle_, stream));
            // Tensor cores with fp32 accumulation; no reduced-precision reductions.
            SPECDEC_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
        } catch (...) {
            (void)cublasDestroy(handle_);
            throw;
        }
    }
    CublasHandle(const CublasHandle&) = delete;
    CublasHandle& operator=(const CublasHandle&) = delete;
    ~CublasHandle() {
        if (handle_ != nullptr) (void)cublasDestroy(handle_);
    }
    [[nodiscard]] cublasHandle_t get() const noexcept { return handle_; }

private:
    cublasHandle_t handle_ = nullptr;
};

// Host -> device copy on a stream (the host range must stay alive until the stream syncs
// unless it is pinned; callers here always synchronise before reusing host data).
template <class T>
void copy_to_device(T* device, const T* host, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
}

template <class T>
void copy_to_host(T* host, const T* device, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream));
}

}  // namespace specdec::cuda
