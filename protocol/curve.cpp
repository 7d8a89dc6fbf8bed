#include "protocol/curve.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <zmq.h>

namespace d2k::curve {

namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(" \t\r") - b + 1));
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument("cannot read " + file.string() + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes `text` to a new file with `mode`; never replaces one.
void write_new(const std::filesystem::path& file, const std::string& text, mode_t mode) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) throw std::runtime_error("cannot create " + file.string() + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) throw std::runtime_error("cannot write " + file.string() + ": " + std::strerror(errno));
}

// '#' is a Z85 character, so a key may start with it: a comment is '#' then a space (or nothing).
bool is_comment(const std::string& t) { return t.empty() || (t[0] == '#' && (t.size() == 1 || t[1] == ' ' || t[1] == '\t')); }

}  // namespace

bool available() { return zmq_has("curve") != 0; }

KeyPair generate() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error(std::string("this libzmq cannot make CURVE keys: ") + zmq_strerror(zmq_errno()));
  return {pub, sec};
}

bool valid_key(std::string_view z85) {
  if (z85.size() != 40) return false;
  std::uint8_t raw[32];
  const std::string s(z85);
  return zmq_z85_decode(raw, s.c_str()) != nullptr;
}

std::string public_of(const std::string& secret_key) {
  if (!valid_key(secret_key)) throw std::invalid_argument("not a CURVE secret key (40 characters of Z85)");
  char pub[41];
  if (zmq_curve_public(pub, secret_key.c_str()) != 0)
    throw std::invalid_argument(std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
  return pub;
}

std::string z85_of_raw(std::string_view raw32) {
  if (raw32.size() != 32) return {};
  char out[41];
  if (!zmq_z85_encode(out, reinterpret_cast<const std::uint8_t*>(raw32.data()), 32)) return {};
  return out;
}

KeyPair write_key_files(const std::filesystem::path& dir, const std::string& name) {
  if (name.empty() || name.find_first_of("/ \t\n") != std::string::npos || name[0] == '.')
    throw std::runtime_error("a key name is one word without '/' (got '" + name + "')");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir.string() + ": " + ec.message());
  const KeyPair k = generate();
  const auto key_file = dir / (name + ".key"), pub_file = dir / (name + ".pub");
  if (std::filesystem::exists(key_file) || std::filesystem::exists(pub_file))
    throw std::runtime_error(key_file.string() + " or " + pub_file.string() + " exists; keys are never overwritten");
  write_new(key_file,
            "# d2k CURVE key pair '" + name + "': keep this file secret (d2k keys)\npublic " + k.public_key +
                "\nsecret " + k.secret_key + "\n",
            0600);
  write_new(pub_file, k.public_key + " " + name + "\n", 0644);
  return k;
}

KeyPair read_key_pair(const std::filesystem::path& file) {
  std::istringstream in(read_text(file));
  KeyPair k;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string t = trim(line);
    if (is_comment(t)) continue;
    const auto space = t.find_first_of(" \t");
    const std::string word = t.substr(0, space), value = space == std::string::npos ? "" : trim(t.substr(space));
    if ((word != "public" && word != "secret") || !valid_key(value))
      throw std::invalid_argument(file.string() + ":" + std::to_string(n) +
                                  ": expected 'public <40 Z85 characters>' or 'secret <...>' (a file `d2k keys` wrote)");
    (word == "public" ? k.public_key : k.secret_key) = value;
  }
  if (k.secret_key.empty()) throw std::invalid_argument(file.string() + ": no 'secret' line (is it a .pub file?)");
  const std::string derived = public_of(k.secret_key);
  if (!k.public_key.empty() && k.public_key != derived)
    throw std::invalid_argument(file.string() + ": its public key does not belong to its secret key");
  k.public_key = derived;
  return k;
}

std::string read_public_key(const std::string& file_or_key) {
  if (valid_key(file_or_key) && !std::filesystem::exists(file_or_key)) return file_or_key;
  std::istringstream in(read_text(file_or_key));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string t = trim(line);
    if (is_comment(t)) continue;
    if (t.rfind("secret", 0) == 0) continue;
    if (t.rfind("public", 0) == 0) t = trim(t.substr(6));
    const std::string key = t.substr(0, t.find_first_of(" \t"));
    if (valid_key(key)) return key;
    throw std::invalid_argument(file_or_key + ":" + std::to_string(n) + ": not a CURVE public key (40 characters of Z85)");
  }
  throw std::invalid_argument(file_or_key + ": no public key in it");
}

Allowlist read_allowlist(const std::filesystem::path& file) {
  std::istringstream in(read_text(file));
  Allowlist out;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string t = trim(line);
    if (is_comment(t)) continue;
    const auto space = t.find_first_of(" \t");
    const std::string key = t.substr(0, space);
    if (!valid_key(key))
      throw std::invalid_argument(file.string() + ":" + std::to_string(n) +
                                  ": not a CURVE public key (40 characters of Z85; a line of a .pub file `d2k keys` wrote)");
    out[key] = space == std::string::npos ? "" : trim(t.substr(space));
  }
  return out;
}

std::optional<ClientKeys> client_keys_from_env() {
  const char* server = std::getenv("D2K_SERVER_KEY");
  const char* client = std::getenv("D2K_CLIENT_KEY");
  const bool has_server = server && *server, has_client = client && *client;
  if (!has_server && !has_client) return std::nullopt;
  if (!has_server || !has_client)
    throw std::invalid_argument("set both D2K_SERVER_KEY (the server's .pub file) and D2K_CLIENT_KEY (your .key file), or neither");
  return ClientKeys{read_public_key(server), read_key_pair(client)};
}

void make_client(void* socket, const ClientKeys& keys) {
  auto set = [socket](int option, const std::string& key) {
    if (zmq_setsockopt(socket, option, key.c_str(), key.size()) != 0)
      throw std::runtime_error(std::string("cannot make a CURVE client socket: ") + zmq_strerror(zmq_errno()));
  };
  set(ZMQ_CURVE_SERVERKEY, keys.server_public);
  set(ZMQ_CURVE_PUBLICKEY, keys.client.public_key);
  set(ZMQ_CURVE_SECRETKEY, keys.client.secret_key);
}

}  // namespace d2k::curve
