# Exported-symbol and SONAME check of the shared library (run with cmake -P).
#
#   cmake -DLIB=<libflowlane.so> -DLIST=<exported_symbols.txt> -DNM=<nm> -DREADELF=<readelf>
#         -DSONAME=libflowlane.so.0 -DVERSION_NODE=FLOWLANE_0 -P check_exports.cmake
#
# `nm -D --defined-only` must list exactly the functions in LIST (the FL_API functions of
# flowlane.h; check_header_symbols.py keeps LIST and the header in step), each as a text
# symbol bound to the version node of capi/flowlane.map, and nothing else: no C++ symbols,
# no libstdc++ or other library symbols leaking out. The same list holds with and without CUDA.
foreach(var LIB LIST NM READELF SONAME VERSION_NODE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "check_exports.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT EXISTS "${LIB}")
  message(FATAL_ERROR "check_exports.cmake: ${LIB} does not exist (build the flowlane target first)")
endif()

# --- exported symbols ---
execute_process(COMMAND "${NM}" -D --defined-only "${LIB}"
  OUTPUT_VARIABLE nm_out ERROR_VARIABLE nm_err RESULT_VARIABLE nm_rc)
if(NOT nm_rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${LIB} failed (${nm_rc}): ${nm_err}")
endif()
string(REPLACE "\n" ";" nm_lines "${nm_out}")
set(actual "")
set(problems "")
foreach(line IN LISTS nm_lines)
  string(STRIP "${line}" line)
  if(line STREQUAL "")
    continue()
  endif()
  # "<addr> <type> <name>[@@<version>]" ; undefined-address symbols have no address column.
  if(NOT line MATCHES "^([0-9a-fA-F]+ )?([A-Za-z]) ([^ @]+)(@@?([^ ]+))?$")
    list(APPEND problems "unparsed nm line: '${line}'")
    continue()
  endif()
  set(type "${CMAKE_MATCH_2}")
  set(name "${CMAKE_MATCH_3}")
  set(version "${CMAKE_MATCH_5}")
  if(type STREQUAL "A" AND name STREQUAL "${VERSION_NODE}")
    continue()  # the version node itself (FLOWLANE_0), not a symbol
  endif()
  list(APPEND actual "${name}")
  if(name MATCHES "^fl_")
    if(NOT type STREQUAL "T")
      list(APPEND problems "${name} has nm type '${type}', expected 'T' (a function)")
    endif()
    if(NOT version STREQUAL VERSION_NODE)
      list(APPEND problems "${name} is bound to version '${version}', expected '${VERSION_NODE}' (capi/flowlane.map)")
    endif()
  endif()
endforeach()
list(SORT actual)

file(STRINGS "${LIST}" expected REGEX "^[^#]")
set(expected_clean "")
foreach(e IN LISTS expected)
  string(STRIP "${e}" e)
  if(NOT e STREQUAL "")
    list(APPEND expected_clean "${e}")
  endif()
endforeach()
set(expected "${expected_clean}")
set(expected_sorted "${expected}")
list(SORT expected_sorted)
if(NOT expected STREQUAL expected_sorted)
  list(APPEND problems "${LIST} is not sorted")
endif()

set(missing "${expected}")
list(REMOVE_ITEM missing ${actual})
set(unexpected "${actual}")
list(REMOVE_ITEM unexpected ${expected})
list(LENGTH actual n_actual)
list(LENGTH expected n_expected)

if(missing OR unexpected)
  set(diff "--- ${LIST} (expected, ${n_expected} symbols)\n+++ nm -D --defined-only ${LIB} (${n_actual} symbols)\n")
  foreach(s IN LISTS missing)
    string(APPEND diff "-${s}    (declared in flowlane.h, not exported: not implemented, or hidden)\n")
  endforeach()
  foreach(s IN LISTS unexpected)
    string(APPEND diff "+${s}    (exported, but not in the list: leaks through capi/flowlane.map, or the list is stale)\n")
  endforeach()
  list(APPEND problems "exported symbols differ from ${LIST}:\n${diff}")
endif()

# --- SONAME ---
execute_process(COMMAND "${READELF}" -d "${LIB}"
  OUTPUT_VARIABLE re_out ERROR_VARIABLE re_err RESULT_VARIABLE re_rc)
if(NOT re_rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${LIB} failed (${re_rc}): ${re_err}")
endif()
if(re_out MATCHES "\\(SONAME\\)[^\n]*\\[([^]\n]*)\\]")
  set(soname "${CMAKE_MATCH_1}")
  if(NOT soname STREQUAL SONAME)
    list(APPEND problems "SONAME is '${soname}', expected '${SONAME}'")
  endif()
else()
  list(APPEND problems "${LIB} has no SONAME (expected '${SONAME}')")
endif()

if(problems)
  string(REPLACE ";" "\n" problems_text "${problems}")
  message(NOTICE "ABI check of ${LIB} failed:\n${problems_text}")
  message(FATAL_ERROR "ABI check failed (details above)")
endif()
message(STATUS "OK: ${n_actual} exported symbols match ${LIST}, all versioned ${VERSION_NODE}; SONAME ${soname}")
