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

# fusor::blas — what matmul links beyond headers: OpenBLAS with cblas.h (the
# host executor's GEMM) and, in targets linked by nvcc, cuBLASLt. fusor::fusor
# never needs them. OpenBLAS is found with pkg-config's `openblas` module, or
# else with FindBLAS (BLA_VENDOR OpenBLAS) and cblas.h found beside it; found
# quietly: FUSOR_BLAS_FOUND says whether it was. Debian: libopenblas-dev.
#
# OpenBLAS's OpenMP build is preferred where installed (Debian:
# libopenblas-openmp-dev, beside the default pthread build): the host executor
# runs its loops on OpenMP threads, and the pthread build's own threads spin
# waiting for work while OpenMP's do, each taking cores from the other (the
# GPT example's ctest run on 2 cores: 93 s with the pthread build, 63 s with
# the OpenMP one, the same losses). Its pkg-config module is looked up first;
# programs find its library through their RUNPATH. FUSOR_OPENBLAS_OPENMP=OFF
# takes whichever build the system's `openblas` module names.
option(FUSOR_OPENBLAS_OPENMP "prefer OpenBLAS's OpenMP build (Debian: libopenblas-openmp-dev) where installed" ON)

# Looks pkg-config's `openblas` module up under the result prefix <prefix>, with
# PKG_CONFIG_PATH set to <pc_dir> where one is given, and makes it fusor::blas's
# library where found. Each build has a prefix of its own, so that turning
# FUSOR_OPENBLAS_OPENMP off takes effect in a configured tree.
macro(_fusor_find_openblas_module prefix pc_dir)
  set(_fusor_pkg_config_path "$ENV{PKG_CONFIG_PATH}")
  if(NOT "${pc_dir}" STREQUAL "")
    set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  endif()
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET openblas)
  set(ENV{PKG_CONFIG_PATH} "${_fusor_pkg_config_path}")
  if(TARGET PkgConfig::${prefix})
    set(_fusor_blas_target PkgConfig::${prefix})
    set(_fusor_cblas_include_dirs ${${prefix}_INCLUDE_DIRS})
    set(_fusor_blas_libraries ${${prefix}_LINK_LIBRARIES})
  endif()
endmacro()

if(NOT DEFINED FUSOR_BLAS_FOUND)
  set(FUSOR_BLAS_FOUND FALSE)
  set(_fusor_blas_target "")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    # Debian's multiarch layout: /usr/lib/<arch>/openblas-openmp/pkgconfig/openblas.pc.
    set(_fusor_openmp_pc_dir "/usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp/pkgconfig")
    if(FUSOR_OPENBLAS_OPENMP AND CMAKE_LIBRARY_ARCHITECTURE AND EXISTS "${_fusor_openmp_pc_dir}/openblas.pc")
      _fusor_find_openblas_module(fusor_openblas_openmp "${_fusor_openmp_pc_dir}")
    endif()
    if(NOT _fusor_blas_target)
      _fusor_find_openblas_module(fusor_openblas "")
    endif()
  endif()
  if(NOT _fusor_blas_target)
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    unset(BLA_VENDOR)
    find_path(FUSOR_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas-pthread openblas openblas-openmp)
    if(BLAS_FOUND AND FUSOR_CBLAS_INCLUDE_DIR)
      add_library(fusor_openblas INTERFACE IMPORTED)
      target_link_libraries(fusor_openblas INTERFACE BLAS::BLAS)
      target_include_directories(fusor_openblas SYSTEM INTERFACE ${FUSOR_CBLAS_INCLUDE_DIR})
      set(_fusor_blas_target fusor_openblas)
      set(_fusor_cblas_include_dirs ${FUSOR_CBLAS_INCLUDE_DIR})
      set(_fusor_blas_libraries ${BLAS_LIBRARIES})
    endif()
  endif()
  if(_fusor_blas_target)
    set(FUSOR_BLAS_FOUND TRUE)
    # Debian's OpenBLAS 0.3.21 declares cblas_sbgemm in cblas.h but does not
    # export it: the bf16 GEMM is used only where a program linking it builds.
    if(CMAKE_CXX_COMPILER_LOADED AND NOT DEFINED FUSOR_OPENBLAS_HAS_SBGEMM)
      include(CheckCXXSourceCompiles)
      set(CMAKE_REQUIRED_INCLUDES ${_fusor_cblas_include_dirs})
      set(CMAKE_REQUIRED_LIBRARIES ${_fusor_blas_libraries})
      set(CMAKE_REQUIRED_QUIET ON)
      check_cxx_source_compiles([=[
        #include <cblas.h>
        int main() {
          const bfloat16 a[1] = {0}, b[1] = {0};
          float c[1];
          cblas_sbgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, a, 1, b, 1, 0.0f, c, 1);
          return 0;
        }]=] FUSOR_OPENBLAS_HAS_SBGEMM)
      unset(CMAKE_REQUIRED_INCLUDES)
      unset(CMAKE_REQUIRED_LIBRARIES)
      unset(CMAKE_REQUIRED_QUIET)
    endif()
  endif()
