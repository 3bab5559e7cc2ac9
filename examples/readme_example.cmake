# cmake -P script: README.md's example, kept honest.
#
# README.md holds one C++ block right after the line "<!-- readme-example -->".
#   cmake -DREADME=... -DOUTPUT=file.cpp -P readme_example.cmake
#       writes the block to OUTPUT (the build compiles it, ctest runs it);
#   cmake -DREADME=... -DQUICKSTART=examples/quickstart.cpp -P readme_example.cmake
#       checks that the block is a cut of the quickstart: each of its non-blank
#       lines occurs, in the same order, among the quickstart's lines
#       (leading and trailing spaces aside).
cmake_minimum_required(VERSION 3.25)

file(READ ${README} text)
set(marker "<!-- readme-example -->")
string(FIND "${text}" "${marker}" at)
if(at LESS 0)
  message(FATAL_ERROR "${README}: no '${marker}' line")
endif()
string(SUBSTRING "${text}" ${at} -1 text)
string(FIND "${text}" "```cpp\n" begin)
if(begin LESS 0)
  message(FATAL_ERROR "${README}: no ```cpp block after '${marker}'")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${text}" ${begin} -1 text)
string(FIND "${text}" "\n```" end)
if(end LESS 0)
  message(FATAL_ERROR "${README}: the ```cpp block after '${marker}' does not end")
endif()
math(EXPR end "${end} + 1")
string(SUBSTRING "${text}" 0 ${end} block)

if(DEFINED OUTPUT)
  file(WRITE ${OUTPUT} "${block}")
  return()
endif()

# Lines as CMake lists: characters that CMake lists treat specially are masked first.
function(lines_of content out)
  string(REPLACE ";" "<semicolon>" content "${content}")
  string(REPLACE "[" "<lbracket>" content "${content}")
  string(REPLACE "]" "<rbracket>" content "${content}")
  string(REPLACE "\\" "<backslash>" content "${content}")
  string(REPLACE "\n" ";" content "${content}")
  set(result)
  foreach(line IN LISTS content)
    string(STRIP "${line}" line)
    if(NOT line STREQUAL "")
      list(APPEND result "${line}")
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

file(READ ${QUICKSTART} quickstart)
lines_of("${block}" wanted)
lines_of("${quickstart}" have)
list(LENGTH have n_have)
set(i 0)
foreach(line IN LISTS wanted)
  set(found FALSE)
  while(i LESS n_have)
    list(GET have ${i} candidate)
    math(EXPR i "${i} + 1")
    if(candidate STREQUAL line)
      set(found TRUE)
      break()
    endif()
  endwhile()
  if(NOT found)
    string(REPLACE "<semicolon>" ";" line "${line}")
    string(REPLACE "<lbracket>" "[" line "${line}")
    string(REPLACE "<rbracket>" "]" line "${line}")
    string(REPLACE "<backslash>" "\\" line "${line}")
    message(FATAL_ERROR "README.md's example is no longer a cut of ${QUICKSTART}: this line is not "
                        "there (or not in this order):\n  ${line}\nUpdate one to match the other.")
  endif()
endforeach()
message(STATUS "README.md's example is a cut of ${QUICKSTART}")
