#include "tests/loader/nginx_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace tilefeed::testing {
namespace {

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

NginxServer::NginxServer(const std::filesystem::path& root, const std::filesystem::path& work)
    : root_(root), work_(work), port_(FreePort()) {
  std::filesystem::create_directories(work_ / "tmp");
  std::ofstream conf(work_ / "nginx.conf");
  const std::string w = work_.string();
  conf << "daemon off;\nmaster_process off;\nworker_processes 1;\n"
       << "pid " << w << "/nginx.pid;\nerror_log " << w << "/error.log warn;\n"
       << "events { worker_connections 512; }\n"
       << "http {\n"
       << "  log_format tf '$request_method $uri $status conn=$connection "
          "bytes=$body_bytes_sent auth=[$http_authorization] "
          "date=[$http_x_amz_date]';\n"
       << "  access_log " << w << "/access.log tf;\n"
       << "  client_body_temp_path " << w << "/tmp/body;\n"
       << "  proxy_temp_path " << w << "/tmp/proxy;\n"
       << "  fastcgi_temp_path " << w << "/tmp/fastcgi;\n"
       << "  uwsgi_temp_path " << w << "/tmp/uwsgi;\n"
       << "  scgi_temp_path " << w << "/tmp/scgi;\n"
       << "  keepalive_requests 100000;\n"
       << "  server {\n    listen 127.0.0.1:" << port_ << " reuseport;\n"
       << "    root " << root_.string() << ";\n"
       << "    location /status500/ { return 500; }\n"
       << "    location /status400/ { return 400; }\n"
       << "    location /range400/ {\n      alias " << root_.string() << "/;\n"
       << "      if ($http_range) { return 400; }\n    }\n"
       << "    location /loop/ { return 302 $uri; }\n"
       << "    location /trickle/ {\n      alias " << root_.string() << "/;\n"
       << "      limit_rate_after 512;\n      limit_rate 64;\n    }\n"
       << "    location /gzip-encoded/ {\n      alias " << root_.string() << "/;\n"
       << "      add_header Content-Encoding gzip;\n    }\n"
       << "    location /no-etag/ {\n      alias " << root_.string() << "/;\n"
       << "      etag off;\n    }\n"
       << "    location /first512/ {\n      proxy_pass " << url() << "/;\n"
       << "      proxy_set_header Range bytes=0-511;\n    }\n"
       << "    location /s3-307/ { return 307 https://s3.eu-west-3.amazonaws.com$request_uri; }\n"
       << "  }\n}\n";
  conf.close();
  Start();
}

NginxServer::~NginxServer() { Stop(); }

std::string NginxServer::url() const { return "http://127.0.0.1:" + std::to_string(port_); }

void NginxServer::Start() {
  if (pid_ > 0) return;
  const std::string conf = (work_ / "nginx.conf").string();
  const std::string error_log = (work_ / "error.log").string();
  const std::string prefix = work_.string() + "/";
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // nginx goes when the test goes, even when the test is killed (a ctest timeout):
    // otherwise it would hold the test's output pipe open forever.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::execl(TILEFEED_TEST_NGINX, "nginx", "-e", error_log.c_str(), "-p", prefix.c_str(), "-c",
            conf.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Readiness, not synchronisation: poll the port until nginx accepts, or it exits.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Accepts(port_)) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("nginx exited at start; see " + error_log);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      Stop();
      throw std::runtime_error("nginx did not accept connections within 20 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void NginxServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace tilefeed::testing
