# The install test, run by ctest as a CMake script:
#   cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... [-DGENERATOR=... -DCONFIG=...
#         -DCXX_COMPILER=... -DSANITIZE=... -DTOOLS=ON|OFF -DCUDA=ON|OFF] -P check.cmake
# It installs the (already built) build tree into a fresh prefix and checks, as a user would:
# - the installed package does not point back into the source or build tree;
# - every tool is installed and `TOOL --help` runs from the prefix (with -DTOOLS=ON);
# - find_package(tilefeed COMPONENTS ...) gives the components asked for, those they link,
#   and nothing else, and an unknown component is an error naming it (components/);
# - the installed components are codecs, loader, cuda_feed, launch, transport, trainer, and
#   cuda exactly when the build made it (-DCUDA=ON); asking for cuda from a build without it
#   is an error saying so;
# - a loader-only project (consumer/, COMPONENTS loader) and a training program
#   (trainer_consumer/, every component) build in C++-only projects and run; the first also
#   builds and runs examples/custom_source.cc; a GPU feed project (cuda_consumer/) builds
#   and runs against tilefeed::cuda_feed, and against tilefeed::cuda with -DCUDA=ON (no GPU
#   needed: it reports whether one is usable).

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

set(_common_args -G "${GENERATOR}" "-DCMAKE_PREFIX_PATH=${_prefix}")
if(CONFIG)
  list(APPEND _common_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()
if(CXX_COMPILER)
  list(APPEND _common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(SANITIZE)
  # Sanitized static archives need the sanitizer runtimes at the consumer's link.
  list(APPEND _common_args "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZE}")
endif()
# OpenMPI leaks by design in MPI_Init/MPI_Finalize (tests/CMakeLists.txt); OpenMPI refuses
# root unless told.
set(_run_env "${CMAKE_COMMAND}" -E env "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1"
    "LSAN_OPTIONS=detect_leaks=0" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)

# The tools, from the prefix: the README's commands are `poprun ... train`.
if(TOOLS)
  foreach(_tool train poprun tilefeed-serve tilefeed-pack tilefeed-inspect tilefeed-make-demo
                tilefeed-report)
    if(NOT EXISTS "${_prefix}/bin/${_tool}")
      message(FATAL_ERROR "install_consumer: ${_tool} is not installed in ${_prefix}/bin")
    endif()
    _run_step("${_tool} --help from the prefix" ${_run_env} "${_prefix}/bin/${_tool}" --help)
  endforeach()
  message(STATUS "installed tools run: train, poprun, tilefeed-serve, tilefeed-pack, "
                 "tilefeed-inspect, tilefeed-make-demo, tilefeed-report")
endif()

# Components: configure-only projects (lists separated by '|').
function(_check_components name components present absent)
  _run_step("find_package(tilefeed COMPONENTS ${components})"
    "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/components"
    -B "${WORK_DIR}/components-${name}" ${_common_args}
    "-DTILEFEED_COMPONENTS=${components}" "-DEXPECT_PRESENT=${present}"
    "-DEXPECT_ABSENT=${absent}")
endfunction()
_check_components(trainer "trainer"
  "tilefeed::codecs|tilefeed::loader|tilefeed::transport|tilefeed::trainer|MPI::MPI_CXX"
  "tilefeed::launch")
_check_components(launch "launch" "tilefeed::codecs|tilefeed::loader|tilefeed::launch"
  "tilefeed::transport|tilefeed::trainer|PkgConfig::ZMQ|MPI::MPI_CXX|PkgConfig::OPENBLAS|tilefeed::cuda_feed")
_check_components(cuda_feed "cuda_feed" "tilefeed::codecs|tilefeed::loader|tilefeed::cuda_feed"
  "tilefeed::cuda|tilefeed::launch|tilefeed::transport|tilefeed::trainer|CUDA::cudart")

# The installed components list: one targets file per component, cuda's only when built.
set(_installed codecs loader cuda_feed launch transport trainer)
set(_all_targets "tilefeed::codecs|tilefeed::loader|tilefeed::cuda_feed|tilefeed::launch|tilefeed::transport|tilefeed::trainer")
if(CUDA)
  list(APPEND _installed cuda)
  string(APPEND _all_targets "|tilefeed::cuda|CUDA::cudart")
endif()
file(GLOB _targets_files RELATIVE "${_prefix}"
     "${_prefix}/lib*/cmake/tilefeed/tilefeed-*-targets.cmake")
string(REGEX REPLACE "[^;]*tilefeed-([a-z_]+)-targets.cmake" "\\1" _found "${_targets_files}")
list(SORT _found)
set(_expected ${_installed})
list(SORT _expected)
if(NOT _found STREQUAL _expected)
  message(FATAL_ERROR "install_consumer: installed components ${_found}, expected ${_expected}")
endif()
if(CUDA AND NOT EXISTS "${_prefix}/include/tilefeed/cuda/device.h")
  message(FATAL_ERROR "install_consumer: tilefeed/cuda/device.h is not installed")
elseif(NOT CUDA AND EXISTS "${_prefix}/include/tilefeed/cuda/device.h")
  message(FATAL_ERROR "install_consumer: tilefeed/cuda/device.h installed without tilefeed::cuda")
endif()
message(STATUS "installed components: ${_found}")
_check_components(all "" "${_all_targets}" "")
if(CUDA)
  _check_components(cuda "cuda"
    "tilefeed::codecs|tilefeed::loader|tilefeed::cuda_feed|tilefeed::cuda|CUDA::cudart"
    "tilefeed::launch|tilefeed::transport|tilefeed::trainer")
else()
  execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/components"
                  -B "${WORK_DIR}/components-cuda" ${_common_args} "-DTILEFEED_COMPONENTS=cuda"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(_rc EQUAL 0 OR NOT _err MATCHES "tilefeed component 'cuda' was not built")
    message(FATAL_ERROR "install_consumer: COMPONENTS cuda without CUDA gave rc ${_rc} and:\n${_out}\n${_err}")
  endif()
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/components"
                -B "${WORK_DIR}/components-unknown" ${_common_args}
                "-DTILEFEED_COMPONENTS=loader|tensorflow"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(_rc EQUAL 0 OR NOT _err MATCHES "tilefeed has no component 'tensorflow'; its components are")
  message(FATAL_ERROR "install_consumer: COMPONENTS tensorflow gave rc ${_rc} and:\n${_out}\n${_err}")
endif()
message(STATUS "find_package(tilefeed COMPONENTS loader tensorflow) fails: tilefeed has no "
               "component 'tensorflow'")

# Configures, builds and runs the consumer project `name` and its executables `ARGN`, with
# the extra configure arguments in the caller's _consumer_args.
function(_check_consumer name)
  set(_build "${WORK_DIR}/${name}")
  _run_step("configure ${name}" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/tests/install/${name}"
    -B "${_build}" ${_common_args} "-DTILEFEED_EXAMPLES_DIR=${SOURCE_DIR}/examples"
    "-DWITH_CUDA=${CUDA}" ${_consumer_args})
  _run_step("build ${name}" "${CMAKE_COMMAND}" --build "${_build}" ${_config_args})
  foreach(_program IN LISTS ARGN)
    set(_exe "${_build}/${_program}")
    if(CONFIG AND EXISTS "${_build}/${CONFIG}/${_program}")
      set(_exe "${_build}/${CONFIG}/${_program}")  # multi-config generators
    endif()
    _run_step("run ${_program}" ${_run_env} "${_exe}")
    message(STATUS "${_program} says:\n${_step_output}")
  endforeach()
endfunction()
# A loader-only project needs none of the transport's or the trainer's libraries: with MPI,
# ZeroMQ, cppzmq and OpenBLAS made unfindable it still configures, builds and runs, and the
# package looked for none of them (no cache entry of theirs in the consumer's tree).
set(_consumer_args -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_ZeroMQ=ON
    -DCMAKE_DISABLE_FIND_PACKAGE_cppzmq=ON -DCMAKE_DISABLE_FIND_PACKAGE_OpenBLAS=ON)
_check_consumer(consumer consumer custom_source)
set(_consumer_args)
file(STRINGS "${WORK_DIR}/consumer/CMakeCache.txt" _looked_for
     REGEX "^(MPI|ZMQ|ZeroMQ|cppzmq|OPENBLAS|OpenBLAS)_[A-Za-z_]*:")
if(_looked_for)
  message(FATAL_ERROR "install_consumer: COMPONENTS loader looked for the transport's or the "
                      "trainer's libraries:\n${_looked_for}")
endif()
_check_consumer(trainer_consumer trainer_consumer)
if(CUDA)
  _check_consumer(cuda_consumer cuda_feed_consumer cuda_consumer)
else()
  _check_consumer(cuda_consumer cuda_feed_consumer)
endif()
