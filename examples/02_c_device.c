/* 02_c_device: a federated-training device written in C, over plain POSIX
 * sockets: it joins `fedrt serve`, trains its share of Fashion-MNIST in the
 * rounds it is sampled in, and sends its updates compressed with the codec
 * the aggregator names. The protocol, training and codecs are fedrt's C
 * device client (fedrt/fedrt.h); this program owns the socket, the clock,
 * the randomness, the reconnects and the files (fedrt/fedrt_host.h loads
 * them as `fedrt device` does).
 *
 * Usage:
 *   02_c_device --server HOST:PORT --key-file FILE [--id ID] [--data DIR]
 *               [--model SPEC] [--partition iid|dirichlet:A|shards:K]
 *               [--devices N] [--index I] [--partition-seed S] [--batch B]
 *               [--state-file FILE] [--give-up-ms MS]
 *
 * The flags, their defaults and their meaning are those of `fedrt device`
 * (runtime/README.md): the same flags give the same share, the same example
 * order and so the same updates. The TLS flags do not apply (plain TCP
 * here) and are refused. Exit status 0 when the aggregator ended the
 * training (or on SIGINT / SIGTERM), 1 when the device stopped on an error
 * (the reason on stderr), 2 for bad arguments.
 *
 * Expected output: with a key file per device (dev-0.key holds the line
 * "dev-0 <32 to 128 hex digits>", mode 0600: transport/README.md) and
 * keys.txt holding all four lines,
 *   fedrt serve --key-file keys.txt --model mlp:784-64-10 --codec ndqsg --rounds 5 --min-devices 4 --steps 20
 *   fedrt device --server 127.0.0.1:PORT --key-file dev-1.key --model mlp:784-64-10 --devices 4   (and dev-2, dev-3)
 *   02_c_device  --server 127.0.0.1:PORT --key-file dev-0.key --model mlp:784-64-10 --devices 4
 * this device prints (the "[fedrt info]" lines are the library's log, on
 * stderr; the kernels are those of the CPU: scalar, avx2, avx512 or neon)
 *   02_c_device dev-0: 15000 examples (iid, share 0 of 4), model mlp:784-64-10, kernels avx512
 *   02_c_device dev-0: connected to 127.0.0.1:37283
 *   [fedrt info] device dev-0: joined at round 0
 *   [fedrt info] device dev-0: round 0 sent 3927 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 1.3870
 *   [fedrt info] device dev-0: round 1 sent 3878 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 0.8329
 *   [fedrt info] device dev-0: round 2 sent 2484 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 0.7249
 *   [fedrt info] device dev-0: round 3 sent 4532 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 0.7512
 *   [fedrt info] device dev-0: round 4 sent 3929 bytes (ndqsg:s1=3,rho=3,b=0,ef=off,ec=rans), loss 0.6529
 *   [fedrt info] device dev-0: the aggregator ended the training (training finished)
 *   02_c_device dev-0: the aggregator ended the training after round 4
 * and `fedrt serve` ends with
 *   round 5/5  updates 4/4  test acc 78.00%  train loss 0.6604  up 0.018 MB  down 0.814 MB  x45.9 vs fp32  wraps 47  rho 3  0.1 s
 * the same figures, to the digit, as with four `fedrt device` processes
 * (capi_c_device_example_test checks it). When the aggregator is not there
 * yet, or the link drops, it prints
 *   02_c_device dev-0: link lost (connect: Connection refused), reconnecting in 77 ms
 * and retries with backoff (100 ms doubling to 5 s, jittered) for up to
 * --give-up-ms without reaching it.
 *
 * In a build of fedrt without OpenSSL (the core preset) the library has no
 * HMAC-SHA256 of its own: this program then passes the example port's
 * (examples/port/hmac_sha256.c) in fedrt_device_callbacks.hmac_sha256, as a
 * firmware device passes its platform's (mbedTLS, a secure element). In a
 * build without zlib it reads the data set's IDX files gunzipped
 * (train-images-idx3-ubyte and train-labels-idx1-ubyte, e.g. made with
 * `gunzip -k`); with zlib either form.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fedrt/fedrt.h"
#include "fedrt/fedrt_host.h"
#include "port/hmac_sha256.h"

#define PROGRAM "02_c_device"

/* ---- Flags (those of `fedrt device`) -------------------------------------- */

typedef struct {
  const char* server;        /* HOST:PORT */
  char host[256];
  char port[8];
  const char* id;            /* NULL: the key file's only entry */
  const char* key_file;
  const char* data;
  const char* model;
  const char* partition;
  int devices;
  int index;                 /* -1: the id's trailing number */
  uint64_t partition_seed;
  int batch;
  const char* state_file;    /* NULL: the residual lives in memory only */
  uint64_t give_up_ms;
} Flags;

