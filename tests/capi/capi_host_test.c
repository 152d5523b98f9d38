/* The C API's host conveniences (fedrt/fedrt_host.h) from C99: a data set
 * directory written here as plain IDX files, its view and shares; key files;
 * the share index and shuffle seed defaults; the residual's state file. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fedrt/fedrt.h"
#include "fedrt/fedrt_host.h"

#define SIDE 4
#define TRAIN 30
#define TEST 6

static char g_dir[256];

static void path_of(char* out, size_t size, const char* name) { snprintf(out, size, "%s/%s", g_dir, name); }

static void write_file(const char* name, const uint8_t* bytes, size_t size, int mode) {
  char path[512];
  FILE* file;
  path_of(path, sizeof path, name);
  file = fopen(path, "wb");
  REQUIRE(file != NULL);
  REQUIRE(fwrite(bytes, 1, size, file) == size);
  REQUIRE(fclose(file) == 0);
  REQUIRE(chmod(path, (mode_t)mode) == 0);
}

static void write_text(const char* name, const char* text, int mode) {
  write_file(name, (const uint8_t*)text, strlen(text), mode);
}

static void put_be32(uint8_t* at, uint32_t v) {
  at[0] = (uint8_t)(v >> 24);
  at[1] = (uint8_t)(v >> 16);
  at[2] = (uint8_t)(v >> 8);
  at[3] = (uint8_t)v;
}

/* Plain (uncompressed) IDX files under the .gz names the loader opens: the
 * loader reads them as they are, with or without zlib in the build. */
static void write_idx_set(const char* images, const char* labels, int count, uint32_t seed) {
  uint8_t* image_bytes = (uint8_t*)malloc(16 + (size_t)count * SIDE * SIDE);
  uint8_t* label_bytes = (uint8_t*)malloc(8 + (size_t)count);
  int i;
  REQUIRE(image_bytes != NULL && label_bytes != NULL);
  put_be32(image_bytes, 0x00000803u);
  put_be32(image_bytes + 4, (uint32_t)count);
  put_be32(image_bytes + 8, SIDE);
  put_be32(image_bytes + 12, SIDE);
  for (i = 0; i < count * SIDE * SIDE; ++i) {
    seed = seed * 1664525u + 1013904223u;
    image_bytes[16 + i] = (uint8_t)(seed >> 24);
  }
  put_be32(label_bytes, 0x00000801u);
  put_be32(label_bytes + 4, (uint32_t)count);
  for (i = 0; i < count; ++i) label_bytes[8 + i] = (uint8_t)(i % 3);
  write_file(images, image_bytes, 16 + (size_t)count * SIDE * SIDE, 0644);
  write_file(labels, label_bytes, 8 + (size_t)count, 0644);
  free(image_bytes);
  free(label_bytes);
}

