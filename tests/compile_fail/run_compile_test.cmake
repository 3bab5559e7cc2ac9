# run_compile_test.cmake — one compile test, run by CTest as `cmake -P` through
# the small script CMakeLists.txt generates per test, which sets:
#
#   COMPILER   the C++ compiler
#   FLAGS      its flags (-std=c++20, the include directories)
#   SOURCE     the program
#   MODE       "fail": compiled with -DFUSOR_COMPILE_FAIL it must NOT compile, the
#              first error must be fusor's ("error: ... fusor: ..."), and the
#              output must match every regex in PATTERNS; compiled without it
#              (the program's correct twin) it must compile, so the failure is
#              the misuse's and nothing else's.
#              "compile": it must compile (the harness's control).
#              "reject": the harness's self-check: the "fail" checks above must
#              NOT hold for this program and these PATTERNS, and the reason
#              the harness gives must match REASON.
#   PATTERNS   regexes the "fail" output must all match
#   REASON     ("reject" only) a regex for the reason the harness rejects
#   MAX_LINES  ("fail") the most lines the compiler may print (default 25)
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED MAX_LINES)
  set(MAX_LINES 25)
endif()

# Plain ASCII quotes and no colour, whatever the caller's locale and terminal.
set(ENV{LC_ALL} C)
set(ENV{LANG} C)
set(ENV{GCC_COLORS} "")

function(compile result_var log_var)
  execute_process(
    COMMAND ${COMPILER} ${FLAGS} -fsyntax-only -fdiagnostics-color=never ${ARGN} ${SOURCE}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(${result_var} "${rc}" PARENT_SCOPE)
  set(${log_var} "${out}${err}" PARENT_SCOPE)
endfunction()

# The first `max` characters of a compiler log, for the test's output.
function(excerpt log_var out_var)
  set(max 8000)
  string(LENGTH "${${log_var}}" length)
  if(length GREATER max)
    string(SUBSTRING "${${log_var}}" 0 ${max} text)
    set(text "${text}\n... (${length} characters in all)")
  else()
    set(text "${${log_var}}")
  endif()
  set(${out_var} "${text}" PARENT_SCOPE)
endfunction()

# Returns in ok_var whether the "fail" expectations hold, and why not in why_var.
function(expect_failure ok_var why_var)
  compile(rc log -DFUSOR_COMPILE_FAIL)
  excerpt(log shown)
  set(${ok_var} FALSE PARENT_SCOPE)
  if(rc STREQUAL "0")
    set(${why_var} "${SOURCE} compiled with -DFUSOR_COMPILE_FAIL, but must not:\n${shown}" PARENT_SCOPE)
    return()
  endif()
  if(log MATCHES "internal compiler error")
    set(${why_var} "the compiler crashed on ${SOURCE}:\n${shown}" PARENT_SCOPE)
    return()
  endif()
  # The first error a user reads is fusor's own message.
  string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${log}")
  if(NOT first_error MATCHES "fusor: ")
    set(${why_var} "the first error is not fusor's message: \"${first_error}\"\n${shown}" PARENT_SCOPE)
    return()
  endif()
  # A mistake costs a short read: at most MAX_LINES lines of compiler output in
  # all, the instantiation context included (issue 16 aims at 5; g++ prints
  # 9 to 22 today, a page would be a regression).
  string(REGEX MATCHALL "\n" newlines "${log}")
  list(LENGTH newlines line_count)
  if(line_count GREATER MAX_LINES)
    set(${why_var} "the compiler's output is ${line_count} lines, more than ${MAX_LINES}:\n${shown}" PARENT_SCOPE)
    return()
  endif()
  foreach(pattern IN LISTS PATTERNS)
    if(NOT log MATCHES "${pattern}")
      set(${why_var} "the compiler's output does not match \"${pattern}\":\n${shown}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${ok_var} TRUE PARENT_SCOPE)
  set(${why_var} "" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "fail")
  expect_failure(ok why)
  if(NOT ok)
    message(FATAL_ERROR "${why}")
  endif()
  # The correct twin compiles: the failure above came from the misuse alone.
  compile(rc log)
  if(NOT rc STREQUAL "0")
    excerpt(log shown)
    message(FATAL_ERROR "${SOURCE} without -DFUSOR_COMPILE_FAIL must compile, but does not (rc ${rc}):\n${shown}")
  endif()
  message(STATUS "${SOURCE}: fails to compile as expected, with fusor's message; its correct twin compiles")
elseif(MODE STREQUAL "compile")
  compile(rc log)
  if(NOT rc STREQUAL "0")
    excerpt(log shown)
    message(FATAL_ERROR "${SOURCE} must compile, but does not (rc ${rc}):\n${shown}")
  endif()
  message(STATUS "${SOURCE} compiles")
elseif(MODE STREQUAL "reject")
  expect_failure(ok why)
  if(ok)
    message(FATAL_ERROR "the harness accepted ${SOURCE} with patterns \"${PATTERNS}\", but must not")
  endif()
  if(NOT why MATCHES "${REASON}")
    message(FATAL_ERROR "the harness rejected ${SOURCE}, but for another reason than \"${REASON}\": ${why}")
  endif()
  string(REGEX MATCH "^[^\n]*" first_line "${why}")
  message(STATUS "the harness rejects ${SOURCE}, as it must: ${first_line}")
else()
  message(FATAL_ERROR "run_compile_test.cmake: unknown MODE \"${MODE}\"")
endif()
