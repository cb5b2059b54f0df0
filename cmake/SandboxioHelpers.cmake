# Warnings as errors on every target of ours (never on third-party sources such as llhttp).
function(sandboxio_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wcast-qual -Wformat=2 -Wimplicit-fallthrough)
  if(SANDBOXIO_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# Declares one of the installed libraries: its public headers live in ${include_dir}/sandboxio.
# Register libraries in dependency order (the engine first); pkg-config links them reversed.
function(sandboxio_public_library target include_dir)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${include_dir}>
                                              $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  sandboxio_warnings(${target})
  set_property(GLOBAL APPEND PROPERTY SANDBOXIO_LIBS ${target})
  set_property(GLOBAL APPEND PROPERTY SANDBOXIO_HEADER_DIRS ${include_dir})
endfunction()
