// The star device as an engine: one device's side of the star protocol
// (join, round instructions, local training on its share, encoding the
// update, sending it), on what the application gives it. It opens no file,
// resolves no host, dials no socket and starts no thread; the application
// (`fedrt device`, examples/02_c_device.c through the C API, firmware)
// connects, moves bytes, keeps files and decides when to reconnect.
//
// Driving it, on one thread:
//
//   DeviceClient device(config, model, data, crypto);   // Create() checks the inputs
//   // for each connection to the aggregator (a TCP connection, a
//   // StreamConnection over the application's socket, a MemoryPipe side):
//   device.Start(link);                                // sends the Join
//   //   every frame that arrives:     device.OnFrame(link, frame);
//   //   while device.has_work():      device.Work(link, 8);   // 8 SGD steps at a time
//   //   when the connection closes:   device.OnDisconnected();  then reconnect
//   // until device.finished(): the aggregator ended the training.
//
// Work() trains a few steps per call, so a single-threaded device keeps its
// link alive (StreamConnection::Poll sends heartbeats) between calls; the
// training is bit-identical however it is cut. A round's update is encoded
// and sent by the Work() call after the one that finished training, so an
// application can stop between the two (DeviceHooks::on_trained).
//
// Round protocol (transport/README.md, "Star protocol"): the instructions
// carry the global model (full fp32, or a compressed delta from the previous
// round's model), the codec, seed, epochs, steps and learning rate; the device
// acknowledges the model, trains from it with plain SGD, encodes delta = local
// - global (through its error-feedback residual when the codec asks for one;
// ALQ / AMQ with the instructed level table, and the statistics the next
// table is fitted to) and sends it in chunks.
//
// Memory: the model and the data are the caller's and must outlive the
// client. Everything else the client uses lives in one block sized at
// creation (TFLM's arena, zstd's size query then init): ask RequiredBytes,
// then CreateIn places the client in the caller's memory (Create does the
// same on one heap block). The block holds the global model (d floats), one
// buffer for the update payload that also receives a compressed downlink
// delta, one codec's storage (ConstructCodec; the instructed codec and the
// downlink codec take turns in it), the training pass's order and batch, the
// optimizer state, the error-feedback residual (d floats, when a codec the
// device accepts asks for error feedback, unless DeviceClientConfig::
// residual_memory supplies it when needed) and the frames an update is cut
// into. DeviceClientConfig::codecs sizes the codec-dependent parts; an
// instructed codec that needs more is refused (kResourceExhausted, naming the
// bytes), never served from the heap. Model-sized buffers: the model's
// parameters and gradients, `global` and, with error feedback, the residual
// (plus the payload for fp32); a full downlink model is written into the
// parameters chunk by chunk as it arrives (no second copy), and the update is
// formed in place in the gradients.
//
// Allocation: Create / CreateIn copy the id, key and hooks, make the frame
// slots' building memory and a tensor-table wrapper (a few KiB of heap, once).
// A session's join (Start, the join frames) allocates; the round path after
// the join (instructions, training, encoding, sending: OnFrame and Work)
// allocates nothing of its own (runtime_device_arena_test counts it for every
// codec); the connection's received frames are the connection's. One
// exception: building an ALQ / AMQ codec allocates its configuration (spec
// text, initial table), so the first round with it allocates, and so does
// every round whose compressed downlink delta used the codec storage in
// between (the downlink and update codecs take turns in it).
//
// Thread-safety: none; one thread drives the client and its connection.
#ifndef FEDRT_RUNTIME_DEVICE_CLIENT_H_
#define FEDRT_RUNTIME_DEVICE_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/status.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/model.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/crypto.h"
#include "fedrt/transport/frame.h"

