# axle's layers as build targets. src/LAYERS names the layers, lowest first, and the paths
# each owns; here every src/**/*.cpp goes to the object library of the layer owning the
# longest prefix of its path (axle_core, axle_ops, ...), each layer's target links the
# layer below it (one direction only), and AXLE_LAYER_OBJECTS collects every layer's
# objects for the one library that is installed, libaxle. A file moved to another
# directory lands in that directory's layer at the next configure.
#
# Sets AXLE_LAYERS (the layer names, lowest first) and AXLE_LAYER_OBJECTS.
# Usage requirements every layer needs (include paths, third-party headers) come from
# the interface target `axle_build`, which must exist before this file is included.

set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/LAYERS)
file(STRINGS ${CMAKE_SOURCE_DIR}/src/LAYERS _axle_layer_lines)
set(AXLE_LAYERS "")
set(_axle_owned "")  # "prefix|layer" pairs
foreach(_line IN LISTS _axle_layer_lines)
  string(REGEX REPLACE "#.*" "" _line "${_line}")
  string(STRIP "${_line}" _line)
  if(_line STREQUAL "")
    continue()
  endif()
  separate_arguments(_words UNIX_COMMAND "${_line}")
  list(POP_FRONT _words _name)
  if(_name MATCHES "^(allow|third-party)")  # exceptions and third-party rules: the layering test's business
    continue()
  endif()
  list(APPEND AXLE_LAYERS ${_name})
  set(_axle_srcs_${_name} "")
  foreach(_path IN LISTS _words)
    list(APPEND _axle_owned "${_path}|${_name}")
  endforeach()
endforeach()

file(GLOB_RECURSE _axle_all_srcs CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/src/*.cpp)
foreach(_src IN LISTS _axle_all_srcs)
  set(_best_len 0)
  set(_best "")
  foreach(_pair IN LISTS _axle_owned)
    string(REPLACE "|" ";" _pair "${_pair}")
    list(GET _pair 0 _prefix)
    list(GET _pair 1 _layer)
    string(LENGTH "${_prefix}" _len)
    string(SUBSTRING "${_src}" 0 ${_len} _head)
    if(_head STREQUAL _prefix AND _len GREATER _best_len)
      set(_best_len ${_len})
      set(_best ${_layer})
    endif()
  endforeach()
  if(_best STREQUAL "")
    message(FATAL_ERROR "${_src}: no layer owns this file; give its directory a line in src/LAYERS")
  endif()
  list(APPEND _axle_srcs_${_best} ${CMAKE_SOURCE_DIR}/${_src})
endforeach()

set(AXLE_LAYER_OBJECTS "")
set(_axle_below axle_build)
foreach(_layer IN LISTS AXLE_LAYERS)
  if(_axle_srcs_${_layer})
    add_library(axle_${_layer} OBJECT ${_axle_srcs_${_layer}})
    set_target_properties(axle_${_layer} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_link_libraries(axle_${_layer} PUBLIC ${_axle_below})
    list(APPEND AXLE_LAYER_OBJECTS $<TARGET_OBJECTS:axle_${_layer}>)
  else()  # headers only: still a link in the chain
    add_library(axle_${_layer} INTERFACE)
    target_link_libraries(axle_${_layer} INTERFACE ${_axle_below})
  endif()
  set(_axle_below axle_${_layer})
endforeach()