static void a_data_set_loads_normalised_with_its_shares(void) {
  fedrt_host_dataset_t* dataset = NULL;
  fedrt_data_view view;
  uint32_t share[TRAIN];
  int seen[TRAIN];
  size_t count = 0, total = 0, i;
  double sum = 0, sum2 = 0, mean, deviation;
  int device;
  char missing[512];
  write_idx_set("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", TRAIN, 1);
  write_idx_set("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", TEST, 2);

  REQUIRE_OK(fedrt_host_dataset_load(g_dir, &dataset));
  REQUIRE_OK(fedrt_host_dataset_view(dataset, &view));
  CHECK(view.count == TRAIN);
  CHECK(view.example_size == SIDE * SIDE);
  CHECK(view.num_classes == 3);
  CHECK(view.pixels != NULL);
  CHECK(view.features == NULL);
  CHECK(view.labels != NULL && view.labels[4] == 1);
  /* Normalised with the training set's own mean and deviation of v / 255. */
  for (i = 0; i < TRAIN * SIDE * SIDE; ++i) {
    const double x = (double)((float)view.pixels[i] * (1.0f / 255.0f));
    sum += x;
    sum2 += x * x;
  }
  mean = sum / (TRAIN * SIDE * SIDE);
  deviation = sqrt(sum2 / (TRAIN * SIDE * SIDE) - mean * mean);
  printf("  mean %.6f stddev %.6f (expected %.6f %.6f)\n", view.mean, view.stddev, mean, deviation);
  CHECK(fabs(view.mean - mean) < 1e-5);
  CHECK(fabs(view.stddev - deviation) < 1e-5);

  /* Three IID shares cover every example once. */
  memset(seen, 0, sizeof seen);
  for (device = 0; device < 3; ++device) {
    REQUIRE_OK(fedrt_host_dataset_share(dataset, "iid", 3, device, 7, share, TRAIN, &count));
    CHECK(count == TRAIN / 3);
    for (i = 0; i < count; ++i) {
      REQUIRE(share[i] < TRAIN);
      ++seen[share[i]];
    }
    total += count;
  }
  CHECK(total == TRAIN);
  for (i = 0; i < TRAIN; ++i) CHECK(seen[i] == 1);
  CHECK_STATUS(fedrt_host_dataset_share(dataset, "iid", 3, 0, 7, share, TRAIN / 3 - 1, &count), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_host_dataset_share(dataset, "iid", 3, 3, 7, share, TRAIN, &count), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "device index 3 is outside 0..2") != NULL);
  CHECK_STATUS(fedrt_host_dataset_share(dataset, "halves", 3, 0, 7, share, TRAIN, &count), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_host_dataset_share(dataset, NULL, 3, 0, 7, share, TRAIN, &count), FEDRT_INVALID_ARGUMENT);
  CHECK_STATUS(fedrt_host_dataset_view(NULL, &view), FEDRT_INVALID_ARGUMENT);
  fedrt_host_dataset_destroy(dataset);
  fedrt_host_dataset_destroy(NULL);

  /* A directory without the files names the one it missed. */
  path_of(missing, sizeof missing, "absent");
  dataset = NULL;
  CHECK_STATUS(fedrt_host_dataset_load(missing, &dataset), FEDRT_NOT_FOUND);
  CHECK(strstr(fedrt_last_error(), "absent/train-images-idx3-ubyte.gz") != NULL);
  CHECK(dataset == NULL);
}

static void share_index_and_shuffle_seed_follow_fedrt_device(void) {
  int index = -1;
  CHECK_STATUS(fedrt_host_share_index("dev-7", 4, &index), FEDRT_OK);
  CHECK(index == 3);
  CHECK_STATUS(fedrt_host_share_index("board.12", 5, &index), FEDRT_OK);
  CHECK(index == 2);
  CHECK_STATUS(fedrt_host_share_index("board", 5, &index), FEDRT_INVALID_ARGUMENT);
  CHECK(strstr(fedrt_last_error(), "give --index: the id 'board' ends in no number") != NULL);
  CHECK(index == 2);
  /* partition_seed * 1000003 + the id's 24-bit sender id. */
  CHECK(fedrt_host_shuffle_seed("dev-7", 0) < (1u << 24));
  CHECK(fedrt_host_shuffle_seed("dev-7", 8) - fedrt_host_shuffle_seed("dev-7", 7) == 1000003u);
  CHECK(fedrt_host_shuffle_seed("dev-7", 7) == fedrt_host_shuffle_seed("dev-7", 7));
  CHECK(fedrt_host_shuffle_seed("dev-7", 7) != fedrt_host_shuffle_seed("dev-8", 7));
}

