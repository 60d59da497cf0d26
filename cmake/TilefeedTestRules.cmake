# How tilefeed's ctest entries are registered (the tiers are described in tests/CMakeLists.txt
# and README.md, "Tests").

# tilefeed_pytest(FOLDER PREFIX TIMEOUT seconds LABELS l... [ENVIRONMENT VAR=value...]): every
# FOLDER/test_*.py is its own ctest entry, PREFIX_<file name without .py>, so that `ctest -j`
# spreads them and a failure names its file. A new test file needs no registration (the
# glob is redone at build time). A file that needs more labels than LABELS gets them after
# this call: set_property(TEST PREFIX_test_x APPEND PROPERTY LABELS slow).
function(tilefeed_pytest folder prefix)
  cmake_parse_arguments(arg "" "TIMEOUT" "LABELS;ENVIRONMENT" ${ARGN})
  file(GLOB files CONFIGURE_DEPENDS "${folder}/test_*.py")
  list(SORT files)
  foreach(file IN LISTS files)
    get_filename_component(name "${file}" NAME_WE)
    # `python3 -m pytest` fails ("No module named pytest") when pytest is missing.
    add_test(NAME ${prefix}_${name}
      COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider "${file}")
    set_tests_properties(${prefix}_${name} PROPERTIES TIMEOUT ${arg_TIMEOUT}
      LABELS "${arg_LABELS}" ENVIRONMENT "${arg_ENVIRONMENT}")
  endforeach()
endfunction()

# tilefeed_check_tests(): at the end of a CMakeLists.txt that adds tests, refuses (at configure
# time) an add_test entry of that folder without LABELS, or with PASS_REGULAR_EXPRESSION,
# which makes ctest ignore the exit code (wrap the command in tests/support/pass_if.sh), and
# turns LeakSanitizer off for the entries labelled mpi (below). GoogleTest entries are labelled by tilefeed_gtest (tests/CMakeLists.txt).
function(tilefeed_check_tests)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} LABELS labels)
    if(NOT labels)
      message(FATAL_ERROR "ctest entry ${test} has no LABELS: give it one or more of unit, "
                          "process, mpi, network, slow, tsan, python (tests/CMakeLists.txt)")
    endif()
    get_test_property(${test} PASS_REGULAR_EXPRESSION pass)
    if(pass)
      message(FATAL_ERROR "ctest entry ${test} has PASS_REGULAR_EXPRESSION, which makes "
                          "ctest ignore its exit code: run it as "
                          "tests/support/pass_if.sh REGEX COMMAND...")
    endif()
    # OpenMPI leaks by design in MPI_Init/MPI_Finalize (libmpi's op tables, and plugins it
    # unloads at finalize, which LeakSanitizer cannot even name). Under ASan, a test
    # labelled mpi keeps every other check but not leak detection: the label decides, so
    # a new MPI test cannot be left off a list.
    if("mpi" IN_LIST labels)
      set_property(TEST ${test} APPEND PROPERTY ENVIRONMENT
                   "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1" "LSAN_OPTIONS=detect_leaks=0")
    endif()
  endforeach()
endfunction()
