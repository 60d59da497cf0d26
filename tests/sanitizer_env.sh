# Sourced (POSIX sh) by run.sh and tests/stress.sh from the source root: the sanitizer
# runtimes' options for every ctest run of a sanitizer tree, so that a stress run sees what
# CI sees. Programs built without a sanitizer ignore them.
#   ASan: a report aborts (a core, not just an exit code); LeakSanitizer on, with the
#   suppressions of tests/lsan.supp (ctest entries that start MPI jobs turn leaks off
#   themselves: tests/CMakeLists.txt). UBSan: a stack with each report (and
#   -fno-sanitize-recover makes it fatal). TSan: the first race ends the test, and
#   tests/tsan.supp's libraries are not reported.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp"
