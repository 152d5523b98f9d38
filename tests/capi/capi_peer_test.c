/* The C API's peer trainer from C99: groups of C peers (fedrt_peer_t in
 * caller memory), each on its own thread, joined by in-process byte queues
 * through the callbacks (one queue per ordered pair of ranks). A dense ring
 * all-reduce of three peers must leave every peer with the same model, to
 * the bit, equal to the C++ engine's (PeerTrainer over the loopback binding,
 * where the build has it) and better than the initial model on held-out
 * examples; gossip (fp32 on the ring, Moniqua on a 2 x 2 torus) must learn
 * too. The dense ring and torus gossip again with the group's key (every
 * stream joins first, HMAC-SHA256 both ways): the same bits; then a peer with another
 * key and a peer without one, refused with FEDRT_UNAUTHENTICATED naming the
 * rank on every peer. Then the errors with their pinned statuses: a block
 * too small, bad options and keys, bad codec specs, a missing callback, a
 * second run, and a neighbour whose stream is closed.
 *
 * The callbacks use the real monotonic clock; nothing checked depends on
 * timing (the step deadline is far above what a step takes). */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_queue.h"
#include "check.h"
#include "fedrt/fedrt.h"
#include "port/hmac_sha256.h"
#if FEDRT_TEST_PEER_REFERENCE
#include "peer_reference.h"
#endif

#define FEATURES 8
#define CLASSES 3
#define MAX_PEERS 4
#define TRAIN 240
#define TEST 90
#define MAX_BATCH 32
static const char* const kSpec = "mlp:8-16-3";
static const uint64_t kModelSeed = 5;

/* A learnable data set: class c has a bump on features 2c, 2c+1. */
static float g_features[(TRAIN + TEST) * FEATURES];
static uint8_t g_labels[TRAIN + TEST];

static void make_data(void) { make_bump_data(g_features, g_labels, TRAIN + TEST, FEATURES, CLASSES, 4242u, 1.0f); }

static fedrt_data_view train_view(void) {
  fedrt_data_view view;
  memset(&view, 0, sizeof view);
  view.count = TRAIN;
  view.example_size = FEATURES;
  view.num_classes = CLASSES;
  view.features = g_features;
  view.labels = g_labels;
  return view;
}

/* Share of the held-out examples the model gets right. */
static double test_accuracy(fedrt_model_t* model) {
  int first, correct = 0;
  for (first = 0; first < TEST; first += MAX_BATCH) {
    const int n = TEST - first < MAX_BATCH ? TEST - first : MAX_BATCH;
    fedrt_batch_loss loss;
    if (fedrt_model_evaluate(model, g_features + (size_t)(TRAIN + first) * FEATURES, g_labels + TRAIN + first, n,
                             &loss, NULL) != FEDRT_OK) {
      return -1;
    }
    correct += loss.correct;
  }
  return (double)correct / TEST;
}

/* ---- The links: a byte queue per ordered pair of ranks -------------------- */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_moved = PTHREAD_COND_INITIALIZER;
static ByteQueue g_queue[MAX_PEERS][MAX_PEERS]; /* [from][to] */
static int g_closed[MAX_PEERS];             /* a rank whose streams are all closed */

static void reset_queues(void) {
  int i, j;
  for (i = 0; i < MAX_PEERS; ++i) {
    for (j = 0; j < MAX_PEERS; ++j) byte_queue_free(&g_queue[i][j]);
  }
  memset(g_closed, 0, sizeof g_closed);
}

typedef struct {
  uint32_t rank;
  void* model_memory;
  fedrt_model_t* model;
  void* peer_memory;
  fedrt_peer_t* peer;
  fedrt_status result;
  int progress_calls;
  double last_epoch_loss;
  char error[512]; /* fedrt_last_error() of its run (per thread) */
} Peer;

