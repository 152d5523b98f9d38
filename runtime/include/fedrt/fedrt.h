/* fedrt.h: the C API of fedrt (C99), for firmware and for programs in any
 * language with a C foreign-function interface. It is a thin layer over the
 * C++ training core (fedrt/runtime/model.h, trainer.h), the codecs
 * (fedrt/codecs/codec.h), the star device and aggregator engines
 * (fedrt/runtime/device_client.h, aggregator_engine.h) and the peer trainer
 * (fedrt/runtime/peer_trainer.h); what those headers say about results
 * holds here. Programs on a host with files may also use fedrt/fedrt_host.h
 * (loading data sets, keys and state files; not for firmware).
 *
 * Conventions, for every function below:
 *
 *  - Names. Objects are opaque handles `fedrt_<object>_t` (fedrt_model_t,
 *    fedrt_codec_t, fedrt_device_t, fedrt_aggregator_t, fedrt_peer_t);
 *    functions are `fedrt_<object>_<action>`; plain structs
 *    the caller fills or reads are `fedrt_<what>` without `_t`.
 *
 *  - Status. A call that can fail returns a fedrt_status; FEDRT_OK is 0. The
 *    values are pinned (they equal fedrt::StatusCode in
 *    fedrt/platform/status.h and the codes in the wire protocol's error
 *    messages): a value never changes meaning and new ones are only appended.
 *    Output parameters (handles, sizes, single values) are set only when the
 *    call returns FEDRT_OK; an output array's contents are unspecified after
 *    a failure. A NULL handle, or a NULL pointer where an array or output is
 *    required, is FEDRT_INVALID_ARGUMENT; a caller buffer smaller than its
 *    size query says is FEDRT_OUT_OF_RANGE. Getters that cannot fail return
 *    their value directly (0 or NULL for a NULL handle).
 *
 *  - Error messages. A failing call also leaves a message ("out_of_range:
 *    batch of 65 does not fit ...") for fedrt_last_error(), kept per thread in
 *    a fixed buffer (one buffer in all in a build without threads,
 *    FEDRT_WITH_THREADS=OFF; storing it allocates nothing; longer messages are
 *    truncated at FEDRT_ERROR_MESSAGE_SIZE - 1 bytes). One slot per thread
 *    rather than per handle, because the calls that fail most often (size
 *    queries, init, create) have no handle yet. Successful calls leave the
 *    message as it was: read it right after the call that failed.
 *
 *  - Memory. A model lives entirely in caller memory: ask fedrt_model_size()
 *    how many bytes, then fedrt_model_init() places the handle, the
 *    parameters, gradients, optimizer state and the activation workspace
 *    for batches up to max_batch in it (any alignment; it is aligned inside).
 *    The memory must stay valid and untouched until fedrt_model_destroy(),
 *    and stays the caller's: destroy never frees it. A codec is created by
 *    fedrt_codec_create() on the heap and freed by fedrt_codec_destroy(), or
 *    placed in caller memory the same way as a model: fedrt_codec_size(),
 *    then fedrt_codec_init() (any alignment; destroy leaves the memory to
 *    the caller). A device client is placed the same way:
 *    fedrt_device_size(), then fedrt_device_init() puts the client, the
 *    global model, the update's payload buffer, one codec's storage, the
 *    training order and batch, the optimizer state and (for codecs with
 *    error feedback) the residual in the caller's memory; or
 *    fedrt_device_create() does the same on a heap block. It uses the
 *    caller's model handle and reads the caller's data view, which must both
 *    outlive it. An aggregator is placed the same way:
 *    fedrt_aggregator_size(), then fedrt_aggregator_init() (its block: the
 *    round sum, decoding scratch, the codecs, the update payload slots). It
 *    reads the caller's test set, which must outlive it. A peer trainer is
 *    placed the same way: fedrt_peer_size(), then fedrt_peer_init() (its
 *    block: the optimizer's velocity, the batch, the epoch's order, the
 *    saved gradient, the IWP accumulator, the collectives); it trains the
 *    caller's model handle and reads the caller's data view and share,
 *    which must outlive it. Every other array passed in
 *    (features, labels, vectors, payloads, side information, keys, share
 *    indices) is only read during the call, or copied; every output array is
 *    the caller's and is written only during the call. Strings returned by getters (specs, names, tensor
 *    names) belong to the handle and live as long as it does.
 *
 *  - Allocation. These calls allocate from the heap:
 *      fedrt_model_size        builds the layer list to measure it, frees it;
 *      fedrt_model_init        the model's bookkeeping (layer objects, the
 *                              tensor table: a few hundred bytes per layer),
 *                              freed by fedrt_model_destroy;
 *      fedrt_codec_create      the codec object, freed by fedrt_codec_destroy;
 *      fedrt_device_size       measures the codecs it accepts (builds each
 *                              once), frees them;
 *      fedrt_device_init       copies of the id, key, share indices and
 *                              callbacks, and the building memory of the
 *                              frames an update is sent in (about 1 KiB
 *                              per frame, 7 KiB more for ALQ / AMQ): freed
 *                              by fedrt_device_destroy;
 *      fedrt_device_create     the same, and the block fedrt_device_init
 *                              takes;
 *      fedrt_device_run_session
 *                              per session: the connection state and the
 *                              join; per received frame its bytes and per
 *                              heartbeat sent its frame (the stream
 *                              binding's, freed once handled or written).
 *                              The round itself
 *                              (the model chunks written into place,
 *                              training, encoding, the update's frames)
 *                              runs on the device's memory;
 *      fedrt_aggregator_size   measures: builds the model and codecs
 *                              once, frees them;
 *      fedrt_aggregator_init   the copy of the keys and options, the global
 *                              model, the server optimizer's state and the
 *                              engine's bookkeeping (aggregator_engine.h),
 *                              freed by fedrt_aggregator_destroy;
 *      fedrt_aggregator_open,
 *      _receive, _tick         per connection its stream state and map
 *                              entries, per received frame its bytes; the
 *                              round path what aggregator_engine.h lists
 *                              (the round's report, the test evaluation,
 *                              frames the engine encodes);
 *      fedrt_peer_size         measures: builds a context, frees it;
 *      fedrt_peer_init         the copy of the options, the context (a
 *                              stream connection per neighbour, a 64 KiB
 *                              read buffer) and what PeerTrainer::CreateIn
 *                              allocates besides its block (peer_trainer.h);
 *                              with share NULL, the list of every example;
 *                              freed by fedrt_peer_destroy;
 *      fedrt_peer_run          per received frame its bytes, and the
 *                              collectives' scratch (peer_trainer.h lists the
 *                              step path's);
 *      fedrt_codec_decode,
 *      fedrt_codec_decode_accumulate
 *                              of a codec from fedrt_codec_create:
 *                              short-lived scratch, freed before they return,
 *                              in the quantizers (per-bucket scales, staged
 *                              symbols; fp32, fp16, bf16 and the sparsifiers
 *                              decode without any); a codec from
 *                              fedrt_codec_init decodes in its own memory;
 *      any call that fails     its message (the C++ core builds it as a
 *                              string) before it is copied into the per-thread
 *                              buffer;
 *      the first call that picks kernels (fedrt_isa_name, a train step, an
 *                              encode) detects the CPU, once per process,
 *                              and keeps its description.
 *    Nothing else allocates: after init, the training round path
 *    (fedrt_model_train_step, fedrt_model_evaluate, get and set parameters)
 *    fedrt_codec_encode, and every codec call on a codec from
 *    fedrt_codec_init run on caller memory only. (Host builds whose
 *    GEMM is OpenBLAS let OpenBLAS keep its own buffers, set up on first use;
 *    firmware and ARMv7 builds use the built-in GEMM.) fedrt is built without
 *    exceptions: if the heap is exhausted inside a call that allocates, the
 *    process aborts, as the C++ core does. No C++ exception crosses this API.
 *
 *  - Thread-safety. A handle is not synchronized: use it from one thread at a
 *    time. Distinct handles are independent and may be used concurrently
 *    from different threads. Functions without a handle (version, ISA, size
 *    queries, fedrt_last_error) may be called from any thread. A device
 *    client counts as using its model handle: between fedrt_device_create
 *    and fedrt_device_destroy only the device trains or sets it; so does a
 *    peer trainer inside fedrt_peer_run (its on_progress callback may
 *    evaluate the model). Peers of one group in one process run on one
 *    thread each.
 *
 *  - Callbacks. The aggregator's (fedrt_aggregator_callbacks: send, close,
 *    clock, randomness, HMAC, round reports) run only inside its calls, on
 *    the calling thread, with its `user` pointer. The device client reaches the application through function
 *    pointers (fedrt_device_callbacks: the byte stream, the clock,
 *    randomness, HMAC-SHA256, stop, the residual). They are called only
 *    from inside fedrt_device_run_session, on the thread that called it,
 *    each with the `user` pointer given at creation; pointers they receive
 *    are valid during the call only. They must not call back into the same
 *    device handle. The application owns the stream: it connects before a
 *    session and closes it after, fedrt never opens or closes anything.
 *    The peer trainer's (fedrt_peer_callbacks: the streams to its
 *    neighbours, the clock, progress) run only inside fedrt_peer_run, on
 *    the thread that called it, the same way.
 *
 *  - Determinism. A model initialised from the same spec and seed has the
 *    same parameters as fedrt::Model::Create in C++ (bit for bit), and a
 *    payload encoded here equals, byte for byte, what `fedrt codec encode`
 *    writes for the same spec, vector and context.
 *
 * Linking: CMake `find_package(fedrt)` then `target_link_libraries(app
 * PRIVATE fedrt::c)`. The library is C++ inside, so the final link needs the
 * C++ runtime: in CMake, enable CXX in the project (project(app C CXX)) and it
 * links with the C++ driver; elsewhere link with g++ or add -lstdc++ -lm.
 */
