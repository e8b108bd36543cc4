# cmake -P driver of the packaging tests. No Redis server is needed.
#
# MODE=find_package: installs the already built project (LIMITCOUNTER_BINARY_DIR) into a
#   private prefix under WORK_DIR, checks the installed files, checks limitcounter.pc with
#   pkg-config (and compiles and runs the consumer with its flags alone), then configures,
#   builds and runs the find_package consumer with CMAKE_PREFIX_PATH=<prefix>, and checks
#   that a version of another major is refused.
# MODE=add_subdirectory: configures, builds and runs the add_subdirectory consumer against
#   the sources in LIMITCOUNTER_SOURCE_DIR.
#
# Other inputs: CONSUMER_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX, CONFIG, and for
# find_package PROJECT_VERSION and PKG_CONFIG.
cmake_minimum_required(VERSION 3.25)

foreach(var MODE CONSUMER_DIR WORK_DIR GENERATOR CXX CONFIG)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()

# run(<command...>): runs it, fails the test with its output if it fails; leaves its
# standard output in `run_output`.
function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "$ ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${shown}\n--- stdout\n${out}\n--- stderr\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

# run_program(<path> [env...]): runs a consumer program, prints its output.
function(run_program program)
  run(${CMAKE_COMMAND} -E env ${ARGN} "${program}")
  message(STATUS "${run_output}")
endfunction()