static int parse_number(const char* flag, const char* text, uint64_t min, uint64_t max, uint64_t* value) {
  char* end = NULL;
  unsigned long long parsed;
  if (text[0] < '0' || text[0] > '9') {
    fprintf(stderr, PROGRAM ": %s '%s' is not a number\n", flag, text);
    return 0;
  }
  errno = 0;
  parsed = strtoull(text, &end, 10);
  if (*end != '\0' || errno == ERANGE || parsed < min || parsed > max) {
    fprintf(stderr, PROGRAM ": %s %s is not a number in %llu..%llu\n", flag, text, (unsigned long long)min,
            (unsigned long long)max);
    return 0;
  }
  *value = (uint64_t)parsed;
  return 1;
}

static int usage(void) {
  fprintf(stderr,
          "usage: " PROGRAM " --server HOST:PORT --key-file FILE [--id ID] [--data DIR] [--model SPEC]\n"
          "       [--partition iid|dirichlet:A|shards:K] [--devices N] [--index I] [--partition-seed S]\n"
          "       [--batch B] [--state-file FILE] [--give-up-ms MS]\n");
  return 0;
}

/* Fills *flags from argv ("--flag value" or "--flag=value"); 0 on bad ones. */
static int parse_flags(int argc, char** argv, Flags* flags) {
  static const char* const kTlsFlags[] = {"--tls-ca", "--tls-server-name", "--tls-cert", "--tls-key"};
  int i;
  size_t t;
  memset(flags, 0, sizeof *flags);
  flags->data = "/usr/share/datasets/fashion-mnist";
  flags->model = "mlp:784-300-100-10";
  flags->partition = "iid";
  flags->devices = 1;
  flags->index = -1;
  flags->partition_seed = 7;
  flags->batch = 32;
  flags->give_up_ms = 60000;
  for (i = 1; i < argc; ++i) {
    char name[64];
    const char* value;
    const char* equals = strchr(argv[i], '=');
    uint64_t number;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return usage();
    if (strncmp(argv[i], "--", 2) != 0) {
      fprintf(stderr, PROGRAM ": unexpected argument '%s'\n", argv[i]);
      return usage();
    }
    if (equals != NULL) {
      const size_t n = (size_t)(equals - argv[i]);
      if (n >= sizeof name) {
        fprintf(stderr, PROGRAM ": unknown flag '%s'\n", argv[i]);
        return usage();
      }
      memcpy(name, argv[i], n);
      name[n] = '\0';
      value = equals + 1;
    } else {
      if (strlen(argv[i]) >= sizeof name) {
        fprintf(stderr, PROGRAM ": unknown flag '%s'\n", argv[i]);
        return usage();
      }
      strcpy(name, argv[i]);
      value = i + 1 < argc ? argv[i + 1] : NULL;
      if (value != NULL) ++i;
    }
    for (t = 0; t < sizeof kTlsFlags / sizeof kTlsFlags[0]; ++t) {
      if (strcmp(name, kTlsFlags[t]) == 0) {
        fprintf(stderr, PROGRAM ": %s does not apply: this example speaks plain TCP over POSIX sockets "
                        "(fedrt device connects over TLS)\n", name);
        return 0;
      }
    }
    if (value == NULL) {
      fprintf(stderr, PROGRAM ": %s needs a value\n", name);
      return usage();
    }
    if (strcmp(name, "--server") == 0) flags->server = value;
    else if (strcmp(name, "--id") == 0) flags->id = value;
    else if (strcmp(name, "--key-file") == 0) flags->key_file = value;
    else if (strcmp(name, "--data") == 0) flags->data = value;
    else if (strcmp(name, "--model") == 0) flags->model = value;
    else if (strcmp(name, "--partition") == 0) flags->partition = value;
    else if (strcmp(name, "--state-file") == 0) flags->state_file = value;
    else if (strcmp(name, "--devices") == 0) {
      if (!parse_number(name, value, 1, 100000, &number)) return 0;
      flags->devices = (int)number;
    } else if (strcmp(name, "--index") == 0) {
      if (!parse_number(name, value, 0, 99999, &number)) return 0;
      flags->index = (int)number;
    } else if (strcmp(name, "--partition-seed") == 0) {
      if (!parse_number(name, value, 0, UINT64_MAX, &flags->partition_seed)) return 0;
    } else if (strcmp(name, "--batch") == 0) {
      if (!parse_number(name, value, 1, 65536, &number)) return 0;
      flags->batch = (int)number;
    } else if (strcmp(name, "--give-up-ms") == 0) {
      if (!parse_number(name, value, 0, UINT32_MAX, &flags->give_up_ms)) return 0;
    } else {
      fprintf(stderr, PROGRAM ": unknown flag '%s'\n", name);
      return usage();
    }
  }
  if (flags->server == NULL || flags->key_file == NULL) {
    fprintf(stderr, PROGRAM ": --server and --key-file are required\n");
    return usage();
  }
  {
    uint64_t number;
    const char* colon = strrchr(flags->server, ':');
    const size_t host_length = colon != NULL ? (size_t)(colon - flags->server) : 0;
    if (colon == NULL || host_length == 0 || host_length >= sizeof flags->host ||
        !parse_number("the port in --server", colon + 1, 1, 65535, &number)) {
      fprintf(stderr, PROGRAM ": --server must be HOST:PORT\n");
      return 0;
    }
    memcpy(flags->host, flags->server, host_length);
    flags->host[host_length] = '\0';
    snprintf(flags->port, sizeof flags->port, "%u", (unsigned)number);
  }
  return 1;
}

