/* 05_c_peer: peer-to-peer training in C, no aggregator: N peers, one thread
 * each, train one model together over socket pairs (plain POSIX file
 * descriptors standing in for TCP links, a UART or a radio). The training,
 * the collectives and the codecs are fedrt's peer trainer (fedrt/fedrt.h,
 * fedrt_peer_*); this program owns the links and the clock.
 *
 * Usage:
 *   05_c_peer PEERS ring|gossip [CODEC]
 *
 * PEERS (2..8) peers on a ring: socketpair() joins each peer to the next.
 * `ring` all-reduces the gradients every step (dense fp32; with CODEC, e.g.
 * fp16, that codec on every hop): every peer ends with the same model, bit
 * for bit. `gossip` mixes each model with its two neighbours' (D-PSGD;
 * CODEC e.g. moniqua:bits=2, whose theta Moniqua's bound derives). The data
 * is synthetic (3 classes of 8 features, 480 training and 120 held-out
 * examples); peer r trains on the examples i with i % PEERS == r, 5 epochs
 * of batches of 8 at learning rate 0.1.
 *
 * Expected output of `05_c_peer 4 ring`:
 *   4 peers, reduce ring, codec none: 15 steps per epoch
 *   peer 0: held-out accuracy 0.008 -> 1.000, 35100 payload bytes sent per epoch
 *   peer 1: held-out accuracy 0.008 -> 1.000, 35100 payload bytes sent per epoch
 *   peer 2: held-out accuracy 0.008 -> 1.000, 35100 payload bytes sent per epoch
 *   peer 3: held-out accuracy 0.008 -> 1.000, 35100 payload bytes sent per epoch
 *   the peers' models agree bit for bit
 * and of `05_c_peer 3 gossip moniqua:bits=2`, 20 steps per epoch, 11729
 * payload bytes per epoch and peer, the same accuracies, and "the peers'
 * models differ" (gossip brings them close, not equal). Exit status 0; 2
 * for bad arguments; 1 when training fails, with the reason on stderr.
 *
 * The peers hold one pre-shared key (32 bytes from /dev/urandom here; a
 * deployment provisions it to every peer, as a device's key): every link
 * starts with the join, in which both ends prove they hold it and are the
 * ranks the link is meant to connect. Its HMAC-SHA256 is fedrt's own where
 * the build has one, else the example port's (port/hmac_sha256.c).
 *
 * The send callback writes with blocking write(): every peer sends before
 * it reads, so a link must take a step's bytes without the neighbour
 * reading them. A socket pair's buffer holds this model's chunks; a real
 * link queues (or uses non-blocking sockets and a send queue).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fedrt/fedrt.h"
#include "port/hmac_sha256.h"

#define FEATURES 8
#define CLASSES 3
#define TRAIN 480
#define TEST 120
#define MAX_PEERS 8
#define BATCH 8
static const char* const kSpec = "mlp:8-16-3";

static float g_features[(TRAIN + TEST) * FEATURES];
static uint8_t g_labels[TRAIN + TEST];

/* Class c: uniform noise plus a bump on features 2c and 2c + 1. */
static void make_data(void) {
  uint32_t state = 12345u;
  int n, j;
  for (n = 0; n < TRAIN + TEST; ++n) {
    g_labels[n] = (uint8_t)(n % CLASSES);
    for (j = 0; j < FEATURES; ++j) {
      state = state * 1664525u + 1013904223u;
      g_features[n * FEATURES + j] = (float)(state >> 26) / 64.0f - 0.5f;
    }
    g_features[n * FEATURES + 2 * g_labels[n]] += 1.0f;
    g_features[n * FEATURES + 2 * g_labels[n] + 1] += 1.0f;
  }
}

typedef struct {
  uint32_t rank, peers;
  int fd[MAX_PEERS]; /* the socket to each neighbour; -1: none */
  void* model_memory;
  fedrt_model_t* model;
  void* peer_memory;
  fedrt_peer_t* peer;
  uint32_t share[TRAIN];
  size_t share_count;
  fedrt_status result;
  char error[256];
} Peer;