static fedrt_status peer_send(void* user, uint32_t to, const uint8_t* data, size_t size) {
  const Peer* self = (const Peer*)user;
  fedrt_status status = FEDRT_OK;
  if (to >= MAX_PEERS) return FEDRT_INTERNAL;
  pthread_mutex_lock(&g_lock);
  if (g_closed[to] || g_closed[self->rank]) {
    status = FEDRT_UNAVAILABLE;
  } else {
    byte_queue_append(&g_queue[self->rank][to], data, size);
    pthread_cond_broadcast(&g_moved);
  }
  pthread_mutex_unlock(&g_lock);
  return status;
}

static fedrt_status peer_receive(void* user, uint32_t from, uint8_t* buffer, size_t capacity, uint32_t timeout_ms,
                                 size_t* received) {
  const Peer* self = (const Peer*)user;
  ByteQueue* queue;
  fedrt_status status = FEDRT_OK;
  if (from >= MAX_PEERS) return FEDRT_INTERNAL;
  pthread_mutex_lock(&g_lock);
  queue = &g_queue[from][self->rank];
  byte_queue_wait(queue, &g_closed[from], &g_lock, &g_moved, timeout_ms);
  *received = byte_queue_take(queue, buffer, capacity);
  if (*received == 0 && g_closed[from]) status = FEDRT_UNAVAILABLE;
  pthread_mutex_unlock(&g_lock);
  return status;
}

static fedrt_status on_progress(void* user, const fedrt_peer_progress* progress) {
  Peer* self = (Peer*)user;
  ++self->progress_calls;
  if (progress->epoch_end) self->last_epoch_loss = progress->epoch_loss;
  return FEDRT_OK;
}

/* The join's MAC where fedrt has none of its own (the core preset): the
 * example port's HMAC-SHA256. */
static fedrt_status port_mac(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac) {
  (void)user;
  port_hmac_sha256(key, key_size, message, message_size, mac);
  return FEDRT_OK;
}

/* The group's key, and another one. */
static uint8_t g_key[20], g_other_key[20];
static void make_keys(void) {
  int i;
  for (i = 0; i < 20; ++i) {
    g_key[i] = (uint8_t)(17 * i + 3);
    g_other_key[i] = (uint8_t)(17 * i + 4);
  }
}

static fedrt_peer_callbacks callbacks_of(Peer* p) {
  fedrt_peer_callbacks c;
  memset(&c, 0, sizeof c);
  c.user = p;
  c.send = peer_send;
  c.receive = peer_receive;
  c.now_ms = test_monotonic_ms;
  c.on_progress = on_progress;
  c.random_bytes = test_random_bytes;
  /* NULL: the system's, where this build has one. */
  c.hmac_sha256 = fedrt_system_crypto_available() ? NULL : port_mac;
  return c;
}

static fedrt_sgd_options plain_sgd(double learning_rate) {
  fedrt_sgd_options sgd = fedrt_sgd_options_default();
  sgd.learning_rate = learning_rate;
  return sgd;
}

/* The model every peer starts from (the same spec and seed). */
static void make_model(Peer* p) {
  size_t bytes = 0;
  REQUIRE_OK(fedrt_model_size(kSpec, NULL, MAX_BATCH, &bytes));
  p->model_memory = malloc(bytes);
  REQUIRE(p->model_memory != NULL);
  REQUIRE_OK(fedrt_model_init(p->model_memory, bytes, kSpec, NULL, kModelSeed, MAX_BATCH, &p->model));
}

/* Rank r's share: the examples i with i % peers == r. */
static uint32_t g_shares[MAX_PEERS][TRAIN];
static size_t share_of(uint32_t rank, uint32_t peers) {
  size_t n = 0;
  uint32_t i;
  for (i = rank; i < TRAIN; i += peers) g_shares[rank][n++] = i;
  return n;
}

/* Sizes and places peer p with `options` (its rank set here). */
static void make_peer(Peer* p, uint32_t rank, fedrt_peer_options options) {
  const fedrt_data_view data = train_view();
  const size_t share_count = share_of(rank, options.peers);
  fedrt_peer_callbacks callbacks;
  size_t bytes = 0;
  p->rank = rank;
  make_model(p);
  options.rank = rank;
  callbacks = callbacks_of(p);
  REQUIRE_OK(fedrt_peer_size(p->model, &data, g_shares[rank], share_count, &options, &bytes));
  p->peer_memory = malloc(bytes + 1);
  REQUIRE(p->peer_memory != NULL);
  /* At an odd address: init aligns inside. */
  REQUIRE_OK(fedrt_peer_init((uint8_t*)p->peer_memory + 1, bytes, p->model, &data, g_shares[rank], share_count,
                             &options, &callbacks, &p->peer));
}

