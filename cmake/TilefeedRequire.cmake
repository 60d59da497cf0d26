# find_package / pkg-config wrappers that fail with the Debian package to install.
macro(tilefeed_require_package name debian_packages)
  find_package(${name} ${ARGN} QUIET)
  if(NOT ${name}_FOUND)
    message(FATAL_ERROR
      "tilefeed needs ${name}; on Debian 12: apt-get install ${debian_packages}")
  endif()
endmacro()

macro(tilefeed_require_pkgconfig prefix module debian_packages)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR
      "tilefeed needs ${module} (pkg-config); on Debian 12: apt-get install ${debian_packages}")
  endif()
endmacro()
