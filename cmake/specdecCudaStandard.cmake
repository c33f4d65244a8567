# nvcc accepts -std=c++20, but CMake 3.25 has no CUDA20 dialect entry for it;
# without this, any .cu target linking specdec (which requires cxx_std_20)
# fails to configure.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
