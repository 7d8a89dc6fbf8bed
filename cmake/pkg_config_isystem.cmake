# CMake 3.25's FindPkgConfig turns a module's `-isystem DIR` into an include directory of its
# imported target on the configure that runs pkg-config, but leaves it a compile option on every
# later configure (the values read back from the cache). The compile line of everything that links
# the target then changes after the first configure and ninja rebuilds it all: on Debian 12 libzmq's
# `-isystem /usr/include/mit-krb5` made the demo after the test command rebuild 63 of 177 steps.
# Applied to each pkg-config target, this makes every configure give what the first one gives
# (checked by tests/first_hour/reconfigure_test.sh).
function(d2k_pkg_config_isystem target)
  get_target_property(options ${target} INTERFACE_COMPILE_OPTIONS)
  if(NOT options)
    return()
  endif()
  set(kept)
  set(dirs)
  set(next_is_dir FALSE)
  foreach(option IN LISTS options)
    if(next_is_dir)
      list(APPEND dirs "${option}")
      set(next_is_dir FALSE)
    elseif(option STREQUAL "-isystem")
      set(next_is_dir TRUE)
    elseif(option MATCHES "^-isystem(.+)$")
      list(APPEND dirs "${CMAKE_MATCH_1}")
    else()
      list(APPEND kept "${option}")
    endif()
  endforeach()
  if(dirs)
    set_property(TARGET ${target} PROPERTY INTERFACE_COMPILE_OPTIONS "${kept}")
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${dirs}")
  endif()
endfunction()
