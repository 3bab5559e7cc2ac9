# cmake -P script behind the conan_create test: the Conan recipe (conanfile.py)
# packages fusor and its test_package builds and runs the consumer against
# that package, offline (no remote), in a scratch Conan home under WORK_DIR,
# from a copy of the recipe's files (Conan writes its build folders beside
# test_package/, which must not be the source tree).
cmake_minimum_required(VERSION 3.25)
foreach(var FUSOR_SOURCE_DIR WORK_DIR CONAN)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_conan_test.cmake: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
set(src ${WORK_DIR}/src)
file(MAKE_DIRECTORY ${src}/tests/install/consumer)
file(COPY ${FUSOR_SOURCE_DIR}/conanfile.py ${FUSOR_SOURCE_DIR}/CMakeLists.txt ${FUSOR_SOURCE_DIR}/cmake
          ${FUSOR_SOURCE_DIR}/include ${FUSOR_SOURCE_DIR}/test_package DESTINATION ${src})
file(COPY ${FUSOR_SOURCE_DIR}/tests/install/consumer/main.cpp DESTINATION ${src}/tests/install/consumer)
set(ENV{CONAN_HOME} ${WORK_DIR}/home)

function(step what)
  message(STATUS "---- ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "conan_create: '${what}' failed (${rc})")
  endif()
  set(output "${out}" PARENT_SCOPE)
endfunction()

step("conan profile detect" ${CONAN} profile detect --exist-ok)
step("conan create (the package, then test_package built and run against it)"
  ${CONAN} create ${src} --no-remote --build=missing -s compiler.cppstd=20)
if(NOT output MATCHES "fusor consumer \\(C\\+\\+\\): OK")
  message(FATAL_ERROR "conan_create: the test package did not run the consumer to its OK line")
endif()
message(STATUS "conan_create: the recipe packaged fusor and its test package passed")
