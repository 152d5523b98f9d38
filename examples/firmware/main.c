/* A Cortex-M4F device in a federation: trains mlp:784-16-10 on 256
 * Fashion-MNIST images held in flash and takes part in a `fedrt serve`
 * training through the C API's device client, its UART carrying the fedrt
 * wire protocol.
 *
 * The board is QEMU's MPS2 AN386 (platforms/boards/mps2-an386: startup code,
 * linker script, semihosting console); this file is the application and its
 * device port: the UART as the byte stream, the board's timer as the clock,
 * HMAC-SHA256 from examples/port (portable C, checked against RFC 4231).
 *
 * Usage (the integration test tests/firmware/firmware_federation_test.py
 * does all of this):
 *   fedrt serve --port 0 --key-file keys --model mlp:784-16-10 --codec ndqsg ...
 *   qemu-system-arm -M mps2-an386 -nographic -monitor none \
 *     -semihosting-config enable=on,target=native \
 *     -chardev socket,id=aggregator,host=127.0.0.1,port=PORT \
 *     -serial chardev:aggregator -kernel fedrt_firmware
 * where `keys` holds the line "fw-0 <FEDRT_FIRMWARE_KEY in hex>".
 *
 * Expected output (semihosting console): the engine's log lines and the
 * rounds (numbered from 1, as fedrt serve prints them; the first is
 * reported as the second starts):
 *   firmware: fw-0, 256 examples, model 50920 bytes of parameters
 *   [fedrt info] device fw-0: joined at round 0
 *   [fedrt info] device fw-0: round 0 sent 1536 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 2.4178
 *   firmware: round 2
 *   ...
 *   firmware: training finished after round 5
 *   firmware: memory: stack high-water ... of 65536 bytes, heap high-water ... bytes, static block ...: RAM ... bytes
 * and exit status 0.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "board.h"
#include "fashion_data.h"
#include "fedrt/fedrt.h"
#include "hmac_sha256.h"

#define DEVICE_ID "fw-0"
/* The pre-shared key (32 bytes); a product keeps it in a secure element or
 * protected flash. The integration test writes the same bytes, as hex, into
 * the aggregator's key file. */
static const uint8_t kKey[32] = {0x66, 0x65, 0x64, 0x72, 0x74, 0x2d, 0x66, 0x69, 0x72, 0x6d, 0x77,
                                 0x61, 0x72, 0x65, 0x2d, 0x6b, 0x65, 0x79, 0x2d, 0x30, 0x31, 0x32,
                                 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x61, 0x62, 0x63};

/* Local batch size: 1 keeps training within the RAM budget (4 x the
 * parameter bytes + 16 KiB); each example more costs about 3.6 KB (its
 * features in the device block, its activations in the model's workspace). */
#ifndef FIRMWARE_BATCH
#define FIRMWARE_BATCH 1
#endif
/* The model's and the device's memory: one static block, sized for
 * mlp:784-16-10, the codecs below and FIRMWARE_BATCH (fedrt_model_size +
 * fedrt_device_size; main says what it needs if it is too small). Static
 * rather than two malloc blocks: newlib's malloc grows its arena in 4 KiB
 * steps, and the slack at the top counted against the budget. */
#ifndef FIRMWARE_BLOCK_BYTES
#define FIRMWARE_BLOCK_BYTES (180352 + 3600 * FIRMWARE_BATCH)
#endif
static uint8_t gBlock[FIRMWARE_BLOCK_BYTES];

typedef struct Port {
  fedrt_device_t* device;
  uint64_t last_round;
  uint64_t random_counter;
} Port;

static uint64_t NowMs(void* user) {
  (void)user;
  return board_now_ns() / 1000000u;
}

static fedrt_status Send(void* user, const uint8_t* data, size_t size) {
  (void)user;
  board_uart_write(data, size);
  return FEDRT_OK;
}

/* A UART cannot tell that the far end went away: a dead aggregator shows as
 * silence, which the device client's timeouts turn into a failed session. */
static fedrt_status Receive(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms, size_t* received) {
  const uint64_t deadline = NowMs(user) + timeout_ms;
  size_t count = 0;
  for (;;) {
    count += board_uart_read(buffer + count, capacity - count);
    if (count > 0 || NowMs(user) >= deadline) break;
  }
  *received = count;
  return FEDRT_OK;
}

/* The join's nonces. The MPS2 board has no true random number generator:
 * this hashes the timer and a counter, which is unpredictable enough for an
 * emulated demo and NOT for a product, which reads its TRNG here. */
static fedrt_status RandomBytes(void* user, uint8_t* out, size_t size) {
  Port* port = (Port*)user;
  while (size > 0) {
    uint8_t digest[PORT_SHA256_BYTES];
    port_sha256 sha;
    const uint64_t seed[2] = {board_now_ns(), ++port->random_counter};
    port_sha256_init(&sha);
    port_sha256_update(&sha, (const uint8_t*)seed, sizeof seed);
    port_sha256_final(&sha, digest);
    const size_t n = size < sizeof digest ? size : sizeof digest;
    memcpy(out, digest, n);
    out += n;
    size -= n;
  }
  return FEDRT_OK;
}

static fedrt_status HmacSha256(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                               size_t message_size, uint8_t* mac) {
  (void)user;
  port_hmac_sha256(key, key_size, message, message_size, mac);
  return FEDRT_OK;
}

