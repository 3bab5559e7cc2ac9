# Runs Doxygen (-DDOXYGEN, -DDOXYFILE) and fails when it warned (-DWARNINGS:
# the Doxyfile's WARN_LOGFILE), printing the first warnings and their count.
file(REMOVE ${WARNINGS})
execute_process(COMMAND ${DOXYGEN} ${DOXYFILE} RESULT_VARIABLE status OUTPUT_QUIET)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "doxygen ${DOXYFILE} failed with status ${status}")
endif()
file(STRINGS ${WARNINGS} warnings)
list(LENGTH warnings count)
if(count GREATER 0)
  list(SUBLIST warnings 0 40 shown)
  list(JOIN shown "\n" shown)
  message(FATAL_ERROR "${shown}\n${count} Doxygen warning(s) (full list: ${WARNINGS}); "
                      "document each public entity with a /// comment (namespaces called detail are exempt)")
endif()
get_filename_component(html ${WARNINGS} DIRECTORY)
message(STATUS "fusor API reference: ${html}/html/index.html, no warning")
