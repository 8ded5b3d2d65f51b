# install.cmake — `cmake --install`: the layer libraries, the public headers (every .h of src/ but the CUDA
# internals: the cuda/ folders, core/cuda_check.h, ops/gemm_cuda.h, ops/gemm_plan.h) under include/flashtrain,
# and the CMake package, so that another project builds against the installed tree:
#   find_package(flashtrain CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE flashtrain::flashtrain)
# examples/consumer is such a project; scripts/test.sh builds it against build/install.
include(CMakePackageConfigHelpers)

set(FT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/flashtrain)
set_target_properties(flashtrain_lib PROPERTIES EXPORT_NAME flashtrain)
foreach(layer ${FT_LAYERS})
  set_target_properties(ft_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
list(TRANSFORM FT_LAYERS PREPEND ft_ OUTPUT_VARIABLE FT_LAYER_TARGETS)
install(TARGETS ${FT_LAYER_TARGETS} flashtrain_lib EXPORT flashtrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)
# The public headers: all but the internal ones that name CUDA or NCCL types.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/flashtrain COMPONENT library
        FILES_MATCHING PATTERN "*.h"
        PATTERN "cuda" EXCLUDE PATTERN "cuda_check.h" EXCLUDE PATTERN "gemm_cuda.h" EXCLUDE
        PATTERN "gemm_plan.h" EXCLUDE PATTERN "peer_reduce.h" EXCLUDE PATTERN "stream_work.h" EXCLUDE)
install(EXPORT flashtrainTargets NAMESPACE flashtrain:: DESTINATION ${FT_INSTALL_CMAKEDIR} COMPONENT library)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/flashtrainConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/flashtrainConfig.cmake INSTALL_DESTINATION ${FT_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/flashtrainConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/flashtrainConfig.cmake ${CMAKE_BINARY_DIR}/flashtrainConfigVersion.cmake
        DESTINATION ${FT_INSTALL_CMAKEDIR} COMPONENT library)