namespace fedrt {

struct DeviceHooks {
  // The payload just sent for `round` (tests decode it themselves).
  std::function<void(uint32_t round, const std::string& codec_spec, const uint8_t* payload,
                     std::size_t size, uint64_t num_samples)>
      on_update;
  // Replaces the update (delta = local model - global model, d floats) before
  // it is encoded: a misbehaving device for tests (fedrt/runtime/byzantine.h).
  std::function<void(uint32_t round, float* delta, std::size_t d)> transform_update;
  // Local training of `round` moved on: `fraction` (0 to 1) of its updates
  // are done; called after every slice of training (a progress display).
  std::function<void(uint32_t round, double fraction)> on_progress;
  // Training is done for `round` (before encoding); an application may stop here.
  std::function<void(uint32_t round)> on_trained;
  // The global model this device starts `round` from (after a delta is applied).
  std::function<void(uint32_t round, const float* model, std::size_t d)> on_model;
  // The error-feedback residual changed (after an encode): persist it to
  // resume after a restart (RestoreResidual).
  std::function<void(const float* residual, std::size_t d)> on_residual;
};

struct DeviceClientConfig {
  std::string device_id;            // 1..64 of [A-Za-z0-9._-]
  transport::Key key;               // the device's pre-shared key
  int batch = 32;                   // local SGD batch
  uint64_t shuffle_seed = 1;        // with the round and epoch, orders the local examples
  uint32_t max_frame_bytes = transport::kDefaultMaxFrameBytes;
  // The codec specs the device accepts from the aggregator (update and
  // downlink codecs, e.g. "ndqsg:s1=3,rho=3"); they size its payload buffer,
  // codec storage and error-feedback residual, and their names are the ones
  // the join announces. Empty: every codec of this build at its default
  // parameters (fp32's payload is a model size).
  std::vector<std::string> codecs;
  // Where the error-feedback residual lives when it is not in the client's
  // block. Unset: the block holds it when a codec of `codecs` (or of the
  // build, for an empty list) asks for error feedback. Set: the block holds
  // none, and the client asks for `d` floats (16-byte aligned, the caller's,
  // valid until the client is destroyed) once, when an instructed codec
  // first asks for error feedback or RestoreResidual is called; null refuses
  // (kResourceExhausted, outgrown_spec()). A host that can allocate
  // (RunDevice) so keeps a model-sized buffer only when the aggregator's
  // codec needs it: the default list holds topk and randk, whose `ef=on`
  // asked for it in every device before.
  std::function<float*(std::size_t d)> residual_memory;
  // When set (it must outlive the client), every update reports how long
  // the device trained and encoded, from the instructions' arrival to the
  // update's first frame: the aggregator splits each round's time with it.
  const Clock* clock = nullptr;
};

// What an empty DeviceClientConfig::codecs means: every codec of this build
// that has default parameters (moniqua, whose theta has none, is left out).
std::vector<std::string> DefaultDeviceCodecs();

// A sender id both ends derive from the device id (24 bits, FNV-1a): the
// codec randomness of a device's payloads depends on it.
uint32_t DeviceSenderId(const std::string& device_id);

class DeviceClient {
 public:
  // `model` (its parameters are the local model), `data` and the examples of
  // `share` (indices into data; null: all of them) must outlive the client;
  // `crypto` gives the join's nonces and MACs. kInvalidArgument for a bad id,
  // key, batch or data view, or a model that does not fit the data;
  // kOutOfRange for a batch larger than a model on caller buffers holds.
  static Result<std::unique_ptr<DeviceClient>> Create(const DeviceClientConfig& config, Model& model,
                                                      const DataView& data, const std::vector<uint32_t>* share,
                                                      transport::Crypto& crypto, DeviceHooks hooks = {});
  // Bytes of memory CreateIn needs for `config`, `model` and `examples`
  // training examples (the share's size, or the data's count), at any
  // alignment. kInvalidArgument for a codec spec that does not parse.
  static Result<std::size_t> RequiredBytes(const DeviceClientConfig& config, const Model& model,
                                           std::size_t examples);
  // Create in memory[0 .. size) (any alignment; at least RequiredBytes): the
  // memory must stay valid and untouched until Destroy, and stays the
  // caller's. kOutOfRange when it is too small; other errors as Create.
  static Result<DeviceClient*> CreateIn(void* memory, std::size_t size, const DeviceClientConfig& config,
                                        Model& model, const DataView& data, const std::vector<uint32_t>* share,
                                        transport::Crypto& crypto, DeviceHooks hooks = {});
  // Ends a client from CreateIn (nullptr is a no-op); frees nothing.
  static void Destroy(DeviceClient* client);
  ~DeviceClient();
  DeviceClient(const DeviceClient&) = delete;
  DeviceClient& operator=(const DeviceClient&) = delete;

  // Starts a session on a fresh connection: sends the Join (announcing the
  // round it expects and the model round it holds, so a reconnect resumes).
  Status Start(transport::Connection& link);
  // A frame from the aggregator. An error means the session cannot go on:
  // the caller aborts the connection (notifying the peer) and reconnects,
  // except after kUnauthenticated or kFailedPrecondition (a refused join, a
  // model of another size), which retrying cannot fix.
  Status OnFrame(transport::Connection& link, const transport::Frame& frame);
  // Trains up to `max_steps` SGD steps of the pending round (0: all of it),
  // or encodes and sends its update once training is done (then waits until
  // the frames are written: Connection::Flush). Errors as OnFrame.
  Status Work(transport::Connection& link, uint32_t max_steps);
  // The connection is gone: the round in progress is dropped (the aggregator
  // sends it again after the next join) and a new Start() is expected.
  void OnDisconnected();