#ifndef FEDRT_FEDRT_H_
#define FEDRT_FEDRT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status ----------------------------------------------------------- */

/* Pinned: equal to fedrt::StatusCode (fedrt/platform/status.h). */
typedef enum fedrt_status {
  FEDRT_OK = 0,
  FEDRT_INVALID_ARGUMENT = 1,    /* the caller passed something wrong (a spec, a NULL) */
  FEDRT_OUT_OF_RANGE = 2,        /* a size or index outside what is allowed */
  FEDRT_CORRUPT = 3,             /* untrusted bytes failed validation (CRC, header, counts) */
  FEDRT_UNSUPPORTED = 4,         /* valid request this build or CPU cannot serve */
  FEDRT_NOT_FOUND = 5,           /* a file or named entity does not exist */
  FEDRT_IO_ERROR = 6,            /* the operating system reported an error */
  FEDRT_DEADLINE_EXCEEDED = 7,   /* an operation ran out of time */
  FEDRT_UNAVAILABLE = 8,         /* a peer or server is gone; retrying may help */
  FEDRT_UNAUTHENTICATED = 9,     /* a key or signature did not match */
  FEDRT_RESOURCE_EXHAUSTED = 10, /* a limit (memory, frame size) was hit */
  FEDRT_FAILED_PRECONDITION = 11,/* state does not allow this now (wrong round, table version) */
  FEDRT_INTERNAL = 12,           /* a bug in fedrt */
  FEDRT_CANCELLED = 13           /* the caller asked to stop */
} fedrt_status;

/* A stable lower-case name: "ok", "invalid_argument", ...; "unknown" for a
 * value outside the enum. */
const char* fedrt_status_name(fedrt_status status);

/* Bytes of the per-thread message buffer, terminating NUL included. */
#define FEDRT_ERROR_MESSAGE_SIZE 256

/* The message of the last call that failed on this thread ("" if none has).
 * The pointer stays valid for the thread's lifetime; the text changes with
 * the next failing call on the same thread. */
const char* fedrt_last_error(void);

/* ---- Version and CPU --------------------------------------------------- */

/* The library's version; any argument may be NULL. */
void fedrt_version(int* major, int* minor, int* patch);
/* "0.1.0". */
const char* fedrt_version_string(void);
/* The kernel ISA codecs and training use on this CPU now: "scalar", "avx2",
 * "avx512" or "neon" (chosen once at run time; FEDRT_ISA=scalar forces it). */
const char* fedrt_isa_name(void);

/* ---- Model and training ------------------------------------------------- */

/* A sequential float32 network built from a spec string, trained with SGD
 * (runtime/README.md has the spec grammar): "mlp:784-32-10",
 * "cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10". */
typedef struct fedrt_model fedrt_model_t;

/* The optimizer (fedrt/runtime/optimizer.h) with a constant learning rate. */
typedef struct fedrt_sgd_options {
  double learning_rate; /* > 0 */
  float momentum;      /* [0, 1); 0 is plain SGD and needs no state memory */
  int nesterov;        /* non-zero: Nesterov momentum (needs momentum > 0) */
  float weight_decay;  /* L2 coefficient, >= 0 */
  float clip_norm;     /* clip the gradient to this global L2 norm; 0: off */
} fedrt_sgd_options;

/* Plain SGD at learning rate 0.01, what a NULL fedrt_sgd_options means. */
fedrt_sgd_options fedrt_sgd_options_default(void);

/* Bytes of caller memory fedrt_model_init needs for `spec` trained with
 * `sgd` (NULL: the default) in batches of up to `max_batch` examples.
 * FEDRT_INVALID_ARGUMENT for a bad spec, options or batch. */
fedrt_status fedrt_model_size(const char* spec, const fedrt_sgd_options* sgd, int max_batch,
                              size_t* bytes);

