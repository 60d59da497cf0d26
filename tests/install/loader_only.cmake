# A loader-only build configures without the transport's and the trainer's libraries:
#   cmake -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=...] -P loader_only.cmake
# It configures SOURCE_DIR with TILEFEED_BUILD_TRANSPORT and TILEFEED_BUILD_TRAINER off (and
# the tools, benchmarks and tests, which use every component), MPI, ZeroMQ, cppzmq and
# OpenBLAS made unfindable, and fails if the configure fails or looked for any of them (a
# cache entry of theirs), or if an asked-for tool build without the trainer is not refused.
foreach(_var SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "loader_only.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(NOT GENERATOR)
  set(GENERATOR "Ninja")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
set(_args -G "${GENERATOR}" -DTILEFEED_BUILD_TRANSPORT=OFF -DTILEFEED_BUILD_TRAINER=OFF
    -DTILEFEED_BUILD_BENCH=OFF -DTILEFEED_BUILD_TESTS=OFF -DTILEFEED_BUILD_CUDA=OFF
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZeroMQ=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_cppzmq=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenBLAS=ON)
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/tools" ${_args}
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(_rc EQUAL 0 OR NOT _err MATCHES "TILEFEED_BUILD_TOOLS needs every component")
  message(FATAL_ERROR "loader_only: tools without the trainer were not refused (${_rc}):\n${_err}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/loader" ${_args}
                        -DTILEFEED_BUILD_TOOLS=OFF
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "loader_only: configure failed (${_rc}):\n${_out}\n${_err}")
endif()
file(STRINGS "${WORK_DIR}/loader/CMakeCache.txt" _looked_for
     REGEX "^(MPI|ZMQ|ZeroMQ|cppzmq|OPENBLAS|OpenBLAS)_[A-Za-z_]*:")
if(_looked_for)
  message(FATAL_ERROR "loader_only: a loader-only build looked for:\n${_looked_for}")
endif()
message(STATUS "loader_only: configured without MPI, ZeroMQ, cppzmq or OpenBLAS")
