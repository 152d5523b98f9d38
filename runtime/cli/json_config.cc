#include "cli/json_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace fedrt::cli {
namespace {

bool Given(const std::vector<std::string>& args, const std::string& flag) {
  for (const std::string& a : args) {
    if (a == flag || a.compare(0, flag.size() + 1, flag + "=") == 0) return true;
  }
  return false;
}

Status Append(const std::string& path, const std::string& key, const nlohmann::json& v,
              std::vector<std::string>* flags) {
  const std::string flag = "--" + key;
  if (v.is_boolean()) {
    flags->push_back(flag + "=" + (v.get<bool>() ? "true" : "false"));
  } else if (v.is_string() && v.get<std::string>().empty()) {
    // "--data=" would make CLI11 take the next flag as the value.
    flags->push_back(flag);
    flags->push_back("");
  } else if (v.is_string()) {
    flags->push_back(flag + "=" + v.get<std::string>());
  } else if (v.is_number()) {
    flags->push_back(flag + "=" + v.dump());
  } else if (v.is_array()) {
    for (const nlohmann::json& e : v) {
      if (e.is_array() || e.is_object()) {
        // fedrt peer's --config was once the peer list, which --peers takes now.
        const std::string hint = key == "peers" ? " (a peer list? give it with --peers " + path + ")" : "";
        return InvalidArgument(path + ": key '" + key + "': arrays hold values only" + hint);
      }
      FEDRT_RETURN_IF_ERROR(Append(path, key, e, flags));
    }
  } else {
    return InvalidArgument(path + ": key '" + key + "' must be a string, number, boolean or array of them");
  }
  return Status::Ok();
}

}  // namespace

Status ExpandJsonConfig(std::vector<std::string>* args, const std::vector<std::string>& commands) {
  if (args->empty() || std::find(commands.begin(), commands.end(), args->front()) == commands.end()) {
    return Status::Ok();
  }
  for (std::size_t i = 1; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    std::string path;
    std::size_t taken = 1;
    if (a == "--config" && i + 1 < args->size()) {
      path = (*args)[i + 1];
      taken = 2;
    } else if (a.compare(0, 9, "--config=") == 0) {
      path = a.substr(9);
    } else {
      continue;
    }
    std::ifstream in(path);
    if (!in) return NotFound("--config " + path + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded() || !doc.is_object()) {
      return InvalidArgument("--config " + path + ": not a JSON object of flag names and values");
    }
    std::vector<std::string> flags;
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      if (it.key() == "config") return InvalidArgument("--config " + path + ": a config file cannot name another");
      if (Given(*args, "--" + it.key())) continue;  // the command line wins
      FEDRT_RETURN_IF_ERROR(Append(path, it.key(), it.value(), &flags));
    }
    args->erase(args->begin() + static_cast<std::ptrdiff_t>(i), args->begin() + static_cast<std::ptrdiff_t>(i + taken));
    args->insert(args->begin() + static_cast<std::ptrdiff_t>(i), flags.begin(), flags.end());
    return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace fedrt::cli