static void free_peer(Peer* p) {
  fedrt_peer_destroy(p->peer);
  fedrt_model_destroy(p->model);
  free(p->peer_memory);
  free(p->model_memory);
  memset(p, 0, sizeof *p);
}

static void* run_thread(void* argument) {
  Peer* p = (Peer*)argument;
  p->result = fedrt_peer_run(p->peer);
  snprintf(p->error, sizeof p->error, "%s", p->result == FEDRT_OK ? "" : fedrt_last_error());
  return NULL;
}

/* Runs peers[0 .. n) on one thread each. */
static void run_group(Peer* peers, uint32_t n) {
  pthread_t threads[MAX_PEERS];
  uint32_t r;
  for (r = 0; r < n; ++r) REQUIRE(pthread_create(&threads[r], NULL, run_thread, &peers[r]) == 0);
  for (r = 0; r < n; ++r) pthread_join(threads[r], NULL);
}

/* ---- Training ------------------------------------------------------------- */

/* `key` NULL: no join. */
static void test_dense_ring(const uint8_t* key) {
  enum { kPeers = 3, kEpochs = 4, kBatch = 8 };
  Peer peers[kPeers];
  fedrt_peer_options options = fedrt_peer_options_default();
  float first[256], other[256], reference[256];
  size_t d, neighbours = 0;
  uint32_t ranks[4];
  double initial;
  uint32_t r;
  memset(peers, 0, sizeof peers);
  reset_queues();
  options.peers = kPeers;
  options.reduce = FEDRT_PEER_RING;
  options.sgd = plain_sgd(0.1);
  options.epochs = kEpochs;
  options.batch = kBatch;
  options.evals_per_epoch = 2;
  options.key = key;
  options.key_size = key != NULL ? sizeof g_key : 0;
  for (r = 0; r < kPeers; ++r) make_peer(&peers[r], r, options);
  d = fedrt_model_parameter_count(peers[0].model);
  REQUIRE(d <= 256);
  initial = test_accuracy(peers[0].model);
  CHECK(fedrt_peer_steps_per_epoch(peers[0].peer) == (TRAIN / kPeers) / kBatch);
  CHECK(strcmp(fedrt_peer_gossip_codec(peers[0].peer), "") == 0);
  CHECK_STATUS(fedrt_peer_neighbours(peers[1].peer, ranks, 4, &neighbours), FEDRT_OK);
  CHECK(neighbours == 2 && ranks[0] == 0 && ranks[1] == 2);
  CHECK_STATUS(fedrt_peer_neighbours(peers[1].peer, ranks, 1, &neighbours), FEDRT_OUT_OF_RANGE);

  run_group(peers, kPeers);
  for (r = 0; r < kPeers; ++r) CHECK_STATUS(peers[r].result, FEDRT_OK);
  for (r = 0; r < kPeers; ++r) CHECK(peers[r].progress_calls == 2 * kEpochs);
  CHECK(fedrt_peer_bytes_sent(peers[0].peer) > 0);

  /* Every peer holds the same model, to the bit. */
  REQUIRE_OK(fedrt_model_get_parameters(peers[0].model, first, 256));
  for (r = 1; r < kPeers; ++r) {
    REQUIRE_OK(fedrt_model_get_parameters(peers[r].model, other, 256));
    CHECK(memcmp(first, other, d * sizeof(float)) == 0);
  }
  {
    const double trained = test_accuracy(peers[0].model);
    printf("dense ring%s: held-out accuracy %.3f -> %.3f, last epoch loss %.4f\n", key ? " (joined)" : "",
           initial, trained, peers[0].last_epoch_loss);
    CHECK(trained > initial + 0.2);
    CHECK(trained >= 0.8);
  }
#if FEDRT_TEST_PEER_REFERENCE
  /* The C++ engine over its loopback binding computes the same bits. */
  CHECK(capi_reference_peer_ring(kSpec, kModelSeed, g_features, g_labels, TRAIN, FEATURES, CLASSES, kPeers,
                                 kEpochs, kBatch, 0.1, reference, 256) == d);
  CHECK(memcmp(first, reference, d * sizeof(float)) == 0);
#else
  (void)reference;
#endif
  /* Once per peer. */
  CHECK_STATUS(fedrt_peer_run(peers[0].peer), FEDRT_FAILED_PRECONDITION);
  for (r = 0; r < kPeers; ++r) free_peer(&peers[r]);
}

