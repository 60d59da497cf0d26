# find_package / pkg-config wrappers that fail with the Debian package to install. The imported
# targets are global: a component folder finds its own libraries, and the tests and tools
# (other folders) link them too.
macro(tilefeed_require_package name debian_packages)
  find_package(${name} ${ARGN} QUIET GLOBAL)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR
      "tilefeed needs ${name}; on Debian 12: apt-get install ${debian_packages}")
  endif()
endmacro()

macro(tilefeed_require_pkgconfig prefix module debian_packages)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR
      "tilefeed needs ${module} (pkg-config); on Debian 12: apt-get install ${debian_packages}")
  endif()
endmacro()