endif()

function(fusor_link_blas target)
  if(_fusor_blas_target)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:${_fusor_blas_target}>)
    if(FUSOR_OPENBLAS_HAS_SBGEMM)
      target_compile_definitions(${target} INTERFACE $<BUILD_INTERFACE:FUSOR_OPENBLAS_HAS_SBGEMM=1>)
    endif()
  endif()
  # Only programs linked by nvcc (all-CUDA targets) can call cuBLASLt; a target
  # mixing .cpp and .cu sources links with the C++ linker: add CUDA::cublasLt to it.
  if(TARGET CUDA::cublasLt)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:$<$<LINK_LANGUAGE:CUDA>:CUDA::cublasLt>>)
  endif()
endfunction()

# fusor::data — what the input pipeline (fusor/data/) links beyond headers: zlib
# (gzipped IDX files; Debian: zlib1g-dev) and the platform's threads (the
# loader's background worker). Found quietly: FUSOR_DATA_FOUND says whether zlib was.
if(NOT DEFINED FUSOR_DATA_FOUND)
  find_package(ZLIB QUIET)
  find_package(Threads QUIET)
  if(TARGET ZLIB::ZLIB AND TARGET Threads::Threads)
    set(FUSOR_DATA_FOUND TRUE)
  else()
    set(FUSOR_DATA_FOUND FALSE)
  endif()
endif()

function(fusor_link_data target)
  if(FUSOR_DATA_FOUND)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:ZLIB::ZLIB> $<BUILD_INTERFACE:Threads::Threads>)
  endif()
endfunction()

# fusor::mpi — what the MPI communicator (fusor/comm/mpi.hpp) links beyond
# headers: MPI's C bindings (OpenMPI on Debian: libopenmpi-dev openmpi-bin).
# Found quietly: FUSOR_MPI_FOUND says whether it was.
if(NOT DEFINED FUSOR_MPI_FOUND)
  find_package(MPI QUIET COMPONENTS CXX)
  if(TARGET MPI::MPI_CXX)
    set(FUSOR_MPI_FOUND TRUE)
  else()
    set(FUSOR_MPI_FOUND FALSE)
  endif()
endif()

function(fusor_link_mpi target)
  if(FUSOR_MPI_FOUND)
    target_link_libraries(${target} INTERFACE $<BUILD_INTERFACE:MPI::MPI_CXX>)
  endif()
endfunction()

# A project that compiles CUDA with fusor: CMake's default architecture when
# none is given is nvcc's oldest (sm_75 for CUDA 13), below what fusor's
# kernels are written for (sm_80 and newer: bf16 tensor cores, cp.async). Say
# so at configure time instead of compiling for the wrong GPU in silence.
function(fusor_check_cuda_architectures)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "CUDA" IN_LIST languages OR CMAKE_CUDA_ARCHITECTURES MATCHES "^(native|all|all-major)$")
    return()
  endif()
  set(old "")
  foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
    if(arch MATCHES "^([0-9]+)" AND CMAKE_MATCH_1 LESS 80)
      list(APPEND old ${arch})
    endif()
  endforeach()
  if(old)
    message(WARNING "fusor: CMAKE_CUDA_ARCHITECTURES is '${CMAKE_CUDA_ARCHITECTURES}', older than the sm_80 that "
                    "fusor's kernels are written for (when none is given, CMake picks nvcc's oldest). Configure with "
                    "-DCMAKE_CUDA_ARCHITECTURES=native (this machine's GPUs) or e.g. \"80;90\" (A100, H100/H200).")
  else()
    message(STATUS "fusor: CUDA code for architectures ${CMAKE_CUDA_ARCHITECTURES}")
  endif()
endfunction()