  bool joined() const;
  // Joins completed since Create (a host resets its reconnect backoff when a
  // session got this far).
  uint64_t joins() const;
  bool has_work() const;
  // The aggregator ended the training (a Leave).
  bool finished() const;
  // An aggregator rank sent this device to the rank that serves it (a
  // Leave with transport::kRedirectPrefix; aggregator_tier.h): its HOST:PORT,
  // where the host joins next. The client closed the link. Empty otherwise;
  // Start() clears it.
  const std::string& redirect() const;
  // The instructed codec spec this client's memory could not hold (the
  // session ended with kResourceExhausted naming it: a larger payload or
  // codec storage than DeviceClientConfig::codecs sized); empty otherwise.
  // A host that can allocate makes a new client whose codecs include it
  // (RunDevice does); firmware sizes its codecs list for the aggregator's.
  const std::string& outgrown_spec() const;
  // The round the device trains or trained last.
  uint64_t round() const;

  uint32_t sender_id() const;
  std::size_t parameter_count() const;
  std::size_t examples() const;
  // Memory a connection may read a frame of `size` bytes into
  // (ConnectionHandler::LendFrameStorage): the model's gradient buffer, idle
  // while no round is being trained or sent, when the frame fits it; null
  // otherwise. With a frame limit of 64 KiB (DeviceClientConfig::
  // max_frame_bytes, announced in the join) the aggregator cuts the model
  // into 32 KiB chunks, so on a stream connection the model arrives without
  // a heap block of its size.
  uint8_t* ReceiveBuffer(std::size_t size);
  // Starts from a residual saved by on_residual (before the first round).
  // kFailedPrecondition for another size, kCorrupt for non-finite values.
  Status RestoreResidual(const float* residual, std::size_t d);

  struct State;  // private to the runtime

 private:
  explicit DeviceClient(State* state, std::unique_ptr<unsigned char[]> block);
  State* state_;                            // in the block
  std::unique_ptr<unsigned char[]> block_;  // Create's heap block; null for CreateIn
};

// Binds a DeviceClient to a connection that calls a handler (a
// StreamConnection or MemoryPipe side, an Asio TCP connection): frames go to
// the engine; an error the engine cannot go on from aborts the connection,
// telling the aggregator why, and is kept in error(); a close tells the engine
// (OnDisconnected). Handler callbacks run on the connection's thread, which
// must be the thread that drives the engine.
class DeviceConnectionHandler : public transport::ConnectionHandler {
 public:
  explicit DeviceConnectionHandler(DeviceClient& device) : device_(device) {}
  void OnFrame(transport::Connection& connection, transport::Frame frame) override;
  void OnClose(transport::Connection& connection, const Status& reason) override;
  uint8_t* LendFrameStorage(transport::Connection& connection, std::size_t size) override;

  // The engine's first error (OK: none).
  const Status& error() const { return error_; }
  bool closed() const { return closed_; }
  const Status& close_reason() const { return close_reason_; }

 private:
  DeviceClient& device_;
  Status error_;
  bool closed_ = false;
  Status close_reason_;
};

// The callback binding: a device session over a byte stream the
// application owns (a POSIX socket in C, lwIP, Zephyr, a UART), without Asio
// or threads. `send` writes every byte or fails; `receive` waits up to
// `timeout_ms` for bytes and returns how many it put in `buffer` (0: none
// yet), kUnavailable when the peer closed the stream, another error when it
// failed.
struct DeviceIo {
  std::function<Status(const uint8_t* data, std::size_t size)> send;
  std::function<Result<std::size_t>(uint8_t* buffer, std::size_t capacity, uint32_t timeout_ms)> receive;
};

struct DeviceSessionOptions {
  uint32_t heartbeat_interval_ms = 1000;  // sent while training, between Work() slices
  uint32_t idle_timeout_ms = 0;           // 0: trust the aggregator's heartbeats
  uint32_t join_timeout_ms = 10000;
  uint32_t steps_per_slice = 8;           // SGD steps between two looks at the link
};

// Runs one session of `device` on a freshly connected stream: Start, then
// frames, training slices and heartbeats until the aggregator ends the
// training (OK, device.finished()), the stream or the protocol fails (the
// status; reconnect and call again unless it is kUnauthenticated or
// kFailedPrecondition), or `stop` returns true (kCancelled; checked between
// slices, and between training a round and sending it).
Status RunDeviceSession(DeviceClient& device, const DeviceIo& io, const Clock& clock,
                        const DeviceSessionOptions& options, const std::function<bool()>& stop = nullptr);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_DEVICE_CLIENT_H_
