# Every third-party library comes from a Debian package (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(Gloo CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(glog CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(GTest CONFIG REQUIRED)
find_package(benchmark CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
# The OpenAI HTTP API's server: Boost.Beast and Asio (Debian's libboost-dev, header-only;
# TLS through OpenSSL).
find_package(Boost 1.74 REQUIRED)

find_program(TPSERVE_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
