# install(): headers, library, exported targets (namespace limitcounter::), the package
# config with its version file, our FindHiredis.cmake beside it, and limitcounter.pc.
include(CMakePackageConfigHelpers)

set(LIMITCOUNTER_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/limitcounter")

install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/limitcounter"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.hpp")
install(TARGETS limitcounter EXPORT limitcounterTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT limitcounterTargets NAMESPACE limitcounter:: DESTINATION "${LIMITCOUNTER_CMAKE_DIR}")

configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/limitcounterConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/limitcounterConfig.cmake" INSTALL_DESTINATION "${LIMITCOUNTER_CMAKE_DIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/limitcounterConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES "${PROJECT_BINARY_DIR}/limitcounterConfig.cmake"
              "${PROJECT_BINARY_DIR}/limitcounterConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/FindHiredis.cmake"
        DESTINATION "${LIMITCOUNTER_CMAKE_DIR}")

# pkg-config: a static library needs its dependencies on the link line too.
get_target_property(LIMITCOUNTER_TYPE limitcounter TYPE)
if(LIMITCOUNTER_TYPE STREQUAL "STATIC_LIBRARY")
  set(LIMITCOUNTER_PC_LIBS_PRIVATE "-lhiredis -lfmt -ldate-tz -pthread")
else()
  set(LIMITCOUNTER_PC_LIBS_PRIVATE "-pthread")
endif()
configure_file("${PROJECT_SOURCE_DIR}/cmake/limitcounter.pc.in" "${PROJECT_BINARY_DIR}/limitcounter.pc" @ONLY)
install(FILES "${PROJECT_BINARY_DIR}/limitcounter.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
