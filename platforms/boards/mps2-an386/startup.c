/* Reset and fault handlers, the vector table and newlib's system calls for
 * QEMU's MPS2 AN386 (see board.h). Plain C, no CMSIS: the registers used are
 * few and named here. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "board.h"

extern uint32_t __stack_top, __stack_limit, __data_load, __data_start, __data_end, __bss_start, __bss_end;
extern char __heap_start, __heap_end;
extern void __libc_init_array(void);
extern int main(void);

#define STACK_PAINT 0xC5C5C5C5u
#define REG32(address) (*(volatile uint32_t*)(address))

/* ---- Semihosting (ARM DUI 0471, "Semihosting operations") ---------------- */
enum { kSysWrite0 = 0x04, kSysWrite = 0x05, kSysOpen = 0x01, kSysExitExtended = 0x20 };

static int semihost(int operation, const void* argument) {
  register int r0 __asm__("r0") = operation;
  register const void* r1 __asm__("r1") = argument;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

static int console_handle = -1;

void board_console_write(const char* bytes, size_t size) {
  if (console_handle < 0) {
    /* ":tt" opened for writing (mode 4) is the host's standard output. */
    const uint32_t open_args[3] = {(uint32_t)":tt", 4, 3};
    console_handle = semihost(kSysOpen, open_args);
  }
  const uint32_t args[3] = {(uint32_t)console_handle, (uint32_t)bytes, (uint32_t)size};
  semihost(kSysWrite, args);
}

void board_exit(int status) {
  /* ADP_Stopped_ApplicationExit with the status as QEMU's exit code. */
  const uint32_t args[2] = {0x20026u, (uint32_t)status};
  for (;;) semihost(kSysExitExtended, args);
}

/* ---- CMSDK APB timer 0: a free-running 32-bit down counter at 25 MHz ---- */
#define TIMER0 0x40000000u
static uint32_t timer_last;
static uint64_t timer_ticks;
static int timer_started;

uint64_t board_now_ns(void) {
  if (!timer_started) {
    REG32(TIMER0 + 0x8) = 0xFFFFFFFFu; /* RELOAD */
    REG32(TIMER0 + 0x4) = 0xFFFFFFFFu; /* VALUE */
    REG32(TIMER0 + 0x0) = 1u;          /* CTRL: enable */
    timer_last = 0xFFFFFFFFu;
    timer_started = 1;
  }
  const uint32_t now = REG32(TIMER0 + 0x4);
  timer_ticks += (uint32_t)(timer_last - now); /* counts down; wraps modulo 2^32 */
  timer_last = now;
  return timer_ticks * 40u;
}

/* ---- CMSDK APB UART 0 ---------------------------------------------------- */
#define UART0 0x40004000u
enum { kUartData = 0x0, kUartState = 0x4, kUartCtrl = 0x8, kUartBaudDiv = 0x10 };

void board_uart_init(void) {
  REG32(UART0 + kUartBaudDiv) = 16u;
  REG32(UART0 + kUartCtrl) = 3u; /* TX and RX enabled, no interrupts */
}

void board_uart_write(const uint8_t* bytes, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    while (REG32(UART0 + kUartState) & 1u) { /* TX buffer full */
    }
    REG32(UART0 + kUartData) = bytes[i];
  }
}

size_t board_uart_read(uint8_t* buffer, size_t capacity) {
  size_t count = 0;
  while (count < capacity && (REG32(UART0 + kUartState) & 2u)) { /* RX buffer full */
    buffer[count++] = (uint8_t)REG32(UART0 + kUartData);
  }
  return count;
}

/* ---- Memory high-water marks --------------------------------------------- */
static char* heap_break = &__heap_start;

size_t board_stack_size(void) { return (size_t)((char*)&__stack_top - (char*)&__stack_limit); }

size_t board_stack_high_water(void) {
  const uint32_t* word = &__stack_limit;
  while (word < &__stack_top && *word == STACK_PAINT) ++word;
  return (size_t)((char*)&__stack_top - (char*)word);
}

