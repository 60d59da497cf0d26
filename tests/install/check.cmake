# The install test, run by ctest as a CMake script:
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=... -DCONFIG=...
#         -DCXX_COMPILER=... -DSANITIZE=...] -P check.cmake
# It installs the (already built) build tree into a fresh prefix, checks that the
# installed package does not point back into the source or build tree, then configures,
# builds and runs tests/install/consumer against the prefix, as a user would.

foreach(_var BUILD_DIR SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check.cmake: pass -D${_var}=...")
  endif()
endforeach()
if(NOT GENERATOR)
  set(GENERATOR "Ninja")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
set(_prefix "${WORK_DIR}/prefix")

# Runs one step; on failure stops with everything the step printed.
function(_run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _err)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${name} failed (${_rc}):\n${_out}\n${_err}")
  endif()
  set(_step_output "${_out}" PARENT_SCOPE)
endfunction()

set(_config_args)
if(CONFIG)
  set(_config_args --config "${CONFIG}")
endif()
_run_step("cmake --install (build every target first)"
  "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}" ${_config_args})

# BUILD_INTERFACE paths or absolute source paths in the exported targets would make the
# package work only on this machine, and only until the build tree is deleted.
file(GLOB_RECURSE _package_files "${_prefix}/*.cmake")
if(NOT _package_files)
  message(FATAL_ERROR "install_consumer: no CMake package files under ${_prefix}")
endif()
foreach(_file IN LISTS _package_files)
  file(READ "${_file}" _text)
  foreach(_tree "${SOURCE_DIR}" "${BUILD_DIR}")
    string(FIND "${_text}" "${_tree}" _at)
    if(NOT _at EQUAL -1)
      message(FATAL_ERROR "install_consumer: ${_file} refers to ${_tree}")
    endif()
  endforeach()
endforeach()

set(_configure_args
  -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build" -G "${GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${_prefix}")
if(CONFIG)
  list(APPEND _configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(CXX_COMPILER)
  list(APPEND _configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(SANITIZE)
  # Sanitized static archives need the sanitizer runtimes at the consumer's link.
  list(APPEND _configure_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
_run_step("configure the consumer" "${CMAKE_COMMAND}" ${_configure_args})
_run_step("build the consumer" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" ${_config_args})

set(_exe "${WORK_DIR}/build/consumer")
if(CONFIG AND EXISTS "${WORK_DIR}/build/${CONFIG}/consumer")
  set(_exe "${WORK_DIR}/build/${CONFIG}/consumer")  # multi-config generators
endif()
_run_step("run the consumer" "${_exe}")
message(STATUS "consumer says:\n${_step_output}")