/* Builds the model and its optimizer in `memory` (`bytes` at least what
 * fedrt_model_size says, any alignment) and initialises the parameters from
 * `seed` exactly as fedrt::Model::Create does. On success *model points into
 * `memory`. FEDRT_OUT_OF_RANGE when `bytes` is too small. */
fedrt_status fedrt_model_init(void* memory, size_t bytes, const char* spec,
                              const fedrt_sgd_options* sgd, uint64_t seed, int max_batch,
                              fedrt_model_t** model);

/* Frees the bookkeeping init allocated; the caller's memory may then be
 * reused. NULL is ignored. */
void fedrt_model_destroy(fedrt_model_t* model);

/* Loss over a batch: mean cross-entropy and how many argmax predictions hit. */
typedef struct fedrt_batch_loss {
  double loss;
  int correct;
} fedrt_batch_loss;

/* One SGD update on a batch the caller holds: `features` is row-major
 * [batch x fedrt_model_input_size()] float (a CNN image is C x H x W),
 * `labels` [batch] class indices below fedrt_model_num_classes(). `loss`
 * (may be NULL) receives the batch's loss before the update.
 * 1 <= batch <= max_batch (FEDRT_OUT_OF_RANGE above it). Allocates nothing. */
fedrt_status fedrt_model_train_step(fedrt_model_t* model, const float* features,
                                    const uint8_t* labels, int batch, fedrt_batch_loss* loss);

/* Loss and hits on a batch without changing the parameters; `predictions`
 * (may be NULL) receives the argmax class of each example. Same shapes and
 * limits as fedrt_model_train_step. Allocates nothing. */
fedrt_status fedrt_model_evaluate(fedrt_model_t* model, const float* features,
                                  const uint8_t* labels, int batch, fedrt_batch_loss* loss,
                                  int* predictions);

size_t fedrt_model_parameter_count(const fedrt_model_t* model);
size_t fedrt_model_input_size(const fedrt_model_t* model);  /* features per example */
int fedrt_model_num_classes(const fedrt_model_t* model);
int fedrt_model_max_batch(const fedrt_model_t* model);
/* The spec the model was built from, as given. */
const char* fedrt_model_spec(const fedrt_model_t* model);

/* Copies the flat parameter vector into out[0 .. parameter_count);
 * FEDRT_OUT_OF_RANGE when capacity < parameter_count. */
fedrt_status fedrt_model_get_parameters(const fedrt_model_t* model, float* out, size_t capacity);
/* Replaces the parameters with in[0 .. count); count must equal
 * fedrt_model_parameter_count (FEDRT_INVALID_ARGUMENT otherwise). The
 * optimizer state (momentum) is kept. */
fedrt_status fedrt_model_set_parameters(fedrt_model_t* model, const float* in, size_t count);

/* One parameter tensor: its slice of the flat parameter vector. */
typedef struct fedrt_tensor_info {
  const char* name; /* "dense1.weight", "conv2.bias", ...; owned by the model */
  size_t offset;    /* first float in the parameter vector */
  size_t size;      /* floats */
} fedrt_tensor_info;

size_t fedrt_model_tensor_count(const fedrt_model_t* model);
/* FEDRT_OUT_OF_RANGE when index >= fedrt_model_tensor_count. */
fedrt_status fedrt_model_tensor(const fedrt_model_t* model, size_t index, fedrt_tensor_info* info);

/* ---- Codecs -------------------------------------------------------------- */

/* An update codec (quantizer, sparsifier, Moniqua) made from its spec string,
 * e.g. "dqsg:s=2,b=0" (codecs/README.md lists them). Payloads are
 * self-describing: they name the codec, its parameters, the length, round,
 * tensor and sender, and carry a CRC. Stateless between calls: error
 * feedback residuals and adaptive level tables (alq, amq: the initial table)
 * are not part of this API yet. */
typedef struct fedrt_codec fedrt_codec_t;

/* What sender and receiver agree on without sending it; all randomness
 * (dither, stochastic rounding, random subsets) derives from it. */
typedef struct fedrt_codec_context {
  uint64_t session_seed; /* agreed at join time */
  uint32_t round;
  uint32_t tensor_id;
  uint32_t sender_id;    /* low 24 bits take part in the random streams */
} fedrt_codec_context;

/* Creates a codec on the heap. FEDRT_INVALID_ARGUMENT for an unknown name,
 * key or out-of-range value; the message lists what is accepted. */
fedrt_status fedrt_codec_create(const char* spec, fedrt_codec_t** codec);
/* Bytes of caller memory fedrt_codec_init needs for `spec` with working
 * space for vectors of up to `max_d` floats. FEDRT_INVALID_ARGUMENT as
 * fedrt_codec_create. Allocates nothing (unless it fails). */
fedrt_status fedrt_codec_size(const char* spec, size_t max_d, size_t* bytes);
/* Builds the codec in `memory` (`bytes` at least what fedrt_codec_size says,
 * any alignment); on success *codec points into `memory`, which must stay
 * valid and untouched until fedrt_codec_destroy and stays the caller's.
 * Allocates nothing, and neither do encode, decode and decode_accumulate of
 * such a codec for vectors of up to `max_d` floats (longer ones work and
 * allocate their scratch). It decodes in its memory: one thread at a time
 * for every call. FEDRT_OUT_OF_RANGE when `bytes` is too small. */
fedrt_status fedrt_codec_init(void* memory, size_t bytes, const char* spec, size_t max_d,
                              fedrt_codec_t** codec);
/* Frees a codec from fedrt_codec_create, or ends one from fedrt_codec_init
 * (its memory stays the caller's). NULL is ignored. */
void fedrt_codec_destroy(fedrt_codec_t* codec);

/* Canonical spec with every key spelled out ("dqsg:s=2,b=0,ef=off,ec=rans"),
 * as payloads carry it. */
const char* fedrt_codec_spec(const fedrt_codec_t* codec);
/* The codec's registered name ("dqsg"). */
const char* fedrt_codec_name(const fedrt_codec_t* codec);
/* Non-zero for codecs whose decoding needs side information (ndqsg: the
 * receiver's estimate, e.g. the running mean; moniqua: its own model). */
int fedrt_codec_needs_side_info(const fedrt_codec_t* codec);
/* Upper bound on the payload bytes for a vector of `d` floats. */
size_t fedrt_codec_max_encoded_size(const fedrt_codec_t* codec, size_t d);

/* Encodes input[0 .. d) into out[0 .. capacity) and sets *written to the
 * payload's size. FEDRT_OUT_OF_RANGE when capacity <
 * fedrt_codec_max_encoded_size(d); FEDRT_INVALID_ARGUMENT for a NaN or Inf
 * in the input. Allocates nothing. */
fedrt_status fedrt_codec_encode(fedrt_codec_t* codec, const float* input, size_t d,
                                const fedrt_codec_context* context, uint8_t* out, size_t capacity,
                                size_t* written);

