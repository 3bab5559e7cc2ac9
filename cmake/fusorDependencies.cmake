# What fusor::fusor needs from the outside, shared by the build tree and the
# installed package: the CUDA Toolkit's headers (CCCL, cuda_bf16.h, cuda_fp16.h,
# found without needing a GPU or nvcc) and, optionally, OpenMP for the host executor.
include(CMakeFindDependencyMacro)
find_dependency(CUDAToolkit)
if(NOT DEFINED FUSOR_ENABLE_OPENMP OR FUSOR_ENABLE_OPENMP)
  find_package(OpenMP QUIET COMPONENTS CXX)
endif()

function(fusor_link_dependencies target)
  set(cuda_headers ${CUDAToolkit_INCLUDE_DIRS})
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    if(EXISTS ${dir}/cccl)
      list(APPEND cuda_headers ${dir}/cccl)
    endif()
  endforeach()
  # nvcc finds these itself; plain C++ compilers are told where they are.
  # BUILD_INTERFACE: these are found again on the consumer's machine by
  # fusorConfig.cmake, never exported as this machine's paths.
  target_include_directories(${target} SYSTEM INTERFACE "$<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:${cuda_headers}>>")
  if(OpenMP_CXX_FOUND)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:OpenMP::OpenMP_CXX>)
    target_compile_options(${target} INTERFACE $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fopenmp>>)
  endif()
endfunction()
