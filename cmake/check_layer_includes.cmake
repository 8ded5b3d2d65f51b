# check_layer_includes.cmake — fails when a file of a layer includes a header of a layer its target does not
# link, or reaches a header by a relative path (see Note [Layer include checks] in src/CMakeLists.txt).
#   cmake -DSOURCE_DIR=<folder of the layers> -DLAYER=ops -DSEES="core;ops" -DLAYERS="core;ops;..."
#         [-DSTAMP=<file touched when the layer passes>] -P check_layer_includes.cmake
cmake_minimum_required(VERSION 3.24)
file(GLOB_RECURSE files ${SOURCE_DIR}/${LAYER}/*)
set(violations "")
foreach(file ${files})
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*)[\">].*" "\\1" header "${line}")
    string(REGEX REPLACE "/.*" "" top "${header}")
    if(header MATCHES "^\\.\\./" OR (top IN_LIST LAYERS AND NOT top IN_LIST SEES))
      file(RELATIVE_PATH name ${SOURCE_DIR} ${file})
      string(APPEND violations "  ${name}: #include \"${header}\"\n")
    endif()
  endforeach()
endforeach()
if(violations)
  string(REPLACE ";" ", " sees "${SEES}")
  message(FATAL_ERROR "upward include: layer ${LAYER} may include headers of ${sees} only (itself and the "
                      "layers its target links), by their path under src/:\n${violations}")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
