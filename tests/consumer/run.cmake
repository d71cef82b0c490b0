# ctest abi.consumer: install the build into a fresh prefix, then build and run a
# downstream program against that prefix twice — through the CMake package
# (find_package(flowlane 0.1 REQUIRED) + flowlane::flowlane) and through pkg-config —
# the two ways users consume an installed library. Both programs are run with
# LD_LIBRARY_PATH unset: what the user's build line produces must start as it is (the
# pkg-config one through the rpath that the installed flowlane.pc adds for a prefix the
# loader does not search). Run with cmake -P; variables:
#   BUILD_DIR      the flowlane build tree to install
#   CONSUMER_DIR   tests/consumer (the downstream project)
#   WORK_DIR       scratch directory (wiped first)
#   CONFIG         build configuration to install (Release, Debug, ...)
#   C_COMPILER     C compiler for the consumer (the one flowlane was configured with)
#   CXX_COMPILER   C++ compiler, and CXX_EXAMPLE a C++17 program using flowlane.hpp: built
#                  with the pkg-config line too (optional: that step is skipped without them)
#   GENERATOR      CMake generator for the consumer
#   EXTRA_FLAGS    compile+link flags the consumer needs (the sanitizer flags in sanitizer
#                  builds: a sanitized libflowlane needs its runtime in the executable)
#   PKG_CONFIG     pkg-config executable (empty: that half is skipped, with a note)
#   EXPECT_VERSION the project version, e.g. 0.1.0
#   READELF        readelf, to check the installed library
#   README         README.md, whose shell blocks marked `<!-- tested: abi.consumer -->` are run
#                  as written (step 4b), with BASH (both optional: the step is skipped without)
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR CONFIG C_COMPILER GENERATOR EXPECT_VERSION)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run.cmake: -D${var}=... is required")
  endif()
endforeach()

