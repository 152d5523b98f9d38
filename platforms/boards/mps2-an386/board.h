/* Board support for QEMU's MPS2 AN386 (Cortex-M4F): the few services a
 * fedrt program on this board needs beyond the platform port.
 *
 * Contract: startup.c runs before main() (FPU on, .data copied, .bss
 * zeroed, the stack painted, C++ constructors run) and passes main()'s return
 * value to board_exit(). Output and exit status go to the host through ARM
 * semihosting (QEMU -semihosting-config enable=on); on real hardware without
 * a debugger attached, semihosting calls would trap, so a product's board
 * file replaces these with its own UART or RTT.
 *
 * Ownership: nothing here allocates. Thread-safety: none; there is one thread
 * and the functions are not called from interrupts. */
#ifndef FEDRT_BOARD_MPS2_AN386_H_
#define FEDRT_BOARD_MPS2_AN386_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes bytes to the host's standard output (semihosting). */
void board_console_write(const char* bytes, size_t size);

/* Ends the program with `status` as QEMU's exit status (SYS_EXIT_EXTENDED). */
void board_exit(int status) __attribute__((noreturn));

/* Monotonic nanoseconds from the CMSDK timer 0 (25 MHz, 40 ns ticks),
 * extended to 64 bits; call it at least every 171 s. */
uint64_t board_now_ns(void);

/* Memory high-water marks: the stack bytes ever used (the startup paints
 * the stack with a pattern; this finds the deepest overwritten word) and the
 * heap bytes ever taken from _sbrk (newlib's malloc arena). */
size_t board_stack_high_water(void);
size_t board_stack_size(void);
size_t board_heap_high_water(void);

/* The stack of one call: board_stack_mark() paints the stack below the
 * caller's frame again and returns the bytes in use there; after the call,
 * board_stack_high_water() minus that mark is the deepest the call (and
 * anything it called) went. Interrupts in between count too. */
size_t board_stack_mark(void);

/* UART 0 (CMSDK APB UART at 0x40004000): QEMU connects it to a -serial
 * chardev, e.g. a TCP socket. board_uart_write blocks until every byte is
 * in the transmitter; board_uart_read returns the bytes available now
 * (at most `capacity`, possibly 0) without waiting. */
void board_uart_init(void);
void board_uart_write(const uint8_t* bytes, size_t size);
size_t board_uart_read(uint8_t* buffer, size_t capacity);

#ifdef __cplusplus
}
#endif

#endif /* FEDRT_BOARD_MPS2_AN386_H_ */
