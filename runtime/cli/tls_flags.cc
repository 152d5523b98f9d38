// TLS flags of the star and peer commands (contract in tls_flags.h).
#include "cli/tls_flags.h"

#include <CLI/CLI.hpp>

#include <cstdio>

namespace fedrt::cli {
namespace {

void AddCertAndKey(CLI::App& app, transport::TlsConfig& tls, const char* whose) {
  app.add_option("--tls-cert", tls.cert_file, std::string("TLS: PEM certificate (chain) of ") + whose)
      ->group("TLS");
  app.add_option("--tls-key", tls.key_file, "TLS: PEM private key of --tls-cert (not readable by others)")
      ->group("TLS");
}

}  // namespace

void AddTlsServerFlags(CLI::App& app, transport::TlsConfig& tls) {
  AddCertAndKey(app, tls, "this server (devices then connect over TLS)");
  app.add_option("--tls-client-ca", tls.ca_file,
                 "TLS: require device certificates signed by this PEM CA (mutual TLS)")
      ->group("TLS");
}

void AddTlsClientFlags(CLI::App& app, transport::TlsConfig& tls) {
  app.add_option("--tls-ca", tls.ca_file, "TLS: connect over TLS, verifying the server against this PEM CA")
      ->group("TLS");
  app.add_option("--tls-server-name", tls.server_name,
                 "TLS: name (DNS or IP) the server's certificate must carry (default: the --server host)")
      ->group("TLS");
  AddCertAndKey(app, tls, "this device, for servers that require one");
}

void AddTlsPeerFlags(CLI::App& app, transport::TlsConfig& tls) {
  AddCertAndKey(app, tls, "this peer (needs --tls-ca too)");
  app.add_option("--tls-ca", tls.ca_file, "TLS: PEM CA that signed every peer's certificate")->group("TLS");
}

int CheckTlsFlags(const char* command, const transport::TlsConfig& tls) {
  Result<std::shared_ptr<const transport::TlsContext>> context = transport::CreateTlsIfConfigured(tls);
  if (context.ok()) return 0;
  std::fprintf(stderr, "fedrt %s: %s\n", command, context.status().ToString().c_str());
  return 2;
}

}  // namespace fedrt::cli
