# comm.no_mpi_needed: libflowlane.so.0 has no NEEDED entry for an MPI library (MPI lives in
# the plugin libflowlane_mpi.so, which does need it: checked too, so the test cannot pass
# by looking at the wrong file).
#   cmake -DREADELF=<readelf> -DLIB=<libflowlane.so.0> -DPLUGIN=<libflowlane_mpi.so> -P no_mpi_needed.cmake
foreach(f LIB PLUGIN)
  execute_process(COMMAND ${READELF} -d ${${f}} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "readelf -d ${${f}} failed (${rc})")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed_${f} "${out}")
endforeach()
foreach(n IN LISTS needed_LIB)
  if(n MATCHES "libmpi|mpich|open-pal|open-rte|libpmix")
    message(FATAL_ERROR "${LIB} needs an MPI library at load time: ${n}")
  endif()
endforeach()
if(NOT needed_PLUGIN MATCHES "libmpi|mpich")
  message(FATAL_ERROR "${PLUGIN} does not need libmpi? ${needed_PLUGIN}")
endif()
message(STATUS "${LIB}: ${needed_LIB}")