/* ---- The platform: clock, randomness, socket ------------------------------ */

static volatile sig_atomic_t g_stop = 0;

static void on_signal(int signal_number) {
  (void)signal_number;
  g_stop = 1;
}

static uint64_t monotonic_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000u + (uint64_t)now.tv_nsec / 1000000u;
}

static void sleep_ms(uint32_t ms) {
  struct timespec pause;
  pause.tv_sec = (time_t)(ms / 1000u);
  pause.tv_nsec = (long)(ms % 1000u) * 1000000L;
  nanosleep(&pause, NULL);
}

/* What the callbacks reach through their `user` pointer. */
typedef struct {
  int socket;            /* -1 between sessions */
  FILE* urandom;
  const char* id;
  const char* state_file;
} Link;

static fedrt_status link_send(void* user, const uint8_t* data, size_t size) {
  Link* link = (Link*)user;
  while (size > 0) {
    const ssize_t n = send(link->socket, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return FEDRT_UNAVAILABLE;
    data += n;
    size -= (size_t)n;
  }
  return FEDRT_OK;
}

static fedrt_status link_receive(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms, size_t* received) {
  Link* link = (Link*)user;
  struct pollfd ready;
  ssize_t n;
  int polled;
  ready.fd = link->socket;
  ready.events = POLLIN;
  ready.revents = 0;
  *received = 0;
  polled = poll(&ready, 1, (int)timeout_ms);
  if (polled < 0) return errno == EINTR ? FEDRT_OK : FEDRT_IO_ERROR; /* a signal: let should_stop look */
  if (polled == 0) return FEDRT_OK;
  n = recv(link->socket, buffer, capacity, 0);
  if (n == 0) return FEDRT_UNAVAILABLE; /* the aggregator closed the connection */
  if (n < 0) return errno == EINTR || errno == EAGAIN ? FEDRT_OK : FEDRT_UNAVAILABLE;
  *received = (size_t)n;
  return FEDRT_OK;
}

static uint64_t link_now_ms(void* user) {
  (void)user;
  return monotonic_ms();
}

static fedrt_status link_random_bytes(void* user, uint8_t* out, size_t size) {
  Link* link = (Link*)user;
  return fread(out, 1, size, link->urandom) == size ? FEDRT_OK : FEDRT_IO_ERROR;
}

/* Used only where fedrt has no HMAC of its own (fedrt_system_crypto_available). */
static fedrt_status port_mac(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                             size_t message_size, uint8_t* mac) {
  (void)user;
  port_hmac_sha256(key, key_size, message, message_size, mac);
  return FEDRT_OK;
}

static int link_should_stop(void* user) {
  (void)user;
  return g_stop != 0;
}

/* Saved before the update goes out, so a restart resumes with it. */
static void link_on_residual(void* user, const float* residual, size_t count) {
  Link* link = (Link*)user;
  if (fedrt_host_residual_save(link->state_file, residual, count) != FEDRT_OK) {
    fprintf(stderr, PROGRAM " %s: %s\n", link->id, fedrt_last_error());
  }
}

/* A connected TCP socket to host:port within timeout_ms, or -1 with the
 * reason in `error`. */
static int connect_to(const char* host, const char* port, uint32_t timeout_ms, char* error, size_t error_size) {
  struct addrinfo hints, *found = NULL, *a;
  int fd = -1, code;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  code = getaddrinfo(host, port, &hints, &found);
  if (code != 0) {
    snprintf(error, error_size, "cannot resolve %s: %s", host, gai_strerror(code));
    return -1;
  }
  snprintf(error, error_size, "no address for %s", host);
  for (a = found; a != NULL; a = a->ai_next) {
    struct pollfd writable;
    int flags, so_error = 0, one = 1;
    socklen_t length = sizeof so_error;
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    /* Connect without blocking, so the attempt has a deadline. */
    flags = fcntl(fd, F_GETFL, 0);
    fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      snprintf(error, error_size, "connect: %s", strerror(errno));
      close(fd);
      fd = -1;
      continue;
    }
    writable.fd = fd;
    writable.events = POLLOUT;
    writable.revents = 0;
    if (poll(&writable, 1, (int)timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &length) != 0 ||
        so_error != 0) {
      snprintf(error, error_size, "connect: %s", so_error != 0 ? strerror(so_error) : "timed out");
      close(fd);
      fd = -1;
      continue;
    }
    fcntl(fd, F_SETFL, flags);
    /* Frames go out whole: do not hold small ones (heartbeats, acks) back. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    break;
  }
  freeaddrinfo(found);
  return fd;
}

/* ---- The device ----------------------------------------------------------- */

int main(int argc, char** argv) {
  Flags flags;
  char id[FEDRT_DEVICE_ID_MAX + 1];
  uint8_t key[FEDRT_KEY_MAX_BYTES];
  size_t key_size = 0, share_count = 0, model_bytes = 0;
  fedrt_host_dataset_t* dataset = NULL;
  fedrt_data_view view;
  uint32_t* share = NULL;
  void* model_memory = NULL;
  fedrt_model_t* model = NULL;
  fedrt_device_t* device = NULL;
  fedrt_device_options options;
  fedrt_device_callbacks callbacks;
  Link link;
  struct sigaction stop_action;
  uint32_t backoff_ms = 100;
  uint64_t unreachable_since, jitter;
  int index, exit_code = 1;

  if (!parse_flags(argc, argv, &flags)) return 2;
  memset(&stop_action, 0, sizeof stop_action);
  stop_action.sa_handler = on_signal; /* no SA_RESTART: poll returns, should_stop sees it */
  sigaction(SIGINT, &stop_action, NULL);
  sigaction(SIGTERM, &stop_action, NULL);
  memset(&link, 0, sizeof link);
  link.socket = -1;

  /* What `fedrt device` loads, loaded by the same code. */
  if (fedrt_host_key_load(flags.key_file, flags.id, id, sizeof id, key, sizeof key, &key_size) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    return 1;
  }
  index = flags.index;
  if (index < 0 && fedrt_host_share_index(id, flags.devices, &index) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    return 2;
  }
  link.id = id;
  link.state_file = flags.state_file;
  link.urandom = fopen("/dev/urandom", "rb");
  if (link.urandom == NULL) {
    fprintf(stderr, PROGRAM ": cannot open /dev/urandom: %s\n", strerror(errno));
    return 1;
  }
  if (fedrt_host_dataset_load(flags.data, &dataset) != FEDRT_OK || fedrt_host_dataset_view(dataset, &view) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    goto done;
  }
  share = (uint32_t*)malloc(view.count * sizeof *share);
  if (share == NULL) {
    fprintf(stderr, PROGRAM ": out of memory for the share\n");
    goto done;
  }
  if (fedrt_host_dataset_share(dataset, flags.partition, flags.devices, index, flags.partition_seed, share, view.count,
                               &share_count) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    goto done;
  }

  /* The model lives in memory this program owns, sized for the batch. */
  if (fedrt_model_size(flags.model, NULL, flags.batch, &model_bytes) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    goto done;
  }
  model_memory = malloc(model_bytes);
  if (model_memory == NULL ||
      fedrt_model_init(model_memory, model_bytes, flags.model, NULL, 1, flags.batch, &model) != FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", model_memory == NULL ? "out of memory for the model" : fedrt_last_error());
    goto done;
  }

  options = fedrt_device_options_default();
  options.batch = flags.batch;
  options.shuffle_seed = fedrt_host_shuffle_seed(id, flags.partition_seed);
  memset(&callbacks, 0, sizeof callbacks);
  callbacks.user = &link;
  callbacks.send = link_send;
  callbacks.receive = link_receive;
  callbacks.now_ms = link_now_ms;
  callbacks.random_bytes = link_random_bytes;
  /* The library's (OpenSSL) where it has one, else the example port's. */
  callbacks.hmac_sha256 = fedrt_system_crypto_available() ? NULL : port_mac;
  callbacks.should_stop = link_should_stop;
  callbacks.on_residual = flags.state_file != NULL ? link_on_residual : NULL;
  if (fedrt_device_create(id, key, key_size, model, &view, share, share_count, &options, &callbacks, &device) !=
      FEDRT_OK) {
    fprintf(stderr, PROGRAM ": %s\n", fedrt_last_error());
    goto done;
  }
  if (flags.state_file != NULL) {
    float* residual = (float*)malloc(fedrt_model_parameter_count(model) * sizeof *residual);
    fedrt_status loaded = residual != NULL ? fedrt_host_residual_load(flags.state_file, residual,
                                                                     fedrt_model_parameter_count(model))
                                           : FEDRT_RESOURCE_EXHAUSTED;
    if (loaded == FEDRT_OK) loaded = fedrt_device_restore_residual(device, residual, fedrt_model_parameter_count(model));
    free(residual);
    if (loaded == FEDRT_OK) {
      printf(PROGRAM " %s: restored the error-feedback residual from %s\n", id, flags.state_file);
    } else if (loaded == FEDRT_NOT_FOUND) {
      printf(PROGRAM " %s: no state file at %s yet: the residual starts at zero\n", id, flags.state_file);
    } else {
      /* Starting from zero would silently drop what the file holds: the
       * owner decides (remove the file to start afresh). */
      fprintf(stderr, PROGRAM ": --state-file %s\n", fedrt_last_error());
      goto done;
    }
  }
  printf(PROGRAM " %s: %zu examples (%s, share %d of %d), model %s, kernels %s\n", id, share_count, flags.partition,
         index, flags.devices, flags.model, fedrt_isa_name());
  fflush(stdout);

  /* Sessions until the aggregator ends the training; reconnect with
   * exponential backoff and jitter after a lost link, as `fedrt device`. */
  jitter = (uint64_t)fedrt_device_sender_id(device) ^ monotonic_ms();
  unreachable_since = monotonic_ms();
  while (!g_stop) {
    char error[512];
    const uint64_t joins_before = fedrt_device_joins(device);
    fedrt_status status;
    uint32_t wait_ms, slept;
    link.socket = connect_to(flags.host, flags.port, 5000, error, sizeof error);
    if (link.socket >= 0) {
      printf(PROGRAM " %s: connected to %s\n", id, flags.server);
      fflush(stdout);
      status = fedrt_device_run_session(device);
      close(link.socket);
      link.socket = -1;
      snprintf(error, sizeof error, "%s", fedrt_last_error());
    } else {
      status = FEDRT_UNAVAILABLE;
    }
    if (status == FEDRT_OK) {
      printf(PROGRAM " %s: the aggregator ended the training after round %llu\n", id,
             (unsigned long long)fedrt_device_round(device));
      exit_code = 0;
      break;
    }
    if (status == FEDRT_CANCELLED) break;
    if (status == FEDRT_UNAUTHENTICATED || status == FEDRT_FAILED_PRECONDITION) {
      fprintf(stderr, PROGRAM " %s: %s\n", id, error);
      goto done;
    }
    if (fedrt_device_joins(device) > joins_before) {
      backoff_ms = 100;
      unreachable_since = monotonic_ms();
    }
    if (monotonic_ms() - unreachable_since > flags.give_up_ms) {
      fprintf(stderr, PROGRAM ": unavailable: the aggregator at %s stayed unreachable (%s)\n", flags.server, error);
      goto done;
    }
    jitter ^= jitter << 13; /* xorshift64 */
    jitter ^= jitter >> 7;
    jitter ^= jitter << 17;
    wait_ms = backoff_ms / 2 + (uint32_t)(jitter % (backoff_ms / 2 + 1));
    printf(PROGRAM " %s: link lost (%s), reconnecting in %u ms\n", id, error, wait_ms);
    fflush(stdout);
    for (slept = 0; slept < wait_ms && !g_stop; slept += 20) sleep_ms(20);
    backoff_ms = backoff_ms * 2 < 5000 ? backoff_ms * 2 : 5000;
  }
  if (g_stop) {
    printf(PROGRAM " %s: stopped\n", id);
    exit_code = 0;
  }

done:
  fflush(stdout);
  fedrt_device_destroy(device);
  fedrt_model_destroy(model);
  free(model_memory);
  free(share);
  fedrt_host_dataset_destroy(dataset);
  fclose(link.urandom);
  return exit_code;
}