/* Decodes a payload of this codec into out[0 .. d). `d` must equal the
 * payload's length and the context its round, tensor and sender.
 * `side_info` (d floats) is required when fedrt_codec_needs_side_info, else
 * may be NULL. A damaged or truncated payload is FEDRT_CORRUPT (or another
 * error), never an out-of-bounds access. */
fedrt_status fedrt_codec_decode(const fedrt_codec_t* codec, const uint8_t* payload, size_t size,
                                const fedrt_codec_context* context, const float* side_info,
                                float* out, size_t d);

/* accumulator[i] += weight * decoded[i], in one pass where the codec fuses
 * it; the arguments are those of fedrt_codec_decode. */
fedrt_status fedrt_codec_decode_accumulate(const fedrt_codec_t* codec, const uint8_t* payload,
                                           size_t size, const fedrt_codec_context* context,
                                           const float* side_info, float weight,
                                           float* accumulator, size_t d);

/* ---- Device client (star topology) -------------------------------------- */

/* One device of the star topology (fedrt/runtime/device_client.h): it joins
 * an aggregator (`fedrt serve`) with its id and pre-shared key, and for every
 * round it is sampled in takes the global model, trains its examples on the
 * model handle with plain SGD at the learning rate the round instructs (the
 * model's own fedrt_sgd_options are not used), and sends the update
 * compressed with the codec the aggregator names (error feedback, ALQ / AMQ
 * level tables and NDQSG nesting included). The protocol, the training and
 * the codecs run in the C++ engine; this layer only hands it the
 * application's byte stream, clock and cryptography.
 *
 * The application's loop, one thread:
 *
 *   fedrt_device_size(...), then fedrt_device_init(...) in that memory
 *   (or fedrt_device_create(...) on the heap);   // once
 *   for (;;) {
 *     connect the stream (a socket, a UART link);
 *     status = fedrt_device_run_session(device);
 *     close the stream;
 *     if (status == FEDRT_OK) break;      // the aggregator ended the training
 *     if (status is FEDRT_UNAUTHENTICATED, FEDRT_FAILED_PRECONDITION or
 *         FEDRT_CANCELLED) stop: retrying cannot help;
 *     wait (back off), then reconnect: the device resumes at the
 *     aggregator's current round;
 *   }
 *   fedrt_device_destroy(device);
 */
typedef struct fedrt_device fedrt_device_t;

/* Labelled examples in caller memory, read in place (never copied) for as
 * long as a device uses them. Exactly one of `pixels` and `features` is set. */
typedef struct fedrt_data_view {
  size_t count;           /* examples, > 0 */
  size_t example_size;    /* features per example: the model's input size */
  int num_classes;        /* 1..256; every label is below it */
  /* [count x example_size] bytes, read as feature = (v / 255 - mean) / stddev
   * (the normalisation of `fedrt serve`'s training set, which
   * fedrt_host_dataset_view fills in); or NULL. */
  const uint8_t* pixels;
  float mean;             /* with pixels: finite */
  float stddev;           /* with pixels: > 0 */
  const float* features;  /* [count x example_size] floats, read as they are; or NULL */
  const uint8_t* labels;  /* [count] class indices */
} fedrt_data_view;

/* How the device trains and talks; fedrt_device_options_default() fills the
 * defaults, which are those of `fedrt device`. */
typedef struct fedrt_device_options {
  int batch;                      /* local SGD batch, 1..fedrt_model_max_batch(model); 32 */
  uint64_t shuffle_seed;          /* with the round and epoch, orders the examples; 1 */
  uint32_t heartbeat_interval_ms; /* heartbeats sent while training; 1000 */
  uint32_t idle_timeout_ms;       /* end a session that hears nothing this long; 0: trust the
                                     aggregator's heartbeats (its idle timeout closes dead links) */
  uint32_t join_timeout_ms;       /* a session must have joined by then; 10000 */
  uint32_t steps_per_slice;       /* SGD steps between two looks at the stream (heartbeats,
                                     should_stop); 8; 0: a whole round at once */
  uint32_t max_frame_bytes;       /* largest frame sent or accepted; 4 MiB, as the aggregator */
  /* The codec specs the device accepts from the aggregator, separated by
   * ';' (e.g. "ndqsg:s1=3,rho=3;fp16"): they size the device's memory (the
   * largest update payload and codec storage among them, and an
   * error-feedback residual if one asks for it) and name the codecs the
   * join announces. NULL or "": every codec of this build at its default
   * parameters (fp32's payload is a model size). Copied at init. */
  const char* codecs;
} fedrt_device_options;

fedrt_device_options fedrt_device_options_default(void);

/* The lengths fedrt_device_create accepts (fedrt/transport/auth.h). */
#define FEDRT_DEVICE_ID_MAX 64 /* characters of [A-Za-z0-9._-], at least 1 */
#define FEDRT_KEY_MIN_BYTES 16
#define FEDRT_KEY_MAX_BYTES 64
#define FEDRT_MAC_BYTES 32     /* an HMAC-SHA256 */

/* What the device needs from the platform. Every callback gets `user`. The
 * statuses they return are this header's: FEDRT_OK, or the failure (a session
 * ends with it). See "Callbacks" at the top for when they run. */
typedef struct fedrt_device_callbacks {
  void* user;
  /* Writes all `size` bytes to the stream, waiting as long as it takes, or
   * fails (FEDRT_UNAVAILABLE: the peer is gone). Required. */
  fedrt_status (*send)(void* user, const uint8_t* data, size_t size);
  /* Waits up to `timeout_ms` (0: not at all) for bytes from the stream, puts
   * up to `capacity` of them in `buffer` and sets *received to how many (0:
   * none came in time). FEDRT_UNAVAILABLE when the peer closed the stream,
   * another status when it failed. Required. */
  fedrt_status (*receive)(void* user, uint8_t* buffer, size_t capacity, uint32_t timeout_ms, size_t* received);
  /* Milliseconds of a monotonic clock: never goes backwards. Required. */
  uint64_t (*now_ms)(void* user);
  /* Cryptographically secure random bytes (the join's nonces). Required. */
  fedrt_status (*random_bytes)(void* user, uint8_t* out, size_t size);
  /* HMAC-SHA256 of message[0 .. message_size) under key[0 .. key_size) into
   * mac (FEDRT_MAC_BYTES). NULL: the system's, in builds that have one
   * (fedrt_system_crypto_available()); required in builds without OpenSSL
   * (firmware: mbedTLS, a secure element). */
  fedrt_status (*hmac_sha256)(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                              size_t message_size, uint8_t* mac);
  /* Non-zero ends the session with FEDRT_CANCELLED. Asked between training
   * slices and while waiting for bytes, so it is seen within about
   * steps_per_slice steps or a receive timeout (at most 200 ms). NULL: never. */
  int (*should_stop)(void* user);
  /* The error-feedback residual (count floats) after an update was encoded
   * with a codec that keeps one (ef=on), before the update is sent: a
   * device that persists it (fedrt_host_residual_save on a host, flash on
   * firmware) gives it back to fedrt_device_restore_residual after a
   * restart, so the error carried forward is not lost. NULL: not kept. */
  void (*on_residual)(void* user, const float* residual, size_t count);
} fedrt_device_callbacks;

