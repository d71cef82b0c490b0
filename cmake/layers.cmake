# The library's layers, each an OBJECT library that sees only the layers below it.
#
#   base    core/base    errors, CPU and futex primitives, spin lock, allocation
#   sched   core/sched   the work-stealing pool, latch, parallel_for, task graphs, topology
#   engine  core/engine  lanes, streams, objects, instructions, dependency rules, waits
#   diag    core/diag    watchdog, state dump, traces
#   gpu     gpu          the CUDA device backend
#   comm    comm         collectives: the host backend and NCCL
#   capi    capi/src     every FL_API function and the handle tables
#
# Enforcement: a layer's sources include other layers as "<layer>/<file>.hpp", and the
# include path of a layer holds only the roots of itself and the layers below it. Each root
# is a directory of the build tree that contains one symbolic link, <layer> -> the layer's
# source directory, so "engine/engine.hpp" cannot be found from sched (an upward include
# fails to compile). tests/layering checks that it does.

set(FLOWLANE_LAYER_ROOT ${CMAKE_BINARY_DIR}/layers)

# flowlane_layer(<name> DIR <source dir> SOURCES <files...> [DEPS <targets...>])
function(flowlane_layer name)
  cmake_parse_arguments(L "" "DIR" "SOURCES;DEPS" ${ARGN})
  set(root ${FLOWLANE_LAYER_ROOT}/${name})
  file(MAKE_DIRECTORY ${root})
  if(NOT IS_SYMLINK ${root}/${name})
    file(CREATE_LINK ${L_DIR} ${root}/${name} SYMBOLIC)
  endif()
  add_library(fl_${name} OBJECT ${L_SOURCES})
  target_include_directories(fl_${name} PUBLIC ${root})
  target_link_libraries(fl_${name} PUBLIC ${L_DEPS})
  set_target_properties(fl_${name} PROPERTIES
    CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  set_property(GLOBAL APPEND PROPERTY FLOWLANE_LAYERS fl_${name})
endfunction()
