// The ReaderEndpoint's side of a trainer's arrival: the CURVE allow-list (ZAP), the hello
// and its terms, refusals with a reason, and the error a trainer is sent before the reader
// gives up. See the design note in reader_endpoint.cc.

#include <string>
#include <utility>
#include <vector>

#include "transport/reader_endpoint_impl.h"
#include "transport/socket_util.h"

namespace tilefeed::transport {

using detail::Control;
using detail::kMaxCredits;
using detail::MessageType;

// Answers one ZAP request: 200 for an allowed CURVE key, 400 (and a line) for any other.
void ReaderEndpoint::Impl::AnswerZap() {
  std::vector<zmq::message_t> request;
  while (true) {
    zmq::message_t part;
    if (!zap->recv(part, zmq::recv_flags::dontwait)) return;
    const bool more = part.more();
    request.push_back(std::move(part));
    if (!more) break;
  }
  // version, request id, domain, address, identity, mechanism, credentials...
  auto text = [&](std::size_t i) { return i < request.size() ? request[i].to_string() : ""; };
  const std::string mechanism = text(5);
  const std::string key = text(6);
  const bool allowed = request.size() >= 7 && text(0) == "1.0" && mechanism == "CURVE" &&
                       allowed_keys.count(key) != 0;
  if (!allowed && options.on_refused && refused_keys.insert(key).second) {
    std::string z85(41, '\0');
    if (key.size() == 32) {
      zmq_z85_encode(z85.data(), reinterpret_cast<const std::uint8_t*>(key.data()), 32);
      z85.resize(40);
    } else {
      z85 = "(none)";
    }
    std::string line = "refused a trainer at ";
    line.append(text(3).empty() ? "?" : text(3))
        .append(": its CURVE public key ")
        .append(z85)
        .append(" is not on the allow-list");
    options.on_refused(line);
  }
  const char* reply[] = {
      "1.0", nullptr, allowed ? "200" : "400", allowed ? "OK" : "key not allowed", "", ""};
  try {
    for (std::size_t i = 0; i < 6; ++i) {
      const zmq::send_flags flags = i + 1 < 6 ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (i == 1) {
        zap->send(zmq::buffer(text(1)), flags);
      } else {
        zap->send(zmq::buffer(std::string_view(reply[i])), flags);
      }
    }
  } catch (const zmq::error_t&) {
  }
}

void ReaderEndpoint::Impl::SendError(const std::string& text) {
  try {
    Send(Control{MessageType::kError}, /*more=*/true);
    socket.send(zmq::buffer(text), zmq::send_flags::none);
  } catch (const TransportError&) {
    // The trainer is gone too; the loader's error is what Run reports.
  } catch (const zmq::error_t&) {
  }
}

void ReaderEndpoint::Impl::Refuse(const std::string& id, zmq::message_t& first,
                                  const std::string& why) {
  try {
    socket.send(zmq::buffer(id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    detail::SendControl(socket, Control{MessageType::kError}, true);
    const std::string text = "refused: " + why;
    socket.send(zmq::buffer(text), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // The peer is gone already; the line below still says what happened.
  }
  // A flood of bad hellos must not flood the log: the first lines, then every 1000th.
  constexpr std::uint64_t kLoggedInFull = 20;
  ++refusals;
  if (refusals > kLoggedInFull && refusals % 1000 != 0) return;
  const std::string address = detail::PeerAddress(first);
  std::string line = "refused a peer at ";
  line.append(address.empty() ? "?" : address).append(": ").append(why);
  if (refusals > kLoggedInFull) line += " (" + std::to_string(refusals) + " refusals so far)";
  Log(line);
}

// Why a hello cannot open a session ("" if it can); sets `agreed` to the terms to serve.
std::string ReaderEndpoint::Impl::HelloRefusal(const std::vector<zmq::message_t>& parts,
                                               const Control& hello,
                                               std::optional<SessionTerms>& agreed) const {
  if (terms) {
    const std::optional<SessionTerms> theirs =
        parts.size() == 3 ? ParseSessionTerms(detail::Bytes(parts[2])) : std::nullopt;
    if (!theirs) {
      return "a hello without well-formed session terms (" + std::to_string(kSessionTermsSize) +
             " bytes and an image-size schedule, after the control part); this reader serves "
             "only trainers that state what they expect";
    }
    if (const std::optional<std::string> differs = Disagreement(*theirs, *terms)) {
      return "the trainer's terms differ from this reader's: " + *differs;
    }
    agreed = Agreed(*theirs, *terms);
  }
  if (hello.a == 0 || hello.a > kMaxCredits) {
    return "a hello asking for " + std::to_string(hello.a) + " credits (1 to " +
           std::to_string(kMaxCredits) + ")";
  }
  if (retired.size() >= 2) return "busy: earlier trainers' batches are still queued";
  return "";
}

void ReaderEndpoint::Impl::Hello(const std::string& id, std::vector<zmq::message_t>& parts,
                                 const Control& hello) {
  std::optional<SessionTerms> agreed;
  if (const std::string why = HelloRefusal(parts, hello, agreed); !why.empty()) {
    return Refuse(id, parts[1], why);
  }
  auto next = std::make_unique<detail::Session>();
  if (borrowed != nullptr) {
    next->loader = borrowed;
  } else {
    try {
      next->owned = open(*agreed);
    } catch (const std::exception& e) {
      return Refuse(id, parts[1], std::string("cannot serve this position: ") + e.what());
    }
    next->loader = next->owned.get();
  }
  if (options.on_loader) options.on_loader(next->loader);
  if (options.shared_memory || IsShmEndpoint(options.endpoint)) {
    shared = dynamic_cast<SharedSlots*>(next->loader->options().slot_memory.get());
    if (shared == nullptr) {
      throw std::invalid_argument(
          "SessionOpener: with shared memory the loader must decode into "
          "a transport::SharedSlots");
    }
  }
  session = std::move(next);
  peer_id = id;
  peer_name = detail::PeerAddress(parts[1]);
  if (peer_name.empty()) peer_name = bound_endpoint;
  try {
    guard->set_protected_fd(parts[1].get(ZMQ_SRCFD));
  } catch (const zmq::error_t&) {
  }
  last_heard = detail::Clock::now();
  checksums = hello.b != 0;
  end_epoch = session->loader->first_epoch();
  producer = std::jthread([this](std::stop_token token) { Produce(token); });
  state = State::kWelcomed;
  Welcome(hello.a, agreed);
}

}  // namespace tilefeed::transport
