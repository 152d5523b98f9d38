# ctest -P script: the example systemd units (examples/systemd) pass
# `systemd-analyze verify` with no message at all (an unknown or misspelt
# key is only a warning there) and stay below an exposure level of 2.0 in
# `systemd-analyze security`. Both run offline: no systemd needs to be
# running. The units name /usr/bin/fedrt; the copies checked name this build's.
#   -DANALYZE=systemd-analyze -DUNITS=<examples/systemd> -DFEDRT=<fedrt> -DWORK=<dir>
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
foreach(unit fedrt-aggregator.service fedrt-device@.service)
  file(READ ${UNITS}/${unit} text)
  string(REPLACE "/usr/bin/fedrt" "${FEDRT}" text "${text}")
  file(WRITE ${WORK}/${unit} "${text}")
endforeach()
foreach(unit fedrt-aggregator.service fedrt-device@dev-0.service)
  execute_process(COMMAND ${ANALYZE} verify --man=no ${WORK}/${unit} WORKING_DIRECTORY ${WORK}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0 OR NOT out STREQUAL "")
    message(FATAL_ERROR "systemd-analyze verify ${unit}: exit ${status}\n${out}")
  endif()
  execute_process(COMMAND ${ANALYZE} security --offline=yes --threshold=20 ${WORK}/${unit}
                  WORKING_DIRECTORY ${WORK} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "systemd-analyze security ${unit}: exposure above 2.0\n${out}")
  endif()
  message(STATUS "${unit}: verified")
endforeach()
