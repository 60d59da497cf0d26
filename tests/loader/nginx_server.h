#pragma once

// A real web server for the remote-dataset tests: Debian's nginx, started on a free
// loopback port with a generated configuration (no daemon, no master process, every path
// in a temp directory), serving a directory with HTTP range support. Hostile paths: every
// path under /status500/ answers HTTP 500, under /status400/ HTTP 400; /range400/<path>
// serves <path> but answers a request with a Range header with HTTP 400; /loop/<path>
// redirects (302) to itself; /trickle/<path> serves <path> at 64 bytes/s after its first
// 512 bytes (so headers come at once);
// /gzip-encoded/<path> serves <path> with "Content-Encoding: gzip"; /no-etag/<path> serves
// <path> without an ETag (Last-Modified only); /first512/<path> answers every request with
// bytes 0-511 of <path> (a 206 that says so); /s3-307/<path> redirects (307) to AWS's
// eu-west-3 endpoint, as S3 does for a bucket in another region. Access log lines are
// "<method> <uri> <status> conn=<connection number> bytes=<body bytes sent>
// auth=[<Authorization>] date=[<x-amz-date>]".

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace tilefeed::testing {

class NginxServer {
 public:
  // Serves `root`; the configuration and logs live in `work`. Starts it.
  // Throws std::runtime_error if nginx cannot start within 20 s.
  NginxServer(const std::filesystem::path& root, const std::filesystem::path& work);
  ~NginxServer();
  NginxServer(const NginxServer&) = delete;
  NginxServer& operator=(const NginxServer&) = delete;

  // "http://127.0.0.1:<port>".
  std::string url() const;
  int port() const { return port_; }
  // Stops the server and waits for it to exit; connections are refused afterwards.
  void Stop();
  // Starts it again on the same port. nginx is killed when the calling thread exits
  // (PR_SET_PDEATHSIG), so call it from the test's own thread. Throws std::runtime_error.
  void Start();
  std::filesystem::path access_log() const { return work_ / "access.log"; }

 private:
  std::filesystem::path root_;
  std::filesystem::path work_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tilefeed::testing