/* `key` NULL: no join. */
static void test_gossip(fedrt_peer_graph graph, const char* codec, uint32_t n, const uint8_t* key) {
  Peer peers[MAX_PEERS];
  fedrt_peer_options options = fedrt_peer_options_default();
  double initial;
  uint32_t r;
  memset(peers, 0, sizeof peers);
  reset_queues();
  options.peers = n;
  options.reduce = FEDRT_PEER_GOSSIP;
  options.codec = codec;
  options.graph = graph;
  options.sgd = plain_sgd(0.1);
  options.epochs = 5;
  options.batch = 8;
  options.key = key;
  options.key_size = key != NULL ? sizeof g_key : 0;
  for (r = 0; r < n; ++r) make_peer(&peers[r], r, options);
  initial = test_accuracy(peers[0].model);
  if (graph == FEDRT_PEER_GRAPH_TORUS) {
    uint32_t ranks[4];
    size_t count = 0;
    /* 2 x 2: rank 0's neighbours are 1 (its row) and 2 (its column). */
    CHECK_STATUS(fedrt_peer_neighbours(peers[0].peer, ranks, 4, &count), FEDRT_OK);
    CHECK(count == 2 && ranks[0] == 1 && ranks[1] == 2);
  }
  run_group(peers, n);
  if (codec != NULL && strncmp(codec, "moniqua", 7) == 0) {
    /* No theta named: Moniqua's bound derived one. */
    CHECK(strstr(fedrt_peer_gossip_codec(peers[0].peer), "theta=") != NULL);
  }
  for (r = 0; r < n; ++r) {
    const double trained = test_accuracy(peers[r].model);
    CHECK_STATUS(peers[r].result, FEDRT_OK);
    printf("gossip %s on the %s%s, peer %u: held-out accuracy %.3f -> %.3f\n", codec ? codec : "fp32",
           graph == FEDRT_PEER_GRAPH_TORUS ? "torus" : "ring", key ? " (joined)" : "", (unsigned)r, initial,
           trained);
    CHECK(trained > initial + 0.2);
  }
  for (r = 0; r < n; ++r) free_peer(&peers[r]);
}

/* ---- The join ------------------------------------------------------------- */

/* Three peers on the dense ring with the group's key, except `odd`, which
 * has `odd_key` (NULL: none): every peer's run fails with
 * FEDRT_UNAUTHENTICATED before any payload is sent, the others naming `odd`
 * (they join each other, and each refuses `odd` itself) and `odd` naming a
 * neighbour with `odd_says`. Nothing waits for a deadline (the step deadline
 * is a minute: the test's own timeout would end first). */