static uint64_t now_ms(void* user) {
  struct timespec t;
  (void)user;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/* The join's nonces: the kernel's randomness, shared by the peers' threads. */
static FILE* g_urandom;
static pthread_mutex_t g_urandom_lock = PTHREAD_MUTEX_INITIALIZER;
static fedrt_status random_bytes(void* user, uint8_t* out, size_t size) {
  size_t got;
  (void)user;
  pthread_mutex_lock(&g_urandom_lock);
  got = fread(out, 1, size, g_urandom);
  pthread_mutex_unlock(&g_urandom_lock);
  return got == size ? FEDRT_OK : FEDRT_IO_ERROR;
}

/* Used only where fedrt has no HMAC of its own (fedrt_system_crypto_available). */
static fedrt_status port_mac(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac) {
  (void)user;
  port_hmac_sha256(key, key_size, message, message_size, mac);
  return FEDRT_OK;
}

static fedrt_status link_send(void* user, uint32_t to, const uint8_t* data, size_t size) {
  const Peer* p = (const Peer*)user;
  while (size > 0) {
    const ssize_t n = write(p->fd[to], data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FEDRT_UNAVAILABLE;
    data += n;
    size -= (size_t)n;
  }
  return FEDRT_OK;
}

static fedrt_status link_receive(void* user, uint32_t from, uint8_t* buffer, size_t capacity, uint32_t timeout_ms,
                                 size_t* received) {
  const Peer* p = (const Peer*)user;
  struct pollfd ready;
  ssize_t n;
  ready.fd = p->fd[from];
  ready.events = POLLIN;
  ready.revents = 0;
  *received = 0;
  if (poll(&ready, 1, timeout_ms > 1000000u ? 1000000 : (int)timeout_ms) <= 0) return FEDRT_OK;  /* nothing yet */
  n = read(p->fd[from], buffer, capacity);
  if (n == 0) return FEDRT_UNAVAILABLE; /* the neighbour closed its end */
  if (n < 0) return errno == EINTR ? FEDRT_OK : FEDRT_IO_ERROR;
  *received = (size_t)n;
  return FEDRT_OK;
}

static double accuracy(fedrt_model_t* model) {
  fedrt_batch_loss loss;
  int first, correct = 0;
  for (first = 0; first < TEST; first += BATCH) {
    if (fedrt_model_evaluate(model, g_features + (size_t)(TRAIN + first) * FEATURES, g_labels + TRAIN + first, BATCH,
                             &loss, NULL) != FEDRT_OK) {
      return -1;
    }
    correct += loss.correct;
  }
  return (double)correct / TEST;
}

static void* run(void* argument) {
  Peer* p = (Peer*)argument;
  p->result = fedrt_peer_run(p->peer);
  /* The message is per thread: keep it for main's report. */
  if (p->result != FEDRT_OK) snprintf(p->error, sizeof p->error, "%s", fedrt_last_error());
  return NULL;
}

static int fail(const char* what) {
  fprintf(stderr, "05_c_peer: %s: %s\n", what, fedrt_last_error());
  return 1;
}

int main(int argc, char** argv) {
  static Peer peers[MAX_PEERS];
  pthread_t threads[MAX_PEERS];
  fedrt_peer_options options = fedrt_peer_options_default();
  fedrt_data_view data;
  uint8_t key[32];
  double before[MAX_PEERS];
  uint32_t n, r, i;
  int gossip, agree = 1, status = 0;
  if (argc < 3 || argc > 4 || atoi(argv[1]) < 2 || atoi(argv[1]) > MAX_PEERS ||
      (strcmp(argv[2], "ring") != 0 && strcmp(argv[2], "gossip") != 0)) {
    fprintf(stderr, "usage: 05_c_peer PEERS(2..%d) ring|gossip [CODEC]\n", MAX_PEERS);
    return 2;
  }
  n = (uint32_t)atoi(argv[1]);
  gossip = strcmp(argv[2], "gossip") == 0;
  make_data();
  memset(&data, 0, sizeof data);
  data.count = TRAIN;
  data.example_size = FEATURES;
  data.num_classes = CLASSES;
  data.features = g_features;
  data.labels = g_labels;

  options.peers = n;
  options.reduce = gossip ? FEDRT_PEER_GOSSIP : (argc == 4 ? FEDRT_PEER_RING_CODEC : FEDRT_PEER_RING);
  options.codec = argc == 4 ? argv[3] : NULL;
  options.sgd.learning_rate = 0.1;
  options.epochs = 5;
  options.batch = BATCH;
  g_urandom = fopen("/dev/urandom", "rb");
  if (g_urandom == NULL || random_bytes(NULL, key, sizeof key) != FEDRT_OK) {
    perror("05_c_peer: /dev/urandom");
    return 1;
  }
  options.key = key;
  options.key_size = sizeof key;

  /* The ring's links: peer r and peer r + 1 share a socket pair. */
  for (r = 0; r < n; ++r) {
    for (i = 0; i < MAX_PEERS; ++i) peers[r].fd[i] = -1;
  }
  for (r = 0; r < n && n > 1; ++r) {
    const uint32_t next = (r + 1) % n;
    int pair[2];
    if (peers[r].fd[next] >= 0) continue; /* two peers: one link */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
      perror("05_c_peer: socketpair");
      return 1;
    }
    peers[r].fd[next] = pair[0];
    peers[next].fd[r] = pair[1];
  }

  for (r = 0; r < n; ++r) {
    Peer* p = &peers[r];
    fedrt_peer_callbacks callbacks;
    size_t bytes;
    p->rank = r;
    p->peers = n;
    for (i = r; i < TRAIN; i += n) p->share[p->share_count++] = i;
    /* Every peer starts from the same model: the same spec and seed. */
    if (fedrt_model_size(kSpec, NULL, BATCH, &bytes) != FEDRT_OK) return fail("model size");
    p->model_memory = malloc(bytes);
    if (p->model_memory == NULL ||
        fedrt_model_init(p->model_memory, bytes, kSpec, NULL, 1, BATCH, &p->model) != FEDRT_OK) {
      return fail("model");
    }
    before[r] = accuracy(p->model);
    options.rank = r;
    memset(&callbacks, 0, sizeof callbacks);
    callbacks.user = p;
    callbacks.send = link_send;
    callbacks.receive = link_receive;
    callbacks.now_ms = now_ms;
    callbacks.random_bytes = random_bytes;
    callbacks.hmac_sha256 = fedrt_system_crypto_available() ? NULL : port_mac;
    if (fedrt_peer_size(p->model, &data, p->share, p->share_count, &options, &bytes) != FEDRT_OK) {
      return fail("fedrt_peer_size");
    }
    p->peer_memory = malloc(bytes);
    if (p->peer_memory == NULL || fedrt_peer_init(p->peer_memory, bytes, p->model, &data, p->share, p->share_count,
                                                  &options, &callbacks, &p->peer) != FEDRT_OK) {
      return fail("fedrt_peer_init");
    }
  }
  printf("%u peers, reduce %s, codec %s: %u steps per epoch\n", (unsigned)n, argv[2], argc == 4 ? argv[3] : "none",
         (unsigned)fedrt_peer_steps_per_epoch(peers[0].peer));

  for (r = 0; r < n; ++r) pthread_create(&threads[r], NULL, run, &peers[r]);
  for (r = 0; r < n; ++r) pthread_join(threads[r], NULL);

  for (r = 0; r < n; ++r) {
    if (peers[r].result != FEDRT_OK) {
      fprintf(stderr, "05_c_peer: peer %u: %s: %s\n", (unsigned)r, fedrt_status_name(peers[r].result),
              peers[r].error);
      status = 1;
      continue;
    }
    printf("peer %u: held-out accuracy %.3f -> %.3f, %llu payload bytes sent per epoch\n", (unsigned)r, before[r],
           accuracy(peers[r].model), (unsigned long long)(fedrt_peer_bytes_sent(peers[r].peer) / 5));
  }
  if (status == 0) {
    size_t d = fedrt_model_parameter_count(peers[0].model);
    float* first = (float*)malloc(d * sizeof(float));
    float* other = (float*)malloc(d * sizeof(float));
    if (first == NULL || other == NULL) return 1;
    fedrt_model_get_parameters(peers[0].model, first, d);
    for (r = 1; r < n; ++r) {
      fedrt_model_get_parameters(peers[r].model, other, d);
      if (memcmp(first, other, d * sizeof(float)) != 0) agree = 0;
    }
    printf("the peers' models %s\n", agree ? "agree bit for bit" : "differ");
    free(first);
    free(other);
  }
  for (r = 0; r < n; ++r) {
    fedrt_peer_destroy(peers[r].peer);
    fedrt_model_destroy(peers[r].model);
    free(peers[r].peer_memory);
    free(peers[r].model_memory);
    for (i = 0; i < MAX_PEERS; ++i) {
      if (peers[r].fd[i] >= 0) close(peers[r].fd[i]);
    }
  }
  fclose(g_urandom);
  return status;
}
