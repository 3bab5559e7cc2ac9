# cmake -P script behind the install_consumer test (see CMakeLists.txt here).
#
#   1. cmake --install of fusor's build tree into WORK_DIR/prefix;
#   2. the consumer as plain C++ (g++), fusor found with find_package in that
#      prefix only: configure, build, run;
#   3. with WITH_CUDA, the consumer's CUDA variant (nvcc) against the same
#      package: configure, build; run only where a GPU is present;
#   4. the consumer with add_subdirectory(fusor's source tree): configure,
#      build (its CUDA variant too with WITH_CUDA), run the C++ program (and the
#      CUDA one where a GPU is present);
#   5. add_subdirectory into a CPU-only project (CUDA must stay off);
#   6. FetchContent of a source archive, CPU-only;
#   7. pkg-config with a plain Makefile (consumer/Makefile).
# Any failing step stops the script with an error, which fails the test.
cmake_minimum_required(VERSION 3.25)

foreach(var FUSOR_SOURCE_DIR FUSOR_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_install_test.cmake: -D${var}=... is required")
  endif()
endforeach()

include(ProcessorCount)
ProcessorCount(jobs)
if(jobs EQUAL 0)
  set(jobs 2)
endif()

# Runs a command, its output going to the test's log; stops everything if it fails.
function(step what)
  message(STATUS "---- ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc COMMAND_ECHO STDOUT)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: '${what}' failed (${rc})")
  endif()
endfunction()

# A GPU is present when nvidia-smi lists one (the CUDA programs are then run too).
set(gpu FALSE)
if(WITH_CUDA)
  find_program(nvidia_smi nvidia-smi)
  if(nvidia_smi)
    execute_process(COMMAND ${nvidia_smi} -L RESULT_VARIABLE smi_rc OUTPUT_VARIABLE smi_out ERROR_QUIET)
    if(smi_rc EQUAL 0 AND smi_out MATCHES "GPU [0-9]")
      set(gpu TRUE)
    endif()
  endif()
endif()

set(prefix ${WORK_DIR}/prefix)
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})

set(common_args -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    # Find fusor in the scratch prefix only, never in a package registry.
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
set(cuda_args -DCONSUMER_CUDA=ON)
if(WITH_CUDA)
  list(APPEND cuda_args -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHITECTURES}")
  if(CUDA_HOST_COMPILER)
    list(APPEND cuda_args -DCMAKE_CUDA_HOST_COMPILER=${CUDA_HOST_COMPILER})
  endif()
endif()

# 1. install
step("install fusor into ${prefix}" ${CMAKE_COMMAND} --install ${FUSOR_BINARY_DIR} --prefix ${prefix})
foreach(file include/fusor/fusor.hpp)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "install_consumer: ${file} was not installed")
  endif()