/* noinline: the paint starts at this function's own frame, below the
 * caller's. Nothing lives below the stack pointer (AAPCS has no red zone);
 * the volatile store keeps the compiler from calling memset, whose own frame
 * would sit in the painted range. */
__attribute__((noinline)) size_t board_stack_mark(void) {
  uint32_t* sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  for (volatile uint32_t* word = &__stack_limit; word < sp;) *word++ = STACK_PAINT;
  return (size_t)((char*)&__stack_top - (char*)sp);
}

size_t board_heap_high_water(void) { return (size_t)(heap_break - &__heap_start); }

/* ---- newlib system calls --------------------------------------------------
 * Only the console and the heap exist; every other call fails cleanly. */
void* _sbrk(ptrdiff_t increment) {
  if (increment > &__heap_end - heap_break || increment < &__heap_start - heap_break) {
    errno = ENOMEM;
    return (void*)-1;
  }
  char* previous = heap_break;
  heap_break += increment;
  return previous;
}

int _write(int file, const char* bytes, int size) {
  if (file != 1 && file != 2) {
    errno = EBADF;
    return -1;
  }
  board_console_write(bytes, (size_t)size);
  return size;
}

int _read(int file, char* bytes, int size) {
  (void)file, (void)bytes, (void)size;
  errno = EBADF;
  return -1;
}
int _close(int file) {
  (void)file;
  errno = EBADF;
  return -1;
}
int _lseek(int file, int offset, int whence) {
  (void)file, (void)offset, (void)whence;
  errno = ESPIPE;
  return -1;
}
int _fstat(int file, struct stat* status) {
  (void)file;
  status->st_mode = S_IFCHR;
  return 0;
}
int _isatty(int file) { return file <= 2; }
int _getpid(void) { return 1; }
int _kill(int pid, int signal) {
  (void)pid;
  board_exit(128 + signal);
}
void _exit(int status) { board_exit(status); }

/* __libc_init_array and exit() call these; crti.o is not linked
 * (-nostartfiles) and the init_array/fini_array tables do the work. */
void _init(void) {}
void _fini(void) {}
/* The handle C++ static destructors register under (crtbegin.o's, which
 * -nostartfiles leaves out); there is one program and no shared objects. */
void* __dso_handle = 0;

/* ---- Reset and faults ----------------------------------------------------- */
void Reset_Handler(void) __attribute__((noreturn));
void Reset_Handler(void) {
  REG32(0xE000ED88u) |= 0xFu << 20; /* CPACR: CP10 and CP11 full access (the FPU) */
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  for (uint32_t *from = &__data_load, *to = &__data_start; to < &__data_end;) *to++ = *from++;
  for (uint32_t* to = &__bss_start; to < &__bss_end;) *to++ = 0;
  /* Paint the unused stack, up to a little below this frame. */
  uint32_t* sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  for (uint32_t* word = &__stack_limit; word < sp - 32;) *word++ = STACK_PAINT;
  __libc_init_array();
  exit(main());
}

static void Fault_Handler(void) {
  static const char message[] = "board: hard fault (bad address, unaligned access or stack overflow)\n";
  board_console_write(message, sizeof message - 1);
  board_exit(3);
}

static void Default_Handler(void) {
  static const char message[] = "board: unexpected interrupt\n";
  board_console_write(message, sizeof message - 1);
  board_exit(4);
}

/* Cortex-M: initial stack pointer, then the 15 system exceptions; the
 * board's interrupts stay disabled, so nothing beyond them is needed. */
struct VectorTable {
  uint32_t* initial_stack;
  void (*handlers[15])(void);
};
__attribute__((section(".isr_vector"), used)) static const struct VectorTable vector_table = {
    &__stack_top,
    {
        Reset_Handler,
        Default_Handler, /* NMI */
        Fault_Handler,   /* HardFault */
        Fault_Handler,   /* MemManage */
        Fault_Handler,   /* BusFault */
        Fault_Handler,   /* UsageFault */
        0, 0, 0, 0,
        Default_Handler, /* SVCall */
        Default_Handler, /* DebugMonitor */
        0,
        Default_Handler, /* PendSV */
        Default_Handler, /* SysTick */
    }};
