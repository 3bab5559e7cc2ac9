# run_compile_test.cmake — one compile test, run by CTest as `cmake -P` through
# the small script CMakeLists.txt generates per test and compiler, which sets:
#
#   COMPILER          the compiler: g++ (CMAKE_CXX_COMPILER), clang++ or nvcc
#   FLAGS             its flags: -std=c++20, the include directories (nvcc: and
#                     --cuda -o /dev/null, its front end only; g++ and clang++
#                     get -fsyntax-only here)
#   SOURCE            the program
#   MODE              "fail": compiled with -DFUSOR_COMPILE_FAIL it must NOT compile, the
#                     first error must be fusor's ("error: ... fusor: ..."), the output
#                     must match every regex in PATTERNS and stay within the line
#                     bounds below; compiled without it (the program's correct twin)
#                     it must compile, so the failure is the misuse's and nothing else's.
#                     "compile": it must compile (the harness's control).
#                     "reject": the harness's self-check: the "fail" checks above must
#                     NOT hold for this program and these PATTERNS, and the reason
#                     the harness gives must match REASON.
#   PATTERNS          regexes the "fail" output must all match
#   REASON            ("reject" only) a regex for the reason the harness rejects
#   MAX_LINES         ("fail") the most MESSAGE lines (default 5, issue 16), see below
#   MAX_OUTPUT_LINES  ("fail") the most lines of output in all (default 20)
#
# Message lines are what the compiler says, as opposed to what it quotes:
#   - a line that starts with a source location: "file:line:col: " (g++, clang++:
#     errors, notes, "required from ..." lines) or "file(line): " (nvcc);
#   - g++'s context lines "file: In instantiation of ...", "file: In function ...",
#     "file: In member function ...", "file: At global scope:";
#   - nvcc's "detected during ..." and its indented "instantiation of ..." lines;
#   - the totals "N error(s) generated." (clang++) and "N error(s) detected in the
#     compilation of ..." (nvcc).
# Not counted: the include chain ("In file included from ...", "    from ...") and
# the source lines and carets the compiler echoes, which show where rather than
# what; they are bounded by MAX_OUTPUT_LINES instead. Both counts are printed
# every time, so `ctest -V` shows them.
cmake_minimum_required(VERSION 3.25)
if(NOT DEFINED MAX_LINES)
  set(MAX_LINES 5)
endif()
if(NOT DEFINED MAX_OUTPUT_LINES)
  set(MAX_OUTPUT_LINES 20)
endif()

# Plain ASCII quotes and no colour, whatever the caller's locale and terminal.
set(ENV{LC_ALL} C)
set(ENV{LANG} C)
set(ENV{GCC_COLORS} "")

# g++ and clang++ check only (-fsyntax-only), without colour; nvcc's FLAGS say
# how it checks (--cuda -o /dev/null: its front end only).
get_filename_component(compiler_name "${COMPILER}" NAME)
set(check_flags)
if(NOT compiler_name MATCHES "nvcc")
  set(check_flags -fsyntax-only -fdiagnostics-color=never)
endif()

function(compile result_var log_var)
  execute_process(
    COMMAND ${COMPILER} ${FLAGS} ${check_flags} ${ARGN} ${SOURCE}
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

# Counts a compiler log's message lines (see the top of this file) and all its lines.
function(count_lines log_var message_var total_var)
  # One list element per line: characters that CMake's lists treat specially go first.
  string(REPLACE ";" "," text "${${log_var}}")
  string(REPLACE "[" "(" text "${text}")
  string(REPLACE "]" ")" text "${text}")
  string(REPLACE "\\" "/" text "${text}")
  string(REGEX REPLACE "\n$" "" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(messages 0)
  set(total 0)
  foreach(line IN LISTS lines)
    math(EXPR total "${total} + 1")
    if(line MATCHES "^In file included from " OR line MATCHES "^ +from ")
      continue()  # the include chain
    endif()
    if(line MATCHES "^[^ \t][^:]*:[0-9]+(:[0-9]+)?: "             # file:line:col: (g++, clang++)
       OR line MATCHES "^[^ \t][^:]*: (In |At global scope)"       # g++'s context lines
       OR line MATCHES "^[^ \t][^(]*\\([0-9]+\\): "                # file(line): (nvcc)
       OR line MATCHES "^[ \t]+(detected during|instantiation of |processing of )"  # nvcc's context
       OR line MATCHES "^[0-9]+ (warnings? and [0-9]+ )?errors? (generated|detected)")
      math(EXPR messages "${messages} + 1")
    endif()
  endforeach()
  set(${message_var} ${messages} PARENT_SCOPE)
  set(${total_var} ${total} PARENT_SCOPE)
endfunction()

# Returns in ok_var whether the "fail" expectations hold, and why not in why_var;
# counts_var gets the line counts, for the test's output.
function(expect_failure ok_var why_var counts_var)
  compile(rc log -DFUSOR_COMPILE_FAIL)
  excerpt(log shown)
  set(${ok_var} FALSE PARENT_SCOPE)
  set(${counts_var} "" PARENT_SCOPE)
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
  # A mistake costs a short read (issue 16): at most MAX_LINES lines of message,
  # and a bounded page in all.
  count_lines(log messages total)
  set(counts "${messages} message lines (at most ${MAX_LINES}), ${total} lines in all (at most ${MAX_OUTPUT_LINES})")
  set(${counts_var} "${counts}" PARENT_SCOPE)
  if(messages GREATER MAX_LINES)
    set(${why_var} "the compiler's message is ${messages} lines, more than ${MAX_LINES} (${counts}):\n${shown}" PARENT_SCOPE)
    return()
  endif()
  if(total GREATER MAX_OUTPUT_LINES)
    set(${why_var} "the compiler's output is ${total} lines, more than ${MAX_OUTPUT_LINES} (${counts}):\n${shown}" PARENT_SCOPE)
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
  expect_failure(ok why counts)
  if(NOT ok)
    message(FATAL_ERROR "${why}")
  endif()
  # The correct twin compiles: the failure above came from the misuse alone.
  compile(rc log)
  if(NOT rc STREQUAL "0")
    excerpt(log shown)
    message(FATAL_ERROR "${SOURCE} without -DFUSOR_COMPILE_FAIL must compile, but does not (rc ${rc}):\n${shown}")
  endif()
  message(STATUS "${SOURCE} (${compiler_name}): fails to compile as expected, with fusor's message: ${counts}; "
                 "its correct twin compiles")
elseif(MODE STREQUAL "compile")
  compile(rc log)
  if(NOT rc STREQUAL "0")
    excerpt(log shown)
    message(FATAL_ERROR "${SOURCE} must compile, but does not (rc ${rc}):\n${shown}")
  endif()
  message(STATUS "${SOURCE} (${compiler_name}) compiles")
elseif(MODE STREQUAL "reject")
  expect_failure(ok why counts)
  if(ok)
    message(FATAL_ERROR "the harness accepted ${SOURCE} with patterns \"${PATTERNS}\" (${counts}), but must not")
  endif()
  if(NOT why MATCHES "${REASON}")
    message(FATAL_ERROR "the harness rejected ${SOURCE}, but for another reason than \"${REASON}\": ${why}")
  endif()
  string(REGEX MATCH "^[^\n]*" first_line "${why}")
  message(STATUS "the harness rejects ${SOURCE} (${compiler_name}), as it must: ${first_line}")
else()
  message(FATAL_ERROR "run_compile_test.cmake: unknown MODE \"${MODE}\"")
endif()
