#pragma once
// Is there a usable CUDA device? Plain C++ (only the CUDA runtime header and
// library), so host code compiled without nvcc can ask before choosing the
// CUDA backend.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace specdec::cuda {

namespace detail {

// cudaSuccess when device 0 can be used, else the reason (no driver, no device...).
inline cudaError_t device_status() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();
        return status;
    }
    return count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

}  // namespace detail

// True when at least one CUDA device and a working driver are present.
[[nodiscard]] inline bool available() { return detail::device_status() == cudaSuccess; }

// "NVIDIA H200 (sm_90, 139.8 GiB, driver 13.0)" or "no CUDA device: <reason>".
[[nodiscard]] inline std::string device_description() {
    const cudaError_t status = detail::device_status();
    if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
    int device = 0;
    cudaDeviceProp properties{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return "CUDA device present but its properties cannot be read";
    }
    int driver = 0;
    (void)cudaDriverGetVersion(&driver);
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f", static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return std::string(properties.name) + " (sm_" + std::to_string(properties.major) + std::to_string(properties.minor) +
           ", " + memory + " GiB, driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10) +
           ")";
}

}  // namespace specdec::cuda
