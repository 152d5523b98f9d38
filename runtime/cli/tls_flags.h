// TLS flags shared by `fedrt serve`, `fedrt device` and `fedrt peer`: they
// fill a transport::TlsConfig (files only; see transport/README.md), and
// CheckTlsFlags loads the files before anything starts, so a missing,
// unreadable or mismatched certificate or key stops the command with exit
// status 2 and a message naming the file.
#ifndef FEDRT_RUNTIME_CLI_TLS_FLAGS_H_
#define FEDRT_RUNTIME_CLI_TLS_FLAGS_H_

#include "fedrt/transport/tls.h"

namespace CLI {
class App;
}

namespace fedrt::cli {

// --tls-cert, --tls-key and --tls-client-ca (mutual TLS).
void AddTlsServerFlags(CLI::App& app, transport::TlsConfig& tls);
// --tls-ca, --tls-server-name, and --tls-cert / --tls-key for a client
// certificate.
void AddTlsClientFlags(CLI::App& app, transport::TlsConfig& tls);
// --tls-cert, --tls-key and --tls-ca (peers accept and dial).
void AddTlsPeerFlags(CLI::App& app, transport::TlsConfig& tls);

// 0 when the config is empty or loads; else prints "fedrt <command>: ..." and
// returns 2.
int CheckTlsFlags(const char* command, const transport::TlsConfig& tls);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_TLS_FLAGS_H_
