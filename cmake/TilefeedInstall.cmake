# Installs headers, libraries and a CMake package so that a user's project can write
#   find_package(tilefeed REQUIRED)
#   target_link_libraries(app PRIVATE tilefeed::loader)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tilefeed_codecs tilefeed_loader tilefeed_transport tilefeed_trainer
        EXPORT tilefeedTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(_dir codecs loader transport trainer)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/tilefeed/${_dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilefeed/${_dir}
          FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE)
endforeach()
install(EXPORT tilefeedTargets NAMESPACE tilefeed::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tilefeedConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
              ${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