set(failures "")
function(step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(NOTICE "---- ${name} failed (${rc}): ${cmd}\n${out}${err}----")
    message(FATAL_ERROR "consumer test failed at: ${name}")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
separate_arguments(extra_flags UNIX_COMMAND "${EXTRA_FLAGS}")

# 1. Install exactly as a user would.
step("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" --config "${CONFIG}")

# 2. The installed tree: the public headers (C and C++) only, the library with its SONAME link, the
#    CMake package and the .pc file; no internal headers, no static archive.
file(GLOB_RECURSE installed RELATIVE "${prefix}" LIST_DIRECTORIES false "${prefix}/*")
list(SORT installed)
string(REPLACE ";" "\n  " installed_text "${installed}")
message(STATUS "installed into ${prefix}:\n  ${installed_text}")
set(libdir "")
foreach(f IN LISTS installed)
  if(f MATCHES "^(.*)/libflowlane\\.so\\.0$")
    set(libdir "${prefix}/${CMAKE_MATCH_1}")
  endif()
endforeach()
foreach(required "include/flowlane/flowlane.h" "include/flowlane/flowlane.hpp" "libflowlane.so" "libflowlane.so.0" "libflowlane.so.${EXPECT_VERSION}"
                 "cmake/flowlane/flowlaneConfig.cmake" "cmake/flowlane/flowlaneConfigVersion.cmake"
                 "cmake/flowlane/flowlaneTargets.cmake" "pkgconfig/flowlane.pc" "bin/flowlane-comm-analyze")
  string(REGEX REPLACE "([.+])" "\\\\\\1" re "${required}")
  if(NOT installed MATCHES "(^|;)([^;]*/)?${re}(;|$)")
    list(APPEND failures "not installed: ${required}")
  endif()
endforeach()
foreach(f IN LISTS installed)
  if(f MATCHES "^include/" AND NOT f MATCHES "^include/flowlane/flowlane(_mpi\\.h|\\.h|\\.hpp)$")
    list(APPEND failures "an internal file is installed as a public header: ${f}")
  endif()
  if(f MATCHES "\\.a$")
    list(APPEND failures "a static archive is installed: ${f}")
  endif()
endforeach()
# The analyzer runs as installed (a Python script of the standard library).
if(EXISTS "${prefix}/bin/flowlane-comm-analyze")
  step("run the installed flowlane-comm-analyze" "${prefix}/bin/flowlane-comm-analyze" --help)
  if(NOT step_output MATCHES "usage: flowlane-comm-analyze")
    list(APPEND failures "flowlane-comm-analyze --help printed no usage:\n${step_output}")
  endif()
endif()
if(libdir AND READELF)
  step("readelf installed library" "${READELF}" -d "${libdir}/libflowlane.so.0")
  if(step_output MATCHES "(RPATH|RUNPATH)[^\n]*${BUILD_DIR}")
    list(APPEND failures "the installed library still has an RPATH into the build tree")
  endif()
endif()
if(failures)
  string(REPLACE ";" "\n  " text "${failures}")
  message(FATAL_ERROR "installed tree is wrong:\n  ${text}")
endif()

# 3. CMake package: find_package(flowlane 0.1 REQUIRED), link flowlane::flowlane, run.
set(cbuild "${WORK_DIR}/cmake-build")
string(REPLACE ";" " " flags_str "${extra_flags}")
step("configure consumer" "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${cbuild}" -G "${GENERATOR}"
     "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
     "-DCMAKE_C_FLAGS=${flags_str}" "-DCMAKE_EXE_LINKER_FLAGS=${flags_str}"
     # Only the installed prefix may satisfy find_package: no package registry, no build tree.
     -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
if(NOT step_output MATCHES "found flowlane ${EXPECT_VERSION} in ${prefix}/")
  message(FATAL_ERROR "the consumer did not find flowlane ${EXPECT_VERSION} in ${prefix}:\n${step_output}")
endif()
step("build consumer" "${CMAKE_COMMAND}" --build "${cbuild}" --config "${CONFIG}")
file(GLOB_RECURSE exe LIST_DIRECTORIES false "${cbuild}/flowlane_consumer" "${cbuild}/*/flowlane_consumer")
list(GET exe 0 exe)
step("run consumer (CMake package)" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH "${exe}")
message(STATUS "CMake package: ${step_output}")

# A version the package does not satisfy (SameMajorVersion) must be refused.
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${CONSUMER_DIR}" -B "${WORK_DIR}/cmake-build-v1" -G "${GENERATOR}"
                "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_C_COMPILER=${C_COMPILER}" -DFLOWLANE_CONSUMER_REQUIRES=1.0
                -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "find_package(flowlane 1.0 REQUIRED) succeeded against ${EXPECT_VERSION}; "
                      "flowlaneConfigVersion.cmake should refuse another major version")
endif()
message(STATUS "find_package(flowlane 1.0) is refused, as it should be")

# 4. pkg-config: compile and link with exactly what flowlane.pc says, run.
if(NOT PKG_CONFIG)
  message(STATUS "pkg-config not found: the pkg-config half is skipped")
  return()
endif()
file(GLOB_RECURSE pc LIST_DIRECTORIES false "${prefix}/*/pkgconfig/flowlane.pc")
get_filename_component(pcdir "${pc}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} "${pcdir}")
set(ENV{PKG_CONFIG_LIBDIR} "${pcdir}")  # this prefix only, never a system flowlane
step("pkg-config --modversion" "${PKG_CONFIG}" --modversion flowlane)
string(STRIP "${step_output}" pc_version)
if(NOT pc_version STREQUAL EXPECT_VERSION)
  message(FATAL_ERROR "pkg-config reports version '${pc_version}', expected ${EXPECT_VERSION}")
endif()
step("pkg-config version check" "${PKG_CONFIG}" --exists "flowlane >= 0.1")
step("pkg-config --cflags --libs" "${PKG_CONFIG}" --cflags --libs flowlane)
string(STRIP "${step_output}" pc_flags)
message(STATUS "pkg-config --cflags --libs flowlane: ${pc_flags}")
separate_arguments(pc_args UNIX_COMMAND "${pc_flags}")
step("pkg-config --variable=libdir" "${PKG_CONFIG}" --variable=libdir flowlane)
string(STRIP "${step_output}" pc_libdir)
if(NOT pc_flags MATCHES "-Wl,-rpath,${pc_libdir}( |$)")
  message(FATAL_ERROR "flowlane.pc installed in ${prefix} (not a loader directory) should add "
                      "-Wl,-rpath,${pc_libdir} to Libs; pkg-config --libs says: ${pc_flags}")
endif()
# Exactly the README's line: the compiler, the source, and what pkg-config says.
step("compile consumer with pkg-config flags"
     "${C_COMPILER}" -std=c99 -Wall -Wextra -pedantic -Werror ${extra_flags} "${CONSUMER_DIR}/main.c"
     ${pc_args} -o "${WORK_DIR}/flowlane_consumer_pc")
step("run consumer (pkg-config)" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH "${WORK_DIR}/flowlane_consumer_pc")
message(STATUS "pkg-config: ${step_output}")

# 4b. The README's own commands, as written: the shell blocks of README.md marked
#     `<!-- tested: abi.consumer -->` (tests/docs/check_readmes.py checks that every shell
#     block names what runs it), run in order by bash in a scratch directory where `build`
#     is this build tree, `app.c` the consumer's main.c and `cc` this build's C compiler
#     (with EXTRA_FLAGS, which a sanitized library needs), with PKG_CONFIG_PATH,
#     PKG_CONFIG_LIBDIR and LD_LIBRARY_PATH unset. The one change: a fresh scratch prefix in
#     place of the README's /opt/flowlane.
if(README AND BASH)
  file(READ "${README}" readme_text)
  string(REGEX MATCHALL "<!-- tested: abi\\.consumer[^\n]*-->\n```sh\n[^`]*```" blocks "${readme_text}")
  list(LENGTH blocks nblocks)
  if(nblocks EQUAL 0)
    message(FATAL_ERROR "${README} has no shell block marked <!-- tested: abi.consumer -->")
  endif()
  set(rdir "${WORK_DIR}/readme")
  set(rprefix "${WORK_DIR}/readme-prefix")
  file(MAKE_DIRECTORY "${rdir}")
  file(CREATE_LINK "${BUILD_DIR}" "${rdir}/build" SYMBOLIC)
  configure_file("${CONSUMER_DIR}/main.c" "${rdir}/app.c" COPYONLY)
  string(REPLACE ";" " " flags_line "${extra_flags}")
  file(WRITE "${WORK_DIR}/cc" "#!/bin/sh\nexec \"${C_COMPILER}\" ${flags_line} \"$@\"\n")
  file(COPY "${WORK_DIR}/cc" DESTINATION "${rdir}/bin"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE)
  set(script "set -x\n")
  foreach(block IN LISTS blocks)
    string(REGEX REPLACE "^[^\n]*\n```sh\n" "" block "${block}")
    string(REGEX REPLACE "```$" "" block "${block}")
    string(REPLACE "/opt/flowlane" "${rprefix}" block "${block}")
    string(APPEND script "${block}")
  endforeach()
  file(WRITE "${rdir}/readme.sh" "${script}")
  step("the README's commands (${nblocks} blocks, ${rdir}/readme.sh)" "${CMAKE_COMMAND}" -E env
       --unset=PKG_CONFIG_PATH --unset=PKG_CONFIG_LIBDIR --unset=LD_LIBRARY_PATH
       "PATH=${rdir}/bin:$ENV{PATH}" "${BASH}" -eu -c "cd '${rdir}' && . ./readme.sh")
  if(NOT step_output MATCHES "consumer: flowlane ${EXPECT_VERSION}, instruction wrote 42")
    message(FATAL_ERROR "the README's commands did not build and run the program:\n${step_output}")
  endif()
  message(STATUS "README commands: ran ${nblocks} blocks as written")
elseif(README)
  message(STATUS "bash not found: the README's commands are not run")
endif()

# 5. The C++ header from the installed prefix: a C++17 program, the same pkg-config line.
if(NOT CXX_COMPILER OR NOT CXX_EXAMPLE)
  message(STATUS "no CXX_COMPILER/CXX_EXAMPLE: the C++ half is skipped")
  return()
endif()
step("compile the C++ example with pkg-config flags"
     "${CXX_COMPILER}" -std=c++17 -Wall -Wextra -pedantic -Werror ${extra_flags} "${CXX_EXAMPLE}"
     ${pc_args} -pthread -o "${WORK_DIR}/flowlane_consumer_cxx")
step("run the C++ example (pkg-config)" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH "${WORK_DIR}/flowlane_consumer_cxx")
if(NOT step_output MATCHES "in order")
  message(FATAL_ERROR "the C++ example built against the installed prefix printed:\n${step_output}")
endif()
message(STATUS "C++ header: ${step_output}")
