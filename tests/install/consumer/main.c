/* Uses the installed C API (fedrt/fedrt.h, fedrt::c) from C99; exits 0 when
 * a model trains in caller memory, a payload decodes back exactly, and a
 * device client and the host conveniences link and answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedrt/fedrt.h"
#include "fedrt/fedrt_host.h"

/* A device is only created here, never run: its callbacks are never called. */
static fedrt_status no_send(void* user, const uint8_t* data, size_t size) {
  (void)user, (void)data, (void)size;
  return FEDRT_UNAVAILABLE;
}
static fedrt_status no_receive(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms, size_t* received) {
  (void)user, (void)buffer, (void)capacity, (void)timeout_ms, (void)received;
  return FEDRT_UNAVAILABLE;
}
static uint64_t no_clock(void* user) {
  (void)user;
  return 0;
}
static fedrt_status no_random(void* user, uint8_t* out, size_t size) {
  (void)user, (void)out, (void)size;
  return FEDRT_UNAVAILABLE;
}

int main(void) {
  const float features[2 * 4] = {1, 0, 0, 0, 0, 0, 0, 1};
  const uint8_t labels[2] = {0, 1};
  float decoded[2 * 4];
  uint8_t payload[256];
  size_t bytes = 0, size = 0;
  void* memory = NULL;
  fedrt_model_t* model = NULL;
  fedrt_codec_t* codec = NULL;
  fedrt_batch_loss loss;
  fedrt_codec_context context = {1, 2, 0, 3};
  int train_ok, codec_ok, device_ok, index = -1;
  const uint8_t key[16] = {1};
  fedrt_data_view view;
  fedrt_device_callbacks callbacks;
  fedrt_device_options options = fedrt_device_options_default();
  fedrt_device_t* device = NULL;

  train_ok = fedrt_model_size("mlp:4-3-2", NULL, 2, &bytes) == FEDRT_OK && (memory = malloc(bytes)) != NULL &&
             fedrt_model_init(memory, bytes, "mlp:4-3-2", NULL, 1, 2, &model) == FEDRT_OK &&
             fedrt_model_parameter_count(model) == 4 * 3 + 3 + 3 * 2 + 2 &&
             fedrt_model_train_step(model, features, labels, 2, &loss) == FEDRT_OK;
  if (!train_ok) fprintf(stderr, "model: %s\n", fedrt_last_error());
  codec_ok = fedrt_codec_create("fp32", &codec) == FEDRT_OK &&
             fedrt_codec_encode(codec, features, 8, &context, payload, sizeof payload, &size) == FEDRT_OK &&
             fedrt_codec_decode(codec, payload, size, &context, NULL, decoded, 8) == FEDRT_OK &&
             memcmp(decoded, features, sizeof decoded) == 0;
  if (!codec_ok) fprintf(stderr, "codec: %s\n", fedrt_last_error());
  memset(&view, 0, sizeof view);
  view.count = 2;
  view.example_size = 4;
  view.num_classes = 2;
  view.features = features;
  view.labels = labels;
  memset(&callbacks, 0, sizeof callbacks);
  callbacks.send = no_send;
  callbacks.receive = no_receive;
  callbacks.now_ms = no_clock;
  callbacks.random_bytes = no_random;
  callbacks.hmac_sha256 = NULL; /* the library's; refused in builds without OpenSSL */
  options.batch = 2;
  device_ok = train_ok &&
              fedrt_device_create("board-1", key, sizeof key, model, &view, NULL, 0, &options, &callbacks, &device) ==
                  (fedrt_system_crypto_available() ? FEDRT_OK : FEDRT_INVALID_ARGUMENT) &&
              fedrt_host_share_index("board-5", 4, &index) == FEDRT_OK && index == 1;
  if (!device_ok) fprintf(stderr, "device: %s\n", fedrt_last_error());
  printf("fedrt %s (C API), kernels use %s, training %s, codec %s, device %s\n", fedrt_version_string(),
         fedrt_isa_name(), train_ok ? "ok" : "WRONG", codec_ok ? "ok" : "WRONG", device_ok ? "ok" : "WRONG");
  fedrt_device_destroy(device);
  fedrt_codec_destroy(codec);
  fedrt_model_destroy(model);
  free(memory);
  return train_ok && codec_ok && device_ok ? 0 : 1;
}
