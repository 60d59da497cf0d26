# Installs headers, libraries, the tools (tools/CMakeLists.txt) and a CMake package with one
# component per library, so that a user's project can write
#   find_package(tilefeed REQUIRED COMPONENTS loader)
#   target_link_libraries(app PRIVATE tilefeed::loader)
# and needs only the loader's dependencies. Each component has its own export set and
# targets file (tilefeed-<component>-targets.cmake); tilefeedConfig.cmake includes those
# asked for and the ones they link. No COMPONENTS means all of them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# In link order: each links only components before it (tilefeedConfig.cmake.in repeats the
# graph for the consumer).
set(_tilefeed_components codecs loader launch transport trainer)
foreach(_component IN LISTS _tilefeed_components)
  install(TARGETS tilefeed_${_component} EXPORT tilefeed-${_component}-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tilefeed/${_component}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilefeed/${_component}
          FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE)
  install(EXPORT tilefeed-${_component}-targets NAMESPACE tilefeed::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
endforeach()

# A static library's PRIVATE dependencies are still on its consumers' link line
# ($<LINK_ONLY:...> in the exported targets), so the package must find them; a shared one's
# are not. The libraries are static unless BUILD_SHARED_LIBS is on; they are all built alike.
get_target_property(_tilefeed_library_type tilefeed_loader TYPE)
if(_tilefeed_library_type STREQUAL "STATIC_LIBRARY")
  set(TILEFEED_PACKAGE_STATIC ON)
else()
  set(TILEFEED_PACKAGE_STATIC OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tilefeedConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
              ${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
