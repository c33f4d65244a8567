#pragma once
// Every CUDA and cuBLAS call goes through these checks: a failure becomes a
// specdec::Error naming the call, where it was made and the library's own
// error string. Nothing in the CUDA backend aborts the process.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "specdec/core/error.hpp"

namespace specdec::cuda::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
    // Clear the (non-sticky) error so that later calls do not report it again.
    (void)cudaGetLastError();
    std::string message = "cuda backend: " + std::string(call) + " failed with " + cudaGetErrorName(status) + " (" +
                          cudaGetErrorString(status) + ") at " + file + ":" + std::to_string(line);
    if (status == cudaErrorMemoryAllocation) message += ": the device is out of memory";
    throw Error(message);
}

[[nodiscard]] inline const char* cublas_status_name(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (out of device memory)";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
        default: return "unknown cuBLAS status";
    }
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
    throw Error("cuda backend: " + std::string(call) + " failed with " + cublas_status_name(status) + " at " + file +
                ":" + std::to_string(line));
}

}  // namespace specdec::cuda::detail

#define SPECDEC_CUDA_CHECK(call)                                                                  \
    do {                                                                                          \
        const cudaError_t specdec_status_ = (call);                                               \
        if (specdec_status_ != cudaSuccess)                                                       \
            ::specdec::cuda::detail::throw_cuda_error(specdec_status_, #call, __FILE__, __LINE__); \
    } while (0)

#define SPECDEC_CUBLAS_CHECK(call)                                                                  \
    do {                                                                                            \
        const cublasStatus_t specdec_status_ = (call);                                              \
        if (specdec_status_ != CUBLAS_STATUS_SUCCESS)                                               \
            ::specdec::cuda::detail::throw_cublas_error(specdec_status_, #call, __FILE__, __LINE__); \
    } while (0)

// After a kernel launch: reports an invalid configuration at once (execution
// errors surface at the next synchronising call, which is checked too).
#define SPECDEC_CUDA_CHECK_LAUNCH() SPECDEC_CUDA_CHECK(cudaGetLastError())
