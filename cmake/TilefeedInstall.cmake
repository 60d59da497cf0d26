# Installs headers, libraries, the tools (tools/CMakeLists.txt) and a CMake package with one
# component per library, so that a user's project can write
#   find_package(tilefeed REQUIRED COMPONENTS loader)
#   target_link_libraries(app PRIVATE tilefeed::loader)
# and needs only the loader's dependencies. Each component has its own export set and
# targets file (tilefeed-<component>-targets.cmake); tilefeedConfig.cmake includes those
# asked for and the ones they link. No COMPONENTS means all of them.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
# The components past the launcher that this build made (TILEFEED_BUILD_TRANSPORT, _TRAINER).
set(TILEFEED_BUILT_PAST_LOADER "")
foreach(_component IN ITEMS transport trainer)
  if(TARGET tilefeed_${_component})
    list(APPEND TILEFEED_BUILT_PAST_LOADER ${_component})
  endif()
endforeach()

# In link order: each links only components before it (tilefeedConfig.cmake.in repeats the
# graph for the consumer).
set(_tilefeed_components codecs loader launch ${TILEFEED_BUILT_PAST_LOADER})
foreach(_component IN LISTS _tilefeed_components)
  install(TARGETS tilefeed_${_component} EXPORT tilefeed-${_component}-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tilefeed/${_component}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilefeed/${_component})
  install(EXPORT tilefeed-${_component}-targets NAMESPACE tilefeed::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
endforeach()

# include/tilefeed/cuda holds the headers of two components: cuda_feed (plain C++, always
# built) and cuda (device.h, built only where CMake found CUDA: TILEFEED_CUDA). TILEFEED_PACKAGE_COMPONENTS, in link
# order, is what this build installs; the package config refuses the others by name.
set(TILEFEED_PACKAGE_COMPONENTS codecs loader cuda_feed)
set(_tilefeed_cuda_headers_cuda_feed convert.h feed.h)
set(_tilefeed_cuda_headers_cuda device.h)
if(TARGET tilefeed_cuda)
  list(APPEND TILEFEED_PACKAGE_COMPONENTS cuda)
endif()
foreach(_component IN ITEMS cuda_feed cuda)
  if(NOT TARGET tilefeed_${_component})
    continue()
  endif()
  install(TARGETS tilefeed_${_component} EXPORT tilefeed-${_component}-targets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  list(TRANSFORM _tilefeed_cuda_headers_${_component}
       PREPEND ${PROJECT_SOURCE_DIR}/include/tilefeed/cuda/ OUTPUT_VARIABLE _headers)
  install(FILES ${_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilefeed/cuda)
  if(_component STREQUAL "cuda_feed")
    # DeviceFeed takes a transport::BatchStream, whose header-only interface needs no ZeroMQ.
    install(FILES ${PROJECT_SOURCE_DIR}/include/tilefeed/transport/batch_stream.h
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilefeed/transport)
  endif()
  install(EXPORT tilefeed-${_component}-targets NAMESPACE tilefeed::
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
endforeach()
list(APPEND TILEFEED_PACKAGE_COMPONENTS launch ${TILEFEED_BUILT_PAST_LOADER})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tilefeedConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tilefeedConfig.cmake
              ${PROJECT_BINARY_DIR}/tilefeedConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tilefeed)