/* Asked between training slices: used here to report each new round. */
static int ShouldStop(void* user) {
  Port* port = (Port*)user;
  const uint64_t round = fedrt_device_round(port->device);
  if (round != port->last_round) {
    port->last_round = round;
    printf("firmware: round %lu\n", (unsigned long)round + 1);  /* from 1, as fedrt serve prints it */
  }
  return 0;
}

int main(void) {
  board_uart_init();
  const char* spec = "mlp:784-16-10";
  fedrt_device_options options = fedrt_device_options_default();
  options.batch = FIRMWARE_BATCH;
  size_t model_bytes = 0;
  if (fedrt_model_size(spec, NULL, options.batch, &model_bytes) != FEDRT_OK) {
    printf("firmware: %s\n", fedrt_last_error());
    return 1;
  }
  /* The model's parameters, gradients and workspace: the first part of the
   * static block. */
  if (model_bytes > sizeof gBlock) {
    printf("firmware: the model needs %u bytes, FIRMWARE_BLOCK_BYTES is %u\n", (unsigned)model_bytes,
           (unsigned)sizeof gBlock);
    return 1;
  }
  void* model_memory = gBlock;
  fedrt_model_t* model = NULL;
  if (fedrt_model_init(model_memory, model_bytes, spec, NULL, 1, options.batch, &model) != FEDRT_OK) {
    printf("firmware: cannot build the model: %s\n", fedrt_last_error());
    return 1;
  }
  const fedrt_data_view data = {FASHION_COUNT, FASHION_PIXELS, FASHION_CLASSES, kFashionPixels,
                                kFashionMean,  kFashionStddev, NULL,            kFashionLabels};
  Port port = {NULL, UINT64_MAX, 0};
  fedrt_device_callbacks callbacks;
  memset(&callbacks, 0, sizeof callbacks);
  callbacks.user = &port;
  callbacks.send = Send;
  callbacks.receive = Receive;
  callbacks.now_ms = NowMs;
  callbacks.random_bytes = RandomBytes;
  callbacks.hmac_sha256 = HmacSha256;
  callbacks.should_stop = ShouldStop;
  /* The codecs `fedrt serve --codec ndqsg` instructs (nested at rho 3 to 9,
   * anchors in plain DQSG): they size the device's block. */
  options.codecs = "ndqsg;ndqsg:rho=9;dqsg:s=3";
  /* Frames of up to 64 KiB (the smallest limit; announced in the join): the
   * aggregator sends the model in 32 KiB chunks, each read into the device's
   * idle gradient buffer rather than a heap block the size of the model. */
  options.max_frame_bytes = 65536;
  size_t device_bytes = 0;
  if (fedrt_device_size(model, &data, 0, &options, &device_bytes) != FEDRT_OK) {
    printf("firmware: %s\n", fedrt_last_error());
    return 1;
  }
  /* The device's block: the rest of the static block. */
  if (device_bytes > sizeof gBlock - model_bytes) {
    printf("firmware: the model and the device need %u bytes, FIRMWARE_BLOCK_BYTES is %u\n",
           (unsigned)(model_bytes + device_bytes), (unsigned)sizeof gBlock);
    return 1;
  }
  void* device_memory = gBlock + model_bytes;
  if (fedrt_device_init(device_memory, device_bytes, DEVICE_ID, kKey, sizeof kKey, model, &data, NULL, 0, &options,
                        &callbacks, &port.device) != FEDRT_OK) {
    printf("firmware: %s\n", fedrt_last_error());
    return 1;
  }
  printf("firmware: %s, %u examples, model %u bytes of parameters, batch %d\n", DEVICE_ID,
         (unsigned)fedrt_device_examples(port.device),
         (unsigned)(fedrt_model_parameter_count(model) * sizeof(float)), options.batch);
  printf("firmware: static block %u bytes: the model %u, the device %u; heap %u bytes\n", (unsigned)sizeof gBlock,
         (unsigned)model_bytes, (unsigned)device_bytes, (unsigned)board_heap_high_water());

  /* One UART link, so a failed session is tried again on the same stream
   * (QEMU reconnects its socket: -chardev socket,...,reconnect=1). */
  fedrt_status status = FEDRT_UNAVAILABLE;
  for (int attempt = 0; attempt < 5; ++attempt) {
    status = fedrt_device_run_session(port.device);
    if (status == FEDRT_OK || status == FEDRT_UNAUTHENTICATED || status == FEDRT_FAILED_PRECONDITION ||
        status == FEDRT_CANCELLED) {
      break;
    }
    printf("firmware: session ended: %s; trying again\n", fedrt_last_error());
  }
  if (status == FEDRT_OK) {
    printf("firmware: training finished after round %lu\n", (unsigned long)fedrt_device_round(port.device) + 1);
  } else {
    printf("firmware: stopped: %s\n", fedrt_last_error());
  }
  /* RAM: the static block, the heap's high-water mark and the stack's
   * (firmware_federation_test checks the sum against the RAM budget). */
  const size_t stack = board_stack_high_water(), heap = board_heap_high_water();
  printf("firmware: memory: stack high-water %u of %u bytes, heap high-water %u bytes, static block %u bytes: "
         "RAM %u bytes\n",
         (unsigned)stack, (unsigned)board_stack_size(), (unsigned)heap, (unsigned)sizeof gBlock,
         (unsigned)(stack + heap + sizeof gBlock));
  fedrt_device_destroy(port.device);
  fedrt_model_destroy(model);
  return status == FEDRT_OK ? 0 : 1;
}