static void keys_load_from_private_key_files(void) {
  static const uint8_t expected[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                       0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
  char path[512], id[FEDRT_DEVICE_ID_MAX + 1];
  uint8_t key[FEDRT_KEY_MAX_BYTES];
  size_t key_size = 0;
  write_text("dev-3.key", "# one device\ndev-3 00112233445566778899aabbccddeeff\n", 0600);
  path_of(path, sizeof path, "dev-3.key");

  /* No id: the file's only entry. */
  REQUIRE_OK(fedrt_host_key_load(path, NULL, id, sizeof id, key, sizeof key, &key_size));
  CHECK(strcmp(id, "dev-3") == 0);
  CHECK(key_size == 16);
  CHECK(memcmp(key, expected, 16) == 0);
  memset(id, 0, sizeof id);
  REQUIRE_OK(fedrt_host_key_load(path, "", id, sizeof id, key, sizeof key, &key_size));
  CHECK(strcmp(id, "dev-3") == 0);
  /* Named, with or without room for it back. */
  REQUIRE_OK(fedrt_host_key_load(path, "dev-3", NULL, 0, key, sizeof key, &key_size));
  CHECK(key_size == 16);
  CHECK_STATUS(fedrt_host_key_load(path, "dev-4", NULL, 0, key, sizeof key, &key_size), FEDRT_NOT_FOUND);
  CHECK(strstr(fedrt_last_error(), "dev-3.key: no key for device 'dev-4'") != NULL);
  CHECK_STATUS(fedrt_host_key_load(path, "dev 3", NULL, 0, key, sizeof key, &key_size), FEDRT_INVALID_ARGUMENT);
  /* Too little room. */
  CHECK_STATUS(fedrt_host_key_load(path, NULL, id, sizeof id, key, 15, &key_size), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_host_key_load(path, NULL, id, 5, key, sizeof key, &key_size), FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_host_key_load(path, NULL, NULL, 0, key, sizeof key, &key_size), FEDRT_INVALID_ARGUMENT);
  /* A file others may read is refused; so is a missing one. */
  REQUIRE(chmod(path, 0644) == 0);
  CHECK_STATUS(fedrt_host_key_load(path, NULL, id, sizeof id, key, sizeof key, &key_size), FEDRT_FAILED_PRECONDITION);
  printf("  message: %s\n", fedrt_last_error());
  path_of(path, sizeof path, "absent.key");
  CHECK_STATUS(fedrt_host_key_load(path, NULL, id, sizeof id, key, sizeof key, &key_size), FEDRT_NOT_FOUND);
  /* A file of several devices needs the id. */
  write_text("fleet.key", "dev-1 00112233445566778899aabbccddeeff\ndev-2 ffeeddccbbaa99887766554433221100\n", 0600);
  path_of(path, sizeof path, "fleet.key");
  CHECK_STATUS(fedrt_host_key_load(path, NULL, id, sizeof id, key, sizeof key, &key_size), FEDRT_INVALID_ARGUMENT);
  REQUIRE_OK(fedrt_host_key_load(path, "dev-2", NULL, 0, key, sizeof key, &key_size));
  CHECK(key[0] == 0xff && key[15] == 0x00);
}

static void the_residual_round_trips_through_its_state_file(void) {
  const float saved[5] = {0.5f, -1.25f, 3.0f, 0.0f, 1e-7f};
  float loaded[6];
  char path[512];
  FILE* file;
  long size;
  path_of(path, sizeof path, "device.state");
  CHECK_STATUS(fedrt_host_residual_load(path, loaded, 5), FEDRT_NOT_FOUND); /* a first start */
  REQUIRE_OK(fedrt_host_residual_save(path, saved, 5));
  REQUIRE_OK(fedrt_host_residual_load(path, loaded, 5));
  CHECK(memcmp(loaded, saved, sizeof saved) == 0);
  CHECK_STATUS(fedrt_host_residual_load(path, loaded, 6), FEDRT_FAILED_PRECONDITION);
  /* Cut short: the file is there but unusable. */
  file = fopen(path, "rb+");
  REQUIRE(file != NULL);
  REQUIRE(fseek(file, 0, SEEK_END) == 0);
  size = ftell(file);
  REQUIRE(fclose(file) == 0);
  REQUIRE(truncate(path, size - 3) == 0);
  CHECK_STATUS(fedrt_host_residual_load(path, loaded, 5), FEDRT_CORRUPT);
  printf("  message: %s\n", fedrt_last_error());
  CHECK_STATUS(fedrt_host_residual_save(NULL, saved, 5), FEDRT_INVALID_ARGUMENT);
}

static void remove_dir(void) {
  static const char* const files[] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                      "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz",
                                      "dev-3.key", "fleet.key", "device.state"};
  char path[512];
  size_t i;
  for (i = 0; i < sizeof files / sizeof files[0]; ++i) {
    path_of(path, sizeof path, files[i]);
    remove(path);
  }
  rmdir(g_dir);
}

int main(void) {
  const char* base = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/fedrt-capi-host-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp");
  REQUIRE(mkdtemp(g_dir) != NULL);
  a_data_set_loads_normalised_with_its_shares();
  share_index_and_shuffle_seed_follow_fedrt_device();
  keys_load_from_private_key_files();
  the_residual_round_trips_through_its_state_file();
  remove_dir();
  return check_finish();
}
