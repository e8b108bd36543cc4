# cmake -P driver of the packaging tests. No Redis server is needed.
#
# MODE=find_package: installs the already built project (LIMITCOUNTER_BINARY_DIR) into a
#   private prefix under WORK_DIR, checks the installed files, checks limitcounter.pc with
#   pkg-config (and compiles and runs the consumer with the flags of a plain
#   `pkg-config --cflags --libs`, as a Makefile would), then configures, builds and runs the
#   find_package consumer with CMAKE_PREFIX_PATH=<prefix> asking for MAJOR.MINOR, and checks
#   that incompatible versions are refused (the next major; while 0.x, the next and the
#   previous minor). When the build made rules_file, the consumer also asks for that
#   component and runs its rules_file_consumer; when it made limitctl, bin/limitctl must be
#   installed.
# MODE=shared: first builds the library alone from LIMITCOUNTER_SOURCE_DIR with
#   BUILD_SHARED_LIBS=ON under WORK_DIR, then does all of find_package mode with it.
# MODE=add_subdirectory: configures, builds and runs the add_subdirectory consumer against
#   the sources in LIMITCOUNTER_SOURCE_DIR.
#
# Other inputs: CONSUMER_DIR, WORK_DIR, GENERATOR, MAKE_PROGRAM, CXX, CONFIG, PROJECT_VERSION
# (each consumer must report it), and for find_package PKG_CONFIG.
cmake_minimum_required(VERSION 3.22)

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
  set(run_output "${run_output}" PARENT_SCOPE)
endfunction()

# check_version(<output>): a consumer prints the version it linked: it must be this project's.
function(check_version output)
  if(PROJECT_VERSION AND NOT output MATCHES "limitcounter ${PROJECT_VERSION}\n")
    message(FATAL_ERROR "the consumer did not report limitcounter ${PROJECT_VERSION}:\n${output}")
  endif()
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