endforeach()
file(GLOB_RECURSE config_files ${prefix}/*/fusorConfig.cmake)
if(NOT config_files)
  message(FATAL_ERROR "install_consumer: no fusorConfig.cmake under ${prefix}")
endif()

# Checks that a configured consumer took fusor from the scratch prefix.
function(expect_fusor_from_prefix build_dir)
  file(STRINGS ${build_dir}/CMakeCache.txt fusor_dir REGEX "^fusor_DIR:")
  string(REGEX REPLACE "^fusor_DIR:[A-Z]+=" "" fusor_dir "${fusor_dir}")
  string(FIND "${fusor_dir}" "${prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "install_consumer: fusor was found in '${fusor_dir}', not in ${prefix}")
  endif()
endfunction()

# 2. find_package, plain C++ with g++ (CUDA is not enabled in this project)
set(build ${WORK_DIR}/find_package_cxx)
step("configure the C++ consumer (find_package)"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${common_args} -DCMAKE_PREFIX_PATH=${prefix})
expect_fusor_from_prefix(${build})
step("build the C++ consumer (find_package)" ${CMAKE_COMMAND} --build ${build} --parallel ${jobs})
step("run the C++ consumer (find_package)" ${build}/consumer)
step("run the data consumer (find_package)" ${build}/consumer_data)
if(EXISTS ${build}/consumer_runtime)
  step("run the data consumer on fusor::runtime (find_package)" ${build}/consumer_runtime)
elseif(EXPECT_RUNTIME)
  message(FATAL_ERROR "install_consumer: fusor::runtime was built, but the consumer did not get it (find_package)")
endif()
if(EXISTS ${build}/consumer_mpi)
  step("run the MPI consumer (find_package)" ${build}/consumer_mpi)
endif()

# 3. find_package, CUDA with nvcc
if(WITH_CUDA)
  set(build ${WORK_DIR}/find_package_cuda)
  step("configure the CUDA consumer (find_package)"
    ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${common_args} ${cuda_args} -DCMAKE_PREFIX_PATH=${prefix})
  expect_fusor_from_prefix(${build})
  step("build the CUDA consumer (find_package)" ${CMAKE_COMMAND} --build ${build} --parallel ${jobs} --target consumer_cuda)
  if(EXPECT_RUNTIME)  # fusor::cuda_runtime comes with fusor::runtime in a CUDA build
    step("build the CUDA consumer on fusor::cuda_runtime (find_package)"
      ${CMAKE_COMMAND} --build ${build} --parallel ${jobs} --target consumer_cuda_runtime)
  endif()
  if(gpu)
    step("run the CUDA consumer (find_package)" ${build}/consumer_cuda)
    if(EXPECT_RUNTIME)
      step("run the CUDA consumer on fusor::cuda_runtime (find_package)" ${build}/consumer_cuda_runtime)
    endif()
  else()
    message(STATUS "---- no GPU: the CUDA consumer was compiled and linked, not run")
  endif()
endif()

# 4. add_subdirectory of fusor's source tree (fusor's options at their defaults,
#    except CUDA off where this build has it off)
set(build ${WORK_DIR}/add_subdirectory)
set(sub_args ${common_args} -DFUSOR_SOURCE_DIR=${FUSOR_SOURCE_DIR})
if(WITH_CUDA)
  list(APPEND sub_args ${cuda_args})
else()
  list(APPEND sub_args -DFUSOR_ENABLE_CUDA=OFF)
endif()
step("configure the consumer (add_subdirectory)" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${sub_args})
step("build the consumer (add_subdirectory)" ${CMAKE_COMMAND} --build ${build} --parallel ${jobs})
step("run the C++ consumer (add_subdirectory)" ${build}/consumer)
step("run the data consumer (add_subdirectory)" ${build}/consumer_data)
if(EXISTS ${build}/consumer_runtime)
  step("run the data consumer on fusor::runtime (add_subdirectory)" ${build}/consumer_runtime)
elseif(EXPECT_RUNTIME)
  message(FATAL_ERROR "install_consumer: fusor::runtime was built, but the consumer did not get it (add_subdirectory)")
endif()
if(EXISTS ${build}/consumer_mpi)
  step("run the MPI consumer (add_subdirectory)" ${build}/consumer_mpi)
endif()
if(WITH_CUDA AND gpu)
  step("run the CUDA consumer (add_subdirectory)" ${build}/consumer_cuda)
endif()

# A CPU-only project: fusor must not have enabled the CUDA language in it.
function(expect_no_cuda build_dir)
  file(STRINGS ${build_dir}/CMakeCache.txt cuda_compiler REGEX "^CMAKE_CUDA_COMPILER:")
  if(cuda_compiler)
    message(FATAL_ERROR "install_consumer: a CPU-only consumer got the CUDA language from fusor (${cuda_compiler})")
  endif()
endfunction()

# 5. add_subdirectory into a CPU-only project, fusor's options at their
#    defaults: nvcc may be on this machine, CUDA stays off.
set(build ${WORK_DIR}/add_subdirectory_cpu)
step("configure the CPU-only consumer (add_subdirectory)"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${common_args} -DFUSOR_SOURCE_DIR=${FUSOR_SOURCE_DIR})
expect_no_cuda(${build})
step("build the CPU-only consumer (add_subdirectory)" ${CMAKE_COMMAND} --build ${build} --parallel ${jobs} --target consumer)
step("run the CPU-only consumer (add_subdirectory)" ${build}/consumer)

# 6. FetchContent of a source archive (what a release's tarball holds of fusor:
#    include/, src/, cmake/, CMakeLists.txt), into a CPU-only project.
set(staging ${WORK_DIR}/archive/fusor-src)
file(MAKE_DIRECTORY ${staging})
file(COPY ${FUSOR_SOURCE_DIR}/include ${FUSOR_SOURCE_DIR}/src ${FUSOR_SOURCE_DIR}/cmake ${FUSOR_SOURCE_DIR}/CMakeLists.txt
     DESTINATION ${staging})
step("pack fusor's sources" ${CMAKE_COMMAND} -E chdir ${WORK_DIR}/archive ${CMAKE_COMMAND} -E tar czf fusor-src.tar.gz fusor-src)
set(build ${WORK_DIR}/fetch_content)
step("configure the consumer (FetchContent)"
  ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${build} ${common_args}
  -DFUSOR_ARCHIVE=file://${WORK_DIR}/archive/fusor-src.tar.gz)
expect_no_cuda(${build})
step("build the consumer (FetchContent)" ${CMAKE_COMMAND} --build ${build} --parallel ${jobs})
step("run the C++ consumer (FetchContent)" ${build}/consumer)
step("run the data consumer (FetchContent)" ${build}/consumer_data)

# 7. pkg-config and a plain Makefile, against the installed package.
find_program(make_program NAMES make gmake)
find_program(pkg_config NAMES pkg-config pkgconf)
if(NOT make_program OR NOT pkg_config)
  message(FATAL_ERROR "install_consumer: the pkg-config consumer needs make and pkg-config (Debian: make pkg-config)")
endif()
file(GLOB_RECURSE pc_files ${prefix}/*/fusor.pc)
if(NOT pc_files)
  message(FATAL_ERROR "install_consumer: no fusor.pc under ${prefix}")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir ${pc_file} DIRECTORY)
set(build ${WORK_DIR}/pkg_config)
file(MAKE_DIRECTORY ${build})
step("build the consumer with make and pkg-config"
  ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} PKG_CONFIG=${pkg_config} CXX=${CXX_COMPILER}
  ${make_program} -C ${CONSUMER_SOURCE_DIR} OUT=${build} --no-print-directory)
step("run the C++ consumer (pkg-config)" ${build}/consumer_pc)
step("run the data consumer (pkg-config)" ${build}/consumer_data_pc)

message(STATUS "install_consumer: all steps passed")