# The executable a consumer build produced (single- or multi-config generator).
function(find_executable out build_dir name)
  foreach(candidate "${build_dir}/${name}" "${build_dir}/${CONFIG}/${name}")
    if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
      set(${out} "${candidate}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR "${name} was not built under ${build_dir}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Only what a consumer would choose itself: generator, compiler, build type. Never our
# warning or sanitizer flags.
set(consumer_build "${WORK_DIR}/build")
set(configure_args -S "${CONSUMER_DIR}" -B "${consumer_build}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_BUILD_TYPE=${CONFIG}")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
get_filename_component(consumer_name "${CONSUMER_DIR}" NAME)

if(MODE STREQUAL "find_package")
  foreach(var LIMITCOUNTER_BINARY_DIR PROJECT_VERSION)
    if(NOT ${var})
      message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required in find_package mode")
    endif()
  endforeach()
  set(prefix "${WORK_DIR}/prefix")
  run(${CMAKE_COMMAND} --install "${LIMITCOUNTER_BINARY_DIR}" --prefix "${prefix}" --config "${CONFIG}")

  # What must be there, wherever GNUInstallDirs put the libdir.
  file(GLOB_RECURSE config_files "${prefix}/*/cmake/limitcounter/limitcounterConfig.cmake")
  file(GLOB_RECURSE pc_files "${prefix}/*/pkgconfig/limitcounter.pc")
  if(NOT EXISTS "${prefix}/include/limitcounter/limitcounter.hpp")
    message(FATAL_ERROR "include/limitcounter/limitcounter.hpp was not installed under ${prefix}")
  endif()
  if(NOT config_files)
    message(FATAL_ERROR "limitcounterConfig.cmake was not installed under ${prefix}")
  endif()
  list(GET config_files 0 config_file)
  get_filename_component(config_dir "${config_file}" DIRECTORY)
  foreach(file limitcounterConfigVersion.cmake limitcounterTargets.cmake FindHiredis.cmake)
    if(NOT EXISTS "${config_dir}/${file}")
      message(FATAL_ERROR "${file} was not installed beside limitcounterConfig.cmake in ${config_dir}")
    endif()
  endforeach()
  if(NOT pc_files)
    message(FATAL_ERROR "limitcounter.pc was not installed under ${prefix}")
  endif()

  # pkg-config, as a Makefile-based consumer would use it.
  if(NOT PKG_CONFIG)
    message(FATAL_ERROR "pkg-config was not found (install the pkg-config package)")
  endif()
  list(GET pc_files 0 pc_file)
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  run("${PKG_CONFIG}" --cflags --libs limitcounter)
  set(pc_flags "${run_output}")
  message(STATUS "pkg-config --cflags --libs limitcounter: ${pc_flags}")
  string(FIND "${pc_flags}" "-llimitcounter" lib_at)
  if(lib_at EQUAL -1)
    message(FATAL_ERROR "pkg-config --libs does not name -llimitcounter: ${pc_flags}")
  endif()
  # The file is relocatable: its directories must resolve into this prefix.
  foreach(variable includedir libdir)
    run("${PKG_CONFIG}" --variable=${variable} limitcounter)
    string(STRIP "${run_output}" pc_${variable})
    get_filename_component(pc_${variable} "${pc_${variable}}" ABSOLUTE)
    string(FIND "${pc_${variable}}" "${prefix}/" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "pkg-config's ${variable} ${pc_${variable}} is not inside ${prefix}")
    endif()
  endforeach()
  if(NOT EXISTS "${pc_includedir}/limitcounter/limitcounter.hpp")
    message(FATAL_ERROR "pkg-config's includedir ${pc_includedir} has no limitcounter/limitcounter.hpp")
  endif()
  run("${PKG_CONFIG}" --modversion limitcounter)
  string(STRIP "${run_output}" pc_version)
  if(NOT pc_version STREQUAL PROJECT_VERSION)
    message(FATAL_ERROR "pkg-config says version ${pc_version}, the project is ${PROJECT_VERSION}")
  endif()
  # --static adds the private dependencies of a static library (nothing for a shared one).
  run("${PKG_CONFIG}" --cflags --libs --static limitcounter)
  string(STRIP "${run_output}" pc_static_flags)
  message(STATUS "pkg-config --cflags --libs --static limitcounter: ${pc_static_flags}")
  file(GLOB static_library "${pc_libdir}/liblimitcounter.a")
  if(static_library)
    foreach(dependency -lhiredis -lfmt -ldate-tz)
      string(FIND "${pc_static_flags}" "${dependency}" at)
      if(at EQUAL -1)
        message(FATAL_ERROR "${dependency} (a static library's dependency) is missing from: ${pc_static_flags}")
      endif()
    endforeach()
  endif()
  separate_arguments(pc_static_args UNIX_COMMAND "${pc_static_flags}")
  run("${CXX}" -std=c++17 "${CONSUMER_DIR}/main.cpp" -o "${WORK_DIR}/pkg_config_consumer"
      ${pc_static_args})
  run_program("${WORK_DIR}/pkg_config_consumer" "LD_LIBRARY_PATH=${pc_libdir}")

  # CMake: find_package(limitcounter <this version>).
  run(${CMAKE_COMMAND} ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}"
      "-DLIMITCOUNTER_VERSION_REQUIRED=${PROJECT_VERSION}")
  file(STRINGS "${consumer_build}/CMakeCache.txt" found_dir REGEX "^limitcounter_DIR:")
  string(REGEX REPLACE "^[^=]*=" "" found_dir "${found_dir}")
  if(NOT found_dir STREQUAL config_dir)
    message(FATAL_ERROR "the consumer found limitcounter in ${found_dir}, not in ${config_dir}")
  endif()

  # SameMajorVersion: the next major version must be refused.
  string(REGEX MATCH "^[0-9]+" major "${PROJECT_VERSION}")
  math(EXPR next_major "${major} + 1")
  execute_process(
    COMMAND ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build-next-major" -G "${GENERATOR}"
            "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}"
            "-DLIMITCOUNTER_VERSION_REQUIRED=${next_major}.0"
    RESULT_VARIABLE result OUTPUT_QUIET ERROR_QUIET)
  if(result EQUAL 0)
    message(FATAL_ERROR "find_package(limitcounter ${next_major}.0) accepted version ${PROJECT_VERSION}")
  endif()
elseif(MODE STREQUAL "add_subdirectory")
  if(NOT LIMITCOUNTER_SOURCE_DIR)
    message(FATAL_ERROR "run_consumer.cmake: -DLIMITCOUNTER_SOURCE_DIR=... is required in add_subdirectory mode")
  endif()
  run(${CMAKE_COMMAND} ${configure_args} "-DLIMITCOUNTER_SOURCE_DIR=${LIMITCOUNTER_SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE ${MODE}")
endif()

run(${CMAKE_COMMAND} --build "${consumer_build}" --config "${CONFIG}" -j2)
find_executable(program "${consumer_build}" "${consumer_name}")
run_program("${program}")