/* Non-zero when this build has its own HMAC-SHA256 and secure randomness
 * (built with OpenSSL), so fedrt_device_callbacks.hmac_sha256 may be NULL. */
int fedrt_system_crypto_available(void);

/* The bytes of memory fedrt_device_init needs for a device training
 * `model` on `share_count` examples (0: all of data->count) with `options`
 * (NULL: the defaults). FEDRT_INVALID_ARGUMENT for a codec spec that does not
 * parse, a NULL model or data, or bad options. */
fedrt_status fedrt_device_size(const fedrt_model_t* model, const fedrt_data_view* data, size_t share_count,
                               const fedrt_device_options* options, size_t* bytes);

/* Places a device client in memory[0 .. size) (any alignment; at least what
 * fedrt_device_size says for the same model, share count and options), with
 * the arguments of fedrt_device_create. The memory must stay valid and
 * untouched until fedrt_device_destroy, and stays the caller's. Besides the
 * errors of fedrt_device_create, FEDRT_OUT_OF_RANGE when the memory is too
 * small. */
fedrt_status fedrt_device_init(void* memory, size_t size, const char* device_id, const uint8_t* key,
                               size_t key_size, fedrt_model_t* model, const fedrt_data_view* data,
                               const uint32_t* share, size_t share_count, const fedrt_device_options* options,
                               const fedrt_device_callbacks* callbacks, fedrt_device_t** device);

/* Creates a device client on the heap: fedrt_device_init in a block of
 * fedrt_device_size bytes it allocates. `device_id` and key[0 .. key_size) (16
 * to 64 bytes) are copied; `model` (its input size equal to the data's
 * example size, at least data->num_classes classes, batches of at least
 * options->batch) and the memory `data` points to must outlive the device.
 * share[0 .. share_count) are the indices of this device's examples in the
 * data (copied; each below data->count); NULL: all of them. `options` NULL:
 * the defaults. `callbacks` is copied.
 * FEDRT_INVALID_ARGUMENT for a bad id, key, data view, options, a required
 * callback that is NULL, or a model that does not fit the data;
 * FEDRT_OUT_OF_RANGE for a batch the model's memory does not hold or a
 * share index past the data; FEDRT_FAILED_PRECONDITION for an empty share. */
fedrt_status fedrt_device_create(const char* device_id, const uint8_t* key, size_t key_size,
                                 fedrt_model_t* model, const fedrt_data_view* data, const uint32_t* share,
                                 size_t share_count, const fedrt_device_options* options,
                                 const fedrt_device_callbacks* callbacks, fedrt_device_t** device);

/* Ends the client (and frees its block if fedrt_device_create made it); the
 * model, data, stream and the memory given to fedrt_device_init stay the
 * caller's. NULL is ignored. */
void fedrt_device_destroy(fedrt_device_t* device);

/* Runs one session on a freshly connected stream: the join, then rounds
 * (instructions in, training in slices with heartbeats between them, the
 * update out) until one of:
 *   FEDRT_OK                   the aggregator ended the training
 *                              (fedrt_device_finished is then non-zero);
 *   FEDRT_UNAVAILABLE,
 *   FEDRT_DEADLINE_EXCEEDED,
 *   FEDRT_CORRUPT, ...         the stream closed or failed, the join timed
 *                              out, or the aggregator sent something
 *                              invalid: close the stream, reconnect and call
 *                              again (the round in progress is dropped; the
 *                              aggregator sends its current round after the
 *                              next join);
 *   FEDRT_UNAUTHENTICATED      the join was refused (wrong key or id), or
 *   FEDRT_FAILED_PRECONDITION  the aggregator's model has another size, or
 *                              the training has already ended: retrying
 *                              cannot help;
 *   FEDRT_CANCELLED            should_stop asked to stop.
 * A session that fails while the stream still works sends the aggregator the
 * reason first (not when cancelled); the stream is left for the caller to
 * close. */
fedrt_status fedrt_device_run_session(fedrt_device_t* device);

/* Non-zero once the aggregator has ended the training. */
int fedrt_device_finished(const fedrt_device_t* device);
/* The round the device trains or trained last (0 before the first). */
uint64_t fedrt_device_round(const fedrt_device_t* device);
/* Joins completed since creation: a session that got this far reached the
 * aggregator, so a host resets its reconnect backoff. */
uint64_t fedrt_device_joins(const fedrt_device_t* device);
/* The 24-bit id, derived from the device id, that its payloads carry. */
uint32_t fedrt_device_sender_id(const fedrt_device_t* device);
/* The examples this device trains on (its share, or the whole view). */
size_t fedrt_device_examples(const fedrt_device_t* device);

/* Starts from a residual on_residual gave before a restart: call it after
 * create, before the first session. FEDRT_FAILED_PRECONDITION when `count`
 * is not the model's parameter count, FEDRT_CORRUPT for a NaN or Inf. */
fedrt_status fedrt_device_restore_residual(fedrt_device_t* device, const float* residual, size_t count);

/* ---- Aggregator (star topology) ------------------------------------------ */

/* The server of the star topology (fedrt/runtime/aggregator_engine.h): it
 * authenticates devices by their pre-shared keys, samples them into rounds,
 * sends them the global model, takes their compressed updates, aggregates
 * them and applies the server optimizer, for `rounds` rounds. It opens no
 * socket and starts no thread: the application accepts connections (TCP,
 * a UART, memory) and hands each one in with fedrt_aggregator_open, feeds
 * the bytes that arrive on it to fedrt_aggregator_receive, and writes what
 * the aggregator sends through its send callback.
 *
 * The application's loop, one thread:
 *
 *   fedrt_aggregator_size(...), then fedrt_aggregator_init(...) in that memory;
 *   while (!fedrt_aggregator_finished(aggregator)) {
 *     a new connection:   fedrt_aggregator_open(aggregator, id, "peer name");
 *     bytes arrived:      fedrt_aggregator_receive(aggregator, id, bytes, n);
 *     the peer closed:    fedrt_aggregator_stream_closed(aggregator, id);
 *     wait = fedrt_aggregator_tick(aggregator);  // wait at most this long for I/O
 *   }
 *   (close callback: the aggregator is done with a connection; close it)
 *   fedrt_aggregator_destroy(aggregator);
 *
 * Memory: fedrt_aggregator_init places the handle and the engine's block
 * (the round sum, decoding scratch, the codecs, the pool of update payload
 * slots: see max_waiting_updates) in the caller's memory. */
typedef struct fedrt_aggregator fedrt_aggregator_t;

