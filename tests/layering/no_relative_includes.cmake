# Fails on any `#include "../...` in the library's sources (core/, comm/, gpu/, capi/): a
# relative include reaches a header of another layer without the include path, which is
# what the layering is enforced by (cmake/layers.cmake).
#   cmake -DROOT=<source dir> -P no_relative_includes.cmake
file(GLOB_RECURSE sources
  ${ROOT}/core/*.hpp ${ROOT}/core/*.cpp ${ROOT}/core/*.h
  ${ROOT}/comm/*.hpp ${ROOT}/comm/*.cpp ${ROOT}/comm/*.h
  ${ROOT}/gpu/*.hpp ${ROOT}/gpu/*.cpp ${ROOT}/gpu/*.h ${ROOT}/gpu/*.cu
  ${ROOT}/capi/*.hpp ${ROOT}/capi/*.cpp ${ROOT}/capi/*.h)
set(bad "")
foreach(f ${sources})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]\\.\\./")
  foreach(l ${lines})
    file(RELATIVE_PATH rel ${ROOT} ${f})
    string(APPEND bad "  ${rel}: ${l}\n")
  endforeach()
endforeach()
list(LENGTH sources n)
if(bad)
  message(FATAL_ERROR "relative includes that bypass the layers (include other layers as \"<layer>/<file>.hpp\"):\n${bad}")
endif()
message(STATUS "OK: no relative include in ${n} library sources")
