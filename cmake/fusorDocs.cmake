# cmake/fusorDocs.cmake — the API reference (Doxygen, Debian: doxygen).
#
#   cmake --build build --target docs     # build/docs/html/index.html
#
# Every warning of Doxygen fails the target and the ctest `api_reference`:
# an undocumented public entity of include/fusor (namespaces called `detail`
# excepted) is an error, so the reference cannot fall behind the code.
if(NOT EXISTS ${PROJECT_SOURCE_DIR}/docs/Doxyfile.in)  # a copy of the sources without docs/ (a package's)
  message(STATUS "fusor: no docs/Doxyfile.in in ${PROJECT_SOURCE_DIR}; no `docs` target")
  return()
endif()
find_program(FUSOR_DOXYGEN doxygen)
if(NOT FUSOR_DOXYGEN)
  message(STATUS "fusor: doxygen not found (Debian: doxygen); no `docs` target, ctest api_reference absent")
  return()
endif()
set(FUSOR_DOCS_OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/docs)
set(FUSOR_SOURCE_DIR ${PROJECT_SOURCE_DIR})
configure_file(${PROJECT_SOURCE_DIR}/docs/Doxyfile.in ${FUSOR_DOCS_OUTPUT}/Doxyfile @ONLY)
set(_fusor_docs_command ${CMAKE_COMMAND} -DDOXYGEN=${FUSOR_DOXYGEN} -DDOXYFILE=${FUSOR_DOCS_OUTPUT}/Doxyfile
    -DWARNINGS=${FUSOR_DOCS_OUTPUT}/warnings.txt -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/fusorRunDoxygen.cmake)
add_custom_target(docs COMMAND ${_fusor_docs_command} COMMENT "fusor: API reference in ${FUSOR_DOCS_OUTPUT}/html")
if(FUSOR_BUILD_TESTS)
  add_test(NAME api_reference COMMAND ${_fusor_docs_command})
endif()