/* A device the aggregator admits: its id and pre-shared key (copied at init). */
typedef struct fedrt_aggregator_key {
  const char* device_id;  /* 1..FEDRT_DEVICE_ID_MAX characters of [A-Za-z0-9._-] */
  const uint8_t* key;     /* FEDRT_KEY_MIN_BYTES..FEDRT_KEY_MAX_BYTES bytes */
  size_t key_size;
} fedrt_aggregator_key;

/* fedrt_aggregator_options_default() fills the defaults, which are those of
 * `fedrt serve`. Strings are copied at init. */
typedef struct fedrt_aggregator_options {
  const char* model;            /* spec of the global model; "mlp:784-300-100-10" */
  uint64_t model_seed;          /* its initialisation; 1 */
  const char* codec;            /* what the devices send; "fp32" */
  uint32_t rounds;              /* 10 */
  size_t min_devices;           /* joined devices before the first round; 1 */
  double fraction;              /* share of the connected devices a round samples; 1.0 */
  double quorum;                /* share of them whose updates close a round early; 1.0 */
  uint32_t round_deadline_ms;   /* a round closes then with what arrived; 120000 */
  uint32_t local_epochs;        /* per round on each device; 1 */
  uint32_t local_steps;         /* 0: whole epochs */
  float learning_rate;          /* the devices' SGD; 0.05 */
  const char* server_optimizer; /* "fedavg", "fedsgd", "fedavgm" or "fedadam"; "fedavg" */
  float server_learning_rate;   /* 1.0 */
  uint64_t session_seed;        /* codec randomness and sampling; 1 */
  const char* downlink_codec;   /* NULL or "": full models down; else a codec spec ("fp16") */
  size_t max_devices;           /* joined at once; 65536 (capped by the keys) */
  /* Updates held at once waiting for their turn in the sum (every codec but
   * ndqsg); when they are full a device is told to wait and asked again.
   * 0: 64. Must be 0 with ndqsg. */
  size_t max_waiting_updates;
  uint32_t max_frame_bytes;     /* 4 MiB */
  uint32_t idle_timeout_ms;     /* a connection silent this long is closed; 30000 */
  uint32_t join_timeout_ms;     /* a connection must join within this; 10000 */
} fedrt_aggregator_options;

fedrt_aggregator_options fedrt_aggregator_options_default(void);

/* What one round did, for fedrt_aggregator_callbacks.on_round. */
typedef struct fedrt_round_summary {
  uint32_t round;        /* 1-based */
  int applied;           /* 0: nothing applied (no update, all refused); the round runs again */
  size_t sampled;
  size_t updates;        /* aggregated */
  size_t rejected;
  double test_accuracy;  /* -1 without a test set */
  double test_loss;
  double train_loss;     /* the devices' reports, weighted by their samples */
  uint64_t bytes_up;     /* update payload bytes received */
  uint64_t bytes_down;   /* model payload bytes sent */
} fedrt_round_summary;

/* What the aggregator needs from the application. Every callback gets
 * `user`; connections are named by the id the application gave
 * fedrt_aggregator_open. Called only from inside fedrt_aggregator_open,
 * _receive, _stream_closed, _tick and _destroy, on the calling thread; they
 * must not call back into the aggregator. */
typedef struct fedrt_aggregator_callbacks {
  void* user;
  /* Writes all `size` bytes to the connection, or fails (the connection is
   * then closed with that status). Required. */
  fedrt_status (*send)(void* user, uint64_t connection, const uint8_t* data, size_t size);
  /* The aggregator is done with the connection (it closed it, or the stream
   * ended): the application closes its stream and may reuse the id. Called
   * once for every connection opened. FEDRT_OK for a close the aggregator
   * chose (the training ended), else why. Required. */
  void (*close)(void* user, uint64_t connection, fedrt_status reason);
  uint64_t (*now_ms)(void* user);  /* monotonic milliseconds. Required. */
  /* Secure random bytes (the join's challenges). Required. */
  fedrt_status (*random_bytes)(void* user, uint8_t* out, size_t size);
  /* As fedrt_device_callbacks.hmac_sha256 (NULL: the system's, where the
   * build has one). */
  fedrt_status (*hmac_sha256)(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                              size_t message_size, uint8_t* mac);
  /* After every round closes (NULL: not told). */
  void (*on_round)(void* user, const fedrt_round_summary* round);
} fedrt_aggregator_callbacks;

/* The bytes of memory fedrt_aggregator_init needs for `options` (NULL: the
 * defaults) and keys[0 .. key_count). FEDRT_INVALID_ARGUMENT (or the
 * parser's status) for options or keys that are wrong, naming what. */
fedrt_status fedrt_aggregator_size(const fedrt_aggregator_options* options, const fedrt_aggregator_key* keys,
                                   size_t key_count, size_t* bytes);

/* Places an aggregator in memory[0 .. size) (any alignment; at least what
 * fedrt_aggregator_size says for the same options and keys). `test_set`
 * (NULL: no evaluation) is read after every round and must outlive the
 * aggregator; `callbacks` is copied. FEDRT_OUT_OF_RANGE when the memory is
 * too small; FEDRT_INVALID_ARGUMENT for options, keys, a test set that does
 * not fit the model, or a required callback that is NULL. */
fedrt_status fedrt_aggregator_init(void* memory, size_t size, const fedrt_aggregator_options* options,
                                   const fedrt_aggregator_key* keys, size_t key_count,
                                   const fedrt_data_view* test_set, const fedrt_aggregator_callbacks* callbacks,
                                   fedrt_aggregator_t** aggregator);

/* Closes every open connection (close callbacks run) and ends the
 * aggregator; the memory stays the caller's. NULL is ignored. */
void fedrt_aggregator_destroy(fedrt_aggregator_t* aggregator);

/* A new connection, named `connection` (unique among the open ones; the
 * application's socket or link number). `peer` names it in logs and counts
 * against the per-address cap up to its last ':' ("10.0.0.7:5123"; NULL:
 * "connection"). FEDRT_INVALID_ARGUMENT when the id is open already. */
fedrt_status fedrt_aggregator_open(fedrt_aggregator_t* aggregator, uint64_t connection, const char* peer);
/* Bytes that arrived on a connection, in any split. Bad bytes close that
 * connection (its close callback says why), not the aggregator: the call
 * still returns FEDRT_OK. FEDRT_NOT_FOUND for an id that is not open. */
fedrt_status fedrt_aggregator_receive(fedrt_aggregator_t* aggregator, uint64_t connection, const uint8_t* data,
                                      size_t size);
/* The stream of a connection ended (the peer closed it, or it failed).
 * FEDRT_NOT_FOUND for an id that is not open. */
fedrt_status fedrt_aggregator_stream_closed(fedrt_aggregator_t* aggregator, uint64_t connection);
/* Timers: heartbeats, idle and join deadlines, starting and closing rounds.
 * Call it after feeding bytes and at the latest when the milliseconds it
 * returned have passed (UINT32_MAX: wait for I/O). */
