// Multi-tensor updates (fedrt/codecs/tensor_set.h): each tensor is the inner
// codec's own payload with tensor id t, the framing is validated before any
// part is decoded, and NDQSG decodes and counts wraps per tensor.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/ndqsg.h"
#include "fedrt/codecs/payload.h"
#include "fedrt/codecs/tensor_set.h"

namespace fedrt {
namespace {

const std::vector<std::size_t> kTable = {300, 7, 1000, 1};

std::unique_ptr<Codec> Make(const std::string& spec) {
  auto codec = MakeCodec(spec);
  REQUIRE_MESSAGE(codec.ok(), codec.status().ToString());
  return std::move(*codec);
}

std::unique_ptr<TensorSetCodec> Set(const std::string& spec, const std::vector<std::size_t>& table = kTable) {
  auto set = TensorSetCodec::Create(Make(spec), table);
  REQUIRE_MESSAGE(set.ok(), set.status().ToString());
  return std::move(*set);
}

CodecContext Context() {
  CodecContext c;
  c.session_seed = 9;
  c.round = 4;
  c.sender_id = 77;
  return c;
}

// Tensors of very different scales, as a model's layers are.
std::vector<float> Vector(const std::vector<std::size_t>& table) {
  std::vector<float> v;
  float scale = 1.0f;
  for (std::size_t size : table) {
    for (std::size_t i = 0; i < size; ++i) v.push_back(scale * std::sin(0.37f * static_cast<float>(v.size()) + 1.0f));
    scale *= 0.05f;
  }
  return v;
}

std::vector<uint8_t> Encode(Codec& codec, const std::vector<float>& v, CodecContext c = Context()) {
  std::vector<uint8_t> out(codec.MaxEncodedSize(v.size()));
  Result<std::size_t> size = codec.Encode(v.data(), v.size(), c, out.data(), out.size());
  REQUIRE_MESSAGE(size.ok(), size.status().ToString());
  out.resize(*size);
  return out;
}

TEST_CASE("a tensor set is each tensor's own payload with tensor id t, framed and decoded in place") {
  for (const char* spec : {"dqsg:s=2", "qsgd", "alq", "sign", "fp16"}) {
    INFO(spec);
    std::unique_ptr<TensorSetCodec> set = Set(spec);
    const std::vector<float> v = Vector(kTable);
    const std::vector<uint8_t> payload = Encode(*set, v);
    CHECK(payload.size() <= set->MaxEncodedSize(v.size()));
    Result<std::vector<TensorPart>> parts = set->Split(payload.data(), payload.size());
    REQUIRE(parts.ok());
    REQUIRE(parts->size() == kTable.size());
    std::unique_ptr<Codec> plain = Make(spec);
    std::vector<float> expected(v.size());
    std::size_t offset = 0;
    for (std::size_t t = 0; t < kTable.size(); ++t) {
      const TensorPart& p = (*parts)[t];
      CHECK(p.offset == offset);
      CHECK(p.d == kTable[t]);
      CodecContext c = Context();
      c.tensor_id = static_cast<uint32_t>(t);
      const std::vector<float> tensor(v.begin() + offset, v.begin() + offset + kTable[t]);
      const std::vector<uint8_t> alone = Encode(*plain, tensor, c);
      REQUIRE(alone.size() == p.size);
      CHECK(std::memcmp(alone.data(), p.payload, p.size) == 0);
      REQUIRE(plain->Decode(alone.data(), alone.size(), c, expected.data() + offset, kTable[t]).ok());
      offset += kTable[t];
    }
    std::vector<float> decoded(v.size());
    REQUIRE(set->Decode(payload.data(), payload.size(), Context(), decoded.data(), decoded.size()).ok());
    CHECK(std::memcmp(decoded.data(), expected.data(), v.size() * sizeof(float)) == 0);
    std::vector<float> sum(v.size(), 1.0f);
    REQUIRE(set->DecodeAccumulate(payload.data(), payload.size(), Context(), 2.0f, sum.data(), sum.size()).ok());
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(sum[i] == 1.0f + 2.0f * expected[i]);
  }
}

TEST_CASE("a one-tensor set is the inner codec's plain payload") {
  std::unique_ptr<TensorSetCodec> set = Set("dqsg", {64});
  std::unique_ptr<Codec> plain = Make("dqsg");
  const std::vector<float> v = Vector({64});
  CHECK(Encode(*set, v) == Encode(*plain, v));
  CHECK(set->MaxEncodedSize(64) == plain->MaxEncodedSize(64));
}

TEST_CASE("one scale per tensor keeps small tensors' error small where one scale for all drowns them") {
  const std::vector<float> v = Vector(kTable);
  std::unique_ptr<TensorSetCodec> set = Set("dqsg:s=2,b=0");
  std::unique_ptr<Codec> whole = Make("dqsg:s=2,b=0");
  std::vector<float> a(v.size()), b(v.size());
  const std::vector<uint8_t> pa = Encode(*set, v), pb = Encode(*whole, v);
  REQUIRE(set->Decode(pa.data(), pa.size(), Context(), a.data(), a.size()).ok());
  REQUIRE(whole->Decode(pb.data(), pb.size(), Context(), b.data(), b.size()).ok());
  // The third tensor is 400x smaller than the first: one scale gives it an
  // error far above its own norm, its own scale one well below.
  double norm = 0, ea = 0, eb = 0;
  for (std::size_t i = 307; i < 1307; ++i) {
    norm += static_cast<double>(v[i]) * v[i];
    ea += std::pow(static_cast<double>(a[i]) - v[i], 2);
    eb += std::pow(static_cast<double>(b[i]) - v[i], 2);
  }
  CHECK(ea < 0.5 * norm);
  CHECK(eb > 10 * norm);
}

TEST_CASE("tensor-set framing that is truncated, foreign, inconsistent or corrupt is refused before decoding") {
  std::unique_ptr<TensorSetCodec> set = Set("dqsg:s=2");
  const std::vector<float> v = Vector(kTable);
  const std::vector<uint8_t> good = Encode(*set, v);
  std::vector<float> out(v.size(), 3.0f);
  const auto refused = [&](std::vector<uint8_t> p) {
    std::vector<float> acc(v.size(), 3.0f);
    const Status s = set->DecodeAccumulate(p.data(), p.size(), Context(), 1.0f, acc.data(), acc.size());
    for (float x : acc) REQUIRE(x == 3.0f);  // nothing added
    return s;
  };
  CHECK(refused(std::vector<uint8_t>(good.begin(), good.begin() + 10)).code() == StatusCode::kCorrupt);
  CHECK(refused(std::vector<uint8_t>(good.begin(), good.end() - 1)).code() == StatusCode::kCorrupt);
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  CHECK(refused(longer).code() == StatusCode::kCorrupt);
  std::vector<uint8_t> magic = good;
  magic[0] ^= 1;
  CHECK(refused(magic).code() == StatusCode::kCorrupt);
  std::vector<uint8_t> version = good;
  version[4] = 2;
  CHECK(refused(version).code() == StatusCode::kUnsupported);
  std::vector<uint8_t> table = good;
  table[kTensorSetHeaderSize] ^= 1;  // tensor 0's length: the CRC catches it
  CHECK(refused(table).code() == StatusCode::kCorrupt);
  std::vector<uint8_t> part = good;
  part[part.size() - 1] ^= 0x40;  // the last tensor's body: its own CRC
  const Status s = refused(part);
  CHECK(s.code() == StatusCode::kCorrupt);
  CHECK(s.message().find("tensor 3") != std::string::npos);
  // A set for another table (other lengths, another count) is refused.
  std::unique_ptr<TensorSetCodec> other = Set("dqsg:s=2", {301, 6, 1000, 1});
  Status foreign = other->Decode(good.data(), good.size(), Context(), out.data(), out.size());
  CHECK(foreign.code() == StatusCode::kCorrupt);
  CHECK(foreign.message().find("tensor 0") != std::string::npos);
  std::unique_ptr<TensorSetCodec> three = Set("dqsg:s=2", {307, 1000, 1});
  CHECK(three->Decode(good.data(), good.size(), Context(), out.data(), out.size()).code() == StatusCode::kCorrupt);
  // A plain payload where a set is expected.
  std::unique_ptr<Codec> plain = Make("dqsg:s=2");
  const std::vector<uint8_t> flat = Encode(*plain, v);
  CHECK(set->Decode(flat.data(), flat.size(), Context(), out.data(), out.size()).code() == StatusCode::kCorrupt);
  // Another tensor id base: every part's own header disagrees.
  CodecContext shifted = Context();
  shifted.tensor_id = 1;
  CHECK_FALSE(set->Decode(good.data(), good.size(), shifted, out.data(), out.size()).ok());
  CHECK(set->Decode(good.data(), good.size(), Context(), out.data(), v.size() - 1).code() ==
        StatusCode::kInvalidArgument);
  std::vector<uint8_t> buffer(set->MaxEncodedSize(v.size()));
  CHECK(set->Encode(v.data(), v.size() - 1, Context(), buffer.data(), buffer.size()).status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(set->Encode(v.data(), v.size(), Context(), buffer.data(), buffer.size() - 1).status().code() ==
        StatusCode::kOutOfRange);
}

TEST_CASE("the first part names a tensor set's codec, a plain payload names its own, a short table is refused") {
  std::unique_ptr<TensorSetCodec> set = Set("dqsg:s=5");
  const std::vector<float> v = Vector(kTable);
  const std::vector<uint8_t> framed = Encode(*set, v);
  Result<PayloadView> first = ParseFirstPart(framed.data(), framed.size());
  REQUIRE(first.ok());
  CHECK(first->spec == std::string(set->spec().view()));
  CHECK(first->header.tensor_id == 0);
  CHECK(first->header.d == kTable[0]);
  const std::vector<uint8_t> flat = Encode(*Make("fp16"), v);
  Result<PayloadView> own = ParseFirstPart(flat.data(), flat.size());
  REQUIRE(own.ok());
  CHECK(own->spec == std::string(Make("fp16")->spec().view()));
  CHECK(own->header.d == v.size());
  // The table runs past the bytes, or part 0 does: refused, not read beyond.
  CHECK(ParseFirstPart(framed.data(), kTensorSetHeaderSize + 5).status().code() == StatusCode::kCorrupt);
  const std::size_t framing = kTensorSetHeaderSize + kTensorSetEntrySize * kTable.size();
  CHECK(ParseFirstPart(framed.data(), framing + 10).status().code() == StatusCode::kCorrupt);
  std::vector<uint8_t> one = framed;
  StoreLe32(one.data() + 8, 1);  // a set of one tensor is never framed
  CHECK(ParseFirstPart(one.data(), one.size()).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("tensor sets refuse empty tables, empty tensors and missing codecs") {
  CHECK(TensorSetCodec::Create(Make("dqsg"), {}).status().code() == StatusCode::kInvalidArgument);
  CHECK(TensorSetCodec::Create(Make("dqsg"), {3, 0, 2}).status().code() == StatusCode::kInvalidArgument);
  CHECK(TensorSetCodec::Create(nullptr, {3}).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("ndqsg over a tensor set decodes each tensor against its side information and counts wraps per tensor") {
  const std::vector<float> v = Vector(kTable);
  std::unique_ptr<TensorSetCodec> nested = Set("ndqsg:s1=3,rho=3");
  std::unique_ptr<TensorSetCodec> anchor = Set("dqsg:s=3");
  const std::vector<uint8_t> payload = Encode(*nested, v);
  // Side information = the DQSG reconstruction: every tensor decodes exactly.
  std::vector<float> dqsg(v.size()), decoded(v.size());
  const std::vector<uint8_t> plain = Encode(*anchor, v);
  REQUIRE(anchor->Decode(plain.data(), plain.size(), Context(), dqsg.data(), dqsg.size()).ok());
  REQUIRE(nested->Decode(payload.data(), payload.size(), Context(), decoded.data(), decoded.size(), dqsg.data()).ok());
  CHECK(std::memcmp(decoded.data(), dqsg.data(), v.size() * sizeof(float)) == 0);
  Result<std::size_t> near = CountNearWrap(*nested, payload.data(), payload.size(), Context(), decoded.data(),
                                           dqsg.data(), v.size(), 0.0f);
  REQUIRE(near.ok());
  CHECK(*near == 0);
  // Side information far off in the small third tensor only: its coarse
  // step is its own (tiny) one, so all its coordinates come near a wrap.
  std::vector<float> off = dqsg;
  for (std::size_t i = 307; i < 1307; ++i) off[i] += 0.0031f;  // 1.24 coarse steps of this tensor
  REQUIRE(nested->Decode(payload.data(), payload.size(), Context(), decoded.data(), decoded.size(), off.data()).ok());
  near = CountNearWrap(*nested, payload.data(), payload.size(), Context(), decoded.data(), off.data(), v.size(), 0.45f);
  REQUIRE(near.ok());
  CHECK(*near >= 900);
  CHECK(*near <= 1000);
  NdqsgRunningMean mean(v.size());
  mean.Add(dqsg.data());
  NdqsgWrapReport report;
  std::vector<float> scratch(v.size());
  REQUIRE(mean.AddNested(*nested, payload.data(), payload.size(), Context(), scratch.data(), 0.05f, &report).ok());
  CHECK(report.near_wrap == 0);
  CHECK(std::memcmp(mean.mean(), dqsg.data(), v.size() * sizeof(float)) == 0);
}

}  // namespace
}  // namespace fedrt
