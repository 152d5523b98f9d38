/* fedrt.h: the C API of fedrt (C99), for firmware and for programs in any
 * language with a C foreign-function interface. It is a thin layer over the
 * C++ training core (fedrt/runtime/model.h, trainer.h) and the codecs
 * (fedrt/codecs/codec.h); what those headers say about results holds here.
 *
 * Conventions, for every function below:
 *
 *  - Names. Objects are opaque handles `fedrt_<object>_t` (fedrt_model_t,
 *    fedrt_codec_t); functions are `fedrt_<object>_<action>`; plain structs
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
 *    a fixed buffer (so storing it allocates nothing; longer messages are
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
 *    fedrt_codec_create() on the heap, because the C++ codecs are made by
 *    factories that allocate them (a caller-memory variant would change
 *    every codec); fedrt_codec_destroy() frees it. Every array passed in
 *    (features, labels, vectors, payloads, side information) is only read
 *    during the call; every output array is the caller's and is written only
 *    during the call. Strings returned by getters (specs, names, tensor
 *    names) belong to the handle and live as long as it does.
 *
 *  - Allocation. These calls allocate from the heap:
 *      fedrt_model_size        builds the layer list to measure it, frees it;
 *      fedrt_model_init        the model's bookkeeping (layer objects, the
 *                              tensor table: a few hundred bytes per layer),
 *                              freed by fedrt_model_destroy;
 *      fedrt_codec_create      the codec object, freed by fedrt_codec_destroy;
 *      fedrt_codec_decode,
 *      fedrt_codec_decode_accumulate
 *                              short-lived scratch, freed before they return,
 *                              in most codecs (the payload's spec string,
 *                              per-bucket scales, staged symbols; today only
 *                              fp16 and bf16 decode without any);
 *      any call that fails     its message (the C++ core builds it as a
 *                              string) before it is copied into the per-thread
 *                              buffer;
 *      the first call that picks kernels (fedrt_isa_name, a train step, an
 *                              encode) detects the CPU, once per process,
 *                              and keeps its description.
 *    Nothing else allocates: after init, the training round path
 *    (fedrt_model_train_step, fedrt_model_evaluate, get and set parameters)
 *    and fedrt_codec_encode run on caller memory only. (Host builds whose
 *    GEMM is OpenBLAS let OpenBLAS keep its own buffers, set up on first use;
 *    firmware and ARMv7 builds use the built-in GEMM.) fedrt is built without
 *    exceptions: if the heap is exhausted inside a call that allocates, the
 *    process aborts, as the C++ core does. No C++ exception crosses this API.
 *
 *  - Thread-safety. A handle is not synchronized: use it from one thread at a
 *    time. Distinct handles are independent and may be used concurrently
 *    from different threads. Functions without a handle (version, ISA, size
 *    queries, fedrt_last_error) may be called from any thread.
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
/* NULL is ignored. */
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

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* FEDRT_FEDRT_H_ */