uint32_t fedrt_aggregator_tick(fedrt_aggregator_t* aggregator);

/* Non-zero once the training is over (every round done, or stopped). */
int fedrt_aggregator_finished(const fedrt_aggregator_t* aggregator);
/* FEDRT_OK, or why the training stopped before its last round (the message
 * in fedrt_last_error). */
fedrt_status fedrt_aggregator_status(const fedrt_aggregator_t* aggregator);
/* Rounds completed. */
uint32_t fedrt_aggregator_round(const fedrt_aggregator_t* aggregator);
/* Joined devices with an open connection. */
size_t fedrt_aggregator_connected_devices(const fedrt_aggregator_t* aggregator);
size_t fedrt_aggregator_parameter_count(const fedrt_aggregator_t* aggregator);
/* The global model's parameters into out[0 .. parameter_count);
 * FEDRT_OUT_OF_RANGE when capacity is smaller. */
fedrt_status fedrt_aggregator_get_parameters(const fedrt_aggregator_t* aggregator, float* out, size_t capacity);

/* ---- Peer trainer (peer-to-peer, no aggregator) -------------------------- */

/* One peer of a group that trains together without an aggregator
 * (fedrt/runtime/peer_trainer.h): every step it computes the gradient of one
 * batch of its share of the data on the caller's model handle, then, by
 * fedrt_peer_options.reduce, all-reduces the gradients around a ring (every
 * peer then holds the same model, to the bit) or mixes its model with its
 * neighbours' (gossip, D-PSGD). The training loop, the collectives and the
 * codecs run in the C++ engine; this layer hands it the application's links
 * to the neighbours and its clock.
 *
 * Links. The application keeps one two-way byte stream to each neighbour
 * (a socket, a UART, a queue in memory) and moves bytes through the send
 * and receive callbacks, which name the neighbour by its rank. The
 * neighbours: on the ring (FEDRT_PEER_GRAPH_RING, every reduce) ranks
 * (rank - 1) and (rank + 1) modulo peers, one stream when they are the same
 * rank; on the torus (gossip only) what fedrt_peer_neighbours lists. The
 * frames on the streams are those of the TCP binding (size-prefixed,
 * verified on arrival). With a key in the options (the same on every peer,
 * as a device's key), each stream starts with the join of the TCP peers and
 * star devices (HMAC-SHA256 challenge-response, both ways): both ends prove
 * they hold the key and are the ranks the stream is meant to connect; a
 * wrong key or rank, a malformed handshake, or a neighbour without the key
 * fails fedrt_peer_run with FEDRT_UNAUTHENTICATED (or the stream's status)
 * naming that peer rank. The joins run at the first exchange of
 * fedrt_peer_run, all streams at once, within step_timeout_ms. Without a
 * key there is no join: the streams must already connect the right ranks and
 * are trusted (authenticate them below, with TLS or a secure link). A peer sends before it reads, so send must
 * take the bytes without waiting for the neighbour to read them (queue
 * them).
 *
 * The application's program, on each peer (one thread per peer when they
 * share a process):
 *
 *   fedrt_model_init(...)                            // the same spec and seed on every peer
 *   fedrt_peer_size(model, data, share, n, &options, &bytes);
 *   fedrt_peer_init(memory, bytes, model, data, share, n, &options, &callbacks, &peer);
 *   status = fedrt_peer_run(peer);                   // all epochs (or max_steps)
 *   fedrt_peer_destroy(peer);                        // the memory and the model stay the caller's
 *
 * Memory: fedrt_peer_init places the handle and the trainer's block (the
 * optimizer's velocity, the batch, the epoch's example order, the saved
 * gradient of a ring step, the IWP accumulator, the collectives' objects) in
 * the caller's memory. Failures: a neighbour that fails (its stream closes or
 * falls silent past step_timeout_ms, or its join is refused) fails the step
 * on every peer, each naming the same rank; fedrt_peer_run then returns the status. The group is
 * not repaired: start over (ring repair needs the TCP binding's join). */
typedef struct fedrt_peer fedrt_peer_t;

/* What a step does with the peers' gradients or models. Pinned: equal to
 * fedrt::peer::PeerReduce. */
typedef enum fedrt_peer_reduce {
  FEDRT_PEER_RING = 0,            /* dense fp32 ring all-reduce of the gradients (codec NULL) */
  FEDRT_PEER_RING_CODEC = 1,      /* the ring with `codec` on every hop ("fp16") */
  FEDRT_PEER_RING_COMPRESSED = 2, /* each gradient compressed once with `codec` ("dqsg:s=2",
                                     "topk:k=0.01"), gathered around the ring */
  FEDRT_PEER_IWP = 3,             /* IWP-sparse all-reduce of accumulated updates (iwp_density) */
  FEDRT_PEER_GOSSIP = 4,          /* D-PSGD with the neighbours; codec NULL: fp32,
                                     "moniqua:bits=2", "choco:gamma=0.5+dqsg:s=4" */
  FEDRT_PEER_LOCAL = 5            /* plain SGD alone, nothing sent (a baseline) */
} fedrt_peer_reduce;

/* The gossip graph. Pinned: equal to fedrt::peer::GossipGraph. */
typedef enum fedrt_peer_graph {
  FEDRT_PEER_GRAPH_RING = 0,  /* every reduce */
  FEDRT_PEER_GRAPH_TORUS = 1  /* 2-D torus of the peers; FEDRT_PEER_GOSSIP only */
} fedrt_peer_graph;

/* fedrt_peer_options_default() fills the defaults, which are the C++
 * engine's (fedrt::peer::PeerTrainerOptions). An option that does not apply
 * to the reduce (a codec for FEDRT_PEER_RING, iwp_density without
 * FEDRT_PEER_IWP, the torus for a ring reduce, momentum, weight decay or
 * clipping for gossip and the local baseline) is FEDRT_INVALID_ARGUMENT,
 * never ignored. */
typedef struct fedrt_peer_options {
  uint32_t rank;              /* this peer, below peers; 0 */
  uint32_t peers;             /* the group's size, >= 1; 1 */
  fedrt_peer_reduce reduce;   /* FEDRT_PEER_RING */
  const char* codec;          /* per reduce, above; NULL (copied at init) */
  fedrt_peer_graph graph;     /* FEDRT_PEER_GRAPH_RING */
  /* The peers' SGD (the model's own fedrt_sgd_options are not used):
   * fedrt_sgd_options_default(), learning rate 0.01. Gossip and the local
   * baseline take plain SGD steps (only the learning rate applies); IWP
   * folds momentum into its accumulator. */
  fedrt_sgd_options sgd;
  int epochs;                 /* 1 */
  int batch;                  /* 1..fedrt_model_max_batch(model); 32 */
  uint64_t seed;              /* batch order (with the rank) and the IWP leader; 1 */
  uint32_t max_steps;         /* stop after this many steps; 0: whole epochs */
  int evals_per_epoch;        /* on_progress calls per epoch, the last at its end; 1 */
  uint32_t chunk_floats;      /* ring pipelining: floats per chunk; 0: automatic */
  float iwp_density;          /* FEDRT_PEER_IWP: share of coordinates per step; 0: 1/64 */
  uint32_t step_timeout_ms;   /* a collective fails when a neighbour is silent this long; 10000 */
  uint32_t max_frame_bytes;   /* largest frame sent or accepted; 4 MiB */
  /* The group's pre-shared key (FEDRT_KEY_MIN_BYTES..FEDRT_KEY_MAX_BYTES
   * bytes, the same on every peer; copied at init): the streams start with
   * the join (above). NULL (key_size 0): no join, the streams are trusted. */
  const uint8_t* key;         /* NULL */
  size_t key_size;            /* 0 */
} fedrt_peer_options;