static void check_refused(uint32_t odd, const uint8_t* odd_key, const char* odd_says) {
  enum { kPeers = 3 };
  Peer peers[kPeers];
  fedrt_peer_options options = fedrt_peer_options_default();
  char odd_rank[32];
  uint32_t r;
  memset(peers, 0, sizeof peers);
  reset_queues();
  options.peers = kPeers;
  options.sgd = plain_sgd(0.1);
  options.batch = 8;
  options.step_timeout_ms = 60000;
  options.key = g_key;
  options.key_size = sizeof g_key;
  for (r = 0; r < kPeers; ++r) {
    fedrt_peer_options o = options;
    if (r == odd) {
      o.key = odd_key;
      o.key_size = odd_key != NULL ? sizeof g_key : 0;
    }
    make_peer(&peers[r], r, o);
  }
  run_group(peers, kPeers);
  snprintf(odd_rank, sizeof odd_rank, ": peer rank %u (p%u): ", (unsigned)odd, (unsigned)odd);
  for (r = 0; r < kPeers; ++r) {
    printf("  peer %u: %s\n", (unsigned)r, peers[r].error);
    CHECK_STATUS(peers[r].result, FEDRT_UNAUTHENTICATED);
    CHECK(fedrt_peer_bytes_sent(peers[r].peer) == 0);
    if (r == odd) {
      CHECK(strstr(peers[r].error, ": peer rank ") != NULL);
      CHECK(strstr(peers[r].error, odd_says) != NULL);
    } else {
      CHECK(strstr(peers[r].error, odd_rank) != NULL);
    }
  }
  for (r = 0; r < kPeers; ++r) free_peer(&peers[r]);
}

static void test_join_refused(void) {
  /* Rank 2 holds another key: the proofs on its streams do not match. */
  printf("a peer with another key:\n");
  check_refused(2, g_other_key, "join");
  /* Rank 1 holds none: it hears a join where it expects data, and its
   * neighbours hear data where they expect the join. */
  printf("a peer without the key:\n");
  check_refused(1, NULL, "this peer has none");
}

/* ---- Errors ---------------------------------------------------------------- */

