# gpu.no_cuda_needed: libflowlane.so.0 of a CUDA build has no NEEDED entry for the CUDA
# runtime, the driver or NCCL (they are loaded at run time: gpu/runtime.hpp).
#   cmake -DREADELF=<readelf> -DLIB=<libflowlane.so.0> -P no_cuda_needed.cmake
execute_process(COMMAND ${READELF} -d ${LIB} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIB} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${out}")
if(NOT needed)
  message(FATAL_ERROR "readelf -d ${LIB} shows no NEEDED entry at all: not a shared library?")
endif()
foreach(n IN LISTS needed)
  if(n MATCHES "cudart|libcuda|nccl|cublas|nvrtc")
    message(FATAL_ERROR "${LIB} needs a CUDA library at load time: ${n}")
  endif()
endforeach()
message(STATUS "${LIB}: ${needed}")