if(MODE STREQUAL "shared")
  # The library alone, shared, in the consumer's configuration (our warnings stay on: it is
  # our code).
  set(library_build "${WORK_DIR}/limitcounter-shared")
  set(library_args -S "${LIMITCOUNTER_SOURCE_DIR}" -B "${library_build}" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_BUILD_TYPE=${CONFIG}" -DBUILD_SHARED_LIBS=ON
      -DLIMITCOUNTER_BUILD_TESTS=OFF -DLIMITCOUNTER_BUILD_EXAMPLES=OFF -DLIMITCOUNTER_INSTALL=ON
      -DLIMITCOUNTER_LIMITCTL=OFF) # (limitctl's install: the find_package test of the main build)
  if(MAKE_PROGRAM)
    list(APPEND library_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
  endif()
  run(${CMAKE_COMMAND} ${library_args})
  run(${CMAKE_COMMAND} --build "${library_build}" --config "${CONFIG}" -j2)
  set(LIMITCOUNTER_BINARY_DIR "${library_build}")
  set(MODE find_package)
endif()

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
  foreach(header limitcounter.hpp version.hpp)
    if(NOT EXISTS "${prefix}/include/limitcounter/${header}")
      message(FATAL_ERROR "include/limitcounter/${header} was not installed under ${prefix}")
    endif()
  endforeach()
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
  # The optional parts the build made must be installed: rules_file's targets (the consumer
  # then asks for the component and uses it) and limitctl.
  foreach(option LIMITCOUNTER_RULES_FILE LIMITCOUNTER_LIMITCTL)
    file(STRINGS "${LIMITCOUNTER_BINARY_DIR}/CMakeCache.txt" line REGEX "^${option}:BOOL=")
    string(REGEX REPLACE "^[^=]*=" "" ${option} "${line}")
  endforeach()
  set(component_args)
  if(LIMITCOUNTER_RULES_FILE)
    if(NOT EXISTS "${config_dir}/limitcounterRulesFileTargets.cmake")
      message(FATAL_ERROR "rules_file was built, but limitcounterRulesFileTargets.cmake is not in ${config_dir}")
    endif()
    set(component_args -DWITH_RULES_FILE=ON)
  endif()
  if(LIMITCOUNTER_LIMITCTL)
    if(NOT EXISTS "${prefix}/bin/limitctl")
      message(FATAL_ERROR "limitctl was built, but ${prefix}/bin/limitctl was not installed")
    endif()
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
  # A plain --libs (no --static) must link the installed library as it is: a static one
  # names its dependencies in Libs, a shared one has them linked in and names none.
  file(GLOB static_library "${pc_libdir}/liblimitcounter.a")
  file(GLOB shared_library "${pc_libdir}/liblimitcounter.so")
  if(NOT static_library AND NOT shared_library)
    message(FATAL_ERROR "neither liblimitcounter.a nor liblimitcounter.so is in ${pc_libdir}")
  endif()
  foreach(dependency -lhiredis -lfmt -ldate-tz -lssl -lcrypto)
    string(FIND "${pc_flags}" "${dependency}" at)
    if(static_library AND at EQUAL -1)
      message(FATAL_ERROR "${dependency} (a static library's dependency) is missing from: ${pc_flags}")
    elseif(shared_library AND NOT at EQUAL -1)
      message(FATAL_ERROR "${dependency} is linked into the shared library, yet named in: ${pc_flags}")
    endif()
  endforeach()
  separate_arguments(pc_args UNIX_COMMAND "${pc_flags}")
  run("${CXX}" -std=c++17 "${CONSUMER_DIR}/main.cpp" -o "${WORK_DIR}/pkg_config_consumer" ${pc_args})
  run_program("${WORK_DIR}/pkg_config_consumer" "LD_LIBRARY_PATH=${pc_libdir}")
  check_version("${run_output}")

  # CMake: find_package(limitcounter MAJOR.MINOR), as an application would write it.
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" major_minor "${PROJECT_VERSION}")
  set(major "${CMAKE_MATCH_1}")
  set(minor "${CMAKE_MATCH_2}")
  run(${CMAKE_COMMAND} ${configure_args} "-DCMAKE_PREFIX_PATH=${prefix}"
      "-DLIMITCOUNTER_VERSION_REQUIRED=${major_minor}" ${component_args})
  file(STRINGS "${consumer_build}/CMakeCache.txt" found_dir REGEX "^limitcounter_DIR:")
  string(REGEX REPLACE "^[^=]*=" "" found_dir "${found_dir}")
  if(NOT found_dir STREQUAL config_dir)
    message(FATAL_ERROR "the consumer found limitcounter in ${found_dir}, not in ${config_dir}")
  endif()

  # Versions the installed one must not satisfy: the next major always; while the major is
  # 0 (SameMinorVersion, see LimitcounterInstall.cmake) also the next minor and the previous.
  math(EXPR next_major "${major} + 1")
  set(refused "${next_major}.0")
  if(major EQUAL 0)
    math(EXPR next_minor "${minor} + 1")
    list(APPEND refused "0.${next_minor}")
    if(minor GREATER 0)
      math(EXPR previous_minor "${minor} - 1")
      list(APPEND refused "0.${previous_minor}")
    endif()
  endif()
  foreach(version IN LISTS refused)
    execute_process(
      COMMAND ${CMAKE_COMMAND} -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build-${version}" -G "${GENERATOR}"
              "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_PREFIX_PATH=${prefix}"
              "-DLIMITCOUNTER_VERSION_REQUIRED=${version}"
      RESULT_VARIABLE result OUTPUT_QUIET ERROR_VARIABLE err)
    if(result EQUAL 0)
      message(FATAL_ERROR "find_package(limitcounter ${version}) accepted version ${PROJECT_VERSION}")
    endif()
    string(FIND "${err}" "version: ${PROJECT_VERSION}" named_at)
    if(named_at EQUAL -1)
      message(FATAL_ERROR "find_package(limitcounter ${version}) failed, but not for the version:\n${err}")
    endif()
    message(STATUS "find_package(limitcounter ${version}) refused ${PROJECT_VERSION}, as it must")
  endforeach()
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
check_version("${run_output}")
if(component_args)
  # find_package(limitcounter COMPONENTS rules_file) gave limitcounter::rules_file.
  find_executable(program "${consumer_build}" rules_file_consumer)
  # A shared liblimitcounter_rules_file needs liblimitcounter.so, and installed libraries
  # carry no RUNPATH: in this private prefix the loader needs its libdir (as a system
  # prefix's libdir is known to it).
  run_program("${program}" "LD_LIBRARY_PATH=${pc_libdir}")
  if(NOT run_output MATCHES "rules_from_yaml: 1 rule\n")
    message(FATAL_ERROR "rules_file_consumer did not read its rule:\n${run_output}")
  endif()
endif()
