#include "test_aggregator.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/clock.h"
#include "fedrt/runtime/aggregator_engine.h"
#include "fedrt/transport/auth.h"
#include "fedrt/transport/stream.h"
#include "test_crypto.h"

struct test_aggregator {
  test_aggregator_options options;
  fedrt::ManualClock clock;
  fedrt::transport::KeyStore keys;
  std::shared_ptr<fedrt::Aggregator> aggregator;
  std::shared_ptr<fedrt::transport::StreamConnection> link;
  std::vector<uint8_t> outbound;  // wire bytes for the device, not read yet
  std::size_t read_at = 0;
  bool cut = false;               // close_after_join has cut a link
  uint32_t updates = 0;
  double first_loss = 0, last_loss = 0;

  void Connect() {
    if (link && !link->closed()) link->Abort(fedrt::Status(fedrt::StatusCode::kUnavailable, "reconnecting"));
    outbound.clear();
    read_at = 0;
    fedrt::Result<std::shared_ptr<fedrt::transport::StreamConnection>> created =
        fedrt::transport::StreamConnection::Create(
            "device",
            [this](const uint8_t* data, std::size_t size) {
              outbound.insert(outbound.end(), data, data + size);
              return fedrt::Status::Ok();
            },
            aggregator, aggregator->connection_options(), clock);
    if (!created.ok()) {
      std::fprintf(stderr, "test aggregator: %s\n", created.status().ToString().c_str());
      return;
    }
    link = std::move(*created);
    link->Open();
  }
};

extern "C" {

test_aggregator* test_aggregator_create(const test_aggregator_options* options) {
  auto a = std::make_unique<test_aggregator>();
  a->options = *options;
  std::string line = std::string(options->device_id) + " ";
  static const char digits[] = "0123456789abcdef";
  for (std::size_t i = 0; i < options->key_size; ++i) {
    line += digits[options->key[i] >> 4];
    line += digits[options->key[i] & 15];
  }
  fedrt::Result<fedrt::transport::KeyStore> keys = fedrt::transport::KeyStore::Parse(line + "\n");
  if (!keys.ok()) {
    std::fprintf(stderr, "test aggregator: %s\n", keys.status().ToString().c_str());
    return nullptr;
  }
  a->keys = std::move(*keys);
  fedrt::AggregatorConfig config;
  config.model = options->model;
  config.codec = options->codec;
  config.rounds = options->rounds;
  config.local_steps = options->local_steps;
  config.learning_rate = options->learning_rate;
  fedrt::AggregatorHooks hooks;
  test_aggregator* raw = a.get();
  hooks.on_round = [raw](const fedrt::RoundReport& report) {
    if (report.round == 1) raw->first_loss = report.train_loss;
    raw->last_loss = report.train_loss;
    raw->updates += static_cast<uint32_t>(report.updates);
  };
  fedrt::Result<std::shared_ptr<fedrt::Aggregator>> made =
      fedrt::Aggregator::Create(config, a->keys, fedrt::transport::TestCrypto(), a->clock, nullptr, std::move(hooks));
  if (!made.ok()) {
    std::fprintf(stderr, "test aggregator: %s\n", made.status().ToString().c_str());
    return nullptr;
  }
  a->aggregator = std::move(*made);
  a->Connect();
  return a->link ? a.release() : nullptr;
}

void test_aggregator_destroy(test_aggregator* a) {
  if (a == nullptr) return;
  // Connections hold the aggregator and it holds them: close them first.
  a->aggregator->Abort(fedrt::Status(fedrt::StatusCode::kCancelled, "the test is over"));
  delete a;
}

fedrt_status test_aggregator_write(test_aggregator* a, const uint8_t* data, size_t size) {
  if (a->link->closed()) return FEDRT_UNAVAILABLE;
  if (a->options.silent != 0) return FEDRT_OK;
  (void)a->link->Receive(data, size);  // a bad frame closes the link: the device hears of it
  if (a->options.close_after_join != 0 && !a->cut && a->aggregator->connected_devices() > 0) {
    a->cut = true;
    a->link->Abort(fedrt::Status(fedrt::StatusCode::kUnavailable, "the test cut the link"));
  }
  return FEDRT_OK;
}

fedrt_status test_aggregator_read(test_aggregator* a, uint8_t* buffer, size_t capacity, size_t* size) {
  if (a->options.silent == 0) {
    a->aggregator->Tick();
    if (!a->link->closed()) a->link->Poll();
  }
  const std::size_t n = std::min(capacity, a->outbound.size() - a->read_at);
  if (n > 0) std::memcpy(buffer, a->outbound.data() + a->read_at, n);
  a->read_at += n;
  *size = n;
  return n == 0 && a->link->closed() ? FEDRT_UNAVAILABLE : FEDRT_OK;
}

void test_aggregator_reconnect(test_aggregator* a) { a->Connect(); }

uint64_t test_aggregator_now_ms(const test_aggregator* a) { return a->clock.NowMs(); }
void test_aggregator_wait(test_aggregator* a, uint32_t ms) { a->clock.AdvanceMs(ms); }

uint32_t test_aggregator_rounds(const test_aggregator* a) { return a->aggregator->round(); }
uint32_t test_aggregator_updates(const test_aggregator* a) { return a->updates; }
int test_aggregator_finished(const test_aggregator* a) { return a->aggregator->finished() ? 1 : 0; }
double test_aggregator_first_loss(const test_aggregator* a) { return a->first_loss; }
double test_aggregator_last_loss(const test_aggregator* a) { return a->last_loss; }

fedrt_status test_hmac_sha256(void* user, const uint8_t* key, size_t key_size, const uint8_t* message,
                              size_t message_size, uint8_t* mac) {
  (void)user;
  std::array<uint8_t, fedrt::transport::kSha256Bytes> out;
  const fedrt::Status status = fedrt::transport::TestCrypto().HmacSha256(key, key_size, message, message_size, &out);
  if (!status.ok()) return static_cast<fedrt_status>(status.code());
  std::memcpy(mac, out.data(), out.size());
  return FEDRT_OK;
}

}  // extern "C"
