// Model spec strings (grammar in runtime/README.md):
//   mlp:<inputs>-<hidden>-...-<classes>
//   cnn:<H>x<W>x<C>-<layer>-...-<classes>, layer = c<filters>k<kernel> | p<window> | d<units>
#include <cstdlib>
#include <string>
#include <vector>

#include "fedrt/runtime/model.h"

namespace fedrt {
namespace {

constexpr long kMaxDimension = 1 << 16;

std::vector<std::string> Split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const std::size_t at = text.find(sep, start);
    parts.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

// A decimal in [1, kMaxDimension], all of `text`.
bool ParseDimension(const std::string& text, int* value) {
  if (text.empty() || text.size() > 6) return false;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
  }
  const long v = std::strtol(text.c_str(), nullptr, 10);
  if (v < 1 || v > kMaxDimension) return false;
  *value = static_cast<int>(v);
  return true;
}

Status Bad(const std::string& spec, const std::string& why) {
  return InvalidArgument("model spec '" + spec + "': " + why);
}

}  // namespace

Result<ModelSpec> ParseModelSpec(const std::string& text) {
  ModelSpec spec;
  spec.text = text;
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) return Bad(text, "expected 'mlp:' or 'cnn:' followed by layers");
  const std::string family = text.substr(0, colon);
  const std::vector<std::string> parts = Split(text.substr(colon + 1), '-');
  if (parts.size() < 2) return Bad(text, "needs an input and a number of classes");
  if (!ParseDimension(parts.back(), &spec.num_classes) || spec.num_classes < 2 || spec.num_classes > 256) {
    return Bad(text, "the last part '" + parts.back() + "' must be the number of classes (2 to 256)");
  }
  if (family == "mlp") {
    int inputs = 0;
    if (!ParseDimension(parts[0], &inputs)) return Bad(text, "bad input size '" + parts[0] + "'");
    spec.width = inputs;
    spec.height = spec.channels = 1;
    for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
      int units = 0;
      if (!ParseDimension(parts[i], &units)) return Bad(text, "bad layer width '" + parts[i] + "'");
      spec.layers.push_back({LayerKind::kDense, units, 0});
      spec.layers.push_back({LayerKind::kRelu, 0, 0});
    }
  } else if (family == "cnn") {
    const std::vector<std::string> dims = Split(parts[0], 'x');
    if (dims.size() != 3 || !ParseDimension(dims[0], &spec.height) ||
        !ParseDimension(dims[1], &spec.width) || !ParseDimension(dims[2], &spec.channels)) {
      return Bad(text, "the input '" + parts[0] + "' must be <height>x<width>x<channels>");
    }
    if (static_cast<long>(spec.height) * spec.width * spec.channels > (1L << 24)) {
      return Bad(text, "the input '" + parts[0] + "' has more than 2^24 values");
    }
    int h = spec.height, w = spec.width;
    bool flat = false;
    for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
      const std::string& p = parts[i];
      LayerSpec layer;
      if (p.size() > 1 && p[0] == 'c') {
        const std::size_t k = p.find('k');
        if (k == std::string::npos || !ParseDimension(p.substr(1, k - 1), &layer.units) ||
            !ParseDimension(p.substr(k + 1), &layer.kernel) || layer.kernel % 2 == 0) {
          return Bad(text, "'" + p + "' must be c<filters>k<odd kernel>, e.g. c16k5");
        }
        if (flat) return Bad(text, "a convolution cannot follow a dense layer");
        layer.kind = LayerKind::kConv2d;
        spec.layers.push_back(layer);
        spec.layers.push_back({LayerKind::kRelu, 0, 0});
      } else if (p.size() > 1 && p[0] == 'p') {
        if (!ParseDimension(p.substr(1), &layer.kernel)) return Bad(text, "'" + p + "' must be p<window>, e.g. p2");
        if (flat) return Bad(text, "pooling cannot follow a dense layer");
        if (layer.kernel > h || layer.kernel > w) return Bad(text, "'" + p + "' is larger than its input");
        h /= layer.kernel;
        w /= layer.kernel;
        layer.kind = LayerKind::kMaxPool;
        spec.layers.push_back(layer);
      } else if (p.size() > 1 && p[0] == 'd') {
        if (!ParseDimension(p.substr(1), &layer.units)) return Bad(text, "'" + p + "' must be d<units>, e.g. d128");
        flat = true;
        layer.kind = LayerKind::kDense;
        spec.layers.push_back(layer);
        spec.layers.push_back({LayerKind::kRelu, 0, 0});
      } else {
        return Bad(text, "unknown layer '" + p + "' (c<filters>k<kernel>, p<window> or d<units>)");
      }
    }
  } else {
    return Bad(text, "unknown family '" + family + "' (mlp or cnn)");
  }
  spec.layers.push_back({LayerKind::kDense, spec.num_classes, 0});
  return spec;
}

}  // namespace fedrt
