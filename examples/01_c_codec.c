/* 01_c_codec: compress a float32 vector with a fedrt codec, from C.
 *
 * Usage:
 *   01_c_codec SPEC SEED ROUND SENDER IN.f32 OUT.bin
 *
 * Reads IN.f32 (raw little-endian float32, as `fedrt codec` reads it; .npy
 * is refused), encodes it with the codec SPEC (e.g. dqsg:s=2, ndqsg,
 * topk:k=0.05, moniqua:theta=0.5) in the context session seed SEED, round
 * ROUND, sender SENDER, tensor 0, and writes the payload to OUT.bin. The
 * bytes are those of
 *   fedrt codec encode --codec SPEC --seed SEED --round ROUND --sender SENDER IN.f32 OUT.bin
 * and `fedrt codec decode --seed SEED OUT.bin back.f32` decodes them.
 *
 * Expected output, for 1000 floats written by
 *   python3 -c "import struct,random; random.seed(1); open('v.f32','wb').write(struct.pack('<1000f',*[random.gauss(0,1) for _ in range(1000)]))"
 * and `01_c_codec dqsg:s=2 7 1 3 v.f32 v.bin`:
 *   dqsg:s=2,b=0,ef=off,ec=rans: 1000 floats -> 302 bytes (kernels: avx2)
 * with the kernel ISA this CPU runs (scalar, avx2, avx512 or neon: the bytes
 * are the same on each). `cmp` finds v.bin equal to what `fedrt codec
 * encode` writes. Exit status 0; 2 for bad arguments; 1 when reading,
 * encoding or writing fails, with the reason on stderr.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fedrt/fedrt.h"

/* Parses a whole decimal number no larger than `max`; 0 when it is not one. */
static int parse_number(const char* text, uint64_t max, const char* what, uint64_t* value) {
  char* end = NULL;
  unsigned long long parsed;
  if (text[0] < '0' || text[0] > '9') {
    fprintf(stderr, "01_c_codec: %s '%s' is not a number\n", what, text);
    return 0;
  }
  errno = 0;
  parsed = strtoull(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || parsed > max) {
    fprintf(stderr, "01_c_codec: %s '%s' is not a number up to %llu\n", what, text, (unsigned long long)max);
    return 0;
  }
  *value = (uint64_t)parsed;
  return 1;
}

/* Reads a raw little-endian float32 file into *values (malloc'd). */
static int read_floats(const char* path, float** values, size_t* count) {
  FILE* file = fopen(path, "rb");
  unsigned char* bytes = NULL;
  size_t size = 0, room = 0, n, i;
  if (file == NULL) {
    fprintf(stderr, "01_c_codec: cannot open %s: %s\n", path, strerror(errno));
    return 0;
  }
  for (;;) {
    if (size == room) {
      unsigned char* grown = (unsigned char*)realloc(bytes, room == 0 ? 65536 : 2 * room);
      if (grown == NULL) {
        fprintf(stderr, "01_c_codec: out of memory reading %s\n", path);
        fclose(file);
        free(bytes);
        return 0;
      }
      bytes = grown;
      room = room == 0 ? 65536 : 2 * room;
    }
    n = fread(bytes + size, 1, room - size, file);
    size += n;
    if (n == 0) break;
  }
  if (ferror(file)) {
    fprintf(stderr, "01_c_codec: cannot read %s\n", path);
    fclose(file);
    free(bytes);
    return 0;
  }
  fclose(file);
  if (size % 4 != 0) {
    fprintf(stderr, "01_c_codec: %s: %zu bytes is not a whole number of float32 values\n", path, size);
    free(bytes);
    return 0;
  }
  *count = size / 4;
  *values = (float*)malloc(*count > 0 ? *count * sizeof(float) : 1);
  if (*values == NULL) {
    free(bytes);
    return 0;
  }
  for (i = 0; i < *count; ++i) {
    /* Little-endian on the wire and on disk, whatever this host is. */
    const uint32_t bits = (uint32_t)bytes[4 * i] | (uint32_t)bytes[4 * i + 1] << 8 |
                          (uint32_t)bytes[4 * i + 2] << 16 | (uint32_t)bytes[4 * i + 3] << 24;
    memcpy(&(*values)[i], &bits, 4);
  }
  free(bytes);
  return 1;
}

static int write_bytes(const char* path, const uint8_t* data, size_t size) {
  FILE* file = fopen(path, "wb");
  if (file == NULL) {
    fprintf(stderr, "01_c_codec: cannot create %s: %s\n", path, strerror(errno));
    return 0;
  }
  if (fwrite(data, 1, size, file) != size || fclose(file) != 0) {
    fprintf(stderr, "01_c_codec: cannot write %s\n", path);
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  uint64_t seed, round, sender;
  size_t n, capacity, written = 0, in_length;
  float* input = NULL;
  uint8_t* payload = NULL;
  fedrt_codec_t* codec = NULL;
  fedrt_codec_context context;
  fedrt_status status;
  int ok;

  if (argc != 7) {
    fprintf(stderr, "usage: 01_c_codec SPEC SEED ROUND SENDER IN.f32 OUT.bin\n");
    return 2;
  }
  if (!parse_number(argv[2], UINT64_MAX, "SEED", &seed) || !parse_number(argv[3], UINT32_MAX, "ROUND", &round) ||
      !parse_number(argv[4], UINT32_MAX, "SENDER", &sender)) {
    return 2;
  }
  in_length = strlen(argv[5]);
  if (in_length >= 4 && strcmp(argv[5] + in_length - 4, ".npy") == 0) {
    fprintf(stderr, "01_c_codec: %s: this example reads raw float32 only (fedrt codec encode also reads .npy)\n",
            argv[5]);
    return 2;
  }
  status = fedrt_codec_create(argv[1], &codec);
  if (status != FEDRT_OK) {
    fprintf(stderr, "01_c_codec: %s\n", fedrt_last_error());
    return status == FEDRT_INVALID_ARGUMENT ? 2 : 1;
  }
  if (!read_floats(argv[5], &input, &n)) {
    fedrt_codec_destroy(codec);
    return 1;
  }

  /* The context `fedrt codec encode` uses: tensor 0 unless --tensor. */
  context.session_seed = seed;
  context.round = (uint32_t)round;
  context.sender_id = (uint32_t)sender;
  context.tensor_id = 0;
  capacity = fedrt_codec_max_encoded_size(codec, n);
  payload = (uint8_t*)malloc(capacity);
  ok = payload != NULL;
  if (!ok) fprintf(stderr, "01_c_codec: out of memory for a %zu-byte payload\n", capacity);
  if (ok) {
    status = fedrt_codec_encode(codec, input, n, &context, payload, capacity, &written);
    ok = status == FEDRT_OK;
    if (!ok) fprintf(stderr, "01_c_codec: %s\n", fedrt_last_error());
  }
  if (ok) ok = write_bytes(argv[6], payload, written);
  if (ok) {
    printf("%s: %zu floats -> %zu bytes (kernels: %s)\n", fedrt_codec_spec(codec), n, written, fedrt_isa_name());
  }
  free(payload);
  free(input);
  fedrt_codec_destroy(codec);
  return ok ? 0 : 1;
}
