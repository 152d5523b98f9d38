# QEMU's MPS2 AN386 (Cortex-M4F): what a program for this board links.
#
# fedrt::board is an object library, so its vector table and handlers reach
# every program that links it (a static archive member nobody references
# would be dropped). Programs link it and get the linker script.
set(FEDRT_BOARD_PORT ${CMAKE_CURRENT_LIST_DIR}/port_mps2_an386.cc)
add_library(fedrt_board OBJECT ${CMAKE_CURRENT_LIST_DIR}/startup.c)
add_library(fedrt::board ALIAS fedrt_board)
target_include_directories(fedrt_board PUBLIC ${CMAKE_CURRENT_LIST_DIR})
# -nostartfiles: startup.c is the whole start-up (newlib's crt0 would be a
# second, unused one).
target_link_options(fedrt_board INTERFACE
  -T${CMAKE_CURRENT_LIST_DIR}/mps2-an386.ld -nostartfiles)
fedrt_target_defaults(fedrt_board)
# The start-up code and newlib's system calls (_sbrk, _write, _init, _fini...)
# are called from the C library, which is not LTO bytecode: kept a plain
# object, so link-time optimization cannot drop them before libc asks.
set_property(TARGET fedrt_board PROPERTY INTERPROCEDURAL_OPTIMIZATION OFF)
