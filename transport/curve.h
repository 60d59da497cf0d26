#pragma once

// CURVE key files: the keys that turn on ZeroMQ's CURVE encryption between a reader
// (ReaderEndpoint, the CURVE server) and a trainer (ZmqBatchStream, the client). The trainer
// knows the reader's public key, so it talks only to that reader and nobody on the network
// can read or alter the batches. The reader may also check which trainer connects: with an
// allow-list of trainers' public keys (ReaderEndpointOptions::curve_allowed_keys, `tilefeed-serve
// --curve allow=`), a ZAP handler refuses every other key during the handshake; such a
// trainer then uses its own key file (StreamOptions::curve_client_key_file).
//
// A key file is text, one `name=value` a line, values in Z85 (40 characters, as
// zmq_curve_keypair makes them); blank lines and lines starting with '#' are ignored:
//
//   # tilefeed CURVE key
//   public=rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7
//   secret=JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6
//
// The reader's file holds its secret (and may hold its public key, which must then match);
// keep it private: a secret file that group or others can read is refused, as ssh does. The
// trainer's copy holds only `public=`. WriteCurveKeyFiles makes both.
//
// Pure functions over files; thread-safe.

#include <string>
#include <vector>

namespace tilefeed::transport {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters; empty in a public key file
};

// A fresh key pair. Throws TransportError if libzmq was built without CURVE.
CurveKeyPair GenerateCurveKeyPair();

// Reads a key file. With `need_secret`, the file must hold `secret=` (public= is derived,
// or checked if present) and must not be readable by group or others; otherwise it must
// hold `public=`. Throws TransportError naming the path and line for a missing or unreadable
// file, an unknown name, a value that is not 40 Z85 characters, or keys that do not match.
CurveKeyPair ReadCurveKeyFile(const std::string& path, bool need_secret);

// The public keys of the files in `paths` (public= lines, or derived from secret=); a path
// that is a directory stands for every *.pub file in it. Throws TransportError naming a file
// that is unusable, or when the paths hold no key at all.
std::vector<std::string> ReadCurvePublicKeys(const std::vector<std::string>& paths);

// Writes `keys` to `secret_path` (public= and secret=, mode 0600) and the public key alone
// to `public_path`. Throws TransportError if a file cannot be written.
void WriteCurveKeyFiles(const CurveKeyPair& keys, const std::string& secret_path,
                        const std::string& public_path);

}  // namespace tilefeed::transport
