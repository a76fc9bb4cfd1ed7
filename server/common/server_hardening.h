// Hardening every tpserve gRPC server shares (the coordinator's public port and a worker's
// port): server reflection off unless asked for, and compressed requests refused. Stateless
// functions; thread-safe.
#ifndef TPSERVE_SERVER_COMMON_SERVER_HARDENING_H_
#define TPSERVE_SERVER_COMMON_SERVER_HARDENING_H_

#include "grpcpp/server_builder.h"

namespace tpserve {

// Sets up `builder` so that:
// - grpc.reflection is served only when `reflection` is true. Linking grpc++_reflection
//   registers its plugin with every ServerBuilder of the process (a static initialiser, and
//   InitProtoReflectionServerBuilderPlugin), so a server must take it out again;
// - compressed requests are refused (UNIMPLEMENTED, when their headers arrive). gRPC 1.51
//   (Debian 12) checks the receive limit only after inflating a compressed message whole:
//   300 KB of gzip cost 300 MB before the refusal. No tpserve peer compresses.
void HardenServerBuilder(grpc::ServerBuilder* builder, bool reflection);

}  // namespace tpserve

#endif  // TPSERVE_SERVER_COMMON_SERVER_HARDENING_H_
