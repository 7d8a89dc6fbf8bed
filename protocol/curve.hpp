// ZeroMQ CURVE keys for authenticated remote access (issue 19): key pairs, the files that hold
// them and the server's allowlist of client public keys. Keys are Z85 text (40 characters for 32
// bytes), as libzmq's zmq_curve_keypair makes them. Built with the client (env/CMakeLists.txt), so
// the protocol library stays free of ZeroMQ.
//
// Files (`d2k keys` writes them):
//   NAME.key  the key pair, mode 0600:   "public <Z85>\nsecret <Z85>\n" (and "# " comment lines)
//   NAME.pub  the public key alone:      "<Z85> NAME\n", which is also one line of an allowlist
//   allowlist one client public key per line, then optionally a name; '# ' starts a
//             comment line ('#' alone is a Z85 character)
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace d2k::curve {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// True when this libzmq was built with CURVE (zmq_has("curve")).
bool available();
// A fresh key pair (zmq_curve_keypair). Throws std::runtime_error when libzmq has no CURVE.
KeyPair generate();
// The public key of a secret key (zmq_curve_public). Throws std::invalid_argument on a bad key.
std::string public_of(const std::string& secret_key);
// A 40-character Z85 string that decodes to 32 bytes.
bool valid_key(std::string_view z85);
// The 32 raw bytes of a Z85 key as 40 characters of Z85 (for the ZAP handler, which gets raw bytes).
std::string z85_of_raw(std::string_view raw32);

// Writes DIR/NAME.key (0600) and DIR/NAME.pub; throws std::runtime_error when either exists or
// cannot be written (an existing key is never overwritten).
KeyPair write_key_files(const std::filesystem::path& dir, const std::string& name);
// Reads a .key file (both keys, checked to belong together). Throws std::invalid_argument naming
// the file and line.
KeyPair read_key_pair(const std::filesystem::path& file);
// A public key: from a .pub file, a .key file (its public line), or the 40-character key itself.
// Throws std::invalid_argument.
std::string read_public_key(const std::string& file_or_key);

// The allowlist: public key (Z85) → name ("" when the line has none).
using Allowlist = std::map<std::string, std::string>;
// Throws std::invalid_argument naming the file and line of a key that is not valid Z85.
Allowlist read_allowlist(const std::filesystem::path& file);

// A client's CURVE settings: the server's public key and the client's own pair.
struct ClientKeys {
  std::string server_public;
  KeyPair client;
};
// From D2K_SERVER_KEY (a .pub/.key file or the key) and D2K_CLIENT_KEY (a .key file); nullopt
// when D2K_SERVER_KEY is unset. Throws std::invalid_argument when one is set without the other or
// a file is unreadable.
std::optional<ClientKeys> client_keys_from_env();
// Makes a ZeroMQ socket (a void* from zmq_socket, or socket_t::handle()) a CURVE client with `keys`;
// call before connect. Throws std::runtime_error when libzmq refuses (no CURVE).
void make_client(void* socket, const ClientKeys& keys);

}  // namespace d2k::curve
