# run_seeds.cmake — runs a fuzz target once on every file of a corpus folder (cmake -P; FUZZER, CORPUS):
# libFuzzer given files executes each whole, with a 5 s limit per input, and fails on any finding.
file(GLOB seeds ${CORPUS}/*)
if(NOT seeds)
  message(FATAL_ERROR "no seeds in ${CORPUS}")
endif()
execute_process(COMMAND ${FUZZER} -timeout=5 -rss_limit_mb=2048 ${seeds} RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${FUZZER} failed on a seed of ${CORPUS} (status ${status})")
endif()
list(LENGTH seeds count)
message(STATUS "${count} seeds of ${CORPUS}: no crash, no input over 5 s")
