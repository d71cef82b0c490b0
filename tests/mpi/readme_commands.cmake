# ctest mpi.readme: README.md's "Across processes: MPI" commands, as written, from a fresh
# install: the shell blocks marked `<!-- tested: tests/mpi/readme_commands.cmake ... -->`,
# run in order by bash in a scratch directory where `build` is this build tree and
# `examples`, `bindings` the source's, with PKG_CONFIG_PATH and LD_LIBRARY_PATH unset. The
# changes: a fresh scratch prefix in place of /opt/flowlane, and wrappers first on PATH for
# `mpirun` (as root, oversubscribed, unbound, bounded: --timeout) and `python3` (the one
# that has mpi4py).
#   cmake -DREADME=... -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=... -DMPIRUN=... -DPYTHON=... -DBASH=... -P readme_commands.cmake
foreach(var README BUILD_DIR SOURCE_DIR WORK_DIR MPIRUN BASH)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "readme_commands.cmake: -D${var}=... is required")
  endif()
endforeach()
file(READ "${README}" text)
string(REGEX MATCHALL "<!-- tested: tests/mpi/readme_commands\\.cmake[^\n]*-->\n```sh\n[^`]*```" blocks "${text}")
list(LENGTH blocks nblocks)
if(nblocks LESS 2)
  message(FATAL_ERROR "${README} has ${nblocks} shell blocks marked for tests/mpi/readme_commands.cmake, expected 2")
endif()
if(NOT PYTHON)  # no python3 with mpi4py: the C block only
  list(GET blocks 0 blocks)
  message(STATUS "no python3 with mpi4py: the Python block is not run")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
set(dir "${WORK_DIR}/readme")
set(prefix "${WORK_DIR}/prefix")
file(MAKE_DIRECTORY "${dir}/bin")
file(CREATE_LINK "${BUILD_DIR}" "${dir}/build" SYMBOLIC)
file(CREATE_LINK "${SOURCE_DIR}/examples" "${dir}/examples" SYMBOLIC)
file(CREATE_LINK "${SOURCE_DIR}/bindings" "${dir}/bindings" SYMBOLIC)
file(WRITE "${WORK_DIR}/mpirun" "#!/bin/sh\nexport OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
     "exec \"${MPIRUN}\" --oversubscribe --bind-to none --timeout 120 \"$@\"\n")
file(COPY "${WORK_DIR}/mpirun" DESTINATION "${dir}/bin" FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)
if(PYTHON)
  file(CREATE_LINK "${PYTHON}" "${dir}/bin/python3" SYMBOLIC)
endif()
set(script "set -x\n")
foreach(block IN LISTS blocks)
  string(REGEX REPLACE "^[^\n]*\n```sh\n" "" block "${block}")
  string(REGEX REPLACE "```$" "" block "${block}")
  string(REPLACE "/opt/flowlane" "${prefix}" block "${block}")
  string(APPEND script "${block}")
endforeach()
file(WRITE "${dir}/readme.sh" "${script}")
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PKG_CONFIG_PATH --unset=LD_LIBRARY_PATH --unset=FLOWLANE_LIBRARY
                        --unset=FLOWLANE_MPI_LIBRARY "PATH=${dir}/bin:$ENV{PATH}"
                        "${BASH}" -eu -c "cd '${dir}' && . ./readme.sh"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the README's MPI commands failed (${rc})")
endif()
if(NOT out MATCHES "weights match the sequential model bit for bit")
  message(FATAL_ERROR "dp_train built from the install did not say its weights match")
endif()
if(PYTHON AND NOT out MATCHES "mpi_dp: ok")
  message(FATAL_ERROR "the Python example did not say ok")
endif()
message(STATUS "the README's MPI commands: ${nblocks} blocks ran as written")
