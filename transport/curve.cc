#include "transport/curve.h"

#include <sys/stat.h>
#include <zmq.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "tilefeed/transport/batch_stream.h"

namespace tilefeed::transport {
namespace {

constexpr std::size_t kZ85KeySize = 40;  // 32 bytes in Z85

void RequireCurve() {
  if (zmq_has("curve") == 0) throw TransportError("CURVE: libzmq was built without CURVE");
}

bool IsZ85Key(const std::string& text) {
  if (text.size() != kZ85KeySize) return false;
  std::array<std::uint8_t, 32> decoded{};
  return zmq_z85_decode(decoded.data(), text.c_str()) != nullptr;
}

std::string_view Trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

}  // namespace

CurveKeyPair GenerateCurveKeyPair() {
  RequireCurve();
  std::array<char, kZ85KeySize + 1> public_key{};
  std::array<char, kZ85KeySize + 1> secret_key{};
  if (zmq_curve_keypair(public_key.data(), secret_key.data()) != 0) {
    throw TransportError(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
  }
  return {public_key.data(), secret_key.data()};
}

CurveKeyPair ReadCurveKeyFile(const std::string& path, bool need_secret) {
  RequireCurve();
  std::ifstream file(path);
  if (!file) {
    throw TransportError("CURVE key file " + path + ": " + std::strerror(errno));
  }
  if (need_secret) {
    struct stat info {};
    if (stat(path.c_str(), &info) == 0 && (info.st_mode & 077) != 0) {
      throw TransportError("CURVE key file " + path +
                           ": holds a secret key but group or others may read it (chmod 600)");
    }
  }
  CurveKeyPair keys;
  std::string line;
  for (int number = 1; std::getline(file, line); ++number) {
    const std::string_view text = Trim(line);
    if (text.empty() || text.front() == '#') continue;
    const auto where = path + ":" + std::to_string(number);
    const auto equals = text.find('=');
    if (equals == std::string_view::npos) {
      throw TransportError("CURVE key file " + where + ": expected name=value");
    }
    const std::string_view name = Trim(text.substr(0, equals));
    // Z85 itself uses '=', so the value is everything after the first one.
    const std::string value(Trim(text.substr(equals + 1)));
    std::string* slot = name == "public"   ? &keys.public_key
                        : name == "secret" ? &keys.secret_key
                                           : nullptr;
    if (slot == nullptr) {
      throw TransportError("CURVE key file " + where + ": unknown name '" + std::string(name) +
                           "' (want public= or secret=)");
    }
    if (!IsZ85Key(value)) {
      throw TransportError("CURVE key file " + where + ": " + std::string(name) +
                           " key is not 40 Z85 characters");
    }
    *slot = value;
  }
  if (need_secret) {
    if (keys.secret_key.empty()) {
      throw TransportError("CURVE key file " + path + ": no secret= line");
    }
    std::array<char, kZ85KeySize + 1> derived{};
    if (zmq_curve_public(derived.data(), keys.secret_key.c_str()) != 0) {
      throw TransportError("CURVE key file " + path + ": " + zmq_strerror(zmq_errno()));
    }
    if (!keys.public_key.empty() && keys.public_key != derived.data()) {
      throw TransportError("CURVE key file " + path + ": public= is not the public key of secret=");
    }
    keys.public_key = derived.data();
  } else {
    if (keys.public_key.empty()) {
      throw TransportError("CURVE key file " + path + ": no public= line");
    }
    keys.secret_key.clear();  // a trainer never needs the reader's secret
  }
  return keys;
}

std::vector<std::string> ReadCurvePublicKeys(const std::vector<std::string>& paths) {
  std::vector<std::string> keys;
  for (const std::string& path : paths) {
    std::error_code error;
    if (std::filesystem::is_directory(path, error)) {
      std::vector<std::string> files;
      for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
        if (entry.path().extension() == ".pub") files.push_back(entry.path().string());
      }
      if (error) throw TransportError("CURVE key directory " + path + ": " + error.message());
      for (const std::string& file : files) {
        keys.push_back(ReadCurveKeyFile(file, false).public_key);
      }
    } else {
      // A public file (public=) or a full key file (the public key is derived).
      keys.push_back(ReadCurveKeyFile(path, false).public_key);
    }
  }
  if (keys.empty()) throw TransportError("CURVE allow-list: no public key files found");
  return keys;
}

void WriteCurveKeyFiles(const CurveKeyPair& keys, const std::string& secret_path,
                        const std::string& public_path) {
  auto write = [](const std::string& path, const std::string& text, mode_t mode) {
    {
      std::ofstream file(path, std::ios::trunc);
      if (!file) throw TransportError("CURVE key file " + path + ": " + std::strerror(errno));
      // Restrict before the secret is written.
      if (chmod(path.c_str(), mode) != 0) {
        throw TransportError("CURVE key file " + path + ": chmod: " + std::strerror(errno));
      }
      file << text;
      file.flush();
      if (!file) throw TransportError("CURVE key file " + path + ": write failed");
    }
  };
  write(secret_path,
        "# tilefeed CURVE key: keep secret\npublic=" + keys.public_key +
            "\nsecret=" + keys.secret_key + "\n",
        0600);
  write(public_path, "# tilefeed CURVE public key\npublic=" + keys.public_key + "\n", 0644);
}

}  // namespace tilefeed::transport
