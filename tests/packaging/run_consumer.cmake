# cmake -P driver: (find_package mode) installs the built project into a private prefix,
# checks pkg-config, then configures, builds and runs the consumer project against it;
# (add_subdirectory mode, LIMITCOUNTER_SOURCE_DIR set) builds the consumer with the
# sources added as a subdirectory.
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(configure_args -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)

if(LIMITCOUNTER_SOURCE_DIR)
  run(${CMAKE_COMMAND} ${configure_args} -DLIMITCOUNTER_SOURCE_DIR=${LIMITCOUNTER_SOURCE_DIR})
else()
  set(prefix "${WORK_DIR}/prefix")
  run(${CMAKE_COMMAND} --install "${PROJECT_BINARY_DIR}" --prefix "${prefix}")
  file(GLOB_RECURSE pc_files "${prefix}/*/limitcounter.pc")
  if(NOT pc_files)
    message(FATAL_ERROR "limitcounter.pc was not installed under ${prefix}")
  endif()
  list(GET pc_files 0 pc_file)
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  run(pkg-config --cflags --libs --static limitcounter)
  if(NOT last_output MATCHES "-llimitcounter" OR NOT last_output MATCHES "-lhiredis")
    message(FATAL_ERROR "pkg-config gave: ${last_output}")
  endif()
  run(${CMAKE_COMMAND} ${configure_args} -DCMAKE_PREFIX_PATH=${prefix})
endif()
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build" -j2)
run("${WORK_DIR}/build/consumer")
message(STATUS "${last_output}")
