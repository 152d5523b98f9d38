/* Uses the installed C API (fedrt/fedrt.h, fedrt::c) from C99; exits 0 when
 * a model trains in caller memory and a payload decodes back exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedrt/fedrt.h"

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
  int train_ok, codec_ok;

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
  printf("fedrt %s (C API), kernels use %s, training %s, codec %s\n", fedrt_version_string(), fedrt_isa_name(),
         train_ok ? "ok" : "WRONG", codec_ok ? "ok" : "WRONG");
  fedrt_codec_destroy(codec);
  fedrt_model_destroy(model);
  free(memory);
  return train_ok && codec_ok ? 0 : 1;
}
