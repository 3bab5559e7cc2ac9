# pkg-config files for programs built without CMake (a Makefile, a shell line):
#
#   g++ $(pkg-config --cflags fusor) app.cpp $(pkg-config --libs fusor)
#
# fusor        the headers, C++20, the CUDA Toolkit's headers (CCCL, found on
#              this machine at configure time), OpenMP where found;
# fusor-blas   fusor plus OpenBLAS (matmul on the host);
# fusor-data   fusor plus zlib and threads (the input pipeline).
# Installed into <libdir>/pkgconfig; tests/install builds a Makefile against them.
function(fusor_write_pkg_config)
  set(cflags "-std=c++20")
  set(libs "")
  foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
    string(APPEND cflags " -isystem ${dir}")
    if(EXISTS ${dir}/cccl)
      string(APPEND cflags " -isystem ${dir}/cccl")
    endif()
  endforeach()
  if(OpenMP_CXX_FOUND)
    string(APPEND cflags " ${OpenMP_CXX_FLAGS}")
    string(APPEND libs " ${OpenMP_CXX_FLAGS}")
  endif()
  if(FUSOR_NO_MATH_ERRNO)
    string(APPEND cflags " -fno-math-errno -fno-trapping-math")
  endif()
  set(FUSOR_PC_CFLAGS "${cflags}")
  set(FUSOR_PC_LIBS "${libs}")

  set(blas_cflags "")
  set(blas_libs "")
  foreach(dir IN LISTS _fusor_cblas_include_dirs)
    string(APPEND blas_cflags " -isystem ${dir}")
  endforeach()
  if(FUSOR_OPENBLAS_HAS_SBGEMM)
    string(APPEND blas_cflags " -DFUSOR_OPENBLAS_HAS_SBGEMM=1")
  endif()
  foreach(lib IN LISTS _fusor_blas_libraries)
    string(APPEND blas_libs " ${lib}")
    # A library outside the linker's own directories (Debian's OpenMP OpenBLAS
    # in /usr/lib/<arch>/openblas-openmp) is loaded from there only with an
    # rpath: without one the loader takes the system's default build.
    get_filename_component(lib_dir "${lib}" DIRECTORY)
    if(IS_ABSOLUTE "${lib}" AND NOT lib_dir IN_LIST CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES)
      string(APPEND blas_libs " -Wl,-rpath,${lib_dir}")
    endif()
  endforeach()
  set(FUSOR_PC_BLAS_CFLAGS "${blas_cflags}")
  set(FUSOR_PC_BLAS_LIBS "${blas_libs}")

  # The prefix relative to the .pc file, so that an install moved elsewhere
  # (cmake --install --prefix) still finds its headers.
  file(RELATIVE_PATH FUSOR_PC_PREFIX_FROM_PCFILE "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
  string(REGEX REPLACE "/$" "" FUSOR_PC_PREFIX_FROM_PCFILE "${FUSOR_PC_PREFIX_FROM_PCFILE}")
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/pkgconfig)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/fusor.pc.in ${dir}/fusor.pc @ONLY)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/fusor-blas.pc.in ${dir}/fusor-blas.pc @ONLY)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/fusor-data.pc.in ${dir}/fusor-data.pc @ONLY)
  install(FILES ${dir}/fusor.pc ${dir}/fusor-blas.pc ${dir}/fusor-data.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endfunction()