fedrt_peer_options fedrt_peer_options_default(void);

/* Where training stands, for fedrt_peer_callbacks.on_progress. */
typedef struct fedrt_peer_progress {
  int epoch;                 /* 0-based */
  size_t steps_done;         /* steps of this epoch so far */
  size_t steps_per_epoch;
  uint32_t step;             /* steps run so far, all epochs */
  int epoch_end;             /* non-zero at the end of an epoch */
  double train_loss;         /* mean batch loss since the last report (0: no step) */
  double epoch_loss;         /* at an epoch's end: its mean batch loss */
  uint64_t bytes_sent;       /* payload bytes of every collective so far */
  uint64_t fp32_bytes;       /* what dense fp32 exchanges of the same steps would have sent */
  uint64_t wraps;            /* gossip with Moniqua: wraps since the last report */
  double moniqua_theta;      /* gossip, theta from Moniqua's bound: the one in use (0: another rule) */
} fedrt_peer_progress;

/* What the peer needs from the application. Every callback gets `user`;
 * they run only inside fedrt_peer_run, on the thread that called it, and
 * must not call back into the same peer handle (on_progress may use the
 * model handle: evaluate it). */
typedef struct fedrt_peer_callbacks {
  void* user;
  /* Writes all `size` bytes to the stream to neighbour `peer` without
   * waiting for it to read them, or fails (FEDRT_UNAVAILABLE: it is gone).
   * Required. */
  fedrt_status (*send)(void* user, uint32_t peer, const uint8_t* data, size_t size);
  /* Waits up to `timeout_ms` (0: not at all) for bytes from neighbour
   * `peer`'s stream, puts up to `capacity` of them in `buffer` and sets
   * *received to how many (0: none came in time). FEDRT_UNAVAILABLE when
   * the neighbour closed the stream, another status when it failed.
   * Required. */
  fedrt_status (*receive)(void* user, uint32_t peer, uint8_t* buffer, size_t capacity, uint32_t timeout_ms,
                          size_t* received);
  /* Milliseconds of a monotonic clock (the step deadlines). Required. */
  uint64_t (*now_ms)(void* user);
  /* At each of the evals_per_epoch points of an epoch (NULL: not told).
   * Anything but FEDRT_OK ends fedrt_peer_run with that status
   * (FEDRT_CANCELLED to stop early). */
  fedrt_status (*on_progress)(void* user, const fedrt_peer_progress* progress);
  /* The join's, with a key (as fedrt_device_callbacks'): random_bytes is
   * then required; hmac_sha256 NULL is the system's where the build has one
   * (fedrt_system_crypto_available()), required without. Not used without
   * a key. */
  fedrt_status (*random_bytes)(void* user, uint8_t* out, size_t size);
  fedrt_status (*hmac_sha256)(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                              size_t message_size, uint8_t* mac);
} fedrt_peer_callbacks;

/* The bytes of memory fedrt_peer_init needs for a peer training `model` on
 * share[0 .. share_count) of `data` (share NULL: all of data's examples)
 * with `options` (NULL: the defaults). FEDRT_INVALID_ARGUMENT for options
 * that do not fit (a codec that does not parse or does not apply, a rank
 * outside the peers, a model that does not fit the data, a key of the wrong
 * size), an empty share or a share index past the data;
 * FEDRT_OUT_OF_RANGE for a batch above the model's max_batch. */
fedrt_status fedrt_peer_size(const fedrt_model_t* model, const fedrt_data_view* data, const uint32_t* share,
                             size_t share_count, const fedrt_peer_options* options, size_t* bytes);

/* Places a peer in memory[0 .. size) (any alignment; at least what
 * fedrt_peer_size says for the same arguments). The model (trained in
 * place), the data and share[] must outlive the peer; options and callbacks
 * are copied. Besides fedrt_peer_size's errors, FEDRT_OUT_OF_RANGE when the
 * memory is too small, FEDRT_INVALID_ARGUMENT for a required callback that
 * is NULL (random_bytes with a key; hmac_sha256 with a key in a build
 * without fedrt_system_crypto_available()). Sends nothing. */
fedrt_status fedrt_peer_init(void* memory, size_t size, fedrt_model_t* model, const fedrt_data_view* data,
                             const uint32_t* share, size_t share_count, const fedrt_peer_options* options,
                             const fedrt_peer_callbacks* callbacks, fedrt_peer_t** peer);

/* Ends the peer; the memory, model, data and streams stay the caller's.
 * NULL is ignored. */
void fedrt_peer_destroy(fedrt_peer_t* peer);

/* Trains all epochs (or max_steps) with the group, then tells the
 * neighbours it has finished and leaves the streams to the caller.
 * FEDRT_OK when done; a neighbour's failure (FEDRT_UNAVAILABLE,
 * FEDRT_DEADLINE_EXCEEDED, FEDRT_CORRUPT, ...: the message names the peer
 * rank), or on_progress's status, otherwise. Once per peer: a second call is
 * FEDRT_FAILED_PRECONDITION. */
fedrt_status fedrt_peer_run(fedrt_peer_t* peer);

/* Steps every peer takes per epoch: (data examples / peers) / batch. */
size_t fedrt_peer_steps_per_epoch(const fedrt_peer_t* peer);
/* Payload bytes this peer has sent in collectives. */
uint64_t fedrt_peer_bytes_sent(const fedrt_peer_t* peer);
/* The gossip codec in use, with the theta Moniqua derives when the spec
 * names none: after fedrt_peer_run, the last step's; before it, the first
 * step's, or "" while Moniqua's bound has not agreed on a theta yet (it does
 * at the first step). "" for fp32 gossip and the ring reduces. */
const char* fedrt_peer_gossip_codec(const fedrt_peer_t* peer);
/* The ranks the application must keep a stream to, ascending, into
 * ranks[0 .. capacity); *count is how many there are.
 * FEDRT_OUT_OF_RANGE when capacity is smaller. */
fedrt_status fedrt_peer_neighbours(const fedrt_peer_t* peer, uint32_t* ranks, size_t capacity, size_t* count);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* FEDRT_FEDRT_H_ */