static void test_errors(void) {
  Peer p;
  const fedrt_data_view data = train_view();
  fedrt_peer_options options = fedrt_peer_options_default();
  fedrt_peer_callbacks callbacks;
  fedrt_peer_t* peer = NULL;
  size_t bytes = 0, small = 0;
  void* memory;
  memset(&p, 0, sizeof p);
  reset_queues();
  make_model(&p);
  callbacks = callbacks_of(&p);
  options.peers = 2;
  options.batch = 8;

  /* The defaults fit (all of the data when share is NULL). */
  REQUIRE_OK(fedrt_peer_size(p.model, &data, NULL, 0, NULL, &bytes));
  REQUIRE_OK(fedrt_peer_size(p.model, &data, NULL, 0, &options, &bytes));
  memory = malloc(bytes);
  REQUIRE(memory != NULL);

  /* A block too small: the size query's answer less one byte. */
  CHECK_STATUS(fedrt_peer_init(memory, bytes - 1, p.model, &data, NULL, 0, &options, &callbacks, &peer),
               FEDRT_OUT_OF_RANGE);
  CHECK_STATUS(fedrt_peer_init(memory, 16, p.model, &data, NULL, 0, &options, &callbacks, &peer), FEDRT_OUT_OF_RANGE);
  CHECK(strstr(fedrt_last_error(), "fedrt_peer_size") != NULL);
  CHECK(peer == NULL);

  /* Bad options. */
  {
    fedrt_peer_options o = options;
    o.rank = 2;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.peers = 0;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.batch = MAX_BATCH + 1;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_OUT_OF_RANGE);
    o = options;
    o.epochs = 0;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.reduce = (fedrt_peer_reduce)9;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.graph = FEDRT_PEER_GRAPH_TORUS; /* a ring reduce */
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    CHECK(strstr(fedrt_last_error(), "torus") != NULL);
    o = options;
    o.iwp_density = 0.1f; /* not IWP */
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.reduce = FEDRT_PEER_GOSSIP;
    o.sgd.momentum = 0.9f; /* gossip takes plain SGD steps */
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    CHECK(strstr(fedrt_last_error(), "momentum") != NULL);
    o = options;
    o.step_timeout_ms = 0;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o = options;
    o.max_frame_bytes = 100; /* below the smallest frame limit */
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    /* Keys: too short, NULL with a size; with one, random_bytes is required. */
    o = options;
    o.key = g_key;
    o.key_size = FEDRT_KEY_MIN_BYTES - 1;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    CHECK(strstr(fedrt_last_error(), "key") != NULL);
    o.key = NULL;
    o.key_size = sizeof g_key;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o.key = g_key;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_OK);
    CHECK(small == bytes);
    {
      fedrt_peer_callbacks c = callbacks;
      c.random_bytes = NULL;
      CHECK_STATUS(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &o, &c, &peer), FEDRT_INVALID_ARGUMENT);
      CHECK(strstr(fedrt_last_error(), "callbacks->random_bytes") != NULL);
      if (!fedrt_system_crypto_available()) {
        c = callbacks;
        c.hmac_sha256 = NULL;
        CHECK_STATUS(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &o, &c, &peer), FEDRT_INVALID_ARGUMENT);
        CHECK(strstr(fedrt_last_error(), "callbacks->hmac_sha256") != NULL);
      }
    }
  }
  /* Codec specs: one that does not apply, one missing, ones that do not parse. */
  {
    fedrt_peer_options o = options;
    o.codec = "fp16"; /* the dense ring takes none */
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    CHECK(strstr(fedrt_last_error(), "does not apply") != NULL);
    o.reduce = FEDRT_PEER_RING_CODEC;
    o.codec = NULL;
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o.reduce = FEDRT_PEER_RING_COMPRESSED;
    o.codec = "nosuchcodec:s=2";
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    o.reduce = FEDRT_PEER_GOSSIP;
    o.codec = "moniqua:bits=99";
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 0, &o, &small), FEDRT_INVALID_ARGUMENT);
    CHECK_STATUS(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &o, &callbacks, &peer),
                 FEDRT_INVALID_ARGUMENT);
  }
  /* Arguments. */
  {
    fedrt_peer_callbacks c = callbacks;
    uint32_t share[2] = {0, TRAIN};
    c.receive = NULL;
    CHECK_STATUS(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &options, &c, &peer),
                 FEDRT_INVALID_ARGUMENT);
    CHECK(strstr(fedrt_last_error(), "callbacks->receive") != NULL);
    CHECK_STATUS(fedrt_peer_size(NULL, &data, NULL, 0, &options, &small), FEDRT_INVALID_ARGUMENT);
    CHECK_STATUS(fedrt_peer_size(p.model, &data, NULL, 3, &options, &small), FEDRT_INVALID_ARGUMENT);
    CHECK_STATUS(fedrt_peer_size(p.model, &data, share, 2, &options, &small), FEDRT_INVALID_ARGUMENT);
    CHECK_STATUS(fedrt_peer_run(NULL), FEDRT_INVALID_ARGUMENT);
    fedrt_peer_destroy(NULL);
  }

  /* A neighbour whose stream is closed fails the step, naming its rank. */
  {
    p.rank = 0;
    options.rank = 0;
    g_closed[1] = 1;
    REQUIRE_OK(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &options, &callbacks, &peer));
    CHECK_STATUS(fedrt_peer_run(peer), FEDRT_UNAVAILABLE);
    CHECK(strstr(fedrt_last_error(), "peer rank 1") != NULL);
    fedrt_peer_destroy(peer);
  }
  /* One that stays silent fails it at the step deadline. */
  {
    reset_queues();
    options.step_timeout_ms = 100;
    REQUIRE_OK(fedrt_peer_init(memory, bytes, p.model, &data, NULL, 0, &options, &callbacks, &peer));
    CHECK_STATUS(fedrt_peer_run(peer), FEDRT_DEADLINE_EXCEEDED);
    CHECK(strstr(fedrt_last_error(), "peer rank 1") != NULL);
    fedrt_peer_destroy(peer);
  }
  free(memory);
  free_peer(&p);
}

int main(void) {
  make_data();
  make_keys();
  test_errors();
  test_dense_ring(NULL);
  test_dense_ring(g_key);
  test_join_refused();
  test_gossip(FEDRT_PEER_GRAPH_RING, NULL, 3, NULL);
  test_gossip(FEDRT_PEER_GRAPH_TORUS, "moniqua:bits=4", 4, NULL);
  /* The torus's streams (to the row and the column neighbour) join too. */
  test_gossip(FEDRT_PEER_GRAPH_TORUS, NULL, 4, g_key);
  reset_queues();
  return check_finish();
}
