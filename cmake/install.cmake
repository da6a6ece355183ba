# Install rules and package files: the headers, libmptrain.so with its soname links, a CMake package
# (mptrain-config.cmake exporting mptrain::mptrain, SameMajorVersion) and a pkg-config file.
# Everything installed is relocatable, so `cmake --install <build> --prefix <dir>` works anywhere.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MPTRAIN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/mptrain"
    CACHE STRING "Where mptrain-config.cmake is installed, relative to the prefix")
set(MPTRAIN_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig"
    CACHE STRING "Where mptrain.pc is installed, relative to the prefix")
mark_as_advanced(MPTRAIN_INSTALL_CMAKEDIR MPTRAIN_INSTALL_PKGCONFIGDIR)

# The target already carries $<INSTALL_INTERFACE:include>; name the include dir only if it moved.
set(MPTRAIN_INSTALL_INCLUDES)
if(NOT CMAKE_INSTALL_INCLUDEDIR STREQUAL "include")
  set(MPTRAIN_INSTALL_INCLUDES INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endif()
install(TARGETS mptrain
  EXPORT mptrain-targets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
  ${MPTRAIN_INSTALL_INCLUDES})

# The C API and the optional header-only C++ wrapper (and any public header added later).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mptrain
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT development
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

install(EXPORT mptrain-targets
  NAMESPACE mptrain::
  FILE mptrain-targets.cmake
  DESTINATION ${MPTRAIN_INSTALL_CMAKEDIR}
  COMPONENT development)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mptrain-config.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/mptrain-config.cmake
  INSTALL_DESTINATION ${MPTRAIN_INSTALL_CMAKEDIR})
# 0.x releases are compatible among themselves only as far as SameMajorVersion says; the soname
# carries the major version, so a major bump is the only way an ABI break ships.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/mptrain-config-version.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/cmake/mptrain-config.cmake
  ${PROJECT_BINARY_DIR}/cmake/mptrain-config-version.cmake
  DESTINATION ${MPTRAIN_INSTALL_CMAKEDIR}
  COMPONENT development)

# pkg-config: paths relative to the .pc file (${pcfiledir}) unless the install dirs are absolute,
# so that the prefix given to `cmake --install --prefix` is honoured.
if(IS_ABSOLUTE "${MPTRAIN_INSTALL_PKGCONFIGDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}"
   OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(MPTRAIN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(MPTRAIN_PC_LIBDIR "${CMAKE_INSTALL_FULL_LIBDIR}")
  set(MPTRAIN_PC_INCLUDEDIR "${CMAKE_INSTALL_FULL_INCLUDEDIR}")
else()
  file(RELATIVE_PATH MPTRAIN_PC_UP "/prefix/${MPTRAIN_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" MPTRAIN_PC_UP "${MPTRAIN_PC_UP}")
  set(MPTRAIN_PC_PREFIX "\${pcfiledir}/${MPTRAIN_PC_UP}")
  set(MPTRAIN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
  set(MPTRAIN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# What a static link would need; libmptrain.so itself records these as NEEDED entries.
set(MPTRAIN_PC_LIBS_PRIVATE "-lstdc++ -lm -lpthread")
if((MPTRAIN_HAVE_OPENBLAS OR MPTRAIN_WITH_CUDA) AND CMAKE_DL_LIBS)
  string(APPEND MPTRAIN_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")  # OpenBLAS and cuBLASLt are opened with dlopen
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/mptrain.pc.in ${PROJECT_BINARY_DIR}/cmake/mptrain.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/mptrain.pc
  DESTINATION ${MPTRAIN_INSTALL_PKGCONFIGDIR}
  COMPONENT development)
